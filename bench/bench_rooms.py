"""Benchmark: cognitive maps (CHMMs with actions, engine.cognitive.actions) beside the paper authors' public code, and
the recovery of rooms from walks (issue 37).

    python bench/bench_rooms.py --reference /path/to/naturecomm_cscg      # side by side, then recovery
    python bench/bench_rooms.py --seeds 5                                  # recovery only
    python bench/bench_rooms.py --seeds 0 --backends cpu gpu               # batch EM on each backend
    python bench/bench_rooms.py --seeds 0 --sparse                         # a learned map: sparse vs dense engine
    python bench/bench_rooms.py --seeds 5 --algorithm online               # recovery with online EM first
    python bench/bench_rooms.py --defaults --seeds 5                       # recovery with chmm map's defaults
    python bench/bench_rooms.py --defaults --seeds 2 --walk 20000 --rooms rectangular doors   # a reduced run

Side by side: the public notebook's rectangular 6 x 8 room with 4 observations, a 50,000-step walk (our generator),
70 clones per observation, pseudocount 2e-3. Both start from the reference's own random T (its ``CHMM(...,
seed=42)``), ours holding every (action, symbol, symbol) block as the reference's dense T does, and run the same
number of batch-EM iterations without the early stop; the table gives the bits per step of each iteration from
both (they should agree to float rounding) and the seconds per iteration, the two programs timed in turn. The
reference is read from a checkout of ``vicariousinc/naturecomm_cscg`` (``chmm_actions.py``); it is imported, never
copied; its progress bar (tqdm) is replaced by a plain loop when tqdm is not installed.

Recovery: for each seed, a 50,000-step walk in the room, batch EM (up to 1,000 iterations, pseudocount 2e-3, stopped
when the likelihood stops improving) then Viterbi EM (pseudocount 0), as in the notebook; the map is recovered when
the clone graph of the walk's MAP path, self-loops aside, is isomorphic to the room's grid graph (networkx). The
table gives it before and after merging the clones with the same future (engine.cognitive.maps.merge_equivalent_clones,
the last step of ``chmm map``), and the bits per step of a held-out 10,000-step walk under the merged map (the
walk's entropy rate is 0: the place and the action determine the next observation). With ``--algorithm online`` the
first stage is online EM (``actions.learn_online``, ``--epochs`` passes in batches of ``--batch-size`` steps) instead
of batch EM; with ``--algorithm online-batch``, online EM then batch EM (the text recipe).

Recovery with the defaults (``--defaults``, issue 50): for each room and seed, a walk of ``--walk`` steps (50,000)
read back as ``chmm walk`` writes it, and the map ``chmm map`` learns from it with every default
(engine.cognitive.walks.MAP_DEFAULTS, the seed the walk's): ``--restarts`` restarts (the default's unless given), each
on the walk without its last 10%, the one whose map predicts that tail best refitted on the whole walk and merged
(engine.cognitive.restarts.best_of_restarts, what ``walks.learn_map`` calls); recovered = the map's clone graph
isomorphic to the room's grid graph. The rows give each restart's held-out bits per step and whether its own map
(learned without the tail) recovers the room, the restart kept, the minutes the map took on the wall clock (its
restarts as ``chmm map`` runs them: raced in threads, or in worker processes, as many at once as
``CHMM_RESTART_PROCESSES`` or the cores allow), its core-minutes (the CPU time of this process and its workers), the
restarts the race stopped, the load average, and the bits per step of a fresh 10,000-step walk under the map. The rooms:
the notebook's (rectangular, empty) and two of our own with walls and aliased observations (walled: the 5 x 7 room of
issue 50, doors: two rooms joined by a door). ``--first-seed`` starts the seeds elsewhere (so that several processes
share the seeds of a room), ``--jsonl`` appends each map's row as one JSON line as soon as it is learned.

Sparse: a map learned on the rectangular room (batch EM, Viterbi EM) keeps about one successor per clone and action;
the table gives the seconds of a likelihood and of an E-step over a fresh 50,000-step walk on the dense CPU engine
and on the sparse engine (the map's non-zeros, ``engine.backends.cpu.sparse.from_dense``), timed in turn, best of three,
with the two likelihoods.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe_machine  # noqa: E402

from engine.cognitive import (
    actions,  # noqa: E402
    maps,  # noqa: E402
)

RECTANGULAR = np.array(
    [
        [1, 2, 3, 0, 3, 1, 1, 1],
        [1, 1, 3, 2, 3, 2, 3, 1],
        [1, 1, 2, 0, 1, 2, 1, 0],
        [0, 2, 1, 1, 3, 0, 0, 2],
        [3, 3, 1, 0, 1, 0, 3, 0],
        [2, 1, 2, 3, 3, 3, 2, 0],
    ]
)
"""The public notebook's rectangular room: 6 x 8 cells, 4 observations."""


