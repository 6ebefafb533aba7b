"""The CPU implementations of the engine protocol (:class:`engine.backends.engines.Engine`): dense blocks
(:class:`DenseEngine`, numba kernels of :mod:`engine.backends.cpu.kernels`) and CSR blocks (:class:`SparseEngine`,
:mod:`engine.backends.cpu.sparse`). :mod:`engine.backends.engines` registers them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.backends import engines
from engine.backends.cpu import inference, sampling, sparse
from engine.backends.cpu import kernels as cpu
from engine.errors import CHMMError
from engine.model import dense as model_io
from engine.model import pruning
from engine.model.blocks import BlockLayout, normalise_rows, row_sums
from engine.model.dense import CHMM

SPARSE_TOOL_LIMIT = 10_000
"""Tools written for dense blocks (decoding, pruning by top mass or Viterbi clones) convert a sparse model up to
this size; a larger one would not fit this machine's memory as dense blocks."""


@dataclass(frozen=True)
class DenseOptions:
    """Settings of the dense CPU implementation. count_method: "gemm" (one matrix product per symbol pair) or
    "loop" (per-step updates), see :func:`engine.backends.cpu.inference.e_step`."""

    count_method: str = "gemm"

    def __post_init__(self) -> None:
        if self.count_method not in inference.COUNT_METHODS:
            raise CHMMError(f"count_method must be one of {', '.join(inference.COUNT_METHODS)}")


def row_split(layout: BlockLayout) -> int:
    """The first block of the second half of the stored entries, moved to the first block of a source symbol (a row
    of T lies in the blocks of one source symbol: its two halves can be normalised by two threads at once)."""
    sizes = np.diff(layout.block_offset)
    if len(sizes) < 2:
        return 0
    half = int(np.searchsorted(np.cumsum(sizes), sizes.sum() / 2.0))
    starts = np.flatnonzero(np.r_[True, layout.block_pairs[1:, 0] != layout.block_pairs[:-1, 0]])
    return int(starts[np.argmin(np.abs(starts - half))])


RESCALE_BELOW = 1e-150
""":class:`LazyOnlineUpdate` folds its scale into the statistic once the scale falls below this (about every 3,300
batches at lambda 0.9), far from float64's range for statistic / scale."""


class LazyOnlineUpdate:
    """Online EM's update (paper, section 3) over one epoch on the dense CPU engine, the same recursion as
    :func:`engine.training.learning.online_update` without its two sweeps over every stored entry per batch:

    - the running statistic is kept as A = s * S with one scale s, so A^(b) = lambda A^(b-1) + (1 - lambda) xi
      is s <- lambda s and S <- S + ((1 - lambda) / s) xi on the blocks the batch touched only (untouched blocks
      decay through s), with each row's total of S kept beside it;
    - T^(b) = row-normalise(A^(b) + p) = (S + p / s) / (row total + row length * p / s) is written only on the
      blocks the next batch reads (its E-step reads no others), and on every block after the epoch's last batch.

    Per batch this reads and writes the blocks of two batches rather than all of T twice (Calgary at 3,000 states:
    about 60% of the stored entries). Numerically it is the eager update up to rounding (float64 throughout).
    ``state`` and ``statistic`` are updated in place; :meth:`finish` leaves A in ``statistic`` at its true scale."""

    def __init__(
        self, state: CHMM, statistic: np.ndarray, memory: float, T_transposed: np.ndarray, counts: np.ndarray
    ) -> None:
        layout = state.layout
        self.state, self.statistic, self.memory, self.T_transposed = state, statistic, memory, T_transposed
        self.counts = counts  # the zeroed buffer each batch's E-step writes into (``counts_out``)
        self.scale = 1.0
        self.row_total = row_sums(layout, statistic)  # float64, a fresh array
        self.row_length = np.zeros(layout.n_symbols, dtype=np.int64)
        np.add.at(self.row_length, layout.block_pairs[:, 0], layout.n_clones[layout.block_pairs[:, 1]])
        self.middle = row_split(layout)

    def _halves(self, kernel: Any, *args: Any) -> None:
        """Run ``kernel`` over all blocks, on two threads over two halves of the rows where passes run at once."""
        n_blocks = self.state.layout.n_blocks
        if inference.concurrent_passes() and 0 < self.middle < n_blocks:
            other = inference.two_threads().submit(kernel, *args, self.middle, n_blocks)
            kernel(*args, 0, self.middle)
            other.result()
        else:
            kernel(*args, 0, n_blocks)

    def update(self, e: inference.EStepResult, pseudocount: float, first: bool, needed: np.ndarray | None) -> None:
        """The update after one batch (its E-step ``e``, whose counts are consumed and zeroed); ``first``: the
        first batch of a run (A = (1 - lambda) xi); ``needed``: per block, whether the next batch reads it (None:
        every block, after the last batch)."""
        layout = self.state.layout
        if first or self.memory == 0.0:
            self.statistic.fill(0.0)
            self.row_total.fill(0.0)
            self.scale = 1.0
        else:
            if self.scale < RESCALE_BELOW:
                self.finish()
            self.scale *= self.memory
        blocks = (layout.block_pairs, layout.block_offset, layout.n_clones, layout.clone_start)
        gain = (1.0 - self.memory) / self.scale
        self._halves(cpu.online_accumulate, self.statistic, e.counts, e.touched, gain, self.row_total, *blocks)
        needed = np.ones(layout.n_blocks, dtype=np.bool_) if needed is None else needed
        self._halves(
            cpu.online_transitions, self.statistic, pseudocount / self.scale, self.row_total, self.row_length,
            needed, self.state.T, self.T_transposed, *blocks,
        )  # fmt: skip

    def finish(self) -> None:
        """Fold the scale into the statistic (A = s * S, s = 1)."""
        if self.scale != 1.0:
            self.statistic *= self.scale
            self.row_total *= self.scale
            self.scale = 1.0


