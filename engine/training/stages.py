"""The stages of the training protocol that train one model: the corpus split, the start, the selection run on
validation (online EM then batch EM, the paper's recipe) and the refit on training + validation text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from engine.backends import engines
from engine.backends.cpu import inference
from engine.corpora import allocation, text
from engine.model import blocks
from engine.model.backoff import choose_weight
from engine.model.blocks import pairs_in_sequence
from engine.model.codec import TextCodec
from engine.model.dense import BACKOFF_WEIGHT, CHMM, random_model
from engine.training import learning, support
from engine.training.options import (
    ALIGNED_SHARE,
    AUTO,
    DTYPES,
    SHARP_CONCENTRATION,
    STOPPED_BAD,
    RunContext,
    TrainOptions,
    restart_plan,
)
from engine.training.thresholds import sequences_bps  # noqa: F401 (stages.sequences_bps, as before)


def prepare_training_corpus(
    corpus_text: str | Sequence[Any], options: TrainOptions, name: str, init_model: Any | None
) -> text.Corpus:
    """Stage 1: the corpus normalised and split as ``options`` say; continued training (``init_model``) reads the
    text with the model's own codec and alphabet."""
    codec = init_model.codec if init_model is not None else None
    corpus = text.prepare_corpus(
        corpus_text,
        normalisation=codec.normalisation if codec is not None else options.normalisation,
        test_fraction=options.test_fraction,
        validation=options.validation,
        max_train=options.max_train,
        name=name,
        fixed_alphabet=(init_model.symbols, codec.vocabulary_list) if init_model is not None else None,
        unit=codec.unit if codec is not None else options.unit,
        min_count=options.min_count,
        by_sequence=options.by_sequence,
    )
    if init_model is None and options.states != AUTO:
        allocation.check_states(options.states, corpus.n_symbols)  # before any candidate or restart starts
    return corpus


def corpus_pairs(corpus: text.Corpus, full: bool = True) -> np.ndarray:
    """The distinct symbol pairs of the training part (train + validation; without ``full``, train only), within
    documents."""
    codes = [pairs_in_sequence(x, corpus.n_symbols) for x in (corpus.train_full_parts if full else corpus.train_parts)]
    if not codes:
        return np.zeros((0, 2), dtype=np.int64)
    return np.unique(np.concatenate(codes), axis=0)


def initial_model_for(corpus: text.Corpus, options: TrainOptions, restart: int = 0) -> CHMM:
    """Stage 2 of a new model: clones allocated by ``options.allocation`` over the training part, T random on the
    symbol pairs it has, seeded by ``options.seed`` (restart 0) or by (``options.seed``, ``restart``); aligned or
    uniform as :func:`restart_plan` says for ``options.start``. A model of words or tokens stores the blocks of the
    train text's pairs only, so that the validation text meets pairs never seen as the test text will (half of a
    novel's word pairs): the back-off's weight and the stopping point are chosen on what the test will be like; the
    refit adds the validation text's pairs (:func:`refit_stage`)."""
    n_clones = allocation.allocate_clones(
        corpus.train_full_parts, corpus.n_symbols, options.states, options.allocation, options.ngram_order
    )
    rng = np.random.default_rng(options.seed if restart == 0 else [options.seed, restart])
    aligned = restart_plan(restart, options.start)[0]
    model = random_model(
        corpus.symbols,
        n_clones,
        corpus_pairs(corpus, full=corpus.unit == text.UNITS[0]),
        rng,
        DTYPES[options.dtype],
        codec=corpus_codec(corpus),
        concentration=SHARP_CONCENTRATION if aligned else None,
        aligned_share=ALIGNED_SHARE if aligned else 0.0,
    )
    if corpus.unit == text.UNITS[0]:
        return model
    return with_pair_counts(model, corpus.train_parts).with_arrays(backoff_weight=unseen_share(corpus))


def unseen_share(corpus: text.Corpus) -> float:
    """The share of the validation text's symbol pairs that the train text never has, within [0.01, 0.9]: the
    back-off weight a model of words or tokens is selected with (its early stopping and the search compare
    candidates with it; :func:`with_backoff_weight` then chooses it on validation)."""
    stored = corpus_pairs(corpus, full=False)
    codes = stored[:, 0] * corpus.n_symbols + stored[:, 1]
    steps = [x[:-1] * corpus.n_symbols + x[1:] for x in corpus.validation_parts if len(x) > 1]
    if not steps:
        return 0.5
    wanted = np.concatenate(steps)
    return float(np.clip(np.mean(~np.isin(wanted, codes)), 0.01, 0.9))


def corpus_codec(corpus: text.Corpus) -> TextCodec:
    """How a model of ``corpus`` reads text: its unit, normalisation and vocabulary."""
    return TextCodec(corpus.normalisation, corpus.vocabulary, corpus.unit)


