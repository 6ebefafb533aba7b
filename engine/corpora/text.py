"""Reading, normalising and splitting text corpora for CHMMs, whose symbols are characters, words or tokens.

The "paper" normalisation follows Dedieu et al. (2019), section 4.2: numbers are
written out as words, every character other than the 26 letters and the space is
removed (lowercased), words seen fewer than twice in the training part are replaced
by the word ``rare``, the first 90% is the training part and the rest the test part.
The "raw" normalisation keeps every character (Unicode NFC only).

The unit says what one symbol is (:data:`UNITS`): a character (either normalisation above), a word (the paper's
normalisation at word level: lowercase words, numbers written out, words seen fewer than ``min_count`` times in the
training part become the one symbol ``<rare>``), or a whitespace-separated token as given (the same rare rule). A
text of words or tokens is held as its symbols joined by single spaces, so the cuts below fall between symbols.
"""

from __future__ import annotations

import operator
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from engine.corpora.normalising import (  # noqa: F401 (text.apply_normalisation and the others, as before)
    NORMALISATIONS,
    RARE_WORD,
    _check_normalisation,
    _replace_rare,
    apply_normalisation,
    normalise_paper_base,
)
from engine.corpora.numbers import numbers_to_words
from engine.corpora.reading import (  # noqa: F401 (text.read_text and the others, as before)
    MAX_CORPUS_BYTES,
    CorpusError,
    corpus_fingerprint,
    decode_bytes,
    read_text,
)

__all__ = [
    "MIN_COUNT",
    "NORMALISATIONS",
    "PAPER_SYMBOLS",
    "RARE_TOKEN",
    "UNITS",
    "Corpus",
    "CorpusError",
    "apply_normalisation",
    "decode_bytes",
    "normalise_characters",
    "normalise_paper_base",
    "numbers_to_words",
    "prepare_corpus",
    "read_text",
]

PAPER_SYMBOLS: list[str] = [" "] + list("abcdefghijklmnopqrstuvwxyz")
UNITS: tuple[str, ...] = ("characters", "words", "tokens")
"""What one symbol of a model is; the first is the default."""
UNIT_NORMALISATION = {"words": "paper", "tokens": "raw"}
"""The normalisation a unit other than characters implies (words: the paper's, at word level; tokens: as given)."""
MIN_COUNT = 2
"""Words and tokens seen fewer times than this in the training part become :data:`RARE_TOKEN` (the paper's rule)."""
MAX_SYMBOLS = 200_000
"""The largest vocabulary of words or tokens read (each symbol needs a clone, the search a few states more per
frequent one; 50,000 is the scale this round aims at): past it, a corpus is refused with the advice to raise the
minimum count."""
RARE_TOKEN = "<rare>"
"""The one symbol of every word or token under the minimum count (and of those never seen in training)."""


# --------------------------------------------------------------------------- corpus


def _describe_chars(chars: list[str], limit: int = 10) -> str:
    """Comma-separated repr of up to ``limit`` characters, with a count of the rest."""
    shown = ", ".join(repr(c) for c in chars[:limit])
    if len(chars) > limit:
        shown += f" and {len(chars) - limit} more"
    return shown


