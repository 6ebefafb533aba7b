"""The Maps page's uploads: a walk (CSV or JSON, read as the engine reads it) and, for an uploaded walk, a file of a
sensor's likelihoods (``chmm map WALK --evidence FILE``: one row per step, one column per observation,
:func:`engine.cognitive.evidence.read_evidence`) from which the map job then learns. Files are untrusted: each is
read as the engine reads it when it arrives (a bad one is refused in one sentence and the previous one kept), within
the page's upload limit and the engine's bound on a likelihood file's size for its walk. A session folder holds::

    map-upload.csv     the uploaded walk (map-upload.json: its name, steps, observations, actions, places)
    map-evidence/NAME  the uploaded walk's likelihood file under its own name (map-evidence.json: its name and
                       shape); replacing the walk forgets it
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from app import jobs, sessions
from app.jobs.kinds import new_key
from app.services import UserError, map_noise
from app.services.corpus import decode_upload
from engine import api
from engine.errors import CHMMError
from engine.files import atomic_write_bytes, atomic_write_json

MAX_WALK_LENGTH = 200_000
MAX_WALK_UPLOAD_BYTES = 20_000_000
MAX_EVIDENCE_UPLOAD_BYTES = 50_000_000
"""The largest likelihood file the page takes (the engine also bounds it by its walk: about 40 characters a number
as text, 8 bytes a number as .npy); a 200,000-step walk of 4 observations as text is about 6 MB."""
EVIDENCE_SUFFIXES = (".npy", ".csv", ".txt")
UPLOAD, UPLOAD_INFO = "map-upload.csv", "map-upload.json"
EVIDENCE, EVIDENCE_INFO = "map-evidence", "map-evidence.json"
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._ -]{0,99}")
"""A file name kept as it is in the session folder (the engine's sentences name the file); others become
``likelihoods`` with their suffix."""


def sentence(exc: Exception) -> str:
    """An engine's ValueError as a sentence: capitalised (unless it begins with a file name) and ending in a full
    stop."""
    message = str(exc).strip().rstrip(".")
    if not message:
        return "The input could not be read."
    if message[:1].islower() and message.split(" ", 1)[0].isalpha():
        message = message[:1].upper() + message[1:]
    return message + "."


# ------------------------------------------------------------------------------------------ the walk
def store_walk_upload(folder: Path, contents: Any, filename: Any) -> dict[str, Any]:
    """Keep an uploaded walk (CSV with the columns action and observation, or JSON) in the session folder after
    reading it as the engine does, and forget the previous walk's likelihood file; returns its name, steps,
    observations, actions and whether it has true places. UserError in one sentence on a bad file (the previous
    upload, and its likelihood file, are kept)."""
    name = filename if isinstance(filename, str) and filename else "the walk"
    data = decode_upload(contents, name, MAX_WALK_UPLOAD_BYTES, folder=folder)
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{name} is not UTF-8 text (a walk is a CSV or JSON file).") from None
    try:
        walk = api.maps.parse_walk(content, name)
    except CHMMError as exc:
        raise UserError(sentence(exc)) from None
    if len(walk.observations) > MAX_WALK_LENGTH:
        raise UserError(f"{name} has {len(walk.observations):,} steps; the page takes at most {MAX_WALK_LENGTH:,}.")
    sessions.check_space(folder, len(data), "The walk")
    info = {
        "name": name,
        "steps": int(len(walk.observations)),
        "walks": max(1, len(walk.documents)),
        "observations": len(walk.symbols),
        "actions": list(walk.action_names),
        "places": walk.positions is not None,
    }
    forget_evidence(folder)
    atomic_write_bytes(folder / UPLOAD, data)
    atomic_write_json(folder / UPLOAD_INFO, info)
    return info


def upload_info(folder: Path) -> dict[str, Any] | None:
    """The session's uploaded walk (name, steps, observations, actions, places), or None."""
    info = jobs.read_json(folder / UPLOAD_INFO)
    return info if info and (folder / UPLOAD).is_file() else None


def describe_upload(info: dict[str, Any]) -> str:
    places = "with true places (row, column)" if info.get("places") else "without true places (no place fields)"
    walks_in = f" in {info['walks']} walks" if info.get("walks", 1) > 1 else ""
    return (
        f"Uploaded {info['name']}: {info['steps']:,} steps{walks_in}, {info['observations']} observations, actions "
        f"{', '.join(info['actions'])}, {places}."
    )


def read_uploaded_walk(folder: Path) -> tuple[api.maps.WalkFile, str]:
    """The session's uploaded walk and its text; UserError when there is none."""
    info = upload_info(folder)
    if info is None:
        raise UserError("No walk uploaded yet: drop a walk file (CSV or JSON) on the upload field first.")
    walk_text = (folder / UPLOAD).read_text(encoding="utf-8")
    return api.maps.parse_walk(walk_text, info.get("name", "the walk")), walk_text


# ------------------------------------------------------------------------------------------ the likelihood file
def _kept_name(name: str, suffix: str) -> str:
    """The name the likelihood file is kept under: its own when plain, else ``likelihoods`` with its suffix."""
    return name if SAFE_NAME.fullmatch(name) and ".." not in name else f"likelihoods{suffix}"


def store_evidence_upload(folder: Path, contents: Any, filename: Any) -> dict[str, Any]:
    """Keep an uploaded likelihood file for the session's uploaded walk after reading it as ``chmm map --evidence``
    does (:func:`engine.cognitive.evidence.read_evidence`: one row per step of the walk, one column per observation);
    returns its name, steps and observations. UserError in one sentence when there is no uploaded walk, the walk
    holds several walks, or the file is not such a table (the previous likelihood file is kept)."""
    name = Path(filename).name if isinstance(filename, str) and Path(filename).name else "the likelihood file"
    walk = upload_info(folder)
    if walk is None:
        raise UserError(
            "A likelihood file applies to an uploaded walk: upload the walk (CSV or JSON) first, then its file."
        )
    suffix = Path(name).suffix.lower()
    if suffix not in EVIDENCE_SUFFIXES:
        raise UserError(f"{name}: a likelihood file is a .npy array or a .csv or .txt table of numbers.")
    if walk.get("walks", 1) > 1:
        raise UserError(f"A likelihood file learns from one walk, and {walk['name']} holds {walk['walks']} walks.")
    data = decode_upload(contents, name, MAX_EVIDENCE_UPLOAD_BYTES, folder=folder)
    sessions.check_space(folder, len(data), "The likelihood file")
    fresh = folder / f".{EVIDENCE}-{new_key()}"  # read there first: a bad file leaves the kept one as it was
    fresh.mkdir()
    path = fresh / _kept_name(name, suffix)
    try:
        path.write_bytes(data)
        likelihood = read_evidence(folder, path, walk, name)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    info = {"name": name, "file": path.name, "steps": int(likelihood.shape[0]), "observations": likelihood.shape[1]}
    forget_evidence(folder)
    fresh.rename(folder / EVIDENCE)
    atomic_write_json(folder / EVIDENCE_INFO, info)
    return info


def read_evidence(folder: Path, path: Path, walk: dict[str, Any], name: str = "") -> np.ndarray:
    """The likelihood file at ``path`` (uploaded as ``name``) read for the session's uploaded walk (``walk``: its
    upload info) as the engine reads it, its size bounded by the walk's; UserError in the engine's one sentence
    otherwise (naming the file as uploaded)."""
    symbols = api.maps.parse_walk((folder / UPLOAD).read_text(encoding="utf-8"), walk.get("name", "the walk")).symbols
    try:
        return api.maps.read_evidence(path, int(walk["steps"]), list(symbols))
    except CHMMError as exc:
        raise UserError(sentence(exc).replace(path.name, name or path.name)) from None


def evidence_info(folder: Path) -> dict[str, Any] | None:
    """The session's likelihood file (name, steps, observations), or None."""
    info = jobs.read_json(folder / EVIDENCE_INFO)
    if not info or not isinstance(info.get("file"), str) or not (folder / EVIDENCE / info["file"]).is_file():
        return None
    return info


def forget_evidence(folder: Path) -> dict[str, Any] | None:
    """Remove the session's likelihood file; returns what it was (None when there was none)."""
    info = evidence_info(folder)
    (folder / EVIDENCE_INFO).unlink(missing_ok=True)
    shutil.rmtree(folder / EVIDENCE, ignore_errors=True)
    return info


def describe_evidence(info: dict[str, Any]) -> str:
    return (
        f"Uploaded {info['name']}: the sensor's likelihoods of {info['steps']:,} steps over {info['observations']} "
        "observations; the map of the uploaded walk is learned from them."
    )


def check_evidence_request(folder: Path, source: str, noise: float, clones: int) -> str | None:
    """The likelihood file a map job of the page's form learns from (its name), None without one; UserError in one
    sentence when it cannot: the walk is the page's own in the room, Sensor noise is set too, the file is not the
    uploaded walk's, or the map would be too large to hold dense."""
    info = evidence_info(folder)
    if info is None:
        return None
    if source != "walk":
        raise UserError(
            f"The likelihood file {info['name']} applies to the uploaded walk: learn from the uploaded walk, or "
            "forget the file to learn from a walk in the room."
        )
    if noise:
        raise UserError(
            f"Sensor noise and the likelihood file {info['name']} both say what the sensor read: set the noise to 0 "
            "or forget the file."
        )
    walk = upload_info(folder) or {}
    if walk.get("steps") != info["steps"] or walk.get("observations") != info["observations"]:
        raise UserError(f"The likelihood file {info['name']} is not the uploaded walk's: upload it again.")
    if clones * info["observations"] > api.maps.MAX_SOFT_CLONES:
        raise UserError(
            f"A map learned from a likelihood file holds its transitions dense, at most {api.maps.MAX_SOFT_CLONES:,} "
            f"clones; {clones} for each of {info['observations']} observations make {clones * info['observations']:,}"
            ": choose fewer."
        )
    return str(info["name"])


def job_evidence(folder: Path, name: str) -> np.ndarray:
    """The likelihood file a starting map job learns from, read once (it must still be the one named ``name`` at
    Start); UserError in one sentence otherwise."""
    info, walk = evidence_info(folder), upload_info(folder)
    if info is None or walk is None or info.get("name") != name:
        raise UserError(f"The likelihood file {name} is gone (a new walk forgets it): upload it again.")
    return read_evidence(folder, folder / EVIDENCE / info["file"], walk, name)


def learn_from_evidence(
    walk: api.maps.WalkFile, likelihood: np.ndarray, request: Any, progress: Callable[..., None]
) -> tuple[api.maps.ActionCHMM, dict[str, Any], api.maps.WalkFile]:
    """The map of ``walk`` learned from the sensor's likelihoods (:func:`engine.cognitive.evidence.
    learn_map_from_evidence`, with the request's clones, seed and restarts and the engine's map defaults), its
    summary naming the file, and the walk as the map reads the likelihoods (each step's observation the symbol of its
    clone on the MAP clone path, :func:`engine.cognitive.evidence.evidence_reading`), which the page draws: a walk
    file whose observation column holds the sensor's wrong readings would else be drawn through them. The summary
    says the share of steps the map reads otherwise than the file's observation column (``read_other``)."""
    options = api.maps.MAP_DEFAULTS
    model, summary = api.maps.learn_map_from_evidence(
        likelihood, walk.actions, list(walk.symbols), list(walk.action_names), request.clones, options.iterations,
        options.pseudocount, options.viterbi_iterations, request.seed, options.merge,
        restarts=request.restarts, **map_noise.soft_progress(progress, request.restarts),
    )  # fmt: skip
    reading = api.maps.evidence_reading(model, likelihood, walk.actions)
    summary |= {"evidence": request.evidence, "read_other": float(np.mean(reading != walk.observations))}
    return model, summary, dataclasses.replace(walk, observations=reading)
