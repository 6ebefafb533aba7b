"""Benchmark: is a lockstep forward pass written as array code (one matrix product per symbol pair per step) faster
than the sequential numba pass on this CPU? A measurement of a design option for the lockstep-chunk issue, before
any engine code is written for it.

The sequence is cut into C chunks (the cluster's chunking: each chunk with ``burn_in`` symbols of the sequence
before and after whose steps are not counted). The chunks advance together: at step t they are grouped by the
symbol pair (x_t, x_{t+1}) they stand at, and each group's messages (a g x m_i matrix) are multiplied by the pair's
block (m_i x m_j) in one NumPy/BLAS product, then normalised. The log-likelihood of the counted steps is compared with
the exact sequential pass (``engine.backends.cpu.inference.forward``), and both are timed (the sequential pass after its
numba compilation; each figure the best of ``--repeats``).

    python bench/bench_lockstep.py [--states 1000 3000 10000] [--chunks 256 1024 4096] [--burn-in 50]

The prototype below is deliberately plain array code (what `gpu-sim` and a CuPy version would run): per group a
gather, a GEMM, a normalisation and a scatter. Its cost per group is what this table measures.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import describe_machine  # noqa: E402
from engine.backends.chunks import Chunk, LockstepSchedule, chunk, counted_log_likelihood  # noqa: E402
from engine.backends.cpu import inference  # noqa: E402
from engine.corpora import (
    allocation,  # noqa: E402
    text,  # noqa: E402
)
from engine.model.blocks import pairs_in_sequence  # noqa: E402
from engine.model.dense import CHMM, random_model  # noqa: E402

CORPUS = Path(os.environ.get("CHMM_CORPORA", ROOT.parent / "shared" / "corpora")) / "carroll-alice.txt"
TRAIN_SYMBOLS = 118_788


@njit(nogil=True, fastmath=True, error_model="numpy")
def _compiled_pass(T, block_pairs, block_offset, n_clones, group_block, group_step, group_start, rows, messages,
                   predictive, scratch):  # fmt: skip
    """The lockstep forward steps in one compiled loop: per group, each block row is read once and applied to the
    messages of every chunk of the group (an axpy per chunk while the row sits in L1)."""
    for g in range(group_block.shape[0]):
        k, t = group_block[g], group_step[g]
        first, count = group_start[g], group_start[g + 1] - group_start[g]
        m_i, m_j = n_clones[block_pairs[k, 0]], n_clones[block_pairs[k, 1]]
        offset = block_offset[k]
        scratch[:count, :m_j] = 0.0
        for u in range(m_i):
            block_row = T[offset + u * m_j : offset + (u + 1) * m_j]
            for r in range(count):
                a = messages[rows[first + r], u]
                if a != 0.0:
                    out = scratch[r]
                    for v in range(m_j):
                        out[v] += a * block_row[v]
        for r in range(count):
            c = rows[first + r]
            total = 0.0
            for v in range(m_j):
                total += scratch[r, v]
            predictive[c, t + 1] = total
            inverse = np.float32(1.0 / total) if total > 0.0 else np.float32(0.0)
            for v in range(m_j):
                messages[c, v] = scratch[r, v] * inverse


def lockstep_log_likelihood(model: CHMM, pieces: list[Chunk], compiled: bool = False) -> tuple[float, int]:
    """log P of the counted steps of ``pieces`` (and of the first symbol of a piece that starts its sequence) by a
    lockstep forward pass (NumPy per group, or with ``compiled`` one numba loop); returns it and the number of
    (step, pair) groups, i.e. matrix products."""
    layout, T = model.layout, model.T
    schedule = LockstepSchedule.build(layout, pieces)  # the engine's grouping of chunks by (step, pair)
    if np.any(schedule.group_block < 0):
        raise ValueError("the prototype needs every pair of the text to have a block")
    starts = schedule.group_chunk_start.astype(np.int64)
    group_step = np.repeat(np.arange(schedule.n_steps), np.diff(schedule.step_group_start))
    rows_of = schedule.chunk_ids.astype(np.int64)
    messages = np.zeros((len(pieces), int(layout.n_clones.max())), dtype=T.dtype)
    predictive = np.zeros((len(pieces), schedule.length))
    for c, p in enumerate(pieces):
        s = int(p.x[0])
        lo, m = int(layout.clone_start[s]), int(layout.n_clones[s])
        first = model.pi[lo : lo + m].astype(np.float64)
        predictive[c, 0] = first.sum()
        messages[c, :m] = first / first.sum()
    if compiled:
        scratch = np.zeros((int(np.max(np.diff(starts))), messages.shape[1]), dtype=T.dtype)
        _compiled_pass(
            T, layout.block_pairs, layout.block_offset, layout.n_clones, schedule.group_block, group_step, starts,
            rows_of, messages, predictive, scratch,
        )  # fmt: skip
    else:
        for g, k in enumerate(schedule.group_block):
            t, rows = int(group_step[g]), rows_of[starts[g] : starts[g + 1]]
            i, j = layout.block_pairs[k]
            m_i, m_j = int(layout.n_clones[i]), int(layout.n_clones[j])
            offset = int(layout.block_offset[k])
            out = messages[rows, :m_i] @ T[offset : offset + m_i * m_j].reshape(m_i, m_j)
            norms = out.sum(axis=1, dtype=np.float64)
            predictive[rows, t + 1] = norms
            messages[rows, :m_j] = out / norms[:, None].astype(T.dtype)
    log_likelihood = counted_log_likelihood(pieces, [predictive[c, : len(p.x)] for c, p in enumerate(pieces)])
    return log_likelihood, len(schedule.group_block)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--states", type=int, nargs="+", default=[1000, 3000, 10000])
    parser.add_argument("--chunks", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--burn-in", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if not CORPUS.is_file():
        sys.exit(f"corpus not found: {CORPUS} (set CHMM_CORPORA to the folder holding carroll-alice.txt)")
    corpus = text.prepare_corpus(text.read_text(CORPUS), "paper", validation=0.0)
    x = corpus.train[:TRAIN_SYMBOLS]
    print(f"machine: {describe_machine()}")
    print(f"corpus: {CORPUS.name}, {len(x):,} symbols, uniform allocation, random T (seed 0), float32")
    print(
        "| states | chunks | burn-in | lockstep | steps computed | groups (GEMMs) | s sequential | s lockstep | ratio "
        "| BPS diff |\n|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"
    )
    for states in args.states:
        n_clones = allocation.allocate_clones(x, corpus.n_symbols, states, "uniform")
        model = random_model(corpus.symbols, n_clones, pairs_in_sequence(x, corpus.n_symbols), np.random.default_rng(0))
        inference.forward(model, x[:1000])
        sequential = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            exact = float(np.log(inference.forward(model, x).predictive).sum())
            sequential.append(time.perf_counter() - started)
        for chunks in args.chunks:
            size = -(-(len(x) - 1) // chunks)
            pieces = [p for p in chunk([x], size, args.burn_in) if isinstance(p, Chunk)]
            lockstep_log_likelihood(model, pieces[:2], compiled=True)  # compile outside the timings
            for compiled in (False, True):
                lockstep = []
                for _ in range(args.repeats):
                    started = time.perf_counter()
                    log_likelihood, groups = lockstep_log_likelihood(model, pieces, compiled)
                    lockstep.append(time.perf_counter() - started)
                computed = sum(len(p.x) - 1 for p in pieces)
                difference = (exact - log_likelihood) / len(x) / np.log(2)
                s, lk = min(sequential), min(lockstep)
                print(
                    f"| {states} | {len(pieces)} | {args.burn_in} | {'numba' if compiled else 'NumPy'} | "
                    f"{computed:,} | {groups:,} | {s:.3f} | {lk:.3f} | {lk / s:.2f} | {difference:.1e} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
