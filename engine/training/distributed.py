"""Training over a Dask cluster: the E-step of batch EM mapped over shards of the documents, exactly, and the
E-step of every online-EM batch split over the workers (:meth:`ClusterEStep.batch`).

The expected counts of independent sequences add up (paper, section 3: the M-step needs only sum_n xi(n)), so a
corpus of many documents trains exactly on many machines: every worker runs the protocol's E-step
(:func:`engine.backends.engines.e_step_sequences`) on its shard of the documents, the partial counts are summed on the
workers in a tree (pairs of partials, then pairs of those), and only the total comes back to the client, which runs the
M-step. Per iteration the model goes to the cluster once (scattered to one worker) and to each worker once (the
first of its tasks fetches it from a worker holding it), not once per task; the shards go once per training
(scattered at the start, one copy each, each shard's task pinned to the worker that holds it), and again after a
worker took some of them with it. Shards are balanced by symbols, not by documents.

Nothing here asks Dask's scheduler to replicate data (``scatter(broadcast=True)``, ``client.replicate``): its
``replicate`` copies to a list of workers taken when it starts and, holding the scheduler's replica lock, tries again
for ever to reach one that died meanwhile, so every later broadcast on that scheduler waited for ever too (issue 51:
a worker killed as an iteration began, on a loaded machine, hung the run's model broadcast on every try and the
runs after it).

This module is the only one that imports Dask (the ``distributed`` package, the optional extra ``[cluster]``), and
only when a cluster is asked for: ``--workers N`` starts a local cluster of N processes (no server to install),
``--cluster ADDRESS`` connects to a running scheduler (``dask scheduler`` / ``dask worker ADDRESS``). A document is a
shard's unit, exactly; a long document (one book) can be cut into chunks (``chunk``), each with a burn-in of
:data:`DEFAULT_BURN_IN` symbols before and after whose steps are not counted (dense models), so that one book is
shared too, up to the message error at the chunk boundaries (measured in bench/RESULTS.md).
"""

from __future__ import annotations

import importlib
import operator
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.backends import engines
from engine.backends.chunks import DEFAULT_BURN_IN, Chunk, chunk
from engine.backends.cpu import inference
from engine.errors import CHMMError

ONE_CORE = {
    inference.ONE_THREAD_ENV: "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMBA_NUM_THREADS": "1",
}
"""The environment of a local worker process: one core each (the E-step's passes one after the other, BLAS and numba
on one thread), so that N workers use N cores. Start remote workers the same way: ``dask worker ADDRESS
--nthreads 1`` with these variables set."""


class ClusterError(ConnectionError):
    """The cluster cannot be reached, or went away during training (the message says which and why)."""


@dataclass
class Partial:
    """The E-step of a shard of documents: expected counts in the model's layout, the sum of gamma(1) over its
    documents, their log-likelihood and zero-probability events, how many documents, and the touched blocks."""

    counts: np.ndarray
    gamma_first: np.ndarray
    log_likelihood: float
    zero_events: int
    sequences: int
    touched: np.ndarray
    last_alpha: np.ndarray | None = None  # the forward message at the end of the last piece (online EM's carry)
    order: int = -1  # the position of that piece in its batch

    def __add__(self, other: Partial) -> Partial:
        later = other if other.order > self.order else self
        return Partial(
            self.counts + other.counts,
            self.gamma_first + other.gamma_first,
            self.log_likelihood + other.log_likelihood,
            self.zero_events + other.zero_events,
            self.sequences + other.sequences,
            self.touched | other.touched,
            later.last_alpha,
            later.order,
        )


WORKER_BACKEND = "cpu"
"""The backend the workers run their E-steps on (Dask workers are CPU processes)."""


