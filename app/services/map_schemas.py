"""Services of the Maps page's schema view (issue 50; Guntupalli et al. 2023): a library of learned maps kept in the
session, and a background job that matches the page's walk (a walk in a new room, or the uploaded walk) to each of
them by learning only its emissions (:func:`engine.cognitive.schemas.match_schemas`), to say which stored layout the
new room follows.

The numerics are the engine's; this module keeps the library, checks input, runs the job and turns its fits into
what the page shows. In a session folder::

    map-library/NAME.npz   a map of the library (the session's current map added under a name, or an uploaded
                           map file, checked as the engine reads untrusted models)
    map-library.json       each map's clones, observations and actions, and where it came from
    schema-job.json        the latest schema job: key, status, message, progress (map, iteration, bits) and, once
                           it finished, every map's fit, best first
    schema-heartbeat       touched every second while the job runs
    schema-cancel          the cancel flag: the job stops within an EM iteration when it appears
"""

from __future__ import annotations

import math
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app import config, jobs, sessions
from app.jobs import CANCELLED, FAILED, FINISHED, REFUSED, RUNNING, QueueFull, Ticket
from app.jobs.kinds import JobKind, new_key
from app.services import UserError, describe_error, maps, whole_number
from app.services.corpus import decode_upload
from engine import api
from engine.errors import CHMMError
from engine.files import atomic_write_bytes, atomic_write_json

LIBRARY, LIBRARY_INDEX = "map-library", "map-library.json"
JOB, HEARTBEAT, CANCEL = "schema-job.json", "schema-heartbeat", "schema-cancel"
SCHEMA = JobKind("schema", "schema match", (JOB, HEARTBEAT, CANCEL))
"""The schema job's lifecycle (:class:`app.jobs.kinds.JobKind`)."""
MAX_MAPS = 12
"""The most maps a session's library holds (the job fits each in turn)."""
MAX_MAP_UPLOAD_BYTES = 20_000_000
MAX_MAP_ACTIONS = api.maps.MAX_OBSERVATION + 1
"""The most actions an uploaded map may have: as many as a walk may name (a learned map's limits; its clones
:data:`app.services.maps.MAX_TOTAL_CLONES`)."""
MAX_SCHEMA_STEPS = 50_000
"""The longest walk the job matches (its emission EM runs step by step in Python: about 5 s a map at 10,000 steps)."""
ITERATIONS = 50
"""The most EM iterations fitting a map's emissions (the engine's default, ``chmm schema --iterations``)."""
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")
WAITED_CANCELLED = "The schema match was cancelled while it waited."
USER_CANCELLED = "Schema match cancelled."
SERVER_STOPPED = "The server stopped the schema match."

ProgressReport = Callable[[dict[str, Any]], None]


# ------------------------------------------------------------------------------------------ the library
def library(folder: Path) -> list[dict[str, Any]]:
    """The session's library: each map's name, clones, observations, actions and origin, by name (maps whose file
    is gone are left out)."""
    index = jobs.read_json(folder / LIBRARY_INDEX) or {}
    return [
        {"name": name} | entry
        for name, entry in sorted(index.items())
        if isinstance(entry, dict) and (folder / LIBRARY / f"{name}.npz").is_file()
    ]


def check_name(name: Any) -> str:
    """A library name: 1 to 40 letters, digits, '_', '.' or '-', beginning with a letter or digit."""
    text = name.strip() if isinstance(name, str) else ""
    if text.lower().endswith(".npz"):
        text = text[:-4]
    if not NAME.fullmatch(text):
        raise UserError("Name the map with 1 to 40 letters, digits, '_', '.' or '-' (e.g. room-a).")
    return text


def _add(folder: Path, name: str, model: api.maps.ActionCHMM, origin: str, write: Callable[[Path], None]) -> str:
    """Write a map into the library under ``name`` (replacing a map of that name) and index it; the sentence."""
    index = jobs.read_json(folder / LIBRARY_INDEX) or {}
    replaced = name in index
    if not replaced and len(library(folder)) >= MAX_MAPS:
        raise UserError(f"The library holds at most {MAX_MAPS} maps; clear it or replace a map by its name.")
    (folder / LIBRARY).mkdir(exist_ok=True)
    write(folder / LIBRARY / f"{name}.npz")
    index[name] = {
        "clones": int(model.n_states), "observations": int(model.n_symbols), "actions": list(model.actions),
        "origin": origin,
    }  # fmt: skip
    atomic_write_json(folder / LIBRARY_INDEX, index)
    instead = " in place of the map of that name" if replaced else ""
    return f"Added {name!r} to the library ({model.n_states:,} clones){instead}."


