"""Services of the Maps page (issue 37, cognitive maps): a room typed as a table of observations, a walk in it (or an
uploaded walk), a CHMM with actions learned from the walk as a background job, and what the page shows of the
learned map: its clone graph laid out like the room, a clone's place field, a planned route and Infomap's modules.

Everything numeric is the engine's (:mod:`engine.cognitive.walks`, :mod:`engine.cognitive.actions`); this module checks
input, runs the job and turns the engine's results into what the page draws. A session's map lives in its folder::

    map-job.json      the latest map job: key, status, message, stage, iteration and bits per step (its progress)
    map-heartbeat     touched every second while the job runs
    map-cancel        the cancel flag: the job stops within an EM iteration when it appears
    map-upload.csv    the uploaded walk, map-evidence/ its likelihood file (:mod:`app.services.map_uploads`)
    maps/KEY/         a learned map: model.npz, walk.csv, room.csv (when the room is known), view.json (its clone
                      graph, node places, modules and summary, computed once by the job)
    map.json          which map is the session's current one ({"key": KEY}); replaced atomically when a job
                      finishes, so a cancelled or failed job leaves the previous map as it was"""

from __future__ import annotations

import io
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app import config, jobs, sessions
from app.jobs import CANCELLED, FAILED, FINISHED, REFUSED, RUNNING, JobFiles, QueueFull, Ticket
from app.jobs.kinds import JobKind, new_key
from app.services import UserError, describe_error, kept, map_noise, map_uploads, whole_number
from app.services.map_drawing import CELL as CELL
from app.services.map_drawing import MODULE_PALETTE as MODULE_PALETTE
from app.services.map_drawing import PALETTE as PALETTE
from app.services.map_drawing import WALL_COLOUR as WALL_COLOUR
from app.services.map_drawing import edge_id as edge_id
from app.services.map_drawing import map_elements as map_elements
from app.services.map_drawing import observation_colour as observation_colour
from app.services.map_drawing import route_elements as route_elements
from app.services.map_uploads import MAX_WALK_LENGTH as MAX_WALK_LENGTH
from app.services.map_uploads import MAX_WALK_UPLOAD_BYTES as MAX_WALK_UPLOAD_BYTES
from app.services.map_uploads import UPLOAD as UPLOAD
from app.services.map_uploads import UPLOAD_INFO as UPLOAD_INFO
from app.services.map_uploads import describe_upload as describe_upload
from app.services.map_uploads import sentence as _sentence
from app.services.map_uploads import store_walk_upload as store_walk_upload
from app.services.map_uploads import upload_info as upload_info
from engine import api
from engine.errors import CHMMError
from engine.files import atomic_write_bytes, atomic_write_json

NOTEBOOK_ROOM = """1,2,3,0,3,1,1,1
1,1,3,2,3,2,3,1
1,1,2,0,1,2,1,0
0,2,1,1,3,0,0,2
3,3,1,0,1,0,3,0
2,1,2,3,3,3,2,0"""
"""The 6 x 8 rectangular room of the paper's public notebook (George et al. 2021): four observations, no walls."""
APP_WALK_LENGTH = 10_000
"""The page's walk length: the notebook's room is learned from it in a few seconds a restart."""
APP_CLONES = 20
"""The page's clones per observation: the engine's default is :data:`engine.cognitive.walks.MAP_DEFAULTS` (70); 20 learn
the notebook's room from a 10,000-step walk in about 3 s a restart on 2 cores (70: about four times as long), and
recover it; the page's 4 restarts race in turn in the job's process (below the engine's ``MAP_PROCESS_WORK``)."""
MAX_CLONES = 200
MAX_TOTAL_CLONES = 5_000
"""Clones per observation times observations at most (the job's memory and time grow with it)."""
MAX_ROOM_CELLS = 2_500
MAX_ROOM_CHARACTERS = 50_000

