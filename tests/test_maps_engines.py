"""Cognitive maps on every implementation of the engine protocol: a map's likelihood, place fields, decoding, E-step,
batch EM and Viterbi EM on the dense CPU engine, the sparse CPU engine and the GPU engine (its NumPy twins,
gpu-sim, in every run; the device where there is one) agree; the filtered posteriors against brute force over every
clone path of a tiny walk; the maps' EM runs through engine.training.learning.fit with its stop when worse."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine.backends.cpu import inference
from engine.backends.cpu.implementation import DenseEngine
from engine.backends.gpu import backend as backend_status
from engine.cognitive import actions, maps
from engine.training import learning

GPU_AVAILABLE, GPU_REASON = backend_status.gpu_status()
ROOM = np.array([[0, 1, 2, 0], [2, 3, 1, 3], [1, 0, 3, 2]])
OTHERS = [
    "sparse",
    "gpu-sim",
    pytest.param("gpu", marks=[pytest.mark.gpu, pytest.mark.skipif(not GPU_AVAILABLE, reason=GPU_REASON)]),
]
FLOAT32 = {"cpu": False, "sparse": False, "gpu-sim": True, "gpu": True}
"""Whether an implementation's passes run in float32 (the GPU's messages), which sets the tolerance against the
dense CPU engine on a float64 model."""


@pytest.fixture(scope="module")
def room_case() -> tuple[actions.ActionCHMM, list[actions.Walk]]:
    """A float64 model of the room, a few EM iterations in (so its rows are not uniform), and two walks."""
    walks = [actions.generate_walk(ROOM, n, seed=s) for n, s in ((700, 11), (400, 12))]
    xs, as_ = [w.observations for w in walks], [w.actions for w in walks]
    model = actions.random_action_model(np.full(4, 3), xs, as_, seed=5, dtype=np.float64)
    model, _ = actions.learn_em(model, xs, as_, 4, 1e-3, stop_when_worse=False)
    return model, walks


def tolerance(name: str) -> float:
    return 2e-5 if FLOAT32[name] else 1e-10


@pytest.mark.parametrize("name", OTHERS)
def test_likelihood_place_fields_and_decoding_agree_on_every_implementation(name: str, room_case) -> None:
    """log P(walk | actions), the place field of every clone and the MAP clone path of each walk, on another
    implementation as on the dense CPU engine (the same paths; float32 passes to their precision)."""
    model, walks = room_case
    xs, as_ = [w.observations for w in walks], [w.actions for w in walks]
    positions = np.concatenate([w.positions for w in walks])
    dense = actions.log_likelihood(model, xs, as_)
    assert np.isfinite(dense)
    assert actions.log_likelihood(model, xs, as_, backend=name) == pytest.approx(dense, rel=tolerance(name))
    assert actions.bits_per_step(model, xs[0], as_[0], backend=name) == pytest.approx(
        actions.bits_per_step(model, xs[0], as_[0]), rel=tolerance(name)
    )
    for clone in range(model.n_states):
        field = maps.place_field(model, xs, as_, positions, clone)
        other = maps.place_field(model, xs, as_, positions, clone, backend=name)
        np.testing.assert_array_equal(np.isnan(other), np.isnan(field))
        np.testing.assert_allclose(other, field, atol=10 * tolerance(name), equal_nan=True)
    paths, log_probability = actions.viterbi(model, xs, as_)
    other_paths, other_log_probability = actions.viterbi(model, xs, as_, backend=name)
    assert all(np.array_equal(p, q) for p, q in zip(paths, other_paths, strict=True))
    assert other_log_probability == pytest.approx(log_probability, rel=tolerance(name))
    graph, other_graph = maps.clone_graph(model, xs, as_), maps.clone_graph(model, xs, as_, backend=name)
    assert sorted(graph.edges(data="count")) == sorted(other_graph.edges(data="count"))


@pytest.mark.parametrize("name", OTHERS)
def test_batch_and_viterbi_em_agree_on_every_implementation(name: str, room_case) -> None:
    """A few iterations of batch EM and of Viterbi EM from one start on another implementation: the dense CPU
    engine's bits per step at every iteration and its T (float32 passes and M-steps to their precision)."""
    model, walks = room_case
    xs, as_ = [w.observations for w in walks], [w.actions for w in walks]
    start = actions.random_action_model(np.full(4, 3), xs, as_, seed=6, dtype=np.float64)
    learned, history = actions.learn_em(start, xs, as_, 5, 1e-3, stop_when_worse=False)
    other, other_history = actions.learn_em(start, xs, as_, 5, 1e-3, stop_when_worse=False, backend=name)
    assert len(history) == len(other_history) == 5 and history[-1] < history[0]
    np.testing.assert_allclose(other_history, history, rtol=10 * tolerance(name))
    np.testing.assert_allclose(other.T, learned.T, atol=10 * tolerance(name))
    refined, hard = actions.learn_viterbi(learned, xs, as_, 3, 1e-4)
    other_refined, other_hard = actions.learn_viterbi(learned, xs, as_, 3, 1e-4, backend=name)
    np.testing.assert_allclose(other_hard, hard, rtol=tolerance(name))
    np.testing.assert_allclose(other_refined.T, refined.T, atol=10 * tolerance(name))
    e = actions.e_step(learned, xs, as_)
    if name != "sparse":  # the sparse engine's counts are in its own (CSR) layout
        other_e = actions.e_step(learned, xs, as_, backend=name)
        np.testing.assert_allclose(np.asarray(engines_host(other_e.counts)), e.counts, atol=1e-3)
        assert other_e.log_likelihood == pytest.approx(e.log_likelihood, rel=tolerance(name))


