"""A model reading raw text on any engine: the text normalised as the model's corpus was and encoded, then scored,
shaded by surprisal, continued by sampling, or decoded after scrambling (paper, section 4.2.2), each through the
:class:`~engine.backends.engines.Engine` the registry picks; and the words a model reads as the placeholder ``rare``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.backends import engines, scramble
from engine.backends.cpu import inference
from engine.corpora import text
from engine.errors import CHMMError
from engine.model.dense import CHMM


def dense_for_tools(model: Any, what: str) -> CHMM:
    """``model`` as dense blocks for a tool that needs them: a sparse model up to
    :data:`engine.backends.cpu.implementation.SPARSE_TOOL_LIMIT` states is converted; a larger one raises a clear
    ValueError (its dense blocks would not fit this machine)."""
    engine = engines.engine_for(model)
    return engine.as_dense(engine.load(model), what)


def encode_for_model(model: CHMM, raw_text: str, placeholder: bool = True) -> np.ndarray:
    """Normalise raw text the way the model's training corpus was (the model's codec) and map it to symbol indices;
    characters outside the alphabet raise a clear ValueError. With ``placeholder`` False every word is kept and
    read letter by letter, also the words outside the model's vocabulary that its corpus wrote as ``rare``: the
    honest reading of a text that is not the model's own (``rare`` is easy to predict, so a text full of unknown
    words, a foreign one, scored too well with it). A model of words or tokens always reads an unknown one as its
    placeholder: it has no letters to spell it with."""
    keep = placeholder or not model.codec.characters  # a model of words has no letters to read an unknown word by
    normalised = model.codec.normalise(raw_text) if keep else model.codec.normalise_all(raw_text)
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
    words = [w for w in codec.normalise_all(raw_text).split() if w]
    share = model.metadata.get("heldout_rare_share", model.metadata.get("rare_share"))
    training = float(share) if isinstance(share, (int, float)) else None
    if codec.vocabulary is None:
        return RareWords(0, len(words), [], training)
    known = frozenset(codec.vocabulary)
    replaced = [w for w in words if w not in known]
    return RareWords(len(replaced), len(words), list(dict.fromkeys(replaced))[:examples], training)


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
    return model.decode_symbols(x), bits


MAX_PREFIX_CHARACTERS = 100_000
"""The longest prefix a sample continues. A prefix is read by a forward pass that keeps every step's message (its
characters times the clones of a symbol, in memory) and grows with the model (issue 51: 100,000 characters took 55 s
on a 24,174-state model); what is sampled depends on the prefix's end, so a longer one only costs time and memory."""


def check_prefix(prefix: str | None) -> None:
    """Refuse (ValueError, one sentence) a prefix longer than :data:`MAX_PREFIX_CHARACTERS`, before any work."""
    if prefix and len(prefix) > MAX_PREFIX_CHARACTERS:
        raise CHMMError(
            f"the prefix has {len(prefix):,} characters, more than the {MAX_PREFIX_CHARACTERS:,} a sample may "
            "continue; give only its last part"
        )


def sample_text(model: CHMM, length: int, seed: int = 0, prefix: str | None = None) -> str:
    """``length`` sampled symbols as text, continuing ``prefix`` (normalised like the model's corpus) if given; a
    prefix over :data:`MAX_PREFIX_CHARACTERS` raises ValueError before it is read."""
    check_prefix(prefix)
    rng = np.random.default_rng(seed)
    encoded = encode_for_model(model, prefix) if prefix else None
    engine = engines.engine_for(model)
    return model.decode_symbols(engine.sample(engine.load(model), length, rng, encoded))


def check_characters(model: Any, what: str) -> None:
    """One ValueError sentence unless ``model`` reads characters: ``what`` (a tool that permutes or colours letters)
    makes sense for characters only."""
    if not model.codec.characters:
        raise CHMMError(
            f"{what} works on the letters of a character model; this model's symbols are {model.codec.unit}."
        )


def decode_text(model: CHMM, raw_text: str, constrained: bool = False) -> scramble.DecodeResult:
    """Decode scrambled text (word interiors permuted) by MAP inference with uncertain evidence for the word
    interiors (paper, section 4.2.2; see :func:`engine.backends.scramble.decode_scrambled`). The result holds the
    decoded text, the changed positions against the normalised input (``scramble.mark_changes(result.scrambled,
    result.decoded)`` marks them) and the log-probability of the decoding."""
    check_characters(model, "Scrambled-letter decoding")
    return scramble.decode_scrambled(dense_for_tools(model, "decoding"), raw_text, constrained=constrained)


def scramble_for_model(model: CHMM, raw_text: str, seed: int = 0) -> str:
    """``raw_text`` normalised as :func:`decode_text` normalises it, with the interior letters of every word
    permuted by a generator seeded with ``seed`` (see :func:`engine.backends.scramble.scramble_text`). Raises ValueError
    for text that is empty after normalisation or has characters outside the model's alphabet."""
    normalised = decoding_text(model, raw_text)
    return scramble.scramble_text(normalised, np.random.default_rng(seed))


def decoding_text(model: CHMM, raw_text: str) -> str:
    """``raw_text`` normalised as :func:`decode_text` and :func:`scramble_for_model` normalise it (the text a
    decoding is compared with). ValueError for text that is empty after normalisation or has characters outside
    the model's alphabet."""
    check_characters(model, "Scrambled-letter decoding")
    normalised = scramble.normalise_for_decoding(model, raw_text)
    if not normalised:
        raise text.CorpusError("the text is empty after the model's normalisation")
    scramble.scramble_evidence(model, normalised)  # a clear error for characters outside the alphabet
    return normalised
