"""Cognitive maps from soft evidence (engine.cognitive.evidence): brute force over every clone path on tiny models,
the engine's own E-step where the evidence is hard, and a small room learned through a noisy sensor."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from engine.cognitive import actions, evidence, maps


def _tiny(seed: int = 0, n_clones=(2, 1, 2), n_actions: int = 2, n: int = 5):
    rng = np.random.default_rng(seed)
    model = evidence.random_dense_model(np.array(n_clones), n_actions, seed)
    likelihood = rng.random((n, len(n_clones))) * (rng.random((n, len(n_clones))) < 0.8)
    likelihood[:, 0] += 0.05  # every step some mass
    a = rng.integers(n_actions, size=n)
    return model, likelihood, a


def _brute(model, likelihood, a):
    """P(readings | actions), the expected counts per action and the best path, over every clone path."""
    T = evidence.dense_transitions(model)
    s = model.clone_symbol()
    H, n = model.n_states, len(likelihood)
    total, best, best_path = 0.0, -1.0, None
    counts = np.zeros_like(T)
    for path in itertools.product(range(H), repeat=n):
        p = model.pi[path[0]] * likelihood[0, s[path[0]]]
        for t in range(1, n):
            p *= T[a[t - 1], path[t - 1], path[t]] * likelihood[t, s[path[t]]]
        total += p
        for t in range(n - 1):
            counts[a[t], path[t], path[t + 1]] += p
        if p > best:
            best, best_path = p, path
    return total, counts / total, np.log(best), np.array(best_path)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_soft_e_step_is_the_sum_over_every_clone_path(seed):
    """One piece: log P(readings | actions) and the expected counts of every (action, clone, clone) equal the
    brute-force sums over all H^N clone paths (float64)."""
    model, likelihood, a = _tiny(seed)
    total, counts, _, _ = _brute(model, likelihood, a)
    result = evidence.soft_e_step(
        evidence.dense_transitions(model), model.clone_symbol(), model.pi.astype(float), likelihood, a, piece=100
    )
    assert result.log_likelihood == pytest.approx(np.log(total), rel=1e-12)
    np.testing.assert_allclose(result.counts, counts, rtol=1e-10, atol=1e-14)


def test_pieces_are_the_walk_as_separate_walks():
    """A walk of 7 steps in pieces of 3: the E-step is the sum of the brute-force E-steps of the pieces 0-2, 3-5
    and 6, each from pi (no transition counted across a cut)."""
    model, likelihood, a = _tiny(3, n=7)
    result = evidence.soft_e_step(
        evidence.dense_transitions(model), model.clone_symbol(), model.pi.astype(float), likelihood, a, piece=3
    )
    log_total, counts = 0.0, 0.0
    for start in (0, 3, 6):
        stop = min(start + 3, 7)
        total, c, _, _ = _brute(model, likelihood[start:stop], a[start:stop])
        log_total += np.log(total)
        counts = counts + c * 1.0
    assert result.log_likelihood == pytest.approx(log_total, rel=1e-12)
    np.testing.assert_allclose(result.counts, counts, rtol=1e-10, atol=1e-14)


def test_soft_viterbi_path_is_the_best_path():
    """The max-product path and its log-probability are those of the brute-force best path."""
    for seed in range(3):
        model, likelihood, a = _tiny(seed + 10)
        _, _, best, best_path = _brute(model, likelihood, a)
        path, log_probability = evidence.soft_viterbi_path(
            evidence.dense_transitions(model), model.clone_symbol(), model.pi.astype(float), likelihood, a
        )
        assert log_probability == pytest.approx(best, rel=1e-12)
        np.testing.assert_array_equal(path, best_path)


def test_hard_evidence_is_the_engines_e_step():
    """With the indicator of each observation as its evidence (a sensor without noise), the counts and the
    likelihood are the engine's own E-step on the walk (one implementation against another)."""
    room = np.array([[0, 1, 2], [1, 2, 0]])
    walk = actions.generate_walk(room, 300, seed=4)
    model = evidence.random_dense_model(np.array([3, 2, 2]), 4, seed=5)
    model = model.with_T(model.T.astype(np.float64))
    model.pi = model.pi.astype(np.float64)
    readings = evidence.noisy_readings(walk.observations, 3, 0.0)
    np.testing.assert_array_equal(readings.symbols, walk.observations)
    soft = evidence.soft_e_step(
        evidence.dense_transitions(model), model.clone_symbol(), model.pi, readings.likelihood, walk.actions, 1000
    )
    hard = actions.e_step(model, walk.observations, walk.actions)
    assert soft.log_likelihood == pytest.approx(hard.log_likelihood, rel=1e-10)
    counted = evidence.dense_transitions(model.with_T(np.asarray(hard.counts, dtype=np.float64)))
    np.testing.assert_allclose(soft.counts, counted, rtol=1e-8, atol=1e-10)


