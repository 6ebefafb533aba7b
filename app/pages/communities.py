"""Communities page: run Infomap on the current model's clone graph, see its modules as a map (Network
Navigator-style: modules sized by flow, linked by the flow between them), find where a word lives, browse the
modules (most flow first, filterable) and inspect one module's subgraph, clone by clone, and its generalized words.

Infomap runs as a background job (the same manager as training: diskcache by default, Celery with REDIS_URL), so a big
graph never blocks the page; the result goes to the session folder and the callback returns only a message. A
multilevel result is browsed level by level with a breadcrumb.

The page's view (the run shown, the open module, the level, the subgraph's T and layout) lives in the URL's query
string (:mod:`app.pages.community.view`): a link opens the same view, Back undoes a view change.

This module is the page and its layout; its look and its callbacks are in :mod:`app.pages.community`, by what they
hold (the Infomap runs and hierarchy, the module map, the module card, the view in the URL).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import dash
import dash_cytoscape as cyto
from dash import dcc, html

from app import figures, grids, ids, ui
from app.pages.community import (  # the page's callbacks, by what they hold
    links,
    module_card,
    module_map,
    overviews,
    runs,
    tables,
    view,
    whole_graph,
)
from app.pages.community.look import (
    BOUNDARY_COLOURS,
    BOUNDARY_SHARE,
    CLONE_COLUMNS,
    COLUMNS,
    EDGE_COLUMNS,
    GRAPH_LAYOUTS,
    MAP_STYLESHEET,
    MAPPED_COLUMNS,
    MAPPED_OPTIONS,
    NODE_SIZES,
    STYLESHEET,
    data_table,
    network_view,
)
from app.pages.community.module_card import graph_controls, show_module
from app.pages.community.runs import show_hierarchy
from app.services import overviews as overview_service
from app.services import shares
from app.services.graphs import MAP_MAX_MODULES
from app.services.overviews import MAP_LIMIT
from engine import api

WATCH_MS = 10_000
"""How often the page looks for an Infomap run whose process died (``JobKind.reap_said``)."""

cyto.load_extra_layouts()  # the bundle with the SVG exporter (cy.svg was not a function)

dash.register_page(__name__, path="/communities", name="Communities", title="CHMM Explorer · Communities", order=5)


grids.export_on_click(ids.COMMUNITIES_TABLE, ids.COMMUNITIES_TABLE_CSV)  # the clone and transition tables: server


def map_filter_fields() -> list[Any]:
    """The module map's filter: least flow, least clones, and a module's neighbours within some links."""
    fields = (
        ("Flow at least", ids.COMMUNITIES_MAP_MIN_FLOW, "0", "a share of the flow, e.g. 1e-3"),
        ("Clones at least", ids.COMMUNITIES_MAP_MIN_CLONES, "0", "the module's clones"),
        ("Neighbours of module", ids.COMMUNITIES_MAP_CENTRE, "none", "its id on the map, e.g. 3"),
        ("within links", ids.COMMUNITIES_MAP_STEPS, "1", "either direction"),
    )
    return [
        ui.field(
            label,
            dcc.Input(id=key, type="text", value="", placeholder=hint, debounce=True, className="num small"),
            help_text,
        )
        for label, key, hint, help_text in fields
    ]


def layout(**query: Any) -> html.Div:
    """The page; ``query``: the URL's query (the view to open, checked by :func:`view.navigate` as the page opens)."""
    asked = {key: str(value)[:300] for key, value in query.items() if key in view.DEFAULT_VIEW}
    share = query.get("share")  # a shared model's token (app.pages.community.links)
    return html.Div(
        [
            # refresh=False: writing the view here adds an entry to the browser's history, and reloads nothing
            dcc.Location(id=ids.COMMUNITIES_URL, refresh=False, search=f"?{urlencode(asked)}" if asked else ""),
            dcc.Store(id=ids.COMMUNITIES_LAYOUT_KEPT, storage_type="local"),
            html.H2("Communities (Infomap)"),
            html.P(
                "Infomap groups the clone graph's clones into modules where the flow of text stays for long (the map "
                "equation). In a character model a module is a “generalized word”: it generates a family "
                "of words (paper, 4.2.1); in a model of words or tokens, a family of phrases. Run Infomap, then "
                "explore the module map, find a word (a word alone shows its senses: what each of its clones "
                "stands for), or open a module.",
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
                ui.buttons(html.Button("Run Infomap", id=ids.COMMUNITIES_RUN, className="button primary")),
                html.Div(
                    "Infomap runs in the background; the result is kept in the session (communities.json).",
                    className="hint",
                ),
                html.Progress(id=ids.COMMUNITIES_PROGRESS, className="progress", style={"display": "none"}),
                dcc.Interval(id=ids.COMMUNITIES_WATCH, interval=WATCH_MS),
                html.Div(id=ids.COMMUNITIES_MESSAGE),
            ),
            ui.card(
                "Find a word",
                ui.buttons(
                    dcc.Input(
                        id=ids.COMMUNITIES_SEARCH,
                        type="text",
                        placeholder="a word or phrase, e.g. alice",
                        debounce=True,
                        className="search",
                    ),
                    html.Button("Find", id=ids.COMMUNITIES_SEARCH_BUTTON, className="button"),
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
                html.Div(id=ids.COMMUNITIES_VIEW_NOTE),
                links.controls(share if isinstance(share, str) and shares.TOKEN.fullmatch(share) else None),
                ui.field(
                    "Run shown",
                    dcc.RadioItems(
                        id=ids.COMMUNITIES_RUN_SHOWN,
                        options=runs.run_options(False),
                        value=view.DEFAULT_VIEW["run"],
                        inline=True,
                    ),
                    "The run before the last on these clones (another Markov time or threshold) can be browsed too.",
                ),
                html.Div(id=ids.COMMUNITIES_TRAIL, className="breadcrumb"),
                ui.field(
                    "Modules shown",
                    dcc.Input(
                        id=ids.COMMUNITIES_MAP_LIMIT,
                        type="number",
                        min=1,
                        max=MAP_MAX_MODULES,
                        step=1,
                        value=MAP_LIMIT,
                        debounce=True,
                        className="num small",
                    ),
                    "the modules with the most flow; the rest are summed up below the map and listed in the table",
                ),
                html.Div(
                    [
                        ui.choice(
                            "Colour by", ids.COMMUNITIES_MAP_COLOUR, overview_service.MAP_COLOUR_BY, "module", "14em"
                        ),
                        ui.choice("Area by", ids.COMMUNITIES_MAP_SIZE, overview_service.MAP_SIZE_BY, "flow", "8em"),
                        *map_filter_fields(),
                    ],
                    className="form-grid",
                ),
                ui.buttons(
                    html.Button(
                        "Download the modules shown (GraphML)", id=ids.COMMUNITIES_MAP_EXPORT, className="button small"
                    )
                ),
                html.Div(id=ids.COMMUNITIES_MAP_EXPORT_NOTE),
                dcc.Store(id=ids.COMMUNITIES_MAP_DOWNLOAD),
                dcc.Store(id=ids.COMMUNITIES_MAP_FITTED),
                html.Div(id=ids.COMMUNITIES_MAP_LEGEND, className="whole-graph-legend"),
                dcc.Store(id=ids.COMMUNITIES_MAP_RULES, storage_type="memory", data=[]),
                html.Div(id=ids.COMMUNITIES_MAP_NOTE, className="hint"),
                html.Div(id=ids.COMMUNITIES_MAP_PATH_NOTE),
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
                "The whole graph",
                html.Div(
                    "Every clone of the model at once, placed by its modules (drawn on a 2D canvas, when asked: a "
                    "large model takes a few seconds).",
                    className="hint",
                ),
                whole_graph.controls(),
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
                    "symbol: a character, word or token) whose clones emit it. Click a row to open its module.",
                ),
                grids.grid(
                    ids.COMMUNITIES_TABLE,
                    COLUMNS,
                    csv_button=ids.COMMUNITIES_TABLE_CSV,
                    file_name="modules.csv",
                    rows=15,
                    selectable=True,
                    row_id="id",
                ),
            ),
            ui.card(
                "Module",
                html.Div(id=ids.COMMUNITIES_GRAPH_NOTE, className="hint"),
                ui.buttons(
                    html.Button(
                        "Download the clones shown (GraphML)", id=ids.COMMUNITIES_GRAPH_EXPORT, className="button small"
                    )
                ),
                html.Div(id=ids.COMMUNITIES_GRAPH_EXPORT_NOTE),
                dcc.Store(id=ids.COMMUNITIES_GRAPH_DOWNLOAD),
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
                            "Clones shown",
                            html.Div(
                                [
                                    dcc.Input(
                                        id=ids.COMMUNITIES_DEGREE_MIN,
                                        type="number",
                                        min=0,
                                        step=1,
                                        value=0,
                                        debounce=0.4,
                                        placeholder="degree",
                                        className="num small",
                                    ),
                                    dcc.Input(
                                        id=ids.COMMUNITIES_FLOW_MIN,
                                        type="number",
                                        min=0,
                                        max=1,
                                        step="any",
                                        value=0,
                                        debounce=0.4,
                                        placeholder="flow",
                                        className="num small",
                                    ),
                                ]
                            ),
                            "those with degree (edges in and out) and flow at least these",
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
                                    {"label": "by symbol (character or word)", "value": "character"},
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
                                placeholder="a label (h:3) or a symbol (h)",
                                debounce=0.4,
                            ),
                        ),
                        ui.field(
                            "Its neighbours only",
                            dcc.Input(
                                id=ids.COMMUNITIES_CLONE_STEPS,
                                type="number",
                                min=0,
                                max=api.DEFAULTS.MAX_EGO_STEPS,
                                step=1,
                                value=0,
                                debounce=0.4,
                                className="num small",
                            ),
                            "within this many steps of the clone found (0: every clone)",
                        ),
                    ],
                    className="form-grid controls",
                ),
                html.Div(id=ids.COMMUNITIES_CLONE_FOUND),
                html.Div(
                    [
                        html.Div(
                            network_view(
                                "graph",
                                ids.COMMUNITIES_GRAPH,
                                STYLESHEET,
                                520,
                                "Nodes: clones, labelled by their symbol (character or word) and coloured by it. "
                                "Arrows: transitions, width by probability. Hover or click a clone, or click an "
                                "arrow.",
                            ),
                            className="module-graph",
                        ),
                        html.Div(
                            [
                                html.Div(id=ids.COMMUNITIES_INSPECT, className="inspector"),
                                ui.buttons(
                                    html.Button(
                                        "Open its submodules",
                                        id=ids.COMMUNITIES_DRILL,
                                        className="button",
                                        disabled=True,
                                    )
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
                ui.buttons(
                    html.Button("Show the whole graph's tables", id=ids.COMMUNITIES_TABLES_WHOLE, className="button")
                ),
                html.Div(id=ids.COMMUNITIES_TABLES_CSV_NOTE),
                dcc.Store(id=ids.COMMUNITIES_TABLES_SOURCE, storage_type="memory", data=None),
                dcc.Store(id=ids.COMMUNITIES_TABLES_PURGED, storage_type="memory", data=None),
                dcc.Store(id=ids.COMMUNITIES_TABLES_CLICK_SELECTED, storage_type="memory", data=None),
                dcc.Store(id=ids.COMMUNITIES_TABLES_DOWNLOAD),
                html.H4("Clones"),
                data_table(
                    ids.COMMUNITIES_CLONE_TABLE,
                    CLONE_COLUMNS,
                    ids.COMMUNITIES_CLONE_TABLE_CSV,
                    "clones.csv",
                    selectable=True,
                    row_id="clone",
                    server_rows=True,
                ),
                html.H4("Transitions"),
                data_table(
                    ids.COMMUNITIES_EDGE_TABLE,
                    EDGE_COLUMNS,
                    ids.COMMUNITIES_EDGE_TABLE_CSV,
                    "transitions.csv",
                    server_rows=True,
                ),
            ),
            ui.card(
                "Flow and degree",
                dcc.Graph(
                    id=ids.COMMUNITIES_DISTRIBUTIONS, figure=figures.empty_figure(), config={"displaylogo": False}
                ),
                html.Div(
                    "Left: the top modules' flow by rank, the most first (log axes: a few large modules and a long "
                    "tail). Right: how many clones of the pruned clone graph have each degree (edges in and out).",
                    className="hint",
                ),
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
                    "The run before the last on this model and the last, the 12 top modules of each with the most "
                    "flow (the rest as “other”) side by side: each band is the flow of the clones one run puts in "
                    "the left module and the other in the right one, in the left module's colour (run Infomap again "
                    "with another Markov time or threshold to compare).",
                    className="hint",
                ),
            ),
        ]
    )


__all__ = [
    "BOUNDARY_COLOURS", "BOUNDARY_SHARE", "MAPPED_COLUMNS", "MAPPED_OPTIONS", "NODE_SIZES", "graph_controls", "layout",
    "module_card", "module_map", "overviews", "runs", "show_hierarchy", "show_module", "tables", "view",
    "whole_graph",
]  # fmt: skip
