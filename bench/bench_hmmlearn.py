"""Benchmark: the engine's CPU inference against hmmlearn's CategoricalHMM on the same model, a CHMM written as a
plain HMM (H x H transition matrix, one-hot H x E emission matrix): log-likelihood (our scaled forward pass,
``log_likelihood``, against ``CategoricalHMM.score``) and Viterbi (our ``viterbi`` against ``decode``), with the
two answers checked against each other.

    python bench/bench_hmmlearn.py [--states 100 1000 10000] [--clones 10] [--models dense sparse] [--successors 5]
                                   [--length 10000] [--max-work 5e9] [--repeats 3] [--implementation scaling]

Each model has H states, E = H / clones symbols with ``--clones`` clones each, random transitions (each clone's row
uniform(0, 1) entries normalised) and uniform pi. "dense": every symbol pair has a block, the case where the CHMM
and the HMM are the same matrix; "sparse": each symbol is followed by ``--successors`` random symbols only, as text
is (hmmlearn still holds the whole H x H matrix, zeros included). The sequence is sampled from the model; its
length is ``--length`` capped so that hmmlearn's work per pass, N * H^2, stays under ``--max-work`` (at 10,000
states a 10,000-symbol sequence would take hmmlearn an hour and a half per pass), so per-symbol times are shown as
well. Where N was capped, ours is also timed on a sequence of the full ``--length`` (its per-symbol time in
parentheses): on a short sequence our time is mostly the call's fixed cost.

Protocol per model: one warm-up call of each side (ours also JIT-compiled before it on a short prefix), traced with
tracemalloc for the peak memory the call allocates beyond its inputs (numba's own buffers inside our kernels are not
seen by tracemalloc: at most a few O(N * clones) arrays); then ``--repeats`` timed rounds interleaved (ours,
hmmlearn, ours, hmmlearn ...), the median reported. ``--implementation`` is hmmlearn's forward pass: "scaling"
(the same scaled forward as ours, and hmmlearn's faster one) or "log" (hmmlearn's default, several times slower);
its Viterbi is the same in both.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import describe_machine  # noqa: E402
from engine.backends.cpu import inference  # noqa: E402
from engine.backends.cpu.sampling import sample  # noqa: E402
from engine.model.dense import CHMM, random_model  # noqa: E402

MB = 1024 * 1024


def block_pairs(kind: str, n_symbols: int, successors: int, rng: np.random.Generator) -> np.ndarray:
    """The stored symbol pairs: all of them ("dense"), or ``successors`` random successors of each symbol."""
    if kind == "dense":
        i, j = np.meshgrid(np.arange(n_symbols), np.arange(n_symbols), indexing="ij")
        return np.stack([i.ravel(), j.ravel()], axis=1).astype(np.int64)
    k = min(successors, n_symbols)
    follow = np.stack([rng.choice(n_symbols, size=k, replace=False) for _ in range(n_symbols)])
    return np.stack([np.repeat(np.arange(n_symbols), k), follow.ravel()], axis=1).astype(np.int64)


def build_model(kind: str, n_states: int, clones: int, successors: int, rng: np.random.Generator) -> CHMM:
    if n_states % clones:
        raise SystemExit(f"{n_states} states do not split into symbols of {clones} clones")
    n_symbols = n_states // clones
    pairs = block_pairs(kind, n_symbols, successors, rng)
    return random_model([str(s) for s in range(n_symbols)], np.full(n_symbols, clones), pairs, rng, np.float64)


def hmmlearn_peer(model: CHMM, implementation: str) -> Any:
    """The same model as hmmlearn's CategoricalHMM: the dense T, pi, and a one-hot emission matrix."""
    from hmmlearn.hmm import CategoricalHMM

    emission = np.zeros((model.n_states, model.n_symbols))
    emission[np.arange(model.n_states), model.layout.clone_symbol()] = 1.0
    peer = CategoricalHMM(
        n_components=model.n_states,
        n_features=model.n_symbols,
        init_params="",
        params="",
        implementation=implementation,
    )
    peer.startprob_ = model.pi.copy()
    peer.transmat_ = model.dense_T()
    peer.emissionprob_ = emission
    return peer


def make_passes(model: CHMM, x: np.ndarray, peer: Any) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """The two passes, each as (name, our call, hmmlearn's call) on the sequence ``x``."""
    X = x.reshape(-1, 1)
    return [
        ("log-likelihood", lambda: inference.log_likelihood(model, x), lambda: peer.score(X)),
        ("Viterbi", lambda: inference.viterbi(model, x), lambda: peer.decode(X, algorithm="viterbi")),
    ]