def test_noisy_readings_read_wrong_at_the_noise_rate():
    """A sensor with noise 0.2 reads 20% of 20,000 observations wrong (within 1.5 points), never as the true
    symbol when wrong, and its evidence puts 1 - noise on the reading."""
    x = np.random.default_rng(0).integers(4, size=20_000)
    readings = evidence.noisy_readings(x, 4, 0.2, seed=1)
    assert abs(np.mean(readings.symbols != x) - 0.2) < 0.015
    np.testing.assert_allclose(readings.likelihood[np.arange(len(x)), readings.symbols], 0.8)
    np.testing.assert_allclose(readings.likelihood.sum(axis=1), 0.8 + 3 * 0.2 / 3)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: evidence.noisy_readings([0, 1, 2], 3, 0.7), "sensor noise must be a probability"),
        (lambda: evidence.noisy_readings([0, 1, 5], 3, 0.1), "outside"),
        (lambda: evidence.check_evidence(np.ones((4, 2)), [0, 1, 0, 0], 3), "one column per observation"),
        (lambda: evidence.check_evidence(-np.ones((4, 3)), [0, 1, 0, 0], 3), "finite and non-negative"),
        (lambda: evidence.check_evidence(np.zeros((4, 3)), [0, 1, 0, 0], 3), "some likelihood"),
        (lambda: evidence.check_evidence(np.ones((4, 3)), [0, 1, 0], 3), "length"),
        (lambda: evidence.random_dense_model([2, 0], 4), "at least one clone"),
    ],
)
def test_bad_evidence_is_refused_in_one_sentence(call, message):
    with pytest.raises(ValueError, match=message) as caught:
        call()
    assert "\n" not in str(caught.value)


def test_a_room_is_learned_through_a_noisy_sensor():
    """A 3 x 3 room of 3 aliased observations, a 6,000-step walk read by a sensor wrong 10% of the time: soft EM
    then Viterbi EM on the evidence learn a map whose clone graph on a fresh clean walk is the room, and whose
    bits per step on that walk are below those of the map learned from the same readings taken as true."""
    room = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1]])
    walk = actions.generate_walk(room, 6_000, seed=7)
    readings = evidence.noisy_readings(walk.observations, 3, 0.1, seed=8)
    start = evidence.random_dense_model(np.array([3, 3, 3]), 4, seed=9)
    learned, history = evidence.learn_soft(
        start, readings.likelihood, walk.actions, iterations=150, pseudocount=1e-3, viterbi_iterations=10
    )
    assert history[0] > history[-1]
    test = actions.generate_walk(room, 2_000, seed=11)
    assert maps.recovers_room(learned, test.observations, test.actions, room)
    taken_as_true = evidence.noisy_readings(readings.symbols, 3, 0.0).likelihood
    naive, _ = evidence.learn_soft(start, taken_as_true, walk.actions, iterations=150, pseudocount=1e-3)
    soft_bits = actions.bits_per_step(learned, test.observations, test.actions)
    naive_bits = actions.bits_per_step(naive, test.observations, test.actions)
    assert soft_bits < naive_bits


