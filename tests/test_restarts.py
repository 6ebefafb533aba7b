"""Tests of the training recipe around the learner (engine/api.py): restarts kept on validation (one after
the other or in processes, with the same result), online EM followed by batch EM with the refit continuing from the
online stage, the number of states and the pseudocount chosen on validation, and the command line's options."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from support import FIXED

from engine import api, cli, training
from engine.backends import model_files
from engine.model import synthetic
from engine.model.blocks import aligned_entries
from engine.training import learning
from engine.training import search as training_search
from engine.training import stages as training_stages

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def toy_text(k: int, length: int, seed: int) -> str:
    return "".join(ALPHABET[s] for s in synthetic.toy_fsm_sequence(k, length, np.random.default_rng(seed)))


def options(**changes: object) -> training.TrainOptions:
    base = training.TrainOptions(
        algorithm="em", pseudocount=1e-6, states=20, allocation="uniform", normalisation="raw", iterations=15
    )
    for name, value in changes.items():
        setattr(base, name, value)
    return base


def test_restarts_keep_the_best_on_validation() -> None:
    corpus = toy_text(2, 6000, 0)
    records: list[learning.IterationRecord] = []
    outcome = training.train_text(corpus, options(restarts=3, refit=False), callback=records.append)
    restarts = outcome.summary["restarts"]
    assert [r["restart"] for r in restarts] == [0, 1, 2]
    assert outcome.summary["validation_bps"] == pytest.approx(min(r["bps"] for r in restarts), abs=1e-9)
    assert {r.restart for r in records} == {0, 1, 2}
    # restart 0 is the run a single start makes
    single = training.train_text(corpus, options(restarts=1, refit=False))
    assert "restarts" not in single.summary
    assert single.summary["validation_bps"] == pytest.approx(restarts[0]["bps"], abs=1e-9)


def test_restarts_start_from_different_models() -> None:
    corpus = training.stages.prepare_training_corpus(toy_text(2, 3000, 1), options(), "toy", None)
    first = training.stages.initial_model_for(corpus, options(), 0)
    second = training.stages.initial_model_for(corpus, options(), 1)
    third = training.stages.initial_model_for(corpus, options(), 2)
    assert not np.allclose(first.T, second.T) and not np.allclose(first.T, third.T)
    assert np.array_equal(first.T, training.stages.initial_model_for(corpus, options(), 0).T)


def test_online_em_then_batch_em_and_the_refit_continues_from_online() -> None:
    corpus = toy_text(2, 6000, 2)
    outcome = training.train_text(corpus, options(algorithm="online", restarts=1, iterations=40))
    result = outcome.result
    assert result.online_model is not None and result.online_iterations >= 1
    assert len(result.history) > result.online_iterations  # batch EM iterations follow the online epochs
    polish = max(0, result.best_iteration - result.online_iterations)
    assert outcome.summary["refit_iterations"] == polish
    if polish:  # the refit is batch EM from the online stage's model on training + validation text
        again = learning.fit(
            result.online_model,
            outcome.corpus.train_full_parts,
            None,
            learning.TrainingConfig(iterations=polish, tolerance=0.0, pseudocount=options().pseudocount),
        )
        assert np.allclose(again.model.T, outcome.model.T.astype(np.float64), atol=1e-5)


def test_online_em_without_validation_is_online_only() -> None:
    outcome = training.train_text(toy_text(2, 4000, 3), options(algorithm="online", restarts=1, validation=0.0))
    assert outcome.result.online_model is None


def test_cli_restarts_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "toy.txt"
    corpus.write_text(toy_text(2, 3000, 4))
    out = tmp_path / "m.npz"
    args = [
        "train",
        str(corpus),
        "-o",
        str(out),
        "--states",
        "20",
        *FIXED,
        "--allocation",
        "uniform",
        "--normalisation",
    ]
    assert cli.main([*args, "raw", "--iterations", "3", "--restarts", "2", "--quiet", "--json"]) == 0
    assert '"restarts"' in capsys.readouterr().out
    assert cli.main([*args, "raw", "--restarts", "0", "--quiet"]) != 0
    assert "restarts must be from 1" in capsys.readouterr().err
    assert cli.main(["train", str(corpus), "-o", str(tmp_path / "n.npz"), "--init", str(out), "--restarts", "3"]) != 0
    assert "--init continues one model" in capsys.readouterr().err
    assert not (tmp_path / "n.npz").exists()


# ------------------------------------------------------------------------------------------ restarts in processes
def test_restarts_in_processes_match_one_after_the_other(monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = toy_text(2, 4000, 5)
    runs = {}
    for processes in ("1", "2"):
        monkeypatch.setenv(training.RESTART_PROCESSES_ENV, processes)
        records: list[learning.IterationRecord] = []
        outcome = training.train_text(corpus, options(restarts=3, algorithm="online"), callback=records.append)
        runs[processes] = (outcome, records)
    (one, one_records), (two, two_records) = runs["1"], runs["2"]
    assert [r["bps"] for r in two.summary["restarts"]] == pytest.approx([r["bps"] for r in one.summary["restarts"]])
    assert np.array_equal(one.model.T, two.model.T)

    # the callback sees the same records in the same order: restart by restart, then the refit
    def strip(records: list[learning.IterationRecord]) -> list[tuple]:
        return [(r.restart, r.iteration, r.refit, np.nan_to_num(r.validation_bps).round(9)) for r in records]

    assert strip(two_records) == strip(one_records)
    assert [r.restart for r in one_records if not r.refit] == sorted(r.restart for r in one_records if not r.refit)


def test_a_cancel_stops_every_restart_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(training.RESTART_PROCESSES_ENV, "2")
    cancel = learning.CancelToken()
    seen: list[learning.IterationRecord] = []

    def progress(record: learning.IterationRecord) -> None:
        seen.append(record)
        cancel.cancel()

    outcome = training.train_text(
        toy_text(3, 30000, 6),
        options(states=28, restarts=4, algorithm="online", iterations=300),
        callback=progress,
        cancel=cancel,
    )
    assert outcome.result.stopped == "cancelled"
    assert len(seen) < 20  # every process stopped within a few epochs of the request, none ran its 300


POOL_HOLDER = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from engine.training import restarts
if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    queue, cancelled = context.Queue(), context.Event()
    pool = ProcessPoolExecutor(2, mp_context=context, initializer=restarts._restart_worker_start,
                               initargs=(queue, cancelled))
    pids = {pool.submit(os.getpid).result() for _ in range(8)}
    print(" ".join(map(str, sorted(pids))), flush=True)
    time.sleep(600)
"""


