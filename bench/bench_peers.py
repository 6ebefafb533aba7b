"""Benchmark: the CHMM against its peer learners (issue 9) on text and on the paper's two synthetic tasks.

Text: every learner is trained by :func:`engine.peers.learners.train_learner_text`, i.e. exactly as `chmm train`
trains (paper normalisation, first 90% for training with its last tenth held out for validation, last 10% test,
then a refit on training + validation with what validation chose), on carroll-alice.txt, shakespeare-macbeth.txt and
blake-poems.txt from $CHMM_CORPORA (default ../shared/corpora). The paper's Table 4 (CHMM and n-gram test BPS) sits
beside ours.

Synthetic: the toy FSM with k = 3 holes (the paper's training size, 33,750 symbols) and the bracket language of
depth k = 2 (30,000 symbols); every learner gets a fresh 5,000-symbol validation sample and is scored on a fresh
20,000-symbol test sample, against the exact entropy rate (engine/model/synthetic.py). The CHMM there is the paper's
setting: its clone counts (toy: 1 per signal, 2 per noise symbol; brackets: twice the true model's clones), online
EM with batches of 400 and lambda 0.9 for 400 epochs (no early stopping, as in bench_bps.py's toy table).

    python bench/bench_peers.py            # full: CHMM 3,000 clones, HMM and DenseHMM with 256 states
    python bench/bench_peers.py --quick    # CHMM 1,000 clones, HMM and DenseHMM with 100 states, fewer iterations

The figures of every run are also written to bench/out/bench_peers[-quick].json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import describe_machine  # noqa: E402
from engine.corpora import text
from engine.model import synthetic
from engine.model.blocks import pairs_in_sequence  # noqa: E402
from engine.model.dense import random_model  # noqa: E402
from engine.peers import learners
from engine.peers.base import bits_per_symbol  # noqa: E402
from engine.training import learning

CORPORA_DIR = Path(os.environ.get("CHMM_CORPORA", ROOT.parent / "shared" / "corpora"))
CORPORA = ("carroll-alice", "shakespeare-macbeth", "blake-poems")
SHORT = {"carroll-alice": "alice", "shakespeare-macbeth": "macbeth", "blake-poems": "blake"}
PAPER_TABLE4 = {
    "chmm": {"carroll-alice": 1.54, "shakespeare-macbeth": 1.69, "blake-poems": 1.60},
    "ngram": {"carroll-alice": 1.61, "shakespeare-macbeth": 1.79, "blake-poems": 1.75},
}
SYNTHETIC_VALIDATION = 5_000
SYNTHETIC_TEST = 20_000
BRACKET_TRAIN = 30_000


def text_learners(quick: bool) -> list[tuple[str, str, dict[str, Any]]]:
    """(row label, learner, options) of the text table."""
    if quick:
        return [
            ("CHMM 1,000 clones, online EM", "chmm", {"states": 1000, "algorithm": "online", "batch_size": 2000,
                                                      "pseudocount": 1e-3, "iterations": 100}),
            ("DenseHMM n = 100, l = 16", "densehmm", {"n_states": 100, "dim": 16, "iterations": 30}),
            ("HMM n = 100", "hmm", {"n_states": 100, "iterations": 30}),
            ("PAC PDFA", "pdfa", {}),
            ("KN n-gram (order <= 8)", "ngram", {"max_order": 8}),
        ]  # fmt: skip
    return [
        ("CHMM 3,000 clones, online EM", "chmm", {"states": 3000, "algorithm": "online", "batch_size": 2000,
                                                  "pseudocount": 1e-5, "iterations": 100}),
        ("DenseHMM n = 256, l = 32", "densehmm", {"n_states": 256, "dim": 32, "iterations": 50}),
        ("HMM n = 256", "hmm", {"n_states": 256, "iterations": 50}),
        ("PAC PDFA", "pdfa", {}),
        ("KN n-gram (order <= 12)", "ngram", {"max_order": 12}),
    ]  # fmt: skip


SYNTHETIC_PEERS: dict[str, dict[str, Any]] = {
    "densehmm": {"n_states": 48, "dim": 8, "iterations": 300},
    "hmm": {"n_states": 48, "iterations": 300},
    "pdfa": {},
    "ngram": {"max_order": 12},
}


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------ text
def run_text(quick: bool, corpora: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Figures per learner and corpus: test/validation/train BPS, seconds, parameters (and the n-gram's order)."""
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for name in corpora:
        corpus_text = text.read_text(CORPORA_DIR / f"{name}.txt")
        for label, kind, options in text_learners(quick):
            started = time.perf_counter()
            _, summary = learners.train_learner_text(corpus_text, kind, options, name=name)
            summary = {k: v for k, v in summary.items() if not isinstance(v, dict)}
            results.setdefault(label, {})[name] = summary | {"kind": kind}
            log(
                f"{name:>20}  {label:<30} test {summary['test_bps']:.4f}  validation {summary['validation_bps']:.4f}  "
                f"{summary['parameters']:>10,} parameters  {time.perf_counter() - started:7.1f} s"
            )
    return results


