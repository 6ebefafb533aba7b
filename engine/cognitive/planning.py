"""Planning on a learned map by message passing, flat or over its modules (George et al. 2021: Fig. 7 plans across
the map's communities first, then inside each, with less message passing; Fig. 3 replans around a blocked passage).

The planner is max-product message passing from the start clone, as the paper's code bridges two clones: message t
holds, for every clone reached in at most t steps, the log-probability of the most probable of its shortest routes
from the start (log T[a](u, v) summed over the best action of each step; transitions at or below a threshold, and
steps into a wall, u -> u, are not ways). Messages pass until one reaches a goal; the route is read back from there.
Its work is counted as the messages it holds: sum over iterations t = 0..T of the clones holding a message after t
(``updates``; the sparse work), and the clones of the searched set times T + 1 (``dense_updates``; the work of the
paper's dense vectors).

Hierarchical planning (:func:`plan_hierarchical`) plans on the modules' doors (hierarchical path-finding). The
door fields are made once for a map and its modules, as the modules are (:func:`door_fields`): messages passed inside
a module backwards from each of its exits (clones with a way into another module) and forwards from each of its
entries (clones a way from another module leads into), so that every clone of the module knows its shortest route to
each exit and from each entry. A plan then passes messages on the small graph of the doors, whose links are those
routes (their lengths read from the fields) and the ways across, and reads the route back along the fields. Any
route of the map is a chain of routes inside modules and steps across, so the hierarchical route is as short as the
flat one, and as probable among the shortest up to rounding.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from engine.cognitive.actions import ActionCHMM
from engine.cognitive.hierarchy import THRESHOLD, transition_entries
from engine.errors import CHMMError


@dataclass(frozen=True)
class Plan:
    """A planned route: its ``route`` (clones, start to goal) and ``moves`` (action names, one per step), the
    messages its planning held (``updates``, ``dense_updates``: see the module docstring), how many distinct clones
    they reached (``reached``; a hierarchical plan's count the route's clones too); for a hierarchical plan, the
    messages on the graph of the modules' doors (``door_updates``: one per link tried, in the dense count too), the
    ``modules`` the route passes, and the
    messages of the map's door fields when this plan made them (``field_updates``, ``field_dense_updates``; 0 when
    it was given fields made once for the map)."""

    route: list[int]
    moves: list[str]
    updates: int
    dense_updates: int
    reached: int
    door_updates: int = 0
    modules: tuple[int, ...] = ()
    field_updates: int = 0
    field_dense_updates: int = 0

    @property
    def steps(self) -> int:
        return len(self.moves)

    def summary(self) -> dict[str, object]:
        """The figures as JSON-ready values."""
        return {
            "steps": self.steps,
            "route": list(self.route),
            "moves": list(self.moves),
            "updates": self.updates + self.door_updates,
            "dense_updates": self.dense_updates + self.door_updates,
            "reached": self.reached,
            "modules": list(self.modules),
            "field_updates": self.field_updates,
            "field_dense_updates": self.field_dense_updates,
        }


@dataclass(frozen=True)
class Successors:
    """The ways of a map: for clone u, ``target[indptr[u]:indptr[u + 1]]`` are the clones it moves to, with the
    log-probability and the action of the most probable move there."""

    indptr: np.ndarray
    target: np.ndarray
    log_p: np.ndarray
    action: np.ndarray

    @property
    def n_states(self) -> int:
        return len(self.indptr) - 1


def successors(model: ActionCHMM, threshold: float = THRESHOLD) -> Successors:
    """The map's ways: every pair u != v with some T[a](u, v) above ``threshold``, with the most probable action."""
    action, u, v, p = transition_entries(model, threshold)
    keep = u != v
    action, u, v, p = action[keep], u[keep], v[keep], p[keep]
    order = np.lexsort((-p, v, u))  # by (u, v), most probable action first
    action, u, v, p = action[order], u[order], v[order], p[order]
    first = np.ones(len(u), dtype=bool)
    first[1:] = (u[1:] != u[:-1]) | (v[1:] != v[:-1])
    action, u, v, p = action[first], u[first], v[first], p[first]
    indptr = np.zeros(model.n_states + 1, dtype=np.int64)
    np.cumsum(np.bincount(u, minlength=model.n_states), out=indptr[1:])
    return Successors(indptr, v.astype(np.int64), np.log(p), action.astype(np.int64))


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    lengths = stops - starts
    if lengths.sum() == 0:
        return np.zeros(0, dtype=np.int64)
    return np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - np.cumsum(lengths) + lengths, lengths)


