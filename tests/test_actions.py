"""CHMMs with actions (engine.cognitive.actions): the passes against brute force over every clone path on tiny models,
the one-action model against the text engine to the bit, EM's monotone likelihood, the room walk generator, and the
recovery of a room's map from a walk."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest

from engine.backends.cpu import inference
from engine.backends.gpu import backend as backend_status
from engine.cognitive import actions, maps
from engine.model.blocks import pairs_in_sequence
from engine.model.dense import random_model


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
    assert maps.recovers_room(model, walk.observations, walk.actions, room)
    assert not maps.recovers_room(model, walk.observations, walk.actions, np.zeros((2, 6), dtype=int))
    held_out = actions.generate_walk(room, 3000, seed=100 + seed)
    assert actions.bits_per_step(model, held_out.observations, held_out.actions) < 0.01


def test_a_model_with_actions_round_trips_through_its_file_and_a_text_loader_refuses_it(tmp_path) -> None:
    from engine.model.dense import ModelFormatError, load

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
        field = maps.place_field(model, walk.observations, walk.actions, walk.positions, clone)
        assert field.shape == ROOM.shape
        assert field[cell] > 0.9
        others = np.delete(field.ravel(), np.ravel_multi_index(cell, ROOM.shape))
        assert np.all(others < 0.1)


def test_the_place_field_of_two_walks_pools_each_walk_filtered_from_its_own_start(learned_room) -> None:
    """Several walks: each is filtered from its own start and their visits pooled per cell, i.e. the field of two
    walks is the visit-weighted mean of each walk's own field; the two walks joined into one differ (the second
    would be filtered on from the first's end)."""
    model, _, cells = learned_room
    first, second = actions.generate_walk(ROOM, 60, seed=21), actions.generate_walk(ROOM, 40, seed=22)

    def visits(walk: actions.Walk) -> np.ndarray:
        counts = np.zeros(ROOM.shape)
        np.add.at(counts, (walk.positions[:, 0], walk.positions[:, 1]), 1.0)
        return counts

    positions = np.concatenate([first.positions, second.positions])
    xs, as_ = [first.observations, second.observations], [first.actions, second.actions]
    for clone in list(cells)[:4]:
        pooled = maps.place_field(model, xs, as_, positions, clone)
        alone = [maps.place_field(model, w.observations, w.actions, w.positions, clone) for w in (first, second)]
        weights = [visits(first), visits(second)]
        shape_of = [np.zeros(ROOM.shape) for _ in alone]
        for field, out in zip(alone, shape_of, strict=True):
            out[: field.shape[0], : field.shape[1]] = np.nan_to_num(field)
        seen = (weights[0] + weights[1]) > 0
        expected = (shape_of[0] * weights[0] + shape_of[1] * weights[1])[seen] / (weights[0] + weights[1])[seen]
        np.testing.assert_allclose(pooled[seen[: pooled.shape[0], : pooled.shape[1]]], expected, rtol=1e-12)
    joined = [maps.place_field(model, np.concatenate(xs), np.concatenate(as_), positions, c) for c in cells]
    assert any(
        not np.allclose(np.nan_to_num(j), np.nan_to_num(maps.place_field(model, xs, as_, positions, c)))
        for j, c in zip(joined, cells, strict=True)
    )
    with pytest.raises(ValueError, match="true place"):
        maps.place_field(model, xs, as_, first.positions, 0)


@pytest.mark.parametrize(("start", "goal"), [((0, 0), (2, 3)), ((2, 0), (0, 3)), ((1, 1), (1, 2)), ((0, 2), (0, 2))])
def test_a_planned_route_walks_from_one_place_to_the_other_by_a_shortest_way(learned_room, start, goal) -> None:
    """The actions of the route planned between the clones of two cells, taken in the room, lead from the first
    cell to the second in as many steps as the grid's shortest path."""
    model, _, cells = learned_room
    clone_of = {cell: clone for clone, cell in cells.items()}
    route, moves = maps.plan_route(model, clone_of[start], clone_of[goal])
    assert route[0] == clone_of[start] and route[-1] == clone_of[goal] and len(moves) == len(route) - 1
    r, c = start
    for move in moves:
        dr, dc = actions.STEPS[actions.MOVES.index(move)]
        r, c = r + dr, c + dc
        assert 0 <= r < ROOM.shape[0] and 0 <= c < ROOM.shape[1]
    assert (r, c) == goal
    assert len(moves) == abs(goal[0] - start[0]) + abs(goal[1] - start[1])
    with pytest.raises(ValueError, match="outside"):
        maps.plan_route(model, -1, clone_of[goal])


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


