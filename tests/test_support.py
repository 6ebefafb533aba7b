"""Training on the support (engine.training.support): after online EM, batch EM on the model pruned at the largest
threshold that keeps the validation BPS within a bound, in CSR form. Checked against independent computations: each
threshold's cost scored alone, dense EM with the pruned entries held at zero (float64), the support's entries."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from engine.backends.cpu import sparse
from engine.corpora import text
from engine.model import pruning
from engine.training import learning, stages, support
from engine.training.options import RunContext, TrainOptions
from engine.training.protocol import train_text
from engine.training.thresholds import sequences_bps

BLAKE = "tests/data/blake-poems.txt"


@pytest.fixture(scope="module")
def online_model():
    """A 120-state model after a few epochs of online EM on Blake (small pseudocount), its corpus and options."""
    options = TrainOptions(states=120, pseudocount=1e-6, restarts=1, iterations=4, support_bound=0.0)
    corpus = stages.prepare_training_corpus(text.read_text(BLAKE), options, "blake", None)
    start = stages.initial_model_for(corpus, options)
    result = learning.fit(start, corpus.train_parts, corpus.validation_parts, options.training_config(), backend="cpu")
    return result.model, corpus, options


def _cost_alone(model, validation, threshold: float) -> float:
    """The validation cost of pruning at ``threshold``, scored on the dense pruned model (not through the rule)."""
    before = sequences_bps(model, validation, "cpu")
    return sequences_bps(pruning.prune(model, threshold=threshold), validation, "cpu") - before


def test_the_rule_keeps_the_largest_threshold_within_the_bound(online_model):
    """For bounds between the thresholds' own costs, the rule keeps the largest threshold whose cost (computed
    alone, on the dense pruned model) is within the bound, and it keeps that threshold's entries."""
    model, corpus, _ = online_model
    validation = corpus.validation_parts
    thresholds = (1e-2, 1e-3, 1e-4)
    costs = {t: _cost_alone(model, validation, t) for t in thresholds}
    for bound in sorted({max(c, 1e-9) for c in costs.values()} | {max(costs.values()) + 1.0}):  # 0 turns it off
        chosen = support.on_the_support(model, validation, "cpu", bound, thresholds)
        expected = max((t for t in thresholds if costs[t] <= bound), default=None)
        assert chosen.threshold == expected
        if expected is not None:
            assert chosen.cost == pytest.approx(costs[expected], abs=1e-6)  # CSR and dense scores, float32
            kept = np.count_nonzero(pruning.prune(model, threshold=expected).T)
            assert len(chosen.model.data) == kept and chosen.model.form == "sparse"
            assert chosen.kept_fraction == pytest.approx(kept / np.count_nonzero(model.T))


def test_a_lossy_prune_is_refused_and_batch_em_runs_on_every_entry(online_model):
    """When every threshold costs more than the bound, the rule keeps nothing and the selection stage runs batch EM
    on the dense model (no ``support`` record)."""
    model, corpus, options = online_model
    costs = [_cost_alone(model, corpus.validation_parts, t) for t in (1e-1, 5e-2)]
    bound = min(costs) / 2
    assert bound > 0
    chosen = support.on_the_support(model, corpus.validation_parts, "cpu", bound, (1e-1, 5e-2))
    assert chosen.model is None and len(chosen.tried) == 2
    start = stages.initial_model_for(corpus, options)
    result = stages.select_on_validation(start, corpus, replace(options.training_config(), iterations=2), RunContext())
    assert result.support is None and result.model.form == "dense"


def test_batch_em_on_the_support_is_dense_em_with_the_pruned_entries_held_at_zero(online_model):
    """Three batch-EM iterations of the pruned model in CSR form equal three of the dense pruned model (its zeros
    held at zero) in float64, and the support never grows."""
    model, corpus, _ = online_model
    pruned = pruning.prune(model, threshold=1e-3)
    pruned = pruned.with_arrays(T=pruned.T.astype(np.float64), pi=pruned.pi.astype(np.float64))
    config = learning.TrainingConfig(algorithm="em", iterations=1, tolerance=None, pseudocount=1e-4)
    dense, csr = pruned, sparse.from_dense(pruned)
    support_entries = np.flatnonzero(pruned.T)
    for _ in range(3):
        dense, _ = learning.em_iteration(dense, corpus.train, config)
        csr, _ = learning.em_iteration(csr, corpus.train, config)
    as_dense = sparse.from_dense(dense)
    np.testing.assert_array_equal(as_dense.indices, csr.indices)
    np.testing.assert_array_equal(as_dense.indptr, csr.indptr)
    np.testing.assert_allclose(csr.data, as_dense.data, rtol=1e-9, atol=1e-15)
    assert set(np.flatnonzero(dense.T)) <= set(support_entries)


def test_the_plain_protocol_trains_on_the_support_and_says_so(tmp_path):
    """``train_text`` with online EM and the default bound: batch EM runs on the support when the rule finds a
    threshold (the model comes back sparse, with the choice in its metadata and the summary, within the bound of
    the online model's validation BPS), and on every stored entry with a bound of 0 (dense, no record)."""
    raw = text.read_text(BLAKE)
    options = TrainOptions(states=120, pseudocount=1e-6, restarts=1, iterations=4, refit=False, support_bound=0.05)
    lines: list[str] = []
    outcome = train_text(raw, options, log=lines.append)
    record = outcome.summary.get("support")
    assert record is not None and 0 < record["kept_fraction"] < 1 and record["cost"] <= 0.05
    assert outcome.model.form == "sparse" and outcome.model.metadata["support"] == record
    assert any(line.startswith("batch EM on the support: pruned at") for line in lines)
    off = train_text(raw, replace(options, support_bound=0.0))
    assert "support" not in off.summary and off.model.form == "dense"
    assert len(outcome.model.data) < np.count_nonzero(off.model.T)  # the same run's entries, far fewer stored


def test_the_support_bound_is_checked_before_any_work():
    """A negative or non-numeric bound is refused in one sentence."""
    for bad in (-0.1, float("inf"), True, "0.002"):
        with pytest.raises(ValueError, match="the support bound must be a number of bits at least 0"):
            TrainOptions(states=120, pseudocount=1e-6, support_bound=bad).validate()
