"""Benchmark: the memory and time of reading a walk file (`chmm map`'s first step), in a fresh process per checkout.

Writes a CSV walk of ``--steps`` random steps with places (about 11 bytes a step), then reads it with
``engine.cognitive.walks.read_walk`` of this checkout and, with ``--repository``, of another one (a worktree of the
code before a change), each in a fresh process: the resident memory the read adds at its peak (``ru_maxrss``) and its
seconds. Prints a table.

    python bench/bench_walks.py --steps 1500000 [--repository CHECKOUT]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from bench.machine import describe_machine  # noqa: E402

READ = (
    "import resource, sys, time\n"
    "from engine.cognitive import walks\n"
    "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "started = time.perf_counter()\n"
    "walk = walks.read_walk(sys.argv[1])\n"
    "seconds = time.perf_counter() - started\n"
    "print(len(walk.observations), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base, seconds)\n"
)


def write_walk(path: Path, steps: int) -> None:
    rng = np.random.default_rng(0)
    moves = np.array(["left", "right", "up", "down"])
    with open(path, "w", encoding="utf-8") as out:
        out.write("action,observation,row,column\n")
        for start in range(0, steps, 100_000):
            n = min(100_000, steps - start)
            a, o = moves[rng.integers(0, 4, n)], rng.integers(0, 30, n)
            r, c = rng.integers(0, 6, n), rng.integers(0, 8, n)
            out.write("".join(f"{a[i]},{o[i]},{r[i]},{c[i]}\n" for i in range(n)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_500_000)
    parser.add_argument("--repository", type=Path, help="another checkout to read the same walk with")
    args = parser.parse_args()
    print(describe_machine())
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "walk.csv"
        write_walk(path, args.steps)
        size = path.stat().st_size
        print(f"a walk of {args.steps:,} steps, {size / 1e6:,.1f} MB")
        print("| checkout | steps read | peak added MB | x the file | seconds |")
        print("|---|---:|---:|---:|---:|")
        for name, checkout in [("this", HERE)] + ([("other", args.repository)] if args.repository else []):
            environment = dict(os.environ, PYTHONPATH=str(checkout))
            done = subprocess.run([sys.executable, "-c", READ, str(path)], env=environment, capture_output=True,
                                  text=True, check=True, cwd=checkout)  # fmt: skip
            steps, added_kb, seconds = done.stdout.split()
            added = int(added_kb) * 1024
            print(f"| {name} ({checkout}) | {int(steps):,} | {added / 1e6:,.0f} | {added / size:.1f} | "
                  f"{float(seconds):.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
