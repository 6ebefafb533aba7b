"""The Communities page's whole graph: every clone of the model drawn with WebGL (Plotly ``Scattergl``, the
renderer measured fastest here: bench/bench_whole_graph.py), placed by its modules, coloured by top module, with the
transitions of most flow; drawn only when asked for. Clicking a clone opens its top module in the Module card (the
page's selected-module store, as a click on the module map); the selected module's clones stay bright."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from dash import Input, Output, Patch, State, callback, dcc, html, no_update

from app import ids, sessions, ui
from app.services import whole_graph as whole_service

EDGE_COLOUR = "rgba(110, 110, 110, 0.18)"
HEIGHT = 640
PLACEHOLDER = go.Figure(layout={"height": 60, "xaxis": {"visible": False}, "yaxis": {"visible": False}})
"""The figure before the view is drawn: empty, low."""


def controls() -> html.Div:
    """The view's button, its choice of transitions, and its (loading) figure and note."""
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
            ),
            dcc.Loading(
                [
                    html.Div(id=ids.COMMUNITIES_WHOLE_NOTE, className="hint"),
                    dcc.Graph(
                        id=ids.COMMUNITIES_WHOLE_GRAPH,
                        figure=PLACEHOLDER,
                        config={"displaylogo": False, "scrollZoom": True},
                        style={"height": f"{HEIGHT}px"},
                    ),
                ],
                type="default",
                delay_show=0,
            ),
        ]
    )


def figure(drawn: dict[str, Any]) -> dict[str, Any]:
    """The whole graph as two WebGL traces: the transitions (one line trace, gaps between segments) and the clones,
    one point per clone in state order (the clones' trace is the last). A plain dict: Plotly's figure objects took
    1.3 s to validate 30,000 clones and 20,000 transitions."""
    xs = [round(float(v), 5) for v in drawn["x"]]
    ys = [round(float(v), 5) for v in drawn["y"]]
    ex: list[float | None] = []
    ey: list[float | None] = []
    for a, b in zip(drawn["edge_sources"].tolist(), drawn["edge_targets"].tolist(), strict=True):
        ex += [xs[a], xs[b], None]
        ey += [ys[a], ys[b], None]
    edges = {
        "type": "scattergl", "x": ex, "y": ey, "mode": "lines", "hoverinfo": "skip", "name": "transitions",
        "line": {"width": 0.6, "color": EDGE_COLOUR},
    }  # fmt: skip
    clones = {
        "type": "scattergl", "x": xs, "y": ys, "mode": "markers", "name": "clones",
        "marker": {"size": 5, "color": drawn["colours"], "line": {"width": 0}},
        "hovertext": drawn["hover"], "hoverinfo": "text", "customdata": drawn["modules"],
        "unselected": {"marker": {"opacity": 0.25}},
    }  # fmt: skip
    annotations = [
        {"x": label["x"], "y": label["y"], "text": label["text"], "showarrow": False, "xanchor": "left",
         "yanchor": "top", "font": {"size": 11, "color": "#333"}, "bgcolor": "rgba(255,255,255,0.7)"}
        for label in drawn["labels"]
    ]  # fmt: skip
    layout = {
        "height": HEIGHT,
        "margin": {"l": 0, "r": 0, "t": 0, "b": 0},
        "showlegend": False,
        "dragmode": "pan",
        "hovermode": "closest",
        "xaxis": {"visible": False},
        "yaxis": {"visible": False, "autorange": "reversed", "scaleanchor": "x"},
        "plot_bgcolor": "#ffffff",
        "annotations": annotations,
        "uirevision": "whole-graph",
    }
    return {"data": [edges, clones], "layout": layout}


def note(drawn: dict[str, Any]) -> list[Any]:
    """What the view says it draws: clones, transitions drawn of all, and how it is coloured."""
    if drawn["drawn_edges"] == 0:
        edges = (
            f"no transition (of {drawn['edges']:,} with T at least {drawn['threshold']:.2g}: choose how many above; "
            "without a GPU each thousand slows panning)"
        )
    elif drawn["drawn_edges"] < drawn["edges"]:
        edges = (
            f"the {drawn['drawn_edges']:,} transitions with the most flow of {drawn['edges']:,} (T at least "
            f"{drawn['threshold']:.2g})"
        )
    else:
        edges = f"all {drawn['edges']:,} transitions (T at least {drawn['threshold']:.2g})"
    head = f"{drawn['clones']:,} clones and {edges} drawn. "
    if not drawn["by_module"]:
        return [head + "No Infomap run for this model yet, so the clones are grouped and coloured by character; "
                "run Infomap to see its modules."]  # fmt: skip
    outside = f" {drawn['outside']:,} clones in no module are grey, bottom right." if drawn["outside"] else ""
    return [
        head + f"Cells: the {drawn['top_modules']:,} top modules (area by clones, colours as in the table) and their "
        f"submodules; the clones with the most flow sit at each cell's centre.{outside} Drag to pan, scroll to "
        "zoom, hover a clone for its module, click it to open its module below."
    ]


@callback(
    Output(ids.COMMUNITIES_WHOLE_GRAPH, "figure"),
    Output(ids.COMMUNITIES_WHOLE_NOTE, "children"),
    Input(ids.COMMUNITIES_WHOLE_SHOW, "n_clicks"),
    Input(ids.COMMUNITIES_WHOLE_EDGES, "value"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.MODEL_VERSION, "data"),
    State(ids.COMMUNITIES_SELECTED, "data"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def show_whole_graph(
    clicks: int | None, max_edges: Any, _version: Any, _model: Any, selected: str | None, session_id: str | None
) -> tuple[Any, Any]:
    """Draw the whole graph once asked (the button), and again after a new Infomap run or model while shown."""
    if not clicks:
        return no_update, no_update
    try:
        folder = sessions.session_folder(session_id)
        drawn = whole_service.whole_graph(folder, max_edges)
        marked = whole_service.module_clones(folder, selected)
    except ui.EXPECTED_ERRORS as exc:
        return no_update, ui.error_message(exc)
    shown = figure(drawn)
    if marked:
        shown["data"][-1]["selectedpoints"] = marked
    return shown, note(drawn)


@callback(
    Output(ids.COMMUNITIES_WHOLE_GRAPH, "figure", allow_duplicate=True),
    Input(ids.COMMUNITIES_SELECTED, "data"),
    State(ids.COMMUNITIES_WHOLE_SHOW, "n_clicks"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def mark_module(selected: str | None, clicks: int | None, session_id: str | None) -> Any:
    """The selected module's clones bright, the others faded (only the indices travel: a patch of the figure)."""
    if not clicks:
        return no_update
    try:
        marked = whole_service.module_clones(sessions.session_folder(session_id), selected)
    except ui.EXPECTED_ERRORS:
        return no_update
    patch = Patch()
    patch["data"][1]["selectedpoints"] = marked or None
    return patch