def shard_e_step(model: Any, shard: Sequence[Any], backend: str = WORKER_BACKEND) -> Partial:
    """What a worker computes: the E-step of its documents (and chunks of documents) on the implementation the
    registry picks for ``model`` on ``backend``; their counts and log-likelihoods add up, gamma(1) is summed over
    the pieces that start a document. Chunks need an implementation with the ``chunks`` capability."""
    engine = engines.engine_for(model, backend)
    state = engine.load(model)
    whole = [x for x in shard if not isinstance(x, Chunk)]
    total: Partial | None = None
    if whole:
        e = engines.e_step_sequences(engine, state, whole)
        total = Partial(
            np.asarray(e.counts, dtype=np.float64),
            e.gamma_first * len(whole),
            e.log_likelihood,
            e.zero_events,
            len(whole),
            e.touched,
        )
    for piece in (p for p in shard if isinstance(p, Chunk)):
        e = engine.e_step(state, piece.x, initial=piece.initial, counted=(piece.lo, piece.hi))
        part = Partial(
            np.asarray(e.counts, dtype=np.float64),
            e.gamma_first if piece.first else np.zeros_like(e.gamma_first),
            e.log_likelihood,
            e.zero_events,
            int(piece.first),
            e.touched,
            e.last_alpha,
            piece.order,
        )
        total = part if total is None else total + part
    if total is None:
        raise CHMMError("a shard without documents")
    return total


SCATTER_SECONDS = 30.0
SCATTER_BYTES_PER_SECOND = 5e6
SCATTER_TRIES = 3
ITERATION_TRIES = 3
"""An iteration whose data went with a dying worker (a scattered model, batch or partial sum that lived only there:
Dask cannot recompute scattered data, and cancels what depends on it) is run again, up to this many times in all,
against the workers alive then; the E-step is a pure function of the model and the documents, so a retried
iteration gives the same counts."""


class _WorkerLost(Exception):
    """An iteration's futures were lost with a worker (raised inside :meth:`ClusterEStep._run` only)."""


def _capture(call: Callable[[], Any], outcome: dict[str, Any]) -> None:
    """``call()``'s result, or the exception it raised, put in ``outcome`` ("value" or "error"): the target of a
    thread that the caller waits for with a timeout of its own."""
    try:
        outcome["value"] = call()
    except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
        outcome["error"] = exc


def _send(client: Any, data: Any, timeout: float, outcome: dict[str, Any]) -> None:
    """``client.scatter`` with its futures, or the exception it raised, put in ``outcome`` (:func:`_capture`): each
    item to one worker, never broadcast (see the module docstring). Each scatter gets keys of its own
    (``hash=False``): under content-hash keys, data equal to data whose futures are being released (a retried try's
    model and documents, an unchanged model, the same documents from a second :class:`ClusterEStep`) takes the old
    key, and the release can drop the new copy as it arrives (seen in CI: an iteration retried with the same model
    lost it again, "Could not find data")."""
    _capture(lambda: client.scatter(data, broadcast=False, timeout=timeout, hash=False), outcome)


def _model_bytes(model: Any) -> int:
    """The bytes of a model's arrays (what a scatter sends)."""
    return int(sum(v.nbytes for v in vars(model).values() if isinstance(v, np.ndarray)))


def balance(sequences: Sequence[Any], shards: int) -> list[list[Any]]:
    """The sequences (documents or chunks) in ``shards`` groups of about equal symbols (longest first, each to the
    lightest group); groups that get nothing are left out."""
    groups: list[list[Any]] = [[] for _ in range(max(1, shards))]
    load = np.zeros(len(groups))
    for x in sorted(sequences, key=len, reverse=True):
        k = int(np.argmin(load))
        groups[k].append(x)
        load[k] += len(x)
    return [g for g in groups if g]


MAX_LOCAL_WORKERS = 1024
"""The most worker processes of a local cluster."""


def check_workers(workers: int) -> int:
    """``workers`` when it is a number of local worker processes from 1 to :data:`MAX_LOCAL_WORKERS`, else
    ValueError in one sentence."""
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_LOCAL_WORKERS:
        raise CHMMError(f"--workers must be a number of processes from 1 to {MAX_LOCAL_WORKERS:,}, got {workers}")
    return workers


