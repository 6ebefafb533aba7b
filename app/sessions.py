"""Per-browser-session server state: one folder per session id under :func:`app.config.data_dir`.

A session id is issued by the server (:func:`new_session_id`, called by the layout function into a
``dcc.Store(storage_type="session")``, one per browser tab): a uuid4 and its HMAC-SHA256 under the server's secret
(``CHMM_SECRET_KEY``, else a random key kept in ``CHMM_DATA_DIR/.secret``, shared by every worker), so a client
cannot invent one; the session's folder is named by the uuid. Every callback receives the id as State and calls
:func:`session_folder`, which refuses an id the server did not sign; past ``CHMM_MAX_SESSIONS`` idle sessions
give way to a newcomer (:func:`make_room`). Nothing per-user lives in module globals, so the app works with
several gunicorn workers and with background jobs in other processes.

A session folder holds::

    current.npz      the session's current model (at first a hard link to the server's one copy of the start model,
                     ``CHMM_DATA_DIR/.start/``: shared, not copied, until the session replaces it)
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
    summary.json     the current model's summary, cached by the first page load (the navigation bar's badge)
    last_used        touched on every access (the time-to-live clock)

Folders untouched for longer than the time-to-live are deleted by :func:`cleanup_sessions` (at start-up and at
most once an hour while the app runs).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from itsdangerous import BadSignature, URLSafeTimedSerializer

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
COMMUNITIES = "communities.json"
NOTICE = "notice.json"  # why a request job of the session was killed (app.jobs.read_notice)
SUMMARY = "summary.json"  # the current model's summary, cached by a page load (app.services.models.model_summary)
WHOLE_LAYOUT = "whole-layout.npz"  # the whole graph's layout by transitions, kept (app.services.whole_graph)
UPLOADS = "uploads"  # files sent through the upload route (app.transfers), each named by its token
UPLOAD_REFERENCE = "chmm-upload:"
"""How an upload widget's ``contents`` name a file that arrived through the upload route: this prefix and its token
(the file itself never travels in a callback's body)."""
_TOKEN = re.compile(r"[0-9a-f]{32}")
CLEANUP_EVERY_S = 3600.0

_last_cleanup = {"at": 0.0}  # process-wide throttle of the periodic cleanup (no per-user state)


class SessionError(ValueError):
    """A missing or malformed session id (a stale or tampered browser store)."""


SECRET = ".secret"
START = ".start"
SIGNATURE_CHARACTERS = 32


def server_secret(root: Path | None = None) -> bytes:
    """The key session ids are signed with: ``CHMM_SECRET_KEY``, else a random key created once in the data folder
    (readable by the server's user only) and read by every worker and job process."""
    configured = config.secret_key()
    if configured:
        return configured.encode("utf-8")
    root = root or config.data_dir()
    path = root / SECRET
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    root.mkdir(parents=True, exist_ok=True)
    candidate = root / f"{SECRET}-{uuid.uuid4().hex}"
    handle = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(secrets.token_hex(32).encode("ascii"))
        with contextlib.suppress(FileExistsError):  # another worker's key is already in place: it wins
            os.link(candidate, path)  # the key appears whole or not at all, never half written
    finally:
        candidate.unlink(missing_ok=True)
    return path.read_bytes()


def _signature(sid: str, root: Path | None = None) -> str:
    return hmac.new(server_secret(root), sid.encode("ascii"), hashlib.sha256).hexdigest()[:SIGNATURE_CHARACTERS]


def new_session_id(root: Path | None = None) -> str:
    """A fresh session id: a uuid4 and its signature under the server's secret (``<uuid>.<signature>``)."""
    sid = str(uuid.uuid4())
    return f"{sid}.{_signature(sid, root)}"


def check_session_id(session_id: object, root: Path | None = None) -> str:
    """The uuid (the folder name) of a session id this server issued; SessionError for anything else."""
    if not isinstance(session_id, str) or not session_id:
        raise SessionError("this browser tab has no session yet; reload the page")
    sid, _, signature = session_id.partition(".")
    if len(session_id) > 80 or not _is_uuid(sid) or not hmac.compare_digest(signature, _signature(sid, root)):
        raise SessionError("this browser tab's session is not one this server issued; reload the page")
    return sid


def _is_uuid(name: str) -> bool:
    """Whether ``name`` is a uuid in canonical form (what a session folder is named)."""
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False


def session_folders(root: Path | None = None) -> list[Path]:
    """The session folders under ``root``."""
    root = root or config.data_dir()
    if not root.is_dir():
        return []
    return [entry for entry in root.iterdir() if _is_uuid(entry.name) and entry.is_dir()]


def session_folder(session_id: object, root: Path | None = None) -> Path:
    """The session's folder, created on first use with the start model as its current model (shared, not
    copied); touching it keeps the session alive. A newcomer is never refused because others exist: past
    ``CHMM_MAX_SESSIONS`` live ones, idle sessions give way (:func:`make_room`). Runs the periodic cleanup of
    expired sessions."""
    root = root or config.data_dir()
    sid = check_session_id(session_id, root)
    folder = root / sid
    if not folder.exists():
        limit = config.max_sessions()
        if len(session_folders(root)) >= limit:
            with _room_turn(root) as turn:
                if turn:
                    cleanup_sessions(root)
                    make_room(root, limit)
        folder.mkdir(parents=True, exist_ok=True)
    if not (folder / CURRENT).exists() and not (folder / PREVIOUS).exists():
        # a new session, or one whose start failed (a full disk): it gets the start model once it can
        start = shared_start_model(root)
        if start is not None:
            communities = start.with_name(start.stem + ".communities.json")
            if communities.is_file():
                link_or_copy(communities, folder / COMMUNITIES)
            link_or_copy(start, folder / CURRENT)
    (folder / LAST_USED).touch()
    maybe_cleanup(root)
    return folder


def folder_bytes(folder: Path) -> int:
    """The bytes a session folder holds (its files and sub-folders' files)."""
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file():
                total += path.stat().st_size
        except OSError:
            continue
    return total


def check_space(folder: Path, adding: int = 0, what: str = "This") -> None:
    """Refuse (SessionError) to add ``adding`` bytes to a session folder that would then hold more than
    ``CHMM_MAX_SESSION_MB``."""
    limit = config.max_session_bytes()
    used = folder_bytes(folder)
    if used + adding > limit:
        raise SessionError(
            f"{what} would take this session's files to {config.format_bytes(used + adding)}, more than the "
            f"{config.format_bytes(limit)} a session may keep; delete exports or start a new session."
        )


def free_disk(root: Path | None = None) -> int | None:
    """The free bytes of the data folder's disk (None when they cannot be read)."""
    root = root or config.data_dir()
    try:
        return int(shutil.disk_usage(root if root.exists() else root.parent).free)
    except OSError:
        return None


def disk_full(root: Path | None = None) -> str | None:
    """A sentence for every page of every session while the data folder's disk has less free space than
    ``CHMM_MIN_FREE_MB``, else None: then no job or request can record its answer (Dash's store of background
    results is on that disk too), so the pages say it themselves (issue 51: Run Infomap, Score and the prune sweep
    said nothing)."""
    free = free_disk(root)
    if free is None or free >= config.min_free_bytes():
        return None
    return (
        f"The server's disk is full ({config.format_bytes(free)} free): nothing can be saved and no job or request "
        "can finish until space returns; try again later."
    )


def check_disk(what: str = "The job", root: Path | None = None) -> None:
    """Refuse (SessionError, one sentence) to start work when the data folder's disk has less free space than
    ``CHMM_MIN_FREE_MB``: said at once, with its true cause (on a full disk the Train page said "Starting the
    training job." for ever, and a job that could not record its end was later blamed on memory)."""
    free = free_disk(root)
    if free is None:
        return
    need = config.min_free_bytes()
    if free < need:
        raise SessionError(
            f"{what} cannot start: the server's disk is full ({config.format_bytes(free)} free, at least "
            f"{config.format_bytes(need)} needed); nothing was changed, try again later."
        )


def model_stamp(folder: Path) -> str:
    """Identifies the session's current model file (size and modification time), so a saved community run can be
    matched to the model it was computed for (:func:`file_stamp`)."""
    return file_stamp(current_model_path(folder).stat())


def file_stamp(stat: os.stat_result) -> str:
    """A file's size and modification time in nanoseconds as one string, ``"<size>:<mtime_ns>"``: a string because
    the browser keeps the stamp in a store, and a number of nanoseconds since 1970 is above 2^53, which a JavaScript
    number rounds (the page then took every poll for a new model and reloaded itself every 2 s)."""
    return f"{int(stat.st_size)}:{int(stat.st_mtime_ns)}"


def shared_start_model(root: Path | None = None) -> Path | None:
    """The server's one copy of the start model, in ``<data folder>/.start/`` (the same filesystem as the sessions,
    so each session's ``current.npz`` is a hard link to it), with the start model's precomputed Infomap run
    (``<model stem>.communities.json`` beside it, written by ``sample_models/make_sample.py``) stamped for it.
    Made once per start model version; None when there is no start model."""
    start = config.start_model()
    if not start.is_file():
        return None
    root = root or config.data_dir()
    stat = start.stat()
    shared = root / START / f"{start.stem}-{stat.st_size}-{stat.st_mtime_ns}.npz"
    if shared.is_file():
        return shared
    shared.parent.mkdir(parents=True, exist_ok=True)
    link_or_copy(start, shared)
    precomputed = start.with_name(start.stem + ".communities.json")
    if precomputed.is_file():
        try:
            saved = json.loads(precomputed.read_text(encoding="utf-8"))
            stamp = shared.stat()
            saved["model"] = file_stamp(stamp)
            data = json.dumps(saved, ensure_ascii=False).encode("utf-8")
        except (OSError, ValueError, TypeError, AttributeError):  # json's ValueError: a damaged run
            return shared  # a damaged file only means the user runs Infomap once
        atomic_write_bytes(shared.with_name(shared.stem + ".communities.json"), data)
    return shared


def link_or_copy(source: Path, target: Path) -> None:
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


def upload_path(folder: Path, contents: object) -> Path | None:
    """The file in the session's uploads that an upload widget's ``contents`` name (:data:`UPLOAD_REFERENCE`), or
    None when ``contents`` is something else (a data URI); SessionError when it names none of this session's."""
    if not isinstance(contents, str) or not contents.startswith(UPLOAD_REFERENCE):
        return None
    token = contents[len(UPLOAD_REFERENCE) :]
    path = folder / UPLOADS / token
    if not _TOKEN.fullmatch(token) or not path.is_file():
        raise SessionError("the uploaded file is no longer on the server (uploads are kept an hour); send it again")
    return path


DOWNLOAD_TTL_S = 3600.0
"""How long a download link stays valid."""


def _download_signer() -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(server_secret(), salt="chmm-download")


def download_link(folder: Path, path: Path, name: str) -> str:
    """A URL (``/download/<token>``, served by :mod:`app.transfers`) that downloads ``path``, a file of the session
    ``folder``, as ``name`` for :data:`DOWNLOAD_TTL_S`: the token, signed with the server's secret, names the session
    and the file, so the session id never appears in a URL."""
    relative = path.resolve().relative_to(folder.resolve()).as_posix()
    return "/download/" + _download_signer().dumps({"session": folder.name, "file": relative, "name": name})


def download_target(token: str) -> tuple[Path, str]:
    """The file a download token names and the name it is saved under; SessionError in one sentence for a token
    that is forged, expired, or names a file outside its session or no longer there."""
    try:
        said = _download_signer().loads(token, max_age=DOWNLOAD_TTL_S)
        folder = config.data_dir() / said["session"]
        path = (folder / said["file"]).resolve()
        path.relative_to(folder.resolve())  # nothing outside the session's folder
        name = str(said.get("name") or path.name)
    except (BadSignature, KeyError, TypeError, ValueError):  # relative_to's ValueError: outside the folder
        raise SessionError("This download link is not valid or has expired; export again.") from None
    if not path.is_file():
        raise SessionError("This file is no longer on the server; export again.")
    (folder / LAST_USED).touch()
    return path, name


def current_model_path(folder: Path) -> Path:
    return folder / CURRENT


def previous_model_path(folder: Path) -> Path:
    return folder / PREVIOUS


def install_model(folder: Path, source: Path) -> None:
    """Make the model file ``source`` (in the session folder) current; the old current model becomes the
    previous one. Every step is a rename or a link, so ``current.npz`` is at every moment a complete model."""
    current = current_model_path(folder)
    if current.exists():
        link_or_copy(current, previous_model_path(folder))
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
    link_or_copy(current, hold)
    os.replace(previous, current)
    os.replace(hold, previous)
    return True


def last_used(folder: Path) -> float:
    """Newest modification time among the folder, its ``last_used`` mark and its files (a running job writes
    its progress file, which keeps its session alive); a file shared with other sessions (the start model's hard
    link) says nothing of this one's use and is not counted."""
    times = [folder.stat().st_mtime]
    for entry in folder.iterdir():
        try:
            stat = entry.stat()
        except OSError:
            continue
        if stat.st_nlink == 1 or entry.is_dir():
            times.append(stat.st_mtime)
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
    for entry in session_folders(root):
        try:
            if now - last_used(entry) > ttl_s:
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry.name)
        except OSError:
            continue
    return removed


