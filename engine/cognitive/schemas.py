"""Schemas: a library of learned maps, matched to a walk in a new room (issue 50, item 5; Guntupalli et al. 2023).

A map learned in one room is a graph of places and moves; a room of the same layout with other observations (new
wallpaper) is the same graph seen through other emissions. To recognise a layout, each stored map keeps its T[a]
and learns only the emissions E(u, o) = P(o | clone u) from the new walk (:func:`engine.cognitive.maps.
learn_emissions`, EM with T fixed); the map whose fitted emissions explain held-out steps of the walk best -- the
lowest bits per step -log2 P(x_held-out | a, T, E) / N on the walk's tail, after the head it was fitted on -- is the
schema the room follows. The other maps' bits per step are the evidence: a wrong layout predicts the next
observation worse, however its emissions are set.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.cognitive.actions import ActionCHMM, check_room, check_walk, from_dense, load
from engine.cognitive.maps import learn_emissions, transfer_transitions
from engine.errors import CHMMError

HELD_OUT = 0.2
"""The share of a walk's steps, at its end, on which the stored maps are compared (fitted on the rest)."""
MAX_LIBRARY_MAPS = 100
"""The most maps a library may hold (each is matched in turn)."""


@dataclass(frozen=True)
class SchemaFit:
    """One stored map fitted to a walk: its ``name``, the bits per step of the held-out tail under its T and the
    fitted emissions (the score; lower is better), the bits per step the fit ended on (on the head), the emissions
    (H x observations, zero rows for clones outside the map) and the EM iterations."""

    name: str
    held_out_bits: float
    fitted_bits: float
    emissions: np.ndarray
    iterations: int


def map_of_room(room: Any, n_observations: int | None = None) -> ActionCHMM:
    """The map a perfect learner would find: one clone per open cell of ``room`` (the clones of an observation are
    its cells in reading order) and T[a](u, v) = 1 where move a takes cell u to cell v (a move into a wall or out
    of the room stays), over observations 0..``n_observations`` - 1 (default: the room's largest + 1); an
    observation without a cell gets one clone that no move reaches."""
    from engine.cognitive.actions import MOVES, STEPS

    grid = check_room(room)
    E = int(grid.max()) + 1 if n_observations is None else int(n_observations)
    if E <= grid.max():
        raise CHMMError(f"the room has observations up to {int(grid.max())}, more than {E} symbols")
    cells = [tuple(int(v) for v in cell) for cell in np.argwhere(grid >= 0)]
    cells.sort(key=lambda cell: (grid[cell], cell))
    n_clones = np.array([max(1, int(np.sum(grid == i))) for i in range(E)], dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(n_clones)[:-1]])
    index: dict[tuple[int, int], int] = {}
    seen = np.zeros(E, dtype=np.int64)
    for cell in cells:
        i = int(grid[cell])
        index[cell] = int(start[i] + seen[i])
        seen[i] += 1
    H = int(n_clones.sum())
    transitions = np.zeros((len(MOVES), H, H))
    height, width = grid.shape
    for clone in range(H):  # clones with no cell (an unseen observation) stay where they are
        transitions[:, clone, clone] = 1.0
    for (r, c), u in index.items():
        transitions[:, u, u] = 0.0
        for k in range(len(MOVES)):
            nr, nc = r + int(STEPS[k, 0]), c + int(STEPS[k, 1])
            inside = 0 <= nr < height and 0 <= nc < width and grid[nr, nc] >= 0
            transitions[k, u, index[(nr, nc)] if inside else u] = 1.0
    return from_dense(transitions, n_clones, actions=list(MOVES))


def emission_bits(model: ActionCHMM, emissions: np.ndarray, x: Any, a: Any) -> float:
    """-log2 P(x | a, T, E) / N: the bits per step of a walk under the map's T[a] among its clones
    (:func:`engine.cognitive.maps.transfer_transitions`) and the emissions ``emissions`` (H x observations), by the
    scaled forward pass alpha(1) = E(., x_1) / m, alpha(n+1) = (alpha(n) T[a_n]) o E(., x_{n+1}); inf when the
    walk is impossible."""
    clones, transitions = transfer_transitions(model)
    E = np.asarray(emissions, dtype=np.float64)[clones]
    x, a = check_walk(x, a, E.shape[1], model.n_actions)
    message = E[:, x[0]] / len(clones)
    log_likelihood = 0.0
    for step in range(len(x)):
        if step:
            message = (message @ transitions[a[step - 1]]) * E[:, x[step]]
        total = float(message.sum())
        if total <= 0:
            return float("inf")
        log_likelihood += np.log(total)
        message = message / total
    return float(-log_likelihood / len(x) / np.log(2.0))