def test_a_map_through_noise_is_learned_merged_and_bounded():
    """``learn_map_through_noise`` (chmm map --noise): the readings' evidence, soft EM and Viterbi EM, merged; the
    summary says the iterations and the clones; more clones than a dense T may hold and a noise past 0.5 are refused
    in one sentence."""
    room = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1]])
    walk = actions.generate_walk(room, 3_000, seed=7)
    readings = evidence.noisy_readings(walk.observations, 3, 0.1, seed=8)
    model, summary = evidence.learn_map_through_noise(
        readings.symbols, walk.actions, ["a", "b", "c"], list(actions.MOVES), 0.1, 4, 100, 1e-3, 10, seed=9
    )
    assert summary["em_iterations"] > 5 and summary["viterbi_iterations"] >= 1
    assert summary["clones"] == model.n_states < 12 and np.isfinite(summary["bits_per_step"])
    assert model.symbols == ["a", "b", "c"] and model.actions == list(actions.MOVES)
    _, chosen = evidence.learn_map_through_noise(
        readings.symbols, walk.actions, ["a", "b", "c"], list(actions.MOVES), 0.1, 4, 100, 1e-3, 10, seed=9, restarts=3
    )
    held = chosen["held_out_bits_per_step"]
    assert len(held) == 3 and chosen["seed"] == 9 + int(np.argmin(held)) and np.all(np.isfinite(held))
    for noise, clones, message in ((0.1, 700, "at most 2,000 clones"), (0.6, 4, "from 0 to 0.5")):
        with pytest.raises(ValueError, match=message) as caught:
            evidence.learn_map_through_noise(
                readings.symbols, walk.actions, ["a", "b", "c"], list(actions.MOVES), noise, clones, 5, 1e-3, 0
            )
        assert "\n" not in str(caught.value)


