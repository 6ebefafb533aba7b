"""The rule that chooses a pruning threshold: the largest of a list whose cost on held-out text stays within a
bound in bits per symbol. Both prunings of training use it: the model ``chmm train`` saves
(:mod:`engine.training.saving`, ``--prune-bound``) and batch EM on the support after online EM
(:mod:`engine.training.support`, ``--support-bound``).

The rule (:func:`choose_threshold`): score the held-out text with the unpruned model (the baseline), then with T
pruned at each threshold, largest first; keep the first threshold whose BPS exceeds the baseline by at most the bound.
Tried largest first, the first one within the bound is the largest one within it, whatever the costs of the others.
When even the smallest costs more, nothing is kept. A pruned model backs off with the transition mass its pruning
removed (:func:`engine.model.pruning.prune`), and the rule measures exactly that model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.backends import engines
from engine.errors import CHMMError
from engine.model import pruning
from engine.model.dense import CHMM
from engine.training.options import PRUNE_THRESHOLDS


def sequences_bps(model: Any, sequences: np.ndarray | list[np.ndarray], backend: str) -> float:
    """BPS of one sequence or of several independent ones, on the implementation that runs ``model`` there."""
    engine = engines.engine_for(model, backend)
    return engines.score_sequences(engine, engine.load(model), sequences).bps


def check_prune_bound(bound: float) -> float:
    """The prune bound as a float, or ValueError (one sentence) unless it is a finite number at least 0."""
    try:
        value = float(bound)
    except (TypeError, ValueError):
        raise CHMMError(f"the prune bound must be a number of bits per symbol, at least 0, got {bound!r}") from None
    if not (np.isfinite(value) and value >= 0.0):
        raise CHMMError(f"the prune bound must be a number of bits per symbol, at least 0, got {bound!r}")
    return value


@dataclass
class PruneChoice:
    """The outcome of :func:`choose_threshold`: the threshold kept (None: T stays dense), the bound, the baseline
    validation BPS (unpruned) and, per threshold tried, its validation BPS and cost (BPS minus the baseline)."""

    threshold: float | None
    bound: float
    baseline_bps: float
    tried: list[dict[str, float]] = field(default_factory=list)

    @property
    def validation_bps(self) -> float:
        """The validation BPS of the model with the threshold kept (the baseline when none is)."""
        for row in self.tried:
            if row["threshold"] == self.threshold:
                return row["validation_bps"]
        return self.baseline_bps

    @property
    def cost(self) -> float:
        """The validation BPS the kept threshold costs (0 when none is kept)."""
        return self.validation_bps - self.baseline_bps


def prune_for_saving(model: CHMM, threshold: float) -> CHMM:
    """``model`` with T pruned at ``threshold`` (:func:`engine.model.pruning.prune`: rows renormalised, all-zero
    blocks dropped, the removed mass as the back-off weight), marked as pruned for saving (``fixed_zeros`` False)."""
    pruned = pruning.prune(model, threshold=threshold)
    return pruned.with_arrays(fixed_zeros=False)


def choose_threshold(
    model: CHMM,
    validation: list[np.ndarray],
    bound: float,
    backend: str = "cpu",
    thresholds: tuple[float, ...] = PRUNE_THRESHOLDS,
) -> PruneChoice:
    """The largest of ``thresholds`` at which pruning ``model`` costs at most ``bound`` bits per symbol on the
    ``validation`` sequences (the rule of this module; ``bound`` 0 tries nothing and keeps T dense). Each model is
    scored as it would be saved (:meth:`CHMM.without_statistics` scores as ``model`` does)."""
    bound = check_prune_bound(bound)
    baseline = sequences_bps(model, validation, backend)
    choice = PruneChoice(None, bound, baseline)
    if bound == 0.0:
        return choice
    for threshold in sorted(thresholds, reverse=True):
        bps = sequences_bps(prune_for_saving(model, threshold), validation, backend)
        choice.tried.append({"threshold": threshold, "validation_bps": bps, "cost": bps - baseline})
        if bps - baseline <= bound:
            choice.threshold = threshold
            break
    return choice
