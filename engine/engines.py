"""One protocol for what a model's implementation does, and :func:`engine_for`, which picks the implementation once.

A CHMM is held in one of three forms: dense blocks on the CPU (:class:`engine.model.CHMM`, kernels in
:mod:`engine.inference`), CSR blocks on the CPU (:class:`engine.sparse.SparseCHMM`, kernels in
:mod:`engine.sparse`), or dense blocks on a CUDA GPU (:mod:`engine.gpu`). Each implementation of :class:`Engine`
works on its own *state* (the host model itself on the CPU, a device copy on the GPU): ``load`` makes the state
from a host model and ``host`` gives the host model back. Every caller outside the implementations (the training
loop, the workflows, the graph tools) goes through this protocol and never tests what kind of model it holds.

The operations (paper, section 3): the scaled forward pass, scores and surprisal; the E-step of one sequence,
returning expected counts sum_n xi(n) in the state's own layout; the M-step T = row-normalise(counts + pseudocount)
over the stored entries; the online-EM update of the running statistic; Viterbi with soft evidence and its hard
counts; sampling; pruning; the non-zero transitions as clone pairs.

Corpora of several documents are lists of independent sequences (each starts from pi): :func:`e_step_sequences`
sums their counts and :func:`score_sequences` their code lengths, on any implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from engine import graph, inference, sparse
from engine.backend import resolve_backend
from engine.model import CHMM, normalise_rows

Model = CHMM | sparse.SparseCHMM
"""A host model of either form."""

SPARSE_TOOL_LIMIT = 10_000
"""Tools written for dense blocks (decoding, pruning by top mass or Viterbi clones) convert a sparse model up to
this size; a larger one would not fit this machine's memory as dense blocks."""


