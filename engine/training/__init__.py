"""The training protocol, one package: :mod:`~engine.training.options` (the settings of a run, its constants and
result types, the memory estimate), :mod:`~engine.training.stages` (corpus split, start, selection on validation,
refit), :mod:`~engine.training.restarts` (restarts in this process or worker processes),
:mod:`~engine.training.search` (states and pseudocount chosen on validation within a budget) and
:mod:`~engine.training.protocol` (:func:`train_text`, which runs them), around :mod:`~engine.training.learning` (the
fit loop) and :mod:`~engine.training.distributed` (the cluster). :data:`__all__` holds what the rest of the engine
takes from this wing; the rest is the wing's own."""

from __future__ import annotations

from engine.training.distributed import check_workers, open_cluster
from engine.training.learning import (
    ALGORITHMS,
    BATCH_PER_BLOCK,
    ONLINE_BATCH_SIZE,
    CancelToken,
    IterationRecord,
    ProgressCallback,
    TrainingConfig,
    fit,
)
from engine.training.options import (
    ALIGNED_SHARE,
    AUTO,
    DTYPES,
    ENGINE_VERSION,
    MAX_RESTARTS,
    ONLINE_RESTARTS,
    PRUNE_BOUND,
    PRUNE_THRESHOLDS,
    PSEUDOCOUNT_GRID,
    RESTART_MEMORY,
    STARTS,
    STATES_GRID,
    STOPPED_BAD,
    SYMBOLS_PER_STATE,
    TrainOptions,
    estimate_training_memory,
    expected_minutes,
    expected_sentence,
)
from engine.training.protocol import train_text
from engine.training.restarts import RESTART_PROCESSES_ENV, one_blas_thread, restart_processes, run_in_processes
from engine.training.saving import model_to_save
from engine.training.thresholds import check_prune_bound

__all__ = [  # fmt: skip
    "ALGORITHMS", "ALIGNED_SHARE", "AUTO", "BATCH_PER_BLOCK", "CancelToken", "check_prune_bound", "check_workers",
    "DTYPES", "ENGINE_VERSION", "estimate_training_memory", "expected_minutes", "expected_sentence", "fit",
    "IterationRecord", "MAX_RESTARTS", "model_to_save", "one_blas_thread", "ONLINE_BATCH_SIZE", "ONLINE_RESTARTS",
    "open_cluster", "ProgressCallback", "PRUNE_BOUND", "PRUNE_THRESHOLDS", "PSEUDOCOUNT_GRID", "RESTART_MEMORY",
    "restart_processes", "RESTART_PROCESSES_ENV", "run_in_processes", "STARTS", "STATES_GRID", "STOPPED_BAD",
    "SYMBOLS_PER_STATE",
    "train_text", "TrainingConfig", "TrainOptions"
]
