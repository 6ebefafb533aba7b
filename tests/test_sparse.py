"""Sparse-block CHMMs against the dense engine on the same non-zeros, growing by clone splitting, and files."""

from __future__ import annotations

import numpy as np
import pytest

from engine.backends.cpu import inference, sampling, sparse
from engine.model import pruning
from engine.model.blocks import normalise_rows, pairs_in_sequence
from engine.model.dense import CHMM, ModelFormatError, random_model
from engine.training import growing, learning


def _trained_like(seed: int, n_symbols: int = 8, states: int = 160, length: int = 6000):
    """A random model with sharp rows (like a trained one) and a structured sequence."""
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.full(n_symbols, 0.3), size=n_symbols)
    x = np.empty(length, dtype=np.int64)
    x[0] = 0
    for n in range(1, length):
        x[n] = rng.choice(n_symbols, p=P[x[n - 1]])
    n_clones = 1 + rng.multinomial(states - n_symbols, np.full(n_symbols, 1.0 / n_symbols))
    model = random_model([chr(97 + s) for s in range(n_symbols)], n_clones, pairs_in_sequence(x, n_symbols), rng)
    T = normalise_rows(model.layout, model.T.astype(np.float64) ** 6, 0.0, np.float32)
    return CHMM(model.symbols, model.layout, T, model.pi, None, {}), x, rng


@pytest.mark.parametrize("threshold", [1e-3, 1e-2, 5e-2])
def test_sparse_and_dense_agree_on_pruned_models(threshold):
    """In float64 (messages and T), so that the comparison sees the algorithms, not float32 summation orders."""
    model, x, _ = _trained_like(1)
    model = CHMM(model.symbols, model.layout, model.T.astype(np.float64), model.pi.astype(np.float64), None, {})
    pruned = pruning.prune(model, threshold=threshold)
    compact = sparse.from_dense(pruned)
    assert compact.n_nonzero() == pruned.n_nonzero() < model.n_nonzero()
    dense_forward = inference.forward(pruned, x)
    sparse_forward = sparse.forward(compact, x)
    assert sparse_forward.zero_events == dense_forward.zero_events
    np.testing.assert_allclose(sparse_forward.predictive, dense_forward.predictive, rtol=1e-6, atol=1e-12)
    if dense_forward.zero_events == 0:
        ll_dense, ll_sparse = inference.log_likelihood(pruned, x), sparse.log_likelihood(compact, x)
        assert abs(ll_sparse - ll_dense) <= 1e-6 * abs(ll_dense)
    e_dense = inference.e_step(pruned, x)
    e_sparse = sparse.e_step(compact, x)
    back = compact.with_data(compact.data, e_sparse.counts).to_dense()
    assert np.max(np.abs(back.counts - e_dense.counts)) <= 1e-6 * np.abs(e_dense.counts).max()
    np.testing.assert_allclose(e_sparse.gamma_first, e_dense.gamma_first, atol=1e-7)
    assert sparse.score(compact, x).bps == pytest.approx(inference.score(pruned, x).bps, rel=1e-6)
    np.testing.assert_array_equal(compact.to_dense().T, pruned.T)


def test_zeros_stay_zero_and_sparse_em_follows_dense_em():
    model, x, _ = _trained_like(2)
    pruned = pruning.prune(model, threshold=1e-2)
    zeros = pruned.T == 0
    config = learning.TrainingConfig(iterations=3, pseudocount=1e-3, tolerance=0.0)
    dense_run = learning.fit(pruned, x[:5000], x[5000:], config)
    sparse_run = learning.fit(sparse.from_dense(pruned), x[:5000], x[5000:], config)
    assert isinstance(sparse_run.model, sparse.SparseCHMM)
    for a, b in zip(dense_run.history, sparse_run.history, strict=True):
        assert a.train_bps == pytest.approx(b.train_bps, abs=1e-6)
        assert a.validation_bps == pytest.approx(b.validation_bps, abs=1e-6)
    grown_back = sparse_run.model.to_dense()
    assert np.all(grown_back.T[zeros] == 0)
    assert np.max(np.abs(grown_back.T - dense_run.model.T)) <= 1e-5
    assert np.all(dense_run.model.T[zeros] == 0)


def test_viterbi_and_sampling_match_the_dense_kernels():
    model, x, rng = _trained_like(3)
    pruned = pruning.prune(model, threshold=1e-2)
    compact = sparse.from_dense(pruned)
    np.testing.assert_array_equal(sparse.viterbi(compact, x[:800]).clones, inference.viterbi(pruned, x[:800]).clones)
    options = [{int(s): 1.0, int((s + 1) % 8): 0.3} for s in x[:300]]
    evidence = inference.Evidence.from_lists(options)
    a, b = sparse.viterbi(compact, evidence), inference.viterbi(pruned, evidence)
    np.testing.assert_array_equal(a.clones, b.clones)
    assert a.log_probability == pytest.approx(b.log_probability, rel=1e-12)
    np.testing.assert_array_equal(
        sparse.sample(compact, 500, np.random.default_rng(7)), sampling.sample(pruned, 500, np.random.default_rng(7))
    )
    np.testing.assert_array_equal(
        sparse.sample(compact, 50, np.random.default_rng(8), prefix=x[:20]),
        sampling.sample(pruned, 50, np.random.default_rng(8), prefix=x[:20]),
    )


