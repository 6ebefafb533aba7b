"""Benchmark: training on the support. Where sparse (CSR) blocks pay against dense blocks on a pruned model.

A trained model is pruned at several thresholds (:func:`engine.model.pruning.prune`: entries below the threshold
set to zero, all-zero blocks dropped, EM keeps the zeros), and one batch-EM iteration (E-step and M-step) over its
training text is timed on the dense engine (the pruned layout's kept blocks, zeros included) and on the sparse engine
(:mod:`engine.backends.cpu.sparse`: the non-zero entries in CSR form), interleaved, best of ``--repeats``. Prints the
entries each one stores, the seconds and their ratio, and the training BPS each iteration measured (equal to
float32 rounding: the two engines compute the same counts).

    python bench/bench_support.py --model brown5000.npz --corpus chesterton-brown [--thresholds 1e-5 1e-4 1e-3]
    python bench/bench_support.py --settling --corpus chesterton-brown --states 3000 --pseudocount 1e-4

``--settling`` trains a new model by online EM and prints, after online EM and after each of 8 batch-EM iterations,
the validation cost of pruning at 1e-3, 1e-4 and 1e-5 (the rule of :mod:`engine.training.thresholds`, each threshold
alone); then batch EM from the online model to its early stop on every stored entry and on the support at 1e-5 and
1e-4 (seconds per iteration, best validation BPS).

The training text is ``CHMM_CORPORA/CORPUS.txt`` (default ../shared/corpora) split as ``chmm train`` splits it with
the defaults (the model's alphabet must be the corpus's). Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe_machine  # noqa: E402

from engine.backends.cpu import sparse  # noqa: E402
from engine.backends.model_files import load_model  # noqa: E402
from engine.corpora import text  # noqa: E402
from engine.model import pruning  # noqa: E402
from engine.training import learning  # noqa: E402

CORPORA = Path(os.environ.get("CHMM_CORPORA", ROOT.parent / "shared" / "corpora"))


def iteration_seconds(model, x: np.ndarray, repeats: int) -> tuple[float, float]:
    """The best of ``repeats`` timed batch-EM iterations of ``model`` over ``x`` (pseudocount 1e-6), and the training
    BPS the E-step measured."""
    config = learning.TrainingConfig(iterations=1, pseudocount=1e-6)
    best, bps = float("inf"), float("nan")
    for _ in range(repeats):
        started = time.perf_counter()
        _, log_likelihood = learning.em_iteration(model, x, config)
        best = min(best, time.perf_counter() - started)
        bps = -log_likelihood / len(x) / np.log(2)
    return best, bps


def settling(corpus_name: str, states: int, pseudocount: float) -> None:
    """The ``--settling`` measurements (see the module docstring)."""
    from dataclasses import replace

    from engine.training import stages
    from engine.training.options import TrainOptions
    from engine.training.thresholds import choose_threshold, sequences_bps

    options = TrainOptions(states=states, pseudocount=pseudocount, restarts=1)
    corpus = stages.prepare_training_corpus(text.read_text(CORPORA / f"{corpus_name}.txt"), options, corpus_name, None)
    config = options.training_config()
    started = time.perf_counter()
    online = learning.fit(
        stages.initial_model_for(corpus, options), corpus.train_parts, corpus.validation_parts, config, backend="cpu"
    )
    validation = corpus.validation_parts
    print(f"{corpus_name}, {states:,} states, pseudocount {pseudocount:g}: online EM {len(online.history)} epochs, "
          f"{time.perf_counter() - started:.0f} s")  # fmt: skip
    batch = replace(config, algorithm="em")
    model = online.model
    for iteration in range(8):
        costs = []
        for threshold in (1e-3, 1e-4, 1e-5):
            tried = choose_threshold(model, validation, 1.0, "cpu", (threshold,)).tried[0]
            kept = np.count_nonzero(pruning.prune(model, threshold=threshold).T) / np.count_nonzero(model.T)
            costs.append(f"{threshold:g}: {tried['cost']:+.4f} ({kept:.1%} kept)")
        bps = sequences_bps(model, validation, "cpu")
        print(f"after {iteration} batch iterations: validation {bps:.4f}; " + "; ".join(costs), flush=True)
        model = learning.fit(model, corpus.train_parts, None, replace(batch, iterations=1, tolerance=None)).model
    print("\n| batch EM from the online model | iterations | s per iteration | best validation BPS |")
    print("|---|---:|---:|---:|")
    for threshold in (None, 1e-5, 1e-4):
        start = (
            online.model if threshold is None else sparse.from_dense(pruning.prune(online.model, threshold=threshold))
        )
        began = time.perf_counter()
        result = learning.fit(start, corpus.train_parts, validation, batch, backend="cpu")
        seconds = (time.perf_counter() - began) / max(len(result.history), 1)
        stored = len(start.data) if threshold is not None else int(np.count_nonzero(start.T))
        where = "every stored entry" if threshold is None else f"on the support at {threshold:g}"
        best = min(r.validation_bps for r in result.history)
        print(f"| {where} ({stored:,}) | {len(result.history)} | {seconds:.2f} | {best:.4f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a trained model (not with --settling)")
    parser.add_argument("--corpus", required=True, help="the corpus file's stem in CHMM_CORPORA")
    parser.add_argument("--settling", action="store_true", help="train a model and measure when its support settles")
    parser.add_argument("--states", type=int, default=3000, help="--settling: states")
    parser.add_argument("--pseudocount", type=float, default=1e-4, help="--settling: pseudocount")
    parser.add_argument("--thresholds", type=float, nargs="*", default=[1e-5, 1e-4, 3e-4, 1e-3])
    parser.add_argument("--symbols", type=int, default=100_000, help="the first N training symbols (0: all)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if args.settling:
        settling(args.corpus, args.states, args.pseudocount)
        return
    if args.model is None:
        parser.error("--model is needed (or --settling)")
    model = load_model(args.model)
    corpus = text.prepare_corpus(text.read_text(CORPORA / f"{args.corpus}.txt"), name=args.corpus)
    if list(corpus.symbols) != list(model.symbols):
        raise SystemExit(f"{args.model} was not trained on {args.corpus} with the default split (other alphabet)")
    x = np.ascontiguousarray(corpus.train_full[: args.symbols or None], dtype=np.int64)
    learning.em_iteration(model, x[:2000], learning.TrainingConfig(iterations=1))  # compile the kernels
    learning.em_iteration(sparse.from_dense(model), x[:2000], learning.TrainingConfig(iterations=1))
    print(describe_machine())
    print(f"model {args.model.name}: {model.n_states:,} states; {len(x):,} training symbols of {args.corpus}")
    print()
    print(
        "| threshold | non-zeros kept | dense entries (kept blocks) | dense s | sparse s | dense / sparse "
        "| BPS dense / sparse |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    nonzeros = int(np.count_nonzero(model.T))
    for threshold in [0.0, *args.thresholds]:
        pruned = model if threshold == 0 else pruning.prune(model, threshold=threshold)
        as_csr = sparse.from_dense(pruned)
        dense_s, dense_bps = iteration_seconds(pruned, x, args.repeats)
        sparse_s, sparse_bps = iteration_seconds(as_csr, x, args.repeats)
        kept = len(as_csr.data)
        print(
            f"| {threshold:g} | {kept:,} ({kept / nonzeros:.1%}) | {pruned.layout.size:,} "
            f"({pruned.layout.size / model.layout.size:.1%}) | {dense_s:.2f} | {sparse_s:.2f} | "
            f"{dense_s / sparse_s:.2f}x | {dense_bps:.4f} / {sparse_bps:.4f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
