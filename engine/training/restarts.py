"""Restarts of the selection stage: each a run from its own start, in this process or in worker processes (one
core each, BLAS on one thread, a watchdog that ends a worker whose parent died); the best on validation is kept."""

from __future__ import annotations

import math
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any

from engine.backends import engines
from engine.backends.cpu import inference
from engine.corpora import text
from engine.model.dense import CHMM
from engine.training import learning, stages
from engine.training.options import RESTART_MEMORY, STOPPED_BAD, RunContext, TrainOptions, restart_plan
from engine.training.stages import initial_model_for, select_on_validation

RESTART_PROCESSES_ENV = "CHMM_RESTART_PROCESSES"
"""The most restarts run at once in worker processes (default: one per core this process may use; 1 runs them one
after the other in this process)."""


def restart_processes(n_restarts: int, backend: str, cluster: Any = None) -> int:
    """How many restarts run at once: one per core (or :data:`RESTART_PROCESSES_ENV`), at most ``n_restarts``; 1 on
    a backend without the ``restart_processes`` capability (the GPU), with a cluster (its workers share each E-step
    instead), and in a process that may not start children (a daemon, such as a Celery pool worker)."""
    if n_restarts < 2 or cluster is not None or multiprocessing.current_process().daemon:
        return 1
    if not engines.supports(backend, "restart_processes"):
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    setting = os.environ.get(RESTART_PROCESSES_ENV, "").strip()
    if setting:
        cores = int(setting) if setting.isdigit() and int(setting) > 0 else 1
    return max(1, min(n_restarts, cores))


def _run_restart(
    corpus: text.Corpus, options: TrainOptions, config: learning.TrainingConfig, restart: int, run: RunContext
) -> tuple[CHMM, learning.TrainingResult, float]:
    """One restart's selection run (start and, for online EM, lambda by :func:`restart_plan`): its start, its result
    and its held-out BPS (infinite if cancelled or failed)."""
    start = initial_model_for(corpus, options, restart)
    if config.algorithm == "online" and restart_plan(restart)[1]:
        config = replace(config, memory=RESTART_MEMORY)
    callback = run.callback
    tagged = None if callback is None else (lambda r: callback(r._replace(restart=restart)))
    result = select_on_validation(start, corpus, config, replace(run, callback=tagged), options.support_bound)
    if result.stopped in STOPPED_BAD:
        return start, result, math.inf
    held_out = corpus.validation_parts or corpus.train_parts
    return start, result, stages.sequences_bps(result.model, held_out, run.backend)


_RESTART_WORKER: dict[str, Any] = {}
"""In a restart worker process only: the queue its progress records go to and the event that cancels it."""


ORPHAN_CHECK_S = 1.0
"""How often an idle restart worker checks that its parent still lives."""


def one_blas_thread() -> Any:
    """A context in which BLAS (NumPy's matrix products) runs on one thread (threadpoolctl). An E-step multiplies
    one block of clones at a time, where BLAS's own threads spin beside the E-step's two threads and the other
    restarts (measured in bench/RESULTS.md: one thread is faster and spends less CPU)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def _restart_worker_start(queue: Any, cancelled: Any) -> None:
    os.environ[inference.ONE_THREAD_ENV] = "1"  # one core per process: the processes share the machine's cores
    _RESTART_WORKER.update(queue=queue, cancelled=cancelled, parent=os.getppid())
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()


def _exit_when_orphaned(parent: int) -> None:
    """End this worker once its parent has died (a killed job): a worker waiting for its next task holds both ends
    of the pool's pipe and would otherwise wait for ever."""
    while os.getppid() == parent:
        time.sleep(ORPHAN_CHECK_S)
    os._exit(0)


def _restart_worker_stopped() -> bool:
    """Whether this restart worker should stop: its parent cancelled, or died (killed, e.g. a revoked Celery task),
    which leaves the worker to its new parent, and it must not train on for nobody."""
    return _RESTART_WORKER["cancelled"].is_set() or os.getppid() != _RESTART_WORKER["parent"]


def _task_in_worker(task: Callable[..., Any], index: int, job: tuple[Any, ...]) -> Any:
    """In a restart worker: ``task(*job, report=..., cancel=...)`` with BLAS on one thread (:func:`one_blas_thread`,
    every BLAS loaded once the task's modules are), its progress records sent to the parent's queue as ("record",
    ``index``, record), then ("done", ``index``); ``cancel`` is set once the parent cancels or dies."""
    queue = _RESTART_WORKER["queue"]
    try:
        cancel = learning.CancelToken(_restart_worker_stopped)
        with one_blas_thread():  # one core per process: BLAS's own threads would spin beside the other workers
            return task(*job, report=lambda record: queue.put(("record", index, record)), cancel=cancel)
    finally:
        queue.put(("done", index))  # after its records: the parent shows the jobs in order


