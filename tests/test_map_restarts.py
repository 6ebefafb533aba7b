"""Restarts of a map (issue 50, item 1, "a map found every time"): ``chmm map --restarts``, the Maps page's Restarts,
and :mod:`engine.cognitive.restarts`. On a small walled room where one start fails on some seeds, the restart kept
is the one whose map predicts the walk's held-out tail best (scored here by hand), and it recovers the room; restarts
in worker processes learn what one process learns; bad values are refused in one sentence; a cancelled run with
restarts leaves nothing half-written and no worker behind."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from engine import training
from engine.cognitive import actions, maps, restarts, walks

WALLED = np.array([[0, 1, 2, 0], [2, -1, 1, 3], [1, 0, -1, 2], [3, 2, 0, 1]])
"""A 4 x 4 room with two wall cells and four observations over 14 cells: 5 clones per observation learn it from a
3,000-step walk in a fraction of a second, but one start fails on about a third of the seeds."""
SEED = 3
"""The seed of the walk and of the first start: that start alone does not find the room, the second does."""
ROOT = Path(__file__).resolve().parents[1]


def walled_walk(seed: int = SEED, length: int = 3000) -> walks.WalkFile:
    return walks.parse_walk(walks.format_walk(actions.generate_walk(WALLED, length, seed=seed)), "the walk")


def options(**change: object) -> walks.MapOptions:
    return walks.MapOptions(**({"clones": 5, "seed": SEED, "restarts": 4} | change))


def test_restarts_keep_the_map_that_predicts_the_held_out_tail_best_and_it_recovers_the_room() -> None:
    walk = walled_walk()
    x, a = walk.observations, walk.actions
    one, _ = walks.learn_map(walk, options(restarts=1))
    assert not maps.recovers_room(one, x, a, WALLED)  # one start fails on this walk

    model, summary = walks.learn_map(walk, options())
    cut = len(x) - round(walks.MAP_HELD_OUT_SHARE * len(x))
    assert summary["held_out_steps"] == len(x) - cut == 300
    scores, recovered = [], []
    for r in range(4):  # each restart by hand: its start, the recipe on the head, its map's bits on the tail
        start = actions.random_action_model(np.full(4, 5), x, a, SEED + r, walk.symbols, walk.action_names)
        em_model, _ = actions.learn_em(start, x[:cut], a[:cut], 4000, 2e-3)
        hard, _ = actions.learn_viterbi(em_model, x[:cut], a[:cut], 100)
        merged, _ = maps.merge_equivalent_clones(hard)
        scores.append(actions.bits_per_step(merged, x[cut:], a[cut:]))
        recovered.append(maps.recovers_room(merged, x[:cut], a[:cut], WALLED))
    lines = summary["restarts"]
    assert [line["restart"] for line in lines] == [0, 1, 2, 3]
    assert [line["seed"] for line in lines] == [SEED, SEED + 1, SEED + 2, SEED + 3]
    assert [line["held_out_bits_per_step"] for line in lines] == pytest.approx(scores, rel=1e-9)
    assert summary["kept_restart"] == int(np.argmin(scores)) == 1
    assert not all(recovered) and recovered[1]  # the score tells the maps apart without the room
    assert maps.recovers_room(model, x, a, WALLED)
    assert summary["bits_per_step"] == pytest.approx(actions.bits_per_step(model, x, a))
    assert model.metadata["recipe"]["restarts"] == 4 and model.metadata["kept_restart"] == 1


AISLE = np.array([[0, 1, 2, 3], [4, 5, 5, 6], [7, 5, 5, 8], [9, 10, 11, 12]])
"""A 4 x 4 room whose four inner cells look alike: with 3 clones per observation and the 2,000-step walk of seed 1,
the starts of seeds 0 and 1 end in maps that give the walk's held-out tail probability 0, those of seeds 2 and 3
do not."""


@pytest.mark.parametrize("processes", ["1", "2"])
def test_when_every_restart_misses_the_tail_another_round_runs(processes: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A round of restarts whose maps all give the held-out tail probability 0 found no room: another round runs
    (seeds continuing), and stops at the first round with a map that gives the tail a probability, or at
    ``max_restarts``; the scores are each restart's own, by hand."""
    monkeypatch.setenv(training.RESTART_PROCESSES_ENV, processes)
    monkeypatch.setattr(restarts, "MAP_PROCESS_WORK", 10**12 if processes == "1" else 0)
    walk = walks.parse_walk(walks.format_walk(actions.generate_walk(AISLE, 2000, seed=1)), "the walk")
    x, a = walk.observations, walk.actions
    learned_from, held_out = restarts.hold_out_tail([(x, a)], walks.MAP_HELD_OUT_SHARE)
    clones = np.full(len(walk.symbols), 3, dtype=np.int64)
    own = walks.MapOptions(clones=3, seed=0, restarts=1)
    job = (x, a, learned_from, held_out, clones, walk.symbols, walk.action_names, own)
    by_hand = [restarts.run_restart(*job, r).held_out_bits for r in range(4)]
    assert np.isinf(by_hand[:2]).all() and np.isfinite(by_hand[2:]).all()

    seen: list[tuple] = []
    model, summary = walks.learn_map(
        walk, walks.MapOptions(clones=3, seed=0, restarts=2, max_restarts=6), lambda *record: seen.append(record)
    )
    lines = summary["restarts"]
    assert [line["restart"] for line in lines] == [0, 1, 2, 3]  # one more round of 2, then a finite score
    assert [line["held_out_bits_per_step"] for line in lines[:2]] == [None, None]
    assert [line["held_out_bits_per_step"] for line in lines[2:]] == pytest.approx(by_hand[2:], rel=1e-9)
    assert summary["kept_restart"] == 2 + int(np.argmin(by_hand[2:]))
    assert np.isfinite(summary["bits_per_step"])
    learning = [r[3] for r in seen if r[0] != "refit"]
    assert learning == sorted(learning) and set(learning) == {0, 1, 2, 3}  # progress restart by restart
    assert summary["restarts_note"] == (
        "The first 2 restarts' maps all gave the held-out steps probability 0 (none found the room), so 2 more ran."
    )

    _, alone = walks.learn_map(walk, walks.MapOptions(clones=3, seed=0, restarts=2, max_restarts=2))
    assert [line["restart"] for line in alone["restarts"]] == [0, 1]  # no more than asked
    assert alone["restarts_note"].startswith("All 2 restarts' maps gave the held-out steps probability 0: the room")
    with pytest.raises(ValueError, match="the most restarts must be a whole number from 1 to 64, got 0"):
        walks.learn_map(walk, walks.MapOptions(clones=3, restarts=2, max_restarts=0))
    capped, _ = restarts.run_restarts(
        x, a, clones, walk.symbols, walk.action_names, walks.MapOptions(clones=3, seed=0, restarts=2, max_restarts=3),
        walks.MAP_HELD_OUT_SHARE,
    )
    assert [r.restart for r in capped] == [0, 1, 2]  # the last round cut at the most


