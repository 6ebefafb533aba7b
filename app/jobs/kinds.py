"""One kind of background job (:class:`JobKind`): what every kind of the app's jobs (training, comparison, map,
Infomap run) does the same way, written once.

A kind has a name (its tickets' kind in the server's queue, :class:`app.jobs.Ticket`), a word for its sentences
(``what``: "training", "comparison", "map") and its files in a session folder (:class:`app.jobs.JobFiles`: its
record, heartbeat and cancel flag). Its lifecycle is the same for all:

* **Start** (the web worker, :meth:`JobKind.enter`): refused at once, with a sentence, when one of the session's jobs
  of the kind runs or waits (:meth:`JobKind.busy`); else the kind's own check, then a ticket in the queue holding a
  new key and what the job needs;
* **queue** (the page's one-second poll, :meth:`JobKind.queue_view`): the ticket's place, and the job to start when its
  turn has come;
* **run** (the job's process, :meth:`JobKind.run_queued`): the kind's job body, given the started ticket's data and
  the ticket (it takes the ticket's place at once); the ticket is gone when it ends;
* **cancel** (:meth:`JobKind.cancel`): a job that only waited leaves the queue; a running one is stopped through
  its cancel flag (:meth:`app.jobs.JobFiles.request_cancel`);
* **reap** (:meth:`app.jobs.JobFiles.reap`): a job whose heartbeat stopped is recorded as failed.

What differs between kinds (the check, the job body, the record a page shows) stays in its service module
(:mod:`app.services.training_jobs`, :mod:`app.services.comparisons`, :mod:`app.services.maps`,
:mod:`app.services.graphs`), which defines its kind with this class."""

from __future__ import annotations

import contextlib
import fcntl
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from app.jobs import queue
from app.jobs.records import CANCELLED, DIED, RUNNING, JobFiles, sweep_temporary

T = TypeVar("T")


JUST_STOPPED_S = 30.0
"""How long after the server stopped a job (SIGTERM) a Cancel of its session is taken as the cause."""


def stopped_just_now(record: dict[str, Any] | None, stopped: str) -> bool:
    """Whether the job ``record`` ended with the server's stop sentence ``stopped`` in the last
    :data:`JUST_STOPPED_S` seconds: under Celery, Cancel revokes the task (SIGTERM) as well as raising the flag."""
    if not record or record.get("message") != stopped:
        return False
    return time.time() - record.get("finished", 0) < JUST_STOPPED_S


