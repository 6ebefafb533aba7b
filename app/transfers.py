"""Files in and out of a session by routes of their own, never in a callback's body.

* **Upload** (``POST /upload/<kind>``): the file's bytes as the raw body, the tab's session id in the
  ``X-CHMM-Session`` header and the file's name, URL-encoded, in ``X-CHMM-File-Name``. The body is refused before a
  byte of it is read when its declared length passes the kind's limit (:data:`UPLOAD_LIMITS`), the session's disk
  or the server's free disk, and is otherwise streamed in :data:`CHUNK` pieces into the session's ``uploads/``
  (bounded memory, whatever the file). The answer is JSON: ``reference`` (what the page's upload widget then holds
  as its ``contents``, :data:`app.sessions.UPLOAD_REFERENCE` and a token), or ``message``, one sentence, with an
  error status. ``assets/upload_limit.js`` sends every upload of the app so, with its progress.
* **Download** (``GET /download/<token>``): a file of a session folder (an export, the current model) streamed from
  disk; the token, signed with the server's secret, names the session and the file and lasts
  :data:`app.sessions.DOWNLOAD_TTL_S` (:func:`app.sessions.download_link`), so the session id never appears in a URL.
* **Every other request** is capped at :func:`app.config.max_callback_bytes` before it is read (HTTP 413): a
  callback's body is a few form values, not a file.
"""

from __future__ import annotations

import secrets
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import flask

from app import config, memory, sessions
from app.services import UserError, describe_error, format_bytes, map_schemas, map_uploads

UPLOAD_PREFIX = "/upload/"
DOWNLOAD_PREFIX = "/download/"
CHUNK = 1 << 20
"""The bytes read from an upload's body at a time."""
KEPT_UPLOADS = 8
"""The files a session's ``uploads/`` keeps (the oldest goes when another arrives): a page uses its upload at once."""

UPLOAD_LIMITS: dict[str, Callable[[], int]] = {
    "corpus": config.max_upload_bytes,
    "model": config.max_model_upload_bytes,
    "walk": lambda: map_uploads.MAX_WALK_UPLOAD_BYTES,
    "evidence": lambda: map_uploads.MAX_EVIDENCE_UPLOAD_BYTES,
    "map": lambda: map_schemas.MAX_MAP_UPLOAD_BYTES,
}
"""Each kind of upload and its limit in bytes (read per request, so the environment can change it)."""


def body_limit(path: str) -> int:
    """The largest body a request to ``path`` may carry: an upload kind's limit on its route, else a callback's."""
    if path.startswith(UPLOAD_PREFIX):
        limit = UPLOAD_LIMITS.get(path[len(UPLOAD_PREFIX) :])
        if limit is not None:
            return limit()
    return config.max_callback_bytes()


BODY_RESERVED_ABOVE = 1_000_000
"""A callback body larger than this is charged to the server's memory budget before it is read."""
BODY_BYTES_FACTOR = 3
"""What reading and parsing a callback's body takes, in bytes of the body (8 MB of JSON: a traced peak of 24 MB)."""


def cap_body() -> Any:
    """Before every request: its body limit (:func:`body_limit`), which Werkzeug enforces with HTTP 413 before any
    of the body is read; a callback's body over :data:`BODY_RESERVED_ABOVE` is first charged to the server's memory
    budget (:func:`app.memory.reserve`: twelve such bodies at once took 290 MB that nothing counted), and without
    room it is refused unread with HTTP 503 and the budget's sentence."""
    request = flask.request
    request.max_content_length = body_limit(request.path)
    length = request.content_length or 0
    if length > BODY_RESERVED_ABOVE and not request.path.startswith(UPLOAD_PREFIX):
        try:
            flask.g.body_reservation = memory.reserve(BODY_BYTES_FACTOR * length, "Reading this request")
        except memory.ServerBusy as exc:
            return _refusal(str(exc), 503)
    return None


def release_body(_error: BaseException | None = None) -> None:
    """After every request: give back what its body was charged (:func:`cap_body`)."""
    reservation = flask.g.pop("body_reservation", None)
    if reservation is not None:
        reservation.release()


def _refusal(message: str, status: int) -> tuple[flask.Response, int]:
    return flask.jsonify({"message": message}), status


def receive_upload(kind: str) -> Any:
    """The upload route (see the module docstring)."""
    request = flask.request
    if kind not in UPLOAD_LIMITS:
        return _refusal("There is no such upload.", 404)
    name = urllib.parse.unquote(request.headers.get("X-CHMM-File-Name", ""))[:200] or "the file"
    limit, length = UPLOAD_LIMITS[kind](), request.content_length
    if length is None:
        return _refusal(f"{name} arrived without its size; try again.", 411)
    if length > limit:
        return _refusal(f"{name} is too large: {format_bytes(length)}, the limit is {format_bytes(limit)}.", 413)
    try:
        folder = sessions.session_folder(request.headers.get("X-CHMM-Session"))
        sessions.check_disk("This upload")
        sessions.check_space(folder, length, "This upload")
        return flask.jsonify(_store(folder, request.stream, length, name))
    except (sessions.SessionError, UserError, OSError) as exc:
        return _refusal(describe_error(exc), 400)


def _store(folder: Path, stream: Any, length: int, name: str) -> dict[str, Any]:
    """Stream ``length`` bytes of ``stream`` into a new file of the session's uploads; its reference."""
    uploads = folder / sessions.UPLOADS
    uploads.mkdir(exist_ok=True)
    for old in sorted(uploads.iterdir(), key=lambda p: p.stat().st_mtime)[: -KEPT_UPLOADS + 1 or None]:
        old.unlink(missing_ok=True)
    token = secrets.token_hex(16)
    partial = uploads / f".tmp-{token}"
    received = 0
    try:
        with open(partial, "wb") as out:
            while received < length:
                chunk = stream.read(min(CHUNK, length - received))
                if not chunk:
                    break
                out.write(chunk)
                received += len(chunk)
        if received != length:
            raise UserError(f"{name} arrived incomplete ({received:,} of {length:,} bytes); try again")
        partial.replace(uploads / token)
    finally:
        partial.unlink(missing_ok=True)
    return {"reference": sessions.UPLOAD_REFERENCE + token, "name": name, "size": received}


def send_download(token: str) -> Any:
    """The download route: the file a valid token names (:func:`app.sessions.download_target`), streamed from disk,
    or a sentence with an error status."""
    try:
        path, name = sessions.download_target(token)
    except sessions.SessionError as exc:
        return _refusal(describe_error(exc), 404)
    return flask.send_file(path, as_attachment=True, download_name=name, max_age=0)


def install(server: flask.Flask) -> None:
    """Add the routes and the body cap to the Flask server."""
    server.config["MAX_CONTENT_LENGTH"] = max([config.max_callback_bytes(), *(f() for f in UPLOAD_LIMITS.values())])
    server.before_request(cap_body)
    server.teardown_request(release_body)
    server.add_url_rule(f"{UPLOAD_PREFIX}<kind>", "chmm_upload", receive_upload, methods=["POST"])
    server.add_url_rule(f"{DOWNLOAD_PREFIX}<token>", "chmm_download", send_download, methods=["GET"])


def uploads_expired(folder: Path, now: float | None = None, ttl_s: float = 3600.0) -> list[str]:
    """Remove the session's uploads older than ``ttl_s`` (a page uses its upload at once); their names."""
    now = time.time() if now is None else now
    removed = []
    for path in (folder / sessions.UPLOADS).glob("*"):
        try:
            if now - path.stat().st_mtime > ttl_s:
                path.unlink()
                removed.append(path.name)
        except OSError:
            continue
    return removed
