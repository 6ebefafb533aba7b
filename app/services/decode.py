"""The Decode page: scrambling a sentence and decoding scrambled text by MAP inference."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from app import memory
from app.services import DECODE_WORK, UserError, check_work, describe_error, whole_number
from app.services.models import view_model
from engine import api
from engine.errors import CHMMError

MAX_DECODE_CHARS = 5_000


# ------------------------------------------------------------------------------------------ decode scrambled text
DECODE_STEP_BYTES = 16
"""What decoding takes per character and clone: the Viterbi lattice's back-pointers and scores."""


def decode_bytes(model: Any, characters: int) -> int:
    """The most memory decoding ``characters`` under ``model`` takes beside it: the lattice
    (:data:`DECODE_STEP_BYTES` per character and clone) and, for a sparse model, its dense blocks (the decoder's)."""
    dense = 4 * int(model.layout.size) if hasattr(model, "indices") else 0  # CSR blocks: the decoder's dense copy
    return DECODE_STEP_BYTES * characters * model.n_states + dense


def _decode_input(raw_text: str | None) -> str:
    if not raw_text or not raw_text.strip():
        raise UserError("Type or paste a sentence first.")
    if len(raw_text) > MAX_DECODE_CHARS:
        raise UserError(
            f"The text is too long to decode here: {len(raw_text):,} characters, at most {MAX_DECODE_CHARS:,}."
        )
    return raw_text


def scramble_sentence(folder: Path, raw_text: str | None, seed: Any = 0) -> str:
    """The sentence normalised like the current model's corpus, with every word's interior letters permuted."""
    return scramble_with_original(folder, raw_text, seed)["scrambled"]


def scramble_with_original(
    folder: Path, raw_text: str | None, seed: Any = 0, previous: dict[str, Any] | None = None
) -> dict[str, str]:
    """The scrambled sentence (see :func:`scramble_sentence`) and the sentence before scrambling, normalised the
    same way (``original``), which :func:`decode` can score the decoding against. Scrambling again the text a
    ``previous`` call returned keeps that call's original (the sentence before any scrambling)."""
    sentence = _decode_input(raw_text)
    s = whole_number(seed if seed not in (None, "") else 0, "the seed", 0, 2**32 - 1)
    model = view_model(folder)
    try:
        original = api.decoding_text(model, sentence)
        scrambled = api.scramble_for_model(model, sentence, seed=s)
    except CHMMError as exc:
        raise UserError(f"The text cannot be scrambled: {describe_error(exc)}") from None
    earlier = previous.get("original") if isinstance(previous, dict) else None
    if isinstance(earlier, str) and previous.get("scrambled") == original:  # type: ignore[union-attr]
        original = earlier
    return {"scrambled": scrambled, "original": original}


def decode(
    folder: Path, raw_text: str | None, constrained: bool = False, scrambled_from: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Decode a scrambled sentence under the current model: the decoded text, the input after normalisation,
    the changed runs (``spans``, and ``segments``: (text, changed) pieces of the decoded text in order), the
    number of changed characters, the decoding's log-probability and the time it took. When ``scrambled_from``
    (what :func:`scramble_with_original` returned) is the scrambling of this input, ``restored`` holds the word and
    character accuracy against the sentence before scrambling (else None)."""
    sentence = _decode_input(raw_text)
    model = view_model(folder)
    check_work(len(sentence), model.n_nonzero(), DECODE_WORK, "Decoding", "chmm decode")
    started = time.perf_counter()
    with memory.reserved(decode_bytes(model, len(sentence)), "Decoding this text"):
        try:
            result = api.decode_text(model, sentence, constrained=bool(constrained))
        except CHMMError as exc:
            raise UserError(f"The text cannot be decoded: {describe_error(exc)}") from None
    seconds = time.perf_counter() - started
    spans = api.change_spans(result.scrambled, result.decoded)
    segments: list[tuple[str, bool]] = []
    previous = 0
    for start, stop in spans:
        if start > previous:
            segments.append((result.decoded[previous:start], False))
        segments.append((result.decoded[start:stop], True))
        previous = stop
    if previous < len(result.decoded):
        segments.append((result.decoded[previous:], False))
    original = None
    if isinstance(scrambled_from, dict) and scrambled_from.get("scrambled") == result.scrambled:
        candidate = scrambled_from.get("original")
        if isinstance(candidate, str) and len(candidate) == len(result.decoded):
            original = candidate
    return {
        "decoded": result.decoded,
        "scrambled": result.scrambled,
        "spans": spans,
        "segments": segments,
        "changed": len(result.changed),
        "log_probability": result.log_probability,
        "relaxed_words": result.relaxed_words,
        "unresolved_words": result.unresolved_words,
        "constrained": bool(constrained),
        "seconds": seconds,
        "original": original,
        "restored": api.restoration(original, result.decoded)._asdict() if original is not None else None,
    }
