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
transition leads from a clone of one into a clone of the other) to find the sequence of modules, then inside each
module alone from where the route entered it to its nearest clone that leads into the next module (the goal in the
last), and steps across.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from engine.cognitive.actions import ActionCHMM
from engine.cognitive.hierarchy import THRESHOLD, transition_entries


@dataclass(frozen=True)
class Plan:
    """A planned route: its ``route`` (clones, start to goal) and ``moves`` (action names, one per step), the
    messages its planning held (``updates``, ``dense_updates``: see the module docstring), how many distinct clones
    they reached (``reached``); for a hierarchical plan, the messages on the module graph (``module_updates``,
    ``module_dense_updates``), the sequence of ``modules`` and whether a module could not be crossed inside itself
    so that the rest was planned flat (``fallback``)."""

    route: list[int]
    moves: list[str]
    updates: int
    dense_updates: int
    reached: int
    module_updates: int = 0
    module_dense_updates: int = 0
    modules: tuple[int, ...] = ()
    fallback: bool = False

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


def pass_messages(ways: Successors, start: int, goals: np.ndarray, allowed: np.ndarray) -> _Search | None:
    """Max-product messages from ``start`` over the clones of the mask ``allowed`` until one of the mask ``goals``
    holds a message (see the module docstring): the route to the most probable goal reached first and the actions
    along it (indices), with the messages held; None when the messages stop spreading before any goal."""
    H = ways.n_states
    value = np.full(H, -np.inf)
    back = np.full(H, -1, dtype=np.int64)
    back_action = np.full(H, -1, dtype=np.int64)
    value[start] = 0.0
    frontier = np.array([start], dtype=np.int64)
    held, updates, iterations, size = 1, 1, 1, int(allowed.sum())
    found = frontier[goals[frontier]]
    while not found.size:
        edges = _ranges(ways.indptr[frontier], ways.indptr[frontier + 1])
        source = np.repeat(frontier, np.diff(ways.indptr)[frontier])
        target = ways.target[edges]
        new = allowed[target] & np.isneginf(value[target])
        source, target, edges = source[new], target[new], edges[new]
        if not target.size:
            return None
        score = value[source] + ways.log_p[edges]
        order = np.lexsort((-score, target))
        best = order[np.r_[True, target[order][1:] != target[order][:-1]]]
        frontier = target[best]
        value[frontier] = score[best]
        back[frontier], back_action[frontier] = source[best], ways.action[edges[best]]
        held += len(frontier)
        updates += held
        iterations += 1
        found = frontier[goals[frontier]]
    clone = int(found[np.argmax(value[found])])
    route, moves = [clone], []
    while clone != start:
        moves.append(int(back_action[clone]))
        clone = int(back[clone])
        route.append(clone)
    return _Search(route[::-1], moves[::-1], updates, size * iterations, held)


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


def plan_hierarchical(
    model: ActionCHMM, modules: np.ndarray, start: int, goal: int, threshold: float = THRESHOLD
) -> Plan:
    """A route from clone ``start`` to clone ``goal`` planned over the map's ``modules`` (the module of every clone,
    1, 2, ...; 0 for none: :func:`engine.cognitive.hierarchy.clone_modules`): messages on the module graph
    (:func:`module_graph` of the map's ways now, from the clones some way still enters, so a blocked passage
    counts) give the fewest modules to cross, then messages inside each module alone lead to its nearest clone with
    a way into the next (the goal in the last) and the route steps across. Where a module cannot be crossed inside
    itself into the next, that step of the module graph is struck out and the modules are planned again from
    there; where no sequence of modules is left, or the start or goal is in no module, the rest is planned flat
    (``fallback``). ValueError in one sentence when the goal cannot be reached."""
    _check_clones(model, start=start, goal=goal)
    modules = np.asarray(modules, dtype=np.int64)
    if modules.shape != (model.n_states,) or modules.min() < 0:
        raise ValueError(f"the modules must give each of the map's {model.n_states} clones a module (0: none)")
    ways = successors(model, threshold)
    if modules[start] == 0 or modules[goal] == 0:
        return _flat_rest(model, ways, [start], [], start, goal, Plan([], [], 0, 0, 0))
    entered = np.zeros(model.n_states, dtype=bool)
    entered[ways.target] = True
    entered[start] = True
    source = np.repeat(np.arange(model.n_states), np.diff(ways.indptr))
    banned: set[tuple[int, int]] = set()
    tally, route, moves, clone, reached, followed = Plan([], [], 0, 0, 0), [start], [], start, 0, []
    while True:
        graph = module_graph(ways, modules, entered, banned)
        ends = np.zeros(graph.n_states, dtype=bool)
        ends[modules[goal]] = True
        path = pass_messages(graph, int(modules[clone]), ends, np.r_[False, np.ones(graph.n_states - 1, dtype=bool)])
        if path is None:
            if not banned:
                raise _unreachable(start, goal)
            return _flat_rest(model, ways, route, moves, clone, goal, tally, reached)
        tally = Plan([], [], tally.updates, tally.dense_updates, 0, tally.module_updates + path.updates,
                     tally.module_dense_updates + path.dense_updates)  # fmt: skip
        for k, module in enumerate(path.route):
            last = k + 1 == len(path.route)
            goals = np.zeros(model.n_states, dtype=bool)
            if last:
                goals[goal] = True
            else:
                goals[source[(modules[source] == module) & (modules[ways.target] == path.route[k + 1])]] = True
            found = pass_messages(ways, clone, goals, modules == module)
            if found is None and last:
                return _flat_rest(model, ways, route, moves, clone, goal, tally, reached, followed)
            if found is None:
                banned.add((int(module), int(path.route[k + 1])))
                break
            tally, reached = _add(tally, found), reached + found.reached
            route, clone = route + found.route[1:], found.route[-1]
            moves += [model.actions[a] for a in found.actions]
            followed += [int(module)] if not followed or followed[-1] != module else []
            if last:
                return Plan(route, moves, tally.updates, tally.dense_updates, reached, tally.module_updates,
                            tally.module_dense_updates, tuple(followed))  # fmt: skip
            lo, hi = ways.indptr[clone], ways.indptr[clone + 1]  # step across by the most probable way
            into = np.flatnonzero(modules[ways.target[lo:hi]] == path.route[k + 1]) + lo
            way = int(into[np.argmax(ways.log_p[into])])
            clone = int(ways.target[way])
            route.append(clone)
            moves.append(model.actions[int(ways.action[way])])


def _add(plan: Plan, found: _Search) -> Plan:
    """``plan``'s message counts with those of one more search."""
    return Plan([], [], plan.updates + found.updates, plan.dense_updates + found.dense_updates, 0,
                plan.module_updates, plan.module_dense_updates)  # fmt: skip


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
    tally = _add(tally, found)
    return Plan(route + found.route[1:], moves + [model.actions[a] for a in found.actions], tally.updates,
                tally.dense_updates, reached + found.reached, tally.module_updates, tally.module_dense_updates,
                tuple(followed or ()), fallback=True)  # fmt: skip


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
