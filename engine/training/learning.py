"""Learning a CHMM: batch EM (Baum-Welch on blocks), online EM and Viterbi (hard) EM (paper, section 3).

All three share one loop (:func:`fit`), written once over the :class:`engine.backends.engines.Engine` protocol, so it
runs on every implementation (dense or sparse on the CPU, dense on the GPU): an iteration produces a new transition
matrix from expected (or hard) counts, reports (iteration, train BPS, validation BPS, seconds) to a callback,
honours a cancellation token, and keeps the best model seen on the validation split. A cancelled or failed run
returns the last good model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from engine.backends import chunks, engines
from engine.backends.cpu import inference
from engine.errors import CHMMError
from engine.model.dense import CHMM
from engine.training import distributed

ALGORITHMS = ("em", "online", "viterbi")
VITERBI_SCORES = ("likelihood", "path")

ONLINE_BATCH_SIZE = 400
"""The paper's online EM batch (section 4.1.1); the automatic batch is at least this long."""
BATCH_PER_BLOCK = 2
"""The automatic batch has at least this many symbols per stored symbol-pair block, so that the E-step of a batch
costs about as much as the M-step that follows it (a sweep over every stored transition)."""
PLATEAU_SYMBOLS = 3_000_000
"""Online EM's plateau window: early stopping waits for no better validation BPS over at least this many training
symbols processed (and at least ``patience`` epochs); the toy FSM's first-order plateau lasts up to millions of
symbols before online EM leaves it (bench/RESULTS.md, issue 15)."""
PLATEAU_GAIN = 1e-3
"""For online EM, a validation BPS counts as better only when it is below the best so far by this many bits per
symbol: creeping along a plateau is not progress."""
OVERFIT_EPOCHS = 2
"""Online EM stops before its plateau window ends once it overfits: when, in each of this many epochs in a row, the
validation BPS rose while the training BPS fell, and the validation BPS is above the best by more than
:data:`PLATEAU_GAIN`. On a plateau the two move together (the toy FSM: never in 24 runs of 60 to 120 epochs, k = 3
and 5, restarts 0 to 3), so waiting there is kept; a run whose gap widens has nothing to wait for
(bench/RESULTS.md, issue 15)."""


def automatic_batch_size(n_blocks: int) -> int:
    """The online EM batch used when none is given: max(ONLINE_BATCH_SIZE, BATCH_PER_BLOCK * stored blocks)."""
    return max(ONLINE_BATCH_SIZE, BATCH_PER_BLOCK * int(n_blocks))


NOISE_FLOOR_MEMORY = 0.03
"""Online EM's statistic A remembers about batch_size / (1 - lambda) symbols. With fewer than this many per stored
transition entry it cannot settle: its validation BPS hovers at a noise floor far above batch EM's (Moby Dick at
1,000 states, 9,700 symbols of memory for 902,494 entries: 2.158 after 4 online epochs, 1.967 after one batch EM
iteration from there; at 3,000 states 2.09 for five epochs running), so waiting out the plateau window there buys
nothing. Tables 1 and 2 hold at least 0.11 symbols per entry (brackets k = 3, lambda 0.5), text at 1,000 states
and more at most 0.011."""


def online_wait(config: TrainingConfig, n_train: int, stored: int) -> int:
    """Epochs online EM waits for a validation BPS better by :data:`PLATEAU_GAIN`: :func:`plateau_epochs`, or 1 (it
    hands over to what follows at the first epoch without a clear gain) when its statistic remembers fewer than
    :data:`NOISE_FLOOR_MEMORY` symbols per stored entry (``stored``)."""
    memory = (config.batch_size or ONLINE_BATCH_SIZE) / (1.0 - config.memory)
    if memory < NOISE_FLOOR_MEMORY * stored:
        return 1
    return plateau_epochs(config.patience, n_train)


