"""Restarts of a map that race (:func:`engine.cognitive.restarts.race`): batch EM in segments is one run of batch EM,
the plateau rule ends EM once it has settled, a race of one start is the start alone, the race keeps the map the
full run keeps on a small room, and the rule stops only racers far behind the leader (never the leader, never before
the grace), each with the reason in the map's summary."""

from __future__ import annotations

import contextlib
import io
import json
import types
from pathlib import Path

import numpy as np
import pytest

from app.services import maps as map_page
from engine.cli import maps as map_command
from engine.cognitive import actions, maps, restarts, walks

WALLED = np.array([[0, 1, 2, 0], [2, -1, 1, 3], [1, 0, -1, 2], [3, 2, 0, 1]])
"""The 4 x 4 room of tests/test_map_restarts.py: one start fails on the walk of seed 3, the second finds it."""


RECORDED = Path(__file__).parent / "data" / "race_trajectories.json"
"""Recorded trajectories (bench/bench_race.py record): 11 maps of 4 restarts, the four rooms of bench/bench_rooms.py at
10,000 steps (seeds 0 and 1) and the empty room at 50,000 (seeds 0-2), each restart's batch EM run to its end."""


def walled_walk(seed: int = 3, length: int = 3000) -> walks.WalkFile:
    return walks.parse_walk(walks.format_walk(actions.generate_walk(WALLED, length, seed=seed)), "the walk")


def options(**change: object) -> walks.MapOptions:
    """The race's settings (off by default) on a small room."""
    return walks.MapOptions(**({"clones": 5, "seed": 3, "restarts": 4, "race": True, "plateau_window": 100} | change))


