"""Inference on a CHMM: scaled forward/backward, likelihood and bits per symbol, posteriors, expected counts,
Viterbi decoding with soft evidence, and sampling. All functions work on the block-sparse layout.

Notation follows the paper (section 3): alpha(n) and beta(n) are the forward and backward messages over the
clones of x_n, gamma(n) the posterior of the clone at n, xi(n) the posterior of the clone pair (n, n+1).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np

from engine.backends.cpu import kernels as cpu
from engine.errors import CHMMError
from engine.model import row_keys
from engine.model.backoff import Backoff, backoff_kind
from engine.model.blocks import BlockLayout
from engine.model.dense import BACKOFF_WEIGHT as BACKOFF_WEIGHT  # the back-off weight of :func:`score`
from engine.model.dense import CHMM

LOG2 = np.log(2.0)


class ForwardResult(NamedTuple):
    """predictive[n] = P(x_n | x_1..x_{n-1}) under the model (0 at a zero-probability event);
    alpha: stored normalised messages (flat, message n at offsets[n]) or an empty array."""

    predictive: np.ndarray
    zero_events: int
    alpha: np.ndarray
    offsets: np.ndarray


class ScoreResult(NamedTuple):
    """Bits per symbol of a sequence, with zero-probability events counted and backed off (see :func:`score`)."""

    bps: float
    log2_probability: float
    symbols: int
    zero_probability_events: int


class Posteriors(NamedTuple):
    """gamma(n) over the clones of x_n, flat (message n at offsets[n]); log_likelihood in nats."""

    gamma: np.ndarray
    offsets: np.ndarray
    log_likelihood: float

    def dense(self, layout: BlockLayout, x: np.ndarray) -> np.ndarray:
        """gamma as an N x H array (for tiny models)."""
        out = np.zeros((len(x), layout.n_states))
        for n, s in enumerate(np.asarray(x)):
            start = layout.clone_start[s]
            m = layout.n_clones[s]
            out[n, start : start + m] = self.gamma[self.offsets[n] : self.offsets[n] + m]
        return out


class EStepResult(NamedTuple):
    """Expected transition counts sum_n xi(n) in the flat block layout (float64), gamma(1) over all clones,
    the log-likelihood (nats) and the number of zero-probability events."""

    counts: np.ndarray
    gamma_first: np.ndarray
    log_likelihood: float
    zero_events: int
    last_alpha: np.ndarray
    touched: np.ndarray  # per block: whether x has the block's symbol pair (only those counts are written)


class ViterbiResult(NamedTuple):
    """The MAP clone path, its symbols, and log max_z P(z, evidence) (nats; -inf if no path is possible)."""

    clones: np.ndarray
    symbols: np.ndarray
    log_probability: float


def check_sequence(model: CHMM | BlockLayout, x: np.ndarray) -> np.ndarray:
    """``x`` as a contiguous int64 array; ValueError unless it is a non-empty 1-D sequence of the model's symbols."""
    x = np.ascontiguousarray(x, dtype=np.int64)
    if x.ndim != 1 or x.size == 0:
        raise CHMMError("the sequence must be a non-empty 1-D array of symbol indices")
    if x.min() < 0 or x.max() >= model.n_symbols:
        raise CHMMError(f"the sequence holds symbol indices outside 0..{model.n_symbols - 1}")
    return x


def sequential_offsets(layout: BlockLayout, x: np.ndarray) -> np.ndarray:
    """Offsets of per-position messages laid out in time order (message n has n_clones[x[n]] entries); the
    last entry is the total size."""
    offsets = np.zeros(len(x) + 1, dtype=np.int64)
    np.cumsum(layout.n_clones[x], out=offsets[1:])
    return offsets


