"""Services of the Compare page: train the picked learners (a CHMM and the peer learners of issue 9) on one corpus,
as a background job, and show their test BPS, training time and parameter count side by side.

The job (:func:`run_compare_job`) reads the corpus (the session's or the bundled sample), trains each learner in
turn through :func:`engine.peers.learners.train_learner_text` (the same normalisation, splits and refit for every
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
from pathlib import Path
from typing import Any

from app import config, services, sessions
from app.jobs import JobFiles, JobMemoryError, QueueFull, Ticket, held_place, place_message
from app.jobs.kinds import JobKind, new_key
from app.jobs.records import CANCELLED, FAILED, FINISHED, REFUSED, RUNNING
from app.services import UserError
from app.services import corpus as corpus_service
from app.services.learner_settings import (
    APP_OPTIONS,
    LEARNER_LABELS,
    SETTINGS,
    check_learners,
    estimate_seconds,
    shown_settings,
)
from engine import api
from engine.errors import CHMMError, error_message

COMPARE = "compare.json"


HEARTBEAT = "compare-heartbeat"


CANCEL = "compare-cancel"


DONE, PENDING, TRAINING, SKIPPED = "done", "pending", "training", "skipped"


CORPORA = {"sample": "the sample corpus (Alice in Wonderland)", "session": "this session's corpus (Train page)"}


MAX_TRAIN_SYMBOLS = 400_000
"""The training part is capped at this many symbols so that a comparison takes minutes, not hours."""


ProgressReport = Callable[[dict[str, Any]], None]


def _write(folder: Path, saved: dict[str, Any]) -> None:
    saved["updated"] = time.time()
    compare_files(folder).write(saved)


COMPARISON_KIND = "comparison"
"""The comparison job's kind in the server's queue (:class:`app.jobs.Ticket`)."""
COMPARISON = JobKind(COMPARISON_KIND, "comparison", (COMPARE, HEARTBEAT, CANCEL))
"""The comparison job's lifecycle (:class:`app.jobs.kinds.JobKind`)."""


def compare_files(folder: Path) -> JobFiles:
    """The comparison job's record, heartbeat and cancel flag in a session folder."""
    return COMPARISON.files(folder)


def read_compare(folder: Path) -> dict[str, Any] | None:
    """The session's latest comparison (None before any, or when the file is unreadable)."""
    saved = compare_files(folder).read()
    return saved if saved is not None and isinstance(saved.get("results"), list) else None


def compare_running(folder: Path, now: float | None = None) -> bool:
    """Whether a comparison of this session is running (see :meth:`app.jobs.JobFiles.running`)."""
    saved = read_compare(folder)
    return saved is not None and compare_files(folder).running(now, saved)


def compare_corpus(folder: Path, choice: Any) -> tuple[str, str]:
    """The text and name of the corpus to compare on: "sample" (the bundled ``carroll-alice.txt``) or "session" (the
    corpus uploaded on the Train page); UserError for anything else or a missing corpus."""
    if choice == "sample":
        if not config.SAMPLE_CORPUS.is_file():
            raise UserError("The bundled sample corpus is missing from this installation.")
        return api.corpora.read_text(config.SAMPLE_CORPUS), config.SAMPLE_CORPUS.name
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


def _check_corpus(corpus_text: str, name: str, unit: str) -> api.corpora.Corpus:
    """The corpus as every learner will see it (paper normalisation, ``unit`` symbols, default splits, capped
    training part); CorpusError with the reason when it cannot be trained on."""
    return api.corpora.prepare_corpus(
        corpus_text, normalisation="paper", max_train=MAX_TRAIN_SYMBOLS, name=name, unit=unit
    )


SPARE_STATES = 300
"""The clones a CHMM of words or tokens gets beyond one per symbol when its states setting is below that (a word
model needs a clone per word: the search's smallest candidate, the vocabulary plus 300)."""


def check_unit(unit: Any) -> str:
    """The unit of a comparison (characters when none is given); UserError for another."""
    unit = unit or api.CHOICES.UNITS[0]
    if unit not in api.CHOICES.UNITS:
        raise UserError(f"Unknown unit {str(unit)[:20]!r}; choose one of {', '.join(api.CHOICES.UNITS)}.")
    return str(unit)


def _check_chmm_memory(corpus: api.corpora.Corpus, options: dict[str, Any]) -> None:
    """UserError when the CHMM's estimated training memory exceeds the app's limit (CHMM_MAX_TRAIN_MB)."""
    estimate = api.estimate_training_memory(corpus, api.TrainOptions(**options))
    limit = config.max_train_bytes()
    if estimate > limit:
        raise UserError(
            f"the CHMM would need about {services.format_bytes(estimate)} of memory, over the limit of "
            f"{services.format_bytes(limit)} (CHMM_MAX_TRAIN_MB)"
        )


def _row(kind: str, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"learner": kind, "label": learner_label(kind, settings or {}), "status": PENDING, "message": ""}


