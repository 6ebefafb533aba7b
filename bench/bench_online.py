"""Benchmark: online EM's update after each batch, written once over the protocol
(engine.training.learning.online_update) against the dense CPU engine's own exact update (DenseEngine.online_session:
the lazy update of engine.backends.cpu.implementation.LazyOnlineUpdate), which online EM runs where an engine offers
one. Whether that override is worth keeping is this table's question.

Each row trains the same random start on carroll-alice.txt (paper normalisation, the reference's 118,788 training
symbols) for a few online-EM epochs with the automatic batch size, once with the engine's own update and once with
it switched off (the generic update: A = lambda A + (1 - lambda) xi in place, then the M-step), in alternating
order (own, generic, own, generic...), and prints the median seconds per epoch, their ratio and the training BPS of
each (they agree up to rounding: the update is the same recursion).

    python bench/bench_online.py [--states 1000 3000] [--epochs 3] [--repeats 3]
    python bench/bench_online.py --against ../before [--states 1000 3000]   # this checkout against another
    python bench/bench_online.py --against ../before --corpus calgary-book1.txt --symbols 600000 \
        --allocation ngram --states 3000 --epochs 2 --repeats 2                # a search candidate's online stage

With ``--against`` it times online EM (the engine's own update, whatever it is in each checkout) in this checkout
and another one, each run in a fresh process, alternating, and prints seconds per epoch and their ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import describe_machine  # noqa: E402
from engine.backends.cpu.implementation import DenseEngine
from engine.corpora import (
    allocation,  # noqa: E402
    text,  # noqa: E402
)
from engine.model.blocks import pairs_in_sequence  # noqa: E402
from engine.model.dense import random_model  # noqa: E402
from engine.training import learning  # noqa: E402

CORPORA = Path(os.environ.get("CHMM_CORPORA", ROOT.parent / "shared" / "corpora"))
CORPUS = CORPORA / "carroll-alice.txt"
TRAIN_SYMBOLS = 118_788


def one_run(model, train: np.ndarray, epochs: int, own: bool) -> tuple[float, float]:
    """Median seconds per epoch and the last epoch's training BPS of online EM, with or without the engine's update."""
    saved = DenseEngine.online_session
    if not own:
        DenseEngine.online_session = None  # type: ignore[assignment,method-assign]
    try:
        config = learning.TrainingConfig(algorithm="online", iterations=epochs, tolerance=0.0, pseudocount=1e-4)
        result = learning.fit(model, train, None, config)
    finally:
        DenseEngine.online_session = saved  # type: ignore[method-assign]
    return float(np.median([r.seconds for r in result.history])), result.history[-1].train_bps


CHILD = """
import json, sys, numpy as np
sys.path.insert(0, sys.argv[1])
try:
    from engine.corpora import allocation, text
    from engine.model.blocks import pairs_in_sequence
    from engine.model.dense import random_model
    from engine.training import learning
except ImportError:  # a checkout from before the engine's wings (issue 46)
    from engine import allocation, learning, text
    from engine.blocks import pairs_in_sequence
    from engine.model import random_model
corpus = text.prepare_corpus(text.read_text(sys.argv[2]), "paper", validation=0.0)
train = corpus.train[: int(sys.argv[5])]
n_clones = allocation.allocate_clones(train, corpus.n_symbols, int(sys.argv[3]), sys.argv[6])
model = random_model(corpus.symbols, n_clones, pairs_in_sequence(train, corpus.n_symbols), np.random.default_rng(0))
most = "iterations" if "iterations" in learning.TrainingConfig.__dataclass_fields__ else "max_iterations"  # issue 46
config = learning.TrainingConfig(algorithm="online", **{most: 1}, tolerance=0.0, pseudocount=1e-4)
learning.fit(model, train[:5000], None, config)
config = learning.TrainingConfig(algorithm="online", **{most: int(sys.argv[4])}, tolerance=0.0, pseudocount=1e-4)
result = learning.fit(model, train, None, config)
print(json.dumps([float(np.median([r.seconds for r in result.history])), result.history[-1].train_bps]))
"""


def against(
    other: Path, states_list: list[int], epochs: int, repeats: int, corpus: Path, symbols: int, allocation_method: str
) -> None:
    """Online EM in this checkout and in ``other``, alternating, each run in a fresh process."""
    import json
    import subprocess

    print(f"machine: {describe_machine()}")
    print(
        f"corpus: {corpus.name}, the first {symbols:,} training symbols, {allocation_method} allocation, online EM, "
        f"{epochs} epochs, {repeats} runs each"
    )
    print(f"| states | s/epoch this checkout | s/epoch {other.name} | ratio {other.name} / this | train BPS (both) |")
    print("|---:|---:|---:|---:|---:|")
    for states in states_list:
        runs: dict[Path, list[list[float]]] = {ROOT: [], other: []}
        for _ in range(repeats):
            for checkout in runs:
                command = [sys.executable, "-c", CHILD, str(checkout), str(corpus), str(states), str(epochs)]
                command += [str(symbols), allocation_method]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                runs[checkout].append(json.loads(done.stdout.strip().splitlines()[-1]))
        ours, theirs = (float(np.median([r[0] for r in runs[c]])) for c in (ROOT, other))
        bps = {round(r[1], 9) for c in runs for r in runs[c]}
        print(
            f"| {states} | {ours:.3f} | {theirs:.3f} | {theirs / ours:.2f} | {', '.join(map(str, bps))} |", flush=True
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--states", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--against", type=Path, default=None, help="another checkout to compare with, alternating")
    parser.add_argument("--corpus", default=CORPUS.name, help="with --against: a file of $CHMM_CORPORA")
    parser.add_argument("--symbols", type=int, default=TRAIN_SYMBOLS, help="with --against: training symbols used")
    parser.add_argument("--allocation", default="uniform", choices=allocation.ALLOCATION_METHODS)
    args = parser.parse_args()
    corpus_file = CORPORA / args.corpus
    if not corpus_file.is_file():
        sys.exit(f"corpus not found: {corpus_file} (set CHMM_CORPORA to the folder holding {args.corpus})")
    if args.against is not None:
        against(
            args.against.resolve(), args.states, args.epochs, args.repeats, corpus_file, args.symbols, args.allocation
        )
        return
    corpus = text.prepare_corpus(text.read_text(CORPUS), "paper", validation=0.0)
    train = corpus.train[:TRAIN_SYMBOLS]
    print(f"machine: {describe_machine()}")
    print(f"corpus: {CORPUS.name}, {len(train):,} symbols, online EM, {args.epochs} epochs, {args.repeats} runs each")
    print("| states | s/epoch own | s/epoch written once | ratio once / own | train BPS own | train BPS once |")
    print("|---:|---:|---:|---:|---:|---:|")
    for states in args.states:
        n_clones = allocation.allocate_clones(train, corpus.n_symbols, states, "uniform")
        pairs = pairs_in_sequence(train, corpus.n_symbols)
        model = random_model(corpus.symbols, n_clones, pairs, np.random.default_rng(0))
        one_run(model, train[:5000], 1, True)  # compile the kernels outside the timings
        one_run(model, train[:5000], 1, False)
        fused, once = [], []
        for _ in range(args.repeats):
            fused.append(one_run(model, train, args.epochs, True))
            once.append(one_run(model, train, args.epochs, False))
        f, o = float(np.median([r[0] for r in fused])), float(np.median([r[0] for r in once]))
        print(f"| {states} | {f:.3f} | {o:.3f} | {o / f:.2f} | {fused[0][1]:.6f} | {once[0][1]:.6f} |", flush=True)


if __name__ == "__main__":
    main()
