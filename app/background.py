"""What the app's background jobs (training, comparison) share: the job's record file, its heartbeat, its cancel
flag, the statuses, and the rule that a job is running only while its heartbeat is fresh.

A job runs in a background process (Dash's diskcache manager, or a Celery worker): it writes its record (JSON,
atomically), touches its heartbeat file every second from a thread, and polls its cancel flag. A page asks
:meth:`JobFiles.running`: status ``running`` *and* a heartbeat in the last 15 s, so a job killed without a word does
not block its session forever."""

from __future__ import annotations

import json
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
STALE_AFTER_S = 15.0


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