@dataclass(frozen=True)
class _Search:
    route: list[int]
    actions: list[int]
    updates: int
    dense_updates: int
    reached: int
    touched: np.ndarray  # the mask of the clones a message reached
    log_p: float  # the route's log-probability (the goal's message)


@dataclass(frozen=True)
class _Spread:
    """Messages spread from a set of clones: ``value`` (-inf where none arrived), how many steps each came
    (``depth``, -1 where none arrived), the clone each came from (``back``) and the action of that way
    (``back_action``); the goals reached first (``found``) and the counts."""

    value: np.ndarray
    depth: np.ndarray
    back: np.ndarray
    back_action: np.ndarray
    found: np.ndarray
    updates: int
    iterations: int
    held: int


def _spread(ways: Successors, start: int, allowed: np.ndarray, goals: np.ndarray | None = None) -> _Spread:
    """Max-product messages from ``start`` (log-probability 0) over the clones of the mask ``allowed``, each clone
    keeping the most probable message of the first iteration that reaches it (so its message is the log-probability
    of the most probable of its shortest routes), until a clone of the mask ``goals`` holds one (``found``), or,
    without goals, until they stop spreading."""
    H = ways.n_states
    value = np.full(H, -np.inf)
    depth = np.full(H, -1, dtype=np.int64)
    back = np.full(H, -1, dtype=np.int64)
    back_action = np.full(H, -1, dtype=np.int64)
    frontier = np.array([start], dtype=np.int64)
    value[start], depth[start] = 0.0, 0
    held = updates = iterations = 1
    found = frontier[goals[frontier]] if goals is not None else frontier[:0]
    while not found.size:
        edges = _ranges(ways.indptr[frontier], ways.indptr[frontier + 1])
        source = np.repeat(frontier, np.diff(ways.indptr)[frontier])
        target = ways.target[edges]
        new = allowed[target] & (depth[target] < 0)
        source, target, edges = source[new], target[new], edges[new]
        if not target.size:
            break
        score = value[source] + ways.log_p[edges]
        order = np.lexsort((-score, target))
        best = order[np.r_[True, target[order][1:] != target[order][:-1]]]
        frontier = target[best]
        value[frontier], depth[frontier] = score[best], iterations
        back[frontier], back_action[frontier] = source[best], ways.action[edges[best]]
        held += len(frontier)
        updates += held
        iterations += 1
        if goals is not None:
            found = frontier[goals[frontier]]
    return _Spread(value, depth, back, back_action, found, updates, iterations, held)


def pass_messages(ways: Successors, start: int, goals: np.ndarray, allowed: np.ndarray) -> _Search | None:
    """Max-product messages from ``start`` over the clones of the mask ``allowed`` until one of the mask ``goals``
    holds a message (see the module docstring): the route to the most probable goal reached first and the actions
    along it (indices), with the messages held; None when the messages stop spreading before any goal."""
    spread = _spread(ways, start, allowed, goals)
    if not spread.found.size:
        return None
    clone = int(spread.found[np.argmax(spread.value[spread.found])])
    route, moves = [clone], []
    while clone != start:
        moves.append(int(spread.back_action[clone]))
        clone = int(spread.back[clone])
        route.append(clone)
    return _Search(
        route[::-1], moves[::-1], spread.updates, int(allowed.sum()) * spread.iterations, spread.held,
        spread.depth >= 0, float(spread.value[route[0]]),
    )  # fmt: skip


def _check_clones(model: ActionCHMM, **clones: int) -> None:
    for name, clone in clones.items():
        if not 0 <= clone < model.n_states:
            raise CHMMError(f"the {name} clone {clone} is outside 0..{model.n_states - 1}")


def _unreachable(start: int, goal: int) -> CHMMError:
    return CHMMError(f"clone {goal} cannot be reached from clone {start} in the map (no way is left open)")