# ------------------------------------------------------------------------------------------ synthetic
def synthetic_tasks() -> dict[str, dict[str, Any]]:
    """The two tasks: alphabet size, sampler, training size, optimal BPS and the CHMM's clone counts."""
    bracket_clones = 2 * synthetic.bracket_true_model(2).n_clones
    return {
        "toy FSM k = 3": {
            "n_symbols": synthetic.toy_fsm_n_symbols(3),
            "sample": lambda n, rng: synthetic.toy_fsm_sequence(3, n, rng),
            "train": synthetic.TOY_FSM_TRAINING_SIZES[3],
            "optimal": synthetic.toy_fsm_optimal_bps(3),
            "clones": synthetic.toy_fsm_clones(3),
        },
        "brackets k = 2": {
            "n_symbols": len(synthetic.BRACKET_SYMBOLS),
            "sample": lambda n, rng: synthetic.bracket_sequence(2, n, rng),
            "train": BRACKET_TRAIN,
            "optimal": synthetic.bracket_optimal_bps(2),
            "clones": np.asarray(bracket_clones, dtype=np.int64),
        },
    }


def _synthetic_chmm(task: dict[str, Any], train: np.ndarray, rng: np.random.Generator) -> tuple[Any, float, int]:
    """The paper's CHMM setting on a synthetic task: its clones, online EM (batches of 400, lambda 0.9, 400 epochs)."""
    n_symbols = task["n_symbols"]
    model = random_model(
        [str(s) for s in range(n_symbols)], task["clones"], pairs_in_sequence(train, n_symbols), rng, np.float64
    )
    config = learning.TrainingConfig(algorithm="online", iterations=400, batch_size=400, memory=0.9, tolerance=0.0)
    result = learning.fit(model, train, None, config)
    return result.model, float(len(result.history)), learners.chmm_parameters(result.model)


def run_synthetic(seed: int = 0) -> dict[str, dict[str, dict[str, Any]]]:
    """Test BPS, seconds and parameters per learner kind and task (one seed), and each task's optimum."""
    from engine.backends.cpu import inference

    results: dict[str, dict[str, dict[str, Any]]] = {}
    for task_name, task in synthetic_tasks().items():
        rng = np.random.default_rng(seed)
        train = task["sample"](task["train"], rng)
        validation = task["sample"](SYNTHETIC_VALIDATION, rng)
        test = task["sample"](SYNTHETIC_TEST, rng)
        started = time.perf_counter()
        model, _, parameters = _synthetic_chmm(task, train, rng)
        figures = {"test_bps": inference.score(model, test).bps, "parameters": parameters}
        results.setdefault("chmm", {})[task_name] = figures | {"seconds": time.perf_counter() - started}
        for kind, options in SYNTHETIC_PEERS.items():
            started = time.perf_counter()
            learner = learners.make_learner(kind, **options).fit(train, task["n_symbols"], validation)
            results.setdefault(kind, {})[task_name] = {
                "test_bps": bits_per_symbol(learner, test),
                "parameters": int(learner.n_parameters),
                "seconds": time.perf_counter() - started,
            }
        for kind in ("chmm", *SYNTHETIC_PEERS):
            r = results[kind][task_name]
            log(f"{task_name:>20}  {kind:<10} test {r['test_bps']:.4f} (optimal {task['optimal']:.4f})")
        results.setdefault("optimal", {})[task_name] = {"test_bps": task["optimal"]}
    return results


