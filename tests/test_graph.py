"""Pruning, support-aware EM on pruned models, the stationary flow and the clone graph (engine/network/graph.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from engine.backends.cpu import inference
from engine.model import pruning, synthetic
from engine.model.blocks import BlockLayout, dense_to_blocks, normalise_rows, row_sums
from engine.model.dense import CHMM, load, save
from engine.network import graph
from engine.training import learning

K = 2


@pytest.fixture(scope="module")
def true_model() -> CHMM:
    return synthetic.toy_fsm_true_model(K)


@pytest.fixture(scope="module")
def sequence() -> np.ndarray:
    return synthetic.toy_fsm_sequence(K, 6000, np.random.default_rng(1))


def noisy_full_model(true: CHMM, noise: float = 1e-5, extra_clones: int = 0, seed: int = 0) -> CHMM:
    """The true toy model as a trained model looks: every symbol pair stored, every entry non-zero (the true T
    plus a pseudocount-like ``noise``), optionally with ``extra_clones`` unused clones per noise symbol."""
    rng = np.random.default_rng(seed)
    n_clones = synthetic.toy_fsm_clones(K, extra_clones)
    E = len(n_clones)
    pairs = np.array([(i, j) for i in range(E) for j in range(E)])
    layout = BlockLayout.build(n_clones, pairs)
    dense = np.zeros((layout.n_states, layout.n_states))
    # embed the true model: true clone u of symbol s is clone u of s here
    true_dense = true.dense_T()
    index = np.concatenate([layout.clone_start[s] + np.arange(true.n_clones[s]) for s in range(E)])
    dense[np.ix_(index, index)] = true_dense
    flat = dense_to_blocks(layout, dense) + noise * rng.random(layout.size)
    T = normalise_rows(layout, flat, 0.0, np.float64)
    pi = np.zeros(layout.n_states)
    pi[index] = true.pi
    return CHMM(list(true.symbols), layout, T, pi, None, {"source": "test"})


def used_transitions(model: CHMM, x: np.ndarray) -> set[tuple[int, int]]:
    path = inference.viterbi(model, x).clones
    return set(zip(path[:-1].tolist(), path[1:].tolist(), strict=True))


def nonzero_transitions(model: CHMM) -> set[tuple[int, int]]:
    rows, cols = np.nonzero(model.dense_T())
    return set(zip(rows.tolist(), cols.tolist(), strict=True))


# ============================================================================================ pruning
def test_pruning_the_true_model_keeps_bps_and_its_transitions(true_model: CHMM, sequence: np.ndarray) -> None:
    pruned = pruning.prune(true_model, threshold=1e-3)
    before, after = inference.score(true_model, sequence).bps, inference.score(pruned, sequence).bps
    assert abs(after - before) < 1e-3
    assert nonzero_transitions(pruned) == nonzero_transitions(true_model) == used_transitions(true_model, sequence)
    assert pruned.metadata["pruned"]["threshold"] == 1e-3


def test_pruning_a_noisy_model_removes_every_unused_transition(true_model: CHMM, sequence: np.ndarray) -> None:
    noisy = noisy_full_model(true_model)
    assert noisy.n_nonzero() == noisy.layout.size  # every stored entry non-zero, as after EM with a pseudocount
    pruned = pruning.prune(noisy, threshold=1e-3)
    # exactly the transitions the process uses survive; the blocks that became all-zero are gone
    assert nonzero_transitions(pruned) == used_transitions(true_model, sequence)
    assert pruned.layout.n_blocks == true_model.layout.n_blocks < noisy.layout.n_blocks
    np.testing.assert_array_equal(pruned.layout.block_pairs, true_model.layout.block_pairs)
    np.testing.assert_allclose(pruned.dense_T(), true_model.dense_T(), atol=1e-4)
    np.testing.assert_allclose(graph_row_sums(pruned), 1.0, atol=1e-12)
    assert abs(inference.score(pruned, sequence).bps - inference.score(noisy, sequence).bps) < 1e-3
    record = pruned.metadata["pruned"]
    assert record["nonzeros_before"] == noisy.layout.size and record["nonzeros_after"] == pruned.n_nonzero()
    assert record["kept_fraction"] == pytest.approx(pruned.n_nonzero() / noisy.layout.size)


def graph_row_sums(model: CHMM) -> np.ndarray:
    sums = model.dense_T().sum(axis=1)
    return sums[sums > 0]


def test_top_mass_pruning_keeps_the_heavy_entries_of_each_row(true_model: CHMM, sequence: np.ndarray) -> None:
    noisy = noisy_full_model(true_model)
    pruned = pruning.prune(noisy, top_mass=0.99)
    assert nonzero_transitions(pruned) == used_transitions(true_model, sequence)
    # every row keeps at least one entry, and the kept entries hold >= 99% of the original row
    dense, kept = noisy.dense_T(), pruned.dense_T() > 0
    assert np.all(kept.any(axis=1))
    assert np.all((dense * kept).sum(axis=1) >= 0.99 - 1e-12)
    everything = pruning.prune(noisy, top_mass=1.0)
    assert everything.n_nonzero() == noisy.n_nonzero()


def test_viterbi_pruning_drops_the_clones_the_text_never_uses(true_model: CHMM, sequence: np.ndarray) -> None:
    noisy = noisy_full_model(true_model, extra_clones=1)  # one unused clone per noise symbol
    used = graph.viterbi_clones(noisy, sequence)
    pruned = graph.prune_to_viterbi(noisy, sequence)
    unused = np.flatnonzero(~used)
    assert len(unused) == 4 * K - 2  # the extra clone of each noise symbol
    dense = pruned.dense_T()
    assert not dense[unused].any() and not dense[:, unused].any()
    assert pruned.pi[unused].sum() == 0
    assert abs(inference.score(pruned, sequence).bps - inference.score(noisy, sequence).bps) < 1e-3
    both = graph.prune_to_viterbi(noisy, sequence, threshold=1e-3)
    assert nonzero_transitions(both) <= nonzero_transitions(pruned)


def test_prune_rejects_bad_arguments(true_model: CHMM) -> None:
    for bad in (0.0, 1.0, -1e-3, 2.0, float("nan"), "x"):
        with pytest.raises(ValueError, match="threshold"):
            pruning.prune(true_model, threshold=bad)
    with pytest.raises(ValueError):
        pruning.prune(true_model)
    with pytest.raises(ValueError, match="top mass"):
        pruning.prune(true_model, top_mass=0.0)


def test_a_pruned_model_saves_and_loads(true_model: CHMM, tmp_path) -> None:
    pruned = pruning.prune(noisy_full_model(true_model), threshold=1e-3)
    save(pruned, tmp_path / "p.npz")
    loaded = load(tmp_path / "p.npz")
    np.testing.assert_array_equal(loaded.layout.block_pairs, pruned.layout.block_pairs)
    np.testing.assert_array_equal(loaded.T, pruned.T)
    assert loaded.metadata["pruned"] == pruned.metadata["pruned"]


def test_pruning_twice_keeps_a_history(true_model: CHMM) -> None:
    once = pruning.prune(noisy_full_model(true_model), threshold=1e-6)
    twice = pruning.prune(once, threshold=1e-3)
    assert twice.metadata["pruned_history"] == [once.metadata["pruned"]]


def test_sweep_keeps_fewer_entries_as_the_threshold_grows(true_model: CHMM, sequence: np.ndarray) -> None:
    noisy = noisy_full_model(true_model)
    points = graph.prune_sweep(noisy, [1e-12, 1e-3, 0.3, 0.6], sequence)
    fractions = [p.kept_fraction for p in points]
    assert fractions == sorted(fractions, reverse=True)
    assert fractions[0] == 1.0
    assert points[1].bps == pytest.approx(synthetic.toy_fsm_optimal_bps(K), abs=5e-3)
    assert points[3].bps > points[1].bps  # 0.6 cuts the 1/2 coin flips: zero-probability events, backed off
    assert points[3].zero_probability_events > 0


# ================================================================================ EM keeps the zeros
def test_normalise_rows_with_a_support_adds_the_pseudocount_there_only() -> None:
    layout = BlockLayout.build(np.array([2, 2]), np.array([[0, 0], [0, 1], [1, 0]]))
    counts = np.arange(layout.size, dtype=float)
    support = counts % 3 != 0
    T = normalise_rows(layout, counts, 0.5, np.float64, support)
    assert np.all(T[~support] == 0)
    assert np.all(T[support] > 0)
    dense = layout_dense(layout, T)
    np.testing.assert_allclose(dense.sum(axis=1)[dense.sum(axis=1) > 0], 1.0)


def layout_dense(layout: BlockLayout, flat: np.ndarray) -> np.ndarray:
    from engine.model.blocks import blocks_to_dense

    return blocks_to_dense(layout, flat)


@pytest.mark.parametrize("algorithm", ["em", "online", "viterbi"])
def test_em_on_a_pruned_model_keeps_zeros_at_zero(true_model: CHMM, sequence: np.ndarray, algorithm: str) -> None:
    noisy = noisy_full_model(true_model, noise=1e-2)
    pruned = pruning.prune(noisy, threshold=1e-3)
    zeros = pruned.T == 0
    assert zeros.any() and pruned.fixed_zeros and pruned.support() is not None
    config = learning.TrainingConfig(algorithm=algorithm, iterations=3, pseudocount=0.1, batch_size=500)
    trained = learning.fit(pruned, sequence, config=config).model
    assert np.all(trained.T[zeros] == 0)
    assert np.all(trained.T[~zeros] > 0)
    # without fixed zeros the same M-step fills the zeros with the pseudocount
    unmarked = CHMM(pruned.symbols, pruned.layout, pruned.T.copy(), pruned.pi, None, {})
    assert not unmarked.fixed_zeros and unmarked.support() is None
    filled = learning.fit(unmarked, sequence, config=config).model
    assert np.all(filled.T > 0)


# ============================================================================ flow and clone graph
def test_stationary_flow_of_the_periodic_toy_chain(true_model: CHMM, sequence: np.ndarray) -> None:
    g = graph.clone_graph(true_model)
    assert g.flow.sum() == pytest.approx(1.0)
    # the chain has period 3k; its stationary distribution is the long-run clone occupancy
    path = inference.viterbi(true_model, np.tile(sequence, 4)).clones
    occupancy = np.bincount(path, minlength=true_model.n_states) / len(path)
    np.testing.assert_allclose(g.flow, occupancy, atol=0.01)
    # flow is stationary: flow T = flow (up to the teleportation)
    np.testing.assert_allclose(g.flow @ true_model.dense_T(), g.flow, atol=1e-5)


def test_stationary_flow_is_robust_for_reducible_chains() -> None:
    # 0 -> 1 -> 2 -> 1 (closed class {1, 2}), 3 -> 4 (4 a dead end), 5 isolated
    W = sp.csr_array(([1.0, 1.0, 1.0, 1.0], ([0, 1, 2, 3], [1, 2, 1, 4])), shape=(6, 6))
    flow = graph.stationary_distribution(W)
    assert np.all(np.isfinite(flow)) and flow.sum() == pytest.approx(1.0)
    assert flow[5] == 0.0  # no edges: no flow
    assert flow[1] + flow[2] > 0.99  # the closed class holds the flow
    assert flow[1] == pytest.approx(flow[2], rel=1e-3)


def test_clone_graph_attributes(true_model: CHMM, sequence: np.ndarray) -> None:
    noisy = noisy_full_model(true_model)
    trained = learning.fit(noisy, sequence, config=learning.TrainingConfig(iterations=1)).model
    pruned = pruning.prune(trained, threshold=1e-3)
    g = graph.clone_graph(pruned)
    assert isinstance(g.weight, sp.csr_array) and g.weight.shape == (pruned.n_states, pruned.n_states)
    assert g.n_edges == pruned.n_nonzero()
    np.testing.assert_allclose(g.weight.toarray(), pruned.dense_T())
    from engine.model.blocks import blocks_to_dense

    np.testing.assert_allclose(
        g.matrix("count").toarray(), blocks_to_dense(pruned.layout, pruned.counts) * (g.weight.toarray() > 0)
    )
    sources, _ = g.edges()
    np.testing.assert_allclose(g.edge_flow, g.flow[sources] * g.weight.data)
    assert g.edge_flow.sum() == pytest.approx(1.0)
    assert [g.char(i) for i in range(4)] == ["0", "1", "2", "3"]
    assert g.label(5) == "4:1" and int(g.clone_rank[5]) == 1
    assert g.active().all()


def test_incident_edges_match_a_full_scan(true_model: CHMM) -> None:
    g = graph.clone_graph(noisy_full_model(true_model, extra_clones=1))
    sources, targets = g.edges()
    rng = np.random.default_rng(3)
    for _ in range(5):
        nodes = np.sort(rng.choice(g.n_states, size=7, replace=False))
        inside = np.isin(np.arange(g.n_states), nodes)
        entering, leaving = g.incident_edges(nodes)
        assert sorted(entering.tolist()) == np.flatnonzero(~inside[sources] & inside[targets]).tolist()
        assert sorted(leaving.tolist()) == np.flatnonzero(inside[sources] & ~inside[targets]).tolist()


def test_pruned_model_backs_off_with_the_removed_mass(true_model: CHMM, sequence: np.ndarray) -> None:
    """The scorer of a pruned model mixes in the symbol bigram with the transition mass the pruning removed, so a
    transition that only small entries supported costs about -log2(removed mass * bigram) instead of ~20 bits."""
    noisy = noisy_full_model(true_model, noise=1e-2)
    pruned = pruning.prune(noisy, threshold=0.05)
    weight = pruned.backoff_weight
    removed = 1.0 - row_sums(noisy.layout, np.where(noisy.T >= 0.05, noisy.T, 0.0).astype(np.float64))
    kept = removed < 1.0
    assert weight == pytest.approx(float(np.mean(removed[kept])), rel=1e-6)  # no counts: plain mean over rows
    assert weight > 1e-3
    # a text with transitions the pruned model no longer has (noise symbols in the wrong order)
    odd = np.concatenate([sequence[:200], sequence[200:400][::-1]])
    with_backoff = inference.score(pruned, odd)
    assert with_backoff.zero_probability_events > 0
    assert with_backoff.bps == inference.score(pruned, odd, backoff_weight=weight).bps
    assert with_backoff.bps < inference.score(pruned, odd, backoff_weight=inference.BACKOFF_WEIGHT).bps
    # an unpruned model keeps the default weight
    assert "backoff_weight" not in noisy.metadata
    # pruning again at the same threshold removes nothing: the weight and the score stay (found by a UX review: the
    # weight fell to 1e-6 and the BPS of such text doubled)
    again = pruning.prune(pruned, threshold=0.05)
    assert again.n_nonzero() == pruned.n_nonzero()
    assert again.backoff_weight == pytest.approx(weight, rel=1e-9)
    assert inference.score(again, odd).bps == pytest.approx(with_backoff.bps, rel=1e-9)
    # a second pruning that does remove mass adds to it: 1 - (1 - w)(1 - removed)
    harder = pruning.prune(pruned, threshold=0.3)
    removed_now = 1.0 - row_sums(pruned.layout, np.where(pruned.T >= 0.3, pruned.T, 0.0).astype(np.float64))
    expected = 1.0 - (1.0 - weight) * (1.0 - float(np.mean(removed_now[removed_now < 1.0])))
    assert harder.backoff_weight == pytest.approx(min(expected, 0.5), rel=1e-6)