def test_a_map_transfers_to_a_room_with_the_same_layout_and_new_observations(learned_room) -> None:
    """With the map's transitions fixed, EM on the emissions learns which new observation each place shows: every
    clone's most likely observation is the one of its cell in the new room, and the new walk is then predicted
    almost perfectly."""
    model, _, cells = learned_room
    new_room = np.array([[4, 0, 1, 2], [3, 4, 2, 0], [1, 3, 0, 4]])
    walk = actions.generate_walk(new_room, 3000, seed=5)
    emissions, history = maps.learn_emissions(model, walk.observations, walk.actions, 5, iterations=60)
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
    assert len(maps.used_clones(model)) > ROOM.size
    assert not maps.recovers_room(model, x, a, ROOM)
    merged, merged_of = maps.merge_equivalent_clones(model)
    assert merged.n_states == ROOM.size and set(merged_of[maps.used_clones(model)]) == set(range(ROOM.size))
    assert maps.recovers_room(merged, x, a, ROOM)
    assert actions.log_likelihood(merged, x, a) >= actions.log_likelihood(model, x, a) - 1e-6 * len(x)


# ------------------------------------------------------------------------------------------------ sampling
def sampling_case(full: bool) -> tuple[actions.ActionCHMM, np.ndarray]:
    """A model of 2 symbols (2 and 1 clones) and 2 actions, and 4 actions to sample a walk with. ``full``: every
    (action, symbol, symbol) block, every row of T[a] sums to 1. Otherwise action 1 has no block out of symbol 1:
    those rows are zero, the walks that take action 1 at a 1 die, and sampling must condition on the walk lasting."""
    from engine.model.blocks import normalise_rows

    n_clones = np.array([2, 1])
    triples = (
        actions.all_triples(2, 2)
        if full
        else np.array([[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 1], [1, 0, 0], [1, 0, 1]])
    )
    layout = actions.action_layout(n_clones, 2, triples)
    T = normalise_rows(layout, np.random.default_rng(5).random(layout.size) + 0.2, 0.0, np.float64)
    return actions.ActionCHMM(["0", "1"], ["p", "q"], layout, T, np.full(3, 1.0 / 3.0)), np.array([1, 0, 1, 0])


@pytest.mark.parametrize("full", [True, False])
def test_sampled_walks_have_the_exact_frequencies_of_the_model(full: bool) -> None:
    """The frequency of each of the 16 observation sequences among 20,000 walks sampled given the actions against
    its exact probability P(x | a) = sum over clone paths (divided by the total over all x, which is 1 when every
    row sums to 1 and less when walks can die): each count is binomial(n, p), so the frequency lies within
    5 standard deviations sqrt(p (1 - p) / n) of p (a false alarm has probability < 16 * 6e-7), and a sequence
    of probability 0 is never drawn. The sampled walks are then scored: their log-likelihood is the exact one."""

    model, a = sampling_case(full)
    sequences = list(itertools.product(range(2), repeat=len(a)))
    exact = np.array([sum(p for _, p in paths_with_probability(model, np.array(x), a)) for x in sequences])
    total = exact.sum()
    assert total == pytest.approx(1.0, abs=1e-12) if full else total < 0.9
    p = exact / total
    n = 20_000
    drawn = maps.sample_walks(model, a, n, rng=np.random.default_rng(11))
    assert drawn.shape == (n, len(a))
    codes = drawn @ (2 ** np.arange(len(a))[::-1])
    frequency = np.bincount(codes, minlength=len(sequences)) / n
    np.testing.assert_array_less(np.abs(frequency - p), 5 * np.sqrt(p * (1 - p) / n) + 1e-15)
    assert np.all(frequency[p == 0] == 0)
    for code in np.unique(codes)[:8]:
        x = np.array(sequences[code])
        assert actions.log_likelihood(model, x, a) == pytest.approx(np.log(exact[code]), rel=1e-10)
        assert np.isfinite(actions.bits_per_step(model, x, a))
    again = maps.sample_walk(model, a, rng=np.random.default_rng(11))
    np.testing.assert_array_equal(again, drawn[0])


