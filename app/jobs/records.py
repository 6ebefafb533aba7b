"""A job's record, heartbeat and cancel flag (:class:`JobFiles`), the statuses, and the rule that a job is running
only while its heartbeat is fresh.

A job runs in a background process (Dash's diskcache manager, or a Celery worker): it writes its record (JSON,
atomically), touches its heartbeat file every second from a thread, and polls its cancel flag. A page asks
:meth:`JobFiles.running`: status ``running`` *and* a heartbeat in the last :data:`STALE_AFTER_S` seconds, and
:meth:`JobFiles.reap` marks a job whose heartbeat stopped (its process killed, its Celery worker gone) as failed,
so the page says so within seconds instead of showing its last progress forever."""

from __future__ import annotations

import contextlib
import errno
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import bounded
from engine.files import atomic_write_json

RUNNING, FINISHED, CANCELLED, FAILED, REFUSED = "running", "finished", "cancelled", "failed", "refused"
HEARTBEAT_S = 1.0
STALE_AFTER_S = 6.0
"""A running job whose heartbeat is older than this has died (the heartbeat thread beats every second; the
engine's kernels release the GIL, so a busy job still beats)."""
DIED = "stopped without finishing: its process or worker died (killed, out of memory, or the server restarted)"


LAST_WORDS_BYTES = 1024
DISK_FILLED = "the server's disk filled up while it ran, so it could not save its work"
INSTALLED_THEN_ENDED = "Finished: its result is current (the job's process ended as it was saying so)."

TEMPORARY_PREFIX = ".tmp-"
"""How the files of an atomic write in progress begin (:func:`engine.files.atomic_write`, the session's model swap)."""
TEMPORARY_PATTERNS = (f"{TEMPORARY_PREFIX}*", ".map-upload-*", "upload-*.npz", "prune-*.npz")
"""The working files a request or a job writes before it checks or installs them (an atomic write in progress, an
uploaded model or map on trial, a pruned model), in the session folder or any folder under it (``jobs/``)."""
STALE_TEMPORARY_S = 120.0
"""A temporary file not written for this long belongs to no live write: a job killed or cancelled while it wrote
left it (a live write keeps touching its file as the data goes out)."""


def sweep_temporary(folder: Path, now: float | None = None) -> list[str]:
    """Remove the working files (:data:`TEMPORARY_PATTERNS`) of a session folder and every folder under it (a
    cancelled job's ``jobs/.tmp-*.npz``) last written more than :data:`STALE_TEMPORARY_S` ago, which a job killed
    or cancelled mid-write left behind (36-121 MB each, counted against the session's disk); returns their names.
    Files being written now are left alone."""
    now = time.time() if now is None else now
    removed = []
    try:
        entries = [path for pattern in TEMPORARY_PATTERNS for path in folder.rglob(pattern)]
    except OSError:
        return removed
    for path in entries:
        try:
            if now - path.stat().st_mtime > STALE_TEMPORARY_S and path.is_file():
                path.unlink()
                removed.append(path.name)
        except OSError:
            continue  # gone meanwhile, or not ours to remove
    return removed