@dataclass(eq=False)
class Corpus:
    """A normalised corpus split into training, validation and test parts.

    ``train`` and ``validation`` together form the paper's training set (``validation`` is
    its last share, used for early stopping); ``test`` is held out. Arrays hold int64
    indices into ``symbols``; the ``*_text`` fields are the same parts as strings.

    A corpus of several documents keeps each document's parts apart: ``train_parts``,
    ``validation_parts``, ``test_parts`` and ``train_full_parts`` are lists of independent
    sequences (one per document that has the part; never an empty one), which training
    and scoring use. ``train``, ``validation``, ``test`` and the texts are then the parts
    joined (for sizes and previews only). ``documents`` names the documents.
    """

    normalisation: str
    symbols: list[str]
    vocabulary: list[str] | None
    train: np.ndarray
    validation: np.ndarray
    test: np.ndarray
    train_text: str
    validation_text: str
    test_text: str
    documents: list[str] = field(default_factory=list)
    split_texts: list[tuple[str, str, str]] | None = None  # per document (train, validation, test); None: one
    unit: str = UNITS[0]

    def _parts(self, which: int) -> list[np.ndarray]:
        if self.split_texts is None:
            whole = (self.train, self.validation, self.test)[which]
            return [whole] if len(whole) else []
        return [self.encode(parts[which]) for parts in self.split_texts if parts[which]]

    @cached_property
    def train_parts(self) -> list[np.ndarray]:
        """The training part of every document (independent sequences)."""
        return self._parts(0)

    @cached_property
    def validation_parts(self) -> list[np.ndarray]:
        """The validation part of every document that has one."""
        return self._parts(1)

    @cached_property
    def test_parts(self) -> list[np.ndarray]:
        """The test part of every document that has one."""
        return self._parts(2)

    @cached_property
    def train_full_parts(self) -> list[np.ndarray]:
        """Each document's whole training part (its train text followed by its validation text, contiguous)."""
        if self.split_texts is None:
            return [self.train_full]
        return [self.encode(t + v) for t, v, _ in self.split_texts if t + v]

    def __post_init__(self) -> None:
        if self.unit != UNITS[0]:
            if any(not s or len(s.split()) != 1 or s.strip() != s for s in self.symbols):
                raise CorpusError(f"Corpus symbols of unit {self.unit} must be non-empty and without whitespace.")
            self._index = {s: i for i, s in enumerate(self.symbols)}
            if len(self._index) != len(self.symbols):
                raise CorpusError("Corpus symbols must be distinct.")
            return
        if any(len(s) != 1 for s in self.symbols) or len(set(self.symbols)) != len(self.symbols):
            raise CorpusError("Corpus symbols must be distinct single characters.")
        codes = np.array([ord(s) for s in self.symbols], dtype=np.int64)
        self._order = np.argsort(codes, kind="stable")
        self._codes = codes[self._order]

    @property
    def n_symbols(self) -> int:
        """Number of symbols in the alphabet."""
        return len(self.symbols)

    @property
    def train_full(self) -> np.ndarray:
        """The whole training part (train followed by validation), on which the paper retrains."""
        return np.concatenate([self.train, self.validation]).astype(np.int64)

    @property
    def train_full_text(self) -> str:
        """The whole training part as text (train followed by validation)."""
        return _join_parts([self.train_text, self.validation_text], self.unit)

    def encode(self, text: str) -> np.ndarray:
        """Map each character of ``text`` to its symbol index (int64 array).

        Raises CorpusError listing up to 10 characters that are not in ``symbols``. A text of words or tokens is
        read as its space-separated symbols.
        """
        if not text:
            return np.zeros(0, dtype=np.int64)
        if self.unit != UNITS[0]:
            return encode_symbols(text.split(" "), self._index, self.unit)
        points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
        pos = np.searchsorted(self._codes, points)
        pos_clipped = np.minimum(pos, len(self._codes) - 1)
        known = self._codes[pos_clipped] == points
        if not known.all():
            unknown = [chr(int(c)) for c in np.unique(points[~known])]
            raise CorpusError(
                f"The text contains {len(unknown)} character(s) not in the corpus alphabet: {_describe_chars(unknown)}."
            )
        return self._order[pos_clipped].astype(np.int64)

    def decode(self, indices: np.ndarray) -> str:
        """Map symbol indices back to text (words and tokens joined by spaces)."""
        return join_symbols([self.symbols[int(i)] for i in np.asarray(indices).ravel()], self.unit)


def _join_parts(parts: list[str], unit: str) -> str:
    """Parts of a text joined as the corpus joins them: characters side by side, words and tokens with one space."""
    if unit == UNITS[0]:
        return "".join(parts)
    return " ".join(p.strip(" ") for p in parts if p.strip(" "))


def join_symbols(symbols: list[str], unit: str) -> str:
    """Symbols as text: characters side by side, words and tokens separated by single spaces."""
    return "".join(symbols) if unit == UNITS[0] else " ".join(symbols)


def encode_symbols(tokens: Sequence[str], index: dict[str, int], unit: str) -> np.ndarray:
    """The indices of ``tokens`` (empty strings skipped) in ``index``; CorpusError listing the unknown ones."""
    tokens = [t for t in tokens if t]
    unknown = sorted({t for t in tokens if t not in index})
    if unknown:
        raise CorpusError(
            f"The text contains {len(unknown)} {unit} not in the corpus alphabet: {_describe_chars(unknown)}."
        )
    return np.fromiter((index[t] for t in tokens), dtype=np.int64, count=len(tokens))