def walk_is_legal(room: np.ndarray, x: np.ndarray, a: np.ndarray) -> bool:
    """Whether some path of cells of the room gives the observations ``x`` under the moves ``a`` (a move out of
    the room or into a wall stays): the set of cells the walker can be in, followed step by step, never empties."""
    cells = {tuple(c) for c in np.argwhere(room == x[0])}
    for step in range(1, len(x)):
        moved = set()
        for r, c in cells:
            nr, nc = r + actions.STEPS[a[step - 1], 0], c + actions.STEPS[a[step - 1], 1]
            inside = 0 <= nr < room.shape[0] and 0 <= nc < room.shape[1] and room[nr, nc] >= 0
            moved.add((int(nr), int(nc)) if inside else (r, c))
        cells = {cell for cell in moved if room[cell] == x[step]}
        if not cells:
            return False
    return True


def test_a_walk_sampled_from_a_learned_map_is_a_walk_of_the_room(learned_room) -> None:
    """Observations sampled from the map learned on :data:`ROOM`, given the moves of another walk, are ones the
    room's cells give along those moves (a random sequence of observations is not), and the map predicts them."""

    model, _, _ = learned_room
    moves = actions.generate_walk(ROOM, 400, seed=7).actions
    for seed in range(3):
        x = maps.sample_walk(model, moves, rng=seed)
        assert walk_is_legal(ROOM, x, moves)
        assert actions.bits_per_step(model, x, moves) < 0.05
    assert not walk_is_legal(ROOM, np.random.default_rng(0).integers(4, size=400), moves)


def test_sampling_refuses_bad_actions_and_walks_the_model_cannot_make() -> None:
    from engine.model.blocks import normalise_rows

    model, a = sampling_case(full=True)
    with pytest.raises(ValueError, match="actions outside 0..1"):
        maps.sample_walk(model, [0, 2, 0], rng=0)
    with pytest.raises(ValueError, match="at least 2 steps"):
        maps.sample_walk(model, [0], rng=0)
    with pytest.raises(ValueError, match="positive whole number"):
        maps.sample_walks(model, a, 0)
    layout = actions.action_layout(np.array([2, 1]), 2, np.array([[0, 0, 0], [1, 0, 1]]))  # 0 -q-> 1, then stuck
    stuck = actions.ActionCHMM(
        ["0", "1"], ["p", "q"], layout, normalise_rows(layout, np.ones(layout.size), 0.0, np.float64), np.full(3, 1 / 3)
    )
    assert maps.sample_walk(stuck, [1, 0], rng=0).tolist() == [0, 1]
    with pytest.raises(ValueError, match="cannot make this walk"):
        maps.sample_walk(stuck, [1, 1, 0], rng=0)


# ------------------------------------------------------------------------------------------------ online EM
def one_action_case(documents: int) -> tuple[object, actions.ActionCHMM, list[np.ndarray]]:
    """A random text model, the same arrays as a model with one action, and ``documents`` random texts."""
    rng = np.random.default_rng(8)
    texts = [rng.integers(5, size=int(n)) for n in rng.integers(300, 700, documents)]
    n_clones = np.array([3, 1, 4, 2, 5])
    pairs = np.unique(np.concatenate([pairs_in_sequence(x, 5) for x in texts]), axis=0)
    text_model = random_model([str(v) for v in range(5)], n_clones, pairs, rng)
    return (
        text_model,
        actions.ActionCHMM(text_model.symbols, ["go"], text_model.layout, text_model.T, text_model.pi),
        texts,
    )