# ------------------------------------------------------------------------------------------------ forward
def forward(
    model: CHMM,
    x: np.ndarray,
    store: bool = False,
    initial: np.ndarray | None = None,
    row_key: np.ndarray | None = None,
) -> ForwardResult:
    """Scaled forward pass: alpha(1) = pi(x_1), alpha(n+1)^T = alpha(n)^T T(x_n, x_{n+1}) (paper, section 3),
    each message normalised; the normalisers are the one-step predictive probabilities.

    ``initial`` replaces pi (used by online EM to carry the message across batches); ``row_key`` names the block
    row of each step n -> n+1 of a walk with actions (``a_n * E + x_n``, :func:`engine.model.row_keys.check_row_key`;
    None: ``x``, a text).
    """
    x = check_sequence(model, x)
    layout = model.layout
    row_key = row_keys.check_row_key(layout, x, row_key)
    start = model.pi if initial is None else np.asarray(initial, dtype=model.T.dtype)
    predictive = np.empty(len(x), dtype=np.float64)
    if store:
        offsets = sequential_offsets(layout, x)
        alpha = np.empty(int(offsets[-1]), dtype=model.T.dtype)
    else:
        offsets = np.zeros(0, dtype=np.int64)
        alpha = np.zeros(0, dtype=model.T.dtype)
    zero_events = cpu.forward_pass(
        model.T,
        start.astype(model.T.dtype, copy=False),
        x,
        row_key,
        layout.n_clones,
        layout.clone_start,
        layout.block_lookup,
        layout.block_offset,
        alpha,
        offsets,
        predictive,
    )
    return ForwardResult(predictive, int(zero_events), alpha, offsets)


def log_likelihood(model: CHMM, x: np.ndarray, row_key: np.ndarray | None = None) -> float:
    """log P(x) in nats (eq. 1 of the paper), summed from the forward normalisers; -inf if x is impossible
    (given the actions for a walk whose ``row_key`` is given)."""
    result = forward(model, x, row_key=row_key)
    if result.zero_events:
        return -np.inf
    return float(np.sum(np.log(result.predictive)))


def model_backoff(model: Any) -> Backoff:
    """The back-off Q of ``model`` (:mod:`engine.model.backoff`; its unit's kind) from its expected counts summed per
    block (the pair counts of the training text: from ``counts``, or ``pair_counts`` in a model saved without them,
    :meth:`CHMM.block_counts`); none kept: no counts."""
    if hasattr(model, "block_counts"):
        sums = model.block_counts()
    elif model.counts is not None and model.layout.n_blocks:
        sums = np.add.reduceat(model.counts, model.layout.block_offset[:-1])
    else:
        sums = None
    return backoff_from_block_sums(model, sums if sums is not None and sums.size else None)


def backoff_from_block_sums(model: Any, block_sums: np.ndarray | None) -> Backoff:
    """The back-off of ``model`` (its layout and its codec's unit) from the summed expected counts of each stored
    block (None: no counts kept). A model of words or tokens reads the exact pair counts of its text instead
    (``pair_counts``, set from its start: :func:`engine.training.stages.with_pair_counts`), and its back-off is made
    once per such array: a corpus of many sentences is scored sentence by sentence."""
    pairs = getattr(model, "pair_counts", None)
    if model.codec.characters or pairs is None:
        return Backoff.build(model.layout, block_sums, backoff_kind(model.codec.unit))
    kept = _BACKOFFS.get(id(pairs))
    if kept is not None and kept[0]() is pairs and kept[1] is model.layout:
        return kept[2]
    made = Backoff.build(model.layout, pairs, backoff_kind(model.codec.unit))
    if len(_BACKOFFS) >= 8:
        _BACKOFFS.clear()
    _BACKOFFS[id(pairs)] = (weakref.ref(pairs), model.layout, made)
    return made


_BACKOFFS: dict[int, tuple[Any, Any, Backoff]] = {}
"""The back-offs made from a word model's pair counts, by the array (a weak reference checks it is the same)."""