UNTOUCHED = frozenset({CURRENT, COMMUNITIES, LAST_USED})
"""The files of a session in which the visitor did nothing yet (the shared start model and its communities)."""

CACHES = frozenset({SUMMARY, WHOLE_LAYOUT})
"""Files a mere page load writes into a session folder (caches of what can be computed again from its model): they
say nothing of what the visitor did, so :func:`untouched` does not count them (issue 51: the badge's summary made
every fetched page a session with work, and 520 fetches locked out new visitors for a day)."""


def untouched(folder: Path) -> bool:
    """Whether the session never did anything: no corpus, no job, no model of its own (nothing would be lost).
    Judged by what the visitor did, not by what page loads wrote: the caches (:data:`CACHES`) do not count."""
    try:
        names = {entry.name for entry in folder.iterdir()} - CACHES
    except OSError:
        return False
    return names <= UNTOUCHED and not (folder / PREVIOUS).exists()


RECENT_S = 3600.0
"""A session used within this many seconds keeps its files when sessions pass the count limit: only the disk budget
(:func:`app.config.max_sessions_disk_bytes`) or :data:`OVERFLOW` times the count limit makes it give way."""

OVERFLOW = 4
"""How many times ``CHMM_MAX_SESSIONS`` the sessions may number while the recent ones are kept (a bound on the
folders a flood can make within :data:`RECENT_S`, whatever their size)."""


