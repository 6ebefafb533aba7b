"""Benchmark: worlds of several rooms (issue 50, items 2 and 3): do the Infomap modules of a learned map find the
world's rooms, and does planning over them pass fewer messages than planning on the whole map?

    python bench/bench_worlds.py                       # the three worlds below, 3 seeds each
    python bench/bench_worlds.py --seeds 1 --routes 10 # quicker

For every world and seed: the world (``engine.cognitive.worlds.make_world``, ``--observations`` observations drawn
per cell, the seed), a random walk of ``--steps`` steps in it, a map learned from the walk by ``chmm map``'s recipe
(``walks.learn_map``: batch EM up to 4,000 iterations, Viterbi EM, merging; ``--clones`` clones per observation,
the seed), Infomap on the map (``hierarchy.map_communities``) and the NMI of its modules with the rooms
(``hierarchy.match_rooms``: each clone placed where the walk decoded on the map is at it most often). Then
``--routes`` routes between two places in different rooms, drawn at random among the places the walk visits (not
doors), each planned on the learned map flat (``planning.plan_flat``) and across the modules
(``planning.plan_hierarchical`` on the map's door fields, ``planning.door_fields``, made once per map as its
modules are): steps (against the grid's shortest path), the messages each held (sum over iterations of the clones
holding one; the hierarchical plan's include those on the doors' graph, one per link tried; the fields' messages,
per map, are shown apart, shared among the map's routes, counted once in the totals, and paid back after their
messages over the mean saving of a route, flat's minus the hierarchical plan's, routes), the dense count
(every clone of the searched set at every iteration, as the paper's code's vectors) and the clones reached; a route
is valid when its moves, taken in the world, lead from the start to the goal. Finally for each route, the first
door its flat route passes is blocked (every way into the clones placed there set to zero, ``planning.block``) and
both planners plan again: a detour is found when the new route's moves, taken in the world with that door walled
up, lead to the goal; its steps are compared with the shortest path of that world.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import networkx as nx  # noqa: E402
from machine import describe_machine  # noqa: E402

from engine.cognitive import actions, hierarchy, maps, planning, walks, worlds  # noqa: E402

WORLDS = {
    "three rooms in a row, 2 doors per wall": ("5x4,5x4,5x4", 2),
    "four rooms in a ring": ("4x4,4x4/4x4,4x4", 1),
    "six rooms, 2 x 3": ("3x4,3x4,3x4/3x4,3x4,3x4", 1),
}
"""Name -> (rooms, doors per wall). Each has another way round every door (a second door, or the ring of rooms)."""


PLANNERS = ("flat", "tiered")


def replay(grid: np.ndarray, start: tuple[int, int], moves: list[str]) -> tuple[int, int]:
    """Where ``moves`` taken in ``grid`` from ``start`` lead (a move into a wall keeps the walker in place)."""
    r, c = start
    for move in moves:
        nr, nc = r + actions.STEPS[actions.MOVES.index(move), 0], c + actions.STEPS[actions.MOVES.index(move), 1]
        if 0 <= nr < grid.shape[0] and 0 <= nc < grid.shape[1] and grid[nr, nc] >= 0:
            r, c = int(nr), int(nc)
    return r, c


def messages(plan: planning.Plan) -> tuple[int, int, int]:
    """(messages held, dense count, clones reached) of a plan, the doors' graph's included."""
    figures = plan.summary()
    return int(figures["updates"]), int(figures["dense_updates"]), plan.reached


def trial(spec: str, doors: int, seed: int, args: argparse.Namespace) -> dict:
    """One world and seed: learn, match the rooms, plan the routes, block their doors (see the module docstring)."""
    t0 = time.perf_counter()
    world = worlds.make_world(spec, args.observations, doors, seed)
    walk = walks.parse_walk(walks.format_walk(actions.generate_walk(world.grid, args.steps, seed=seed)))
    model, summary = walks.learn_map(walk, walks.MapOptions(clones=args.clones, seed=seed))
    learned = time.perf_counter() - t0
    x, a = walk.walks()
    communities = hierarchy.map_communities(model)
    match = hierarchy.match_rooms(model, x, a, walk.positions, world.grid, communities)
    modules = hierarchy.clone_modules(communities)
    clone_of = hierarchy.place_clones(model, x, a, walk.positions)
    places = hierarchy.clone_places(model, x, a, walk.positions)
    fields = planning.door_fields(model, modules)  # once for the map, as its modules
    grid_graph = maps.room_graph(world.grid)
    rng = np.random.default_rng(1000 + seed)
    candidates = [cell for cell in clone_of if world.rooms[cell] >= 0]
    rows, blocked_rows, unplanned = [], [], 0
    while len(rows) < args.routes:
        s, g = (candidates[k] for k in rng.choice(len(candidates), 2, replace=False))
        if world.rooms[s] == world.rooms[g]:
            continue
        try:
            flat = planning.plan_flat(model, clone_of[s], clone_of[g])
            tiered = planning.plan_hierarchical(model, modules, clone_of[s], clone_of[g], fields=fields)
        except ValueError:  # a map that misses a way: said in the table
            unplanned += 1
            continue
        rows.append(
            dict(shortest=nx.shortest_path_length(grid_graph, s, g), flat=flat.steps, tiered=tiered.steps,
                 valid=replay(world.grid, s, flat.moves) == g and replay(world.grid, s, tiered.moves) == g,
                 flat_messages=messages(flat), tiered_messages=messages(tiered))
        )  # fmt: skip
        blocked_rows.append(block_a_door(world, model, modules, clone_of, places, s, g, flat))
    return dict(spec=spec, doors=doors, seed=seed, learned_seconds=learned, summary=summary, nmi=match.nmi,
                modules=match.modules, rooms=match.rooms, routes=rows, blocked=blocked_rows, unplanned=unplanned,
                cells=int((world.grid >= 0).sum()), fields=[fields.updates, fields.dense_updates, 0])  # fmt: skip


def block_a_door(world, model, modules, clone_of, places, start, goal, flat) -> dict:  # noqa: ANN001
    """Block the first door the flat route passes and plan again, flat and hierarchically."""
    cells = [start]
    for move in flat.moves:
        cells.append(replay(world.grid, cells[-1], [move]))
    door = next((cell for cell in cells if cell in world.doors), None)
    if door is None:  # the map's route does not lead through a door in the world (a flawed map): no door to block
        return dict(shortest=None, before=flat.steps, flat=None, tiered=None, no_door=True)
    closed = {clone_of[door]} | {int(c) for c in np.flatnonzero((places == door).all(axis=1))}
    blocked = planning.block(model, sorted({way for c in closed for way in planning.ways_into(model, c)}))
    walled = world.grid.copy()
    walled[door] = -1
    graph = maps.room_graph(walled)
    shortest = nx.shortest_path_length(graph, start, goal) if nx.has_path(graph, start, goal) else None
    out = dict(shortest=shortest, before=flat.steps)
    for name, plan in (
        ("flat", lambda: planning.plan_flat(blocked, clone_of[start], clone_of[goal])),
        ("tiered", lambda: planning.plan_hierarchical(blocked, modules, clone_of[start], clone_of[goal])),
    ):
        try:
            found = plan()
        except ValueError:
            out[name] = None
            continue
        out[name] = found.steps if replay(walled, start, found.moves) == goal else -1
    return out


def report(name: str, results: list[dict]) -> dict:
    """One line of the table for a world: its trials pooled."""
    routes = [r for t in results for r in t["routes"]]
    blocked = [b for t in results for b in t["blocked"]]
    flat = np.array([r["flat_messages"] for r in routes], dtype=float)
    tiered = np.array([r["tiered_messages"] for r in routes], dtype=float)
    ratio = tiered / flat
    # the map's door fields, made once per map: shared among its routes, or counted once in the totals
    share = np.concatenate([np.tile(np.array(t["fields"], dtype=float) / len(t["routes"]), (len(t["routes"]), 1))
                            for t in results])  # fmt: skip
    fields_once = np.sum([t["fields"] for t in results], axis=0)
    detours = sum(1 for b in blocked if b["flat"] not in (None, -1) and b["tiered"] not in (None, -1))
    blocked_doors = sum(1 for b in blocked if not b.get("no_door"))
    optimal = [sum(1 for b in blocked if b["shortest"] is not None and b[k] == b["shortest"]) for k in PLANNERS]
    line = dict(
        world=name, spec=results[0]["spec"], trials=len(results), nmi=[t["nmi"] for t in results],
        modules=[t["modules"] for t in results], rooms=results[0]["rooms"],
        clones_used=[t["summary"]["clones_used"] for t in results],
        cells=results[0]["cells"], routes=len(routes), valid=sum(r["valid"] for r in routes),
        unplanned=sum(t["unplanned"] for t in results),
        steps=[float(np.mean([r[k] for r in routes])) for k in ("shortest", "flat", "tiered")],
        tiered_longer=sum(r["tiered"] > r["flat"] for r in routes),
        ratio_mean=ratio.mean(axis=0).tolist(), ratio_shared=((tiered + share) / flat).mean(axis=0).tolist(),
        ratio_total=((tiered.sum(axis=0) + fields_once) / flat.sum(axis=0)).tolist(),
        fields=(fields_once / len(results)).tolist(),
        paid_back=float(fields_once[0] / (flat[:, 0] - tiered[:, 0]).sum() * len(routes) / len(results)),
        detours=detours, blocked=blocked_doors, detour_optimal=optimal,
        detour_steps=[float(np.mean([b[k] for b in blocked if b[k] not in (None, -1)] or [np.nan]))
                      for k in ("shortest", "flat", "tiered")],
        seconds=[t["learned_seconds"] for t in results],
    )  # fmt: skip
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3, help="worlds (and walks, and maps) per kind of world")
    parser.add_argument("--routes", type=int, default=20, help="routes between rooms per world")
    parser.add_argument("--steps", type=int, default=20_000, help="steps of each walk")
    parser.add_argument("--clones", type=int, default=40, help="clones per observation")
    parser.add_argument("--observations", type=int, default=8, help="observations each world's cells draw from")
    parser.add_argument("--only", nargs="+", default=None, help="worlds to run (a word of their name)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    print("machine:", describe_machine())
    print(f"{args.seeds} seeds per world, {args.steps:,}-step walks, {args.clones} clones per observation, "
          f"{args.observations} observations, {args.routes} routes between rooms per world\n", flush=True)  # fmt: skip
    lines = []
    for name, (spec, doors) in WORLDS.items():
        if args.only and not any(word in name for word in args.only):
            continue
        results = []
        for seed in range(args.seeds):
            results.append(trial(spec, doors, seed, args))
            t = results[-1]
            print(f"  {name}, seed {seed}: NMI {t['nmi']:.3f}, {t['modules']} modules for {t['rooms']} rooms, "
                  f"{t['summary']['clones_used']} clones, learned in {t['learned_seconds']:.0f} s",
                  flush=True)  # fmt: skip
        lines += [report(f"{name}, seed {t['seed']}", [t]) for t in results]
        lines.append(report(f"**{name}, all seeds**", results))
    print(
        "\n| world | cells | NMI | modules (rooms) | routes valid | steps: grid / flat / "
        "hierarchical | hierarchical longer | messages held, hierarchical / flat: mean of routes; with the map's "
        "door fields shared among its routes; of totals, fields once | door fields' messages per map | dense count | "
        "clones reached | blocked door: detours found | detour steps: grid / flat / hierarchical |"
    )
    print("|---|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for line in lines:
        nmi = " / ".join(f"{v:.3f}" for v in line["nmi"])
        modules = " / ".join(str(v) for v in line["modules"])
        held, dense, reached = line["ratio_mean"]
        steps = " / ".join(f"{v:.2f}" for v in line["steps"])
        detour = " / ".join(f"{v:.2f}" for v in line["detour_steps"])
        unplanned = f" ({line['unplanned']} pairs without a route on the map)" if line["unplanned"] else ""
        print(f"| {line['world']} ({line['spec']}) | {line['cells']} | {nmi} | {modules} ({line['rooms']}) | "
              f"{line['valid']} of {line['routes']}{unplanned} | {steps} | {line['tiered_longer']} | {held:.3f}; "
              f"{line['ratio_shared'][0]:.3f}; {line['ratio_total'][0]:.3f} | {line['fields'][0]:,.0f}, paid back "
              f"after {line['paid_back']:.1f} routes | "
              f"{dense:.3f} | {reached:.3f} | {line['detours']} of {line['blocked']} "
              f"(shortest: flat {line['detour_optimal'][0]}, hierarchical {line['detour_optimal'][1]}) "
              f"| {detour} |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(lines, indent=1, default=float))


if __name__ == "__main__":
    main()