def select_on_validation(
    start: Any, corpus: text.Corpus, config: learning.TrainingConfig, run: RunContext, support_bound: float = 0.0
) -> learning.TrainingResult:
    """Stage 3: train on the training part, keeping the model best on the validation part (early stopping). Online
    EM is followed, with validation text, by batch EM from its best model (the paper's recipe of section 4.2: It_1
    iterations of online EM, then It_2 of batch EM, both chosen on validation); the result's history holds both and
    ``online_model`` the model batch EM started from. With ``support_bound`` > 0 on a host implementation, batch EM
    runs on the support (:func:`engine.training.support.on_the_support`): the online model pruned at the largest
    threshold that costs at most that many bits of validation BPS, in CSR form; ``support`` records the choice."""
    validation = corpus.validation_parts or None
    callback = run.callback
    online_stop = _online_stop(run) if config.algorithm == "online" and validation is not None else run.cancel
    result = learning.fit(
        start, corpus.train_parts, validation, config, callback, online_stop, backend=run.backend, cluster=run.cluster
    )
    if _handed_over(result, run):  # online EM's stage ended early: batch EM goes on from its best epoch
        result.stopped = "handed_over"
    if config.algorithm != "online" or validation is None or result.stopped in STOPPED_BAD:
        return result
    online_epochs = len(result.history)
    shifted = None if callback is None else (lambda r: callback(r._replace(iteration=r.iteration + online_epochs)))
    batch_config = replace(config, algorithm="em")
    batch_start, chosen = result.model, None
    if support_bound > 0 and run.cluster is None and support.trains_on_the_support(batch_start, run.backend):
        chosen = support.on_the_support(batch_start, validation, run.backend, support_bound)
        if chosen.model is not None:
            run.say(
                f"batch EM on the support: pruned at {chosen.threshold:g}, {chosen.kept_fraction:.1%} of the "
                f"non-zeros kept, validation BPS {chosen.cost:+.4f} bits"
            )
            batch_start = chosen.model
        else:
            last = chosen.tried[-1]
            run.say(
                f"batch EM on every stored entry: pruning at {last['threshold']:g} would cost {last['cost']:+.4f} "
                f"bits of validation BPS (the bound is {support_bound:g})"
            )
    batch = learning.fit(
        batch_start, corpus.train_parts, validation, batch_config, shifted, run.cancel, backend=run.backend,
        cluster=run.cluster,
    )  # fmt: skip
    batch.history = result.history + [r._replace(iteration=r.iteration + online_epochs) for r in batch.history]
    batch.online_model = batch_start
    batch.support = chosen.record() if chosen is not None and chosen.model is not None else None
    batch.online_iterations = online_epochs
    batch.best_iteration = online_epochs + batch.best_iteration if batch.best_iteration else result.best_iteration
    return batch


def _online_stop(run: RunContext) -> learning.CancelToken | None:
    """The token online EM's stage follows: ``run.hand_over`` where set (it follows the run's cancel token too), else
    the run's cancel token."""
    return run.hand_over if run.hand_over is not None else run.cancel


def _handed_over(result: learning.TrainingResult, run: RunContext) -> bool:
    """Whether a stage that stopped as cancelled was in fact handed over (``run.hand_over`` set, the run's own
    cancel token not) after at least one epoch."""
    return (
        result.stopped == "cancelled"
        and run.hand_over is not None
        and run.hand_over.cancelled
        and not (run.cancel is not None and run.cancel.cancelled)
        and bool(result.history)
    )


def refit_stage(
    start: Any,
    selection: learning.TrainingResult,
    corpus: text.Corpus,
    config: learning.TrainingConfig,
    run: RunContext,
    grown: bool = False,
) -> tuple[Any, int, bool]:
    """Stage 4, the paper's protocol: the validation split chose the number of iterations; train from the same start
    on training + validation text for that many. A grown start is already the dense refit, grown: with no sparse
    iteration chosen it is the model. Returns (model, refit iterations, whether the model is a refit). A cancelled
    or failed refit marks ``selection`` so. After online EM the refit continues from the online stage's model
    with the batch EM iterations chosen (see :func:`select_on_validation`)."""
    iterations = selection.best_iteration
    if selection.online_model is not None:  # online EM, then batch EM (see select_on_validation)
        # online EM's path from the same start on other text is another random walk: the refit continues from the
        # online stage's model with the batch EM iterations that validation chose
        start = selection.online_model
        iterations = max(0, iterations - selection.online_iterations)
        config = replace(config, algorithm="em")
    if iterations == 0:
        return (start, 0, True) if grown else (selection.model, 0, False)
    if corpus.unit != text.UNITS[0]:  # the validation text's pairs join the train text's (initial_model_for)
        start = extend_model(start, corpus_pairs(corpus), np.random.default_rng(0), start.T.dtype)
    run.say(f"refitting on training + validation text for {iterations} iteration(s)")
    refit_config = replace(config, iterations=iterations, tolerance=0.0)
    callback = run.callback
    tagged = None if callback is None else (lambda r: callback(r._replace(refit=True)))
    again = learning.fit(
        start, corpus.train_full_parts, None, refit_config, tagged, run.cancel, backend=run.backend,
        cluster=run.cluster,
    )  # fmt: skip
    if again.stopped in STOPPED_BAD:
        selection.stopped, selection.error = again.stopped, again.error
    return again.model, iterations, True


