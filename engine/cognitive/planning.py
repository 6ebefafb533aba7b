"""Planning on a learned map by message passing, flat or over its modules (George et al. 2021: Fig. 7 plans across
the map's communities first, then inside each, with less message passing; Fig. 3 replans around a blocked passage).

The planner is max-product message passing from the start clone, as the paper's code bridges two clones: message t
holds, for every clone reached in at most t steps, the log-probability of the most probable of its shortest routes
from the start (log T[a](u, v) summed over the best action of each step; transitions at or below a threshold, and
steps into a wall, u -> u, are not ways). Messages pass until one reaches a goal; the route is read back from there.
Its work is counted as the messages it holds: sum over iterations t = 0..T of the clones holding a message after t
(``updates``; the sparse work), and the clones of the searched set times T + 1 (``dense_updates``; the work of the
paper's dense vectors).

Hierarchical planning (:func:`plan_hierarchical`) first passes messages on the module graph (modules joined where a
transition leads from a clone of one into a clone of the other) to find the sequence of modules. Inside each module
but the goal's, the route follows the map's exit fields (:func:`exit_fields`, made once for a map and its modules,
as the modules are: for each module and each module a way leads into, messages passed backwards inside the module
from its clones with a way there, so that every clone of the module knows its next step towards the nearest of them)
and steps across; inside the goal's module, messages pass from where the route entered it to the goal, as flat
planning's do over the whole map.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from engine.cognitive.actions import ActionCHMM
from engine.cognitive.hierarchy import THRESHOLD, transition_entries


@dataclass(frozen=True)
class Plan:
    """A planned route: its ``route`` (clones, start to goal) and ``moves`` (action names, one per step), the
    messages its planning held (``updates``, ``dense_updates``: see the module docstring), how many distinct clones
    they reached (``reached``); for a hierarchical plan, the messages on the module graph (``module_updates``,
    ``module_dense_updates``), the sequence of ``modules``, whether a module could not be crossed inside itself
    so that the rest was planned flat (``fallback``), and the messages of the map's exit fields when this plan made
    them (``field_updates``, ``field_dense_updates``; 0 when it was given fields made once for the map)."""

    route: list[int]
    moves: list[str]
    updates: int
    dense_updates: int
    reached: int
    module_updates: int = 0
    module_dense_updates: int = 0
    modules: tuple[int, ...] = ()
    fallback: bool = False
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
            "updates": self.updates + self.module_updates,
            "dense_updates": self.dense_updates + self.module_dense_updates,
            "reached": self.reached,
            "modules": list(self.modules),
            "fallback": self.fallback,
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


@dataclass(frozen=True)
class _Spread:
    """Messages spread from a set of clones: ``value`` (-inf where none arrived), the clone each came from
    (``back``) and the action of that way (``back_action``); the goals reached first (``found``) and the counts."""

    value: np.ndarray
    back: np.ndarray
    back_action: np.ndarray
    found: np.ndarray
    updates: int
    iterations: int
    held: int


def _spread(ways: Successors, starts: np.ndarray, goals: np.ndarray | None, allowed: np.ndarray) -> _Spread:
    """Max-product messages from every clone of ``starts`` (log-probability 0) over the clones of the mask
    ``allowed``, each clone keeping the most probable message of the first iteration that reaches it, until a clone
    of the mask ``goals`` holds one (``found``; empty when the messages stop spreading first) or, without goals,
    until they stop spreading."""
    H = ways.n_states
    value = np.full(H, -np.inf)
    back = np.full(H, -1, dtype=np.int64)
    back_action = np.full(H, -1, dtype=np.int64)
    frontier = np.asarray(starts, dtype=np.int64)
    value[frontier] = 0.0
    held = updates = len(frontier)
    iterations = 1
    found = frontier[goals[frontier]] if goals is not None else frontier[:0]
    while not found.size:
        edges = _ranges(ways.indptr[frontier], ways.indptr[frontier + 1])
        source = np.repeat(frontier, np.diff(ways.indptr)[frontier])
        target = ways.target[edges]
        new = allowed[target] & np.isneginf(value[target])
        source, target, edges = source[new], target[new], edges[new]
        if not target.size:
            break
        score = value[source] + ways.log_p[edges]
        order = np.lexsort((-score, target))
        best = order[np.r_[True, target[order][1:] != target[order][:-1]]]
        frontier = target[best]
        value[frontier] = score[best]
        back[frontier], back_action[frontier] = source[best], ways.action[edges[best]]
        held += len(frontier)
        updates += held
        iterations += 1
        if goals is not None:
            found = frontier[goals[frontier]]
    return _Spread(value, back, back_action, found, updates, iterations, held)


def pass_messages(ways: Successors, start: int, goals: np.ndarray, allowed: np.ndarray) -> _Search | None:
    """Max-product messages from ``start`` over the clones of the mask ``allowed`` until one of the mask ``goals``
    holds a message (see the module docstring): the route to the most probable goal reached first and the actions
    along it (indices), with the messages held; None when the messages stop spreading before any goal."""
    spread = _spread(ways, np.array([start]), goals, allowed)
    if not spread.found.size:
        return None
    clone = int(spread.found[np.argmax(spread.value[spread.found])])
    route, moves = [clone], []
    while clone != start:
        moves.append(int(spread.back_action[clone]))
        clone = int(spread.back[clone])
        route.append(clone)
    return _Search(route[::-1], moves[::-1], spread.updates, int(allowed.sum()) * spread.iterations, spread.held)


def _check_clones(model: ActionCHMM, **clones: int) -> None:
    for name, clone in clones.items():
        if not 0 <= clone < model.n_states:
            raise ValueError(f"the {name} clone {clone} is outside 0..{model.n_states - 1}")


def _unreachable(start: int, goal: int) -> ValueError:
    return ValueError(f"clone {goal} cannot be reached from clone {start} in the map (no way is left open)")


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


def module_graph(
    ways: Successors, modules: np.ndarray, sources: np.ndarray | None = None, banned: Iterable[tuple[int, int]] = ()
) -> Successors:
    """The modules as a graph: nodes 0..max(modules) (0: clones in no module, which no route goes through), an edge
    M -> N where a way leads from a clone of module M (one of the mask ``sources``, all by default) into a clone of
    module N != M (log-probability 0), but for the ``banned`` (M, N) pairs."""
    source = np.repeat(np.arange(ways.n_states), np.diff(ways.indptr))
    keep = np.ones(len(source), dtype=bool) if sources is None else sources[source]
    pairs = np.unique(np.stack([modules[source[keep]], modules[ways.target[keep]]], axis=1).reshape(-1, 2), axis=0)
    pairs = pairs[(pairs[:, 0] != pairs[:, 1]) & (pairs[:, 0] > 0) & (pairs[:, 1] > 0)]
    banned = set(banned)
    pairs = pairs[[(int(m), int(n)) not in banned for m, n in pairs]].reshape(-1, 2)
    n = int(modules.max()) + 1
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(pairs[:, 0], minlength=n), out=indptr[1:])
    zeros = np.zeros(len(pairs))
    return Successors(indptr, pairs[:, 1].astype(np.int64), zeros, np.zeros(len(pairs), dtype=np.int64))


def reversed_ways(ways: Successors) -> Successors:
    """The ways turned round: for clone v, the clones u with a way u -> v, with that way's log-probability and
    action (messages over them run from a goal back towards the clones that lead to it)."""
    source = np.repeat(np.arange(ways.n_states), np.diff(ways.indptr))
    order = np.argsort(ways.target, kind="stable")
    indptr = np.zeros(ways.n_states + 1, dtype=np.int64)
    np.cumsum(np.bincount(ways.target, minlength=ways.n_states), out=indptr[1:])
    return Successors(indptr, source[order], ways.log_p[order], ways.action[order])


@dataclass(frozen=True)
class ExitFields:
    """The map's exit fields, made once for a map and its modules (as Infomap's modules are) and shared by every
    hierarchical plan on it: for each pair (M, N) of modules that a way joins, ``fields[M, N]`` holds for every
    clone of M the next clone and the action on its shortest route inside M to a clone with a way into N (the most
    probable among the shortest; -1 at those exit clones, -2 where no route inside M leads to one). ``updates``
    and ``dense_updates`` are the messages their making held (see the module docstring)."""

    model: ActionCHMM
    modules: np.ndarray
    threshold: float
    ways: Successors
    fields: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]
    updates: int
    dense_updates: int

    def leg(self, clone: int, module: int, into: int) -> tuple[list[int], list[int]] | None:
        """The route (clones) and actions from ``clone`` inside ``module`` to its nearest clone with a way into
        module ``into``; None when no route inside the module leads there."""
        field = self.fields.get((module, into))
        if field is None or field[0][clone] == -2:
            return None
        step, action = field
        route, moves = [clone], []
        while step[route[-1]] >= 0:
            moves.append(int(action[route[-1]]))
            route.append(int(step[route[-1]]))
        return route, moves


def exit_fields(model: ActionCHMM, modules: np.ndarray, threshold: float = THRESHOLD) -> ExitFields:
    """The exit fields of a map and its ``modules`` (see :class:`ExitFields`): for every pair (M, N) joined by a
    way, max-product messages from the clones of M with a way into N, passed backwards over M's ways until they
    stop spreading. Each clone's message is then the log-probability of its most probable shortest route to that
    exit, and the way it came along is the clone's next step."""
    modules = _checked_modules(model, modules)
    ways = successors(model, threshold)
    back = reversed_ways(ways)
    source = np.repeat(np.arange(model.n_states), np.diff(ways.indptr))
    crossing = modules[source] != modules[ways.target]
    crossing &= (modules[source] > 0) & (modules[ways.target] > 0)
    pairs = np.unique(np.stack([modules[source[crossing]], modules[ways.target[crossing]]], axis=1), axis=0)
    fields, updates, dense = {}, 0, 0
    for m, n in pairs.reshape(-1, 2).tolist():
        exits = np.unique(source[crossing & (modules[source] == m) & (modules[ways.target] == n)])
        inside = modules == m
        spread = _spread(back, exits, None, inside)
        step = np.where(np.isneginf(spread.value), -2, spread.back)
        fields[m, n] = (step, spread.back_action)
        updates, dense = updates + spread.updates, dense + int(inside.sum()) * spread.iterations
    return ExitFields(model, modules, threshold, ways, fields, updates, dense)