def engines_host(values: object) -> np.ndarray:
    """Counts from any implementation as a host array (the GPU's on its device, NumPy's twins already on the host)."""
    return values.get() if hasattr(values, "get") else np.asarray(values)


@pytest.mark.parametrize("name", ["cpu", *OTHERS])
def test_hard_counts_with_row_keys_land_in_the_blocks_of_the_actions(name: str, room_case) -> None:
    """Viterbi EM's counts of a walk on every implementation: one per transition of the MAP path, in the block of
    its step's action (the dense layout's counts :func:`engine.cognitive.actions.path_counts`, mapped through the sparse
    engine's entries), scored by the path's probability or by the likelihood as asked."""
    model, walks = room_case
    x, a = walks[0].observations, walks[0].actions
    keys = actions.row_keys(x, a, model.n_symbols)
    path, log_probability = actions.viterbi(model, x, a)
    expected = actions.path_counts(model, x, a, path)
    assert expected.sum() == len(x) - 1
    engine, state = actions.engine_state(model, name)
    counts, score = engine.hard_counts(state, x, row_key=keys, score="path")
    assert score == pytest.approx(log_probability, rel=tolerance(name) if name != "cpu" else 0.0)
    host = engines_host(counts).astype(np.float64)
    if name == "sparse":
        rows, cols = state.entry_rows_cols()  # every stored entry (the map has no zeros yet)
        dense_rows, dense_cols, _, _ = model.engine_view().transitions()
        assert host.sum() == expected.sum()
        dense_counts = {(int(r), int(c)): v for r, c, v in zip(dense_rows, dense_cols, expected, strict=True)}
        for (r, c), v in zip(zip(rows.tolist(), cols.tolist(), strict=True), host, strict=True):
            assert dense_counts[(r, c)] == v
    else:
        np.testing.assert_array_equal(host, expected)
    _, likelihood = engine.hard_counts(state, x, row_key=keys)
    expected_likelihood = actions.log_likelihood(model, x, a)
    assert likelihood == pytest.approx(expected_likelihood, rel=tolerance(name) if name != "cpu" else 0.0)


def brute_force_filtered(model: actions.ActionCHMM, x: np.ndarray, a: np.ndarray) -> np.ndarray:
    """P(z_n = u | x_1..x_n, a_1..a_{n-1}) of every step and clone, by summing over every clone path of each prefix."""
    starts = model.layout.clone_start
    dense = [model.transition(k).astype(np.float64) for k in range(model.n_actions)]
    out = np.zeros((len(x), model.n_states))
    for n in range(len(x)):
        for path in itertools.product(*[range(starts[s], starts[s + 1]) for s in x[: n + 1]]):
            p = float(model.pi[path[0]])
            for m in range(n):
                p *= dense[a[m]][path[m], path[m + 1]]
            out[n, path[-1]] += p
        out[n] /= out[n].sum()
    return out