def _cut(text: str, position: int, at_space: bool, keep_space: bool = False) -> tuple[str, str]:
    """Split ``text`` near ``position``.

    With ``at_space`` the cut is at the space nearest to ``position``; that space is dropped
    (both parts start and end with a word) unless ``keep_space``, which leaves it at the end
    of the first part so that the two parts concatenate back to ``text``. Without a space,
    or without ``at_space``, the cut is exactly at ``position``.
    """
    position = min(max(position, 0), len(text))
    if at_space and 0 < position < len(text):
        left = text.rfind(" ", 0, position + 1)
        right = text.find(" ", position)
        candidates = [i for i in (left, right) if i >= 0]
        if candidates:
            i = min(candidates, key=lambda j: (abs(j - position), j))
            return text[: i + int(keep_space)], text[i + 1 :]
    return text[:position], text[position:]


def _cap(text: str, max_chars: int, at_space: bool) -> str:
    """The longest prefix of ``text`` of at most ``max_chars`` characters (ending at a word for paper)."""
    if len(text) <= max_chars:
        return text
    if at_space:
        i = text.rfind(" ", 0, max_chars + 1)
        if i > 0:
            return text[:i]
    return text[:max_chars]


def _is_integer(value: object) -> bool:
    """True for Python and NumPy integers."""
    try:
        operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


def _check_fraction(value: float, what: str) -> None:
    """Raise CorpusError unless 0 <= value <= 0.5."""
    try:
        ok = 0.0 <= float(value) <= 0.5
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise CorpusError(f"{what} must be between 0 and 0.5, got {value!r}.")


def prepare_corpus(
    text: str | Sequence[Any],
    normalisation: str = "paper",
    test_fraction: float = 0.1,
    validation: float = 0.1,
    max_train: int | None = None,
    name: str = "corpus",
    fixed_alphabet: tuple[list[str], list[str] | None] | None = None,
    unit: str = UNITS[0],
    min_count: int = MIN_COUNT,
    by_sequence: bool = False,
) -> Corpus:
    """Normalise ``text`` (one string, or a list of documents with ``name`` and ``text``) and split it as in the
    paper.

    The first (1 - test_fraction) of the normalised characters is the training part, the
    rest the test part (for "paper" the cut is at the nearest space, which is dropped).
    ``max_train`` caps the training part only. For "paper" the vocabulary is the sorted
    list of words seen at least twice in the training part, and other words become
    "rare" in both parts. The last ``validation`` share of the training part is the
    validation part. For "raw" the alphabet is the training part's distinct characters;
    characters that occur only in the test part are removed from it.

    ``fixed_alphabet`` = (symbols, vocabulary) of an existing model (continued training): the
    corpus is then encoded with them instead of deriving its own; "raw" text whose training part has a
    character outside those symbols raises CorpusError (the test part drops such characters, as above).

    Several documents (a list of two or more) are split each in the same way: the last ``test_fraction``
    of every document is test text and the last ``validation`` share of every document's training part
    is validation text, so every part keeps each document's text apart (``Corpus.train_parts`` and the
    others). The vocabulary comes from all training parts together ("paper"), the alphabet from their
    characters ("raw"); ``max_train`` caps the training symbols of all documents together, in order (a
    document past the cap keeps only its test part). A document too short to give a part of at least two
    symbols gives none: it is all training text, or, for its validation share, all train text; a
    document empty after normalisation is left out. A list of one document is that document's text.

    ``unit`` (:data:`UNITS`) says what a symbol is; words and tokens under ``min_count`` in the training part become
    :data:`RARE_TOKEN`, and the cuts fall between them. ``by_sequence``: the documents are many short sequences
    (lines, cases, sentences), split whole: the last ``test_fraction`` of them is the test part and the last
    ``validation`` share of the rest the validation part (:func:`_split_by_sequence`).
    """
    unit, normalisation = _check_unit(unit, normalisation, min_count)
    if not isinstance(text, str):
        documents = list(text)
        if by_sequence:
            _check_arguments(normalisation, test_fraction, validation, max_train)
            return _split_by_sequence(
                documents, normalisation, unit, min_count, test_fraction, validation, max_train, name, fixed_alphabet
            )
        if len(documents) == 1:
            text = documents[0].text
        else:
            return _prepare_documents(
                documents, normalisation, test_fraction, validation, max_train, name, fixed_alphabet, unit, min_count
            )
    _check_arguments(normalisation, test_fraction, validation, max_train)
    shares = (test_fraction, validation, max_train)
    return _prepare_text(text, normalisation, unit, min_count, *shares, name, fixed_alphabet)


