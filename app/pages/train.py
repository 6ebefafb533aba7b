"""Train page: upload a corpus (or use the sample), preview it after normalisation, choose the options, train as a
background job with a live progress bar and BPS chart, cancel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dash
from dash import Input, Output, State, callback, dcc, html, no_update

from app import config, figures, forms, ids, panels, services, sessions, transfers, ui
from app.jobs import panel
from app.services import corpus as corpus_service
from app.services import training_jobs
from engine import api
from engine.api import TrainOptions, backend_choices, backend_status

dash.register_page(__name__, path="/train", name="Train", title="CHMM Explorer · Train", order=1)

DEFAULTS = TrainOptions()
"""The engine's training defaults, the same as the command line's and the Python API's (the recipe that wins: online
EM then batch EM, the states and pseudocount chosen on validation within the budget). An empty states, pseudocount,
batch size or restarts field is the engine's automatic choice."""
ALGORITHM_LABELS = {"em": "EM", "online": "online EM", "viterbi": "Viterbi EM"}
BACKEND_STATUS = {name: backend_status(name, cheap=True) for name in backend_choices(in_app=True)}
"""The Train page's backends (the engine's registry) and whether each can run here, judged without importing CuPy."""
BACKEND_NOTE = (
    "; ".join(
        f"{name.upper()} unavailable: {reason}."
        for name, (available, reason) in BACKEND_STATUS.items()
        if not available
    )
    or "Training runs on the chosen backend inside the background job."
)
FORM = [
    ("states", ids.TRAIN_STATES),
    ("allocation", ids.TRAIN_ALLOCATION),
    ("normalisation", ids.TRAIN_NORMALISATION),
    ("unit", ids.TRAIN_UNIT),
    ("algorithm", ids.TRAIN_ALGORITHM),
    ("iterations", ids.TRAIN_ITERATIONS),
    ("batch_size", ids.TRAIN_BATCH_SIZE),
    ("restarts", ids.TRAIN_RESTARTS),
    ("start", ids.TRAIN_START_KIND),
    ("pseudocount", ids.TRAIN_PSEUDOCOUNT),
    ("budget", ids.TRAIN_BUDGET),
    ("validation", ids.TRAIN_VALIDATION),
    ("seed", ids.TRAIN_SEED),
    ("backend", ids.TRAIN_BACKEND),
]
FORM_STATES = [State(component, "value") for _, component in FORM]
FORM_INPUTS = [Input(component, "value") for _, component in FORM]


def form_values(values: tuple[Any, ...]) -> dict[str, Any]:
    """The form's values by option name, in the order of :data:`FORM`."""
    return {name: value for (name, _), value in zip(FORM, values, strict=True)}


REMEMBERED = {"persistence": True, "persistence_type": "session"}
"""Form fields keep the last values the user set (per browser tab, through reloads and page changes)."""


def _number(component: str, value: float | None, placeholder: str | None = None) -> dcc.Input:
    """A number field without min/max/step: the browser would turn a value outside them into None, silently; the
    server checks every value and says what range it accepts. An empty field with a placeholder means automatic."""
    return dcc.Input(
        id=component,
        type="number",
        value=value,
        step="any",
        debounce=True,
        className="num",
        placeholder=placeholder,
        **REMEMBERED,
    )


AUTO_PLACEHOLDER = "chosen on validation"


def _shown(value: Any) -> Any:
    """A default as a number field shows it: empty (the placeholder) for one chosen on validation."""
    return None if value == api.CHOICES.AUTO else value


