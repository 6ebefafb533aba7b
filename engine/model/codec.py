"""How a model reads text: its unit (what one symbol is: a character, a word or a token), the normalisation its corpus
went through and, for the paper's normalisation and for words and tokens, the vocabulary outside which words become
the placeholder (``rare``, or ``<rare>`` for words and tokens). A model carries its codec as a typed field, so
scoring, sampling, decoding and continued training treat new text exactly as the training corpus was treated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.corpora import text
from engine.errors import CHMMError


@dataclass(frozen=True)
class TextCodec:
    """normalisation: one of :data:`engine.corpora.text.NORMALISATIONS`; vocabulary: the words kept as they are ("paper"
    normalisation: words seen at least twice in the training part; every other word becomes ``rare``), or None."""

    normalisation: str = "raw"
    vocabulary: tuple[str, ...] | None = None
    unit: str = text.UNITS[0]

    def __post_init__(self) -> None:
        if self.unit not in text.UNITS:
            raise CHMMError(f"unknown unit {self.unit!r}; choose one of {', '.join(text.UNITS)}")
        if self.normalisation not in text.NORMALISATIONS:
            raise CHMMError(
                f"unknown normalisation {self.normalisation!r}; choose one of {', '.join(text.NORMALISATIONS)}"
            )
        if self.vocabulary is not None:
            object.__setattr__(self, "vocabulary", tuple(self.vocabulary))

    @property
    def vocabulary_list(self) -> list[str] | None:
        """The vocabulary as a list (what :mod:`engine.corpora.text` takes), or None."""
        return None if self.vocabulary is None else list(self.vocabulary)

    @property
    def characters(self) -> bool:
        """Whether a symbol is one character (what scrambled-letter decoding and letter colours need)."""
        return self.unit == text.UNITS[0]

    def normalise(self, raw_text: str) -> str:
        """``raw_text`` normalised as the training corpus was (:func:`~engine.corpora.text.apply_normalisation`; for
        words and tokens, their symbols joined by spaces, those outside the vocabulary as the placeholder)."""
        if self.characters:
            return text.apply_normalisation(raw_text, self.normalisation, self.vocabulary_list)
        base = text.normalise_unit(raw_text, self.normalisation, self.unit)
        if self.vocabulary is None:
            return base
        known = frozenset(self.vocabulary)
        return " ".join(t if t in known else text.RARE_TOKEN for t in text.symbols_of(base, self.unit))

    def normalise_all(self, raw_text: str) -> str:
        """``raw_text`` normalised as the training corpus was, every word kept (no placeholder)."""
        if self.characters:
            return text.normalise_characters(raw_text, self.normalisation)
        return text.normalise_unit(raw_text, self.normalisation, self.unit)

    def split(self, normalised: str) -> list[str]:
        """The symbols of normalised text: its characters, or its space-separated words or tokens."""
        return text.symbols_of(normalised, self.unit)

    def join(self, symbols: list[str]) -> str:
        """Symbols as text: characters side by side, words and tokens separated by spaces."""
        return text.join_symbols(symbols, self.unit)

    @property
    def corpus_arguments(self) -> dict[str, Any]:
        """What :func:`engine.corpora.text.prepare_corpus` needs to read a corpus as this codec does."""
        return {"normalisation": self.normalisation, "unit": self.unit}

    def to_json(self) -> dict[str, Any]:
        unit = {} if self.characters else {"unit": self.unit}  # a character model's file is as it always was
        return {"normalisation": self.normalisation, "vocabulary": self.vocabulary_list, **unit}

    @staticmethod
    def from_json(value: Any) -> TextCodec:
        """The codec stored in a model file; ValueError when it is not of that form."""
        if not isinstance(value, dict):
            raise CHMMError("the codec must be an object")
        vocabulary = value.get("vocabulary")
        if vocabulary is not None and not (
            isinstance(vocabulary, list) and all(isinstance(w, str) for w in vocabulary)
        ):
            raise CHMMError("the codec's vocabulary must be a list of words")
        unit = value.get("unit", text.UNITS[0])
        if unit not in text.UNITS:
            raise CHMMError(f"the codec's unit must be one of {', '.join(text.UNITS)}")
        return TextCodec(value.get("normalisation", "raw"), None if vocabulary is None else tuple(vocabulary), unit)
