"""Communities page: run Infomap on the current model's clone graph, see its modules as a map (Network
Navigator-style: modules sized by flow, linked by the flow between them), find where a word lives, browse the
modules (most flow first, filterable) and inspect one module's subgraph, clone by clone, and its generalized words.

Infomap runs as a background job (the same manager as training: diskcache by default, Celery with REDIS_URL), so a big
graph never blocks the page; the result goes to the session folder and the callback returns only a message. A
multilevel result is browsed level by level with a breadcrumb.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

import dash
import dash_cytoscape as cyto
from dash import ALL, Input, Output, State, callback, ctx, dash_table, dcc, html, no_update

from app import figures, ids, jobs, sessions, ui
from app.services import graphs as graph_service

cyto.load_extra_layouts()  # the bundle with the SVG exporter (cy.svg was not a function)

dash.register_page(__name__, path="/communities", name="Communities", title="CHMM Explorer · Communities", order=5)

COLUMNS = [
    {"name": "Module", "id": "id"},
    {"name": "Name (top generalized words)", "id": "name"},
    {"name": "Clones", "id": "size", "type": "numeric"},
    {"name": "Flow", "id": "flow", "type": "numeric", "format": {"specifier": ".4f"}},
    {"name": "Characters", "id": "chars"},
    {"name": "Words", "id": "words"},
    {"name": "Submodules", "id": "submodules", "type": "numeric"},
]
TOOLTIPS = {
    "flow": "Flow: the share of time a random walk on the text (following T) spends in the module's clones; the "
    "top modules' flows sum to 1.",
    "size": "Clones: hidden states, each emitting one character; a character's clones tell its contexts apart.",
    "name": "The module's most probable generalized word(s); -ell- marks a fragment (the module holds no word start).",
    "submodules": "Modules nested in this one (Infomap's multilevel result); 0 for a leaf module.",
}
MAP_STYLESHEET = [
    {
        "selector": "node",
        "style": {
            "label": "data(label)",
            "width": "data(size)",
            "height": "data(size)",
            "background-color": "data(colour)",
            "font-size": "data(font)",
            "text-valign": "bottom",
            "text-halign": "center",
            "color": "#1f2d3d",
            "text-outline-color": "#fff",
            "text-outline-width": 2,
        },
    },
    {
        "selector": "edge",
        "style": {
            "width": "data(width)",
            "curve-style": "bezier",
            "target-arrow-shape": "triangle",
            "arrow-scale": 0.7,
            "line-color": "#b8c4d0",
            "target-arrow-color": "#b8c4d0",
            "opacity": 0.7,
        },
    },
    {"selector": "node:selected", "style": {"border-width": 4, "border-color": "#1f2d3d"}},
    {"selector": ".label-above", "style": {"text-valign": "top", "text-halign": "center"}},
    {"selector": ".label-right", "style": {"text-valign": "center", "text-halign": "right"}},
    {"selector": ".label-left", "style": {"text-valign": "center", "text-halign": "left"}},
]
HIGHLIGHT = {"border-width": 5, "border-color": "#d62728", "z-index": 10}
HIGHLIGHT_EDGE = {"line-color": "#d62728", "target-arrow-color": "#d62728", "opacity": 1, "z-index": 10}
STYLESHEET = [
    {
        "selector": "node",
        "style": {
            "label": "data(char)",
            "background-color": "data(colour)",
            "color": "#fff",
            "text-valign": "center",
            "text-halign": "center",
            "font-size": 12,
            "width": 22,
            "height": 22,
        },
    },
    {"selector": "node:selected", "style": {"border-width": 4, "border-color": "#1f2d3d"}},
    {
        "selector": "edge",
        "style": {
            "width": "data(width)",
            "curve-style": "bezier",
            "target-arrow-shape": "triangle",
            "arrow-scale": 0.6,
            "line-color": "#9fb3c8",
            "target-arrow-color": "#9fb3c8",
            "opacity": 0.8,
        },
    },
]


GRAPH_LAYOUTS = {
    "preset": "force-directed (the server's)",
    "breadthfirst": "hierarchical, from the clone with the most flow",
    "concentric": "concentric, by degree",
    "circle": "circular, by (sub)module",
}
"""The subgraph's layouts (Cytoscape's, but the first: positions computed on the server)."""


CLONE_COLUMNS = [
    ("clone", "clone"),
    ("character", "character"),
    ("module", "module"),
    ("flow", "flow"),
    ("in_flow", "in flow"),
    ("out_flow", "out flow"),
    ("exit_flow", "flow out of the module"),
    ("enter_flow", "flow into the module"),
    ("degree", "degree"),
    ("betweenness", "betweenness"),
]
MAPPED_COLUMNS = ("flow", "in_flow", "out_flow", "exit_flow", "enter_flow", "degree", "betweenness")
"""The clone table's numeric columns that the subgraph's clone size and colour can show."""
MAPPED_OPTIONS = [{"label": f"by {header}", "value": key} for key, header in CLONE_COLUMNS if key in MAPPED_COLUMNS]
NODE_SIZES = (10.0, 56.0)
"""Smallest and largest clone diameter (px) when the size shows a column."""
NODE_COLOURS = ((0xC6, 0xDB, 0xEF), (0x08, 0x30, 0x6B))
"""Colours of the lowest and the highest value when the colour shows a column (light to dark blue)."""
BOUNDARY_COLOURS = {"enters": "#e6550d", "leaves": "#756bb1", "both": "#e7298a", "inside": "#bdbdbd"}
"""Clone colours "by the boundary": flow enters the module at the clone, leaves it there, both, or neither (at least
:data:`BOUNDARY_SHARE` of the clone's flow)."""
BOUNDARY_SHARE = 0.1
"""The share of a clone's flow that must enter (leave) the module there for the clone to be drawn on the boundary: on
the sample model every clone of a module passes some flow across it."""


def boundary_side(row: dict[str, Any]) -> str:
    """Where a clone of the clone table stands on its module's boundary: "enters", "leaves", "both" or "inside"."""
    share = BOUNDARY_SHARE * float(row.get("flow", 0.0))
    enters, leaves = float(row.get("enter_flow", 0.0)) >= share > 0, float(row.get("exit_flow", 0.0)) >= share > 0
    return {(True, False): "enters", (False, True): "leaves", (True, True): "both"}.get((enters, leaves), "inside")


EDGE_COLUMNS = [
    ("from", "from"),
    ("to", "to"),
    ("probability", "T"),
    ("flow", "flow"),
    ("boundary", "crosses the module's boundary"),
]


def data_table(component: str, columns: list[tuple[str, str]], **more: Any) -> dash_table.DataTable:
    """A sortable, filterable table of the Tables card, ``columns`` as (key, header) pairs."""
    return dash_table.DataTable(
        id=component,
        columns=[{"name": name, "id": key} for key, name in columns],
        data=[],
        sort_action="native",
        filter_action="native",
        page_size=12,
        style_cell={"textAlign": "left", "fontFamily": "inherit", "padding": "3px 8px"},
        style_header={"fontWeight": 600},
        **more,
    )


WORD_MARKS = {
    ("word", True): ("seen", "word-seen"),
    ("word", False): ("novel", "word-novel"),
    ("fragment", True): ("fragment, seen", "word-seen"),
    ("fragment", False): ("fragment, novel", "word-seen"),
    ("fragment", None): ("fragment", "word-seen"),
    ("placeholder", True): ("placeholder for rare words", "word-seen"),
    ("placeholder", None): ("placeholder for rare words", "word-seen"),
}


def word_mark(word: dict[str, Any]) -> Any:
    """The label after a generalized word: seen / novel (in the training vocabulary or not), fragment, or the
    rare-word placeholder, as an html.Span; nothing for a plain word without a reference."""
    key = (word.get("kind", "word"), word.get("seen"))
    if key not in WORD_MARKS:
        return ""
    label, css = WORD_MARKS[key]
    return html.Span(label, className=css)


def view_buttons(view: str) -> html.Div:
    """Zoom, fit and image download buttons of a network view ("map" or "graph")."""

    def button(action: str, label: str, title: str) -> html.Button:
        return html.Button(
            label,
            id={"type": ids.COMMUNITIES_VIEW_BUTTON, "view": view, "action": action},
            className="button small",
            title=title,
        )

    return html.Div(
        [
            button("in", "+", "Zoom in (or scroll)"),
            button("out", "−", "Zoom out"),
            button("fit", "Fit", "Fit the whole view"),
            button("png", "PNG", "Download the view as a PNG image"),
            button("svg", "SVG", "Download the view as an SVG image"),
        ],
        className="buttons view-buttons",
    )


def network_view(view: str, component: str, stylesheet: list[Any], height: int, legend: str) -> list[Any]:
    """A network view (the module map or a module's subgraph): its buttons, the Cytoscape canvas with preset
    positions (laid out on the server) and its legend."""
    return [
        view_buttons(view),
        cyto.Cytoscape(
            id=component,
            elements=[],
            layout={"name": "preset", "fit": True, "padding": 20},
            stylesheet=stylesheet,
            style={"width": "100%", "height": f"{height}px"},
            minZoom=0.05,
            maxZoom=8,
        ),
        html.Div(legend, className="hint legend"),
    ]


def layout(**_query: Any) -> html.Div:
    return html.Div(
        [
            html.H2("Communities (Infomap)"),
            html.P(
                "Infomap groups the clone graph's clones into modules where the flow of text stays for long (the map "
                "equation). In a character model a module is a “generalized word”: it generates a family "
                "of words (paper, 4.2.1). Run Infomap, then explore the module map, find a word, or open a module.",
                className="intro",
            ),
            dcc.Store(id=ids.COMMUNITIES_VERSION, storage_type="memory", data=0),
            dcc.Store(id=ids.COMMUNITIES_LEVEL, storage_type="memory", data=""),
            dcc.Store(id=ids.COMMUNITIES_SELECTED, storage_type="memory", data=None),
            dcc.Store(id=ids.COMMUNITIES_PATH, storage_type="memory", data=None),
            ui.card(
                "Run Infomap",
                html.Div(
                    [
                        ui.field(
                            "Trials",
                            dcc.Input(id=ids.COMMUNITIES_TRIALS, type="number", step="any", value=10, className="num"),
                            "Independent runs; the shortest code length wins.",
                        ),
                        ui.field(
                            "Seed",
                            dcc.Input(id=ids.COMMUNITIES_SEED, type="number", step="any", value=0, className="num"),
                        ),
                        ui.field(
                            "Prune below",
                            dcc.Input(id=ids.COMMUNITIES_THRESHOLD, type="text", value="1e-3", className="num"),
                            "Transitions below this probability are left out of the graph (0 < threshold < 1).",
                        ),
                        ui.field(
                            "Markov time",
                            dcc.Input(id=ids.COMMUNITIES_MARKOV_TIME, type="text", value="1", className="num"),
                            "Below 1: smaller modules, and more often submodules; above 1: fewer, bigger modules.",
                        ),
                        ui.field(
                            "Partition",
                            dcc.Checklist(
                                id=ids.COMMUNITIES_TWO_LEVEL,
                                options=[{"label": " two-level", "value": "on"}],
                                value=[],
                            ),
                            "Modules of clones (unchecked: Infomap's multilevel hierarchy, browsed level by level).",
                        ),
                    ],
                    className="form-grid",
                ),
                html.Div(
                    html.Button("Run Infomap", id=ids.COMMUNITIES_RUN, className="button primary"), className="buttons"
                ),
                html.Div(
                    "Infomap runs in the background; the result is kept in the session (communities.json).",
                    className="hint",
                ),
                html.Progress(id=ids.COMMUNITIES_PROGRESS, className="progress", style={"display": "none"}),
                html.Div(id=ids.COMMUNITIES_MESSAGE),
            ),
            ui.card(
                "Find a word",
                html.Div(
                    [
                        dcc.Input(
                            id=ids.COMMUNITIES_SEARCH,
                            type="text",
                            placeholder="a word or phrase, e.g. alice",
                            debounce=True,
                            className="search",
                        ),
                        html.Button("Find", id=ids.COMMUNITIES_SEARCH_BUTTON, className="button"),
                    ],
                    className="buttons",
                ),
                html.Div(
                    "The model reads it (Viterbi: the most probable clones); its path is marked in red on the map and "
                    "in the module's subgraph.",
                    className="hint",
                ),
                html.Div(id=ids.COMMUNITIES_SEARCH_RESULT),
            ),
            ui.card(
                "Module map",
                html.Div(id=ids.COMMUNITIES_TRAIL, className="breadcrumb"),
                html.Div(id=ids.COMMUNITIES_MAP_NOTE, className="hint"),
                *network_view(
                    "map",
                    ids.COMMUNITIES_MAP,
                    MAP_STYLESHEET,
                    560,
                    "Circles: the modules of this level, area by flow (the share of time a random walk on the text "
                    "spends there), colours as in the table. Arrows: flow from module to module, width by flow. Click "
                    "a module to open it below; one with submodules opens them with “Open its submodules”.",
                ),
            ),
            ui.card(
                "Modules",
                ui.field(
                    "Filter",
                    dcc.Input(
                        id=ids.COMMUNITIES_FILTER,
                        type="text",
                        debounce=0.4,  # filters as one types (it needed Enter, and said nothing of it)
                        placeholder="a word (e.g. the) or a character",
                    ),
                    "Filters as you type: keeps modules whose generalized words contain the text, or (one "
                    "character) whose clones emit it.",
                ),
                dash_table.DataTable(
                    id=ids.COMMUNITIES_TABLE,
                    columns=COLUMNS,
                    tooltip_header=TOOLTIPS,
                    tooltip_delay=200,
                    tooltip_duration=None,
                    data=[],
                    row_selectable="single",
                    sort_action="native",
                    page_size=15,
                    style_cell={"textAlign": "left", "fontFamily": "inherit", "padding": "4px 8px"},
                    style_header={"fontWeight": 600},
                ),
            ),
            ui.card(
                "Module",
                html.Div(id=ids.COMMUNITIES_GRAPH_NOTE, className="hint"),
                html.Div(
                    [
                        ui.field(
                            "Layout",
                            dcc.Dropdown(
                                id=ids.COMMUNITIES_GRAPH_LAYOUT,
                                options=[{"label": label, "value": key} for key, label in GRAPH_LAYOUTS.items()],
                                value="preset",
                                clearable=False,
                            ),
                        ),
                        ui.field(
                            "Transitions shown",
                            dcc.Input(
                                id=ids.COMMUNITIES_EDGE_MIN,
                                type="number",
                                min=0,
                                max=1,
                                step="any",
                                value=0,
                                debounce=0.4,
                                className="num small",
                            ),
                            "those with T at least this",
                        ),
                        ui.field(
                            "Clone size",
                            dcc.Dropdown(
                                id=ids.COMMUNITIES_NODE_SIZE,
                                options=[{"label": "the same", "value": "same"}, *MAPPED_OPTIONS],
                                value="same",
                                clearable=False,
                            ),
                        ),
                        ui.field(
                            "Clone colour",
                            dcc.Dropdown(
                                id=ids.COMMUNITIES_NODE_COLOUR,
                                options=[
                                    {"label": "by character", "value": "character"},
                                    {"label": "by (sub)module", "value": "module"},
                                    {"label": "by the boundary (flow in, out)", "value": "boundary"},
                                    *MAPPED_OPTIONS,
                                ],
                                value="character",
                                clearable=False,
                            ),
                        ),
                        ui.field(
                            "Find a clone",
                            dcc.Input(
                                id=ids.COMMUNITIES_CLONE_SEARCH,
                                type="text",
                                placeholder="its label, e.g. h:3",
                                debounce=0.4,
                            ),
                        ),
                    ],
                    className="form-grid controls",
                ),
                html.Div(
                    [
                        html.Div(
                            network_view(
                                "graph",
                                ids.COMMUNITIES_GRAPH,
                                STYLESHEET,
                                520,
                                "Nodes: clones, labelled by their character and coloured by it. Arrows: transitions, "
                                "width by probability. Hover or click a clone, or click an arrow.",
                            ),
                            className="module-graph",
                        ),
                        html.Div(
                            [
                                html.Div(id=ids.COMMUNITIES_INSPECT, className="inspector"),
                                html.Div(
                                    html.Button(
                                        "Open its submodules",
                                        id=ids.COMMUNITIES_DRILL,
                                        className="button",
                                        disabled=True,
                                    ),
                                    className="buttons",
                                ),
                                html.Div(id=ids.COMMUNITIES_DETAIL),
                            ],
                            className="module-side",
                        ),
                    ],
                    className="module-panel",
                ),
            ),
            ui.card(
                "Tables",
                html.Div(id=ids.COMMUNITIES_TABLES_NOTE, className="hint"),
                html.H4("Clones"),
                data_table(ids.COMMUNITIES_CLONE_TABLE, CLONE_COLUMNS, row_selectable="single"),
                html.H4("Transitions"),
                data_table(ids.COMMUNITIES_EDGE_TABLE, EDGE_COLUMNS),
            ),
            ui.card(
                "Hierarchy",
                dcc.Graph(id=ids.COMMUNITIES_HIERARCHY, figure=figures.empty_figure(), config={"displaylogo": False}),
                html.Div(id=ids.COMMUNITIES_LEVELS),
                html.Div(
                    "The module tree as nested rectangles, area by flow; click one to zoom into its submodules. The "
                    "code length (the map equation) splits into the index codebook of the top modules and each "
                    "module's own codebook: bits per step of a random walk on the text.",
                    className="hint",
                ),
            ),
            ui.card(
                "Two runs compared",
                dcc.Graph(id=ids.COMMUNITIES_ALLUVIAL, figure=figures.empty_figure(), config={"displaylogo": False}),
                html.Div(
                    "The run before the last on this model and the last, top modules side by side: each band is the "
                    "flow of the clones one run puts in the left module and the other in the right one (run Infomap "
                    "again with another Markov time or threshold to compare).",
                    className="hint",
                ),
            ),
        ]
    )


@callback(
    Output(ids.COMMUNITIES_CLONE_TABLE, "data"),
    Output(ids.COMMUNITIES_EDGE_TABLE, "data"),
    Output(ids.COMMUNITIES_TABLES_NOTE, "children"),
    Output(ids.COMMUNITIES_CLONE_TABLE, "selected_rows"),
    Input(ids.COMMUNITIES_SELECTED, "data"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    State(ids.SESSION, "data"),
)
def show_tables(selected: str | None, _version: Any, session_id: str | None) -> tuple[Any, Any, Any, Any]:
    """The clone and transition tables of the module open below the map, or of the whole graph."""
    try:
        tables = graph_service.graph_tables(sessions.session_folder(session_id), selected)
    except ui.EXPECTED_ERRORS as exc:
        return [], [], ui.error_message(exc), []
    where = f"module {tables['module']}" if tables["module"] else "the whole graph (open a module to see its own)"
    note = (
        f"{len(tables['clones']):,} clones and {len(tables['transitions']):,} transitions of {where}; sort by a "
        "column's header, filter under it (e.g. > 0.01), select a clone to mark it in the subgraph."
    )
    return tables["clones"], tables["transitions"], note, []


@callback(
    Output(ids.COMMUNITIES_GRAPH, "layout", allow_duplicate=True),
    Input(ids.COMMUNITIES_GRAPH_LAYOUT, "value"),
    State(ids.COMMUNITIES_GRAPH, "elements"),
    prevent_initial_call=True,
)
def lay_out_graph(name: str | None, elements: list[dict[str, Any]] | None) -> Any:
    """The subgraph in the chosen layout (a hierarchy rooted at the clone with the most flow)."""
    if name not in GRAPH_LAYOUTS or name == "preset":
        return {"name": "preset", "fit": True, "padding": 20}
    layout: dict[str, Any] = {"name": name, "fit": True, "padding": 20, "animate": False}
    if name == "breadthfirst":
        nodes = [e["data"] for e in elements or [] if "source" not in e["data"]]
        if nodes:
            layout |= {"directed": True, "roots": f'[id = "{max(nodes, key=lambda d: d.get("flow", 0))["id"]}"]'}
    return layout


@callback(
    Output(ids.COMMUNITIES_CLONE_TABLE, "selected_rows", allow_duplicate=True),
    Input(ids.COMMUNITIES_GRAPH, "tapNodeData"),
    State(ids.COMMUNITIES_CLONE_TABLE, "data"),
    prevent_initial_call=True,
)
def select_tapped_clone(tapped: dict[str, Any] | None, data: list[dict[str, Any]] | None) -> Any:
    """A clone clicked in the subgraph is selected in the clone table."""
    if not tapped or not data:
        return no_update
    state = int(tapped.get("state", -1))
    return [i for i, row in enumerate(data) if row["state"] == state][:1]


@callback(
    Output(ids.COMMUNITIES_HIERARCHY, "figure"),
    Output(ids.COMMUNITIES_LEVELS, "children"),
    Output(ids.COMMUNITIES_ALLUVIAL, "figure"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.MODEL_VERSION, "data"),
    State(ids.SESSION, "data"),
)
def show_hierarchy(_version: Any, _model: Any, session_id: str | None) -> tuple[Any, Any, Any]:
    """The module tree sized by flow, the code length by level, and the last two runs side by side."""
    try:
        folder = sessions.session_folder(session_id)
        saved = graph_service.read_communities(folder)
        previous = graph_service.read_previous_communities(folder)
    except ui.EXPECTED_ERRORS as exc:
        return figures.empty_figure(), ui.error_message(exc), figures.empty_figure()
    if saved is None:
        return figures.hierarchy_figure(None), None, figures.alluvial_figure(None)
    levels = (saved.get("codelength") or {}).get("levels") or {}
    rows = [
        ("Index codebook (top modules)" if level == "0" else f"Modules of level {level}", f"{bits:.4f} bits")
        for level, bits in sorted(levels.items(), key=lambda item: int(item[0]))
    ]
    rows.append(("Code length in all", f"{saved['summary']['codelength']:.4f} bits"))
    alluvial = graph_service.alluvial(previous, saved) if previous is not None else None
    return figures.hierarchy_figure(graph_service.module_tree(saved)), ui.facts(rows), figures.alluvial_figure(alluvial)


@callback(
    Output(ids.COMMUNITIES_MESSAGE, "children"),
    Output(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.COMMUNITIES_RUN, "n_clicks"),
    State(ids.COMMUNITIES_TRIALS, "value"),
    State(ids.COMMUNITIES_TWO_LEVEL, "value"),
    State(ids.COMMUNITIES_SEED, "value"),
    State(ids.COMMUNITIES_THRESHOLD, "value"),
    State(ids.COMMUNITIES_MARKOV_TIME, "value"),
    State(ids.SESSION, "data"),
    background=True,
    running=[
        (Output(ids.COMMUNITIES_RUN, "disabled"), True, False),
        (Output(ids.COMMUNITIES_PROGRESS, "style"), {"display": "block"}, {"display": "none"}),
    ],
    prevent_initial_call=True,
)
def run(
    _clicks: int | None,
    trials: Any,
    two_level: Any,
    seed: Any,
    threshold: Any,
    markov_time: Any,
    session_id: str | None,
) -> tuple[Any, Any]:
    """The background job: Infomap on the session's current model; returns only a message and a version stamp."""
    ui.require_click(_clicks)
    try:
        folder = sessions.session_folder(session_id)
        with jobs.job_process(record=graph_service.communities_files(folder)):
            saved = graph_service.run_communities(folder, trials, bool(two_level), seed, threshold, markov_time)
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc), no_update
    except jobs.JobMemoryError as exc:
        return ui.message(f"Infomap stopped: {exc}; try a higher pruning threshold.", "error"), no_update
    s = saved["summary"]
    levels = (
        ""
        if saved["options"]["two_level"]
        else (f"; {s['levels'] - 1} levels of modules" if s["levels"] > 2 else "; no submodules (a flat result)")
    )
    note = (
        f"{s['modules']} top modules over {s['nodes']:,} clones and {s['edges']:,} edges (pruned below "
        f"{saved['threshold']:.2g}){levels}; code length {s['codelength']:.3f} bits (one module: "
        f"{s['one_level_codelength']:.3f}); Infomap took {s['seconds']:.2f} s."
    )
    return ui.message(note, "ok"), time.time()


@callback(
    Output(ids.COMMUNITIES_LEVEL, "data"),
    Input(ids.COMMUNITIES_DRILL, "n_clicks"),
    Input({"type": ids.COMMUNITIES_CRUMB, "index": ALL}, "n_clicks"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input({"type": ids.COMMUNITIES_PATH_MODULE, "index": ALL, "module": ALL}, "n_clicks"),
    State(ids.COMMUNITIES_SELECTED, "data"),
    prevent_initial_call=True,
)
def change_level(_drill: Any, crumbs: list[Any], _version: Any, on_path: list[Any], selected: str | None) -> Any:
    """Go down to the selected module's submodules, up to a breadcrumb's level, back to the top after a run or to
    the top level when a module of the searched path is opened (path modules are top modules)."""
    trigger = ctx.triggered_id
    if trigger == ids.COMMUNITIES_DRILL:
        return selected if _drill and selected else no_update
    if isinstance(trigger, dict) and trigger.get("type") == ids.COMMUNITIES_PATH_MODULE:
        return "" if any(on_path) else no_update
    if isinstance(trigger, dict) and any(crumbs):
        return trigger["index"]
    if trigger == ids.COMMUNITIES_VERSION:
        return ""
    return no_update


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
    prevent_initial_call=True,
)
def select_module(selected: list[str] | None, tapped: dict[str, Any] | None, _version: Any, on_path: list[Any]) -> Any:
    """The module shown in the Module card: the table's selected row, the module clicked on the map, or a module
    of the searched word's path."""
    trigger = ctx.triggered_id
    if isinstance(trigger, dict):
        return trigger["module"] if any(on_path) else no_update
    if trigger == ids.COMMUNITIES_TABLE:
        return selected[0] if selected else no_update
    if trigger == ids.COMMUNITIES_MAP:
        return tapped["id"] if tapped else no_update
    return None


@callback(
    Output(ids.COMMUNITIES_DETAIL, "children"),
    Output(ids.COMMUNITIES_GRAPH, "elements"),
    Output(ids.COMMUNITIES_GRAPH_NOTE, "children"),
    Output(ids.COMMUNITIES_DRILL, "disabled"),
    Output(ids.COMMUNITIES_INSPECT, "children", allow_duplicate=True),
    Input(ids.COMMUNITIES_SELECTED, "data"),
    State(ids.SESSION, "data"),
    prevent_initial_call="initial_duplicate",
)
def show_module(selected: str | None, session_id: str | None) -> tuple[Any, Any, Any, Any, Any]:
    if not selected:
        try:  # the sample model comes with its communities: there is nothing to run first
            ran = graph_service.read_communities(sessions.session_folder(session_id)) is not None
        except ui.EXPECTED_ERRORS:
            ran = False
        hint = "Click a module on the map or select one in the table." if ran else (
            "Run Infomap, then click a module on the map or select one in the table."
        )  # fmt: skip
        return ui.message(hint), [], None, True, None
    try:
        detail = graph_service.module_detail(sessions.session_folder(session_id), selected)
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc), [], None, True, None
    words = [
        html.Li([html.Code(word["text"]), f"  {word['probability']:.3f} ", word_mark(word)]) for word in detail["words"]
    ]
    summary = ui.facts(
        [
            ("Module", f"{detail['id']}: {detail['name']}"),
            ("Clones", f"{detail['size']:,}"),
            ("Flow", f"{detail['flow']:.4f}"),
            ("Submodules", f"{detail['submodules']:,}" if detail["submodules"] else "none"),
            ("Characters", detail["chars"]),
        ]
    )
    reference = "" if detail["reference"] else " (no reference corpus: seen/novel not checked)"
    fragments = any(word.get("kind") == "fragment" for word in detail["words"])
    explain = html.Div(
        "Fragments: this module completes no whole word (it holds the middle or the end of words), so these are the "
        "strings it generates from where flow enters it to where it leaves."
        if fragments
        else "Whole words the module generates from a word start to a space; seen = a word of the training text, "
        "novel = a word the text never has (the paper's rattle).",
        className="hint",
    )
    export = dcc.Link(
        f"Export module {detail['id']}'s subgraph",
        href=f"/export?{urlencode({'module': detail['id']})}",
        id=ids.COMMUNITIES_EXPORT_LINK,
        className="button",
    )
    inspect = html.Div("Hover or click a clone, or click an arrow, to inspect it here.", className="hint")
    return (
        html.Div([summary, html.H4("Generalized words" + reference), explain, html.Ol(words), export]),
        detail["elements"],
        detail["note"],
        not detail["submodules"],
        inspect,
    )