def layout(**_query: Any) -> html.Div:
    limit = config.max_upload_bytes()
    corpus = ui.card(
        "Corpus",
        ui.told_upload(
            dcc.Upload(
                html.Div(
                    [
                        "Drop UTF-8 text files (.txt) here, one or several (each file a document), or a .zip of them, "
                        "or ",
                        html.A("choose files"),
                    ]
                ),
                id=ids.CORPUS_UPLOAD,
                multiple=True,
                max_size=config.browser_upload_bytes(limit),  # beyond it the browser refuses (the script says why)
                className="upload",
            ),
            "corpus",
            transfers.UPLOAD_LIMITS["corpus"](),
            ids.CORPUS_MESSAGE,
        ),
        ui.buttons(
            html.Button("Use the sample corpus (Alice in Wonderland)", id=ids.CORPUS_SAMPLE_BUTTON),
            html.Span(
                f"Uploads up to {services.format_bytes(limit)} per file and in all (CHMM_MAX_UPLOAD_MB).",
                className="hint",
            ),
        ),
        dcc.Store(id=ids.CORPUS_VERSION, storage_type="memory", data=0),
        html.Div(id=ids.CORPUS_MESSAGE),
        html.Div(id=ids.CORPUS_PREVIEW),
    )
    options = ui.card(
        "Options",
        html.Div(
            [
                ui.field(
                    "States (clones)",
                    _number(ids.TRAIN_STATES, _shown(DEFAULTS.states), AUTO_PLACEHOLDER),
                    f"empty: chosen on validation from {', '.join(f'{n:,}' for n in api.CHOICES.STATES_GRID)} (up to "
                    f"one per {api.DEFAULTS.SYMBOLS_PER_STATE} training symbols and the memory limit)",
                ),
                ui.field(
                    "Allocation",
                    dcc.Dropdown(
                        id=ids.TRAIN_ALLOCATION,
                        **REMEMBERED,
                        options=list(api.CHOICES.ALLOCATION_METHODS),
                        value=DEFAULTS.allocation,
                        clearable=False,
                    ),
                    "clones per symbol: n-gram counts, symbol frequency or equal",
                ),
                ui.field(
                    "Normalisation",
                    dcc.RadioItems(
                        id=ids.TRAIN_NORMALISATION,
                        **REMEMBERED,
                        options=list(api.CHOICES.NORMALISATIONS),
                        value=DEFAULTS.normalisation,
                        inline=True,
                    ),
                    "paper: lowercase letters and spaces, rare words replaced; raw: every character",
                ),
                ui.field(
                    "Unit",
                    dcc.RadioItems(
                        id=ids.TRAIN_UNIT,
                        **REMEMBERED,
                        options=list(api.CHOICES.UNITS),
                        value=DEFAULTS.unit,
                        inline=True,
                    ),
                    "what one symbol is: a character; a word (lowercase, numbers written out, words seen once as "
                    "<rare>); a token as given, between spaces",
                ),
                ui.field(
                    "Algorithm",
                    dcc.RadioItems(
                        id=ids.TRAIN_ALGORITHM,
                        **REMEMBERED,
                        options=[{"label": ALGORITHM_LABELS[name], "value": name} for name in api.CHOICES.ALGORITHMS],
                        value=DEFAULTS.algorithm,
                        inline=True,
                    ),
                ),
                ui.field(
                    "Iterations (at most)",
                    _number(ids.TRAIN_ITERATIONS, DEFAULTS.iterations),
                    "online EM's epochs, then batch EM's iterations; early stopping on validation ends most runs "
                    "sooner",
                ),
                ui.field(
                    "Batch size (online EM)",
                    _number(ids.TRAIN_BATCH_SIZE, None, "automatic"),
                    f"empty: {api.DEFAULTS.ONLINE_BATCH_SIZE}, or {api.DEFAULTS.BATCH_PER_BLOCK} symbols per "
                    f"symbol-pair block when more",
                ),
                ui.field(
                    "Restarts",
                    _number(ids.TRAIN_RESTARTS, None, "automatic"),
                    f"random starts, the best on validation kept; empty: {api.DEFAULTS.ONLINE_RESTARTS} for online "
                    f"EM, 1 otherwise",
                ),
                ui.field(
                    "Start",
                    dcc.RadioItems(
                        id=ids.TRAIN_START_KIND,
                        **REMEMBERED,
                        options=list(api.CHOICES.STARTS),
                        value=DEFAULTS.start,
                        inline=True,
                    ),
                    f"T's random start; aligned: {round(api.DEFAULTS.ALIGNED_SHARE * 100)}% of each clone's row on "
                    "clone c of each next symbol, so a context rides a chain of clones; uniform: the paper's; restarts "
                    "alternate",
                ),
                ui.field(
                    "Pseudocount",
                    _number(ids.TRAIN_PSEUDOCOUNT, _shown(DEFAULTS.pseudocount), AUTO_PLACEHOLDER),
                    "added to every stored transition count in the M-step (smoothing); empty: chosen on validation "
                    f"from {', '.join(f'{v:g}' for v in api.CHOICES.PSEUDOCOUNT_GRID)}",
                ),
                ui.field(
                    "Budget (minutes)",
                    _number(ids.TRAIN_BUDGET, DEFAULTS.budget),
                    "the time the choice of states and pseudocount may take (candidates and restarts predicted to "
                    "pass it are left out); the refit comes after it",
                ),
                ui.field("Validation share", _number(ids.TRAIN_VALIDATION, DEFAULTS.validation), "0 to 0.5"),
                ui.field("Seed", _number(ids.TRAIN_SEED, DEFAULTS.seed)),
                ui.field(
                    "Backend",
                    dcc.RadioItems(
                        id=ids.TRAIN_BACKEND,
                        **REMEMBERED,
                        options=[
                            {"label": html.Span(name.upper(), title=BACKEND_NOTE), "value": name, "disabled": not ok}
                            for name, (ok, _) in BACKEND_STATUS.items()
                        ],
                        value=DEFAULTS.backend,
                        inline=True,
                    ),
                    BACKEND_NOTE,
                ),
                html.Div(id=ids.TRAIN_CLUSTER_NOTE, children=training_jobs.cluster_note(), className="hint"),
            ],
            className="form-grid",
        ),
        html.Div(id=ids.TRAIN_ESTIMATE),
        panels.TRAINING.buttons("Start training"),
    )
    progress = ui.card(
        "Progress",
        *panels.TRAINING.progress_bar(),
        dcc.Graph(id=ids.TRAIN_CHART, figure=figures.empty_figure(), config={"displaylogo": False}),
        panels.TRAINING.status_line(),
        *panels.TRAINING.watchers(),
    )
    runs = ui.card(
        "This session's trainings",
        dcc.Graph(id=ids.TRAIN_RUNS_CHART, figure=figures.empty_figure(), config={"displaylogo": False}),
        html.Div(
            "Every training of this session (the last 20), overlaid to compare settings; click a legend entry to hide "
            "or show a run.",
            className="hint",
        ),
    )
    return html.Div([html.H2("Train a model"), html.Div([corpus, options], className="two-columns"), progress, runs])


