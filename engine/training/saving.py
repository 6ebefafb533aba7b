"""What ``chmm train`` saves: T pruned at the largest threshold whose cost on the validation text stays within a
bound (the prune bound), and the per-entry expected counts only when asked for.

The rule (:func:`choose_threshold`): score the validation text with the model as it would be saved without pruning
(the baseline), then with T pruned at each of :data:`~engine.training.options.PRUNE_THRESHOLDS`, largest first; keep
the first threshold whose BPS exceeds the baseline by at most the bound (bits per symbol). Tried largest first, the
first one within the bound is the largest one within it, whatever the costs of the others. When even the smallest
costs more, T stays dense. A pruned model backs off with the transition mass its pruning removed
(:func:`engine.model.pruning.prune`), and the rule measures exactly that model.

Which model is measured: the validation text must be held out, so the rule runs on the selection run's model (the
one validation chose, trained without the validation text), and the threshold it keeps is applied to the model that
is saved (the refit on training + validation text, or the selection model itself without a refit). Without a refit
the saved model's validation BPS is the one the rule reports.

The saved pruned model has ``fixed_zeros`` False: the pruning is a way of storing it, so ``chmm train --init``
continues it as a dense model (:func:`engine.training.stages.extend_model`)."""

from __future__ import annotations

from typing import Any

from engine.model.dense import CHMM
from engine.training.options import TrainOutcome
from engine.training.thresholds import (
    PruneChoice,
    check_prune_bound,
    choose_threshold,
    prune_for_saving,
    sequences_bps,
)


def model_to_save(
    outcome: TrainOutcome, bound: float, keep_statistics: bool, backend: str | None = None
) -> tuple[Any, dict[str, Any]]:
    """The model ``chmm train`` writes for ``outcome`` and the record of what was done (also stored in its
    metadata as ``saved``): T pruned at the threshold :func:`choose_threshold` keeps on the held-out validation
    text of the selection model (see the module docstring), the per-entry counts dropped unless ``keep_statistics``;
    the saved model's train, validation and test BPS are scored again when it was pruned. A sparse (grown) model, or
    a run without validation text, or a model continued from a pruned one (``fixed_zeros``: its zeros are the
    user's), keeps T as trained. ``backend``: where to score (default: the one the run trained on)."""
    bound = check_prune_bound(bound)
    model, corpus = outcome.model, outcome.corpus
    if backend is None:
        backend = str((model.metadata.get("settings") or {}).get("backend") or "cpu")
    record: dict[str, Any] = {"prune_bound": bound, "threshold": None, "statistics": bool(keep_statistics)}
    if not hasattr(model, "without_statistics"):  # a model of sparse blocks: no zeros stored, no sums per block
        record["reason"] = "a model of sparse blocks keeps its stored entries and counts"
        record["statistics"] = model.counts is not None
        model.metadata["saved"] = record
        return model, record
    selected = outcome.selected if outcome.selected is not None else model
    if bound > 0 and model.fixed_zeros:
        record["reason"] = "it continues a pruned model, saved as its pruning left it"
    elif bound > 0 and not corpus.validation_parts:
        record["reason"] = "no validation text to measure the pruning's cost on"
    elif bound > 0:
        choice = choose_threshold(selected, corpus.validation_parts, bound, backend)
        record.update(
            threshold=choice.threshold,
            validation_bps_dense=choice.baseline_bps,
            validation_cost=choice.cost if choice.threshold is not None else None,
            tried=choice.tried,
        )
        if choice.threshold is None:
            smallest = choice.tried[-1]
            record["reason"] = (
                f"even {smallest['threshold']:g} costs {smallest['cost']:+.4f} bits on validation, more than the "
                f"bound {bound:g}"
            )
        else:
            model = _pruned_outcome(outcome, choice, record, backend)
    if not keep_statistics:
        model = model.without_statistics()
    model.metadata["saved"] = record
    return model, record


def _pruned_outcome(outcome: TrainOutcome, choice: PruneChoice, record: dict[str, Any], backend: str) -> CHMM:
    """The trained model pruned at the choice's threshold, its BPS figures (in its metadata and the outcome's
    summary) scored again: the validation BPS the rule measured (the selection model's, pruned), and the train and
    test BPS of the pruned model; the dense figures go into ``record``."""
    model, corpus, summary = outcome.model, outcome.corpus, outcome.summary
    assert choice.threshold is not None
    pruned = prune_for_saving(model, choice.threshold)
    trained_on = corpus.train_full_parts if summary.get("refit_iterations") else corpus.train_parts  # as _outcome
    figures = {
        "train_bps": sequences_bps(pruned, trained_on, backend),
        "validation_bps": choice.validation_bps,
        "test_bps": sequences_bps(pruned, corpus.test_parts, backend) if corpus.test_parts else None,
    }
    record.update({f"{key}_dense": summary.get(key) for key in ("train_bps", "test_bps")})
    record["kept_fraction"] = pruned.metadata["pruned"]["kept_fraction"]
    record["nonzeros"] = pruned.metadata["pruned"]["nonzeros_after"]
    summary.update(figures)
    pruned.metadata.update(figures)
    return pruned