def refuse_lockstep(name: str, chunk: int | None) -> None:
    """An implementation without lockstep passes refuses chunks of a sequence outside a cluster (one sentence); no
    chunk (None) or :data:`engine.backends.chunks.EXACT` are its exact passes."""
    if chunk:
        raise CHMMError(
            f"the {name} implementation has no lockstep passes: chunks of a document (--chunk) run on a cluster "
            "(--workers or --cluster) or, without one, on the GPU (--backend gpu)"
        )


SHORT_SEQUENCE = 10_000
SHORT_SEQUENCE_SHARE = 16
"""An E-step keeps T's transposed blocks for the next ones when its sequence has at most :data:`SHORT_SEQUENCE`
symbols and fewer than 1/16 as many as T has entries: one of many short sequences (sentences, a log's cases), where
transposing T per sequence was half the E-step's time (26,000 lines of Tiny Shakespeare). A long document transposes
within its own E-step, as before, and T's copy is not kept beside the next M-step."""


class DenseEngine:
    """Dense blocks on the CPU (numba kernels of :mod:`engine.backends.cpu.kernels`); the state is the :class:`CHMM`."""

    name = "dense"

    def __init__(self, options: DenseOptions | None = None) -> None:
        self.count_method = (options or DenseOptions()).count_method
        # the transposed blocks of the T that online EM updates in place (kept in step by LazyOnlineUpdate)
        self._transposed: tuple[np.ndarray, np.ndarray] | None = None

    def load(self, model: CHMM) -> CHMM:
        return model

    def host(self, state: CHMM) -> CHMM:
        return state

    def copy(self, state: CHMM) -> CHMM:
        return state.with_arrays(T=state.T.copy())

    def forward(
        self,
        state: CHMM,
        x: np.ndarray,
        initial: np.ndarray | None = None,
        row_key: np.ndarray | None = None,
        store: bool = False,
    ) -> inference.ForwardResult:
        return inference.forward(state, x, store, initial, row_key)

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
        if transposed is None and len(x) <= SHORT_SEQUENCE and len(x) * SHORT_SEQUENCE_SHARE < state.layout.size:
            transposed = self._transpose(state)  # a short sequence, one of many: transpose T once, not per sequence
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

    def online_session(self, state: CHMM, statistic: np.ndarray, memory: float) -> LazyOnlineUpdate | None:
        """Online EM's update after each batch of an epoch on ``state`` (updated in place: pass a copy), exact and
        lazy (:class:`LazyOnlineUpdate`); None for a pruned model, whose pseudocount goes to its non-zeros only (the
        update written once, :func:`engine.training.learning.online_update`, then runs)."""
        if state.support() is not None:
            return None
        transposed = self._transpose(state)
        # a batch's counts in T's dtype when they are one matrix product per block (the product's own precision:
        # exact, and half the bytes of float64 for float32 models); per-step sums ("loop") accumulate in float64
        counts_dtype = state.T.dtype if self.count_method == "gemm" else np.float64
        return LazyOnlineUpdate(state, statistic, memory, transposed, np.zeros(state.layout.size, dtype=counts_dtype))

    def _transpose(self, state: CHMM) -> np.ndarray:
        """The blocks of ``state``'s T transposed (:func:`engine.backends.cpu.kernels.transpose_blocks`), kept for
        the next E-steps while T is the same array."""
        cached = self._transposed
        if cached is None or cached[0] is not state.T:
            layout = state.layout
            transposed = cpu.transpose_blocks(state.T, layout.block_pairs, layout.block_offset, layout.n_clones)
            cached = self._transposed = (state.T, transposed)
        return cached[1]

    def with_counts(self, state: CHMM, counts: np.ndarray) -> CHMM:
        return state.with_arrays(counts=counts)

    def viterbi(
        self, state: CHMM, evidence: np.ndarray | inference.Evidence, row_shift: np.ndarray | None = None
    ) -> inference.ViterbiResult:
        return inference.viterbi(state, evidence, row_shift=row_shift)

    def hard_counts(
        self, state: CHMM, x: np.ndarray, row_key: np.ndarray | None = None, score: str = "likelihood"
    ) -> tuple[np.ndarray, float]:
        _, counts, log_likelihood = inference.hard_counts(
            lambda x, shift: inference.viterbi(state, x, shift),
            lambda x, key: inference.log_likelihood(state, x, key),
            state.layout, x, row_key, score,
        )  # fmt: skip
        return counts, log_likelihood

    def sample(
        self, state: CHMM, length: int, rng: np.random.Generator, prefix: np.ndarray | None = None
    ) -> np.ndarray:
        return sampling.sample(state, length, rng, prefix)

    def prune(self, state: CHMM, threshold: float) -> CHMM:
        return pruning.prune(state, threshold=threshold)

    def transitions(self, state: CHMM) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        return state.transitions()

    def as_dense(self, state: CHMM, what: str) -> CHMM:
        return state

    def finite(self, state: CHMM) -> bool:
        return bool(np.all(np.isfinite(state.T)))


