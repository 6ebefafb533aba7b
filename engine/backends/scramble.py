"""Scrambled text as uncertain evidence, decoded by MAP inference (Dedieu et al. 2019, section 4.2.2).

A word's interior letters (all but the first and the last) are permuted; the first and last letters, spaces and
other characters stay in place. To decode, every interior position is given soft evidence that is uniform over the
multiset of the word's interior letters ("ltteers": positions 1..5 may be t with weight 2/5, e with 2/5, r with
1/5); every other character is certain. The decoding is the symbol sequence of the MAP clone path (Viterbi).

Two decoders:

* **unconstrained** (the paper's): plain Viterbi with that evidence. Each interior position picks any letter of
  the multiset, so a decoded interior need not be a permutation of the scrambled one ("ltteers" may come out as
  "letteer" if the model prefers it).
* **constrained**: the decoded interior of every word must be a permutation of its scrambled interior. This is an
  exact Viterbi search over an expanded lattice: at interior position k a node is (letter, multiset of the letters
  used at positions 0..k), and a node only follows nodes whose multiset is its own minus its letter, so every path
  through a word uses each interior letter exactly as often as the scrambled word does. The lattice of a word has
  one multiset per sub-multiset of its interior (prod(count + 1) of them, 2**L for L distinct letters), so words
  with more than ``max_subsets`` sub-multisets (default 256: up to eight distinct interior letters) are decoded
  unconstrained within the same Viterbi pass and counted in ``DecodeResult.relaxed_words``.

Words are maximal runs of letters (a-z after the paper's normalisation; any Unicode letter in "raw" text).
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections import Counter
from typing import Any, NamedTuple

import numpy as np

from engine.backends import engines
from engine.backends.cpu import inference
from engine.backends.cpu.inference import Evidence
from engine.corpora import text
from engine.errors import CHMMError
from engine.model.dense import CHMM

__all__ = [
    "DEFAULT_MAX_SUBSETS",
    "DecodeResult",
    "Restoration",
    "change_spans",
    "changed_positions",
    "decode_scrambled",
    "mark_changes",
    "normalise_for_decoding",
    "restoration",
    "scramble_evidence",
    "scramble_text",
    "word_spans",
]

WORD = re.compile(r"[^\W\d_]+")
"""A word: a maximal run of letters."""
DEFAULT_MAX_SUBSETS = 256


class DecodeResult(NamedTuple):
    """A decoded scrambled text.

    decoded: the decoded text (same length as ``scrambled``); changed: positions where it differs from
    ``scrambled``; log_probability: log max_z P(z, evidence) of the decoding in nats (-inf when the model gives the
    whole text probability zero; the words are then decoded one at a time, see :func:`decode_scrambled`);
    scrambled: the input after the model's normalisation (without rare-word replacement); relaxed_words: words
    decoded without the permutation constraint (constrained mode only: too many letters); unresolved_words: words
    the model gives probability zero even alone, left as given.
    """

    decoded: str
    changed: list[int]
    log_probability: float
    scrambled: str
    relaxed_words: int = 0
    unresolved_words: int = 0


# ------------------------------------------------------------------------------------------------ scrambling
def word_spans(s: str) -> list[tuple[int, int]]:
    """(start, stop) of every word (maximal run of letters) in ``s``."""
    return [m.span() for m in WORD.finditer(s)]


def scramble_text(s: str, rng: np.random.Generator) -> str:
    """``s`` with the interior letters of every word randomly permuted (first and last letters, spaces and
    other characters in place), as in the paper's experiment; words of up to three letters are unchanged."""
    chars = list(s)
    for start, stop in word_spans(s):
        if stop - start >= 4:
            interior = chars[start + 1 : stop - 1]
            chars[start + 1 : stop - 1] = [interior[i] for i in rng.permutation(len(interior))]
    return "".join(chars)


