"""Views that are links across sessions, and a session's named views.

**Shared models.** A session's Communities view is a link (:mod:`app.pages.community.view`), but the link names
only the view: opened in another session (a colleague's browser) it meets that session's own model. "Share this
view" publishes the session's current model and its Infomap run under a random token, read-only, and the link
carries it (``/communities?share=TOKEN&module=3``). A session that opens such a link and does not hold that model is
offered to make it its current model (its own model stays one undo away), after which the view opens. A share is
hard links to the session's files (models and runs are only ever replaced, never written in place), so it costs no
disk while the session keeps them; shares expire with sessions (``CHMM_SESSION_TTL_HOURS``) and the server keeps at
most :data:`MAX_SHARES`, the oldest going first. In the data folder::

    .shared/TOKEN/current.npz        the model (a hard link to the session's file as it was)
    .shared/TOKEN/communities.json   its Infomap run, when it had one
    .shared/TOKEN/whole-layout.npz   its whole graph's layout by transitions, when it was drawn (made once)
    .shared/TOKEN/share.json         when it was made and what it holds (the model's stamp, the run's)

**Named views.** A session keeps up to :data:`MAX_VIEWS` views under names of its choosing (``views.json``: name
-> the view's query string), to come back to in one click."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from app import config, sessions
from app.jobs import read_json
from app.services import UserError
from app.services import graphs as graph_service
from engine.files import atomic_write_json

SHARED = ".shared"
INFO = "share.json"
TOKEN = re.compile(r"[0-9a-f]{20}")
MAX_SHARES = 1_000
"""The most shares the server keeps (the oldest go first past it)."""
SESSION_SHARES = "shares.json"
"""A session's own shares (token -> the model's and the run's stamps), so that sharing the same view twice gives one
token."""
VIEWS = "views.json"
MAX_VIEWS = 30
"""The most named views a session keeps."""
VIEW_NAME = re.compile(r"[^\x00-\x1f<>]{1,60}")


def _root() -> Path:
    return config.data_dir() / SHARED


def _run_stamp(folder: Path) -> str | None:
    """What identifies the session's current Infomap run (when it finished), None without one for its model."""
    saved = graph_service.read_communities(folder)
    return None if saved is None else repr(saved.get("finished"))


def share_view(folder: Path) -> str:
    """Publish the session's current model and its Infomap run (read-only, hard links) and return the share's
    token; the same model and run shared again give the same token while that share lives."""
    model_stamp, run_stamp = sessions.model_stamp(folder), _run_stamp(folder)
    own = read_json(folder / SESSION_SHARES) or {}
    for token, stamps in own.items():
        if stamps == [model_stamp, run_stamp] and (_root() / token / INFO).is_file():
            return token
    sessions.check_disk("Sharing this view")
    token = secrets.token_hex(10)
    work = _root() / f".tmp-{token}"
    work.mkdir(parents=True)
    try:
        sessions.link_or_copy(sessions.current_model_path(folder), work / sessions.CURRENT)
        if run_stamp is not None:
            sessions.link_or_copy(folder / graph_service.COMMUNITIES, work / graph_service.COMMUNITIES)
        if (folder / sessions.WHOLE_LAYOUT).is_file():  # its whole graph's layout, made once (it says whose it is)
            sessions.link_or_copy(folder / sessions.WHOLE_LAYOUT, work / sessions.WHOLE_LAYOUT)
        atomic_write_json(work / INFO, {"created": time.time(), "model": model_stamp, "run": run_stamp})
        os.rename(work, _root() / token)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    own = {t: s for t, s in own.items() if (_root() / t / INFO).is_file()} | {token: [model_stamp, run_stamp]}
    atomic_write_json(folder / SESSION_SHARES, own)
    _expire()
    return token