def test_the_held_out_tail_is_the_last_tenth_of_the_steps_over_several_walks() -> None:
    def walk(n: int) -> tuple[np.ndarray, np.ndarray]:
        return np.arange(n), np.zeros(n, dtype=np.int64)

    kept, held = restarts.hold_out_tail([walk(50), walk(40), walk(10)], 0.1)
    assert [len(x) for x, _ in kept] == [50, 40] and [len(x) for x, _ in held] == [10]
    kept, held = restarts.hold_out_tail([walk(50), walk(45), walk(5)], 0.1)
    assert [len(x) for x, _ in kept] == [50, 40] and [len(x) for x, _ in held] == [5, 5]
    kept, held = restarts.hold_out_tail([walk(100)], 0.1)
    assert np.array_equal(kept[0][0], np.arange(90)) and np.array_equal(held[0][0], np.arange(90, 100))
    kept, held = restarts.hold_out_tail([walk(50), walk(7)], 0.1)  # the cut would leave 1 step: the whole walk
    assert [len(x) for x, _ in kept] == [50] and [len(x) for x, _ in held] == [7]
    with pytest.raises(ValueError, match="a walk of 3 steps is too short to hold out its tail"):
        restarts.hold_out_tail([walk(3)], 0.1)


def test_restarts_in_processes_learn_what_one_process_learns(monkeypatch: pytest.MonkeyPatch) -> None:
    walk = walled_walk()
    runs = {}
    for processes, work in (("1", 10**12), ("2", 0)):
        monkeypatch.setenv(training.RESTART_PROCESSES_ENV, processes)
        monkeypatch.setattr(restarts, "MAP_PROCESS_WORK", work)
        assert restarts.map_restart_processes(3, 3000, 20) == int(processes)
        seen: list[tuple] = []
        model, summary = walks.learn_map(walk, options(restarts=3), lambda *record, seen=seen: seen.append(record))
        runs[processes] = (model, summary, seen)
    (one, one_summary, one_seen), (two, two_summary, two_seen) = runs["1"], runs["2"]
    lines = [line | {"seconds": 0} for line in two_summary.pop("restarts")]  # their times differ
    assert [pytest.approx(line) for line in lines] == [line | {"seconds": 0} for line in one_summary.pop("restarts")]
    assert two_summary == pytest.approx(one_summary)
    assert two.n_states == one.n_states and np.allclose(two.T, one.T, atol=1e-7)
    # the progress comes restart by restart, then the kept restart's refit, in either case
    assert [r[:2] + (r[3],) for r in two_seen] == [r[:2] + (r[3],) for r in one_seen]
    learning = [r[3] for r in one_seen if r[0] != "refit"]
    assert learning == sorted(learning) and set(learning) == {0, 1, 2}
    assert {r[3] for r in one_seen if r[0] == "refit"} == {one_summary["kept_restart"]}
    assert not multiprocessing.active_children()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "--restarts must be from 1 to 64, got 0"),
        ("65", "--restarts must be from 1 to 64, got 65"),
        ("two", "argument --restarts: invalid int value: 'two'"),
        ("max 0", "--max-restarts must be from 1 to 64, got 0"),
        ("max 65", "--max-restarts must be from 1 to 64, got 65"),
    ],
)
def test_bad_restarts_are_refused_in_one_sentence(tmp_path: Path, capsys, value: str, message: str) -> None:
    from engine.cli import main

    (tmp_path / "walk.csv").write_text(walks.format_walk(actions.generate_walk(WALLED, 200, seed=0)))
    flag, _, value = value.rpartition(" ")
    flag = "--max-restarts" if flag == "max" else "--restarts"
    with pytest.raises(SystemExit) if value == "two" else _nothing():
        assert main(["map", str(tmp_path / "walk.csv"), "-o", str(tmp_path / "map.npz"), flag, value]) == 1
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1, error
    assert not (tmp_path / "map.npz").exists()


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> bool:
        return False