JOB, HEARTBEAT, CANCEL = "map-job.json", "map-heartbeat", "map-cancel"
MAPS, CURRENT = "maps", "map.json"
MODEL, WALK, ROOM, VIEW = "model.npz", "walk.csv", "room.csv", "view.json"
MAP_KIND = "map"
"""The map job's kind in the server's queue (:class:`app.jobs.Ticket`)."""
MAP = JobKind(MAP_KIND, "map", (JOB, HEARTBEAT, CANCEL))
"""The map job's lifecycle (:class:`app.jobs.kinds.JobKind`)."""
WAITED_CANCELLED = "The map job was cancelled while it waited; the previous map is kept."
USER_CANCELLED = "Map job cancelled; the previous map is kept."
SERVER_STOPPED = "The server stopped the map job; the previous map is kept."
SOURCES = {"room": "a random walk in the room above", "walk": "the uploaded walk"}

ProgressReport = Callable[[dict[str, Any]], None]


# ------------------------------------------------------------------------------------------ input
def parse_room(content: Any) -> np.ndarray:
    """The room typed in the page (rows of whole numbers, -1 for a wall); UserError in one sentence otherwise."""
    if not isinstance(content, str) or not content.strip():
        raise UserError("Type the room: one row of whole numbers per line (an observation per cell, -1 for a wall).")
    if len(content) > MAX_ROOM_CHARACTERS:
        raise UserError(f"The room is too long: {len(content):,} characters, at most {MAX_ROOM_CHARACTERS:,}.")
    try:
        room = api.maps.parse_room(content, "The room")
    except CHMMError as exc:
        raise UserError(_sentence(exc)) from None
    if room.size > MAX_ROOM_CELLS:
        raise UserError(f"The room has {room.size:,} cells; the page takes at most {MAX_ROOM_CELLS:,}.")
    return room


def room_text(room: np.ndarray) -> str:
    return "\n".join(",".join(str(int(v)) for v in row) for row in room)


@dataclass(frozen=True)
class MapRequest:
    """What a map job learns from: a walk of ``length`` steps in ``room`` (source "room") or the session's uploaded
    walk (source "walk"), with ``clones`` per observation, ``seed`` (the walk's and the model's) and ``restarts``
    (the engine's :attr:`engine.cognitive.walks.MapOptions.restarts`; a job queued before it existed ran one); with
    ``noise``, the walk in the room is read by a sensor wrong with that probability and the map is learned from the
    readings' soft evidence (:func:`engine.cognitive.evidence.learn_map_through_noise`, with the restarts); with
    ``evidence`` (the name of the uploaded walk's likelihood file), from that file's soft evidence
    (:func:`engine.cognitive.evidence.learn_map_from_evidence`)."""

    source: str
    clones: int
    seed: int = 0
    room: str | None = None
    length: int | None = None
    restarts: int = 1
    noise: float = 0.0
    evidence: str | None = None

    def options(self) -> api.maps.MapOptions:
        return api.maps.MapOptions(clones=self.clones, seed=self.seed, restarts=self.restarts)


def check_request(
    folder: Path,
    source: Any,
    room: Any,
    length: Any,
    clones: Any,
    seed: Any = 0,
    restarts: Any = None,
    noise: Any = None,
) -> MapRequest:
    """The page's form as a :class:`MapRequest` (``restarts`` None: the engine's default); UserError in one sentence
    for anything the job cannot take."""
    if source not in SOURCES:
        raise UserError("Choose what to learn from: a walk in the room, or an uploaded walk.")
    clones_n = whole_number(clones, "the clones per observation", 1, MAX_CLONES)
    seed_n = whole_number(seed if seed not in (None, "") else 0, "the seed", 0, 2**31 - 1)
    restarts = api.maps.MAP_DEFAULTS.restarts if restarts is None else restarts
    restarts_n = whole_number(restarts, "the number of restarts", 1, api.DEFAULTS.MAX_RESTARTS)
    noise_p = map_noise.check_noise(noise)
    evidence = map_uploads.check_evidence_request(folder, source, noise_p, clones_n)
    if noise_p and source != "room":
        raise UserError("Sensor noise applies to a walk the page makes in the room; an upload is learned as read.")
    if source == "room":
        grid = parse_room(room)
        steps = whole_number(length, "the walk length", 2, MAX_WALK_LENGTH)
        observations = len(np.unique(grid[grid >= 0]))
        request = MapRequest("room", clones_n, seed_n, room_text(grid), steps, restarts_n, noise_p)
    else:
        info = upload_info(folder)
        if info is None:
            raise UserError("No walk uploaded yet: drop a walk file (CSV or JSON) on the upload field first.")
        observations = int(info["observations"])
        request = MapRequest("walk", clones_n, seed_n, restarts=restarts_n, evidence=evidence)
    if clones_n * observations > MAX_TOTAL_CLONES:
        raise UserError(
            f"{clones_n} clones for each of {observations} observations make {clones_n * observations:,} clones; the "
            f"page takes at most {MAX_TOTAL_CLONES:,}: choose fewer clones per observation."
        )
    if noise_p and clones_n * observations > api.maps.MAX_SOFT_CLONES:
        raise UserError(
            f"A map learned through sensor noise holds its transitions dense, at most {api.maps.MAX_SOFT_CLONES:,} "
            f"clones; "
            f"{clones_n} for each of {observations} observations make {clones_n * observations:,}: choose fewer."
        )
    return request


