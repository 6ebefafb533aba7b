"""The sequence memoizer peer against a brute-force Chinese-restaurant computation on tiny texts."""

from __future__ import annotations

import numpy as np
import pytest

from engine.peers import learners
from engine.peers.base import bits_per_symbol
from engine.peers.seqm import DEEP_DISCOUNTS, SHALLOW_DISCOUNTS, SequenceMemoizer


def _brute_force(train: list[int], history: list[int], n_symbols: int, deep: float) -> np.ndarray:
    """P(. | history): every training symbol seated in the restaurant of its whole history; a restaurant's first
    customer of a dish opens its one table for that dish, which sends a customer to the parent (the context less
    its oldest symbol), up to the root; then the Pitman-Yor predictive with concentration 0, from the root down."""
    customers: dict[tuple[int, ...], dict[int, int]] = {}

    def seat(context: tuple[int, ...], dish: int) -> None:
        room = customers.setdefault(context, {})
        room[dish] = room.get(dish, 0) + 1
        if room[dish] == 1 and context:
            seat(context[1:], dish)

    for i, symbol in enumerate(train):
        seat(tuple(train[:i]), symbol)
    discounts = [*SHALLOW_DISCOUNTS, deep]
    p = np.full(n_symbols, 1.0 / n_symbols)
    for k in range(len(history) + 1):
        room = customers.get(tuple(history[len(history) - k :]), {})
        total = sum(room.values())
        if not total:
            continue
        d = discounts[min(k, len(discounts) - 1)]
        tables = len(room)
        p = np.array([(room.get(s, 0) - d * (s in room)) / total for s in range(n_symbols)]) + d * tables / total * p
    return p


@pytest.mark.parametrize("seed", range(8))
def test_the_memoizer_gives_the_brute_force_restaurants_predictions(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_symbols = int(rng.integers(2, 5))
    motif = rng.integers(0, n_symbols, size=6)
    train = np.concatenate([motif, rng.integers(0, n_symbols, size=20), motif, motif[:4], rng.integers(0, 2, size=9)])
    x = np.concatenate([rng.integers(0, n_symbols, size=5), motif, rng.integers(0, n_symbols, size=6)])
    deep = float(rng.choice([0.8, 0.95]))
    model = SequenceMemoizer(deep_discount=deep).fit(train, n_symbols)
    got = model.predictive(x)
    want = [_brute_force(train.tolist(), x[:n].tolist(), n_symbols, deep)[x[n]] for n in range(x.size)]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    full = [_brute_force(train.tolist(), x[:n].tolist(), n_symbols, deep) for n in range(x.size)]
    np.testing.assert_allclose([f.sum() for f in full], 1.0, rtol=1e-12)


def test_a_long_repeat_is_predicted_almost_surely_and_a_deterministic_text_costs_almost_nothing() -> None:
    rng = np.random.default_rng(3)
    passage = rng.integers(0, 27, size=400)
    model = SequenceMemoizer(deep_discount=0.5).fit(np.concatenate([passage, passage]), 27)
    p = model.predictive(passage)
    assert p[200:].min() > 0.99
    cycle = np.tile(np.arange(5), 200)
    assert bits_per_symbol(SequenceMemoizer().fit(cycle, 5), cycle) < 0.05


def test_validation_chooses_the_deep_discount_and_the_model_saves_and_loads(tmp_path) -> None:
    rng = np.random.default_rng(0)
    words = [rng.integers(0, 6, size=int(rng.integers(2, 6))) for _ in range(30)]
    text = np.concatenate([words[int(i)] for i in rng.integers(0, 30, size=1500)])
    model = SequenceMemoizer().fit(text[:3000], 6, text[3000:])
    assert len(model.validation_bps_) == 5 and model.deep_discount_ in DEEP_DISCOUNTS
    assert bits_per_symbol(model, text[3000:]) == pytest.approx(min(model.validation_bps_), abs=1e-12)
    path = tmp_path / "seqm.npz"
    model.save(path)
    again = learners.load_any(path)
    np.testing.assert_array_equal(again.predictive(text[3000:]), model.predictive(text[3000:]))
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match="not a readable"):
        learners.load_any(path)
    with pytest.raises(ValueError, match="deep_discount"):
        learners.make_learner("seqm", deep_discount=1.5)


def test_a_long_match_whose_next_symbol_differs_is_followed_to_its_end() -> None:
    rng = np.random.default_rng(11)
    passage = rng.integers(0, 4, size=120)
    train = np.concatenate([passage, rng.integers(0, 4, size=30), passage[:100]])
    x = passage[:101].copy()
    x[100] = (passage[100] + 1) % 4  # the 100-symbol context is found once, followed by another symbol
    got = SequenceMemoizer(deep_discount=0.5).fit(train, 4).predictive(x)[100]
    want = _brute_force(train.tolist(), x[:100].tolist(), 4, 0.5)[x[100]]
    assert got == pytest.approx(want, rel=1e-12) and want < 1e-20  # 0.5 to the 90-odd: past any cutoff