def _checked_modules(model: ActionCHMM, modules: np.ndarray) -> np.ndarray:
    modules = np.asarray(modules, dtype=np.int64)
    if modules.shape != (model.n_states,) or modules.min() < 0:
        raise ValueError(f"the modules must give each of the map's {model.n_states} clones a module (0: none)")
    return modules


def plan_hierarchical(
    model: ActionCHMM, modules: np.ndarray, start: int, goal: int, threshold: float = THRESHOLD,
    fields: ExitFields | None = None,
) -> Plan:  # fmt: skip
    """A route from clone ``start`` to clone ``goal`` planned over the map's ``modules`` (the module of every clone,
    1, 2, ...; 0 for none: :func:`engine.cognitive.hierarchy.clone_modules`): messages on the module graph
    (:func:`module_graph` of the map's ways now, from the clones some way still enters, so a blocked passage
    counts) give the fewest modules to cross; the route follows the map's exit ``fields`` (:func:`exit_fields`,
    made here and counted in the plan's ``field_updates`` when not given) inside each module to its nearest clone
    with a way into the next, steps across, and messages inside the goal's module alone lead to the goal. Where a
    module cannot be crossed inside itself into the next, that step of the module graph is struck out and the
    modules are planned again from there; where no sequence of modules is left, or the start or goal is in no
    module, the rest is planned flat (``fallback``). ValueError in one sentence when the goal cannot be reached or
    the fields were made for another map, other modules or another threshold."""
    _check_clones(model, start=start, goal=goal)
    modules = _checked_modules(model, modules)
    if fields is not None and (
        fields.model is not model or fields.threshold != threshold or not np.array_equal(fields.modules, modules)
    ):
        raise ValueError("the exit fields were made for another map, other modules or another threshold")
    ways = successors(model, threshold) if fields is None else fields.ways
    if modules[start] == 0 or modules[goal] == 0:
        return _flat_rest(model, ways, [start], [], start, goal, Plan([], [], 0, 0, 0))
    made = fields is None
    fields = exit_fields(model, modules, threshold) if fields is None else fields
    entered = np.zeros(model.n_states, dtype=bool)
    entered[ways.target] = True
    entered[start] = True
    banned: set[tuple[int, int]] = set()
    tally = Plan([], [], 0, 0, 0, field_updates=fields.updates * made, field_dense_updates=fields.dense_updates * made)
    route, moves, clone, reached, followed = [start], [], start, 0, []
    while True:
        graph = module_graph(ways, modules, entered, banned)
        ends = np.zeros(graph.n_states, dtype=bool)
        ends[modules[goal]] = True
        path = pass_messages(graph, int(modules[clone]), ends, np.r_[False, np.ones(graph.n_states - 1, dtype=bool)])
        if path is None:
            if not banned:
                raise _unreachable(start, goal)
            return _flat_rest(model, ways, route, moves, clone, goal, tally, reached)
        tally = replace(tally, module_updates=tally.module_updates + path.updates,
                        module_dense_updates=tally.module_dense_updates + path.dense_updates)  # fmt: skip
        for k, module in enumerate(path.route):
            followed += [int(module)] if not followed or followed[-1] != module else []
            if k + 1 == len(path.route):
                goals = np.zeros(model.n_states, dtype=bool)
                goals[goal] = True
                found = pass_messages(ways, clone, goals, modules == module)
                if found is None:
                    return _flat_rest(model, ways, route, moves, clone, goal, tally, reached, followed)
                moves += [model.actions[a] for a in found.actions]
                return replace(_add(tally, found), route=route + found.route[1:], moves=moves,
                               reached=reached + found.reached, modules=tuple(followed))  # fmt: skip
            leg = fields.leg(clone, int(module), int(path.route[k + 1]))
            if leg is None:
                banned.add((int(module), int(path.route[k + 1])))
                break
            route, clone = route + leg[0][1:], leg[0][-1]
            moves += [model.actions[a] for a in leg[1]]
            lo, hi = ways.indptr[clone], ways.indptr[clone + 1]  # step across by the most probable way
            into = np.flatnonzero(modules[ways.target[lo:hi]] == path.route[k + 1]) + lo
            way = int(into[np.argmax(ways.log_p[into])])
            clone = int(ways.target[way])
            route.append(clone)
            moves.append(model.actions[int(ways.action[way])])


