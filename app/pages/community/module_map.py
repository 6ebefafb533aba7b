"""The Communities page's module map (Network Navigator-style: modules sized by flow, linked by the flow between
them): the modules' table (a grid; the module it opens is the view's, :mod:`app.pages.community.view`), the map, its
view buttons, and where a word lives."""

from __future__ import annotations

import time
from typing import Any

from dash import ALL, Input, Output, State, callback, clientside_callback, ctx, html, no_update

from app import ids, sessions, ui
from app.services import graphs as graph_service
from app.services import overviews
from app.services import senses as sense_service


@callback(
    Output(ids.COMMUNITIES_TABLE, "rowData"),
    Output(ids.COMMUNITIES_TRAIL, "children"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.COMMUNITIES_FILTER, "value"),
    Input(ids.MODEL_VERSION, "data"),
    Input(ids.COMMUNITIES_LEVEL, "data"),
    Input(ids.COMMUNITIES_RUN_SHOWN, "value"),
    State(ids.SESSION, "data"),
)
def show_modules(
    _version: Any, query: str | None, _model: Any, level: str | None, run: str | None, session_id: str | None
) -> tuple[Any, Any]:
    """The module table of the level shown (every module of it: the grid scrolls them), filtered by the filter box,
    and the breadcrumb above the map, which says when the filter hides modules. The table keeps its selected row
    when the same rows come again (its rows are named by module id)."""
    try:
        saved = graph_service.read_run(sessions.session_folder(session_id), run or graph_service.CURRENT_RUN)
    except ui.EXPECTED_ERRORS:
        return [], None
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
    if query and query.strip():
        every = len(graph_service.module_rows(saved, None, parent=trail[-1][0]))
        shown = f"no module here matches {query.strip()!r}" if not rows else (
            f"the filter {query.strip()!r} shows {len(rows):,} of {every:,} modules"
        )  # fmt: skip
        crumbs.append(html.Span(f" ({shown})", className="hint filter-note"))
    for row in rows:
        row["colour"] = graph_service.module_colour(row["id"])
    return rows, crumbs


@callback(
    Output(ids.COMMUNITIES_MAP, "elements"),
    Output(ids.COMMUNITIES_MAP_NOTE, "children"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.MODEL_VERSION, "data"),
    Input(ids.COMMUNITIES_LEVEL, "data"),
    Input(ids.COMMUNITIES_MAP_LIMIT, "value"),
    Input(ids.COMMUNITIES_RUN_SHOWN, "value"),
    State(ids.SESSION, "data"),
)
def show_map(
    _version: Any, _model: Any, level: str | None, limit: Any, run: str | None, session_id: str | None
) -> tuple[Any, Any]:
    """The module map of the level the breadcrumb shows, of the run shown: its modules of most flow, as many as
    asked."""
    try:
        folder = sessions.session_folder(session_id)
        if graph_service.read_communities(folder) is None:
            return [], "Run Infomap to see the module map."
        drawn = overviews.module_map(folder, level or "", limit, run or graph_service.CURRENT_RUN)
    except ui.EXPECTED_ERRORS as exc:
        return [], ui.error_message(exc)
    shown = "" if drawn["shown"] == drawn["modules"] else f" (the {drawn['shown']:,} with the most flow drawn)"
    notes = [
        f"{drawn['modules']:,} modules{shown} and the {drawn['links']:,} links with the most flow between them; "
        f"{len(drawn['legend'])} of the largest are labelled (click any module to see its name).",
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
                **{"data-module": item["id"]},  # a filter hides the entries of the modules it hides
            )
            for item in drawn["legend"]
        ],
        className="legend",
    )
    return drawn["elements"], [legend, *[html.Div(note) for note in notes]]


