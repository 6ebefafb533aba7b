"""Benchmark: batch-EM speed, forward-pass speed, memory and bits per symbol on carroll-alice.txt.

Prints a table (states, allocation, symbols, seconds per EM iteration, seconds per forward pass, peak RSS,
train/test BPS after the EM iterations, speed-up against the reference numba implementation of the paper's
authors, and achieved multiply-adds per second). Each configuration runs in its own process so that its peak
RSS is its own.

    python bench/bench_em.py                      # the issue's six configurations, 50 EM iterations each
    python bench/bench_em.py --quick              # fewer iterations, no 10,000-state row
    python bench/bench_em.py --counts             # also compare the count accumulation methods (gemm / loop)
    python bench/bench_em.py --quick --against ../before --repeats 3 --only 1000 3000
                                                  # this checkout against another one (e.g. a worktree of the
                                                  # commit before a change): each configuration runs in both,
                                                  # interleaved, and the table gives ours / theirs

The reference figures (its own numba code on this kind of 2-core machine, float32, the same number of clones
for every symbol, 118,788 training symbols) are quoted in the engine issue: 0.126 / 0.76 / ~8 s per EM
iteration and 0.029 / 0.073 / 0.68 s per forward pass at 270 / 1,000 / 3,000 states, ~90 s per iteration at
10,000 states; test BPS after 50 EM iterations 1.976 / 1.673 / 1.564 (uniform) and, at 1,000 states, 1.652
(frequency) and 1.633 (n-gram).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe_machine  # noqa: E402

CORPUS = Path(os.environ.get("CHMM_CORPORA", ROOT.parent / "shared" / "corpora")) / "carroll-alice.txt"
REFERENCE_ITERATION = {270: 0.126, 1000: 0.76, 3000: 8.0, 10000: 90.0}
REFERENCE_FORWARD = {270: 0.029, 1000: 0.073, 3000: 0.68}
CONFIGURATIONS = [
    (270, "uniform"),
    (1000, "uniform"),
    (3000, "uniform"),
    (1000, "ngram"),
    (3000, "ngram"),
    (10000, "ngram"),
]
TRAIN_SYMBOLS = 118_788  # the reference's training text: the first 90% of the normalised corpus


def run_one(states: int, method: str, iterations: int, count_method: str) -> dict:
    """Train one configuration in this process and return its figures."""
    from engine.backends.cpu import inference
    from engine.corpora import allocation, text
    from engine.model.blocks import pairs_in_sequence
    from engine.model.dense import random_model
    from engine.training import learning

    try:  # the implementation's own options (since the engine registry); older checkouts took them in the config
        from engine.backends.cpu.implementation import DenseOptions

        config_options: dict = {}
        fit_options: dict = {"options": DenseOptions(count_method=count_method)}
    except ImportError:
        config_options, fit_options = {"count_method": count_method}, {}

    corpus = text.prepare_corpus(text.read_text(CORPUS), "paper", validation=0.0)
    train = corpus.train[:TRAIN_SYMBOLS]
    # order 3: the n-gram rows of this table have always used 3-grams (kept so that figures compare across runs)
    n_clones = allocation.allocate_clones(train, corpus.n_symbols, states, method, ngram_order=3)
    model = random_model(corpus.symbols, n_clones, pairs_in_sequence(train, corpus.n_symbols), np.random.default_rng(0))
    # compile the kernels outside the timings
    inference.e_step(model, train[:2000], count_method=count_method)
    inference.forward(model, train[:2000])
    config = learning.TrainingConfig(iterations=iterations, tolerance=0.0, **config_options)
    result = learning.fit(model, train, None, config, **fit_options)
    seconds = [r.seconds for r in result.history]
    per_iteration = float(np.median(seconds[1:] if len(seconds) > 1 else seconds))
    trained = result.model
    forward_times = []
    for _ in range(3):
        started = time.perf_counter()
        inference.forward(trained, train)
        forward_times.append(time.perf_counter() - started)
    step_macs = float(np.sum(n_clones[train[:-1]] * n_clones[train[1:]]))
    uniform = allocation.allocate_clones(train, corpus.n_symbols, states, "uniform")
    uniform_macs = float(np.sum(uniform[train[:-1]] * uniform[train[1:]]))
    return {
        "states": states,
        "allocation": method,
        "count_method": count_method,
        "symbols": int(len(train)),
        "iterations": len(result.history),
        "seconds_per_iteration": per_iteration,
        "seconds_per_forward": float(min(forward_times)),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "train_bps": inference.score(trained, train).bps,
        "test_bps": inference.score(trained, corpus.test).bps,
        "forward_macs": step_macs,
        "uniform_macs": uniform_macs,
        "blocks": trained.layout.n_blocks,
        "transition_entries": trained.layout.size,
    }


def _child(states: int, method: str, iterations: int, count_method: str, checkout: Path = ROOT) -> dict:
    """One configuration in its own process, with the code of ``checkout`` (this one, or another for --against)."""
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    env["PYTHONPATH"] = str(checkout)
    script = checkout / "bench" / "bench_em.py"
    command = [sys.executable, str(script), "--child", str(states), method, str(iterations), count_method]
    output = subprocess.run(command, env=env, check=True, capture_output=True, text=True, cwd=checkout).stdout
    return json.loads(output.strip().splitlines()[-1])


def _compare(configurations: list[tuple[int, str]], iterations: int, other: Path, repeats: int) -> None:
    """Each configuration in this checkout and in ``other``, interleaved (ours, theirs, ours, theirs...), and the
    medians of seconds per EM iteration and per forward pass with their ratio ours / theirs (a shared machine
    drifts: pairs taken close in time compare fairly)."""
    print(f"ours: {ROOT}  theirs: {other.resolve()}  ({repeats} interleaved runs each)")
    print(
        "| states | alloc    | s/iter ours | s/iter theirs | ratio | s/fwd ours | s/fwd theirs | ratio | "
        "test BPS ours | test BPS theirs |\n|-------:|----------|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for states, method in configurations:
        ours, theirs = [], []
        for _ in range(repeats):
            ours.append(_child(states, method, iterations, "gemm"))
            theirs.append(_child(states, method, iterations, "gemm", other))

        def median(rows: list[dict], key: str) -> float:
            return float(np.median([r[key] for r in rows]))

        it_o, it_t = median(ours, "seconds_per_iteration"), median(theirs, "seconds_per_iteration")
        fw_o, fw_t = median(ours, "seconds_per_forward"), median(theirs, "seconds_per_forward")
        print(
            f"| {states:>6} | {method:<8} | {it_o:.4f} | {it_t:.4f} | {it_o / it_t:.3f} | {fw_o:.4f} | {fw_t:.4f} | "
            f"{fw_o / fw_t:.3f} | {ours[0]['test_bps']:.6f} | {theirs[0]['test_bps']:.6f} |",
            flush=True,
        )


def _row(r: dict) -> str:
    # The reference figures are for uniform allocation; other allocations do more multiply-adds per step (n-gram:
    # about 2.2x), so their reference time is scaled by the ratio of work.
    work = r["forward_macs"] / r.get("uniform_macs", r["forward_macs"])
    ref_iteration = REFERENCE_ITERATION.get(r["states"], 0.0) * work
    ref_forward = REFERENCE_FORWARD.get(r["states"], 0.0) * work
    speedup_iteration = f"{ref_iteration / r['seconds_per_iteration']:.1f}x" if ref_iteration else "-"
    speedup_forward = f"{ref_forward / r['seconds_per_forward']:.1f}x" if ref_forward else "-"
    em_rate = 3 * r["forward_macs"] / r["seconds_per_iteration"] / 1e9
    forward_rate = r["forward_macs"] / r["seconds_per_forward"] / 1e9
    return (
        f"| {r['states']:>6} | {r['allocation']:<8} | {r['count_method']:<5} | {r['symbols']:>7} | "
        f"{r['seconds_per_iteration']:>8.4f} | {speedup_iteration:>6} | {em_rate:>6.1f} | "
        f"{r['seconds_per_forward']:>8.4f} | {speedup_forward:>6} | {forward_rate:>6.1f} | "
        f"{r['peak_rss_mb']:>7.0f} | {r['iterations']:>3} | {r['train_bps']:.3f} | {r['test_bps']:.3f} |"
    )


HEADER = (
    "| states | alloc    | count | symbols | s/iter   | vs ref | GMAC/s | s/fwd    | vs ref | GMAC/s | RSS MB "
    "| it  | train | test  |\n"
    "|-------:|----------|-------|--------:|---------:|-------:|-------:|---------:|-------:|-------:|-------:"
    "|----:|------:|------:|"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", nargs=4, metavar=("STATES", "ALLOCATION", "ITERATIONS", "COUNTS"))
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="10 iterations, no 10,000-state configuration")
    parser.add_argument("--counts", action="store_true", help="also time the per-step count accumulation")
    parser.add_argument("--only", type=int, nargs="+", default=None, help="run only configurations of these states")
    parser.add_argument("--against", type=Path, default=None, help="another checkout to compare with, interleaved")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs per configuration with --against")
    args = parser.parse_args()
    if args.child:
        states, method, iterations, count_method = args.child
        print(json.dumps(run_one(int(states), method, int(iterations), count_method)))
        return
    if not CORPUS.is_file():
        sys.exit(f"corpus not found: {CORPUS} (set CHMM_CORPORA to the folder holding carroll-alice.txt)")
    iterations = 10 if args.quick else args.iterations
    configurations = [c for c in CONFIGURATIONS if not (args.quick and c[0] > 3000)]
    if args.only:
        configurations = [c for c in configurations if c[0] in args.only]
    print(f"machine: {describe_machine()}")
    print(f"corpus: {CORPUS.name}, paper normalisation, float32, batch EM, {iterations} iterations, random init seed 0")
    if args.against is not None:
        _compare(configurations, iterations, args.against, args.repeats)
        return
    print(HEADER)
    for states, method in configurations:
        for count_method in ("gemm", "loop") if args.counts else ("gemm",):
            print(_row(_child(states, method, iterations, count_method)), flush=True)
    print(
        "vs ref: reference time / ours. The reference ran uniform allocation; for n-gram rows its time is scaled by "
        "the ratio of multiply-adds per step (n-gram / uniform, about 2.2). GMAC/s: multiply-adds per second, "
        "counting 3 M_i*M_j per step for an EM iteration (forward, backward, counts) and 1 for a forward pass."
    )


if __name__ == "__main__":
    main()