def score(model: CHMM, x: np.ndarray, backoff_weight: float | None = None) -> ScoreResult:
    """Bits per symbol, BPS = -(1/N) log2 P(x) (paper, section 4), with a documented back-off.

    Each symbol is scored with the per-step mixture
        P(x_n | x_<n) = (1 - w) P_CHMM(x_n | x_<n) + w Q(x_n | x_{n-1}),
    where Q is the symbol bigram of the training text (:func:`symbol_bigram`; the unigram-free uniform
    start for n = 1) and w = ``backoff_weight``: 1e-6, or for a pruned model the transition mass its pruning removed
    (the model's ``backoff_weight`` field, see :func:`engine.model.pruning.prune`). Every factor is a proper
    distribution, so the BPS is a true code length; with w = 1e-6 it costs at most -log2(1 - w) ~ 1.4e-6 bits per symbol
    over the exact CHMM figure and
    keeps the score finite where the CHMM gives a transition probability zero (a pair never seen in training, or
    one pruned away). Such steps are counted in ``zero_probability_events``; after one, the forward message
    restarts uniform over the clones of the symbol.
    """
    x = check_sequence(model, x)
    if backoff_weight is None:
        backoff_weight = model.backoff_weight
    if not 0.0 <= backoff_weight < 1.0:
        raise CHMMError("backoff_weight must lie in [0, 1)")
    result = forward(model, x)
    return score_from_predictive(x, result.predictive, result.zero_events, model_backoff(model), backoff_weight)


def score_from_predictive(
    x: np.ndarray, predictive: np.ndarray, zero_events: int, backoff: Backoff, backoff_weight: float
) -> ScoreResult:
    """The BPS of :func:`score` from the forward pass's predictive probabilities and the back-off bigram: the mean
    of :func:`surprisal_from_predictive` (every implementation scores through these two functions)."""
    log2_probability = -float(np.sum(surprisal_from_predictive(x, predictive, backoff, backoff_weight)))
    return ScoreResult(-log2_probability / len(x), log2_probability, len(x), int(zero_events))


def surprisal_from_predictive(
    x: np.ndarray, predictive: np.ndarray, backoff: Backoff, backoff_weight: float
) -> np.ndarray:
    """-log2 of each symbol's probability as :func:`score` counts it (:func:`predictive_with_backoff`), in bits."""
    with np.errstate(divide="ignore"):
        return -np.log2(predictive_with_backoff(x, predictive, backoff, backoff_weight))


def predictive_with_backoff(
    x: np.ndarray, predictive: np.ndarray, backoff: Backoff, backoff_weight: float
) -> np.ndarray:
    """Each symbol's probability as :func:`score` counts it: (1 - w) P_CHMM(x_n | x_<n) + w Q(x_n | x_{n-1})."""
    return (1.0 - backoff_weight) * predictive + backoff_weight * backoff.sequence(x)


def surprisal(model: CHMM, x: np.ndarray, backoff_weight: float | None = None) -> np.ndarray:
    """-log2 P(x_n | x_<n) for every position, in bits, as :func:`score` counts it (their mean is the BPS)."""
    x = check_sequence(model, x)
    if backoff_weight is None:
        backoff_weight = model.backoff_weight
    predictive = forward(model, x).predictive
    return surprisal_from_predictive(x, predictive, model_backoff(model), backoff_weight)


