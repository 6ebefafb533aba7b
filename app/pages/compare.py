"""Compare page: train a CHMM and the peer learners (DenseHMM, HMM, PAC PDFA, Kneser-Ney n-gram) on the session's
corpus or the sample, as one background job, and show test BPS, training seconds and parameters side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dash
from dash import ALL, Input, Output, State, callback, dcc, html, no_update

from app import figures, forms, grids, ids, jobs, panels, sessions, ui
from app.jobs import panel
from app.services import comparisons
from engine import api

dash.register_page(__name__, path="/compare", name="Compare", title="CHMM Explorer · Compare", order=7)

COLUMNS = [
    grids.column("learner", "Learner", minWidth=160),
    grids.column("test_bps", "Test BPS", "number"),
    grids.column("validation_bps", "Validation BPS", "number"),
    grids.column("train_bps", "Train BPS", "number"),
    grids.column("seconds", "Seconds", "number"),
    grids.column("parameters", "Parameters", ","),
    grids.column("status", "Progress", minWidth=160),
]


def settings_fields() -> html.Div:
    """One row per learner with its settings (empty: the default shown as the placeholder)."""
    rows = []
    for kind, settings in forms.SETTINGS.items():
        fields: list[Any] = [html.Span(forms.SHORT_NAMES[kind], className="field-label setting-learner")]
        for setting in settings:
            fields.append(
                html.Label(
                    [
                        f"{setting.label} ",
                        dcc.Input(
                            id={"type": ids.COMPARE_SETTING, "learner": kind, "option": setting.option},
                            type="number",
                            step="any",
                            placeholder=str(setting.default),
                            debounce=True,
                            className="num small",
                            persistence=True,
                            persistence_type="session",
                        ),
                    ],
                    className="setting",
                )
            )
        if not settings:
            fields.append(html.Span("no settings (its own defaults)", className="hint"))
        rows.append(html.Div(fields, className="setting-row"))
    return html.Div(rows, className="settings")


def layout(**_query: Any) -> html.Div:
    learners = [
        {"label": f" {forms.LEARNER_LABELS[kind]}", "value": kind, "disabled": forms.unavailable(kind) is not None}
        for kind in forms.LEARNER_LABELS
    ]
    missing = " ".join(sentence for kind in forms.LEARNER_LABELS if (sentence := forms.unavailable(kind)))
    setup = ui.card(
        "Learners and corpus",
        ui.field(
            "Learners",
            dcc.Checklist(
                id=ids.COMPARE_LEARNERS,
                options=learners,
                value=forms.PICKED,
                persistence=True,
                persistence_type="session",
            ),
            "Each is trained on the same normalised text (paper normalisation) with the same splits: first 90% for "
            "training (its last tenth for validation, then a refit on all of it), last 10% for the test BPS."
            + (f" {missing}" if missing else ""),
        ),
        ui.field("Settings", settings_fields(), "Empty fields take the default shown."),
        ui.field(
            "Corpus",
            dcc.RadioItems(
                id=ids.COMPARE_CORPUS,
                options=[{"label": f" {label}", "value": value} for value, label in comparisons.CORPORA.items()],
                value=None,
            ),
            f"The training part is capped at {comparisons.MAX_TRAIN_SYMBOLS:,} symbols.",
        ),
        ui.field(
            "Unit",
            dcc.RadioItems(
                id=ids.COMPARE_UNIT,
                options=list(api.CHOICES.UNITS),
                value=api.CHOICES.UNITS[0],
                inline=True,
                persistence=True,
                persistence_type="session",
            ),
            "what one symbol is, for every learner: a character, a word (words seen once as <rare>), a token",
        ),
        html.Div(id=ids.COMPARE_ESTIMATE, className="hint"),
        panels.COMPARISON.buttons("Compare"),
        *panels.COMPARISON.progress_bar(),
        *panels.COMPARISON.watchers(state=False),
        panels.COMPARISON.status_line(),
    )
    results = ui.card(
        "Results",
        grids.grid(ids.COMPARE_TABLE, COLUMNS, csv_button=ids.COMPARE_TABLE_CSV, file_name="comparison.csv", rows=6),
        dcc.Graph(id=ids.COMPARE_CHART, figure=figures.compare_figure(None), config={"displaylogo": False}),
        ui.buttons(
            html.Button(
                "Make the compared CHMM the current model",
                id=ids.COMPARE_MAKE_CURRENT,
                className="button",
                disabled=True,
            )
        ),
    )
    return html.Div([html.H2("Compare learners"), setup, results])


grids.export_on_click(ids.COMPARE_TABLE, ids.COMPARE_TABLE_CSV)


def _view(saved: dict[str, Any] | None) -> tuple[str, str, list[dict[str, Any]], Any]:
    """Progress value, label, table rows and chart of a saved comparison."""
    value, label = figures.compare_progress(saved)
    return str(value), label, figures.compare_rows(saved), figures.compare_figure(saved)


def _queue(
    folder: Path, learners: Any, corpus: Any, unit: Any, values: list[Any], setting_ids: list[dict[str, str]]
) -> None:
    """Check a comparison of the picked learners with the typed settings and put it into the server's queue."""
    options = forms.learner_settings(typed_settings(values, setting_ids))
    comparisons.queue_comparison(folder, learners, corpus, options, unit)


