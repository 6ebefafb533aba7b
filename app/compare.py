"""Services of the Compare page: train the picked learners (a CHMM and the peer learners of issue 9) on one corpus,
as a background job, and show their test BPS, training time and parameter count side by side.

The job (:func:`run_compare_job`) reads the corpus (the session's or the bundled sample), trains each learner in
turn through :func:`engine.learners.train_learner_text` (the same normalisation, splits and refit for every
learner) and rewrites ``compare.json`` in the session folder after each one, so the page can show the rows that are
done while the rest train. One learner failing does not stop the others: its row says why. While the job runs it
touches ``compare-heartbeat`` every second; the Cancel button writes ``compare-cancel``, which stops the CHMM within
an iteration and the job before the next learner. Everything numeric happens in :mod:`engine`; this module only
checks input, calls the registry and turns its figures into rows and a plotly figure.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app import config, services, sessions
from app.background import CANCELLED, FAILED, FINISHED, REFUSED, RUNNING, JobFiles, JobSlot
from app.services import UserError
from app.services import corpus as corpus_service
from engine import learners, learning, model_files, text, training
from engine.errors import error_message

COMPARE = "compare.json"
HEARTBEAT = "compare-heartbeat"
CANCEL = "compare-cancel"
DONE, PENDING, TRAINING, SKIPPED = "done", "pending", "training", "skipped"

CORPORA = {"sample": "the sample corpus (Alice in Wonderland)", "session": "this session's corpus (Train page)"}
MAX_TRAIN_SYMBOLS = 400_000
"""The training part is capped at this many symbols so that a comparison takes minutes, not hours."""
LEARNER_LABELS = {
    "chmm": "CHMM (online EM)",
    "densehmm": "DenseHMM (Sicking et al.)",
    "hmm": "HMM (Baum-Welch)",
    "pdfa": "PAC PDFA (Gavaldà et al.)",
    "ngram": "Kneser-Ney n-gram",
}
SHORT_NAMES = {"chmm": "CHMM", "densehmm": "DenseHMM", "hmm": "HMM", "pdfa": "PAC PDFA", "ngram": "n-gram"}
"""Display names of the learners in charts."""
APP_OPTIONS: dict[str, dict[str, Any]] = {
    "chmm": {"states": 1000, "algorithm": "online", "batch_size": 2000, "iterations": 30, "pseudocount": 1e-3},
    "densehmm": {},
    "hmm": {},
    "pdfa": {},
    "ngram": {},
}
"""The settings each learner trains with here (the peers: the registry's defaults for text)."""


@dataclass(frozen=True)
class Setting:
    """A learner setting the page offers: its option name, label, default and range (whole numbers)."""

    option: str
    label: str
    default: int
    low: int
    high: int


SETTINGS: dict[str, tuple[Setting, ...]] = {
    "chmm": (Setting("states", "clones", 1000, 2, 10_000), Setting("iterations", "iterations", 30, 1, 500)),
    "densehmm": (Setting("n_states", "states", 100, 2, 1000), Setting("dim", "l (embedding size)", 16, 1, 256)),
    "hmm": (Setting("n_states", "states", 100, 2, 1000),),
    "pdfa": (),
    "ngram": (Setting("max_order", "order at most", 8, 1, 20),),
}
"""The settings each learner takes on the page (defaults as :data:`APP_OPTIONS` and the registry's)."""

SECONDS_PER_SYMBOL = {"chmm": 10 / 106_910, "densehmm": 49 / 106_910, "hmm": 50 / 106_910, "pdfa": 4 / 106_910,
                      "ngram": 0.4 / 106_910}  # fmt: skip
"""Training seconds per training symbol at the default settings, measured on carroll-alice.txt (106,910 training
symbols, 2 cores; engine/learners.py), for the time estimates."""


def _shown_settings(kind: str, options: dict[str, Any]) -> dict[str, Any]:
    """The page's settings of a learner (defaults filled in) as it trains."""
    return {s.option: options.get(s.option, s.default) for s in SETTINGS[kind]}


def estimate_seconds(kind: str, settings: dict[str, Any], symbols: int) -> float:
    """A rough training time: the measured rate (:data:`SECONDS_PER_SYMBOL`) times the training symbols, scaled by
    the settings' cost (states squared for the HMMs and the CHMM's dense blocks, iterations, the n-gram order)."""
    seconds = SECONDS_PER_SYMBOL[kind] * symbols
    defaults = {s.option: s.default for s in SETTINGS[kind]}
    scale = 1.0
    for option in ("states", "n_states"):
        if option in defaults and option in settings:
            scale *= (float(settings[option]) / defaults[option]) ** 2
    for option in ("iterations", "dim", "max_order"):
        if option in defaults and option in settings:
            scale *= float(settings[option]) / defaults[option]
    return seconds * scale


def learner_settings(values: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """The page's settings as learner options: each typed value checked as a whole number in its range (UserError
    with a sentence otherwise); an empty field takes the default."""
    chosen: dict[str, dict[str, Any]] = {}
    for kind, settings in SETTINGS.items():
        given = (values or {}).get(kind, {})
        chosen[kind] = {}
        for setting in settings:
            value = given.get(setting.option)
            if value in (None, ""):
                continue
            what = f"the {SHORT_NAMES[kind]}'s {setting.label}"
            chosen[kind][setting.option] = services.whole_number(value, what, setting.low, setting.high)
    return chosen


COLOURS = {"chmm": "#1f77b4", "densehmm": "#9467bd", "hmm": "#d62728", "pdfa": "#2ca02c", "ngram": "#ff7f0e"}

ProgressReport = Callable[[dict[str, Any]], None]


# ------------------------------------------------------------------------------------------ files
def _write(folder: Path, saved: dict[str, Any]) -> None:
    saved["updated"] = time.time()
    compare_files(folder).write(saved)


def compare_files(folder: Path) -> JobFiles:
    """The comparison job's record, heartbeat and cancel flag in a session folder."""
    return JobFiles(folder / COMPARE, folder / HEARTBEAT, folder / CANCEL)


def read_compare(folder: Path) -> dict[str, Any] | None:
    """The session's latest comparison (None before any, or when the file is unreadable)."""
    saved = compare_files(folder).read()
    return saved if saved is not None and isinstance(saved.get("results"), list) else None


def compare_running(folder: Path, now: float | None = None) -> bool:
    """Whether a comparison of this session is running (see :meth:`app.background.JobFiles.running`)."""
    saved = read_compare(folder)
    return saved is not None and compare_files(folder).running(now, saved)


# ------------------------------------------------------------------------------------------ input
def check_learners(picked: Any) -> list[str]:
    """The picked learners in the order of :data:`engine.learners.LEARNERS`; UserError when none is picked
    or one is unknown."""
    if not picked:
        raise UserError("Pick at least one learner to compare.")
    if isinstance(picked, str):
        picked = [picked]
    unknown = [str(kind) for kind in picked if kind not in learners.LEARNERS]
    if unknown:
        raise UserError(f"Unknown learner {unknown[0]!r}; choose among {', '.join(learners.LEARNERS)}.")
    return [kind for kind in learners.LEARNERS if kind in picked]


def compare_corpus(folder: Path, choice: Any) -> tuple[str, str]:
    """The text and name of the corpus to compare on: "sample" (the bundled ``carroll-alice.txt``) or "session" (the
    corpus uploaded on the Train page); UserError for anything else or a missing corpus."""
    if choice == "sample":
        if not config.SAMPLE_CORPUS.is_file():
            raise UserError("The bundled sample corpus is missing from this installation.")
        return text.read_text(config.SAMPLE_CORPUS), config.SAMPLE_CORPUS.name
    if choice == "session":
        if corpus_service.corpus_info(folder) is None:
            raise UserError("This session has no corpus yet: upload one on the Train page, or use the sample corpus.")
        corpus_text, info = corpus_service.read_corpus(folder)
        return corpus_text, info.name
    raise UserError("Choose the corpus: this session's corpus or the sample corpus.")


def default_corpus(folder: Path) -> str:
    """The corpus a comparison starts with: the session's when it has one, else the sample."""
    return "session" if corpus_service.corpus_info(folder) is not None else "sample"


def training_symbols(folder: Path, choice: Any) -> int:
    """How many training symbols a comparison on this corpus trains on (for the time estimates): the characters
    of the training part (90%), capped at :data:`MAX_TRAIN_SYMBOLS`; 0 when the corpus is missing."""
    if choice == "sample":
        characters = config.SAMPLE_CORPUS.stat().st_size if config.SAMPLE_CORPUS.is_file() else 0
    else:
        info = corpus_service.corpus_info(folder)
        characters = info.characters if info is not None else 0
    return min(int(characters * 0.9), MAX_TRAIN_SYMBOLS)


def _check_corpus(corpus_text: str, name: str) -> text.Corpus:
    """The corpus as every learner will see it (paper normalisation, default splits, capped training part);
    CorpusError with the reason when it cannot be trained on."""
    return text.prepare_corpus(corpus_text, normalisation="paper", max_train=MAX_TRAIN_SYMBOLS, name=name)


def _check_chmm_memory(corpus: text.Corpus, options: dict[str, Any]) -> None:
    """ValueError when the CHMM's estimated training memory exceeds the app's limit (CHMM_MAX_TRAIN_MB)."""
    estimate = training.estimate_training_memory(corpus, training.TrainOptions(**options))
    limit = config.max_train_bytes()
    if estimate > limit:
        raise ValueError(
            f"the CHMM would need about {services.format_bytes(estimate)} of memory, over the limit of "
            f"{services.format_bytes(limit)} (CHMM_MAX_TRAIN_MB)"
        )


# ------------------------------------------------------------------------------------------ the job
def _row(kind: str, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"learner": kind, "label": learner_label(kind, settings or {}), "status": PENDING, "message": ""}


def learner_label(kind: str, settings: dict[str, Any]) -> str:
    """A learner with the settings it trained with, e.g. "CHMM (80 clones, 3 iterations)"."""
    shown = [f"{settings[s.option]:,} {s.label}" for s in SETTINGS[kind] if s.option in settings]
    if kind == "ngram" and "max_order" in settings:
        shown = [f"order <= {settings['max_order']}"]
    return f"{LEARNER_LABELS[kind]}, {', '.join(shown)}" if shown else LEARNER_LABELS[kind]


def run_compare_job(
    folder: Path,
    picked: Any,
    corpus: Any,
    report: ProgressReport | None = None,
    options: dict[str, dict[str, Any]] | None = None,
    key: str | None = None,
) -> dict[str, Any]:
    """Train each picked learner on the chosen corpus (``options`` override :data:`APP_OPTIONS` per learner) and
    keep the figures in ``compare.json``; returns what was saved. Bad input or a second job in the same session
    gives status ``refused`` with a message (nothing raises, and the last comparison's file is left as it was);
    ``report`` gets the saved dict after every change."""
    key = key or uuid.uuid4().hex[:12]
    saved: dict[str, Any] = {"key": key, "status": RUNNING, "corpus": None, "results": [], "started": time.time()}

    def publish() -> None:
        _write(folder, saved)
        if report is not None:
            report(json.loads(json.dumps(saved)))

    def refuse(message: str) -> dict[str, Any]:
        # nothing is written: the session's last comparison (finished or running) stays what the page shows
        return saved | {"status": REFUSED, "message": message}

    if compare_running(folder):
        return saved | {"status": REFUSED, "message": "A comparison is already running in this session; wait for it."}
    try:
        kinds = check_learners(picked)
        corpus_text, name = compare_corpus(folder, corpus)
        prepared = _check_corpus(corpus_text, name)
    except (ValueError, OSError) as exc:
        return refuse(services.describe_error(exc))
    files = compare_files(folder)
    cancel_flag = files.cancel
    cancel_flag.unlink(missing_ok=True)
    settings = {kind: APP_OPTIONS[kind] | (options or {}).get(kind, {}) for kind in kinds}
    symbols = len(prepared.train_full)
    saved.update(
        corpus=name,
        symbols={"train": symbols, "test": len(prepared.test)},
        results=[
            _row(kind, _shown_settings(kind, settings[kind]))
            | {"settings": settings[kind], "estimate": estimate_seconds(kind, settings[kind], symbols)}
            for kind in kinds
        ],
        message=f"Comparing {len(kinds)} learner(s) on {name}.",
    )
    files.heartbeat.touch()
    publish()
    slot = JobSlot(config.data_dir(), config.max_jobs())  # shared with training jobs: CHMM_MAX_JOBS in all

    def waiting(place: int) -> None:
        saved["message"] = (
            f"Waiting for a free place: number {place} in the queue ({config.max_jobs()} jobs run at once on this "
            "server)."
        )
        publish()

    with files.alive():
        if slot.acquire(waiting, stop=cancel_flag.exists):
            try:
                for row in saved["results"]:
                    if cancel_flag.exists():
                        row.update(status=SKIPPED, message="cancelled")
                        continue
                    row.update(status=TRAINING, started=time.time())
                    saved["message"] = f"Training {row['label']} on {name}."
                    publish()

                    def iteration(record: Any, row: dict[str, Any] = row) -> None:
                        row["iteration"] = int(record.iteration)
                        publish()

                    _train_one(
                        row, corpus_text, name, prepared, settings[row["learner"]], cancel_flag, iteration, folder
                    )
                    publish()
            finally:
                slot.release()
        else:
            for row in saved["results"]:
                row.update(status=SKIPPED, message="cancelled")
    done = sum(row["status"] == DONE for row in saved["results"])
    if cancel_flag.exists():
        saved.update(status=CANCELLED, message=f"Comparison cancelled; {done} learner(s) finished.")
    elif done == 0:
        saved.update(status=FAILED, message="No learner could be trained; see the table.")
    else:
        saved.update(status=FINISHED, message=f"Compared {done} of {len(saved['results'])} learner(s) on {name}.")
    publish()
    return saved


COMPARED_CHMM = "compare-chmm.npz"
"""The CHMM of the session's last comparison (in its jobs folder), which the page can make the current model."""


def _train_one(
    row: dict[str, Any],
    corpus_text: str,
    name: str,
    prepared: text.Corpus,
    options: dict[str, Any],
    cancel: Path,
    iteration: Callable[[Any], None] | None = None,
    folder: Path | None = None,
) -> None:
    """Train one learner and put its figures (or why it failed) into its row; the CHMM's iterations go to
    ``iteration`` and the trained CHMM to the session's jobs folder (:data:`COMPARED_CHMM`)."""
    kind = row["learner"]
    try:
        if kind == "chmm":
            _check_chmm_memory(prepared, options | {"max_train": MAX_TRAIN_SYMBOLS})
        model, summary = learners.train_learner_text(
            corpus_text,
            kind,
            options,
            max_train=MAX_TRAIN_SYMBOLS,
            name=name,
            callback=iteration if kind == "chmm" else None,
            cancel=learning.CancelToken(poll=cancel.exists),
        )
        if kind == "chmm" and folder is not None:
            jobs_dir = folder / sessions.JOBS
            jobs_dir.mkdir(exist_ok=True)
            model_files.save_model(model, jobs_dir / COMPARED_CHMM)
            row["model"] = True
    except MemoryError:
        row.update(status=FAILED, message="ran out of memory")
        return
    except Exception as exc:  # one learner failing must not stop the comparison; the row says why
        stopped = isinstance(exc, learners.TrainingStopped) and cancel.exists()
        reason = error_message(exc)
        row.update(status=SKIPPED if stopped else FAILED, message="cancelled" if stopped else reason)
        return
    row.update(
        status=DONE,
        message="",
        **{k: summary.get(k) for k in ("train_bps", "validation_bps", "test_bps", "seconds", "parameters")},
    )


def request_cancel(folder: Path) -> str:
    """Ask the session's running comparison to stop (the flag file; the job's file is marked cancelled at once, as
    the page's Cancel button may also have killed the job's process) and say what the page should show."""
    compare_files(folder).request_cancel()
    saved = read_compare(folder)
    if not saved or saved.get("status") != RUNNING:
        return "No comparison is running."
    message = "Comparison cancelled; the learners that finished are in the table."
    for row in saved["results"]:
        if row.get("status") in (PENDING, TRAINING):
            row.update(status=SKIPPED, message="cancelled")
    saved.update(status=CANCELLED, message=message)
    _write(folder, saved)
    return message


def latest_compare(folder: Path) -> dict[str, Any] | None:
    """The session's latest comparison as the page shows it: a job marked running whose heartbeat stopped (its
    process died) is reported as failed, with its unfinished learners marked so."""
    saved = read_compare(folder)
    if saved and saved.get("status") == RUNNING and not compare_running(folder):
        for row in saved["results"]:
            if row.get("status") in (PENDING, TRAINING):
                row.update(status=SKIPPED, message="the job stopped")
        saved.update(status=FAILED, message="The comparison stopped unexpectedly; start it again.")
    return saved


# ------------------------------------------------------------------------------------------ what the page shows
def progress(saved: dict[str, Any] | None) -> tuple[int, str]:
    """Percentage of learners finished (trained, failed or skipped) and the job's message."""
    if not saved:
        return 0, "No comparison yet."
    rows = saved.get("results") or []
    if saved.get("status") != RUNNING:
        return 100, str(saved.get("message") or "")
    done = sum(_fraction(row) for row in rows)
    return int(100 * done / max(len(rows), 1)), str(saved.get("message") or "")


def _fraction(row: dict[str, Any], now: float | None = None) -> float:
    """How far one learner is: 1 when it ended, its iterations for the CHMM, else its time against its estimate
    (at most 0.95 until it ends), 0 before it starts."""
    status = row.get("status")
    if status not in (PENDING, TRAINING):
        return 1.0
    if status == PENDING or not row.get("started"):
        return 0.0
    iterations = (row.get("settings") or {}).get("iterations")
    if row.get("iteration") and iterations:
        return min(0.95, row["iteration"] / (2 * iterations))  # online EM then batch EM: up to twice the iterations
    elapsed = (now or time.time()) - float(row["started"])
    return min(0.95, elapsed / max(float(row.get("estimate") or 1.0), 1.0))


def row_progress(row: dict[str, Any], now: float | None = None) -> str:
    """A learner's progress in words for the table: waiting, training (iteration, elapsed and estimate), or how
    it ended."""
    status = row.get("status", "")
    if status == PENDING:
        estimate = row.get("estimate")
        return f"waiting (about {duration(estimate)})" if estimate else "waiting"
    if status == TRAINING:
        elapsed = (now or time.time()) - float(row.get("started") or now or time.time())
        text = f"training, {duration(elapsed)} of about {duration(float(row.get('estimate') or 0))}"
        if row.get("iteration"):
            text = f"training: iteration {row['iteration']}, {duration(elapsed)}"
        return text
    return f"{status}: {row['message']}" if row.get("message") else status


def duration(seconds: float) -> str:
    """A duration for people: 0.4 s, 30 s, 2 min, 1.5 h."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{round(seconds)} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def make_compared_current(folder: Path) -> str:
    """Make the CHMM of the session's last comparison the current model (the old one becomes the previous)."""
    source = folder / sessions.JOBS / COMPARED_CHMM
    if not source.is_file():
        raise UserError("The last comparison kept no CHMM: compare with the CHMM ticked first.")
    saved = read_compare(folder) or {}
    copy = source.with_name(f"install-{uuid.uuid4().hex}.npz")
    shutil.copyfile(source, copy)
    sessions.install_model(folder, copy)
    return (
        f"The CHMM compared on {saved.get('corpus', 'the corpus')} is now the current model (Undo on the Model page "
        "goes back)."
    )


def _rounded(value: Any, digits: int) -> Any:
    return None if value is None else round(float(value), digits)


def compare_rows(saved: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Table rows: learner, test / validation / train BPS, seconds, parameters, status (a failure's reason)."""
    rows = []
    for row in (saved or {}).get("results") or []:
        rows.append(
            {
                "learner": row.get("label") or row.get("learner"),
                "test_bps": _rounded(row.get("test_bps"), 4),
                "validation_bps": _rounded(row.get("validation_bps"), 4),
                "train_bps": _rounded(row.get("train_bps"), 4),
                "seconds": _rounded(row.get("seconds"), 1),
                "parameters": row.get("parameters"),
                "status": row_progress(row),
            }
        )
    return rows


def compare_figure(saved: dict[str, Any] | None) -> go.Figure:
    """Three bar charts side by side: test BPS (the axis zoomed to the results, so that differences show),
    training seconds and parameters (log scales) per finished learner, named by :data:`SHORT_NAMES`."""
    rows = [row for row in (saved or {}).get("results") or [] if row.get("status") == DONE]
    figure = make_subplots(
        rows=1, cols=3, subplot_titles=("Test BPS (lower is better)", "Training seconds", "Parameters")
    )
    for column, key in enumerate(("test_bps", "seconds", "parameters"), start=1):
        figure.add_trace(
            go.Bar(
                x=[SHORT_NAMES.get(row["learner"], row["learner"]) for row in rows],
                y=[row.get(key) for row in rows],
                marker_color=[COLOURS.get(row["learner"], "#7f7f7f") for row in rows],
                hovertext=[row.get("label") for row in rows],
                text=[_bar_text(key, row.get(key)) for row in rows],
                textposition="outside",
                cliponaxis=False,
                showlegend=False,
            ),
            row=1,
            col=column,
        )
    figure.update_yaxes(type="log", row=1, col=2)
    figure.update_yaxes(type="log", row=1, col=3)
    values = [float(row["test_bps"]) for row in rows if row.get("test_bps") is not None]
    if values:
        low, high = min(values), max(values)
        pad = max(0.15 * (high - low), 0.05)
        figure.update_yaxes(range=[max(0.0, low - pad), high + pad], row=1, col=1)
    corpus = (saved or {}).get("corpus")
    figure.update_layout(
        title=f"Learners on {corpus}" if corpus and rows else "No results yet",
        margin={"l": 50, "r": 20, "t": 70, "b": 40},
        height=380,
    )
    return figure


def _bar_text(key: str, value: Any) -> str:
    if value is None:
        return ""
    if key == "test_bps":
        return f"{float(value):.3f}"
    if key == "seconds":
        return duration(float(value))
    return f"{int(value):,}"
