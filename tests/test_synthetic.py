"""Tests of engine/model/synthetic.py: the toy FSM and bracket data sets, their entropy rates and true models."""

from __future__ import annotations

import numpy as np
import pytest

from engine.model import synthetic
from engine.model.dense import CHMM
from engine.model.synthetic import (
    BRACKET_SYMBOLS,
    TOY_FSM_PAPER_EXTRA_CLONES,
    TOY_FSM_SIGNAL_PAIRS,
    TOY_FSM_TRAINING_SIZES,
    bracket_optimal_bps,
    bracket_sequence,
    bracket_true_model,
    toy_fsm_clones,
    toy_fsm_n_symbols,
    toy_fsm_optimal_bps,
    toy_fsm_sequence,
    toy_fsm_true_model,
)

PAPER_TOY_OPTIMAL = {2: 0.500, 3: 0.444, 4: 0.417, 5: 0.400}  # Table 1
PAPER_BRACKET_OPTIMAL = {2: 1.053, 3: 1.130, 4: 1.161}  # Table 2 (its 15-clone row is depth 4)
OPEN = {"(": ")", "[": "]"}


# ----------------------------------------------------------------------------------------------- helpers
def forward_bps(model: CHMM, x: np.ndarray) -> float:
    """-log2 P(x) / len(x) under ``model`` by a scaled forward pass on the dense transition matrix."""
    T = model.dense_T().astype(np.float64)
    clone_symbol = model.layout.clone_symbol()
    members = [np.flatnonzero(clone_symbol == s) for s in range(model.n_symbols)]
    sub = {}
    alpha = model.pi[members[x[0]]].astype(np.float64)
    log_p = 0.0
    for n in range(len(x)):
        if n > 0:
            key = (int(x[n - 1]), int(x[n]))
            if key not in sub:
                sub[key] = T[np.ix_(members[key[0]], members[key[1]])]
            alpha = alpha @ sub[key]
        total = alpha.sum()
        assert total > 0, f"the model gives probability 0 to the sequence at position {n}"
        log_p += np.log2(total)
        alpha /= total
    return -log_p / len(x)


def stationary(T: np.ndarray) -> np.ndarray:
    """The stationary distribution of the row-stochastic matrix T (assumed unique)."""
    n = T.shape[0]
    A = np.vstack([T.T - np.eye(n), np.ones((1, n))])
    b = np.zeros(n + 1)
    b[-1] = 1.0
    return np.linalg.lstsq(A, b, rcond=None)[0]


def unifilar_entropy_rate(model: CHMM) -> float:
    """Entropy rate of a CHMM whose next clone is determined by the current clone and the next symbol."""
    T = model.dense_T()
    clone_symbol = model.layout.clone_symbol()
    per_symbol = np.zeros((model.n_states, model.n_symbols))
    for s in range(model.n_symbols):
        cols = clone_symbol == s
        assert np.all(np.count_nonzero(T[:, cols], axis=1) <= 1), "model is not unifilar"
        per_symbol[:, s] = T[:, cols].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.nansum(np.where(per_symbol > 0, per_symbol * np.log2(per_symbol), 0.0), axis=1)
    return float(stationary(T) @ h)


