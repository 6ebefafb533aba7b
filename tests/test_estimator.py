"""The notebook estimator (:mod:`engine.estimator`): hmmlearn's CategoricalHMM given a fitted CHMM's ``startprob_``,
``transmat_`` and one-hot ``emissionprob_`` computes the same log-likelihood, Viterbi path and posteriors; ``fit``
on many sequences of different lengths is training on the corpus of those documents; sampling, soft evidence,
files and pickling."""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest

from engine.backends.model_files import load_model
from engine.corpora.sequences import read_lines
from engine.errors import CHMMError
from engine.estimator import CHMM, Learner
from engine.training import TrainOptions, train_text

hmm = pytest.importorskip("hmmlearn.hmm")

SMALL = {"states": 14, "pseudocount": 1e-3, "iterations": 4, "min_count": 1, "dtype": "float64", "jobs": 1}


def _sequences(n: int, seed: int, symbols: int = 4) -> list[list[int]]:
    """``n`` integer sequences of 5-40 symbols from a random walk on ``symbols`` symbols (so blocks are shared)."""
    rng = np.random.default_rng(seed)
    step = rng.dirichlet(np.full(symbols, 0.5), size=symbols)
    out = []
    for _ in range(n):
        s = [int(rng.integers(symbols))]
        for _ in range(int(rng.integers(5, 41)) - 1):
            s.append(int(rng.choice(symbols, p=step[s[-1]])))
        out.append(s)
    return out


@pytest.fixture(scope="module")
def fitted() -> tuple[CHMM, list[list[int]]]:
    sequences = _sequences(80, 0)
    return CHMM(**SMALL).fit(sequences), sequences


def _hmmlearn(model: CHMM) -> hmm.CategoricalHMM:
    other = hmm.CategoricalHMM(n_components=model.n_states_, n_features=model.n_features_, init_params="", params="")
    other.startprob_ = model.startprob_
    T = model.transmat_
    T[T.sum(axis=1) == 0] = 1 / model.n_states_  # clones no transition leaves (their symbol never followed): unreached
    other.transmat_ = T
    other.emissionprob_ = model.emissionprob_
    return other


def _codes(model: CHMM, sequences: list[list[int]]) -> tuple[np.ndarray, list[int]]:
    index = {s: k for k, s in enumerate(model.symbols_)}
    return np.array([index[t] for s in sequences for t in s])[:, None], [len(s) for s in sequences]


def test_hmmlearn_computes_the_same_log_likelihood_path_and_posteriors(fitted: tuple[CHMM, list[list[int]]]) -> None:
    model, sequences = fitted
    other = _hmmlearn(model)
    test = _sequences(6, 1)
    codes, lengths = _codes(model, test)
    assert model.score(test) == pytest.approx(other.score(codes, lengths), abs=1e-10)
    for sequence in test:
        one, _ = _codes(model, [sequence])
        theirs, path = other.decode(one, algorithm="viterbi")
        ours, clones = model.decode([sequence])
        assert ours == pytest.approx(theirs, abs=1e-10)
        np.testing.assert_array_equal(clones, path)
    np.testing.assert_allclose(model.predict_proba(test), other.predict_proba(codes, lengths), atol=1e-10)
    theirs = np.concatenate([other.predict(_codes(model, [s])[0]) for s in test])
    np.testing.assert_array_equal(model.predict(test), theirs)


def test_the_log_likelihood_equals_brute_force_over_clone_paths(fitted: tuple[CHMM, list[list[int]]]) -> None:
    model, _ = fitted
    x = [0, 1, 1, 2]
    pi, T, clone_symbol = model.startprob_, model.transmat_, model.clone_symbol_
    index = {s: k for k, s in enumerate(model.symbols_)}
    total = 0.0
    for path in itertools.product(range(model.n_states_), repeat=len(x)):
        if all(clone_symbol[z] == index[s] for z, s in zip(path, x, strict=True)):
            total += pi[path[0]] * np.prod([T[a, b] for a, b in itertools.pairwise(path)])
    assert model.score([x]) == pytest.approx(np.log(total), abs=1e-10)