@callback(
    Output(ids.TRAIN_RUNS_CHART, "figure"),
    Input(ids.SESSION, "data"),
    Input(panels.TRAINING.flag, "data"),
)
def show_runs(session_id: str | None, _running: Any) -> Any:
    """The session's trainings overlaid, on opening the page and after every training that ends (not on the job's
    result or the status line it writes: the renderer holds back the callbacks that read a running job's result
    until it ends, and the job's callback runs on every page)."""
    try:
        runs = training_jobs.read_runs(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS:
        return figures.empty_figure()
    return figures.runs_figure(runs, [training_jobs.run_label(run) for run in runs])


# ------------------------------------------------------------------------------------------ corpus
def _upload(folder: Path, contents: Any, filename: Any) -> str:
    """Keep an uploaded corpus (one file, several, or a zip of documents) as the session's, and say what it is."""
    info = corpus_service.store_corpus(folder, contents, filename)
    what = f"{info.name}: {info.bytes:,} bytes, {info.characters:,} characters"
    if info.documents > 1:
        what += " (each document an independent sequence, split by the same rule)"
    return f"Uploaded {what}."


upload_corpus = ui.session_action(
    Output(ids.CORPUS_MESSAGE, "children"),
    Output(ids.CORPUS_VERSION, "data"),
    Input(ids.CORPUS_UPLOAD, "contents"),
    _upload,
    State(ids.CORPUS_UPLOAD, "filename"),
)


def _sample(folder: Path, _clicks: Any) -> str:
    """Use the bundled sample corpus as the session's, and say what it is."""
    info = corpus_service.use_sample_corpus(folder)
    return f"Using {info.name}: {info.bytes:,} bytes, {info.characters:,} characters."


sample_corpus = ui.session_action(
    Output(ids.CORPUS_MESSAGE, "children", allow_duplicate=True),
    Output(ids.CORPUS_VERSION, "data", allow_duplicate=True),
    Input(ids.CORPUS_SAMPLE_BUTTON, "n_clicks"),
    _sample,
)


def preview_view(preview: dict[str, Any]) -> html.Div:
    """Size, alphabet, splits and the start of the normalised text."""
    vocabulary = preview.get("vocabulary")
    return html.Div(
        [
            ui.facts(
                [
                    ("File", f"{preview['name']}: {preview['bytes']:,} bytes, {preview['characters']:,} characters"),
                    (
                        "Documents",
                        None
                        if preview.get("documents", 1) == 1
                        else f"{preview['documents']}: each split by the same rule (last 10% test, then validation)",
                    ),
                    ("Alphabet", f"{preview['alphabet_size']} symbols: {preview['alphabet']}"),
                    ("Vocabulary", None if vocabulary is None else f"{vocabulary:,} words seen at least twice"),
                    ("Unit", preview.get("unit")),
                    (
                        "Symbols",
                        f"{preview['train']:,} train, {preview['validation']:,} validation, {preview['test']:,} test",
                    ),
                ]
            ),
            html.Div(f"Preview after {preview['normalisation']} normalisation:", className="field-label"),
            html.Pre(preview["preview"], className="preview"),
        ]
    )


@callback(
    Output(ids.CORPUS_PREVIEW, "children"),
    Input(ids.CORPUS_VERSION, "data"),
    Input(ids.TRAIN_NORMALISATION, "value"),
    Input(ids.TRAIN_UNIT, "value"),
    Input(ids.TRAIN_VALIDATION, "value"),
    Input(ids.SESSION, "data"),
)
def show_preview(_version: Any, normalisation: str, unit: str, validation: Any, session_id: str | None) -> Any:
    try:
        folder = sessions.session_folder(session_id)
        if corpus_service.corpus_info(folder) is None:
            return ui.message("No corpus yet: upload a .txt file or use the sample corpus.")
        share = float(validation) if validation not in (None, "") else 0.1
        return preview_view(
            corpus_service.corpus_preview(folder, normalisation or "paper", share, unit or "characters")
        )
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc)


