"""What the views need of a session's files, computed once and kept in this process while the files are unchanged.

Opening a module of a 5,000-state model read its 150 MB file, rebuilt the clone graph (a stationary distribution)
and parsed the Infomap run for every callback: 8-23 s. Here each of those is computed once per version of the files
it comes from and kept, least recently used first out, within :func:`app.config.max_kept_bytes` per process.

A value is keyed by what it is (``what`` and its arguments) and by the identity of each file it was computed from
(device, inode, size, modification time in nanoseconds): a replaced file is a new key, so nothing is ever served
stale, and the sessions that share the start model (hard links of one file) share its entries. The values are
shared: callers read them and never change them. Nothing of a session is kept that its own files do not say, so
no user's state lives here; a killed worker only loses time.

Requests that want one value at once wait for the one of them that computes it (issue 51: three sessions pressing
Generate loaded one model three times). Every value holds a reservation of the server's memory budget
(:mod:`app.memory`) for its size while it lives, taken before it is computed when the caller says what computing it
costs (``charge``: a model's load), else after; when the budget has no room, the request is refused in one sentence
(:class:`app.memory.ServerBusy`). A value dropped from here (least recently used, or idle for :data:`IDLE_S` when
some process is short of room) gives its reservation back once nobody uses it any more.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import scipy.sparse

from app import config, memory

Value = TypeVar("Value")


@dataclass
class _Entry:
    value: Any
    size: int
    reservation: memory.Reservation | None
    used: float


@dataclass
class _Pending:
    """A value being computed by one request, which the others that want it wait for."""

    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    computed: bool = False
    error: BaseException | None = None


IDLE_S = 2.0
"""A kept value unused for this long is dropped when some process of the server is short of memory."""
SMALL_BYTES = 1_000_000
"""A value computed without a charge and smaller than this holds no reservation of its own: the per-process
budget bounds such values, and the server's budget counts what is large."""
RELIEF_POLL_S = 0.25
"""How often a process that keeps values looks whether another one is short of memory."""

_ENTRIES: OrderedDict[Hashable, _Entry] = OrderedDict()
_PENDING: dict[Hashable, _Pending] = {}
_LOCK = threading.Lock()
_HELD = [0]  # bytes held
_RELIEF: dict[str, Any] = {"thread": None}


def _after_fork_in_child() -> None:
    """A forked job starts with no computation in flight and no relief thread (neither survives a fork); what it
    inherited stays readable, its reservations being the parent's (:mod:`app.memory`)."""
    global _LOCK
    _LOCK = threading.Lock()
    _PENDING.clear()
    _RELIEF["thread"] = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def identity(path: Path) -> tuple[int, int, int, int]:
    """A file's identity: (device, inode, size, modification time in ns); FileNotFoundError when it is missing."""
    stat = os.stat(path)
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def kept(
    what: Hashable,
    files: Sequence[Path],
    compute: Callable[[], Value],
    charge: int | Callable[[], int] | None = None,
    label: str = "This view",
) -> Value:
    """``compute()``, or the value kept for ``what`` computed from these very ``files`` (each unchanged since).
    Callers that want one value at once wait for the one that computes it, and get its value or its error.
    ``charge``: the most memory computing it takes (bytes, or a function that says), reserved from the server's
    budget before it is computed (:func:`app.memory.reserve`; :class:`app.memory.ServerBusy`, saying ``label``,
    when there is no room); without it the value's size is reserved afterwards. The value's size is estimated
    (:func:`size_of`); one larger than this process's whole budget is returned and not kept."""
    key = (what, tuple(identity(path) for path in files))
    while True:
        with _LOCK:
            found = _ENTRIES.get(key)
            if found is not None:
                _ENTRIES.move_to_end(key)
                found.used = time.monotonic()
                return found.value
            pending = _PENDING.get(key)
            mine = pending is None
            if mine:
                pending = _PENDING[key] = _Pending()
        if not mine:
            pending.done.wait()
            if pending.error is not None:
                raise pending.error
            if pending.computed:
                return pending.value
            continue
        try:
            pending.value = _compute(key, compute, charge, label)
            pending.computed = True
            return pending.value
        except BaseException as exc:
            pending.error = exc
            raise
        finally:
            with _LOCK:
                _PENDING.pop(key, None)
            pending.done.set()