# ------------------------------------------------------------------------------------------------ evidence
def _symbol_indices(model: CHMM, s: str) -> np.ndarray:
    """Symbol indices of ``s``; a ValueError names the characters outside the model's alphabet."""
    index = model.symbol_index()
    unknown = sorted({c for c in s if c not in index})
    if unknown:
        shown = ", ".join(repr(c) for c in unknown[:10]) + (" ..." if len(unknown) > 10 else "")
        raise CHMMError(
            f"the text has {len(unknown)} character(s) outside the model's alphabet, which cannot be decoded: {shown}"
        )
    return np.fromiter((index[c] for c in s), dtype=np.int64, count=len(s))


def _interior_options(interior: str, index: dict[str, int]) -> dict[int, float]:
    """{symbol: count / length} over the letters of a word's interior."""
    counts = Counter(interior)
    return {index[c]: n / len(interior) for c, n in counts.items()}


def scramble_evidence(model: CHMM, scrambled: str) -> Evidence:
    """Soft evidence for decoding ``scrambled`` (already normalised text in the model's alphabet): each interior
    position of a word is uniform over the multiset of that word's interior letters (weight = count / interior
    length); first and last letters, spaces and other characters are certain (weight 1).

    Raises ValueError naming the characters that are not in the model's alphabet."""
    if not scrambled:
        raise CHMMError("there is no text to decode")
    x = _symbol_indices(model, scrambled)
    index = model.symbol_index()
    options: list[dict[int, float]] = [{int(s): 1.0} for s in x]
    for start, stop in word_spans(scrambled):
        if stop - start >= 4:
            interior_options = _interior_options(scrambled[start + 1 : stop - 1], index)
            for n in range(start + 1, stop - 1):
                options[n] = interior_options
    return Evidence.from_lists(options)


# ------------------------------------------------------------------------------------------------ marking changes
def changed_positions(original: str, decoded: str) -> list[int]:
    """Positions where ``decoded`` differs from ``original`` (strings of the same length)."""
    if len(original) != len(decoded):
        raise CHMMError(f"the texts differ in length ({len(original)} and {len(decoded)} characters)")
    return [n for n, (a, b) in enumerate(zip(original, decoded, strict=True)) if a != b]


def change_spans(original: str, decoded: str) -> list[tuple[int, int]]:
    """(start, stop) of every maximal run of positions where ``decoded`` differs from ``original``."""
    spans: list[tuple[int, int]] = []
    for n in changed_positions(original, decoded):
        if spans and spans[-1][1] == n:
            spans[-1] = (spans[-1][0], n + 1)
        else:
            spans.append((n, n + 1))
    return spans


class Restoration(NamedTuple):
    """How much of the text before scrambling a decoding gave back: words (maximal runs of letters of the
    original) restored exactly, and characters."""

    words_restored: int
    words: int
    characters_restored: int
    characters: int


def restoration(original: str, decoded: str) -> Restoration:
    """Word and character accuracy of ``decoded`` against ``original`` (the text before scrambling, normalised
    the same way, so of the same length), the paper's figures for section 4.2.2."""
    if len(original) != len(decoded):
        raise CHMMError(f"the texts differ in length ({len(original)} and {len(decoded)} characters)")
    spans = word_spans(original)
    return Restoration(
        words_restored=sum(original[a:b] == decoded[a:b] for a, b in spans),
        words=len(spans),
        characters_restored=len(original) - len(changed_positions(original, decoded)),
        characters=len(original),
    )


def mark_changes(original: str, decoded: str, left: str = "[", right: str = "]") -> str:
    """``decoded`` with every run of characters that differ from ``original`` wrapped in ``left`` ... ``right``:
    mark_changes("wrod", "word") == "w[or]d"."""
    pieces: list[str] = []
    previous = 0
    for start, stop in change_spans(original, decoded):
        pieces += [decoded[previous:start], left, decoded[start:stop], right]
        previous = stop
    pieces.append(decoded[previous:])
    return "".join(pieces)


