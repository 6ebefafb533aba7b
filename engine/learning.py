"""Learning a CHMM: batch EM (Baum-Welch on blocks), online EM and Viterbi (hard) EM (paper, section 3).

All three share one loop (:func:`fit`): an iteration produces a new transition matrix from expected (or hard)
counts, reports (iteration, train BPS, validation BPS, seconds) to a callback, honours a cancellation token, and
keeps the best model seen on the validation split. A cancelled or failed run returns the last good model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from engine import inference
from engine.kernels import cpu
from engine.model import CHMM, BlockLayout, normalise_rows, transition_support

ALGORITHMS = ("em", "online", "viterbi")


class CancelToken:
    """A thread-safe flag that asks a running :func:`fit` to stop; it is checked at least once per iteration
    (once per batch for online EM). An optional ``poll`` callable (e.g. "does the cancel file exist?") is
    consulted too, so a token can follow a signal from another process."""

    def __init__(self, poll: Callable[[], bool] | None = None) -> None:
        self._event = threading.Event()
        self._poll = poll

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        if not self._event.is_set() and self._poll is not None and self._poll():
            self._event.set()
        return self._event.is_set()


@dataclass
class TrainingConfig:
    """Settings of :func:`fit`.

    algorithm: "em" (batch Baum-Welch), "online" (online EM over batches, paper eq. for A^(b)), or "viterbi"
        (hard EM: counts along the MAP clone path).
    max_iterations: iterations (epochs over the training sequence for online EM).
    tolerance: stop when the relative gain of the training log-likelihood between iterations falls below it.
    patience: with a validation sequence, stop after this many iterations without a better validation BPS.
    pseudocount: added to every stored count before normalising (M-step).
    batch_size, memory: online EM batch length and the paper's lambda (A^(b) = lambda A^(b-1) + (1-lambda) xi).
    update_pi: re-estimate pi = gamma(1) (batch EM); by default pi stays as initialised (uniform), since a
        single training sequence carries almost no information on it and text scored later may start anywhere.
    count_method: "gemm" (one matrix product per symbol pair) or "loop" (per-step updates), see
        :func:`engine.inference.e_step`.
    pass_precision: the GPU engine's copy of T for the forward and backward passes, "float32" or "float16" (half
        the bytes per step; arithmetic stays float32, see :data:`engine.gpu.HALF_SCALE`); ignored on the CPU.
    gpu_chunk: batch EM on the GPU processes the sequence in chunks of this many positions (exact; device memory
        bounded by the chunk); None picks the whole sequence, or the largest chunk that fits in device memory.
    """

    algorithm: str = "em"
    max_iterations: int = 100
    tolerance: float = 1e-6
    patience: int = 5
    pseudocount: float = 1e-6
    batch_size: int = 10_000
    memory: float = 0.9
    update_pi: bool = False
    count_method: str = "gemm"
    pass_precision: str = "float32"
    gpu_chunk: int | None = None

    def validate(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, not {self.algorithm!r}")
        if self.max_iterations < 1:
            raise ValueError("the number of iterations must be at least 1")
        if not self.tolerance >= 0:
            raise ValueError("the tolerance must be non-negative")
        if self.patience < 1:
            raise ValueError("patience must be at least 1")
        if not (self.pseudocount >= 0 and np.isfinite(self.pseudocount)):
            raise ValueError("the pseudocount must be a finite non-negative number")
        if self.batch_size < 2:
            raise ValueError("the batch size must be at least 2 symbols")
        if not 0.0 <= self.memory < 1.0:
            raise ValueError("the online EM memory (lambda) must lie in [0, 1)")
        if self.gpu_chunk is not None and self.gpu_chunk < 2:
            raise ValueError("the GPU chunk must hold at least two positions")
        if self.pass_precision not in ("float32", "float16"):
            raise ValueError("pass_precision must be float32 or float16")
        if self.count_method not in inference.COUNT_METHODS:
            raise ValueError(f"count_method must be one of {inference.COUNT_METHODS}")


class IterationRecord(NamedTuple):
    """One iteration: train BPS of the model entering the iteration (from its E-step pass), validation BPS of
    the model leaving it (NaN without validation), and the seconds the iteration took."""

    iteration: int
    train_bps: float
    validation_bps: float
    seconds: float


@dataclass
class TrainingResult:
    """The model to keep (best on validation, else the last), the history, and why training stopped:
    "converged", "max_iterations", "early_stopping", "cancelled" or "failed" (then ``error`` says why)."""

    model: CHMM
    history: list[IterationRecord] = field(default_factory=list)
    stopped: str = "max_iterations"
    best_iteration: int = 0
    error: str | None = None


ProgressCallback = Callable[[IterationRecord], None]


def _bps(log_likelihood: float, n: int) -> float:
    return float(-log_likelihood / (n * np.log(2.0)))


def _with_T(model: CHMM, T: np.ndarray, counts: np.ndarray, pi: np.ndarray | None = None) -> CHMM:
    return CHMM(model.symbols, model.layout, T, model.pi if pi is None else pi, counts, model.metadata)


def em_iteration(
    model: CHMM, x: np.ndarray, config: TrainingConfig, pair_layout: inference.PairLayout | None = None
) -> tuple[CHMM, float]:
    """One Baum-Welch iteration: E-step counts, then T = normalise(counts + pseudocount); returns the new model
    and the log-likelihood of ``x`` under the old one."""
    e = inference.e_step(model, x, count_method=config.count_method, pair_layout=pair_layout)
    T = normalise_rows(model.layout, e.counts, config.pseudocount, model.T.dtype, transition_support(model))
    pi = e.gamma_first.astype(model.pi.dtype) if config.update_pi else None
    return _with_T(model, T, e.counts, pi), e.log_likelihood


def viterbi_counts(model: CHMM, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hard counts: one count per transition of the MAP clone path of ``x``; returns (counts, path)."""
    path = inference.viterbi(model, x).clones
    return path_counts(model.layout, x, path), path


