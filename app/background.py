"""What the app's background jobs (training, comparison) share: the job's record file, its heartbeat, its cancel
flag, the statuses, and the rule that a job is running only while its heartbeat is fresh.

A job runs in a background process (Dash's diskcache manager, or a Celery worker): it writes its record (JSON,
atomically), touches its heartbeat file every second from a thread, and polls its cancel flag. A page asks
:meth:`JobFiles.running`: status ``running`` *and* a heartbeat in the last :data:`STALE_AFTER_S` seconds, and
:meth:`JobFiles.reap` marks a job whose heartbeat stopped (its process killed, its Celery worker gone) as failed,
so the page says so within seconds instead of showing its last progress forever."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.files import atomic_write_json

RUNNING, FINISHED, CANCELLED, FAILED, REFUSED = "running", "finished", "cancelled", "failed", "refused"
HEARTBEAT_S = 1.0
STALE_AFTER_S = 6.0
"""A running job whose heartbeat is older than this has died (the heartbeat thread beats every second; the
engine's kernels release the GIL, so a busy job still beats)."""
DIED = (
    "stopped without finishing: its process or worker died (killed, out of memory, or the server restarted)"
)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``, or None when it is missing, unreadable or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class JobFiles:
    """The files of one kind of job in a session folder: its record, its heartbeat and its cancel flag."""

    record: Path
    heartbeat: Path
    cancel: Path

    def read(self) -> dict[str, Any] | None:
        """The job's record (None before any job)."""
        return read_json(self.record)

    def write(self, record: dict[str, Any]) -> None:
        """Replace the job's record atomically."""
        atomic_write_json(self.record, record)

    def running(self, now: float | None = None, record: dict[str, Any] | None = None) -> bool:
        """Whether the job is running: status ``running`` with a heartbeat in the last :data:`STALE_AFTER_S`."""
        record = self.read() if record is None else record
        if not record or record.get("status") != RUNNING:
            return False
        now = time.time() if now is None else now
        try:
            last = self.heartbeat.stat().st_mtime
        except OSError:
            last = float(record.get("started", 0.0))
        return now - last < STALE_AFTER_S

    def reap(self, now: float | None = None) -> dict[str, Any] | None:
        """If the job's record says running but its heartbeat is stale, record it as failed (and raise its cancel
        flag, so that a job that was only stalled stops without installing anything) and return the record;
        else None."""
        record = self.read()
        if not record or record.get("status") != RUNNING or self.running(now, record):
            return None
        self.request_cancel()
        record.update(status=FAILED, message=f"The job {DIED}.", finished=time.time())
        self.write(record)
        return record

    def cancel_requested(self) -> bool:
        return self.cancel.exists()

    def request_cancel(self) -> None:
        self.cancel.touch()

    @contextmanager
    def alive(self, report: Callable[[], None] | None = None) -> Iterator[None]:
        """While the block runs, a thread touches the heartbeat every :data:`HEARTBEAT_S` seconds (and calls
        ``report``, e.g. to hand the progress to the page)."""
        self.heartbeat.touch()
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(HEARTBEAT_S):
                self.heartbeat.touch()
                if report is not None:
                    report()

        thread = threading.Thread(target=beat, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)


def reap_finished_children() -> None:
    """Collect the job processes of this web worker that have ended (finished, or terminated by a cancel), as their
    starters would on their next job: without it each cancelled job stayed a zombie process until the next job of
    the worker started (24 were seen). Only children that have ended are joined; running ones are left alone."""
    _live_children()  # active_children() joins (reaps) the children that have ended


JOB_STOP_S = 20.0
"""Seconds a web worker on its way out waits for its job processes to stop (:func:`stop_children`): within
gunicorn's graceful timeout (30 s, ``app/gunicorn_conf.py``)."""


def _live_children() -> list[Any]:
    """This process's running children, from both process modules (asking each reaps its ended children)."""
    import multiprocessing

    children = list(multiprocessing.active_children())
    try:
        import multiprocess  # the fork of multiprocessing that Dash's Diskcache manager starts jobs with
    except ImportError:
        return children
    return children + list(multiprocess.active_children())


def stop_children(timeout: float = JOB_STOP_S) -> int:
    """Stop the job processes this web worker started, as a worker does on its way out (gunicorn's ``worker_exit``
    hook in ``app/gunicorn_conf.py``): each gets SIGTERM, records that the server stopped it and exits with the last
    good model current (:func:`job_process`); those still running after ``timeout`` seconds are killed (their
    records then read as died, :meth:`JobFiles.reap`). Before, a server stopped with SIGTERM left its jobs running as
    orphans. Returns how many were stopped."""
    children = _live_children()
    for child in children:
        with contextlib.suppress(OSError, ValueError):
            child.terminate()
    deadline = time.monotonic() + timeout
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
    for child in children:
        if child.is_alive():
            with contextlib.suppress(OSError, ValueError):
                child.kill()
                child.join(1.0)
    return len(children)


class JobTerminated(BaseException):
    """SIGTERM reached a background job's process (a BaseException, so that no ``except Exception`` swallows it)."""


def close_inherited_listeners() -> int:
    """Close the listening sockets this process inherited from the web server it was forked from (gunicorn's
    or Dash's): a job that keeps one would hold the server's port after the server died, so that a restart fails
    with "Address already in use". Returns how many were closed."""
    try:
        descriptors = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: try the usual range
        descriptors = list(range(3, 1024))
    closed = 0
    for fd in descriptors:
        if fd < 3:
            continue
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            probe = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            listening = probe.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        except OSError:
            listening = 0
        finally:
            probe.close()
        if listening:
            os.close(fd)
            closed += 1
    return closed


JOB_NICENESS = 10
"""The CPU priority (niceness) of a job process: below the web workers', so that page loads stay fast while jobs
train on every core (bench/bench_load.py measures it)."""


def lower_priority(niceness: int = JOB_NICENESS) -> None:
    """Lower this process's CPU priority to ``niceness`` (never raise it: a Celery pool process already lowered by
    an earlier job stays where it is). Threads and processes started afterwards (numba's, restarts') inherit it."""
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no setpriority on this platform
        if os.getpriority(os.PRIO_PROCESS, 0) < niceness:
            os.setpriority(os.PRIO_PROCESS, 0, niceness)


class JobTimeout(BaseException):
    """A background job ran past its wall-clock limit (:func:`job_process`'s ``time_limit``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"it ran past its limit of {seconds:g} s")
        self.seconds = seconds


@contextmanager
def job_process(time_limit: float | None = None) -> Iterator[None]:
    """Run a background job's body as a well-behaved process: the web server's listening sockets closed, its CPU
    priority below the web workers' (:func:`lower_priority`), and SIGTERM (which gunicorn's handlers, inherited
    by a forked job, would ignore) raising :class:`JobTerminated` so that the job records how it ended and exits;
    with ``time_limit``, :class:`JobTimeout` raised in the body after that many seconds (a timer signal). The
    previous handlers are restored afterwards (a Celery pool process runs further tasks)."""
    close_inherited_listeners()
    lower_priority()
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(_signum: int, _frame: object) -> None:
        raise JobTerminated("the server stopped the job (SIGTERM)")

    def expire(_signum: int, _frame: object) -> None:
        raise JobTimeout(float(time_limit or 0.0))

    previous = signal.signal(signal.SIGTERM, terminate)
    previous_alarm = signal.signal(signal.SIGALRM, expire) if time_limit else None
    if time_limit:
        signal.setitimer(signal.ITIMER_REAL, time_limit)
    try:
        yield
    finally:
        if time_limit:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
            signal.signal(signal.SIGALRM, previous_alarm)
        signal.signal(signal.SIGTERM, previous)


SLOTS = ".slots"
QUEUE = ".queue"
TICKET_STALE_S = 10.0


class QueueFull(Exception):
    """No free place and as many jobs waiting as the server allows (:func:`app.config.max_waiting_jobs`); the message
    is a sentence for the page."""


class JobSlot:
    """A place among the server's :func:`app.config.max_jobs` jobs that may run at once, shared by every web
    worker, job process and Celery worker that sees the data folder: slot ``i`` is held by an exclusive
    ``flock`` on ``<data folder>/.slots/<i>``, which the kernel releases when the holder's process dies, so a
    killed job never keeps its slot. Jobs that find no free slot wait in a first-come queue of ticket files
    (``.queue/``, each touched every second by its waiting job; a ticket left by a dead job goes stale)."""

    def __init__(self, root: Path, limit: int, max_waiting: int | None = None) -> None:
        self.root, self.limit, self.max_waiting = root, max(int(limit), 1), max_waiting
        self._handle: Any = None
        self._ticket: Path | None = None

    def _try_acquire(self) -> bool:
        folder = self.root / SLOTS
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(self.limit):
            handle = open(folder / str(index), "a+b")  # noqa: SIM115 (held open for as long as the slot is held)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            self._handle = handle
            return True
        return False

    def place(self, now: float | None = None) -> int:
        """This job's place in the queue (1: next), counting only live tickets (stale ones are deleted)."""
        now = time.time() if now is None else now
        live = []
        for ticket in (self.root / QUEUE).glob("*"):
            try:
                if now - ticket.stat().st_mtime > TICKET_STALE_S and ticket != self._ticket:
                    ticket.unlink(missing_ok=True)
                    continue
            except OSError:
                continue
            live.append(ticket.name)
        assert self._ticket is not None
        return sorted(live).index(self._ticket.name) + 1 if self._ticket.name in live else 1

    def waiters(self, now: float | None = None) -> int:
        """Live tickets in the queue: jobs that were there first."""
        now = time.time() if now is None else now
        count = 0
        for ticket in (self.root / QUEUE).glob("*"):
            try:
                count += now - ticket.stat().st_mtime <= TICKET_STALE_S
            except OSError:
                continue
        return count

    def acquire(self, waiting: Callable[[int], None], stop: Callable[[], bool]) -> bool:
        """Take a free slot, waiting in the queue while there is none; ``waiting(place)`` is called every second
        meanwhile. False when ``stop()`` turns true first (the job was cancelled while it waited). First come,
        first served: a newcomer takes a free slot at once only when nobody waits in the queue (it took the slot
        a waiter was about to take: under Celery one visitor finished 1 training in 134 s while others did 9)."""
        waiting_now = self.waiters()
        if not waiting_now and self._try_acquire():
            return True
        if self.max_waiting is not None and waiting_now >= self.max_waiting:
            raise QueueFull(
                f"The server is busy: {self.limit} job(s) run and {waiting_now} wait for a place; nothing was started, "
                "try again in a few minutes."
            )
        queue = self.root / QUEUE
        queue.mkdir(parents=True, exist_ok=True)
        self._ticket = queue / f"{time.time_ns():020d}-{os.getpid()}-{threading.get_ident()}"
        self._ticket.touch()
        try:
            while True:
                self._ticket.touch()
                place = self.place()
                if place <= 1 and self._try_acquire():
                    return True
                if stop():
                    return False
                waiting(place)
                time.sleep(HEARTBEAT_S)
        finally:
            self._ticket.unlink(missing_ok=True)
            self._ticket = None

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing the file releases its flock
            self._handle = None
