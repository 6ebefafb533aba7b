"""CHMMs of words: the plain ``chmm train CORPUS --unit words`` on the paper's eight Table 4 corpora and two more,
beside our Kneser-Ney n-gram on the same tokens, vocabulary and split (as ``chmm train`` reports it): test bits per
word and perplexity, states, the back-off weight chosen on validation, minutes.

    python bench/bench_words.py [--only carroll-alice ...] [--budget MINUTES]
    python bench/bench_words.py --speed [--states 11945 30000 50000] [--corpus war-and-peace] [--unit words]
    python bench/bench_words.py --speed --corpus all --unit tokens --states 0 1000   (0, 1000: the vocabulary plus)

Each corpus runs ``python -m engine.cli train`` in a subprocess, one after another (run it alone: the search's budget
is wall-clock time); its JSON summary goes to ``bench/out/words-CORPUS.json``. ``--speed``: seconds of one batch EM
iteration (E-step and M-step on the training words) of a new model of each number of states on one corpus's words,
and the peak memory of the process that ran it (each size in its own subprocess; a size over this machine's memory
is refused by the engine's own check, and the table says so). ``--corpus all`` reads every corpus as one document
each; a number of states below the vocabulary is that many states above it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_defaults import CORPORA, OUT, PAPER_CHMM  # noqa: E402
from machine import describe_machine  # noqa: E402

MORE = ("chesterton-brown", "tiny-shakespeare")
"""The two corpora beside the paper's eight."""

SPEED = """
import json, resource, sys, time
from dataclasses import replace
from engine import api
from engine.training import learning, options as opts, stages
paths, unit = sys.argv[1].split(","), sys.argv[3]
raw = [api.corpora.Document(p, open(p, encoding="utf-8").read()) for p in paths]
corpus = api.corpora.prepare_corpus(raw if len(raw) > 1 else raw[0].text, unit=unit)
states = int(sys.argv[2])
states = states if states >= corpus.n_symbols else corpus.n_symbols + states
options = api.TrainOptions(unit=unit, states=states, pseudocount=1e-3)
try:
    opts.check_memory(corpus, options)
except ValueError as exc:
    print(json.dumps({"refused": str(exc), "symbols": corpus.n_symbols})); sys.exit(0)
model = stages.initial_model_for(corpus, options)
one = replace(options.training_config(), iterations=1, algorithm="em")
seconds = []
for _ in range(2):
    started = time.perf_counter()
    model = learning.fit(model, corpus.train_full_parts, None, one).model
    seconds.append(time.perf_counter() - started)
print(json.dumps({"states": states, "symbols": corpus.n_symbols, "words": sum(len(p) for p in corpus.train_full_parts),
                  "entries": model.layout.size,
                  "blocks": model.layout.n_blocks, "seconds": seconds,
                  "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))
"""


def speed(corpus: str, sizes: list[int], unit: str) -> None:
    """The ``--speed`` table: one batch EM iteration per number of states, in a subprocess each."""
    paths = sorted(CORPORA.glob("*.txt")) if corpus == "all" else [CORPORA / f"{corpus}.txt"]
    print(f"batch EM on the {unit} of {corpus}; {describe_machine()}")
    print("| states | symbols | training symbols | blocks | entries | s / iteration (2nd) | peak memory (GiB) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for states in sizes:
        command = [sys.executable, "-c", SPEED, ",".join(map(str, paths)), str(states), unit]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"| {states:,} | failed: {done.stderr.strip().splitlines()[-1]} |||||")
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        if "refused" in row:
            print(f"| {states:,} | {row['symbols']:,} | refused: {row['refused']} ||||")
            continue
        print(
            f"| {row['states']:,} | {row['symbols']:,} | {row['words']:,} | {row['blocks']:,} | {row['entries']:,} | "
            f"{row['seconds'][-1]:.2f} | {row['peak_gib']:.2f} |",
            flush=True,
        )


def plain(corpora: list[str], budget: float | None) -> None:
    """The main table: the plain command at word level against our n-gram, corpus by corpus."""
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"chmm train --unit words{'' if budget is None else f' --budget {budget:g}'}; {describe_machine()}")
    print(
        "| corpus | symbols | states | back-off weight | CHMM test bits/word | n-gram | CHMM - n-gram | "
        "perplexity CHMM / n-gram | minutes |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    wins = 0
    for name in corpora:
        with tempfile.TemporaryDirectory() as scratch:
            command = [sys.executable, "-m", "engine.cli", "train", str(CORPORA / f"{name}.txt"), "--unit", "words"]
            command += ["-o", str(Path(scratch) / "m.npz"), "--json", "--quiet"]
            command += [] if budget is None else ["--budget", str(budget)]
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True)
            minutes = (time.perf_counter() - started) / 60
            if done.returncode != 0:
                print(f"| {name} | failed: {done.stderr.strip().splitlines()[-1]} ||||||||")
                continue
            summary = json.loads(done.stdout.strip().splitlines()[-1])
            weight = _backoff_weight(Path(scratch) / "m.npz")
        (OUT / f"words-{name}.json").write_text(json.dumps(summary, indent=1))
        chmm, ngram = summary["test_bps"], summary["ngram"]["test_bps"]
        wins += chmm <= ngram
        print(
            f"| {name} | {summary['alphabet']:,} | {summary['states']:,} | {weight:.3f} | {chmm:.3f} | {ngram:.3f} | "
            f"{chmm - ngram:+.3f} | {2**chmm:,.0f} / {2**ngram:,.0f} | {minutes:.1f} |",
            flush=True,
        )
    print(f"at or below the n-gram on {wins} of {len(corpora)}")


def _backoff_weight(path: Path) -> float:
    from engine import api

    return float(api.load_model(path).backoff_weight)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=None)
    parser.add_argument("--budget", type=float, default=None, help="minutes (default: chmm train's own)")
    parser.add_argument("--speed", action="store_true")
    parser.add_argument("--states", nargs="+", type=int, default=[11_945, 30_000, 50_000])
    parser.add_argument("--corpus", default="war-and-peace", help="a corpus's name, or all")
    parser.add_argument("--unit", default="words", choices=["words", "tokens"])
    args = parser.parse_args()
    if args.speed:
        speed(args.corpus, args.states, args.unit)
        return
    plain(args.only or [*PAPER_CHMM, *MORE], args.budget)


if __name__ == "__main__":
    main()
