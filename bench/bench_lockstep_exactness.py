"""Benchmark: does batch EM with lockstep E-steps (chunks with a burn-in, ``TrainingConfig(chunk=...)``
without a cluster) reach the
BPS of the exact sequential passes? On every corpus of $CHMM_CORPORA (default ../shared/corpora).

For each corpus (paper normalisation, its training text): a model of ``--states`` clones (n-gram allocation, random
T, seed 0) is trained for ``--iterations`` batch-EM iterations twice on the GPU engine over the simulated device
(the NumPy/numba twins of the CUDA kernels, so the arithmetic is the CUDA kernels' float32 arithmetic, on the CPU):
once with the exact sequential E-step, once with lockstep E-steps over chunks of ``--chunk-length`` steps with
``--burn-in`` symbols of burn-in before and after each. It prints the training BPS of both final models (each scored
with the exact forward pass, float64 accumulation) and their difference; the issue's bound is 1e-6.

    python bench/bench_lockstep_exactness.py [--states 1000] [--iterations 20] [--chunk-length 200] [--burn-in 50]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import describe_machine  # noqa: E402
from engine.backends.cpu import inference  # noqa: E402
from engine.backends.gpu import (
    devices,  # noqa: E402
    implementation,  # noqa: E402
)
from engine.corpora import (
    allocation,  # noqa: E402
    text,  # noqa: E402
)
from engine.model.blocks import BlockLayout, normalise_rows, pairs_in_sequence  # noqa: E402
from engine.model.dense import CHMM  # noqa: E402

CORPORA = Path(os.environ.get("CHMM_CORPORA", ROOT.parent / "shared" / "corpora"))


def _bits(model: CHMM, x: np.ndarray) -> float:
    """Bits per symbol of ``x`` under ``model`` with the exact forward pass."""
    return float(-np.sum(np.log(inference.forward(model, x).predictive)) / len(x) / np.log(2))


def train(
    model: CHMM, x: np.ndarray, iterations: int, chunk: int | None = None, burn_in: int | None = None
) -> tuple[CHMM, float]:
    """``iterations`` batch-EM iterations (pseudocount 1e-6, pi re-estimated) on gpu-sim, in lockstep chunks of
    ``chunk`` steps where given; the model and seconds."""
    engine = implementation.GpuDenseEngine(devices.SimulatedDevice(), name="gpu-sim")
    state = engine.load(model)
    started = time.perf_counter()
    plan = engine.plan(state, x, "em", len(x), chunk=chunk, burn_in=burn_in)
    for _ in range(iterations):
        e = engine.e_step(state, x, plan=plan)
        state = engine.m_step(state, e.counts, 1e-6, e.gamma_first)
    return engine.host(state), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, default=1000)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--chunk-length", type=int, default=200)
    parser.add_argument("--burn-in", type=int, default=50)
    parser.add_argument("--corpora", nargs="*", help="corpus names (default: every .txt in $CHMM_CORPORA)")
    args = parser.parse_args()
    names = args.corpora or sorted(p.stem for p in CORPORA.glob("*.txt") if p.stem != "README")
    print(
        f"machine: {describe_machine()}; {args.states:,} states, {args.iterations} iterations, chunks of "
        f"{args.chunk_length} steps, burn-in {args.burn_in}",
        flush=True,
    )
    print("| corpus | training symbols | chunks | exact BPS | lockstep BPS | difference | s exact | s lockstep |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    worst = 0.0
    for name in names:
        corpus = text.prepare_corpus(text.read_text(CORPORA / f"{name}.txt"), name=name)
        x = corpus.train_full
        n_clones = allocation.allocate_clones(x, corpus.n_symbols, args.states, "ngram", 5)
        layout = BlockLayout.build(n_clones, pairs_in_sequence(x, corpus.n_symbols))
        rng = np.random.default_rng(0)
        T = normalise_rows(layout, rng.random(layout.size, dtype=np.float32), 0.0, np.float32)
        pi = np.full(layout.n_states, 1.0 / layout.n_states, dtype=np.float32)
        model = CHMM(list(corpus.symbols), layout, T, pi, None, {})
        chunks = -(-(len(x) - 1) // args.chunk_length)
        exact, exact_s = train(model, x, args.iterations)
        together, together_s = train(model, x, args.iterations, args.chunk_length, args.burn_in)
        bits_exact, bits_together = _bits(exact, x), _bits(together, x)
        worst = max(worst, abs(bits_together - bits_exact))
        print(
            f"| {name} | {len(x):,} | {chunks:,} | {bits_exact:.6f} | {bits_together:.6f} | "
            f"{bits_together - bits_exact:+.1e} | {exact_s:.0f} | {together_s:.0f} |",
            flush=True,
        )
    print(f"\nlargest difference: {worst:.1e} bits per symbol (bound 1e-6)")


if __name__ == "__main__":
    main()
