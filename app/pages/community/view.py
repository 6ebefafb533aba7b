"""The Communities page's view in the URL: which Infomap run it shows (the last or the one before), the open module,
the level of the module map, the T from which the subgraph shows transitions and the subgraph's layout, as the query
string (``/communities?module=3&level=3``), so that a link opens the same view and the browser's Back button undoes a
view change.

One callback (:func:`navigate`) owns the view: what the user does (a row of the module table, a module on the map, a
module of a searched word's path, a breadcrumb, "Open its submodules", the run, the T, the layout) changes the view
and adds the URL to the browser's history; a URL the browser goes back (or forward) to sets the view. Being one
callback, it has no loop (URL, view, URL); the page's ``dcc.Location`` does not reload the page when the callback
writes it. A URL's values are not trusted: :func:`parse_view` keeps the well-formed ones, and a module or level that
the run shown lacks is left out with a sentence saying so.
"""

from __future__ import annotations

import math
import re
from typing import Any
from urllib.parse import parse_qs, urlencode

from dash import ALL, Input, Output, State, callback, ctx, no_update

from app import ids, sessions, ui
from app.pages.community.look import GRAPH_LAYOUTS
from app.services import graphs as graph_service
from app.services import shares
from app.services import whole_graph as whole_service

RUNS = (graph_service.CURRENT_RUN, graph_service.PREVIOUS_RUN)
DEFAULT_VIEW: dict[str, Any] = {
    "run": graph_service.CURRENT_RUN,
    "module": None,
    "level": "",
    "threshold": 0,
    "layout": "preset",
    "whole": "",
    "edges": whole_service.DEFAULT_EDGES,
    "filter": "",
}
"""The view of a URL without a query; a key at its default is left out of the URL. ``whole``: the whole graph
drawn, in its layout (a key of :data:`app.services.whole_graph.LAYOUTS`; "" when not drawn), ``edges`` the
transitions it draws, ``filter`` its filter (:func:`app.services.whole_graph.filter_query`)."""
MODULE_ID = re.compile(r"\d{1,9}(:\d{1,9}){0,30}")
"""A module id as Infomap's result names them: "3", "3:1", "3:1:2" (the path from the top)."""


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and 0 <= value <= 1 else None


def parse_view(query: dict[str, Any] | str | None) -> tuple[dict[str, Any], list[str]]:
    """The view a query string (or Dash pages' query keywords) asks for, and a sentence for each value that is
    not well formed (left at its default): ``run`` "current" or "previous", ``module`` and ``level`` module ids,
    ``threshold`` a number from 0 to 1, ``layout`` a key of :data:`GRAPH_LAYOUTS`, and the whole graph's ``whole``,
    ``edges`` and ``filter`` (:data:`DEFAULT_VIEW`). Unknown keys are ignored."""
    if isinstance(query, str) or query is None:
        parsed = parse_qs((query or "").lstrip("?"), keep_blank_values=True)
        query = {key: values[-1] for key, values in parsed.items()}
    view, problems = dict(DEFAULT_VIEW), []
    for key, raw in query.items():
        if key not in DEFAULT_VIEW:
            continue
        text = str(raw if not isinstance(raw, list) else raw[-1]).strip()[:300]
        if key == "run" and text in RUNS:
            view["run"] = text
        elif key in ("module", "level") and (MODULE_ID.fullmatch(text) or text == ""):
            view[key] = text or DEFAULT_VIEW[key]
        elif key == "threshold" and _number(text) is not None:
            view["threshold"] = _number(text)
        elif key == "layout" and text in GRAPH_LAYOUTS:
            view["layout"] = text
        elif key == "whole" and (text in whole_service.LAYOUTS or text == ""):
            view["whole"] = text
        elif key == "edges" and text in {str(k) for k in whole_service.EDGE_CHOICES}:
            view["edges"] = int(text)
        elif key == "filter":
            try:
                view["filter"] = whole_service.filter_query(whole_service.parse_filter_query(text))
            except ui.EXPECTED_ERRORS:
                problems.append(f"The link's filter {text[:60]!r} is not one this page knows; it is left out.")
        else:
            problems.append(f"The link's {key} {text[:40]!r} is not one this page knows; it is left out.")
    return view, problems


def view_search(view: dict[str, Any]) -> str:
    """The query string of a view ("" for the default view): the keys away from their defaults, in a fixed order."""
    pairs = []
    for key, default in DEFAULT_VIEW.items():
        value = view.get(key)
        if value in (None, "") or value == default:
            continue
        pairs.append((key, f"{value:g}" if isinstance(value, float) else str(value)))
    return f"?{urlencode(pairs)}" if pairs else ""


