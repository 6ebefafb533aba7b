"""The Communities page's overviews at scale: the searched word's path brought into view on the module map, and the
run's flow and degree distributions."""

from __future__ import annotations

import time
from typing import Any

from dash import Input, Output, State, callback, html, no_update

from app import figures, ids, sessions, ui
from app.services import overviews


@callback(
    Output(ids.COMMUNITIES_MAP, "layout", allow_duplicate=True),
    Output(ids.COMMUNITIES_MAP_PATH_NOTE, "children"),
    Input(ids.COMMUNITIES_PATH, "data"),
    State(ids.COMMUNITIES_LEVEL, "data"),
    State(ids.COMMUNITIES_MAP_LIMIT, "value"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def path_into_view(found: dict[str, Any] | None, level: str | None, limit: Any, session_id: str | None) -> Any:
    """Centre the module map on the modules of the map's level that the searched word's path passes through (they
    are marked in red), and say which of them the map does not draw (beyond the modules shown)."""
    modules = overviews.path_on_map(found, level or "")
    if not modules:
        return no_update, None
    try:
        drawn = overviews.module_map(sessions.session_folder(session_id), level or "", limit)
    except ui.EXPECTED_ERRORS:
        return no_update, None
    view = overviews.path_in_view(drawn, modules)
    note = None
    if view["missing"]:
        note = html.Div(
            f"The path also passes through module{'s' if len(view['missing']) > 1 else ''} "
            f"{', '.join(view['missing'])}, beyond the {drawn['shown']:,} modules shown: raise “Modules shown” to "
            "draw them.",
            className="hint",
        )
    if view["zoom"] is None:
        return no_update, note
    layout = {"name": "preset", "fit": False, "zoom": view["zoom"], "pan": view["pan"], "path_request": time.time()}
    return layout, note


@callback(
    Output(ids.COMMUNITIES_DISTRIBUTIONS, "figure"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.MODEL_VERSION, "data"),
    State(ids.SESSION, "data"),
)
def show_distributions(_version: Any, _model: Any, session_id: str | None) -> Any:
    """The modules' flow by rank and the clones' degrees, when the current model has a run."""
    try:
        found = overviews.distributions(sessions.session_folder(session_id))
    except overviews.UserError:
        return figures.distributions_figure(None)
    except ui.EXPECTED_ERRORS as exc:
        return figures.empty_figure("Flow and degree", str(exc)[:200])
    return figures.distributions_figure(found)
