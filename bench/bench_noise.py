"""Benchmark: cognitive maps learned through a noisy sensor (issue 50, item 4; engine.cognitive.evidence).

    python bench/bench_noise.py                                   # both rooms, noise 0 / 0.05 / 0.1 / 0.2, 3 seeds
    python bench/bench_noise.py --rooms aliased --seeds 2 --noise 0 0.2

For each room, noise level and seed: a walk in the room (``--walk`` steps) read by a symmetric noisy sensor
(``evidence.noisy_readings``: wrong with probability ``noise``, the soft evidence 1 - noise on the reading and
noise / (E - 1) on each other symbol), and two maps learned from the same random starts by ``chmm map --noise``'s
recipe (``evidence.learn_map_through_noise``: ``--restarts`` starts, each learning from the walk without its tail,
the one best on the tail kept and learned again on the whole walk; batch EM up to ``--iterations`` with pseudocount
``--pseudocount``, stopped when the bits per step stop improving by 1e-5, then up to 20 Viterbi-EM iterations; the
clones with the same future merged):

- **soft**: from the soft evidence;
- **as read**: from the readings taken as true (``--noise 0`` on the readings: the evidence of a sensor without
  noise on what it read), which is what a learner without soft evidence does with a noisy sensor.

Each map is judged on a fresh clean walk of 5,000 steps: recovered when the clone graph of its MAP path, self-loops
aside, is the room's grid graph (``maps.recovers_room``), and its bits per step there (0 would be a perfect map: the
place and the action determine the next observation). Seconds are each learner's, on this machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe_machine  # noqa: E402

from engine.cognitive import actions, evidence, maps  # noqa: E402

ROOMS = {
    "aliased": (np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1]]), 6),
    "rectangular": (
        np.array(
            [
                [1, 2, 3, 0, 3, 1, 1, 1],
                [1, 1, 3, 2, 3, 2, 3, 1],
                [1, 1, 2, 0, 1, 2, 1, 0],
                [0, 2, 1, 1, 3, 0, 0, 2],
                [3, 3, 1, 0, 1, 0, 3, 0],
                [2, 1, 2, 3, 3, 3, 2, 0],
            ]
        ),
        20,
    ),
}
"""Rooms by name, with the clones per observation: a 3 x 3 room of 3 observations, each seen in 3 cells (twice the
clones it needs), and the
public notebook's rectangular 6 x 8 room of 4 observations (20 clones each here, the notebook's 70 being more than a
dense soft-evidence pass needs for 48 cells)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rooms", nargs="+", choices=sorted(ROOMS), default=list(ROOMS))
    parser.add_argument("--noise", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.2])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--walk", type=int, default=20_000)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--pseudocount", type=float, default=1e-3)
    parser.add_argument("--restarts", type=int, default=4, help="random starts, the best on the held-out tail kept")
    args = parser.parse_args()
    print(describe_machine())
    print(f"walk {args.walk:,} steps; EM up to {args.iterations} iterations, pseudocount {args.pseudocount:g}; "
          f"Viterbi EM up to 20; {args.restarts} restarts")  # fmt: skip
    print("\n| room | noise | seed | read wrong | soft: recovered | soft: clean bits/step | soft s "
          "| as read: recovered "
          "| as read: clean bits/step | as read s |")  # fmt: skip
    print("|---|---:|---:|---:|---|---:|---:|---|---:|---:|")
    totals: dict[tuple[str, float, str], int] = {}
    for name in args.rooms:
        room, clones = ROOMS[name]
        E = int(room.max()) + 1
        for noise in args.noise:
            for seed in range(args.seeds):
                walk = actions.generate_walk(room, args.walk, seed=seed)
                readings = evidence.noisy_readings(walk.observations, E, noise, seed=100 + seed)
                test = actions.generate_walk(room, 5_000, seed=1000 + seed)
                cells = []
                names = [str(v) for v in range(E)]
                for label, sensor_noise in (("soft", noise), ("as read", 0.0)):
                    t0 = time.perf_counter()
                    learned, _ = evidence.learn_map_through_noise(
                        readings.symbols, walk.actions, names, list(actions.MOVES), sensor_noise, clones,
                        args.iterations, args.pseudocount, 20, seed=seed, restarts=args.restarts,
                    )  # fmt: skip
                    seconds = time.perf_counter() - t0
                    recovered = maps.recovers_room(learned, test.observations, test.actions, room)
                    bits = actions.bits_per_step(learned, test.observations, test.actions)
                    totals[(name, noise, label)] = totals.get((name, noise, label), 0) + int(recovered)
                    cells.append(f"{'yes' if recovered else 'no'} | {bits:.4f} | {seconds:.0f}")
                wrong = float(np.mean(readings.symbols != walk.observations))
                print(f"| {name} | {noise:g} | {seed} | {wrong:.1%} | {cells[0]} | {cells[1]} |", flush=True)
    print("\n| room | noise | soft: recovered | as read: recovered |")
    print("|---|---:|---:|---:|")
    for name in args.rooms:
        for noise in args.noise:
            print(f"| {name} | {noise:g} | {totals[(name, noise, 'soft')]} of {args.seeds} | "
                  f"{totals[(name, noise, 'as read')]} of {args.seeds} |")  # fmt: skip


if __name__ == "__main__":
    main()