def _compute(key: Hashable, compute: Callable[[], Value], charge: Any, label: str) -> Value:
    reservation = None
    if charge is not None:
        reservation = memory.reserve(charge() if callable(charge) else charge, label)
    try:
        value = compute()
    except BaseException:
        if reservation is not None:
            reservation.release()
        raise
    size, budget = size_of(value), config.max_kept_bytes()
    if reservation is not None:
        reservation.resize(size)  # down to what it keeps (a value larger than its charge keeps the charge)
    elif size >= SMALL_BYTES:
        try:
            reservation = memory.reserve(size, label, wait=0.0)
        except memory.ServerBusy:
            return value  # computed already: not kept, so that it is freed when its request ends
    if size > budget:
        _release_when_unused(value, reservation)
        return value
    dropped = []
    with _LOCK:
        _ENTRIES[key] = _Entry(value, size, reservation, time.monotonic())
        _HELD[0] += size
        while _HELD[0] > budget and _ENTRIES:
            _, entry = _ENTRIES.popitem(last=False)
            _HELD[0] -= entry.size
            dropped.append(entry)
    for entry in dropped:
        _release_when_unused(entry.value, entry.reservation)
    _start_relief()
    return value


def _release_when_unused(value: Any, reservation: memory.Reservation | None) -> None:
    """Give ``value``'s reservation back once nobody holds the value (at once for a value that cannot be watched
    so: a dict, a list, a tuple)."""
    if reservation is None:
        return
    try:
        weakref.finalize(value, memory.release_soon, reservation)  # a collector's callback: it takes no lock
    except TypeError:
        reservation.release()


def relieve(idle: float = IDLE_S) -> int:
    """Drop the values unused for ``idle`` seconds or more (their reservations go back once nobody holds them);
    the bytes dropped."""
    now, dropped = time.monotonic(), []
    with _LOCK:
        for key in [key for key, entry in _ENTRIES.items() if now - entry.used >= idle]:
            entry = _ENTRIES.pop(key)
            _HELD[0] -= entry.size
            dropped.append(entry)
    for entry in dropped:
        _release_when_unused(entry.value, entry.reservation)
    return sum(entry.size for entry in dropped)


memory.register_relief(relieve)


def _start_relief() -> None:
    """Start this process's thread that drops idle values when another process is short of memory (once)."""
    with _LOCK:
        if _RELIEF["thread"] is not None:
            return
        thread = threading.Thread(target=_relief_loop, name="kept-relief", daemon=True)
        _RELIEF["thread"] = thread
    thread.start()


def _relief_loop() -> None:
    seen = memory.wanted_since()
    try:
        while True:
            time.sleep(RELIEF_POLL_S)
            with contextlib.suppress(Exception):  # a data folder gone (tests): look again later
                memory.drain()  # what nobody holds any more, given back within a poll
                wanted = memory.wanted_since()
                if wanted > seen:
                    seen = wanted
                    relieve()
    except BaseException:  # stopped from outside (a test server stops its threads so): the next value starts another
        with _LOCK:
            _RELIEF["thread"] = None


def held_bytes() -> int:
    """The bytes the kept values take (estimated)."""
    with _LOCK:
        return _HELD[0]


def forget() -> None:
    """Drop every kept value (tests; a worker short of memory)."""
    with _LOCK:
        dropped = list(_ENTRIES.values())
        _ENTRIES.clear()
        _HELD[0] = 0
    for entry in dropped:
        _release_when_unused(entry.value, entry.reservation)


def size_of(value: Any, depth: int = 0) -> int:
    """An estimate of the bytes ``value`` holds: NumPy arrays and SciPy sparse arrays by their buffers, containers
    and objects by their items and attributes (six levels deep), anything else by ``sys.getsizeof``."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes) + 112
    if scipy.sparse.issparse(value):  # a compressed sparse array: its three buffers
        return sum(int(part.nbytes) for part in vars(value).values() if isinstance(part, np.ndarray))
    if depth > 6:
        return sys.getsizeof(value)
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(size_of(k, depth + 1) + size_of(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return sys.getsizeof(value) + sum(size_of(item, depth + 1) for item in value)
    if hasattr(value, "__dict__"):
        return sys.getsizeof(value) + sum(size_of(v, depth + 1) for v in vars(value).values())
    return sys.getsizeof(value)
