"""The Generate page: sampling text from the current model and scoring pasted text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.services import UserError, describe_error, whole_number
from app.services.models import load_current
from engine import workflows

MAX_SAMPLE_LENGTH = 20_000


MAX_SCORE_CHARS = 1_000_000


MAX_SURPRISAL_CHARS = 2_000
"""The Generate page shades at most this many characters of scored text by their surprisal."""


def sample(folder: Path, length: Any, seed: Any = 0, prefix: str | None = None) -> str:
    """``length`` characters sampled from the current model, continuing ``prefix`` when given."""
    n = whole_number(length, "the length", 1, MAX_SAMPLE_LENGTH)
    s = whole_number(seed if seed not in (None, "") else 0, "the seed", 0, 2**32 - 1)
    model = load_current(folder)
    try:
        return workflows.sample_text(model, n, seed=s, prefix=prefix or None)
    except ValueError as exc:  # CorpusError is a ValueError: a prefix empty after normalisation or off-alphabet
        raise UserError(f"The prefix cannot be used: {describe_error(exc)}") from None


def as_model_reads(folder: Path, raw_text: str) -> str:
    """``raw_text`` normalised like the current model's corpus (what sampling continues and scoring scores)."""
    model = load_current(folder)
    try:
        return model.decode_symbols(workflows.encode_for_model(model, raw_text))
    except ValueError as exc:
        raise UserError(f"The text cannot be read by the model: {describe_error(exc)}") from None


def score(folder: Path, raw_text: str | None) -> dict[str, Any]:
    """Bits per symbol of pasted text under the current model, and ``surprisal``: (character, bits) for each of
    the first :data:`MAX_SURPRISAL_CHARS` characters after normalisation."""
    if not raw_text or not raw_text.strip():
        raise UserError("Paste some text to score.")
    if len(raw_text) > MAX_SCORE_CHARS:
        raise UserError(
            f"The text is too long to score here: {len(raw_text):,} characters, at most {MAX_SCORE_CHARS:,}."
        )
    model = load_current(folder)
    try:
        result = workflows.score_text(model, raw_text)
        shown = raw_text[: MAX_SURPRISAL_CHARS * 2]  # normalisation never lengthens text by more than this
        normalised, bits = workflows.surprisal_text(model, shown)
    except ValueError as exc:
        raise UserError(f"The text cannot be scored: {describe_error(exc)}") from None
    characters = [(char, round(float(b), 3)) for char, b in zip(normalised, bits, strict=True)]
    return {
        "bps": result.bps,
        "symbols": result.symbols,
        "zero_probability_events": result.zero_probability_events,
        "surprisal": characters[:MAX_SURPRISAL_CHARS],
    }