def test_chmm_walk_and_map_with_noise(tmp_path, capsys):
    """``chmm walk --noise 0.1`` writes a sensor's readings (about a tenth wrong, the true places kept) and ``chmm
    map --noise 0.1 --room`` learns a merged map from their evidence and judges it on the true places; a noise past
    0.5 is refused in one line."""
    from engine.cli import main

    room = tmp_path / "room.csv"
    room.write_text("0,1,2\n1,2,0\n2,0,1\n")
    walk = tmp_path / "walk.csv"
    assert main(["walk", str(room), "--length", "3000", "--seed", "7", "--noise", "0.1", "-o", str(walk)]) == 0
    said = capsys.readouterr().out
    assert "as a sensor read it" in said
    wrong = float(said.split("(")[1].split("%")[0])
    assert 7 < wrong < 13
    out = tmp_path / "map.npz"
    command = ["map", str(walk), "-o", str(out), "--clones", "4", "--iterations", "100", "--noise", "0.1", "--json"]
    assert main([*command, "--room", str(room)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["noise"] == 0.1 and summary["clones"] < 12 and out.is_file()
    assert summary["recovers_room"] is True  # judged on the true places' observations, not the readings
    assert main(["map", str(walk), "-o", str(tmp_path / "x.npz"), "--noise", "0.7"]) != 0
    error = capsys.readouterr().err.strip()
    assert "from 0 to 0.5" in error and "\n" not in error


def _confused_readings(observations, confusion, seed):
    """A sensor whose reading of true observation i is y with probability confusion[i, y], and the soft evidence of
    its readings, L_n(i) = confusion[i, reading_n]."""
    rng = np.random.default_rng(seed)
    cumulative = np.cumsum(confusion, axis=1)
    readings = (rng.random(len(observations))[:, None] > cumulative[observations]).sum(axis=1)
    return readings, confusion[:, readings].T.copy()


def test_an_evidence_file_is_read_in_either_form_and_is_the_noise_it_stands_for(tmp_path):
    """A symmetric sensor's evidence saved as .npy, and as text whose header names the columns in another order,
    reads back as the same table; the map learned from it (``learn_map_from_evidence``) is the map ``--noise``
    learns from the readings, to the bit."""
    room = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1]])
    walk = actions.generate_walk(room, 1_500, seed=7)
    readings = evidence.noisy_readings(walk.observations, 3, 0.1, seed=8)
    symbols = ["a", "b", "c"]
    np.save(tmp_path / "e.npy", readings.likelihood)
    rows = "\n".join(f"{r[2]:.17g},{r[0]:.17g} {r[1]:.17g}" for r in readings.likelihood)
    (tmp_path / "e.csv").write_text("# a sensor's likelihoods\nc, a b\n" + rows + "\n")
    for name in ("e.npy", "e.csv"):
        np.testing.assert_array_equal(evidence.read_evidence(tmp_path / name, 1_500, symbols), readings.likelihood)
    arguments = (walk.actions, symbols, list(actions.MOVES))
    settings = dict(clones=3, iterations=40, pseudocount=1e-3, viterbi_iterations=5, seed=3)
    from_file, summary = evidence.learn_map_from_evidence(
        evidence.read_evidence(tmp_path / "e.csv", 1_500, symbols), *arguments, **settings
    )
    from_noise, noisy = evidence.learn_map_through_noise(readings.symbols, *arguments, noise=0.1, **settings)
    np.testing.assert_array_equal(from_file.T, from_noise.T)
    assert noisy["noise"] == 0.1 and "noise" not in summary and summary["bits_per_step"] == noisy["bits_per_step"]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("rows.csv", "0.9,0.05,0.05\n" * 5, "needs 6 rows"),
        ("columns.csv", "0.9,0.1\n" * 6, "of 3 numbers"),
        ("ragged.csv", "0.9,0.05,0.05\n" * 5 + "1,0\n", "same number of values"),
        ("negative.csv", "0.9,0.05,-0.05\n" * 6, "finite and non-negative"),
        ("nan.csv", "0.9,0.05,nan\n" * 6, "finite and non-negative"),
        ("empty_step.csv", "0,0,0\n" + "0.9,0.05,0.05\n" * 5, "some likelihood"),
        ("words.csv", "a,b,c\n" + "0.9,high,0.05\n" * 6, "other than numbers"),
        ("header.csv", "a,b,d\n" + "0.9,0.05,0.05\n" * 6, "names the columns a, b, d"),
        ("nothing.csv", "# only a comment\n", "holds no numbers"),
        ("huge.csv", "0.9,0.05,0.05\n" * 20_000, "larger than"),
        ("bytes.npy", b"\x93NUMPY garbage", "not a readable .npy"),
    ],
)
def test_bad_evidence_files_are_refused_in_one_sentence(tmp_path, name, content, message):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(ValueError, match=message) as caught:
        evidence.read_evidence(path, 6, ["a", "b", "c"])
    assert "\n" not in str(caught.value)


def test_an_npy_of_objects_or_the_wrong_shape_is_refused_without_unpickling(tmp_path):
    objects = np.empty((6, 3), dtype=object)
    objects[:] = 0.5
    np.save(tmp_path / "objects.npy", objects, allow_pickle=True)
    np.save(tmp_path / "words.npy", np.full((6, 3), "x"))
    np.save(tmp_path / "flat.npy", np.full(18, 0.5))
    for name, message in (("objects.npy", "not a readable .npy"), ("words.npy", "not numbers"), ("flat.npy", "18")):
        with pytest.raises(ValueError, match=message):
            evidence.read_evidence(tmp_path / name, 6, ["a", "b", "c"])


