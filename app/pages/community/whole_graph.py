"""The Communities page's whole graph: every clone of the model drawn on a canvas by the page's own renderer
(assets/whole_graph.js, Canvas 2D: the scene drawn once into a cached bitmap that panning only shifts, the renderer
measured fastest here without a GPU: bench/bench_whole_graph.py), placed by its modules, coloured by top module, with
the transitions of most flow; drawn only when asked for. The server hands the columns to a store; clientside
callbacks draw them. Clicking a clone opens its top module in the Module card (the page's selected-module store, as
a click on the module map); the selected module's clones stay bright."""

from __future__ import annotations

from typing import Any

import numpy as np
from dash import ClientsideFunction, Input, Output, State, callback, clientside_callback, ctx, dcc, html, no_update

from app import ids, jobs, sessions, ui
from app.services import whole_graph as whole_service

HEIGHT = 640
"""The canvas's height in CSS pixels once drawn (its width: the card's)."""
HIDDEN = {"height": "0px", "position": "relative"}
HIDDEN_NOTE, BUSY_SHOWN = {"display": "none"}, {}
SHOWN = {"height": f"{HEIGHT}px", "position": "relative", "border": "1px solid #ddd", "overflow": "hidden"}


def controls() -> html.Div:
    """The view's buttons, its choice of transitions, and its (loading) canvas, stores and note."""
    return html.Div(
        [
            ui.buttons(
                html.Button("Draw the whole graph", id=ids.COMMUNITIES_WHOLE_SHOW, className="button"),
                ui.field(
                    "Transitions drawn",
                    dcc.Dropdown(
                        id=ids.COMMUNITIES_WHOLE_EDGES,
                        options=[
                            {"label": "none" if k == 0 else f"the {k:,} with the most flow", "value": k}
                            for k in whole_service.EDGE_CHOICES
                        ],
                        value=whole_service.DEFAULT_EDGES,
                        clearable=False,
                        style={"minWidth": "16em"},
                    ),
                ),
                ui.choice(
                    "Layout", ids.COMMUNITIES_WHOLE_LAYOUT, whole_service.LAYOUTS, whole_service.DEFAULT_LAYOUT, "22em"
                ),
                ui.choice("Colour by", ids.COMMUNITIES_WHOLE_COLOUR, whole_service.COLOUR_BY, "module"),
                ui.choice("Size by", ids.COMMUNITIES_WHOLE_SIZE, whole_service.SIZE_BY, "none", "8em"),
                html.Button("Fit", id=ids.COMMUNITIES_WHOLE_FIT, className="button", title="Every clone in view"),
            ),
            filters(),
            html.Div(
                [
                    "Drawing the whole graph in the background (the layout by transitions is made once per run) ... ",
                    html.Button("Cancel", id=ids.COMMUNITIES_WHOLE_CANCEL, className="button"),
                ],
                id=ids.COMMUNITIES_WHOLE_BUSY,
                className="message message-info",
                style=HIDDEN_NOTE,
            ),
            dcc.Store(id=ids.COMMUNITIES_WHOLE_MARKED, storage_type="memory", data=None),
            dcc.Store(id=ids.COMMUNITIES_WHOLE_SHOWN, storage_type="memory", data=None),
            dcc.Store(id=ids.COMMUNITIES_WHOLE_REQUEST, storage_type="memory", data=None),
            dcc.Store(id=ids.COMMUNITIES_WHOLE_FILTER_SPEC, storage_type="memory", data=""),
            dcc.Store(id=ids.COMMUNITIES_WHOLE_CLICKED, storage_type="memory", data={}),  # {}: no click yet
            dcc.Loading(
                [
                    html.Div(id=ids.COMMUNITIES_WHOLE_NOTE, className="hint"),
                    dcc.Store(id=ids.COMMUNITIES_WHOLE_DATA, storage_type="memory", data=None),
                    html.Div(id=ids.COMMUNITIES_WHOLE_GRAPH, style=HIDDEN),
                    html.Div(id=ids.COMMUNITIES_WHOLE_LEGEND, className="whole-graph-legend"),
                ],
                type="default",
                delay_show=0,
            ),
        ]
    )