def learner_label(kind: str, settings: dict[str, Any]) -> str:
    """A learner with the settings it trained with, e.g. "CHMM (80 clones, 3 iterations)"."""
    shown = [s.shown.format(value=settings[s.option], label=s.label) for s in SETTINGS[kind] if s.option in settings]
    return f"{LEARNER_LABELS[kind]}, {', '.join(shown)}" if shown else LEARNER_LABELS[kind]


WAITED_CANCELLED = "Comparison cancelled while it waited; nothing was trained."


def check_comparison(
    folder: Path, picked: Any, corpus: Any, options: dict[str, dict[str, Any]] | None = None, unit: Any = None
) -> tuple[list[str], tuple[str, str, api.corpora.Corpus], dict[str, dict[str, Any]]]:
    """The learners, the corpus (its text, name and prepared split in ``unit`` symbols) and each learner's settings
    of a comparison that can run; UserError, CHMMError or OSError with the reason when it cannot (no such learner or
    corpus, a corpus that cannot be split, a learner the page expects to run past ``CHMM_MAX_JOB_MINUTES``, whose
    slot it would hold). A CHMM of words or tokens gets at least one clone per symbol and :data:`SPARE_STATES`."""
    kinds = check_learners(picked)
    corpus_text, name = compare_corpus(folder, corpus)
    prepared = _check_corpus(corpus_text, name, check_unit(unit))
    settings = {kind: APP_OPTIONS[kind] | (options or {}).get(kind, {}) for kind in kinds}
    if "chmm" in settings and prepared.unit != api.CHOICES.UNITS[0]:
        least = prepared.n_symbols + SPARE_STATES
        settings["chmm"] = settings["chmm"] | {"states": max(int(settings["chmm"].get("states", 0)), least)}
    symbols = len(prepared.train_full)
    limit = config.max_job_seconds()
    for kind in kinds:
        expected = estimate_seconds(kind, settings[kind], symbols)
        if expected > limit:
            raise UserError(
                f"The {LEARNER_LABELS[kind]} would take about {_hours(expected)} here by the page's estimate, past "
                f"this server's limit of {limit / 60:g} minutes per job (CHMM_MAX_JOB_MINUTES); choose smaller "
                "settings or a shorter corpus."
            )
    return kinds, (corpus_text, name, prepared), settings


def queue_comparison(
    folder: Path, picked: Any, corpus: Any, options: dict[str, dict[str, Any]] | None, unit: Any = None
) -> Ticket:
    """Put a comparison into the server's queue when the user presses Compare (the web worker: no process waits,
    see :class:`app.jobs.JobSlot`), after the checks that can refuse it at once, each with a sentence (a
    comparison already running or waiting in the session, :func:`check_comparison`, a full queue:
    :class:`app.jobs.QueueFull`). The job checks again when it starts."""
    with COMPARISON.entering(folder):  # two tabs pressing Compare at once: the second sees the first's ticket
        if compare_running(folder) or comparison_ticket(folder) is not None:
            raise UserError("A comparison is already running or waiting in this session; wait for it.")
        check_comparison(folder, picked, corpus, options, unit)
        data = {"learners": picked, "corpus": corpus, "options": options, "unit": check_unit(unit)}
        return COMPARISON.enter(folder, data)


def comparison_ticket(folder: Path) -> Ticket | None:
    """The session's comparison in the queue (waiting, or started and not yet running), if any."""
    return COMPARISON.ticket(folder)


def queue_view(folder: Path, shown: dict[str, Any] | None) -> tuple[Any, Any]:
    """What the session's pages show of its comparison in the queue, and the job to start when its turn has come
    (:func:`app.jobs.queue_view`)."""
    return COMPARISON.queue_view(folder, shown)


def run_queued_comparison(folder: Path, ticket_name: Any, report: ProgressReport | None = None) -> dict[str, Any]:
    """The job of a queued comparison whose turn has come (started by the page with its started ticket's name): its
    learners, corpus and settings are the ticket's, and it takes the place the ticket held at once; the ticket is
    gone when it ends."""

    def start(data: dict[str, Any], ticket: Ticket) -> dict[str, Any]:
        picked, corpus, options, unit = data["learners"], data["corpus"], data.get("options"), data.get("unit")
        return run_compare_job(folder, picked, corpus, report, options, key=str(data["key"]), ticket=ticket, unit=unit)

    return COMPARISON.run_queued(folder, ticket_name, start, {"status": CANCELLED, "message": WAITED_CANCELLED})


