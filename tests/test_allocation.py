"""Tests for engine.corpora.allocation: splitting a state budget into clones per symbol."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.corpora.allocation import ALLOCATION_METHODS, allocate_clones, largest_remainder, symbol_weights
from engine.corpora.text import prepare_corpus, read_text

DATA = Path(__file__).parent / "data"


def brute_force_ngram_weights(seq: np.ndarray, n_symbols: int, order: int) -> list[int]:
    """Distinct n-grams ending in each symbol, with a Python set."""
    grams = {tuple(int(x) for x in seq[i : i + order]) for i in range(len(seq) - order + 1)}
    weights = [0] * n_symbols
    for g in grams:
        weights[g[-1]] += 1
    return weights


def test_methods_constant() -> None:
    assert ALLOCATION_METHODS == ("uniform", "frequency", "ngram")


@pytest.mark.parametrize("method", ALLOCATION_METHODS)
@pytest.mark.parametrize("total", [5, 6, 17, 100, 1001, 30000])
def test_sums_exactly_and_at_least_one(method: str, total: int) -> None:
    rng = np.random.default_rng(total)
    seq = rng.integers(0, 4, size=500)  # symbol 4 never occurs
    clones = allocate_clones(seq, 5, total, method=method)
    assert clones.dtype == np.int64
    assert clones.shape == (5,)
    assert int(clones.sum()) == total
    assert clones.min() >= 1


def test_unused_symbol_gets_one_clone() -> None:
    seq = np.array([0, 1, 2, 0, 1, 2, 0, 0, 1])
    for method in ("frequency", "ngram"):
        clones = allocate_clones(seq, 4, 40, method=method)
        assert clones[3] == 1
        assert clones.sum() == 40


@pytest.mark.parametrize(("n_symbols", "total"), [(3, 3), (3, 10), (7, 30000), (27, 1000), (5, 12)])
def test_uniform_as_equal_as_possible(n_symbols: int, total: int) -> None:
    clones = allocate_clones(np.zeros(0, dtype=np.int64), n_symbols, total, method="uniform")
    assert clones.sum() == total
    assert clones.max() - clones.min() <= 1


def test_frequency_proportional() -> None:
    # counts: symbol 0 x1, 1 x2, 2 x3, 3 x4  -> weights 1:2:3:4
    seq = np.array([3, 2, 3, 1, 3, 2, 3, 0, 2, 1])
    clones = allocate_clones(seq, 4, 4 + 100, method="frequency")
    assert clones.tolist() == [11, 21, 31, 41]
    # Largest remainder: 7 extra states at 1:2:3:4 -> 0.7, 1.4, 2.1, 2.8 -> floors 0,1,2,2 + 2 remainders.
    clones = allocate_clones(seq, 4, 4 + 7, method="frequency")
    assert clones.tolist() == [1 + 1, 1 + 1, 1 + 2, 1 + 3]


def test_largest_remainder_exact() -> None:
    assert largest_remainder(np.array([1, 1, 1]), 10).tolist() == [4, 3, 3]
    assert largest_remainder(np.array([0, 0]), 3).tolist() == [2, 1]
    assert largest_remainder(np.array([5, 0, 5]), 3).tolist() == [2, 0, 1]
    assert largest_remainder(np.array([1, 2, 3, 4]), 0).tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_ngram_weights_match_brute_force(seed: int, order: int) -> None:
    rng = np.random.default_rng(seed)
    n_symbols = int(rng.integers(2, 9))
    length = int(rng.integers(0, 400))
    seq = rng.integers(0, n_symbols, size=length)
    expected = brute_force_ngram_weights(seq, n_symbols, order)
    assert symbol_weights(seq, n_symbols, "ngram", order).tolist() == expected


def test_ngram_weights_large_alphabet_high_order() -> None:
    # 300**8 overflows int64: the codes must be re-ranked on the way.
    rng = np.random.default_rng(1)
    seq = rng.integers(0, 300, size=3000)
    seq[1000:1500] = seq[0:500]  # repeated n-grams
    assert symbol_weights(seq, 300, "ngram", 8).tolist() == brute_force_ngram_weights(seq, 300, 8)


def test_ngram_allocation_proportional() -> None:
    # Distinct bigrams ending in 0: (1,0),(2,0) -> 2; in 1: (0,1) -> 1; in 2: (0,2),(1,2),(2,2) -> 3.
    seq = np.array([0, 1, 0, 2, 0, 2, 2, 1, 2, 0, 1, 2])
    assert symbol_weights(seq, 3, "ngram", 2).tolist() == brute_force_ngram_weights(seq, 3, 2)
    w = brute_force_ngram_weights(seq, 3, 2)
    clones = allocate_clones(seq, 3, 3 + 6 * sum(w), method="ngram", ngram_order=2)
    assert (clones - 1).tolist() == [6 * x for x in w]


def test_ngram_short_sequence_falls_back_to_uniform() -> None:
    clones = allocate_clones(np.array([0, 1]), 3, 10, method="ngram", ngram_order=3)
    assert clones.sum() == 10 and clones.max() - clones.min() <= 1


def test_alice_ngram_allocation() -> None:
    c = prepare_corpus(read_text(DATA / "carroll-alice.txt"))
    clones = allocate_clones(c.train_full, len(c.symbols), 1000)
    assert clones.sum() == 1000 and clones.min() >= 1
    by_symbol = dict(zip(c.symbols, clones.tolist(), strict=True))
    assert by_symbol["e"] > by_symbol["q"] and by_symbol["e"] > by_symbol["z"]


def test_too_few_states() -> None:
    with pytest.raises(ValueError, match=r"at least one clone per symbol: need ≥ 27 states"):
        allocate_clones(np.array([0, 1, 2]), 27, 26)


def test_unknown_method() -> None:
    with pytest.raises(ValueError, match=r"Unknown clone allocation method 'zipf'"):
        allocate_clones(np.array([0, 1, 2]), 3, 10, method="zipf")


def test_bad_ngram_order() -> None:
    with pytest.raises(ValueError, match=r"ngram_order must be at least 1, got 0"):
        allocate_clones(np.array([0, 1, 2]), 3, 10, ngram_order=0)


def test_symbol_out_of_range() -> None:
    with pytest.raises(ValueError, match=r"symbol indices in \[0, 5\] but n_symbols is 3"):
        allocate_clones(np.array([0, 5, 2]), 3, 10)