def _prepare_text(
    text: str,
    normalisation: str,
    unit: str,
    min_count: int,
    test_fraction: float,
    validation: float,
    max_train: int | None,
    name: str,
    fixed_alphabet: tuple[list[str], list[str] | None] | None,
) -> Corpus:
    """:func:`prepare_corpus` of one text (the rule is in its docstring)."""
    paper = normalisation == "paper"
    spaced = paper or unit != UNITS[0]
    norm = normalise_unit(text, normalisation, unit)
    if not norm.strip():
        raise CorpusError(f"{name} is empty after {normalisation} normalisation ({_empty_because(paper)}).")
    distinct = set(symbols_of(norm, unit))
    if len(distinct) < 2:
        raise CorpusError(
            f"{name} contains only the symbol {next(iter(distinct))!r} after {normalisation} "
            "normalisation; a CHMM needs at least two distinct symbols."
        )
    if test_fraction > 0:
        train_part, test_part = _cut(norm, int((1.0 - test_fraction) * len(norm)), at_space=spaced)
    else:
        train_part, test_part = norm, ""
    if max_train is not None:
        train_part = _cap(train_part, max_train, at_space=spaced)
    symbols, vocabulary = alphabet_of([train_part], normalisation, unit, min_count, fixed_alphabet, name)
    [(train_part, test_part)] = in_alphabet([(train_part, test_part)], normalisation, unit, symbols, vocabulary)
    check_two_symbols([train_part], name, unit)
    if validation > 0:
        train_text, validation_text = _cut(
            train_part, int((1.0 - validation) * len(train_part)), at_space=spaced, keep_space=True
        )
    else:
        train_text, validation_text = train_part, ""
    if len(train_text) < 2:
        raise CorpusError(
            f"The training part of {name} is too short: {len(train_text)} symbol(s) after removing "
            "the validation part, at least 2 are needed."
        )
    if validation > 0 and len(validation_text) < 2:
        raise CorpusError(
            f"The training part of {name} ({len(train_part)} symbols) is too short for a validation "
            f"share of {validation:g}."
        )
    if test_fraction > 0 and len(test_part) < 2:
        raise CorpusError(f"{name} ({len(norm)} symbols) is too short for a test share of {test_fraction:g}.")
    return encoded_corpus(
        normalisation, symbols, vocabulary, [(train_text, validation_text, test_part)], [name], unit=unit
    )


def _check_unit(unit: str, normalisation: str, min_count: int) -> tuple[str, str]:
    """The unit and the normalisation it reads with (a unit other than characters implies its own), or one
    CorpusError sentence for an unknown unit or a minimum count below 1."""
    if unit not in UNITS:
        raise CorpusError(f"Unknown unit {unit!r}; choose one of {', '.join(UNITS)}.")
    if isinstance(min_count, bool) or not _is_integer(min_count) or min_count < 1:
        raise CorpusError(f"The minimum count must be an integer of at least 1, got {min_count!r}.")
    return unit, UNIT_NORMALISATION.get(unit, normalisation)


def symbols_of(norm: str, unit: str) -> list[str]:
    """The symbols of a normalised text: its characters, or its space-separated words or tokens."""
    return list(norm) if unit == UNITS[0] else [t for t in norm.split(" ") if t]


def normalise_unit(raw: str, normalisation: str, unit: str) -> str:
    """``raw`` normalised for ``unit`` without the rare-word rule: characters by ``normalisation``; words by the
    paper's normalisation (lowercase words, numbers written out, one space between words); tokens as given, one
    space between them (every run of whitespace is one separator)."""
    if unit == "tokens":
        return " ".join(unicodedata.normalize("NFC", raw).split())
    return _normalise(raw, normalisation == "paper" or unit == "words")


