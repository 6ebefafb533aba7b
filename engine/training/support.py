"""Training on the support: after online EM, batch EM only on the transitions that carry mass.

Batch EM keeps zeros at zero, so the stage after online EM can run on a pruned model in CSR form
(:mod:`engine.backends.cpu.sparse`), paying per kept entry instead of per stored one (one batch-EM iteration of a
5,000-state model 4.5x faster when 7.5% of its non-zeros are kept, bench/RESULTS.md). :func:`on_the_support` chooses
the pruning by the rule of :func:`engine.training.thresholds.choose_threshold` on the validation text: the largest
threshold of :data:`engine.training.options.PRUNE_THRESHOLDS` whose BPS is at most ``bound`` bits above the unpruned
model's (``--support-bound``, :data:`engine.training.options.SUPPORT_BOUND`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.backends import engines
from engine.backends.cpu.sparse import SparseCHMM, from_dense
from engine.model import pruning
from engine.model.dense import CHMM
from engine.training.options import PRUNE_THRESHOLDS
from engine.training.thresholds import choose_threshold


@dataclass
class Support:
    """The model batch EM continues from (``model``, pruned with its zeros fixed and in CSR form, or None when no
    threshold kept the validation BPS within the bound), its ``threshold``, its validation ``cost`` in bits (pruned
    minus unpruned), the share of the non-zeros it keeps, and each threshold tried (threshold, validation BPS,
    cost)."""

    model: SparseCHMM | None
    threshold: float | None = None
    cost: float | None = None
    kept_fraction: float | None = None
    tried: list[dict[str, float]] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """What the model's metadata and the run's summary keep of the choice."""
        chosen = {"threshold": self.threshold, "cost": self.cost, "kept_fraction": self.kept_fraction}
        return chosen | {"tried": self.tried}


def trains_on_the_support(model: Any, backend: str) -> bool:
    """Whether batch EM after online EM may move to the support: a model whose zeros are not yet fixed (a pruned or
    sparse model already trains on its own support) that runs on a host implementation (the sparse engine runs on
    the CPU; on a GPU batch EM stays on the device's dense blocks)."""
    return not model.fixed_zeros and engines.implementation_for(model, backend).host


def on_the_support(
    model: CHMM,
    validation: Sequence[np.ndarray],
    backend: str,
    bound: float,
    thresholds: Sequence[float] = PRUNE_THRESHOLDS,
) -> Support:
    """``model`` pruned at the largest of ``thresholds`` whose BPS on ``validation`` is at most ``bound`` bits above
    ``model``'s own (:func:`engine.training.thresholds.choose_threshold`), as a :class:`SparseCHMM` with its zeros
    fixed (EM never grows the support back). ``Support.model`` is None when every threshold costs more than
    ``bound`` (or ``bound`` is 0)."""
    choice = choose_threshold(model, list(validation), bound, backend, tuple(thresholds))
    support = Support(None, tried=choice.tried)
    if choice.threshold is not None:
        pruned = from_dense(pruning.prune(model, threshold=choice.threshold))
        support.model, support.threshold, support.cost = pruned, choice.threshold, choice.cost
        support.kept_fraction = len(pruned.data) / max(int(np.count_nonzero(np.asarray(model.T))), 1)
    return support
