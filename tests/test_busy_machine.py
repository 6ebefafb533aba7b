"""The automatic search on a machine whose cores are shared: the budget is a deadline, predictions follow the
machine's current pace, and a slower machine ends where a smaller budget would. The search's decisions run on a
simulated clock (``timed_search``: each candidate's seconds set by a pace the test controls); a few real runs check
the probe, the online stage's hand-over and the refit's window."""

from __future__ import annotations

import math
from typing import Any

import pytest
from test_restarts import alice, geometric, surface_search, timed_search

from engine import training
from engine.training import learning, pacing
from engine.training import search as training_search

RUNS = {
    1000: {"entries": 1e6, "online": (4, 3.0), "batch": (40, 0.5), "level": 1.85, "batches": 10},
    3000: {"entries": 9e6, "online": (4, 27.0), "batch": (15, 4.5), "level": 1.73, "batches": 10},
    5000: {"entries": 25e6, "online": (4, 75.0), "batch": (12, 12.5), "level": 1.70, "batches": 10},
}
"""Candidates whose seconds grow with the stored entries (3 s an online epoch and 0.5 s a batch iteration per
million, as measured on Calgary), each online epoch in 10 batches."""


def slowed(at: float, factor: float) -> Any:
    """A pace that is 1 until the clock reads ``at``, then ``factor``."""
    return lambda now: 1.0 if now < at else factor


def starts(events: list[tuple[str, int, float]]) -> dict[int, float]:
    """The clock when each candidate started (the last start of each number of states)."""
    return {states: at for kind, states, at in events if kind == "start"}


def search_end(events: list[tuple[str, int, float]]) -> float:
    return next(at for kind, _, at in events if kind == "search ends")


