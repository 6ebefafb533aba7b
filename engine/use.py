"""Using a trained model, for the command line and the app alike: score, surprisal, sample, decode scrambled text,
prune, communities, graphs and exports, each on raw text read the way the model's corpus was."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine import communities as communities_mod
from engine import engines, inference, scramble, text
from engine import export as export_mod
from engine import graph as graph_mod
from engine.model import CHMM


def dense_for_tools(model: Any, what: str) -> CHMM:
    """``model`` as dense blocks for a tool that needs them: a sparse model up to
    :data:`engine.engines.SPARSE_TOOL_LIMIT` states is converted; a larger one raises a clear ValueError (its dense
    blocks would not fit this machine)."""
    engine = engines.engine_for(model)
    return engine.as_dense(engine.load(model), what)


def encode_for_model(model: CHMM, raw_text: str, placeholder: bool = True) -> np.ndarray:
    """Normalise raw text the way the model's training corpus was (the model's codec) and map it to symbol indices;
    characters outside the alphabet raise a clear ValueError. With ``placeholder`` False every word is kept and
    read letter by letter, also the words outside the model's vocabulary that its corpus wrote as ``rare``: the
    honest reading of a text that is not the model's own (``rare`` is easy to predict, so a text full of unknown
    words, a foreign one, scored too well with it)."""
    if placeholder:
        normalised = model.codec.normalise(raw_text)
    else:
        normalised = text.normalise_characters(raw_text, model.codec.normalisation)
    if not normalised:
        raise text.CorpusError("the text is empty after the model's normalisation")
    return model.encode(normalised)


@dataclass(frozen=True)
class RareWords:
    """How many of a text's words the model's normalisation replaces by the placeholder ``rare`` (words outside
    its vocabulary: the paper's normalisation keeps the words seen at least twice in the training part), of how
    many words, with a few of them; ``training_share`` is the share of ``rare`` that the model's own text predicts:
    among the words of its held-out text (validation and test, what a text like the corpus shows; the training
    text's own share, lower since the vocabulary comes from it, for a model that does not record it), None when
    unknown."""

    replaced: int
    words: int
    examples: list[str]
    training_share: float | None

    @property
    def share(self) -> float:
        return self.replaced / self.words if self.words else 0.0

    @property
    def far_from_training(self) -> bool:
        """Whether the text's count is far from what the training text's share predicts: further from n p than
        three binomial standard deviations plus one word, and by more than half of n p (34 of 188 words against a
        share of 6% is; 13 of 228 is not, nor 0 of 15)."""
        if self.training_share is None or not self.words:
            return False
        p = self.training_share
        expected = self.words * p
        gap = abs(self.replaced - expected)
        return gap > 3.0 * math.sqrt(self.words * p * (1.0 - p)) + 1.0 and gap > 0.5 * expected


def rare_words(model: CHMM, raw_text: str, examples: int = 8) -> RareWords:
    """Count the words of ``raw_text`` the model reads as the placeholder ``rare`` (:class:`RareWords`; none for a
    model without a vocabulary)."""
    codec = model.codec
    base = text.apply_normalisation(raw_text, codec.normalisation, None)
    words = [w for w in base.split(" ") if w]
    share = model.metadata.get("heldout_rare_share", model.metadata.get("rare_share"))
    training = float(share) if isinstance(share, (int, float)) else None
    if codec.vocabulary is None:
        return RareWords(0, len(words), [], training)
    known = frozenset(codec.vocabulary)
    replaced = [w for w in words if w not in known]
    return RareWords(len(replaced), len(words), list(dict.fromkeys(replaced))[:examples], training)


def placeholder_share(normalised_text: str) -> float:
    """The share of the placeholder ``rare`` among the words of an already normalised text."""
    words = [w for w in normalised_text.split(" ") if w]
    return sum(1 for w in words if w == text.RARE_WORD) / len(words) if words else 0.0


def score_text(model: CHMM, raw_text: str, backend: str = "cpu", placeholder: bool = True) -> inference.ScoreResult:
    """Bits per symbol of raw text under the model (with the documented back-off, see inference.score), on the CPU
    or the GPU engine ("auto": the GPU when usable); ``placeholder``: as :func:`encode_for_model` (True is the
    paper's test protocol, the model's own held-out text read as its corpus was)."""
    x = encode_for_model(model, raw_text, placeholder)
    engine = engines.engine_for(model, backend)
    return engine.score(engine.load(model), x)


def surprisal_text(model: CHMM, raw_text: str, placeholder: bool = True) -> tuple[str, np.ndarray]:
    """``raw_text`` normalised like the model's corpus (one character per symbol) and every symbol's surprisal
    -log2 P(x_n | x_<n) in bits, as the BPS counts it (their mean is :func:`score_text`'s BPS)."""
    x = encode_for_model(model, raw_text, placeholder)
    engine = engines.engine_for(model)
    bits = engine.surprisal(engine.load(model), x)
    return "".join(model.symbols[int(i)] for i in x), bits


def sample_text(model: CHMM, length: int, seed: int = 0, prefix: str | None = None) -> str:
    """``length`` sampled symbols as text, continuing ``prefix`` (normalised like the model's corpus) if given."""
    rng = np.random.default_rng(seed)
    encoded = encode_for_model(model, prefix) if prefix else None
    engine = engines.engine_for(model)
    return model.decode_symbols(engine.sample(engine.load(model), length, rng, encoded))


def decode_text(model: CHMM, raw_text: str, constrained: bool = False) -> scramble.DecodeResult:
    """Decode scrambled text (word interiors permuted) by MAP inference with uncertain evidence for the word
    interiors (paper, section 4.2.2; see :func:`engine.scramble.decode_scrambled`). The result holds the decoded
    text, the changed positions against the normalised input (``scramble.mark_changes(result.scrambled,
    result.decoded)`` marks them) and the log-probability of the decoding."""
    return scramble.decode_scrambled(dense_for_tools(model, "decoding"), raw_text, constrained=constrained)


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
    """Prune ``model`` (see :func:`engine.graph.prune`): entries below ``threshold``, beyond the ``top_mass``
    share of each row, or outside the clones the Viterbi path of ``viterbi_text`` uses (raw text, normalised
    like the model's corpus). With ``validation_text`` the summary has its BPS before and after."""
    if threshold is not None:
        threshold = graph_mod.check_threshold(threshold)
    validation = encode_for_model(model, validation_text) if validation_text else None
    engine = engines.engine_for(model)
    if top_mass is None and viterbi_text is None and threshold:
        pruned: Any = engine.host(engine.prune(engine.load(model), threshold))
    else:
        model = dense_for_tools(model, "pruning by top mass or Viterbi clones")
        keep = graph_mod.viterbi_clones(model, encode_for_model(model, viterbi_text)) if viterbi_text else None
        pruned = graph_mod.prune(model, threshold=threshold, top_mass=top_mass, keep_clones=keep)
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
        model, [graph_mod.check_threshold(t) for t in thresholds], encode_for_model(model, validation_text)
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
    return text.normalise_characters(raw_text, model.codec.normalisation)


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
        threshold = graph_mod.check_threshold(threshold)
        engine = engines.engine_for(model)
        model = engine.host(engine.prune(engine.load(model), threshold))
    return graph_mod.clone_graph(model)


def write_communities(result: communities_mod.Communities, directory: str | Path) -> list[str]:
    """Write the result folder (modules.csv, modules.json, clones.tree/.ftree/.clu numbered as the whole graph's
    Pajek export, :func:`engine.export.partition_texts`) with nothing partial left on failure; returns the paths
    written."""
    return communities_mod.write_result(result, str(directory), export_mod.partition_texts(result))


def graph_edges(model: CHMM, threshold: float) -> int:
    """How many edges the clone graph pruned at ``threshold`` has: the stored transitions with T >= threshold (as
    :func:`engine.graph.prune` keeps them), counted without building the graph."""
    return int(np.count_nonzero(np.asarray(model.T) >= threshold))


def export_model_graph(
    model: CHMM,
    path: str | Path,
    fmt: str,
    module: str | None = None,
    threshold: float | None = DEFAULT_PRUNE_THRESHOLD,
    options: communities_mod.CommunityOptions | None = None,
    corpus_text: str | None = None,
) -> dict[str, Any]:
    """Export the clone graph of ``model`` (pruned at ``threshold``), or one module's subgraph, in ``fmt`` (see
    :data:`engine.export.FORMATS`). Infomap runs first (same settings give the same module ids as
    :func:`model_communities`), so nodes carry ``module`` and ``path``. Returns the export's figures, with an
    informative ``file_name`` (:func:`engine.export.export_file_name`)."""
    if fmt not in export_mod.FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(export_mod.FORMATS)}")
    result = model_communities(model, threshold, options, corpus_text)
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
    base = text.apply_normalisation(raw_text, model.codec.normalisation, None).strip(" ").split(" ")
    replaced = [w for w, n in zip(base, normalised.split(" "), strict=False) if n == text.RARE_WORD != w]
    spaced = f" {normalised} " if " " in model.symbols else normalised
    engine = engines.engine_for(model)
    result = engine.viterbi(engine.load(model), model.encode(spaced))
    if not np.isfinite(result.log_probability):
        raise ValueError("the model gives this text probability zero, so it has no clone path")
    return ClonePath(spaced, np.asarray(result.clones, dtype=np.int64), float(result.log_probability), replaced)


def scramble_for_model(model: CHMM, raw_text: str, seed: int = 0) -> str:
    """``raw_text`` normalised as :func:`decode_text` normalises it, with the interior letters of every word
    permuted by a generator seeded with ``seed`` (see :func:`engine.scramble.scramble_text`). Raises ValueError
    for text that is empty after normalisation or has characters outside the model's alphabet."""
    normalised = decoding_text(model, raw_text)
    return scramble.scramble_text(normalised, np.random.default_rng(seed))


def decoding_text(model: CHMM, raw_text: str) -> str:
    """``raw_text`` normalised as :func:`decode_text` and :func:`scramble_for_model` normalise it (the text a
    decoding is compared with). ValueError for text that is empty after normalisation or has characters outside
    the model's alphabet."""
    normalised = scramble.normalise_for_decoding(model, raw_text)
    if not normalised:
        raise text.CorpusError("the text is empty after the model's normalisation")
    scramble.scramble_evidence(model, normalised)  # a clear error for characters outside the alphabet
    return normalised
