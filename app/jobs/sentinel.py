"""The watch that stands outside a background job's process: its memory and time limits enforced by a separate
process, which C code holding the GIL cannot stop.

A job's own watch thread (:class:`app.jobs.MemoryWatch`) raises an exception in the job when it passes its
memory limit, so that the job ends with its true cause through its own handlers. A thread, though, runs only when the
GIL is free: Infomap's C++ holds it for a whole run (20 s on a 60,000-node graph, measured), and so does any C
loop; while it does, neither that thread nor the job's heartbeat thread runs. This module is started by the job as a
child process (``python -m app.jobs.sentinel``, so nothing forked from a threaded process runs Python here) and, every
``check`` seconds until the job closes its end of the pipe on our standard input (or dies):

- touches the job's heartbeat file, so that a job busy inside such C code is not taken for dead
  (:meth:`app.jobs.JobFiles.reap`);
- kills the job and its descendants when their resident memory stays above the limit for ``grace`` seconds or
  passes ``hard_factor`` times it, or when the job runs ``grace`` seconds past its deadline; before killing, it
  writes why into the job's record (``cause``, which the job's page then says instead of "died") and, for a request
  job, which has no record, into the session's notice file (:func:`write_notice`, shown by every tab of the
  session).

It imports only the standard library, psutil and :mod:`engine.files` (no NumPy), so it costs a few megabytes."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

from engine.files import atomic_write_json

HEARTBEAT_S = 1.0
"""How often the sentinel touches the job's heartbeat (as the job's own heartbeat thread does)."""


def tree_rss(process: Any, skip: frozenset[int] = frozenset()) -> int:
    """Resident bytes of a psutil process and of all its descendants (a job's restart workers, for instance), less
    those whose pid is in ``skip`` (the sentinel itself)."""
    import psutil

    total = 0
    for member in [process, *process.children(recursive=True)]:
        if member.pid in skip:
            continue
        with contextlib.suppress(psutil.Error):
            total += member.memory_info().rss
    return total


def note_cause(record: Path, cause: str) -> None:
    """Write into a running job's record (a JSON object with ``status`` ``running``) why it is about to be killed
    (``cause``, a clause such as "it needed more than 900 MB, ..."); a record that is missing, unreadable or no
    longer running is left as it is."""
    try:
        value = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(value, dict) and value.get("status") == "running":  # app.jobs.RUNNING (not imported: light)
        atomic_write_json(record, value | {"cause": cause})


def write_notice(path: Path, message: str) -> None:
    """Leave ``message`` (a sentence) for the pages of a session: the notice file holds the newest one with its
    time (:func:`app.jobs.read_notice`)."""
    atomic_write_json(path, {"time": time.time(), "message": message})


def _kill(job: Any, me: int) -> None:
    """SIGKILL the job's descendants (the sentinel aside), then the job."""
    import psutil

    for child in job.children(recursive=True):
        if child.pid != me:
            with contextlib.suppress(psutil.Error):
                child.kill()
    with contextlib.suppress(ProcessLookupError):
        os.kill(job.pid, signal.SIGKILL)


def watch(
    pid: int,
    limit_bytes: int,
    *,
    grace: float,
    hard_factor: float,
    check: float,
    memory_cause: str,
    deadline: float | None = None,
    time_cause: str = "",
    heartbeat: Path | None = None,
    record: Path | None = None,
    notice: Path | None = None,
    notice_text: str = "{cause}",
    stdin: int = 0,
) -> str | None:
    """Watch the job ``pid`` until the descriptor ``stdin`` reaches its end (the job closed the pipe or died) or
    the job is killed; returns the cause it was killed for, or None. ``deadline`` is in seconds from now;
    ``notice_text`` is formatted with ``cause``."""
    import psutil

    job, me = psutil.Process(pid), os.getpid()
    started = last_beat = time.monotonic()
    over_since: float | None = None
    while True:
        readable, _, _ = select.select([stdin], [], [], check)
        if readable and not os.read(stdin, 4096):
            return None
        if not job.is_running() or job.status() == psutil.STATUS_ZOMBIE:
            return None
        now = time.monotonic()
        if heartbeat is not None and now - last_beat >= HEARTBEAT_S:
            with contextlib.suppress(OSError):
                heartbeat.touch()
            last_beat = now
        cause = None
        if deadline is not None and now - started > deadline + grace:
            cause = time_cause
        rss = tree_rss(job, frozenset({me}))
        if rss > limit_bytes:
            over_since = now if over_since is None else over_since
            if rss > hard_factor * limit_bytes or now - over_since > grace:
                cause = memory_cause
        else:
            over_since = None
        if cause is None:
            continue
        with contextlib.suppress(OSError):
            if record is not None:
                note_cause(record, cause)
            if notice is not None:
                write_notice(notice, notice_text.format(cause=cause))
        _kill(job, me)
        return cause


def main(argv: list[str] | None = None) -> int:
    """``python -m app.jobs.sentinel PID LIMIT_BYTES ...``: :func:`watch` the job, as :class:`app.jobs.MemoryWatch`
    starts it."""
    parser = argparse.ArgumentParser(prog="python -m app.jobs.sentinel", description=__doc__.split("\n\n")[0])
    parser.add_argument("pid", type=int)
    parser.add_argument("limit_bytes", type=int)
    parser.add_argument("--grace", type=float, required=True)
    parser.add_argument("--hard-factor", type=float, required=True)
    parser.add_argument("--check", type=float, required=True)
    parser.add_argument("--memory-cause", required=True)
    parser.add_argument("--deadline", type=float)
    parser.add_argument("--time-cause", default="")
    parser.add_argument("--heartbeat", type=Path)
    parser.add_argument("--record", type=Path)
    parser.add_argument("--notice", type=Path)
    parser.add_argument("--notice-text", default="{cause}")
    args = vars(parser.parse_args(argv))
    pid, limit = args.pop("pid"), args.pop("limit_bytes")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the job decides, not us
    try:
        watch(pid, limit, **args)
    except Exception as exc:  # psutil.NoSuchProcess (the job went first), a read error: nothing left to watch
        print(f"app.jobs.sentinel: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
