"""The process a background job runs as (:func:`job_process`): its priority, its signals, its time limit and its
memory limit (:class:`MemoryWatch`, with its sentinel process, :mod:`app.jobs.sentinel`), and the web worker's care of
its job processes (reaped when they end, stopped when the worker stops)."""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app import config
from app.jobs.records import JobFiles

# ------------------------------------------------------------------------------------------ forking from a worker
with contextlib.suppress(AttributeError, ValueError, RuntimeError):  # no SIGUSR2 here, or not the main thread
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    # `kill -USR2 <pid>` writes every thread's stack of a web worker or a job to the server's log (gunicorn uses
    # SIGUSR1 and, in its master only, SIGUSR2): how a job that never answers is found waiting
_STORE_LOCK = threading.RLock()
"""Held by every call into the background store (Dash's Diskcache, SQLite) in this process, and over every fork of a
job (:func:`diskcache_manager`)."""


def _fresh_store_lock() -> None:
    global _STORE_LOCK
    _STORE_LOCK = threading.RLock()
    compiler = _numba_compiler_lock()
    if compiler is not None:  # held by the thread that forked (see call_job_fn): the job's own from here
        compiler._lock = threading.RLock()


def _numba_compiler_lock() -> Any:
    """numba's one lock over every compilation (None before numba is imported)."""
    module = sys.modules.get("numba.core.compiler_lock")
    return getattr(module, "global_compiler_lock", None)


os.register_at_fork(after_in_child=_fresh_store_lock)

IMPORT_WAIT_S = 2.0
"""How long a fork waits for another thread of the worker to finish importing a module (:func:`_imports_elsewhere`)."""


def _imports_elsewhere() -> bool:
    """Whether another thread of this process is importing a module now: it holds that module's import lock, which
    a job forked meanwhile inherits held by a thread it does not have, and waits for at its first import of the
    module (a Score job asleep for ever in ``_lock_unlock_module`` under zipfile's first ``cp437`` decoding, while
    a thread of its worker imported that codec; the concurrency bench)."""
    import importlib._bootstrap as bootstrap

    me = threading.get_ident()
    for ref in list(getattr(bootstrap, "_module_locks", {}).values()):
        lock = ref() if callable(ref) else None
        owner = getattr(lock, "owner", None)
        if owner not in (None, 0, me) and getattr(lock, "count", 0):
            return True
    return False


def _wait_for_imports() -> None:
    """Wait up to :data:`IMPORT_WAIT_S` until no other thread imports a module (see :func:`_imports_elsewhere`)."""
    deadline = time.monotonic() + IMPORT_WAIT_S
    while _imports_elsewhere() and time.monotonic() < deadline:
        time.sleep(0.002)