def empty_room(height: int = 6, width: int = 8) -> np.ndarray:
    """The notebook's empty room: one observation inside, one per wall, one per corner (9 in all)."""
    room = np.zeros((height, width), dtype=np.int64)
    room[0], room[-1], room[:, 0], room[:, -1] = 5, 6, 7, 8
    room[0, 0], room[0, -1], room[-1, 0], room[-1, -1] = 1, 2, 3, 4
    return room


WALLED = np.array(
    [
        [4, 0, 2, 4, 4, 0, 3],
        [4, 3, 2, 3, 2, 4, 1],
        [0, 1, -1, -1, -1, -1, 3],
        [4, 2, 3, 2, 1, 0, 1],
        [0, 1, 0, 0, 2, 1, 3],
    ]
)
"""Our 5 x 7 room with an interior wall of 4 cells (issue 50): 5 observations repeated over 31 cells (6 or 7 each,
placed by a random permutation, seed 50), two pairs of alike cells side by side."""

DOORS = np.array(
    [
        [3, 1, 2, -1, 2, 3, 1],
        [3, 1, 3, -1, 1, 0, 0],
        [1, 0, 0, 2, 0, 0, 3],
        [3, 1, 2, -1, 2, 2, 0],
    ]
)
"""Our two rooms joined by a door: 4 x 3 cells on each side of a wall with a door in its third row, 4 observations
over 25 cells (6 or 7 each, a random permutation, seed 51); the left room's top and bottom rows read alike."""

ROOMS = {"rectangular": RECTANGULAR, "empty": empty_room(), "walled": WALLED, "doors": DOORS}
NOTEBOOK_ROOMS = ["rectangular", "empty"]
CLONES = 70
PSEUDOCOUNT = 2e-3
WALK = 50_000


def load_reference(folder: Path) -> types.ModuleType:
    """``chmm_actions`` from a checkout of the paper's public code (tqdm stubbed when missing)."""
    try:
        importlib.import_module("tqdm")
    except ImportError:

        class _Loop:
            def __init__(self, n: int, **_: object) -> None:
                self.n = n

            def __iter__(self):  # noqa: ANN204
                return iter(range(self.n))

            def set_postfix(self, **_: object) -> None:
                pass

        stub = types.ModuleType("tqdm")
        stub.trange = _Loop  # type: ignore[attr-defined]
        sys.modules["tqdm"] = stub
    sys.path.insert(0, str(folder))
    return importlib.import_module("chmm_actions")