@pytest.mark.parametrize("value", [0, 65, True, 2.5, "4", None])
def test_the_engine_and_the_page_refuse_bad_restarts_in_one_sentence(folder: Path, value: object) -> None:
    from app.services import UserError
    from app.services import maps as page_maps

    with pytest.raises(ValueError, match=r"^the number of restarts must be a whole number from 1 to 64, got "):
        walks.learn_map(walled_walk(length=200), options(restarts=value))
    if value in (None, True, "4"):
        return  # the page's form reads "4" as 4, and an empty field as the default
    with pytest.raises(UserError) as refused:
        page_maps.check_request(folder, "room", "0,1\n1,0", 100, 2, 0, value)
    assert str(refused.value) == "The number of restarts must be a whole number from 1 to 64."


def test_a_walk_too_short_to_hold_out_a_tail_is_refused_in_one_sentence(tmp_path: Path, capsys) -> None:
    from engine.cli import main

    (tmp_path / "walk.csv").write_text("action,observation\nleft,0\nright,1\nleft,0\n")
    arguments = ["map", str(tmp_path / "walk.csv"), "-o", str(tmp_path / "map.npz"), "--clones", "2"]
    assert main([*arguments, "--restarts", "2"]) == 1
    error = capsys.readouterr().err
    assert (
        "a walk of 3 steps is too short to hold out its tail for choosing among restarts; learn with 1 restart" in error
    )
    assert error.count("\n") == 1 and not (tmp_path / "map.npz").exists()
    assert main([*arguments, "--restarts", "1", "--json"]) == 0
    assert "restarts" not in json.loads(capsys.readouterr().out)


def test_the_maps_page_learns_with_restarts_and_says_which_it_kept(folder: Path) -> None:
    """The page's form has Restarts: the job learns with them, its progress names the restart, its message the one
    kept."""
    from app import jobs
    from app.services import maps as page_maps

    room = "\n".join(",".join(str(v) for v in row) for row in WALLED)
    reports: list[dict] = []
    request = page_maps.check_request(folder, "room", room, 3000, 5, SEED, "3")
    assert request.restarts == 3 and request.options().restarts == 3
    outcome = page_maps.run_map_job(folder, request, report=reports.append)
    assert outcome["status"] == jobs.FINISHED, outcome
    kept = page_maps.load_view(folder)["summary"]["kept_restart"]
    assert (
        f"Restart {kept + 1} of 3 kept: its map predicted the walk's held-out last 300 steps best."
        in outcome["message"]
    )
    assert "It recovers the room: 14 clones used for 14 cells" in outcome["message"]
    labels = [page_maps.progress_of(r) for r in reports if r.get("stage") and r["status"] == jobs.RUNNING]
    assert all(0 <= value <= 99 for value, _ in labels)
    assert all(label.startswith(("Restart ", "The kept restart (")) for _, label in labels)
    assert page_maps.check_request(folder, "room", room, 3000, 5, SEED).restarts == walks.MAP_DEFAULTS.restarts
    running = {"status": jobs.RUNNING, "request": {"restarts": 3}}
    value, label = page_maps.progress_of(running | {"stage": "refit", "iteration": 1, "bits": 0.01, "restart": 2})
    assert value >= 90 and label.startswith("The kept restart (3 of 3): Viterbi EM iteration 2")
    value, label = page_maps.progress_of(running | {"stage": "em", "iteration": 0, "bits": 1.0, "restart": 1})
    assert 30 <= value < 60 and label.startswith("Restart 2 of 3: EM iteration 1 ")
    # a further round (the first three all gave the held-out steps probability 0): the bar waits, the label says so
    value, label = page_maps.progress_of(running | {"stage": "em", "iteration": 5, "bits": 1.0, "restart": 4})
    assert value == 89 and label.startswith("Restart 5 (the first 3 found no room; at most 12): EM iteration 6 ")
    value, label = page_maps.progress_of(running | {"stage": "refit", "iteration": 0, "bits": 0.01, "restart": 4})
    assert value >= 90 and label.startswith("The kept restart (restart 5): Viterbi EM")