def plan_flat(model: ActionCHMM, start: int, goal: int, threshold: float = THRESHOLD) -> Plan:
    """The shortest route from clone ``start`` to clone ``goal`` (the most probable among the shortest) by messages
    over the whole map; ValueError in one sentence when the goal cannot be reached."""
    _check_clones(model, start=start, goal=goal)
    ways = successors(model, threshold)
    goals = np.zeros(model.n_states, dtype=bool)
    goals[goal] = True
    found = pass_messages(ways, start, goals, np.ones(model.n_states, dtype=bool))
    if found is None:
        raise _unreachable(start, goal)
    return Plan(
        found.route, [model.actions[k] for k in found.actions], found.updates, found.dense_updates, found.reached
    )


def reversed_ways(ways: Successors) -> Successors:
    """The ways turned round: for clone v, the clones u with a way u -> v, with that way's log-probability and
    action (messages over them run from a goal back towards the clones that lead to it)."""
    source = np.repeat(np.arange(ways.n_states), np.diff(ways.indptr))
    order = np.argsort(ways.target, kind="stable")
    indptr = np.zeros(ways.n_states + 1, dtype=np.int64)
    np.cumsum(np.bincount(ways.target, minlength=ways.n_states), out=indptr[1:])
    return Successors(indptr, source[order], ways.log_p[order], ways.action[order])


@dataclass(frozen=True)
class Fields:
    """Messages spread inside a module from each of some ``clones`` (its exits, backwards; or its entries,
    forwards): for clone k of them and every clone c of its module, ``length[k, c]`` is the number of steps of the
    shortest route between them inside the module (-1 where there is none), ``log_p[k, c]`` the log-probability of
    the most probable of those routes, and ``step[k, c]``, ``action[k, c]`` the clone next to c on it, towards
    clone k, and the action of that step (-1 at clone k)."""

    clones: np.ndarray
    length: np.ndarray
    log_p: np.ndarray
    step: np.ndarray
    action: np.ndarray

    def walk(self, k: int, clone: int) -> tuple[list[int], list[int]]:
        """The clones from ``clone`` to clone k of the fields along their steps, and the actions of the steps
        (the clone must reach it)."""
        route, actions = [clone], []
        while route[-1] != self.clones[k]:
            actions.append(int(self.action[k, route[-1]]))
            route.append(int(self.step[k, route[-1]]))
        return route, actions


def _fields(ways: Successors, modules: np.ndarray, clones: np.ndarray) -> tuple[Fields, int, int]:
    """The fields of messages from each of ``clones`` over ``ways`` inside its module, and the messages held."""
    shape = (len(clones), ways.n_states)
    length, step, action = (np.full(shape, -1, dtype=np.int32) for _ in range(3))
    log_p = np.full(shape, -np.inf)
    updates = dense = 0
    for k, clone in enumerate(clones.tolist()):
        inside = modules == modules[clone]
        spread = _spread(ways, clone, inside)
        length[k], log_p[k], step[k], action[k] = spread.depth, spread.value, spread.back, spread.back_action
        updates, dense = updates + spread.updates, dense + int(inside.sum()) * spread.iterations
    return Fields(clones, length, log_p, step, action), updates, dense


@dataclass(frozen=True)
class DoorFields:
    """The map's door fields, made once for a map and its modules (as Infomap's modules are) and shared by every
    hierarchical plan on it: ``exits``, the fields of the clones with a way into another module (messages passed
    backwards inside the module from each: every clone's shortest route to it), and ``entries``, those of the
    clones a way from another module leads into (messages passed forwards: the shortest route from it to every
    clone). ``updates`` and ``dense_updates`` are the messages their making held (see the module docstring). They
    belong to the ``model`` object they were made for (a model is not changed in place: :func:`block` returns a new
    one), a copy of the ``modules`` and the ``threshold``; their arrays are (doors x clones)."""

    model: ActionCHMM
    modules: np.ndarray
    threshold: float
    ways: Successors
    exits: Fields
    entries: Fields
    updates: int
    dense_updates: int