# ------------------------------------------------------------------------------------------------ lattice Viterbi
class _Lattice:
    """Nodes (symbol, weight, allowed predecessors) position by position: the evidence of a lattice Viterbi pass
    (:func:`engine.backends.cpu.inference.viterbi` with ``predecessors``)."""

    def __init__(self) -> None:
        self.symbol: list[int] = []
        self.weight: list[float] = []
        self.preds: list[list[int]] = []
        self.ptr: list[int] = [0]
        self.last: list[int] = []  # node ids of the latest position

    def add_position(self, nodes: list[tuple[int, float, list[int] | None]]) -> list[int]:
        """Append a position; a node's predecessors None means every node of the previous position."""
        ids = []
        for symbol, weight, preds in nodes:
            ids.append(len(self.symbol))
            self.symbol.append(symbol)
            self.weight.append(weight)
            self.preds.append(self.last if preds is None else preds)
        self.ptr.append(len(self.symbol))
        self.last = ids
        return ids

    def add_constrained_interior(self, interior: str, index: dict[str, int]) -> None:
        """The positions of a word interior whose letters must be a permutation of ``interior``: node (letter a,
        multiset U used so far, a in U), following only the nodes (b, U - a)."""
        letters = sorted(set(interior))
        counts = [interior.count(a) for a in letters]
        length = len(interior)
        weights = [c / length for c in counts]
        keys = [(a, tuple(int(b == a) for b in range(len(letters)))) for a in range(len(letters))]
        ids = self.add_position([(index[letters[a]], weights[a], None) for a, _ in keys])
        level = dict(zip(keys, ids, strict=True))
        for _ in range(1, length):
            preds: dict[tuple[int, tuple[int, ...]], list[int]] = {}
            for (_b, used), node in level.items():
                for a in range(len(letters)):
                    if used[a] < counts[a]:
                        grown = used[:a] + (used[a] + 1,) + used[a + 1 :]
                        preds.setdefault((a, grown), []).append(node)
            keys = list(preds)
            ids = self.add_position([(index[letters[a]], weights[a], preds[(a, used)]) for a, used in keys])
            level = dict(zip(keys, ids, strict=True))

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The lattice as evidence (ptr, symbol, weight) and each node's predecessors (pred_ptr, pred_node)."""
        node_ptr = np.array(self.ptr, dtype=np.int64)
        node_symbol = np.array(self.symbol, dtype=np.int64)
        node_weight = np.array(self.weight, dtype=np.float64)
        sizes = np.array([len(p) for p in self.preds], dtype=np.int64)
        pred_ptr = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=pred_ptr[1:])
        pred_node = np.fromiter(itertools.chain.from_iterable(self.preds), dtype=np.int64, count=int(pred_ptr[-1]))
        return node_ptr, node_symbol, node_weight, pred_ptr, pred_node


def _sub_multisets(interior: str) -> int:
    """Number of sub-multisets of the interior's letters: prod(count + 1)."""
    return int(np.prod([n + 1 for n in Counter(interior).values()]))


def _constrained_viterbi(model: CHMM, scrambled: str, max_subsets: int) -> tuple[str | None, float, int]:
    """MAP decoding where each word interior is a permutation of the scrambled one (words with more than
    ``max_subsets`` sub-multisets unconstrained). Returns (decoded text or None if impossible, log P, relaxed)."""
    x = _symbol_indices(model, scrambled)
    index = model.symbol_index()
    lattice = _Lattice()
    relaxed = 0
    interiors = {start + 1: (start, stop) for start, stop in word_spans(scrambled) if stop - start >= 4}
    n = 0
    while n < len(x):
        if n in interiors:
            start, stop = interiors[n]
            interior = scrambled[start + 1 : stop - 1]
            if len(set(interior)) == 1 or _sub_multisets(interior) <= max_subsets:
                lattice.add_constrained_interior(interior, index)
            else:
                relaxed += 1
                options = _interior_options(interior, index)
                for _ in range(len(interior)):
                    lattice.add_position([(s, w, None) for s, w in sorted(options.items())])
            n = stop - 1
            continue
        lattice.add_position([(int(x[n]), 1.0, None)])
        n += 1
    node_ptr, node_symbol, node_weight, pred_ptr, pred_node = lattice.arrays()
    result = inference.viterbi(model, Evidence(node_ptr, node_symbol, node_weight), predecessors=(pred_ptr, pred_node))
    if not np.isfinite(result.log_probability):
        return None, -np.inf, relaxed
    return model.decode_symbols(result.symbols), result.log_probability, relaxed