def test_a_cancelled_map_job_with_restarts_keeps_the_previous_map_and_writes_nothing(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Maps page's job with restarts in worker processes, cancelled while they learn: the job says cancelled,
    the session's map is the one before, nothing of the cancelled map is left, and no worker."""
    from app import jobs
    from app.services import maps as page_maps

    room = "\n".join(",".join(str(v) for v in row) for row in WALLED)
    first = page_maps.run_map_job(folder, page_maps.check_request(folder, "room", room, 3000, 5, SEED, 1))
    assert first["status"] == jobs.FINISHED
    before = {p.relative_to(folder): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    monkeypatch.setenv(training.RESTART_PROCESSES_ENV, "2")
    monkeypatch.setattr(restarts, "MAP_PROCESS_WORK", 0)
    reports: list[dict] = []

    def cancel_once_learning(record: dict) -> None:
        reports.append(record)
        if record.get("stage") and not (folder / page_maps.CANCEL).exists():
            page_maps.request_cancel(folder)

    request = page_maps.check_request(folder, "room", room, 20_000, 5, SEED, 4)
    outcome = page_maps.run_map_job(folder, request, report=cancel_once_learning)
    assert outcome["status"] == jobs.CANCELLED, outcome
    learning = [r for r in reports if r.get("stage")]
    assert learning and not any(r["stage"] == "refit" for r in learning)
    assert page_maps.progress_of(learning[0])[1].startswith(f"Restart {learning[0]['restart'] + 1} of 4: ")
    assert page_maps.current_map(folder).name == first["key"]
    after = {p.relative_to(folder): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    job_files = {Path(page_maps.JOB), Path(page_maps.HEARTBEAT), Path(page_maps.CANCEL)}
    job_files |= {p for p in after if p.name.startswith(".map-") and p.suffix == ".lock"}  # the kind's locks
    assert {p: t for p, t in after.items() if p not in job_files} == {
        p: t for p, t in before.items() if p not in job_files
    }
    assert sorted(p.name for p in (folder / page_maps.MAPS).iterdir()) == [first["key"]]
    assert not multiprocessing.active_children()


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_chmm_map_stopped_during_its_restarts_writes_no_file_and_leaves_no_worker(tmp_path: Path) -> None:
    """``chmm map --restarts 2`` (20,000 steps x 100 clones: its restarts race in two threads of the one process),
    stopped by SIGTERM (as Ctrl-C) once its first restart learns: exit 130 within the minute, no model file (not even
    a temporary one), and no process left behind."""
    walk = tmp_path / "walk.csv"
    walk.write_text(walks.format_walk(actions.generate_walk(WALLED, 20_000, seed=0)))
    output = tmp_path / "map.npz"
    environment = os.environ | {training.RESTART_PROCESSES_ENV: "2", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "engine.cli", "map", str(walk), "-o", str(output), "--clones", "25"]
    process = subprocess.Popen(
        [*command, "--restarts", "2"], cwd=ROOT, env=environment, stderr=subprocess.PIPE, text=True
    )
    try:
        line = process.stderr.readline()
        assert line.startswith("restart 1 of 2  em       iteration    1"), line
        workers = _children(process.pid)  # none while the restarts race (threads); any there must end
        process.send_signal(signal.SIGTERM)
        rest = process.communicate(timeout=60)[1]
    finally:
        process.kill()
    assert process.returncode == 130 and rest.strip().endswith("chmm: interrupted"), rest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["walk.csv"]
    deadline = time.time() + 10
    while any(_alive(pid) for pid in workers) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in workers)
