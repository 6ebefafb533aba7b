"""The rooms a learned map finds (George et al. 2021, Fig. 7): Infomap on the map's clone graph (the text side's
communities, :func:`engine.network.communities.find_communities`, on the map's transitions averaged over its
actions), each clone's place from a walk decoded on the map, and the agreement of the modules with a world's true
rooms (:func:`engine.cognitive.worlds.world_rooms`) by normalised mutual information."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.cognitive.actions import ActionCHMM, Walks, check_walks, viterbi
from engine.cognitive.worlds import world_rooms
from engine.errors import CHMMError
from engine.network.communities import Communities, CommunityOptions, find_communities, normalised_mutual_information
from engine.network.graph import CloneGraph, transition_graph

THRESHOLD = 1e-3
"""Transitions at or below this are not edges of the map (as :func:`engine.cognitive.maps.plan_route` reads it)."""


def transition_entries(model: ActionCHMM, threshold: float = 0.0) -> tuple[np.ndarray, ...]:
    """Every stored entry of T above ``threshold`` as arrays (action, u, v, T[action](u, v)), in block order."""
    layout, E = model.layout, model.n_symbols
    block = np.repeat(np.arange(layout.n_blocks), np.diff(layout.block_offset))
    local = np.arange(layout.size) - layout.block_offset[block]
    action, i = np.divmod(layout.block_pairs[block, 0], E)
    j = layout.block_pairs[block, 1]
    u = layout.clone_start[i] + local // layout.n_clones[j]
    v = layout.clone_start[j] + local % layout.n_clones[j]
    values = model.T.astype(np.float64)
    keep = values > threshold
    return action[keep], u[keep], v[keep], values[keep]


def map_graph(model: ActionCHMM, threshold: float = THRESHOLD) -> CloneGraph:
    """The map as a clone graph: W(u, v) = the mean over the actions that move clone u of T[a](u, v), the
    transitions of a walker that picks one of them uniformly at random (the walks the maps are learned from), over
    the entries above ``threshold`` between two clones (a step into a wall, u -> u, goes nowhere and is left out),
    each row renormalised to 1 (clones the map never leaves have an empty row); node and edge flows as for a text
    model (:func:`engine.network.graph.transition_graph`)."""
    import scipy.sparse as sp

    action, u, v, p = transition_entries(model, threshold)
    moving = u != v
    action, u, v, p = action[moving], u[moving], v[moving], p[moving]
    H = model.n_states
    moves = np.zeros((model.n_actions, H), dtype=bool)
    moves[action, u] = True
    weight = sp.csr_array((p / np.maximum(moves.sum(axis=0), 1)[u], (u, v)), shape=(H, H))
    weight.sum_duplicates()
    weight.sort_indices()
    sums = np.asarray(weight.sum(axis=1)).ravel()
    weight = sp.csr_array(sp.diags_array(np.where(sums > 0, 1.0 / np.maximum(sums, 1e-300), 0.0)) @ weight)
    weight.sort_indices()
    return transition_graph(weight, model.clone_symbol(), list(model.symbols), metadata={"map": True})


MAP_COMMUNITY_OPTIONS = CommunityOptions(markov_time=5.0, trials=10, words=0)
"""Infomap on a map: its multilevel hierarchy (the top modules are the rooms), 10 trials, no generalized words, and
a Markov time of 5. On the true maps (:func:`engine.cognitive.worlds.world_model`) of 9 worlds of 2 to 6 rooms of
3 x 3 to 12 x 12 cells, 3 seeds each, a Markov time of 5 finds every room and no more module in 27 of 27; 1 (Infomap's
own) in 8 (NMI down to 0.56: rooms split), 4 in 24 (12 x 12 rooms split), 6 in 24 (3 x 3 rooms joined). Smaller
rooms may be joined (a ring of four 2 x 4 rooms is one module)."""


def map_communities(
    model: ActionCHMM, options: CommunityOptions | None = None, threshold: float = THRESHOLD
) -> Communities:
    """Infomap on :func:`map_graph` (:data:`MAP_COMMUNITY_OPTIONS` unless ``options``); ValueError in one sentence
    when the map has no transitions."""
    graph = map_graph(model, threshold)
    if graph.n_edges == 0:
        raise CHMMError("the map has no transitions to find modules in (train it first)")
    return find_communities(graph, options or MAP_COMMUNITY_OPTIONS)


def clone_modules(communities: Communities) -> np.ndarray:
    """The top module of every clone (1, 2, ...; 0 for clones outside the partition), shape (H,)."""
    modules = np.zeros(communities.graph.n_states, dtype=np.int64)
    for node, path in communities.node_path.items():
        modules[node] = path[0]
    return modules


def place_counts(
    model: ActionCHMM, x: Walks, a: Walks, positions: np.ndarray, backend: str = "cpu"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How often the walk's MAP clone path (:func:`viterbi`) is at each clone in each place: arrays (clone, row,
    column, steps) over the pairs that occur, by clone then place. ``positions``: the walk's true place at every
    step (several walks: those of their steps in turn). ValueError in one sentence when the walk is impossible
    under the map or the places do not match it."""
    walks = check_walks(x, a, model.n_symbols, model.n_actions)
    positions = np.asarray(positions, dtype=np.int64)
    if positions.shape != (sum(len(x_d) for x_d, _ in walks), 2) or positions.min(initial=0) < 0:
        raise CHMMError("the clones' places need the walk's true place (row, column) at every step")
    paths, _ = viterbi(model, [x_d for x_d, _ in walks], [a_d for _, a_d in walks], backend)
    path = np.concatenate(paths)
    if np.any(path < 0):
        raise CHMMError("the walk is impossible under the map: no clone path decodes it")
    width = int(positions[:, 1].max()) + 1
    cells = (int(positions[:, 0].max()) + 1) * width
    codes, counts = np.unique(path * cells + positions[:, 0] * width + positions[:, 1], return_counts=True)
    clone, cell = np.divmod(codes, cells)
    row, column = np.divmod(cell, width)
    return clone, row, column, counts


