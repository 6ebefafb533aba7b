"""The Generate page: sampling text from the current model and scoring pasted text."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from app import memory
from app.services import PREFIX_WORK, SCORE_WORK, UserError, check_work, describe_error, whole_number
from app.services.corpus import reference_corpus
from app.services.models import view_model
from engine import api
from engine.api import CHMM
from engine.errors import CHMMError

MAX_SAMPLE_LENGTH = 20_000


MAX_SCORE_CHARS = 1_000_000


MAX_SURPRISAL_CHARS = 2_000
"""The Generate page shades at most this many characters of scored text by their surprisal."""


SCORE_CHARACTER_BYTES = 64
"""What scoring takes per character of the text beside the model (its normalised copies, symbols and per-step
figures; the forward pass keeps one message at a time): 20,000 characters under a 5,000-state model, +13 MB."""


def score_bytes(model: Any, characters: int) -> int:
    """The most memory scoring ``characters`` under ``model`` takes beside it: :data:`SCORE_CHARACTER_BYTES` per
    character, and the surprisal's messages over the first :data:`MAX_SURPRISAL_CHARS` characters."""
    return SCORE_CHARACTER_BYTES * characters + 8 * 2 * MAX_SURPRISAL_CHARS * model.n_states


def sample(folder: Path, length: Any, seed: Any = 0, prefix: str | None = None) -> str:
    """``length`` characters sampled from the current model, continuing ``prefix`` when given. A prefix is bounded
    before any work: by its length (:data:`engine.api.DEFAULTS.MAX_PREFIX_CHARACTERS`, before the model is read) and by
    its characters times the model's transitions (:data:`app.services.PREFIX_WORK`, before its forward pass)."""
    n = whole_number(length, "the length", 1, MAX_SAMPLE_LENGTH)
    s = whole_number(seed if seed not in (None, "") else 0, "the seed", 0, 2**32 - 1)
    try:
        api.check_prefix(prefix)
    except CHMMError as exc:
        raise UserError(f"{describe_error(exc)}.") from None
    model = view_model(folder)  # loaded once per process and shared (issue 51: each Generate loaded its own)
    if prefix:
        check_work(len(prefix), model.n_nonzero(), PREFIX_WORK, "Continuing a prefix of", "chmm sample --prefix")
    try:
        return api.sample_text(model, n, seed=s, prefix=prefix or None)
    except CHMMError as exc:  # a prefix empty after normalisation or off-alphabet
        raise UserError(f"The prefix cannot be used: {describe_error(exc)}") from None


def as_model_reads(folder: Path, raw_text: str) -> str:
    """``raw_text`` normalised like the current model's corpus (what sampling continues and scoring scores)."""
    model = view_model(folder)
    try:
        return model.decode_symbols(api.encode_for_model(model, raw_text))
    except CHMMError as exc:
        raise UserError(f"The text cannot be read by the model: {describe_error(exc)}") from None


