"""Benchmark: pruning, the clone graph and Infomap communities (paper, section 4.2, Fig 3(d) and 4.2.1).

For each model size: trains a CHMM on carroll-alice.txt (the paper's normalisation; batch EM with early stopping
on the validation share and no refit, so the validation text stays held out), cached in bench/out/ so a rerun
skips training. Then prunes T at a threshold (default 1e-3) and reports the non-zeros before and after, the
validation BPS before and after (the scorer's bigram back-off covers transitions pruning removed; the steps
that hit one are counted, and the BPS of both models over the other steps is shown apart), the Infomap time on
the pruned graph (default settings of ``chmm communities``: multilevel, 10 trials, link flow = node flow x T,
rawdir), the number of top modules and the names of the largest ones. A second table is the threshold sweep
(the paper's Fig 3(d)).

    python bench/bench_graph.py                          # 1,000 and 3,000 states
    python bench/bench_graph.py --states 1000 3000 10000 --algorithm online --iterations 10
    python bench/bench_graph.py --states --model bench/out/alice-30000-grown.npz   # an existing (e.g. sparse) model

With ``--model`` the row is an existing model (dense or sparse, e.g. the 30,000-state model ``chmm train --states
30000`` grows on the CPU); its BPS is measured on the corpus's test part (the model's refit saw the validation part).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import (
    api,  # noqa: E402
    training,  # noqa: E402
)
from engine.backends import model_files  # noqa: E402
from engine.backends.cpu import inference  # noqa: E402
from engine.corpora import text  # noqa: E402
from engine.model import pruning
from engine.network import communities as cm  # noqa: E402
from engine.network import graph  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "carroll-alice.txt"
OUT = ROOT / "bench" / "out"
SWEEP = (1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2)


def trained_model(states: int, algorithm: str, iterations: int) -> tuple[api.CHMM, np.ndarray, float]:
    """The cached model of this size (trained now if missing), its validation symbols and training seconds."""
    stem = OUT / f"graph-alice-{states}-{algorithm}-i{iterations}"
    model_path, validation_path = stem.with_suffix(".npz"), Path(f"{stem}-validation.npy")
    if model_path.exists() and validation_path.exists():
        model = model_files.load_model(model_path)
        return model, np.load(validation_path), float(model.metadata.get("train_seconds", float("nan")))
    options = training.TrainOptions(
        states=states,
        algorithm=algorithm,
        iterations=iterations,
        refit=False,
        batch_size=2000,
        pseudocount=1e-6 if algorithm == "em" else 1e-5,
    )
    started = time.perf_counter()
    outcome = training.train_text(text.read_text(CORPUS), options, name=CORPUS.name)
    seconds = time.perf_counter() - started
    outcome.model.metadata["train_seconds"] = seconds
    OUT.mkdir(parents=True, exist_ok=True)
    model_files.save_model(outcome.model, model_path)
    np.save(validation_path, outcome.corpus.validation)
    return outcome.model, outcome.corpus.validation, seconds


def model_row(path: Path, threshold: float, trials: int) -> None:
    """Prune an existing model, score the test part of the corpus before and after, run Infomap; print one row."""
    from engine.backends import engines

    model = model_files.load_model(path)
    engine = engines.engine_for(model)  # dense or sparse: the engine interface decides
    corpus = text.prepare_corpus(text.read_text(CORPUS), fixed_alphabet=(model.symbols, model.codec.vocabulary_list))
    started = time.perf_counter()
    pruned = engine.prune(model, threshold)
    prune_seconds = time.perf_counter() - started
    before, after = engine.score(model, corpus.test), engine.score(pruned, corpus.test)
    started = time.perf_counter()
    clone_graph = graph.clone_graph(pruned)
    graph_seconds = time.perf_counter() - started
    result = cm.find_communities(clone_graph, cm.CommunityOptions(trials=trials), None)
    largest = ", ".join(m.name for m in sorted(result.top_modules, key=lambda m: -m.flow)[:6])
    print(
        "| model | states | stored before | after | kept % | test BPS before | after | prune s | graph s | Infomap s "
        "(trials) | edges | modules | largest modules |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    print(
        f"| {path.name} | {model.n_states:,} | {model.n_nonzero():,} | {pruned.n_nonzero():,} | "
        f"{100 * pruned.n_nonzero() / model.n_nonzero():.2f} | {before.bps:.4f} | {after.bps:.4f} | "
        f"{prune_seconds:.1f} | {graph_seconds:.1f} | {result.seconds:.1f} ({trials}) | "
        f"{clone_graph.weight.nnz:,} | {len(result.top_modules)} | {largest} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, nargs="*", default=[1000, 3000])
    parser.add_argument("--model", type=Path, help="also measure this existing model file (dense or sparse)")
    parser.add_argument("--algorithm", choices=["em", "online"], default="em")
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--threshold", type=float, default=1e-3)
    parser.add_argument("--trials", type=int, default=10)
    args = parser.parse_args()
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}, corpus {CORPUS.name}")
    print(
        f"# training: {args.algorithm}, up to {args.iterations} iterations, early stopping on validation, no refit; "
        f"pruning threshold {args.threshold:g}; Infomap: {args.trials} trials, multilevel, flow = node flow x T"
    )
    if args.model:
        model_row(args.model, args.threshold, args.trials)
    rows, sweeps = [], []
    if not args.states:
        return
    for states in args.states:
        model, validation, train_seconds = trained_model(states, args.algorithm, args.iterations)
        before = inference.score(model, validation)
        started = time.perf_counter()
        pruned = pruning.prune(model, threshold=args.threshold)
        prune_seconds = time.perf_counter() - started
        after = inference.score(pruned, validation)
        # split the cost: the steps pruning left possible, scored by both models, and the zero-probability ones
        p_before = inference.forward(model, validation).predictive
        p_after = inference.forward(pruned, validation).predictive
        possible = p_after > 0
        same_steps = (-np.log2(p_before[possible]).mean(), -np.log2(p_after[possible]).mean())
        started = time.perf_counter()
        clone_graph = graph.clone_graph(pruned)
        graph_seconds = time.perf_counter() - started
        started = time.perf_counter()
        result = cm.find_communities(clone_graph, cm.CommunityOptions(trials=args.trials), None)
        total_seconds = time.perf_counter() - started
        largest = sorted(result.top_modules, key=lambda m: -m.flow)[:6]
        rows.append(
            (
                states,
                model.n_nonzero(),
                pruned.n_nonzero(),
                100.0 * pruned.n_nonzero() / model.n_nonzero(),
                before.bps,
                after.bps,
                after.zero_probability_events,
                same_steps,
                prune_seconds,
                graph_seconds,
                result.seconds,
                total_seconds - result.seconds,
                len(result.top_modules),
                result.n_levels,
                ", ".join(m.name for m in largest),
                train_seconds,
            )
        )
        sweeps.append((states, before.bps, graph.prune_sweep(model, list(SWEEP), validation)))
        print(f"# {states} states done (training {train_seconds:.0f} s)", flush=True)

    print()
    print(
        "| states | nonzeros before | nonzeros after | kept % | val BPS before | val BPS after | zero-prob steps "
        "| possible steps: BPS before / after | prune s | graph s | Infomap s | words s | modules | levels "
        "| largest modules |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r[0]:,} | {r[1]:,} | {r[2]:,} | {r[3]:.2f} | {r[4]:.4f} | {r[5]:.4f} | {r[6]} "
            f"| {r[7][0]:.4f} / {r[7][1]:.4f} | {r[8]:.2f} | {r[9]:.2f} | {r[10]:.2f} | {r[11]:.2f} | {r[12]} "
            f"| {r[13]} | {r[14]} |"
        )
    print()
    print("Threshold sweep (validation BPS; kept % of the non-zeros of the trained T):")
    print()
    print("| states | unpruned BPS | " + " | ".join(f"{t:g}" for t in SWEEP) + " |")
    print("|-------:|------:|" + "------------|" * len(SWEEP))
    for states, base, points in sweeps:
        cells = [f"{100 * p.kept_fraction:.2f}% / {p.bps:.4f}" for p in points]
        print(f"| {states:,} | {base:.4f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