@callback(
    Output(ids.COMMUNITIES_MAP_RULES, "data"),
    Output(ids.COMMUNITIES_MAP_LEGEND, "children"),
    Input(ids.COMMUNITIES_MAP_COLOUR, "value"),
    Input(ids.COMMUNITIES_MAP_SIZE, "value"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.MODEL_VERSION, "data"),
    Input(ids.COMMUNITIES_LEVEL, "data"),
    Input(ids.COMMUNITIES_MAP_LIMIT, "value"),
    Input(ids.COMMUNITIES_RUN_SHOWN, "value"),
    Input(ids.COMMUNITIES_MAP_MIN_FLOW, "value"),
    Input(ids.COMMUNITIES_MAP_MIN_CLONES, "value"),
    Input(ids.COMMUNITIES_MAP_CENTRE, "value"),
    Input(ids.COMMUNITIES_MAP_STEPS, "value"),
    State(ids.SESSION, "data"),
)
def map_style(
    colour_by: Any, size_by: Any, _version: Any, _model: Any, level: str | None, limit: Any, run: str | None,
    min_flow: Any, min_clones: Any, centre: Any, steps: Any, session_id: str | None,
) -> tuple[Any, Any]:  # fmt: skip
    """The module map's colour and size rules for a measure of its modules (flow, clones, submodules), on a
    sequential scale, with its legend, and its filter's rules (least flow, least clones, a module's neighbours:
    :func:`app.services.overviews.map_filter`) with the sentence that says what it shows (the map's stylesheet adds
    the rules: :func:`.module_card.highlight_path`); the modules' own colours, sized by flow, by default (no rule,
    no work). The map's modules are read from the map kept on the server
    (:func:`app.services.overviews.module_map`), never sent back by the page."""
    fields = (min_flow, min_clones, centre, steps)
    filtered = any(str(value or "").strip() for value in fields)
    if colour_by in (None, "module") and size_by in (None, "flow") and not filtered:
        return [], None
    try:
        folder = sessions.session_folder(session_id)
        if graph_service.read_communities(folder) is None:
            return [], None
        drawn = overviews.module_map(folder, level or "", limit, run or graph_service.CURRENT_RUN)
    except ui.EXPECTED_ERRORS:
        return [], None
    rules, legend = overviews.mapped_style(drawn["elements"], colour_by, size_by)
    parts: list[Any] = []
    try:
        hidden, said = overviews.map_filter(drawn["elements"], *fields)
    except ui.EXPECTED_ERRORS as exc:
        hidden, said = [], ""
        parts.append(ui.error_message(exc))
    rules += hidden
    if said:
        parts.append(html.Div(said, className="hint"))
    if legend["colour"]:
        scale = legend["colour"]
        gradient = f"linear-gradient(to right, {overviews.LOW_COLOUR}, #21918c, {overviews.HIGH_COLOUR})"
        parts += [
            html.Span(f"Colour: {overviews.MAP_COLOUR_BY[scale['by']]} ", className="legend-title"),
            html.Span(scale["low"]),
            html.Span(className="legend-gradient", style={"background": gradient}),
            html.Span(scale["high"]),
        ]
    if legend["size"] != "flow":
        parts.append(html.Span(f" Area: more {legend['size']}, larger", className="legend-title"))
    return rules, parts or None


@callback(
    Output(ids.COMMUNITIES_MAP, "zoom"),
    Output(ids.COMMUNITIES_MAP, "layout"),
    Output(ids.COMMUNITIES_MAP, "generateImage"),
    Output(ids.COMMUNITIES_GRAPH, "zoom"),
    Output(ids.COMMUNITIES_GRAPH, "layout"),
    Output(ids.COMMUNITIES_GRAPH, "generateImage"),
    Output(ids.COMMUNITIES_GRAPH_NOTE, "children", allow_duplicate=True),
    Input({"type": ids.COMMUNITIES_VIEW_BUTTON, "view": ALL, "action": ALL}, "n_clicks"),
    State(ids.COMMUNITIES_MAP, "zoom"),
    State(ids.COMMUNITIES_GRAPH, "zoom"),
    State(ids.COMMUNITIES_SELECTED, "data"),
    prevent_initial_call=True,
)
def view_action(
    clicks: list[Any], map_zoom: float | None, graph_zoom: float | None, selected: str | None
) -> tuple[Any, ...]:
    """Zoom in or out, fit, or download a PNG/SVG image of the module map or the subgraph (with no module open
    the subgraph is empty: it says so instead of downloading an empty image)."""
    trigger = ctx.triggered_id
    if not isinstance(trigger, dict) or not any(clicks):
        return (no_update,) * 7
    view, action = trigger["view"], trigger["action"]
    if view != "map" and action in ("png", "svg") and not selected:
        return (*(no_update,) * 6, ui.message("Open a module first: its subgraph is what PNG and SVG download."))
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
    return (*(out + [no_update] * 3 if view == "map" else [no_update] * 3 + out), no_update)