def test_restart_workers_end_when_their_job_is_killed(tmp_path: Path) -> None:
    """kill -9 of a job left its idle restart workers waiting on the pool's pipe for ever (found after the browser
    test that kills a job): they now watch their parent and end."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "holder.py"
    script.write_text(POOL_HOLDER)
    holder = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1]
    )
    try:
        workers = [int(pid) for pid in holder.stdout.readline().split()]
        assert workers and all(pid != holder.pid for pid in workers)
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        deadline = time.time() + 10 * training.restarts.ORPHAN_CHECK_S
        alive = workers
        while alive and time.time() < deadline:
            time.sleep(0.2)
            alive = [pid for pid in workers if _alive(pid)]
        assert not alive, f"restart workers {alive} outlived their killed parent"
    finally:
        holder.kill()
        for pid in workers if "workers" in locals() else []:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return True


def test_restart_processes_only_where_children_may_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(training.RESTART_PROCESSES_ENV, "4")
    assert training.restart_processes(3, "cpu") == 3
    assert training.restart_processes(1, "cpu") == 1
    assert training.restart_processes(3, "gpu") == 1
    assert training.restart_processes(3, "gpu-sim") == 1
    assert training.restart_processes(3, "cpu", cluster=object()) == 1
    monkeypatch.setenv(training.RESTART_PROCESSES_ENV, "1")
    assert training.restart_processes(3, "cpu") == 1


# ------------------------------------------------------------------------------------------ auto settings
def alice(characters: int) -> str:
    return (Path(__file__).parent / "data" / "carroll-alice.txt").read_text()[:characters]


def test_auto_pseudocount_keeps_the_candidate_best_on_validation() -> None:
    corpus = alice(12_000)
    base = training.TrainOptions(
        algorithm="em", pseudocount=1e-6, states=200, iterations=8, allocation="uniform", refit=True
    )
    records: list[learning.IterationRecord] = []
    outcome = training.train_text(corpus, options_with(base, pseudocount="auto"), callback=records.append)
    search = outcome.summary["search"]
    values = [line["pseudocount"] for line in search]
    assert values[0] == training.options.FIRST_PSEUDOCOUNT and set(values) <= set(training.PSEUDOCOUNT_GRID)
    assert len(values) == len(set(values)) >= 2  # the walk tried neighbours and never a value twice
    best = min(search, key=lambda line: line["validation_bps"])
    assert outcome.summary["pseudocount"] == best["pseudocount"]
    assert outcome.model.metadata["settings"]["pseudocount"] == best["pseudocount"]
    assert outcome.summary["validation_bps"] == pytest.approx(best["validation_bps"], abs=1e-9)
    # the walk stopped where validation got worse: the chosen value's grid neighbours that were tried are worse
    grid = list(training.PSEUDOCOUNT_GRID)
    at = grid.index(best["pseudocount"])
    tried = {line["pseudocount"]: line["validation_bps"] for line in search}
    for neighbour in grid[max(at - 1, 0) : at + 2]:
        assert tried.get(neighbour, math.inf) >= best["validation_bps"]
    # every candidate is the run that setting makes on its own
    for line in search[:2]:
        alone = training.train_text(corpus, options_with(base, pseudocount=line["pseudocount"], refit=False))
        assert alone.summary["validation_bps"] == pytest.approx(line["validation_bps"], abs=1e-9)
    # progress: the candidates' records in order, then the refit's, marked
    candidates = [r.candidate for r in records if not r.refit]
    assert candidates == sorted(candidates) and set(candidates) == set(range(len(search)))
    refit = [r for r in records if r.refit]
    assert len(refit) == outcome.summary["refit_iterations"] > 0


def test_auto_states_grid_and_choice() -> None:
    corpus = alice(24_000)
    base = training.TrainOptions(algorithm="em", states="auto", iterations=4, allocation="uniform", pseudocount=1e-3)
    prepared = training.stages.prepare_training_corpus(corpus, base, "alice", None)
    grid = training.options.states_candidates(prepared, base)
    assert grid == [n for n in training.STATES_GRID if n <= len(prepared.train_full) // training.SYMBOLS_PER_STATE]
    assert grid == [300, 1000]
    big = dataclasses.replace(prepared, train=np.resize(prepared.train, 400_000))  # a long text skips the smallest
    assert training.options.states_candidates(big, base)[0] == 1000 and 300 not in training.options.states_candidates(
        big, base
    )
    huge = dataclasses.replace(prepared, train=np.resize(prepared.train, 4_000_000))  # the first stays affordable
    assert training.options.states_candidates(huge, base)[0] == training.options.LARGEST_FIRST_STATES
    # on a latency-bound backend (the GPU) the first is the largest of the grid up to DEVICE_FIRST_STATES the text
    # allows; the CPU's grid is unchanged
    assert training.options.states_candidates(big, base, "gpu") == [10_000, 30_000]
    assert training.options.states_candidates(big, base, "cpu") == training.options.states_candidates(big, base)
    assert training.options.states_candidates(prepared, base, "gpu") == [1000]  # 1,919 states at most: 1,000 first
    small = training.estimate_training_memory(prepared, options_with(base, states=300))
    assert training.options.states_candidates(prepared, options_with(base, max_memory=small)) == [300]
    assert training.estimate_training_memory(prepared, base) == training.estimate_training_memory(
        prepared, options_with(base, states=1000)
    )
    outcome = training.train_text(corpus, base)
    search = outcome.summary["search"]
    assert [line["states"] for line in search][:1] == [300]
    best = min(search, key=lambda line: line["validation_bps"])
    assert outcome.summary["states"] == best["states"]
    assert outcome.model.metadata["search"] == search


def exactly(seconds: float) -> training.pacing.StagePrediction:
    """A prediction of ``seconds`` whole, all of them needed (no stage that the budget's end could cut), no refit."""
    return training.pacing.StagePrediction(0, 0.0, 0, 0.0, seconds, 0, 0.0)


def surface_search(
    monkeypatch: pytest.MonkeyPatch,
    level: dict[int, float],
    best_index: dict[int, int],
    minutes: float | None = None,
    seconds: dict[int, float] | None = None,
) -> tuple[training.options.Selection, list[tuple[int, float]]]:
    """:func:`training.search.search_settings` on a validation surface: ``level[states]`` plus 0.01 per grid step away
    from ``best_index[states]`` (an index into PSEUDOCOUNT_GRID), each candidate taking ``seconds[states]`` of a
    fake clock (predicted exactly); returns the selection and the (states, pseudocount) tried in order."""
    grid = list(training.PSEUDOCOUNT_GRID)
    clock = [0.0]
    seconds = seconds or dict.fromkeys(level, 1.0)

    def fake_select(corpus_text, corpus, options, init_model, run, name, restarts=None):
        clock[0] += seconds[options.states]
        result = learning.TrainingResult(model=(options.states, options.pseudocount), stopped="converged")
        return training.options.Selection(options, None, result, None)

    def surface(states: int, pseudocount: float) -> float:
        return level[states] + 0.01 * abs(grid.index(pseudocount) - best_index[states])

    monkeypatch.setattr(training_stages, "sequences_bps", lambda model, sequences, backend: surface(*model))
    monkeypatch.setattr(training_search, "states_candidates", lambda corpus, options, backend=None: sorted(level))
    monkeypatch.setattr(training_search.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(training_search, "predict_stages", lambda *args, **kwargs: exactly(seconds[args[2]]))
    monkeypatch.setattr(
        training_search, "probe_online", lambda *args: {"batches": 1.0, "seconds": 0.0, "epoch_seconds": 1.0}
    )
    options = training.TrainOptions(algorithm="em", states="auto", pseudocount="auto", restarts=1, budget=minutes)
    corpus = SimpleNamespace(validation_parts=[], train=[0], train_full=[0])
    selection, record = training.search.search_settings(
        "", corpus, options, training.options.RunContext(), "surface", fake_select
    )
    tried = [(line["states"], line["pseudocount"]) for line in record]
    assert len(set(tried)) == len(tried)  # each candidate once
    return selection, tried


def test_auto_search_is_capacity_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a surface whose best pseudocount falls as the states grow (as measured on alice, macbeth, hamlet, milton
    and calgary-book1): the first number of states walks upwards first; each larger one starts below the previous
    best by (previous states / states) ** 2 to the nearest decade, and while that start beats the smaller ones the
    search goes on to more states; the walk, downwards first and upwards only when going down did not help, is
    made at the number of states that ends best."""
    best_index = {300: 4, 1000: 3, 3000: 2, 5000: 2, 10_000: 3}
    level = {300: 2.0, 1000: 1.9, 3000: 1.8, 5000: 1.77, 10_000: 1.745}
    selection, tried = surface_search(monkeypatch, level, best_index)
    assert tried == [
        (300, 1e-4),
        (300, 1e-3),
        (300, 1e-2),  # upwards from FIRST_PSEUDOCOUNT to the grid's end
        (1000, 1e-3),  # one step below 300's best: beats 300, so on to 3,000 states
        (3000, 1e-4),  # one step below 1,000's start
        (5000, 1e-4),  # (3,000 / 5,000) ** 2 is under half a decade: 3,000's start
        (10_000, 1e-5),  # twice the states: one step below; 1.765 beats 5,000 and 10,000 is the grid's last: walk
        (10_000, 1e-6),  # worse, so upwards while it helps: 1e-4, 1e-3, not 1e-2
        (10_000, 1e-4),
        (10_000, 1e-3),
        (10_000, 1e-2),
    ]
    assert (selection.options.states, selection.options.pseudocount) == (10_000, 1e-3)


def test_auto_search_walks_where_capacity_stops_helping(monkeypatch: pytest.MonkeyPatch) -> None:
    """When more states stop helping, the walk waited for is made at the best number of states, after the larger
    one's own walk failed to beat it."""
    best_index = {300: 4, 1000: 3, 3000: 1, 5000: 2}
    level = {300: 2.0, 1000: 1.9, 3000: 1.8, 5000: 1.85}
    selection, tried = surface_search(monkeypatch, level, best_index)
    assert tried == [
        (300, 1e-4),
        (300, 1e-3),
        (300, 1e-2),
        (1000, 1e-3),
        (3000, 1e-4),  # 1.81: beats 1,000 states, so on
        (5000, 1e-4),  # 1.85: worse than 3,000 states, so its walk: down (1e-5, worse), then up (1e-3, worse)
        (5000, 1e-5),
        (5000, 1e-3),
        (3000, 1e-5),  # 3,000 states stays best: its walk, downwards first (1.80), then 1e-6 is worse
        (3000, 1e-6),
    ]
    assert (selection.options.states, selection.options.pseudocount) == (3000, 1e-5)


def test_auto_search_walks_at_once_when_more_states_do_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """With --budget, a number of states whose next one would pass the budget walks at once, and the larger
    one is left out."""
    best_index = {300: 4, 1000: 3, 3000: 1, 5000: 2}
    level = {300: 2.0, 1000: 1.9, 3000: 1.8, 5000: 1.7}
    seconds = {300: 10.0, 1000: 10.0, 3000: 10.0, 5000: 600.0}
    selection, tried = surface_search(monkeypatch, level, best_index, minutes=2.0, seconds=seconds)
    # 40 s spent when 3,000 states' start is in: 5,000 states (600 s) would pass 120 s, so 3,000 walks at once
    assert tried == [(300, 1e-4), (300, 1e-3), (300, 1e-2), (1000, 1e-3), (3000, 1e-4), (3000, 1e-5), (3000, 1e-6)]
    assert (selection.options.states, selection.options.pseudocount) == (3000, 1e-5)


def test_pseudocount_start_falls_with_the_square_of_the_states() -> None:
    grid = training.PSEUDOCOUNT_GRID
    at = grid.index
    assert training.search.pseudocount_start(grid, at(1e-3), 1000, 300) == at(1e-4)  # 3.3 times: one decade
    assert training.search.pseudocount_start(grid, at(1e-3), 3000, 1000) == at(1e-4)
    assert training.search.pseudocount_start(grid, at(1e-4), 5000, 3000) == at(1e-4)  # 1.7 times: 0.44 decade, none
    assert training.search.pseudocount_start(grid, at(1e-4), 10_000, 5000) == at(1e-5)  # twice: 0.6 decade, one
    assert training.search.pseudocount_start(grid, at(1e-4), 30_000, 300) == at(1e-6)  # four decades, within the grid
    assert training.search.pseudocount_start(grid, at(1e-6), 3000, 1000) == 0


def test_restarts_within_count_rounds_of_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """n restarts in p one-core processes take ceil(n / p) rounds of p times a run that had every core."""
    monkeypatch.setenv(training.RESTART_PROCESSES_ENV, "2")
    assert training.search.restarts_within(3, 10.0, 40.0, "cpu") == 3  # two rounds of 20 s
    assert training.search.restarts_within(3, 10.0, 39.0, "cpu") == 2  # one round
    assert training.search.restarts_within(3, 10.0, 19.0, "cpu") == 1  # alone, with every core
    assert training.search.restarts_within(3, 10.0, 9.0, "cpu") == 0
    monkeypatch.setenv(training.RESTART_PROCESSES_ENV, "1")
    assert training.search.restarts_within(3, 10.0, 35.0, "cpu") == 3


def test_search_budget_covers_the_chosen_settings_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    """With --budget the chosen setting gets only the restarts that still fit (capacity first), and the
    log says which were left out; without it, all of them."""
    clock = [0.0]

    def fake_select(corpus_text, corpus, options, init_model, run, name, restarts=None):
        clock[0] += 10.0  # every candidate takes 10 s
        result = learning.TrainingResult(model=options.states, stopped="converged")
        return training.options.Selection(options, None, result, None)

    ran: list[range] = []

    def fake_restarts(corpus, options, config, run, which):
        ran.append(which)
        result = learning.TrainingResult(model=options.states, stopped="converged")
        return None, result, [training.restarts.restart_line(r, 9.0, result, options) for r in which]

    monkeypatch.setattr(training_search, "best_of_restarts", fake_restarts)
    monkeypatch.setattr(training_stages, "sequences_bps", lambda model, sequences, backend: 2.0)
    monkeypatch.setattr(training_search.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(training_search, "predict_stages", lambda *args, **kwargs: exactly(10.0))
    monkeypatch.setenv(training.RESTART_PROCESSES_ENV, "2")
    corpus = SimpleNamespace(validation_parts=[], train=[0], train_full=[0])
    options = training.TrainOptions(algorithm="em", states=300, pseudocount="auto", restarts=4)
    lines: list[str] = []

    def search(minutes: float | None) -> None:
        ran.clear()
        budget = dataclasses.replace(options, budget=minutes)
        training.search.search_settings(
            "", corpus, budget, training.options.RunContext(log=lines.append), "budget", fake_select
        )

    search(75.0 / 60)
    # 1e-4, 1e-3 and 1e-5 take 30 s (all equal: the walk stops at once each way); the 45 s left hold three restarts
    # (two rounds of two processes, 40 s)
    assert ran == [range(1, 4)] and not any("left out" in line for line in lines)
    search(65.0 / 60)
    assert ran == [range(1, 3)]  # 35 s left: two restarts (one round of 20 s), not three (40 s)
    assert any("restart 4 of the chosen setting left out" in line for line in lines), lines
    search(35.0 / 60)
    assert ran == []  # 5 s left: no restart
    search(None)
    assert ran[-1] == range(1, 4)


def stage_line(states: int, online: tuple[int, float], batch: tuple[int, float], other: float, refit: int, **more):
    """A search record's line with the stages measured: (online epochs, their seconds), (batch iterations, their
    seconds), each epoch or iteration as long as the others, the other seconds and the refit's iterations."""
    line = {
        "states": states,
        "seconds": online[1] + batch[1] + other,
        "other_seconds": other,
        "refit_iterations": refit,
    }
    for stage, unit, (count, seconds) in (("online", "epoch", online), ("batch", "iteration", batch)):
        line |= {f"{stage}_{unit}s": count, f"{stage}_seconds": seconds, f"{stage}_{unit}_seconds": seconds / count}
    return line | more


def test_stage_prediction_from_recorded_seconds() -> None:
    """Each stage's seconds per epoch or iteration come from the largest number of states that ran it, scaled by
    the stored entries' ratio to the power fitted per stage on the two largest; the epochs and iterations from the
    largest number of states' candidates (batch EM's from those that ran to their own end); by hand:"""
    entries = {1000: 1e6, 3000: 9e6, 5000: 25e6}
    record = [
        stage_line(1000, (6, 18.0), (100, 50.0), 2.0, 90),  # 3 s an epoch, 0.5 s an iteration
        stage_line(3000, (3, 108.0), (20, 100.0), 4.0, 14),  # 36 s an epoch, 5 s an iteration
        stage_line(3000, (5, 180.0), (3, 15.0), 6.0, 2, stopped="hopeless"),  # the same rates; it ran 3 iterations
    ]
    got = training.pacing.predict_stages(record, entries.__getitem__, 5000, refit_scale=1.1)
    # online: 36 s an epoch at 3,000 states (288 s over 8 epochs), 3 at 1,000: 12 times for 9 times the entries
    online_exponent = math.log(36.0 / 3.0) / math.log(9.0)
    assert got.online_epoch_seconds == pytest.approx(36.0 * (25 / 9) ** online_exponent)  # 114.3 s
    assert got.online_epochs == pytest.approx(4.0)  # the mean of 3,000 states' 3 and 5
    # batch: 115 s over 23 iterations at 3,000 states, 0.5 at 1,000: 10 times
    batch_exponent = math.log(5.0 / 0.5) / math.log(9.0)
    assert got.batch_iteration_seconds == pytest.approx(5.0 * (25 / 9) ** batch_exponent)  # 14.6 s
    assert got.batch_iterations == 20 and got.refit_iterations == 14  # the hopeless one's 3 are not its end
    assert got.other_seconds == pytest.approx(4.0 * (25 / 9) ** batch_exponent)  # the least at 3,000, scaled
    assert got.refit_iteration_seconds == pytest.approx(1.1 * got.batch_iteration_seconds)
    whole = got.other_seconds + 4.0 * got.online_epoch_seconds + 20 * got.batch_iteration_seconds
    assert got.seconds == pytest.approx(whole)  # 11.7 + 457.2 + 291.7 = 760.6 s
    useful = got.other_seconds + 4.0 * got.online_epoch_seconds + training.pacing.USEFUL_BATCH_ITERATIONS * 14.59
    assert got.useful_seconds == pytest.approx(useful, rel=1e-3)
    assert got.refit_seconds == pytest.approx(14 * 1.1 * got.batch_iteration_seconds)
    # one number of states: the first exponent (1 on the CPU, 0.5 on a latency-bound implementation, the GPU)
    first = record[:1]
    assert training.pacing.predict_stages(first, entries.__getitem__, 3000).online_epoch_seconds == pytest.approx(27.0)
    on_a_gpu = training.pacing.predict_stages(first, entries.__getitem__, 3000, first_exponent=0.5)
    assert on_a_gpu.online_epoch_seconds == pytest.approx(9.0) and on_a_gpu.batch_iteration_seconds == 1.5
    assert on_a_gpu.batch_iterations == 100 and on_a_gpu.other_seconds == pytest.approx(6.0)
    # a fitted exponent stays within PREDICTION_EXPONENTS: 3,000 states 100 times 1,000's seconds an iteration
    steep = [*first, stage_line(3000, (3, 900.0), (20, 1000.0), 4.0, 14)]
    low, high = training.pacing.PREDICTION_EXPONENTS
    assert training.pacing.predict_stages(steep, entries.__getitem__, 5000).batch_iteration_seconds == pytest.approx(
        50.0 * (25 / 9) ** high
    )
    flat = [*first, stage_line(3000, (3, 9.0), (20, 10.0), 4.0, 14)]  # 3,000 states as fast as 1,000
    assert training.pacing.predict_stages(flat, entries.__getitem__, 5000).online_epoch_seconds == pytest.approx(
        3.0 * (25 / 9) ** low
    )
    # the same number of states: its own rates, unscaled
    same = training.pacing.predict_stages(record, entries.__getitem__, 3000)
    assert same.online_epoch_seconds == pytest.approx(36.0) and same.batch_iteration_seconds == pytest.approx(5.0)


def linear(j: int) -> float:
    """A batch EM curve's fall after iteration ``j``: 0.002 bits an iteration (it never settles)."""
    return 0.002 * j


def geometric(j: int) -> float:
    """A batch EM curve's fall after iteration ``j``: towards 0.05 bits, by 0.7 of the gain before each time."""
    return 0.05 * (1 - 0.7**j)


def timed_search(
    monkeypatch: pytest.MonkeyPatch,
    minutes: float | None,
    runs: dict[int, dict[str, Any]],
    lines: list[str],
    backend: str = "cpu",
    pace: Callable[[float], float] | None = None,
    events: list[tuple[str, int, float]] | None = None,
) -> tuple[training.options.Selection, list[dict[str, Any]]]:
    """:func:`training.search.search_settings` over the states of ``runs`` (pseudocount given) on a fake clock: each
    candidate runs ``runs[states]``'s online epochs, then its batch EM iterations (seconds each; validation BPS
    ``level`` less ``drop(j)`` after iteration j, :func:`linear` unless given), the clock advancing by each as it
    ends, the search's cancel token followed between them; the stored entries are ``entries``. An online epoch runs
    in ``batches`` steps (default 1) and follows the run's ``hand_over`` token before each, as online EM does: a cut
    epoch is lost, and batch EM follows a hand-over. Every unit's seconds are multiplied by ``pace(clock)`` at its
    start (the machine's pace, which the test controls; 1 unless given), the probe's too. Batch EM continued by the
    search (``learning.fit``) goes on along the same curve to the candidate's iterations. ``events`` receives
    ("start", states, clock) and ("end", states, clock) for each candidate and ("probe", states, clock)."""
    clock = [0.0]
    pace = pace or (lambda now: 1.0)
    events = [] if events is None else events

    def curve(spec: dict[str, Any], j: int) -> float:
        return spec["level"] - spec.get("drop", linear)(j)

    def fake_select(corpus_text, corpus, options, init_model, run, name, restarts=None):
        spec, history, stopped = runs[options.states], [], "early_stopping"
        epochs, batch = spec["online"], spec["batch"]
        online_stop = run.hand_over or run.cancel
        steps = spec.get("batches", 1)
        events.append(("start", options.states, clock[0]))
        online_done = 0
        for i in range(epochs[0]):  # online EM, its batches following the hand-over token
            begun, cut = clock[0], False
            for _ in range(steps):
                if online_stop.cancelled:
                    cut = True
                    break
                clock[0] += epochs[1] / steps * pace(clock[0])
            if cut:
                break
            value = spec["level"] + 0.3 - 0.01 * i
            history.append(learning.IterationRecord(i + 1, value, value, clock[0] - begun, online=True))
            run.callback(history[-1])
            online_done += 1
        if online_done < epochs[0] and (run.cancel.cancelled or not history):  # cut in its online stage
            best = min(history, key=lambda r: r.validation_bps)
            result = learning.TrainingResult(model=(options.states, best.validation_bps), history=history)
            result.stopped, result.best_iteration = "cancelled", best.iteration
            events.append(("end", options.states, clock[0]))
            return training.options.Selection(options, None, result, options.training_config())
        for j in range(1, batch[0] + 1):
            if run.cancel.cancelled:
                stopped = "cancelled"
                break
            seconds = batch[1] * pace(clock[0])
            clock[0] += seconds
            value = curve(spec, j)
            history.append(learning.IterationRecord(online_done + j, value, value, seconds))
            run.callback(history[-1])
        best = min(history, key=lambda r: r.validation_bps)
        result = learning.TrainingResult(model=(options.states, best.validation_bps), history=history, stopped=stopped)
        result.best_iteration, result.online_iterations, result.online_model = best.iteration, online_done, "online"
        events.append(("end", options.states, clock[0]))
        return training.options.Selection(options, None, result, options.training_config())

    def fake_fit(model, train, validation, config, callback, cancel, backend):  # batch EM continued
        states, value = model
        spec = runs[states]
        done = next(j for j in range(spec["batch"][0] + 1) if curve(spec, j) == value)  # where the curve stood
        result = learning.TrainingResult(model=model, stopped="early_stopping")
        for j in range(done + 1, spec["batch"][0] + 1):
            if cancel.cancelled:
                result.stopped = "cancelled"
                break
            seconds = spec["batch"][1] * pace(clock[0])
            clock[0] += seconds
            result.history.append(learning.IterationRecord(j - done, 0.0, curve(spec, j), seconds))
            result.model, result.best_iteration = (states, curve(spec, j)), j - done
            callback(result.history[-1])
        return result

    def fake_probe(corpus, options, backend, seconds):  # the probe's seconds on the clock, its pace as the units'
        events.append(("probe", options.states, clock[0]))
        factor = pace(clock[0])
        clock[0] += seconds
        return {"batches": 10.0, "seconds": seconds, "epoch_seconds": runs[options.states]["online"][1] * factor}

    monkeypatch.setattr(training_stages, "sequences_bps", lambda model, sequences, backend: model[1])
    monkeypatch.setattr(training_search, "states_candidates", lambda corpus, options, backend=None: sorted(runs))
    monkeypatch.setattr(training_search, "stored_entries", lambda corpus, options: runs[options.states]["entries"])
    monkeypatch.setattr(training_search.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(learning, "fit", fake_fit)
    monkeypatch.setattr(training_search, "probe_online", fake_probe)
    options = training.TrainOptions(states="auto", pseudocount=1e-4, restarts=1, budget=minutes)
    corpus = SimpleNamespace(validation_parts=[[0]], train_parts=[], train=[0] * 90, train_full=[0] * 100)
    run = training.options.RunContext(backend=backend, log=lines.append)
    selection, record = training.search.search_settings("", corpus, options, run, "timed", fake_select)
    events.append(("search ends", 0, clock[0]))
    return selection, record


def test_the_search_skips_a_rung_when_only_a_larger_one_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the first number of states, the next is the largest whose useful part (online stage and
    USEFUL_BATCH_ITERATIONS batch iterations) fits the budget with START_MARGIN, or the next rung on the way to it
    when the next one's whole run and then that useful part fit with PREDICTION_MARGIN to spare; a number of states
    that would be predicted by extrapolation alone is probed first (PROBE_SHARE of the budget each: here the next
    rung, as one number of states ran, and the target); batch EM does not start an iteration that would end past the
    budget's end, keeping its best model so far. The fake timings grow with the stored entries (3 s an online epoch
    and 0.5 s a batch iteration per million), as measured on Calgary; the decisions below are computed by hand."""
    runs = {
        1000: {"entries": 1e6, "online": (4, 3.0), "batch": (40, 0.5), "level": 1.85},
        3000: {"entries": 9e6, "online": (4, 27.0), "batch": (15, 4.5), "level": 1.73},
        5000: {"entries": 25e6, "online": (4, 75.0), "batch": (12, 12.5), "level": 1.70},
    }
    useful, start, margin = (
        training.pacing.USEFUL_BATCH_ITERATIONS,
        training_search.START_MARGIN,
        training_search.PREDICTION_MARGIN,
    )
    first = 4 * 3.0 + 40 * 0.5  # 32 s
    # predicted after the first (its epochs and iterations, the probes' rates): 3,000 states whole 4 * 27 + 40 * 4.5
    # = 288 s, 5,000 states' useful part 4 * 75 + 3 * 12.5 = 337.5 s
    whole_3000, useful_5000 = 4 * 27.0 + 40 * 4.5, 4 * 75.0 + useful * 12.5
    useful_3000 = 4 * 27.0 + useful * 4.5

    # 440 s: after two probes, 3,000 then 5,000 do not fit with the margin, 5,000 alone does: 3,000 are skipped
    budget = 440.0
    probes = 2 * training_search.PROBE_SHARE * budget
    assert first + probes + start * useful_5000 <= budget < first + probes + margin * (whole_3000 + useful_5000)
    lines: list[str] = []
    selection, record = timed_search(monkeypatch, budget / 60, runs, lines)
    assert [line["states"] for line in record] == [1000, 5000]
    assert [line.split(":")[0] for line in lines if line.startswith("probed")] == [
        "probed 3,000 states",
        "probed 5,000 states",
    ]
    assert any("3,000 states skipped" in line for line in lines), lines
    # 5,000 states' batch EM ran while the next iteration ended before the budget: 32 + probes + 300 + 12.5 (k + 1)
    cut = math.ceil((budget - first - probes - 4 * 75.0) / 12.5) - 1
    assert record[1]["stopped"] == "budget" and record[1]["batch_iterations"] == cut == 7
    assert selection.options.states == 5000 and selection.result.stopped == "budget"  # it won, and is refitted
    assert record[1]["predicted"]["online_seconds"] == pytest.approx(300.0)  # the probe's pace
    assert record[1]["refit_iterations"] == cut  # its best so far: the last iteration it ran
    # its refit, predicted from its own batch iterations: 7 of 12.5 s over 100 / 90 of the symbols
    assert selection.refit_seconds == pytest.approx(cut * 12.5 * 100 / 90)

    # 12 minutes: 3,000 then 5,000 fit (657.5 s), but not with the margin for the predictions' error
    budget = 720.0
    probes = 2 * training_search.PROBE_SHARE * budget
    assert first + probes + whole_3000 + useful_5000 <= budget < first + probes + margin * (whole_3000 + useful_5000)
    selection, record = timed_search(monkeypatch, budget / 60, runs, [])
    assert [line["states"] for line in record] == [1000, 5000] and "stopped" not in record[1]

    # 25 minutes: the ladder goes on, 1,000, 3,000, 5,000 states, none cut
    budget = 1500.0
    assert first + 2 * training_search.PROBE_SHARE * budget + margin * (whole_3000 + useful_5000) <= budget
    lines = []
    selection, record = timed_search(monkeypatch, budget / 60, runs, lines)
    assert [line["states"] for line in record] == [1000, 3000, 5000] and "stopped" not in record[2]
    assert sum(line.startswith("probed") for line in lines) == 2  # 5,000 states were not probed again
    # 3,000 states were predicted with the first one's 40 batch iterations and ran 15 (larger models stop sooner);
    # 5,000 states were then predicted with 3,000's 15 and ran 12
    assert record[1]["predicted"]["seconds"] == pytest.approx(whole_3000) and record[1]["seconds"] == 4 * 27 + 15 * 4.5
    assert record[2]["predicted"]["seconds"] == pytest.approx(4 * 75.0 + 15 * 12.5)
    assert selection.options.states == 5000

    # 5 minutes: 3,000 states probed, their useful part fits, 5,000 states' does not; 3,000 run whole (then two
    # numbers of states ran, and 5,000 states, one rung above, are predicted without a probe) and 5,000 are left out
    budget = 300.0
    probe = training_search.PROBE_SHARE * budget
    assert first + probe + start * useful_5000 > budget >= first + probe + start * useful_3000
    lines = []
    selection, record = timed_search(monkeypatch, budget / 60, runs, lines)
    assert [line["states"] for line in record] == [1000, 3000] and selection.options.states == 3000
    assert [line.split(":")[0] for line in lines if line.startswith("probed")] == ["probed 3,000 states"]
    assert any("candidate 3: 5,000 states, pseudocount 0.0001 left out" in line for line in lines), lines


def test_a_latency_bound_implementation_follows_the_same_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a latency-bound implementation (the GPU; no device is touched: the candidates are faked) the search starts
    at 10,000 states and the same rules hold: 30,000 states, one rung up from one number of states run, are probed
    first, and predicted from the probe's pace (3 times 10,000's for 9 times the entries), not from an exponent;
    the budget's end cuts their batch EM. Without a probe, the GPU's first exponent (0.5) would predict the same and
    the CPU's (1) three times more (``predict_stages``, test_stage_prediction_from_recorded_seconds)."""
    runs = {
        10_000: {"entries": 1e8, "online": (2, 10.0), "batch": (10, 2.0), "level": 1.70},
        30_000: {"entries": 9e8, "online": (2, 30.0), "batch": (8, 6.0), "level": 1.65},
    }
    budget = 150.0
    lines: list[str] = []
    selection, record = timed_search(monkeypatch, budget / 60, runs, lines, backend="gpu")
    assert [line["states"] for line in record] == [10_000, 30_000]
    assert any(line.startswith("probed 30,000 states") for line in lines)
    assert record[1]["predicted"]["online_seconds"] == pytest.approx(2 * 30.0)
    first, probe = 2 * 10.0 + 10 * 2.0, training_search.PROBE_SHARE * budget
    # 30,000 states' batch EM: 40 + 3 + 60 s, then iterations of 6 s while the next ends before 150 s
    assert (
        record[1]["stopped"] == "budget"
        and record[1]["batch_iterations"] == math.ceil((budget - first - probe - 60.0) / 6.0) - 1
    )


def test_a_settled_smaller_candidate_goes_on_if_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    """With more states to come, a candidate's batch EM stops once the gain still to come (4 times the larger of its
    last two gains) is below SETTLED_BITS; when the larger one does not fit and the settled one is chosen, its batch
    EM goes on from where it stopped until validation or the budget stops it, and the refit runs the iterations
    chosen in all."""
    runs = {
        1000: {"entries": 1e6, "online": (4, 3.0), "batch": (40, 0.5), "level": 1.85, "drop": geometric},
        5000: {"entries": 25e6, "online": (4, 75.0), "batch": (12, 12.5), "level": 1.70},
    }
    gains = [geometric(j) - geometric(j - 1) for j in range(1, 41)]
    # by hand: settled after the first iteration j >= 3 whose gains j - 1 and j are both below 0.002 / 4
    settle = next(j for j in range(3, 41) if 4 * max(gains[j - 1], gains[j - 2]) < training_search.SETTLED_BITS)
    assert settle == 12  # 0.015 * 0.7 ** 10 = 0.00042 < 0.0005 < 0.015 * 0.7 ** 9
    first = 4 * 3.0 + settle * 0.5  # 18 s
    assert (
        first + 4 * 75.0 + training.pacing.USEFUL_BATCH_ITERATIONS * 12.5 > 300.0
    )  # 5,000 states do not fit 5 minutes
    lines: list[str] = []
    selection, record = timed_search(monkeypatch, 5.0, runs, lines)
    assert [line["states"] for line in record] == [1000]
    assert record[0]["stopped"] == "settled" and record[0]["batch_iterations"] == settle
    assert record[0]["resumed"]["iterations"] == 40 - settle  # on to the curve's end
    assert record[0]["resumed"]["validation_bps"] == pytest.approx(1.85 - geometric(40))
    result = selection.result
    assert result.stopped == "early_stopping" and result.best_iteration == 4 + 40 and len(result.history) == 44
    assert [r.iteration for r in result.history] == list(range(1, 45))
    assert any("its batch EM goes on" in line for line in lines), lines
    # half a minute: the budget's end stops it again, before an iteration that would end past it: 18 + 0.5 (k + 1)
    # >= 30 after k = 23 more iterations
    selection, record = timed_search(monkeypatch, 0.5, runs, [])
    more = math.ceil((30.0 - first) / 0.5) - 1
    assert record[0]["resumed"]["iterations"] == more and selection.result.stopped == "budget"
    assert selection.result.best_iteration == 4 + settle + more


PREDICTION_FACTOR = 4.0
"""How far the search's prediction of a larger candidate may be from what it took on a tiny real run
(:func:`test_a_larger_candidate_is_predicted_within_a_factor_on_a_real_run`)."""


@pytest.mark.slow
def test_a_larger_candidate_is_predicted_within_a_factor_on_a_real_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real search on alice's first 30,000 characters (online EM then batch EM, 3 epochs and 3 iterations each,
    1,000 then 2,000 states): the second candidate's seconds per online epoch and per batch iteration and its
    seconds in all, predicted from the first candidate's, are within PREDICTION_FACTOR of what it took. The seconds
    are this process's CPU seconds (the search's clock, and its candidates', made ``time.process_time``), so that
    other processes on a shared machine do not enter: on wall-clock seconds with a load of 9 on 2 cores, the first
    candidate's batch iterations once came out 6 times the second's. Measured (three runs, 2-core AMD EPYC, load 10):
    predicted / measured 0.51-0.95 per online epoch, 1.6-2.6 per batch iteration (at these sizes an iteration's
    seconds grow slower than the stored entries), 1.2-1.8 in all."""
    monkeypatch.setattr(training_search.time, "perf_counter", training_search.time.process_time)
    monkeypatch.setattr(training_search, "states_candidates", lambda corpus, options, backend=None: [1000, 2000])
    base = training.TrainOptions(states="auto", pseudocount=1e-3, restarts=1, refit=False, budget=30, iterations=3)
    first, second = training.train_text(alice(30_000), base).summary["search"]
    assert (first["states"], second["states"]) == (1000, 2000) and "predicted" not in first
    predicted = second["predicted"]
    pairs = {
        "seconds per online epoch": (predicted["online_seconds"] / 3, second["online_seconds"] / 3),
        "seconds per batch iteration": (predicted["batch_seconds"] / 3, second["batch_seconds"] / 3),
        "seconds": (predicted["seconds"], second["seconds"]),
    }
    assert second["online_epochs"] == predicted["online_epochs"] == 3 and predicted["batch_iterations"] == 3
    for what, (guess, took) in pairs.items():
        assert took / PREDICTION_FACTOR <= guess <= took * PREDICTION_FACTOR, (what, guess, took)


def test_the_budget_leaves_out_what_would_pass_it() -> None:
    """A budget smaller than any candidate keeps the first candidate alone (always run) and says what it left out;
    a generous one changes nothing."""
    corpus = alice(24_000)
    base = training.TrainOptions(
        algorithm="em", states="auto", iterations=3, allocation="uniform", pseudocount=1e-3, refit=False
    )
    lines: list[str] = []
    tight = training.train_text(corpus, options_with(base, budget=1e-4), log=lines.append)
    assert [(line["states"], line["pseudocount"]) for line in tight.summary["search"]] == [(300, 1e-3)]
    assert tight.summary["states"] == 300
    assert any("candidate 2: 1,000 states, pseudocount 0.001 left out: about" in line for line in lines), lines
    # the first candidate always runs, and its batch EM stops at the budget's end after its first iteration
    assert tight.summary["search"][0]["stopped"] == "budget" and tight.summary["iterations"] == 1
    assert tight.summary["stopped"] == "budget"
    free = training.train_text(corpus, base)
    roomy = training.train_text(corpus, options_with(base, budget=600))
    assert [line["states"] for line in roomy.summary["search"]] == [line["states"] for line in free.summary["search"]]
    assert roomy.summary["validation_bps"] == pytest.approx(free.summary["validation_bps"], abs=1e-9)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"states": "auto", "budget": 0.0}, "must be a positive number"),
        ({"states": "auto", "budget": True}, "must be a positive number"),
        ({"states": "auto", "validation": 0.0}, "validation share above 0"),
        ({"states": "many"}, "or 'auto'"),
        ({"pseudocount": -1.0}, "pseudocount must be a number"),
    ],
)
def test_auto_settings_refuse_what_cannot_work(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        options_with(training.TrainOptions(algorithm="em", pseudocount=1e-6, states=3000), **change).validate()


def test_cli_auto_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "alice.txt"
    corpus.write_text(alice(8000))
    out = tmp_path / "m.npz"
    args = [
        "train",
        str(corpus),
        "-o",
        str(out),
        "--states",
        "120",
        *FIXED,
        "--iterations",
        "3",
        "--quiet",
    ]
    assert cli.main([*args, "--pseudocount", "auto"]) == 0
    assert "chosen on validation among" in capsys.readouterr().out
    assert model_files.load_model(out).metadata["search"]
    with pytest.raises(SystemExit):  # argparse's usage error
        cli.main([*args, "--pseudocount", "lots"])
    assert "expected a number or 'auto'" in capsys.readouterr().err
    assert cli.main([*args, "--pseudocount", "1e-3", "--budget", "5"]) != 0  # a budget with nothing to choose
    assert "--budget bounds the choice of states and pseudocount" in capsys.readouterr().err
    assert cli.main([*args, "--pseudocount", "auto", "--budget", "0.0001"]) == 0
    assert len(model_files.load_model(out).metadata["search"]) == 1
    peer = ["train", str(corpus), "-o", str(tmp_path / "p.npz"), "--learner", "ngram", "--states", "auto"]
    assert cli.main(peer) != 0
    assert "give the ngram learner a number" in capsys.readouterr().err


def options_with(base: training.TrainOptions, **changes: object) -> training.TrainOptions:
    return dataclasses.replace(base, **changes)


def test_online_restarts_vary_start_and_step() -> None:
    text = toy_text(2, 4000, 7)
    chosen = options(algorithm="online", restarts=4, iterations=12, refit=False)
    outcome = training.train_text(text, chosen)
    lines = outcome.summary["restarts"]
    assert [(line["start"], line["memory"]) for line in lines] == [
        ("aligned", chosen.memory),
        ("uniform", chosen.memory),
        ("aligned", training.RESTART_MEMORY),
        ("uniform", training.RESTART_MEMORY),
    ]
    # restart 2 is online EM (then batch EM) from its aligned start with lambda RESTART_MEMORY, run by hand
    corpus = training.stages.prepare_training_corpus(text, chosen, "toy", None)
    config = dataclasses.replace(chosen.training_config(), memory=training.RESTART_MEMORY)
    start = training.stages.initial_model_for(corpus, chosen, 2)
    by_hand = training.stages.select_on_validation(start, corpus, config, training.options.RunContext())
    expected = training.thresholds.sequences_bps(by_hand.model, corpus.validation_parts, "cpu")
    assert lines[2]["bps"] == pytest.approx(expected, abs=1e-9)
    # --start uniform begins with the paper's uniform start and alternates the other way
    uniform_first = options_with(chosen, start="uniform", restarts=2)
    kinds = [line["start"] for line in training.train_text(text, uniform_first).summary["restarts"]]
    assert kinds == ["uniform", "aligned"]
    assert training.options.restart_plan(0, "uniform") == (False, False)
    assert training.options.restart_plan(3, "uniform") == (True, True)
    uniform_start = training.stages.initial_model_for(corpus, uniform_first, 0)
    aligned_start = training.stages.initial_model_for(corpus, chosen, 0)
    positions, rows = aligned_entries(aligned_start.layout)

    def on_aligned(start_model: api.CHMM) -> np.ndarray:
        """Each row's mass on its aligned entries."""
        share = np.zeros(start_model.layout.n_states)
        np.add.at(share, rows, np.asarray(start_model.T, dtype=np.float64)[positions])
        return share

    assert np.all(on_aligned(aligned_start) >= training.ALIGNED_SHARE - 1e-6)
    assert on_aligned(uniform_start).mean() < training.ALIGNED_SHARE - 0.2
    batch = training.train_text(text, options(restarts=2, iterations=5, refit=False)).summary["restarts"]
    assert all("memory" not in line for line in batch)  # lambda is online EM's only


def _blas_threads(*, report: Callable[[Any], None], cancel: Any) -> list[int]:
    """In a restart worker: the thread counts of the BLAS libraries NumPy loaded."""
    from threadpoolctl import threadpool_info

    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def test_restart_workers_run_blas_on_one_thread() -> None:
    """Restarts in worker processes share the machine's cores, one each: every worker holds BLAS to one thread (its
    own threads would spin beside the other workers), and this process keeps its own."""
    from threadpoolctl import threadpool_info

    here = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    assert here, "NumPy loaded no BLAS that threadpoolctl sees"
    assert training.run_in_processes(_blas_threads, [(), ()], 2) == [[1] * len(here)] * 2
    assert [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"] == here
