"""Benchmark: batch EM over a Dask cluster (engine.training.distributed) against the in-process engine, and what a
larger cluster would pay.

    python bench/bench_cluster.py                 # all corpora of ../shared/corpora as documents, 1,000 states
    python bench/bench_cluster.py --states 3000 --iterations 3

Prints two tables:
1. seconds per batch-EM iteration on the multi-document corpus (every corpus's training part a document, paper
   normalisation), in-process and on local clusters of 1 and 2 worker processes, measured in one run, interleaved;
2. the costs a cluster pays per iteration, measured at 1,000 / 3,000 states (dense) and 30,000 states (sparse, grown
   by splitting a pruned 3,000-state model): the bytes of the model scattered to the workers and of the counts
   reduced, the seconds to scatter the model to every worker and to tree-sum two partial counts on the workers,
   and the E-step's seconds per symbol on one worker (50,000 symbols, the model already there; the grown model's
   base is the 3,000-state model after 8 EM iterations on 240,000 symbols, pruned at 1e-3); then the projected
   seconds per iteration for 8, 32 and 128 workers on a corpus of 10^8 symbols at 30,000 states:

       t(W) = N / W * c  +  ceil(log2 W) * (b_model / B + t_reduce)  +  t_mstep

   with c the E-step's seconds per symbol on one worker, b_model the model's bytes, B the bandwidth the scatter
   achieved here (the broadcast is a tree of depth log2 W), t_reduce one pairwise sum of counts (a tree of depth
   log2 W), and t_mstep the client's M-step (measured); efficiency = t(1) / (W t(W)).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe_machine  # noqa: E402

CORPORA = Path(os.environ.get("CHMM_CORPORA", ROOT.parent / "shared" / "corpora"))


def documents() -> list:
    from engine.corpora import documents as documents_mod

    files = sorted(p for p in CORPORA.glob("*.txt"))
    if not files:
        sys.exit(f"no corpora in {CORPORA} (set CHMM_CORPORA)")
    return documents_mod.read_documents(files)


def start_model(corpus, states: int):
    from engine.corpora import allocation
    from engine.model.blocks import pairs_in_sequence
    from engine.model.dense import random_model

    parts = corpus.train_parts
    n_clones = allocation.allocate_clones(parts, corpus.n_symbols, states, "ngram")
    pairs = np.unique(np.concatenate([pairs_in_sequence(x, corpus.n_symbols) for x in parts]), axis=0)
    return random_model(corpus.symbols, n_clones, pairs, np.random.default_rng(0))


def seconds_per_iteration(model, parts, client, iterations: int) -> float:
    from engine.training import learning

    config = learning.TrainingConfig(iterations=iterations, tolerance=0.0)
    result = learning.fit(model, parts, None, config, cluster=client)
    return float(np.median([r.seconds for r in result.history[1:]] or [result.history[0].seconds]))


def speed_table(corpus, states: int, iterations: int, repeats: int) -> None:
    from engine.training import distributed

    model = start_model(corpus, states)
    parts = corpus.train_parts
    symbols = sum(len(x) for x in parts)
    print(f"\n{len(parts)} documents, {symbols:,} training symbols, {states:,} states (n-gram allocation), batch EM")
    print("| run | in-process s/iter | 1 worker s/iter | 2 workers s/iter | 2 workers / 1 worker | 2 / in-process |")
    print("|---:|---:|---:|---:|---:|---:|")
    with distributed.open_cluster(workers=1) as one, distributed.open_cluster(workers=2) as two:
        for run in range(1, repeats + 1):
            here = seconds_per_iteration(model, parts, None, iterations)
            t1 = seconds_per_iteration(model, parts, one, iterations)
            t2 = seconds_per_iteration(model, parts, two, iterations)
            print(f"| {run} | {here:.3f} | {t1:.3f} | {t2:.3f} | {t1 / t2:.2f}x | {here / t2:.2f}x |", flush=True)


def cost_table(corpus) -> dict:
    """Bytes and seconds of scatter and reduce at three sizes, on a local cluster of two workers."""
    from engine.backends import engines
    from engine.corpora.allocation import largest_remainder
    from engine.model import pruning
    from engine.training import distributed, growing, learning

    rows = {}
    parts = corpus.train_parts
    sample = [x[:20_000] for x in parts]  # 240,000 symbols: the grown model's base
    probe = [np.concatenate([x[:5_000] for x in parts])[:50_000]]  # what one worker's E-step is timed on
    print(
        "\n| model | stored entries | model bytes | counts bytes | scatter to 2 workers s | tree-sum step s | "
        "E-step s per symbol (1 worker) | M-step s (client) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    with distributed.open_cluster(workers=2) as client:
        models = {}
        for states in (1000, 3000):
            models[f"dense {states:,}"] = start_model(corpus, states)
        config = learning.TrainingConfig(iterations=8, tolerance=0.0)
        base = learning.fit(models["dense 3,000"], sample, None, config).model
        pruned = pruning.prune(base, threshold=1e-3)
        targets = pruned.n_clones + largest_remainder(pruned.n_clones, 30_000 - pruned.n_states)
        models["sparse 30,000 (grown)"] = growing.split_clones(pruned, targets, np.random.default_rng(0), 0.05)
        for name, model in models.items():
            engine = engines.engine_for(model)
            counts_bytes = engine.zero_counts(model).nbytes
            model_bytes = sum(a.nbytes for a in vars(model).values() if isinstance(a, np.ndarray))
            started = time.perf_counter()
            future = client.scatter(model, broadcast=True)
            future.result()
            scatter_s = time.perf_counter() - started
            zeros = client.scatter(
                distributed.Partial(
                    np.zeros(counts_bytes // 8),
                    np.zeros(model.n_states),
                    0.0,
                    0,
                    1,
                    np.zeros(model.layout.n_blocks, bool),
                ),
                broadcast=True,
            )
            started = time.perf_counter()
            client.submit(lambda a, b: a + b, zeros, zeros, pure=False).result()
            reduce_s = time.perf_counter() - started
            shard = client.scatter(probe)
            client.submit(distributed.shard_e_step, future, shard, pure=False).result()  # warm (compile) first
            started = time.perf_counter()
            client.submit(distributed.shard_e_step, future, shard, pure=False).result()
            estep_s = (time.perf_counter() - started) / len(probe[0])
            stored = int(getattr(model, "data", model.T).size)
            counts = np.random.default_rng(0).random(engine.zero_counts(model).size)
            started = time.perf_counter()
            engine.m_step(model, counts, 1e-6)
            mstep_s = time.perf_counter() - started
            rows[name] = (model_bytes, counts_bytes, scatter_s, reduce_s, estep_s, mstep_s)
            print(
                f"| {name} | {stored:,} | {model_bytes / 1e6:.1f} MB | {counts_bytes / 1e6:.1f} MB | {scatter_s:.3f} | "
                f"{reduce_s:.3f} | {estep_s * 1e6:.2f} us | {mstep_s:.3f} |",
                flush=True,
            )
    return rows


def projection(rows: dict) -> None:
    model_bytes, counts_bytes, scatter_s, reduce_s, per_symbol, m_step = rows["sparse 30,000 (grown)"]
    bandwidth = model_bytes / scatter_s
    n = 1e8
    t1 = n * per_symbol + m_step
    print(
        f"\nProjection, 10^8 symbols at 30,000 states (sparse): c = {per_symbol * 1e6:.2f} us/symbol, "
        f"b_model = {model_bytes / 1e6:.0f} MB, B = {bandwidth / 1e9:.2f} GB/s (measured scatter), "
        f"t_reduce = {reduce_s:.3f} s, t_mstep = {m_step:.3f} s (measured)"
    )
    print("| workers | compute s | broadcast s | reduce s | s per iteration | efficiency |")
    print("|---:|---:|---:|---:|---:|---:|")
    for workers in (1, 8, 32, 128):
        depth = math.ceil(math.log2(workers)) if workers > 1 else 0
        compute = n / workers * per_symbol
        broadcast = depth * model_bytes / bandwidth
        reduce = depth * reduce_s
        total = compute + broadcast + reduce + m_step
        efficiency = t1 / (workers * total)
        print(f"| {workers} | {compute:.1f} | {broadcast:.2f} | {reduce:.2f} | {total:.1f} | {efficiency:.0%} |")


def burn_in_study(iterations: int) -> None:
    """BPS after ``iterations`` EM iterations on carroll-alice.txt (one document), exact (in-process) against chunked
    with a burn-in on a local cluster of two workers, at 1,000 and 3,000 states."""
    from engine.backends.cpu import inference
    from engine.corpora import text
    from engine.training import distributed, learning

    corpus = text.prepare_corpus(text.read_text(CORPORA / "carroll-alice.txt"), "paper", validation=0.0)
    train = corpus.train
    print(f"\nBurn-in: carroll-alice.txt, {len(train):,} training symbols, {iterations} batch-EM iterations, n-gram")
    print("| states | chunk | burn-in | train BPS | difference to exact | test BPS | difference to exact |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    with distributed.open_cluster(workers=2) as client:
        for states in (1000, 3000):
            model = start_model(corpus, states)
            config = learning.TrainingConfig(iterations=iterations, tolerance=0.0)
            exact = learning.fit(model, train, None, config).model
            exact_train, exact_test = inference.score(exact, train).bps, inference.score(exact, corpus.test).bps
            print(f"| {states:,} | whole | - | {exact_train:.6f} | - | {exact_test:.6f} | - |", flush=True)
            for size in (5_000, 20_000):
                for burn_in in (0, 100, 1000):
                    chunked_config = learning.TrainingConfig(
                        iterations=iterations, tolerance=0.0, chunk=size, burn_in=burn_in
                    )
                    trained = learning.fit(model, train, None, chunked_config, cluster=client).model
                    t, s = inference.score(trained, train).bps, inference.score(trained, corpus.test).bps
                    print(
                        f"| {states:,} | {size:,} | {burn_in:,} | {t:.6f} | {t - exact_train:+.1e} | {s:.6f} | "
                        f"{s - exact_test:+.1e} |",
                        flush=True,
                    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--states", type=int, default=1000)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-costs", action="store_true")
    parser.add_argument("--no-speed", action="store_true")
    parser.add_argument("--burn-in", action="store_true", help="only the burn-in study (20 EM iterations)")
    args = parser.parse_args()
    from engine.corpora import text

    print(f"machine: {describe_machine()}")
    if args.burn_in:
        burn_in_study(20)
        return
    corpus = text.prepare_corpus(documents(), "paper", name="corpora")
    if not args.no_speed:
        speed_table(corpus, args.states, args.iterations, args.repeats)
    if not args.no_costs:
        projection(cost_table(corpus))


if __name__ == "__main__":
    main()
