"""CHMMs with actions (engine.actions): the passes against brute force over every clone path on tiny models, the
one-action model against the text engine to the bit, EM's monotone likelihood, the room walk generator, and the
recovery of a room's map from a walk."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine import actions, inference
from engine import backend as backend_status
from engine.blocks import pairs_in_sequence
from engine.model import random_model


def tiny_case(seed: int) -> tuple[actions.ActionCHMM, np.ndarray, np.ndarray]:
    """A random model of 2-3 symbols with 1-3 clones, 2-3 actions, and a walk of 6 steps using them."""
    rng = np.random.default_rng(seed)
    n_symbols, n_actions = int(rng.integers(2, 4)), int(rng.integers(2, 4))
    n_clones = rng.integers(1, 4, n_symbols)
    x = rng.integers(n_symbols, size=6)
    a = rng.integers(n_actions, size=6)
    a[:-1] = np.resize(np.arange(n_actions), 5)[rng.permutation(5)]  # every action used
    model = actions.random_action_model(n_clones, x, a, seed=seed, actions=[str(v) for v in range(n_actions)])
    model = model.with_T(model.T.astype(np.float64))
    return actions.ActionCHMM(model.symbols, model.actions, model.layout, model.T, model.pi.astype(np.float64)), x, a


def paths_with_probability(model: actions.ActionCHMM, x: np.ndarray, a: np.ndarray) -> list[tuple[tuple, float]]:
    """Every clone path of the walk with its joint probability pi(z_1) prod_n T[a_n](z_n, z_{n+1})."""
    starts = model.layout.clone_start
    dense = [model.transition(k).astype(np.float64) for k in range(model.n_actions)]
    out = []
    for path in itertools.product(*[range(starts[s], starts[s + 1]) for s in x]):
        p = float(model.pi[path[0]])
        for n in range(len(x) - 1):
            p *= dense[a[n]][path[n], path[n + 1]]
        out.append((path, p))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_likelihood_counts_and_map_path_match_brute_force(seed: int) -> None:
    """log P(x | a), the expected counts per action block and the MAP path against every clone path."""
    model, x, a = tiny_case(seed)
    paths = paths_with_probability(model, x, a)
    total = sum(p for _, p in paths)
    assert actions.log_likelihood(model, x, a) == pytest.approx(np.log(total), rel=1e-10)
    expected = np.zeros((model.n_actions, model.n_states, model.n_states))
    for path, p in paths:
        for n in range(len(x) - 1):
            expected[a[n], path[n], path[n + 1]] += p / total
    e = actions.e_step(model, x, a)
    got = actions.from_dense(np.zeros_like(expected), model.n_clones, triples=None)
    dense_counts = np.zeros_like(expected)
    layout, E = model.layout, model.n_symbols
    starts = layout.clone_start
    for k, (row, j) in enumerate(layout.block_pairs):
        action, i = divmod(int(row), E)
        block = e.counts[layout.block_offset[k] : layout.block_offset[k + 1]]
        dense_counts[action, starts[i] : starts[i + 1], starts[j] : starts[j + 1]] = block.reshape(
            int(layout.n_clones[i]), int(layout.n_clones[j])
        )
    assert got.layout.n_blocks == model.n_actions * E * E
    np.testing.assert_allclose(dense_counts, expected, atol=1e-12)
    best_path, best_p = max(paths, key=lambda item: item[1])
    path, log_probability = actions.viterbi(model, x, a)
    assert tuple(path) == best_path
    assert log_probability == pytest.approx(np.log(best_p), rel=1e-10)


def test_a_walk_with_one_action_is_the_text_to_the_bit() -> None:
    """A text is the walk whose every action is the same: the likelihood, the E-step counts and an EM run give
    the text engine's numbers bit for bit."""
    rng = np.random.default_rng(3)
    x = rng.integers(5, size=400)
    n_clones = np.array([3, 1, 4, 2, 5])
    text_model = random_model([str(v) for v in range(5)], n_clones, pairs_in_sequence(x, 5), rng)
    a = np.zeros_like(x)
    model = actions.ActionCHMM(text_model.symbols, ["go"], text_model.layout, text_model.T, text_model.pi)
    assert actions.log_likelihood(model, x, a) == inference.log_likelihood(text_model, x)
    e_text, e_walk = inference.e_step(text_model, x), actions.e_step(model, x, a)
    assert e_walk.counts.tobytes() == e_text.counts.tobytes()
    assert e_walk.log_likelihood == e_text.log_likelihood
    clones, _ = actions.viterbi(model, x, a)
    np.testing.assert_array_equal(clones, inference.viterbi(text_model, x).clones)