def test_fit_on_many_sequences_is_training_on_the_corpus_of_those_documents(tmp_path) -> None:
    sequences = _sequences(1000, 2, symbols=6)
    estimator = CHMM(**SMALL).fit(sequences)
    corpus = "\n".join(" ".join(str(t) for t in s) for s in sequences)
    options = TrainOptions(
        states=SMALL["states"], pseudocount=SMALL["pseudocount"], iterations=SMALL["iterations"], min_count=1,
        dtype="float64", unit="tokens", by_sequence=True, test_fraction=0.0,
    )  # fmt: skip
    outcome = train_text(read_lines(corpus), options)
    assert estimator.model_.symbols == outcome.model.symbols
    np.testing.assert_array_equal(estimator.model_.T, outcome.model.T)
    np.testing.assert_array_equal(estimator.model_.pi, outcome.model.pi)
    flat, lengths = np.concatenate(sequences)[:, None], [len(s) for s in sequences]
    np.testing.assert_array_equal(CHMM(**SMALL).fit(flat, lengths).model_.T, outcome.model.T)


def test_sampled_clones_emit_the_sampled_symbols_and_follow_transitions(fitted: tuple[CHMM, list[list[int]]]) -> None:
    model, _ = fitted
    X, clones = model.sample(300, random_state=3)
    assert X.shape == (len(clones), 1) and len(clones) > 1
    symbols = np.array(model.symbols_, dtype=object)
    np.testing.assert_array_equal(symbols[model.clone_symbol_[clones]].astype(int), X.ravel())
    T = model.transmat_
    assert all(T[a, b] > 0 for a, b in itertools.pairwise(clones))
    again, same = model.sample(300, random_state=3)
    np.testing.assert_array_equal(again, X)
    np.testing.assert_array_equal(same, clones)


def test_soft_evidence_picks_the_likelier_symbol(fitted: tuple[CHMM, list[list[int]]]) -> None:
    model, _ = fitted
    hard = model.decode([[0, 1, 2]])
    soft = model.decode(evidence=[{0: 1.0}, {1: 1.0, 3: 1e-9}, {2: 1.0}])
    np.testing.assert_array_equal(soft[1], hard[1])
    assert soft[0] == pytest.approx(hard[0], abs=1e-6)
    with pytest.raises(CHMMError, match="outside the model's alphabet"):
        model.decode(evidence=[{"zebra": 1.0}])


def test_a_fitted_model_pickles_and_saves_without_changing_what_it_computes(
    fitted: tuple[CHMM, list[list[int]]], tmp_path
) -> None:
    model, sequences = fitted
    expected = model.score(sequences[:5])
    again = pickle.loads(pickle.dumps(model))
    assert again.score(sequences[:5]) == expected and again.get_params() == model.get_params()
    model.save(tmp_path / "m.npz")
    loaded = CHMM.load(tmp_path / "m.npz")
    assert loaded.score(sequences[:5]) == expected and loaded.symbols_ == model.symbols_
    assert loaded.states == model.states and loaded.dtype == "float64"
    assert [r.train_bps for r in loaded.history_] == pytest.approx([r.train_bps for r in model.history_])
    assert load_model(tmp_path / "m.npz").n_states == model.n_states_  # the project's own format


def test_text_tokens_and_bad_input() -> None:
    text = CHMM(states=40, pseudocount=1e-3, iterations=3, jobs=1).fit("the cat sat on the mat. " * 60)
    sample, clones = text.sample(30, random_state=0)
    assert isinstance(sample, str) and len(sample) == len(clones)
    assert 0 < text.bits_per_symbol("the cat sat on the mat.") < 1.0
    words = [s.split() for s in ["a b c a b", "b c a", "c a b c a b"] * 20]
    tokens = CHMM(states=9, pseudocount=1e-3, iterations=3, min_count=1, jobs=1).fit(words)
    assert set(tokens.symbols_) >= {"a", "b", "c"} and isinstance(tokens.sample(5, random_state=0)[0], list)
    assert tokens.score([["a", "b", "c"]]) < 0
    with pytest.raises(CHMMError, match="reads tokens"):
        tokens.score("abc def")
    with pytest.raises(CHMMError, match="not fitted"):
        CHMM().score([[1, 2]])
    with pytest.raises(CHMMError, match="add up to"):
        CHMM().fit(np.zeros((5, 1), dtype=int), [2, 2])
    with pytest.raises(CHMMError, match="no hyper-parameter"):
        CHMM().set_params(n_components=3)