start = panels.COMPARISON.register_start(
    _queue,
    State(ids.COMPARE_LEARNERS, "value"),
    State(ids.COMPARE_CORPUS, "value"),
    State(ids.COMPARE_UNIT, "value"),
    State({"type": ids.COMPARE_SETTING, "learner": ALL, "option": ALL}, "value"),
    State({"type": ids.COMPARE_SETTING, "learner": ALL, "option": ALL}, "id"),
)


def _compare_job(folder: Path, ticket: Any, report: Any) -> dict[str, str]:
    """The job of a queued comparison whose turn has come: trains the picked learners with the settings its ticket
    holds; the figures go to the session folder, the page gets a status and a message."""
    saved = comparisons.run_queued_comparison(folder, ticket, report=report)
    return {"status": saved["status"], "message": saved.get("message", "")}


run, show_queued, show_running = panels.COMPARISON.register(_compare_job, "The comparison stopped: {exc}.")


def typed_settings(values: list[Any], setting_ids: list[dict[str, str]]) -> dict[str, dict[str, Any]]:
    """The settings fields' values by learner and option."""
    typed: dict[str, dict[str, Any]] = {}
    for value, key in zip(values or [], setting_ids or [], strict=False):
        typed.setdefault(key["learner"], {})[key["option"]] = value
    return typed


@callback(
    Output(ids.COMPARE_CORPUS, "value"),
    Input(ids.SESSION, "data"),
    State(ids.COMPARE_CORPUS, "value"),
)
def choose_corpus(session_id: str | None, chosen: str | None) -> Any:
    """The session's corpus by default when it has one (the sample otherwise)."""
    if chosen:
        return no_update
    try:
        return comparisons.default_corpus(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS:
        return "sample"


@callback(
    Output(ids.COMPARE_ESTIMATE, "children"),
    Input(ids.COMPARE_CORPUS, "value"),
    Input(ids.COMPARE_LEARNERS, "value"),
    Input({"type": ids.COMPARE_SETTING, "learner": ALL, "option": ALL}, "value"),
    State({"type": ids.COMPARE_SETTING, "learner": ALL, "option": ALL}, "id"),
    State(ids.SESSION, "data"),
)
def show_estimate(
    corpus: Any, learners: Any, values: list[Any], setting_ids: list[dict[str, str]], session_id: str | None
) -> Any:
    """Each picked learner's time, estimated from the corpus's size and the settings."""
    if not corpus or not learners:
        return None
    try:
        folder = sessions.session_folder(session_id)
        options = forms.learner_settings(typed_settings(values, setting_ids))
        kinds = forms.check_learners(learners)
        symbols = comparisons.training_symbols(folder, corpus)
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc)
    if not symbols:
        return None
    seconds = {k: forms.estimate_seconds(k, forms.APP_OPTIONS[k] | options[k], symbols) for k in kinds}
    parts = [f"{forms.SHORT_NAMES[k]} about {figures.rough_duration(seconds[k])}" for k in kinds]
    return f"Estimated on {symbols:,} training symbols: " + ", ".join(parts) + " (rates measured on a 2-core machine)."


