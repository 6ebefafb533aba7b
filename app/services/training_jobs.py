"""The training job: run by the Train page's background callback (in a separate process with the diskcache
manager, or on a Celery worker), and directly by the tests.

The job reads the session's corpus, refuses impossible settings (fewer states than symbols, an estimated memory
over the limit), trains with :func:`engine.training.train_text` and writes, in the session folder:

* ``progress.json``: status, phase and the per-iteration train/validation BPS, rewritten (atomically) after every
  iteration; a heartbeat thread re-reads it every second and hands it to the page's progress callback, so the
  page updates at least every 2 s even when an iteration takes longer;
* ``job.json``: the job's key, status (``running``, ``finished``, ``cancelled``, ``failed``, ``refused``) and a
  message for the page;
* ``jobs/KEY.npz``: the trained model (atomic save), which then becomes ``current.npz`` (the model it replaces is
  kept as ``previous.npz``). A cancelled, failed or refused job never touches ``current.npz``.

Cancellation: the page's Cancel button stops the background callback and writes the ``cancel`` flag file; the
job's :class:`engine.training.learning.CancelToken` polls that file, so the engine stops within an iteration (one batch
for online EM) even where the job cannot be killed (a Celery worker on another machine).
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app import config, services, sessions
from app.jobs import JobFiles, JobMemoryError, JobTerminated, QueueFull, Ticket, held_place, memory_exceeded
from app.jobs.kinds import JobKind, new_key, stopped_just_now
from app.jobs.queue import place_message
from app.jobs.records import CANCELLED, DIED, FAILED, FINISHED, REFUSED, RUNNING, read_json
from app.services import comparisons
from app.services import corpus as corpus_service
from app.services import graphs as graph_service
from app.services import maps as map_service
from engine import api
from engine.errors import CHMMError
from engine.files import atomic_write_json

ProgressReport = Callable[[dict[str, Any]], None]


@dataclass
class JobOutcome:
    """What the background callback returns to the page: a small key and a message, never a model."""

    key: str
    status: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


TRAINING_KIND = "training"
"""The training job's kind in the server's queue (:class:`app.jobs.Ticket`)."""
TRAINING = JobKind(TRAINING_KIND, "training", (sessions.JOB, sessions.HEARTBEAT, sessions.CANCEL))
"""The training job's lifecycle (:class:`app.jobs.kinds.JobKind`)."""


def training_files(folder: Path) -> JobFiles:
    """The training job's record, heartbeat and cancel flag in a session folder."""
    return TRAINING.files(folder)


def read_progress(folder: Path) -> dict[str, Any] | None:
    """The latest job's progress file (None before any job)."""
    return read_json(folder / sessions.PROGRESS)


def read_job(folder: Path) -> dict[str, Any] | None:
    """The latest job's status file (None before any job)."""
    return TRAINING.read(folder)


def job_running(folder: Path, now: float | None = None) -> bool:
    """Whether a training job of this session is running (see :meth:`app.jobs.JobFiles.running`)."""
    return TRAINING.running(folder, now)


def reap_dead_job(folder: Path, now: float | None = None) -> str | None:
    """If the session's training job died without a word (its heartbeat stopped), mark its record and progress
    failed and return the message the page shows; else None. The current model is never touched by a job that
    did not finish, so the previous model is kept."""
    record = training_files(folder).reap(now)
    if record is None:
        return None
    cause = record.get("cause")  # why its memory watch killed it (app.jobs.MemoryWatch)
    message = f"The training job {DIED}. The previous model is still current."
    if cause:
        message = f"The training job stopped: {cause}; choose fewer states. The previous model is still current."
    if record.get("disk_full"):  # its records could not be written: the true cause, not "out of memory"
        message = (
            "The training job stopped: the server's disk filled up while it ran, so it could not record its "
            "progress or its model. The previous model is still current."
        )
    progress = read_progress(folder)
    if progress is not None and progress.get("key") == record.get("key"):
        progress.update(status=FAILED, message=message)
        try:
            atomic_write_json(folder / sessions.PROGRESS, progress)
        except OSError:  # a full disk: the page gets the message all the same
            pass
    return message