@callback(
    Output(ids.TRAIN_ESTIMATE, "children"),
    Input(ids.CORPUS_VERSION, "data"),
    Input(ids.SESSION, "data"),
    *FORM_INPUTS,
)
def show_estimate(_version: Any, session_id: str | None, *values: Any) -> Any:
    """The estimated memory of the run, or why it cannot start (checked again by the job itself)."""
    try:
        folder = sessions.session_folder(session_id)
        if corpus_service.corpus_info(folder) is None:
            return None
        options = forms.options_from_form(form_values(values))
        return ui.message(training_jobs.check_training(folder, options).message)
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc)


# ------------------------------------------------------------------------------------------ the training job
def _queue(folder: Path, *values: Any) -> None:
    """Check a training of the form's settings and put it into the server's queue."""
    training_jobs.queue_training(folder, forms.options_from_form(form_values(values)))


start = panels.TRAINING.register_start(_queue, *FORM_STATES, note=training_jobs.worker_note)
"""Start: with Celery, a view that waits says when no worker runs (the job would only wait)."""


def _train_job(folder: Path, ticket: Any, report: Any) -> dict[str, str]:
    """The training job of a queued training whose turn has come (:func:`training_jobs.run_queued_training`): its
    model goes to the session folder, the page gets a small key and message."""
    return training_jobs.run_queued_training(folder, ticket, report=report).as_dict()


