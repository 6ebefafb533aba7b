"""Per-browser-session server state: one folder per session id under :func:`app.config.data_dir`.

A session id is a uuid4 issued by the layout function into a ``dcc.Store(storage_type="session")`` (one per
browser tab); every callback receives it as State and calls :func:`session_folder`. Nothing per-user lives in
module globals, so the app works with several gunicorn workers and with background jobs in other processes.

A session folder holds::

    current.npz      the session's current model (a copy of the start model at first)
    previous.npz     the model it replaced (undo swaps the two)
    corpus.txt       the uploaded corpus, decoded UTF-8 text
    corpus.json      its name and size in bytes
    job.json         status of the latest training job
    progress.json    per-iteration progress of the latest training job
    heartbeat        touched every second while a training job runs
    cancel           flag file: the running job stops within an iteration when it appears
    jobs/KEY.npz     a job's model before it becomes current
    communities.json the last Infomap run on the current model (Communities page); a session that starts on a model
                     with a precomputed run beside it (``<model>.communities.json``) starts with that run
    exports/         files written by the Export page
    last_used        touched on every access (the time-to-live clock)

Folders untouched for longer than the time-to-live are deleted by :func:`cleanup_sessions` (at start-up and at
most once an hour while the app runs).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path

from app import config
from engine.files import atomic_write_bytes

CURRENT = "current.npz"
PREVIOUS = "previous.npz"
CORPUS = "corpus.txt"
CORPUS_INFO = "corpus.json"
CORPUS_DOCUMENTS = "corpus-documents.json"  # the documents of a corpus of several (corpus.txt holds them joined)
JOB = "job.json"
PROGRESS = "progress.json"
HEARTBEAT = "heartbeat"
CANCEL = "cancel"
JOBS = "jobs"
LAST_USED = "last_used"
CLEANUP_EVERY_S = 3600.0

_last_cleanup = {"at": 0.0}  # process-wide throttle of the periodic cleanup (no per-user state)


class SessionError(ValueError):
    """A missing or malformed session id (a stale or tampered browser store)."""


def new_session_id() -> str:
    """A fresh session id (uuid4, canonical text form)."""
    return str(uuid.uuid4())


def check_session_id(session_id: object) -> str:
    """The canonical form of ``session_id``; SessionError unless it is a uuid (it becomes a folder name)."""
    if not isinstance(session_id, str) or not session_id:
        raise SessionError("this browser tab has no session yet; reload the page")
    try:
        return str(uuid.UUID(session_id))
    except ValueError:
        raise SessionError("this browser tab's session id is not valid; reload the page") from None


def session_folder(session_id: object, root: Path | None = None) -> Path:
    """The session's folder, created on first use with a copy of the start model as its current model; touching
    it keeps the session alive. Runs the periodic cleanup of expired sessions."""
    sid = check_session_id(session_id)
    root = root or config.data_dir()
    folder = root / sid
    fresh = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LAST_USED).touch()
    if fresh:
        start = config.start_model()
        if start.is_file() and not (folder / CURRENT).exists():
            _link_or_copy(start, folder / CURRENT)
            _adopt_precomputed_communities(start, folder)
    maybe_cleanup(root)
    return folder


COMMUNITIES = "communities.json"


def model_stamp(folder: Path) -> list[int]:
    """Identifies the session's current model file (size and modification time), so a saved community run can be
    matched to the model it was computed for."""
    stat = current_model_path(folder).stat()
    return [int(stat.st_size), int(stat.st_mtime_ns)]


def _adopt_precomputed_communities(start: Path, folder: Path) -> None:
    """Copy the start model's precomputed Infomap run (``<model stem>.communities.json`` beside it, written by
    ``sample_models/make_sample.py``) into a new session, stamped with the session's copy of the model."""
    precomputed = start.with_name(start.stem + ".communities.json")
    if not precomputed.is_file():
        return
    try:
        saved = json.loads(precomputed.read_text(encoding="utf-8"))
        saved["model"] = model_stamp(folder)
        data = json.dumps(saved, ensure_ascii=False).encode("utf-8")
    except (OSError, ValueError, TypeError, AttributeError):
        return  # a damaged file only means the user runs Infomap once
    atomic_write_bytes(folder / COMMUNITIES, data)


def _link_or_copy(source: Path, target: Path) -> None:
    """Place ``source`` at ``target`` atomically: a hard link when possible (models are never written in place,
    only replaced, so sharing the inode is safe), else a copy; written under a temporary name, then renamed."""
    tmp = target.with_name(f".tmp-{uuid.uuid4().hex}-{target.name}")
    try:
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


def current_model_path(folder: Path) -> Path:
    return folder / CURRENT


def previous_model_path(folder: Path) -> Path:
    return folder / PREVIOUS


def install_model(folder: Path, source: Path) -> None:
    """Make the model file ``source`` (in the session folder) current; the old current model becomes the
    previous one. Every step is a rename or a link, so ``current.npz`` is at every moment a complete model."""
    current = current_model_path(folder)
    if current.exists():
        _link_or_copy(current, previous_model_path(folder))
    os.replace(source, current)


def swap_previous(folder: Path) -> bool:
    """Undo: exchange the current and the previous model (again to redo). False when there is no previous one."""
    current, previous = current_model_path(folder), previous_model_path(folder)
    if not previous.exists():
        return False
    if not current.exists():
        os.replace(previous, current)
        return True
    hold = folder / f".tmp-{uuid.uuid4().hex}-swap.npz"
    _link_or_copy(current, hold)
    os.replace(previous, current)
    os.replace(hold, previous)
    return True


def last_used(folder: Path) -> float:
    """Newest modification time among the folder, its ``last_used`` mark and its files (a running job writes
    its progress file, which keeps its session alive)."""
    times = [folder.stat().st_mtime]
    for entry in folder.iterdir():
        try:
            times.append(entry.stat().st_mtime)
        except OSError:
            pass
    return max(times)


def cleanup_sessions(root: Path | None = None, ttl_s: float | None = None, now: float | None = None) -> list[str]:
    """Delete the session folders under ``root`` untouched for longer than ``ttl_s`` seconds; returns their ids.
    Only folders named by a uuid are considered (the background-job cache and anything else are left alone)."""
    root = root or config.data_dir()
    ttl_s = config.session_ttl_seconds() if ttl_s is None else ttl_s
    now = time.time() if now is None else now
    removed: list[str] = []
    if not root.is_dir():
        return removed
    for entry in root.iterdir():
        try:
            sid = check_session_id(entry.name)
        except SessionError:
            continue
        if sid != entry.name or not entry.is_dir():
            continue
        try:
            if now - last_used(entry) > ttl_s:
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(sid)
        except OSError:
            continue
    return removed


def maybe_cleanup(root: Path | None = None) -> None:
    """Run :func:`cleanup_sessions` if this process has not done so in the last hour."""
    now = time.time()
    if now - _last_cleanup["at"] < CLEANUP_EVERY_S:
        return
    _last_cleanup["at"] = now
    cleanup_sessions(root, now=now)