# ------------------------------------------------------------------------------------------ the job
def map_files(folder: Path) -> JobFiles:
    """The map job's record (which also holds its progress), heartbeat and cancel flag in a session folder."""
    return MAP.files(folder)


def read_job(folder: Path) -> dict[str, Any] | None:
    return MAP.read(folder)


def map_running(folder: Path) -> bool:
    return MAP.running(folder)


def map_ticket(folder: Path) -> Ticket | None:
    """The session's map job in the queue (waiting, or started and not yet running), if any."""
    return MAP.ticket(folder)


def queue_map(folder: Path, request: MapRequest) -> Ticket:
    """Put a map job into the server's queue when the user presses Learn (a ticket, not a process: see
    :class:`app.jobs.JobSlot`), after the checks that can refuse it at once, each in one sentence."""
    sessions.check_disk("The map job")
    if MAP.busy(folder):
        raise UserError("A map job is already running or waiting in this session; wait or cancel it.")
    return MAP.enter(folder, {"request": asdict(request)})


def queue_view(folder: Path, shown: dict[str, Any] | None) -> tuple[Any, Any]:
    """What the session's pages show of its map job in the queue, and the job to start when its turn has come."""
    return MAP.queue_view(folder, shown)


def run_queued_map(folder: Path, ticket_name: Any, report: ProgressReport | None = None) -> dict[str, str]:
    """The job of a queued map whose turn has come: its request is the ticket's; the ticket is gone when it ends."""

    def start(data: dict[str, Any], ticket: Ticket) -> dict[str, str]:
        return run_map_job(folder, MapRequest(**data["request"]), report, key=str(data["key"]), ticket=ticket)

    return MAP.run_queued(folder, ticket_name, start, {"key": "", "status": CANCELLED, "message": WAITED_CANCELLED})


class _Stopped(Exception):
    """Raised from the engine's progress callback to stop learning (a cancel, or the time limit)."""


def progress_of(record: dict[str, Any] | None) -> tuple[int, str]:
    """A job record's progress bar value (0-100) and its label: the restart (with several), the stage, the
    iteration and the bits per step. Restart r of R fills the bar from 90 r / R to 90 (r + 1) / R (EM the first
    nine tenths of that, Viterbi EM the last), the kept restart's refit on the whole walk from 90 to 100."""
    if not record:
        return 0, ""
    status = record.get("status")
    if status != RUNNING:
        return (100 if status == FINISHED else 0), record.get("message", "")
    stage, iteration, bits = record.get("stage"), record.get("iteration"), record.get("bits")
    if stage not in ("em", "viterbi", "refit", "soft-refit") or iteration is None:
        return 0, record.get("message", "Starting.")
    options = api.maps.MAP_DEFAULTS
    restart, restarts = int(record.get("restart") or 0), int(((record.get("request") or {}).get("restarts")) or 1)
    share = 90 / restarts if restarts > 1 else 90
    which = f"Restart {restart + 1} of {restarts}: " if restarts > 1 else ""
    further = restart >= restarts > 1  # a further round: every restart so far gave the held-out steps probability 0
    if further:
        which = f"Restart {restart + 1} (the first {restarts} found no room; at most {options.max_restarts}): "
    if stage == "soft-refit":  # a map learned from soft evidence: the kept restart's EM, then Viterbi EM, in one
        value = 90 + 10 * (iteration + 1) / (options.iterations + options.viterbi_iterations)
        which = "The kept restart on the whole walk: "
        label = f"iteration {iteration + 1:,} (until the fit stops improving)"
    elif stage == "em":
        value = share * (restart + (0.9 if restarts > 1 else 1.0) * (iteration + 1) / options.iterations)
        label = f"EM iteration {iteration + 1:,} (at most {options.iterations:,}, until the fit stops improving)"
    else:
        label = f"Viterbi EM iteration {iteration + 1} (pruning the clones the walk does not use)"
        value = share * (restart + 0.9 + 0.1 * (iteration + 1) / options.viterbi_iterations)
        if stage != "viterbi" or restarts == 1:
            value = 90 + 10 * (iteration + 1) / options.viterbi_iterations
        if stage == "refit":
            kept = f"restart {restart + 1}" if further else f"{restart + 1} of {restarts}"
            which, label = f"The kept restart ({kept}): ", label + " on the whole walk"
    if further and stage in ("em", "viterbi"):
        value = 89  # the bar waits at the first round's end: how many more rounds run is not known
    stopped, raced = int(record.get("race_stopped") or 0), restarts > 1 and stage in ("em", "viterbi") and options.race
    raced = f" The restarts race on the held-out steps; {stopped or 'none'} stopped so far." if raced else ""
    return int(min(value, 99)), f"{which}{label}: {bits:.4f} bits per step.{raced}"


