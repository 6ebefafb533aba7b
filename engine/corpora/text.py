"""Reading, normalising and splitting text corpora for character-level CHMMs.

The "paper" normalisation follows Dedieu et al. (2019), section 4.2: numbers are
written out as words, every character other than the 26 letters and the space is
removed (lowercased), words seen fewer than twice in the training part are replaced
by the word ``rare``, the first 90% is the training part and the rest the test part.
The "raw" normalisation keeps every character (Unicode NFC only).
"""

from __future__ import annotations

import hashlib
import operator
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from engine.corpora.numbers import numbers_to_words

__all__ = [
    "NORMALISATIONS",
    "PAPER_SYMBOLS",
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

MAX_CORPUS_BYTES = 200_000_000
"""The largest corpus read, per file and in all (bytes)."""
PAPER_SYMBOLS: list[str] = [" "] + list("abcdefghijklmnopqrstuvwxyz")
NORMALISATIONS: tuple[str, ...] = ("paper", "raw")
RARE_WORD = "rare"


class CorpusError(ValueError):
    """A problem with a user-supplied corpus or corpus parameter (one-sentence message)."""


# --------------------------------------------------------------------------- reading

# Control bytes that are fine in a text file: \t \n \v \f \r and 0x1A (DOS end-of-file).
_ALLOWED_CONTROL = frozenset({0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1A})
_CONTROL_BYTES = np.array([b for b in list(range(0x20)) + [0x7F] if b not in _ALLOWED_CONTROL], dtype=np.intp)
_MAX_CONTROL_SHARE = 0.01
_MAX_NUL_SHARE = 0.0001


def _looks_utf16(data: bytes) -> bool:
    """UTF-16 text without a byte-order mark: most ASCII characters come with a NUL in every second byte."""
    sample = data[:4096]
    if len(sample) < 8:
        return False
    even, odd = sample[0::2], sample[1::2]
    return max(even.count(0), odd.count(0)) > 0.6 * (len(sample) // 2)


def decode_bytes(data: bytes, name: str = "corpus", max_bytes: int = MAX_CORPUS_BYTES) -> str:
    """Decode a corpus file's bytes as UTF-8 text (BOM removed), rejecting non-text input.

    Raises CorpusError if the data is larger than ``max_bytes``, looks binary (NUL bytes beyond
    one in 10,000, or more than 1% control bytes other than tab, newline, CR, form feed, vertical
    tab and 0x1A), is not valid UTF-8, or is empty or whitespace-only.
    """
    size = len(data)
    if size > max_bytes:
        raise CorpusError(f"{name} is too large: {size:,} bytes, the limit is {max_bytes:,} bytes.")
    if size == 0:
        raise CorpusError(f"{name} is empty.")
    if data[:2] in (b"\xff\xfe", b"\xfe\xff") or _looks_utf16(data):
        raise CorpusError(f"{name} is UTF-16 text; save it as UTF-8 and try again.")
    counts = np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256)
    # A stray NUL is tolerated (the Calgary corpus's book1 has one); a binary file has many.
    if counts[0] > max(1, _MAX_NUL_SHARE * size):
        raise CorpusError(f"{name} looks like a binary file (it contains {int(counts[0]):,} NUL bytes).")
    n_control = int(counts[_CONTROL_BYTES].sum())
    if n_control > _MAX_CONTROL_SHARE * size:
        raise CorpusError(
            f"{name} looks like a binary file ({n_control / size:.1%} of its bytes are control characters)."
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusError(
            f"{name} is not valid UTF-8 text (first invalid byte 0x{data[exc.start]:02x} at byte offset {exc.start:,})."
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        raise CorpusError(f"{name} contains only whitespace.")
    return text


def corpus_fingerprint(corpus: str | Sequence[Any]) -> str:
    """SHA-256 of a corpus as a trainer is given it (one text, or documents with a ``text`` each, separated by a
    NUL), so that a model names its training text by content: the app finds it again in an upload of the same
    file, whatever the file was called or where it lay."""
    digest = hashlib.sha256()
    if isinstance(corpus, str):
        digest.update(corpus.encode("utf-8", "surrogatepass"))
    else:
        for number, document in enumerate(corpus):
            digest.update(b"\x00" if number else b"")
            digest.update(str(getattr(document, "text", document)).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def read_text(path: str | os.PathLike[str], max_bytes: int = MAX_CORPUS_BYTES) -> str:
    """Read a corpus file and return its decoded text (see ``decode_bytes`` for the checks)."""
    p = Path(path)
    name = p.name or str(p)
    if not p.exists():
        raise CorpusError(f"Corpus file {name} was not found ({p}).")
    if p.is_dir():
        raise CorpusError(f"{name} is a directory, not a text file.")
    if not p.is_file():  # a device (/dev/zero) or a pipe would be read without end
        raise CorpusError(f"{name} is not a regular file (a device or a pipe); save the text to a file first.")
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise CorpusError(f"{name} is too large: {size:,} bytes, the limit is {max_bytes:,} bytes.")
        with p.open("rb") as handle:
            data = handle.read(max_bytes + 1)  # bounded even if the file grows while it is read
        if len(data) > max_bytes:
            raise CorpusError(f"{name} is too large: over {max_bytes:,} bytes, the limit.")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise CorpusError(f"{name} cannot be read ({reason}).") from None
    return decode_bytes(data, name=name, max_bytes=max_bytes)


# --------------------------------------------------------------------------- normalisation

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
        return self.train_text + self.validation_text

    def encode(self, text: str) -> np.ndarray:
        """Map each character of ``text`` to its symbol index (int64 array).

        Raises CorpusError listing up to 10 characters that are not in ``symbols``.
        """
        if not text:
            return np.zeros(0, dtype=np.int64)
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
        """Map symbol indices back to text."""
        return "".join(self.symbols[int(i)] for i in np.asarray(indices).ravel())


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
    """
    if not isinstance(text, str):
        documents = list(text)
        if len(documents) == 1:
            text = documents[0].text
        else:
            return _prepare_documents(
                documents, normalisation, test_fraction, validation, max_train, name, fixed_alphabet
            )
    _check_arguments(normalisation, test_fraction, validation, max_train)
    paper = normalisation == "paper"
    norm = _normalise(text, paper)
    if not norm.strip():
        raise CorpusError(f"{name} is empty after {normalisation} normalisation ({_empty_because(paper)}).")
    distinct = set(norm)
    if len(distinct) < 2:
        raise CorpusError(
            f"{name} contains only the symbol {next(iter(distinct))!r} after {normalisation} "
            "normalisation; a CHMM needs at least two distinct symbols."
        )
    if test_fraction > 0:
        train_part, test_part = _cut(norm, int((1.0 - test_fraction) * len(norm)), at_space=paper)
    else:
        train_part, test_part = norm, ""
    if max_train is not None:
        train_part = _cap(train_part, max_train, at_space=paper)
    symbols, vocabulary = _alphabet([train_part], paper, fixed_alphabet, name)
    [(train_part, test_part)] = _in_alphabet([(train_part, test_part)], paper, symbols, vocabulary)
    _check_two_symbols([train_part], name)
    if validation > 0:
        train_text, validation_text = _cut(
            train_part, int((1.0 - validation) * len(train_part)), at_space=paper, keep_space=True
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
    return _encoded_corpus(normalisation, symbols, vocabulary, [(train_text, validation_text, test_part)], [name])


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


def _check_two_symbols(train_parts: list[str], name: str) -> None:
    if len(set("".join(train_parts))) < 2:
        raise CorpusError(
            f"The training part of {name} has fewer than two distinct symbols; "
            "a CHMM needs at least two distinct symbols."
        )


def _encoded_corpus(
    normalisation: str,
    symbols: list[str],
    vocabulary: list[str] | None,
    split_texts: list[tuple[str, str, str]],
    names: list[str],
    several: bool = False,
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
        train_text="".join(t for t, _, _ in split_texts),
        validation_text="".join(v for _, v, _ in split_texts),
        test_text="".join(x for _, _, x in split_texts),
        documents=names,
        split_texts=split_texts if several else None,
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
) -> Corpus:
    """:func:`prepare_corpus` for two or more documents (the rule is in its docstring)."""
    _check_arguments(normalisation, test_fraction, validation, max_train)
    if not documents:
        raise CorpusError(f"{name} has no documents.")
    paper = normalisation == "paper"
    names, splits = [], []
    room = max_train
    for document in documents:
        norm = _normalise(document.text, paper)
        if not norm.strip():
            continue
        train_part, test_part = norm, ""
        if test_fraction > 0:
            head, tail = _cut(norm, int((1.0 - test_fraction) * len(norm)), at_space=paper)
            if len(head) >= 2 and len(tail) >= 2:
                train_part, test_part = head, tail
        if room is not None:
            train_part = _cap(train_part, room, at_space=paper) if room >= 2 else ""
            room -= len(train_part)
        names.append(str(document.name))
        splits.append((train_part, test_part))
    if not splits:
        raise CorpusError(f"{name} is empty after {normalisation} normalisation ({_empty_because(paper)}).")
    symbols, vocabulary = _alphabet([t for t, _ in splits], paper, fixed_alphabet, name)
    splits = _in_alphabet(splits, paper, symbols, vocabulary)
    _check_two_symbols([t for t, _ in splits], name)
    split_texts = []
    for train_part, test_part in splits:
        train_text, validation_text = train_part, ""
        if validation > 0 and train_part:
            head, tail = _cut(train_part, int((1.0 - validation) * len(train_part)), at_space=paper, keep_space=True)
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
    return _encoded_corpus(normalisation, symbols, vocabulary, split_texts, names, several=True)


def placeholder_share(normalised_text: str) -> float:
    """The share of the placeholder ``rare`` among the words of an already normalised text."""
    words = [w for w in normalised_text.split(" ") if w]
    return sum(1 for w in words if w == RARE_WORD) / len(words) if words else 0.0