def run_compare_job(
    folder: Path,
    picked: Any,
    corpus: Any,
    report: ProgressReport | None = None,
    options: dict[str, dict[str, Any]] | None = None,
    key: str | None = None,
    ticket: Ticket | None = None,
    unit: Any = None,
) -> dict[str, Any]:
    """Train each picked learner on the chosen corpus, in ``unit`` symbols (characters when None; ``options``
    override :data:`APP_OPTIONS` per learner) and keep the figures in ``compare.json``; returns what was saved.
    Bad input or a second job in the same session gives status ``refused`` with a message (nothing raises, and the
    last comparison's file is left as it was); ``report`` gets the saved dict after every change. With the started
    ``ticket`` of a queued comparison it takes its place at once; without one it waits in this process."""
    key = key or new_key()
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
        kinds, (corpus_text, name, prepared), settings = check_comparison(folder, picked, corpus, options, unit)
    except (UserError, CHMMError, OSError) as exc:
        return refuse(services.describe_error(exc))
    files = compare_files(folder)
    cancel_flag = files.cancel
    cancel_flag.unlink(missing_ok=True)
    symbols = len(prepared.train_full)
    saved.update(
        corpus=name,
        unit=prepared.unit,
        symbols={"train": symbols, "test": len(prepared.test)},
        results=[
            _row(kind, shown_settings(kind, settings[kind]))
            | {"settings": settings[kind], "estimate": estimate_seconds(kind, settings[kind], symbols)}
            for kind in kinds
        ],
        message=f"Comparing {len(kinds)} learner(s) on {name}.",
    )
    files.heartbeat.touch()
    publish()
    with files.alive():
        try:
            _train_rows(saved, publish, cancel_flag, (corpus_text, name, prepared), settings, folder, ticket)
        except QueueFull as exc:  # too many jobs wait already: said at once, nothing trained
            for row in saved["results"]:
                row.update(status=SKIPPED, message="the server was busy")
            saved.update(status=REFUSED, message=str(exc))
            publish()
            return saved
    done = sum(row["status"] == DONE for row in saved["results"])
    if cancel_flag.exists():
        saved.update(status=CANCELLED, message=f"Comparison cancelled; {done} learner(s) finished.")
    elif done == 0:
        saved.update(status=FAILED, message="No learner could be trained; see the table.")
    else:
        saved.update(status=FINISHED, message=f"Compared {done} of {len(saved['results'])} learner(s) on {name}.")
    publish()
    return saved


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} hours" if seconds >= 3600 else f"{seconds / 60:.0f} minutes"


def _train_rows(
    saved: dict[str, Any],
    publish: Callable[[], None],
    cancel_flag: Path,
    data: tuple[Any, str, Any],
    settings: dict[str, dict[str, Any]],
    folder: Path,
    ticket: Ticket | None = None,
) -> None:
    """Take a job slot (shared with training jobs: ``CHMM_MAX_JOBS`` in all; at once with the started ``ticket`` of
    a queued comparison, else waiting for one), then train the rows of ``saved`` one after another on ``data`` (the
    corpus text, its name and its prepared split), publishing every change; rows left when ``cancel_flag`` appears
    are marked skipped."""
    corpus_text, name, prepared = data

    def waiting(place: int) -> None:
        saved["message"] = place_message(place)
        publish()

    with held_place(waiting, cancel_flag.exists, ticket) as placed:
        if not placed:
            for row in saved["results"]:
                row.update(status=SKIPPED, message="cancelled")
            return
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

            _train_one(row, corpus_text, name, prepared, settings[row["learner"]], cancel_flag, iteration, folder)
            publish()


COMPARED_CHMM = "compare-chmm.npz"
"""The CHMM of the session's last comparison (in its jobs folder), which the page can make the current model."""


def _train_one(
    row: dict[str, Any],
    corpus_text: str,
    name: str,
    prepared: api.corpora.Corpus,
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
        model, summary = api.learners.train_learner_text(
            corpus_text,
            kind,
            options,
            max_train=MAX_TRAIN_SYMBOLS,
            name=name,
            unit=prepared.unit,
            callback=iteration if kind == "chmm" else None,
            cancel=api.CancelToken(poll=cancel.exists),
        )
        if kind == "chmm" and folder is not None:
            jobs_dir = folder / sessions.JOBS
            jobs_dir.mkdir(exist_ok=True)
            api.save_model(model, jobs_dir / COMPARED_CHMM)
            row["model"] = True
    except MemoryError as exc:  # JobMemoryError: past the server's memory limit per job, which it says
        row.update(status=FAILED, message=str(exc) if isinstance(exc, JobMemoryError) else "ran out of memory")
        return
    except Exception as exc:  # one learner failing must not stop the comparison; the row says why
        stopped = isinstance(exc, api.learners.TrainingStopped) and cancel.exists()
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
    waited, saved = COMPARISON.cancel(folder, read_compare)
    if waited:
        return WAITED_CANCELLED  # it only waited (or its job had not begun): no record to change
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
        cause = saved.get("cause")  # why its memory watch killed it (app.jobs.MemoryWatch)
        message = "The comparison stopped unexpectedly; start it again."
        if cause:
            message = f"The comparison stopped: {cause}."
        saved.update(status=FAILED, message=message)
    return saved


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