def run_map_job(
    folder: Path,
    request: MapRequest,
    report: ProgressReport | None = None,
    key: str | None = None,
    ticket: Ticket | None = None,
) -> dict[str, str]:
    """Learn a map (:func:`engine.cognitive.walks.learn_map`) from the request's walk and make it the session's map;
    returns the key, status and message (never raises for a problem with the input or the run). The session's current
    map changes only when the status is ``finished``. With the started ``ticket`` of a queued job it takes its place at
    once; without one it waits in this process."""
    key = key or new_key()
    files = map_files(folder)
    if MAP.runs_another(folder, key):
        return {"key": key, "status": REFUSED, "message": "A map job is already running in this session."}
    record = MAP.new_record(folder, key, "Preparing the walk.", request=asdict(request))
    publish = files.publisher(record, report)

    def finish(status: str, message: str) -> dict[str, str]:
        said = MAP.record_end(folder, record, publish, status, message, SERVER_STOPPED, USER_CANCELLED)
        return {"key": key, "status": status, "message": said}

    try:
        files.heartbeat.touch()
        publish(force=True)
        prepared = prepare_walk(folder, request)
        likelihood = map_uploads.job_evidence(folder, request.evidence) if request.evidence else None
    except (UserError, CHMMError, OSError) as exc:
        return finish(REFUSED, describe_error(exc))
    with files.alive():
        ended = _learn(folder, request, key, ticket, prepared, record, publish, likelihood)
        if ended is not None:
            return finish(*ended)
    return finish(FINISHED, summary_sentence(load_view(folder)))