def add_current_map(folder: Path, name: Any) -> str:
    """Put a copy of the session's current map into the library under ``name``; the sentence the page shows."""
    label = check_name(name)
    source, _ = maps.model_file(folder)
    model = api.maps.load_map(source)
    sessions.check_space(folder, source.stat().st_size, "The map")
    return _add(folder, label, model, "learned here", lambda target: shutil.copyfile(source, target))


def store_map_upload(folder: Path, contents: Any, filename: Any) -> str:
    """Put an uploaded map file (.npz, from ``chmm map`` or the page's download) into the library under its file
    name, after reading it as the engine reads untrusted models; UserError in one sentence on a bad file."""
    shown = filename if isinstance(filename, str) and filename else "the map file"
    label = check_name(Path(shown).name)
    data = decode_upload(contents, shown, MAX_MAP_UPLOAD_BYTES, folder=folder)
    sessions.check_space(folder, len(data), "The map")
    trial = folder / f".map-upload-{new_key()}.npz"
    try:
        atomic_write_bytes(trial, data)
        try:
            model = api.maps.load_map(trial, max_clones=maps.MAX_TOTAL_CLONES, max_actions=MAX_MAP_ACTIONS)
        except CHMMError as exc:
            reason = str(exc).split(": ", 1)[-1].rstrip(".")
            raise UserError(f"{shown} is not a map with actions: {reason}.") from None
        return _add(folder, label, model, "uploaded", lambda target: trial.replace(target))
    finally:
        trial.unlink(missing_ok=True)


def clear_library(folder: Path) -> str:
    """Remove every map of the session's library."""
    shutil.rmtree(folder / LIBRARY, ignore_errors=True)
    (folder / LIBRARY_INDEX).unlink(missing_ok=True)
    return "The library is empty."


# ------------------------------------------------------------------------------------------ the job
@dataclass(frozen=True)
class SchemaRequest:
    """The walk the job matches: ``length`` steps in ``room`` with ``seed`` (source "room", the page's room field:
    the new room) or the session's uploaded walk (source "walk")."""

    source: str
    seed: int = 0
    room: str | None = None
    length: int | None = None

    def walk_request(self) -> maps.MapRequest:
        return maps.MapRequest(self.source, 1, self.seed, self.room, self.length)


def check_request(folder: Path, source: Any, room: Any, length: Any, seed: Any) -> SchemaRequest:
    """The page's form as a :class:`SchemaRequest`; UserError in one sentence for an empty library or a walk the job
    cannot take."""
    if not library(folder):
        raise UserError("The library holds no maps: add the learned map or upload map files first.")
    if source not in maps.SOURCES:
        raise UserError("Choose the walk to match: a walk in the room, or an uploaded walk.")
    seed_n = whole_number(seed if seed not in (None, "") else 0, "the seed", 0, 2**31 - 1)
    if source == "walk":
        info = maps.upload_info(folder)
        if info is None:
            raise UserError("No walk uploaded yet: drop a walk file (CSV or JSON) on the upload field first.")
        if info.get("walks", 1) > 1:
            raise UserError("The schema match takes one walk; the uploaded file holds several.")
        if info["steps"] > MAX_SCHEMA_STEPS:
            raise UserError(f"The uploaded walk has {info['steps']:,} steps; the match takes {MAX_SCHEMA_STEPS:,}.")
        return SchemaRequest("walk", seed_n)
    grid = maps.parse_room(room)
    steps = whole_number(length, "the walk length", 10, MAX_SCHEMA_STEPS)
    return SchemaRequest("room", seed_n, maps.room_text(grid), steps)


