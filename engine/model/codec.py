"""How a model reads text: the normalisation its corpus went through and, for the paper's normalisation, the
vocabulary outside which words become ``rare``. A model carries its codec as a typed field, so scoring, sampling,
decoding and continued training treat new text exactly as the training corpus was treated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.corpora import text


@dataclass(frozen=True)
class TextCodec:
    """normalisation: one of :data:`engine.corpora.text.NORMALISATIONS`; vocabulary: the words kept as they are ("paper"
    normalisation: words seen at least twice in the training part; every other word becomes ``rare``), or None."""

    normalisation: str = "raw"
    vocabulary: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.normalisation not in text.NORMALISATIONS:
            raise ValueError(
                f"unknown normalisation {self.normalisation!r}; choose one of {', '.join(text.NORMALISATIONS)}"
            )
        if self.vocabulary is not None:
            object.__setattr__(self, "vocabulary", tuple(self.vocabulary))

    @property
    def vocabulary_list(self) -> list[str] | None:
        """The vocabulary as a list (what :mod:`engine.corpora.text` takes), or None."""
        return None if self.vocabulary is None else list(self.vocabulary)

    def normalise(self, raw_text: str) -> str:
        """``raw_text`` normalised as the training corpus was (:func:`~engine.corpora.text.apply_normalisation`)."""
        return text.apply_normalisation(raw_text, self.normalisation, self.vocabulary_list)

    def to_json(self) -> dict[str, Any]:
        return {"normalisation": self.normalisation, "vocabulary": self.vocabulary_list}

    @staticmethod
    def from_json(value: Any) -> TextCodec:
        """The codec stored in a model file; ValueError when it is not of that form."""
        if not isinstance(value, dict):
            raise ValueError("the codec must be an object")
        vocabulary = value.get("vocabulary")
        if vocabulary is not None and not (
            isinstance(vocabulary, list) and all(isinstance(w, str) for w in vocabulary)
        ):
            raise ValueError("the codec's vocabulary must be a list of words")
        return TextCodec(value.get("normalisation", "raw"), None if vocabulary is None else tuple(vocabulary))