@callback(
    Output(ids.COMMUNITIES_INSPECT, "children"),
    Input(ids.COMMUNITIES_GRAPH, "mouseoverNodeData"),
    Input(ids.COMMUNITIES_GRAPH, "tapNodeData"),
    Input(ids.COMMUNITIES_GRAPH, "tapEdgeData"),
    prevent_initial_call=True,
)
def inspect(hovered: dict[str, Any] | None, tapped: dict[str, Any] | None, edge: dict[str, Any] | None) -> Any:
    """What the inspector shows of the clone hovered or clicked, or of the transition clicked (no server work: the
    figures travel with the subgraph's elements)."""
    trigger = ctx.triggered[0]["prop_id"] if ctx.triggered else ""
    if trigger.endswith("tapEdgeData") and edge:
        rows = [
            ("Transition", f"{edge.get('source_label', edge['source'])} → {edge.get('target_label', edge['target'])}"),
            ("Probability (T)", f"{edge['weight']:.4f}"),
            ("Flow", f"{edge['flow']:.3g}"),
        ]
        if "count" in edge:
            rows.append(("Expected count", f"{edge['count']:.1f}"))
        return html.Div([html.H4("Transition"), ui.facts(rows)])
    node = tapped if trigger.endswith("tapNodeData") else hovered
    if not node:
        return no_update

    def listing(rows: list[list[Any]]) -> Any:
        if not rows:
            return "none"
        return html.Ul([html.Li(f"{label}  {p:.3f}" + (f"  (module {m})" if m else "")) for label, p, m in rows])

    return html.Div(
        [
            html.H4(f"Clone {node['label']}"),
            ui.facts(
                [
                    ("Character", node["char"]),
                    (
                        "Clone",
                        f"number {node['clone']} of its character's clones, from 0 as in its label (state "
                        f"{node['state']})",
                    ),
                    ("Flow", f"{node['flow']:.4g}"),
                    ("Module", node.get("module") or "-"),
                ]
            ),
            html.Div([html.Strong("Most probable next clones"), listing(node.get("out", []))]),
            html.Div(
                [html.Strong("Where its flow comes from (share of its incoming flow)"), listing(node.get("in", []))]
            ),
        ]
    )


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