def _number_field(label: str, control_id: str, placeholder: str, help_text: str) -> html.Div:
    return ui.field(
        label,
        dcc.Input(id=control_id, type="text", value="", placeholder=placeholder, className="num"),
        help_text,
    )


def filters() -> html.Details:
    """The whole graph's filter (:func:`app.services.whole_graph.check_filter`): degree range, least flow, k-core,
    the largest component, and the ego network of a clone (a click on a clone fills it in)."""
    return html.Details(
        [
            html.Summary("Filter: degree, flow, k-core, largest component, neighbours of a clone"),
            html.Div(
                [
                    _number_field("Degree from", ids.COMMUNITIES_WHOLE_MIN_DEGREE, "0", "edges in plus out"),
                    _number_field("Degree to", ids.COMMUNITIES_WHOLE_MAX_DEGREE, "any", "empty: no bound"),
                    _number_field(
                        "Flow at least", ids.COMMUNITIES_WHOLE_MIN_FLOW, "0", "a share of the flow, e.g. 1e-4"
                    ),
                    _number_field("k-core", ids.COMMUNITIES_WHOLE_CORE, "0", "each clone with k neighbours or more"),
                    _number_field("Neighbours of clone", ids.COMMUNITIES_WHOLE_CENTRE, "none", "a click on a clone"),
                    _number_field("within steps", ids.COMMUNITIES_WHOLE_STEPS, "1", "either direction"),
                    dcc.Checklist(
                        id=ids.COMMUNITIES_WHOLE_LARGEST,
                        options=[{"label": " the largest component only", "value": "largest"}],
                        value=[],
                    ),
                ],
                className="form-grid",
            ),
            ui.buttons(
                html.Button("Filter", id=ids.COMMUNITIES_WHOLE_FILTER, className="button"),
                html.Button("Show every clone", id=ids.COMMUNITIES_WHOLE_UNFILTER, className="button"),
                html.Button("Download the clones shown (GraphML)", id=ids.COMMUNITIES_WHOLE_EXPORT, className="button"),
                html.Button("Download the canvas (PNG)", id=ids.COMMUNITIES_WHOLE_PNG, className="button"),
            ),
            html.Div(id=ids.COMMUNITIES_WHOLE_FILTER_NOTE),
            html.Div(id=ids.COMMUNITIES_WHOLE_EXPORT_NOTE),
            dcc.Store(id=ids.COMMUNITIES_WHOLE_DOWNLOAD),
        ],
        id=ids.COMMUNITIES_WHOLE_FILTERS,
        className="whole-graph-filters",
    )


def legend(mapping: dict[str, Any]) -> Any:
    """The legend of the whole graph's colours and sizes (None with the modules' colours and sizes alike: the
    module table is their legend)."""
    parts: list[Any] = []
    if mapping["legend"]:
        parts.append(html.Span(f"Colour: {whole_service.COLOUR_BY[mapping['colour_by']]} ", className="legend-title"))
        for colour, text in mapping["legend"]:
            swatch = html.Span(className="legend-swatch", style={"background": colour}) if colour else None
            parts.append(html.Span([swatch, text], className="legend-entry"))
    if mapping["sizes"] is not None:
        parts.append(html.Span(" Size: larger with more " + mapping.get("size_by", ""), className="legend-title"))
    return parts or None