def _disk_cause(folder: Path) -> str | None:
    """Why a job whose heartbeat stopped with no cause recorded most likely stopped, when the disk is full now: a
    job that could not write its end (its record, Dash's store of its result) was blamed on its process dying
    (issue 51: a disk that filled mid-training was said as "its process or worker died")."""
    from app import config, sessions  # here: the sentinel, a light process, imports this module

    free = sessions.free_disk(folder.parent)
    if free is None or free >= config.min_free_bytes():
        return None
    return f"the server's disk filled up while it ran ({config.format_bytes(free)} free), so it could not save its work"


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

    @property
    def last_words(self) -> Path:
        """A file of :data:`LAST_WORDS_BYTES` made when the job starts (:meth:`alive`), overwritten in place (no block
        to allocate) with why the job could not write its record when the disk filled up."""
        return self.heartbeat.with_name(self.heartbeat.name + "-last-words")

    def write(self, record: dict[str, Any]) -> None:
        """Replace the job's record atomically, its message bounded (:func:`engine.errors.bounded`). When the disk is
        full, the cause is left in :attr:`last_words` before the error goes on, for :meth:`reap` to say once space
        has returned (it was said as "its process or worker died")."""
        if isinstance(record.get("message"), str):
            record["message"] = bounded(record["message"])
        try:
            atomic_write_json(self.record, record)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                self._leave_last_words(DISK_FILLED)
            raise

    def _leave_last_words(self, cause: str) -> None:
        data = json.dumps({"cause": cause}).encode("utf-8")[:LAST_WORDS_BYTES]
        with contextlib.suppress(OSError), open(self.last_words, "r+b") as handle:
            handle.write(data.ljust(LAST_WORDS_BYTES))

    def _read_last_words(self) -> str | None:
        try:
            said = json.loads(self.last_words.read_bytes().strip() or b"null")
        except (OSError, ValueError):
            return None
        return said.get("cause") if isinstance(said, dict) and isinstance(said.get("cause"), str) else None

    def publisher(
        self, record: dict[str, Any], report: Callable[[dict[str, Any]], None] | None = None, every: float = 0.25
    ) -> Callable[..., None]:
        """A ``publish(force=False)`` that writes ``record`` (stamped "updated") and hands a copy to ``report`` (a
        background callback's progress), at most once per ``every`` seconds unless ``force``d (a job's end)."""
        last = [0.0]

        def publish(force: bool = False) -> None:
            now = time.time()
            if force or now - last[0] >= every:
                last[0] = now
                record["updated"] = now
                self.write(record)
                if report is not None:
                    report(dict(record))

        return publish

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
        flag, so that a job that was only stalled stops without installing anything) and return the record, its
        ``disk_full`` saying whether the disk filled up (full now, or the job's :attr:`last_words` say so); else None.
        A job whose record says its result was installed is recorded as finished instead (None)."""
        record = self.read()
        if not record or record.get("status") != RUNNING or self.running(now, record):
            return None
        if record.get("installed"):  # killed (a Cancel's) after its result became current, before it said so
            record.update(status=FINISHED, message=INSTALLED_THEN_ENDED, finished=time.time())
            with contextlib.suppress(OSError):
                self.write(record)
            return None
        with contextlib.suppress(OSError):
            self.request_cancel()
        disk = None if record.get("cause") else (_disk_cause(self.record.parent) or self._read_last_words())
        cause = record.get("cause") or disk
        message = f"The job stopped: {cause}." if cause else f"The job {DIED}."
        record.update(status=FAILED, message=message, finished=time.time(), disk_full=disk is not None)
        with contextlib.suppress(OSError):  # a full disk: the page is told all the same
            self.write(record)
        sweep_temporary(self.record.parent)  # what it was writing when it died
        return record

    def note_cause(self, cause: str) -> None:
        """Write into a running job's record why it is about to be killed (``cause``, a clause such as "it needed
        more than 900 MB, ..."), for :meth:`reap` to say instead of "died" once its heartbeat has stopped."""
        from app.jobs import sentinel  # imported here: ``python -m app.jobs.sentinel`` imports this package first

        sentinel.note_cause(self.record, cause)

    def cancel_requested(self) -> bool:
        return self.cancel.exists()

    def request_cancel(self) -> None:
        self.cancel.touch()

    @contextmanager
    def alive(self, report: Callable[[], None] | None = None) -> Iterator[None]:
        """While the block runs, a thread touches the heartbeat every :data:`HEARTBEAT_S` seconds (and calls
        ``report``, e.g. to hand the progress to the page). A failing ``report`` or touch (a full disk: Dash's
        progress store raises ``sqlite3.OperationalError``) costs that beat's progress, never the heartbeat: a thread
        that died on it left a running job to be reaped as dead, and said as such (issue 51)."""
        self.heartbeat.touch()
        blank = b" " * LAST_WORDS_BYTES
        with contextlib.suppress(OSError):
            if self.last_words.read_bytes() == blank:
                blank = b""  # there already, and blank: nothing to write
        if blank:
            self.last_words.write_bytes(blank)  # room for the cause, should the disk fill up
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(HEARTBEAT_S):
                with contextlib.suppress(OSError):  # touching an existing file needs no space; anything else waits
                    self.heartbeat.touch()
                if report is not None:
                    with contextlib.suppress(Exception):  # the page misses this beat's progress, the job lives on
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
    :mod:`app.jobs.sentinel`) while it is at most :data:`NOTICE_SHOWN_S` seconds old; else None."""
    from app import sessions

    notice = read_json(folder / sessions.NOTICE)
    if not notice or not isinstance(notice.get("message"), str) or not isinstance(notice.get("time"), (int, float)):
        return None
    now = time.time() if now is None else now
    return notice if 0 <= now - float(notice["time"]) <= NOTICE_SHOWN_S else None
