"""Benchmark: bits per symbol reached by the learners, through the `chmm` command line and on the paper's toy FSM.

Table 1: `chmm train carroll-alice.txt ... --json` (paper normalisation, early stopping on the validation share,
refit on training + validation as the paper does) for the learner settings below; test BPS against the targets
(1.62 at 1,000 states, 1.56 at 3,000) and the reference numba implementation (1.673 / 1.564 uniform after 50 EM
iterations, 1.633 with the n-gram rule at 1,000 states).

Table 2: the toy FSM with k holes (paper section 4.1.1, Table 1): training sizes of the paper, 2 clones per noise
symbol (+1 for k = 4), online EM (batches of 400, lambda 0.9) and batch EM, five seeds each; held-out BPS on a fresh
20,000-symbol sample against the optimum (k + 1) / (3k).

    python bench/bench_bps.py [--skip-text] [--skip-toy]
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CORPUS = Path(os.environ.get("CHMM_CORPORA", ROOT.parent / "shared" / "corpora")) / "carroll-alice.txt"

TEXT_RUNS = [
    # (states, allocation, algorithm, extra arguments, target)
    (1000, "uniform", "em", ["--pseudocount", "1e-6"], None),
    (1000, "ngram", "em", ["--pseudocount", "1e-3"], 1.62),
    (1000, "ngram", "online", ["--batch-size", "2000", "--pseudocount", "1e-3"], 1.62),
    (3000, "ngram", "em", ["--pseudocount", "1e-5", "--iterations", "150"], 1.56),
    (3000, "ngram", "online", ["--batch-size", "2000", "--pseudocount", "1e-5"], 1.56),
]


def text_table() -> None:
    print("| states | alloc   | learner | settings | iterations (refit) | validation | test BPS | target | seconds |")
    print("|-------:|---------|---------|----------|-------------------:|-----------:|---------:|-------:|--------:|")
    with tempfile.TemporaryDirectory() as folder:
        for states, method, algorithm, extra, target in TEXT_RUNS:
            command = [
                sys.executable,
                "-m",
                "engine.cli",
                "train",
                str(CORPUS),
                "-o",
                str(Path(folder) / "m.npz"),
                "--states",
                str(states),
                "--allocation",
                method,
                "--algorithm",
                algorithm,
                "--json",
                "--quiet",
            ] + extra
            if "--iterations" not in extra:
                command += ["--iterations", "100"]
            output = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT).stdout
            r = json.loads(output.strip().splitlines()[-1])
            settings = " ".join(a.lstrip("-") for a in extra)
            verdict = "-" if target is None else f"{target} {'ok' if r['test_bps'] <= target else 'MISSED'}"
            print(
                f"| {states:>6} | {method:<7} | {algorithm:<7} | {settings} | "
                f"{r['iterations']} ({r['refit_iterations']}) "
                f"| {r['validation_bps']:.4f} | {r['test_bps']:.4f} | {verdict} | {r['seconds']:.0f} |",
                flush=True,
            )


def toy_table(seeds: int = 5) -> None:
    from engine.backends.cpu import inference
    from engine.model import synthetic
    from engine.model.blocks import pairs_in_sequence
    from engine.model.dense import random_model
    from engine.training import learning

    print("| k | train size | clones | learner | held-out BPS per seed | best | optimal | epochs/iterations | s/run |")
    print("|--:|-----------:|-------:|---------|-----------------------|-----:|--------:|------------------:|------:|")
    for k in (2, 3, 4):
        size = synthetic.TOY_FSM_TRAINING_SIZES[k]
        n_clones = synthetic.toy_fsm_clones(k, synthetic.TOY_FSM_PAPER_EXTRA_CLONES[k])
        n_symbols = synthetic.toy_fsm_n_symbols(k)
        for algorithm in ("online", "em"):
            scores, iterations, seconds = [], [], []
            for seed in range(seeds):
                rng = np.random.default_rng(seed)
                train = synthetic.toy_fsm_sequence(k, size, rng)
                test = synthetic.toy_fsm_sequence(k, 20_000, rng)
                model = random_model(
                    [str(s) for s in range(n_symbols)], n_clones, pairs_in_sequence(train, n_symbols), rng, np.float64
                )
                config = learning.TrainingConfig(
                    algorithm=algorithm,
                    iterations=1000 if algorithm == "em" else 400,
                    batch_size=400,
                    memory=0.9,
                    tolerance=1e-6 if algorithm == "em" else 0.0,
                )
                started = time.perf_counter()
                result = learning.fit(model, train, None, config)
                seconds.append(time.perf_counter() - started)
                scores.append(inference.score(result.model, test).bps)
                iterations.append(len(result.history))
            print(
                f"| {k} | {size} | {int(n_clones.sum())} | {algorithm} | {' '.join(f'{s:.3f}' for s in scores)} | "
                f"{min(scores):.3f} | {synthetic.toy_fsm_optimal_bps(k):.3f} | {np.mean(iterations):.0f} | "
                f"{np.mean(seconds):.1f} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-text", action="store_true")
    parser.add_argument("--skip-toy", action="store_true")
    args = parser.parse_args()
    if not args.skip_text:
        if not CORPUS.is_file():
            sys.exit(f"corpus not found: {CORPUS} (set CHMM_CORPORA)")
        text_table()
        print()
    if not args.skip_toy:
        toy_table()


if __name__ == "__main__":
    main()