def columns(drawn: dict[str, Any], mapping: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole graph as the canvas reads it: per clone its position (5 decimals), group and label; per group its
    hover text, colour and top module; the transitions as source and target clones and their T (most flow first);
    the top modules' labels; and, when colour or size map an attribute
    (:func:`app.services.whole_graph.attribute_mapping`), per clone its colour group and size factor, and the groups'
    colours. Plain lists: every clone once, in state order."""
    groups = drawn["groups"]
    mapped = {key: (mapping or {}).get(key) for key in ("colour_group", "colours", "sizes")}
    return mapped | {
        "x": np.round(drawn["x"], 5).tolist(),
        "y": np.round(drawn["y"], 5).tolist(),
        "group": np.asarray(drawn["group"]).tolist(),
        "labels": drawn["clone_labels"],
        "groups": {key: [g[key] for g in groups] for key in ("text", "colour", "module")},
        "source": np.asarray(drawn["edge_sources"]).tolist(),
        "target": np.asarray(drawn["edge_targets"]).tolist(),
        "weight": np.round(drawn["edge_weights"], whole_service.WEIGHT_DECIMALS).tolist(),
        "module_labels": [
            {"text": label["text"], "x": round(label["x"], 5), "y": round(label["y"], 5)}
            for label in drawn["module_labels"]
        ],
    }


def note(drawn: dict[str, Any]) -> list[Any]:
    """What the view says it draws: clones, transitions drawn of all, and how it is coloured."""
    if drawn["drawn_edges"] == 0:
        edges = f"no transition (of {drawn['edges']:,} with T at least {drawn['threshold']:.2g}: choose how many above)"
    elif drawn["drawn_edges"] < drawn["edges"]:
        edges = (
            f"the {drawn['drawn_edges']:,} transitions with the most flow of {drawn['edges']:,} (T at least "
            f"{drawn['threshold']:.2g})"
        )
    else:
        edges = f"all {drawn['edges']:,} transitions (T at least {drawn['threshold']:.2g})"
    head = f"{drawn['clones']:,} clones and {edges} drawn. "
    if not drawn["by_module"]:
        return [head + "No Infomap run for this model yet, so the clones are grouped and coloured by symbol; "
                "run Infomap to see its modules."]  # fmt: skip
    corner = ", bottom right" if drawn.get("layout") != "transitions" else ""
    outside = f" {drawn['outside']:,} clones in no module are grey{corner}." if drawn["outside"] else ""
    quality = drawn.get("quality") or {}
    measure = (
        f" Transitions are {quality['stretch']:.2f} times as long as the distance between two clones at random "
        f"(flow-weighted; lower: shorter), and {quality['purity']:.0%} of each clone's five nearest clones share "
        "its top module."
        if quality
        else ""
    )
    if drawn.get("layout") == "transitions":
        placed = (
            f"The {drawn['top_modules']:,} top modules (colours as in the table) placed by the flow between them, "
            "each one's clones by the flow within it."
        )
    else:
        placed = (
            f"Cells: the {drawn['top_modules']:,} top modules (area by clones, colours as in the table) and their "
            "submodules; the clones with the most flow sit at each cell's centre."
        )
    return [
        head + placed + outside + measure + " Drag to pan, scroll to zoom (Fit or a double click: all in view), "
        "hover a clone for its module, click it to open its module below."
    ]


@callback(
    Output(ids.COMMUNITIES_WHOLE_REQUEST, "data"),
    Output(ids.COMMUNITIES_WHOLE_DATA, "data", allow_duplicate=True),
    Output(ids.COMMUNITIES_WHOLE_MARKED, "data", allow_duplicate=True),
    Output(ids.COMMUNITIES_WHOLE_NOTE, "children", allow_duplicate=True),
    Output(ids.COMMUNITIES_WHOLE_GRAPH, "style", allow_duplicate=True),
    Output(ids.COMMUNITIES_WHOLE_LEGEND, "children", allow_duplicate=True),
    Input(ids.COMMUNITIES_WHOLE_SHOW, "n_clicks"),
    Input(ids.COMMUNITIES_WHOLE_EDGES, "value"),
    Input(ids.COMMUNITIES_WHOLE_LAYOUT, "value"),
    Input(ids.COMMUNITIES_WHOLE_COLOUR, "value"),
    Input(ids.COMMUNITIES_WHOLE_SIZE, "value"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.MODEL_VERSION, "data"),
    prevent_initial_call=True,
)
def ask_whole_graph(
    clicks: int | None, max_edges: Any, layout: Any, colour_by: Any, size_by: Any, version: Any, model: Any
) -> tuple[Any, ...]:
    """What the whole graph's job is asked to draw (the button, or the view in the URL; again after a new run or
    model while shown), or, when it is not drawn, the view hidden at once: no job starts for a change while the
    whole graph is not shown (a job started for nothing kept the button disabled while the user pressed it)."""
    if not clicks:
        return no_update, None, None, None, HIDDEN, None
    asked = {"clicks": clicks, "edges": max_edges, "layout": layout, "colour": colour_by, "size": size_by}
    return asked | {"version": [version, model]}, *(no_update,) * 5


@callback(
    Output(ids.COMMUNITIES_WHOLE_DATA, "data"),
    Output(ids.COMMUNITIES_WHOLE_MARKED, "data"),
    Output(ids.COMMUNITIES_WHOLE_NOTE, "children"),
    Output(ids.COMMUNITIES_WHOLE_GRAPH, "style"),
    Output(ids.COMMUNITIES_WHOLE_LEGEND, "children"),
    Input(ids.COMMUNITIES_WHOLE_REQUEST, "data"),
    State(ids.COMMUNITIES_SELECTED, "data"),
    State(ids.SESSION, "data"),
    background=True,
    interval=ui.ANSWER_POLL_MS,
    running=[
        (Output(ids.COMMUNITIES_WHOLE_SHOW, "disabled"), True, False),
        (Output(ids.COMMUNITIES_WHOLE_BUSY, "style"), BUSY_SHOWN, HIDDEN_NOTE),
    ],
    cancel=[Input(ids.COMMUNITIES_WHOLE_CANCEL, "n_clicks")],
    prevent_initial_call=True,
)
@jobs.charged_from_fork  # its job's process charged to the memory budget from its fork
def draw_whole_graph(asked: dict[str, Any] | None, selected: str | None, session_id: str | None) -> tuple[Any, ...]:
    """The background job that draws the whole graph asked for (:func:`ask_whole_graph`), in a job process bounded
    in time and memory (:func:`app.ui.request_job`; its layout by transitions made once per run and kept on disk)."""
    if not asked:
        return (no_update,) * 5
    values = (asked.get(key) for key in ("clicks", "edges", "layout", "colour", "size"))
    return show_whole_graph(*values, None, None, selected, session_id)


def show_whole_graph(
    clicks: int | None,
    max_edges: Any,
    layout: Any,
    colour_by: Any,
    size_by: Any,
    _version: Any,
    _model: Any,
    selected: str | None,
    session_id: str | None,
) -> tuple[Any, Any, Any, Any]:
    """The whole graph drawn (in a job process bounded in time and memory, :func:`app.ui.request_job`): the columns
    for the canvas, the selected module's clones, the note, the canvas's height and the legend; hidden when it is
    not asked for (``clicks``)."""
    if not clicks:
        return None, None, None, HIDDEN, None
    try:
        folder = sessions.session_folder(session_id)
        with ui.request_job(folder, "The whole graph", "use the layout by modules, or browse the model by module."):
            drawn = whole_service.whole_graph(folder, max_edges, layout)
            mapping = whole_service.attribute_mapping(folder, colour_by, size_by)
            marked = whole_service.module_clones(folder, selected)
    except ui.EXPECTED_ERRORS as exc:
        return no_update, no_update, ui.error_message(exc), no_update, no_update
    return columns(drawn, mapping), marked or None, note(drawn), SHOWN, legend(mapping)


@callback(
    Output(ids.COMMUNITIES_WHOLE_MARKED, "data", allow_duplicate=True),
    Input(ids.COMMUNITIES_SELECTED, "data"),
    State(ids.COMMUNITIES_WHOLE_SHOW, "n_clicks"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def mark_module(selected: str | None, clicks: int | None, session_id: str | None) -> Any:
    """The selected module's clones, bright in the canvas, the others faded (None: none marked)."""
    if not clicks:
        return no_update
    try:
        marked = whole_service.module_clones(sessions.session_folder(session_id), selected)
    except ui.EXPECTED_ERRORS:
        return no_update
    return marked or None