def test_batch_em_never_lowers_the_likelihood() -> None:
    room = np.array([[0, 1, 0], [1, 2, 1], [0, 1, 0]])
    walk = actions.generate_walk(room, 2000, seed=1)
    model = actions.random_action_model(np.full(3, 4), walk.observations, walk.actions, seed=0)
    model = model.with_T(model.T.astype(np.float64))
    model = actions.ActionCHMM(model.symbols, model.actions, model.layout, model.T, model.pi.astype(np.float64))
    _, history = actions.learn_em(model, walk.observations, walk.actions, iterations=15, stop_when_worse=False)
    assert len(history) == 15 and np.all(np.diff(history) <= 1e-12), history
    assert history[-1] < history[0] - 0.05


def test_the_walk_generator_follows_the_room() -> None:
    """Every step moves to a side-by-side open cell or stays (a move out of the room or into a wall), the
    observation is the cell's, and every move is taken."""
    room = np.array([[0, 1, -1], [2, -1, 3], [4, 5, 6]])
    walk = actions.generate_walk(room, 3000, seed=2)
    r, c = walk.positions[:, 0], walk.positions[:, 1]
    np.testing.assert_array_equal(walk.observations, room[r, c])
    assert np.all(room[r, c] >= 0)
    move = walk.positions[1:] - walk.positions[:-1]
    intended = actions.STEPS[walk.actions[:-1]]
    stayed = np.all(move == 0, axis=1)
    assert np.all(stayed | np.all(move == intended, axis=1))
    target = walk.positions[:-1] + intended
    inside = (target[:, 0] >= 0) & (target[:, 0] < 3) & (target[:, 1] >= 0) & (target[:, 1] < 3)
    blocked = ~inside
    blocked[inside] = room[target[inside, 0], target[inside, 1]] < 0
    np.testing.assert_array_equal(stayed, blocked)
    assert set(np.unique(walk.actions[:-1])) == {0, 1, 2, 3}
    assert actions.generate_walk(room, 50, seed=2).observations.tolist() == walk.observations[:50].tolist()


