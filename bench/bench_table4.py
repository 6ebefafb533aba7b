"""Benchmark: the paper's Table 4 with every column run here (test BPS on eight texts): the plain CHMM (what
`chmm train` does with its defaults), our Kneser-Ney n-gram, the sequence memoizer and the LSTM, each with its
minutes on this machine, beside the paper's CHMM, n-gram, SEQM and LSTM figures.

Every learner is trained by `chmm train`'s protocol on the paper's normalisation and split (first 90% train with
its last tenth held out for validation, last 10% test, training capped at 750,000 symbols) and, but for the
LSTM, refitted on training + validation text with what validation chose:
- CHMM: `training.train_text` with the plain command's defaults (online EM then batch EM, the states and
  pseudocount chosen on validation within `--budget` minutes, default the command's 10);
- n-gram: `chmm train --learner ngram` with orders up to 12; SEQM: `--learner seqm` (deep discount chosen on
  validation);
- LSTM: `--learner rnn` (the recurrent peer: 2 layers of 256 GRU units, its default, measured better than LSTM
  cells; no refit, it keeps the epoch validation chose) with as many
  minutes as the CHMM took on the same corpus (`--rnn-minutes` sets them instead).
`--unit words` runs the same at word level. One line per corpus, printed as each finishes.

    python bench/bench_table4.py [--only carroll-alice blake-poems] [--learners chmm ngram seqm rnn]
        [--budget 10] [--rnn-minutes M] [--unit words] [--max-states 3000] [--verbose]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import describe_machine  # noqa: E402
from engine import training
from engine.corpora import text
from engine.peers import learners
from engine.training import learning

CORPORA = Path(os.environ.get("CHMM_CORPORA", Path(__file__).resolve().parents[2] / "shared" / "corpora"))
PAPER = {  # file stem -> the paper's Table 4: CHMM, n-gram, SEQM, LSTM test BPS
    "blake-poems": (1.60, 1.75, 1.71, 1.68),
    "shakespeare-macbeth": (1.69, 1.79, 1.77, 1.74),
    "carroll-alice": (1.54, 1.61, 1.57, 1.58),
    "shakespeare-hamlet": (1.63, 1.72, 1.69, 1.68),
    "milton-paradise": (1.73, 1.83, 1.78, 1.78),
    "calgary-book1": (1.63, 1.72, 1.64, 1.67),
    "melville-moby_dick": (1.72, 1.81, 1.73, 1.76),
    "war-and-peace": (1.59, 1.65, 1.57, 1.62),
}
MAX_TRAIN = 750_000


def print_record(record: learning.IterationRecord) -> None:
    """--verbose: one line per iteration (an online EM epoch or a batch EM iteration) of every run."""
    stage = "refit" if record.refit else f"candidate {record.candidate + 1}, restart {record.restart}"
    print(
        f"    {stage}: iteration {record.iteration}, train BPS {record.train_bps:.4f}, validation BPS "
        f"{record.validation_bps:.4f}, {record.seconds:.1f} s",
        flush=True,
    )


def run(stem: str, raw: str, kind: str, args: argparse.Namespace, minutes: float | None) -> tuple[float, float]:
    """(test BPS, minutes) of learner ``kind`` on one corpus (``minutes``: the recurrent network's budget)."""
    started = time.perf_counter()
    settings = {"max_train": MAX_TRAIN, "name": stem, "unit": args.unit}
    if kind == "chmm":
        log = (lambda line: print(f"  {line}", flush=True)) if args.verbose else None
        options = training.TrainOptions(max_train=MAX_TRAIN, budget=args.budget, unit=args.unit)
        outcome = training.train_text(raw, options, callback=print_record if args.verbose else None, name=stem, log=log)
        test = outcome.summary["test_bps"]
    else:
        options = {"ngram": {"max_order": 12}, "seqm": {}}.get(kind, {"minutes": minutes or 10.0})
        test = learners.train_peer_text(raw, kind, options, **settings)[1]["test_bps"]
    return float(test), (time.perf_counter() - started) / 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="corpus file stems, e.g. carroll-alice")
    parser.add_argument("--learners", nargs="*", default=["chmm", "ngram", "seqm", "rnn"])
    parser.add_argument(
        "--budget", type=float, default=training.options.BUDGET_MINUTES, help="the CHMM's search (minutes)"
    )
    parser.add_argument("--rnn-minutes", type=float, default=None, help="default: the CHMM's minutes")
    parser.add_argument("--unit", default=text.UNITS[0], choices=text.UNITS)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--max-states", type=int, default=None, help="leave larger states out of the search's grid")
    args = parser.parse_args()
    if args.max_states is not None:
        training.STATES_GRID = tuple(n for n in training.STATES_GRID if n <= args.max_states)
    print(describe_machine())
    columns = " | ".join(f"{kind} test BPS (min)" for kind in args.learners)
    print(f"| corpus | {columns} | paper CHMM / n-gram / SEQM / LSTM |")
    print("| --- |" + " ---: |" * len(args.learners) + " --- |")
    for stem, paper in PAPER.items():
        if args.only and stem not in args.only:
            continue
        raw = (CORPORA / f"{stem}.txt").read_text(encoding="utf-8")
        cells, chmm_minutes = [], None
        for kind in args.learners:
            budget = args.rnn_minutes if args.rnn_minutes is not None else chmm_minutes
            test, minutes = run(stem, raw, kind, args, budget)
            chmm_minutes = minutes if kind == "chmm" else chmm_minutes
            cells.append(f"{test:.3f} ({minutes:.1f})")
        shown = " / ".join(f"{v:.2f}" for v in paper) if args.unit == text.UNITS[0] else "-"
        print(f"| {stem} | {' | '.join(cells)} | {shown} |", flush=True)


if __name__ == "__main__":
    main()