def _learn(
    folder: Path,
    request: MapRequest,
    key: str,
    ticket: Ticket | None,
    prepared: tuple[api.maps.WalkFile, np.ndarray | None, str],
    record: dict[str, Any],
    publish: Callable[[], None],
    likelihood: np.ndarray | None = None,
) -> tuple[str, str] | None:
    """Take a place (at once with the started ``ticket`` of a queued job) and learn the map from the ``prepared``
    walk (with ``likelihood``, from the sensor's likelihoods of its steps) into the session folder, its stage,
    iteration and bits per step in ``record`` (``publish`` writes it): None when it finished, else how it ended (a
    status and a sentence; the previous map is kept)."""
    walk, room, walk_text = prepared
    files = map_files(folder)
    deadline = time.time() + config.max_job_seconds()

    def progress(stage: str, iteration: int, bits: float, restart: int) -> None:
        if files.cancel.exists() or time.time() > deadline:
            raise _Stopped
        if stage in ("race", "revive"):  # a restart the race stopped, or set running again: counted beside
            record["race_stopped"] = int(iteration)
        else:
            record.update(stage=stage, iteration=int(iteration), bits=float(bits), restart=int(restart))
        publish()

    def waiting(place: int) -> None:
        record["message"] = jobs.waiting_message(place)
        publish()

    try:
        with jobs.held_place(waiting, files.cancel.exists, ticket) as placed:
            if not placed:
                return CANCELLED, WAITED_CANCELLED
            record["message"] = "Learning the map."
            if request.noise:
                model, summary = map_noise.learn_through_noise(walk, request, progress)
            elif likelihood is not None:
                model, summary, walk = map_uploads.learn_from_evidence(walk, likelihood, request, progress)
                walk_text = api.maps.format_walk_file(walk)
            else:
                model, summary = api.maps.learn_map(walk, request.options(), progress)
            with MAP.installing(folder):  # against a Cancel, which takes the same lock (JobKind.cancel_running)
                if files.cancel.exists():
                    return CANCELLED, USER_CANCELLED
                _install(folder, key, model, summary, walk, walk_text, room)
                record["installed"] = True
                files.write(record)
    except QueueFull as exc:
        return REFUSED, str(exc)
    except _Stopped:
        if files.cancel.exists():
            return CANCELLED, USER_CANCELLED
        return (
            FAILED,
            f"The map job reached the server's time limit of {config.max_job_seconds() / 60:g} minutes "
            "(CHMM_MAX_JOB_MINUTES); choose a shorter walk or fewer clones. The previous map is kept.",
        )
    except jobs.JobTerminated:
        return CANCELLED, SERVER_STOPPED
    except MemoryError as exc:
        return FAILED, f"The map job ran out of memory ({exc}); choose fewer clones. The previous map is kept."
    except Exception as exc:  # an engine error becomes a sentence in the page; the previous map is untouched
        return FAILED, f"The map job failed: {describe_error(exc).rstrip('.')}. The previous map is kept."
    return None


def prepare_walk(folder: Path, request: MapRequest) -> tuple[api.maps.WalkFile, np.ndarray | None, str]:
    """The walk the job learns from, the room when known, and the walk's CSV or JSON text (kept with the map)."""
    if request.source == "room":
        room = parse_room(request.room)
        walk_text = api.maps.format_walk(api.maps.generate_walk(room, int(request.length or 0), seed=request.seed))
        return api.maps.parse_walk(walk_text, "the walk"), room, walk_text
    walk, walk_text = map_uploads.read_uploaded_walk(folder)
    return walk, None, walk_text


def _install(
    folder: Path,
    key: str,
    model: api.maps.ActionCHMM,
    summary: dict[str, Any],
    walk: api.maps.WalkFile,
    walk_text: str,
    room: np.ndarray | None,
) -> None:
    """Write the learned map into ``maps/KEY/`` with its view, then point ``map.json`` at it (the switch is one
    atomic write) and remove the maps it replaced."""
    target = folder / MAPS / key
    target.mkdir(parents=True, exist_ok=True)
    model.save(target / MODEL)
    atomic_write_bytes(target / WALK, walk_text.encode("utf-8"))
    if room is not None:
        atomic_write_bytes(target / ROOM, room_text(room).encode("utf-8"))
    view = build_view(model, walk, room, summary)
    atomic_write_json(target / VIEW, view)
    if map_files(folder).cancel.exists():
        shutil.rmtree(target, ignore_errors=True)
        raise _Stopped
    atomic_write_json(folder / CURRENT, {"key": key, "installed": time.time()})
    for old in (folder / MAPS).iterdir():
        if old.name != key:
            shutil.rmtree(old, ignore_errors=True)


def _modules(model: api.maps.ActionCHMM) -> dict[int, int]:
    """The map's Infomap modules (:func:`engine.cognitive.hierarchy.map_communities`: the top modules of the map's
    transitions averaged over its actions, which find the rooms of a world), as a module index from 0 by clone."""
    try:
        found = api.maps.clone_modules(api.maps.map_communities(model))
    except CHMMError:  # a map without transitions: one module
        return {}
    return {clone: max(int(module) - 1, 0) for clone, module in enumerate(found.tolist())}


