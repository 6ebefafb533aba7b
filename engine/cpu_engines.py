"""The CPU implementations of the engine protocol (:class:`engine.engines.Engine`): dense blocks
(:class:`DenseEngine`, numba kernels of :mod:`engine.kernels.cpu`) and CSR blocks (:class:`SparseEngine`,
:mod:`engine.sparse`). :mod:`engine.engines` registers them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine import graph, inference, sampling, sparse
from engine.blocks import BlockLayout, normalise_rows
from engine.model import CHMM

SPARSE_TOOL_LIMIT = 10_000
"""Tools written for dense blocks (decoding, pruning by top mass or Viterbi clones) convert a sparse model up to
this size; a larger one would not fit this machine's memory as dense blocks."""


@dataclass(frozen=True)
class DenseOptions:
    """Settings of the dense CPU implementation. count_method: "gemm" (one matrix product per symbol pair) or
    "loop" (per-step updates), see :func:`engine.inference.e_step`."""

    count_method: str = "gemm"

    def __post_init__(self) -> None:
        if self.count_method not in inference.COUNT_METHODS:
            raise ValueError(f"count_method must be one of {', '.join(inference.COUNT_METHODS)}")


def row_split(layout: BlockLayout) -> int:
    """The first block of the second half of the stored entries, moved to the first block of a source symbol (a row
    of T lies in the blocks of one source symbol: its two halves can be normalised by two threads at once)."""
    sizes = np.diff(layout.block_offset)
    if len(sizes) < 2:
        return 0
    half = int(np.searchsorted(np.cumsum(sizes), sizes.sum() / 2.0))
    starts = np.flatnonzero(np.r_[True, layout.block_pairs[1:, 0] != layout.block_pairs[:-1, 0]])
    return int(starts[np.argmin(np.abs(starts - half))])


def refuse_lockstep(name: str, chunk: int | None) -> None:
    """An implementation without lockstep passes refuses chunks of a sequence outside a cluster (one sentence); no
    chunk (None) or :data:`engine.chunks.EXACT` are its exact passes."""
    if chunk:
        raise ValueError(
            f"the {name} implementation has no lockstep passes: chunks of a document (--chunk) run on a cluster "
            "(--workers or --cluster) or, without one, on the GPU (--backend gpu)"
        )


