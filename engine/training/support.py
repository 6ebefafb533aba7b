"""Training on the support: after online EM, batch EM only on the transitions that carry mass.

Online EM settles which transitions carry T's mass; most stored entries then hold almost none (a 5,000-state model
of a novel: 7.5% of its non-zeros are at least 1e-4, and pruning there costs no validation BPS). Batch EM keeps zeros
at zero, so the stage after online EM can run on a pruned model in CSR form (:mod:`engine.backends.cpu.sparse`),
paying per kept entry instead of per stored one. :func:`on_the_support` chooses the pruning by a rule: the largest
threshold of :data:`SUPPORT_THRESHOLDS` whose validation BPS is at most ``bound`` bits above the unpruned model's.
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

SUPPORT_BOUND = 0.0
"""Bits of validation BPS that pruning before batch EM may cost (``TrainOptions.support_bound``, ``--support-bound``);
0, the default, trains on every stored entry. Off by default as measured: after online EM (and after each of 8 batch
iterations) pruning costs more than 0.002 bits at every threshold of :data:`SUPPORT_THRESHOLDS` on alice at 1,000
states (0.004-0.074 bits) and on chesterton-brown at 3,000 (0.003-0.099), so the rule would only spend its trials
(bench/RESULTS.md, issue 48)."""

SUPPORT_THRESHOLDS = (1e-3, 3e-4, 1e-4, 3e-5, 1e-5)
"""Pruning thresholds :func:`on_the_support` tries, largest first. On a 5,000-state model of chesterton-brown they
keep 0.5%, 0.8%, 7.5%, - and 38.5% of the non-zeros; held-out cost +0.0094 bits at 1e-3, -0.0003 at 1e-4."""


@dataclass
class Support:
    """The model batch EM continues from (``model``, pruned and in CSR form, or None when no threshold kept the
    validation BPS within the bound), its ``threshold``, its validation ``cost`` in bits (pruned minus unpruned),
    the share of the non-zeros it keeps, and each threshold tried (threshold, cost, kept share)."""

    model: SparseCHMM | None
    threshold: float | None = None
    cost: float | None = None
    kept_fraction: float | None = None
    tried: list[dict[str, float]] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """What the model's metadata and the run's summary keep of the choice."""
        chosen = {"threshold": self.threshold, "cost": self.cost, "kept_fraction": self.kept_fraction}
        return chosen | {"tried": self.tried}


def validation_bps(model: Any, sequences: Sequence[np.ndarray], backend: str) -> float:
    """BPS of the independent ``sequences`` under ``model`` on the implementation that runs it on ``backend``."""
    engine = engines.engine_for(model, backend)
    return engines.score_sequences(engine, engine.load(model), list(sequences)).bps


def trains_on_the_support(model: Any, backend: str) -> bool:
    """Whether batch EM after online EM may move to the support: a model whose zeros are not yet fixed (a pruned or
    sparse model already trains on its own support) that runs on a host implementation (the sparse engine runs on
    the CPU; on a GPU batch EM stays on the device's dense blocks)."""
    return not model.fixed_zeros and engines.implementation_for(model, backend).host


def on_the_support(
    model: CHMM,
    validation: Sequence[np.ndarray],
    backend: str,
    bound: float = SUPPORT_BOUND,
    thresholds: Sequence[float] = SUPPORT_THRESHOLDS,
    before: float | None = None,
) -> Support:
    """``model`` pruned at the largest of ``thresholds`` whose BPS on ``validation`` is at most ``bound`` bits above
    ``model``'s own (``before``, scored when not given), as a :class:`SparseCHMM` with ``fixed_zeros`` (EM never
    grows its support back); thresholds are tried largest first and the first within the bound is kept. A pruned
    model backs off to the symbol bigram with the mass pruning removed (:func:`engine.model.pruning.prune`), so its
    BPS is finite. ``Support.model`` is None when every threshold costs more than ``bound``."""
    if bound < 0 or not np.isfinite(bound):
        raise ValueError(f"the support bound must be a finite number of bits at least 0, got {bound!r}")
    before = validation_bps(model, validation, backend) if before is None else before
    nonzeros = max(int(np.count_nonzero(np.asarray(model.T))), 1)
    support = Support(None)
    for threshold in sorted(thresholds, reverse=True):
        pruned = from_dense(pruning.prune(model, threshold=threshold))
        cost = validation_bps(pruned, validation, backend) - before
        kept = len(pruned.data) / nonzeros
        support.tried.append({"threshold": threshold, "cost": cost, "kept_fraction": kept})
        if cost <= bound:
            support.model, support.threshold, support.cost, support.kept_fraction = pruned, threshold, cost, kept
            break
    return support
