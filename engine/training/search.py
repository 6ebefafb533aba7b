"""The automatic search of :func:`engine.training.protocol.train_text`: the number of states and/or the pseudocount
chosen on validation within a time budget, each candidate run by the callable the protocol passes."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from engine.backends import engines
from engine.corpora import text
from engine.training import learning, stages
from engine.training.options import (
    AUTO,
    DEVICE_PREDICTION_EXPONENT,
    FIRST_PSEUDOCOUNT,
    PSEUDOCOUNT_GRID,
    PSEUDOCOUNT_STATES_EXPONENT,
    STOPPED_BAD,
    RunContext,
    Selection,
    TrainOptions,
    estimate_training_memory,
    states_candidates,
)
from engine.training.restarts import best_of_restarts, restart_line, restart_processes


class _SearchStopped(Exception):
    """A candidate of the automatic search was cancelled or failed; ``selection`` is its run."""

    def __init__(self, selection: Selection) -> None:
        super().__init__(selection.result.stopped)
        self.selection = selection


class _OverBudget(Exception):
    """The next candidate of the automatic search would pass the budget."""


def pseudocount_start(grid: Sequence[float], previous: int, states: int, previous_states: int) -> int:
    """The grid index where the pseudocount walk starts for ``states`` when ``previous`` (an index of ``grid``, a
    grid of decades) was best for ``previous_states``: the previous best times (previous_states / states) **
    :data:`PSEUDOCOUNT_STATES_EXPONENT`, rounded to the nearest decade (one step down from 1,000 to 3,000 states,
    none from 3,000 to 5,000), within the grid."""
    steps = round(PSEUDOCOUNT_STATES_EXPONENT * math.log10(states / previous_states))
    return min(max(previous - steps, 0), len(grid) - 1)


def _walk(values: dict[int, float], position: int, step: int, length: int, evaluate: Callable[[int], float]) -> bool:
    """Walk a grid from ``position`` (already in ``values``) by ``step`` while validation improves, adding each
    candidate's validation BPS to ``values``; True when the first step improved on ``position``."""
    index = position + step
    while 0 <= index < length:
        values[index] = evaluate(index)
        if values[index] >= values[index - step]:
            break
        index += step
    return min(values, key=values.get) != position


PREDICTION_EXPONENTS = (0.5, 1.5)
"""The range of the exponent :func:`predict_candidate_seconds` fits: at least the square root of the cost ratio
(small models' seconds are mostly per-batch work that does not grow with the states, so they understate the growth:
calgary-book1's 1,000-state candidates took 1.5 times the 300-state ones' for 10 times the memory), at most 1.5."""


def predict_candidate_seconds(
    record: Sequence[dict[str, Any]], cost: Callable[[int], float], states: int, first_exponent: float = 1.0
) -> float:
    """The seconds a search candidate with ``states`` is expected to take: the last candidate's seconds times
    (cost(states) / cost(its states)) ** e, where ``cost`` is what an EM iteration's time grows with (the training
    memory estimate: stored transition entries and messages) and e is fitted to the mean seconds of the two largest
    numbers of states tried so far (``first_exponent`` with one number of states), within
    :data:`PREDICTION_EXPONENTS`."""
    last = record[-1]
    ratio = cost(states) / max(cost(int(last["states"])), 1.0)
    seconds: dict[int, list[float]] = {}
    for line in record:
        seconds.setdefault(int(line["states"]), []).append(float(line["seconds"]))
    exponent = first_exponent
    if len(seconds) >= 2:
        small, large = sorted(seconds)[-2:]
        grown = np.mean(seconds[large]) / max(np.mean(seconds[small]), 1e-9)
        cost_grown = cost(large) / max(cost(small), 1.0)
        if cost_grown > 1.0 and grown > 0.0:
            exponent = math.log(grown) / math.log(cost_grown)
        exponent = min(max(exponent, PREDICTION_EXPONENTS[0]), PREDICTION_EXPONENTS[1])
    return float(last["seconds"]) * ratio**exponent


HOPELESS_AFTER = 3
"""Iterations (epochs) a candidate of the search runs before its learning curve is judged (:func:`hopeless`)."""

HOPELESS_DECAY = 0.8
"""The slowest shrinking of a candidate's validation gains that :func:`hopeless` allows for: from its latest gain g,
all later gains together are bounded by g * DECAY / (1 - DECAY) (4 g)."""