def path_counts(layout: BlockLayout, x: np.ndarray, path: np.ndarray) -> np.ndarray:
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


def viterbi_iteration(model: CHMM, x: np.ndarray, config: TrainingConfig) -> tuple[CHMM, float]:
    """One hard-EM iteration: counts along the Viterbi path, T = normalise(counts + pseudocount)."""
    log_likelihood = inference.log_likelihood(model, x)
    counts, _ = viterbi_counts(model, x)
    T = normalise_rows(model.layout, counts, config.pseudocount, model.T.dtype, transition_support(model))
    return _with_T(model, T, counts), log_likelihood


class _OnlineState:
    """The running statistic A of online EM (carried across epochs) and reusable buffers."""

    def __init__(self) -> None:
        self.A: np.ndarray | None = None


def online_epoch(
    model: CHMM, x: np.ndarray, config: TrainingConfig, state: _OnlineState, cancel: CancelToken | None
) -> tuple[CHMM, float, bool]:
    """One pass of online EM over ``x`` in batches (paper, section 3):
    A^(b) = lambda A^(b-1) + (1 - lambda) sum_{n in batch b} xi(n),  T^(b) = row-normalise(A^(b) + pseudocount).
    The pseudocount is scaled by (batch length / N), since A holds about one batch worth of counts while the
    pseudocount is set against whole-sequence counts (as in batch EM).
    The E-step of batch b uses T^(b-1) and starts from the last forward message of batch b-1 (the transition
    between two batches belongs to the later one). Returns the model, the summed log-likelihood of the batches
    (each under the T current when it was processed) and whether the pass was cancelled midway.
    The update of A and T is one fused kernel (``cpu.online_m_step``) that also keeps T's transposed blocks for the
    next backward pass, so a batch costs two sweeps over the stored blocks besides its E-step.
    """
    layout = model.layout
    n = len(x)
    if state.A is None:
        state.A = np.zeros(layout.size)
        first_batch = True
    else:
        first_batch = False
    counts = np.zeros(layout.size)
    support = transition_support(model)  # a pruned model: the pseudocount goes to its non-zero entries only
    T = model.T.copy()
    T_transposed = cpu.transpose_blocks(T, layout.block_pairs, layout.block_offset, layout.n_clones)
    row_length = np.zeros(layout.n_symbols, dtype=np.int64)
    np.add.at(row_length, layout.block_pairs[:, 0], layout.n_clones[layout.block_pairs[:, 1]])
    current = _with_T(model, T, None)
    log_likelihood = 0.0
    carry: np.ndarray | None = None
    start = 0
    while start < n - 1:
        if cancel is not None and cancel.cancelled:
            return model, log_likelihood, True
        stop = min(n, start + config.batch_size)
        if n - stop < 2:  # fold a tiny tail into this batch
            stop = n
        batch = x[start:stop] if carry is None else x[start - 1 : stop]
        e = inference.e_step(
            current,
            batch,
            initial=carry,
            count_method=config.count_method,
            T_transposed=T_transposed,
            counts_out=counts,
        )
        log_likelihood += e.log_likelihood
        decay = 0.0 if first_batch else config.memory
        first_batch = False
        cpu.online_m_step(
            state.A,
            counts,
            e.touched,
            decay,
            1.0 - config.memory,
            config.pseudocount * (stop - start) / n,
            T,
            T_transposed,
            layout.block_pairs,
            layout.block_offset,
            layout.n_clones,
            layout.clone_start,
            row_length,
        )
        if support is not None:
            T[:] = normalise_rows(layout, state.A, config.pseudocount * (stop - start) / n, T.dtype, support)
            T_transposed[:] = cpu.transpose_blocks(T, layout.block_pairs, layout.block_offset, layout.n_clones)
        carry = e.last_alpha
        start = stop
    return _with_T(model, T, state.A.copy()), log_likelihood, False


