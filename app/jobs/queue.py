"""The server's places and its first-come queue (:class:`JobSlot`): a job waiting for a place is a ticket file that
its pages keep alive (:class:`Ticket`), not a process; :func:`queue_view` is what a page shows of its job there."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app import config, handles
from app.jobs.records import HEARTBEAT_S, JobFiles, read_json
from engine.files import atomic_write_json

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
            handle = handles.open_private(folder / str(index))  # held open for as long as the slot is held
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handles.close_private(handle)
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
            # a job forked while this probe held a slot's lock kept that slot for its life: app.handles
            handle = handles.open_private(folder / str(index))
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue
            finally:
                handles.close_private(handle)  # closing it lets the lock go
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
            handles.close_private(self._handle)  # closing the file releases its flock
            self._handle = None


def server_queue() -> JobSlot:
    """The server's places (``CHMM_MAX_JOBS``) and its queue (``CHMM_MAX_WAITING_JOBS``), in the data folder."""
    return JobSlot(config.data_dir(), config.max_jobs(), config.max_waiting_jobs())


@contextmanager
def held_place(
    waiting: Callable[[int], None], stop: Callable[[], bool], ticket: Ticket | None = None
) -> Iterator[bool]:
    """One of the server's places (:func:`server_queue`) held while the block runs and released after it: taken at
    once with the started ``ticket`` of a queued job, else waited for in this process, ``waiting(place)`` called every
    second meanwhile (:meth:`JobSlot.acquire`). The block gets False, and holds no place, when ``stop()`` turned true
    while it waited (a cancel); :class:`QueueFull` when too many jobs wait already."""
    slot = server_queue()
    if not slot.acquire(waiting, stop=stop, ticket=ticket):
        yield False
        return
    try:
        yield True
    finally:
        slot.release()


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


def place_message(place: int) -> str:
    """The place of a job that waits in its own process (its record, and its page's progress, say it)."""
    return (
        f"Waiting for a free place: number {place} in the queue ({config.max_jobs()} jobs run at once on this server)."
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