def side_by_side(reference: types.ModuleType, iterations: int, rounds: int) -> dict:
    walk = actions.generate_walk(RECTANGULAR, WALK, seed=0)
    x, a = walk.observations, walk.actions
    n_clones = np.full(int(RECTANGULAR.max()) + 1, CLONES, dtype=np.int64)
    short = slice(0, 1000)
    warm = reference.CHMM(n_clones=n_clones, x=x[short], a=a[short], pseudocount=PSEUDOCOUNT, seed=42)
    warm.learn_em_T(x[short], a[short], n_iter=2, term_early=False)  # compile the reference's numba functions
    actions.learn_em(actions.from_dense(warm.T, n_clones), x[short], a[short], 2, PSEUDOCOUNT, False)
    times: dict[str, list[float]] = {"reference": [], "ours": [], "ours, walk blocks": []}
    trajectories: dict[str, list[float]] = {}
    for _ in range(rounds):
        ref = reference.CHMM(n_clones=n_clones, x=x, a=a, pseudocount=PSEUDOCOUNT, seed=42)
        start_T, start_pi = ref.T.copy(), ref.Pi_x.copy()
        t0 = time.perf_counter()
        trajectories["reference"] = [float(v) for v in ref.learn_em_T(x, a, n_iter=iterations, term_early=False)]
        times["reference"].append((time.perf_counter() - t0) / iterations)
        ours = actions.from_dense(start_T, n_clones, pi=start_pi)
        t0 = time.perf_counter()
        _, trajectories["ours"] = actions.learn_em(ours, x, a, iterations, PSEUDOCOUNT, stop_when_worse=False)
        times["ours"].append((time.perf_counter() - t0) / iterations)
        walk_blocks = actions.from_dense(start_T, n_clones, pi=start_pi, triples=actions.triples_in_walk(x, a, 4))
        t0 = time.perf_counter()
        actions.learn_em(walk_blocks, x, a, iterations, PSEUDOCOUNT, stop_when_worse=False)
        times["ours, walk blocks"].append((time.perf_counter() - t0) / iterations)
    difference = np.abs(np.array(trajectories["ours"]) - np.array(trajectories["reference"]))
    print(f"\nside by side: rectangular room, {WALK:,}-step walk, {CLONES} clones per observation, {iterations} EM")
    print(f"iterations from the reference's start (seed 42), {rounds} interleaved rounds\n")
    print("| iteration | bits per step, reference | bits per step, ours | difference |")
    print("|---:|---:|---:|---:|")
    for n in range(iterations):
        ref_bits, our_bits = trajectories["reference"][n], trajectories["ours"][n]
        print(f"| {n + 1} | {ref_bits:.7f} | {our_bits:.7f} | {our_bits - ref_bits:+.1e} |")
    best = {name: min(values) for name, values in times.items()}
    print("\n| program | s per EM iteration (best of rounds) | speed-up over the reference |")
    print("|---|---:|---:|")
    for name, seconds in best.items():
        print(f"| {name} | {seconds:.3f} | {best['reference'] / seconds:.1f}x |")
    return {"times": times, "trajectories": trajectories, "max_difference": float(difference.max())}


def backends(names: list[str], iterations: int) -> list[dict]:
    """Batch EM on the rectangular room's walk on each backend from one start: seconds per iteration (after a
    warm-up) and the largest difference of bits per step from the first backend's trajectory."""
    walk = actions.generate_walk(RECTANGULAR, WALK, seed=0)
    x, a = walk.observations, walk.actions
    start = actions.random_action_model(np.full(4, CLONES, dtype=np.int64), x, a, seed=0)
    rows, first = [], None
    print(f"\n| backend | s per EM iteration ({iterations} iterations) | largest bits-per-step difference |")
    print("|---|---:|---:|")
    for name in names:
        actions.learn_em(start, x[:2000], a[:2000], 2, PSEUDOCOUNT, False, backend=name)  # compile, warm up
        t0 = time.perf_counter()
        _, history = actions.learn_em(start, x, a, iterations, PSEUDOCOUNT, False, backend=name)
        seconds = (time.perf_counter() - t0) / iterations
        first = history if first is None else first
        difference = float(np.max(np.abs(np.array(history) - np.array(first))))
        rows.append(dict(backend=name, seconds=seconds, difference=difference))
        print(f"| {name} | {seconds:.4f} | {difference:.1e} |", flush=True)
    return rows