@pytest.mark.parametrize(
    ("room", "message"),
    [
        ([[0, 1], [2]], "rectangular"),
        ([[-1, -1]], "at least one cell"),
        ([[0.5, 1]], "whole numbers"),
        ([[0, -2]], "-1 for a wall"),
        ([1, 2, 3], "2-D"),
    ],
)
def test_a_bad_room_is_refused_in_one_sentence(room: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        actions.generate_walk(room, 10)


def test_a_bad_walk_is_refused_in_one_sentence() -> None:
    with pytest.raises(ValueError, match="one action per observation"):
        actions.check_walk([0, 1, 0], [0, 1])
    with pytest.raises(ValueError, match="observations outside 0..1"):
        actions.check_walk([0, 2, 0], [0, 1, 0], n_symbols=2)
    with pytest.raises(ValueError, match="actions outside 0..1"):
        actions.check_walk([0, 1, 0], [0, 2, 0], n_symbols=2, n_actions=2)


@pytest.mark.parametrize("seed", range(3))
def test_a_room_is_recovered_from_a_walk_and_a_wrong_room_is_not(seed: int) -> None:
    """EM then Viterbi refinement on a walk in a 3 x 4 room whose every observation is seen in three places, with
    three clones per observation: the learned map is the room's grid graph (and not that of a room of another
    shape), and a held-out walk is predicted almost perfectly (the place and the action determine the next
    observation: the walk's entropy rate is 0)."""
    room = np.array([[0, 1, 2, 0], [2, 3, 1, 3], [1, 0, 3, 2]])
    walk = actions.generate_walk(room, 5000, seed=seed)
    model = actions.random_action_model(np.full(4, 3), walk.observations, walk.actions, seed=seed)
    model, _ = actions.learn_em(model, walk.observations, walk.actions, iterations=300, pseudocount=2e-3)
    model, _ = actions.learn_viterbi(model, walk.observations, walk.actions, iterations=50)
    assert actions.recovers_room(model, walk.observations, walk.actions, room)
    assert not actions.recovers_room(model, walk.observations, walk.actions, np.zeros((2, 6), dtype=int))
    held_out = actions.generate_walk(room, 3000, seed=100 + seed)
    assert actions.bits_per_step(model, held_out.observations, held_out.actions) < 0.01


def test_a_model_with_actions_round_trips_through_its_file_and_a_text_loader_refuses_it(tmp_path) -> None:
    from engine.model import ModelFormatError, load

    room = np.array([[0, 1], [1, 2]])
    walk = actions.generate_walk(room, 500, seed=0)
    model = actions.random_action_model(np.array([2, 3, 1]), walk.observations, walk.actions, seed=0)
    path = tmp_path / "map.npz"
    model.save(path)
    again = actions.load(path)
    assert again.symbols == model.symbols and again.actions == model.actions
    assert again.T.tobytes() == model.T.tobytes() and again.pi.tobytes() == model.pi.tobytes()
    np.testing.assert_array_equal(again.block_triples(), model.block_triples())
    x, a = walk.observations, walk.actions
    assert actions.log_likelihood(again, x, a) == actions.log_likelihood(model, x, a)
    with pytest.raises(ModelFormatError, match="not a readable CHMM Explorer model"):
        load(path)  # the text model's loader refuses it
    with pytest.raises(ModelFormatError, match="no such model file"):
        actions.load(tmp_path / "missing.npz")
    broken = model.with_T(model.T * 2)
    broken.save(tmp_path / "broken.npz")
    with pytest.raises(ModelFormatError, match="a row of T sums to"):
        actions.load(tmp_path / "broken.npz")


def test_the_walk_and_map_commands_learn_a_room(tmp_path, capsys) -> None:
    """``chmm walk`` then ``chmm map --room``: the map of the walk recovers the room, the model file loads."""
    import json

    from engine.cli import main

    room = tmp_path / "room.csv"
    room.write_text("0,1,2,0\n2,3,1,3\n1,0,3,2\n")
    walk = tmp_path / "walk.csv"
    assert main(["walk", str(room), "--length", "5000", "--seed", "1", "-o", str(walk)]) == 0
    assert walk.read_text().splitlines()[0] == "action,observation,row,column"
    capsys.readouterr()
    model_path = tmp_path / "map.npz"
    arguments = ["map", str(walk), "-o", str(model_path), "--clones", "3", "--seed", "1", "--room", str(room)]
    assert main([*arguments, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["recovers_room"] is True and summary["clones_used"] == 12
    model = actions.load(model_path)
    assert model.actions == list(actions.MOVES) and model.symbols == ["0", "1", "2", "3"]


@pytest.mark.parametrize(
    ("room_text", "walk_text", "message"),
    [
        ("0,1\n2\n", None, "different lengths"),
        ("0,x\n", None, "not a whole number"),
        ("", None, "empty"),
        (None, "step,seen\nup,1\n", 'columns "action" and "observation"'),
        (None, "action,observation\nup,1\n", "at least 2 steps"),
        (None, '{"actions": [1, 2]}', "one action per observation"),
    ],
)
def test_bad_rooms_and_walks_are_refused_in_one_line(tmp_path, capsys, room_text, walk_text, message) -> None:
    from engine.cli import main

    if room_text is not None:
        (tmp_path / "room.csv").write_text(room_text)
        code = main(["walk", str(tmp_path / "room.csv"), "-o", str(tmp_path / "walk.csv")])
    else:
        (tmp_path / "walk.csv").write_text(walk_text)
        code = main(["map", str(tmp_path / "walk.csv"), "-o", str(tmp_path / "map.npz")])
    error = capsys.readouterr().err
    assert code == 1 and message in error and error.count("\n") == 1, error
    assert not (tmp_path / "map.npz").exists()


ROOM = np.array([[0, 1, 2, 0], [2, 3, 1, 3], [1, 0, 3, 2]])


@pytest.fixture(scope="module")
def learned_room() -> tuple[actions.ActionCHMM, actions.Walk, dict[int, tuple[int, int]]]:
    """A map learned from a walk in :data:`ROOM`, and the cell of each clone the walk's MAP path uses (by majority)."""
    walk = actions.generate_walk(ROOM, 5000, seed=0)
    model = actions.random_action_model(
        np.full(4, 3), walk.observations, walk.actions, seed=0, actions=list(actions.MOVES)
    )
    model, _ = actions.learn_em(model, walk.observations, walk.actions, iterations=300, pseudocount=2e-3)
    model, _ = actions.learn_viterbi(model, walk.observations, walk.actions, iterations=50)
    path, _ = actions.viterbi(model, walk.observations, walk.actions)
    cells = {}
    for clone in np.unique(path):
        places, counts = np.unique(walk.positions[path == clone], axis=0, return_counts=True)
        cells[int(clone)] = tuple(int(v) for v in places[np.argmax(counts)])
    return model, walk, cells


def test_each_place_field_lights_up_one_cell(learned_room) -> None:
    """In a recovered map every clone is a place: its filtered activation is near 1 in its cell and near 0 in the
    others (after the first steps, the walker knows where it is)."""
    model, walk, cells = learned_room
    assert len(cells) == ROOM.size and len(set(cells.values())) == ROOM.size
    for clone, cell in cells.items():
        field = actions.place_field(model, walk.observations, walk.actions, walk.positions, clone)
        assert field.shape == ROOM.shape
        assert field[cell] > 0.9
        others = np.delete(field.ravel(), np.ravel_multi_index(cell, ROOM.shape))
        assert np.all(others < 0.1)


@pytest.mark.parametrize(("start", "goal"), [((0, 0), (2, 3)), ((2, 0), (0, 3)), ((1, 1), (1, 2)), ((0, 2), (0, 2))])
def test_a_planned_route_walks_from_one_place_to_the_other_by_a_shortest_way(learned_room, start, goal) -> None:
    """The actions of the route planned between the clones of two cells, taken in the room, lead from the first
    cell to the second in as many steps as the grid's shortest path."""
    model, _, cells = learned_room
    clone_of = {cell: clone for clone, cell in cells.items()}
    route, moves = actions.plan(model, clone_of[start], clone_of[goal])
    assert route[0] == clone_of[start] and route[-1] == clone_of[goal] and len(moves) == len(route) - 1
    r, c = start
    for move in moves:
        dr, dc = actions.STEPS[actions.MOVES.index(move)]
        r, c = r + dr, c + dc
        assert 0 <= r < ROOM.shape[0] and 0 <= c < ROOM.shape[1]
    assert (r, c) == goal
    assert len(moves) == abs(goal[0] - start[0]) + abs(goal[1] - start[1])
    with pytest.raises(ValueError, match="outside"):
        actions.plan(model, -1, clone_of[goal])


GPU_AVAILABLE, GPU_REASON = backend_status.gpu_status()


@pytest.mark.parametrize(
    "backend",
    ["gpu-sim", pytest.param("gpu", marks=[pytest.mark.gpu, pytest.mark.skipif(not GPU_AVAILABLE, reason=GPU_REASON)])],
)
def test_batch_em_with_actions_runs_on_the_gpu_engine_as_on_the_cpu(backend: str) -> None:
    """The GPU engine (on the device, or on the NumPy twins of its kernels in every CI run) trains a model with
    actions through the same protocol: the same bits per step at every iteration and the same T, to float32."""
    walk = actions.generate_walk(ROOM, 3000, seed=4)
    x, a = walk.observations, walk.actions
    model = actions.random_action_model(np.full(4, 5), x, a, seed=4)
    on_cpu, cpu_history = actions.learn_em(model, x, a, 6, 2e-3, stop_when_worse=False)
    on_device, device_history = actions.learn_em(model, x, a, 6, 2e-3, stop_when_worse=False, backend=backend)
    np.testing.assert_allclose(device_history, cpu_history, rtol=1e-5)
    assert cpu_history[-1] < cpu_history[0] - 0.1
    np.testing.assert_allclose(on_device.T, on_cpu.T, atol=2e-5)


def test_the_sparse_implementation_refuses_a_walk_with_actions_in_one_sentence() -> None:
    from engine import engines, sparse

    walk = actions.generate_walk(ROOM, 200, seed=0)
    model = actions.random_action_model(np.full(4, 2), walk.observations, walk.actions, seed=0)
    view = sparse.from_dense(model.engine_view())
    engine = engines.engine_for(view, "cpu")
    keys = actions.row_keys(walk.observations, walk.actions, 4)
    with pytest.raises(ValueError, match="has no models with actions; use the dense cpu or gpu backend"):
        engine.e_step(engine.load(view), walk.observations, row_key=keys)


def test_a_map_transfers_to_a_room_with_the_same_layout_and_new_observations(learned_room) -> None:
    """With the map's transitions fixed, EM on the emissions learns which new observation each place shows: every
    clone's most likely observation is the one of its cell in the new room, and the new walk is then predicted
    almost perfectly."""
    model, _, cells = learned_room
    new_room = np.array([[4, 0, 1, 2], [3, 4, 2, 0], [1, 3, 0, 4]])
    walk = actions.generate_walk(new_room, 3000, seed=5)
    emissions, history = actions.learn_emissions(model, walk.observations, walk.actions, 5, iterations=60)
    assert emissions.shape == (model.n_states, 5)
    for clone, cell in cells.items():
        assert np.argmax(emissions[clone]) == new_room[cell] and emissions[clone].max() > 0.9
    assert history[-1] < 0.05 < history[0]


@pytest.mark.parametrize("seed", range(3))
def test_merging_clones_with_the_same_future_recovers_a_map_that_split_places(seed: int) -> None:
    """With more clones than places (4 per observation for 3 places each), EM and Viterbi EM split some places
    between two clones (13-14 clones for 12 cells: not the room's graph); merging the clones with the same future
    gives one clone per place, the room's graph, and the walk is no less likely."""
    walk = actions.generate_walk(ROOM, 5000, seed=seed)
    x, a = walk.observations, walk.actions
    model = actions.random_action_model(np.full(4, 4), x, a, seed=seed)
    model, _ = actions.learn_em(model, x, a, iterations=300, pseudocount=2e-3)
    model, _ = actions.learn_viterbi(model, x, a, iterations=50)
    assert len(actions.used_clones(model)) > ROOM.size
    assert not actions.recovers_room(model, x, a, ROOM)
    merged, merged_of = actions.merge_equivalent_clones(model)
    assert merged.n_states == ROOM.size and set(merged_of[actions.used_clones(model)]) == set(range(ROOM.size))
    assert actions.recovers_room(merged, x, a, ROOM)
    assert actions.log_likelihood(merged, x, a) >= actions.log_likelihood(model, x, a) - 1e-6 * len(x)