def run_in_processes(
    task: Callable[..., Any],
    jobs: Sequence[tuple[Any, ...]],
    processes: int,
    callback: Callable[[int, Any], None] | None = None,
    cancel: learning.CancelToken | None = None,
) -> list[Any]:
    """``task(*job, report=report, cancel=token)`` for every job of ``jobs`` in ``processes`` worker processes
    (spawned: safe beside the app's threads; one core each; ``task`` a module-level function, the jobs picklable),
    returning their results in the jobs' order. ``report(record)`` in a worker reaches ``callback(index, record)``
    in this process, job by job as if they ran one after the other: the lowest unfinished job's records live, a
    later job's when every job before it has ended. ``token`` is set within a second of ``cancel`` being set here,
    of this process dying, or of anything raised here (by ``callback``, say), which also drops the jobs not yet
    begun before it is raised again; a job's own exception is raised here once the others have stopped."""
    context = multiprocessing.get_context("spawn")
    queue, cancelled = context.Queue(), context.Event()
    waiting: dict[int, list[Any]] = {index: [] for index in range(len(jobs))}
    finished: set[int] = set()
    shown = 0
    with ProcessPoolExecutor(
        processes, mp_context=context, initializer=_restart_worker_start, initargs=(queue, cancelled)
    ) as pool:
        futures = [pool.submit(_task_in_worker, task, index, job) for index, job in enumerate(jobs)]
        try:
            while shown < len(jobs):
                if cancel is not None and cancel.cancelled:
                    cancelled.set()
                if any(f.done() and f.exception() is not None for f in futures):
                    break  # a worker failed (its exception is raised below)
                try:
                    kind, index, *record = queue.get(timeout=0.2)
                except Exception:  # queue.Empty
                    continue
                if kind == "done":
                    finished.add(index)
                else:
                    waiting[index].append(record[0])
                while shown < len(jobs):
                    for item in waiting[shown]:
                        if callback is not None:
                            callback(shown, item)
                    waiting[shown] = []
                    if shown not in finished:
                        break
                    shown += 1
            if cancel is not None and cancel.cancelled:
                cancelled.set()
            failed = [f for f in futures if f.done() and f.exception() is not None]
            if failed:
                cancelled.set()
                failed[0].result()
            return [f.result() for f in futures]
        except BaseException:
            cancelled.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _restart_task(
    corpus: text.Corpus,
    options: TrainOptions,
    config: learning.TrainingConfig,
    backend: str,
    restart: int,
    report: Callable[[Any], None],
    cancel: learning.CancelToken,
) -> tuple[CHMM, learning.TrainingResult, float]:
    """:func:`_run_restart` in a restart worker (:func:`run_in_processes`): its records go to ``report``."""
    return _run_restart(corpus, options, config, restart, RunContext(backend, report, cancel))


def _restarts_in_processes(
    corpus: text.Corpus,
    options: TrainOptions,
    config: learning.TrainingConfig,
    which: range,
    processes: int,
    run: RunContext,
) -> list[tuple[CHMM, learning.TrainingResult, float]]:
    """:func:`_run_restart` for every restart of ``which`` in ``processes`` worker processes
    (:func:`run_in_processes`): the callback sees the records restart by restart, as if they ran one after the
    other, and a cancel reaches every worker within a batch. The workers report to the parent's queue, not to
    ``run``'s callback (which need not be picklable); ``run``'s cluster is not used in them."""
    callback = run.callback
    jobs = [(corpus, options, config, run.backend, r) for r in which]
    return run_in_processes(
        _restart_task, jobs, processes, None if callback is None else (lambda _, record: callback(record)), run.cancel
    )


def restart_line(restart: int, value: float, result: learning.TrainingResult, options: TrainOptions) -> dict[str, Any]:
    """A restart's line in the summary and metadata: its held-out BPS, iterations, stop reason, start (uniform or
    aligned) and, for online EM, its lambda (:func:`restart_plan`)."""
    aligned, larger_steps = restart_plan(restart, options.start)
    line = {
        "restart": restart,
        "bps": value,
        "iterations": len(result.history),
        "stopped": result.stopped,
        "start": "aligned" if aligned else "uniform",
    }
    if options.algorithm == "online":
        line["memory"] = RESTART_MEMORY if larger_steps else options.memory
    return line


def best_of_restarts(
    corpus: text.Corpus,
    options: TrainOptions,
    config: learning.TrainingConfig,
    run: RunContext,
    which: range | None = None,
) -> tuple[CHMM, learning.TrainingResult, list[dict[str, Any]]]:
    """Stage 3 with restarts: :func:`select_on_validation` from random starts (:func:`initial_model_for`), restarts
    ``which`` (default all of ``options.resolved_restarts()``), in :func:`restart_processes` processes at once;
    keeps the run whose model has the lowest validation BPS (the lowest training BPS without validation text).
    Progress records carry their restart and come restart by restart. A cancelled or failed restart ends the stage
    with that run. Returns the kept run's start, its result and a line per restart."""
    which = range(options.resolved_restarts()) if which is None else which
    processes = restart_processes(len(which), run.backend, run.cluster)
    if processes > 1:
        runs = iter(_restarts_in_processes(corpus, options, config, which, processes, run))
    else:  # one after the other, each started only when the one before ended well
        runs = (_run_restart(corpus, options, config, r, run) for r in which)
    best: tuple[float, CHMM, learning.TrainingResult] | None = None
    record: list[dict[str, Any]] = []
    for restart, (start, result, value) in zip(which, runs, strict=False):
        if result.stopped in STOPPED_BAD:
            return start, result, record
        record.append(restart_line(restart, value, result, options))
        run.say(f"restart {restart + 1}: {'validation' if corpus.validation_parts else 'training'} BPS {value:.4f}")
        if best is None or value < best[0]:
            best = (value, start, result)
    assert best is not None
    return best[1], best[2], record