def learned_on_sparse(em_iterations: int) -> dict:
    """A learned map's likelihood and E-step on the dense and the sparse engine (see the module docstring)."""
    from engine.backends import engines
    from engine.backends.cpu import sparse

    walk = actions.generate_walk(RECTANGULAR, WALK, seed=0)
    x, a = walk.observations, walk.actions
    model = actions.random_action_model(np.full(4, CLONES, dtype=np.int64), x, a, seed=0)
    model, _ = actions.learn_em(model, x, a, em_iterations, PSEUDOCOUNT)
    model, _ = actions.learn_viterbi(model, x, a, 100)
    test = actions.generate_walk(RECTANGULAR, WALK, seed=1)
    keys = actions.row_keys(test.observations, test.actions, model.n_symbols)
    dense_view = model.engine_view()
    views = {"dense": dense_view, "sparse": sparse.from_dense(dense_view)}
    best: dict[str, dict[str, float]] = {name: {"likelihood": np.inf, "e_step": np.inf} for name in views}
    likelihood: dict[str, float] = {}
    for _ in range(3):
        for name, view in views.items():
            engine = engines.engine_for(view, "cpu")
            state = engine.load(view)
            plan = engine.plan(state, test.observations, "em", len(test.observations), row_key=keys)
            engine.e_step(state, test.observations, plan=plan, row_key=keys)  # compile, warm up
            t0 = time.perf_counter()
            likelihood[name] = engine.e_step(state, test.observations, plan=plan, row_key=keys).log_likelihood
            best[name]["e_step"] = min(best[name]["e_step"], time.perf_counter() - t0)
            t0 = time.perf_counter()
            if name == "dense":
                actions.log_likelihood(model, test.observations, test.actions)
            else:
                sparse.log_likelihood(view, test.observations, row_key=keys)
            best[name]["likelihood"] = min(best[name]["likelihood"], time.perf_counter() - t0)
    stored = {name: int(np.asarray(view.T if name == "dense" else view.data).size) for name, view in views.items()}
    print(f"\n| engine | stored entries | s per likelihood | s per E-step | log-likelihood ({len(test)} steps) |")
    print("|---|---:|---:|---:|---:|")
    for name in views:
        print(f"| {name} | {stored[name]:,} | {best[name]['likelihood']:.4f} | {best[name]['e_step']:.4f} | "
              f"{likelihood[name]:.6f} |")  # fmt: skip
    return {"stored": stored, "seconds": best, "log_likelihood": likelihood}


def recovery(
    seeds: int, rooms: list[str], em_iterations: int, algorithm: str = "batch", epochs: int = 20, batch_size: int = 400
) -> list[dict]:
    rows = []
    print("\n| room | seed | EM iterations | Viterbi iterations | clones used | recovered | clones after merging | "
          "recovered after merging | held-out bits per step | seconds |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---|---:|---|---:|---:|")
    for name in rooms:
        room = ROOMS[name]
        n_clones = np.full(int(room.max()) + 1, CLONES, dtype=np.int64)
        for seed in range(seeds):
            t0 = time.perf_counter()
            walk = actions.generate_walk(room, WALK, seed=seed)
            x, a = walk.observations, walk.actions
            model = actions.random_action_model(n_clones, x, a, seed=seed)
            if algorithm in ("online", "online-batch"):
                model, em = actions.learn_online(model, x, a, epochs, batch_size, 0.9, PSEUDOCOUNT)
            if algorithm == "online-batch":
                model, batch = actions.learn_em(model, x, a, em_iterations, PSEUDOCOUNT)
                em = em + batch
            elif algorithm == "batch":
                model, em = actions.learn_em(model, x, a, em_iterations, PSEUDOCOUNT)
            model, hard = actions.learn_viterbi(model, x, a, 100)
            used = len(maps.used_clones(model))
            recovered = maps.recovers_room(model, x, a, room)
            merged, _ = maps.merge_equivalent_clones(model)
            merged_recovered = maps.recovers_room(merged, x, a, room)
            test = actions.generate_walk(room, 10_000, seed=1000 + seed)
            bits = actions.bits_per_step(merged, test.observations, test.actions)
            seconds = time.perf_counter() - t0
            rows.append(dict(room=name, seed=seed, em=len(em), viterbi=len(hard), used=used, recovered=recovered,
                             merged=merged.n_states, merged_recovered=merged_recovered, test_bits=bits,
                             seconds=seconds))  # fmt: skip
            print(f"| {name} ({int((room >= 0).sum())} cells) | {seed} | {len(em)} | {len(hard)} | {used} | "
                  f"{'yes' if recovered else 'no'} | {merged.n_states} | {'yes' if merged_recovered else 'no'} | "
                  f"{bits:.5f} | {seconds:.0f} |", flush=True)  # fmt: skip
    return rows