def clone_places(model: ActionCHMM, x: Walks, a: Walks, positions: np.ndarray, backend: str = "cpu") -> np.ndarray:
    """The place of every clone: the (row, column) where the walk's MAP clone path is at that clone most often
    (:func:`place_counts`), shape (H, 2), (-1, -1) for clones the path never uses."""
    clone, row, column, counts = place_counts(model, x, a, positions, backend)
    order = np.lexsort((-counts, clone))  # each clone's most visited place first
    chosen = order[np.r_[True, clone[order][1:] != clone[order][:-1]]]
    places = np.full((model.n_states, 2), -1, dtype=np.int64)
    places[clone[chosen], 0], places[clone[chosen], 1] = row[chosen], column[chosen]
    return places


def place_clones(
    model: ActionCHMM, x: Walks, a: Walks, positions: np.ndarray, backend: str = "cpu"
) -> dict[tuple[int, int], int]:
    """The clone of every place the walk visits: the one its MAP clone path is at most often there
    (:func:`place_counts`), by (row, column)."""
    clone, row, column, counts = place_counts(model, x, a, positions, backend)
    order = np.lexsort((-counts, column, row))  # each place's most visited clone first
    chosen = order[np.r_[True, (row[order][1:] != row[order][:-1]) | (column[order][1:] != column[order][:-1])]]
    return {(int(row[k]), int(column[k])): int(clone[k]) for k in chosen}


@dataclass(frozen=True)
class RoomMatch:
    """Infomap's modules of a map against a world's rooms: the ``nmi`` of the two labelings of the clones placed in
    a room (:func:`engine.network.communities.normalised_mutual_information`), over ``clones`` of them, with the
    number of ``modules`` and of ``rooms``, and each clone's ``module`` (0: none) and ``room`` (-1: a door, a wall
    or no place)."""

    nmi: float
    modules: int
    rooms: int
    clones: int
    module: np.ndarray
    room: np.ndarray

    def summary(self) -> dict[str, Any]:
        """The figures as JSON-ready values."""
        return {"nmi": self.nmi, "modules": self.modules, "rooms": self.rooms, "clones_in_rooms": self.clones}


def match_rooms(
    model: ActionCHMM,
    x: Walks,
    a: Walks,
    positions: np.ndarray,
    room: Any,
    communities: Communities | None = None,
    backend: str = "cpu",
) -> RoomMatch:
    """How well the map's Infomap modules (:func:`map_communities` unless ``communities`` is given) are the rooms of
    the grid ``room`` (:func:`engine.cognitive.worlds.world_rooms`): each clone placed by the walk decoded on the
    map (:func:`clone_places`, the walk's true ``positions``), then in the room of its place; the NMI of module
    against room over the clones placed in a room and in a module (those placed in doors left out). ValueError in
    one sentence when the grid has fewer than 2 rooms or the walk leaves it."""
    rooms, _ = world_rooms(room)
    n_rooms = int(rooms.max()) + 1
    if n_rooms < 2:
        raise CHMMError(f"the room has {n_rooms} room{'s' if n_rooms != 1 else ''}: no rooms to compare modules with")
    places = clone_places(model, x, a, positions, backend)
    if places[:, 0].max() >= rooms.shape[0] or places[:, 1].max() >= rooms.shape[1]:
        raise CHMMError(f"the walk leaves the {rooms.shape[0]} x {rooms.shape[1]} room it is compared with")
    communities = communities if communities is not None else map_communities(model)
    module = clone_modules(communities)
    room_of = np.full(model.n_states, -1, dtype=np.int64)
    placed = places[:, 0] >= 0
    room_of[placed] = rooms[places[placed, 0], places[placed, 1]]
    counted = (room_of >= 0) & (module > 0)
    if not counted.any():
        raise CHMMError("no clone of the map is placed in a room: the walk decodes to none")
    nmi = normalised_mutual_information(module[counted], room_of[counted])
    return RoomMatch(nmi, len(communities.top_modules), n_rooms, int(counted.sum()), module, room_of)