@pytest.mark.parametrize("name", ["cpu", *OTHERS])
@pytest.mark.parametrize("seed", range(3))
def test_the_filtered_messages_of_a_tiny_walk_against_brute_force(name: str, seed: int) -> None:
    """The stored forward messages of Engine.forward with row keys are the filtered posteriors over every clone
    path, on every implementation (the place fields read them), and its likelihood is log sum over the paths."""
    rng = np.random.default_rng(seed)
    n_clones = rng.integers(1, 4, 3)
    x = rng.integers(3, size=6)
    a = rng.integers(2, size=6)
    model = actions.random_action_model(n_clones, x, a, seed=seed, dtype=np.float64)
    engine, state = actions.engine_state(model, name)
    result = engine.forward(state, x, row_key=actions.row_keys(x, a, model.n_symbols), store=True)
    expected = brute_force_filtered(model, x, a)
    got = inference.Posteriors(result.alpha, result.offsets, 0.0).dense(model.engine_view().layout, x)
    np.testing.assert_allclose(got[:, : model.n_states], expected, atol=1e-6 if name.startswith("gpu") else 1e-12)
    assert float(np.sum(np.log(result.predictive))) == pytest.approx(
        actions.log_likelihood(model, x, a), rel=1e-6 if name.startswith("gpu") else 1e-12
    )


def test_stop_when_worse_keeps_the_model_that_entered_the_worse_iteration() -> None:
    """learning.fit's stop when worse (the maps' recipe): the run stops at the first iteration whose training BPS is
    not below the one before, records it, and keeps the model that entered it, the model of one iteration fewer
    without the stop; without the flag the same run goes on to max_iterations (tolerance None: no gain test)."""
    walk = actions.generate_walk(ROOM, 600, seed=3)
    x, a = walk.observations, walk.actions
    model = actions.random_action_model(np.full(4, 4), x, a, seed=3)
    learned, history = actions.learn_em(model, x, a, 400, 5e-2)
    assert 1 < len(history) < 400 and not history[-1] < history[-2]
    assert all(later < earlier for earlier, later in zip(history[:-2], history[1:-1], strict=True))
    fewer, fewer_history = actions.learn_em(model, x, a, len(history) - 1, 5e-2, stop_when_worse=False)
    assert fewer_history == history[:-1]
    np.testing.assert_array_equal(learned.T, fewer.T)
    config = learning.TrainingConfig(iterations=len(history) + 2, tolerance=None, pseudocount=5e-2)
    keys = [actions.row_keys(x, a, model.n_symbols)]
    result = learning.fit(model.engine_view(), [x], config=config, row_keys=keys)
    assert result.stopped == "max_iterations" and len(result.history) == len(history) + 2
    assert [r.train_bps for r in result.history[: len(history)]] == history
    with pytest.raises(ValueError, match="row key"):
        learning.fit(model.engine_view(), [x, x], config=config, row_keys=keys)
    with pytest.raises(ValueError, match="viterbi_score"):
        learning.TrainingConfig(viterbi_score="best").validate()


def test_the_maps_protocol_calls_reach_the_engine(monkeypatch) -> None:
    """A map's likelihood and place fields go through Engine.forward with the walk's row keys (no kernel called
    beside the protocol)."""
    walk = actions.generate_walk(ROOM, 200, seed=1)
    model = actions.random_action_model(np.full(4, 2), walk.observations, walk.actions, seed=1)
    seen: list[tuple[bool, bool]] = []
    original = DenseEngine.forward

    def spy(self, state, x, initial=None, row_key=None, store=False):  # noqa: ANN001, ANN202
        seen.append((row_key is not None, store))
        return original(self, state, x, initial, row_key, store)

    monkeypatch.setattr(DenseEngine, "forward", spy)
    actions.log_likelihood(model, walk.observations, walk.actions)
    maps.place_field(model, walk.observations, walk.actions, walk.positions, 0)
    assert seen == [(True, False), (True, True)]