@pytest.mark.parametrize(
    ("budget", "at", "factor"), [(600.0, 100.0, 4.0), (900.0, 60.0, 3.0), (420.0, 200.0, 6.0), (1500.0, 10.0, 4.0)]
)
def test_the_deadline_holds_when_the_machine_slows_mid_search(budget: float, at: float, factor: float) -> None:
    """The machine slows by ``factor`` at ``at`` seconds: the search still ends by its budget (no online epoch,
    batch iteration or continuation runs past it), every candidate after the first started only where its
    prediction, with START_MARGIN, fitted what was left, and a candidate predicted once the slowdown was measured
    (PACE_UNITS units after it) is predicted at the slower pace, not the quiet one."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        events: list[tuple[str, int, float]] = []
        lines: list[str] = []
        selection, record = timed_search(monkeypatch, budget / 60, RUNS, lines, pace=slowed(at, factor), events=events)
    assert search_end(events) <= budget, (events, lines)
    begun = starts(events)
    measured_slow = at + pacing.PACE_UNITS * RUNS[1000]["online"][1] * factor
    followed = 0
    for line in record[1:]:
        predicted = line["predicted"]
        assert begun[line["states"]] + training_search.START_MARGIN * predicted["useful_seconds"] <= budget + 1e-9
        if begun[line["states"]] > measured_slow:
            quiet = RUNS[line["states"]]["online"][1] * predicted["online_epochs"]
            assert predicted["online_seconds"] == pytest.approx(factor * quiet, rel=0.05), (line, events)
            followed += 1
    assert followed or at > 0.5 * budget or len(record) == 2  # the slowdown came before a prediction it could follow
    assert selection.options.states in {line["states"] for line in record}


def test_a_candidate_cut_by_the_deadline_gives_way_to_the_best_so_far() -> None:
    """5,000 states fit the budget when they start (probed at the quiet pace), then the machine slows six times: the
    deadline cuts their online stage mid-epoch (the cut epoch is lost), the line says so, and the search keeps 1,000
    states, whose batch EM had settled and now goes on with what is left; the search ends by the budget."""
    runs = {
        1000: {**RUNS[1000], "drop": geometric},
        5000: RUNS[5000],
    }
    budget = 420.0
    with pytest.MonkeyPatch.context() as monkeypatch:
        events: list[tuple[str, int, float]] = []
        lines: list[str] = []
        selection, record = timed_search(monkeypatch, budget / 60, runs, lines, pace=slowed(100.0, 6.0), events=events)
    assert [line["states"] for line in record] == [1000, 5000]
    assert record[1]["stopped"] == "budget" and record[1]["cut"] == "online"
    assert record[1]["online_epochs"] < 4 and record[1]["batch_iterations"] == 0
    assert any("cut at the budget's end in its online stage" in line for line in lines), lines
    assert selection.options.states == 1000 and record[0]["stopped"] == "settled"
    assert search_end(events) <= budget


def test_a_cut_first_candidate_is_kept() -> None:
    """The first candidate has nothing to give way to: it runs to its first epoch (the one overrun the rules allow,
    as there is no model before it), is then cut in its online stage, and its epoch is the model. With time for
    batch EM but not for another epoch, its online stage hands over to batch EM instead."""
    runs = {1000: {**RUNS[1000], "online": (6, 30.0)}}
    with pytest.MonkeyPatch.context() as monkeypatch:
        events: list[tuple[str, int, float]] = []
        selection, record = timed_search(monkeypatch, 0.4, runs, [], events=events)
    assert record[0]["cut"] == "online" and record[0]["online_epochs"] == 1
    assert selection.options.states == 1000 and selection.result.stopped == "budget"
    assert search_end(events) == pytest.approx(30.0)  # its first epoch, past the 24 s budget
    with pytest.MonkeyPatch.context() as monkeypatch:
        events = []
        selection, record = timed_search(monkeypatch, 1.0, runs, [], events=events)
    # the second epoch would end at 60 s, the budget's end: batch EM follows the first, all 40 iterations (20 s)
    assert "cut" not in record[0] and record[0]["online_epochs"] == 1 and record[0]["batch_iterations"] == 40
    assert search_end(events) == pytest.approx(50.0)


@pytest.mark.parametrize("budget", [300.0, 420.0, 720.0, 1500.0, 3000.0])
@pytest.mark.parametrize("factor", [2.0, 4.0])
def test_a_uniformly_slower_machine_decides_as_a_smaller_budget(budget: float, factor: float) -> None:
    """With every second ``factor`` times longer (a quarter of the compute at 4), the search makes the decisions a
    budget ``factor`` times smaller makes on the quiet machine: the same candidates, cut at the same iterations, the
    same model chosen; so it stops at a smaller size, never at a worse model than the smaller budget found."""
    outcomes = []
    for minutes, pace in ((budget / 60, factor), (budget / 60 / factor, 1.0)):
        with pytest.MonkeyPatch.context() as monkeypatch:
            events: list[tuple[str, int, float]] = []
            selection, record = timed_search(monkeypatch, minutes, RUNS, [], pace=lambda now, p=pace: p, events=events)
        decisions = [
            (line["states"], line.get("stopped"), line["online_epochs"], line["batch_iterations"]) for line in record
        ]
        outcomes.append((decisions, selection.options.states, selection.result.best_iteration, search_end(events)))
    (slow, slow_states, slow_best, slow_end), (small, small_states, small_best, small_end) = outcomes
    assert slow == small and slow_states == small_states and slow_best == small_best
    assert slow_end == pytest.approx(factor * small_end)


def test_a_tight_budget_puts_capacity_before_the_first_walk() -> None:
    """On a budget where the first number of states' pseudocount walk (two more candidates of 10 s) would leave no
    room for the next number of states (30 s, with START_MARGIN), the walk waits: 1,000 states start one decade
    below the step above 300 states' start (where the first walk usually ends), and win; with a budget that holds
    both, the walk comes first, as on a quiet machine."""
    best_index = {300: 4, 1000: 3}
    level = {300: 2.0, 1000: 1.9}
    seconds = {300: 10.0, 1000: 30.0}
    with pytest.MonkeyPatch.context() as monkeypatch:
        selection, tried = surface_search(monkeypatch, level, best_index, minutes=1.0, seconds=seconds)
    assert tried == [(300, 1e-4), (1000, 1e-4)] and selection.options.states == 1000
    with pytest.MonkeyPatch.context() as monkeypatch:  # without the wait, the walk would leave 1,000 states out
        selection, tried = surface_search(monkeypatch, level, best_index, minutes=3.0, seconds=seconds)
    assert tried[:3] == [(300, 1e-4), (300, 1e-3), (300, 1e-2)] and tried[3][0] == 1000


def test_the_pace_is_the_latest_units_against_their_references() -> None:
    """References are the median of every unit at a number of states and stage; the pace is the latest units'
    ratio to them; a prediction, reference times pace, is the recent rate, carried to other numbers of states."""
    pace = pacing.Pace()
    for seconds in (9.0, 3.0, 3.2, 2.8):  # the first unit compiles the kernels
        pace.observe(1000, "online", seconds)
    assert pace.reference(1000, "online") == pytest.approx(3.1) and pace.now() == pytest.approx(1.0, abs=0.05)
    for seconds in (12.0, 12.5, 11.5):  # then the same work takes four times as long
        pace.observe(1000, "online", seconds)
    recent = pace.reference(1000, "online") * pace.now()
    assert recent == pytest.approx(12.0)  # the latest units' rate, not the quiet one
    pace.probe(5000, "online", 300.0)  # probed at that pace
    assert pace.reference(5000, "online") * pace.now() == pytest.approx(300.0)
    assert pace.sizes("online") == [1000, 5000]
    entries = {1000: 1e6, 3000: 9e6, 5000: 25e6}
    record = [{"states": 1000, "online_epochs": 3, "batch_iterations": 0, "seconds": 9.0}]
    # 5,000 states: their own (probed) reference at the current pace; 3,000: the nearest by entries, 5,000's,
    # scaled by the growth fitted on 1,000 and 5,000 (their references: 25 times for 25 times the entries)
    rate, exponent = pacing._stage_rate(record, "online", entries.__getitem__, 5000, 1.0, pace)
    assert rate == pytest.approx(300.0) and exponent == pytest.approx(1.0)
    rate, _ = pacing._stage_rate(record, "online", entries.__getitem__, 3000, 1.0, pace)
    assert rate == pytest.approx(300.0 * 9 / 25)
    pace.observe(1000, "batch", 4.0)  # a unit of another stage: its own reference
    assert pace.reference(1000, "batch") == 4.0


def test_online_epochs_are_predicted_per_size() -> None:
    """A 300-state candidate waited 10 epochs for a gain (online EM's plateau window on a short text) and ran 32;
    1,000 states wait 1 epoch (their statistic remembers too little per entry), so on the same curve they would stop
    at its first epoch without a clear gain, not after 32."""
    curve = [2.5 - 0.05 * k for k in range(12)] + [1.95 + 0.0001 * k for k in range(20)]  # a gain until epoch 12
    assert pacing.online_epochs_with(curve, 10, 10) == 32.0
    assert pacing.online_epochs_with(curve, 1, 10) == 13.0  # the first epoch without a clear gain
    assert pacing.online_epochs_with(curve[:13], 3, 1) == 15.0  # waiting longer: its epochs and 2 more
    entries = {300: 1e5, 1000: 1e6}
    line = {
        "states": 300, "seconds": 40.0, "other_seconds": 0.0, "online_epochs": 32, "online_seconds": 32.0,
        "online_epoch_seconds": 1.0, "batch_iterations": 5, "batch_seconds": 5.0, "batch_iteration_seconds": 1.0,
        "refit_iterations": 5, "online_curve": curve, "online_wait": 10,
    }  # fmt: skip
    waits = {300: 10, 1000: 1}
    got = training.pacing.predict_stages([line], entries.__getitem__, 1000, pace=pacing.Pace(), wait=waits.get)
    assert got.online_epochs == 13.0
    assert training.pacing.predict_stages([line], entries.__getitem__, 1000).online_epochs == 32.0  # the old copy


def test_probe_measures_online_em_at_a_size_it_has_not_run() -> None:
    """A probe runs a new model's online batches for about the seconds it is given and returns an epoch's seconds
    from them; a size that does not fit the memory limit is not probed."""
    options = training.TrainOptions(states=400, pseudocount=1e-3, refit=False)
    corpus = training.stages.prepare_training_corpus(alice(40_000), options, "alice", None)
    figures = pacing.probe_online(corpus, options, "cpu", 0.3)
    assert figures is not None and figures["batches"] >= 1 and figures["epoch_seconds"] > 0
    batches = learning.online_batches([len(x) for x in corpus.train_parts], learning.ONLINE_BATCH_SIZE)
    assert figures["batches"] <= max(len(batches), pacing.PROBE_BATCHES)
    tight = training.TrainOptions(states=400, pseudocount=1e-3, refit=False, max_memory=1)
    assert pacing.probe_online(corpus, tight, "cpu", 0.3) is None


def test_the_online_stage_hands_over_to_batch_em() -> None:
    """A real online stage whose hand-over token is set after two epochs: online EM stops there and batch EM
    follows from its best epoch (not a cancelled run)."""
    options = training.TrainOptions(states=200, pseudocount=1e-3, iterations=6, refit=False, restarts=1)
    corpus = training.stages.prepare_training_corpus(alice(20_000), options, "alice", None)
    start = training.stages.initial_model_for(corpus, options)
    epochs: list[int] = []
    hand_over = learning.CancelToken(poll=lambda: len(epochs) >= 2)

    def callback(record: learning.IterationRecord) -> None:
        if record.online:
            epochs.append(record.iteration)

    run = training.options.RunContext(callback=callback, hand_over=hand_over)
    result = training.stages.select_on_validation(start, corpus, options.training_config(), run)
    assert result.online_iterations == 2 and len(epochs) == 2
    assert result.online_model is not None and result.stopped not in training.options.STOPPED_BAD
    assert len(result.history) > 2  # batch EM's iterations after the two epochs


def test_a_refit_that_cannot_end_in_the_time_stated_is_left_out() -> None:
    """With a budget far smaller than any candidate, the stated time is past before the refit: the model chosen on
    validation is kept, and the log says why; a generous budget refits."""
    base = training.TrainOptions(algorithm="em", states="auto", iterations=3, allocation="uniform", pseudocount=1e-3)
    lines: list[str] = []
    tight = training.train_text(alice(24_000), training.TrainOptions(**{**base.__dict__, "budget": 1e-4}),
                                log=lines.append)  # fmt: skip
    assert tight.summary["refit_iterations"] == 0 and "refit_seconds" not in tight.summary
    assert any(line.startswith("no refit: it would take about") for line in lines), lines
    roomy = training.train_text(alice(24_000), training.TrainOptions(**{**base.__dict__, "budget": 60.0}))
    assert roomy.summary["refit_iterations"] > 0


@pytest.mark.slow
def test_a_real_search_ends_by_its_deadline() -> None:
    """A real search (online EM then batch EM, states chosen) on this process's CPU clock with a budget of a few
    seconds: it ends, refit included, by the time it stated, within the one overrun the rules allow (the first
    candidate's first epoch, which holds the kernels' compiling)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(training_search.time, "perf_counter", training_search.time.process_time)
        options = training.TrainOptions(budget=0.15, pseudocount=1e-3)
        outcome = training.train_text(alice(60_000), options)
    summary = outcome.summary
    first = summary["search"][0]
    allowed = 60.0 * summary["expected_minutes"] + (first["online_seconds"] / max(first["online_epochs"], 1))
    assert summary["seconds"] <= allowed, summary["search"]
    assert math.isfinite(summary["test_bps"])


def test_the_train_page_says_at_most_how_long_is_left_of_the_stated_time() -> None:
    """A job with an automatic search states its bound before it starts (the budget, then the refit's window); its
    progress says what is left of it, during the search and the refit, since the deadline holds."""
    from app import figures

    entry = {"iteration": 1, "train_bps": 2.5, "validation_bps": 2.6, "seconds": 30.0, "online": True}
    progress = {
        "status": "running", "phase": "training", "searching": True, "budget_seconds": 600.0,
        "expected_seconds": 780.0, "max_iterations": 200, "candidate": 1, "history": [entry], "refit": [],
        "started": 1000.0, "updated": 1000.0 + 450.0,
    }  # fmt: skip
    _, label, _ = figures.progress_view(progress)
    assert label.startswith("Candidate setting 2 (the choice within 10 min)")
    assert label.endswith("at most 5 min 30 s left")  # 780 - 450 s
    refit = progress | {"phase": "refit", "refit": [entry | {"online": False}], "updated": 1000.0 + 700.0}
    assert figures.progress_view(refit)[1].endswith("at most 1 min 20 s left")
    fixed = progress | {"searching": False, "expected_seconds": None}
    assert "left" not in figures.progress_view(fixed)[1] or "per iteration" in figures.progress_view(fixed)[1]
