"""The plain command on every corpus: ``chmm train CORPUS -o m.npz`` with the defaults (the recipe: online EM then
batch EM, states and pseudocount chosen on validation within the default budget, refit), its test BPS and minutes
beside our Kneser-Ney n-gram (on the same split, as ``chmm train`` reports it) and the paper's CHMM (Table 4).

    python bench/bench_defaults.py [--only carroll-alice shakespeare-macbeth] [--budget MINUTES] [--backend gpu]

Each corpus runs ``python -m engine.cli train`` in a subprocess, one after another (run it alone on the machine: the
search's budget is wall-clock time). Prints one table row per corpus as it finishes, and keeps each corpus's JSON
summary (the search's candidates, the reason for the choice) in ``bench/out/defaults-CORPUS.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe_machine  # noqa: E402

CORPORA = Path(os.environ.get("CHMM_CORPORA", ROOT.parent / "shared" / "corpora"))
PAPER_CHMM = {
    "blake-poems": 1.60,
    "shakespeare-macbeth": 1.69,
    "carroll-alice": 1.54,
    "shakespeare-hamlet": 1.63,
    "milton-paradise": 1.73,
    "calgary-book1": 1.63,
    "melville-moby_dick": 1.72,
    "war-and-peace": 1.59,
}
"""The paper's Table 4 (30,000-state CHMM); the other corpora are not in the paper."""
OUT = ROOT / "bench" / "out"
"""Where each corpus's JSON summary goes (its search's candidates and the reason for the choice)."""


def run(corpus: Path, budget: float | None, backend: str | None = None) -> dict:
    """``chmm train`` with the defaults on ``corpus`` (on ``backend`` when given): its JSON summary plus the
    wall-clock minutes."""
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "engine.cli", "train", str(corpus), "-o", str(Path(folder) / "m.npz")]
        command += ["--json", "--quiet"] + (["--budget", str(budget)] if budget is not None else [])
        command += ["--backend", backend] if backend is not None else []
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        minutes = (time.perf_counter() - started) / 60
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"minutes": minutes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="corpus file stems (default: every .txt in CHMM_CORPORA)")
    parser.add_argument("--budget", type=float, default=None, help="the search's budget (default: the engine's)")
    parser.add_argument("--backend", help="chmm train's --backend (default: its own default)")
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the JSON summaries (default bench/out)")
    args = parser.parse_args()
    corpora = sorted(CORPORA.glob("*.txt"), key=lambda p: p.stat().st_size)
    if args.only:
        corpora = [p for p in corpora if p.stem in args.only]
    print(describe_machine())
    extra = ("" if args.budget is None else f" --budget {args.budget:g}") + (
        "" if args.backend is None else f" --backend {args.backend}"
    )
    print(f"command: chmm train CORPUS -o m.npz{extra}")
    print()
    print(
        "| corpus | states | pseudocount | test BPS | our KN n-gram | CHMM - n-gram | paper CHMM | minutes | expected |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    args.out.mkdir(parents=True, exist_ok=True)
    for corpus in corpora:
        row = run(corpus, args.budget, args.backend)
        (args.out / f"defaults-{corpus.stem}.json").write_text(json.dumps(row, indent=1))  # the search and its reason
        if "error" in row:
            print(f"| {corpus.stem} | error: {row['error']} | | | | | | | |", flush=True)
            continue
        ngram = row["ngram"]["test_bps"]
        paper = PAPER_CHMM.get(corpus.stem)
        print(
            f"| {corpus.stem} | {row['states']:,} | {row.get('pseudocount', float('nan')):g} | {row['test_bps']:.3f} "
            f"| {ngram:.3f} | {row['test_bps'] - ngram:+.3f} | {'' if paper is None else f'{paper:.2f}'} "
            f"| {row['minutes']:.1f} | {row.get('expected_minutes') or float('nan'):.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