def overfitting(history: Sequence[IterationRecord], best_validation: float) -> bool:
    """Whether the last :data:`OVERFIT_EPOCHS` records each show the validation BPS rising and the training BPS
    falling against the record before, and the last validation BPS is above ``best_validation`` by more than
    :data:`PLATEAU_GAIN` (the widening gap between the two is overfitting, not a plateau)."""
    if len(history) <= OVERFIT_EPOCHS or not history[-1].validation_bps > best_validation + PLATEAU_GAIN:
        return False
    pairs = zip(history[-OVERFIT_EPOCHS - 1 : -1], history[-OVERFIT_EPOCHS:], strict=True)
    return all(now.validation_bps > before.validation_bps and now.train_bps < before.train_bps for before, now in pairs)


def plateau_epochs(patience: int, n_train: int) -> int:
    """Epochs online EM waits for a better validation BPS: ``patience``, or enough epochs to process
    :data:`PLATEAU_SYMBOLS` training symbols when that is more."""
    return max(patience, -(-PLATEAU_SYMBOLS // max(n_train, 1)))


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
    iterations: the most iterations (epochs over the training sequence for online EM); the name of
        :class:`engine.training.TrainOptions`' field and of ``--iterations``.
    tolerance: stop when the relative gain of the training log-likelihood between iterations falls below it (None:
        never on that gain).
    stop_when_worse: stop at the first iteration whose training BPS is not below the one before, keeping the model
        that entered it (the early stop of the cognitive maps' recipe, :func:`engine.cognitive.actions.learn_em`).
    viterbi_score: what Viterbi EM's training BPS measures: "likelihood" (log P(x), the forward pass) or "path"
        (log max_z P(z, x), the MAP path's own probability, as the maps' recipe scores it).
    patience: with a validation sequence, stop after this many iterations without a better validation BPS. Online
        EM waits longer on plateaus: :func:`plateau_epochs` epochs without a validation BPS better by
        :data:`PLATEAU_GAIN`.
    pseudocount: added to every stored count before normalising (M-step).
    batch_size, memory: online EM batch length (None: :func:`automatic_batch_size`) and the paper's lambda
        (A^(b) = lambda A^(b-1) + (1-lambda) xi).
    update_pi: re-estimate pi = gamma(1) (batch EM); by default pi stays as initialised (uniform), since a
        single training sequence carries almost no information on it and text scored later may start anywhere.
    chunk, burn_in: batch EM cuts documents longer than ``chunk`` symbols into chunks with ``burn_in`` symbols
        before and after (see :func:`engine.backends.chunks.chunk`), processed on a cluster's workers or, without a
        cluster, in lockstep on the GPU engines. None: on a cluster and on the CPU documents are the unit (exact); the
        GPU engines run long sequences in the lockstep chunks :func:`engine.backends.chunks.lockstep_length` chooses;
        :data:`engine.backends.chunks.EXACT` (0): exact passes everywhere. A burn-in of None is
        :data:`engine.backends.chunks.DEFAULT_BURN_IN` on a cluster and :data:`engine.backends.chunks.LOCKSTEP_BURN_IN`
        in lockstep.
    """

    algorithm: str = "em"
    iterations: int = 100
    tolerance: float | None = 1e-6
    patience: int = 5
    pseudocount: float = 1e-6
    batch_size: int | None = None
    memory: float = 0.9
    update_pi: bool = False
    chunk: int | None = None
    burn_in: int | None = None
    stop_when_worse: bool = False
    viterbi_score: str = "likelihood"

    def validate(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise CHMMError(f"algorithm must be one of {', '.join(ALGORITHMS)}, not {self.algorithm!r}")
        if self.iterations < 1:
            raise CHMMError("the number of iterations must be at least 1")
        if self.tolerance is not None and not self.tolerance >= 0:
            raise CHMMError("the tolerance must be non-negative")
        if self.viterbi_score not in VITERBI_SCORES:
            raise CHMMError(f"viterbi_score must be one of {', '.join(VITERBI_SCORES)}, not {self.viterbi_score!r}")
        if self.patience < 1:
            raise CHMMError("patience must be at least 1")
        if not (self.pseudocount >= 0 and np.isfinite(self.pseudocount)):
            raise CHMMError("the pseudocount must be a finite non-negative number")
        if self.batch_size is not None and self.batch_size < 2:
            raise CHMMError("the batch size must be at least 2 symbols")
        if not 0.0 <= self.memory < 1.0:
            raise CHMMError("the online EM memory (lambda) must lie in [0, 1)")
        if self.chunk is not None and self.chunk != chunks.EXACT and self.chunk < 2:
            raise CHMMError(f"a chunk must hold at least 2 symbols ({chunks.EXACT}: exact passes, no chunks)")
        if self.burn_in is not None and self.burn_in < 0:
            raise CHMMError("the burn-in must be at least 0 symbols")


class IterationRecord(NamedTuple):
    """One iteration: train BPS of the model entering the iteration (from its E-step pass), validation BPS of
    the model leaving it (NaN without validation), the seconds the iteration took, the restart it belongs to
    (see :func:`engine.training.best_of_restarts`), the candidate setting of an automatic search it belongs to
    (see :func:`engine.training.search_settings`) and whether it is an iteration of the refit."""

    iteration: int
    train_bps: float
    validation_bps: float
    seconds: float
    restart: int = 0
    candidate: int = 0
    refit: bool = False
    online: bool = False  # an epoch of online EM (the batch EM that follows it has False)


@dataclass
class TrainingResult:
    """The model to keep (best on validation, else the last), the history, and why training stopped:
    "converged", "max_iterations", "early_stopping", "cancelled" or "failed" (then ``error`` says why)."""

    model: engines.Model
    history: list[IterationRecord] = field(default_factory=list)
    stopped: str = "max_iterations"
    best_iteration: int = 0
    error: str | None = None
    online_model: Any = None  # online EM then batch EM (training.select_on_validation): the online stage's model
    online_iterations: int = 0  # ... and its epochs; later history records are batch EM iterations
    support: dict[str, Any] | None = None  # batch EM on the support (engine.training.support.Support.record)


ProgressCallback = Callable[[IterationRecord], None]


def _bps(log_likelihood: float, n: int) -> float:
    return float(-log_likelihood / (n * np.log(2.0)))


def em_iteration(
    model: Any, x: np.ndarray, config: TrainingConfig, backend: str = "cpu", options: Any = None
) -> tuple[Any, float]:
    """One Baum-Welch iteration on a host model, on the implementation :func:`engine.backends.engines.engine_for` picks:
    E-step counts, then T = normalise(counts + pseudocount); returns the new host model and the log-likelihood of
    ``x`` under the old one."""
    engine = engines.engine_for(model, backend, options)
    state = engine.load(model)
    e = engine.e_step(state, np.ascontiguousarray(x, dtype=np.int64))
    pi = e.gamma_first if config.update_pi else None
    return engine.host(engine.m_step(state, e.counts, config.pseudocount, pi)), e.log_likelihood


def viterbi_counts(model: CHMM, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hard counts: one count per transition of the MAP clone path of ``x``; returns (counts, path)."""
    path = inference.viterbi(model, x).clones
    return inference.path_counts(model.layout, x, path), path


def online_update(
    engine: engines.Engine,
    state: Any,
    statistic: Any,
    e: inference.EStepResult,
    memory: float,
    pseudocount: float,
    first: bool,
) -> Any:
    """Online EM's update after one batch (paper, section 3), on any implementation: the running statistic
    A = lambda A + (1 - lambda) sum_n xi(n) in place (A = (1 - lambda) sum_n xi(n) for the ``first`` batch), then
    T = row-normalise(A + pseudocount) over the entries EM may update (the M-step). ``e.counts`` is consumed: it is
    zeroed for the next batch (an E-step into a reused buffer writes only the blocks its batch touches).
    :func:`online_epoch` runs an implementation's own exact update instead where it offers one
    (``online_session``: the dense CPU engine's :class:`engine.backends.cpu.implementation.LazyOnlineUpdate`)."""
    statistic *= 0.0 if first else memory
    statistic += (1.0 - memory) * engine.as_counts(state, e.counts)
    e.counts.fill(0.0)
    return engine.m_step(state, statistic, pseudocount)


@dataclass
class OnlineState:
    """What online EM carries across epochs: the running statistic A (paper, section 3), in the state's layout."""

    statistic: Any = None


def online_epoch(
    engine: engines.Engine,
    current: Any,
    sequences: list[np.ndarray],
    config: TrainingConfig,
    state: OnlineState,
    cancel: CancelToken | None,
    cluster: distributed.ClusterEStep | None = None,
    row_keys: Sequence[np.ndarray] | None = None,
) -> tuple[Any, float, bool]:
    """One pass of online EM over the sequences, each in batches of ``config.batch_size`` symbols (as :func:`fit`
    resolves it; ONLINE_BATCH_SIZE when None) (paper, section 3):
    A^(b) = lambda A^(b-1) + (1 - lambda) sum_{n in batch b} xi(n),  T^(b) = row-normalise(A^(b) + pseudocount).
    The pseudocount is scaled by (batch length / N), N the symbols of all sequences, since A holds about one batch
    worth of counts while the pseudocount is set against whole-corpus counts (as in batch EM).
    The E-step of batch b uses T^(b-1) and starts from the last forward message of batch b-1 (the transition
    between two batches belongs to the later one); each sequence starts from pi. Returns the state, the summed
    log-likelihood of the batches (each under the T current when it was processed) and whether the pass was
    cancelled midway (then the state entering the epoch is returned). ``row_keys``: for walks with actions, each
    sequence's block row of every step (:func:`engine.cognitive.actions.row_keys`), sliced with its batches (not on a
    cluster).
    """
    if row_keys is not None and (cluster is not None or len(row_keys) != len(sequences)):
        raise CHMMError("online EM with actions needs one row key sequence per walk and runs without a cluster")
    total = sum(len(x) for x in sequences)
    working = engine.copy(current)
    first_batch = state.statistic is None
    if first_batch:
        state.statistic = engine.zero_counts(current)
    batches = online_batches([len(x) for x in sequences], config.batch_size or ONLINE_BATCH_SIZE)
    session_for = getattr(engine, "online_session", None)
    session = (
        None if session_for is None or cluster is not None else session_for(working, state.statistic, config.memory)
    )
    counts = engine.zero_counts(current) if session is None else session.counts
    layout = getattr(working, "layout", None)
    log_likelihood = 0.0
    carry: np.ndarray | None = None
    for b, (k, first, start, stop) in enumerate(batches):
        if cancel is not None and cancel.cancelled:
            if session is not None:
                session.finish()
            return current, log_likelihood, True
        x = sequences[k]
        if first == start:  # each sequence starts from pi
            carry = None
        batch = x[first:stop]
        if cluster is not None:  # the batch's E-step split over the workers; batches still in order
            e = cluster.batch(engine, working, batch, carry, cancel)
            if e is None:
                return current, log_likelihood, True
        else:
            key = None if row_keys is None else row_keys[k][first:stop]
            e = engine.e_step(working, batch, initial=carry, counts_out=counts, row_key=key)
        log_likelihood += e.log_likelihood
        pseudocount = config.pseudocount * (stop - start) / total
        if session is not None:
            following = batches[b + 1] if b + 1 < len(batches) else None
            needed = None if following is None else _batch_blocks(layout, sequences, row_keys, following)
            session.update(e, pseudocount, first_batch, needed)
        else:
            working = online_update(engine, working, state.statistic, e, config.memory, pseudocount, first_batch)
        first_batch = False
        carry = e.last_alpha
    if session is not None:
        session.finish()
    return engine.with_counts(working, state.statistic.copy()), log_likelihood, False


def online_batches(lengths: Sequence[int], batch_size: int) -> list[tuple[int, int, int, int]]:
    """Online EM's batches over sequences of ``lengths``, in order: (sequence, first, start, stop) with the batch's
    steps ``start`` to ``stop - 1`` and its symbols ``first`` to ``stop - 1`` (a batch after a sequence's first
    overlaps the one before by one symbol: the transition between two batches belongs to the later one; a tail of
    fewer than two symbols is folded into the batch before)."""
    batches = []
    for k, n in enumerate(lengths):
        start, previous = 0, False
        while start < n - 1:
            stop = min(n, start + batch_size)
            if n - stop < 2:  # fold a tiny tail into this batch
                stop = n
            batches.append((k, start - 1 if previous else start, start, stop))
            previous, start = True, stop
    return batches


def _batch_blocks(
    layout: Any,
    sequences: Sequence[np.ndarray],
    row_keys: Sequence[np.ndarray] | None,
    batch: tuple[int, int, int, int],
) -> np.ndarray:
    """Per stored block, whether the E-step of ``batch`` (:func:`online_batches`) reads it: the blocks of its symbol
    pairs (rows by the walk's row keys when given)."""
    k, first, _, stop = batch
    x = sequences[k]
    rows = x if row_keys is None else row_keys[k]
    found = layout.find_blocks(rows[first : stop - 1], x[first + 1 : stop])
    needed = np.zeros(layout.n_blocks, dtype=np.bool_)
    needed[found[found >= 0]] = True
    return needed


class _Iterations:
    """The three algorithms' iterations over one :class:`engine.backends.engines.Engine` (batch EM, Viterbi EM, online
    EM); batch EM's E-step runs in this process or, given ``cluster``, over the workers of a Dask cluster."""

    def __init__(
        self,
        engine: engines.Engine,
        start: Any,
        sequences: list[np.ndarray],
        config: TrainingConfig,
        cluster: Any = None,
        row_keys: Sequence[np.ndarray] | None = None,
    ) -> None:
        self.engine = engine
        self.sequences = sequences
        self.config = config
        self.cluster = None
        self.row_keys = row_keys
        keys: Sequence[np.ndarray | None] = [None] * len(sequences) if row_keys is None else row_keys
        if row_keys is not None and (cluster is not None or len(row_keys) != len(sequences)):
            raise CHMMError("training with actions needs one row key sequence per walk and runs without a cluster")
        if cluster is not None:
            if config.algorithm == "viterbi":
                raise CHMMError("training on a cluster runs batch or online EM (--algorithm em or online)")
            documents = sequences if config.algorithm == "em" else []  # online EM sends each batch as it comes
            burn_in = distributed.DEFAULT_BURN_IN if config.burn_in is None else config.burn_in
            self.cluster = distributed.ClusterEStep(cluster, documents, chunk=config.chunk or None, burn_in=burn_in)
            self.plans: list[Any] = []
        else:
            self.plans = [
                engine.plan(start, x, config.algorithm, config.batch_size, config.chunk, config.burn_in, row_key=k)
                for x, k in zip(sequences, keys, strict=True)
            ]
        self.online = OnlineState()

    def __call__(self, current: Any, cancel: CancelToken | None) -> tuple[Any, float, bool]:
        """One iteration (an epoch for online EM): the new state, the training log-likelihood, cancelled midway."""
        engine, config = self.engine, self.config
        if config.algorithm == "em":
            if self.cluster is not None:
                e = self.cluster(engine, current, cancel)
                if e is None:
                    return current, 0.0, True
            else:
                e = engines.e_step_sequences(engine, current, self.sequences, self.plans, self.row_keys)
            pi = e.gamma_first if config.update_pi else None
            return engine.m_step(current, e.counts, config.pseudocount, pi), e.log_likelihood, False
        if config.algorithm == "viterbi":
            counts, log_likelihood = None, 0.0
            keys = [None] * len(self.sequences) if self.row_keys is None else self.row_keys
            for x, k in zip(self.sequences, keys, strict=True):
                c, ll = engine.hard_counts(current, x, row_key=k, score=config.viterbi_score)
                counts = c if counts is None else counts + c
                log_likelihood += ll
            return engine.m_step(current, counts, config.pseudocount), log_likelihood, False
        return online_epoch(
            engine, current, self.sequences, config, self.online, cancel, self.cluster, row_keys=self.row_keys
        )


def _training_sequences(
    train: np.ndarray | Sequence[np.ndarray], row_keys: Sequence[np.ndarray] | None
) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """The training sequences of at least two symbols (fewer carry no transition) and, for walks with actions, the
    row keys of those kept; ValueError when none is left or the walks and their row keys do not pair up."""
    if row_keys is None:
        sequences = [x for x in engines.as_sequences(train) if len(x) >= 2]
    else:
        walks = [train] if isinstance(train, np.ndarray) and train.ndim == 1 else list(train)
        if len(row_keys) != len(walks):
            raise CHMMError(f"{len(walks)} walks need as many row key sequences, got {len(row_keys)}")
        kept_walks = [(x, k) for x, k in zip(walks, row_keys, strict=True) if len(x) >= 2]
        sequences = [np.ascontiguousarray(x, dtype=np.int64) for x, _ in kept_walks]
        row_keys = [np.ascontiguousarray(k, dtype=np.int64) for _, k in kept_walks]
    if not sequences:
        raise CHMMError("the training sequence needs at least two symbols")
    return sequences, row_keys


def _worse(history: list[IterationRecord]) -> bool:
    """Whether the last iteration's training BPS is not lower than the one before (the maps' stop when worse)."""
    return len(history) > 1 and not history[-1].train_bps < history[-2].train_bps


def fit(
    model: Any,
    train: np.ndarray | Sequence[np.ndarray],
    validation: np.ndarray | Sequence[np.ndarray] | None = None,
    config: TrainingConfig | None = None,
    callback: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
    backend: str = "cpu",
    cluster: Any = None,
    options: Any = None,
    row_keys: Sequence[np.ndarray] | None = None,
) -> TrainingResult:
    """Train ``model`` on the symbol sequence ``train`` (or several independent sequences: documents) with the
    configured algorithm, on the implementation :func:`engine.backends.engines.engine_for` picks for the model and
    ``backend`` (dense on the CPU or the GPU, sparse on the CPU), with ``options`` when they are that
    implementation's options dataclass (e.g. :class:`engine.backends.gpu.implementation.GpuOptions`); the returned model
    is a host model.

    After every iteration ``callback`` receives an :class:`IterationRecord`. With validation text the model with the
    lowest validation BPS is kept (early stopping after ``patience`` iterations without improvement; for online EM
    after :func:`online_wait` epochs without an improvement of :data:`PLATEAU_GAIN`, or sooner once it overfits:
    :func:`overfitting`); without it, the last model.
    ``config.batch_size`` None is :func:`automatic_batch_size` of the model's stored blocks. Training also stops
    when the relative gain in training log-likelihood drops below ``tolerance``, or when ``cancel`` is set (checked
    once per iteration, or once per batch for online EM). A cancelled or failed run returns the last good model with
    ``stopped`` saying why. Sequences of fewer than two symbols carry no transition and are left out. With
    ``cluster`` (a ``dask.distributed.Client``) batch EM's E-step runs over its workers, exactly
    (:mod:`engine.training.distributed`); a cluster that goes away fails the run with the reason and the last good
    model. ``row_keys``: for walks with actions (``train`` a list of walks' observations), each walk's block row of
    every step (:func:`engine.cognitive.actions.row_keys`), passed to every E-step and decoding; not on a cluster.
    """
    config = config or TrainingConfig()
    config.validate()
    if config.batch_size is None:
        config = replace(config, batch_size=automatic_batch_size(model.layout.n_blocks))
    sequences, row_keys = _training_sequences(train, row_keys)
    n_train = sum(len(x) for x in sequences)
    held_out = engines.as_sequences(validation)
    engine = engines.engine_for(model, backend, options)
    initial = engine.load(model)
    iterate = _Iterations(engine, initial, sequences, config, cluster, row_keys)

    def validation_bps(state: Any) -> float:
        return engines.score_sequences(engine, state, held_out).bps if held_out else float("nan")

    result, online = TrainingResult(model=model), config.algorithm == "online"
    # online EM crawls along plateaus before it leaves them: it waits longer, and only a clear gain counts
    wait = online_wait(config, n_train, model.n_nonzero()) if online else config.patience
    kept = _Kept(initial, validation_bps(initial) if held_out else np.inf, PLATEAU_GAIN if online else 1e-12)
    current, previous_ll, quiet_epochs = initial, -np.inf, 0
    for iteration in range(1, config.iterations + 1):
        if cancel is not None and cancel.cancelled:
            result.stopped = "cancelled"
            break
        begun = time.perf_counter()
        new, ll, held_out_bps, stopped, error = _step(iterate, engine, current, cancel, validation_bps)
        if stopped is not None:
            result.stopped, result.error = stopped, error
            break
        record = IterationRecord(iteration, _bps(ll, n_train), held_out_bps, time.perf_counter() - begun, online=online)
        result.history.append(record)
        worse = config.stop_when_worse and _worse(result.history)
        if not worse:
            current = new
            kept.observe(new, held_out_bps if held_out else None, iteration)
            result.best_iteration = kept.iteration
        if callback is not None:
            callback(record)
        # worse: the model that entered this iteration is kept (the maps' recipe); early stopping before convergence
        early = held_out and (kept.since_best >= wait or (online and overfitting(result.history, kept.bps)))
        converged, quiet_epochs = _converged(previous_ll, ll, config.tolerance, online, quiet_epochs, iteration, wait)
        if worse or early or converged:
            result.stopped = "early_stopping" if early and not worse else "converged"
            break
        previous_ll = ll
    else:
        result.stopped = "max_iterations"
    result.model = model if kept.state is initial else engine.host(kept.state)
    return result


def _step(
    iterate: Callable[[Any, CancelToken | None], tuple[Any, float, bool]],
    engine: engines.Engine,
    current: Any,
    cancel: CancelToken | None,
    validation_bps: Callable[[Any], float],
) -> tuple[Any, float, float, str | None, str | None]:
    """One iteration of :func:`fit`: the new state, the training log-likelihood of the old one, the new one's
    validation BPS, and why training stops here ("cancelled", or "failed" with the error in words) or None."""
    try:
        new, ll, was_cancelled = iterate(current, cancel)
        if was_cancelled:
            return current, 0.0, float("nan"), "cancelled", None
        if not engine.finite(new):
            raise FloatingPointError("the transition matrix became non-finite")
        return new, ll, validation_bps(new), None, None
    except (FloatingPointError, MemoryError, ValueError, distributed.ClusterError) as exc:
        return current, 0.0, float("nan"), "failed", f"{type(exc).__name__}: {exc}"


class _Kept:
    """The model :func:`fit` keeps: with validation text, the one of the lowest validation BPS (``bps``, at
    ``iteration``), and the iterations since validation last improved by more than ``clear_gain``
    (``since_best``); without it, the last one."""

    def __init__(self, state: Any, bps: float, clear_gain: float) -> None:
        self.state, self.bps, self.iteration = state, bps, 0
        self.reference, self.since_best, self.clear_gain = bps, 0, clear_gain

    def observe(self, state: Any, bps: float | None, iteration: int) -> None:
        """The model after ``iteration`` and its validation BPS (None without validation text)."""
        if bps is None:
            self.state, self.iteration = state, iteration
            return
        if bps < self.bps - 1e-12:
            self.state, self.bps, self.iteration = state, bps, iteration
        if bps < self.reference - self.clear_gain:
            self.reference, self.since_best = bps, 0
        else:
            self.since_best += 1


def _converged(
    previous_ll: float, ll: float, tolerance: float | None, online: bool, quiet_epochs: int, iteration: int, wait: int
) -> tuple[bool, int]:
    """Whether training converged after this iteration (relative gain in training log-likelihood below
    ``tolerance``), and the online epochs in a row with a small change so far. Online EM's epoch likelihood is a sum
    over batches under a changing T: it may wobble and crawl along plateaus, so it converges when the size of the
    change stays small for three epochs in a row, and not before it has processed the plateau window (``wait``)."""
    if tolerance is None or not (np.isfinite(previous_ll) and np.isfinite(ll)):
        return False, quiet_epochs
    gain = (ll - previous_ll) / abs(previous_ll) if previous_ll != 0 else 0.0
    if online:
        quiet_epochs = quiet_epochs + 1 if abs(gain) < tolerance else 0
        return quiet_epochs >= 3 and iteration >= wait, quiet_epochs
    return gain < tolerance, quiet_epochs
