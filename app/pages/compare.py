"""Compare page: train a CHMM and the peer learners (DenseHMM, HMM, PAC PDFA, Kneser-Ney n-gram) on the session's
corpus or the sample, as one background job, and show test BPS, training seconds and parameters side by side."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, callback, dash_table, dcc, html, no_update

from app import background, compare, ids, services, sessions, ui

dash.register_page(__name__, path="/compare", name="Compare", title="CHMM Explorer · Compare", order=7)

COLUMNS = [
    {"name": "Learner", "id": "learner"},
    {"name": "Test BPS", "id": "test_bps", "type": "numeric"},
    {"name": "Validation BPS", "id": "validation_bps", "type": "numeric"},
    {"name": "Train BPS", "id": "train_bps", "type": "numeric"},
    {"name": "Seconds", "id": "seconds", "type": "numeric"},
    {"name": "Parameters", "id": "parameters", "type": "numeric", "format": {"specifier": ","}},
    {"name": "Status", "id": "status"},
]


def layout(**_query: Any) -> html.Div:
    learners = [
        {"label": f" {compare.LEARNER_LABELS[kind]} ({compare.LEARNER_NOTES[kind]})", "value": kind}
        for kind in compare.LEARNER_LABELS
    ]
    setup = ui.card(
        "Learners and corpus",
        ui.field(
            "Learners",
            dcc.Checklist(id=ids.COMPARE_LEARNERS, options=learners, value=list(compare.LEARNER_LABELS)),
            "Each is trained on the same normalised text (paper normalisation) with the same splits: first 90% for "
            "training (its last tenth for validation, then a refit on all of it), last 10% for the test BPS.",
        ),
        ui.field(
            "Corpus",
            dcc.RadioItems(
                id=ids.COMPARE_CORPUS,
                options=[{"label": f" {label}", "value": value} for value, label in compare.CORPORA.items()],
                value="sample",
            ),
            f"The training part is capped at {compare.MAX_TRAIN_SYMBOLS:,} symbols.",
        ),
        html.Div(
            [
                html.Button("Compare", id=ids.COMPARE_START, className="button primary"),
                html.Button("Cancel", id=ids.COMPARE_CANCEL, className="button", disabled=True),
            ],
            className="buttons",
        ),
        html.Progress(id=ids.COMPARE_PROGRESS, value="0", max="100", className="progress"),
        html.Div(id=ids.COMPARE_PROGRESS_LABEL, className="hint"),
        dcc.Store(id=ids.COMPARE_RESULT, storage_type="memory"),
        html.Div(id=ids.COMPARE_MESSAGE),
    )
    results = ui.card(
        "Results",
        dash_table.DataTable(
            id=ids.COMPARE_TABLE,
            columns=COLUMNS,
            data=[],
            sort_action="native",
            style_cell={"textAlign": "left", "fontFamily": "inherit", "padding": "4px 8px"},
            style_header={"fontWeight": 600},
        ),
        dcc.Graph(id=ids.COMPARE_CHART, figure=compare.compare_figure(None), config={"displaylogo": False}),
    )
    return html.Div([html.H2("Compare learners"), setup, results])


def _view(saved: dict[str, Any] | None) -> tuple[str, str, list[dict[str, Any]], Any]:
    """Progress value, label, table rows and chart of a saved comparison."""
    value, label = compare.progress(saved)
    return str(value), label, compare.compare_rows(saved), compare.compare_figure(saved)


@callback(
    Output(ids.COMPARE_RESULT, "data"),
    Input(ids.COMPARE_START, "n_clicks"),
    State(ids.SESSION, "data"),
    State(ids.COMPARE_LEARNERS, "value"),
    State(ids.COMPARE_CORPUS, "value"),
    background=True,
    running=[(Output(ids.COMPARING_FLAG, "data"), True, False)],
    cancel=[Input(ids.COMPARE_CANCEL, "n_clicks")],
    progress=[Output(ids.COMPARING_PROGRESS, "data")],
    interval=1000,
    prevent_initial_call=True,
)
def run(set_progress: Any, _clicks: int | None, session_id: str | None, learners: Any, corpus: Any) -> dict[str, str]:
    """The background job: trains the picked learners; the figures go to the session folder, the page gets a
    status and a message."""
    ui.require_click(_clicks)
    try:
        folder = sessions.session_folder(session_id)
    except ui.EXPECTED_ERRORS as exc:
        return {"status": compare.REFUSED, "message": services.describe_error(exc)}
    with background.job_process():
        saved = compare.run_compare_job(folder, learners, corpus, report=lambda s: set_progress((s,)))
    return {"status": saved["status"], "message": saved.get("message", "")}


@callback(
    Output(ids.COMPARE_START, "disabled"),
    Output(ids.COMPARE_CANCEL, "disabled"),
    Input(ids.COMPARING_FLAG, "data"),
)
def show_running(running: bool | None) -> tuple[bool, bool]:
    """Start while no comparison of this tab runs, Cancel while one does (the flag lives in the app shell, so it
    is right when the page is opened again mid-job)."""
    return bool(running), not running


@callback(
    Output(ids.COMPARE_PROGRESS, "value"),
    Output(ids.COMPARE_PROGRESS_LABEL, "children"),
    Output(ids.COMPARE_TABLE, "data"),
    Output(ids.COMPARE_CHART, "figure"),
    Input(ids.COMPARING_PROGRESS, "data"),
    prevent_initial_call=True,
)
def show_progress(saved: dict[str, Any] | None) -> tuple[Any, ...]:
    """The running comparison as its background callback reports it."""
    return _view(saved) if saved else (no_update,) * 4


@callback(
    Output(ids.COMPARE_PROGRESS, "value", allow_duplicate=True),
    Output(ids.COMPARE_PROGRESS_LABEL, "children", allow_duplicate=True),
    Output(ids.COMPARE_TABLE, "data", allow_duplicate=True),
    Output(ids.COMPARE_CHART, "figure", allow_duplicate=True),
    Output(ids.COMPARE_MESSAGE, "children"),
    Input(ids.COMPARE_RESULT, "data"),
    Input(ids.SESSION, "data"),
    prevent_initial_call="initial_duplicate",
)
def show(result: dict[str, str] | None, session_id: str | None) -> tuple[Any, ...]:
    """On opening the page and after a job: the session's latest comparison, and the job's message."""
    try:
        saved = compare.latest_compare(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS as exc:
        return "0", "", [], compare.compare_figure(None), ui.error_message(exc)
    message: Any = None
    if result:
        kind = {compare.FINISHED: "ok", compare.CANCELLED: "info"}.get(result.get("status", ""), "error")
        message = ui.message(result.get("message", ""), kind)
        if result.get("status") == compare.REFUSED:  # the job did not run: keep the last comparison shown
            return no_update, no_update, no_update, no_update, message
    return (*_view(saved), message)


@callback(
    Output(ids.COMPARE_MESSAGE, "children", allow_duplicate=True),
    Input(ids.COMPARE_CANCEL, "n_clicks"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def cancel(_clicks: int | None, session_id: str | None) -> Any:
    """Write the cancel flag (the job stops before the next learner even where it cannot be killed)."""
    ui.require_click(_clicks)
    try:
        return ui.message(compare.request_cancel(sessions.session_folder(session_id)))
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc)
