"""The paper's character normalisation (Dedieu et al. 2019, section 4.2): numbers written out as words, every
character other than the 26 letters and the space removed (lowercased), and words outside a vocabulary replaced by
``rare``; the "raw" normalisation keeps every character (Unicode NFC only)."""

from __future__ import annotations

import re
import unicodedata

from engine.corpora.numbers import numbers_to_words
from engine.corpora.reading import CorpusError

__all__ = ["NORMALISATIONS", "RARE_WORD", "apply_normalisation", "normalise_paper_base"]

NORMALISATIONS: tuple[str, ...] = ("paper", "raw")
RARE_WORD = "rare"

_NOT_LETTER = re.compile("[^a-z]+")


def _fold_accents(text: str) -> str:
    """NFKD-decompose and drop combining marks ("é" -> "e", "ﬁ" -> "fi")."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def normalise_paper_base(text: str) -> str:
    """The paper's character normalisation without rare-word replacement.

    NFC, lowercase, accents folded to plain letters, numbers written as words, every character
    outside a-z (apostrophes included) turned into a space, runs of spaces collapsed, ends
    stripped: "Don't PANIC: 42 cats!" -> "don t panic forty two cats". Treating apostrophes as
    spaces reproduces the 118,788 training characters of carroll-alice.txt that the reference
    implementation's figures were measured on.
    """
    text = unicodedata.normalize("NFC", text).lower()
    text = _fold_accents(text).lower()  # lower again: compatibility forms such as "Ⅻ" fold to capitals
    text = numbers_to_words(text)
    return _NOT_LETTER.sub(" ", text).strip()


def _replace_rare(text: str, vocabulary: set[str] | frozenset[str]) -> str:
    """Replace every space-separated word not in ``vocabulary`` by "rare"."""
    if not text:
        return text
    return " ".join(w if w in vocabulary else RARE_WORD for w in text.split(" "))


def _check_normalisation(normalisation: str) -> None:
    """Raise CorpusError unless ``normalisation`` is a known normalisation name."""
    if normalisation not in NORMALISATIONS:
        raise CorpusError(f"Unknown normalisation {normalisation!r}; choose one of {', '.join(NORMALISATIONS)}.")


def apply_normalisation(text: str, normalisation: str, vocabulary: list[str] | None) -> str:
    """Normalise ``text`` the way a corpus was normalised.

    "paper": ``normalise_paper_base`` then every word not in ``vocabulary`` becomes "rare"
    (no replacement when ``vocabulary`` is None); "raw": Unicode NFC only.
    """
    _check_normalisation(normalisation)
    if normalisation == "raw":
        return unicodedata.normalize("NFC", text)
    base = normalise_paper_base(text)
    if vocabulary is None:
        return base
    return _replace_rare(base, frozenset(vocabulary))