@callback(
    Output(ids.COMMUNITIES_SEARCH_RESULT, "children"),
    Output(ids.COMMUNITIES_PATH, "data"),
    Input(ids.COMMUNITIES_SEARCH_BUTTON, "n_clicks"),
    Input(ids.COMMUNITIES_SEARCH, "value"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.COMMUNITIES_RUN_SHOWN, "value"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def find_word(
    _clicks: Any, phrase: str | None, _version: Any, run: str | None, session_id: str | None
) -> tuple[Any, Any]:
    """Viterbi on the word or phrase: its clone path, the modules it passes through (links that open them). Done
    again after every Infomap run, so its module links (and a "run Infomap first") never go stale."""
    if not phrase or not phrase.strip():
        return None, None
    try:
        found = graph_service.find_word(sessions.session_folder(session_id), phrase, run or graph_service.CURRENT_RUN)
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
    shown = [path, modules, *[html.Div(n, className="hint") for n in notes]]
    return html.Div(shown + _senses(sessions.session_folder(session_id), phrase, run)), found


def _senses(folder: Any, phrase: str, run: str | None) -> list[Any]:
    """The senses of a word found alone (:func:`app.services.senses.word_senses`): its clones, each with the
    company it keeps, as a table under the path; nothing for a phrase."""
    model = graph_service.view_model(folder)
    if sense_service.single_symbol(model, phrase) is None:
        return []
    try:
        found = sense_service.word_senses(folder, phrase, run or graph_service.CURRENT_RUN)
    except ui.EXPECTED_ERRORS as exc:
        return [ui.error_message(exc)]
    unit = model.codec.unit.rstrip("s")
    heads = ["Clone", "Module", "Share", "Previous", "Next", "Reads", "Example"]
    rows = [
        html.Tr(
            [
                html.Td(row["label"]),
                html.Td(row["module"] or "-"),
                html.Td(f"{row['share']:.0%}"),
                html.Td(row["previous"]),
                html.Td(row["next"]),
                html.Td(row["reads"] if found["reference"] else "-"),
                html.Td(row["example"], className="sense-example"),
            ]
        )
        for row in found["rows"]
    ]
    if found["reference"]:
        where = (
            f"“Reads”: of {found['decoded']:,} of its {found['occurrences']:,} occurrences in the training text, "
            f"each decoded by Viterbi on the {found['window']} symbols either side, how many this clone reads"
            + (f" ({found['unread']:,} had no clone path)" if found["unread"] else "")
            + "; the example is one of them."
        )
    else:
        where = "Upload the model's training text to see how often each clone reads it there, with an example."
    more = f" {found['more']:,} clones of less flow are not listed." if found["more"] else ""
    return [
        html.H4(f"The senses of “{found['symbol']}”: its {len(found['rows']) + found['more']:,} clones"),
        html.Div(
            f"Each clone reads the {unit} in its own company: the previous {unit}s by the flow they send it, the next "
            f"by the transition probabilities (the clone graph of the run on screen). {where}{more}",
            className="hint",
        ),
        html.Table([html.Thead(html.Tr([html.Th(h) for h in heads])), html.Tbody(rows)], className="senses-table"),
    ]


@callback(
    Output(ids.COMMUNITIES_MAP_DOWNLOAD, "data"),
    Output(ids.COMMUNITIES_MAP_EXPORT_NOTE, "children"),
    Input(ids.COMMUNITIES_MAP_EXPORT, "n_clicks"),
    State(ids.COMMUNITIES_LEVEL, "data"),
    State(ids.COMMUNITIES_MAP_LIMIT, "value"),
    State(ids.COMMUNITIES_RUN_SHOWN, "value"),
    State(ids.COMMUNITIES_MAP_MIN_FLOW, "value"),
    State(ids.COMMUNITIES_MAP_MIN_CLONES, "value"),
    State(ids.COMMUNITIES_MAP_CENTRE, "value"),
    State(ids.COMMUNITIES_MAP_STEPS, "value"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def export_map(
    clicks: int | None, level: str | None, limit: Any, run: str | None, *fields_and_session: Any
) -> tuple[Any, Any]:
    """The modules the map shows (its level, its limit and its filter) with the links among them and the filter in
    the file, as GraphML (:func:`app.services.overviews.export_map`: bounded by the map's limit of modules, kept
    map); the answer is a download link."""
    ui.require_click(clicks)
    *fields, session_id = fields_and_session
    try:
        folder = sessions.session_folder(session_id)
        path, name, said = overviews.export_map(
            folder, level or "", limit, run or graph_service.CURRENT_RUN, tuple(fields)  # type: ignore[arg-type]
        )
        link = sessions.download_link(folder, path, name)
    except ui.EXPECTED_ERRORS as exc:
        return no_update, ui.error_message(exc)
    return link, ui.message([f"{said} ", html.A("Download it again", href=link)], "ok")


ui.start_downloads(ids.COMMUNITIES_MAP_DOWNLOAD)
clientside_callback(  # a filter set or cleared: the map fits the modules it shows; the legend lists only them
    """function (rules, map, note) {
        const element = document.getElementById(map);
        const registry = element && (element._cyreg || (element.firstElementChild || {})._cyreg);
        const cy = registry && registry.cy;
        if (cy) {
            setTimeout(() => { const shown = cy.nodes(':visible'); if (shown.length) { cy.fit(shown, 20); } }, 0);
        }
        const hidesAll = (rules || []).some(r => r.selector === 'node' && r.style && r.style.display === 'none');
        const kept = new Set((rules || []).filter(r => r.style && r.style.display === 'element')
            .map(r => r.selector.slice('node[id = "'.length, -2)));
        for (const item of document.querySelectorAll(`#${note} .legend-item[data-module]`)) {
            item.style.display = !hidesAll || kept.has(item.dataset.module) ? '' : 'none';
        }
        return Date.now();
    }""",
    Output(ids.COMMUNITIES_MAP_FITTED, "data"),
    Input(ids.COMMUNITIES_MAP_RULES, "data"),
    State(ids.COMMUNITIES_MAP, "id"),
    State(ids.COMMUNITIES_MAP_NOTE, "id"),
    prevent_initial_call=True,
)
