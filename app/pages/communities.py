"""Communities page: run Infomap on the current model's clone graph, browse its modules (most flow first,
filterable by a word or character) and look at one module's generalized words and subgraph.

Infomap on the 600-state sample model takes well under a second, so it runs in a normal callback under
``dcc.Loading``; wiring it as a background job (like training) can come later for big models.
"""

from __future__ import annotations

import time
from typing import Any

import dash
import dash_cytoscape as cyto
from dash import Input, Output, State, callback, dash_table, dcc, html, no_update

from app import ids, services, sessions, ui

dash.register_page(__name__, path="/communities", name="Communities", title="CHMM Explorer · Communities", order=5)

COLUMNS = [
    {"name": "Module", "id": "id"},
    {"name": "Name (top generalized words)", "id": "name"},
    {"name": "Clones", "id": "size", "type": "numeric"},
    {"name": "Flow", "id": "flow", "type": "numeric", "format": {"specifier": ".4f"}},
    {"name": "Characters", "id": "chars"},
    {"name": "Words", "id": "words"},
]
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


def layout(**_query: Any) -> html.Div:
    return html.Div(
        [
            html.H2("Communities (Infomap)"),
            dcc.Store(id=ids.COMMUNITIES_VERSION, storage_type="memory", data=0),
            ui.card(
                "Run Infomap",
                html.Div(
                    [
                        ui.field(
                            "Trials",
                            dcc.Input(
                                id=ids.COMMUNITIES_TRIALS,
                                type="number",
                                min=1,
                                max=services.MAX_TRIALS,
                                step=1,
                                value=10,
                                className="num",
                            ),
                            "Independent runs; the shortest code length wins.",
                        ),
                        ui.field(
                            "Seed",
                            dcc.Input(id=ids.COMMUNITIES_SEED, type="number", min=0, step=1, value=0, className="num"),
                        ),
                        ui.field(
                            "Partition",
                            dcc.Checklist(
                                id=ids.COMMUNITIES_TWO_LEVEL,
                                options=[{"label": " two-level", "value": "on"}],
                                value=[],
                            ),
                            "Modules of clones (unchecked: Infomap's multilevel hierarchy; the table lists top "
                            "modules).",
                        ),
                    ],
                    className="form-grid",
                ),
                html.Div(
                    html.Button("Run Infomap", id=ids.COMMUNITIES_RUN, className="button primary"), className="buttons"
                ),
                html.Div(
                    "The clone graph is pruned at 1e-3 first; the result is kept in the session (communities.json).",
                    className="hint",
                ),
                dcc.Loading(html.Div(id=ids.COMMUNITIES_MESSAGE)),
            ),
            ui.card(
                "Modules",
                ui.field(
                    "Filter",
                    dcc.Input(
                        id=ids.COMMUNITIES_FILTER,
                        type="text",
                        debounce=True,
                        placeholder="a word (e.g. the) or a character",
                    ),
                    "Keeps modules whose generalized words contain the text, or (one character) whose clones emit it.",
                ),
                dash_table.DataTable(
                    id=ids.COMMUNITIES_TABLE,
                    columns=COLUMNS,
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
                html.Div(id=ids.COMMUNITIES_DETAIL),
                html.Div(id=ids.COMMUNITIES_GRAPH_NOTE, className="hint"),
                cyto.Cytoscape(
                    id=ids.COMMUNITIES_GRAPH,
                    elements=[],
                    layout={"name": "preset"},
                    stylesheet=STYLESHEET,
                    style={"width": "100%", "height": "520px"},
                ),
            ),
        ]
    )


@callback(
    Output(ids.COMMUNITIES_MESSAGE, "children"),
    Output(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.COMMUNITIES_RUN, "n_clicks"),
    State(ids.COMMUNITIES_TRIALS, "value"),
    State(ids.COMMUNITIES_TWO_LEVEL, "value"),
    State(ids.COMMUNITIES_SEED, "value"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def run(_clicks: int | None, trials: Any, two_level: Any, seed: Any, session_id: str | None) -> tuple[Any, Any]:
    try:
        saved = services.run_communities(sessions.session_folder(session_id), trials, bool(two_level), seed)
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc), no_update
    s = saved["summary"]
    note = (
        f"{s['modules']} top modules over {s['nodes']:,} clones and {s['edges']:,} edges; code length "
        f"{s['codelength']:.3f} bits (one module: {s['one_level_codelength']:.3f}); Infomap took {s['seconds']:.2f} s."
    )
    return ui.message(note, "ok"), time.time()


@callback(
    Output(ids.COMMUNITIES_TABLE, "data"),
    Output(ids.COMMUNITIES_TABLE, "selected_rows"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.COMMUNITIES_FILTER, "value"),
    Input(ids.MODEL_VERSION, "data"),
    State(ids.SESSION, "data"),
)
def show_modules(_version: Any, query: str | None, _model: Any, session_id: str | None) -> tuple[Any, Any]:
    try:
        saved = services.read_communities(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS:
        return [], []
    return (services.module_rows(saved, query) if saved else []), []


@callback(
    Output(ids.COMMUNITIES_DETAIL, "children"),
    Output(ids.COMMUNITIES_GRAPH, "elements"),
    Output(ids.COMMUNITIES_GRAPH_NOTE, "children"),
    Input(ids.COMMUNITIES_TABLE, "selected_row_ids"),
    State(ids.SESSION, "data"),
)
def show_module(selected: list[str] | None, session_id: str | None) -> tuple[Any, Any, Any]:
    if not selected:
        return ui.message("Run Infomap, then select a module in the table."), [], None
    try:
        detail = services.module_detail(sessions.session_folder(session_id), selected[0])
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc), [], None
    words = [
        html.Li(
            [
                html.Code(word["text"]),
                f"  {word['probability']:.3f}",
                ""
                if word["seen"] is None
                else html.Span(" seen" if word["seen"] else " novel", className="hint" if word["seen"] else ""),
            ]
        )
        for word in detail["words"]
    ]
    summary = ui.facts(
        [
            ("Module", f"{detail['id']}: {detail['name']}"),
            ("Clones", f"{detail['size']:,}"),
            ("Flow", f"{detail['flow']:.4f}"),
            ("Characters", detail["chars"]),
        ]
    )
    reference = "" if detail["reference"] else " (no reference corpus: seen/novel not checked)"
    return (
        html.Div([summary, html.H4("Generalized words" + reference), html.Ol(words)]),
        detail["elements"],
        detail["note"],
    )