@dataclass
class TrainingCheck:
    """A training run that may start: the corpus text and name, and the estimated memory against the limit."""

    corpus_text: str
    name: str
    estimate_bytes: int
    limit_bytes: int
    expected: str | None = None  # the time it is expected to take, in words (engine.training.expected_sentence)

    @property
    def message(self) -> str:
        memory = (
            f"Estimated training memory: {services.format_bytes(self.estimate_bytes)} "
            f"(limit {services.format_bytes(self.limit_bytes)})."
        )
        return memory if self.expected is None else f"{memory} {self.expected}"


def check_training(folder: Path, options: api.TrainOptions) -> TrainingCheck:
    """Refuse (UserError or CHMMError, one sentence with the figures) a run that cannot work: no corpus, a corpus the
    settings cannot split, fewer states than symbols, or an estimated memory over ``CHMM_MAX_TRAIN_MB``."""
    sessions.check_space(folder, 0, "Another model")
    corpus_text, info = corpus_service.read_corpus(folder)
    corpus = api.corpora.prepare_corpus(
        corpus_text,
        normalisation=options.normalisation,
        test_fraction=options.test_fraction,
        validation=options.validation,
        max_train=options.max_train,
        name=info.name,
    )
    estimate = api.estimate_training_memory(corpus, options)
    limit = config.max_train_bytes()
    if estimate > limit:
        states = "The fewest candidate" if options.states == api.CHOICES.AUTO else f"{options.states:,}"
        raise services.UserError(
            f"{states} states would need about {services.format_bytes(estimate)} of memory to train on "
            f"{info.name}, more than the limit of {services.format_bytes(limit)} (CHMM_MAX_TRAIN_MB); "
            "choose fewer states."
        )
    return TrainingCheck(corpus_text, info.name, estimate, limit, api.expected_sentence(options))


class _Progress:
    """Collects the iteration records of the selection run and, with refit, of the refit run (its iterations
    restart at 1), and rewrites ``progress.json`` after each one. With restarts the history is the current
    restart's (``restart``, 0-based, of ``restarts``), with an automatic search the current candidate's
    (``candidate``, 0-based); the refit's records (``refit``) come last."""

    def __init__(self, folder: Path, key: str, options: api.TrainOptions) -> None:
        self.path = folder / sessions.PROGRESS
        self.lock = threading.Lock()
        self.runs: list[list[dict[str, Any]]] = []  # the finished selection runs' histories (restarts, candidates)
        self.state: dict[str, Any] = {
            "key": key,
            "status": RUNNING,
            "phase": "preparing",
            # online EM with validation text is followed by batch EM (training.select_on_validation)
            "max_iterations": options.iterations * (2 if options.algorithm == "online" and options.validation else 1),
            "algorithm": options.algorithm,
            "restart": 0,
            "restarts": options.resolved_restarts(),
            "candidate": 0,
            "searching": options.searches,
            "budget_seconds": 60.0 * options.budget if options.searches and options.budget else None,
            # the whole run's bound, stated before it starts (the search's deadline, then the refit's window)
            "expected_seconds": 60.0 * minutes if (minutes := api.expected_minutes(options)) is not None else None,
            "online_then_batch": options.algorithm == "online" and bool(options.validation),
            "refits": bool(options.refit and options.validation),
            "iterations": options.iterations,
            "finished_runs": 0,
            "history": [],
            "kept": None,
            "refit": [],
            "message": "Preparing the corpus.",
            "started": time.time(),
            "updated": time.time(),
        }
        self.write()

    def write(self) -> None:
        with self.lock:
            self.state["updated"] = time.time()
            if self.state["status"] == RUNNING and (self.path.parent / sessions.CANCEL).exists():
                # a cancel request has already marked progress.json cancelled: never write it back as running
                # (a job killed before it finishes would otherwise leave "running" behind)
                self.state["status"] = CANCELLED
            atomic_write_json(self.path, self.state)

    def update(self, **changes: Any) -> None:
        with self.lock:
            self.state.update(changes)
        self.write()

    def record(self, record: api.IterationRecord) -> None:
        entry = _entry(record)
        with self.lock:
            state = self.state
            if record.refit:
                if state["phase"] != "refit":  # the selection is over: the run it kept is what the chart shows
                    state["history"] = _kept(self.runs + [state["history"]])
                    state["kept"] = True
                state["phase"] = "refit"
                state["refit"].append(entry)
            else:
                run = [int(record.candidate), int(record.restart)]
                if state["phase"] == "refit" or run != [state["candidate"], state["restart"]]:
                    # another restart or candidate, or a grown model's sparse stage after its dense refit
                    if state["history"] and state["phase"] != "refit":
                        self.runs.append(state["history"])
                        state["finished_runs"] += 1
                    state["candidate"], state["restart"] = run
                    state["history"], state["refit"], state["kept"] = [], [], None
                state["phase"] = "training"
                state["history"].append(entry)
        self.write()

    def keep(self, history: list[api.IterationRecord]) -> None:
        """Show the run the training kept (the selection's history, online epochs and batch iterations) once it
        has ended, so the chart and the session's runs are the kept model's, not the last restart's."""
        self.update(history=[_entry(r) for r in history if not r.refit], kept=True)