@pytest.mark.parametrize(
    ("documents", "batch_size", "memory", "pseudocount"), [(1, 97, 0.7, 1e-3), (3, 10, 0.5, 0.0), (2, 400, 0.9, 2e-3)]
)
def test_online_em_on_a_walk_with_one_action_is_the_text_engines_to_the_bit(
    documents, batch_size, memory, pseudocount
) -> None:
    """Online EM on walks whose every action is the same gives the text engine's online EM
    (engine.training.learning.fit) on the texts bit for bit: the bits per step of every epoch and the final T (same
    batches, same start)."""
    from engine.training import learning

    text_model, model, texts = one_action_case(documents)
    config = learning.TrainingConfig(
        algorithm="online",
        iterations=4,
        tolerance=0.0,
        batch_size=batch_size,
        memory=memory,
        pseudocount=pseudocount,
    )
    reference = learning.fit(text_model, texts if documents > 1 else texts[0], config=config)
    assert reference.stopped == "max_iterations" and len(reference.history) == 4
    x = texts if documents > 1 else texts[0]
    a = [np.zeros_like(t) for t in texts] if documents > 1 else np.zeros_like(texts[0])
    learned, history = actions.learn_online(
        model, x, a, epochs=4, batch_size=batch_size, memory=memory, pseudocount=pseudocount
    )
    assert history == [record.train_bps for record in reference.history]
    assert learned.T.tobytes() == reference.model.T.tobytes()
    assert learned.T.tobytes() != model.T.tobytes()


def test_online_em_learns_the_room_and_never_makes_nan() -> None:
    """Online EM on a walk in :data:`ROOM` (batches of 250 steps): the bits per step of its epochs fall (never
    rising by more than 0.01) to nearly 0, the walk's entropy rate, and Viterbi EM after it recovers the room.
    Without a pseudocount and with tiny batches a transition not seen yet gets probability 0 (as for text), so
    the walk may become impossible (infinite bits), but T stays finite: no NaN anywhere."""
    walk = actions.generate_walk(ROOM, 5000, seed=2)
    x, a = walk.observations, walk.actions
    model = actions.random_action_model(np.full(4, 3), x, a, seed=2)
    learned, history = actions.learn_online(model, x, a, epochs=12, batch_size=250, memory=0.9, pseudocount=2e-3)
    assert np.all(np.diff(history) < 0.01), history
    assert history[0] > 1.0 and history[-1] < 0.01
    assert actions.bits_per_step(learned, x, a) < 0.01
    refined, _ = actions.learn_viterbi(learned, x, a, iterations=50)
    assert maps.recovers_room(refined, x, a, ROOM)
    for batch_size, memory in ((10, 0.5), (3, 0.0), (2, 0.99)):
        bare, bare_history = actions.learn_online(model, x, a, epochs=2, batch_size=batch_size, memory=memory)
        assert not np.isnan(bare.T).any() and not np.isnan(bare_history).any()
        assert np.all(np.isfinite(bare.T))


def test_online_em_refuses_bad_settings_in_one_sentence() -> None:
    walk = actions.generate_walk(ROOM, 100, seed=0)
    model = actions.random_action_model(np.full(4, 2), walk.observations, walk.actions, seed=0)
    for settings, message in (
        ({"epochs": 0}, "at least 1 epoch"),
        ({"memory": 1.0}, "memory"),
        ({"batch_size": 1}, "batch size"),
        ({"pseudocount": -1.0}, "pseudocount"),
    ):
        with pytest.raises(ValueError, match=message):
            actions.learn_online(model, walk.observations, walk.actions, **settings)


# ------------------------------------------------------------------------------------------------ several walks
def two_walks(seed: int) -> tuple[actions.ActionCHMM, list[np.ndarray], list[np.ndarray]]:
    """A tiny model (:func:`tiny_case`), its walk of 6 steps, and a second walk the model can make: the 5 last
    steps of a walk sampled from it given the first walk's actions."""

    model, x, a = tiny_case(seed)
    x2 = maps.sample_walk(model, a, rng=seed)
    return model, [x, x2[1:]], [a, a[1:]]