def queue_schema(folder: Path, request: SchemaRequest) -> Ticket:
    """Put a schema job into the server's queue when the user presses Match (a ticket, not a process)."""
    sessions.check_disk("The schema match")
    if SCHEMA.busy(folder):
        raise UserError("A schema match is already running or waiting in this session; wait or cancel it.")
    return SCHEMA.enter(folder, {"request": asdict(request)})


def run_queued_schema(folder: Path, ticket_name: Any, report: ProgressReport | None = None) -> dict[str, str]:
    """The job of a queued schema match whose turn has come; the ticket is gone when it ends."""

    def start(data: dict[str, Any], ticket: Ticket) -> dict[str, str]:
        return run_schema_job(folder, SchemaRequest(**data["request"]), report, str(data["key"]), ticket)

    return SCHEMA.run_queued(folder, ticket_name, start, {"key": "", "status": CANCELLED, "message": WAITED_CANCELLED})


class _Stopped(Exception):
    """Raised from the engine's progress callback to stop the match (a cancel, or the time limit)."""


def run_schema_job(
    folder: Path,
    request: SchemaRequest,
    report: ProgressReport | None = None,
    key: str | None = None,
    ticket: Ticket | None = None,
) -> dict[str, str]:
    """Match the request's walk to every map of the library; the fits, best first, go into the job's record (the
    page says them with :func:`schema_sentence`). Returns the key, status and message (never raises for a problem
    with the input or the run)."""
    key = key or new_key()
    files = SCHEMA.files(folder)
    if SCHEMA.runs_another(folder, key):
        return {"key": key, "status": REFUSED, "message": "A schema match is already running in this session."}
    record = SCHEMA.new_record(folder, key, "Reading the library and the walk.", request=asdict(request))
    publish = files.publisher(record, report)

    def finish(status: str, message: str) -> dict[str, str]:
        said = SCHEMA.record_end(folder, record, publish, status, message, SERVER_STOPPED, USER_CANCELLED)
        return {"key": key, "status": status, "message": said}

    try:
        files.heartbeat.touch()
        publish(force=True)
        names = [entry["name"] for entry in library(folder)]
        if not names:
            raise UserError("The library holds no maps: add the learned map or upload map files first.")
        found = api.maps.read_library([folder / LIBRARY / f"{name}.npz" for name in names])
        walk, _, _ = maps.prepare_walk(folder, request.walk_request())
        if len(walk.documents) > 1:
            raise UserError("The schema match takes one walk; the uploaded file holds several.")
    except (UserError, CHMMError, OSError) as exc:
        return finish(REFUSED, _said(exc))
    with files.alive():
        ended = _match(folder, found, walk, ticket, record, publish)
    return finish(*ended)


def _match(
    folder: Path,
    library_maps: dict[str, api.maps.ActionCHMM],
    walk: api.maps.WalkFile,
    ticket: Ticket | None,
    record: dict[str, Any],
    publish: Callable[..., None],
) -> tuple[str, str]:
    """Take a place and fit every map to the walk, the progress in ``record``; how it ended (a status and a
    sentence), the fits in ``record`` when it finished."""
    files = SCHEMA.files(folder)
    deadline = time.time() + config.max_job_seconds()
    names = list(library_maps)
    record.update(maps=len(names), names=names)

    def progress(index: int, iteration: int, bits: float) -> None:
        if files.cancel.exists() or time.time() > deadline:
            raise _Stopped
        record.update(map=int(index), iteration=int(iteration), bits=float(bits))
        publish(iteration == 0)  # each map's start is shown, however fast its fit

    def waiting(place: int) -> None:
        record["message"] = jobs.waiting_message(place)
        publish()

    try:
        with jobs.held_place(waiting, files.cancel.exists, ticket) as placed:
            if not placed:
                return CANCELLED, WAITED_CANCELLED
            record["message"] = "Matching the walk to the library."
            fits = api.maps.match_schemas(
                library_maps, walk.observations, walk.actions, len(walk.symbols), ITERATIONS, api.maps.SCHEMA_HELD_OUT,
                0, list(walk.action_names), progress,
            )  # fmt: skip
    except QueueFull as exc:
        return REFUSED, str(exc)
    except _Stopped:
        if files.cancel.exists():
            return CANCELLED, USER_CANCELLED
        return FAILED, f"The schema match reached the server's time limit of {config.max_job_seconds() / 60:g} minutes."
    except jobs.JobTerminated:
        return CANCELLED, SERVER_STOPPED
    except MemoryError as exc:
        return FAILED, f"The schema match ran out of memory ({exc}); use a shorter walk or smaller maps."
    except Exception as exc:  # a map the walk does not fit becomes a sentence in the page
        return REFUSED, _said(exc)
    steps = len(walk.observations)
    held = steps - int(round(steps * (1.0 - api.maps.SCHEMA_HELD_OUT)))
    record["fits"] = [
        {"name": f.name, "held_out_bits": _finite(f.held_out_bits), "fitted_bits": _finite(f.fitted_bits),
         "iterations": f.iterations, "clones": int(library_maps[f.name].n_states)}
        for f in fits
    ]  # fmt: skip
    record.update(steps=steps, held_out_steps=held)
    count = len(fits)
    return FINISHED, f"Matched a {steps:,}-step walk to the library's {count} map{'s' if count != 1 else ''}."