class SerialisedStore:
    """The background store (a ``diskcache.Cache``) with every call made under :data:`_STORE_LOCK`, transactions
    included. A job is forked from a web worker of 16 threads, several of them inside SQLite at any time (each page
    polls its job's progress every second); a fork while one of them held SQLite's allocator mutex left the job
    waiting for that mutex for ever, at its first SQLite call (issue 51: a score of ``bench/bench_concurrency.py``
    never answered, its process asleep in ``sqlite3Malloc``). Forks take the same lock, so none happens inside
    SQLite."""

    def __init__(self, cache: Any) -> None:
        self._cache = cache

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._cache, name)
        if not callable(value):
            return value
        if name == "transact":
            return self._transact

        def serialised(*args: Any, **kwargs: Any) -> Any:
            with _STORE_LOCK:
                return value(*args, **kwargs)

        return serialised

    @contextmanager
    def _transact(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with _STORE_LOCK, self._cache.transact(*args, **kwargs) as transaction:
            yield transaction


CHARGED_FROM_FORK = "_chmm_charged_from_fork"
NOT_FORKED = 0
"""The job that Dash keeps for a start refused before its fork: no process, nothing to look at or to end."""


def charged_from_fork(fn: Any) -> Any:
    """Mark ``fn``, a background callback whose body holds :func:`app.memory.job_room` while it runs (a request's or an
    Infomap run's job), as charged to the server's memory budget from its fork: the web worker reserves the room of
    the job's own process before forking it and hands the reservation over, or, with no room, forks nothing and runs
    the body in the request's thread only for it to say "The server is busy: ...; try again in a moment."
    (:func:`diskcache_manager`). Put it under ``@callback``."""
    setattr(fn, CHARGED_FROM_FORK, True)
    return fn


def diskcache_manager(folder: Path) -> Any:
    """Dash's Diskcache manager over the store in ``folder``, its calls serialised and its forks outside SQLite
    (:class:`SerialisedStore`) and outside numba's compilations, the jobs of :func:`charged_from_fork` callbacks
    charged from their fork, and a job's process that ends while Dash looks at it taken as ended (Dash raised)."""
    import encodings.cp437  # noqa: F401  (zipfile's names: imported once here, not by a thread racing a fork)

    import dash
    import diskcache
    import psutil

    class ForkSafeDiskcacheManager(dash.DiskcacheManager):
        def register(self, key: Any, fn: Any, progress: Any) -> None:
            super().register(key, fn, progress)
            if getattr(fn, CHARGED_FROM_FORK, False):  # (called by Dash's own __init__: the set is made here)
                self.__dict__.setdefault("charged", set()).add(key)

        def call_job_fn(self, key: Any, job_fn: Any, args: Any, context: Any) -> Any:
            from app import memory  # here: a sentinel imports app.jobs, and app.memory brings in the engine

            if not any(self.func_registry.get(k) is job_fn for k in self.__dict__.get("charged", ())):
                return self._fork(key, job_fn, args, context)
            try:  # before the fork and outside its locks: a wait for room holds up no other page
                held = memory.reserve(memory.JOB_BYTES, memory.JOB_WHAT, wait=memory.JOB_WAIT_S)
            except memory.ServerBusy as exc:
                with memory.refusing(str(exc)):  # the body says so here, its answer stored as a job's: no process
                    job_fn(key, self._make_progress_key(key), args, context)
                return NOT_FORKED
            with memory.handing(held):  # the job holds it from its fork; released here if the fork fails
                return self._fork(key, job_fn, args, context)

        def _fork(self, key: Any, job_fn: Any, args: Any, context: Any) -> Any:
            # no thread of this process is inside SQLite, nor compiling with numba, while the job is forked: a job
            # forked while another thread compiled waited for ever for numba's lock at its first compilation
            # (faulthandler: compiler_lock.acquire, under row_sums of an Infomap run; the concurrency bench)
            # nor importing a module (see _imports_elsewhere), whose codec every model's zip directory needs
            compiler = _numba_compiler_lock()
            with _STORE_LOCK, compiler if compiler is not None else contextlib.nullcontext():
                _wait_for_imports()
                return super().call_job_fn(key, job_fn, args, context)

        def terminate_job(self, job: Any) -> None:
            if job is not None and str(job) == str(NOT_FORKED):  # psutil takes pid 0 for a process
                return
            # Dash reads the answer, then ends the job's process: one that ended by itself meanwhile raised
            # NoSuchProcess out of the page's poll (HTTP 500), and the answer was lost (seen under load)
            with contextlib.suppress(psutil.NoSuchProcess):
                super().terminate_job(job)

        def job_running(self, job: Any) -> bool:
            try:
                return bool(super().job_running(job))
            except psutil.NoSuchProcess:  # it ended between Dash's two looks at it
                return False

    manager = ForkSafeDiskcacheManager(diskcache.Cache(str(folder)))
    manager.handle = SerialisedStore(manager.handle)
    return manager


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
    job's sentinel (:mod:`app.jobs.sentinel`): a job still above the limit :data:`MEMORY_GRACE_S` seconds later, or
    above :data:`MEMORY_HARD_FACTOR` times it at any time, or (with ``deadline``) :data:`MEMORY_GRACE_S` seconds past
    its time limit, is killed with its descendants, after its ``record`` (a :class:`JobFiles`) or ``notice`` (a file
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
        """``python -m app.jobs.sentinel`` watching this process, its standard input the pipe whose closing ends it."""
        arguments = [
            sys.executable, "-m", "app.jobs.sentinel", str(os.getpid()), str(self.limit_bytes),
            "--grace", repr(MEMORY_GRACE_S), "--hard-factor", repr(MEMORY_HARD_FACTOR),
            "--check", repr(MEMORY_CHECK_S), "--memory-cause", memory_clause(self.limit_bytes),
        ]  # fmt: skip
        if self.deadline is not None:
            arguments += ["--deadline", repr(float(self.deadline)), "--time-cause", time_clause(self.deadline)]
        if self.record is not None:
            arguments += ["--record", str(self.record.record), "--heartbeat", str(self.record.heartbeat)]
        if self.notice is not None:
            arguments += ["--notice", str(self.notice[0]), "--notice-text", self.notice[1]]
        root = str(Path(__file__).resolve().parents[2])
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
        from app.jobs.sentinel import tree_rss  # here: ``python -m app.jobs.sentinel`` imports this package first

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
    priority below the web workers' (:func:`lower_priority`; its sentinel's is not lowered), its memory limited to
    ``memory_limit`` bytes (default :func:`app.config.max_job_bytes`) by a :class:`MemoryWatch` (whose sentinel tells
    ``record``, or writes ``notice``'s sentence into its file, if it must kill the job), and SIGTERM (which
    gunicorn's handlers, inherited by a forked job, would ignore) raising :class:`JobTerminated` so that the job
    records how it ended and exits; with ``time_limit``, :class:`JobTimeout` raised in the body after that many
    seconds (a timer signal; the sentinel kills a body that has not stopped :data:`MEMORY_GRACE_S` seconds later, C
    code that holds the GIL for instance). The previous handlers are restored afterwards (a Celery pool process runs
    further tasks)."""
    close_inherited_listeners()
    limit = config.max_job_bytes() if memory_limit is None else memory_limit
    watch = MemoryWatch(limit, record, deadline=time_limit, notice=notice).start()
    # lowered after the sentinel started: it keeps the server's priority, so that its heartbeat and its kill stay
    # on time beside normal-priority work (at the job's nice 10 a beat came 2.6 s late beside two trainings)
    lower_priority()
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