class CpuSteps:
    """The iterations of :func:`fit` on the CPU engine; models are host :class:`CHMM` objects. The GPU engine
    provides the same four methods (:class:`engine.gpu.GpuSteps`) with models kept on the device."""

    def __init__(self, model: CHMM, train: np.ndarray, config: TrainingConfig) -> None:
        self.train = train
        self.config = config
        self.online_state = _OnlineState()
        self.pair_layout = None
        if config.algorithm == "em":
            self.pair_layout = inference.pair_sorted_offsets(model.layout, train).with_buffers(
                model.T.dtype, len(train)
            )
        self.initial = model

    def iterate(self, current: CHMM, cancel: CancelToken | None) -> tuple[CHMM, float, bool]:
        """One iteration (an epoch for online EM): the new model, the training log-likelihood, cancelled midway."""
        if self.config.algorithm == "em":
            return (*em_iteration(current, self.train, self.config, self.pair_layout), False)
        if self.config.algorithm == "viterbi":
            return (*viterbi_iteration(current, self.train, self.config), False)
        return online_epoch(current, self.train, self.config, self.online_state, cancel)

    def validation_bps(self, model: CHMM, validation: np.ndarray) -> float:
        return inference.score(model, validation).bps

    def finite(self, model: CHMM) -> bool:
        return bool(np.all(np.isfinite(model.T)))

    def host(self, model: CHMM) -> CHMM:
        return model


def fit(
    model: CHMM,
    train: np.ndarray,
    validation: np.ndarray | None = None,
    config: TrainingConfig | None = None,
    callback: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
    backend: str = "cpu",
) -> TrainingResult:
    """Train ``model`` on the symbol sequence ``train`` with the configured algorithm.

    After every iteration ``callback`` receives an :class:`IterationRecord`. With a validation sequence the
    model with the lowest validation BPS is kept (early stopping after ``patience`` iterations without
    improvement); without one, the last model. Training also stops when the relative gain in training
    log-likelihood drops below ``tolerance``, or when ``cancel`` is set (checked once per iteration, or once per
    batch for online EM). A cancelled or failed run returns the last good model with ``stopped`` saying why.
    ``backend`` "gpu" runs every iteration on the GPU engine (:mod:`engine.gpu`, imported only then) with the
    models kept on the device; the returned model is a host model either way.
    """
    config = config or TrainingConfig()
    config.validate()
    train = np.ascontiguousarray(train, dtype=np.int64)
    if len(train) < 2:
        raise ValueError("the training sequence needs at least two symbols")
    has_validation = validation is not None and len(validation) > 0
    if getattr(model, "indptr", None) is not None:  # a SparseCHMM: O(non-zeros) EM on the CPU
        from engine.sparse import SparseSteps

        steps: Any = SparseSteps(model, train, config)
    elif backend == "gpu":
        from engine.gpu import GpuSteps

        steps = GpuSteps(model, train, validation if has_validation else None, config)
    else:
        steps = CpuSteps(model, train, config)
    result = TrainingResult(model=model)
    current = steps.initial
    best_validation = steps.validation_bps(current, validation) if has_validation else np.inf
    best_model = current
    since_best = 0
    previous_ll = -np.inf
    quiet_epochs = 0
    for iteration in range(1, config.max_iterations + 1):
        if cancel is not None and cancel.cancelled:
            result.stopped = "cancelled"
            break
        started = time.perf_counter()
        try:
            new_model, ll, was_cancelled = steps.iterate(current, cancel)
            if was_cancelled:
                result.stopped = "cancelled"
                break
            if not steps.finite(new_model):
                raise FloatingPointError("the transition matrix became non-finite")
            validation_bps = steps.validation_bps(new_model, validation) if has_validation else float("nan")
        except (FloatingPointError, MemoryError, ValueError) as exc:
            result.stopped = "failed"
            result.error = f"{type(exc).__name__}: {exc}"
            break
        record = IterationRecord(iteration, _bps(ll, len(train)), validation_bps, time.perf_counter() - started)
        result.history.append(record)
        current = new_model
        if has_validation:
            if validation_bps < best_validation - 1e-12:
                best_validation = validation_bps
                best_model = new_model
                result.best_iteration = iteration
                since_best = 0
            else:
                since_best += 1
        else:
            best_model = new_model
            result.best_iteration = iteration
        if callback is not None:
            callback(record)
        if has_validation and since_best >= config.patience:
            result.stopped = "early_stopping"
            break
        if np.isfinite(previous_ll) and np.isfinite(ll):
            gain = (ll - previous_ll) / abs(previous_ll) if previous_ll != 0 else 0.0
            # online EM's epoch likelihood is a sum over batches under a changing T: it may wobble and crawl
            # along plateaus, so it converges when the size of the change stays small for three epochs in a row
            if config.algorithm == "online":
                quiet_epochs = quiet_epochs + 1 if abs(gain) < config.tolerance else 0
                converged = quiet_epochs >= 3
            else:
                converged = gain < config.tolerance
            if converged:
                result.stopped = "converged"
                break
        previous_ll = ll
    else:
        result.stopped = "max_iterations"
    result.model = model if best_model is steps.initial else steps.host(best_model)
    return result