def score(folder: Path, raw_text: str | None, placeholder: bool = False) -> dict[str, Any]:
    """Bits per symbol of pasted text under the current model, and ``surprisal``: (character, bits) for each of
    the first :data:`MAX_SURPRISAL_CHARS` characters after normalisation. A pasted text is not the model's own, so
    by default every word is read letter by letter (``placeholder`` True: words outside the vocabulary as the
    placeholder ``rare``, as the model's own test text is scored)."""
    if not raw_text or not raw_text.strip():
        raise UserError("Paste some text to score.")
    if len(raw_text) > MAX_SCORE_CHARS:
        raise UserError(
            f"The text is too long to score here: {len(raw_text):,} characters, at most {MAX_SCORE_CHARS:,}."
        )
    model = view_model(folder)
    check_work(len(raw_text), model.n_nonzero(), SCORE_WORK, "Scoring", "chmm score")
    with memory.reserved(score_bytes(model, len(raw_text)), "Scoring this text"):
        try:
            result = api.score_text(model, raw_text, placeholder=placeholder)
            shown = raw_text[: MAX_SURPRISAL_CHARS * 2]  # normalisation never lengthens text by more than this
            normalised, bits = api.surprisal_text(model, shown, placeholder=placeholder)
        except CHMMError as exc:
            raise UserError(f"The text cannot be scored: {describe_error(exc)}") from None
    gap = "" if model.codec.characters else " "  # a word's piece carries the space that follows it
    pieces = model.codec.split(normalised)
    characters = [(piece + gap, round(float(b), 3)) for piece, b in zip(pieces, bits, strict=True)]
    rare = api.corpora.rare_words(model, raw_text)
    training = rare.training_share
    if training is None and model.codec.vocabulary is not None:  # a model trained before the share was recorded
        corpus_text = reference_corpus(folder, model)
        if corpus_text is not None:  # measured on the held-out part of its corpus, as training records it now
            corpus = api.corpora.prepare_corpus(
                corpus_text, fixed_alphabet=(model.symbols, model.codec.vocabulary_list)
            )
            training = api.corpora.placeholder_share(corpus.validation_text + " " + corpus.test_text)
            rare = api.corpora.RareWords(rare.replaced, rare.words, rare.examples, training)
    return {
        "bps": result.bps,
        "symbols": result.symbols,
        "zero_probability_events": result.zero_probability_events,
        "surprisal": characters[:MAX_SURPRISAL_CHARS],
        "rare": {
            "replaced": rare.replaced,
            "words": rare.words,
            "share": rare.share,
            "examples": rare.examples,
            "training_share": training,
            "far": rare.far_from_training,
            "vocabulary": model.codec.vocabulary is not None,
            "placeholder": placeholder,
        },
    }


PREFIX_WORDS = 2
"""The default prefix is this many words from the model's own text."""


def default_prefix(folder: Path) -> str:
    """A prefix from the current model's own text: the most frequent pair of words (:func:`common_phrase`) of the
    text it was trained on when the session has it (or the bundled sample corpus for the sample model), else a word
    of its vocabulary; "" when the model has neither."""
    try:
        model = view_model(folder)
    except UserError:
        return ""
    corpus_text = reference_corpus(folder, model)
    if corpus_text is not None:
        return common_phrase(model, corpus_text)
    if model.codec.vocabulary:
        words = [w for w in model.codec.vocabulary if len(w) >= 3 and w != api.DEFAULTS.RARE_WORD]
        return words[len(words) // 2] if words else ""
    return ""


def common_phrase(model: CHMM, corpus_text: str) -> str:
    """The most frequent :data:`PREFIX_WORDS`-word phrase of ``corpus_text`` as the model reads it, of words with
    three letters or more and not the placeholder."""
    words = model.codec.normalise(corpus_text[:2_000_000]).split()
    phrases = Counter(
        tuple(words[i : i + PREFIX_WORDS])
        for i in range(len(words) - PREFIX_WORDS + 1)
        if all(len(w) >= 3 and w != api.DEFAULTS.RARE_WORD and w.isalpha() for w in words[i : i + PREFIX_WORDS])
    )
    return " ".join(phrases.most_common(1)[0][0]) if phrases else ""


def reading(folder: Path) -> tuple[str, str]:
    """How the current model's text reads: what joins a prefix to its continuation ("" for characters, a space for
    words and tokens) and its placeholder for words outside the vocabulary (``rare``, or ``<rare>``)."""
    codec = view_model(folder).codec
    return ("", api.DEFAULTS.RARE_WORD) if codec.characters else (" ", api.DEFAULTS.RARE_TOKEN)


def placeholder_pieces(sample_text: str, placeholder: str = api.DEFAULTS.RARE_WORD) -> list[tuple[str, bool]]:
    """``sample_text`` cut into (piece, is the placeholder as a whole word) pieces, in order."""
    pieces: list[tuple[str, bool]] = []
    position = 0
    for match in re.finditer(rf"(?<![^\s]){re.escape(placeholder)}(?![^\s])", sample_text):
        if match.start() > position:
            pieces.append((sample_text[position : match.start()], False))
        pieces.append((match.group(0), True))
        position = match.end()
    if position < len(sample_text):
        pieces.append((sample_text[position:], False))
    return pieces
