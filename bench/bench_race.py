"""Benchmark: restarts of a map that race (engine.cognitive.restarts) against restarts that all run to the end.

    python bench/bench_race.py record --walk 10000 --seeds 2 --out bench/race_trajectories.jsonl
    python bench/bench_race.py rules --out bench/race_trajectories.jsonl
    python bench/bench_race.py compare --walk 10000 --seeds 1 --first-seed 0 --rooms walled doors
    python bench/bench_race.py blas --walk 10000 --rooms empty

record: for each room of bench_rooms.py and seed, the walk ``chmm map`` would read (``--walk`` steps), and every
restart of the defaults (engine.cognitive.walks.MAP_DEFAULTS, the seed the walk's) run to the end as without the
race: batch EM stopped when worse, in segments of ``--every`` iterations (the same iterations as one run), the
held-out tail's bits per step under the EM model after each segment; at the first iteration where each plateau
candidate (window W, gain g: the head's bits per step improved by less than g over W iterations) would stop EM, the
Viterbi EM and merging from that model, its held-out bits and whether it recovers the room; then the same at the end
of EM. One JSON line per restart, restarts in ``--processes`` worker processes.

rules: the race rules evaluated offline on those trajectories (the restarts in lockstep, one score each
``every`` iterations): for each rule, the maps where it would stop the restart the full run keeps (lowest held-out
bits after Viterbi EM, the first of equals) and those where the map it keeps has worse held-out bits than that one,
whether the kept map recovers the room, the share of EM iterations it saves; and the plateau candidates' recovery
and iterations. The rules: "margin" (stop a racer past the grace more than ``margin`` bits per step above the
leader), "relative" (more than ``margin`` times the leader's above it), "halving" (successive
halving from the grace on), "catch" (behind the leader by more than it gained over the last ``margin`` iterations),
"relative+catch" (either; ``window`` iterations for catch: the engine's rule).

compare: the map of each room and seed learned with the race (the defaults) and without it
(``MapOptions(race=False)``), the two in turn (interleaved), minutes on the wall clock and CPU minutes (this process's
threads and the restarts' worker processes: less sensitive to what else the machine runs), the map recovered or not,
the restart kept, how many the race stopped and the EM iterations of all restarts; the load average beside.

blas: batch EM's milliseconds per iteration with BLAS on its own threads and on one, one restart and two at once in
threads (:func:`blas`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_rooms import ROOMS  # noqa: E402

from engine.cognitive import actions, maps, restarts, walks  # noqa: E402

PLATEAUS = [(100, 1e-2), (100, 3e-3), (100, 1e-3), (100, 3e-4), (200, 1e-3)]
"""The plateau candidates recorded: (window W in iterations, gain g relative to the bits per step: EM ends when
b(t - W) - b(t) < g b(t), :func:`engine.cognitive.restarts.on_plateau`)."""

ABSOLUTE = (100, 3e-5)
"""The absolute plateau chosen at 10,000 steps before (b(t - W) - b(t) < g bits), recorded beside them as "abs"."""


def _absolute(history: list[float]) -> bool:
    window, gain = ABSOLUTE
    return len(history) > window and history[-1 - window] - history[-1] < gain


def room_walk(name: str, seed: int, length: int) -> walks.WalkFile:
    """The walk of ``seed`` in room ``name`` as ``chmm walk`` writes it and ``chmm map`` reads it."""
    return walks.parse_walk(walks.format_walk(actions.generate_walk(ROOMS[name], length, seed=seed)), "the walk")


def _finish(em_model: actions.ActionCHMM, head: tuple, tail: tuple, room: np.ndarray, options) -> dict:
    """Viterbi EM and merging from ``em_model`` on the head: its held-out bits and whether it recovers the room."""
    learned, hard = actions.learn_viterbi(em_model, *head, options.viterbi_iterations, 0.0)
    merged, _ = maps.merge_equivalent_clones(learned)
    held = actions.bits_per_step(merged, *tail)
    return dict(held_out=float(held) if np.isfinite(held) else None, viterbi=len(hard),
                recovered=bool(maps.recovers_room(merged, *head, room)))  # fmt: skip


def record_restart(name: str, seed: int, length: int, restart: int, every: int) -> dict:
    """One restart of the defaults run to the end, its trajectory recorded (see the module docstring)."""
    with restarts.one_blas_thread():
        return _record_restart(name, seed, length, restart, every)


def _record_restart(name: str, seed: int, length: int, restart: int, every: int) -> dict:
    walk = room_walk(name, seed, length)
    x, a = walk.walks()
    head_walks, tail_walks = restarts.hold_out_tail([(x, a)], walks.MAP_HELD_OUT_SHARE)
    head, tail = head_walks[0], tail_walks[0]
    options = replace(walks.MAP_DEFAULTS, seed=seed, plateau_window=0)
    n_clones = np.full(len(walk.symbols), options.clones, dtype=np.int64)
    began = time.perf_counter()
    model = actions.random_action_model(n_clones, x, a, seed + restart, walk.symbols, walk.action_names)
    history: list[float] = []
    checkpoints, probes, ended = [], {}, False
    while not ended:
        model, ended = restarts.em_segment(model, *head, options, history, every)
        checkpoints.append([len(history), float(actions.bits_per_step(model, *tail))])
        for window, gain in [*PLATEAUS, ABSOLUTE]:
            key = f"{window},{gain:g}" if (window, gain) != ABSOLUTE else f"abs{window},{gain:g}"
            probe = replace(options, plateau_window=window, plateau_gain=gain)
            settled = _absolute(history) if key.startswith("abs") else restarts.on_plateau(history, probe)
            if key not in probes and (ended or settled):
                probes[key] = dict(iteration=len(history), **_finish(model, head, tail, ROOMS[name], options))
    final = _finish(model, head, tail, ROOMS[name], options)
    return dict(room=name, seed=seed, steps=length, restart=restart, every=every, em=len(history),
                history=history, tail=checkpoints, plateaus=probes, final=final,
                minutes=(time.perf_counter() - began) / 60)  # fmt: skip


def record(args: argparse.Namespace) -> None:
    """Every restart of every room and seed recorded, one JSON line each to ``args.out`` as it ends."""
    jobs = [(name, seed, args.walk, r, args.every) for seed in range(args.seeds) for name in args.rooms
            for r in range(walks.MAP_DEFAULTS.restarts)]  # fmt: skip
    print(f"# {len(jobs)} restarts, {args.processes} processes, load {os.getloadavg()[0]:.2f}", flush=True)
    with ProcessPoolExecutor(args.processes) as pool, open(args.out, "a") as out:
        for line in pool.map(record_restart, *zip(*jobs, strict=True)):
            out.write(json.dumps(line) + "\n")
            out.flush()
            print(f"{line['room']} seed {line['seed']} restart {line['restart']}: EM {line['em']}, held out "
                  f"{line['final']['held_out']}, recovered {line['final']['recovered']}, "
                  f"{line['minutes']:.2f} min, load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip


def load_maps(path: Path) -> dict[tuple[str, int], list[dict]]:
    """The recorded restarts grouped by map (room, seed), only the maps whose every restart was recorded."""
    grouped: dict[tuple[str, int], list[dict]] = {}
    for text in path.read_text().splitlines():
        line = json.loads(text)
        grouped.setdefault((line["room"], line["seed"]), []).append(line)
    want = walks.MAP_DEFAULTS.restarts
    return {k: sorted(v, key=lambda r: r["restart"]) for k, v in grouped.items() if len(v) == want}


def _ending(line: dict, plateau: str | None) -> tuple[int, dict]:
    """Where a recorded restart's EM ends (stop when worse, or the ``plateau`` candidate) and its map then."""
    return (line["em"], line["final"]) if plateau is None else (line["plateaus"][plateau]["iteration"],
                                                                line["plateaus"][plateau])  # fmt: skip