# ------------------------------------------------------------------------------------------------ backward
def backward(model: CHMM, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Backward messages beta(n) = T(x_n, x_{n+1}) beta(n+1), each normalised to sum 1; (flat, offsets)."""
    x = check_sequence(model, x)
    offsets = sequential_offsets(model.layout, x)
    beta = np.empty(int(offsets[-1]), dtype=model.T.dtype)
    layout = model.layout
    T_transposed = cpu.transpose_blocks(model.T, layout.block_pairs, layout.block_offset, layout.n_clones)
    cpu.backward_pass(T_transposed, x, x, layout.n_clones, layout.block_lookup, layout.block_offset, beta, offsets)
    return beta, offsets


def posteriors(model: CHMM, x: np.ndarray) -> Posteriors:
    """gamma(n) = alpha(n) o beta(n) / (alpha(n)^T beta(n)) for every position (paper, section 3)."""
    fwd = forward(model, x, store=True)
    beta, offsets = backward(model, x)
    gamma = (fwd.alpha.astype(np.float64) * beta).astype(np.float64)
    sizes = np.diff(offsets)
    totals = np.add.reduceat(gamma, offsets[:-1]) if len(gamma) else np.zeros(0)
    gamma /= np.repeat(np.where(totals > 0, totals, 1.0), sizes)
    ll = -np.inf if fwd.zero_events else float(np.sum(np.log(fwd.predictive)))
    return Posteriors(gamma, offsets[:-1], ll)


# ------------------------------------------------------------------------------------------------ E-step
class PairLayout(NamedTuple):
    """Message offsets sorted by symbol pair (see :func:`pair_sorted_offsets`); reusable across EM iterations."""

    alpha_offsets: np.ndarray
    beta_offsets: np.ndarray
    alpha_size: int
    beta_size: int
    pair_first: np.ndarray  # first position (in time) of each block's group, in sorted order
    pair_count: np.ndarray
    buffers: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # alpha, beta, predictive (reused)

    def with_buffers(self, dtype: np.dtype, n: int) -> PairLayout:
        """The same layout with message buffers allocated once, so that repeated E-steps on one sequence
        (EM iterations) do not pay for fresh pages every time."""
        buffers = (np.zeros(self.alpha_size, dtype=dtype), np.zeros(self.beta_size, dtype=dtype), np.zeros(n))
        return self._replace(buffers=buffers)


def pair_sorted_offsets(
    layout: BlockLayout, x: np.ndarray, counted: np.ndarray | None = None, row_key: np.ndarray | None = None
) -> PairLayout:
    """Lay messages out so that, for every block (i, j), the alpha(n) and the beta(n+1) of the steps with
    (x_n, x_{n+1}) = (i, j) are contiguous rows: the count accumulation is then one matrix product per block.

    ``counted`` (a boolean per step n -> n+1) keeps only some steps in the pair-sorted part: the others (the burn-in
    of chunks, the seams between chunks laid end to end) still get a slot for each message, after the sorted ones,
    but no pair group. Every position has one alpha slot and one beta slot either way. ``row_key`` names each
    step's block row (see :func:`engine.backends.cpu.kernels.forward_pass`; ``x`` when None)."""
    n = len(x)
    pair = layout.find_blocks((x if row_key is None else row_key)[:-1], x[1:])
    steps = np.arange(n - 1) if counted is None else np.flatnonzero(counted)
    order = steps[np.argsort(pair[steps], kind="stable")]

    def slots(used: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, int]:
        """Offsets of the positions ``used`` (in that order, back to back), then of every other position."""
        offsets = np.full(n, -1, dtype=np.int64)
        cumulative = np.concatenate([[0], np.cumsum(sizes)])
        offsets[used] = cumulative[:-1]
        rest = np.flatnonzero(offsets < 0)
        rest_sizes = layout.n_clones[x[rest]]
        offsets[rest] = cumulative[-1] + np.concatenate([[0], np.cumsum(rest_sizes)[:-1]]).astype(np.int64)
        return offsets, int(cumulative[-1] + rest_sizes.sum())

    alpha_offsets, alpha_size = slots(order, layout.n_clones[x[order]])
    beta_offsets, beta_size = slots(order + 1, layout.n_clones[x[order + 1]])
    sorted_pairs = pair[order]
    valid = sorted_pairs >= 0
    pair_count = np.bincount(sorted_pairs[valid], minlength=layout.n_blocks)
    pair_first = np.zeros(layout.n_blocks, dtype=np.int64)  # set for the blocks the sequence touches only
    present, first_sorted = np.unique(sorted_pairs, return_index=True)
    pair_first[present[present >= 0]] = order[first_sorted[present >= 0]]
    return PairLayout(alpha_offsets, beta_offsets, alpha_size, beta_size, pair_first, pair_count)


_EXECUTORS: dict[int, ThreadPoolExecutor] = {}
ONE_THREAD_ENV = "CHMM_ONE_THREAD"
"""Set to 1 in a process that must use one core (a cluster worker): the E-step's passes then run one after the
other instead of on two threads."""


def concurrent_passes() -> bool:
    """Whether an E-step runs its forward and backward pass on two threads (unless :data:`ONE_THREAD_ENV` is 1)."""
    return os.environ.get(ONE_THREAD_ENV, "").strip() != "1"


def two_threads() -> ThreadPoolExecutor:
    """The process's pool of two threads (:func:`_executor`) for kernels that release the GIL: the E-step's
    passes, and the halves of the online M-step's rows."""
    return _executor()


def _executor() -> ThreadPoolExecutor:
    """Two threads: the forward and the backward pass of an E-step are independent (the kernels release the GIL).
    One pool per process: a pool inherited through fork (e.g. a Dash background job) has no live threads and would
    hang, so a forked child makes its own."""
    pid = os.getpid()
    pool = _EXECUTORS.get(pid)
    if pool is None:
        _EXECUTORS.clear()
        pool = _EXECUTORS[pid] = ThreadPoolExecutor(max_workers=2, thread_name_prefix="chmm-estep")
    return pool


COUNT_METHODS = ("gemm", "loop")


def e_step(
    model: CHMM,
    x: np.ndarray,
    initial: np.ndarray | None = None,
    count_method: str = "gemm",
    pair_layout: PairLayout | None = None,
    T_transposed: np.ndarray | None = None,
    counts_out: np.ndarray | None = None,
    counted: tuple[int, int] | None = None,
    row_key: np.ndarray | None = None,
) -> EStepResult:
    """Expected transition counts sum_n xi(n) (paper, section 3, M-step numerator) for one sequence.

    xi(n) = alpha(n) o T(x_n, x_{n+1}) o beta(n+1)^T / (alpha(n)^T T(x_n, x_{n+1}) beta(n+1)).
    The forward and backward passes run concurrently on two threads (beta is normalised on its own, and each
    xi(n) is divided by its exact total, see ``cpu.pair_weights``). With ``count_method="gemm"`` the counts of
    block (i, j) are T(i, j) o (A^T B), with A the weighted alpha(n) rows and B the beta(n+1) rows of the steps
    with (x_n, x_{n+1}) = (i, j): one BLAS matrix product per block instead of N rank-one updates ("loop").

    ``T_transposed`` (from ``cpu.transpose_blocks``) and ``counts_out`` (a zeroed float64 buffer; only the blocks of
    pairs occurring in ``x`` are written) let a caller that runs many E-steps (online EM) avoid per-call O(|T|)
    work.

    ``counted = (lo, hi)``: only the steps n -> n+1 with lo <= n < hi are counted, and the log-likelihood is that of
    positions lo+1 .. hi (and 0 when lo is 0): ``x`` is then a chunk of a longer sequence with a burn-in before and
    after the counted steps, whose messages settle there (see :mod:`engine.training.distributed`).

    ``row_key`` names the block row of each step n -> n+1 (:func:`engine.backends.cpu.kernels.forward_pass`): ``x`` for
    text (None), ``a_n * E + x_n`` for a walk with actions over a layout of A * E row symbols
    (:mod:`engine.cognitive.actions`).
    """
    if count_method not in COUNT_METHODS:
        raise CHMMError(f"count_method must be one of {COUNT_METHODS}")
    x = check_sequence(model, x)
    if len(x) < 2:
        raise CHMMError("the E-step needs a sequence of at least two symbols")
    layout = model.layout
    T = model.T
    row_key = row_keys.check_row_key(layout, x, row_key)
    pl = pair_sorted_offsets(layout, x, row_key=row_key) if pair_layout is None else pair_layout
    alpha, beta, predictive, zero_events = _messages(model, x, initial, pl, T_transposed, row_key)
    # gamma(1) for pi, and the last alpha to carry over (online EM), before alpha is rescaled below.
    gamma_first, last_alpha = _sequence_ends(layout, x, alpha, beta, pl)

    weights = np.empty(len(x) - 1, dtype=np.float64)
    use_gemm = count_method == "gemm"
    cpu.pair_weights(x, layout.n_clones, predictive, alpha, pl.alpha_offsets, beta, pl.beta_offsets, weights, use_gemm)
    if counted is not None:
        lo, hi = counted
        for n in (*range(0, lo), *range(hi, len(x) - 1)):  # the burn-in's steps: their xi(n) are not counted
            weights[n] = 0.0
            alpha[pl.alpha_offsets[n] : pl.alpha_offsets[n] + layout.n_clones[x[n]]] = 0.0
    counts = np.zeros(layout.size, dtype=np.float64) if counts_out is None else counts_out
    if use_gemm:
        _accumulate_counts_gemm(model, pl, alpha, beta, counts)
    else:
        cpu.accumulate_counts_loop(
            T,
            x,
            row_key,
            layout.n_clones,
            layout.block_lookup,
            layout.block_offset,
            alpha,
            pl.alpha_offsets,
            beta,
            pl.beta_offsets,
            weights,
            counts,
        )
    if counted is not None:
        lo, hi = counted
        scored = predictive[lo + 1 : hi + 1] if lo > 0 else predictive[: hi + 1]
        zero_events = int(np.count_nonzero(scored <= 0))
        log_likelihood = -np.inf if zero_events else float(np.sum(np.log(scored)))
    else:
        log_likelihood = -np.inf if zero_events else float(np.sum(np.log(predictive)))
    return EStepResult(counts, gamma_first, log_likelihood, zero_events, last_alpha, pl.pair_count > 0)


def _messages(
    model: CHMM,
    x: np.ndarray,
    initial: np.ndarray | None,
    pl: PairLayout,
    T_transposed: np.ndarray | None,
    row_key: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The forward and backward passes of :func:`e_step` (concurrently on two threads unless one core is asked
    for): alpha and beta in ``pl``'s slots, the predictive probabilities and the zero-probability events."""
    layout = model.layout
    T = model.T
    dtype = T.dtype
    if pl.buffers is not None and pl.buffers[0].dtype == dtype:
        alpha, beta, predictive = pl.buffers
    else:
        alpha = np.empty(pl.alpha_size, dtype=dtype)
        beta = np.empty(pl.beta_size, dtype=dtype)
        predictive = np.empty(len(x), dtype=np.float64)
    start = (model.pi if initial is None else np.asarray(initial)).astype(dtype, copy=False)
    forward_args = (
        T,
        start,
        x,
        row_key,
        layout.n_clones,
        layout.clone_start,
        layout.block_lookup,
        layout.block_offset,
        alpha,
        pl.alpha_offsets,
        predictive,
    )
    job_forward = _executor().submit(cpu.forward_pass, *forward_args) if concurrent_passes() else None
    forward_events = None if job_forward is not None else cpu.forward_pass(*forward_args)
    if T_transposed is None:
        T_transposed = cpu.transpose_blocks(T, layout.block_pairs, layout.block_offset, layout.n_clones)
    cpu.backward_pass(
        T_transposed, x, row_key, layout.n_clones, layout.block_lookup, layout.block_offset, beta, pl.beta_offsets
    )
    zero_events = int(job_forward.result() if job_forward is not None else forward_events)
    return alpha, beta, predictive, zero_events


def _sequence_ends(
    layout: BlockLayout, x: np.ndarray, alpha: np.ndarray, beta: np.ndarray, pl: PairLayout
) -> tuple[np.ndarray, np.ndarray]:
    """gamma at the first position (float64, over all clones: pi's estimate) and the normalised alpha at the last
    (the message online EM carries to the next batch)."""
    m_first = layout.n_clones[x[0]]
    g = (
        alpha[pl.alpha_offsets[0] : pl.alpha_offsets[0] + m_first].astype(np.float64)
        * beta[pl.beta_offsets[0] : pl.beta_offsets[0] + m_first]
    )
    gamma_first = np.zeros(layout.n_states)
    if g.sum() > 0:
        gamma_first[layout.clone_start[x[0]] : layout.clone_start[x[0]] + m_first] = g / g.sum()
    last = len(x) - 1
    last_alpha = np.zeros(layout.n_states, dtype=alpha.dtype)
    m_last = layout.n_clones[x[last]]
    last_alpha[layout.clone_start[x[last]] : layout.clone_start[x[last]] + m_last] = alpha[
        pl.alpha_offsets[last] : pl.alpha_offsets[last] + m_last
    ]
    return gamma_first, last_alpha


def _accumulate_counts_gemm(
    model: CHMM, pl: PairLayout, alpha: np.ndarray, beta: np.ndarray, counts: np.ndarray
) -> None:
    layout = model.layout
    touched = np.flatnonzero(pl.pair_count)
    if len(touched) == 0:
        return
    sizes = layout.block_offset[touched + 1] - layout.block_offset[touched]
    scratch = np.empty(int(sizes.max()), dtype=np.result_type(alpha.dtype, beta.dtype))  # no fresh pages per block
    for k in touched:
        i, j = layout.block_pairs[k]
        m_i, m_j = int(layout.n_clones[i]), int(layout.n_clones[j])
        rows = int(pl.pair_count[k])
        first = pl.pair_first[k]
        a0 = pl.alpha_offsets[first]
        b0 = pl.beta_offsets[first + 1]
        A = alpha[a0 : a0 + rows * m_i].reshape(rows, m_i)
        B = beta[b0 : b0 + rows * m_j].reshape(rows, m_j)
        lo, hi = layout.block_offset[k], layout.block_offset[k + 1]
        product = np.matmul(A.T, B, out=scratch[: hi - lo].reshape(m_i, m_j))
        np.multiply(model.T[lo:hi].reshape(m_i, m_j), product, out=product)
        counts[lo:hi] = product.ravel()


# ------------------------------------------------------------------------------------------------ Viterbi
class Evidence(NamedTuple):
    """Per-position soft evidence over symbols, CSR style: position n may be symbol ``symbol[c]`` with likelihood
    ``weight[c]`` for c in ptr[n]..ptr[n+1]-1. Hard evidence has one entry of weight 1 per position."""

    ptr: np.ndarray
    symbol: np.ndarray
    weight: np.ndarray

    @staticmethod
    def hard(x: np.ndarray) -> Evidence:
        x = np.asarray(x, dtype=np.int64)
        return Evidence(np.arange(len(x) + 1, dtype=np.int64), x.copy(), np.ones(len(x)))

    @staticmethod
    def from_lists(options: list[dict[int, float]]) -> Evidence:
        """Build from one {symbol: weight} dict per position."""
        ptr = np.zeros(len(options) + 1, dtype=np.int64)
        symbols: list[int] = []
        weights: list[float] = []
        for n, option in enumerate(options):
            if not option:
                raise CHMMError(f"position {n} has no candidate symbol")
            for s, w in sorted(option.items()):
                if w < 0:
                    raise CHMMError("evidence weights must be non-negative")
                symbols.append(int(s))
                weights.append(float(w))
            ptr[n + 1] = len(symbols)
        return Evidence(ptr, np.array(symbols, dtype=np.int64), np.array(weights, dtype=np.float64))


def viterbi_evidence(layout: BlockLayout, evidence: np.ndarray | Evidence) -> tuple[Evidence, np.ndarray]:
    """The checked evidence of a Viterbi pass (a symbol sequence becomes hard evidence) and the offsets of its
    candidates' clone slots (candidate c of the evidence owns slots state_offsets[c]..state_offsets[c+1]-1, one per
    clone of its symbol). Shared by the dense, sparse and GPU engines; ValueError on empty or foreign evidence."""
    if not isinstance(evidence, Evidence):
        evidence = Evidence.hard(check_sequence(layout, evidence))
    if len(evidence.ptr) < 2:
        raise CHMMError("the evidence must cover at least one position")
    if evidence.symbol.size and (evidence.symbol.min() < 0 or evidence.symbol.max() >= layout.n_symbols):
        raise CHMMError("the evidence names symbols outside the model's alphabet")
    sizes = layout.n_clones[evidence.symbol]
    state_offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=state_offsets[1:])
    return evidence, state_offsets


def viterbi_result(layout: BlockLayout, path: np.ndarray, log_probability: float) -> ViterbiResult:
    """The result of a Viterbi pass: the clone path and its symbols, or (-1s, -inf) when no path has mass."""
    if not np.isfinite(log_probability):
        return ViterbiResult(np.full(len(path), -1), np.full(len(path), -1), -np.inf)
    return ViterbiResult(path, layout.clone_symbol()[path], float(log_probability))


def path_counts(layout: BlockLayout, x: np.ndarray, path: np.ndarray, row_key: np.ndarray | None = None) -> np.ndarray:
    """Viterbi EM's hard counts: one count per transition of the clone path ``path`` of ``x`` in the flat block
    layout (all zero when the path is impossible, i.e. holds -1); ``row_key``: each step's block row (a walk with
    actions: the count of step n lands in the block of its action)."""
    counts = np.zeros(layout.size, dtype=np.float64)
    if np.any(path < 0):
        return counts
    src, dst = x[:-1], x[1:]
    k = layout.find_blocks(src if row_key is None else row_key[:-1], dst)
    ok = k >= 0
    flat = (
        layout.block_offset[k[ok]]
        + (path[:-1][ok] - layout.clone_start[src[ok]]) * layout.n_clones[dst[ok]]
        + (path[1:][ok] - layout.clone_start[dst[ok]])
    )
    counts += np.bincount(flat, minlength=layout.size)
    return counts


def hard_counts(
    viterbi_of: Callable[[np.ndarray, np.ndarray | None], ViterbiResult],
    log_likelihood_of: Callable[[np.ndarray, np.ndarray | None], float],
    layout: BlockLayout,
    x: np.ndarray,
    row_key: np.ndarray | None,
    score: str,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Viterbi EM's hard counts of ``x`` on any implementation (``viterbi_of(x, row_shift)`` its decoding,
    ``log_likelihood_of(x, row_key)`` its log P(x)): the MAP clone path, its counts (:func:`path_counts`) and the
    score, log P(x) (``score`` "likelihood") or the path's log max_z P(z, x) ("path")."""
    x = np.ascontiguousarray(x, dtype=np.int64)
    row_key = None if row_key is None else row_keys.check_row_key(layout, x, row_key)
    log_likelihood = log_likelihood_of(x, row_key) if score == "likelihood" else 0.0
    decoded = viterbi_of(x, None if row_key is None else row_key - x)
    if score == "path":
        log_likelihood = decoded.log_probability
    return decoded.clones, path_counts(layout, x, decoded.clones, row_key), log_likelihood


def viterbi(
    model: CHMM,
    evidence: np.ndarray | Evidence,
    row_shift: np.ndarray | None = None,
    predecessors: tuple[np.ndarray, np.ndarray] | None = None,
) -> ViterbiResult:
    """MAP clone path argmax_z P(z) prod_n e(n, sym(z_n)) by max-product message passing (float64, rescaled
    every step; :func:`engine.backends.cpu.kernels.max_product`). ``evidence`` is a symbol sequence (hard evidence) or
    an
    :class:`Evidence`; ``row_shift[n]`` (zeros when None) is added to position n's symbols to name the block row of
    step n -> n+1 (``a_n * E`` for a walk with actions, :mod:`engine.cognitive.actions`). ``predecessors`` (pred_ptr,
    pred_node): a lattice, candidate c of the evidence following only the candidates
    ``pred_node[pred_ptr[c]:pred_ptr[c+1]]`` of the position before (the scrambled-text decoder's constraints);
    None: every candidate."""
    layout = model.layout
    evidence, state_offsets = viterbi_evidence(layout, evidence)
    row_shift = row_keys.check_row_shift(layout, evidence.ptr, evidence.symbol, row_shift)
    if predecessors is None:
        pred_ptr = pred_node = np.zeros(0, dtype=np.int64)
    else:
        pred_ptr, pred_node = (np.ascontiguousarray(v, dtype=np.int64) for v in predecessors)
        if pred_ptr.shape != (len(evidence.symbol) + 1,) or (
            pred_node.size and pred_node.max() >= len(evidence.symbol)
        ):
            raise CHMMError("a lattice needs the predecessors of every candidate of the evidence")
    backpointer = np.empty(int(state_offsets[-1]), dtype=np.int64)
    path = np.full(len(evidence.ptr) - 1, -1, dtype=np.int64)
    log_probability = cpu.viterbi_pass(
        model.T,
        model.pi,
        layout.n_clones,
        layout.clone_start,
        layout.block_lookup,
        layout.block_offset,
        row_shift,
        evidence.ptr,
        evidence.symbol,
        evidence.weight.astype(np.float64),
        state_offsets,
        backpointer,
        path,
        pred_ptr,
        pred_node,
    )
    return viterbi_result(layout, path, log_probability)