def check_model(model: CHMM) -> None:
    T = model.dense_T()
    assert T.dtype == np.float64 and model.pi.dtype == np.float64
    np.testing.assert_allclose(T.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(T >= 0)
    assert model.pi.sum() == pytest.approx(1.0)
    # every stored block holds some mass
    for i, j in model.layout.block_pairs:
        assert np.any(model.block(int(i), int(j)) > 0)


def decode(x: np.ndarray) -> str:
    return "".join(BRACKET_SYMBOLS[int(s)] for s in x)


# ----------------------------------------------------------------------------------------------- toy FSM
@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_toy_optimal_bps_matches_paper(k: int) -> None:
    assert round(toy_fsm_optimal_bps(k), 3) == PAPER_TOY_OPTIMAL[k]


def test_toy_constants() -> None:
    assert TOY_FSM_TRAINING_SIZES == {2: 11250, 3: 33750, 4: 90000, 5: 225000}
    assert [toy_fsm_n_symbols(k) for k in (1, 2, 3, 5)] == [6, 10, 14, 22]
    # the paper's overcomplete HMM sizes: 8k for k <= 3, 46 for k = 4, 76 for k = 5
    sizes = {k: int(toy_fsm_clones(k, TOY_FSM_PAPER_EXTRA_CLONES[k]).sum()) for k in (2, 3, 4, 5)}
    assert sizes == {2: 16, 3: 24, 4: 46, 5: 76}
    # "Max clones" of Table 1
    assert [int(toy_fsm_clones(k, TOY_FSM_PAPER_EXTRA_CLONES[k]).max()) for k in (2, 3, 4, 5)] == [2, 2, 3, 4]
    np.testing.assert_array_equal(toy_fsm_clones(2), [1, 1, 1, 1, 2, 2, 2, 2, 2, 2])
    with pytest.raises(ValueError):
        toy_fsm_clones(2, -1)
    with pytest.raises(ValueError):
        toy_fsm_sequence(0, 10, np.random.default_rng(0))


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_toy_sequence_structure(k: int) -> None:
    block = 3 * k
    x = toy_fsm_sequence(k, 300 * block, np.random.default_rng(1))
    assert x.dtype == np.int64 and x.shape == (300 * block,)
    blocks = x.reshape(-1, block)
    assert set(np.unique(blocks[:, 0])) == {0, 2}
    for opening, closing in TOY_FSM_SIGNAL_PAIRS.items():
        assert np.all(blocks[blocks[:, 0] == opening, -1] == closing)
    noise = blocks[:, 1:-1]
    assert noise.shape[1] == 3 * k - 2
    assert noise.min() >= 4 and noise.max() <= 4 * k + 1
    for n in range(1, k):
        col = 3 * (n - 1)
        assert set(np.unique(noise[:, col])) == {4 * n, 4 * n + 1}
        assert np.all(noise[:, col + 1] == 4 * n + 2) and np.all(noise[:, col + 2] == 4 * n + 3)
    assert set(np.unique(noise[:, -1])) == {4 * k, 4 * k + 1}
    # signals appear only at block boundaries
    positions = np.flatnonzero(x < 4) % block
    assert set(np.unique(positions)) == {0, block - 1}


@pytest.mark.parametrize("length", [0, 1, 5, 6, 7, 1001])
def test_toy_sequence_exact_length_and_reproducible(length: int) -> None:
    a = toy_fsm_sequence(2, length, np.random.default_rng(7))
    b = toy_fsm_sequence(2, length, np.random.default_rng(7))
    assert a.shape == (length,) and a.dtype == np.int64
    np.testing.assert_array_equal(a, b)
    # a truncated sequence is a prefix of a longer one from the same seed when the block count is the same
    full = toy_fsm_sequence(2, -(-length // 6) * 6, np.random.default_rng(7))
    np.testing.assert_array_equal(a, full[:length])


def test_toy_sequence_seed_changes_output() -> None:
    a = toy_fsm_sequence(3, 1000, np.random.default_rng(1))
    b = toy_fsm_sequence(3, 1000, np.random.default_rng(2))
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_toy_true_model_structure(k: int) -> None:
    model = toy_fsm_true_model(k)
    check_model(model)
    assert model.symbols == [str(s) for s in range(4 * k + 2)]
    np.testing.assert_array_equal(model.n_clones, toy_fsm_clones(k))
    assert model.n_states == 8 * k
    assert unifilar_entropy_rate(model) == pytest.approx(toy_fsm_optimal_bps(k), abs=1e-12)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_toy_true_model_reaches_optimal_bps(k: int) -> None:
    x = toy_fsm_sequence(k, 200_000, np.random.default_rng(100 + k))
    assert forward_bps(toy_fsm_true_model(k), x) == pytest.approx(toy_fsm_optimal_bps(k), abs=0.01)


# ----------------------------------------------------------------------------------------------- brackets
@pytest.mark.parametrize("k", [2, 3, 4])
def test_bracket_optimal_bps_near_paper(k: int) -> None:
    assert bracket_optimal_bps(k) == pytest.approx(PAPER_BRACKET_OPTIMAL[k], abs=1.5e-3)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_bracket_optimal_bps_formula_matches_depth_chain(k: int) -> None:
    # states: 0 = sentence start, 1 .. k = depth, k + 1 = depth 0 inside a sentence
    z = k + 1
    P = np.zeros((k + 2, k + 2))
    H = np.zeros(k + 2)
    P[0, 1], H[0] = 1.0, 1.0
    for d in range(1, k + 1):
        down = d - 1 if d > 1 else z
        if d < k:
            P[d, d + 1], P[d, down], H[d] = 2 / 3, 1 / 3, np.log2(3)
        else:
            P[d, down] = 1.0
    P[z, 1], P[z, 0], H[z] = 2 / 3, 1 / 3, np.log2(3)
    assert bracket_optimal_bps(k) == pytest.approx(float(stationary(P) @ H), abs=1e-12)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_bracket_sequence_valid(k: int) -> None:
    x = bracket_sequence(k, 20_000, np.random.default_rng(3))
    assert x.dtype == np.int64 and x.shape == (20_000,)
    text = decode(x)
    assert text[0] == "|"
    stack: list[str] = []
    max_depth = 0
    for n, c in enumerate(text):
        if c in OPEN:
            stack.append(c)
            max_depth = max(max_depth, len(stack))
            assert len(stack) <= k
        elif c == "|":
            assert not stack, f"sentence ended with open brackets at {n}"
            assert n == 0 or text[n - 1] != "|", "empty sentence"
        else:
            assert stack and OPEN[stack.pop()] == c, f"mismatched close at {n}"
    assert max_depth == k
    assert set(text) == set(BRACKET_SYMBOLS)


@pytest.mark.parametrize("length", [0, 1, 2, 17, 1000])
def test_bracket_sequence_exact_length_and_reproducible(length: int) -> None:
    a = bracket_sequence(3, length, np.random.default_rng(11))
    b = bracket_sequence(3, length, np.random.default_rng(11))
    assert a.shape == (length,) and a.dtype == np.int64
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(
        bracket_sequence(3, 1000, np.random.default_rng(11)),
        bracket_sequence(3, 1000, np.random.default_rng(12)),
    )


@pytest.mark.parametrize(("k", "max_clones", "n_states"), [(1, 1, 5), (2, 3, 13), (3, 7, 29), (4, 15, 61)])
def test_bracket_true_model_structure(k: int, max_clones: int, n_states: int) -> None:
    model = bracket_true_model(k)
    check_model(model)
    assert model.symbols == BRACKET_SYMBOLS
    assert model.n_states == n_states
    assert int(model.n_clones.max()) == max_clones  # Table 2, "optimal clones" (3 for k = 2, 7 for k = 3)
    assert int(model.n_clones[0]) == 1
    assert unifilar_entropy_rate(model) == pytest.approx(bracket_optimal_bps(k), abs=1e-12)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_bracket_true_model_reaches_optimal_bps(k: int) -> None:
    x = bracket_sequence(k, 200_000, np.random.default_rng(200 + k))
    assert forward_bps(bracket_true_model(k), x) == pytest.approx(bracket_optimal_bps(k), abs=0.01)


def test_bracket_true_model_depth_limit() -> None:
    with pytest.raises(ValueError):
        bracket_true_model(9)
    with pytest.raises(ValueError):
        bracket_sequence(0, 10, np.random.default_rng(0))


# ---------------------------------------------------------------------------------------- Table 3's variants
def test_the_toy_with_alpha_zero_is_the_toy_fsm_and_its_loops_follow_the_geometric_mixture() -> None:
    rng = np.random.default_rng(4)
    plain = synthetic.toy_alpha_sequence(500, rng, alphas=(0.0, 0.0))
    blocks = plain.reshape(-1, 6)  # k = 2: opening, c_1, 6, 7, c_2, closing
    assert set(blocks[:, 0]) <= {0, 2} and np.array_equal(blocks[:, 5], blocks[:, 0] + 1)
    assert np.all(blocks[:, 2:4] == [6, 7]) and set(blocks[:, 1]) <= {4, 5} and set(blocks[:, 4]) <= {8, 9}
    x = synthetic.toy_alpha_sequence(4000, np.random.default_rng(5))
    opens = np.flatnonzero((x == 0) | (x == 2))
    loops = (np.diff(np.append(opens, x.size)) - 3) // 3
    m = np.arange(1, 400)
    law = 0.95 * 0.9 ** (m - 1) * 0.1 + 0.05 * 0.1 ** (m - 1) * 0.9
    assert loops.mean() == pytest.approx(float(np.sum(m * law)), rel=0.05)
    assert np.mean(loops == 1) == pytest.approx(float(law[0]), abs=0.02)
    assert synthetic.toy_alpha_optimal_bps((0.0, 0.0)) == pytest.approx(synthetic.toy_fsm_optimal_bps(2))
    assert synthetic.toy_alpha_optimal_bps() == pytest.approx(0.5105, abs=1e-3)  # the paper's CHMM: 0.512


def test_the_bracket_variant_nests_correctly_with_the_asked_probabilities() -> None:
    x = synthetic.bracket_alpha_sequence(60_000, np.random.default_rng(6), **synthetic.TABLE3_BRACKET_TRAIN)
    depth, starts, first = 0, [], True
    for symbol in x[1:]:
        if symbol in (1, 3):
            if depth == 0 and first:
                starts.append(symbol)
            depth += 1
        elif symbol in (2, 4):
            depth -= 1
        first = symbol == 0
        assert 0 <= depth <= 2
    assert np.mean(np.array(starts) == 1) == pytest.approx(15 / 19, abs=0.02)
    test = synthetic.bracket_alpha_sequence(60_000, np.random.default_rng(7), **synthetic.TABLE3_BRACKET_TEST)
    assert np.mean(test == 3) > np.mean(test == 1)  # the test text's brackets are mostly square


def test_the_bracket_variant_s_bits_are_its_entropy_rate_under_its_own_process() -> None:
    even = {"start": (0.5, 0.5), "nested": (1 / 3, 1 / 3, 1 / 3)}  # the process of Table 2 ("variant A")
    x = synthetic.bracket_alpha_sequence(200_000, np.random.default_rng(8), **even)
    assert synthetic.bracket_alpha_bits(x, **even) == pytest.approx(synthetic.bracket_optimal_bps(2), abs=0.01)
    test = synthetic.bracket_alpha_sequence(50_000, np.random.default_rng(9), **synthetic.TABLE3_BRACKET_TEST)
    own = synthetic.bracket_alpha_bits(test, **synthetic.TABLE3_BRACKET_TEST)
    assert own < synthetic.bracket_alpha_bits(test, **synthetic.TABLE3_BRACKET_TRAIN) - 0.3