def _unconstrained_viterbi(
    model: CHMM, scrambled: str, engine: engines.Engine, state: Any
) -> tuple[str | None, float, int]:
    result = engine.viterbi(state, scramble_evidence(model, scrambled))
    if not np.isfinite(result.log_probability):
        return None, -np.inf, 0
    return model.decode_symbols(result.symbols), result.log_probability, 0


# ------------------------------------------------------------------------------------------------ decoding
def normalise_for_decoding(model: CHMM, raw_text: str) -> str:
    """``raw_text`` normalised like the model's corpus but without rare-word replacement (a scrambled word is
    never in the vocabulary): the paper's character normalisation for "paper" models, NFC for "raw" ones."""
    normalisation = model.codec.normalisation
    if normalisation == "paper":
        return text.normalise_paper_base(raw_text)
    if normalisation == "raw":
        return unicodedata.normalize("NFC", raw_text)
    raise CHMMError(f"the model has an unknown normalisation {normalisation!r}")


def decode_scrambled(
    model: CHMM,
    scrambled_text: str,
    constrained: bool = False,
    max_subsets: int = DEFAULT_MAX_SUBSETS,
    backend: str = "cpu",
) -> DecodeResult:
    """Decode scrambled text by MAP inference under ``model`` (paper, section 4.2.2).

    The text is normalised with :func:`normalise_for_decoding`; each word interior becomes uniform evidence over
    its letters (:func:`scramble_evidence`) and the decoding is the symbols of the Viterbi path. Unconstrained
    (default, the paper's method): plain Viterbi with that evidence. ``constrained``: exact Viterbi over the
    permutation lattice described in the module docstring (words with more than ``max_subsets`` sub-multisets of
    interior letters decoded unconstrained, counted in ``relaxed_words``).

    If the model gives the whole text probability zero (a symbol pair it never saw), each word is decoded alone
    with one neighbouring character on each side (or without them if that is impossible too); a word that is
    impossible even alone is kept as given (``unresolved_words``), and ``log_probability`` is -inf.
    The unconstrained Viterbi runs on the implementation the registry picks for ``backend``; the permutation
    lattice runs on the host's dense blocks (the protocol's ``as_dense``).
    Raises ValueError for empty text or characters outside the model's alphabet."""
    if max_subsets < 1:
        raise CHMMError("max_subsets must be at least 1")
    scrambled = normalise_for_decoding(model, scrambled_text)
    if not scrambled:
        raise text.CorpusError("the text is empty after the model's normalisation")
    _symbol_indices(model, scrambled)  # a clear error before any work

    engine = engines.engine_for(model, backend)
    state = engine.load(model)
    dense = engine.as_dense(state, "constrained decoding") if constrained else None

    def run(s: str) -> tuple[str | None, float, int]:
        if dense is not None:
            return _constrained_viterbi(dense, s, max_subsets)
        return _unconstrained_viterbi(model, s, engine, state)

    decoded, log_probability, relaxed = run(scrambled)
    unresolved = 0
    if decoded is None:
        chars = list(scrambled)
        relaxed = 0
        for start, stop in word_spans(scrambled):
            if stop - start < 4:
                continue
            lo, hi = max(start - 1, 0), min(stop + 1, len(scrambled))
            for a, b in ((lo, hi), (start, stop)):
                piece, _, piece_relaxed = run(scrambled[a:b])
                if piece is not None:
                    chars[start:stop] = piece[start - a : stop - a]
                    relaxed += piece_relaxed
                    break
            else:
                unresolved += 1
        decoded = "".join(chars)
    return DecodeResult(decoded, changed_positions(scrambled, decoded), log_probability, scrambled, relaxed, unresolved)