def door_fields(model: ActionCHMM, modules: np.ndarray, threshold: float = THRESHOLD) -> DoorFields:
    """The door fields of a map and its ``modules`` (see :class:`DoorFields`). Max-product messages from a clone
    keep, at every clone they reach, the log-probability of the most probable of its shortest routes and the way
    it came along: backwards from an exit, that way is the clone's next step towards the exit; forwards from an
    entry, its last step from the entry."""
    modules = _checked_modules(model, modules).copy()  # kept: the caller's array may change
    modules.setflags(write=False)
    ways = successors(model, threshold)
    source = np.repeat(np.arange(model.n_states), np.diff(ways.indptr))
    across = modules[source] != modules[ways.target]
    exits, exit_updates, exit_dense = _fields(reversed_ways(ways), modules, np.unique(source[across]))
    entries, entry_updates, entry_dense = _fields(ways, modules, np.unique(ways.target[across]))
    return DoorFields(model, modules, threshold, ways, exits, entries, exit_updates + entry_updates,
                      exit_dense + entry_dense)  # fmt: skip


def _checked_modules(model: ActionCHMM, modules: np.ndarray) -> np.ndarray:
    modules = np.asarray(modules, dtype=np.int64)
    if modules.shape != (model.n_states,) or modules.min() < 0:
        raise CHMMError(f"the modules must give each of the map's {model.n_states} clones a module (0: none)")
    return modules


def plan_hierarchical(
    model: ActionCHMM, modules: np.ndarray, start: int, goal: int, threshold: float = THRESHOLD,
    fields: DoorFields | None = None,
) -> Plan:  # fmt: skip
    """The shortest route from clone ``start`` to clone ``goal`` (the most probable among the shortest, as
    :func:`plan_flat`'s, up to rounding) planned over the map's ``modules`` (the module of every clone: 1, 2, ...;
    0 for none, taken as one more set of clones: :func:`engine.cognitive.hierarchy.clone_modules`) and their door
    fields (:func:`door_fields`, made once for the map and its modules; made here and counted in the plan's
    ``field_updates`` when not given). Messages pass on the graph of the modules' doors (a shortest-route search,
    steps first and then probability) along its links: from the start or an entry to each exit of its module and
    into the goal when it is in the goal's module (their lengths read from the fields), and from an exit across
    its ways into other modules. Only where the start shares the goal's module and is no entry do messages pass
    inside that module from the start. The route is read back along the fields. Any route of the map is a chain of
    routes inside modules and steps across, so the route is as short as the flat one. ValueError in one sentence
    when the goal cannot be reached or the fields were made for another map, other modules or another
    threshold."""
    _check_clones(model, start=start, goal=goal)
    modules = _checked_modules(model, modules)
    if fields is not None and (
        fields.model is not model or fields.threshold != threshold or not np.array_equal(fields.modules, modules)
    ):
        raise CHMMError("the door fields were made for another map, other modules or another threshold")
    made = fields is None
    fields = door_fields(model, modules, threshold) if fields is None else fields
    direct, updates, dense = None, 0, 0
    if modules[start] == modules[goal] and start not in set(fields.entries.clones.tolist()):
        goals = np.zeros(model.n_states, dtype=bool)
        goals[goal] = True
        direct = pass_messages(fields.ways, start, goals, modules == modules[goal])
        updates, dense = (direct.updates, direct.dense_updates) if direct is not None else (0, 0)
    doors = _door_search(fields, start, goal, direct)
    if doors is None:
        raise _unreachable(start, goal)
    prev, relaxed, touched = doors
    route, moves = _read_route(fields, prev, start, goal, direct)
    touched[route] = True
    if direct is not None:
        touched |= direct.touched
    followed = [int(m) for m, _ in itertools.groupby(modules[route].tolist()) if m > 0]
    return Plan(
        route, [model.actions[a] for a in moves], updates, dense, int(touched.sum()), relaxed, tuple(followed),
        fields.updates * made, fields.dense_updates * made,
    )  # fmt: skip


