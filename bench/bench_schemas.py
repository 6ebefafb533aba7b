"""Benchmark: schemas, the layout of a new room recognised among stored maps (issue 50, item 5;
engine.cognitive.schemas).

    python bench/bench_schemas.py                      # 10 trials against true maps and against learned maps
    python bench/bench_schemas.py --trials 20 --library true

The library holds three maps of rooms with 12, 12 and 10 cells and 3 aliased observations (a 3 x 4 square, a 2 x 6
corridor, a 3 x 4 ring around a wall block): either each room's true map (one clone per cell,
``schemas.map_of_room``) or a map learned from a 20,000-step walk in it by ``chmm map``'s recipe (``api.maps.learn_map``
with ``--clones`` per observation, batch EM then Viterbi EM, merged; restarts as ``chmm map`` defaults them). Each
trial picks one of the three layouts at random, repaints its cells with 4 new observations at random (not a
relabelling: new aliasing), walks ``--walk`` steps in it and asks ``schemas.match_schemas`` which stored map the walk
follows (emissions fitted on the walk's first 80%, held-out bits per step on the rest). Goal: the right map in at
least 9 of 10 trials.
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

from engine import api  # noqa: E402
from engine.cognitive import actions, maps, schemas, walks  # noqa: E402

LAYOUTS = {
    "square": np.array([[0, 1, 2, 0], [1, 2, 0, 1], [2, 0, 1, 2]]),
    "corridor": np.array([[0, 1, 2, 0, 1, 2], [2, 0, 1, 2, 0, 1]]),
    "ring": np.array([[0, 1, 2, 0], [1, -1, -1, 1], [2, 0, 1, 2]]),
}


def learned_map(room: np.ndarray, clones: int, seed: int) -> actions.ActionCHMM:
    """A map learned from a 20,000-step walk in ``room`` by ``chmm map``'s recipe with ``clones`` per observation."""
    walk = actions.generate_walk(room, 20_000, seed=seed)
    names = [str(v) for v in range(int(room.max()) + 1)]
    file = walks.WalkFile(walk.observations, walk.actions, names, list(actions.MOVES), walk.positions)
    options = api.maps.MapOptions(clones=clones, seed=seed)
    model, _ = api.maps.learn_map(file, options)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--walk", type=int, default=3_000)
    parser.add_argument("--iterations", type=int, default=50, help="EM iterations fitting each map's emissions")
    parser.add_argument("--clones", type=int, default=10, help="clones per observation of the learned maps")
    parser.add_argument("--library", nargs="+", choices=["true", "learned"], default=["true", "learned"])
    args = parser.parse_args()
    print(describe_machine())
    for kind in args.library:
        t0 = time.perf_counter()
        if kind == "true":
            library = {name: schemas.map_of_room(room) for name, room in LAYOUTS.items()}
        else:
            library = {name: learned_map(room, args.clones, seed) for seed, (name, room) in enumerate(LAYOUTS.items())}
        built = time.perf_counter() - t0
        recovered = {
            name: maps.recovers_room(library[name], *_walk(room, 2_000, 99), room) for name, room in LAYOUTS.items()
        }
        print(f"\nlibrary of {kind} maps ({built:.0f} s): clones {[m.n_states for m in library.values()]}, "
              f"recovers its room {recovered}")  # fmt: skip
        print("| trial | layout | chosen | held-out bits/step: square / corridor / ring | margin | seconds |")
        print("|---:|---|---|---|---:|---:|")
        rng = np.random.default_rng(2026)
        right = 0
        for trial in range(args.trials):
            name = list(LAYOUTS)[int(rng.integers(len(LAYOUTS)))]
            room = LAYOUTS[name]
            repainted = np.where(room >= 0, rng.integers(4, size=room.shape), -1)
            x, a = _walk(repainted, args.walk, 100 + trial)
            t0 = time.perf_counter()
            fits = schemas.match_schemas(library, x, a, 4, args.iterations, seed=trial)
            seconds = time.perf_counter() - t0
            by_name = {f.name: f.held_out_bits for f in fits}
            right += fits[0].name == name
            print(f"| {trial} | {name} | {fits[0].name} | "
                  f"{' / '.join(f'{by_name[n]:.4f}' for n in LAYOUTS)} | "
                  f"{fits[1].held_out_bits - fits[0].held_out_bits:.4f} | {seconds:.1f} |", flush=True)  # fmt: skip
        print(f"\n{kind} maps: the right layout in {right} of {args.trials} trials")


def _walk(room: np.ndarray, length: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    walk = actions.generate_walk(room, length, seed=seed)
    return walk.observations, walk.actions


if __name__ == "__main__":
    main()