# ---------------------------------------------------------------------------------------------- sparse, CPU
class SparseEngine:
    """CSR blocks on the CPU (:mod:`engine.backends.cpu.sparse`): every operation costs O(stored entries) per step; the
    state is the :class:`engine.backends.cpu.sparse.SparseCHMM`. EM never creates entries, so zeros stay zero. Walks
    with actions run through ``row_key`` (:meth:`plan`, :meth:`e_step`) and ``row_shift`` (:meth:`viterbi`) as on the
    dense engine."""

    name = "sparse"

    def load(self, model: sparse.SparseCHMM) -> sparse.SparseCHMM:
        return model

    def host(self, state: sparse.SparseCHMM) -> sparse.SparseCHMM:
        return state

    def copy(self, state: sparse.SparseCHMM) -> sparse.SparseCHMM:
        return state.with_arrays(data=state.data.copy())

    def forward(
        self,
        state: sparse.SparseCHMM,
        x: np.ndarray,
        initial: np.ndarray | None = None,
        row_key: np.ndarray | None = None,
        store: bool = False,
    ) -> inference.ForwardResult:
        return sparse.forward(state, x, store, initial, row_key)

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
            raise CHMMError("chunks with a burn-in run on dense models; a sparse model's unit of work is a document")
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

    def hard_counts(
        self, state: sparse.SparseCHMM, x: np.ndarray, row_key: np.ndarray | None = None, score: str = "likelihood"
    ) -> tuple[np.ndarray, float]:
        layout = state.layout
        path, _, log_likelihood = inference.hard_counts(
            lambda x, shift: sparse.viterbi(state, x, shift),
            lambda x, key: sparse.log_likelihood(state, x, key),
            layout, x, row_key, score,
        )  # fmt: skip
        counts = np.zeros(state.data.size)
        if np.any(path < 0) or len(x) < 2:
            return counts, log_likelihood
        rows, cols = state.entry_rows_cols()
        width = np.int64(state.n_states)
        keys = rows.astype(np.int64) * width + cols
        order = np.argsort(keys, kind="stable")
        source = path[:-1].astype(np.int64)
        if row_key is not None:  # the clone's row in its step's block row (the rows of a walk's action)
            x = np.asarray(x, dtype=np.int64)
            source = source + layout.clone_start[np.asarray(row_key[:-1], dtype=np.int64)] - layout.clone_start[x[:-1]]
        wanted = source * width + path[1:]
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
            raise CHMMError(
                f"{what} works on sparse models of up to {SPARSE_TOOL_LIMIT:,} states; this one has {state.n_states:,}"
            )
        return state.to_dense()

    def finite(self, state: sparse.SparseCHMM) -> bool:
        return bool(np.all(np.isfinite(state.data)))


def _is_dense(model: Any) -> bool:
    return model.form == "dense"


def _is_sparse(model: Any) -> bool:
    return model.form == "sparse"


engines.register(
    engines.Implementation(
        "dense", "cpu", DenseEngine, _is_dense, DenseOptions, auto_rank=0, grows=True, chunks=True,
        restart_processes=True, file_format=model_io.FORMAT_NAME, read=model_io.load,
        adopt=lambda model: model.to_dense(),
    )
)  # fmt: skip
engines.register(
    engines.Implementation(
        "sparse", "cpu", lambda _: SparseEngine(), _is_sparse, grows=True, restart_processes=True,
        file_format=sparse.SPARSE_FORMAT, read=sparse.load, adopt=sparse.as_sparse,
    )
)  # fmt: skip
