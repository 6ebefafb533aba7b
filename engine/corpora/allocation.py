"""Allocation of a CHMM's hidden states (clones) to the symbols of its alphabet.

Every symbol gets one clone; the remaining states are shared out in proportion to a
per-symbol weight with the largest-remainder method, so the counts always sum exactly
to the requested total. The paper (Dedieu et al. 2019, section 4.2) allocates "proportional
to the number of unique n-grams that end with that character", which is method "ngram".
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from engine.errors import CHMMError

__all__ = ["ALLOCATION_METHODS", "DEFAULT_NGRAM_ORDER", "allocate_clones", "largest_remainder", "symbol_weights"]

ALLOCATION_METHODS: tuple[str, ...] = ("uniform", "frequency", "ngram")

# Largest code kept before re-ranking n-gram codes, so code * n_symbols + symbol never overflows.
_CODE_LIMIT = 2**62
DEFAULT_NGRAM_ORDER = 5
"""n of the n-gram allocation rule: clones in proportion to the distinct 5-grams ending in each symbol."""


def _as_int(value: object, what: str) -> int:
    """``value`` as a Python int, or ValueError naming ``what``."""
    if isinstance(value, bool):
        raise CHMMError(f"{what} must be an integer, got {value!r}.")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise CHMMError(f"{what} must be an integer, got {value!r}.") from None


def _check_sequence(train: np.ndarray, n_symbols: int) -> np.ndarray:
    """``train`` as a 1-D int64 array of symbol indices in [0, n_symbols), or ValueError."""
    seq = np.asarray(train)
    if seq.ndim != 1:
        raise CHMMError(f"train must be a 1-D array of symbol indices, got shape {seq.shape}.")
    if seq.size == 0:
        return seq.astype(np.int64)
    if not np.issubdtype(seq.dtype, np.integer):
        raise CHMMError(f"train must hold integer symbol indices, got dtype {seq.dtype}.")
    lo, hi = int(seq.min()), int(seq.max())
    if lo < 0 or hi >= n_symbols:
        raise CHMMError(f"train holds symbol indices in [{lo}, {hi}] but n_symbols is {n_symbols}.")
    return seq.astype(np.int64, copy=False)


def _ngram_weights(seq: np.ndarray, n_symbols: int, order: int, valid: np.ndarray | None = None) -> np.ndarray:
    """For each symbol, the number of distinct length-``order`` n-grams of ``seq`` ending in it (only the n-grams
    starting where ``valid`` is true, when given)."""
    m = seq.size - order + 1
    if m <= 0:
        return np.zeros(n_symbols, dtype=np.int64)
    codes = seq[:m].copy()
    max_code = n_symbols - 1
    for k in range(1, order):
        if (max_code + 1) * n_symbols > _CODE_LIMIT:
            # Re-rank the (k)-gram codes densely so that the next step cannot overflow.
            _, codes = np.unique(codes, return_inverse=True)
            codes = codes.astype(np.int64, copy=False)
            max_code = int(codes.max())
        codes = codes * n_symbols + seq[k : k + m]
        max_code = max_code * n_symbols + n_symbols - 1
    starts = np.arange(m)
    if valid is not None:
        codes, starts = codes[valid[:m]], starts[valid[:m]]
    _, first = np.unique(codes, return_index=True)
    last_symbols = seq[starts[first] + order - 1]
    return np.bincount(last_symbols, minlength=n_symbols).astype(np.int64)


def _documents_ngram_weights(parts: list[np.ndarray], n_symbols: int, order: int) -> np.ndarray:
    """:func:`_ngram_weights` over several independent sequences: the distinct n-grams within any one of them (none
    spans two). The parts are joined with a separator symbol and windows that hold it are left out."""
    separator = n_symbols
    joined = np.concatenate([np.append(p, separator) for p in parts])[:-1]
    is_separator = np.concatenate([[0], np.cumsum(joined == separator)])
    m = max(joined.size - order + 1, 0)
    valid = (is_separator[order : order + m] - is_separator[:m]) == 0
    return _ngram_weights(joined, n_symbols + 1, order, valid)[:n_symbols]


def symbol_weights(
    train: np.ndarray | Sequence[np.ndarray],
    n_symbols: int,
    method: str = "ngram",
    ngram_order: int = DEFAULT_NGRAM_ORDER,
) -> np.ndarray:
    """Per-symbol allocation weights (int64, shape (n_symbols,)).

    "uniform": all ones; "frequency": symbol counts in ``train``; "ngram": number of
    distinct n-grams of length ``ngram_order`` in ``train`` that end in the symbol. ``train`` is one sequence or a
    list of independent ones (documents: an n-gram never spans two).
    """
    n_symbols = _as_int(n_symbols, "n_symbols")
    if n_symbols < 1:
        raise CHMMError(f"n_symbols must be at least 1, got {n_symbols}.")
    if method not in ALLOCATION_METHODS:
        raise CHMMError(f"Unknown clone allocation method {method!r}; choose one of {', '.join(ALLOCATION_METHODS)}.")
    order = _as_int(ngram_order, "ngram_order")
    if order < 1:
        raise CHMMError(f"ngram_order must be at least 1, got {order}.")
    if isinstance(train, np.ndarray) or (len(train) and np.isscalar(train[0])):
        parts = [_check_sequence(train, n_symbols)]
    else:
        parts = [_check_sequence(p, n_symbols) for p in train] or [np.zeros(0, dtype=np.int64)]
    if method == "uniform":
        return np.ones(n_symbols, dtype=np.int64)
    if method == "frequency":
        return sum(np.bincount(p, minlength=n_symbols).astype(np.int64) for p in parts)
    if len(parts) == 1:
        return _ngram_weights(parts[0], n_symbols, order)
    return _documents_ngram_weights(parts, n_symbols, order)


def largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """Split the integer ``total`` into parts proportional to non-negative integer ``weights``.

    Each part is floor(total * w / W) plus one for the entries with the largest remainders
    (ties: larger weight first, then lower index), so the parts sum exactly to ``total``.
    Zero weights get zero; if all weights are zero the split is as equal as possible.
    """
    w = [int(x) for x in np.asarray(weights).ravel()]
    if any(x < 0 for x in w):
        raise CHMMError("Allocation weights must be non-negative.")
    if total < 0:
        raise CHMMError(f"total must be non-negative, got {total}.")
    if not w:
        if total:
            raise CHMMError("Cannot split a positive total over zero entries.")
        return np.zeros(0, dtype=np.int64)
    wsum = sum(w)
    if wsum == 0:
        w, wsum = [1] * len(w), len(w)
    # Exact integer arithmetic (Python ints): no floating-point rounding in the remainders.
    parts = [total * x // wsum for x in w]
    rema = [total * x % wsum for x in w]
    left = total - sum(parts)
    ranked = sorted(range(len(w)), key=lambda i: (-rema[i], -w[i], i))
    for i in ranked[:left]:
        parts[i] += 1
    return np.array(parts, dtype=np.int64)


def check_states(states: int, n_symbols: int) -> int:
    """``states`` as an int, or a one-sentence ValueError unless every one of ``n_symbols`` symbols gets a clone."""
    states = _as_int(states, "states")
    if n_symbols < 1:
        raise CHMMError(f"n_symbols must be at least 1, got {n_symbols}.")
    if states < n_symbols:
        raise CHMMError(
            f"Cannot allocate {states} states to {n_symbols} symbols with "
            f"at least one clone per symbol: need ≥ {n_symbols} states."
        )
    return states


def allocate_clones(
    train: np.ndarray | Sequence[np.ndarray],
    n_symbols: int,
    states: int,
    method: str = "ngram",
    ngram_order: int = DEFAULT_NGRAM_ORDER,
) -> np.ndarray:
    """Number of clones (hidden states) per symbol: int64, shape (n_symbols,), summing to ``states``.

    Every symbol gets one clone; the other ``states - n_symbols`` are distributed with
    the largest-remainder method in proportion to ``symbol_weights`` (a symbol of weight
    zero, e.g. absent from ``train``, keeps its single clone). If every weight is zero
    (e.g. ``train`` shorter than ``ngram_order``) the split is as equal as possible.
    """
    n_symbols = _as_int(n_symbols, "n_symbols")
    states = check_states(states, n_symbols)
    weights = symbol_weights(train, n_symbols, method=method, ngram_order=ngram_order)
    return 1 + largest_remainder(weights, states - n_symbols)