class DenseEngine:
    """Dense blocks on the CPU (numba kernels of :mod:`engine.kernels.cpu`); the state is the :class:`CHMM`."""

    name = "dense"

    def __init__(self, options: DenseOptions | None = None) -> None:
        self.count_method = (options or DenseOptions()).count_method
        # the transposed blocks of the T that online EM updates in place (kept in step by the fused kernel)
        self._transposed: tuple[np.ndarray, np.ndarray] | None = None

    def load(self, model: CHMM) -> CHMM:
        return model

    def host(self, state: CHMM) -> CHMM:
        return state

    def copy(self, state: CHMM) -> CHMM:
        return state.with_arrays(T=state.T.copy())

    def forward(self, state: CHMM, x: np.ndarray, initial: np.ndarray | None = None) -> inference.ForwardResult:
        return inference.forward(state, x, initial=initial)

    def score(self, state: CHMM, x: np.ndarray) -> inference.ScoreResult:
        return inference.score(state, x)

    def surprisal(self, state: CHMM, x: np.ndarray) -> np.ndarray:
        return inference.surprisal(state, x)

    def plan(
        self,
        state: CHMM,
        x: np.ndarray,
        algorithm: str,
        batch_size: int,
        chunk: int | None = None,
        burn_in: int | None = None,
        row_key: np.ndarray | None = None,
    ) -> inference.PairLayout | None:
        if algorithm != "em":
            return None
        refuse_lockstep(self.name, chunk)
        return inference.pair_sorted_offsets(state.layout, x, row_key=row_key).with_buffers(state.T.dtype, len(x))

    def zero_counts(self, state: CHMM) -> np.ndarray:
        return np.zeros(state.layout.size)

    def as_counts(self, state: CHMM, values: Any) -> np.ndarray:
        return np.asarray(values)

    def e_step(
        self,
        state: CHMM,
        x: np.ndarray,
        initial: np.ndarray | None = None,
        plan: inference.PairLayout | None = None,
        counts_out: np.ndarray | None = None,
        counted: tuple[int, int] | None = None,
        row_key: np.ndarray | None = None,
    ) -> inference.EStepResult:
        cached = self._transposed
        transposed = cached[1] if cached is not None and cached[0] is state.T else None
        return inference.e_step(
            state,
            x,
            initial=initial,
            count_method=self.count_method,
            pair_layout=plan,
            T_transposed=transposed,
            counts_out=counts_out,
            counted=counted,
            row_key=row_key,
        )

    def m_step(self, state: CHMM, counts: np.ndarray, pseudocount: float, pi: np.ndarray | None = None) -> CHMM:
        T = normalise_rows(state.layout, counts, pseudocount, state.T.dtype, state.support())
        return state.with_arrays(T=T, counts=counts, pi=state.pi if pi is None else pi.astype(state.pi.dtype))

    def fused_online_update(
        self,
        state: CHMM,
        statistic: np.ndarray,
        e: inference.EStepResult,
        memory: float,
        pseudocount: float,
        first: bool,
    ) -> CHMM:
        """:func:`engine.learning.online_update` in one fused kernel (``cpu.online_m_step``): the statistic, T and
        T's transposed blocks updated in place, only the blocks the batch touched rescaled (two sweeps over the
        stored blocks per batch besides the E-step, and no new arrays)."""
        from engine.kernels import cpu

        layout = state.layout
        T = state.T
        support = state.support()  # before T changes: a pruned model's pseudocount goes to its non-zeros only
        cached = self._transposed
        if cached is None or cached[0] is not T:
            cached = self._transposed = (
                T,
                cpu.transpose_blocks(T, layout.block_pairs, layout.block_offset, layout.n_clones),
            )
        T_transposed = cached[1]
        row_length = np.zeros(layout.n_symbols, dtype=np.int64)
        np.add.at(row_length, layout.block_pairs[:, 0], layout.n_clones[layout.block_pairs[:, 1]])
        args = (
            statistic, e.counts, e.touched, 0.0 if first else memory, 1.0 - memory, pseudocount, T, T_transposed,
            layout.block_pairs, layout.block_offset, layout.n_clones, layout.clone_start, row_length,
        )  # fmt: skip
        middle = row_split(layout)
        if inference.concurrent_passes() and 0 < middle < layout.n_blocks:  # two threads on halves of the rows
            other = inference.two_threads().submit(cpu.online_m_step, *args, middle, layout.n_blocks)
            cpu.online_m_step(*args, 0, middle)
            other.result()
        else:
            cpu.online_m_step(*args, 0, layout.n_blocks)
        if support is not None:
            T[:] = normalise_rows(layout, statistic, pseudocount, T.dtype, support)
            T_transposed[:] = cpu.transpose_blocks(T, layout.block_pairs, layout.block_offset, layout.n_clones)
        return state

    def with_counts(self, state: CHMM, counts: np.ndarray) -> CHMM:
        return state.with_arrays(counts=counts)

    def viterbi(
        self, state: CHMM, evidence: np.ndarray | inference.Evidence, row_shift: np.ndarray | None = None
    ) -> inference.ViterbiResult:
        return inference.viterbi(state, evidence, row_shift=row_shift)

    def hard_counts(self, state: CHMM, x: np.ndarray) -> tuple[np.ndarray, float]:
        log_likelihood = inference.log_likelihood(state, x)
        path = inference.viterbi(state, x).clones
        return inference.path_counts(state.layout, x, path), log_likelihood

    def sample(
        self, state: CHMM, length: int, rng: np.random.Generator, prefix: np.ndarray | None = None
    ) -> np.ndarray:
        return sampling.sample(state, length, rng, prefix)

    def prune(self, state: CHMM, threshold: float) -> CHMM:
        return graph.prune(state, threshold=threshold)

    def transitions(self, state: CHMM) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        return state.transitions()

    def as_dense(self, state: CHMM, what: str) -> CHMM:
        return state

    def finite(self, state: CHMM) -> bool:
        return bool(np.all(np.isfinite(state.T)))