def test_chmm_map_learns_a_room_through_a_sensor_that_confuses_two_observations(tmp_path, capsys):
    """A sensor that reads observations 0 and 1 as each other 30% of the time (2 rarely wrong), its likelihoods in a
    file: ``chmm map --evidence FILE --room`` learns a map that recovers the room, judged on the true places;
    ``--noise`` with ``--evidence`` is refused in one line."""
    from engine import api
    from engine.cli import main

    room = tmp_path / "room.csv"
    room.write_text("0,1,2\n1,2,0\n2,0,1\n")
    walk = tmp_path / "walk.csv"
    assert main(["walk", str(room), "--length", "3000", "--seed", "7", "-o", str(walk)]) == 0
    capsys.readouterr()
    read = api.maps.read_walk(walk)
    x, _ = read.walks()
    confusion = np.array([[0.7, 0.3, 0.0], [0.3, 0.7, 0.0], [0.05, 0.0, 0.95]])
    _, likelihood = _confused_readings(x, confusion, seed=8)
    header = ",".join(read.symbols)
    (tmp_path / "evidence.csv").write_text(header + "\n" + "\n".join(",".join(f"{v:g}" for v in r) for r in likelihood))
    out = tmp_path / "map.npz"
    command = ["map", str(walk), "-o", str(out), "--clones", "4", "--iterations", "100", "--json"]
    assert main([*command, "--evidence", str(tmp_path / "evidence.csv"), "--room", str(room)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["evidence"] == "evidence.csv" and summary["recovers_room"] is True and out.is_file()
    assert main([*command, "--evidence", str(tmp_path / "evidence.csv"), "--noise", "0.1"]) != 0
    error = capsys.readouterr().err.strip()
    assert "give one" in error and "\n" not in error


def test_each_restart_reports_its_iterations_and_a_raise_stops_them():
    """``restart_progress`` hears each restart's soft EM on the walk without its tail (restart, iteration, bits per
    step), ``progress`` the kept restart's on the whole walk; the summary names the kept restart and the held-out
    steps; an exception raised by ``restart_progress`` stops learning at once (the Maps page's Cancel)."""
    room = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1]])
    walk = actions.generate_walk(room, 1_000, seed=7)
    likelihood = evidence.reading_evidence(walk.observations, 3, 0.05)
    heard, refit = [], []
    arguments = (likelihood, walk.actions, ["a", "b", "c"], list(actions.MOVES), 2, 30, 1e-3, 2)
    _, summary = evidence.learn_map_from_evidence(
        *arguments, seed=3, progress=lambda i, bits: refit.append(i), restarts=3,
        restart_progress=lambda r, i, bits: heard.append((r, i, bits)),
    )  # fmt: skip
    assert sorted({r for r, _, _ in heard}) == [0, 1, 2] and all(np.isfinite(b) for _, _, b in heard)
    assert refit[0] == 0 and summary["kept_restart"] == int(np.argmin(summary["held_out_bits_per_step"]))
    assert summary["held_out_steps"] == 100 and summary["seed"] == 3 + summary["kept_restart"]

    class Stop(Exception):
        pass

    def stop(restart, iteration, bits):
        raise Stop

    with pytest.raises(Stop):
        evidence.learn_map_from_evidence(*arguments, restarts=2, restart_progress=stop)


def test_a_map_reads_soft_evidence_as_the_symbols_of_its_best_clone_path():
    """``evidence_reading``: a map learned from a symmetric sensor's evidence reads the walk as its true observations
    where the sensor read 10% of them wrong; evidence no clone path explains is refused in one sentence."""
    room = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1]])
    walk = actions.generate_walk(room, 2_000, seed=7)
    readings = evidence.noisy_readings(walk.observations, 3, 0.1, seed=8)
    model, _ = evidence.learn_map_through_noise(
        readings.symbols, walk.actions, ["a", "b", "c"], list(actions.MOVES), 0.1, 4, 100, 1e-3, 10, seed=9
    )
    reading = evidence.evidence_reading(model, readings.likelihood, walk.actions)
    assert np.mean(readings.symbols != walk.observations) > 0.05
    assert reading.dtype == np.int64 and np.mean(reading != walk.observations) < 0.01
    impossible = np.zeros((2, 3))
    impossible[:, 0] = 1.0
    with pytest.raises(ValueError, match="no clone path of the map can explain this soft evidence"):
        evidence.evidence_reading(model.with_T(np.zeros_like(model.T)), impossible, walk.actions[:2])