@pytest.mark.parametrize("length", [1, 7, 40])
def test_batch_em_in_segments_is_one_run_of_batch_em(length: int) -> None:
    """Segments of any length, stop when worse across their seams: the bits of every iteration and the final T of
    one :func:`engine.cognitive.actions.learn_em` run, to the bit."""
    walk = walled_walk()
    x, a = walk.observations, walk.actions
    recipe = options(plateau_window=0)
    for seed in (3, 5):
        start = actions.random_action_model(np.full(4, 5), x, a, seed, walk.symbols, walk.action_names)
        whole, bits = actions.learn_em(start, x, a, recipe.iterations, recipe.pseudocount)
        model, history, ended, segments = start, [], False, 0
        while not ended:
            model, ended = restarts.em_segment(model, x, a, recipe, history, length)
            segments += 1
        assert history == bits and len(bits) < recipe.iterations  # stopped when worse, not at the cap
        assert np.array_equal(model.T, whole.T)
        assert segments == -(-len(bits) // length) or segments == -(-len(bits) // length) + 1


def test_the_plateau_rule_ends_em_once_it_gains_less_than_its_gain_over_its_window() -> None:
    """On made-up trajectories: EM ends at the first segment's end where the bits per step of the last ``window``
    iterations improved by less than ``gain`` times their latest value, never with a window of 0, and never before
    ``window`` iterations; the same trajectory at a twentieth of the bits (a walk five times as long) ends at the
    same iteration."""
    rule = types.SimpleNamespace(plateau_window=3, plateau_gain=0.01)
    assert not restarts.on_plateau([1.0, 0.9, 0.8], rule)  # fewer iterations than the window
    assert not restarts.on_plateau([1.0, 0.9, 0.8, 0.7], rule)  # 0.3 gained over 3 iterations
    assert not restarts.on_plateau([1.0, 0.9, 0.8, 0.7, 0.699, 0.698, 0.690], rule)  # 0.009 >= 0.0069
    assert restarts.on_plateau([1.0, 0.9, 0.8, 0.7, 0.699, 0.698, 0.695], rule)  # 0.005 < 0.00695
    for scale in (1.0, 0.05):
        trajectory = [scale * b for b in (1.0, 0.9, 0.8, 0.7, 0.699, 0.698, 0.695)]
        ends = [t for t in range(1, len(trajectory) + 1) if restarts.on_plateau(trajectory[:t], rule)]
        assert ends[0] == 7
    assert not restarts.on_plateau([1.0, 1.0, 1.0, 1.0, 1.0], types.SimpleNamespace(plateau_window=0, plateau_gain=1))


def test_the_plateau_rule_stops_em_earlier_than_stop_when_worse_with_the_same_recovery() -> None:
    """With 20 clones per observation batch EM crawls for hundreds of iterations before the likelihood stops
    improving (583 on the walk of seed 3); a plateau rule (less than 5% of the bits per step gained over 100
    iterations) ends it sooner, and the map after Viterbi EM and merging recovers the room as well."""
    walk = walled_walk(seed=3)
    x, a = walk.observations, walk.actions
    start = actions.random_action_model(np.full(4, 20), x, a, 3, walk.symbols, walk.action_names)
    ends = {}
    plateau = options(clones=20, plateau_gain=0.05)
    for name, recipe in (("worse", options(clones=20, plateau_window=0)), ("plateau", plateau)):
        model, history, ended = start, [], False
        while not ended:
            model, ended = restarts.em_segment(model, x, a, recipe, history, recipe.race_every)
        learned = restarts.refine(model, len(history), x, a, recipe)
        ends[name] = (len(history), maps.recovers_room(learned.model, x, a, WALLED))
    assert ends["worse"][0] == 583 and ends["plateau"][0] < ends["worse"][0]
    assert ends["plateau"][1] and ends["worse"][1]


def test_a_race_of_one_start_is_the_start_alone() -> None:
    """One restart: ``chmm map`` runs the recipe once on the whole walk, race or not; and a race of one racer (the
    plateau off) learns what :func:`engine.cognitive.restarts.run_restart` learns."""
    walk = walled_walk()
    alone, summary = walks.learn_map(walk, options(restarts=1, race=False))
    raced, summary_raced = walks.learn_map(walk, options(restarts=1, race=True))
    assert np.array_equal(alone.T, raced.T) and summary == summary_raced and "restarts" not in summary_raced

    x, a = walk.walks()
    head, tail = restarts.hold_out_tail([(x, a)], walks.MAP_HELD_OUT_SHARE)
    recipe = options(plateau_window=0)
    job = (x, a, head, tail, np.full(4, 5), walk.symbols, walk.action_names, recipe)
    one = restarts.run_restart(*job, 1)
    (racer,) = restarts.race(job, [1], 1)
    assert racer.stopped is None and racer.held_out_bits == one.held_out_bits
    assert racer.run.em_iterations == one.run.em_iterations and np.array_equal(racer.run.model.T, one.run.model.T)


def test_the_race_keeps_the_map_the_full_run_keeps_on_a_small_room() -> None:
    """With and without the race on the walk where one start fails: the same restart kept, the same map, which
    recovers the room; every restart's line says whether the race stopped it, and the summary how many."""
    walk = walled_walk()
    x, a = walk.observations, walk.actions
    full, summary_full = walks.learn_map(walk, options(race=False, plateau_window=0))
    raced, summary = walks.learn_map(walk, options())
    assert summary["kept_restart"] == summary_full["kept_restart"] == 1
    assert np.array_equal(raced.T, full.T) and maps.recovers_room(raced, x, a, WALLED)
    assert all("stopped_by_race" in line for line in summary["restarts"])
    assert summary["restarts_stopped"] == sum(line["stopped_by_race"] is not None for line in summary["restarts"]) == 0
    assert (
        summary["race_note"] == "The 4 restarts raced on the held-out steps; none fell far enough behind to be stopped."
    )


def _racer(restart: int, iterations: int, tails: list[float], model: actions.ActionCHMM) -> restarts.Racer:
    """A racer with a synthetic trajectory (made up here, not learned): ``iterations`` of EM behind it and the tail's
    bits per step after each of its segments."""
    racer = restarts.Racer(restart, restart, model, history=[1.0] * iterations)
    racer.tail = [(iterations * (i + 1) // len(tails), bits) for i, bits in enumerate(tails)]
    return racer


def test_the_rule_stops_only_racers_past_the_grace_that_cannot_catch_the_leader_on_synthetic_trajectories() -> None:
    """Synthetic trajectories (not learned): the leader (lowest tail bits) is never stopped; a racer past the grace
    more than the margin times the leader's above it is stopped, as is one above the leader by more than it gained
    over the window (level and flat: a copy of the leader), each with the reason; one still gaining fast, or in its
    grace, runs on; a finished map that gives the tail probability 0 is stopped where a finished one gives it a
    probability; and a stopped racer is no candidate for the map kept."""
    walk = walled_walk()
    model = actions.random_action_model(np.full(4, 2), walk.observations, walk.actions, 0)
    rule = types.SimpleNamespace(race_grace=100, race_margin=1.0, race_window=50)
    leader = _racer(0, 150, [0.9, 0.3, 0.100], model)
    gaining = _racer(1, 150, [0.8, 0.4, 0.150], model)  # 1.5 times the leader's, 0.25 gained over the last 50
    far = _racer(2, 150, [0.7, 0.3, 0.201], model)  # over 2 times the leader's
    flat = _racer(3, 150, [0.9, 0.1011, 0.1010], model)  # 0.0010 behind, 0.0001 gained over the last 50
    young = _racer(4, 75, [0.9, 0.8, 0.7], model)
    racers = [leader, gaining, far, flat, young]
    assert restarts.judge(racers, rule) == [far, flat]
    assert far.stopped == (
        "stopped at EM iteration 150: tail 0.2010 bits per step against the leader's 0.1000 (restart 0), more than 2 "
        "times it"
    )
    assert flat.stopped.endswith("(restart 0), behind by more than it gained over the last 50 iterations (0.0001)")
    assert leader.stopped is gaining.stopped is young.stopped is None
    assert restarts.judge(racers, rule) == []  # nothing stopped twice

    for racer, held in ((leader, 0.02), (gaining, np.inf)):
        run = restarts.MapRun(model, model, 150, 3, 8)
        racer.result, racer.em_ended = restarts.MapRestart(racer.restart, racer.restart, run, held, 0.01), True
    assert restarts.judge(racers, rule) == [gaining]
    assert gaining.stopped == "its map gives the held-out tail probability 0 where restart 0's does not"
    lines = [r.restart_line() for r in (leader, gaining, far)]
    assert restarts.chosen(lines).restart == 0 and lines[2].held_out_bits == np.inf
    assert [line.line()["stopped_by_race"] is None for line in lines] == [True, False, False]


def test_racers_stopped_in_em_that_beat_the_kept_map_run_again() -> None:
    """Synthetic trajectories (not learned): once every racer has finished or been stopped, a racer stopped in EM
    whose tail score is below the best finished map's held-out bits runs again and is never stopped again; one above
    it stays stopped; and every one runs again when no finished map gives the tail a probability."""
    walk = walled_walk()
    model = actions.random_action_model(np.full(4, 2), walk.observations, walk.actions, 0)
    rule = types.SimpleNamespace(race_grace=100, race_margin=1.0, race_window=0)
    finished, beating, behind = (
        _racer(0, 300, [0.9, 0.0005], model),
        _racer(1, 300, [0.9, 0.0012], model),
        _racer(2, 300, [0.9, 0.02], model),
    )
    assert restarts.judge([finished, beating, behind], rule) == [beating, behind]
    run = restarts.MapRun(model, model, 300, 3, 8)
    finished.result = restarts.MapRestart(0, 0, run, np.inf, 0.01)  # its map makes the tail impossible
    assert restarts.revive([finished, beating, behind]) == [beating, behind]
    for racer in (beating, behind):
        racer.stopped, racer.revived = "stopped", False
    finished.result = restarts.MapRestart(0, 0, run, 0.0063, 0.01)  # a map worse on the tail than racer 1's EM
    assert restarts.revive([finished, beating, behind]) == [beating]
    assert beating.live and beating.revived and behind.stopped is not None
    assert restarts.judge([finished, beating, behind], rule) == []  # never stopped again
    assert restarts._behind(beating, finished, rule) is None


def test_with_the_plateau_and_the_race_the_map_kept_predicts_the_tail_as_well_and_recovers_the_room() -> None:
    """10 clones per observation: batch EM runs 90-924 iterations per restart on this walk, and the plateau ends
    some restarts' EM far sooner (worse maps for those), yet the map kept with the race gives the held-out tail the
    same bits per step as the full run's, recovers the room, and took fewer EM iterations in all."""
    walk = walled_walk(seed=3)
    x, a = walk.observations, walk.actions
    full, summary_full = walks.learn_map(walk, options(clones=10, race=False))
    raced, summary = walks.learn_map(walk, options(clones=10))
    held = {
        name: min(line["held_out_bits_per_step"] for line in s["restarts"] if line["held_out_bits_per_step"])
        for name, s in (("full", summary_full), ("race", summary))
    }
    assert held["race"] == pytest.approx(held["full"], rel=1e-6)
    assert maps.recovers_room(raced, x, a, WALLED) and maps.recovers_room(full, x, a, WALLED)
    iterations = {name: sum(line["em_iterations"] for line in s["restarts"]) for name, s in
                  (("full", summary_full), ("race", summary))}  # fmt: skip
    assert iterations["race"] < iterations["full"]


def test_a_map_says_which_restarts_the_race_stopped_and_why() -> None:
    """A race with no margin (any racer behind the leader after 25 iterations stopped): the stopped restarts' lines
    say at which EM iteration and against which leader, they have no map (no held-out bits), the kept restart is
    one that finished, and the summary counts them and names them in one sentence; the progress counts them as they
    are stopped (a "race" record each, which the page's label counts)."""
    walk = walled_walk(seed=3)
    seen: list[tuple] = []
    _, summary = walks.learn_map(
        walk, options(clones=10, race_margin=0.0, race_grace=25), lambda *record: seen.append(record)
    )
    lines = summary["restarts"]
    told = [record for record in seen if record[0] == "race"]
    assert [r[3] for r in told] == sorted(line["restart"] for line in lines if line["stopped_by_race"] is not None)
    assert [r[1] for r in told] == sorted(r[1] for r in told) and told[-1][1] == summary["restarts_stopped"]
    last_em = [r for r in seen if r[0] == "em"][-1]
    record = {"status": "running", "request": {"restarts": 4}, "race_stopped": told[-1][1]}
    record |= dict(zip(("stage", "iteration", "bits", "restart"), last_em, strict=True))
    label = map_page.progress_of(record)[1]
    assert label.endswith(f"The restarts race on the held-out steps; {told[-1][1]} stopped so far.")
    stopped = [line for line in lines if line["stopped_by_race"] is not None]
    assert 1 <= summary["restarts_stopped"] == len(stopped) <= 3
    for line in stopped:
        assert line["stopped_by_race"].startswith(f"stopped at EM iteration {line['em_iterations']}: tail ")
        assert "against the leader's" in line["stopped_by_race"] and line["held_out_bits_per_step"] is None
    assert lines[summary["kept_restart"]]["stopped_by_race"] is None
    assert summary["race_note"].startswith(f"The race stopped {len(stopped)} of the 4 restarts: restart ")
    said = io.StringIO()  # what `chmm map` prints and the Maps page says
    with contextlib.redirect_stdout(said):
        map_command._say(summary, None, "map.npz")
    printed = said.getvalue()
    for line in stopped:
        assert f"restart {line['restart'] + 1} (seed {line['seed']}): {line['stopped_by_race']}" in printed
    assert summary["race_note"] in printed
    assert summary["race_note"] in map_page.summary_sentence({"summary": summary, "recovers_room": None})


def test_chmm_map_races_by_default_and_no_race_learns_every_restart_to_its_end(tmp_path) -> None:
    """``chmm map`` races its restarts by default (the recipe in the file says so); ``--no-race`` learns each to its
    end, none stopped, and keeps the same restart and map here (the race stops no restart that would have won)."""
    from engine.cli import main

    (tmp_path / "walk.csv").write_text(walks.format_walk(actions.generate_walk(WALLED, 3000, seed=3)))
    kept = {}
    for name, flags in (("race", []), ("no race", ["--no-race"])):
        output = tmp_path / f"{name}.npz"
        assert main(["map", str(tmp_path / "walk.csv"), "-o", str(output), "--clones", "5", "--seed", "3", *flags]) == 0
        model = actions.load(output)
        assert model.metadata["recipe"]["race"] is (name == "race")
        kept[name] = (model.metadata["kept_restart"], model)
    assert kept["race"][0] == kept["no race"][0] == 1
    assert np.array_equal(kept["race"][1].T, kept["no race"][1].T)
    assert all(line["stopped_by_race"] is None for line in kept["no race"][1].metadata["restarts"])


def _replay(recorded: list[dict], rule: walks.MapOptions, model: actions.ActionCHMM) -> list[restarts.MapRestart]:
    """A recorded map's race through the engine's :func:`restarts.judge` and :func:`restarts.revive`: each live racer
    advances one recorded segment at a time (its tail score the recorded one there), finishes with its recorded map's
    held-out bits the step after its EM ends, and is judged after every round, as :func:`restarts.race` does."""
    racers = [restarts.Racer(r["restart"], r["restart"], model) for r in recorded]
    every = recorded[0]["tail"][0][0]
    while live := [r for r in racers if r.live] or restarts.revive(racers):
        for racer in live:
            line = recorded[racer.restart]
            if racer.em_ended:
                held = np.inf if line["held_out"] is None else line["held_out"]
                run = restarts.MapRun(model, model, line["em"], 0, 0)
                racer.result = restarts.MapRestart(racer.restart, racer.restart, run, held, 0.0)
                continue
            ran = min(len(racer.history) + every, line["em"])
            racer.history = [0.0] * ran
            racer.tail.append((ran, max((p for p in line["tail"] if p[0] <= ran), key=lambda p: p[0])[1]))
            racer.em_ended = ran >= line["em"]
        restarts.judge(racers, rule)
    return [r.restart_line() for r in racers]


def test_on_recorded_trajectories_the_race_stops_no_restart_that_would_have_won() -> None:
    """Recorded, not made up (:data:`RECORDED`): replayed with the defaults' rule, no restart the race stops had a
    map better on the held-out tail than the one it keeps; the map kept is as good as the best of the full run (every
    restart to its end) and recovers the room; the race stops the empty room's losers at 10,000 steps and, at 50,000,
    where every restart's EM model scores the tail within a few per cent of the others, none."""
    walk = walled_walk()
    model = actions.random_action_model(np.full(4, 2), walk.observations, walk.actions, 0)
    stopped = {}
    for recorded in json.loads(RECORDED.read_text())["maps"]:
        lines = recorded["restarts"]
        held = [np.inf if line["held_out"] is None else line["held_out"] for line in lines]
        raced = _replay(lines, walks.MAP_DEFAULTS, model)
        kept = restarts.chosen(raced)
        assert kept.held_out_bits == min(held) and lines[kept.restart]["recovered"]
        for result in raced:
            if result.stopped is not None:
                assert held[result.restart] >= kept.held_out_bits, (recorded["room"], recorded["seed"])
        stopped[(recorded["room"], recorded["seed"], recorded["steps"])] = sum(r.stopped is not None for r in raced)
    assert stopped[("empty", 0, 10_000)] >= 2 and stopped[("empty", 1, 10_000)] >= 2
    assert [stopped[("empty", seed, 50_000)] for seed in range(3)] == [0, 0, 0]


def test_chmm_map_says_each_restart_the_race_stops_as_it_stops(tmp_path, monkeypatch, capsys) -> None:
    """With a race of no margin (stopped 25 iterations in when behind), ``chmm map``'s progress names each restart as
    the race stops it, counting them, and its summary names them all."""
    import functools

    from engine.api import maps as door
    from engine.cli import main

    monkeypatch.setattr(door, "MapOptions", functools.partial(walks.MapOptions, race_margin=0.0, race_grace=25))
    (tmp_path / "walk.csv").write_text(walks.format_walk(actions.generate_walk(WALLED, 3000, seed=3)))
    arguments = ["map", str(tmp_path / "walk.csv"), "-o", str(tmp_path / "map.npz"), "--clones", "10", "--seed", "3"]
    assert main(arguments) == 0
    err, out = capsys.readouterr()[::-1]
    told = [line for line in err.splitlines() if ": the race stopped it (held-out " in line]
    counts = [int(line.rsplit("; ", 1)[1].split()[0]) for line in told]
    assert told and counts == sorted(counts) and counts[-1] == len(told)
    assert f"The race stopped {len(told)} of the 4 restarts: restart " in out