def _cpu_seconds() -> float:
    """The CPU seconds of this process (every thread) and of its children that have ended (restarts' worker
    processes): the core-minutes a map costs, whatever else the machine runs."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _map_row(name: str, seed: int, walk_length: int, restarts: int) -> dict:
    """One map of ``chmm map``'s defaults (``restarts`` restarts) from the walk of ``seed`` in room ``name``, and its
    figures (see the module docstring)."""
    from dataclasses import replace

    from engine.cognitive import restarts as map_restarts
    from engine.cognitive import walks

    room = ROOMS[name]
    walk = walks.parse_walk(walks.format_walk(actions.generate_walk(room, walk_length, seed=seed)), "the walk")
    x, a = walk.walks()
    options = replace(walks.MAP_DEFAULTS, seed=seed, restarts=restarts)
    n_clones = np.full(len(walk.symbols), options.clones, dtype=np.int64)
    last = {"at": time.perf_counter()}

    def progress(stage: str, iteration: int, bits: float, restart: int) -> None:
        if time.perf_counter() - last["at"] > 60:  # a line a minute: how far the shown restart is
            last["at"] = time.perf_counter()
            print(f"  {name} seed {seed} restart {restart + 1}: {stage} {iteration + 1} {bits:.4f}", flush=True)

    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    stopped = 0
    if restarts > 1:
        run, tried, kept, _ = map_restarts.best_of_restarts(
            x, a, n_clones, walk.symbols, walk.action_names, options, walks.MAP_HELD_OUT_SHARE, progress
        )
        cut = len(x) - sum(len(part) for part in map_restarts.hold_out_tail([(x, a)], walks.MAP_HELD_OUT_SHARE)[1])
        each = [
            dict(held_out=r.held_out_bits, recovered=maps.recovers_room(r.run.model, x[:cut], a[:cut], room),
                 em=r.run.em_iterations, minutes=r.seconds / 60)
            for r in tried
        ]  # fmt: skip
        kept_restart, stopped = kept.restart, sum(r.stopped is not None for r in tried)
    else:
        start = actions.random_action_model(n_clones, x, a, seed, walk.symbols, walk.action_names)
        stages = lambda stage: lambda i, bits: progress(stage, i, bits, 0)  # noqa: E731
        run, each, kept_restart = map_restarts.recipe(start, x, a, options, stages), [], 0
    wall, cpu = (time.perf_counter() - t0) / 60, (_cpu_seconds() - cpu0) / 60
    test = actions.generate_walk(room, 10_000, seed=1000 + seed)
    return dict(
        room=name, seed=seed, steps=walk_length, restarts=restarts, recovered=maps.recovers_room(run.model, x, a, room),
        kept=kept_restart, clones=run.model.n_states, em=run.em_iterations, each=each, minutes=wall,
        core_minutes=cpu, stopped=stopped, load=os.getloadavg()[0],
        test_bits=actions.bits_per_step(run.model, test.observations, test.actions),
    )  # fmt: skip


def recovery_with_defaults(
    seeds: range, rooms: list[str], walk_length: int, restarts: int, jsonl: Path | None = None
) -> list[dict]:
    """Recovery by ``chmm map``'s defaults (:func:`_map_row` for every room and seed): a row per map, as it is
    learned (and a JSON line in ``jsonl``), then per room the maps that recover it and the minutes per map."""
    rows = []
    print("\n| room | seed | restarts: held-out bits per step (own map recovers the room) | kept | recovered | "
          "clones | EM iterations (kept) | minutes (wall) | core-minutes (CPU) | stopped by the race | load | "
          "test bits per step |")  # fmt: skip
    print("|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for seed in seeds:  # every room's first seed first: a run cut short still covers each room
        for name in rooms:
            row = _map_row(name, seed, walk_length, restarts)
            rows.append(row)
            each = ", ".join(f"{r['held_out']:.5f} ({'yes' if r['recovered'] else 'no'})" for r in row["each"])
            print(f"| {name} ({int((ROOMS[name] >= 0).sum())} cells) | {seed} | {each or '-'} | {row['kept'] + 1} | "
                  f"{'yes' if row['recovered'] else 'no'} | {row['clones']} | {row['em']} | {row['minutes']:.1f} | "
                  f"{row['core_minutes']:.1f} | {row['stopped']} | {row['load']:.1f} | {row['test_bits']:.5f} |",
                  flush=True)  # fmt: skip
            if jsonl is not None:
                with jsonl.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(row, default=float) + "\n")
    print(
        "\n| room | recovered | restarts whose own map recovers it | minutes per map (wall): median, mean, most "
        "| core-minutes, median |"
    )
    print("|---|---:|---:|---:|---:|")
    for name in rooms:
        mine = [r for r in rows if r["room"] == name]
        own = [e["recovered"] for r in mine for e in r["each"]]
        minutes, core = [r["minutes"] for r in mine], [r["core_minutes"] for r in mine]
        print(
            f"| {name} | {sum(r['recovered'] for r in mine)} of {len(mine)} | {sum(own)} of {len(own)} | "
            f"{np.median(minutes):.1f}, {np.mean(minutes):.1f}, {max(minutes):.1f} | {np.median(core):.1f} |"
        )
    every = [r["minutes"] for r in rows]
    print(
        f"\nall maps: {sum(r['recovered'] for r in rows)} of {len(rows)} recovered, minutes per map median "
        f"{np.median(every):.1f}, most {max(every):.1f}"
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path, default=None, help="a checkout of vicariousinc/naturecomm_cscg")
    parser.add_argument("--iterations", type=int, default=10, help="EM iterations side by side")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds side by side")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per room for the recovery table (0: none)")
    parser.add_argument(
        "--rooms", nargs="+", choices=sorted(ROOMS), default=None,
        help="rooms to recover (default: the notebook's two; with --defaults all four)",
    )  # fmt: skip
    parser.add_argument("--defaults", action="store_true", help="recovery with chmm map's defaults (restarts)")
    parser.add_argument("--restarts", type=int, default=None, help="--defaults with this many restarts")
    parser.add_argument("--walk", type=int, default=WALK, help="--defaults: the walk's steps")
    parser.add_argument("--first-seed", type=int, default=0, help="--defaults: the first seed")
    parser.add_argument("--jsonl", type=Path, default=None, help="--defaults: append each map's row here")
    parser.add_argument("--em-iterations", type=int, default=1000, help="most EM iterations in the recovery")
    parser.add_argument("--backends", nargs="+", default=None, help="time batch EM on these backends (cpu gpu ...)")
    parser.add_argument("--sparse", action="store_true", help="a learned map on the dense and the sparse engine")
    parser.add_argument(
        "--algorithm", choices=("batch", "online", "online-batch"), default="batch", help="the recovery's first stage"
    )
    parser.add_argument("--epochs", type=int, default=20, help="online EM epochs (--algorithm online)")
    parser.add_argument("--batch-size", type=int, default=400, help="online EM batch, steps (--algorithm online)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    print("machine:", describe_machine())
    out: dict = {}
    if args.reference is not None:
        out["side_by_side"] = side_by_side(load_reference(args.reference), args.iterations, args.rounds)
    if args.backends:
        out["backends"] = backends(args.backends, args.iterations)
    if args.sparse:
        out["sparse"] = learned_on_sparse(args.em_iterations)
    if args.seeds and args.defaults:
        from engine.cognitive.walks import MAP_DEFAULTS

        restarts = MAP_DEFAULTS.restarts if args.restarts is None else args.restarts
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        out["defaults"] = recovery_with_defaults(seeds, args.rooms or list(ROOMS), args.walk, restarts, args.jsonl)
    elif args.seeds:
        out["recovery"] = recovery(
            args.seeds, args.rooms or NOTEBOOK_ROOMS, args.em_iterations, args.algorithm, args.epochs, args.batch_size
        )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()