def hopeless(curve: Sequence[float], best_so_far: float) -> bool:
    """Whether a candidate whose validation BPS went ``curve`` (one value per iteration so far) cannot reach
    ``best_so_far`` (the best candidate's): after :data:`HOPELESS_AFTER` iterations, its best value less a geometric
    bound on what is still to come (the larger of its last two gains times DECAY / (1 - DECAY),
    :data:`HOPELESS_DECAY`) stays above ``best_so_far``. A curve that still falls fast is never judged so."""
    values = [float(v) for v in curve if math.isfinite(v)]
    if len(values) < HOPELESS_AFTER or not math.isfinite(best_so_far):
        return False
    gain = max(max(values[-2] - values[-1], 0.0), max(values[-3] - values[-2], 0.0))
    return min(values) - gain * HOPELESS_DECAY / (1.0 - HOPELESS_DECAY) > best_so_far


class _Judge:
    """Watches one candidate's validation curve (its progress records: batch EM's iterations, after online EM's
    epochs, which start slowly: the 3,000-state candidates of a novel were stopped after 3 epochs while they would
    have won) and asks it to stop once it is :func:`hopeless` against the best candidate so far; ``cancel`` also
    follows the run's own cancel token."""

    def __init__(self, best_so_far: float, cancel: Any) -> None:
        self.best_so_far, self.outer, self.curve, self.stopped = best_so_far, cancel, [], False
        self.cancel = learning.CancelToken(poll=lambda: self.stopped or bool(self.outer and self.outer.cancelled))

    def observe(self, record: learning.IterationRecord) -> None:
        if record.online:  # online EM starts slowly and crawls along plateaus: only batch EM's curve is judged
            return
        self.curve.append(record.validation_bps)
        if not self.stopped and hopeless(self.curve, self.best_so_far):
            self.stopped = True


def restarts_within(wanted: int, seconds: float, budget: float, backend: str) -> int:
    """How many of ``wanted`` further restarts fit ``budget`` seconds when one run of the setting took ``seconds``
    with every core: n restarts run in p = :func:`restart_processes` processes of one core each, so they take
    ceil(n / p) rounds of about p * ``seconds`` each (the same work per core)."""
    for n in range(wanted, 0, -1):
        processes = restart_processes(n, backend)
        if math.ceil(n / processes) * processes * seconds <= budget:
            return n
    return 0


def search_settings(
    corpus_text: str | Sequence[Any],
    corpus: text.Corpus,
    options: TrainOptions,
    run: RunContext,
    name: str,
    run_candidate: Callable[..., Selection],
) -> tuple[Selection, list[dict[str, Any]]]:
    """Choose the number of states and/or the pseudocount (whichever is :data:`AUTO`) on the validation text, as the
    paper suggests for its Table 4 (section 4.2): every candidate is a selection run (stage 3, restart 0) scored by
    validation BPS. The number of states goes up :func:`states_candidates` until it stops helping, capacity first.
    The first number of states walks the pseudocount over :data:`PSEUDOCOUNT_GRID` from :data:`FIRST_PSEUDOCOUNT`
    upwards while validation improves (downwards only if that did not help). Each larger one starts below the
    previous start or best by :func:`pseudocount_start`; when that start beats every smaller number of states and
    the next number of states fits the budget, the search goes on to it, and the walk (downwards first) is made
    only for the number of states that ends best; otherwise it walks at once. (Capacity first: on Calgary, War and
    Peace and Moby Dick the step from 3,000 to 5,000 states gained 0.026 to 0.034 BPS of validation, while the
    walk at 3,000 states never beat its start.) With ``options.budget`` (minutes) a candidate whose predicted time
    (:func:`predict_candidate_seconds`) would pass the budget is left out and the search ends there. The best
    candidate then gets its other restarts (:func:`best_of_restarts`), as many as still fit the budget
    (:func:`restarts_within`: capacity comes before restarts, which change text little), and :func:`train_text`
    refits it (outside the budget). Returns the kept selection and a line per candidate (states, pseudocount,
    validation BPS, iterations, seconds). ``run_candidate`` runs one candidate (it has the signature of
    :func:`engine.training.protocol.select_stage`, which :func:`train_text` passes). Candidates run in this process,
    without ``run``'s cluster."""
    search = _Search(corpus_text, corpus, options, run, name, run_candidate)
    try:
        search.candidates()
    except _SearchStopped as stopped:
        return stopped.selection, search.record
    assert search.best is not None
    return search.with_other_restarts(), search.record