def _check_arguments(normalisation: str, test_fraction: float, validation: float, max_train: int | None) -> None:
    """One clear error for a bad normalisation, share or training cap."""
    _check_normalisation(normalisation)
    _check_fraction(test_fraction, "test_fraction")
    _check_fraction(validation, "validation")
    if max_train is not None and (isinstance(max_train, bool) or not _is_integer(max_train) or max_train < 2):
        raise CorpusError(f"max_train must be an integer of at least 2, got {max_train!r}.")


def _normalise(raw: str, paper: bool) -> str:
    """The paper's character normalisation (before the rare-word replacement), or NFC for "raw"."""
    return normalise_paper_base(raw) if paper else unicodedata.normalize("NFC", raw)


def normalise_characters(raw: str, normalisation: str) -> str:
    """``raw`` normalised character by character as ``normalisation`` does, every word kept (no rare-word
    replacement): the whole text's words, as a reference of what a text holds."""
    _check_normalisation(normalisation)
    return _normalise(raw, normalisation == "paper")


def _empty_because(paper: bool) -> str:
    return "no letters a-z left" if paper else "only whitespace"


def alphabet_of(
    train_parts: list[str],
    normalisation: str,
    unit: str,
    min_count: int,
    fixed_alphabet: tuple[list[str], list[str] | None] | None,
    name: str,
) -> tuple[list[str], list[str] | None]:
    """The symbols and the vocabulary of a corpus from its training parts (:func:`_alphabet` for characters); for
    words and tokens, the vocabulary is the sorted words seen at least ``min_count`` times and the symbols are it and
    :data:`RARE_TOKEN` (an existing model's when ``fixed_alphabet`` is given)."""
    if unit == UNITS[0]:
        return _alphabet(train_parts, normalisation == "paper", fixed_alphabet, name)
    if fixed_alphabet is not None:
        return list(fixed_alphabet[0]), fixed_alphabet[1]
    counts: Counter[str] = Counter()
    for part in train_parts:
        counts.update(symbols_of(part, unit))
    vocabulary = sorted(w for w, c in counts.items() if c >= min_count)
    if len(vocabulary) >= MAX_SYMBOLS:
        raise CorpusError(
            f"{name} has {len(vocabulary):,} distinct {unit} seen at least {min_count} time(s), more than the "
            f"{MAX_SYMBOLS:,} a model takes; raise the minimum count (--min-count)."
        )
    return vocabulary + [RARE_TOKEN], vocabulary


def in_alphabet(
    splits: list[tuple[str, str]], normalisation: str, unit: str, symbols: list[str], vocabulary: list[str] | None
) -> list[tuple[str, str]]:
    """:func:`_in_alphabet` for any unit: words and tokens outside the vocabulary become :data:`RARE_TOKEN`."""
    if unit == UNITS[0]:
        return _in_alphabet(splits, normalisation == "paper", symbols, vocabulary)
    known = frozenset(vocabulary or [])

    def rare(part: str) -> str:
        return " ".join(t if t in known else RARE_TOKEN for t in symbols_of(part, unit))

    return [(rare(t), rare(x)) for t, x in splits]


def check_two_symbols(train_parts: list[str], name: str, unit: str = UNITS[0]) -> None:
    """One CorpusError sentence unless the training parts hold at least two distinct symbols."""
    if len({s for part in train_parts for s in symbols_of(part, unit)}) < 2:
        raise CorpusError(
            f"The training part of {name} has fewer than two distinct symbols; "
            "a CHMM needs at least two distinct symbols."
        )


def _alphabet(
    train_parts: list[str], paper: bool, fixed_alphabet: tuple[list[str], list[str] | None] | None, name: str
) -> tuple[list[str], list[str] | None]:
    """The symbols and the vocabulary: an existing model's (``fixed_alphabet``; "raw" training text with a character
    outside its symbols is refused), or for "paper" the letters and space with the words seen at least twice in the
    training parts together, for "raw" the training parts' distinct characters."""
    if fixed_alphabet is not None:
        symbols, vocabulary = list(fixed_alphabet[0]), fixed_alphabet[1]
        if not paper:
            unknown = sorted(set("".join(train_parts)) - set(symbols))
            if unknown:
                raise CorpusError(f"{name} has characters outside the model's alphabet: {_describe_chars(unknown)}.")
        return symbols, vocabulary
    if paper:
        counts: Counter[str] = Counter()
        for part in train_parts:
            if part:
                counts.update(part.split(" "))
        return list(PAPER_SYMBOLS), sorted(w for w, c in counts.items() if c >= 2)
    return sorted(set("".join(train_parts))), None


