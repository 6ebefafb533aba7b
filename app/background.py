"""What the app's background jobs (training, comparison) share: the job's record file, its heartbeat, its cancel
flag, the statuses, and the rule that a job is running only while its heartbeat is fresh.

A job runs in a background process (Dash's diskcache manager, or a Celery worker): it writes its record (JSON,
atomically), touches its heartbeat file every second from a thread, and polls its cancel flag. A page asks
:meth:`JobFiles.running`: status ``running`` *and* a heartbeat in the last :data:`STALE_AFTER_S` seconds, and
:meth:`JobFiles.reap` marks a job whose heartbeat stopped (its process killed, its Celery worker gone) as failed,
so the page says so within seconds instead of showing its last progress forever.

Also shared: the server's places and its first-come queue (:class:`JobSlot`: a job waiting for a place is a ticket
file that its pages keep alive, not a process), and the process a job runs as (:func:`job_process`: its priority, its
signals, its time limit and its memory limit, :class:`MemoryWatch`)."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app import config
from app.sentinel import note_cause, tree_rss
from engine.files import atomic_write_json

RUNNING, FINISHED, CANCELLED, FAILED, REFUSED = "running", "finished", "cancelled", "failed", "refused"
HEARTBEAT_S = 1.0
STALE_AFTER_S = 6.0
"""A running job whose heartbeat is older than this has died (the heartbeat thread beats every second; the
engine's kernels release the GIL, so a busy job still beats)."""
DIED = "stopped without finishing: its process or worker died (killed, out of memory, or the server restarted)"


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
        cause = record.get("cause")
        message = f"The job stopped: {cause}." if cause else f"The job {DIED}."
        record.update(status=FAILED, message=message, finished=time.time())
        self.write(record)
        return record

    def note_cause(self, cause: str) -> None:
        """Write into a running job's record why it is about to be killed (``cause``, a clause such as "it needed
        more than 900 MB, ..."), for :meth:`reap` to say instead of "died" once its heartbeat has stopped."""
        note_cause(self.record, cause)

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


NOTICE_SHOWN_S = 120.0
"""How long the shell shows a session's notice (:func:`read_notice`)."""


def read_notice(folder: Path, now: float | None = None) -> dict[str, Any] | None:
    """The session's notice (``time`` and ``message``: why a request job of it was killed, written by its sentinel,
    :mod:`app.sentinel`) while it is at most :data:`NOTICE_SHOWN_S` seconds old; else None."""
    from app import sessions

    notice = read_json(folder / sessions.NOTICE)
    if not notice or not isinstance(notice.get("message"), str) or not isinstance(notice.get("time"), (int, float)):
        return None
    now = time.time() if now is None else now
    return notice if 0 <= now - float(notice["time"]) <= NOTICE_SHOWN_S else None


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
        super().__init__(time_clause(seconds))
        self.seconds = seconds


def time_clause(seconds: float) -> str:
    """Why a job was stopped at its time limit, as a clause."""
    return f"it ran past its limit of {seconds:g} s"


def memory_clause(limit_bytes: int) -> str:
    """Why a job was stopped for its memory, as a clause the pages put into their sentences."""
    return f"it needed more than {limit_bytes / config.MEGABYTE:,.0f} MB, the server's limit per job (CHMM_MAX_JOB_MB)"


class JobMemoryError(MemoryError):
    """A background job's processes went past the server's memory limit per job (:func:`app.config.max_job_bytes`):
    raised in the job's thread by :class:`MemoryWatch`. A MemoryError, so that every handler of running out of memory
    handles it too; its message is :func:`memory_clause`."""

    limit_bytes = 0
    """Set on the subclass a watch raises (an asynchronous exception is raised from its class, without arguments)."""

    def __init__(self, limit_bytes: int | None = None) -> None:
        if limit_bytes is not None:
            self.limit_bytes = limit_bytes
        super().__init__(memory_clause(self.limit_bytes))


MEMORY_CHECK_S = 0.2
"""How often a job's :class:`MemoryWatch` reads its resident memory (a read of /proc: microseconds)."""
MEMORY_GRACE_S = 10.0
"""Seconds a job may stay above its memory limit after :class:`JobMemoryError` was raised in it (time for the
exception to unwind and free the arrays) before its watch kills it."""
MEMORY_HARD_FACTOR = 1.25
"""A job whose resident memory passes this multiple of its limit is killed at once: a single kernel that keeps
filling memory cannot be interrupted by an exception before it returns, and must not reach the OOM killer."""


def _raise_in_thread(thread_id: int, error: type[BaseException] | None) -> None:
    """Raise ``error`` asynchronously in the Python thread ``thread_id`` (at its next bytecode: a numba kernel or a
    NumPy call that runs without the GIL finishes first); None withdraws one not yet raised."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(error) if error is not None else None
    )


class MemoryWatch:
    """The memory limit of one background job, in two parts. A thread reads the resident memory of the job's process
    and its descendants every :data:`MEMORY_CHECK_S` seconds and, past ``limit_bytes``, raises
    :class:`JobMemoryError` in the job's thread, so that the job ends with its true cause, through the same handlers
    as any ``MemoryError``. The limit is the processes' real footprint, not an address-space limit (``RLIMIT_AS``,
    ``RLIMIT_DATA``): those count the reserved, untouched stacks and buffers of numba's and BLAS's threads (24 and
    37 MB here, for one thread of each), and near such a limit numba's OpenMP pool, unable to start its threads, spun
    for ever (measured). A thread runs only when the GIL is free, so the killing is done by a separate process, the
    job's sentinel (:mod:`app.sentinel`): a job still above the limit :data:`MEMORY_GRACE_S` seconds later, or above
    :data:`MEMORY_HARD_FACTOR` times it at any time, or (with ``deadline``) :data:`MEMORY_GRACE_S` seconds past its
    time limit, is killed with its descendants, after its ``record`` (a :class:`JobFiles`) or ``notice`` (a file
    and a sentence with ``{cause}``, for a request job) was told why, so that its page says so instead of "died" or
    nothing. While the job runs, the sentinel also touches the record's heartbeat, which a job inside C code that
    holds the GIL (Infomap's) could not do."""

    def __init__(
        self,
        limit_bytes: int,
        record: JobFiles | None = None,
        deadline: float | None = None,
        notice: tuple[Path, str] | None = None,
    ) -> None:
        self.limit_bytes, self.record, self.deadline, self.notice = int(limit_bytes), record, deadline, notice
        self.thread_id = threading.get_ident()
        self.exceeded = False
        self.peak = 0
        self._error = type("JobMemoryError", (JobMemoryError,), {"limit_bytes": self.limit_bytes})
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._raised = False
        self._over = False  # raised for the current excess (until the memory is back under the limit)
        self._thread: threading.Thread | None = None
        self._sentinel: subprocess.Popen[bytes] | None = None

    def start(self) -> MemoryWatch:
        """Start the watch thread and the sentinel process (nothing is watched where psutil is missing)."""
        try:
            import psutil
        except ImportError:  # pragma: no cover (a dependency of Dash's diskcache manager)
            return self
        self._sentinel = self._start_sentinel()
        self._thread = threading.Thread(target=self._watch, args=(psutil.Process(),), daemon=True)
        self._thread.start()
        return self

    def _start_sentinel(self) -> subprocess.Popen[bytes]:
        """``python -m app.sentinel`` watching this process, its standard input the pipe whose closing ends it."""
        arguments = [
            sys.executable, "-m", "app.sentinel", str(os.getpid()), str(self.limit_bytes),
            "--grace", repr(MEMORY_GRACE_S), "--hard-factor", repr(MEMORY_HARD_FACTOR),
            "--check", repr(MEMORY_CHECK_S), "--memory-cause", memory_clause(self.limit_bytes),
        ]  # fmt: skip
        if self.deadline is not None:
            arguments += ["--deadline", repr(float(self.deadline)), "--time-cause", time_clause(self.deadline)]
        if self.record is not None:
            arguments += ["--record", str(self.record.record), "--heartbeat", str(self.record.heartbeat)]
        if self.notice is not None:
            arguments += ["--notice", str(self.notice[0]), "--notice-text", self.notice[1]]
        root = str(Path(__file__).resolve().parents[1])
        environment = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        return subprocess.Popen(arguments, stdin=subprocess.PIPE, env=environment, close_fds=True)

    def stop(self) -> None:
        """Stop watching; an exception requested but not yet raised in the job's thread is withdrawn, and the
        sentinel ends (its pipe closed)."""
        with self._lock:
            self._stop.set()
            if self._raised:
                _raise_in_thread(self.thread_id, None)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self._sentinel is not None:
            with contextlib.suppress(OSError):
                self._sentinel.stdin.close()  # type: ignore[union-attr]
            try:
                self._sentinel.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._sentinel.kill()
                self._sentinel.wait()

    def _watch(self, process: Any) -> None:
        skip = frozenset({self._sentinel.pid}) if self._sentinel is not None else frozenset()
        while not self._stop.wait(MEMORY_CHECK_S):
            rss = tree_rss(process, skip)
            self.peak = max(self.peak, rss)
            if rss <= self.limit_bytes:
                self._over = False  # back under it (the exception did its work): a later excess raises again
                continue
            if self._over:
                continue
            with self._lock:
                if self._stop.is_set():
                    return
                self.exceeded = self._raised = self._over = True
                _raise_in_thread(self.thread_id, self._error)


_WATCHES: list[MemoryWatch] = []
"""The memory watch of the job this process runs (at most one), for :func:`memory_exceeded`."""


def memory_exceeded() -> str | None:
    """The clause saying why, when the memory watch of the job running in this process raised
    :class:`JobMemoryError` (the engine may have caught it as any MemoryError and called the run failed); else
    None."""
    for watch in _WATCHES:
        if watch.exceeded:
            return memory_clause(watch.limit_bytes)
    return None


@contextmanager
def job_process(
    time_limit: float | None = None,
    record: JobFiles | None = None,
    memory_limit: int | None = None,
    notice: tuple[Path, str] | None = None,
) -> Iterator[None]:
    """Run a background job's body as a well-behaved process: the web server's listening sockets closed, its CPU
    priority below the web workers' (:func:`lower_priority`), its memory limited to ``memory_limit`` bytes (default
    :func:`app.config.max_job_bytes`) by a :class:`MemoryWatch` (whose sentinel tells ``record``, or writes
    ``notice``'s sentence into its file, if it must kill the job), and SIGTERM (which gunicorn's handlers, inherited
    by a forked job, would ignore) raising :class:`JobTerminated` so that the job records how it ended and exits;
    with ``time_limit``, :class:`JobTimeout` raised in the body after that many seconds (a timer signal; the
    sentinel kills a body that has not stopped :data:`MEMORY_GRACE_S` seconds later, C code that holds the GIL for
    instance). The previous handlers are restored afterwards (a Celery pool process runs further tasks)."""
    close_inherited_listeners()
    lower_priority()
    limit = config.max_job_bytes() if memory_limit is None else memory_limit
    watch = MemoryWatch(limit, record, deadline=time_limit, notice=notice).start()
    _WATCHES.append(watch)
    try:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        with _signals(time_limit):
            yield
    finally:
        watch.stop()
        _WATCHES.remove(watch)


@contextmanager
def _signals(time_limit: float | None) -> Iterator[None]:
    """SIGTERM raising :class:`JobTerminated`, and with ``time_limit`` a timer raising :class:`JobTimeout`, while the
    block runs (main thread only); the previous handlers restored afterwards."""

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
TICKET_AWAKE_S = 10.0
"""A waiting ticket touched in the last this many seconds is awake and holds back the tickets behind it. One touched
less recently (its page gone, or asleep in a hidden tab whose timers a browser slows to once a minute) keeps its
place but holds nobody back, so an abandoned waiter never blocks the queue."""
TICKET_KEEP_S = 180.0
"""A ticket untouched for longer is dropped (its page was closed); past a browser's slowest timers (one a minute)."""
START_GRACE_S = 30.0
"""A started ticket holds a place for its job this long, while its job process starts (or waits for a Celery
worker); then it holds nobody back, and its job takes a place when it comes, or waits in its process for one."""
WAITING, STARTED = ".wait", ".go"
_TICKET = re.compile(r"^\d{20}-")


class QueueFull(Exception):
    """No free place and as many jobs waiting as the server allows (:func:`app.config.max_waiting_jobs`); the message
    is a sentence for the page."""


@dataclass(frozen=True)
class Ticket:
    """A job waiting for a place: a small JSON file ``<data>/.queue/<ns>-<kind>-<session>.wait`` (its name orders the
    queue by arrival) holding what the job needs to start (its key, the options the user chose). The session's pages
    touch it every second while they are open; when its turn comes, the page that sees it renames it ``.go`` (once:
    a rename is atomic) and starts the job, whose process takes the place at once and deletes the ticket."""

    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def started(self) -> bool:
        return self.path.suffix == STARTED

    def read(self) -> dict[str, Any] | None:
        """What the ticket holds (None once it is gone: taken, withdrawn or dropped)."""
        return read_json(self.path)


@dataclass(frozen=True)
class _Entry:
    """A ticket as the queue sees it: its file, when it was last touched and, once started, when."""

    path: Path
    touched: float
    started: float | None


class JobSlot:
    """A place among the server's :func:`app.config.max_jobs` jobs that may run at once, shared by every web
    worker, job process and Celery worker that sees the data folder: slot ``i`` is held by an exclusive
    ``flock`` on ``<data folder>/.slots/<i>``, which the kernel releases when the holder's process dies, so a
    killed job never keeps its slot.

    Jobs that find no free slot wait in a first-come queue of ticket files (``.queue/``). The app's jobs wait as
    :class:`Ticket` s, not as processes (20 sessions pressing Start left 19 forked processes waiting, 3.26 GB): the
    web worker writes the ticket when the user presses Start (:meth:`enter`), the page's polling asks every second
    whether its turn has come (:meth:`call`), and only then starts the job (a Dash background callback: a forked
    process, or a Celery task), whose process takes the place at once (:meth:`acquire` with the ticket). A ticket
    whose page stopped asking holds nobody back after :data:`TICKET_AWAKE_S` and is dropped after
    :data:`TICKET_KEEP_S`. A caller without a ticket (the tests, a job started by hand) still waits in its own process,
    behind the tickets, with a ticket file it touches itself."""

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

    def free_slots(self) -> int:
        """How many places are free now (each tried and let go at once)."""
        folder = self.root / SLOTS
        folder.mkdir(parents=True, exist_ok=True)
        free = 0
        for index in range(self.limit):
            with open(folder / str(index), "a+b") as handle:  # closing it lets the lock go
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue
                free += 1
        return free

    def _scan(self, now: float) -> list[_Entry]:
        """The queue's tickets in order of arrival; those untouched for :data:`TICKET_KEEP_S` are deleted (never
        this slot's own)."""
        entries = []
        for path in sorted((self.root / QUEUE).glob("*")):
            if not _TICKET.match(path.name):
                continue  # a ticket being written (a temporary file)
            try:
                touched = path.stat().st_mtime
            except OSError:
                continue
            if now - touched > TICKET_KEEP_S and path != self._ticket:
                path.unlink(missing_ok=True)
                continue
            started = None
            if path.suffix == STARTED:
                started = float((read_json(path) or {}).get("started") or touched)
            entries.append(_Entry(path, touched, started))
        return entries

    @staticmethod
    def _ahead(entries: list[_Entry], mine: Path | None, now: float) -> int:
        """How many tickets go before ``mine`` (None: a newcomer, behind all of them): started ones within
        :data:`START_GRACE_S`, and awake waiting ones that came first."""
        count, behind = 0, False
        for entry in entries:
            if entry.path == mine:
                behind = True  # the waiting ones after it come after it
            elif entry.started is not None:
                count += now - entry.started < START_GRACE_S
            elif not behind:
                count += now - entry.touched <= TICKET_AWAKE_S
        return count

    def place(self, now: float | None = None) -> int:
        """This waiting job's place in the queue (1: next)."""
        now = time.time() if now is None else now
        return self._ahead(self._scan(now), self._ticket, now) + 1

    def waiters(self, now: float | None = None) -> int:
        """Tickets waiting in the queue (not yet started), those of pages that are asleep included."""
        now = time.time() if now is None else now
        return sum(entry.started is None for entry in self._scan(now))

    def _check_room(self, now: float) -> None:
        """Raise :class:`QueueFull` (a sentence) when a newcomer would have to wait and :attr:`max_waiting` jobs
        wait already."""
        if self.max_waiting is None:
            return
        waiting_now = self.waiters(now)
        if waiting_now >= self.max_waiting and self._ahead(self._scan(now), None, now) >= self.free_slots():
            raise QueueFull(
                f"The server is busy: {self.limit} job(s) run and {waiting_now} wait for a place; nothing was started, "
                "try again in a few minutes."
            )

    def enter(self, kind: str, session: str, payload: dict[str, Any]) -> Ticket:
        """Put a job of ``kind`` for ``session`` in the queue, holding ``payload``; :class:`QueueFull` when the
        queue is full (nothing is written then)."""
        now = time.time()
        self._check_room(now)
        path = self.root / QUEUE / f"{time.time_ns():020d}-{kind}-{session}{WAITING}"
        atomic_write_json(path, {"kind": kind, "session": session, "created": now} | payload)
        return Ticket(path)

    def find(self, kind: str, session: str) -> Ticket | None:
        """The session's ticket of ``kind`` (waiting or started), if it has one."""
        for entry in self._scan(time.time()):
            if entry.path.stem.endswith(f"-{kind}-{session}"):
                return Ticket(entry.path)
        return None

    def call(self, ticket: Ticket) -> Ticket | int | None:
        """Ask whether a waiting ticket's turn has come (which keeps it alive): its place (1: next) while it waits,
        the started ticket once its turn has come (then the caller starts its job; only one caller gets it), None
        when it is gone (withdrawn, dropped, or started by another page of the session)."""
        try:
            os.utime(ticket.path)
        except FileNotFoundError:
            return None
        now = time.time()
        ahead = self._ahead(self._scan(now), ticket.path, now)
        if ahead >= self.free_slots():
            return ahead + 1
        started = ticket.path.with_suffix(STARTED)
        try:
            os.rename(ticket.path, started)
        except FileNotFoundError:
            return None
        atomic_write_json(started, (read_json(started) or {}) | {"started": now})
        return Ticket(started)

    def withdraw(self, ticket: Ticket) -> bool:
        """Take a ticket out of the queue, waiting or started (a cancel); whether it was there."""
        removed = False
        for suffix in (WAITING, STARTED):
            with contextlib.suppress(FileNotFoundError):
                ticket.path.with_suffix(suffix).unlink()
                removed = True
        return removed

    def acquire(self, waiting: Callable[[int], None], stop: Callable[[], bool], ticket: Ticket | None = None) -> bool:
        """Take a free slot; False when ``stop()`` turns true first (the job was cancelled while it waited). With
        the started ``ticket`` of a job whose turn has come: at once, deleting the ticket (False when it is gone:
        withdrawn by a cancel); if another job took the place meanwhile, this one waits for the next in its process.
        Without a ticket: at once only when nobody waits (first come, first served: under Celery a newcomer took the
        slot a waiter was about to take, and one visitor finished 1 training in 134 s while others did 9), else
        :class:`QueueFull` or waiting in the queue; ``waiting(place)`` is called every second meanwhile."""
        if ticket is not None:
            return self._take(ticket, waiting, stop)
        now = time.time()
        if not self._ahead(self._scan(now), None, now) and self._try_acquire():
            return True
        self._check_room(now)
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

    def _take(self, ticket: Ticket, waiting: Callable[[int], None], stop: Callable[[], bool]) -> bool:
        self._ticket = ticket.path
        try:
            while True:
                try:
                    os.utime(ticket.path)
                except FileNotFoundError:
                    return False
                if stop():
                    return False
                if self._try_acquire():
                    return True
                waiting(1)
                time.sleep(HEARTBEAT_S)
        finally:
            ticket.path.unlink(missing_ok=True)
            self._ticket = None

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing the file releases its flock
            self._handle = None


def server_queue() -> JobSlot:
    """The server's places (``CHMM_MAX_JOBS``) and its queue (``CHMM_MAX_WAITING_JOBS``), in the data folder."""
    return JobSlot(config.data_dir(), config.max_jobs(), config.max_waiting_jobs())


def started_ticket(name: Any, kind: str, session: str) -> Ticket | None:
    """The started ticket ``name`` that a page hands to the job it starts, if it is one of ``session``'s of ``kind``
    (the name comes from the browser: anything else is None)."""
    pattern = rf"\d{{20}}-{re.escape(kind)}-{re.escape(session)}{re.escape(STARTED)}"
    if not isinstance(name, str) or not re.fullmatch(pattern, name):
        return None
    return Ticket(config.data_dir() / QUEUE / name)


QueueView = dict[str, Any]
"""What a page shows of its session's job in the queue: ``state`` (``waiting``, ``starting``, ``refused`` or
``dropped``) and ``message``; while there is a ticket, its ``ticket`` name, the job's ``key`` and ``created`` time."""


def queue_view(kind: str, session: str, files: JobFiles, what: str, shown: QueueView | None) -> tuple[Any, Any]:
    """Asked every second by the pages of a session whose job of ``kind`` waits (``what`` names it in sentences;
    ``files`` are its record and cancel flag; ``shown`` is what the page shows now): what to show now (a
    :data:`QueueView`, or None once the job has left the queue) and, when its turn has come, the job to start (a dict
    with the started ticket's name; else None). Keeps the ticket alive. A ticket that vanished while it waited was
    cancelled, or started by another page of the session (its record then has its key), or dropped because no page
    asked for it: that is said, so that nothing the user started is lost without a word."""
    queue = server_queue()
    ticket = queue.find(kind, session)
    if ticket is None:
        if not shown or shown.get("state") not in ("waiting", "starting"):
            return shown, None
        if shown.get("state") == "waiting" and not _left_for_a_job(shown, files):
            minutes = TICKET_KEEP_S / 60
            return {
                "state": "dropped",
                "message": f"The {what} that waited for a free place was dropped: no page of this session asked for "
                f"its turn for {minutes:g} minutes (closed, or asleep); press Start again.",
            }, None
        return None, None  # its job took its place (or it was cancelled)
    data = ticket.read() or {}
    view = {"ticket": ticket.name, "key": data.get("key"), "created": data.get("created")}
    if ticket.started:
        with contextlib.suppress(FileNotFoundError):
            os.utime(ticket.path)
        return view | {"state": "starting", "message": f"Starting the {what} job."}, None
    answer = queue.call(ticket)
    if answer is None:
        return shown, None  # withdrawn or started this instant: the next call says which
    if isinstance(answer, Ticket):
        return view | {"ticket": answer.name, "state": "starting", "message": f"Starting the {what} job."}, {
            "ticket": answer.name
        }
    return view | {"state": "waiting", "place": answer, "message": waiting_message(answer)}, None


def waiting_message(place: int) -> str:
    """A waiting job's place in a sentence."""
    return (
        f"Waiting for a free place: number {place} in the queue ({config.max_jobs()} jobs run at once on this "
        "server); it starts when its turn comes, while a page of this session is open."
    )


def _left_for_a_job(shown: QueueView, files: JobFiles) -> bool:
    """Whether a waiting ticket that vanished went on to be a job (its key in the job's record: started by another
    page of the session) or was cancelled (the cancel flag raised since it was created)."""
    record = files.read() or {}
    if shown.get("key") and record.get("key") == shown.get("key"):
        return True
    try:
        return files.cancel.stat().st_mtime >= float(shown.get("created") or 0.0) - 1.0
    except OSError:
        return False
