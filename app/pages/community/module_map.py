"""The Communities page's module map (Network Navigator-style: modules sized by flow, linked by the flow between
them): the modules' table, the map, the selected module, its view buttons, and where a word lives."""

from __future__ import annotations

import time
from typing import Any

from dash import ALL, Input, Output, State, callback, ctx, html, no_update

from app import ids, sessions, ui
from app.services import graphs as graph_service


@callback(
    Output(ids.COMMUNITIES_TABLE, "data"),
    Output(ids.COMMUNITIES_TABLE, "selected_rows"),
    Output(ids.COMMUNITIES_TRAIL, "children"),
    Output(ids.COMMUNITIES_TABLE, "style_data_conditional"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.COMMUNITIES_FILTER, "value"),
    Input(ids.MODEL_VERSION, "data"),
    Input(ids.COMMUNITIES_LEVEL, "data"),
    State(ids.SESSION, "data"),
)
def show_modules(
    _version: Any, query: str | None, _model: Any, level: str | None, session_id: str | None
) -> tuple[Any, Any, Any, Any]:
    try:
        saved = graph_service.read_communities(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS:
        return [], [], None, []
    if not saved:
        return [], [], None, []
    trail = graph_service.module_trail(saved, level or "")
    crumbs: list[Any] = []
    for position, (module_id, label) in enumerate(trail):
        if position:
            crumbs.append(" › ")
        if position == len(trail) - 1:
            crumbs.append(html.Strong(label))
        else:
            crumbs.append(
                html.Button(label, id={"type": ids.COMMUNITIES_CRUMB, "index": module_id}, className="link-button")
            )
    rows = graph_service.module_rows(saved, query, parent=trail[-1][0])
    if not rows and query and query.strip():
        crumbs.append(html.Span(f" (no module here matches {query.strip()!r})", className="hint"))
    colours = [
        {
            "if": {"filter_query": f'{{id}} = "{row["id"]}"', "column_id": "id"},
            "borderLeft": f"6px solid {graph_service.module_colour(row['id'])}",
        }
        for row in rows
    ]
    return rows, [], crumbs, colours


@callback(
    Output(ids.COMMUNITIES_MAP, "elements"),
    Output(ids.COMMUNITIES_MAP_NOTE, "children"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.MODEL_VERSION, "data"),
    Input(ids.COMMUNITIES_LEVEL, "data"),
    State(ids.SESSION, "data"),
)
def show_map(_version: Any, _model: Any, level: str | None, session_id: str | None) -> tuple[Any, Any]:
    """The module map of the level the breadcrumb shows."""
    try:
        drawn = graph_service.module_map(sessions.session_folder(session_id), level or "")
    except graph_service.UserError:
        return [], "Run Infomap to see the module map."
    except ui.EXPECTED_ERRORS as exc:
        return [], ui.error_message(exc)
    notes = [
        f"{drawn['modules']:,} modules and the {drawn['links']:,} links with the most flow between them; the "
        f"{len(drawn['legend'])} with the most flow are labelled (click any module to see its name).",
        *drawn["notes"],
    ]
    legend = html.Div(
        [
            html.Span(
                [
                    html.Span(className="swatch", style={"backgroundColor": item["colour"]}),
                    f"{item['id']} {item['name']}",
                ],
                className="legend-item",
                title=f"flow {item['flow']:.4f}",
            )
            for item in drawn["legend"]
        ],
        className="legend",
    )
    return drawn["elements"], [legend, *[html.Div(note) for note in notes]]


@callback(
    Output(ids.COMMUNITIES_SELECTED, "data"),
    Input(ids.COMMUNITIES_TABLE, "selected_row_ids"),
    Input(ids.COMMUNITIES_MAP, "tapNodeData"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input({"type": ids.COMMUNITIES_PATH_MODULE, "index": ALL, "module": ALL}, "n_clicks"),
    Input(ids.COMMUNITIES_WHOLE_GRAPH, "clickData"),
    prevent_initial_call=True,
)
def select_module(
    selected: list[str] | None,
    tapped: dict[str, Any] | None,
    _version: Any,
    on_path: list[Any],
    clicked: dict[str, Any] | None = None,
) -> Any:
    """The module shown in the Module card: the table's selected row, the module clicked on the map, a module
    of the searched word's path, or the top module of a clone clicked in the whole graph."""
    trigger = ctx.triggered_id
    if trigger == ids.COMMUNITIES_WHOLE_GRAPH:
        points = (clicked or {}).get("points") or [{}]
        return points[0].get("customdata") or no_update
    if isinstance(trigger, dict):
        return trigger["module"] if any(on_path) else no_update
    if trigger == ids.COMMUNITIES_TABLE:
        return selected[0] if selected else no_update
    if trigger == ids.COMMUNITIES_MAP:
        return tapped["id"] if tapped else no_update
    return None


@callback(
    Output(ids.COMMUNITIES_MAP, "zoom"),
    Output(ids.COMMUNITIES_MAP, "layout"),
    Output(ids.COMMUNITIES_MAP, "generateImage"),
    Output(ids.COMMUNITIES_GRAPH, "zoom"),
    Output(ids.COMMUNITIES_GRAPH, "layout"),
    Output(ids.COMMUNITIES_GRAPH, "generateImage"),
    Input({"type": ids.COMMUNITIES_VIEW_BUTTON, "view": ALL, "action": ALL}, "n_clicks"),
    State(ids.COMMUNITIES_MAP, "zoom"),
    State(ids.COMMUNITIES_GRAPH, "zoom"),
    prevent_initial_call=True,
)
def view_action(clicks: list[Any], map_zoom: float | None, graph_zoom: float | None) -> tuple[Any, ...]:
    """Zoom in or out, fit, or download a PNG/SVG image of the module map or the subgraph."""
    trigger = ctx.triggered_id
    if not isinstance(trigger, dict) or not any(clicks):
        return (no_update,) * 6
    view, action = trigger["view"], trigger["action"]
    zoom = map_zoom if view == "map" else graph_zoom
    out: list[Any] = [no_update, no_update, no_update]
    if action in ("in", "out"):
        out[0] = max(0.05, min(8.0, (zoom or 1.0) * (1.25 if action == "in" else 0.8)))
    elif action == "fit":
        # a layout value the view has not had (the clicks so far: the initial layout has none), so it runs again
        out[1] = {"name": "preset", "fit": True, "padding": 20, "fit_request": sum(c or 0 for c in clicks)}
    else:  # the whole view (not the visible part) at twice the screen's resolution, under a name of its own
        name = f"{'module-map' if view == 'map' else 'module-subgraph'}-{time.strftime('%Y%m%d-%H%M%S')}"
        options = {"full": True, "scale": 2, "bg": "#ffffff"} if action == "png" else {"full": True, "bg": "#ffffff"}
        out[2] = {"type": action, "action": "download", "filename": name, "options": options}
    return tuple(out + [no_update] * 3) if view == "map" else tuple([no_update] * 3 + out)


@callback(
    Output(ids.COMMUNITIES_SEARCH_RESULT, "children"),
    Output(ids.COMMUNITIES_PATH, "data"),
    Input(ids.COMMUNITIES_SEARCH_BUTTON, "n_clicks"),
    Input(ids.COMMUNITIES_SEARCH, "value"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def find_word(_clicks: Any, phrase: str | None, _version: Any, session_id: str | None) -> tuple[Any, Any]:
    """Viterbi on the word or phrase: its clone path, the modules it passes through (links that open them). Done
    again after every Infomap run, so its module links (and a "run Infomap first") never go stale."""
    if not phrase or not phrase.strip():
        return None, None
    try:
        found = graph_service.find_word(sessions.session_folder(session_id), phrase)
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc), None
    path = html.Div(
        [
            html.Span(
                [html.Span(step["char"], className="path-char"), html.Span(step["label"], className="path-clone")],
                className="path-step",
                title=f"clone {step['label']}, module {step['module'] or '-'}",
                style={"borderColor": graph_service.module_colour(step["top"]) if step["top"] else "#ccc"},
            )
            for step in found["steps"]
        ],
        className="clone-path",
    )
    modules = html.Div(
        [
            html.Strong("Modules on the path: "),
            *[
                html.Button(
                    f"{m['id']} {m['name']}",
                    id={"type": ids.COMMUNITIES_PATH_MODULE, "index": position, "module": m["id"]},
                    className="link-button path-module",
                    style={"borderBottom": f"3px solid {graph_service.module_colour(m['id'])}"},
                )
                for position, m in enumerate(found["modules"])
            ],
        ]
    )
    notes = [f"Read as {found['text'].strip()!r}: {found['bps']:.2f} bits per symbol on this path."]
    if found["replaced"]:
        notes.append(
            f"Not in the model's vocabulary, so read as the placeholder “rare”: {', '.join(found['replaced'])}."
        )
    if found["outside"]:
        notes.append(f"{found['outside']} of the path's clones are not in the pruned graph's modules.")
    return html.Div([path, modules, *[html.Div(n, className="hint") for n in notes]]), found