def _score(line: dict, iteration: int) -> float:
    """The recorded tail bits per step at the last checkpoint at or before ``iteration``."""
    return max((c for c in line["tail"] if c[0] <= iteration), key=lambda c: c[0], default=[0, np.inf])[1]


def held(end: dict) -> float:
    """A map's held-out bits per step (infinite when it gives the tail probability 0)."""
    return np.inf if end["held_out"] is None else end["held_out"]


def simulate(lines: list[dict], rule: dict, plateau: str | None) -> dict:
    """The race of a recorded map under ``rule`` (kind "margin": stop a racer past ``grace`` iterations more than
    ``margin`` bits per step above the leader, "relative": more than ``margin`` times the leader's bits above it,
    "halving": at ``grace`` x 2^k iterations the worse half of the racers in EM stopped), the racers in lockstep
    one score each ``every`` iterations: the restart kept, the restarts stopped, the EM iterations run."""
    ends = [_ending(line, plateau) for line in lines]
    ran = [0] * len(lines)
    stopped: set[int] = set()
    t, halving = 0, rule["grace"]
    while any(ran[r] < ends[r][0] for r in range(len(lines)) if r not in stopped):
        t += rule["every"]
        ran = [ran[r] if r in stopped else min(t, ends[r][0]) for r in range(len(lines))]
        scores = {r: _score(lines[r], ran[r]) for r in range(len(lines)) if r not in stopped
                  and (ran[r] < ends[r][0] or np.isfinite(held(ends[r][1])))}  # fmt: skip
        if not scores:
            break
        best = min(scores.values())
        in_em = [r for r in scores if ran[r] < ends[r][0] and ran[r] >= rule["grace"]]
        if rule["kind"] == "halving":
            if t >= halving and len(in_em) > 1:
                halving *= 2
                stopped |= set(sorted(in_em, key=lambda r: scores[r])[(len(in_em) + 1) // 2 :])
            continue
        if rule["kind"] in ("catch", "relative+catch"):  # behind by more than it gained over the last window
            window = int(rule.get("window", rule["margin"]))
            stopped |= {r for r in in_em if scores[r] > best and ran[r] >= window
                        and _score(lines[r], ran[r] - window) - scores[r] < scores[r] - best}  # fmt: skip
            if rule["kind"] == "catch":
                continue
        bar = best + rule["margin"] if rule["kind"] == "margin" else best * (1 + rule["margin"])
        stopped |= {r for r in in_em if scores[r] > bar}
    finished = [r for r in range(len(lines)) if r not in stopped]
    best = min(held(ends[r][1]) for r in finished)
    revived = {r for r in stopped if rule.get("revive") and _score(lines[r], ran[r]) < best}
    for r in revived:  # the engine's revive: a racer stopped in EM whose tail score beats the best finished map
        ran[r] = ends[r][0]
    stopped -= revived
    finished = [r for r in range(len(lines)) if r not in stopped]
    kept = min(finished, key=lambda r: (held(ends[r][1]), r))
    end = ends[kept][1]
    return dict(kept=kept, stopped=stopped, ran=sum(ran), recovered=end["recovered"], held=held(end), revived=revived)


RULES = (
    [dict(kind="margin", every=25, grace=g, margin=m) for g in (50, 100, 200) for m in (0.005, 0.02, 0.1)]
    + [dict(kind="relative", every=25, grace=g, margin=m) for g in (50, 100, 200) for m in (0.1, 0.25, 0.5, 1.0)]
    + [dict(kind="halving", every=25, grace=g, margin=0) for g in (50, 100, 200)]
    + [dict(kind="catch", every=25, grace=g, margin=w) for g in (200, 300) for w in (50, 100)]
    + [dict(kind="relative+catch", every=25, grace=g, margin=1.0, window=w) for g in (100, 200) for w in (100, 200)]
    + [dict(kind="relative", every=25, grace=g, margin=m, revive=True) for g in (50, 100, 200) for m in (0.25, 1.0)]
    + [dict(kind="halving", every=25, grace=g, margin=0, revive=True) for g in (50, 100, 200)]
)


def rules(args: argparse.Namespace) -> None:
    """The offline tables: the plateau candidates, then every race rule with and without the chosen plateau."""
    recorded = load_maps(args.out)
    print(f"# {len(recorded)} maps of {walks.MAP_DEFAULTS.restarts} restarts: {sorted(recorded)}\n")
    print("| EM stops | restarts recovered | maps recovered (kept) | kept = full run's | EM iterations (share) |")
    print("|---|---|---|---|---|")
    alone_rule = dict(kind="margin", every=10, grace=10**9, margin=0)  # no racer ever stopped: the full run
    full_kept = {k: simulate(v, alone_rule, None) for k, v in recorded.items()}
    total = sum(line["em"] for v in recorded.values() for line in v)
    recorded_plateaus = set.intersection(*(set(line["plateaus"]) for v in recorded.values() for line in v))
    for plateau in [None, *sorted(recorded_plateaus)]:  # those of PLATEAUS and ABSOLUTE (an older file: its own)
        ends = [_ending(line, plateau) for v in recorded.values() for line in v]
        alone = {k: simulate(v, alone_rule, plateau) for k, v in recorded.items()}
        print(f"| {plateau or 'when worse'} | {sum(e[1]['recovered'] for e in ends)}/{len(ends)} | "
              f"{sum(a['recovered'] for a in alone.values())}/{len(alone)} | "
              f"{sum(alone[k]['kept'] == full_kept[k]['kept'] for k in alone)}/{len(alone)} | "
              f"{sum(e[0] for e in ends)} ({sum(e[0] for e in ends) / total:.0%}) |")  # fmt: skip
    for plateau in (None, args.plateau):
        print(f"\n## race rules, EM {'stopped when worse' if plateau is None else 'on plateau ' + plateau}\n")
        print("| rule | every | grace | margin | maps where it stops the full run's kept | maps where it keeps a worse "
              "map (held-out bits) | kept recovers | "
              "restarts stopped | EM iterations (share of the full run's) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for rule in RULES:
            out = {k: simulate(v, rule, plateau) for k, v in recorded.items()}
            lost = sum(full_kept[k]["kept"] in out[k]["stopped"] for k in out)
            ran = sum(o["ran"] for o in out.values())
            worse = sum(out[k]["held"] > full_kept[k]["held"] * (1 + 1e-6) for k in out)
            margin = f"{rule['margin']}" + (f" / window {rule['window']}" if "window" in rule else "")
            kind = rule["kind"] + (" + revive" if rule.get("revive") else "")
            print(f"| {kind} | {rule['every']} | {rule['grace']} | {margin} | {lost}/{len(out)} | "
                  f"{worse}/{len(out)} | "
                  f"{sum(o['recovered'] for o in out.values())}/{len(out)} | "
                  f"{sum(len(o['stopped']) for o in out.values())} | {ran} ({ran / total:.0%}) |")  # fmt: skip


def _cpu_seconds() -> float:
    """The CPU seconds of this process (every thread) and of its children that have ended (the restarts' worker
    processes): what a map costs whatever else the machine runs."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _learn(walk: walks.WalkFile, options: walks.MapOptions, room: np.ndarray) -> dict:
    """One map of ``options`` from ``walk``: minutes on the wall clock, recovered, the restart kept, stopped."""
    began, cpu = time.perf_counter(), _cpu_seconds()
    model, summary = walks.learn_map(walk, options)
    minutes, cpu_minutes = (time.perf_counter() - began) / 60, (_cpu_seconds() - cpu) / 60
    lines = summary["restarts"]
    return dict(minutes=minutes, cpu_minutes=cpu_minutes,
                recovered=bool(maps.recovers_room(model, walk.observations, walk.actions, room)),
                kept=summary["kept_restart"], stopped=summary.get("restarts_stopped", 0),
                em=sum(line["em_iterations"] for line in lines), load=os.getloadavg()[0])  # fmt: skip


def compare(args: argparse.Namespace) -> None:
    """Each room and seed's map with the race (the defaults) and without it, in turn, as a table."""
    print("| room | seed | without: minutes (CPU) | recovered | kept | EM iterations | with the race: minutes (CPU) "
          "| recovered | kept | stopped | EM iterations | ratio (CPU) | load |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for name in args.rooms:
            walk = room_walk(name, seed, args.walk)
            base = replace(walks.MAP_DEFAULTS, seed=seed)
            pair = {}
            for label in (("without", "with") if (seed + len(rows)) % 2 == 0 else ("with", "without")):
                chosen = {"race": True} if label == "with" else {"race": False}
                pair[label] = _learn(walk, replace(base, **chosen), ROOMS[name])
            off, on = pair["without"], pair["with"]
            rows.append(dict(room=name, seed=seed, without=off, race=on))
            print(f"| {name} | {seed} | {off['minutes']:.2f} ({off['cpu_minutes']:.2f}) | {off['recovered']} | "
                  f"{off['kept']} | {off['em']} | {on['minutes']:.2f} ({on['cpu_minutes']:.2f}) | {on['recovered']} | "
                  f"{on['kept']} | {on['stopped']} | {on['em']} | {on['minutes'] / off['minutes']:.2f} "
                  f"({on['cpu_minutes'] / off['cpu_minutes']:.2f}) | {off['load']:.1f}, {on['load']:.1f} |",
                  flush=True)  # fmt: skip
    total = [sum(r[k]["minutes"] for r in rows) for k in ("without", "race")]
    cpu = [sum(r[k]["cpu_minutes"] for r in rows) for k in ("without", "race")]
    print(f"\nCPU minutes per map: without {cpu[0] / len(rows):.2f}, with the race {cpu[1] / len(rows):.2f}")
    print(f"\nminutes per map: without {total[0] / len(rows):.2f}, with the race {total[1] / len(rows):.2f} "
          f"(ratio {total[1] / total[0]:.2f}); recovered {sum(r['without']['recovered'] for r in rows)}/{len(rows)} "
          f"without, {sum(r['race']['recovered'] for r in rows)}/{len(rows)} with")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def blas(args: argparse.Namespace) -> None:
    """Batch EM on a walk (``--rooms``' first, ``--walk`` steps), ``--iterations`` iterations, with BLAS on its own
    threads (NumPy's default) and on one (:func:`engine.cognitive.restarts.one_blas_thread`): one restart, then two
    restarts at once in threads (as the race runs them); the configurations in turn for ``--rounds`` rounds, wall and
    CPU milliseconds per iteration of one restart (two at once: per iteration of each), medians."""
    from threadpoolctl import threadpool_info, threadpool_limits

    walk = room_walk(args.rooms[0], 0, args.walk)
    x, a = walk.walks()
    options = walks.MAP_DEFAULTS
    n_clones = np.full(len(walk.symbols), options.clones, dtype=np.int64)
    starts = [actions.random_action_model(n_clones, x, a, s, walk.symbols, walk.action_names) for s in range(2)]
    actions.learn_em(starts[0], x, a, 2, options.pseudocount)  # compiled

    def em(model: actions.ActionCHMM) -> None:
        actions.learn_em(model, x, a, args.iterations, options.pseudocount, stop_when_worse=False)

    def timed(restarts_at_once: int, one: bool) -> tuple[float, float]:
        with threadpool_limits(1, "blas") if one else threadpool_limits(None):
            wall, cpu = time.perf_counter(), time.process_time()
            if restarts_at_once == 1:
                em(starts[0])
            else:
                with ThreadPoolExecutor(2) as pool:
                    list(pool.map(em, starts))
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        per = 1000 / args.iterations
        return wall * per, cpu * per / restarts_at_once

    blas_threads = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    print(f"# {args.rooms[0]}, {args.walk} steps, {int(n_clones.sum())} clones, BLAS threads by default "
          f"{blas_threads}, load {os.getloadavg()[0]:.2f}\n")  # fmt: skip
    configs = [(1, False), (1, True), (2, False), (2, True)]
    seen: dict[tuple[int, bool], list[tuple[float, float]]] = {c: [] for c in configs}
    for _ in range(args.rounds):
        for config in configs:
            seen[config].append(timed(*config))
    print("| restarts at once | BLAS | wall ms per iteration | CPU ms per iteration of a restart |")
    print("|---|---|---:|---:|")
    for (at_once, one), times in seen.items():
        wall, cpu = np.median([t[0] for t in times]), np.median([t[1] for t in times])
        print(f"| {at_once} | {'one thread' if one else 'its own threads'} | {wall:.1f} | {cpu:.1f} |")
    for at_once in (1, 2):
        ratio = np.median([t[0] for t in seen[(at_once, False)]]) / np.median([t[0] for t in seen[(at_once, True)]])
        print(f"\n{at_once} at once: its own threads / one thread, wall: {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["record", "rules", "compare", "blas"])
    parser.add_argument("--iterations", type=int, default=40, help="blas: EM iterations per timing")
    parser.add_argument("--rounds", type=int, default=3, help="blas: rounds of the configurations in turn")
    parser.add_argument("--walk", type=int, default=10_000)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--rooms", nargs="+", choices=sorted(ROOMS), default=list(ROOMS))
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "race_trajectories.jsonl")
    parser.add_argument("--json", type=Path, default=None, help="compare: the rows written here as JSON")
    parser.add_argument("--plateau", default="100,0.0001", help="the plateau candidate (W,g) of the second rule table")
    args = parser.parse_args()
    {"record": record, "rules": rules, "compare": compare, "blas": blas}[args.what](args)


if __name__ == "__main__":
    main()