@runtime_checkable
class Engine(Protocol):
    """What an implementation of a CHMM does. ``State`` is the implementation's own form of a model (see the
    module docstring); every method takes and returns states, never host models, except :meth:`load`/:meth:`host`.
    """

    name: str

    def load(self, model: Model) -> Any:
        """The state of a host model (the model itself on the CPU; a device copy on the GPU)."""

    def host(self, state: Any) -> Model:
        """The host model of a state."""

    def copy(self, state: Any) -> Any:
        """A state whose transition values may be changed in place without changing ``state``."""

    def forward(self, state: Any, x: np.ndarray, initial: np.ndarray | None = None) -> inference.ForwardResult:
        """Scaled forward pass: the one-step predictive probabilities P(x_n | x_<n) and the zero-probability events
        (``initial`` replaces pi). The stored messages may be empty."""

    def score(self, state: Any, x: np.ndarray) -> inference.ScoreResult:
        """Bits per symbol of one sequence with the model's back-off (see :func:`engine.inference.score`)."""

    def surprisal(self, state: Any, x: np.ndarray) -> np.ndarray:
        """-log2 P(x_n | x_<n) of every position, as :meth:`score` counts it."""

    def plan(self, state: Any, x: np.ndarray, algorithm: str) -> Any:
        """What repeated E-steps on ``x`` reuse (offsets, buffers), or None; may refuse a run that cannot fit."""

    def zero_counts(self, state: Any) -> Any:
        """A zeroed array of counts in the state's layout."""

    def e_step(
        self,
        state: Any,
        x: np.ndarray,
        initial: np.ndarray | None = None,
        plan: Any = None,
        counts_out: Any = None,
        counted: tuple[int, int] | None = None,
    ) -> inference.EStepResult:
        """Expected transition counts sum_n xi(n) of one sequence in the state's layout (only the blocks of pairs
        that occur in ``x`` are written into ``counts_out`` when given), gamma(1), the log-likelihood and the last
        alpha (online EM carries it into the next batch). ``counted``: only those steps, for a chunk with a burn-in
        (see :func:`engine.inference.e_step`; the dense CPU engine only)."""

    def m_step(self, state: Any, counts: Any, pseudocount: float, pi: np.ndarray | None = None) -> Any:
        """T = row-normalise(counts + pseudocount) over the entries EM may update (see ``fixed_zeros``)."""

    def online_update(
        self, state: Any, statistic: Any, e: inference.EStepResult, memory: float, pseudocount: float, first: bool
    ) -> Any:
        """Online EM (paper, section 3): A = memory * A + (1 - memory) * e.counts for the running statistic A (in
        place; A = (1 - memory) * e.counts for the ``first`` batch), then T = row-normalise(A + pseudocount).
        May change ``state``'s values in place (pass a :meth:`copy`)."""

    def with_counts(self, state: Any, counts: Any) -> Any:
        """``state`` with ``counts`` as its expected counts (used by the back-off bigram and by pruning)."""

    def viterbi(self, state: Any, evidence: np.ndarray | inference.Evidence) -> inference.ViterbiResult:
        """MAP clone path with hard or per-position soft evidence (see :func:`engine.inference.viterbi`)."""

    def hard_counts(self, state: Any, x: np.ndarray) -> tuple[Any, float]:
        """Viterbi EM's counts (one per transition of the MAP clone path of ``x``) and log P(x)."""

    def sample(self, state: Any, length: int, rng: np.random.Generator, prefix: np.ndarray | None = None) -> np.ndarray:
        """``length`` sampled symbols, continuing ``prefix`` if given (see :func:`engine.inference.sample`)."""

    def prune(self, state: Any, threshold: float) -> Any:
        """The state pruned at ``threshold`` (see :func:`engine.graph.prune`)."""

    def transitions(self, state: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """The non-zero transitions as (row clone, column clone, probability, expected count or None) arrays."""

    def as_dense(self, state: Any, what: str) -> CHMM:
        """The model with dense blocks on the host, for tools written for them; ValueError (naming ``what``)
        when that would not fit."""

    def finite(self, state: Any) -> bool:
        """Whether every transition value is finite."""


# ---------------------------------------------------------------------------------------------- several sequences
def as_sequences(x: np.ndarray | Sequence[np.ndarray] | None) -> list[np.ndarray]:
    """One sequence (a 1-D array) or several, as a list of contiguous int64 arrays; None or empty parts drop out."""
    if x is None:
        return []
    if isinstance(x, np.ndarray) and x.ndim == 1:
        parts = [x]
    else:
        parts = list(x)
    return [np.ascontiguousarray(p, dtype=np.int64) for p in parts if len(p)]


def score_sequences(engine: Engine, state: Any, sequences: np.ndarray | Sequence[np.ndarray]) -> inference.ScoreResult:
    """The BPS of independent sequences together: -sum log2 P(x^d) / sum |x^d| (each sequence from its own start)."""
    parts = as_sequences(sequences)
    if not parts:
        raise ValueError("there is no text to score")
    results = [engine.score(state, x) for x in parts]
    log2_probability = float(sum(r.log2_probability for r in results))
    symbols = int(sum(r.symbols for r in results))
    zero_events = int(sum(r.zero_probability_events for r in results))
    return inference.ScoreResult(-log2_probability / symbols, log2_probability, symbols, zero_events)


def e_step_sequences(
    engine: Engine, state: Any, sequences: Sequence[np.ndarray], plans: Sequence[Any] | None = None
) -> inference.EStepResult:
    """The E-step of independent sequences: their expected counts and log-likelihoods add up (they share T);
    gamma(1) is the mean over the sequences (the M-step of pi for several sequences). ``last_alpha`` is the last
    sequence's."""
    total = None
    gamma_first = None
    log_likelihood = 0.0
    zero_events = 0
    touched = None
    last = None
    for k, x in enumerate(sequences):
        e = engine.e_step(state, x, plan=None if plans is None else plans[k])
        if total is None:
            total, gamma_first, touched = e.counts, e.gamma_first.astype(np.float64), e.touched.copy()
        else:
            total += e.counts
            gamma_first = gamma_first + e.gamma_first
            touched |= e.touched
        log_likelihood += e.log_likelihood
        zero_events += e.zero_events
        last = e
    if last is None:
        raise ValueError("the E-step needs at least one sequence")
    return inference.EStepResult(
        total, gamma_first / len(sequences), log_likelihood, zero_events, last.last_alpha, touched
    )


# ---------------------------------------------------------------------------------------------- dense, CPU
class DenseEngine:
    """Dense blocks on the CPU (numba kernels of :mod:`engine.kernels.cpu`); the state is the :class:`CHMM`."""

    name = "dense"

    def __init__(self, count_method: str = "gemm") -> None:
        if count_method not in inference.COUNT_METHODS:
            raise ValueError(f"count_method must be one of {', '.join(inference.COUNT_METHODS)}")
        self.count_method = count_method
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

    def plan(self, state: CHMM, x: np.ndarray, algorithm: str) -> inference.PairLayout | None:
        if algorithm != "em":
            return None
        return inference.pair_sorted_offsets(state.layout, x).with_buffers(state.T.dtype, len(x))

    def zero_counts(self, state: CHMM) -> np.ndarray:
        return np.zeros(state.layout.size)

    def e_step(
        self,
        state: CHMM,
        x: np.ndarray,
        initial: np.ndarray | None = None,
        plan: inference.PairLayout | None = None,
        counts_out: np.ndarray | None = None,
        counted: tuple[int, int] | None = None,
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
        )

    def m_step(self, state: CHMM, counts: np.ndarray, pseudocount: float, pi: np.ndarray | None = None) -> CHMM:
        T = normalise_rows(state.layout, counts, pseudocount, state.T.dtype, state.support())
        return state.with_arrays(T=T, counts=counts, pi=state.pi if pi is None else pi.astype(state.pi.dtype))

    def online_update(
        self,
        state: CHMM,
        statistic: np.ndarray,
        e: inference.EStepResult,
        memory: float,
        pseudocount: float,
        first: bool,
    ) -> CHMM:
        """One fused kernel (``cpu.online_m_step``) updates the statistic, T and T's transposed blocks in place
        (two sweeps over the stored blocks per batch besides the E-step)."""
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
        cpu.online_m_step(
            statistic,
            e.counts,
            e.touched,
            0.0 if first else memory,
            1.0 - memory,
            pseudocount,
            T,
            T_transposed,
            layout.block_pairs,
            layout.block_offset,
            layout.n_clones,
            layout.clone_start,
            row_length,
        )
        if support is not None:
            T[:] = normalise_rows(layout, statistic, pseudocount, T.dtype, support)
            T_transposed[:] = cpu.transpose_blocks(T, layout.block_pairs, layout.block_offset, layout.n_clones)
        return state

    def with_counts(self, state: CHMM, counts: np.ndarray) -> CHMM:
        return state.with_arrays(counts=counts)

    def viterbi(self, state: CHMM, evidence: np.ndarray | inference.Evidence) -> inference.ViterbiResult:
        return inference.viterbi(state, evidence)

    def hard_counts(self, state: CHMM, x: np.ndarray) -> tuple[np.ndarray, float]:
        log_likelihood = inference.log_likelihood(state, x)
        path = inference.viterbi(state, x).clones
        return path_counts(state.layout, x, path), log_likelihood

    def sample(
        self, state: CHMM, length: int, rng: np.random.Generator, prefix: np.ndarray | None = None
    ) -> np.ndarray:
        return inference.sample(state, length, rng, prefix)

    def prune(self, state: CHMM, threshold: float) -> CHMM:
        return graph.prune(state, threshold=threshold)

    def transitions(self, state: CHMM) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        return state.transitions()

    def as_dense(self, state: CHMM, what: str) -> CHMM:
        return state

    def finite(self, state: CHMM) -> bool:
        return bool(np.all(np.isfinite(state.T)))


def path_counts(layout: Any, x: np.ndarray, path: np.ndarray) -> np.ndarray:
    """One count per transition of the clone path ``path`` of ``x`` in the flat block layout (all zero when the
    path is impossible, i.e. holds -1)."""
    counts = np.zeros(layout.size, dtype=np.float64)
    if np.any(path < 0):
        return counts
    src, dst = x[:-1], x[1:]
    k = layout.block_index[src, dst]
    ok = k >= 0
    flat = (
        layout.block_offset[k[ok]]
        + (path[:-1][ok] - layout.clone_start[src[ok]]) * layout.n_clones[dst[ok]]
        + (path[1:][ok] - layout.clone_start[dst[ok]])
    )
    counts += np.bincount(flat, minlength=layout.size)
    return counts


# ---------------------------------------------------------------------------------------------- sparse, CPU
class SparseEngine:
    """CSR blocks on the CPU (:mod:`engine.sparse`): every operation costs O(stored entries) per step; the state
    is the :class:`engine.sparse.SparseCHMM`. EM never creates entries, so zeros stay zero."""

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

    def plan(self, state: sparse.SparseCHMM, x: np.ndarray, algorithm: str) -> sparse.SequencePlan | None:
        return sparse.SequencePlan.build(state.layout, x, state.data.dtype) if algorithm == "em" else None

    def zero_counts(self, state: sparse.SparseCHMM) -> np.ndarray:
        return np.zeros(state.data.size)

    def e_step(
        self,
        state: sparse.SparseCHMM,
        x: np.ndarray,
        initial: np.ndarray | None = None,
        plan: sparse.SequencePlan | None = None,
        counts_out: np.ndarray | None = None,
        counted: tuple[int, int] | None = None,
    ) -> inference.EStepResult:
        if counted is not None:
            raise ValueError("chunks with a burn-in run on dense models; a sparse model's unit of work is a document")
        return sparse.e_step(state, x, plan, initial)

    def m_step(
        self, state: sparse.SparseCHMM, counts: np.ndarray, pseudocount: float, pi: np.ndarray | None = None
    ) -> sparse.SparseCHMM:
        data = sparse.normalise(state, counts, pseudocount)
        return state.with_data(data, counts, None if pi is None else pi.astype(state.pi.dtype))

    def online_update(
        self,
        state: sparse.SparseCHMM,
        statistic: np.ndarray,
        e: inference.EStepResult,
        memory: float,
        pseudocount: float,
        first: bool,
    ) -> sparse.SparseCHMM:
        statistic *= 0.0 if first else memory
        statistic += (1.0 - memory) * e.counts
        return state.with_data(sparse.normalise(state, statistic, pseudocount), None)

    def with_counts(self, state: sparse.SparseCHMM, counts: np.ndarray) -> sparse.SparseCHMM:
        return state.with_arrays(counts=counts)

    def viterbi(self, state: sparse.SparseCHMM, evidence: np.ndarray | inference.Evidence) -> inference.ViterbiResult:
        return sparse.viterbi(state, evidence)

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


# ---------------------------------------------------------------------------------------------- the choice
def engine_for(model: Model, backend: str = "cpu", **options: Any) -> Engine:
    """The implementation that runs ``model`` on ``backend`` ("cpu", "gpu" or "auto", see
    :func:`engine.backend.resolve_backend`): dense models run on the CPU or the GPU (:mod:`engine.gpu`, imported
    only then); sparse models run on the CPU whatever the backend. ``options``: ``count_method`` (dense CPU),
    ``pass_precision``, ``chunk`` and ``batch_size`` (GPU)."""
    if model.form == "sparse":
        return SparseEngine()
    if resolve_backend(backend) == "gpu":
        from engine.gpu import GpuDenseEngine

        return GpuDenseEngine(
            model,
            pass_precision=options.get("pass_precision", "float32"),
            chunk=options.get("chunk"),
            batch_size=options.get("batch_size", 10_000),
        )
    return DenseEngine(options.get("count_method", "gemm"))
