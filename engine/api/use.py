"""What the door writes itself: the functions that combine the wings for a front end (prune a model given text,
its clone graph and communities, their exports, a word's clone path and senses, tokens held in memory). The door
:mod:`engine.api` and its sub-doors name them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.backends import engines
from engine.backends.cpu.inference import ScoreResult
from engine.backends.reading import dense_for_tools, encode_for_model
from engine.corpora import text
from engine.corpora.documents import Document
from engine.corpora.sequences import sequences_from_tokens
from engine.corpora.text import CorpusError
from engine.errors import CHMMError
from engine.model import pruning
from engine.model.dense import CHMM
from engine.network import communities as communities_mod
from engine.network import export as export_mod
from engine.network import graph as graph_mod
from engine.network.senses import Senses
from engine.network.senses import symbol_senses as _symbol_senses
from engine.training import TrainOptions, train_text

DEFAULT_PRUNE_THRESHOLD = 1e-3


@dataclass
class PruneOutcome:
    """The pruned model and its figures (the CLI's ``--json`` object): threshold, kept_fraction, non-zeros
    before/after, and the BPS of the validation text before/after (None without one)."""

    model: CHMM
    summary: dict[str, Any]


def prune_model(
    model: CHMM,
    threshold: float | None = DEFAULT_PRUNE_THRESHOLD,
    top_mass: float | None = None,
    viterbi_text: str | None = None,
    validation_text: str | None = None,
) -> PruneOutcome:
    """Prune ``model`` (see :func:`engine.model.pruning.prune`): entries below ``threshold``, beyond the ``top_mass``
    share of each row, or outside the clones the Viterbi path of ``viterbi_text`` uses (raw text, normalised
    like the model's corpus). With ``validation_text`` the summary has its BPS before and after."""
    if threshold is not None:
        threshold = pruning.check_threshold(threshold)
    validation = encode_for_model(model, validation_text) if validation_text else None
    engine = engines.engine_for(model)
    if top_mass is None and viterbi_text is None and threshold:
        pruned: Any = engine.host(engine.prune(engine.load(model), threshold))
    else:
        model = dense_for_tools(model, "pruning by top mass or Viterbi clones")
        keep = graph_mod.viterbi_clones(model, encode_for_model(model, viterbi_text)) if viterbi_text else None
        pruned = pruning.prune(model, threshold=threshold, top_mass=top_mass, keep_clones=keep)
    record = pruned.metadata["pruned"]
    summary: dict[str, Any] = {
        "threshold": threshold,
        "kept_fraction": record["kept_fraction"],
        "nonzeros_before": record["nonzeros_before"],
        "nonzeros_after": record["nonzeros_after"],
        "bps_before": None,
        "bps_after": None,
    }
    if top_mass is not None:
        summary["top_mass"] = top_mass
    if viterbi_text is not None:
        summary["viterbi_clones"] = int(pruned.metadata["pruned"].get("kept_clones", 0))
    if validation is not None:
        before = engine.score(engine.load(model), validation)
        pruned_engine = engines.engine_for(pruned)
        after = pruned_engine.score(pruned_engine.load(pruned), validation)
        summary.update(
            bps_before=before.bps, bps_after=after.bps, zero_probability_events=after.zero_probability_events
        )
        pruned.metadata["pruned"].update(bps_before=before.bps, bps_after=after.bps)
    return PruneOutcome(pruned, summary)


def prune_sweep_text(model: CHMM, thresholds: list[float], validation_text: str) -> list[graph_mod.SweepPoint]:
    """Kept share of the non-zeros and validation BPS for each threshold (the paper's Fig 3(d))."""
    return graph_mod.prune_sweep(
        model, [pruning.check_threshold(t) for t in thresholds], encode_for_model(model, validation_text)
    )


def held_out_split_text(model: CHMM, raw_text: str) -> tuple[str, str] | None:
    """The part of ``raw_text`` that the model's training run held out, exactly as that run split it (its recorded
    normalisation, test share, validation share and training cap, its alphabet and vocabulary), as normalised text,
    with its name: the validation part ("validation"), or the test part ("test") when the run refitted on training
    + validation text, which then is no longer held out. None when ``raw_text`` is not the model's training corpus
    (its split sizes differ from those the model recorded) or the model has no validation split."""
    settings = model.metadata.get("settings") or {}
    sizes = model.metadata.get("sizes") or {}
    if not settings or not sizes.get("validation"):
        return None
    try:
        corpus = text.prepare_corpus(
            raw_text,
            normalisation=model.codec.normalisation,
            test_fraction=settings.get("test_fraction", 0.1),
            validation=settings.get("validation", 0.1),
            max_train=settings.get("max_train"),
            fixed_alphabet=(model.symbols, model.codec.vocabulary_list),
            unit=model.codec.unit,
            by_sequence=bool(settings.get("by_sequence")),
        )
    except (text.CorpusError, ValueError):
        return None
    if (len(corpus.train), len(corpus.validation)) != (sizes.get("train"), sizes.get("validation")):
        return None
    refitted = bool(settings.get("refit")) and (
        (model.metadata.get("refit_iterations") or 0) > 0 or bool(model.metadata.get("schedule"))
    )
    if refitted:
        return (corpus.test_text, "test") if corpus.test_text else None
    return corpus.validation_text, "validation"


def reference_text(model: CHMM, raw_text: str) -> str:
    """``raw_text`` normalised like the model's corpus, every word kept (no "rare" replacement): the reference that
    marks generalized words seen or novel, so that "novel" means absent from the whole raw text."""
    return model.codec.normalise_all(raw_text)


def model_communities(
    model: CHMM,
    threshold: float | None = DEFAULT_PRUNE_THRESHOLD,
    options: communities_mod.CommunityOptions | None = None,
    corpus_text: str | None = None,
) -> communities_mod.Communities:
    """Prune at ``threshold`` (None: use the model as it is), build the clone graph and run Infomap on it; the
    generalized words are marked seen/novel against ``corpus_text`` (raw training text) when given."""
    options = options or communities_mod.CommunityOptions()
    options.validate()
    reference = reference_text(model, corpus_text) if corpus_text else None
    return communities_mod.find_communities(model_graph(model, threshold), options, reference)


def model_graph(model: CHMM, threshold: float | None = DEFAULT_PRUNE_THRESHOLD) -> graph_mod.CloneGraph:
    """The clone graph :func:`model_communities` partitions (pruned at ``threshold``; None: the model as it is),
    without running Infomap."""
    if threshold is not None:
        threshold = pruning.check_threshold(threshold)
        engine = engines.engine_for(model)
        model = engine.host(engine.prune(engine.load(model), threshold))
    return graph_mod.clone_graph(model)


def write_communities(result: communities_mod.Communities, directory: str | Path) -> list[str]:
    """Write the result folder (modules.csv, modules.json, clones.tree/.ftree/.clu numbered as the whole graph's
    Pajek export, :func:`engine.network.export.partition_texts`) with nothing partial left on failure; returns the paths
    written."""
    return communities_mod.write_result(result, str(directory), export_mod.partition_texts(result))


def graph_edges(model: CHMM, threshold: float) -> int:
    """How many edges the clone graph pruned at ``threshold`` has: the stored transitions with T >= threshold (as
    :func:`engine.model.pruning.prune` keeps them), counted without building the graph, a block of 2^24 entries at a
    time (a comparison over the whole of T held a boolean per entry: 500 MB for a 2 GB T)."""
    values, step = np.asarray(model.T), 1 << 24
    return sum(int(np.count_nonzero(values[i : i + step] >= threshold)) for i in range(0, values.size, step))


EXPORT_STAGES = ("graph", "infomap", "writing")
"""The stages :func:`export_model_graph` reports, in order: the clone graph built, Infomap run, the file written."""


def export_model_graph(
    model: CHMM,
    path: str | Path,
    fmt: str,
    module: str | None = None,
    threshold: float | None = DEFAULT_PRUNE_THRESHOLD,
    options: communities_mod.CommunityOptions | None = None,
    corpus_text: str | None = None,
    communities: communities_mod.Communities | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Export the clone graph of ``model`` (pruned at ``threshold``), or one module's subgraph, in ``fmt`` (see
    :data:`engine.network.export.FORMATS`), its nodes carrying ``module`` and ``path``: of ``communities`` when
    given (a run already made, e.g. :func:`restore_communities` of the one a user was shown; its graph is
    exported and ``threshold``, ``options`` and ``corpus_text`` are not used), else of an Infomap run made first
    with ``options``. ``progress`` is told each stage as it begins (:data:`EXPORT_STAGES`: ``"graph"`` and
    ``"infomap"`` for a run made here, then ``"writing"``). Returns the export's figures, with an informative
    ``file_name`` (:func:`engine.network.export.export_file_name`)."""
    if fmt not in export_mod.FORMATS:
        raise CHMMError(f"unknown export format {fmt!r}; choose one of {', '.join(export_mod.FORMATS)}")
    report = progress or (lambda _stage: None)
    result = communities
    if result is None:
        options = options or communities_mod.CommunityOptions()
        options.validate()
        report("graph")
        graph = model_graph(model, threshold)
        report("infomap")
        reference = reference_text(model, corpus_text) if corpus_text else None
        result = communities_mod.find_communities(graph, options, reference)
        del graph
    report("writing")
    summary = export_mod.export_graph(result.graph, path, fmt, result, module)
    name = export_mod.export_file_name(result.graph, fmt, module)
    return summary | {"modules": len(result.top_modules), "file_name": name}


@dataclass(frozen=True)
class ClonePath:
    """The Viterbi clone path of a word or phrase (:func:`clone_path`): the text as the model read it (normalised,
    spaces around it), each position's clone, and the words the model's normalisation replaced by ``rare``."""

    text: str
    clones: np.ndarray
    log_probability: float
    replaced: list[str]


def clone_path(model: CHMM, raw_text: str) -> ClonePath:
    """The MAP clone path (Viterbi) of ``raw_text`` normalised as the model's corpus was, read as it occurs inside
    a text: with a space before and after when the alphabet has one. ValueError for text that is empty after
    normalisation, characters outside the alphabet, or text the model gives probability zero."""
    normalised = model.codec.normalise(raw_text).strip(" ")
    if not normalised:
        raise text.CorpusError("the text is empty after the model's normalisation")
    base = model.codec.normalise_all(raw_text).split()
    placeholder = text.RARE_WORD if model.codec.characters else text.RARE_TOKEN
    replaced = [w for w, n in zip(base, normalised.split(), strict=False) if n == placeholder != w]
    spaced = f" {normalised} " if " " in model.symbols else normalised
    engine = engines.engine_for(model)
    result = engine.viterbi(engine.load(model), model.encode(spaced))
    if not np.isfinite(result.log_probability):
        raise CHMMError("the model gives this text probability zero, so it has no clone path")
    return ClonePath(spaced, np.asarray(result.clones, dtype=np.int64), float(result.log_probability), replaced)


def word_senses(model: CHMM, graph: graph_mod.CloneGraph, symbol: str, codes: np.ndarray | None = None) -> Senses:
    """What each clone of ``symbol`` (a word, token or character of the model's alphabet) stands for
    (:func:`engine.network.senses.symbol_senses`): per clone, its previous and next symbols in the clone ``graph``
    and, with ``codes`` (a text's symbols under the model, :func:`encode_for_model`; the training text, say), how
    often it reads the symbol there by Viterbi on a window around each occurrence (at most
    :data:`engine.network.senses.MAX_OCCURRENCES`), with an example. ValueError for a symbol outside the
    alphabet."""
    index = model.symbol_index()
    if symbol not in index:
        raise CHMMError(f"{symbol[:40]!r} is not one of the model's {model.codec.unit}")
    decode = None
    if codes is not None:
        engine = engines.engine_for(model)
        loaded = engine.load(model)

        def decode(window: np.ndarray) -> np.ndarray:
            result = engine.viterbi(loaded, window)
            path = np.asarray(result.clones, dtype=np.int64)
            return path if np.isfinite(result.log_probability) else np.full(len(window), -1, dtype=np.int64)

    return _symbol_senses(graph, index[symbol], codes, decode)


def _token_sequences(sequences: Any, lengths: Any = None) -> list[Document]:
    """Token sequences in memory as documents: a list of sequences (lists of strings or integers), or one flat
    sequence cut into sequences of ``lengths`` (as hmmlearn takes ``X`` and ``lengths``)."""
    if lengths is not None:
        flat = list(np.asarray(sequences).ravel()) if isinstance(sequences, np.ndarray) else list(sequences)
        sizes = [int(n) for n in np.asarray(lengths).ravel()]
        if any(n < 1 for n in sizes) or sum(sizes) != len(flat):
            raise CorpusError(f"the lengths must be positive and add up to the {len(flat):,} tokens given")
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        sequences = [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    elif isinstance(sequences, np.ndarray) and sequences.ndim == 1:
        sequences = [list(sequences)]
    return sequences_from_tokens([list(np.asarray(x).ravel()) if isinstance(x, np.ndarray) else x for x in sequences])


def train_tokens(
    sequences: Any,
    lengths: Any = None,
    options: TrainOptions | None = None,
    **kwargs: Any,
) -> Any:
    """Train a CHMM on token sequences held in memory (lists of strings or integers, or one flat sequence with
    ``lengths``): the unit is tokens, several sequences are split by sequence (the last tenth is the test part),
    one is split within; ``options`` (default :class:`TrainOptions`) as for :func:`train_text`, whose other keywords
    ``kwargs`` are. Returns :func:`train_text`'s outcome."""
    documents = _token_sequences(sequences, lengths)
    options = replace(options or TrainOptions(), unit="tokens", by_sequence=len(documents) > 1)
    corpus: Any = documents if len(documents) > 1 else documents[0].text
    return train_text(corpus, options, **kwargs)


def score_tokens(model: CHMM, sequences: Any, lengths: Any = None, backend: str = "cpu") -> ScoreResult:
    """Bits per token of token sequences in memory (as :func:`train_tokens` takes them) under a model of tokens or
    words, each sequence from its own start, tokens outside the model's vocabulary read as its placeholder."""
    if model.codec.characters:
        raise CHMMError("this model reads characters; score its text with score_text")
    engine = engines.engine_for(model, backend)
    parts = [encode_for_model(model, d.text) for d in _token_sequences(sequences, lengths)]
    return engines.score_sequences(engine, engine.load(model), parts)