@pytest.mark.parametrize("seed", range(4))
def test_two_walks_score_count_and_decode_as_each_one_alone(seed: int) -> None:
    """Documents are independent walks from pi: the log-likelihood of two is log of the product of each one's
    brute-force probability, their E-step counts are the sum of each one's (and of the brute-force expected counts),
    the MAP paths are each one's, and the concatenated walk (one transition across the seam) is another thing."""
    model, xs, as_ = two_walks(seed)
    totals = [sum(p for _, p in paths_with_probability(model, x, a)) for x, a in zip(xs, as_, strict=True)]
    both = actions.log_likelihood(model, xs, as_)
    assert both == pytest.approx(np.log(totals[0]) + np.log(totals[1]), rel=1e-10)
    assert both == actions.log_likelihood(model, xs[0], as_[0]) + actions.log_likelihood(model, xs[1], as_[1])
    assert actions.bits_per_step(model, xs, as_) == pytest.approx(-both / 11 / np.log(2.0))
    assert both != pytest.approx(actions.log_likelihood(model, np.concatenate(xs), np.concatenate(as_)), rel=1e-6)
    e = actions.e_step(model, xs, as_)
    one, two = actions.e_step(model, xs[0], as_[0]), actions.e_step(model, xs[1], as_[1])
    assert e.counts.tobytes() == (one.counts + two.counts).tobytes()
    assert e.log_likelihood == pytest.approx(both, rel=1e-12)
    assert np.sum(e.counts) == pytest.approx(4 + 5, rel=1e-10)  # one unit of expected count per transition
    paths, log_probability = actions.viterbi(model, xs, as_)
    singles = [actions.viterbi(model, x, a) for x, a in zip(xs, as_, strict=True)]
    assert len(paths) == 2 and all(np.array_equal(p, s[0]) for p, s in zip(paths, singles, strict=True))
    assert log_probability == pytest.approx(singles[0][1] + singles[1][1], rel=1e-12)


def test_batch_and_viterbi_em_on_two_walks_sum_their_counts() -> None:
    """One batch EM iteration on two walks is T = row-normalise(counts_1 + counts_2 + pseudocount); one Viterbi
    EM iteration uses the sum of each walk's MAP path counts; both report the bits per step of the two together."""
    from engine.model.blocks import normalise_rows

    walks = [actions.generate_walk(ROOM, n, seed=s) for n, s in ((700, 1), (500, 2))]
    xs, as_ = [w.observations for w in walks], [w.actions for w in walks]
    model = actions.random_action_model(np.full(4, 3), xs, as_, seed=1, dtype=np.float64)
    learned, history = actions.learn_em(model, xs, as_, iterations=1, pseudocount=1e-3)
    counts = actions.e_step(model, xs[0], as_[0]).counts + actions.e_step(model, xs[1], as_[1]).counts
    np.testing.assert_allclose(
        learned.T, normalise_rows(model.layout, counts, 1e-3, np.float64), rtol=1e-12, atol=1e-15
    )
    assert history[0] == pytest.approx(actions.bits_per_step(model, xs, as_), rel=1e-12)
    hard, hard_history = actions.learn_viterbi(model, xs, as_, iterations=1)
    paths, log_probability = actions.viterbi(model, xs, as_)
    path_counts = sum(actions.path_counts(model, x, a, p) for x, a, p in zip(xs, as_, paths, strict=True))
    np.testing.assert_array_equal(hard.T, normalise_rows(model.layout, path_counts, 0.0, np.float64))
    assert hard_history[0] == pytest.approx(-log_probability / 1200 / np.log(2.0), rel=1e-12)
    _, long_history = actions.learn_em(model, xs, as_, iterations=10, pseudocount=1e-3, stop_when_worse=False)
    assert np.all(np.diff(long_history) <= 1e-12)


def test_several_walks_are_refused_in_one_sentence_when_they_do_not_match() -> None:
    model, xs, as_ = two_walks(0)
    with pytest.raises(ValueError, match="not a mix"):
        actions.log_likelihood(model, xs, as_[0])
    with pytest.raises(ValueError, match="2 walks of observations need as many walks of actions, got 1"):
        actions.e_step(model, xs, as_[:1])
    with pytest.raises(ValueError, match="walk 2: a walk needs one action per observation"):
        actions.learn_em(model, xs, [as_[0], as_[1][:-1]])


WALK_WITH_DOCUMENTS = (
    "document,action,observation,row,column\n"
    "first,right,0,0,0\nfirst,down,1,0,1\nfirst,,3,1,1\n"
    "second,left,2,0,2\nsecond,,1,0,1\n"
)


