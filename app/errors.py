"""The app's one error base and how any error becomes one sentence for a page (:func:`describe_error`), below
every other module of the app that raises or tells: the services, the job panel, the memory budget and the pages'
helpers all import it from here (:mod:`app.services` re-exports it)."""

from __future__ import annotations

import errno
import os
import re

from engine import errors


class UserError(ValueError):
    """A problem with what the user supplied or asked for (the message is shown in the page as is)."""


SERVER_NAMES = {
    "current.npz": "the current model",
    "previous.npz": "the previous model",
    "corpus.txt": "the session's corpus",
    "corpus.json": "the session's corpus",
    "communities.json": "the saved communities",
    "job.json": "the job's record",
    "progress.json": "the job's progress",
}
"""What a session folder's files are called in a message (the user never sees the folder)."""
_PATH = re.compile(r"(?<![\w.])(?:/[^/\s:'\"(),;]+)+/?")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?:\.[0-9a-f]{32})?", re.IGNORECASE)
DISK_FULL = "The server's disk is full, so nothing was saved and nothing changed; try again later."
OUT_OF_MEMORY = "The server ran out of memory for this, so nothing changed; try again in a moment."


def _user_name(match: re.Match[str]) -> str:
    path = match.group(0).rstrip("/")
    name = path.rsplit("/", 1)[-1]
    if name in SERVER_NAMES:
        return SERVER_NAMES[name]
    if name.startswith(("upload-", "prune-", ".tmp-")) or _UUID.fullmatch(name):
        return "the uploaded file" if name.startswith("upload-") else "a working file"
    return name


def disk_full_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk is full: an OSError with ENOSPC or EDQUOT, or SQLite's "database or disk is
    full" (Dash's Diskcache store of a job's progress and result), itself or as the cause of another error."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if type(exc).__name__ == "OperationalError" and "disk is full" in str(exc):  # sqlite3's, or a wrapper's
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def describe_error(exc: BaseException) -> str:
    """The one-line message shown for an error raised by a service or the engine (:func:`engine.errors.sentence`),
    naming files as the user knows them: never a server path or a session id. A full disk says so."""
    if disk_full_error(exc):
        return DISK_FULL
    if isinstance(exc, MemoryError):  # a job's limit says its own clause; the machine's says nothing
        said = str(exc).strip()
        return bounded(f"This stopped: {said}." if said else OUT_OF_MEMORY)
    if isinstance(exc, FileNotFoundError) and _session_gone(exc):
        return SESSION_GONE
    message = _PATH.sub(_user_name, errors.sentence(exc))
    message = _UUID.sub("this session", message)
    if message[:1].islower() and message.split(" ", 1)[0].isalpha():
        message = message[:1].upper() + message[1:]  # "the current model: ..." begins a sentence
    return bounded(message)


SESSION_GONE = (
    "This session's files were cleared while this ran (the server made room for other visitors after a long idle "
    "time); reload the page to start afresh."
)
MAX_MESSAGE_CHARACTERS = errors.MAX_MESSAGE_CHARACTERS
bounded = errors.bounded


def _session_gone(exc: FileNotFoundError) -> bool:
    """Whether a missing file lay in a session folder that is gone (removed to make room while a request ran)."""
    for name in (exc.filename, exc.filename2):
        match = _UUID.search(str(name or ""))
        if match is not None:
            folder = str(name)[: match.start()] + match.group(0).split(".")[0]
            if not os.path.isdir(folder):
                return True
    return False