def test_the_dense_matrices_are_refused_for_a_large_model(fitted, monkeypatch) -> None:
    model, _ = fitted
    from engine import estimator

    monkeypatch.setattr(estimator, "DENSE_STATES", model.n_states_ - 1)
    with pytest.raises(CHMMError, match="transitions_"):
        _ = model.transmat_
    assert model.transitions_.shape == (model.n_states_, model.n_states_)


def test_integer_symbols_are_in_their_order_so_that_symbol_k_is_k() -> None:
    sequences = [[t % 12 for t in s] for s in _sequences(60, 5, symbols=12)]
    model = CHMM(**(SMALL | {"states": 30})).fit(sequences)
    assert model.symbols_[:12] == list(range(12)) and model.symbols_[12:] == ["<rare>"]
    x = sequences[0][:6]
    _, clones = model.decode([x])
    assert np.all(clones >= 0)
    np.testing.assert_array_equal(model.clone_symbol_[clones], x)
    np.testing.assert_array_equal(model.emissionprob_[clones].argmax(axis=1), x)
    flat = np.array([t for s in sequences[:4] for t in s])
    as_lists = flat[:, None].tolist()  # hmmlearn's X as a list of one-symbol lists
    lengths = [len(s) for s in sequences[:4]]
    assert model.score(as_lists, lengths) == model.score(flat[:, None], lengths) == model.score(sequences[:4])
    with pytest.raises(CHMMError, match="integers or strings"):
        model.score([0.5, 1.5])


def test_a_peer_reads_x_as_the_chmm_does() -> None:
    text = "The Cat sat on the Mat, 12 times. " * 40
    ngram = Learner("ngram").fit(text)
    chmm_model = CHMM(states=40, pseudocount=1e-3, iterations=3, jobs=1).fit(text)
    assert ngram.learner_.metadata["symbols"] == chmm_model.model_.symbols  # the same normalised alphabet
    assert ngram.bits_per_symbol("the cat sat") < 1.5
    with pytest.raises(CHMMError, match="reads text"):
        ngram.bits_per_symbol([["the", "cat"]])


def test_peers_have_the_same_interface() -> None:
    sequences = _sequences(60, 4)
    ngram = Learner("ngram").fit(sequences)
    bps = ngram.bits_per_symbol(sequences[:5])
    n = sum(len(s) for s in sequences[:5])
    assert ngram.score(sequences[:5]) == pytest.approx(-bps * n * np.log(2))
    assert 0 < bps < np.log2(4) + 0.5
    with pytest.raises(CHMMError, match="unknown peer learner"):
        Learner("chmm")


@pytest.mark.gpu
def test_on_a_gpu_the_estimator_reads_as_on_the_cpu(fitted: tuple[CHMM, list[list[int]]]) -> None:
    from engine.backends.gpu import backend

    available, reason = backend.gpu_status()
    if not available:
        pytest.skip(reason)
    model, sequences = fitted
    on_gpu = pickle.loads(pickle.dumps(model)).set_params(backend="gpu")
    assert on_gpu.score(sequences[:5]) == pytest.approx(model.score(sequences[:5]), rel=1e-9)
    np.testing.assert_array_equal(on_gpu.predict(sequences[:5]), model.predict(sequences[:5]))
    trained = CHMM(**(SMALL | {"backend": "gpu"})).fit(sequences)
    assert trained.bits_per_symbol(sequences[:5]) == pytest.approx(model.bits_per_symbol(sequences[:5]), abs=0.05)