def test_a_walk_file_with_documents_round_trips_and_an_old_file_is_one_walk() -> None:
    from engine.cognitive import walks

    walk = walks.parse_walk(WALK_WITH_DOCUMENTS)
    assert walk.documents == ("first", "second") and walk.starts == (0, 3)
    assert walk.symbols == ["0", "1", "2", "3"] and walk.action_names == ["left", "right", "down"]
    xs, as_ = walk.walks()
    assert [x.tolist() for x in xs] == [[0, 1, 3], [2, 1]]
    assert [a[:-1].tolist() for a in as_] == [[1, 2], [0]]
    assert walks.format_walk_file(walk) == WALK_WITH_DOCUMENTS
    again = walks.parse_walk(walks.format_walk_file(walk))
    assert again.documents == walk.documents and again.starts == walk.starts
    np.testing.assert_array_equal(again.observations, walk.observations)
    np.testing.assert_array_equal(again.positions, walk.positions)
    as_json = walks.parse_walk(
        '{"actions": ["right", "down", "", "left", ""], "observations": [0, 1, 3, 2, 1],'
        ' "documents": ["first", "first", "first", 7, 7]}'
    )
    assert as_json.documents == ("first", "7") and as_json.starts == (0, 3)
    np.testing.assert_array_equal(as_json.observations, walk.observations)
    np.testing.assert_array_equal(as_json.actions, walk.actions)
    old = walks.parse_walk("action,observation\nup,0\nleft,1\n,0\n")
    assert old.documents == () and old.starts == (0,)
    x, a = old.walks()
    assert isinstance(x, np.ndarray) and x.tolist() == [0, 1, 0] and a[:-1].tolist() == [1, 0]
    assert walks.format_walk_file(old) == "action,observation\nup,0\nleft,1\n,0\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "document,action,observation\nA,up,0\nA,left,1\nB,up,1\nB,up,0\nA,up,0\nA,up,1\n",
            "steps of document 'A' are not consecutive",
        ),
        ("document,action,observation\nA,up,0\n,left,1\n,up,0\n", "step 2 has an empty document name"),
        ("document,action,observation\nA,up,0\nA,left,1\nB,up,1\n", "document 'B' has fewer than 2 steps"),
        ("document,action,observation\nA,up,0\nA\n", "line 3 has fewer cells than the header"),
        ('{"actions": ["up", "up"], "observations": [0, 1], "documents": [true, true]}', '"documents" must be a list'),
        ('{"actions": ["up", "up"], "observations": [0, 1], "documents": ["a"]}', '"documents" must be a list'),
        ('{"actions": ["up", "up"], "observations": [0, 1], "documents": "a"}', '"documents" must be a list'),
        ('{"actions": ["up", "up"], "observations": [0, 1], "documents": [null, "a"]}', '"documents" must be a list'),
    ],
)
def test_bad_documents_in_a_walk_file_are_refused_in_one_line(tmp_path, capsys, content: str, message: str) -> None:
    from engine.cli import main
    from engine.cognitive import walks

    with pytest.raises(ValueError, match=message):
        walks.parse_walk(content)
    (tmp_path / "walk.csv").write_text(content)
    code = main(["map", str(tmp_path / "walk.csv"), "-o", str(tmp_path / "map.npz")])
    error = capsys.readouterr().err
    assert code == 1 and message in error and error.count("\n") == 1, error
    assert not (tmp_path / "map.npz").exists()


