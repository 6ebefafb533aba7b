"""Communities page: run Infomap on the current model's clone graph, browse its modules (most flow first,
filterable by a word or character) and look at one module's generalized words and subgraph.

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

from app import background, ids, sessions, ui
from app.services import graphs as graph_service

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


def layout(**_query: Any) -> html.Div:
    return html.Div(
        [
            html.H2("Communities (Infomap)"),
            dcc.Store(id=ids.COMMUNITIES_VERSION, storage_type="memory", data=0),
            dcc.Store(id=ids.COMMUNITIES_LEVEL, storage_type="memory", data=""),
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
                    "Infomap runs in the background; the result is kept in the session (communities.json).",
                    className="hint",
                ),
                html.Progress(id=ids.COMMUNITIES_PROGRESS, className="progress", style={"display": "none"}),
                html.Div(id=ids.COMMUNITIES_MESSAGE),
            ),
            ui.card(
                "Modules",
                html.Div(id=ids.COMMUNITIES_TRAIL, className="breadcrumb"),
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
                html.Div(
                    html.Button(
                        "Show the selected module's submodules",
                        id=ids.COMMUNITIES_DRILL,
                        className="button",
                        disabled=True,
                    ),
                    className="buttons",
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
    State(ids.COMMUNITIES_THRESHOLD, "value"),
    State(ids.SESSION, "data"),
    background=True,
    running=[
        (Output(ids.COMMUNITIES_RUN, "disabled"), True, False),
        (Output(ids.COMMUNITIES_PROGRESS, "style"), {"display": "block"}, {"display": "none"}),
    ],
    prevent_initial_call=True,
)
def run(
    _clicks: int | None, trials: Any, two_level: Any, seed: Any, threshold: Any, session_id: str | None
) -> tuple[Any, Any]:
    """The background job: Infomap on the session's current model; returns only a message and a version stamp."""
    ui.require_click(_clicks)
    try:
        with background.job_process():
            saved = graph_service.run_communities(
                sessions.session_folder(session_id), trials, bool(two_level), seed, threshold
            )
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc), no_update
    s = saved["summary"]
    note = (
        f"{s['modules']} top modules over {s['nodes']:,} clones and {s['edges']:,} edges (pruned below "
        f"{saved['threshold']:.2g}); code length {s['codelength']:.3f} bits (one module: "
        f"{s['one_level_codelength']:.3f}); Infomap took {s['seconds']:.2f} s."
    )
    return ui.message(note, "ok"), time.time()


@callback(
    Output(ids.COMMUNITIES_LEVEL, "data"),
    Input(ids.COMMUNITIES_DRILL, "n_clicks"),
    Input({"type": ids.COMMUNITIES_CRUMB, "index": ALL}, "n_clicks"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    State(ids.COMMUNITIES_TABLE, "selected_row_ids"),
    prevent_initial_call=True,
)
def change_level(_drill: Any, crumbs: list[Any], _version: Any, selected: list[str] | None) -> Any:
    """Go down to the selected module's submodules, up to a breadcrumb's level, or back to the top after a run."""
    trigger = ctx.triggered_id
    if trigger == ids.COMMUNITIES_DRILL:
        return selected[0] if selected else no_update
    if isinstance(trigger, dict) and any(crumbs):
        return trigger["index"]
    if trigger == ids.COMMUNITIES_VERSION:
        return ""
    return no_update


@callback(
    Output(ids.COMMUNITIES_TABLE, "data"),
    Output(ids.COMMUNITIES_TABLE, "selected_rows"),
    Output(ids.COMMUNITIES_TRAIL, "children"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.COMMUNITIES_FILTER, "value"),
    Input(ids.MODEL_VERSION, "data"),
    Input(ids.COMMUNITIES_LEVEL, "data"),
    State(ids.SESSION, "data"),
)
def show_modules(
    _version: Any, query: str | None, _model: Any, level: str | None, session_id: str | None
) -> tuple[Any, Any, Any]:
    try:
        saved = graph_service.read_communities(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS:
        return [], [], None
    if not saved:
        return [], [], None
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
    return rows, [], crumbs


@callback(
    Output(ids.COMMUNITIES_DRILL, "disabled"),
    Input(ids.COMMUNITIES_TABLE, "selected_rows"),
    State(ids.COMMUNITIES_TABLE, "data"),
)
def allow_drill(selected: list[int] | None, rows: list[dict[str, Any]] | None) -> bool:
    """The drill-down button works only for a selected module that has submodules."""
    if not selected or not rows or selected[0] >= len(rows):
        return True
    return not rows[selected[0]].get("submodules")


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
        detail = graph_service.module_detail(sessions.session_folder(session_id), selected[0])
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc), [], None
    words = [
        html.Li([html.Code(word["text"]), f"  {word['probability']:.3f} ", word_mark(word)])
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
    return (
        html.Div([summary, html.H4("Generalized words" + reference), explain, html.Ol(words), export]),
        detail["elements"],
        detail["note"],
    )