def new_key() -> str:
    """A new job's key (its record and its ticket carry it)."""
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class JobKind:
    """One kind of background job: ``name`` in the server's queue, ``what`` in the page's sentences, and the names
    of its files in a session folder (:meth:`files`)."""

    name: str
    what: str
    file_names: tuple[str, str, str]
    """The record's, the heartbeat's and the cancel flag's file names in a session folder."""

    def files(self, folder: Path) -> JobFiles:
        """The kind's record, heartbeat and cancel flag in a session folder."""
        record, heartbeat, cancel = self.file_names
        return JobFiles(folder / record, folder / heartbeat, folder / cancel)

    def read(self, folder: Path) -> dict[str, Any] | None:
        """The session's latest record of the kind (None before any)."""
        return self.files(folder).read()

    def running(self, folder: Path, now: float | None = None) -> bool:
        """Whether a job of the kind runs in the session (:meth:`app.jobs.JobFiles.running`)."""
        return self.files(folder).running(now)

    def runs_another(self, folder: Path, key: str) -> bool:
        """Whether a job of the kind other than the job ``key`` runs in the session (then ``key`` is refused)."""
        return self.running(folder) and (self.read(folder) or {}).get("key") != key

    def new_record(self, folder: Path, key: str, message: str, **fields: Any) -> dict[str, Any]:
        """The record of the job ``key`` that begins (running, started now, saying ``message``, with ``fields``);
        the session's cancel flag of the kind (a cancel of the job before) is lowered. Not written yet."""
        self.files(folder).cancel.unlink(missing_ok=True)
        return {"key": key, "status": RUNNING, "message": message, **fields, "started": time.time()}

    def reap_said(self, folder: Path, subject: str, remedy: str, kept: str, now: float | None = None) -> str | None:
        """If the session's job of the kind died without a word (its heartbeat stopped: the sentinel killed it past
        the job memory limit, or its process or worker died), mark its record failed (:meth:`JobFiles.reap`) and
        return the sentence its page shows: "``subject`` stopped: <the cause the sentinel noted>; ``remedy``.
        ``kept``", or that the disk is full (its record could not be written), or that it died; else None."""
        record = self.files(folder).reap(now)
        if record is None:
            return None
        if record.get("disk_full"):
            return f"{subject} stopped: the server's disk filled up while it ran. {kept}"
        cause = record.get("cause")
        if cause:
            return f"{subject} stopped: {cause}; {remedy}. {kept}"
        return f"{subject} {DIED}. {kept}"

    def ticket(self, folder: Path) -> queue.Ticket | None:
        """The session's job of the kind in the queue (waiting, or started and not yet running), if any."""
        return queue.server_queue().find(self.name, folder.name)

    def busy(self, folder: Path) -> bool:
        """Whether a job of the kind runs or waits in the session."""
        return self.running(folder) or self.ticket(folder) is not None

    @contextlib.contextmanager
    def _holding(self, folder: Path, what: str) -> Iterator[None]:
        """An exclusive ``flock`` on the session's lock file ``.<kind>-<what>.lock`` for the block (the kernel
        releases it when the holder's process dies)."""
        with open(folder / f".{self.name}-{what}.lock", "a", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def entering(self, folder: Path) -> Iterator[None]:
        """Hold the session's Start of the kind for the block, so that two tabs (or web workers) pressing Start at
        once check :meth:`busy` and :meth:`enter` one after the other, and the second sees the first's ticket (one
        job of a kind per session); the temporary files an earlier job killed mid-write left are swept first
        (:func:`app.jobs.records.sweep_temporary`)."""
        with self._holding(folder, "start"):
            sweep_temporary(folder)  # a cancelled or killed write of an earlier job of the session
            yield

    @contextlib.contextmanager
    def installing(self, folder: Path) -> Iterator[None]:
        """Hold the moment a job of the kind installs its result against a Cancel of the session (both take this
        lock): the job installs only when no cancel flag is up and marks its record installed, and a Cancel that
        comes later reads that mark, so the page never says "the previous model is still current" over the new
        one."""
        with self._holding(folder, "install"):
            yield

    @contextlib.contextmanager
    def ending(self, folder: Path, message: str, stopped: str, cancelled: str) -> Iterator[str]:
        """The sentence a job's end records, held for the block against a Cancel of the session (the lock of
        :meth:`installing`, taken only when ``message`` is ``stopped``, the server's stop): ``cancelled`` when the
        session's cancel flag is up. Under Celery one click raises the flag and revokes the task (SIGTERM to the
        job); a job that read no flag, then recorded that the server stopped it, wrote over the record of a Cancel
        that came between the two. Under the lock the Cancel comes before the read or after the write (and then
        reads a job the server stopped just now, :meth:`cancel_running`)."""
        if message != stopped:
            yield message
            return
        with self._holding(folder, "install"):
            yield cancelled if self.files(folder).cancel.exists() else message

    def record_end(
        self, folder: Path, record: dict[str, Any], publish: Callable[..., None], status: str, message: str,
        stopped: str, cancelled: str,
    ) -> str:
        """Record how a job ended (its ``status``, and its sentence as :meth:`ending` says it, which is returned):
        written under the lock, then handed to the page (``publish``, Redis under Celery) after it; a full disk
        costs the record, never the outcome."""
        with self.ending(folder, message, stopped, cancelled) as said, contextlib.suppress(OSError):
            record.update(status=status, message=said, finished=time.time())
            self.files(folder).write(record)
        with contextlib.suppress(OSError):
            publish(force=True)
        return said

    def cancel_running(self, folder: Path, sentence: str, stopped: str) -> tuple[bool, dict[str, Any] | None]:
        """A Cancel of the session's job (:meth:`cancel`, under the lock of :meth:`ending`): a running job, or one
        the server stopped (its sentence ``stopped``) in the last :data:`JUST_STOPPED_S` seconds (Celery's revoke
        of the same click came first), is recorded cancelled with ``sentence``. Returns :meth:`cancel`'s pair,
        the record as it now stands. A job whose record says its result is ``installed`` is left to finish."""
        with self._holding(folder, "install"):
            waited, record = self.cancel(folder)
            running = record and not record.get("installed") and record.get("status") == RUNNING
            if not waited and record and (running or stopped_just_now(record, stopped)):
                record.update(status=CANCELLED, message=sentence, finished=time.time())
                self.files(folder).write(record)
        return waited, record

    def enter(self, folder: Path, payload: dict[str, Any]) -> queue.Ticket:
        """Put a job of the kind for the session into the server's queue, holding a new key and ``payload`` (the
        caller has checked it); :class:`app.jobs.QueueFull` when the queue is full."""
        return queue.server_queue().enter(self.name, folder.name, {"key": new_key()} | payload)

    def queue_view(self, folder: Path, shown: dict[str, Any] | None) -> tuple[Any, Any]:
        """What the session's pages show of its job of the kind in the queue, and the job to start when its turn
        has come (:func:`app.jobs.queue_view`)."""
        return queue.queue_view(self.name, folder.name, self.files(folder), self.what, shown)

    def run_queued(
        self, folder: Path, ticket_name: Any, start: Callable[[dict[str, Any], queue.Ticket], T], waited: T
    ) -> T:
        """The job of a queued run whose turn has come (started by the page with its started ticket's name):
        ``start(data, ticket)`` runs the kind's job body on what the ticket holds, taking the place the ticket held
        at once; ``waited`` when the ticket was withdrawn (cancelled) before the job began. The ticket is gone when
        it ends (a job refused before it took its place leaves none behind)."""
        ticket = queue.started_ticket(ticket_name, self.name, folder.name)
        data = ticket.read() if ticket is not None else None
        if ticket is None or data is None:
            return waited
        try:
            return start(data, ticket)
        finally:
            queue.server_queue().withdraw(ticket)

    def cancel(
        self, folder: Path, read: Callable[[Path], dict[str, Any] | None] | None = None
    ) -> tuple[bool, dict[str, Any] | None]:
        """The shared part of a cancel: raise the kind's cancel flag (a running job stops within an iteration) and
        take the session's job of the kind out of the queue. Returns whether it only waited (or its job had not
        begun: the session's latest record, which is returned too, read with ``read``, is not of its key), so that
        there is no record to change."""
        files = self.files(folder)
        files.request_cancel()
        ticket = self.ticket(folder)
        record = files.read() if read is None else read(folder)
        if ticket is None:
            return False, record
        key = (ticket.read() or {}).get("key")
        return queue.server_queue().withdraw(ticket) and (not record or record.get("key") != key), record