def _door_search(
    fields: DoorFields, start: int, goal: int, direct: _Search | None
) -> tuple[dict[int, tuple[str, int, int]], int, np.ndarray] | None:
    """The shortest route from ``start`` to ``goal`` on the graph of the modules' doors (Dijkstra's search on
    (steps, -log-probability)): for each clone reached, the link it was reached by ("exit": inside a module to
    exit k; "across": by way e; "entry": inside the goal's module from entry k to the goal; "direct": the search
    from the start inside the goal's module) and the clone before; the links tried and the clones they reached.
    None when the goal is not reached."""
    ways, modules, exits, entries = fields.ways, fields.modules, fields.exits, fields.entries
    best = {start: (0, 0.0)}
    prev: dict[int, tuple[str, int, int]] = {}
    heap = [(0, 0.0, start)]
    exit_of = {int(x): k for k, x in enumerate(exits.clones.tolist())}
    entry_of = {int(x): k for k, x in enumerate(entries.clones.tolist())}
    touched = np.zeros(ways.n_states, dtype=bool)
    touched[start] = True
    relaxed = 0
    while heap:
        steps, cost, clone = heapq.heappop(heap)
        if (steps, cost) > best[clone]:
            continue
        if clone == goal:
            return prev, relaxed, touched
        links = []
        if clone == start and direct is not None:
            links.append(("direct", goal, len(direct.actions), -direct.log_p, 0))
        if clone == start or clone in entry_of:
            for k in np.flatnonzero(modules[exits.clones] == modules[clone]).tolist():
                if exits.length[k, clone] >= 0:
                    links.append(("exit", int(exits.clones[k]), int(exits.length[k, clone]), -exits.log_p[k, clone], k))
        if clone in entry_of and entries.length[entry_of[clone], goal] >= 0:
            k = entry_of[clone]
            links.append(("entry", goal, int(entries.length[k, goal]), -float(entries.log_p[k, goal]), k))
        if clone in exit_of:
            for e in range(ways.indptr[clone], ways.indptr[clone + 1]):
                if modules[ways.target[e]] != modules[clone]:
                    links.append(("across", int(ways.target[e]), 1, -float(ways.log_p[e]), e))
        for kind, to, more, less_likely, detail in links:
            relaxed += 1
            touched[to] = True
            score = (steps + more, cost + float(less_likely))
            if to not in best or score < best[to]:
                best[to], prev[to] = score, (kind, clone, detail)
                heapq.heappush(heap, (*score, to))
    return None


def _read_route(
    fields: DoorFields, prev: dict[int, tuple[str, int, int]], start: int, goal: int, direct: _Search | None
) -> tuple[list[int], list[int]]:
    """The route (clones) and actions (indices) the door search found, read back along its links."""
    links, clone = [], goal
    while clone != start:
        kind, before, detail = prev[clone]
        links.append((kind, before, detail, clone))
        clone = before
    route, moves = [start], []
    for kind, before, detail, clone in reversed(links):
        if kind == "exit":
            leg, actions = fields.exits.walk(detail, before)
        elif kind == "entry":
            back, back_actions = fields.entries.walk(detail, clone)
            leg, actions = back[::-1], back_actions[::-1]
        elif kind == "across":
            leg, actions = [before, clone], [int(fields.ways.action[detail])]
        else:  # "direct": only ever a link when the search inside the goal's module was made
            assert direct is not None
            leg, actions = direct.route, direct.actions
        route, moves = route + leg[1:], moves + actions
    return route, moves


def ways_into(model: ActionCHMM, clone: int, threshold: float = THRESHOLD) -> list[tuple[int, int]]:
    """The (clone, action) pairs whose transition leads into ``clone`` from another clone above ``threshold``: the
    passages to block to close it (a door)."""
    _check_clones(model, clone=clone)
    action, u, v, _ = transition_entries(model, threshold)
    into = (v == clone) & (u != clone)
    return sorted({(int(w), int(k)) for w, k in zip(u[into], action[into], strict=True)})


def block(model: ActionCHMM, passages: Iterable[tuple[int, int]]) -> ActionCHMM:
    """The map with each passage (clone u, action a) blocked: the row T[a](u, .) set to zero, so that action a leads
    nowhere from u (the walker learns the way is closed; the row is not renormalised). ValueError in one sentence
    for a clone or an action outside the map."""
    T = model.T.copy()
    layout, E = model.layout, model.n_symbols
    symbol = model.clone_symbol()
    for u, a in passages:
        _check_clones(model, passage=int(u))
        if not 0 <= a < model.n_actions:
            raise CHMMError(f"the action {a} is outside 0..{model.n_actions - 1}")
        i = int(symbol[u])
        row = int(u - layout.clone_start[i])
        for k in np.flatnonzero(layout.block_pairs[:, 0] == a * E + i):
            width = int(layout.n_clones[layout.block_pairs[k, 1]])
            offset = int(layout.block_offset[k]) + row * width
            T[offset : offset + width] = 0
    return model.with_T(T)