def _add(plan: Plan, found: _Search) -> Plan:
    """``plan``'s message counts with those of one more search."""
    return replace(plan, updates=plan.updates + found.updates, dense_updates=plan.dense_updates + found.dense_updates)


def _flat_rest(
    model: ActionCHMM, ways: Successors, route: list[int], moves: list[str], clone: int, goal: int, tally: Plan,
    reached: int = 0, followed: list[int] | None = None,
) -> Plan:  # fmt: skip
    """The route so far completed by flat messages from ``clone`` to ``goal`` (a hierarchical plan's fallback)."""
    goals = np.zeros(model.n_states, dtype=bool)
    goals[goal] = True
    found = pass_messages(ways, clone, goals, np.ones(model.n_states, dtype=bool))
    if found is None:
        raise _unreachable(route[0], goal)
    return replace(_add(tally, found), route=route + found.route[1:], reached=reached + found.reached,
                   moves=moves + [model.actions[a] for a in found.actions], modules=tuple(followed or ()),
                   fallback=True)  # fmt: skip


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
            raise ValueError(f"the action {a} is outside 0..{model.n_actions - 1}")
        i = int(symbol[u])
        row = int(u - layout.clone_start[i])
        for k in np.flatnonzero(layout.block_pairs[:, 0] == a * E + i):
            width = int(layout.n_clones[layout.block_pairs[k, 1]])
            offset = int(layout.block_offset[k]) + row * width
            T[offset : offset + width] = 0
    return model.with_T(T)