def _in_alphabet(
    splits: list[tuple[str, str]], paper: bool, symbols: list[str], vocabulary: list[str] | None
) -> list[tuple[str, str]]:
    """(training part, test part) pairs read in the alphabet: "paper" words outside the vocabulary become "rare" in
    both; "raw" test characters outside the symbols are removed (the training part holds only symbols already)."""
    if paper:
        vocab_set = frozenset(vocabulary or [])
        return [(_replace_rare(t, vocab_set), _replace_rare(x, vocab_set)) for t, x in splits]
    known = set(symbols)
    return [(t, "".join(c for c in x if c in known)) for t, x in splits]


def encoded_corpus(
    normalisation: str,
    symbols: list[str],
    vocabulary: list[str] | None,
    split_texts: list[tuple[str, str, str]],
    names: list[str],
    several: bool = False,
    unit: str = UNITS[0],
) -> Corpus:
    """The corpus of (training, validation, test) texts per document, encoded with ``symbols``; ``several`` keeps
    the documents apart (a corpus given as several documents)."""
    corpus = Corpus(
        normalisation=normalisation,
        symbols=symbols,
        vocabulary=vocabulary,
        train=np.zeros(0, dtype=np.int64),
        validation=np.zeros(0, dtype=np.int64),
        test=np.zeros(0, dtype=np.int64),
        train_text=_join_parts([t for t, _, _ in split_texts], unit),
        validation_text=_join_parts([v for _, v, _ in split_texts], unit),
        test_text=_join_parts([x for _, _, x in split_texts], unit),
        documents=names,
        split_texts=split_texts if several else None,
        unit=unit,
    )
    corpus.train = corpus.encode(corpus.train_text)
    corpus.validation = corpus.encode(corpus.validation_text)
    corpus.test = corpus.encode(corpus.test_text)
    return corpus


def _prepare_documents(
    documents: list[Any],
    normalisation: str,
    test_fraction: float,
    validation: float,
    max_train: int | None,
    name: str,
    fixed_alphabet: tuple[list[str], list[str] | None] | None,
    unit: str = UNITS[0],
    min_count: int = MIN_COUNT,
) -> Corpus:
    """:func:`prepare_corpus` for two or more documents (the rule is in its docstring)."""
    _check_arguments(normalisation, test_fraction, validation, max_train)
    if not documents:
        raise CorpusError(f"{name} has no documents.")
    paper = normalisation == "paper"
    spaced = paper or unit != UNITS[0]
    names, splits = [], []
    room = max_train
    for document in documents:
        norm = normalise_unit(document.text, normalisation, unit)
        if not norm.strip():
            continue
        train_part, test_part = norm, ""
        if test_fraction > 0:
            head, tail = _cut(norm, int((1.0 - test_fraction) * len(norm)), at_space=spaced)
            if len(head) >= 2 and len(tail) >= 2:
                train_part, test_part = head, tail
        if room is not None:
            train_part = _cap(train_part, room, at_space=spaced) if room >= 2 else ""
            room -= len(train_part)
        names.append(str(document.name))
        splits.append((train_part, test_part))
    if not splits:
        raise CorpusError(f"{name} is empty after {normalisation} normalisation ({_empty_because(paper)}).")
    symbols, vocabulary = alphabet_of([t for t, _ in splits], normalisation, unit, min_count, fixed_alphabet, name)
    splits = in_alphabet(splits, normalisation, unit, symbols, vocabulary)
    check_two_symbols([t for t, _ in splits], name, unit)
    split_texts = []
    for train_part, test_part in splits:
        train_text, validation_text = train_part, ""
        if validation > 0 and train_part:
            head, tail = _cut(train_part, int((1.0 - validation) * len(train_part)), at_space=spaced, keep_space=True)
            if len(head) >= 2 and len(tail) >= 2:
                train_text, validation_text = head, tail
        split_texts.append((train_text, validation_text, test_part if len(test_part) >= 2 else ""))
    total_train = sum(len(t) for t, _, _ in split_texts)
    if total_train < 2:
        raise CorpusError(f"The training part of {name} is too short: {total_train} symbol(s), at least 2 are needed.")
    if validation > 0 and not any(v for _, v, _ in split_texts):
        raise CorpusError(f"The documents of {name} are too short for a validation share of {validation:g}.")
    if test_fraction > 0 and not any(x for _, _, x in split_texts):
        raise CorpusError(f"The documents of {name} are too short for a test share of {test_fraction:g}.")
    return encoded_corpus(normalisation, symbols, vocabulary, split_texts, names, several=True, unit=unit)


