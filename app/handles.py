"""Lock files that a fork must not carry: the server's places (:class:`app.jobs.JobSlot`) and its memory budget
(:mod:`app.memory`) are ``flock`` s, which belong to an open file *description*, shared by every process that holds a
descriptor of it. A web worker forks its jobs from any of its 16 threads; a job forked while another thread had such a
file open kept a descriptor of it, and with it the lock, for the job's whole life, even after the worker closed its
own (the concurrency bench stood still: every process waited for the memory ledger's lock, held by a score's copy of
it). Files opened here are closed in a forked child at once (but the one a reservation handed to the child holds,
:func:`handed_to_child`), and no fork happens between the opening of one and its record here."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

_LOCK = threading.Lock()
_OPEN: set[IO[Any]] = set()
_HANDED: dict[int, IO[Any]] = {}
"""By the id of a thread about to fork: the one file its child keeps (:func:`handed_to_child`)."""


def open_private(path: Path | str, mode: str = "a+b") -> IO[Any]:
    """``open(path, mode)`` (a binary mode), the file recorded so that a forked child closes its copy
    (:func:`close_private` closes it here). Unbuffered: a buffered file has a lock of its own, which a thread of the
    parent may hold at the fork (writing to it), and the child's close would wait for it for ever (seen: a job forked
    so stood still in its fork handler)."""
    with _LOCK:
        handle = open(path, mode, buffering=0)  # noqa: SIM115 (closed by close_private, or in a forked child)
        _OPEN.add(handle)
    return handle


def close_private(handle: IO[Any]) -> None:
    """Close a file of :func:`open_private` (closing it lets its lock go, when no fork holds a copy)."""
    with _LOCK:
        _OPEN.discard(handle)
        handle.close()


@contextmanager
def handed_to_child(handle: IO[Any]) -> Iterator[None]:
    """For the block: a process this thread forks keeps its copy of ``handle`` open (and with it the lock the file
    holds, shared by the copies) where it closes every other file of :func:`open_private`. How a web worker hands a
    job the reservation it made for it (:func:`app.memory.handing`)."""
    ident = threading.get_ident()
    _HANDED[ident] = handle
    try:
        yield
    finally:
        _HANDED.pop(ident, None)


def _before_fork() -> None:
    _LOCK.acquire()  # no file is between its opening and its record while the child is made


def _after_fork_in_parent() -> None:
    _LOCK.release()


def _after_fork_in_child() -> None:
    global _LOCK
    kept = _HANDED.get(threading.get_ident())  # the forking thread is this process's only one, with its id
    for handle in _OPEN - {kept}:
        with contextlib.suppress(OSError):
            handle.close()  # the child's copy: the parent's lock stays the parent's
    _OPEN.clear()
    _HANDED.clear()
    if kept is not None:
        _OPEN.add(kept)  # the child's own now (its parent closes its copy)
    _LOCK = threading.Lock()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)