class _Search:
    """The state of one automatic search (see :func:`search_settings`): the candidates run so far (``record``), the
    best one (validation BPS, its selection, its seconds) and the budget."""

    def __init__(
        self,
        corpus_text: str | Sequence[Any],
        corpus: text.Corpus,
        options: TrainOptions,
        run: RunContext,
        name: str,
        run_candidate: Callable[..., Selection],
    ) -> None:
        self.corpus_text, self.corpus, self.options, self.name = corpus_text, corpus, options, name
        self.run, self.alone, self.run_candidate = run, replace(run, cluster=None), run_candidate
        self.states_list = (
            states_candidates(corpus, options, run.backend) if options.states == AUTO else [int(options.states)]
        )
        self.first_exponent = DEVICE_PREDICTION_EXPONENT if engines.supports(run.backend, "latency_bound") else 1.0
        self.grid = list(PSEUDOCOUNT_GRID) if options.pseudocount == AUTO else [float(options.pseudocount)]
        self.record: list[dict[str, Any]] = []
        self.best: tuple[float, Selection, float] | None = None  # validation BPS, the run, its seconds
        self.ended = "every candidate was tried"  # why the search ended where it did
        self.started = time.perf_counter()

    def predicted_seconds(self, states: int) -> float:
        def cost(n: int) -> float:
            changed = replace(self.options, states=n, pseudocount=FIRST_PSEUDOCOUNT)
            return float(estimate_training_memory(self.corpus, changed))

        return predict_candidate_seconds(self.record, cost, states, self.first_exponent)

    def affordable(self, states: int) -> bool:
        """Whether a candidate with ``states`` is predicted to end within ``options.budget`` minutes (the first
        candidate always is)."""
        if self.options.budget is None or not self.record:
            return True
        spent = time.perf_counter() - self.started
        return spent + self.predicted_seconds(states) <= 60.0 * self.options.budget

    def evaluate(self, states: int, pseudocount: float) -> float:
        """Run the candidate (``states``, ``pseudocount``) and return its validation BPS; :class:`_OverBudget` if it
        would pass the budget, :class:`_SearchStopped` if it was cancelled or failed."""
        run, candidate = self.run, len(self.record)
        if not self.affordable(states):
            run.say(
                f"candidate {candidate + 1}: {states:,} states, pseudocount {pseudocount:g} left out: about "
                f"{self.predicted_seconds(states) / 60:.1f} min more would pass the search's "
                f"{self.options.budget:g} min"
            )
            raise _OverBudget
        callback = run.callback
        judge = _Judge(self.best[0] if self.best is not None else math.inf, run.cancel)

        def tagged(record: learning.IterationRecord, c: int = candidate) -> None:
            judge.observe(record)
            if callback is not None:
                callback(record._replace(candidate=c))

        concrete = replace(self.options, states=states, pseudocount=pseudocount)
        started = time.perf_counter()
        run.say(f"candidate {candidate + 1}: {states:,} states, pseudocount {pseudocount:g}")
        selection = self.run_candidate(
            self.corpus_text, self.corpus, concrete, None, replace(self.alone, callback=tagged, cancel=judge.cancel),
            self.name, restarts=1,
        )  # fmt: skip
        stopped_early = judge.stopped and not (run.cancel is not None and run.cancel.cancelled)
        if selection.result.stopped in STOPPED_BAD and not stopped_early:
            raise _SearchStopped(selection)
        value = stages.sequences_bps(selection.result.model, self.corpus.validation_parts, run.backend)
        seconds = time.perf_counter() - started
        self.record.append(
            {
                "states": states,
                "pseudocount": pseudocount,
                "validation_bps": value,
                "iterations": len(selection.result.history),
                "seconds": seconds,
                **({"stopped": "hopeless"} if stopped_early else {}),
            }
        )
        note = "; stopped early: it could not reach the best so far" if stopped_early else ""
        run.say(f"candidate {candidate + 1}: validation BPS {value:.4f} ({seconds / 60:.1f} min{note})")
        if stopped_early:
            return value
        if self.best is None or value < self.best[0]:
            self.best = (value, selection, seconds)
        return value

    def walk(self, states: int, values: dict[int, float], first: int) -> int:
        """The pseudocount walk at ``states`` from the one value in ``values``: towards ``first`` while validation
        improves, the other way only if that did not help; returns the best index."""
        (position,) = values

        def at(index: int) -> float:
            return self.evaluate(states, self.grid[index])

        if not _walk(values, position, first, len(self.grid), at):
            _walk(values, position, -first, len(self.grid), at)
        return min(values, key=values.get)

    def candidates(self) -> None:
        """Run the candidates, capacity first (see :func:`search_settings`), until more states stop helping or the
        budget ends."""
        states_list, grid = self.states_list, self.grid
        position = grid.index(FIRST_PSEUDOCOUNT) if self.options.pseudocount == AUTO else 0
        deferred: tuple[int, dict[int, float]] | None = None  # a number of states whose walk waits (capacity first)
        try:
            previous = math.inf
            for number, states in enumerate(states_list):
                # the first number of states walks upwards first; larger ones start lower by the states' growth and
                # walk downwards first, since more states share the counts and want less smoothing (alice, macbeth,
                # hamlet, milton, calgary-book1: 1e-3 best at 1,000 states, 1e-4 at 3,000)
                if number > 0:
                    position = pseudocount_start(grid, position, states, states_list[number - 1])
                values = {position: self.evaluate(states, grid[position])}
                if values[position] < previous:
                    deferred = None
                larger = states_list[number + 1] if number + 1 < len(states_list) else None
                # capacity first: a number of states whose start beats the smaller ones goes on to the next one
                # and walks only if it stays the best (below); the first walks at once, to place the others' starts
                if number > 0 and values[position] < previous and larger is not None and self.affordable(larger):
                    deferred = (states, values)
                else:
                    position = self.walk(states, values, 1 if number == 0 else -1)
                    if values[position] >= previous:  # more states stopped helping
                        self.ended = f"{states:,} states did no better than {states_list[number - 1]:,}"
                        break
                previous = values[position]
        except _OverBudget:  # the larger candidates cost more still: the search ends with the best so far
            self.ended = f"the next candidate would have passed the budget of {self.options.budget:g} min"
        if deferred is not None and self.best is not None and self.best[1].options.states == deferred[0]:
            try:
                self.walk(*deferred, -1)  # the best number of states had its start only: its walk, within the budget
            except _OverBudget:
                pass

    def with_other_restarts(self) -> Selection:
        """The best candidate with its other restarts, as many as still fit the budget (capacity first)."""
        assert self.best is not None
        options, run = self.options, self.run
        value, selection, seconds = self.best
        restarts = selection.options.resolved_restarts() if not selection.schedule else 1
        if options.budget is not None and restarts > 1:
            spent = time.perf_counter() - self.started
            fits = restarts_within(restarts - 1, seconds, 60.0 * options.budget - spent, run.backend)
            if fits < restarts - 1:
                which = f"restart {restarts}" if fits + 2 == restarts else f"restarts {fits + 2}-{restarts}"
                run.say(
                    f"{which} of the chosen setting left out: each takes about {seconds / 60:.1f} min, and they would "
                    f"pass the search's {options.budget:g} min"
                )
            restarts = fits + 1
        if restarts > 1:  # the other restarts of the chosen setting (a grown model has none)
            chosen, callback = len(self.record), run.callback
            tagged = None if callback is None else (lambda r: callback(r._replace(candidate=chosen)))
            start, result, lines = best_of_restarts(
                self.corpus, selection.options, selection.config, replace(self.alone, callback=tagged),
                range(1, restarts),
            )  # fmt: skip
            lines = [restart_line(0, value, selection.result, selection.options), *lines]
            if result.stopped in STOPPED_BAD:
                return replace(selection, start=start, result=result, restarts=lines)
            if min(line["bps"] for line in lines[1:]) < value:
                selection = replace(selection, start=start, result=result)
                value = min(line["bps"] for line in lines[1:])
            selection = replace(selection, restarts=lines)
        picked = selection.options
        reason = self.reason(value)
        run.say(f"chose {picked.states:,} states and pseudocount {picked.pseudocount:g}: {reason}")
        return replace(selection, reason=reason)

    def reason(self, value: float) -> str:
        """Why the kept candidate was chosen, in one sentence for people: its validation BPS among the candidates,
        those stopped early, and why the search ended."""
        early = sum(line.get("stopped") == "hopeless" for line in self.record)
        stopped = f", {early} of them stopped early as they could not reach it" if early else ""
        return (
            f"the lowest validation BPS ({value:.4f}) of {len(self.record)} candidate settings{stopped}; "
            f"the search ended as {self.ended}"
        )
