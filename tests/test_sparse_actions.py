"""Walks with actions on the sparse engine: its forward pass, E-step, Viterbi and batch EM against the dense engine
over the same row keys (a_n * E + x_n) on pruned random action models, in float64; a text (row keys None) as before."""

from __future__ import annotations

import numpy as np
import pytest

from engine.backends import engines
from engine.backends.cpu import inference, sparse
from engine.backends.cpu import kernels as cpu
from engine.cognitive import actions
from engine.model.blocks import normalise_rows
from engine.model.dense import CHMM

ROOM = np.array([[0, 1, 2, 3], [4, 5, 1, 0], [2, 3, -1, 5], [1, 4, 0, 2]])
"""A room with aliased observations (each symbol is seen in two or three cells) and a wall."""


def action_case(kind: str, prune_fraction: float, seed: int) -> tuple[actions.ActionCHMM, np.ndarray, np.ndarray]:
    """A random float64 action model on a walk, with the ``prune_fraction`` smallest transitions set to zero and
    the rows renormalised (a row may lose all its mass, so a step of the walk may become impossible).

    ``kind``: "room", a walk in :data:`ROOM` with three clones per symbol; "random", random observations and actions
    with 1-4 clones per symbol (row symbols of different sizes)."""
    rng = np.random.default_rng(seed)
    if kind == "room":
        walk = actions.generate_walk(ROOM, 500, seed=seed)
        x, a = walk.observations, walk.actions
        n_clones = np.full(int(ROOM.max()) + 1, 3)
    else:
        n_symbols, n_actions = 5, 3
        x, a = rng.integers(n_symbols, size=400), rng.integers(n_actions, size=400)
        n_clones = rng.integers(1, 5, n_symbols)
    model = actions.random_action_model(n_clones, x, a, seed=seed, dtype=np.float64)
    T = model.T.copy()
    if prune_fraction > 0:
        T[T < np.quantile(T, prune_fraction)] = 0.0
        T = normalise_rows(model.layout, T, 0.0, np.float64)
    return model.with_T(T), x, a


def dense_view(model: actions.ActionCHMM) -> CHMM:
    """The model's engine view with its zeros fixed (a pruned model stays pruned under EM, as a sparse one does)."""
    view = model.engine_view()
    return CHMM(view.symbols, view.layout, view.T, view.pi, fixed_zeros=True)


def close(got: float | np.ndarray, want: float | np.ndarray, rtol: float = 1e-10) -> bool:
    """Whether ``got`` equals ``want`` to ``rtol`` relative to the largest magnitude of ``want`` (infinities equal)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape or np.any(np.isinf(got) != np.isinf(want)):
        return False
    finite = np.isfinite(want)
    if not np.array_equal(got[~finite], want[~finite]):
        return False
    scale = np.abs(want[finite]).max(initial=0.0)
    return bool(np.all(np.abs(got[finite] - want[finite]) <= rtol * scale))


CASES = [("room", 0.0, 1), ("room", 0.3, 2), ("room", 0.7, 3), ("random", 0.0, 4), ("random", 0.4, 5)]


@pytest.mark.parametrize("kind,prune_fraction,seed", CASES)
def test_sparse_passes_over_a_walk_equal_the_dense_ones(kind: str, prune_fraction: float, seed: int) -> None:
    model, x, a = action_case(kind, prune_fraction, seed)
    view = dense_view(model)
    compact = sparse.from_dense(view)
    assert (compact.n_nonzero() < view.layout.size) == (prune_fraction > 0)
    keys = actions.row_keys(x, a, model.n_symbols)

    ll = sparse.log_likelihood(compact, x, row_key=keys)
    assert close(ll, actions.log_likelihood(model, x, a))
    stored = sparse.forward(compact, x, store=True, row_key=keys)
    assert not close(sparse.forward(compact, x).predictive, stored.predictive)  # the text's row keys differ
    layout = view.layout
    predictive, alpha = np.empty(len(x)), np.empty_like(stored.alpha)
    zero_events = cpu.forward_pass(
        view.T, view.pi, x, keys, layout.n_clones, layout.clone_start, layout.block_lookup, layout.block_offset,
        alpha, stored.offsets, predictive,
    )  # fmt: skip
    assert stored.zero_events == zero_events
    assert close(stored.predictive, predictive) and close(stored.alpha, alpha)

    dense_e = actions.e_step(model, x, a)
    sparse_e = sparse.e_step(compact, x, row_key=keys)
    assert sparse_e.zero_events == dense_e.zero_events
    assert close(sparse_e.log_likelihood, dense_e.log_likelihood)
    back = compact.with_data(compact.data, sparse_e.counts).to_dense().counts
    assert close(back, dense_e.counts) and back.sum() > 0
    assert close(sparse_e.gamma_first, dense_e.gamma_first)
    assert close(sparse_e.last_alpha, dense_e.last_alpha)
    np.testing.assert_array_equal(sparse_e.touched, dense_e.touched)

    dense_path, dense_log_p = actions.viterbi(model, x, a)
    result = sparse.viterbi(compact, x, row_shift=a * model.n_symbols)
    np.testing.assert_array_equal(result.clones, dense_path)
    assert close(result.log_probability, dense_log_p)


def test_a_pruned_walk_can_become_impossible_the_same_way() -> None:
    """Heavy pruning: zero-probability steps (uniform restarts) and an impossible Viterbi path on both engines."""
    model, x, a = action_case("room", 0.7, 3)
    keys = actions.row_keys(x, a, model.n_symbols)
    compact = sparse.from_dense(dense_view(model))
    dense_e = actions.e_step(model, x, a)
    assert dense_e.zero_events > 0 and sparse.e_step(compact, x, row_key=keys).zero_events == dense_e.zero_events
    assert sparse.log_likelihood(compact, x, row_key=keys) == -np.inf


def test_soft_evidence_viterbi_with_row_shifts_matches_dense() -> None:
    """Viterbi with several candidate symbols at some positions, each shifted to its step's action rows."""
    model, x, a = action_case("room", 0.3, 6)
    rng = np.random.default_rng(6)
    options = [{int(s): 1.0} for s in x]
    for n in rng.choice(len(x), size=60, replace=False):
        options[n][int(rng.integers(model.n_symbols))] = float(rng.uniform(0.1, 1.0))
    evidence = inference.Evidence.from_lists(options)
    shift = a * model.n_symbols
    view = dense_view(model)
    dense = inference.viterbi(view, evidence, row_shift=shift)
    result = sparse.viterbi(sparse.from_dense(view), evidence, row_shift=shift)
    assert np.isfinite(dense.log_probability)
    np.testing.assert_array_equal(result.clones, dense.clones)
    assert close(result.log_probability, dense.log_probability)


