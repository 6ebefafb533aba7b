"""Benchmark: training on the support. Where sparse (CSR) blocks pay against dense blocks on a pruned model.

A trained model is pruned at several thresholds (:func:`engine.model.pruning.prune`: entries below the threshold
set to zero, all-zero blocks dropped, EM keeps the zeros), and one batch-EM iteration (E-step and M-step) over its
training text is timed on the dense engine (the pruned layout's kept blocks, zeros included) and on the sparse engine
(:mod:`engine.backends.cpu.sparse`: the non-zero entries in CSR form), interleaved, best of ``--repeats``. Prints the
entries each one stores, the seconds and their ratio, and the training BPS each iteration measured (equal to
float32 rounding: the two engines compute the same counts).

    python bench/bench_support.py --model brown5000.npz --corpus chesterton-brown [--thresholds 1e-5 1e-4 1e-3]

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--corpus", required=True, help="the corpus file's stem in CHMM_CORPORA")
    parser.add_argument("--thresholds", type=float, nargs="*", default=[1e-5, 1e-4, 3e-4, 1e-3])
    parser.add_argument("--symbols", type=int, default=100_000, help="the first N training symbols (0: all)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
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
