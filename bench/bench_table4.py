"""Benchmark: the paper's Table 4 (test BPS on eight texts) with the CHMM's capacity and smoothing chosen on
validation, beside the paper's CHMM, n-gram, SEQM and LSTM columns and our Kneser-Ney n-gram.

Every CHMM run is `training.train_text` (what `chmm train` calls) with the paper's normalisation and split (first
90% train with its last tenth held out for validation, last 10% test, training capped at 750,000 symbols),
`--algorithm online` (online EM, then batch EM from the best epoch, both stopped on validation; the paper's Table 4
recipe), `--states auto --pseudocount auto` unless given (the grid of engine/api.py: states up to one per 10
training symbols, pseudocounts 1e-6 to 1e-2) and the refit on training + validation text. The n-gram is
`chmm train --learner ngram` (interpolated Kneser-Ney, order up to 12) by the same protocol. One line per corpus,
printed as each finishes; the search's candidates and every iteration with `--verbose`.

    python bench/bench_table4.py [--only carroll-alice blake-poems] [--states auto] [--pseudocount auto]
        [--max-states 3000] [--budget 50]
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


def number_or_auto(value: str) -> int | float | str:
    return value if value == training.AUTO else float(value) if "." in value or "e" in value else int(value)


def print_record(record: learning.IterationRecord) -> None:
    """--verbose: one line per iteration (an online EM epoch or a batch EM iteration) of every run."""
    stage = "refit" if record.refit else f"candidate {record.candidate + 1}, restart {record.restart}"
    print(
        f"    {stage}: iteration {record.iteration}, train BPS {record.train_bps:.4f}, validation BPS "
        f"{record.validation_bps:.4f}, {record.seconds:.1f} s",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="corpus file stems, e.g. carroll-alice")
    parser.add_argument("--states", type=number_or_auto, default=training.AUTO)
    parser.add_argument("--pseudocount", type=number_or_auto, default=training.AUTO)
    parser.add_argument("--algorithm", default="online")
    parser.add_argument("--restarts", type=int, default=None)
    parser.add_argument("--budget", type=float, default=None, help="the automatic search's budget (minutes)")
    parser.add_argument("--skip-ngram", action="store_true")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument(
        "--max-states",
        type=int,
        default=None,
        help="leave larger numbers of states out of the automatic grid (to fit the time budget on a small machine)",
    )
    args = parser.parse_args()
    if args.max_states is not None:
        training.STATES_GRID = tuple(n for n in training.STATES_GRID if n <= args.max_states)
    print(describe_machine())
    print(
        "| corpus | train symbols | states | pseudocount | candidates | test BPS | paper CHMM | our KN n-gram "
        "| paper n-gram | SEQM | LSTM | minutes |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for stem, (chmm, ngram, seqm, lstm) in PAPER.items():
        if args.only and stem not in args.only:
            continue
        raw = (CORPORA / f"{stem}.txt").read_text(encoding="utf-8")
        options = training.TrainOptions(
            states=args.states,
            pseudocount=args.pseudocount,
            algorithm=args.algorithm,
            restarts=args.restarts,
            max_train=MAX_TRAIN,
            budget=args.budget,
        )
        started = time.perf_counter()
        log = (lambda line: print(f"  {line}", flush=True)) if args.verbose else None
        outcome = training.train_text(
            raw, options, callback=print_record if args.verbose else None, name=stem, log=log
        )
        minutes = (time.perf_counter() - started) / 60
        summary = outcome.summary
        ours_ngram = "-"
        if not args.skip_ngram:
            _, figures = learners.train_peer_text(raw, "ngram", {"max_order": 12}, max_train=MAX_TRAIN, name=stem)
            ours_ngram = f"{figures['test_bps']:.3f}"
        chosen = outcome.model.metadata["settings"]
        if log:
            log(
                f"validation BPS {summary['validation_bps']:.4f} after {summary.get('online_iterations', 0)} online "
                f"epochs and {summary['iterations'] - summary.get('online_iterations', 0)} batch EM iterations; "
                f"best at iteration {summary['best_iteration']}, refit {summary['refit_iterations']}"
            )
        print(
            f"| {stem} | {summary['symbols']:,} | {summary['states']:,} | {chosen['pseudocount']:g} | "
            f"{len(summary.get('search', [])) or 1} | {summary['test_bps']:.3f} | {chmm:.2f} | {ours_ngram} | "
            f"{ngram:.2f} | {seqm:.2f} | {lstm:.2f} | {minutes:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