def traced(call: Callable[[], Any]) -> tuple[Any, float]:
    """The call's result and the peak memory it allocated beyond what was live before it (MB, tracemalloc)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, (peak - before) / MB


def timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def viterbi_agreement(ours: inference.ViterbiResult, their_log_p: float, their_path: np.ndarray) -> str:
    delta = abs(ours.log_probability - their_log_p)
    differ = int(np.count_nonzero(ours.clones != their_path))
    paths = "paths equal" if not differ else f"paths differ at {differ} positions"
    return f"{paths}; log max P {ours.log_probability:.6g}, abs diff {delta:.1e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, nargs="*", default=[100, 1000, 10000])
    parser.add_argument("--clones", type=int, default=10, help="clones per symbol (E = states / clones)")
    parser.add_argument("--models", nargs="*", choices=["dense", "sparse"], default=["dense", "sparse"])
    parser.add_argument("--successors", type=int, default=5, help="symbols that may follow a symbol (sparse)")
    parser.add_argument("--length", type=int, default=10_000)
    parser.add_argument("--max-work", type=float, default=5e9, help="cap on N * H^2, hmmlearn's work per pass")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--implementation", choices=["scaling", "log"], default="scaling")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # hmmlearn's log of the zeros of a sparse T and of the one-hot emissions

    print(describe_machine())
    print(
        f"hmmlearn {__import__('hmmlearn').__version__} (implementation={args.implementation}), float64 both sides; "
        f"{args.clones} clones per symbol; sparse: {args.successors} successors per symbol; "
        f"N = min({args.length}, {args.max_work:.0e} / H^2); median of {args.repeats} interleaved rounds"
    )
    print()
    print(
        "| model | states H | symbols E | blocks | length N | pass | ours s | hmmlearn s | hmmlearn / ours "
        "| ours µs / symbol | hmmlearn µs / symbol | agreement | model MB ours / hmmlearn "
        "| peak MB ours / hmmlearn |"
    )
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|")
    for kind in args.models:
        for n_states in args.states:
            rng = np.random.default_rng(args.seed)
            model = build_model(kind, n_states, args.clones, args.successors, rng)
            length = max(2, min(args.length, int(args.max_work // n_states**2)))
            x = sample(model, length, rng)
            peer = hmmlearn_peer(model, args.implementation)
            ours_mb = (model.T.nbytes + model.pi.nbytes) / MB
            their_mb = (peer.transmat_.nbytes + peer.emissionprob_.nbytes + peer.startprob_.nbytes) / MB

            inference.log_likelihood(model, x[:10])  # numba JIT
            inference.viterbi(model, x[:10])
            passes = make_passes(model, x, peer)
            warm: dict[str, tuple[Any, float, Any, float]] = {}
            for name, ours, theirs in passes:
                our_result, our_peak = traced(ours)
                their_result, their_peak = traced(theirs)
                warm[name] = (our_result, our_peak, their_result, their_peak)
            times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name, _, _ in passes}
            for _ in range(args.repeats):
                for name, ours, theirs in passes:
                    times[name][0].append(timed(ours))
                    times[name][1].append(timed(theirs))

            long_per_symbol: dict[str, str] = {name: "" for name, _, _ in passes}
            if length < args.length:
                x_long = sample(model, args.length, rng)
                for name, ours, _ in make_passes(model, x_long, peer):
                    seconds = statistics.median(timed(ours) for _ in range(args.repeats))
                    long_per_symbol[name] = f" ({seconds / len(x_long) * 1e6:.3g} at {len(x_long):,})"

            for name, _, _ in passes:
                our_result, our_peak, their_result, their_peak = warm[name]
                if name == "log-likelihood":
                    delta = abs(our_result - their_result)
                    agreement = f"log P {our_result:.6g}, abs diff {delta:.1e} (rel {delta / abs(our_result):.1e})"
                else:
                    agreement = viterbi_agreement(our_result, their_result[0], their_result[1])
                ours_s = statistics.median(times[name][0])
                theirs_s = statistics.median(times[name][1])
                our_per_symbol = f"{ours_s / length * 1e6:.3g}{long_per_symbol[name]}"
                print(
                    f"| {kind} | {n_states:,} | {model.n_symbols:,} | {model.layout.n_blocks:,} | {length:,} | {name} "
                    f"| {ours_s:.2g} | {theirs_s:.3g} | {theirs_s / ours_s:,.0f} | {our_per_symbol} "
                    f"| {theirs_s / length * 1e6:,.4g} | {agreement} | {ours_mb:,.3g} / {their_mb:,.4g} "
                    f"| {our_peak:.3g} / {their_peak:,.4g} |",
                    flush=True,
                )
            del peer, model


if __name__ == "__main__":
    main()