# ------------------------------------------------------------------------------------------ the table
def _cell(values: list[Any], fmt: str) -> str:
    return " / ".join("-" if v is None else format(v, fmt) for v in values)


def table(
    text_results: dict[str, dict[str, dict[str, Any]]],
    synthetic_results: dict[str, dict[str, dict[str, Any]]],
    corpora: list[str],
    quick: bool,
) -> str:
    """One markdown table: a row per learner; test BPS per corpus, the paper's Table 4, seconds and parameters per
    corpus, and test BPS on the two synthetic tasks (their optimum in the header and in the last row)."""
    tasks = synthetic_tasks()
    short = "/".join(SHORT.get(c, c) for c in corpora)
    header = (
        ["learner"]
        + [f"{SHORT.get(c, c)} test BPS" for c in corpora]
        + [f"paper Table 4 ({short})", f"train seconds ({short})", f"parameters ({short})"]
        + [f"{name} (optimal {task['optimal']:.3f})" for name, task in tasks.items()]
    )
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for label, kind, _ in text_learners(quick):
        per_corpus = text_results.get(label, {})
        paper = PAPER_TABLE4.get(kind)
        row = [label]
        row += [_cell([per_corpus.get(c, {}).get("test_bps")], ".3f") for c in corpora]
        row.append(_cell([paper.get(c) for c in corpora], ".2f") if paper else "-")
        row.append(_cell([per_corpus.get(c, {}).get("seconds") for c in corpora], ".0f"))
        row.append(_cell([per_corpus.get(c, {}).get("parameters") for c in corpora], ","))
        row += [_cell([synthetic_results.get(kind, {}).get(name, {}).get("test_bps")], ".3f") for name in tasks]
        lines.append("| " + " | ".join(row) + " |")
    optimal = ["optimal (entropy rate)"] + ["-"] * (len(corpora) + 3)
    optimal += [f"{task['optimal']:.3f}" for task in tasks.values()]
    lines.append("| " + " | ".join(optimal) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller learners (CHMM 1,000 clones, HMMs 100 states)")
    parser.add_argument("--corpora", nargs="+", default=list(CORPORA), help="corpus names under $CHMM_CORPORA")
    parser.add_argument("--skip-text", action="store_true")
    parser.add_argument("--skip-synthetic", action="store_true")
    args = parser.parse_args()
    missing = [c for c in args.corpora if not (CORPORA_DIR / f"{c}.txt").is_file()]
    if missing and not args.skip_text:
        sys.exit(f"corpus not found: {', '.join(missing)} under {CORPORA_DIR} (set CHMM_CORPORA)")
    started = time.perf_counter()
    text_results = {} if args.skip_text else run_text(args.quick, args.corpora)
    synthetic_results = {} if args.skip_synthetic else run_synthetic()
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    dump = {"quick": args.quick, "text": text_results, "synthetic": synthetic_results, "machine": describe_machine()}
    (out / f"bench_peers{'-quick' if args.quick else ''}.json").write_text(json.dumps(dump, indent=1))
    print(f"Machine: {describe_machine()}; total {time.perf_counter() - started:.0f} s")
    print()
    print(table(text_results, synthetic_results, args.corpora, args.quick))


if __name__ == "__main__":
    main()
