"""Benchmark: the recurrent peer's cells and sizes on one corpus (the measurement behind its defaults): each setting
trained on the corpus's training part with validation stopping it (no refit), one after the other, and its epochs,
seconds per epoch, best validation BPS and test BPS.

    python bench/bench_rnn.py [--corpus carroll-alice] [--minutes 5] [--settings gru:256:2:0.3 lstm:256:2:0.3]

A setting is CELL:UNITS:LAYERS:DROPOUT.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import describe_machine  # noqa: E402
from engine import api  # noqa: E402

CORPORA = Path(os.environ.get("CHMM_CORPORA", Path(__file__).resolve().parents[2] / "shared" / "corpora"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="carroll-alice")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--settings", nargs="*", default=["gru:256:2:0.3", "lstm:256:2:0.3"])
    args = parser.parse_args()
    corpus = api.corpora.prepare_corpus((CORPORA / f"{args.corpus}.txt").read_text(encoding="utf-8"), max_train=750_000)
    print(describe_machine())
    print("| cell, layers x units, dropout | epochs | s / epoch | best validation BPS | test BPS | seconds |")
    print("|---|---:|---:|---:|---:|---:|")
    for setting in args.settings:
        cell, units, layers, dropout = setting.split(":")
        options = {"cell": cell, "hidden": int(units), "layers": int(layers), "dropout": float(dropout)}
        learner = api.make_learner("rnn", **options, minutes=args.minutes, epochs=1000)
        started = time.perf_counter()
        learner.fit(corpus.train, corpus.n_symbols, corpus.validation)
        test = float(-np.mean(np.log2(learner.predictive(corpus.test))))
        best = min(h["validation_bps"] for h in learner.history)
        per_epoch = learner.history[-1]["seconds"] / len(learner.history)
        print(
            f"| {cell.upper()} {layers} x {units}, {dropout} | {len(learner.history)} | {per_epoch:.1f} | {best:.4f} "
            f"| {test:.4f} | {time.perf_counter() - started:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
