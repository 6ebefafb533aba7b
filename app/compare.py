"""Services of the Compare page: train the picked learners (a CHMM and the peer learners of issue 9) on one corpus,
as a background job, and show their test BPS, training time and parameter count side by side.

The job (:func:`run_compare_job`) reads the corpus (the session's or the bundled sample), trains each learner in
turn through :func:`engine.peers.registry.train_learner_text` (the same normalisation, splits and refit for every
learner) and rewrites ``compare.json`` in the session folder after each one, so the page can show the rows that are
done while the rest train. One learner failing does not stop the others: its row says why. While the job runs it
touches ``compare-heartbeat`` every second; the Cancel button writes ``compare-cancel``, which stops the CHMM within
an iteration and the job before the next learner. Everything numeric happens in :mod:`engine`; this module only
checks input, calls the registry and turns its figures into rows and a plotly figure.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app import config, services
from app.background import CANCELLED, FAILED, FINISHED, REFUSED, RUNNING, JobFiles, JobSlot
from app.services import UserError
from app.services import corpus as corpus_service
from engine import learning, text, workflows
from engine.errors import error_message
from engine.peers import registry

COMPARE = "compare.json"
HEARTBEAT = "compare-heartbeat"
CANCEL = "compare-cancel"
DONE, PENDING, TRAINING, SKIPPED = "done", "pending", "training", "skipped"

CORPORA = {"sample": "the sample corpus (Alice in Wonderland)", "session": "this session's corpus (Train page)"}
MAX_TRAIN_SYMBOLS = 400_000
"""The training part is capped at this many symbols so that a comparison takes minutes, not hours."""
LEARNER_LABELS = {
    "chmm": "CHMM (1,000 clones, online EM)",
    "densehmm": "DenseHMM (100 states, l = 16)",
    "hmm": "HMM (100 states, Baum-Welch)",
    "pdfa": "PAC PDFA (Gavaldà et al.)",
    "ngram": "Kneser-Ney n-gram (order <= 8)",
}
LEARNER_NOTES = {
    "chmm": "about 10 s on the sample",
    "densehmm": "about 1 min",
    "hmm": "about 1 min",
    "pdfa": "about 5 s",
    "ngram": "about 1 s",
}
APP_OPTIONS: dict[str, dict[str, Any]] = {
    "chmm": {"states": 1000, "algorithm": "online", "batch_size": 2000, "iterations": 30, "pseudocount": 1e-3},
    "densehmm": {},
    "hmm": {},
    "pdfa": {},
    "ngram": {},
}
"""The settings each learner trains with here (the peers: the registry's defaults for text)."""
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
def check_learners(learners: Any) -> list[str]:
    """The picked learners in the order of :data:`engine.peers.registry.LEARNERS`; UserError when none is picked
    or one is unknown."""
    if not learners:
        raise UserError("Pick at least one learner to compare.")
    if isinstance(learners, str):
        learners = [learners]
    unknown = [str(kind) for kind in learners if kind not in registry.LEARNERS]
    if unknown:
        raise UserError(f"Unknown learner {unknown[0]!r}; choose among {', '.join(registry.LEARNERS)}.")
    return [kind for kind in registry.LEARNERS if kind in learners]


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


def _check_corpus(corpus_text: str, name: str) -> text.Corpus:
    """The corpus as every learner will see it (paper normalisation, default splits, capped training part);
    CorpusError with the reason when it cannot be trained on."""
    return text.prepare_corpus(corpus_text, normalisation="paper", max_train=MAX_TRAIN_SYMBOLS, name=name)


def _check_chmm_memory(corpus: text.Corpus, options: dict[str, Any]) -> None:
    """ValueError when the CHMM's estimated training memory exceeds the app's limit (CHMM_MAX_TRAIN_MB)."""
    estimate = workflows.estimate_training_memory(corpus, workflows.TrainOptions(**options))
    limit = config.max_train_bytes()
    if estimate > limit:
        raise ValueError(
            f"the CHMM would need about {services.format_bytes(estimate)} of memory, over the limit of "
            f"{services.format_bytes(limit)} (CHMM_MAX_TRAIN_MB)"
        )


# ------------------------------------------------------------------------------------------ the job
def _row(kind: str) -> dict[str, Any]:
    return {"learner": kind, "label": LEARNER_LABELS[kind], "status": PENDING, "message": ""}


def run_compare_job(
    folder: Path,
    learners: Any,
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
        kinds = check_learners(learners)
        corpus_text, name = compare_corpus(folder, corpus)
        prepared = _check_corpus(corpus_text, name)
    except (ValueError, OSError) as exc:
        return refuse(services.describe_error(exc))
    files = compare_files(folder)
    cancel_flag = files.cancel
    cancel_flag.unlink(missing_ok=True)
    settings = {kind: APP_OPTIONS[kind] | (options or {}).get(kind, {}) for kind in kinds}
    saved.update(
        corpus=name,
        symbols={"train": len(prepared.train_full), "test": len(prepared.test)},
        results=[_row(kind) for kind in kinds],
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
                    row["status"] = TRAINING
                    saved["message"] = f"Training {row['label']} on {name}."
                    publish()
                    _train_one(row, corpus_text, name, prepared, settings[row["learner"]], cancel_flag)
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


def _train_one(
    row: dict[str, Any], corpus_text: str, name: str, prepared: text.Corpus, options: dict[str, Any], cancel: Path
) -> None:
    """Train one learner and put its figures (or why it failed) into its row."""
    kind = row["learner"]
    try:
        if kind == "chmm":
            _check_chmm_memory(prepared, options | {"max_train": MAX_TRAIN_SYMBOLS})
        _, summary = registry.train_learner_text(
            corpus_text,
            kind,
            options,
            max_train=MAX_TRAIN_SYMBOLS,
            name=name,
            cancel=learning.CancelToken(poll=cancel.exists),
        )
    except MemoryError:
        row.update(status=FAILED, message="ran out of memory")
        return
    except Exception as exc:  # one learner failing must not stop the comparison; the row says why
        stopped = isinstance(exc, registry.TrainingStopped) and cancel.exists()
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
    finished = sum(row.get("status") not in (PENDING, TRAINING) for row in rows)
    value = 100 if saved.get("status") != RUNNING else int(100 * finished / max(len(rows), 1))
    return value, str(saved.get("message") or "")


def _rounded(value: Any, digits: int) -> Any:
    return None if value is None else round(float(value), digits)


def compare_rows(saved: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Table rows: learner, test / validation / train BPS, seconds, parameters, status (a failure's reason)."""
    rows = []
    for row in (saved or {}).get("results") or []:
        status = row.get("status", "")
        rows.append(
            {
                "learner": row.get("label") or row.get("learner"),
                "test_bps": _rounded(row.get("test_bps"), 4),
                "validation_bps": _rounded(row.get("validation_bps"), 4),
                "train_bps": _rounded(row.get("train_bps"), 4),
                "seconds": _rounded(row.get("seconds"), 1),
                "parameters": row.get("parameters"),
                "status": f"{status}: {row['message']}" if row.get("message") else status,
            }
        )
    return rows


def compare_figure(saved: dict[str, Any] | None) -> go.Figure:
    """Three bar charts side by side: test BPS, training seconds and parameters (log scale) per finished learner."""
    rows = [row for row in (saved or {}).get("results") or [] if row.get("status") == DONE]
    figure = make_subplots(
        rows=1, cols=3, subplot_titles=("Test BPS (lower is better)", "Training seconds", "Parameters")
    )
    for column, key in enumerate(("test_bps", "seconds", "parameters"), start=1):
        figure.add_trace(
            go.Bar(
                x=[row["learner"] for row in rows],
                y=[row.get(key) for row in rows],
                marker_color=[COLOURS.get(row["learner"], "#7f7f7f") for row in rows],
                hovertext=[row.get("label") for row in rows],
                showlegend=False,
            ),
            row=1,
            col=column,
        )
    figure.update_yaxes(type="log", row=1, col=3)
    corpus = (saved or {}).get("corpus")
    figure.update_layout(
        title=f"Learners on {corpus}" if corpus and rows else "No results yet",
        margin={"l": 50, "r": 20, "t": 70, "b": 40},
        height=360,
    )
    return figure