def test_the_map_command_learns_a_room_from_a_file_of_two_walks(tmp_path, capsys) -> None:
    """Two walks in :data:`ROOM` in one file (a document column): ``chmm map --room`` learns one map from both,
    which recovers the room."""
    import json

    from engine.cli import main
    from engine.cognitive import walks

    (tmp_path / "room.csv").write_text("\n".join(",".join(str(v) for v in row) for row in ROOM) + "\n")
    parts = [walks.format_walk(actions.generate_walk(ROOM, 2500, seed=s)).splitlines() for s in (3, 4)]
    lines = ["document," + parts[0][0]] + [f"{d}," + line for d, part in enumerate(parts) for line in part[1:]]
    (tmp_path / "walk.csv").write_text("\n".join(lines) + "\n")
    arguments = ["map", str(tmp_path / "walk.csv"), "-o", str(tmp_path / "map.npz"), "--clones", "3", "--room"]
    assert main([*arguments, str(tmp_path / "room.csv"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["walks"] == 2 and summary["steps"] == 5000
    assert summary["recovers_room"] is True and summary["clones_used"] == 12


@pytest.mark.parametrize(
    "backend",
    ["gpu-sim", pytest.param("gpu", marks=[pytest.mark.gpu, pytest.mark.skipif(not GPU_AVAILABLE, reason=GPU_REASON)])],
)
def test_online_and_batch_em_on_two_walks_run_on_the_gpu_engine_as_on_the_cpu(backend: str) -> None:
    """Online EM (batches carrying the forward message, the walks' row keys sliced with them) and batch EM over two
    walks on the GPU engine: the CPU's bits per step at every epoch and its T, to float32."""
    walks = [actions.generate_walk(ROOM, n, seed=s) for n, s in ((1500, 4), (900, 5))]
    xs, as_ = [w.observations for w in walks], [w.actions for w in walks]
    model = actions.random_action_model(np.full(4, 5), xs, as_, seed=4)
    on_cpu, cpu_history = actions.learn_online(model, xs, as_, 3, 200, 0.8, 2e-3)
    on_device, device_history = actions.learn_online(model, xs, as_, 3, 200, 0.8, 2e-3, backend=backend)
    np.testing.assert_allclose(device_history, cpu_history, rtol=1e-5)
    assert cpu_history[-1] < cpu_history[0] - 0.5
    np.testing.assert_allclose(on_device.T, on_cpu.T, atol=2e-5)
    on_cpu, cpu_history = actions.learn_em(model, xs, as_, 4, 2e-3, stop_when_worse=False)
    on_device, device_history = actions.learn_em(model, xs, as_, 4, 2e-3, stop_when_worse=False, backend=backend)
    np.testing.assert_allclose(device_history, cpu_history, rtol=1e-5)
    np.testing.assert_allclose(on_device.T, on_cpu.T, atol=2e-5)
    paths, log_probability = actions.viterbi(on_cpu, xs, as_)
    device_paths, device_log_probability = actions.viterbi(on_cpu, xs, as_, backend=backend)
    assert all(np.array_equal(p, q) for p, q in zip(paths, device_paths, strict=True))  # the same MAP paths
    assert device_log_probability == pytest.approx(log_probability, rel=1e-9)
    refined, cpu_history = actions.learn_viterbi(on_cpu, xs, as_, 3)
    on_device, device_history = actions.learn_viterbi(on_cpu, xs, as_, 3, backend=backend)
    np.testing.assert_allclose(device_history, cpu_history, rtol=1e-9)
    np.testing.assert_array_equal(on_device.T, refined.T)


# ------------------------------------------------------------------------------------------------ issue 51: maps
def _ending_on_a_new_observation() -> tuple[actions.ActionCHMM, np.ndarray, np.ndarray]:
    """A map whose clones 0 and 1 (observation 0) have the same future and whose clone 3 (observation 2, seen only
    at the walk's end) has no successor, and a walk 0 1 0 1 1 2 it makes with probability 1/8 (pi uniform)."""
    left, right = actions.MOVES.index("left"), actions.MOVES.index("right")
    dense = np.zeros((len(actions.MOVES), 4, 4))
    dense[right, 0, 2] = dense[right, 1, 2] = 1.0
    dense[right, 2, 2] = dense[right, 2, 3] = 0.5
    dense[left, 2, 0] = dense[left, 2, 1] = 0.5
    model = actions.from_dense(dense, np.array([2, 1, 1]), symbols=["0", "1", "2"], actions=list(actions.MOVES))
    x = np.array([0, 1, 0, 1, 1, 2])
    a = np.array([right, left, right, right, right, left])
    return model, x, a


def test_merging_keeps_a_clone_where_the_walk_ends_and_the_exact_likelihood() -> None:
    """Issue 51: a clone without successors (its observation is seen only at the walk's end) stays in the merged
    map, so merging the two clones with the same future keeps the walk's likelihood (with the start distribution
    carried over to the merged clones) instead of making the walk impossible."""
    model, x, a = _ending_on_a_new_observation()
    assert actions.log_likelihood(model, x, a) == pytest.approx(np.log(1 / 8), abs=1e-12)
    assert set(maps.used_clones(model).tolist()) == {0, 1, 2, 3}
    merged, merged_of = maps.merge_equivalent_clones(model)
    assert merged.n_states == 3 and merged_of[0] == merged_of[1] and len(set(merged_of.tolist())) == 3
    pi = np.bincount(merged_of, weights=model.pi.astype(np.float64), minlength=merged.n_states)
    carried = actions.ActionCHMM(merged.symbols, merged.actions, merged.layout, merged.T, pi.astype(merged.T.dtype))
    bits = actions.bits_per_step(carried, x, a)
    assert np.isfinite(bits) and abs(bits - actions.bits_per_step(model, x, a)) < 1e-9


def _walk_ending_on_a_new_observation(tmp_path) -> Path:
    """A 600-step walk in :data:`ROOM` whose last observation (9) appears nowhere else, as a walk file."""
    walk = actions.generate_walk(ROOM, 600, seed=2)
    names = [actions.MOVES[k] for k in walk.actions]
    seen = [*walk.observations.tolist()[:-1], 9]
    path = tmp_path / "walk.csv"
    path.write_text("action,observation\n" + "".join(f"{n},{o}\n" for n, o in zip(names, seen, strict=True)))
    return path


def test_a_map_of_a_walk_ending_on_a_new_observation_is_finite_after_merging(tmp_path) -> None:
    """Issue 51: such a walk gave "inf bits per step, the walk uses 0 of N clones" once merged; now the merged map
    makes the walk, and from the clone the MAP path starts on it is as likely as without merging."""
    from engine.cognitive import walks

    walk = walks.read_walk(_walk_ending_on_a_new_observation(tmp_path))
    x, a = walk.walks()
    options = walks.MapOptions(clones=3, seed=1, merge=False)
    model, summary = walks.learn_map(walk, options)
    merged_model, merged_summary = walks.learn_map(walk, dataclasses.replace(options, merge=True))
    assert np.isfinite(merged_summary["bits_per_step"]) and merged_summary["clones_used"] > 0
    merged, merged_of = maps.merge_equivalent_clones(model)
    assert merged.n_states == merged_model.n_states and np.array_equal(merged.T, merged_model.T)
    start = int(actions.viterbi(model, x, a)[0][0])

    def from_clone(m: actions.ActionCHMM, clone: int) -> float:
        pi = np.zeros(m.n_states, dtype=m.pi.dtype)
        pi[clone] = 1.0
        return actions.log_likelihood(actions.ActionCHMM(m.symbols, m.actions, m.layout, m.T, pi), x, a)

    unmerged = from_clone(model, start)
    assert np.isfinite(unmerged) and abs(from_clone(merged, int(merged_of[start])) - unmerged) < 1e-9


def test_chmm_map_refuses_a_map_that_cannot_make_its_walk(tmp_path, capsys, monkeypatch) -> None:
    """Issue 51: a map with infinite bits per step is a failure (exit 1, one sentence, no model file), not a map."""
    from engine.cli import main

    def broken(model: actions.ActionCHMM, threshold: float = 0.5) -> tuple[actions.ActionCHMM, np.ndarray]:
        return model.with_T(np.zeros_like(model.T)), np.arange(model.n_states)

    monkeypatch.setattr(maps, "merge_equivalent_clones", broken)
    walk = _walk_ending_on_a_new_observation(tmp_path)
    code = main(["map", str(walk), "-o", str(tmp_path / "map.npz"), "--clones", "2", "--iterations", "5", "--json"])
    output = capsys.readouterr()
    error = output.err
    assert code == 1 and error.count("\n") == 1 and not output.out, error
    assert "the learned map cannot make its walk (inf bits per step, the walk uses 0 of 10 clones)" in error
    assert not (tmp_path / "map.npz").exists()


@pytest.mark.parametrize("cell", [str(10**30), "3000000", "10001", "-2"])
def test_a_room_cell_outside_the_observations_is_one_sentence_in_walk_and_map(tmp_path, capsys, cell: str) -> None:
    """Issue 51: a room cell of 10**30 gave a traceback (OverflowError); every cell outside -1..MAX_OBSERVATION is
    refused in one sentence by ``chmm walk`` and ``chmm map --room``."""
    from engine.cli import main

    room = tmp_path / "room.csv"
    room.write_text(f"0,1\n2,{cell}\n")
    walk = _walk_ending_on_a_new_observation(tmp_path)
    expected = f"line 2: a room's cells must be observations from 0 to {actions.MAX_OBSERVATION:,} or -1 for a wall"
    for arguments in (
        ["walk", str(room), "-o", str(tmp_path / "out.csv")],
        ["map", str(walk), "-o", str(tmp_path / "map.npz"), "--room", str(room)],
    ):
        code = main(arguments)
        error = capsys.readouterr().err
        assert code == 1 and expected in error and error.count("\n") == 1, error
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "map.npz").exists()
    with pytest.raises(ValueError, match="from 0 to 10,000"):
        actions.check_room([[0, int(cell)]])
