"""Prune page: sweep pruning thresholds over the current model (kept transitions vs bits per symbol, the paper's
Fig 3(d)) and make the model pruned at the slider's threshold current (undo on the Model page goes back)."""

from __future__ import annotations

import math
from typing import Any

import dash
from dash import Input, Output, State, callback, ctx, dcc, html, no_update

from app import figures, ids, jobs, sessions, ui
from app.services import pruning as prune_service

dash.register_page(__name__, path="/prune", name="Prune", title="CHMM Explorer · Prune", order=4)

MARKS = {exponent: f"1e{exponent}" for exponent in range(-5, 0)}


def layout(**_query: Any) -> html.Div:
    return html.Div(
        [
            html.H2("Prune the transitions"),
            ui.card(
                "Threshold",
                dcc.Slider(
                    id=ids.PRUNE_THRESHOLD,
                    min=-5,
                    max=-1,
                    step=0.25,
                    value=-3,
                    marks=MARKS,
                    allow_direct_input=False,  # its box takes the exponent; the threshold box below takes 1e-3
                ),
                ui.field(
                    "Threshold",
                    dcc.Input(id=ids.PRUNE_THRESHOLD_TEXT, type="text", value="1e-3", debounce=True, className="num"),
                    "or type it: a probability from 1e-5 to 0.1, e.g. 0.002 or 2e-3",
                ),
                html.Div(id=ids.PRUNE_THRESHOLD_LABEL, className="hint"),
                ui.buttons(
                    html.Button("Run the sweep", id=ids.PRUNE_SWEEP_BUTTON, className="button primary"),
                    html.Button("Apply (make the pruned model current)", id=ids.PRUNE_APPLY, className="button"),
                ),
                html.Div(id=ids.PRUNE_MESSAGE),
            ),
            ui.card(
                "Sweep",
                dcc.Loading(
                    [
                        dcc.Graph(id=ids.PRUNE_CHART, figure=figures.prune_figure(None), config={"displaylogo": False}),
                        dcc.Store(id=ids.PRUNE_SWEEP_DATA, storage_type="memory"),
                        html.Div(id=ids.PRUNE_SWEEP_MESSAGE),
                    ]
                ),
            ),
        ]
    )


@callback(
    Output(ids.PRUNE_THRESHOLD, "value"),
    Output(ids.PRUNE_THRESHOLD_TEXT, "value"),
    Output(ids.PRUNE_THRESHOLD_LABEL, "children"),
    Input(ids.PRUNE_THRESHOLD, "value"),
    Input(ids.PRUNE_THRESHOLD_TEXT, "value"),
)
def sync_threshold(exponent: Any, typed: Any) -> tuple[Any, Any, Any]:
    """The slider (log10 of the threshold) and the threshold box follow each other; the label says what it does."""
    if ctx.triggered_id == ids.PRUNE_THRESHOLD_TEXT:
        try:
            threshold = prune_service.prune_threshold(typed)
        except ui.EXPECTED_ERRORS as exc:
            return no_update, no_update, ui.error_message(exc)
        exponent, text = math.log10(threshold), typed
    else:
        try:
            threshold = prune_service.threshold_from_slider(exponent)
        except ui.EXPECTED_ERRORS as exc:
            return no_update, no_update, ui.error_message(exc)
        text = f"{threshold:.2g}"
    label = f"Transitions with probability below {threshold:.2g} are removed (each row is renormalised)."
    return exponent, text, label


@callback(
    Output(ids.PRUNE_SWEEP_DATA, "data"),
    Output(ids.PRUNE_SWEEP_MESSAGE, "children"),
    Input(ids.PRUNE_SWEEP_BUTTON, "n_clicks"),
    State(ids.SESSION, "data"),
    background=True,
    running=[(Output(ids.PRUNE_SWEEP_BUTTON, "disabled"), True, False)],
    prevent_initial_call=True,
)
@jobs.charged_from_fork  # its job's process charged to the memory budget from its fork
def sweep(_clicks: int | None, session_id: str | None) -> tuple[Any, Any]:
    ui.require_click(_clicks)
    try:
        folder = sessions.session_folder(session_id)
        with ui.request_job(folder, "The prune sweep"):
            result = prune_service.prune_sweep(folder)
    except ui.EXPECTED_ERRORS as exc:
        return None, ui.error_message(exc)
    note = (
        f"{len(result['points'])} thresholds scored on {result['source']}; the unpruned model has "
        f"{result['nonzeros']:,} non-zero transitions and {result['bps_unpruned']:.4f} bits per symbol."
    )
    return result, ui.message(note)


@callback(
    Output(ids.PRUNE_CHART, "figure"),
    Input(ids.PRUNE_SWEEP_DATA, "data"),
    Input(ids.PRUNE_THRESHOLD, "value"),
)
def show_sweep(result: dict[str, Any] | None, exponent: Any) -> Any:
    """The sweep's curve with the point nearest the chosen threshold ringed (it follows the slider)."""
    try:
        selected = prune_service.threshold_from_slider(exponent)
    except ui.EXPECTED_ERRORS:
        selected = None
    return figures.prune_figure(result, selected)


apply = ui.session_action(
    Output(ids.PRUNE_MESSAGE, "children"),
    Output(ids.MODEL_VERSION, "data", allow_duplicate=True),
    Input(ids.PRUNE_APPLY, "n_clicks"),
    lambda folder, _clicks, typed: prune_service.apply_prune(folder, typed=typed),
    State(ids.PRUNE_THRESHOLD_TEXT, "value"),
)
"""Apply: the model pruned at the typed threshold becomes current."""
