"""The training protocol (:func:`train_text`): corpus, start (grown from a smaller dense model for large ones),
selection on validation with restarts or an automatic search, refit; progress, cancellation and the last good
model kept."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from engine.backends import engines
from engine.backends.model_files import load_model
from engine.corpora import allocation, text
from engine.corpora.documents import corpus_file_name
from engine.corpora.text import placeholder_share
from engine.model import pruning
from engine.model.dense import CHMM
from engine.training import growing, learning, stages
from engine.training.options import (
    DENSE_STATE_LIMIT,
    DTYPES,
    ENGINE_VERSION,
    GROW_FACTOR,
    PRUNED_KEYS,
    STOPPED_BAD,
    RunContext,
    Selection,
    TrainOptions,
    TrainOutcome,
    check_memory,
    expected_minutes,
    expected_sentence,
)
from engine.training.restarts import best_of_restarts
from engine.training.search import deadline_token, search_settings
from engine.training.stages import (
    corpus_pairs,
    extend_model,
    initial_model_for,
    prepare_training_corpus,
    refit_stage,
    select_on_validation,
)


def train_text(
    corpus_text: str | Sequence[Any],
    options: TrainOptions,
    callback: learning.ProgressCallback | None = None,
    cancel: learning.CancelToken | None = None,
    name: str = "corpus",
    log: Callable[[str], None] | None = None,
    initial_model: CHMM | None = None,
    cluster: Any = None,
) -> TrainOutcome:
    """Train a model on raw text (one document, or a list of documents: independent sequences) with the paper's
    protocol, in named stages:

    1. :func:`prepare_training_corpus`: normalise and split (paper: first 90% train with its last ``validation``
       share held out for early stopping, last 10% test; several documents are split each in the same way).
    2. the start: clones allocated and T random on the symbol pairs seen in training (:func:`initial_model_for`), or
       ``options.init`` / ``initial_model`` extended to the new text, or, for a grown model, a dense model of
       ``grow_from`` states trained with this same protocol, pruned and split (:func:`grown_starts`);
    3. :func:`select_on_validation`: EM with early stopping on the validation text, from each restart
       (:func:`best_of_restarts`); with ``states`` or ``pseudocount`` :data:`AUTO`, for each candidate setting
       (:func:`search_settings`);
    4. :func:`refit`: with ``options.refit`` (the paper's protocol, section 4.2) the model is retrained from the same
       start on training + validation text for the number of iterations validation chose.

    Returns the model and its figures; ``validation_bps`` is always the held-out figure of the selection run. With
    ``cluster`` (a ``dask.distributed.Client``, see :mod:`engine.training.distributed`) batch EM's E-steps run on its
    workers.
    """
    init_model = initial_model if initial_model is not None else (load_model(options.init) if options.init else None)
    if init_model is not None:  # a continued model keeps its states (and, unless given, its pseudocount)
        options.validate(cluster=cluster is not None)  # as given: the rules of continuing a model
        options = options.continuing(init_model)
    options.validate(cluster=cluster is not None)
    expected = expected_minutes(options)
    backend = engines.resolve_backend(options.backend)
    run = RunContext(backend, callback, cancel, log, cluster)
    started = time.perf_counter()
    corpus = prepare_training_corpus(corpus_text, options, name, init_model)
    if expected is not None:
        run.say(expected_sentence(options))  # stated once the corpus is known to work, before any training
    search: list[dict[str, Any]] = []
    try:
        if options.searches:
            selection, search = search_settings(corpus_text, corpus, options, run, name, select_stage, started)
        else:
            selection = select_stage(corpus_text, corpus, options, init_model, run, name)
    except _StageStopped as stopped:  # cancelled or failed in the dense stage: report that run as it ended
        return stopped.outcome
    options, result = selection.options, selection.result
    selected = result.model
    has_validation = bool(corpus.validation_parts)
    words = corpus.unit != text.UNITS[0]
    if words:  # the back-off's counts, and its weight on the model validation chose
        selected = selection.result.model = stages.with_pair_counts(selected, corpus.train_parts)
    if has_validation and words:
        selected = selection.result.model = stages.with_backoff_weight(selected, corpus.validation_parts, backend, run)
    validation_bps = stages.sequences_bps(selected, corpus.validation_parts, backend) if has_validation else None
    trained, refit_iterations, refitted = selected, 0, False
    refit_started = time.perf_counter()
    end = None if expected is None else started + 60.0 * expected - _finish_seconds(selection)
    if options.refit and has_validation and result.stopped not in STOPPED_BAD and _refit_fits(selection, end, run):
        trained, refit_iterations, refitted = _refit_by(selection, corpus, run, end)
    refit_seconds = time.perf_counter() - refit_started
    if refitted and words:  # the weight validation chose, the counts of the text refitted on
        trained = stages.with_pair_counts(trained, corpus.train_full_parts)
        trained = trained.with_arrays(backoff_weight=selected.backoff_weight)
    run_figures = (validation_bps, refit_iterations, refitted, time.perf_counter() - started)
    outcome = _outcome(trained, selection, corpus, run_figures, search, init_model, backend, name)
    outcome.summary["expected_minutes"] = expected  # stated before the start, beside the seconds it took
    if refitted:  # the refit's seconds, beside what the search predicted for them
        outcome.summary["refit_seconds"] = refit_seconds
        if selection.refit_seconds is not None:
            outcome.summary["refit_predicted_seconds"] = selection.refit_seconds
    outcome.model.metadata["corpus_sha256"] = text.corpus_fingerprint(corpus_text)  # the text by content
    return outcome


FINISH_ITERATIONS = 2.0
"""What the run does after the refit (its figures on the training and test text, then, in ``chmm train``, our n-gram
on the same split, the pruning bound's trials on the validation text and the file), in batch EM iterations of the
chosen model: the time the refit leaves before the end stated at the start."""


def _finish_seconds(selection: Selection) -> float:
    """The seconds kept for the run's end after the refit (:data:`FINISH_ITERATIONS` of the chosen model's batch EM
    iterations, as the search predicted them; 0 without a prediction)."""
    result = selection.result
    iterations = max(int(result.best_iteration) - int(result.online_iterations or 0), 1)
    if selection.refit_seconds is None:
        return 0.0
    return FINISH_ITERATIONS * selection.refit_seconds / iterations


def _refit_by(selection: Selection, corpus: text.Corpus, run: RunContext, end: float | None) -> tuple[Any, int, bool]:
    """:func:`refit_stage` of ``selection``, stopped at ``end`` (a :func:`time.perf_counter` time; None: never): a
    refit cut there gives way to the model chosen on validation (the log says so). A grown model refits from the
    grown dense refit (it exists whenever the dense stage refitted)."""
    result = selection.result
    kept = (result.stopped, result.error)
    bounded = run if end is None else replace(run, cancel=deadline_token(run.cancel, end))
    start = selection.refit_start if selection.refit_start is not None else selection.start
    refitted = refit_stage(start, result, corpus, selection.config, bounded, grown=selection.refit_start is not None)
    if result.stopped == "cancelled" and not (run.cancel is not None and run.cancel.cancelled):
        run.say("the refit was cut at the time stated at the start: the model chosen on validation is kept")
        result.stopped, result.error = kept
        return result.model, 0, False
    return refitted


def _refit_fits(selection: Selection, end: float | None, run: RunContext) -> bool:
    """Whether the refit of ``selection`` is predicted to end by ``end`` (a :func:`time.perf_counter` time; None:
    no bound), whole: a refit cut short is a model validation never saw, so it runs whole or not at all (the model
    chosen on validation is kept, and the log says why). A selection cut before any batch EM iteration (at the
    budget's end, in its online stage) has no refit."""
    result = selection.result
    if result.stopped == "budget" and result.online_model is None and selection.config.algorithm == "online":
        run.say("no refit: the chosen run was cut at the budget's end before its batch EM")
        return False
    if end is None or selection.refit_seconds is None:
        return True
    left = end - time.perf_counter()
    if selection.refit_seconds <= left:
        return True
    run.say(
        f"no refit: it would take about {selection.refit_seconds / 60:.1f} min at the machine's current pace, and "
        f"{max(left, 0.0) / 60:.1f} min are left of the time stated at the start; the model chosen on validation is "
        "kept"
    )
    return False


def _outcome(
    trained: Any,
    selection: Selection,
    corpus: text.Corpus,
    run_figures: tuple[float | None, int, bool, float],
    search: list[dict[str, Any]],
    init_model: CHMM | None,
    backend: str,
    name: str,
) -> TrainOutcome:
    """The trained model with its metadata (what people are shown and what scoring reads) and the run's summary (the
    CLI's ``--json`` object): BPS on each part, iterations, stop reason, restarts, search and schedule."""
    validation_bps, refit_iterations, refitted, seconds = run_figures
    options, result, restarts, schedule = selection.options, selection.result, selection.restarts, selection.schedule
    selected = result.model
    trained_on = corpus.train_full_parts if refitted else corpus.train_parts
    test = corpus.test_parts
    figures = {
        "train_bps": stages.sequences_bps(trained, trained_on, backend),
        "validation_bps": validation_bps,
        "test_bps": stages.sequences_bps(trained, test, backend) if test else None,
    }
    trained.metadata = {
        "engine_version": ENGINE_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "corpus": corpus_file_name(name),  # the file's name, never the folders it lay in
        "documents": len(corpus.documents),
        "allocation": options.allocation if init_model is None else init_model.metadata.get("allocation"),
        "settings": asdict(options) | {"backend": backend},
        "seed": options.seed,
        "stopped": result.stopped,
        "best_iteration": result.best_iteration,
        "refit_iterations": refit_iterations,
        "history": [r._asdict() for r in result.history],
        "sizes": {"train": len(corpus.train), "validation": len(corpus.validation), "test": len(corpus.test)},
        **({"rare_share": placeholder_share(corpus.train_full_text, corpus.unit)} if corpus.vocabulary else {}),
        **(
            {"heldout_rare_share": placeholder_share(corpus.validation_text + " " + corpus.test_text, corpus.unit)}
            if corpus.vocabulary is not None and (corpus.validation_text or corpus.test_text)
            else {}
        ),
        **figures,
        # continuing from a pruned model keeps it pruned (fixed_zeros) and shows the pruning it had; one pruned only
        # for saving (fixed_zeros False) continues dense (see extend_model)
        **{key: init_model.metadata[key] for key in PRUNED_KEYS if key in (_kept_pruned(init_model))},
        **({"schedule": schedule} if schedule else {}),
        **({"support": result.support} if result.support is not None else {}),
        **({"restarts": restarts} if restarts else {}),
        **({"search": search} if search else {}),
        **({"chosen": _chosen(selection)} if search else {}),
    }
    trained.codec = stages.corpus_codec(corpus)
    summary = {
        **figures,
        "iterations": len(result.history),
        "best_iteration": result.best_iteration,
        "refit_iterations": refit_iterations,
        "stopped": result.stopped,
        "seconds": seconds,
        "states": trained.n_states,
        "symbols": int(sum(len(x) for x in trained_on)),
        "alphabet": trained.n_symbols,
    }
    if result.online_model is not None:  # online EM epochs, then batch EM iterations
        summary["online_iterations"] = result.online_iterations
    if result.support is not None:  # ... on the support
        summary["support"] = result.support
    if restarts:
        summary["restarts"] = restarts
    if search:
        summary["search"] = search
        summary["pseudocount"] = options.pseudocount
        summary["chosen"] = _chosen(selection)
    if schedule:
        summary["schedule"] = schedule
        summary["nonzeros"] = trained.n_nonzero()
    if result.error:
        summary["error"] = result.error
    return TrainOutcome(trained, summary, result, corpus, selected)


def _kept_pruned(init_model: CHMM | None) -> dict[str, Any]:
    """The metadata of a continued model whose pruning the continued model keeps (``fixed_zeros``), else {}."""
    return init_model.metadata if init_model is not None and init_model.fixed_zeros else {}


def _chosen(selection: Selection) -> dict[str, Any]:
    """What the automatic search chose and why (stored in the model and printed by the CLI)."""
    return {
        "states": selection.options.states,
        "pseudocount": selection.options.pseudocount,
        "reason": selection.reason,
    }


def select_stage(
    corpus_text: str | Sequence[Any],
    corpus: text.Corpus,
    options: TrainOptions,
    init_model: CHMM | None,
    run: RunContext,
    name: str,
    restarts: int | None = None,
) -> Selection:
    """Stages 2 and 3 for concrete ``options``: the start (new, continued or grown) and the selection run on
    validation, from ``restarts`` (default ``options.resolved_restarts()``) random starts for a new model. Raises
    :class:`_StageStopped` when a grown model's dense stage was cancelled or failed."""
    grow_from = options.grow_from
    grows = engines.supports(run.backend, "grows")
    words = corpus.unit != text.UNITS[0]  # a word model's blocks are few and small: nothing to grow from
    if grow_from is None and grows and options.states > DENSE_STATE_LIMIT and init_model is None and not words:
        grow_from = options.states // GROW_FACTOR
    config = options.training_config()
    schedule: dict[str, Any] = {}
    refit_start = None
    if init_model is None and grow_from:
        check_memory(corpus, replace(options, states=grow_from), options.states)  # before a line of it is said
        start, refit_start, schedule = grown_starts(corpus_text, options, grow_from, run, name)
        config = replace(config, algorithm="em", iterations=options.grow_iterations or options.iterations)
    elif init_model is None:
        check_memory(corpus, options)
        start = initial_model_for(corpus, options)  # restart 0; best_of_restarts makes the others
    else:
        rng = np.random.default_rng(options.seed)
        start = extend_model(init_model, corpus_pairs(corpus), rng, DTYPES[options.dtype])
    run.say(
        f"{name}: {len(corpus.train):,} training, {len(corpus.validation):,} validation, {len(corpus.test):,} "
        f"test symbols; {start.n_states:,} states over {start.n_symbols} symbols, "
        f"{start.layout.n_blocks} blocks ({start.layout.size:,} transition entries)"
    )
    record: list[dict[str, Any]] = []
    n_restarts = options.resolved_restarts() if restarts is None else restarts
    if init_model is None and not grow_from and n_restarts > 1:
        start, result, record = best_of_restarts(corpus, options, config, run, range(n_restarts))
    else:
        result = select_on_validation(start, corpus, config, run, options.support_bound)
    return Selection(options, start, result, config, refit_start, record, schedule)


class _StageStopped(Exception):
    """The dense stage of a grown model was cancelled or failed; ``outcome`` is that stage's run."""

    def __init__(self, outcome: TrainOutcome) -> None:
        super().__init__(outcome.result.stopped)
        self.outcome = outcome


def grown_starts(
    corpus_text: str | Sequence[Any],
    options: TrainOptions,
    grow_from: int,
    run: RunContext,
    name: str,
) -> tuple[Any, Any, dict[str, Any]]:
    """Stage 2 of a grown model (paper-scale models on the CPU): train a dense model of ``grow_from`` states with the
    same settings and protocol (early stopping on validation, then the refit unless turned off), prune it at
    ``options.grow_threshold``, and split its clones up to ``options.states`` in proportion to the clones each symbol
    has (:func:`engine.training.growing.split_clones`: exact, plus ``options.grow_noise`` to break the copies'
    symmetry). Returns the grown selection model (from the dense selection run, for sparse EM with early stopping on
    validation), the grown refit model (from the dense refit, or None without refit) and a record of the stage."""
    run.say(f"growing: first a dense model of {grow_from:,} states")
    base = train_text(
        corpus_text, replace(options, states=grow_from, grow_from=0), run.callback, run.cancel, name, run.log
    )
    if base.result.stopped in STOPPED_BAD:
        raise _StageStopped(base)

    def grow(model: CHMM) -> Any:
        pruned = pruning.prune(model, threshold=options.grow_threshold)
        targets = pruned.n_clones + allocation.largest_remainder(pruned.n_clones, options.states - pruned.n_states)
        grown = growing.split_clones(pruned, targets, np.random.default_rng(options.seed), options.grow_noise)
        grown.metadata = {}
        return grown, pruned.metadata["pruned"]["kept_fraction"]

    selection, kept = grow(base.selected)
    refit_start = grow(base.model)[0] if options.refit else None
    schedule = {
        "grow_from": grow_from,
        "base_test_bps": base.summary["test_bps"],
        "base_validation_bps": base.summary["validation_bps"],
        "base_iterations": base.summary["iterations"],
        "base_refit_iterations": base.summary["refit_iterations"],
        "base_seconds": base.summary["seconds"],
        "threshold": options.grow_threshold,
        "base_kept_fraction": kept,
        "noise": options.grow_noise,
        "nonzeros_after_split": selection.n_nonzero(),
    }
    run.say(
        f"grown to {selection.n_states:,} states: {selection.n_nonzero():,} stored transitions (dense stage: "
        f"test BPS {base.summary['test_bps']:.4f}, pruned to {kept:.2%} at {options.grow_threshold:g}); "
        "sparse batch EM follows"
    )
    return selection, refit_start, schedule
