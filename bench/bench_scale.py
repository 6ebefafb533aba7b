"""Benchmark: paper-scale CHMMs on the CPU (issue 8): wall time, peak memory, non-zeros and test BPS per schedule.

Each configuration is one ``chmm train ... --json`` run in its own process (so its peak RSS is its own), on a corpus
from ``$CHMM_CORPORA`` (default ../shared/corpora) with paper preprocessing:

- ``dense``: plain batch EM on dense blocks (what the engine does below 10,000 states);
- ``grow``: a dense model of a tenth of the states, pruned at 1e-3, its clones split up to the target and sparse
  batch EM after that (``--grow-from``; the default above 10,000 states on the CPU).

Both follow the paper's protocol as ``chmm train`` does by default: early stopping on validation (patience 2), then
the refit on training + validation text; pseudocount 1e-5.

    python bench/bench_scale.py                                   # the default rows below
    python bench/bench_scale.py --rows alice:3000:dense alice:3000:grow alice:30000:grow

Prints a table beside the paper's Table 4 (CHMM: alice 1.54, milton 1.73) and writes bench/out/scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe_machine  # noqa: E402

CORPORA = Path(os.environ.get("CHMM_CORPORA", ROOT.parent / "shared" / "corpora"))
NAMES = {"alice": "carroll-alice", "milton": "milton-paradise"}
PAPER = {"alice": 1.54, "milton": 1.73}
DEFAULT_ROWS = ["alice:1000:dense", "alice:1000:grow", "alice:3000:dense", "alice:3000:grow", "alice:30000:grow"]
"""Rows: corpus:states:schedule (``milton:30000:grow`` and ``alice:10000:grow`` run too, given the time)."""


def run(corpus: str, states: int, schedule: str, iterations: int, grow_iterations: int, patience: int) -> dict:
    """One training run; returns its --json figures plus wall time and peak RSS of the child process."""
    out = ROOT / "bench" / "out" / f"scale-{corpus}-{states}-{schedule}.npz"
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "engine.cli",
        "train",
        str(CORPORA / f"{NAMES[corpus]}.txt"),
        "-o",
        str(out),
        "--states",
        str(states),
        "--iterations",
        str(iterations),
        "--patience",
        str(patience),
        "--pseudocount",
        "1e-5",
        "--json",
        "--quiet",
    ]
    if schedule == "grow":
        command += ["--grow-from", str(states // 10), "--grow-iterations", str(grow_iterations)]
    else:
        command += ["--grow-from", "0"]
    started = time.perf_counter()
    # GNU time reports this child's own peak RSS (getrusage of all children would carry an earlier row's peak)
    done = subprocess.run(
        ["/usr/bin/time", "-f", "maxrss_kb=%M", *command], cwd=ROOT, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    lines = [line for line in done.stderr.splitlines() if line.startswith("maxrss_kb=")]
    peak = int(lines[-1].split("=")[1]) if lines else 0
    if done.returncode != 0:
        return {"corpus": corpus, "states": states, "schedule": schedule, "error": done.stderr.strip()[-300:]}
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["grow"] = figures.pop("schedule", None)  # the run's record of its dense stage, if grown
    return {
        **figures,
        "corpus": corpus,
        "states": states,
        "schedule": schedule,
        "seconds": seconds,
        "peak_rss_gib": peak / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="*", default=DEFAULT_ROWS, help="corpus:states:dense|grow")
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--grow-iterations", type=int, default=15)
    parser.add_argument("--patience", type=int, default=2, help="iterations without a better validation BPS")
    args = parser.parse_args()
    rows = []
    for spec in args.rows:
        corpus, states, schedule = spec.split(":")
        row = run(corpus, int(states), schedule, args.iterations, args.grow_iterations, args.patience)
        rows.append(row)
        print(json.dumps(row), flush=True)
    (ROOT / "bench" / "out" / "scale.json").write_text(json.dumps(rows, indent=1))
    print(f"\nmachine: {describe_machine()}")
    print("| corpus | states | schedule | wall s | peak RSS GiB | stored transitions | test BPS | paper (Table 4) |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        if "error" in r:
            print(f"| {r['corpus']} | {r['states']:,} | {r['schedule']} | failed: {r['error']} | | | | |")
            continue
        nonzeros = r.get("nonzeros")
        print(
            f"| {r['corpus']} | {r['states']:,} | {r['schedule']} | {r['seconds']:.0f} | {r['peak_rss_gib']:.2f} | "
            f"{nonzeros if nonzeros is not None else 'dense'} | {r['test_bps']:.3f} | {PAPER[r['corpus']]:.2f} |"
        )


if __name__ == "__main__":
    main()