FILTER_FIELDS = (
    ids.COMMUNITIES_WHOLE_MIN_DEGREE, ids.COMMUNITIES_WHOLE_MAX_DEGREE, ids.COMMUNITIES_WHOLE_MIN_FLOW,
    ids.COMMUNITIES_WHOLE_CORE, ids.COMMUNITIES_WHOLE_LARGEST, ids.COMMUNITIES_WHOLE_CENTRE,
    ids.COMMUNITIES_WHOLE_STEPS,
)  # fmt: skip


@callback(
    Output(ids.COMMUNITIES_WHOLE_FILTER_SPEC, "data", allow_duplicate=True),
    Output(ids.COMMUNITIES_WHOLE_FILTER_NOTE, "children"),
    Input(ids.COMMUNITIES_WHOLE_FILTER, "n_clicks"),
    Input(ids.COMMUNITIES_WHOLE_UNFILTER, "n_clicks"),
    *(State(field, "value") for field in FILTER_FIELDS),
    prevent_initial_call=True,
)
def apply_filter(_filter: int | None, _clear: int | None, *fields: Any) -> tuple[Any, Any]:
    """Filter: the fields checked and the filter set (as the URL writes it: the view follows it, and Back undoes
    it); a bad value is one sentence. "Show every clone" clears it."""
    if ctx.triggered_id == ids.COMMUNITIES_WHOLE_UNFILTER:
        return "", None
    try:
        spec = whole_service.check_filter(*fields)
    except ui.EXPECTED_ERRORS as exc:
        return no_update, ui.error_message(exc)
    return whole_service.filter_query(spec), no_update