def checked_view(
    view: dict[str, Any], session_id: str | None, share: str | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The view with what the session's run lacks left out (a run before the last, a module, a level), and a
    sentence for each; a link's whole graph is not drawn while the session does not hold the model the link shares
    (``share``: its token), which the page offers to open."""
    view, problems = dict(view), []
    if view["whole"] and share and not _holds(session_id, share):
        view["whole"] = ""  # the link's whole graph is the shared model's (``share``): drawn once that is opened
    if view["module"] is None and view["level"] == "" and view["run"] == graph_service.CURRENT_RUN:
        return view, problems
    try:
        saved = graph_service.read_run(sessions.session_folder(session_id), view["run"])
    except ui.EXPECTED_ERRORS as exc:
        problems.append(f"The link's view cannot be opened: {exc}")
        return dict(DEFAULT_VIEW, threshold=view["threshold"], layout=view["layout"]), problems
    known = {module["id"] for module in saved["modules"]}
    for key, what in (("module", "module"), ("level", "level (the submodules of module")):
        if view[key] and view[key] not in known:
            closing = ")" if key == "level" else ""
            problems.append(f"The link's {what} {view[key]}{closing} is not in this run; it is not opened.")
            view[key] = DEFAULT_VIEW[key]
    return view, problems


def _picked(
    trigger: Any, view: dict[str, Any], table_rows: Any, tapped: Any, clicks: tuple[list[Any], list[Any]], drill: Any
) -> Any:
    """The view after what the user did (``trigger``: the component that changed; ``clicks``: those of the path's
    module buttons and of the breadcrumb's, which also "change" when they are drawn anew, unclicked), or None when
    nothing changes."""
    path, crumbs = clicks
    if trigger == ids.COMMUNITIES_TABLE:
        picked = (table_rows or [{}])[0].get("id") if isinstance(table_rows, list) else None
        return view | {"module": picked} if picked else None
    if trigger == ids.COMMUNITIES_MAP:
        return view | {"module": tapped["id"]} if tapped else None
    if isinstance(trigger, dict) and trigger.get("type") == ids.COMMUNITIES_PATH_MODULE:
        return view | {"module": trigger["module"], "level": ""} if any(path) else None  # path modules: top modules
    if isinstance(trigger, dict) and trigger.get("type") == ids.COMMUNITIES_CRUMB:
        return view | {"level": trigger["index"]} if any(crumbs) else None
    if trigger == ids.COMMUNITIES_DRILL:
        return view | {"level": view["module"]} if drill and view["module"] else None
    return view


@callback(
    Output(ids.COMMUNITIES_SELECTED, "data"),
    Output(ids.COMMUNITIES_LEVEL, "data"),
    Output(ids.COMMUNITIES_RUN_SHOWN, "value"),
    Output(ids.COMMUNITIES_EDGE_MIN, "value"),
    Output(ids.COMMUNITIES_GRAPH_LAYOUT, "value"),
    Output(ids.COMMUNITIES_TABLE, "selectedRows"),
    Output(ids.COMMUNITIES_WHOLE_SHOW, "n_clicks"),
    Output(ids.COMMUNITIES_WHOLE_LAYOUT, "value"),
    Output(ids.COMMUNITIES_WHOLE_EDGES, "value"),
    Output(ids.COMMUNITIES_WHOLE_FILTER_SPEC, "data"),
    Output(ids.COMMUNITIES_URL, "search"),
    Output(ids.COMMUNITIES_VIEW_NOTE, "children"),
    Input(ids.COMMUNITIES_URL, "search"),
    Input(ids.COMMUNITIES_TABLE, "selectedRows"),
    Input(ids.COMMUNITIES_MAP, "tapNodeData"),
    Input({"type": ids.COMMUNITIES_PATH_MODULE, "index": ALL, "module": ALL}, "n_clicks"),
    Input({"type": ids.COMMUNITIES_CRUMB, "index": ALL}, "n_clicks"),
    Input(ids.COMMUNITIES_DRILL, "n_clicks"),
    Input(ids.COMMUNITIES_RUN_SHOWN, "value"),
    Input(ids.COMMUNITIES_EDGE_MIN, "value"),
    Input(ids.COMMUNITIES_GRAPH_LAYOUT, "value"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.COMMUNITIES_WHOLE_CLICKED, "data"),
    Input(ids.COMMUNITIES_WHOLE_SHOW, "n_clicks"),
    Input(ids.COMMUNITIES_WHOLE_LAYOUT, "value"),
    Input(ids.COMMUNITIES_WHOLE_EDGES, "value"),
    Input(ids.COMMUNITIES_WHOLE_FILTER_SPEC, "data"),
    State(ids.COMMUNITIES_SELECTED, "data"),
    State(ids.COMMUNITIES_LEVEL, "data"),
    State(ids.SESSION, "data"),
    State(ids.COMMUNITIES_LAYOUT_KEPT, "data"),
    State(ids.COMMUNITIES_SHARE, "data"),
)
def navigate(
    search: str | None,
    table_rows: Any,
    tapped: dict[str, Any] | None,
    path: list[Any],
    crumbs: list[Any],
    drill: Any,
    run: str | None,
    threshold: Any,
    layout: str | None,
    _version: Any,
    clicked: dict[str, Any] | None,
    whole_drawn: int | None,
    whole_layout: str | None,
    whole_edges: Any,
    whole_filter: str | None,
    selected: str | None,
    level: str | None,
    session_id: str | None,
    kept_layout: str | None = None,
    share: str | None = None,
) -> tuple[Any, ...]:
    """The page's view: from the URL when the page opens or the browser goes back or forward (checked against the
    session's run, a note for what is left out), else from what the user did, written to the URL (a new entry of
    the browser's history). A new Infomap run opens its top level with no module open."""
    trigger = ctx.triggered_id
    now = {
        "run": run if run in RUNS else graph_service.CURRENT_RUN,
        "module": selected or None,
        "level": level or "",
        "threshold": _number(str(threshold)) if threshold not in (None, "") else 0,
        "layout": layout if layout in GRAPH_LAYOUTS else "preset",
        "whole": (whole_layout if whole_layout in whole_service.LAYOUTS else whole_service.DEFAULT_LAYOUT)
        if whole_drawn
        else "",
        "edges": whole_edges if whole_edges in whole_service.EDGE_CHOICES else whole_service.DEFAULT_EDGES,
        "filter": whole_filter or "",
    }
    note: Any = no_update
    if trigger == ids.COMMUNITIES_WHOLE_CLICKED and not (clicked or {}).get("count"):
        trigger = None  # the click store set up as the page opens (a memory store sets its data once mounted)
    if trigger == ids.COMMUNITIES_TABLE and table_rows is None:
        trigger = None  # the grid mounted with the page (Back / Forward draws the page anew): no row was clicked
    if trigger is None or trigger == ids.COMMUNITIES_URL:  # the page opened, or Back / Forward
        asked, problems = parse_view(search)
        if trigger is None and "layout=" not in (search or "") and kept_layout in GRAPH_LAYOUTS:
            asked["layout"] = kept_layout  # the layout chosen last comes back (issue 47) where a link names none
        view, more = checked_view(asked, session_id, share)
        note = ui.message(" ".join(problems + more)) if problems or more else None
    elif trigger == ids.COMMUNITIES_VERSION:  # a new run: its top level, nothing open
        view = now | {"run": graph_service.CURRENT_RUN, "module": None, "level": ""}
    elif trigger == ids.COMMUNITIES_RUN_SHOWN:  # the other run: its modules are others
        view = now | {"module": None, "level": ""}
    elif trigger == ids.COMMUNITIES_WHOLE_CLICKED:  # a clone clicked in the whole graph: its top module
        module = (clicked or {}).get("module")
        if not isinstance(module, str) or not module:
            return (no_update,) * 12
        view = now | {"module": module, "level": ""}
    else:
        view = _picked(trigger, now, table_rows, tapped, (path, crumbs), drill)
        if view is None or (trigger == ids.COMMUNITIES_TABLE and view == now):
            return (no_update,) * 12
    moved = view["module"] != now["module"]
    outputs = [
        view["module"] if moved else no_update,
        view["level"] if view["level"] != now["level"] else no_update,
        view["run"] if view["run"] != run else no_update,
        view["threshold"] if view["threshold"] != now["threshold"] else no_update,
        view["layout"] if view["layout"] != layout else no_update,
        # the table's selection follows the open module (the table's own click has selected it already)
        no_update
        if not moved or trigger == ids.COMMUNITIES_TABLE
        else {"ids": [view["module"]] if view["module"] else []},
        *_whole_outputs(view, now, whole_drawn, whole_layout),
    ]
    written = view_search(view)
    from_url = trigger is None or trigger == ids.COMMUNITIES_URL
    outputs.append(written if not from_url and written != (search or "") else no_update)
    return (*outputs, note)


def _holds(session_id: str | None, share: str) -> bool:
    """Whether the session holds the shared model and run a link carries (:func:`app.services.shares.holds_share`)."""
    try:
        return shares.holds_share(sessions.session_folder(session_id), share)
    except ui.EXPECTED_ERRORS:
        return False


def _whole_outputs(
    view: dict[str, Any], now: dict[str, Any], drawn: int | None, layout: str | None
) -> tuple[Any, Any, Any, Any]:
    """The whole graph's controls as ``view`` has them, where they differ from ``now``: drawn (the button's clicks:
    1 to draw, 0 to hide), its layout, its transitions and its filter."""
    draw: Any = no_update
    if view["whole"] and not drawn:
        draw = 1
    elif not view["whole"] and drawn:
        draw = 0
    return (
        draw,
        view["whole"] if view["whole"] and view["whole"] != layout else no_update,
        view["edges"] if view["edges"] != now["edges"] else no_update,
        view["filter"] if view["filter"] != now["filter"] else no_update,
    )


@callback(
    Output(ids.COMMUNITIES_LAYOUT_KEPT, "data"),
    Input(ids.COMMUNITIES_GRAPH_LAYOUT, "value"),
    prevent_initial_call=True,
)
def keep_layout(layout: str | None) -> Any:
    """The subgraph's layout as the user left it, kept in the browser, so that it comes back when the page is
    opened again (from the navigation bar, whose link carries no view)."""
    return layout if layout in GRAPH_LAYOUTS else no_update