def _expire(now: float | None = None) -> None:
    """Remove shares older than the session time to live, then the oldest past :data:`MAX_SHARES`."""
    now = time.time() if now is None else now
    root = _root()
    if not root.is_dir():
        return
    shares = []
    for entry in root.iterdir():
        if not TOKEN.fullmatch(entry.name):
            if entry.name.startswith(".tmp-") and now - entry.stat().st_mtime > 3600:
                shutil.rmtree(entry, ignore_errors=True)  # a share whose making was killed
            continue
        created = (read_json(entry / INFO) or {}).get("created", 0.0)
        shares.append((created if isinstance(created, float) else 0.0, entry))
    shares.sort()
    ttl = config.session_ttl_seconds()
    for index, (created, entry) in enumerate(shares):
        if now - created > ttl or index < len(shares) - MAX_SHARES:
            shutil.rmtree(entry, ignore_errors=True)


def shared(token: Any) -> Path | None:
    """The folder of the share ``token`` (None for a malformed token, or a share that expired or never was)."""
    if not isinstance(token, str) or not TOKEN.fullmatch(token):
        return None
    folder = _root() / token
    created = (read_json(folder / INFO) or {}).get("created")
    if not isinstance(created, float) or time.time() - created > config.session_ttl_seconds():
        return None  # never made, or expired (removed at the next share's making)
    return folder if (folder / sessions.CURRENT).is_file() else None


def holds_share(folder: Path, token: str) -> bool:
    """Whether the session's current model is the shared one, with the shared run (then the link's view opens
    as it is)."""
    share = shared(token)
    if share is None:
        return False
    info = read_json(share / INFO) or {}
    with contextlib.suppress(OSError):
        if sessions.current_model_path(folder).samefile(share / sessions.CURRENT):
            return info.get("run") is None or _run_stamp(folder) == info.get("run")
    return False


def share_sentence(token: Any) -> str:
    """What the share holds, in a sentence for the page that offers to open it (UserError when it is gone)."""
    share = shared(token)
    if share is None:
        raise UserError("This link's shared model is no longer on the server (shares expire with sessions).")
    summary = read_json(share / INFO) or {}
    size = (share / sessions.CURRENT).stat().st_size
    run = "with its Infomap run" if summary.get("run") else "without an Infomap run"
    return f"This link shows a model another session shared ({config.format_bytes(size)}, {run})."


def open_share(folder: Path, token: Any) -> str:
    """Make the shared model the session's current model (the session's own becomes its previous: one undo) and
    the shared run its Infomap run; the sentence said."""
    share = shared(token)
    if share is None:
        raise UserError("This link's shared model is no longer on the server (shares expire with sessions).")
    sessions.check_space(folder, 0, "The shared model")
    candidate = folder / f".share-{token}.npz"
    sessions.link_or_copy(share / sessions.CURRENT, candidate)
    sessions.install_model(folder, candidate)
    for kept_file in (graph_service.COMMUNITIES, sessions.WHOLE_LAYOUT):  # the run, and its whole graph's layout
        if (share / kept_file).is_file():
            sessions.link_or_copy(share / kept_file, folder / kept_file)
    return "Opened the shared model and its run; your previous model is one undo away (Model page)."


# ------------------------------------------------------------------------------------------ named views
def saved_views(folder: Path) -> dict[str, str]:
    """The session's named views: name -> the view's query string, in the order they were saved."""
    views = read_json(folder / VIEWS) or {}
    return {name: search for name, search in views.items() if isinstance(search, str)}


def save_view(folder: Path, name: Any, search: Any) -> str:
    """Keep the view ``search`` (a query string of the page) under ``name`` (replacing a view of that name); the
    sentence said."""
    label = name.strip() if isinstance(name, str) else ""
    if not VIEW_NAME.fullmatch(label):
        raise UserError("Name the view with 1 to 60 characters (no angle brackets).")
    query = search if isinstance(search, str) else ""
    if len(query) > 2_000 or (query and not query.startswith("?")):
        raise UserError("This view cannot be saved: its address is not one of this page's.")
    views = saved_views(folder)
    if label not in views and len(views) >= MAX_VIEWS:
        raise UserError(f"A session keeps at most {MAX_VIEWS} views; delete one first.")
    views[label] = query
    atomic_write_json(folder / VIEWS, views)
    return f"Saved this view as {label!r}."


def delete_view(folder: Path, name: Any) -> str:
    views = saved_views(folder)
    if name not in views:
        raise UserError("Choose a saved view to delete.")
    del views[name]
    atomic_write_json(folder / VIEWS, views)
    return f"Deleted the view {name!r}."