@pytest.mark.parametrize("kind,prune_fraction,seed", [("room", 0.3, 7), ("random", 0.0, 8)])
def test_batch_em_through_the_protocol_follows_dense_em(kind: str, prune_fraction: float, seed: int) -> None:
    """Five iterations of plan / e_step / m_step on the cpu backend: the sparse model's T stays the dense one's."""
    model, x, a = action_case(kind, prune_fraction, seed)
    keys = actions.row_keys(x, a, model.n_symbols)
    view = dense_view(model)
    compact = sparse.from_dense(view)
    dense_engine, sparse_engine = engines.engine_for(view, "cpu"), engines.engine_for(compact, "cpu")
    assert (dense_engine.name, sparse_engine.name) == ("dense", "sparse")
    runs = []
    for engine, start in ((dense_engine, view), (sparse_engine, compact)):
        state = engine.load(start)
        plan = engine.plan(state, x, "em", len(x), row_key=keys)
        history = []
        for _ in range(5):
            e = engine.e_step(state, x, plan=plan, row_key=keys)
            history.append(e.log_likelihood)
            state = engine.m_step(state, e.counts, 1e-3)
        runs.append((engine.host(state), history))
    (dense_state, dense_history), (sparse_state, sparse_history) = runs
    assert close(sparse_history, dense_history)
    assert dense_history[-1] > dense_history[0]  # EM learnt something, so T moved
    assert close(sparse_state.to_dense().T, dense_state.T)
    path = sparse_engine.viterbi(sparse_state, x, a * model.n_symbols).clones
    np.testing.assert_array_equal(path, inference.viterbi(dense_state, x, row_shift=a * model.n_symbols).clones)


def test_the_walk_with_one_action_is_the_text_to_the_bit() -> None:
    """Row keys equal to the symbols (a walk with one action) give the text passes' results exactly."""
    rng = np.random.default_rng(9)
    x = rng.integers(4, size=300)
    a = np.zeros_like(x)
    model = actions.random_action_model(rng.integers(1, 4, 4), x, a, seed=9, dtype=np.float64)
    compact = sparse.from_dense(model.engine_view())
    keys = actions.row_keys(x, a, model.n_symbols)
    np.testing.assert_array_equal(keys, x)
    text_e, walk_e = sparse.e_step(compact, x), sparse.e_step(compact, x, row_key=keys)
    np.testing.assert_array_equal(walk_e.counts, text_e.counts)
    assert walk_e.log_likelihood == text_e.log_likelihood
    np.testing.assert_array_equal(
        sparse.forward(compact, x, row_key=keys).predictive, sparse.forward(compact, x).predictive
    )
    text_v, walk_v = sparse.viterbi(compact, x), sparse.viterbi(compact, x, row_shift=a)
    np.testing.assert_array_equal(walk_v.clones, text_v.clones)
    assert walk_v.log_probability == text_v.log_probability


def test_bad_row_keys_are_refused() -> None:
    model, x, a = action_case("random", 0.0, 10)
    compact = sparse.from_dense(dense_view(model))
    keys = actions.row_keys(x, a, model.n_symbols)
    with pytest.raises(ValueError, match="one row key per position"):
        sparse.e_step(compact, x, row_key=keys[:-1])
    with pytest.raises(ValueError, match="row symbols"):
        sparse.forward(compact, x, row_key=keys + compact.layout.n_symbols)
    sizes = model.layout.n_clones[: model.n_symbols]
    wrong = int(np.flatnonzero(sizes != sizes[x[0]])[0])  # a row symbol of another clone count than x[0]'s
    bad = keys.copy()
    bad[0] = wrong
    with pytest.raises(ValueError, match="clone count"):
        sparse.log_likelihood(compact, x, row_key=bad)
    with pytest.raises(ValueError, match="one row shift per position"):
        sparse.viterbi(compact, x, row_shift=a[:-1] * model.n_symbols)
    with pytest.raises(ValueError, match="row symbols"):
        sparse.viterbi(compact, x, row_shift=np.full(len(x), compact.layout.n_symbols))