# ---------------------------------------------------------------------------------------------- sparse, CPU
class SparseEngine:
    """CSR blocks on the CPU (:mod:`engine.sparse`): every operation costs O(stored entries) per step; the state
    is the :class:`engine.sparse.SparseCHMM`. EM never creates entries, so zeros stay zero. Walks with actions run
    through ``row_key`` (:meth:`plan`, :meth:`e_step`) and ``row_shift`` (:meth:`viterbi`) as on the dense engine."""

    name = "sparse"

    def load(self, model: sparse.SparseCHMM) -> sparse.SparseCHMM:
        return model

    def host(self, state: sparse.SparseCHMM) -> sparse.SparseCHMM:
        return state

    def copy(self, state: sparse.SparseCHMM) -> sparse.SparseCHMM:
        return state.with_arrays(data=state.data.copy())

    def forward(
        self, state: sparse.SparseCHMM, x: np.ndarray, initial: np.ndarray | None = None
    ) -> inference.ForwardResult:
        return sparse.forward(state, x, initial=initial)

    def score(self, state: sparse.SparseCHMM, x: np.ndarray) -> inference.ScoreResult:
        return sparse.score(state, x)

    def surprisal(self, state: sparse.SparseCHMM, x: np.ndarray) -> np.ndarray:
        return sparse.surprisal(state, x)

    def plan(
        self,
        state: sparse.SparseCHMM,
        x: np.ndarray,
        algorithm: str,
        batch_size: int,
        chunk: int | None = None,
        burn_in: int | None = None,
        row_key: np.ndarray | None = None,
    ) -> sparse.SequencePlan | None:
        if algorithm != "em":
            return None
        refuse_lockstep(self.name, chunk)
        return sparse.SequencePlan.build(state.layout, x, state.data.dtype, row_key)

    def zero_counts(self, state: sparse.SparseCHMM) -> np.ndarray:
        return np.zeros(state.data.size)

    def as_counts(self, state: sparse.SparseCHMM, values: Any) -> np.ndarray:
        return np.asarray(values)

    def e_step(
        self,
        state: sparse.SparseCHMM,
        x: np.ndarray,
        initial: np.ndarray | None = None,
        plan: sparse.SequencePlan | None = None,
        counts_out: np.ndarray | None = None,
        counted: tuple[int, int] | None = None,
        row_key: np.ndarray | None = None,
    ) -> inference.EStepResult:
        if counted is not None:
            raise ValueError("chunks with a burn-in run on dense models; a sparse model's unit of work is a document")
        return sparse.e_step(state, x, plan, initial, row_key)

    def m_step(
        self, state: sparse.SparseCHMM, counts: np.ndarray, pseudocount: float, pi: np.ndarray | None = None
    ) -> sparse.SparseCHMM:
        data = sparse.normalise(state, counts, pseudocount)
        return state.with_data(data, counts, None if pi is None else pi.astype(state.pi.dtype))

    def with_counts(self, state: sparse.SparseCHMM, counts: np.ndarray) -> sparse.SparseCHMM:
        return state.with_arrays(counts=counts)

    def viterbi(
        self,
        state: sparse.SparseCHMM,
        evidence: np.ndarray | inference.Evidence,
        row_shift: np.ndarray | None = None,
    ) -> inference.ViterbiResult:
        return sparse.viterbi(state, evidence, row_shift)

    def hard_counts(self, state: sparse.SparseCHMM, x: np.ndarray) -> tuple[np.ndarray, float]:
        log_likelihood = sparse.log_likelihood(state, x)
        path = sparse.viterbi(state, x).clones
        counts = np.zeros(state.data.size)
        if np.any(path < 0) or len(x) < 2:
            return counts, log_likelihood
        rows, cols = state.entry_rows_cols()
        width = np.int64(state.n_states)
        keys = rows.astype(np.int64) * width + cols
        order = np.argsort(keys, kind="stable")
        wanted = path[:-1].astype(np.int64) * width + path[1:]
        found = order[np.searchsorted(keys[order], wanted)]
        counts += np.bincount(found, minlength=state.data.size)
        return counts, log_likelihood

    def sample(
        self, state: sparse.SparseCHMM, length: int, rng: np.random.Generator, prefix: np.ndarray | None = None
    ) -> np.ndarray:
        return sparse.sample(state, length, rng, prefix)

    def prune(self, state: sparse.SparseCHMM, threshold: float) -> sparse.SparseCHMM:
        return sparse.prune(state, threshold)

    def transitions(self, state: sparse.SparseCHMM) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        return state.transitions()

    def as_dense(self, state: sparse.SparseCHMM, what: str) -> CHMM:
        if state.n_states > SPARSE_TOOL_LIMIT:
            raise ValueError(
                f"{what} works on sparse models of up to {SPARSE_TOOL_LIMIT:,} states; this one has {state.n_states:,}"
            )
        return state.to_dense()

    def finite(self, state: sparse.SparseCHMM) -> bool:
        return bool(np.all(np.isfinite(state.data)))