def _stored_bytes(folders: list[Path], own: bool = False) -> int:
    """The bytes the files of ``folders`` take, each file counted once (the shared start model's hard links once);
    ``own``: only the files no other folder links (what removing the folders frees)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for folder in folders:
        for path in folder.rglob("*"):
            try:
                stat = path.stat()
            except OSError:
                continue
            if path.is_file() and (stat.st_dev, stat.st_ino) not in seen and not (own and stat.st_nlink > 1):
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_size
    return total


FRESH_S = 60.0
"""A session in which nothing was done yet is kept this long after its last request before it makes room under the
count limit (its first upload may still be on its way)."""


ROOM_EVERY_S = 5.0
"""Past the count limit, room is made (:func:`make_room`, which reads every session folder) at most once this often
on the whole server, by one process at a time; the newcomers in between are let in at once. So a flood of new
sessions costs each newcomer a listing of the data folder, not a walk over every session (before: 1.2-1.6 s p95 per
session in a flood of 1,100), and the sessions pass the count by at most the newcomers of one interval."""
ROOM_STAMP = ".room-made"


@contextlib.contextmanager
def _room_turn(root: Path) -> Iterator[bool]:
    """Whether this newcomer makes room (:data:`ROOM_EVERY_S`): True, holding the server's room lock for the block,
    when no other process makes room now and nobody did in the last interval; else False at once."""
    with open(root / ".room.lock", "a", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            stamp = root / ROOM_STAMP
            try:
                due = time.time() - stamp.stat().st_mtime >= ROOM_EVERY_S
            except FileNotFoundError:
                due = True
            if due:
                stamp.touch()
            yield due
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def make_room(root: Path, limit: int, now: float | None = None) -> list[str]:
    """Make room for a new session when ``limit`` (the count) or the disk budget is reached, by least recent use:
    first sessions in which nothing was done (:func:`untouched`: nothing is lost) and not used in the last
    :data:`FRESH_S`, then sessions idle for longer than :data:`RECENT_S`. Sessions used more recently stay while
    there is room (fewer than :data:`OVERFLOW` times the limit and their files within
    :func:`app.config.max_sessions_disk_bytes`); past it the untouched ones go first, then the working ones. So
    neither a flood of minted sessions nor one of sessions that each upload a little locks out a newcomer or takes
    a working visitor's model within the hour. A session whose job is running is kept. Returns the ids removed."""
    now = time.time() if now is None else now
    folders = session_folders(root)
    seen = {folder: last_used(folder) for folder in folders}
    by_use = sorted(folders, key=seen.__getitem__)
    empty = {f for f in by_use if untouched(f)}
    old = [f for f in by_use if now - seen[f] > (FRESH_S if f in empty else RECENT_S)]
    first = [f for f in old if f in empty] + [f for f in old if f not in empty]
    recent = [f for f in by_use if f not in old and f in empty]
    recent += [f for f in by_use if f not in old and f not in empty and not _job_running(f, now)]
    removed: list[str] = []

    def remove(folder: Path) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        folders.remove(folder)
        removed.append(folder.name)

    for folder in first:
        if len(folders) < limit:
            break
        remove(folder)
    budget, used = config.max_sessions_disk_bytes(), _stored_bytes(folders)
    for folder in recent:
        if len(folders) < OVERFLOW * limit and used <= budget:
            break
        used -= _stored_bytes([folder], own=True)
        remove(folder)
    return removed


def _job_running(folder: Path, now: float) -> bool:
    """Whether a job of the session beats its heartbeat (a file named ``*heartbeat`` touched in the last 30 s)."""
    for path in folder.glob("*heartbeat"):
        try:
            if now - path.stat().st_mtime < 30.0:
                return True
        except OSError:
            continue
    return False


def maybe_cleanup(root: Path | None = None) -> None:
    """Run :func:`cleanup_sessions` if this process has not done so in the last hour."""
    now = time.time()
    if now - _last_cleanup["at"] < CLEANUP_EVERY_S:
        return
    _last_cleanup["at"] = now
    cleanup_sessions(root, now=now)