def extend_model(model: CHMM, pairs: np.ndarray, rng: np.random.Generator, dtype: Any) -> CHMM:
    """Continue from ``model`` on new data: keep its blocks and values, add random blocks for symbol pairs the
    new data has and the model lacks (weighted 1e-3 against the existing row mass), renormalise rows. The expected
    counts are not read (EM makes its own), so a model saved without them continues as it would in memory.

    A model pruned for saving (``chmm train``'s prune bound: ``fixed_zeros`` False) continues as a dense model: EM
    refills its zeroed entries from the pseudocount on, and it backs off with the weight of an unpruned model
    (:data:`~engine.model.dense.BACKOFF_WEIGHT`), as the model it was pruned from did. A model pruned by ``chmm
    prune`` (``fixed_zeros``) stays pruned and keeps its back-off weight."""
    if not model.fixed_zeros and model.backoff_weight != BACKOFF_WEIGHT:
        model = model.with_arrays(backoff_weight=BACKOFF_WEIGHT)
    if getattr(model, "pair_counts", None) is not None:
        model = model.with_arrays(pair_counts=None)
    layout = model.layout
    known = {(int(i), int(j)) for i, j in layout.block_pairs}
    extra = [p for p in map(tuple, pairs.tolist()) if p not in known]
    if not extra:
        return model.with_arrays(T=model.T.astype(dtype), pi=model.pi.astype(dtype), counts=None)
    new_layout = blocks.BlockLayout.build(layout.n_clones, np.concatenate([layout.block_pairs, np.array(extra)]))
    raw = np.zeros(new_layout.size)
    for k, (i, j) in enumerate(new_layout.block_pairs):
        lo, hi = new_layout.block_offset[k], new_layout.block_offset[k + 1]
        old = layout.find_block(i, j)
        if old >= 0:
            raw[lo:hi] = model.T[layout.block_offset[old] : layout.block_offset[old + 1]]
        else:
            raw[lo:hi] = 1e-3 * rng.random(hi - lo) / new_layout.n_clones[j]
    T = blocks.normalise_rows(new_layout, raw, 0.0, dtype)
    return model.with_arrays(layout=new_layout, T=T, pi=model.pi.astype(dtype), counts=None)


def with_pair_counts(model: Any, parts: list[np.ndarray]) -> Any:
    """``model`` with the exact symbol-pair counts of ``parts`` (the text it was trained on) as its ``pair_counts``,
    one per stored block, in place of its expected counts: what its back-off is built from. Online EM's statistics
    are running averages, not counts (a Kneser-Ney back-off built from them cost 0.6 bits per word on Moby Dick)."""
    layout = model.layout
    found = [layout.find_blocks(x[:-1], x[1:]) for x in parts if len(x) > 1]
    blocks = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
    exact = np.bincount(blocks[blocks >= 0], minlength=layout.n_blocks).astype(np.float64)
    return model.with_arrays(counts=None, pair_counts=exact)


def with_backoff_weight(model: Any, parts: list[np.ndarray], backend: str, run: RunContext) -> Any:
    """``model`` with the weight w of its back-off (:mod:`engine.model.backoff`) that gives ``parts`` (validation
    text) the highest likelihood (:func:`engine.model.backoff.choose_weight`), from the CHMM's own predictions
    (w = 0, on the implementation that runs it) and the back-off's at every position."""
    engine = engines.engine_for(model, backend)
    state = engine.load(model.with_arrays(backoff_weight=0.0))
    with np.errstate(over="ignore"):
        predictive = np.concatenate([np.exp2(-engine.surprisal(state, x)) for x in parts])
    table = inference.model_backoff(model)
    weight = choose_weight(predictive, np.concatenate([table.sequence(x) for x in parts]))
    unseen = float(np.mean(predictive == 0.0))
    run.say(f"back-off weight {weight:.3f} chosen on validation (the CHMM gives {unseen:.0%} of it probability 0)")
    return model.with_arrays(backoff_weight=weight)