@callback(
    Output(panels.COMPARISON.bar, "value"),
    Output(panels.COMPARISON.label, "children"),
    Output(ids.COMPARE_TABLE, "rowData"),
    Output(ids.COMPARE_CHART, "figure"),
    Output(panels.COMPARISON.status, "children", allow_duplicate=True),
    Input(panels.COMPARISON.progress, "data"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def show_progress(saved: dict[str, Any] | None, session_id: str | None) -> tuple[Any, ...]:
    """The running comparison as its background callback reports it, and the status line kept current (how the job
    ended instead, for a progress that arrives after it: :meth:`app.jobs.panel.JobPanel.ended_outcome`)."""
    if not saved:
        return (no_update,) * 5
    view = _view(saved)
    status = figures.job_status("Comparing", saved, view[1])
    return panels.COMPARISON.progress_outputs(session_id, saved, view, status)


@callback(
    Output(panels.COMPARISON.bar, "value", allow_duplicate=True),
    Output(panels.COMPARISON.label, "children", allow_duplicate=True),
    Output(ids.COMPARE_TABLE, "rowData", allow_duplicate=True),
    Output(ids.COMPARE_CHART, "figure", allow_duplicate=True),
    Output(panels.COMPARISON.status, "children"),
    Input(ids.SESSION, "data"),
    State(panels.COMPARISON.queued, "data"),
    prevent_initial_call="initial_duplicate",
)
def show(session_id: str | None, queued: dict[str, Any] | None) -> tuple[Any, ...]:
    """On opening the page: the session's latest comparison, or the place of the one waiting in the queue (a
    callback apart from :func:`show_result`, whose input a running job writes: the renderer holds back the callbacks
    that read a running job's result until it ends)."""
    try:
        saved = comparisons.latest_compare(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS as exc:
        return "0", "", [], figures.compare_figure(None), ui.error_message(exc)
    value, label, rows, chart = _view(saved)
    if (queued or {}).get("state") in ("waiting", "starting"):
        return "0", queued.get("message", ""), rows, chart, ui.message(queued.get("message", ""))
    return value, label, rows, chart, None


@callback(
    Output(panels.COMPARISON.bar, "value", allow_duplicate=True),
    Output(panels.COMPARISON.label, "children", allow_duplicate=True),
    Output(ids.COMPARE_TABLE, "rowData", allow_duplicate=True),
    Output(ids.COMPARE_CHART, "figure", allow_duplicate=True),
    Output(panels.COMPARISON.status, "children", allow_duplicate=True),
    Input(panels.COMPARISON.result, "data"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def show_result(result: dict[str, str] | None, session_id: str | None) -> tuple[Any, ...]:
    """After a job: the session's latest comparison, and the job's message."""
    if not result:
        return (no_update,) * 5
    message = ui.outcome_message(result)
    if result.get("status") == jobs.REFUSED:  # the job did not run: keep the last comparison shown
        return no_update, no_update, no_update, no_update, message
    try:
        saved = comparisons.latest_compare(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS as exc:
        return "0", "", [], figures.compare_figure(None), ui.error_message(exc)
    return (*_view(saved), message)


cancel = panels.COMPARISON.register_cancel(comparisons.request_cancel)
"""Cancel: a waiting comparison leaves the queue, a running one stops before the next learner."""


@callback(
    Output(panels.COMPARISON.bar, "value", allow_duplicate=True),
    Output(panels.COMPARISON.label, "children", allow_duplicate=True),
    Output(ids.COMPARE_TABLE, "rowData", allow_duplicate=True),
    Output(panels.COMPARISON.watch, "interval"),
    Input(panels.COMPARISON.watch, "n_intervals"),
    Input(panels.COMPARISON.flag, "data"),  # at once when this tab's comparison starts
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def follow(_ticks: Any, _running: Any, session_id: str | None) -> tuple[Any, ...]:
    """Every second while a comparison runs: per-learner progress (iterations, or time against the estimate), so
    the bar moves while a learner trains; every :data:`app.jobs.panel.IDLE_FOLLOW_MS` while none does."""
    try:
        folder = sessions.session_folder(session_id)
        if not comparisons.compare_running(folder):
            return (no_update,) * 3 + (panel.IDLE_FOLLOW_MS,)
        saved = comparisons.latest_compare(folder)
    except ui.EXPECTED_ERRORS:
        return (no_update,) * 3 + (panel.IDLE_FOLLOW_MS,)
    value, label = figures.compare_progress(saved)
    return str(value), label, figures.compare_rows(saved), panel.FOLLOW_MS


@callback(
    Output(ids.COMPARE_MAKE_CURRENT, "disabled"),
    Input(ids.SESSION, "data"),
    Input(panels.COMPARISON.flag, "data"),
)
def allow_make_current(session_id: str | None, _running: Any) -> bool:
    """The button works when the last comparison kept a CHMM (asked on opening the page and when a job ends)."""
    try:
        saved = comparisons.latest_compare(sessions.session_folder(session_id)) or {}
    except ui.EXPECTED_ERRORS:
        return True
    return not any(row.get("model") for row in saved.get("results") or [])


make_current = ui.session_action(
    Output(panels.COMPARISON.status, "children", allow_duplicate=True),
    Output(ids.MODEL_VERSION, "data", allow_duplicate=True),
    Input(ids.COMPARE_MAKE_CURRENT, "n_clicks"),
    lambda folder, _clicks: comparisons.make_compared_current(folder),
)
"""Make the CHMM of the last comparison the current model."""
