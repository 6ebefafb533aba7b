"""Tests of engine/backends/cpu/inference.py against independent oracles: brute-force enumeration of clone paths on tiny
models, a dense forward pass, hmmlearn's CategoricalHMM, and sampling statistics."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

from engine.backends.cpu import inference, sampling
from engine.backends.cpu.inference import Evidence
from engine.model import synthetic
from engine.model.blocks import BlockLayout, blocks_to_dense, dense_to_blocks, pairs_in_sequence
from engine.model.dense import CHMM, random_model
from engine.training import learning

SEEDS = list(range(10))


# ----------------------------------------------------------------------------------------------- helpers
def all_pairs(n_symbols: int) -> np.ndarray:
    return np.array([(i, j) for i in range(n_symbols) for j in range(n_symbols)], dtype=np.int64)


def tiny_model(seed: int, drop_pairs: bool = False) -> CHMM:
    """A random float64 CHMM with 2-3 symbols, 1-3 clones each, random T and random (non-uniform) pi.

    With ``drop_pairs`` a random subset of the symbol pairs has no block (at least one pair is dropped)."""
    rng = np.random.default_rng(1000 + seed)
    n_symbols = int(rng.integers(2, 4))
    n_clones = rng.integers(1, 4, size=n_symbols)
    pairs = all_pairs(n_symbols)
    if drop_pairs:
        keep = rng.random(len(pairs)) < 0.7
        keep[rng.integers(len(pairs))] = False
        pairs = pairs[keep]
    model = random_model([chr(97 + s) for s in range(n_symbols)], n_clones, pairs, rng, dtype=np.float64)
    pi = rng.random(model.n_states) + 0.05
    return CHMM(model.symbols, model.layout, model.T, pi / pi.sum())


def brute_force(model: CHMM, x: np.ndarray) -> dict:
    """Enumerate every clone path compatible with x: P(x), gamma, sum_n xi(n), the MAP path and its log prob."""
    T = model.dense_T().astype(np.float64)
    pi = model.pi.astype(np.float64)
    start = model.layout.clone_start
    n, h = len(x), model.n_states
    total = 0.0
    gamma = np.zeros((n, h))
    xi = np.zeros((h, h))
    best_p, best_path = 0.0, None
    for z in itertools.product(*[range(start[s], start[s + 1]) for s in x]):
        p = pi[z[0]]
        for a, b in itertools.pairwise(z):
            p *= T[a, b]
        total += p
        for t, u in enumerate(z):
            gamma[t, u] += p
        for a, b in itertools.pairwise(z):
            xi[a, b] += p
        if p > best_p:
            best_p, best_path = p, np.array(z)
    return {
        "p": total,
        "gamma": gamma / total if total > 0 else gamma,
        "xi": xi / total if total > 0 else xi,
        "best_p": best_p,
        "best_path": best_path,
    }


def dense_forward_predictive(model: CHMM, x: np.ndarray) -> np.ndarray:
    """One-step predictive probabilities by a dense forward pass (restart uniform after a zero event)."""
    T = model.dense_T().astype(np.float64)
    sym = model.layout.clone_symbol()
    h = model.n_states
    out = np.empty(len(x))
    alpha = np.where(sym == x[0], model.pi.astype(np.float64), 0.0)
    for n in range(len(x)):
        if n > 0:
            alpha = (alpha @ T) * (sym == x[n])
        total = alpha.sum()
        out[n] = total
        alpha = alpha / total if total > 0 else (sym == x[n]) / np.count_nonzero(sym == x[n])
    assert alpha.shape == (h,)
    return out


def oracle_sample(model: CHMM, length: int, rng: np.random.Generator) -> np.ndarray:
    """Symbols of a clone path drawn from pi and the dense T with plain NumPy (stops at a row without mass)."""
    T = model.dense_T().astype(np.float64)
    sym = model.layout.clone_symbol()
    z = int(rng.choice(model.n_states, p=model.pi / model.pi.sum()))
    out = [sym[z]]
    while len(out) < length and T[z].sum() > 0:
        z = int(rng.choice(model.n_states, p=T[z] / T[z].sum()))
        out.append(sym[z])
    return np.array(out, dtype=np.int64)


def tiny_sequences(model: CHMM, seed: int, count: int = 4) -> list[np.ndarray]:
    """Random symbol strings of length 1..6 plus strings drawn from the model (possible by construction)."""
    rng = np.random.default_rng(seed)
    uniform = [rng.integers(0, model.n_symbols, size=int(rng.integers(1, 7))) for _ in range(count)]
    drawn = [oracle_sample(model, int(rng.integers(1, 7)), rng) for _ in range(count)]
    return uniform + drawn


# --------------------------------------------------------------------------------- brute-force oracle
@pytest.mark.parametrize("drop_pairs", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_brute_force_oracle(seed: int, drop_pairs: bool) -> None:
    model = tiny_model(seed, drop_pairs)
    checked = 0
    for x in tiny_sequences(model, seed) + [np.array([0, 1, 0, 1, 1, 0])]:
        ref = brute_force(model, x)
        if ref["p"] == 0.0:
            continue  # impossible sequences are tested below
        checked += 1
        ll = inference.log_likelihood(model, x)
        assert ll == pytest.approx(np.log(ref["p"]), abs=1e-10)

        post = inference.posteriors(model, x)
        assert post.log_likelihood == pytest.approx(np.log(ref["p"]), abs=1e-10)
        np.testing.assert_allclose(post.dense(model.layout, x), ref["gamma"], rtol=0, atol=1e-10)

        vit = inference.viterbi(model, x)
        np.testing.assert_array_equal(vit.clones, ref["best_path"])
        np.testing.assert_array_equal(vit.symbols, x)
        assert vit.log_probability == pytest.approx(np.log(ref["best_p"]), abs=1e-10)

        if len(x) >= 2:
            for method in inference.COUNT_METHODS:
                e = inference.e_step(model, x, count_method=method)
                assert e.zero_events == 0
                assert e.log_likelihood == pytest.approx(np.log(ref["p"]), abs=1e-10)
                np.testing.assert_allclose(blocks_to_dense(model.layout, e.counts), ref["xi"], atol=1e-10)
                np.testing.assert_allclose(e.gamma_first, ref["gamma"][0], atol=1e-10)
                # the counts of one sequence sum to its number of transitions
                assert e.counts.sum() == pytest.approx(len(x) - 1, abs=1e-10)
    assert checked >= 1


def test_impossible_sequence() -> None:
    # two symbols, no block (1, 0): any sequence with "b a" has probability zero
    rng = np.random.default_rng(7)
    model = random_model(["a", "b"], np.array([2, 3]), np.array([[0, 0], [0, 1], [1, 1]]), rng, np.float64)
    x = np.array([0, 1, 1, 0, 1, 0, 0])
    assert brute_force(model, x[:6])["p"] == 0.0
    assert inference.log_likelihood(model, x) == -np.inf
    result = inference.score(model, x)
    assert np.isfinite(result.bps) and result.bps > 0
    assert result.zero_probability_events == 2
    fwd = inference.forward(model, x)
    assert fwd.zero_events == 2
    np.testing.assert_allclose(fwd.predictive, dense_forward_predictive(model, x), atol=1e-12)
    assert inference.posteriors(model, x).log_likelihood == -np.inf
    vit = inference.viterbi(model, x)
    assert vit.log_probability == -np.inf
    assert np.all(vit.clones == -1)
    for method in inference.COUNT_METHODS:
        e = inference.e_step(model, x, count_method=method)
        assert e.log_likelihood == -np.inf and e.zero_events == 2
        assert np.all(np.isfinite(e.counts)) and np.all(e.counts >= 0)
    # a possible prefix keeps its exact value
    ref = brute_force(model, x[:3])
    assert inference.log_likelihood(model, x[:3]) == pytest.approx(np.log(ref["p"]), abs=1e-12)


@pytest.mark.parametrize("seed", SEEDS[:5])
def test_impossible_tiny_sequences_match_brute_force(seed: int) -> None:
    model = tiny_model(seed, drop_pairs=True)
    rng = np.random.default_rng(seed + 50)
    seen = 0
    for _ in range(40):
        x = rng.integers(0, model.n_symbols, size=int(rng.integers(2, 7)))
        if brute_force(model, x)["p"] > 0:
            continue
        seen += 1
        assert inference.log_likelihood(model, x) == -np.inf
        assert inference.viterbi(model, x).log_probability == -np.inf
        s = inference.score(model, x)
        assert np.isfinite(s.bps) and s.zero_probability_events > 0
    assert seen > 0


# ------------------------------------------------------------------------------------------- precision
def test_float32_matches_float64() -> None:
    rng = np.random.default_rng(3)
    model32 = random_model(list("abcd"), np.array([3, 2, 4, 1]), all_pairs(4), rng, np.float32)
    model64 = CHMM(model32.symbols, model32.layout, model32.T.astype(np.float64), model32.pi.astype(np.float64))
    x = rng.integers(0, 4, size=5000)
    ll32 = inference.log_likelihood(model32, x)
    ll64 = inference.log_likelihood(model64, x)
    assert np.isfinite(ll64)
    assert ll32 == pytest.approx(ll64, rel=1e-5)
    # the float64 figure is exact: compare with a dense forward pass
    assert ll64 == pytest.approx(np.sum(np.log(dense_forward_predictive(model64, x))), rel=1e-12)


# -------------------------------------------------------------------------------------------- hmmlearn
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hmmlearn_peer(seed: int) -> None:
    hmm_module = pytest.importorskip("hmmlearn.hmm")
    rng = np.random.default_rng(seed)
    n_clones = np.array([2, 3, 3]) if seed != 2 else np.array([3, 3, 2, 2])
    n_symbols = len(n_clones)
    model = random_model([str(s) for s in range(n_symbols)], n_clones, all_pairs(n_symbols), rng, np.float64)
    pi = rng.random(model.n_states) + 0.1
    model = CHMM(model.symbols, model.layout, model.T, pi / pi.sum())
    x = rng.integers(0, n_symbols, size=200)
    x[-1] = x[0]  # every symbol of the last position also occurs earlier, so no row of counts is empty
    emission = np.zeros((model.n_states, n_symbols))
    emission[np.arange(model.n_states), model.layout.clone_symbol()] = 1.0

    def peer() -> object:
        hmm = hmm_module.CategoricalHMM(
            n_components=model.n_states, n_features=n_symbols, params="st", init_params="", n_iter=1, tol=1e-12
        )
        hmm.startprob_ = model.pi.copy()
        hmm.transmat_ = model.dense_T().copy()
        hmm.emissionprob_ = emission.copy()
        return hmm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hmm = peer()
        assert hmm.score(x.reshape(-1, 1)) == pytest.approx(inference.log_likelihood(model, x), rel=1e-6)
        hmm.fit(x.reshape(-1, 1))
    ours, ll = learning.em_iteration(model, x, learning.TrainingConfig(pseudocount=0.0, update_pi=True))
    assert ll == pytest.approx(inference.log_likelihood(model, x), rel=1e-12)
    assert np.max(np.abs(ours.dense_T() - model.dense_T())) > 1e-2  # the step did change T
    np.testing.assert_allclose(ours.dense_T(), hmm.transmat_, atol=1e-6)
    np.testing.assert_allclose(ours.pi, hmm.startprob_, atol=1e-6)


# ------------------------------------------------------------------------------------------- stability
def peaked_full_model(seed: int, dtype: type) -> CHMM:
    """Four symbols with 3 clones each, all blocks stored, rows made peaked (entries down to ~1e-10)."""
    rng = np.random.default_rng(seed)
    model = random_model(list("abcd"), np.array([3, 3, 3, 3]), all_pairs(4), rng, np.float64)
    from engine.model.blocks import normalise_rows

    T = normalise_rows(model.layout, model.T**8, 0.0, dtype)
    return CHMM(model.symbols, model.layout, T, model.pi.astype(dtype))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_million_symbols_finite(dtype: type) -> None:
    model = peaked_full_model(11, dtype)
    x = np.random.default_rng(12).integers(0, 4, size=1_000_000)
    ll = inference.log_likelihood(model, x)
    assert np.isfinite(ll) and ll < 0
    result = inference.score(model, x)
    assert np.isfinite(result.bps) and result.zero_probability_events == 0
    assert result.bps == pytest.approx(-ll / (len(x) * np.log(2.0)), abs=1e-5)
    # a toy FSM sample of 10^6 symbols under the true model reaches the entropy rate
    true = synthetic.toy_fsm_true_model(3)
    fsm = synthetic.toy_fsm_sequence(3, 1_000_000, np.random.default_rng(13))
    s = inference.score(true, fsm)
    assert s.zero_probability_events == 0
    assert abs(s.bps - synthetic.toy_fsm_optimal_bps(3)) < 0.005


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_posteriors_long_sequence(dtype: type) -> None:
    model = peaked_full_model(21, dtype)
    x = np.random.default_rng(22).integers(0, 4, size=100_000)
    post = inference.posteriors(model, x)
    assert np.isfinite(post.log_likelihood)
    assert not np.any(np.isnan(post.gamma))
    assert np.all(post.gamma >= 0)
    sums = np.add.reduceat(post.gamma, post.offsets)
    np.testing.assert_allclose(sums, 1.0, atol=1e-5)
    assert len(sums) == len(x)
    e = inference.e_step(model, x)
    assert np.all(np.isfinite(e.counts))
    assert e.counts.sum() == pytest.approx(len(x) - 1, rel=1e-5)


# --------------------------------------------------------------------------------------------- Viterbi
def brute_force_evidence(model: CHMM, options: list[dict[int, float]]) -> tuple[float, np.ndarray]:
    T = model.dense_T().astype(np.float64)
    start = model.layout.clone_start
    cands = [[(u, w) for s, w in opt.items() for u in range(start[s], start[s + 1])] for opt in options]
    best_p, best = 0.0, None
    for z in itertools.product(*cands):
        p = model.pi[z[0][0]] * z[0][1]
        for (a, _), (b, w) in itertools.pairwise(z):
            p *= T[a, b] * w
        if p > best_p:
            best_p, best = p, np.array([u for u, _ in z])
    return best_p, best


@pytest.mark.parametrize("seed", SEEDS)
def test_viterbi_soft_evidence(seed: int) -> None:
    model = tiny_model(seed, drop_pairs=seed % 2 == 1)
    rng = np.random.default_rng(seed + 77)
    for _ in range(4):
        options = []
        for _n in range(int(rng.integers(1, 6))):
            k = int(rng.integers(1, model.n_symbols + 1))
            chosen = rng.choice(model.n_symbols, size=k, replace=False)
            options.append({int(s): float(rng.choice([0.0, 0.2, 0.5, 1.0, rng.random()])) for s in chosen})
        best_p, best = brute_force_evidence(model, options)
        result = inference.viterbi(model, Evidence.from_lists(options))
        if best_p == 0.0:
            assert result.log_probability == -np.inf
            continue
        assert result.log_probability == pytest.approx(np.log(best_p), abs=1e-10)
        np.testing.assert_array_equal(result.clones, best)
        np.testing.assert_array_equal(result.symbols, model.layout.clone_symbol()[best])


def test_viterbi_hard_evidence_equals_evidence_object() -> None:
    model = tiny_model(4)
    x = np.array([0, 1, 1, 0, 1])
    a = inference.viterbi(model, x)
    b = inference.viterbi(model, Evidence.hard(x))
    np.testing.assert_array_equal(a.clones, b.clones)
    assert a.log_probability == b.log_probability


# -------------------------------------------------------------------------------------------- sampling
def cycle_model(text: str) -> CHMM:
    """The true model of the endless repetition of ``text``: one clone per position of the cycle."""
    symbols = sorted(set(text))
    index = {c: i for i, c in enumerate(symbols)}
    n_clones = np.array([text.count(c) for c in symbols], dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(n_clones)])
    seen = dict.fromkeys(symbols, 0)
    clone = []
    for c in text:
        clone.append(int(start[index[c]]) + seen[c])
        seen[c] += 1
    dense = np.zeros((len(text), len(text)))
    for p in range(len(text)):
        dense[clone[p], clone[(p + 1) % len(text)]] = 1.0
    pairs = np.unique([(index[a], index[b]) for a, b in zip(text, text[1:] + text[0], strict=True)], axis=0)
    layout = BlockLayout.build(n_clones, pairs)
    pi = np.full(len(text), 1.0 / len(text))
    return CHMM(symbols, layout, dense_to_blocks(layout, dense), pi)


def test_sample_reproducible() -> None:
    model = tiny_model(2)
    a = sampling.sample(model, 500, np.random.default_rng(9))
    b = sampling.sample(model, 500, np.random.default_rng(9))
    c = sampling.sample(model, 500, np.random.default_rng(10))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.shape == (500,) and a.min() >= 0 and a.max() < model.n_symbols
    p = np.array([0, 1, 1])
    np.testing.assert_array_equal(
        sampling.sample(model, 50, np.random.default_rng(4), prefix=p),
        sampling.sample(model, 50, np.random.default_rng(4), prefix=p),
    )


@pytest.mark.parametrize("k", [2, 3])
def test_sample_follows_deterministic_model(k: int) -> None:
    model = synthetic.toy_fsm_true_model(k)
    x = sampling.sample(model, 30 * k * 100, np.random.default_rng(k))
    assert len(x) == 30 * k * 100
    # the true model is unifilar: a finite likelihood means every clone transition taken had T > 0
    assert inference.score(model, x).zero_probability_events == 0
    assert np.isfinite(inference.log_likelihood(model, x))
    blocks = x.reshape(-1, 3 * k)
    np.testing.assert_array_equal(blocks[:, -1], blocks[:, 0] + 1)  # 0 -> 1, 2 -> 3
    for n in range(1, k):
        np.testing.assert_array_equal(blocks[:, 3 * (n - 1) + 2], 4 * n + 2)
    # every symbol pair sampled has a stored block
    assert np.all(model.layout.find_blocks(x[:-1], x[1:]) >= 0)


def test_sample_respects_missing_blocks() -> None:
    for seed in SEEDS:
        model = tiny_model(seed, drop_pairs=True)
        x = sampling.sample(model, 2000, np.random.default_rng(seed))
        assert np.all(model.layout.find_blocks(x[:-1], x[1:]) >= 0)


def test_sample_prefix_continues_memorised_cycle() -> None:
    text = "hello world, "
    model = cycle_model(text)
    encode = model.encode
    for prefix, seed in [("wor", 0), ("el", 1), ("o w", 2), (", h", 3), ("lo", 4)]:
        out = sampling.sample(model, 30, np.random.default_rng(seed), prefix=encode(prefix))
        start = (text * 3).index(prefix) + len(prefix)
        assert model.decode_symbols(out) == ((text * 5)[start : start + 30])
    # an ambiguous prefix: "l" is followed by "l", "o" or "d", each a third of the time (pi is uniform)
    firsts = [
        model.symbols[sampling.sample(model, 1, np.random.default_rng(s), prefix=encode("l"))[0]] for s in range(600)
    ]
    counts = {c: firsts.count(c) for c in set(firsts)}
    assert set(counts) == {"l", "o", "d"}
    assert all(150 <= v <= 250 for v in counts.values())
    # without a prefix, sampling starts anywhere in the cycle and then follows it
    out = model.decode_symbols(sampling.sample(model, 40, np.random.default_rng(5)))
    assert out in text * 5


def stationary(T: np.ndarray) -> np.ndarray:
    values, vectors = np.linalg.eig(T.T)
    mu = np.real(vectors[:, np.argmin(np.abs(values - 1.0))])
    return mu / mu.sum()


@pytest.mark.parametrize("seed", [0, 1])
def test_sample_bigram_statistics(seed: int) -> None:
    rng = np.random.default_rng(seed)
    model = random_model(list("abc"), np.array([2, 1, 3]), all_pairs(3), rng, np.float64)
    T = model.dense_T()
    sym = model.layout.clone_symbol()
    mu = stationary(T)
    joint = mu[:, None] * T
    expected = np.zeros((3, 3))
    np.add.at(expected, (sym[:, None].repeat(len(sym), 1), sym[None, :].repeat(len(sym), 0)), joint)
    n = 300_000
    x = sampling.sample(model, n, np.random.default_rng(seed + 100))
    observed = np.zeros((3, 3))
    np.add.at(observed, (x[:-1], x[1:]), 1.0)
    # chi-square statistic; the pairs are dependent, so allow a wide margin over the 8 degrees of freedom
    chi2 = float(np.sum((observed - (n - 1) * expected) ** 2 / ((n - 1) * expected)))
    assert chi2 < 60.0
    np.testing.assert_allclose(observed / (n - 1), expected, atol=4e-3)


# ----------------------------------------------------------------------------------------------- score
def trained_model(seed: int) -> tuple[CHMM, np.ndarray]:
    rng = np.random.default_rng(seed)
    train = synthetic.toy_fsm_sequence(2, 3000, rng)
    n_symbols = synthetic.toy_fsm_n_symbols(2)
    model = random_model(
        [str(s) for s in range(n_symbols)],
        synthetic.toy_fsm_clones(2),
        all_pairs(n_symbols),
        rng,
        np.float64,
    )
    for _ in range(5):
        model, _ll = learning.em_iteration(model, train, learning.TrainingConfig())
    return model, train


def test_score_backoff_mixture() -> None:
    model, train = trained_model(0)
    assert model.counts is not None
    x = synthetic.toy_fsm_sequence(2, 4000, np.random.default_rng(99))
    w = inference.BACKOFF_WEIGHT
    exact = -inference.log_likelihood(model, x) / (len(x) * np.log(2.0))
    result = inference.score(model, x)
    assert result.zero_probability_events == 0
    assert result.symbols == len(x)
    assert result.bps >= exact - 1e-12
    assert result.bps - exact <= min(1e-5, -np.log2(1.0 - w) + 1e-12)
    # independent recomputation: dense forward pass and a bigram from the block sums of the counts
    pairs = np.zeros((model.n_symbols, model.n_symbols))
    dense_counts = blocks_to_dense(model.layout, model.counts)
    sym = model.layout.clone_symbol()
    np.add.at(pairs, (sym[:, None].repeat(len(sym), 1), sym[None, :].repeat(len(sym), 0)), dense_counts)
    np.testing.assert_allclose(
        pairs, np.bincount(train[:-1] * 10 + train[1:], minlength=100).reshape(10, 10), atol=1e-6
    )
    q = (pairs + 0.5) / (pairs + 0.5).sum(axis=1, keepdims=True)
    mix = (1 - w) * dense_forward_predictive(model, x)
    mix[0] += w / model.n_symbols
    mix[1:] += w * q[x[:-1], x[1:]]
    assert result.bps == pytest.approx(-np.sum(np.log2(mix)) / len(x), rel=1e-12)
    assert result.log2_probability == pytest.approx(np.sum(np.log2(mix)), rel=1e-12)
    # with backoff weight 0 the score is exact
    assert inference.score(model, x, backoff_weight=0.0).bps == pytest.approx(exact, rel=1e-12)
    # per-symbol surprisal: the same mixture, position by position; its mean is the BPS
    bits = inference.surprisal(model, x)
    np.testing.assert_allclose(bits, -np.log2(mix), rtol=1e-10, atol=1e-12)
    assert np.mean(bits) == pytest.approx(result.bps, rel=1e-12)


def test_score_zero_probability_events_match_oracle() -> None:
    model, _train = trained_model(1)
    # prune: drop every block whose counts are tiny, which makes unseen pairs impossible
    x = synthetic.toy_fsm_sequence(2, 600, np.random.default_rng(5))
    x[100] = 3  # "... 3 ..." where the FSM never puts it: impossible transitions around it
    x[101] = 9
    keep = [
        k
        for k in range(model.layout.n_blocks)
        if model.counts[model.layout.block_offset[k] : model.layout.block_offset[k + 1]].sum() > 0.5
    ]
    layout = BlockLayout.build(model.n_clones, model.layout.block_pairs[keep])
    dense = model.dense_T()
    counts = dense_to_blocks(layout, blocks_to_dense(model.layout, model.counts))
    from engine.model.blocks import normalise_rows

    T = normalise_rows(layout, dense_to_blocks(layout, dense), 0.0, np.float64)
    pruned = CHMM(model.symbols, layout, T, model.pi, counts)
    result = inference.score(pruned, x)
    predictive = dense_forward_predictive(pruned, x)
    zero = int(np.sum(predictive == 0))
    assert zero >= 1
    assert result.zero_probability_events == zero
    assert np.isfinite(result.bps)
    assert inference.log_likelihood(pruned, x) == -np.inf
    w = inference.BACKOFF_WEIGHT
    pairs = np.zeros((pruned.n_symbols, pruned.n_symbols))
    for k, (i, j) in enumerate(layout.block_pairs):
        pairs[i, j] = counts[layout.block_offset[k] : layout.block_offset[k + 1]].sum()
    q = (pairs + 0.5) / (pairs + 0.5).sum(axis=1, keepdims=True)
    mix = (1 - w) * predictive
    mix[0] += w / pruned.n_symbols
    mix[1:] += w * q[x[:-1], x[1:]]
    assert result.bps == pytest.approx(-np.sum(np.log2(mix)) / len(x), rel=1e-10)


def test_sequence_validation() -> None:
    model = tiny_model(0)
    with pytest.raises(ValueError, match="outside"):
        inference.log_likelihood(model, np.array([0, model.n_symbols]))
    with pytest.raises(ValueError, match="non-empty"):
        inference.log_likelihood(model, np.array([], dtype=np.int64))
    with pytest.raises(ValueError, match="at least two"):
        inference.e_step(model, np.array([0]))
    with pytest.raises(ValueError, match="count_method"):
        inference.e_step(model, np.array([0, 1]), count_method="fast")
    with pytest.raises(ValueError, match="backoff_weight"):
        inference.score(model, np.array([0, 1]), backoff_weight=1.0)


def _e_step_in_child(queue) -> None:  # runs in a forked process
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, 500)
    model = random_model(["a", "b", "c"], np.array([3, 3, 3]), pairs_in_sequence(x, 3), rng)
    queue.put(inference.e_step(model, x).log_likelihood)


def test_e_step_works_in_a_forked_child() -> None:
    # Regression: the E-step's two-thread pool was created once per interpreter; a child forked after the parent had
    # used it (as Dash's background-job manager does) inherited a pool without threads and hung forever.
    import multiprocessing

    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, 500)
    model = random_model(["a", "b", "c"], np.array([3, 3, 3]), pairs_in_sequence(x, 3), rng)
    expected = inference.e_step(model, x).log_likelihood  # the parent's pool now exists
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_e_step_in_child, args=(queue,))
    child.start()
    child.join(timeout=60)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive, "the E-step hung in a forked child"
    assert queue.get(timeout=5) == pytest.approx(expected, rel=1e-12)


def test_sampling_starts_only_where_the_sequence_can_go_on() -> None:
    """pi is uniform over all clones, also over those of a symbol never seen in training, which have no outgoing
    transitions; found by QA: a sample starting there stopped after one symbol."""
    pairs = np.array([[0, 1], [1, 0], [1, 1], [0, 2]])  # 'c' is reached but never left
    model = random_model(["a", "b", "c"], np.array([2, 2, 3]), pairs, np.random.default_rng(0), np.float64)
    model.pi[:] = 1.0 / model.n_states  # 3 of 7 clones cannot go on
    starts = set()
    for seed in range(60):
        out = sampling.sample(model, 6, np.random.default_rng(seed))
        starts.add(int(out[0]))
        assert len(out) == 6 or out[-1] == 2  # only a transition into 'c' ends a sample early
    assert starts == {0, 1}
    with pytest.raises(ValueError, match="no transition out of the prefix's last symbol 'c'"):
        sampling.sample(model, 5, np.random.default_rng(0), prefix=np.array([0, 2]))
    dead = CHMM(model.symbols, model.layout, np.zeros_like(model.T), model.pi, None)
    with pytest.raises(ValueError, match="no clone with outgoing transitions"):
        sampling.sample(dead, 5, np.random.default_rng(0))