def build_view(
    model: api.maps.ActionCHMM, walk: api.maps.WalkFile, room: np.ndarray | None, summary: dict[str, Any]
) -> dict[str, Any]:
    """What the page draws of a map, computed once: the clones of the walk's MAP path with their observation, place
    (the mean (row, column) of the steps on them when the walk has true places, else a force layout) and Infomap
    module; the edges between them (steps each way, action names); whether the map recovers the room and, for a
    world of several rooms, how well the modules are its rooms (NMI, :func:`engine.cognitive.hierarchy.match_rooms`)."""
    import networkx as nx

    x, a = walk.walks()  # a file of several documents: each walk decoded from its own start
    graph = api.maps.map_clone_graph(model, x, a)
    paths, _ = api.maps.decode_walk(model, x, a)
    path = np.concatenate(paths) if isinstance(paths, list) else paths
    nodes = sorted(int(n) for n in graph.nodes)
    places: dict[int, tuple[float, float]] = {}
    if walk.positions is not None and nodes:
        for clone in nodes:
            on = walk.positions[path == clone]
            places[clone] = (float(on[:, 0].mean()), float(on[:, 1].mean()))
        layout = "room"
    else:
        spread = nx.spring_layout(graph.to_undirected(), seed=0) if nodes else {}
        places = {int(n): (float(p[1]) * 4, float(p[0]) * 4) for n, p in spread.items()}
        layout = "force"
    modules = _modules(model)
    edges = []
    for u, v, data in graph.edges(data=True):
        edges.append({"source": int(u), "target": int(v), "count": int(data["count"]), "actions": data["actions"]})
    view: dict[str, Any] = {
        "nodes": [
            {"clone": c, "symbol": graph.nodes[c]["symbol"], "row": places[c][0], "column": places[c][1]}
            | {"module": modules.get(c, 0)}
            for c in nodes
        ],
        "edges": edges,
        "symbols": list(walk.symbols),
        "actions": list(walk.action_names),
        "layout": layout,
        "places": walk.positions is not None,
        "modules": len({modules.get(c, 0) for c in nodes}),
        "summary": {k: (float(v) if isinstance(v, float | np.floating) else v) for k, v in summary.items()},
        "room": None if room is None else room.tolist(),
    }
    if room is not None:
        view["recovers_room"] = api.maps.recovers_room(model, x, a, room)
        view["cells"] = int(np.sum(room >= 0))
        rooms, _ = api.maps.world_rooms(room)
        if rooms.max() >= 1 and walk.positions is not None:  # a world of several rooms: do the modules find them?
            view["rooms"] = api.maps.match_rooms(model, x, a, walk.positions, room).summary()
    return view


def summary_sentence(view: dict[str, Any] | None) -> str:
    """The learned map in one or two sentences: its fit, its clones and, when the room is known, whether it
    recovers the room."""
    if not view:
        return "No map yet."
    s = view["summary"]
    text = (
        f"Learned a map from a {s['steps']:,}-step walk: {s['bits_per_step']:.4f} bits per step after "
        f"{s['em_iterations']} EM and {s['viterbi_iterations']} Viterbi EM iterations; the walk uses "
        f"{s['clones_used']} of {s['clones']} clones."
    )
    if s.get("noise"):
        text += (
            f" Learned through a sensor wrong with probability {s['noise']:g} ({s['read_wrong']:.1%} of the readings "
            "wrong), from the readings' soft evidence."
        )
    if s.get("evidence"):
        text += f" Learned from the sensor's likelihoods in {s['evidence']} (soft evidence)."
        if s.get("read_other"):
            text += (
                f" The map reads {s['read_other']:.1%} of the steps as another observation than the walk file's; the "
                "walk is drawn as the map reads it."
            )
    if s.get("restarts") or s.get("held_out_bits_per_step"):  # a map of clean observations, or of soft evidence
        text += (
            f" Restart {s['kept_restart'] + 1} of {len(s.get('restarts') or s['held_out_bits_per_step'])} kept: its "
            "map predicted the walk's held-out "
            f"last {s['held_out_steps']:,} steps best."
        )
        text += "".join(" " + s[note] for note in ("race_note", "restarts_note") if s.get(note))
    if view.get("recovers_room") is not None:
        cells = view["cells"]
        if view["recovers_room"]:
            text += f" It recovers the room: {s['clones_used']} clones used for {cells} cells, the room's grid exactly."
        else:
            text += f" It does not recover the room: {s['clones_used']} clones used for {cells} cells."
    return text