def connect(address: str | None = None, workers: int | None = None) -> Any:
    """A ``dask.distributed.Client``: of the scheduler at ``address``, or of a new local cluster of ``workers``
    processes (one thread each). :class:`ClusterError` when Dask is not installed or the scheduler cannot be
    reached."""
    try:
        distributed = importlib.import_module("dask.distributed")
    except ImportError:
        raise ClusterError("training on a cluster needs Dask: pip install 'chmm-explorer[cluster]'") from None
    if address:
        try:
            return distributed.Client(address, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise ClusterError(f"cannot reach the Dask scheduler at {address} ({exc})") from None
    cluster = distributed.LocalCluster(
        n_workers=check_workers(workers),
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        silence_logs=40,
        env=ONE_CORE,
    )
    return distributed.Client(cluster)


@contextmanager
def open_cluster(address: str | None = None, workers: int | None = None) -> Iterator[Any]:
    """:func:`connect` for the length of a ``with`` block: the client is closed after it, and a local cluster it
    started is shut down."""
    client = connect(address, workers)
    try:
        yield client
    finally:
        local = None if address else client.cluster
        client.close()
        if local is not None:
            local.close()


@dataclass
class ClusterEStep:
    """The batch-EM E-step of :func:`engine.training.learning.fit` over a cluster (see the module docstring). Call it
    with the engine and the state of the iteration; it returns the summed
    :class:`engine.backends.cpu.inference.EStepResult`, or None when ``cancel`` was set while the workers ran (their
    tasks are cancelled)."""

    client: Any
    sequences: list[np.ndarray]
    shards: int | None = None
    chunk: int | None = None
    burn_in: int = DEFAULT_BURN_IN
    backend: str = WORKER_BACKEND
    futures: list[Any] = field(default_factory=list, repr=False)
    _groups: list[Any] = field(default_factory=list, repr=False, init=False)

    def __post_init__(self) -> None:
        if self.chunk is not None and not engines.supports(self.backend, "chunks"):
            raise CHMMError(
                f"chunks with a burn-in need a backend whose E-step counts a range of steps, not {self.backend}"
            )
        workers = max(1, len(self.client.scheduler_info().get("workers", {})))
        self._groups = balance(chunk(self.sequences, self.chunk, self.burn_in), self.shards or workers)
        if self._groups:  # online EM: each batch is sent as it comes (see :meth:`batch`)
            self._send_documents()

    def _send_documents(self) -> list[Any]:
        """Scatter the documents' shards (again, after a worker took some with it), one copy each; their futures in
        ``self.futures``. A shard lost with its worker is sent again from this process (:meth:`_run`)."""
        self.futures = []  # the old copies (keys of their own) go before the new ones come
        try:
            self.futures = self._scatter(self._groups, sum(int(x.nbytes) for g in self._groups for x in g))
        except ClusterError:
            raise
        except (OSError, TimeoutError) as exc:
            raise ClusterError(f"the Dask cluster went away while the documents were sent ({exc})") from None
        return self.futures

    def batch(
        self, engine: engines.Engine, state: Any, x: np.ndarray, initial: np.ndarray | None, cancel: Any = None
    ) -> inference.EStepResult | None:
        """The E-step of one online-EM batch split over the workers: the batch cut into one piece per worker (or
        ``chunk`` symbols), the first starting from ``initial`` (the message carried from the batch before), the
        others with a burn-in before and after; the counts add up and the last piece's forward message is carried
        on. The same online EM as in one process, up to the burn-in's message error (none with one piece)."""
        workers = max(1, len(self.client.scheduler_info().get("workers", {})))
        size = self.chunk or -(-(len(x) - 1) // workers)
        pieces = []
        steps = len(x) - 1
        for k, start in enumerate(range(0, steps, max(size, 1))):
            stop = min(start + size, steps)
            a = start if start == 0 else max(0, start - self.burn_in)
            b = min(len(x), stop + 1 + self.burn_in) if stop < steps else len(x)
            first_initial = initial if start == 0 else None
            pieces.append(Chunk(x[a:b], start - a, stop - a, start == 0, first_initial, k))
        pieces_sent = [[p] for p in pieces]
        return self._run(engine, state, lambda _: self._scatter(pieces_sent, int(x.nbytes), cancel=cancel), cancel)

    def _scatter(self, data: Any, nbytes: int, cancel: Any = None) -> Any:
        """``client.scatter`` that cannot hang: a scatter that reaches a worker dying at that moment may never return
        (seen in CI: a worker killed as an iteration began held the run for ever) or fail on its closed connection,
        so each try has a timeout (:data:`SCATTER_SECONDS` plus the data at :data:`SCATTER_BYTES_PER_SECOND`), and a
        try that timed out or lost its connection is repeated, against the workers alive then, up to
        :data:`SCATTER_TRIES` times; then :class:`ClusterError`. None when ``cancel`` was set between tries."""
        timeout = SCATTER_SECONDS + nbytes / SCATTER_BYTES_PER_SECOND
        failure = "timed out"
        for _ in range(SCATTER_TRIES):
            self._check_client()
            if cancel is not None and cancel.cancelled:
                return None
            outcome: dict[str, Any] = {}
            # in a thread of its own, waited for with a timeout: the hang is inside the client's own wait, which
            # its timeout argument does not bound (a hung try's thread is a daemon and is left behind; its futures,
            # should it return, are dropped with it and released)
            sender = threading.Thread(
                target=_send, args=(self.client, data, timeout, outcome), name="chmm-scatter", daemon=True
            )
            sender.start()
            sender.join(timeout)
            error = outcome.get("error")
            if sender.is_alive() or isinstance(error, (TimeoutError, OSError)):  # a comm error: a worker died
                failure = "timed out" if error is None else f"{type(error).__name__}: {error}"
                continue
            if error is not None:
                raise error
            return outcome["value"]
        raise ClusterError(
            f"the Dask cluster did not take the data in {SCATTER_TRIES} tries of {timeout:.0f} s (workers dying?"
            f" the last: {failure})"
        )

    def _holders(self, shards: list[Any]) -> list[list[str] | None]:
        """The workers that hold each shard's future (None where the scheduler lists none): where its task runs, so
        that the tasks go where the documents are and each worker fetches the model once, rather than to the worker
        the model was scattered to."""
        who_has = self.client.who_has(shards)
        return [list(who_has.get(f.key, ())) or None for f in shards]

    def _check_client(self) -> None:
        """ClusterError unless the client is connected to its scheduler."""
        if self.client.status != "running":
            raise ClusterError(f"the Dask scheduler went away (the client is {self.client.status})")

    def __call__(self, engine: engines.Engine, state: Any, cancel: Any = None) -> inference.EStepResult | None:
        return self._run(engine, state, lambda again: self._send_documents() if again else self.futures, cancel)

    def _run(
        self, engine: engines.Engine, state: Any, shards: Callable[[bool], list[Any] | None], cancel: Any
    ) -> inference.EStepResult | None:
        """One E-step over the shards that ``shards(again)`` gives (None: cancelled; ``again`` after a try whose
        data a worker took with it: send them anew), tried up to :data:`ITERATION_TRIES` times in all; then
        :class:`ClusterError`."""
        for attempt in range(ITERATION_TRIES):
            sent = shards(attempt > 0)
            if sent is None:
                return None
            try:
                return self._run_once(engine, state, sent, cancel)
            except _WorkerLost as exc:
                reason = str(exc)
        raise ClusterError(f"the Dask cluster went away during an iteration, {ITERATION_TRIES} times ({reason})")

    def _run_once(
        self, engine: engines.Engine, state: Any, shards: list[Any], cancel: Any
    ) -> inference.EStepResult | None:
        from dask.distributed import wait

        model = engine.host(state)
        try:
            self._check_client()
            shared = self._scatter(model, _model_bytes(model), cancel=cancel)
            if shared is None:
                return None
            partials = [
                self.client.submit(
                    shard_e_step, shared, shard, self.backend, pure=False, workers=where, allow_other_workers=True
                )
                for shard, where in zip(shards, self._holders(shards), strict=True)
            ]
            while len(partials) > 1:  # a tree sum on the workers: only the total comes back
                pairs = [
                    self.client.submit(operator.add, a, b, pure=False)
                    for a, b in zip(partials[::2], partials[1::2], strict=False)
                ]
                partials = pairs + ([partials[-1]] if len(partials) % 2 else [])
            total_future = partials[0]
            while not total_future.done():
                try:
                    wait([total_future], timeout=0.5)
                except TimeoutError:  # not done yet: look at the cancel token and the scheduler, then wait again
                    pass
                self._check_client()
                if cancel is not None and cancel.cancelled:
                    self.client.cancel([total_future, shared])
                    return None
            total: Partial = total_future.result()
        except (ClusterError, ValueError, FloatingPointError, MemoryError):
            raise  # ours, or the E-step's own errors raised on a worker: the training loop reports them
        except Exception as exc:  # a worker, scheduler or client that went away fails in many ways (comm, state, None)
            self._check_client()  # the scheduler itself is gone: nothing to try again
            raise _WorkerLost(f"{type(exc).__name__}: {exc}") from None
        return inference.EStepResult(
            total.counts,
            total.gamma_first / max(total.sequences, 1),
            total.log_likelihood,
            total.zero_events,
            np.zeros(0) if total.last_alpha is None else total.last_alpha,
            total.touched,
        )
