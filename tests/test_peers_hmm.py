"""The standard HMM peer learner: forward pass and E-step against brute force and hmmlearn, Baum-Welch monotonicity,
training on a small corpus, files and bad input."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from engine.corpora.text import prepare_corpus, read_text
from engine.peers.base import PeerFormatError, bits_per_symbol
from engine.peers.hmm import (
    DiscreteHmm,
    expected_counts,
    forward,
    log_likelihood,
    sample_sequence,
    stationary_distribution,
)

DATA = Path(__file__).parent / "data"


def random_hmm(n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(n), size=n), rng.dirichlet(np.ones(m), size=n), rng.dirichlet(np.ones(n))


def brute_force(A, B, pi, x):
    """log P(x) and the posterior expected counts by enumerating all n^T hidden paths."""
    n, m = B.shape
    joint = {}
    for path in itertools.product(range(n), repeat=len(x)):
        p = pi[path[0]] * B[path[0], x[0]]
        for t in range(1, len(x)):
            p *= A[path[t - 1], path[t]] * B[path[t], x[t]]
        joint[path] = p
    total = sum(joint.values())
    xi, em, g1 = np.zeros((n, n)), np.zeros((n, m)), np.zeros(n)
    for path, p in joint.items():
        q = p / total
        g1[path[0]] += q
        for t in range(len(x)):
            em[path[t], x[t]] += q
            if t > 0:
                xi[path[t - 1], path[t]] += q
    return math.log(total), xi, em, g1


@pytest.fixture(scope="module")
def blake():
    return prepare_corpus(read_text(DATA / "blake-poems.txt"))


@pytest.mark.parametrize("n, m, seed", [(2, 3, 0), (3, 4, 1), (3, 2, 2)])
def test_forward_and_e_step_match_brute_force(n, m, seed):
    A, B, pi = random_hmm(n, m, seed)
    x = np.random.default_rng(seed + 10).integers(0, m, 5)
    ll, xi, em, g1 = brute_force(A, B, pi, x)
    assert log_likelihood(A, B, pi, x) == pytest.approx(ll, rel=1e-12)
    c, alpha = forward(A, B, pi, x, store=True)
    assert np.sum(np.log(c)) == pytest.approx(ll, rel=1e-12)
    np.testing.assert_allclose(alpha.sum(axis=1), 1.0)
    counts = expected_counts(A, B, pi, x)
    assert counts.log_likelihood == pytest.approx(ll, rel=1e-12)
    np.testing.assert_allclose(counts.transitions, xi, atol=1e-12)
    np.testing.assert_allclose(counts.emissions, em, atol=1e-12)
    np.testing.assert_allclose(counts.initial, g1, atol=1e-12)


def test_log_likelihood_matches_hmmlearn_on_a_long_sequence():
    hmmlearn = pytest.importorskip("hmmlearn.hmm")
    n, m = 4, 6
    A, B, pi = random_hmm(n, m, 3)
    x = sample_sequence(A, B, pi, 20_000, 4)
    reference = hmmlearn.CategoricalHMM(n_components=n, n_features=m)
    reference.startprob_, reference.transmat_, reference.emissionprob_ = pi, A, B
    ll_ref, posteriors = reference.score_samples(x.reshape(-1, 1))
    assert log_likelihood(A, B, pi, x) == pytest.approx(ll_ref, rel=1e-10)
    model = DiscreteHmm(n_states=n).set_parameters(A, B, pi)
    assert np.sum(np.log(model.predictive(x))) == pytest.approx(ll_ref, rel=1e-10)
    # The fused backward pass gives hmmlearn's posteriors gamma_t and transition counts summing to T - 1.
    counts = expected_counts(A, B, pi, x)
    np.testing.assert_allclose(counts.initial, posteriors[0], atol=1e-10)
    per_symbol = np.stack([posteriors[x == k].sum(axis=0) for k in range(m)], axis=1)
    np.testing.assert_allclose(counts.emissions, per_symbol, rtol=1e-8, atol=1e-8)
    assert counts.transitions.sum() == pytest.approx(x.size - 1, rel=1e-10)


def test_no_underflow_on_long_sequences():
    A, B, pi = random_hmm(5, 4, 5)
    x = sample_sequence(A, B, pi, 300_000, 6)
    ll = log_likelihood(A, B, pi, x)
    assert np.isfinite(ll) and ll < -1e4
    counts = expected_counts(A, B, pi, x)
    assert np.all(np.isfinite(counts.transitions)) and counts.emissions.sum() == pytest.approx(x.size, rel=1e-9)


def test_baum_welch_never_decreases_the_training_log_likelihood():
    A, B, pi = random_hmm(4, 5, 7)
    x = sample_sequence(A, B, pi, 3_000, 8)
    model = DiscreteHmm(n_states=4, iterations=60, tolerance=0.0, pseudocount=0.0, seed=1).fit(x, 5)
    bps = np.array([r["train_bps"] for r in model.history])
    assert len(bps) > 10
    assert np.all(np.diff(bps) <= 1e-9 * bps[:-1]), np.diff(bps).max()
    assert bps[-1] < bps[0]


def test_trains_on_blake_below_unigram(blake):
    model = DiscreteHmm(n_states=20, iterations=40, seed=0).fit(blake.train, blake.n_symbols, blake.validation)
    unigram = np.bincount(blake.train, minlength=blake.n_symbols) + 1.0
    unigram_bps = -np.mean(np.log2(unigram[blake.test] / unigram.sum()))
    bps = bits_per_symbol(model, blake.test)
    assert bps < unigram_bps - 0.5 and bps < math.log2(27)
    assert model.n_parameters == 20 * 20 + 20 * 26 - 1
    best = min(r["validation_bps"] for r in model.history)
    assert bits_per_symbol(model, blake.validation) == pytest.approx(best, rel=1e-12)


def test_sampling_reproduces_the_stationary_marginal():
    A, B, _ = random_hmm(3, 4, 9)
    pi = stationary_distribution(A)
    np.testing.assert_allclose(pi @ A, pi, atol=1e-12)
    x = sample_sequence(A, B, pi, 100_000, 10)
    np.testing.assert_allclose(np.bincount(x, minlength=4) / x.size, pi @ B, atol=0.01)


def test_save_load_round_trip(tmp_path, blake):
    model = DiscreteHmm(n_states=6, iterations=5).fit(blake.train[:3000], blake.n_symbols, blake.validation)
    path = tmp_path / "hmm.npz"
    model.save(path, metadata={"corpus": "blake"})
    loaded = DiscreteHmm.load(path)
    np.testing.assert_array_equal(loaded.predictive(blake.test), model.predictive(blake.test))
    assert loaded.n_parameters == model.n_parameters and loaded.metadata == {"corpus": "blake"}
    assert loaded.history == model.history
    from engine.peers.base import save_arrays

    save_arrays(tmp_path / "other.npz", "ngram", {"x": np.zeros(2)}, {})
    with pytest.raises(PeerFormatError):
        DiscreteHmm.load(tmp_path / "other.npz")
    save_arrays(tmp_path / "bad.npz", "hmm", {"A": np.eye(3), "B": np.ones((2, 2)), "pi": np.ones(3)}, {})
    with pytest.raises(PeerFormatError):
        DiscreteHmm.load(tmp_path / "bad.npz")


def test_bad_input():
    with pytest.raises(ValueError):
        DiscreteHmm(n_states=0)
    with pytest.raises(ValueError):
        DiscreteHmm(pseudocount=-1.0)
    model = DiscreteHmm(n_states=2, iterations=2)
    with pytest.raises(ValueError):
        model.fit(np.zeros(0, dtype=np.int64), 3)
    with pytest.raises(ValueError):
        model.fit(np.array([0, 1, 3]), 3)
    with pytest.raises(ValueError):
        model.fit(np.array([0, -1, 2]), 3)
    with pytest.raises(ValueError):
        model.fit(np.array([0.0, 1.0]), 3)
    with pytest.raises(ValueError):
        model.fit(np.array([0, 1]), 0)
    with pytest.raises(RuntimeError):
        model.predictive(np.array([0, 1]))
    model.fit(np.array([0, 1, 2, 1, 0]), 3)
    with pytest.raises(ValueError):
        model.predictive(np.array([0, 5]))
    assert model.predictive(np.zeros(0, dtype=np.int64)).shape == (0,)