def modules_sentence(view: dict[str, Any]) -> str:
    """What Infomap finds on the map, and for a world of several rooms how well its modules are the rooms."""
    text = f"Infomap finds {view['modules']} module{'s' if view['modules'] != 1 else ''} (colour by module)."
    if view.get("rooms"):
        found = view["rooms"]
        text += (
            f" The room is a world of {found['rooms']} rooms: the modules against them give an NMI of "
            f"{found['nmi']:.3f} over the {found['clones_in_rooms']} clones placed in a room."
        )
    return text


# ------------------------------------------------------------------------------------------ the session's map
def current_map(folder: Path) -> Path | None:
    """The folder of the session's current map, or None before any."""
    pointer = jobs.read_json(folder / CURRENT)
    key = (pointer or {}).get("key")
    if not isinstance(key, str) or not key.isalnum():
        return None
    path = folder / MAPS / key
    return path if (path / VIEW).is_file() else None


def load_view(folder: Path) -> dict[str, Any] | None:
    path = current_map(folder)
    return None if path is None else jobs.read_json(path / VIEW)


def _need_map(folder: Path) -> Path:
    path = current_map(folder)
    if path is None:
        raise UserError("This session has no map yet: learn one first.")
    return path


def _load(folder: Path) -> tuple[api.maps.ActionCHMM, api.maps.WalkFile]:
    return _load_at(_need_map(folder))


def _load_at(path: Path) -> tuple[api.maps.ActionCHMM, api.maps.WalkFile]:
    """The map in folder ``path`` and its walk, read once per version of their files and kept
    (:mod:`app.services.kept`)."""

    def read() -> tuple[api.maps.ActionCHMM, api.maps.WalkFile]:
        walk = api.maps.parse_walk((path / WALK).read_text(encoding="utf-8"), "the map's walk")
        return api.maps.load_map(path / MODEL), walk

    return kept.kept(("map",), [path / MODEL, path / WALK], read, label="The map")


def _clone(value: Any, view: dict[str, Any], what: str) -> int:
    clones = {node["clone"] for node in view["nodes"]}
    try:
        clone = int(value)
    except (TypeError, ValueError):
        raise UserError(f"Pick the {what} clone on the map or in the list.") from None
    if clone not in clones:
        raise UserError(f"Clone {clone} is not on the learned map; pick one of its clones.")
    return clone


def place_field(folder: Path, clone: Any) -> dict[str, Any]:
    """Where a clone of the map is active in the room (:func:`engine.cognitive.maps.place_field`): the field (rows of
    values, None for cells never visited), the clone and its observation. UserError when the walk has no true
    places or the clone is not on the map."""
    view = load_view(folder)
    if view is None:
        raise UserError("This session has no map yet: learn one first.")
    number = _clone(clone, view, "")
    if not view.get("places"):
        raise UserError("This walk has no true places (row and column columns), so its clones have no place fields.")
    model, walk = _load(folder)
    field = api.maps.place_field(model, *walk.walks(), walk.positions, number)
    symbol = next(node["symbol"] for node in view["nodes"] if node["clone"] == number)
    rows = [[None if np.isnan(v) else float(v) for v in row] for row in field]
    return {"clone": number, "symbol": symbol, "field": rows}


def plan_route(folder: Path, start: Any, goal: Any) -> dict[str, Any]:
    """The most probable route on the map from one clone to another (:func:`engine.cognitive.maps.plan_route`): its
    clones, its actions and the actions in words ("right, right, down"). UserError in one sentence when a clone is
    missing or the goal cannot be reached."""
    path = _need_map(folder)  # once: a map job may install another meanwhile
    view = jobs.read_json(path / VIEW)
    if view is None:
        raise UserError("This session has no map yet: learn one first.")
    begin, end = _clone(start, view, "start"), _clone(goal, view, "goal")
    model, _ = _load_at(path)
    try:
        route, moves = api.maps.plan_route(model, begin, end)
    except CHMMError as exc:
        raise UserError(_sentence(exc)) from None
    if not moves:
        text = f"Clone {begin} is already the goal: no action needed."
    else:
        text = (
            f"{len(moves)} step{'s' if len(moves) != 1 else ''} from clone {begin} to clone {end}: {', '.join(moves)}"
            f" (through clones {_clone_list(route)})."
        )
        text += _across_modules(path, view, begin, end)
    return {"route": route, "actions": moves, "text": text}