def column_shares(
    key: str, table: list[dict[str, Any]] | None, elements: list[dict[str, Any]] | None
) -> dict[str, float]:
    """Each subgraph clone's value of the clone table's column ``key`` as a share of the subgraph's range (0 for the
    lowest, 1 for the highest; 0.5 for all when they are equal), keyed by node id; flow is read from the nodes
    themselves when the table has no rows."""
    nodes = {str(e["data"]["id"]): e["data"] for e in elements or [] if "source" not in e["data"]}
    if table:
        values = {str(row["state"]): float(row[key]) for row in table if str(row.get("state")) in nodes and key in row}
    elif key == "flow":
        values = {node: float(data.get("flow", 0.0)) for node, data in nodes.items()}
    else:
        values = {}
    if not values:
        return {}
    low, high = min(values.values()), max(values.values())
    return {node: (v - low) / (high - low) if high > low else 0.5 for node, v in values.items()}


def _blend(share: float) -> str:
    low, high = NODE_COLOURS
    return "#" + "".join(f"{round(a + (b - a) * share):02x}" for a, b in zip(low, high, strict=True))


def graph_controls(
    edge_min: Any,
    node_size: str | None,
    clone: str | None,
    elements: list[dict[str, Any]] | None,
    node_colour: str | None = "character",
    table: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The stylesheet rules of the subgraph's controls: transitions with T below ``edge_min`` hidden; clones sized
    and coloured by any numeric column of the clone table (:data:`MAPPED_COLUMNS`, scaled to the subgraph's own
    range: :func:`column_shares`), coloured by their deepest module or by the module's boundary (flow enters or
    leaves the module there: :data:`BOUNDARY_COLOURS`); the clone whose label is ``clone`` marked."""
    rules: list[dict[str, Any]] = []
    if node_colour == "module":
        rules.append({"selector": "node", "style": {"background-color": "data(module_colour)"}})
    elif node_colour == "boundary":
        for row in table or []:
            colour = BOUNDARY_COLOURS[boundary_side(row)]
            rules.append({"selector": f'node[id = "{row["state"]}"]', "style": {"background-color": colour}})
    elif node_colour in MAPPED_COLUMNS:
        shares = column_shares(node_colour, table, elements)
        rules += [
            {"selector": f'node[id = "{n}"]', "style": {"background-color": _blend(v)}} for n, v in shares.items()
        ]
    try:
        low = float(edge_min or 0)
    except (TypeError, ValueError):
        low = 0.0
    if low > 0:
        rules.append({"selector": f"edge[weight < {low!r}]", "style": {"display": "none"}})
    if node_size in MAPPED_COLUMNS:
        small, large = NODE_SIZES
        for node, share in column_shares(node_size, table, elements).items():
            size = round(small + (large - small) * share, 1)
            rules.append({"selector": f'node[id = "{node}"]', "style": {"width": size, "height": size}})
    label = (clone or "").strip()
    if label:
        rules.append({"selector": f'node[label = "{label.replace(chr(34), "")}"]', "style": HIGHLIGHT})
    return rules


@callback(
    Output(ids.COMMUNITIES_MAP, "stylesheet"),
    Output(ids.COMMUNITIES_GRAPH, "stylesheet"),
    Input(ids.COMMUNITIES_PATH, "data"),
    Input(ids.COMMUNITIES_LEVEL, "data"),
    Input(ids.COMMUNITIES_CLONE_TABLE, "selected_rows"),
    Input(ids.COMMUNITIES_EDGE_MIN, "value"),
    Input(ids.COMMUNITIES_NODE_SIZE, "value"),
    Input(ids.COMMUNITIES_NODE_COLOUR, "value"),
    Input(ids.COMMUNITIES_CLONE_SEARCH, "value"),
    State(ids.COMMUNITIES_CLONE_TABLE, "data"),
    State(ids.COMMUNITIES_GRAPH, "elements"),
)
def highlight_path(
    found: dict[str, Any] | None,
    level: str | None,
    rows: list[int] | None,
    edge_min: Any,
    node_size: str | None,
    node_colour: str | None,
    clone: str | None,
    table: list[dict[str, Any]] | None,
    elements: list[dict[str, Any]] | None,
) -> tuple[Any, Any]:
    """Mark the searched word's path (the modules of the map's level it passes through, its clones and transitions
    in the subgraph), the clone selected in the clone table or found by its label; hide the transitions below the
    chosen T; size and colour the clones by the column asked for."""
    selected = graph_controls(edge_min, node_size, clone, elements, node_colour, table)
    if rows and table and rows[0] < len(table):
        selected.append({"selector": f'node[id = "{table[rows[0]]["state"]}"]', "style": HIGHLIGHT})
    if not found:
        return MAP_STYLESHEET, STYLESHEET + selected
    level = level or ""
    depth = len(level.split(":")) if level else 0
    on_map = []
    for step in found["steps"]:
        parts = (step["module"] or "").split(":")
        if step["module"] and ":".join(parts[:depth]) == level and len(parts) > depth:
            on_map.append(":".join(parts[: depth + 1]))
    map_sheet = MAP_STYLESHEET + [{"selector": f'node[id = "{m}"]', "style": HIGHLIGHT} for m in dict.fromkeys(on_map)]
    clones = found["clones"]
    graph_sheet = (
        STYLESHEET
        + [{"selector": f'node[id = "{c}"]', "style": HIGHLIGHT} for c in dict.fromkeys(clones)]
        + [
            {"selector": f'edge[id = "{a}-{b}"]', "style": HIGHLIGHT_EDGE}
            for a, b in zip(clones, clones[1:], strict=False)
        ]
        + selected
    )
    return map_sheet, graph_sheet
