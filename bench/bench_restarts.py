"""Benchmark: the text restarts of `chmm train` (worker processes, one core each) timed as a user runs them, whole
processes in turn: this checkout against another one (``--against``, say a worktree of the commit before a change)
and/or against this checkout under an environment setting (``--env``, say OPENBLAS_NUM_THREADS=1, which holds BLAS
to one thread for the whole process).

Each row is one `chmm train` configuration on carroll-alice.txt; each side runs it ``--repeats`` times, the sides
in turn (A B A B ...). The table gives, per side, the median seconds of an EM iteration (each restart's iterations
after its first, which includes compiling), the median wall-clock seconds of the whole process and its CPU seconds
(the process and its worker processes), the ratios against this checkout, and the kept restart's validation BPS
as the saved line gives it (which must agree across sides: the change is one of speed).

    python bench/bench_restarts.py --against /tmp/before
    python bench/bench_restarts.py --env OPENBLAS_NUM_THREADS=1 --only 1000x1 3000x1 5000x1
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import describe_machine  # noqa: E402

CORPUS = Path(os.environ.get("CHMM_CORPORA", ROOT.parent / "shared" / "corpora")) / "carroll-alice.txt"
CONFIGURATIONS = {  # name: (states, algorithm, restarts, iterations)
    "1000x2": (1000, "em", 2, 8),
    "3000x2": (3000, "em", 2, 4),
    "5000x2": (5000, "em", 2, 3),
    "1000x4-online": (1000, "online", 4, 3),
    "1000x1": (1000, "em", 1, 8),
    "3000x1": (3000, "em", 1, 4),
    "5000x1": (5000, "em", 1, 3),
}
RUNNER = "import sys; sys.path.insert(0, sys.argv.pop(1)); from engine.cli import main; sys.argv[0] = 'chmm'; main()"


def one_run(checkout: Path, env: dict[str, str], configuration: tuple[int, str, int, int]) -> dict:
    """One `chmm train` of ``configuration`` with ``checkout``'s engine: its iteration seconds, wall and CPU seconds
    and the kept restart's validation BPS."""
    states, algorithm, restarts, iterations = configuration
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-c", RUNNER, str(checkout), "train", str(CORPUS), "-o", f"{folder}/m.npz"]
        command += ["--states", str(states), "--algorithm", algorithm, "--restarts", str(restarts)]
        command += ["--iterations", str(iterations), "--pseudocount", "1e-4", "--no-refit", "--prune-bound", "0"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env}, cwd=folder)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"chmm train failed in {checkout}: {done.stderr.strip().splitlines()[-1:]}")
    lines = (done.stdout + "\n" + done.stderr).splitlines()
    iterations_s, first = [], True
    for line in lines:
        found = re.match(r"(?:iteration|epoch)\s+(\d+).*\((\d+\.\d+) s\)", line.strip())
        if found:
            if int(found.group(1)) > 1:
                iterations_s.append(float(found.group(2)))
            first = False
    saved = [line for line in lines if line.startswith("saved")]
    kept = float(re.search(r"validation (\d+\.\d+)", saved[0]).group(1)) if saved else float("nan")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert not first, f"no iteration lines in chmm train's output: {lines[:5]}"
    return {"iteration": statistics.median(iterations_s), "wall": wall, "cpu": cpu, "bps": kept}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, default=None, help="another checkout, run in turn with this one")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE: this checkout again, with it set")
    parser.add_argument("--only", nargs="+", default=["1000x2", "3000x2", "5000x2", "1000x4-online"],
                        choices=sorted(CONFIGURATIONS))  # fmt: skip
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    sides: list[tuple[str, Path, dict[str, str]]] = [("this", ROOT, {})]
    if args.against is not None:
        sides.append((args.against.name, args.against.resolve(), {}))
    if args.env:
        sides.append(("this, " + " ".join(args.env), ROOT, dict(item.split("=", 1) for item in args.env)))
    if len(sides) < 2:
        raise SystemExit("give --against a checkout or --env a setting to compare with")
    print(f"machine: {describe_machine()}; load {os.getloadavg()[0]:.1f} at the start")
    print(f"corpus: {CORPUS.name}; `chmm train --states S --algorithm A --restarts R --iterations I --pseudocount 1e-4"
          f" --no-refit --prune-bound 0`, {args.repeats} runs a side, the sides in turn; medians")  # fmt: skip
    head = " | ".join(f"{label}: s/iteration, wall s, CPU s" for label, _, _ in sides)
    ratios = " | ".join(f"{label} / this: iteration, wall, CPU" for label, _, _ in sides[1:])
    print(f"| configuration | {head} | {ratios} | kept validation BPS |")
    print("|---|" + "---:|" * (len(sides) + len(sides) - 1) + "---|")
    for name in args.only:
        runs: dict[str, list[dict]] = {label: [] for label, _, _ in sides}
        for _ in range(args.repeats):
            for label, checkout, env in sides:
                runs[label].append(one_run(checkout, env, CONFIGURATIONS[name]))
        median = {
            label: {key: statistics.median(r[key] for r in runs[label]) for key in ("iteration", "wall", "cpu")}
            for label in runs
        }
        cells = [f"{m['iteration']:.3f}, {m['wall']:.1f}, {m['cpu']:.1f}" for m in median.values()]
        ours = median["this"]
        rates = [
            ", ".join(f"{median[label][key] / ours[key]:.2f}" for key in ("iteration", "wall", "cpu"))
            for label, _, _ in sides[1:]
        ]
        bps = sorted({f"{r['bps']:.4f}" for rs in runs.values() for r in rs})
        print(f"| {name} | {' | '.join(cells)} | {' | '.join(rates)} | {', '.join(bps)} |", flush=True)
    print(f"load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
