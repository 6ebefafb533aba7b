"""Benchmark: the paper's Table 3 (the toy FSM with a stochastic noise length and the bracket language whose test
text swaps the bracket types), the CHMM trained by online EM against the recurrent peer.

Data (engine/model/synthetic.py): the toy with k = 2, each block's alpha 0.9 with probability 0.95 and 0.1 otherwise
(1,880 blocks, about the paper's 59,559 training symbols), test text of the same process; the brackets with k = 2,
50,000 training symbols with the training alphas and test text with the types swapped. Both learners get a
validation text of the test's process, as the paper gave its LSTM.

- CHMM: `training.train_text` (what `chmm train` calls) on the training text with raw normalisation, the paper's
  clones per symbol (2 for the toy, 4 for the brackets, uniform allocation), `--algorithm online`, every other
  option at its default; scored on the test text.
- LSTM: the recurrent peer with LSTM cells (`--learner rnn --learner-option cell=lstm`) with char-rnn's defaults
  as the paper ran it (2 layers of 100 units),
  at most 400 epochs, stopped on the validation text (patience 10), scored on the test text.

    python bench/bench_table3.py [--seeds 3] [--only toy brackets] [--epochs 400] [--minutes 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import describe_machine  # noqa: E402
from engine import api, training  # noqa: E402
from engine.model import synthetic  # noqa: E402
from engine.peers.base import bits_per_symbol  # noqa: E402

ALPHABET = "0123456789"
PAPER = {  # data set -> (training symbols, clones per symbol, CHMM BPS (sd), CHMM iterations, LSTM BPS (sd))
    "toy": (59_559, 2, "0.512 (0.003)", "91.9", "0.535 (0.010)"),
    "brackets": (50_000, 4, "1.191 (0.015)", "15.9", "1.211 (0.012)"),
}
TOY_BLOCKS = 1_880


def texts(kind: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Training, validation and test symbols of one run, and the alphabet's size."""
    rng = np.random.default_rng(seed)
    if kind == "toy":
        draw = lambda blocks: synthetic.toy_alpha_sequence(blocks, rng)  # noqa: E731
        return draw(TOY_BLOCKS), draw(TOY_BLOCKS // 4), draw(TOY_BLOCKS // 2), synthetic.toy_fsm_n_symbols(2)
    train = synthetic.bracket_alpha_sequence(50_000, rng, **synthetic.TABLE3_BRACKET_TRAIN)
    validation = synthetic.bracket_alpha_sequence(12_500, rng, **synthetic.TABLE3_BRACKET_TEST)
    test = synthetic.bracket_alpha_sequence(25_000, rng, **synthetic.TABLE3_BRACKET_TEST)
    return train, validation, test, len(synthetic.BRACKET_SYMBOLS)


def as_text(kind: str, x: np.ndarray) -> str:
    return "".join((ALPHABET if kind == "toy" else synthetic.BRACKET_SYMBOLS)[s] for s in x)


def run_chmm(kind: str, seed: int) -> tuple[float, int, float]:
    """(test BPS, epochs, seconds) of the CHMM trained by online EM on the training text."""
    train, _, test, n_symbols = texts(kind, seed)
    options = training.TrainOptions(
        states=PAPER[kind][1] * n_symbols, allocation="uniform", normalisation="raw", algorithm="online", seed=seed
    )
    started = time.perf_counter()
    outcome = training.train_text(as_text(kind, train), options)
    seconds = time.perf_counter() - started
    return api.score_text(outcome.model, as_text(kind, test)).bps, outcome.summary["iterations"], seconds


def run_lstm(kind: str, seed: int, epochs: int, minutes: float) -> tuple[float, int, float]:
    """(test BPS, epochs, seconds) of the recurrent peer, stopped on the validation text."""
    train, validation, test, n_symbols = texts(kind, seed)
    options = {"cell": "lstm", "hidden": 100, "layers": 2, "epochs": epochs, "patience": 10, "minutes": minutes}
    learner = api.make_learner("rnn", **options, seed=seed)
    started = time.perf_counter()
    learner.fit(train, n_symbols, validation)
    seconds = time.perf_counter() - started
    best = min(learner.history, key=lambda h: h["validation_bps"])
    return bits_per_symbol(learner, test), int(best["iteration"]), seconds


def summary(values: list[float], digits: int = 3) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.{digits}f} ({sd:.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=list(PAPER), choices=list(PAPER))
    parser.add_argument("--epochs", type=int, default=400, help="the LSTM's most epochs (the paper's 400)")
    parser.add_argument("--minutes", type=float, default=10.0, help="the LSTM's time budget per run")
    args = parser.parse_args()
    print(describe_machine())
    print(f"toy entropy rate: {synthetic.toy_alpha_optimal_bps():.4f} bits per symbol")
    test = texts("brackets", 0)[2]
    train_law = synthetic.bracket_alpha_bits(test, **synthetic.TABLE3_BRACKET_TRAIN)
    test_law = synthetic.bracket_alpha_bits(test, **synthetic.TABLE3_BRACKET_TEST)
    print(f"brackets' test text: {train_law:.4f} bits per symbol under the training process, {test_law:.4f} its own")
    print("| data | learner | test BPS mean (sd) | paper | epochs (best) | s/run |")
    print("| --- | --- | --- | --- | ---: | ---: |")
    for kind in args.only:
        for learner in ("CHMM", "LSTM"):
            rows = []
            for seed in range(args.seeds):
                if learner == "CHMM":
                    rows.append(run_chmm(kind, seed))
                else:
                    rows.append(run_lstm(kind, seed, args.epochs, args.minutes))
            bps, its, seconds = zip(*rows, strict=True)
            paper = PAPER[kind][2] if learner == "CHMM" else PAPER[kind][4]
            print(
                f"| {kind} | {learner} | {summary(list(bps))} | {paper} | {statistics.mean(its):.1f} "
                f"| {statistics.mean(seconds):.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