def test_splitting_clones_keeps_the_distribution_exactly_without_noise():
    model, x, rng = _trained_like(4, states=80)
    pruned = pruning.prune(model, threshold=1e-2)
    target = pruned.n_clones * 3 + np.arange(len(pruned.n_clones)) % 2  # not all multiples of the old counts
    grown = growing.split_clones(pruned, target, rng, noise=0.0)
    np.testing.assert_array_equal(grown.n_clones, target)
    assert grown.n_states == int(target.sum()) and grown.metadata["grown_from"] == pruned.n_states
    assert grown.pi.sum() == pytest.approx(1.0)
    row_sums = grown.to_dense().dense_T().sum(axis=1)
    assert np.allclose(row_sums[row_sums > 0], 1.0, atol=1e-5)
    ll_old, ll_new = inference.log_likelihood(pruned, x), sparse.log_likelihood(grown, x)
    assert ll_new == pytest.approx(ll_old, rel=1e-6)
    noisy = growing.split_clones(pruned, target, rng, noise=0.2)
    assert noisy.n_nonzero() == grown.n_nonzero()
    assert sparse.log_likelihood(noisy, x) != pytest.approx(ll_old, rel=1e-9)
    with pytest.raises(ValueError, match="at least the old number"):
        growing.split_clones(pruned, pruned.n_clones - 1, rng)


def test_save_and_load_round_trip(tmp_path):
    model, x, _ = _trained_like(5)
    compact = sparse.from_dense(pruning.prune(model, threshold=1e-2))
    compact = compact.with_data(compact.data, sparse.e_step(compact, x).counts)
    path = tmp_path / "sparse.npz"
    sparse.save(compact, path)
    assert sparse.is_sparse_file(path)
    again = sparse.load(path)
    for name in ("row_base", "indptr", "indices", "data", "pi", "counts"):
        np.testing.assert_array_equal(getattr(again, name), getattr(compact, name))
    assert again.metadata == compact.metadata and again.symbols == compact.symbols
    (tmp_path / "bad.npz").write_bytes(b"not a model")
    assert not sparse.is_sparse_file(tmp_path / "bad.npz")
    with pytest.raises(ModelFormatError):
        sparse.load(tmp_path / "bad.npz")
    # content the tools cannot use is refused (found by QA: string values used to raise a TypeError)
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    for name, values, message in (
        ("data", arrays["data"].astype(str), "data holds <U.* values"),
        ("data", arrays["data"] * 3, "a row of T sums to 3"),
        ("pi", np.zeros_like(arrays["pi"]), "pi has no mass"),
    ):
        np.savez(tmp_path / "damaged.npz", **(arrays | {name: values}))
        with pytest.raises(ModelFormatError, match=message):
            sparse.load(tmp_path / "damaged.npz")


def test_sparse_models_go_through_the_training_and_use_services(tmp_path):
    from engine import api
    from engine.backends import model_files
    from engine.network import communities

    model, x, rng = _trained_like(6, n_symbols=6, states=120)
    model.metadata = {"normalisation": "raw"}
    compact = sparse.from_dense(pruning.prune(model, threshold=1e-3))
    path = tmp_path / "m.npz"
    model_files.save_model(compact, path)
    loaded = model_files.load_model(path)
    assert isinstance(loaded, sparse.SparseCHMM)
    text = loaded.decode_symbols(x[:2000])
    assert api.score_text(loaded, text).bps == pytest.approx(inference.score(compact.to_dense(), x[:2000]).bps)
    shown, bits = api.surprisal_text(loaded, text)
    assert shown == text
    np.testing.assert_allclose(bits, inference.surprisal(compact.to_dense(), x[:2000]), rtol=1e-5, atol=1e-9)
    assert len(api.sample_text(loaded, 50, seed=1)) == 50
    pruned = sparse.prune(loaded, 5e-2)
    dense_pruned = pruning.prune(loaded.to_dense(), threshold=5e-2)
    np.testing.assert_allclose(pruned.to_dense().T, dense_pruned.T, atol=1e-6)
    assert pruned.backoff_weight == pytest.approx(dense_pruned.backoff_weight, rel=1e-6)
    graph_sparse = api.model_graph(loaded, 5e-2)
    graph_dense = api.model_graph(loaded.to_dense(), 5e-2)
    assert (graph_sparse.weight != graph_dense.weight).nnz == 0
    np.testing.assert_allclose(graph_sparse.flow, graph_dense.flow, atol=1e-9)
    result = api.model_communities(loaded, 5e-2, communities.CommunityOptions(trials=1))
    assert result.top_modules and sum(m.flow for m in result.top_modules) == pytest.approx(1.0, abs=1e-6)


def test_block_sums_with_empty_rows_and_blocks():
    model, x, _ = _trained_like(7, states=60)
    compact = sparse.from_dense(pruning.prune(model, threshold=0.2))  # many empty rows
    counts = sparse.e_step(compact, x).counts
    sums = sparse.block_sums(compact.with_data(compact.data, counts))
    dense = compact.with_data(compact.data, counts).to_dense()
    expected = np.add.reduceat(dense.counts, dense.layout.block_offset[:-1])
    np.testing.assert_allclose(sums, expected, rtol=1e-9, atol=1e-9)