def placeholder_share(normalised_text: str, unit: str = UNITS[0]) -> float:
    """The share of the placeholder (``rare``; :data:`RARE_TOKEN` for words and tokens) among the words of an
    already normalised text."""
    words = [w for w in normalised_text.split(" ") if w]
    placeholder = RARE_WORD if unit == UNITS[0] else RARE_TOKEN
    return sum(1 for w in words if w == placeholder) / len(words) if words else 0.0


def _counts(n: int, test_fraction: float, validation: float, name: str) -> tuple[int, int]:
    """How many of ``n`` sequences are test and validation sequences (at least one of each share above 0), or a
    CorpusError when no training sequence would be left."""
    n_test = max(1, round(test_fraction * n)) if test_fraction > 0 else 0
    n_validation = max(1, round(validation * (n - n_test))) if validation > 0 else 0
    if n - n_test - n_validation < 1:
        raise CorpusError(
            f"{name} has {n} sequence(s), too few to keep a test share of {test_fraction:g} and a validation share "
            f"of {validation:g} of them apart; give more sequences or smaller shares."
        )
    return n_test, n_validation


def _split_by_sequence(
    documents: list[Any],
    normalisation: str,
    unit: str,
    min_count: int,
    test_fraction: float,
    validation: float,
    max_train: int | None,
    name: str,
    fixed_alphabet: tuple[list[str], list[str] | None] | None,
) -> Corpus:
    """A corpus of many short sequences split whole: the last ``test_fraction`` of the (non-empty) sequences is
    the test part, the last ``validation`` share of the others the validation part, the rest the training part
    (``max_train``: training symbols kept, whole sequences in order). The vocabulary comes from the training and
    validation sequences, as :func:`engine.corpora.text.prepare_corpus` takes it from the training part."""
    normalised = [(str(d.name), normalise_unit(d.text, normalisation, unit)) for d in documents]
    normalised = [(n, t) for n, t in normalised if t.strip()]
    if not normalised:
        raise CorpusError(f"{name} is empty after {normalisation} normalisation.")
    n_test, n_validation = _counts(len(normalised), test_fraction, validation, name)
    n_fit = len(normalised) - n_test
    fit, tests = normalised[:n_fit], normalised[n_fit:]
    train, held = fit[: n_fit - n_validation], fit[n_fit - n_validation :]
    if max_train is not None:
        kept, room = [], max_train
        for sequence_name, sequence in train:
            size = len(symbols_of(sequence, unit))
            if size > room:
                break
            kept.append((sequence_name, sequence))
            room -= size
        train = kept or train[:1]
    parts = [t for _, t in train] + [t for _, t in held]
    symbols, vocabulary = alphabet_of(parts, normalisation, unit, min_count, fixed_alphabet, name)
    splits = in_alphabet([(t, x) for t, x in zip(parts, [""] * len(parts), strict=True)] +
                                  [("", t) for _, t in tests], normalisation, unit, symbols, vocabulary)
    check_two_symbols([t for t, _ in splits[: len(train)]], name, unit)
    split_texts = (
        [(t, "", "") for t, _ in splits[: len(train)]]
        + [("", t, "") for t, _ in splits[len(train) : len(parts)]]
        + [("", "", x) for _, x in splits[len(parts) :]]
    )
    names = [n for n, _ in train] + [n for n, _ in held] + [n for n, _ in tests]
    return encoded_corpus(normalisation, symbols, vocabulary, split_texts, names, several=True, unit=unit)