@callback(
    *(Output(field, "value") for field in FILTER_FIELDS),
    Output(ids.COMMUNITIES_WHOLE_FILTERS, "open"),
    Input(ids.COMMUNITIES_WHOLE_FILTER_SPEC, "data"),
    prevent_initial_call=True,
)
def show_filter_fields(query: str | None) -> tuple[Any, ...]:
    """The fields as the filter set has them (a link's, or Back's, filter is seen in them, open)."""
    try:
        spec = whole_service.parse_filter_query(query or "")
    except ui.EXPECTED_ERRORS:
        return (no_update,) * (len(FILTER_FIELDS) + 1)
    return (
        str(spec.min_degree) if spec.min_degree else "",
        "" if spec.max_degree is None else str(spec.max_degree),
        f"{spec.min_flow:g}" if spec.min_flow else "",
        str(spec.core) if spec.core else "",
        ["largest"] if spec.largest_component else [],
        "" if spec.centre is None else str(spec.centre),
        str(spec.steps) if spec.centre is not None else "",
        True if query else no_update,
    )


@callback(
    Output(ids.COMMUNITIES_WHOLE_SHOWN, "data"),
    Output(ids.COMMUNITIES_WHOLE_FILTER_NOTE, "children", allow_duplicate=True),
    Input(ids.COMMUNITIES_WHOLE_FILTER_SPEC, "data"),
    Input(ids.COMMUNITIES_WHOLE_REQUEST, "data"),
    Input(ids.COMMUNITIES_WHOLE_EDGES, "value"),
    State(ids.COMMUNITIES_WHOLE_SHOW, "n_clicks"),
    State(ids.SESSION, "data"),
    background=True,
    interval=ui.ANSWER_POLL_MS,
    prevent_initial_call=True,
)
@jobs.charged_from_fork  # its job's process charged to the memory budget from its fork
def filter_graph(
    query: str | None, asked: Any, max_edges: Any, clicks: int | None, session_id: str | None
) -> tuple[Any, Any]:
    """The background job of the filter: the clones the filter set keeps and the transitions among them (None:
    every clone), and its sentence, when the filter changes and again for a graph drawn anew (``asked``: what the
    whole graph's job was asked, a few values, never the drawn columns); its work grows with the clone graph, so
    it runs in a job process bounded in time and memory (:func:`app.ui.request_job`)."""
    if not query or not asked or not clicks:
        return None, None
    try:
        folder = sessions.session_folder(session_id)
        with ui.request_job(folder, "The filter", "filter a smaller run, or browse the model by module."):
            shown, said = whole_service.shown_clones(folder, whole_service.parse_filter_query(query), max_edges)
    except ui.EXPECTED_ERRORS as exc:
        return None, ui.error_message(exc)
    return shown, ui.message(said, "ok") if said else None