ROUTE_CLONES_SHOWN = 12
"""The most clones a route's sentence names (the first and last ones of a longer route, with how many between)."""


def _clone_list(route: list[int]) -> str:
    """A route's clones in a sentence ("4, 9, 17"); past :data:`ROUTE_CLONES_SHOWN`, the first and last few and how
    many lie between."""
    clones = [str(int(c)) for c in route]
    if len(clones) <= ROUTE_CLONES_SHOWN:
        return ", ".join(clones)
    half = ROUTE_CLONES_SHOWN // 2
    return f"{', '.join(clones[:half])}, ... {len(clones) - 2 * half} more ..., {', '.join(clones[-half:])}"


def _across_modules(path: Path, view: dict[str, Any], begin: int, end: int) -> str:
    """The same route planned by messages across the modules of the map in folder ``path`` against on the whole map
    (:func:`engine.cognitive.planning.plan_hierarchical` on the map's door fields,
    :func:`~engine.cognitive.planning.plan_flat`), in a sentence; empty when the map has one module or either cannot
    plan it. The door fields are made once per version of the map's files (from those files alone) and kept."""
    if view.get("modules", 0) < 2:
        return ""

    def make() -> api.maps.DoorFields:
        model, _ = _load_at(path)
        modules = np.zeros(model.n_states, dtype=np.int64)
        for node in (jobs.read_json(path / VIEW) or {}).get("nodes", []):
            modules[node["clone"]] = node["module"] + 1
        return api.maps.door_fields(model, modules)

    try:
        fields = kept.kept(("door fields",), [path / MODEL, path / WALK, path / VIEW], make, label="The map")
        flat = api.maps.plan_flat(fields.model, begin, end)
        tiered = api.maps.plan_hierarchical(fields.model, fields.modules, begin, end, fields=fields)
    except CHMMError:
        return ""
    held, flat_held = tiered.summary()["updates"], flat.summary()["updates"]
    modules = " -> ".join(str(m - 1) for m in tiered.modules)
    return (
        f" Planned across the modules ({modules}): {tiered.steps} steps, {held:,} messages against {flat_held:,} "
        f"on the whole map ({held / flat_held:.0%}); making the map's door fields, once for the map and kept for "
        f"its routes, took {fields.updates:,} messages."
    )


def clone_options(view: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The map's clones as dropdown options ("clone 12 (observation 3)")."""
    if not view:
        return []
    return [{"label": f"clone {n['clone']} (observation {n['symbol']})", "value": n["clone"]} for n in view["nodes"]]


def model_file(folder: Path) -> tuple[Path, str]:
    """The current map's model file and the name to download it as."""
    path = _need_map(folder)
    return path / MODEL, f"map-{path.name}.npz"


def graphml(folder: Path) -> tuple[str, str]:
    """The current map's clone graph as GraphML (list attributes written as comma-separated text) and its file
    name: nodes with their observation, place and module, edges with the walk's steps and actions."""
    import networkx as nx

    path = _need_map(folder)
    view = jobs.read_json(path / VIEW) or {}
    graph = nx.DiGraph()
    for node in view.get("nodes", []):
        graph.add_node(
            node["clone"], symbol=node["symbol"], row=node["row"], column=node["column"], module=node["module"]
        )
    for edge in view.get("edges", []):
        graph.add_edge(edge["source"], edge["target"], count=edge["count"], actions=", ".join(edge["actions"]))
    out = io.BytesIO()
    nx.write_graphml(graph, out)
    return out.getvalue().decode("utf-8"), f"map-{path.name}.graphml"


def request_cancel(folder: Path) -> str:
    """Stop the session's map job (its cancel flag; a waiting one leaves the queue) and say what the page shows."""
    waited, record = MAP.cancel_running(folder, USER_CANCELLED, SERVER_STOPPED)
    if waited:
        return WAITED_CANCELLED
    if record and (record.get("status") == FINISHED or record.get("installed")):
        return "The map job had already finished; its map is shown."
    return USER_CANCELLED


def reap_dead_job(folder: Path) -> str | None:
    """If the session's map job died without a word (its heartbeat stopped), mark it failed and say so, with the
    cause the sentinel noted when it killed it."""
    return MAP.reap_said(folder, "The map job", "use fewer clones or a shorter walk", "The previous map is kept.")