train, show_queued, show_running = panels.TRAINING.register(
    _train_job, "Training stopped: {exc}. The previous model is still current."
)
QUEUE_ACTIVE = panel.QUEUE_ACTIVE


@callback(
    Output(panels.TRAINING.bar, "value"),
    Output(panels.TRAINING.label, "children"),
    Output(ids.TRAIN_CHART, "figure"),
    Output(panels.TRAINING.status, "children", allow_duplicate=True),
    Input(panels.TRAINING.progress, "data"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def show_progress(progress: dict[str, Any] | None, session_id: str | None) -> tuple[Any, Any, Any, Any]:
    """The running job's progress, as its background callback reports it, and the status line kept current. A
    progress that reaches the page after its job ended (a poll answered just before a Cancel killed the job) says
    how the job ended instead of its running stage: it once left "Training for 3.0 s: restart 1 of 4." standing
    over the Cancel's "cancelled" for good (:meth:`app.jobs.panel.JobPanel.ended_outcome`)."""
    if not progress:
        return no_update, no_update, no_update, no_update
    value, label, figure = figures.progress_view(progress)
    status = figures.running_status(progress)
    return panels.TRAINING.progress_outputs(session_id, progress, (figures.bar_value(value), label, figure), status)


@callback(
    Output(panels.TRAINING.status, "children"),
    Input(panels.TRAINING.result, "data"),
    prevent_initial_call=True,
)
def show_result(result: dict[str, str] | None) -> Any:
    """The job's message when it ends. The new model reaches the badge and the pages through the app shell's model
    watch (``main.watch_model``, within two seconds): a model version written here would hold back every callback
    that reads it, on every page, while a job runs."""
    if not result:
        return no_update
    return ui.outcome_message(result)


def _cancelled(message: str) -> tuple[str, str] | None:
    """The progress bar and its label after a cancel (reset: the cancelled run's "iteration 2 of at most 30, 1 min
    left" must not stay on the page), unless the job had already finished."""
    return None if message.startswith("The job had already finished") else ("0", f"Cancelled: {message}")


cancel = panels.TRAINING.register_cancel(training_jobs.request_cancel, _cancelled)


@callback(
    Output(panels.TRAINING.bar, "value", allow_duplicate=True),
    Output(panels.TRAINING.label, "children", allow_duplicate=True),
    Output(ids.TRAIN_CHART, "figure", allow_duplicate=True),
    Input(ids.SESSION, "data"),
    State(panels.TRAINING.queued, "data"),
    prevent_initial_call="initial_duplicate",
)
def show_last_job(session_id: str | None, queued: dict[str, Any] | None) -> tuple[Any, Any, Any]:
    """On opening the page: the latest job's progress (it may still be running, or have finished meanwhile), or the
    place of the session's training in the queue."""
    try:
        progress = training_jobs.read_progress(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS as exc:
        return "0", services.describe_error(exc), figures.empty_figure()
    value, label, figure = figures.progress_view(progress)
    if (queued or {}).get("state") in QUEUE_ACTIVE:
        return "0", queued.get("message", ""), figure
    return figures.bar_value(value), label, figure


def _followed(folder: Path, running: bool) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The training job's progress as the page shows it (its bar, label and chart) and, once it has ended, how it
    ended in the status line (a job cancelled from a page opened again mid-job returns no result to say it)."""
    value, label, figure = figures.progress_view(training_jobs.read_progress(folder))
    record = None if running else training_jobs.read_job(folder)
    return (figures.bar_value(value), label, figure), (ui.outcome_message(record) if record else no_update,)


follow_job = panels.TRAINING.register_follow(
    training_jobs.reap_dead_job,
    _followed,
    shown=(Output(ids.TRAIN_CHART, "figure", allow_duplicate=True),),
)