@callback(
    Output(ids.COMMUNITIES_WHOLE_DOWNLOAD, "data"),
    Output(ids.COMMUNITIES_WHOLE_EXPORT_NOTE, "children"),
    Input(ids.COMMUNITIES_WHOLE_EXPORT, "n_clicks"),
    State(ids.COMMUNITIES_WHOLE_FILTER_SPEC, "data"),
    State(ids.SESSION, "data"),
    background=True,
    running=[(Output(ids.COMMUNITIES_WHOLE_EXPORT, "disabled"), True, False)],
    prevent_initial_call=True,
)
@jobs.charged_from_fork  # its job's process charged to the memory budget from its fork
def export_shown(clicks: int | None, query: str | None, session_id: str | None) -> tuple[Any, Any]:
    """The clones the filter shows, with the transitions among them and the filter written in the file, as GraphML
    (a job process bounded in time and memory, :func:`app.ui.request_job`); the answer is a download link."""
    ui.require_click(clicks)
    try:
        folder = sessions.session_folder(session_id)
        with ui.request_job(folder, "The export", "filter the graph further, or use the Export page."):
            path, name, said = whole_service.export_shown(folder, query)
        link = sessions.download_link(folder, path, name)
    except ui.EXPECTED_ERRORS as exc:
        return no_update, ui.error_message(exc)
    return link, ui.message([f"{said} ", html.A("Download it again", href=link)], "ok")


ui.start_downloads(ids.COMMUNITIES_WHOLE_DOWNLOAD)
clientside_callback(  # the canvas as it is on screen, as a PNG file
    """function (clicks, containerId) {
        const container = document.getElementById(containerId);
        const view = container && container.wholeGraph;
        if (!clicks || !view || !view.n) { return window.dash_clientside.no_update; }
        const link = document.createElement("a");
        link.href = view.canvas.toDataURL("image/png");
        link.download = "whole-graph.png";
        document.body.appendChild(link);
        link.click();
        link.remove();
        return "The canvas as it is on screen, as a PNG image";
    }""",
    Output(ids.COMMUNITIES_WHOLE_PNG, "title"),
    Input(ids.COMMUNITIES_WHOLE_PNG, "n_clicks"),
    State(ids.COMMUNITIES_WHOLE_GRAPH, "id"),
    prevent_initial_call=True,
)
clientside_callback(  # a click on a clone fills in the ego network's clone
    """function (clicked) {
        if (!clicked || clicked.clone === undefined || clicked.clone === null) {
            return window.dash_clientside.no_update;
        }
        return String(clicked.clone);
    }""",
    Output(ids.COMMUNITIES_WHOLE_CENTRE, "value", allow_duplicate=True),
    Input(ids.COMMUNITIES_WHOLE_CLICKED, "data"),
    prevent_initial_call=True,
)
clientside_callback(  # the canvas draws the columns (assets/whole_graph.js), again when what it marks changes
    ClientsideFunction(namespace="whole_graph", function_name="draw"),
    Input(ids.COMMUNITIES_WHOLE_DATA, "data"),
    Input(ids.COMMUNITIES_WHOLE_MARKED, "data"),
    Input(ids.COMMUNITIES_WHOLE_SHOWN, "data"),
    Input(ids.COMMUNITIES_PATH, "data"),
    Input(ids.COMMUNITIES_CLONE_TABLE, "selectedRows"),  # the clone selected in the table, ringed
    State(ids.COMMUNITIES_WHOLE_GRAPH, "id"),
    State(ids.COMMUNITIES_WHOLE_CLICKED, "id"),
    prevent_initial_call=True,
)
clientside_callback(  # the Fit button: every clone in view
    ClientsideFunction(namespace="whole_graph", function_name="fit"),
    Input(ids.COMMUNITIES_WHOLE_FIT, "n_clicks"),
    State(ids.COMMUNITIES_WHOLE_GRAPH, "id"),
    prevent_initial_call=True,
)