def _entry(record: api.IterationRecord) -> dict[str, Any]:
    """An iteration record as progress.json keeps it."""
    return {
        "iteration": int(record.iteration),
        "train_bps": float(record.train_bps),
        "validation_bps": None if math.isnan(record.validation_bps) else float(record.validation_bps),
        "seconds": float(record.seconds),
        "online": bool(record.online),
    }


def _kept(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The history of the run selection keeps: the lowest validation BPS (the last run without validation)."""

    def best(history: list[dict[str, Any]]) -> float:
        values = [r["validation_bps"] for r in history if r.get("validation_bps") is not None]
        return min(values) if values else math.inf

    runs = [run for run in runs if run]
    return min(runs, key=best) if runs and any(best(r) < math.inf for r in runs) else (runs[-1] if runs else [])


def _finish(folder: Path, job: dict[str, Any], progress: _Progress | None, status: str, message: str) -> JobOutcome:
    """Record how the job ended; the page gets the outcome even when the disk is too full to record it."""
    job.update(status=status, message=message, finished=time.time())
    try:
        training_files(folder).write(job)
        if progress is not None:
            progress.update(status=status, message=message)
            if status != REFUSED and (progress.state["history"] or progress.state["refit"]):
                record_run(folder, job, progress.state)
    except OSError as exc:
        message = f"{message} ({services.describe_error(exc)})"
    return JobOutcome(job["key"], status, message)


RUNS = "runs.json"
"""The session's trainings (settings and BPS per iteration), newest last, for the Train page's overlaid chart."""


MAX_RUNS = 20


def record_run(folder: Path, job: dict[str, Any], progress: dict[str, Any]) -> None:
    """Append a training to the session's runs (at most :data:`MAX_RUNS`, the oldest dropped): its settings, how it
    ended, its BPS per iteration (the kept restart's or candidate's, then the refit's) and its test BPS."""
    runs = read_runs(folder)
    if any(run.get("key") == job["key"] for run in runs):  # a cancel request recorded it already
        return
    number = (runs[-1]["number"] + 1) if runs else 1
    runs.append(
        {
            "number": number,
            "key": job["key"],
            "status": job["status"],
            "finished": job.get("finished"),
            "options": job.get("options", {}),
            "states": progress.get("states"),
            "history": [
                {k: r.get(k) for k in ("iteration", "train_bps", "validation_bps")} for r in progress.get("history", [])
            ],
            "test_bps": progress.get("test_bps"),
        }
    )
    atomic_write_json(folder / RUNS, {"runs": runs[-MAX_RUNS:]})


def read_runs(folder: Path) -> list[dict[str, Any]]:
    """The session's recorded trainings, oldest first (empty when none or the file is unreadable)."""
    saved = read_json(folder / RUNS) or {}
    runs = saved.get("runs")
    return runs if isinstance(runs, list) else []


def run_label(run: dict[str, Any]) -> str:
    """A run in one line: its number, settings and outcome, e.g. "#3 600 states, online EM, pseudocount 0.001,
    seed 0: test 1.69"."""
    o = run.get("options", {})
    states = run.get("states") or o.get("states")
    parts = [f"{states:,} states" if isinstance(states, int) else f"{states} states"]
    parts.append({"em": "EM", "online": "online EM", "viterbi": "Viterbi EM"}.get(o.get("algorithm"), "?"))
    pseudocount = o.get("pseudocount")
    shown = f"{pseudocount:g}" if isinstance(pseudocount, (int, float)) else str(pseudocount)
    parts.append(f"pseudocount {shown}")
    parts.append(f"seed {o.get('seed', 0)}")
    outcome = f"test {run['test_bps']:.3f}" if run.get("test_bps") is not None else str(run.get("status", ""))
    return f"#{run['number']} {', '.join(parts)}: {outcome}"


def _summary_message(summary: dict[str, Any]) -> str:
    figures = [f"train {summary['train_bps']:.4f}"]
    if summary.get("validation_bps") is not None:
        figures.append(f"validation {summary['validation_bps']:.4f}")
    if summary.get("test_bps") is not None:
        figures.append(f"test {summary['test_bps']:.4f}")
    done = f"{summary['iterations']} iteration(s)"
    if summary.get("online_iterations") is not None:
        online = summary["online_iterations"]
        done = f"{online} online EM epoch(s) and {summary['iterations'] - online} batch EM iteration(s)"
    chosen = ""
    if summary.get("search"):
        ran = len(summary.get("restarts") or []) or 1
        reason = (summary.get("chosen") or {}).get("reason")
        chosen = (
            f" Chosen on validation from {len(summary['search'])} candidate setting(s): {summary['states']:,} states, "
            f"pseudocount {summary['pseudocount']:g}, best of {ran} restart(s)" + (f" ({reason})." if reason else ".")
        )
    ngram = summary.get("ngram") or {}
    beside = ""
    if ngram.get("test_bps") is not None and summary.get("test_bps") is not None:
        beside = f" Our Kneser-Ney n-gram on the same split: test {ngram['test_bps']:.4f}."
    return (
        f"Trained {summary['states']:,} states in {done} ({services.stop_reason(summary['stopped'])}, "
        f"{summary['seconds']:.1f} s); BPS {', '.join(figures)}.{chosen}{beside} It is now the current model."
    )


WAITED_CANCELLED = "Training cancelled while it waited; the previous model is still current."


def queue_training(folder: Path, options: api.TrainOptions) -> Ticket:
    """Put a training of ``options`` into the server's queue when the user presses Start (the web worker: no process
    waits, see :class:`app.jobs.JobSlot`), after the checks that can refuse it at once, each with a sentence:
    a full disk (:class:`sessions.SessionError`), a training already running or waiting in the session
    (:class:`services.UserError`), settings the corpus cannot take (:class:`engine.errors.CHMMError`), a full queue
    (:class:`app.jobs.QueueFull`). The job checks again when it starts."""
    sessions.check_disk("The training job")
    with TRAINING.entering(folder):  # two tabs pressing Start at once: the second sees the first's ticket
        if TRAINING.busy(folder):
            raise services.UserError("A training job is already running or waiting in this session; wait or cancel it.")
        check_training(folder, options)
        return TRAINING.enter(folder, {"options": asdict(options)})


def training_ticket(folder: Path) -> Ticket | None:
    """The session's training in the queue (waiting, or started and not yet running), if any."""
    return TRAINING.ticket(folder)


def queue_view(folder: Path, shown: dict[str, Any] | None) -> tuple[Any, Any]:
    """What the session's pages show of its training in the queue, and the job to start when its turn has come
    (:func:`app.jobs.queue_view`)."""
    return TRAINING.queue_view(folder, shown)


def run_queued_training(folder: Path, ticket_name: Any, report: ProgressReport | None = None) -> JobOutcome:
    """The job of a queued training whose turn has come (started by the page with its started ticket's name): its
    options are the ticket's, and it takes the place the ticket held at once; the ticket is gone when it ends."""

    def start(data: dict[str, Any], ticket: Ticket) -> JobOutcome:
        options = api.TrainOptions(**data["options"])
        return run_training_job(folder, options, report, key=str(data["key"]), ticket=ticket)

    return TRAINING.run_queued(folder, ticket_name, start, JobOutcome("", CANCELLED, WAITED_CANCELLED))


def run_training_job(
    folder: Path,
    options: api.TrainOptions,
    report: ProgressReport | None = None,
    key: str | None = None,
    ticket: Ticket | None = None,
) -> JobOutcome:
    """Train on the session's corpus and make the result the current model (see the module docstring). Never
    raises for a problem with the input or the run: the outcome's status and message say what happened, and
    ``current.npz`` changes only when the status is ``finished``. With the started ``ticket`` of a queued training
    it takes its place at once (:meth:`app.jobs.JobSlot.acquire`); without one it waits in this process."""
    key = key or new_key()
    try:
        sessions.check_disk("The training job")
    except sessions.SessionError as exc:
        return JobOutcome(key, REFUSED, str(exc))
    if TRAINING.runs_another(folder, key):
        return JobOutcome(key, REFUSED, "A training job is already running in this session; wait or cancel it.")
    files = training_files(folder)
    job = TRAINING.new_record(folder, key, "Training.", options=asdict(options))
    job.update(pid=os.getpid(), host=socket.gethostname())
    try:
        files.heartbeat.touch()
        files.write(job)
        progress = _Progress(folder, key, options)
    except OSError as exc:  # a full disk: nothing was written (atomic writes), the page says so
        return JobOutcome(key, REFUSED, services.describe_error(exc))
    try:
        check = check_training(folder, options)
    except (services.UserError, CHMMError, OSError) as exc:
        return _finish(folder, job, progress, REFUSED, services.describe_error(exc))

    ended: list[JobOutcome] = []

    def end(status: str, message: str) -> tuple[str, str]:
        """Record how the job ended (the record, the progress, the session's runs); stopped by the server while
        the user's Cancel came, it is the user's cancel (:meth:`app.jobs.JobKind.ending`)."""
        with TRAINING.ending(folder, message, SERVER_STOPPED, USER_CANCELLED) as said:
            ended.append(_finish(folder, job, progress, status, said))
        return status, said

    status, message = _run(folder, options, check, progress, key, ticket, report, end)
    if not ended:  # it ended before it had a place (cancelled while it waited, refused, failed)
        end(status, message)
    outcome = ended[0]
    if report is not None:
        with contextlib.suppress(Exception):  # Dash's progress store on a full disk: the outcome is said all the same
            report(progress.state)
    return outcome


def _run(
    folder: Path,
    options: api.TrainOptions,
    check: TrainingCheck,
    progress: _Progress,
    key: str,
    ticket: Ticket | None,
    report: ProgressReport | None,
    end: Callable[[str, str], tuple[str, str]] | None = None,
) -> tuple[str, str]:
    """Take a place (at once with the started ``ticket`` of a queued training, else waiting in this process), train
    and install the model, the job's heartbeat beating and its progress handed to ``report`` every second; how it
    ended (a status and a sentence; the previous model stays current unless it finished). A run that had its place
    is recorded by ``end`` before it gives the place back, so that a job whose record says running holds a place or
    waits for one (the next job started while the last one's record still said running, issue 51)."""
    files = training_files(folder)

    def hand_progress() -> None:
        latest = read_progress(folder)
        if report is not None and latest is not None:
            report(latest | {"now": time.time()})  # the page's clock runs between iterations (112 s at 5,000)

    def waiting(place: int) -> None:
        progress.update(phase="queued", message=place_message(place))

    with files.alive(hand_progress):
        try:
            with held_place(waiting, files.cancel.exists, ticket) as placed:
                if not placed:
                    return CANCELLED, WAITED_CANCELLED
                progress.update(phase="training", message=check.message)
                ended = _train_and_install(folder, options, check, progress, key)
                return end(*ended) if end is not None else ended
        except QueueFull as exc:
            return REFUSED, str(exc)
        except JobTerminated:  # Cancel under Celery also revokes the task (SIGTERM): said as the user's cancel
            return CANCELLED, SERVER_STOPPED
        except JobMemoryError as exc:  # past the server's memory limit per job (CHMM_MAX_JOB_MB)
            return FAILED, f"Training stopped: {exc}; choose fewer states. The previous model is kept."
        except MemoryError:
            return FAILED, "Training ran out of memory; choose fewer states. The previous model is kept."
        except Exception as exc:  # any engine error becomes a message in the page; the current model is untouched
            return FAILED, f"Training failed: {services.describe_error(exc)}. The previous model is still current."


def worker_note(timeout_s: float = 1.0) -> str | None:
    """With Celery (``REDIS_URL``): a message when no worker answers a ping within ``timeout_s`` (a job would wait
    in the queue until one starts) or Redis cannot be reached; None when a worker answers, or without Celery."""
    url = config.redis_url()
    if not url:
        return None
    from celery import Celery

    try:
        replies = Celery(broker=url, backend=url).control.ping(timeout=timeout_s)
    except Exception as exc:  # Redis down or unreachable: kombu raises several kinds
        return f"The job queue (Redis) cannot be reached ({services.describe_error(exc)}); the job cannot start."
    if replies:
        return None
    return (
        "No Celery worker is running: the job waits in the queue until one starts "
        "(celery -A app.main:celery_app worker)."
    )


def cluster_note() -> str:
    """Where batch EM's E-step runs: on the Dask cluster of ``DASK_SCHEDULER_ADDRESS``, or in the job's process."""
    address = config.dask_scheduler()
    if address:
        return (
            f"The E-steps of batch and online EM run on the Dask cluster at {address} (DASK_SCHEDULER_ADDRESS); "
            "Viterbi EM runs in the background job."
        )
    return "Training runs in the background job's process (set DASK_SCHEDULER_ADDRESS to use a Dask cluster)."


def _train_and_install(
    folder: Path, options: api.TrainOptions, check: TrainingCheck, progress: _Progress, key: str
) -> tuple[str, str]:
    cancel_flag = folder / sessions.CANCEL
    limit_s = config.max_job_seconds()
    deadline = time.time() + limit_s

    def stop() -> bool:
        return cancel_flag.exists() or time.time() > deadline

    address = config.dask_scheduler() if options.algorithm != "viterbi" else None
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(api.open_cluster(address)) if address else None
        outcome = api.train_text(
            check.corpus_text,
            options,
            callback=progress.record,
            cancel=api.CancelToken(poll=stop),
            name=check.name,
            cluster=cluster,
        )
    if outcome.result.stopped == "cancelled" and not cancel_flag.exists() and time.time() > deadline:
        return FAILED, (
            f"Training reached the server's time limit of {limit_s / 60:g} minutes (CHMM_MAX_JOB_MINUTES) and "
            "stopped; the previous model is still current. Choose fewer states or iterations."
        )
    if outcome.result.stopped == "cancelled" or cancel_flag.exists():
        done = len(progress.state["history"]) + len(progress.state["refit"])
        return CANCELLED, f"Training cancelled after {done} iteration(s); the previous model is still current."
    if outcome.result.stopped == "failed":
        reason = outcome.result.error or "unknown error"
        exceeded = memory_exceeded()  # the engine took the memory watch's JobMemoryError for a failed run
        if exceeded:
            return FAILED, f"Training stopped: {exceeded}; choose fewer states. The previous model is still current."
        return FAILED, f"Training failed ({reason}); the previous model is still current."
    ngram = api.learners.ngram_beside(check.corpus_text, options, outcome.model.codec.normalisation, check.name)
    outcome.summary["ngram"] = outcome.model.metadata["ngram"] = ngram
    jobs_dir = folder / sessions.JOBS
    jobs_dir.mkdir(exist_ok=True)
    trained = jobs_dir / f"{key}.npz"
    api.save_model(outcome.model, trained)
    if not install_unless_cancelled(folder, key, trained):  # cancelled while saving: keep the previous model
        return CANCELLED, "Training cancelled; the previous model is still current."
    progress.keep(outcome.result.history)
    progress.update(test_bps=outcome.summary.get("test_bps"), states=outcome.summary.get("states"))
    return FINISHED, _summary_message(outcome.summary)


def install_unless_cancelled(folder: Path, key: str, trained: Path) -> bool:
    """Make the job ``key``'s ``trained`` model the session's current one unless a Cancel came first (then the file
    is removed and False returned). Held against :func:`request_cancel` (:meth:`JobKind.installing`): the job's
    record is marked ``installed`` in the same hold, so a Cancel after it says the new model is current."""
    files = training_files(folder)
    with TRAINING.installing(folder):
        if files.cancel.exists():
            trained.unlink(missing_ok=True)
            return False
        sessions.install_model(folder, trained)
        record = files.read()
        if record is not None and record.get("key") == key:
            files.write(record | {"installed": True})
    return True


SERVER_STOPPED = "The server stopped the training job; the previous model is still current."


USER_CANCELLED = "Training cancelled; the previous model is still current."


def request_cancel(folder: Path) -> str:
    """Ask the session's running job to stop (the cancel flag file) and say what the page should show. Under Celery
    the same click revokes the task, whose SIGTERM may end the job before this flag is written: a job just ended
    as stopped by the server is then recorded as the user's cancel. (Not :meth:`app.jobs.JobKind.cancel_running`:
    a training's record may say its model is installed already, and its progress and runs are rewritten too.)"""
    files = training_files(folder)
    with TRAINING.installing(folder):  # never between the job's check of the flag and its install
        waited, job = TRAINING.cancel(folder)
    if waited:
        return WAITED_CANCELLED  # it only waited (or its job had not begun): no record to change
    if job and (job.get("status") == FINISHED or job.get("installed")):
        return "The job had already finished; its model is current (use Undo on the Model page to go back)."
    message = USER_CANCELLED
    if job and (job.get("status") == RUNNING or stopped_just_now(job, SERVER_STOPPED)):
        job.update(status=CANCELLED, message=message, finished=time.time())
        files.write(job)
        progress = read_progress(folder)
        if progress is not None and progress.get("key") == job.get("key"):
            progress.update(status=CANCELLED, message=message)
            atomic_write_json(folder / sessions.PROGRESS, progress)
            if progress.get("history") or progress.get("refit"):
                record_run(folder, job, progress)  # now: the job may be killed before it records itself
    return message


def running_summary(folder: Path) -> list[tuple[str, str]]:
    """The session's running jobs as (short text, page) pairs for the navigation bar: a training job's iteration,
    a comparison's learners done, an Infomap run, a map job."""
    found: list[tuple[str, str]] = []
    if training_ticket(folder) is not None:
        found.append(("Training: waiting for a place", "/train"))
    elif job_running(folder):
        progress = read_progress(folder) or {}
        history = progress.get("history") or []
        if progress.get("phase") == "refit":
            found.append(("Training: refit", "/train"))
        elif history:
            found.append((f"Training: iteration {len(history)} of {progress.get('max_iterations', '?')}", "/train"))
        else:
            found.append(("Training: starting", "/train"))
    if comparisons.comparison_ticket(folder) is not None:
        found.append(("Comparing: waiting for a place", "/compare"))
    elif comparisons.compare_running(folder):
        saved = comparisons.read_compare(folder) or {}
        rows = saved.get("results") or []
        done = sum(row.get("status") not in (comparisons.PENDING, comparisons.TRAINING) for row in rows)
        found.append((f"Comparing: {done} of {len(rows)} learners done", "/compare"))
    if graph_service.INFOMAP.running(folder):
        found.append(("Finding communities (Infomap)", "/communities"))
    if map_service.map_ticket(folder) is not None:
        found.append(("Map: waiting for a place", "/maps"))
    elif map_service.map_running(folder):
        found.append(("Learning a map", "/maps"))
    return found