def match_schemas(
    library: dict[str, ActionCHMM],
    x: Any,
    a: Any,
    n_observations: int | None = None,
    iterations: int = 50,
    held_out: float = HELD_OUT,
    seed: int = 0,
    action_names: list[str] | None = None,
    progress: Callable[[int, int, float], None] | None = None,
) -> list[SchemaFit]:
    """Fit every map of ``library`` to the walk (its emissions only, :func:`engine.cognitive.maps.learn_emissions`
    on the head of the walk, ``iterations`` at most) and score it on the tail (the last ``held_out`` of the steps,
    :func:`emission_bits`); the fits, best (lowest held-out bits per step) first. With ``action_names`` (the walk's
    action k is named ``action_names[k]``) each map's actions are matched by name, so maps whose actions come in
    another order fit too, and a map without one of the walk's actions is refused by name; without them the walk's
    action numbers are the maps'. ``progress(map, iteration, bits)`` is called as each map's fit goes on (the index
    of the map in ``library``'s order; an exception it raises stops the match)."""
    if not library:
        raise CHMMError("the library holds no maps to match")
    x = np.asarray(x)
    n_observations = int(np.max(x)) + 1 if n_observations is None and len(x) else n_observations
    x, a = check_walk(x, a, n_observations)
    if not 0.0 < held_out < 1.0:
        raise CHMMError(f"the held-out share of the walk must lie between 0 and 1, got {held_out!r}")
    cut = int(round(len(x) * (1.0 - held_out)))
    if cut < 2 or len(x) - cut < 2:
        raise CHMMError(f"a walk of {len(x)} steps is too short to fit on one part and compare on the other")
    moves = {name: _actions_of(name, model, a, action_names) for name, model in library.items()}
    fits = []
    for index, (name, model) in enumerate(library.items()):
        told = None if progress is None else (lambda i, bits, m=index: progress(m, i, bits))
        emissions, history = learn_emissions(
            model, x[:cut], moves[name][:cut], n_observations, iterations, seed, progress=told
        )
        bits = emission_bits(model, emissions, x[cut:], moves[name][cut:])
        fits.append(SchemaFit(name, bits, history[-1] if history else float("nan"), emissions, len(history)))
    return sorted(fits, key=lambda fit: fit.held_out_bits)


def _actions_of(name: str, model: ActionCHMM, a: np.ndarray, action_names: list[str] | None) -> np.ndarray:
    """The walk's actions ``a`` as the map ``name`` numbers them (by name with ``action_names``); ValueError in one
    sentence when the map lacks one of them."""
    if action_names is None:
        if model.n_actions <= int(a.max()):
            raise CHMMError(f"the walk takes action {int(a.max())}, which the map {name!r} does not have")
        return a
    if int(a.max()) >= len(action_names):
        raise CHMMError(f"the walk takes action {int(a.max())} but names only {len(action_names)} actions")
    taken = [action_names[k] for k in sorted(set(a[:-1].tolist()))]
    missing = [action for action in taken if action not in model.actions]
    if missing:
        raise CHMMError(
            f"the map {name!r} has the actions {', '.join(model.actions)}, not the walk's {', '.join(missing)}"
        )
    order = np.array([model.actions.index(n) if n in model.actions else 0 for n in action_names], dtype=np.int64)
    return order[a]


def read_library(paths: list[str | os.PathLike[str]]) -> dict[str, ActionCHMM]:
    """Maps by name (the file's stem) from model files and folders of them (their ``*.npz``), each read as
    untrusted input (:func:`engine.cognitive.actions.load`); at most :data:`MAX_LIBRARY_MAPS`."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files.extend(sorted(path.glob("*.npz")))
        elif path.is_file():
            files.append(path)
        else:
            raise CHMMError(f"{path} is neither a map file nor a folder of them")
    if not files:
        raise CHMMError("the library holds no maps (no .npz files)")
    if len(files) > MAX_LIBRARY_MAPS:
        raise CHMMError(f"a library holds at most {MAX_LIBRARY_MAPS} maps, got {len(files)}")
    library: dict[str, ActionCHMM] = {}
    for file in files:
        name = file.stem if file.stem not in library else str(file)
        library[name] = load(file)
    return library
