"""DenseHMM: analytic gradients of both objectives against finite differences, the co-occurrence matrix of eq. 3
against a long sample, training on a small corpus in both modes, files and bad input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from engine.corpora.text import prepare_corpus, read_text
from engine.peers.base import PeerFormatError, bits_per_symbol
from engine.peers.densehmm import (
    DenseHmm,
    Representations,
    cooc_gradient,
    cooc_loss,
    cooccurrence_matrix,
    dense_parameters,
    em_gradient,
    em_objective,
    model_cooccurrence,
)
from engine.peers.hmm import DiscreteHmm, expected_counts, sample_sequence, stationary_distribution

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def blake():
    return prepare_corpus(read_text(DATA / "blake-poems.txt"))


def central_differences(f, rep: Representations, h: float = 1e-5) -> np.ndarray:
    flat = rep.flat()
    out = np.empty_like(flat)
    for i in range(flat.size):
        step = np.zeros_like(flat)
        step[i] = h
        out[i] = (f(rep.unflat(flat + step)) - f(rep.unflat(flat - step))) / (2.0 * h)
    return out


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


@pytest.mark.parametrize("n, m, dim, seed", [(3, 4, 2, 0), (4, 3, 5, 1), (2, 5, 1, 2)])
def test_em_gradient_matches_finite_differences(n, m, dim, seed):
    rng = np.random.default_rng(seed)
    rep = Representations.random(n, m, dim, rng)
    other = Representations.random(n, m, dim, rng)
    x = sample_sequence(*dense_parameters(other), 60, rng)
    counts = expected_counts(*dense_parameters(other), x)
    value, grad = em_gradient(rep, counts)
    assert value == pytest.approx(em_objective(rep, counts), rel=1e-14)
    fd = central_differences(lambda r: em_objective(r, counts), rep)
    assert relative_error(grad.flat(), fd) < 1e-5


@pytest.mark.parametrize("n, m, dim, seed", [(3, 4, 2, 3), (4, 3, 5, 4), (5, 5, 3, 5)])
def test_cooc_gradient_matches_finite_differences(n, m, dim, seed):
    rng = np.random.default_rng(seed)
    rep = Representations.random(n, m, dim, rng)
    target = cooccurrence_matrix(rng.integers(0, m, 500), m)
    value, grad = cooc_gradient(rep, target)
    assert value == pytest.approx(cooc_loss(rep, target), rel=1e-14)
    assert np.all(grad.z0 == 0)
    fd = central_differences(lambda r: cooc_loss(r, target), rep)
    assert relative_error(grad.flat(), fd) < 1e-5


def test_model_cooccurrence_matches_a_long_sample():
    rng = np.random.default_rng(6)
    model = DenseHmm(n_states=4, dim=3, mode="cooc")
    model.n_symbols = 5
    model.rep = Representations.random(4, 5, 3, rng)
    A, B, pi = model.parameters()
    np.testing.assert_allclose(pi, stationary_distribution(A))
    omega = model_cooccurrence(A, B)
    assert omega.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(omega, B.T @ np.diag(pi) @ A @ B, atol=1e-15)
    empirical = cooccurrence_matrix(model.sample(200_000, seed=7), 5)
    assert np.max(np.abs(empirical - omega)) < 0.005


@pytest.mark.parametrize("mode", ["em", "cooc"])
def test_recovers_a_synthetic_hmm(mode):
    """The paper's synthetic setting (section 5): data from a Dirichlet-drawn stationary HMM; both modes come close to
    the true model's code length and co-occurrences."""
    rng = np.random.default_rng(0)
    n, m = 4, 6
    A = rng.dirichlet(np.full(n, 0.3), size=n)
    B = rng.dirichlet(np.full(m, 0.3), size=n)
    pi = stationary_distribution(A)
    x = sample_sequence(A, B, pi, 60_000, 1)
    train, test = x[:50_000], x[50_000:]
    true_bps = bits_per_symbol(DiscreteHmm(n_states=n).set_parameters(A, B, pi), test)
    model = DenseHmm(n_states=n, dim=4, mode=mode, seed=0).fit(train, m)
    assert bits_per_symbol(model, test) < true_bps + 0.1
    A_hat, B_hat, _ = model.parameters()
    assert np.mean(np.abs(model_cooccurrence(A_hat, B_hat) - model_cooccurrence(A, B))) < 0.003


def test_em_mode_uses_the_hmm_e_step_and_improves_the_m_step_objective(blake):
    x = blake.train[:4000]
    model = DenseHmm(n_states=6, dim=4, mode="em", iterations=8).fit(x, blake.n_symbols)
    objectives = [r["m_objective"] for r in model.history if "m_objective" in r]
    assert len(objectives) >= 5
    train_bps = [r["train_bps"] for r in model.history]
    assert train_bps[-1] < train_bps[0] - 0.5


@pytest.mark.parametrize("mode", ["em", "cooc"])
def test_both_modes_train_on_blake_below_unigram(blake, mode):
    model = DenseHmm(n_states=20, dim=8, mode=mode, seed=0).fit(blake.train, blake.n_symbols, blake.validation)
    unigram = np.bincount(blake.train, minlength=blake.n_symbols) + 1.0
    unigram_bps = -np.mean(np.log2(unigram[blake.test] / unigram.sum()))
    bps = bits_per_symbol(model, blake.test)
    assert bps < unigram_bps - 0.2 and bps < math.log2(27)
    assert model.n_parameters == 8 * (3 * 20 + 27 + (1 if mode == "em" else 0))


@pytest.mark.parametrize("mode", ["em", "cooc"])
def test_save_load_round_trip(tmp_path, blake, mode):
    model = DenseHmm(n_states=5, dim=3, mode=mode, iterations=10).fit(blake.train[:3000], blake.n_symbols)
    path = tmp_path / "dense.npz"
    model.save(path, metadata={"mode": mode})
    loaded = DenseHmm.load(path)
    np.testing.assert_array_equal(loaded.predictive(blake.test), model.predictive(blake.test))
    assert loaded.mode == mode and loaded.n_parameters == model.n_parameters
    assert loaded.metadata == {"mode": mode}
    from engine.peers.base import save_arrays

    save_arrays(tmp_path / "hmm.npz", "hmm", {"A": np.eye(2)}, {})
    with pytest.raises(PeerFormatError):
        DenseHmm.load(tmp_path / "hmm.npz")


def test_bad_input():
    for kwargs in ({"n_states": 0}, {"dim": 0}, {"mode": "sgd"}, {"learning_rate": 0.0}, {"iterations": -1}):
        with pytest.raises(ValueError):
            DenseHmm(**kwargs)
    for mode in ("em", "cooc"):
        model = DenseHmm(n_states=2, dim=2, mode=mode, iterations=2)
        with pytest.raises(ValueError):
            model.fit(np.zeros(0, dtype=np.int64), 3)
        with pytest.raises(ValueError):
            model.fit(np.array([0, 1, 3]), 3)
        with pytest.raises(ValueError):
            model.fit(np.array([[0, 1], [1, 0]]), 3)
        with pytest.raises(RuntimeError):
            model.predictive(np.array([0, 1]))
    with pytest.raises(ValueError):
        DenseHmm(mode="cooc").fit(np.array([1]), 3)
    with pytest.raises(ValueError):
        cooccurrence_matrix(np.array([0]), 2)