def _said(exc: BaseException) -> str:
    """An error as the page's one sentence, ending in a full stop."""
    return describe_error(exc).rstrip(".") + "."


def _finite(bits: float) -> float | None:
    """Bits per step as the record keeps them: None where the map makes the steps impossible (infinite bits)."""
    return float(bits) if math.isfinite(bits) else None


# ------------------------------------------------------------------------------------------ what the page shows
def read_job(folder: Path) -> dict[str, Any] | None:
    return SCHEMA.read(folder)


def progress_of(record: dict[str, Any] | None) -> tuple[int, str]:
    """A schema job's progress bar value (0-100) and its label: map m of M fills the bar from 100 m / M to
    100 (m + 1) / M as its EM iterations go."""
    if not record:
        return 0, ""
    status = record.get("status")
    if status != RUNNING:
        return (100 if status == FINISHED else 0), record.get("message", "")
    if record.get("map") is None or not record.get("maps"):
        return 0, record.get("message", "Starting.")
    index, count, iteration = int(record["map"]), int(record["maps"]), int(record.get("iteration") or 0)
    value = 100 * (index + min((iteration + 1) / ITERATIONS, 1.0)) / count
    name = (record.get("names") or ["?"] * count)[index]
    return int(min(value, 99)), (
        f"Map {index + 1} of {count} ({name}): emission EM iteration {iteration + 1} (at most {ITERATIONS}), "
        f"{float(record.get('bits') or 0):.4f} bits per step."
    )


def schema_sentence(record: dict[str, Any] | None) -> str:
    """The chosen schema and its evidence in one sentence: its held-out bits per step and the margin to the
    runner-up (or that the runner-up cannot make the held-out steps at all)."""
    fits = (record or {}).get("fits") or []
    if not fits:
        return "No schema match yet."
    best, held = fits[0], int(record.get("held_out_steps") or 0)
    if best["held_out_bits"] is None:
        return f"No map of the library can make the walk's last {held:,} steps: the room follows none of them."
    text = f"The walk follows {best['name']!r}: {best['held_out_bits']:.4f} bits per step on its last {held:,} steps"
    if len(fits) == 1:
        return text + ", the only map in the library (add another to compare)."
    runner = fits[1]
    if runner["held_out_bits"] is None:
        return text + f"; the runner-up {runner['name']!r} cannot make those steps at all (its layout forbids them)."
    return (
        text + f", {runner['held_out_bits'] - best['held_out_bits']:.4f} below the runner-up {runner['name']!r} "
        f"({runner['held_out_bits']:.4f})."
    )


def request_cancel(folder: Path) -> str:
    """Stop the session's schema job (its cancel flag; a waiting one leaves the queue) and say so."""
    waited, record = SCHEMA.cancel_running(folder, USER_CANCELLED, SERVER_STOPPED)
    if waited:
        return WAITED_CANCELLED
    if record and record.get("status") == FINISHED:
        return "The schema match had already finished; its result is shown."
    return USER_CANCELLED


def reap_dead_job(folder: Path) -> str | None:
    """If the session's schema job died without a word, mark it failed and say so."""
    return SCHEMA.reap_said(folder, "The schema match", "use a shorter walk or fewer maps", "The library is kept.")
