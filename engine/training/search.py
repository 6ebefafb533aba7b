"""The automatic search of :func:`engine.training.protocol.train_text`: the number of states and/or the pseudocount
chosen on validation within a time budget, each candidate run by the callable the protocol passes."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from engine import text
from engine.training import stages
from engine.training.options import (
    AUTO,
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
    """The next candidate of the automatic search would pass ``search_minutes``."""


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


def predict_candidate_seconds(record: Sequence[dict[str, Any]], cost: Callable[[int], float], states: int) -> float:
    """The seconds a search candidate with ``states`` is expected to take: the last candidate's seconds times
    (cost(states) / cost(its states)) ** e, where ``cost`` is what an EM iteration's time grows with (the training
    memory estimate: stored transition entries and messages) and e is fitted to the mean seconds of the two largest
    numbers of states tried so far (1 with one number of states), within :data:`PREDICTION_EXPONENTS`."""
    last = record[-1]
    ratio = cost(states) / max(cost(int(last["states"])), 1.0)
    seconds: dict[int, list[float]] = {}
    for line in record:
        seconds.setdefault(int(line["states"]), []).append(float(line["seconds"]))
    exponent = 1.0
    if len(seconds) >= 2:
        small, large = sorted(seconds)[-2:]
        grown = np.mean(seconds[large]) / max(np.mean(seconds[small]), 1e-9)
        cost_grown = cost(large) / max(cost(small), 1.0)
        if cost_grown > 1.0 and grown > 0.0:
            exponent = math.log(grown) / math.log(cost_grown)
        exponent = min(max(exponent, PREDICTION_EXPONENTS[0]), PREDICTION_EXPONENTS[1])
    return float(last["seconds"]) * ratio**exponent


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
    walk at 3,000 states never beat its start.) With ``options.search_minutes`` a candidate whose predicted time
    (:func:`predict_candidate_seconds`) would pass the budget is left out and the search ends there. The best
    candidate then gets its other restarts (:func:`best_of_restarts`), as many as still fit the budget
    (:func:`restarts_within`: capacity comes before restarts, which change text little), and :func:`train_text`
    refits it (outside the budget). Returns the kept selection and a line per candidate (states, pseudocount,
    validation BPS, iterations, seconds). ``run_candidate`` runs one candidate (it has the signature of
    :func:`engine.training.protocol.select_stage`, which :func:`train_text` passes). Candidates run in this process,
    without ``run``'s cluster."""
    backend, callback, log = run.backend, run.callback, run.log
    alone = replace(run, cluster=None)
    states_list = states_candidates(corpus, options) if options.states == AUTO else [int(options.states)]
    grid = list(PSEUDOCOUNT_GRID) if options.pseudocount == AUTO else [float(options.pseudocount)]
    position = grid.index(FIRST_PSEUDOCOUNT) if options.pseudocount == AUTO else 0
    record: list[dict[str, Any]] = []
    best: tuple[float, Selection, float] | None = None  # validation BPS, the run, its seconds
    held_out = corpus.validation_parts
    search_started = time.perf_counter()

    def predicted_seconds(states: int) -> float:
        def cost(n: int) -> float:
            return float(estimate_training_memory(corpus, replace(options, states=n, pseudocount=FIRST_PSEUDOCOUNT)))

        return predict_candidate_seconds(record, cost, states)

    def affordable(states: int) -> bool:
        """Whether a candidate with ``states`` is predicted to end within ``options.search_minutes`` (the first
        candidate always is)."""
        if options.search_minutes is None or not record:
            return True
        spent = time.perf_counter() - search_started
        return spent + predicted_seconds(states) <= 60.0 * options.search_minutes

    def evaluate(states: int, pseudocount: float) -> float:
        nonlocal best
        candidate = len(record)
        if not affordable(states):
            if log:
                log(
                    f"candidate {candidate + 1}: {states:,} states, pseudocount {pseudocount:g} left out: about "
                    f"{predicted_seconds(states) / 60:.1f} min more would pass the search's "
                    f"{options.search_minutes:g} min"
                )
            raise _OverBudget
        tagged = None if callback is None else (lambda r, c=candidate: callback(r._replace(candidate=c)))
        concrete = replace(options, states=states, pseudocount=pseudocount)
        started = time.perf_counter()
        if log:
            log(f"candidate {candidate + 1}: {states:,} states, pseudocount {pseudocount:g}")
        selection = run_candidate(
            corpus_text, corpus, concrete, None, replace(alone, callback=tagged), name, restarts=1
        )
        if selection.result.stopped in STOPPED_BAD:
            raise _SearchStopped(selection)
        value = stages.sequences_bps(selection.result.model, held_out, backend)
        record.append(
            {
                "states": states,
                "pseudocount": pseudocount,
                "validation_bps": value,
                "iterations": len(selection.result.history),
                "seconds": time.perf_counter() - started,
            }
        )
        if log:
            log(f"candidate {candidate + 1}: validation BPS {value:.4f} ({record[-1]['seconds'] / 60:.1f} min)")
        if best is None or value < best[0]:
            best = (value, selection, record[-1]["seconds"])
        return value

    def walk(states: int, values: dict[int, float], first: int) -> int:
        """The pseudocount walk at ``states`` from the one value in ``values``: towards ``first`` while validation
        improves, the other way only if that did not help; returns the best index."""
        (position,) = values

        def at(index: int) -> float:
            return evaluate(states, grid[index])

        if not _walk(values, position, first, len(grid), at):
            _walk(values, position, -first, len(grid), at)
        return min(values, key=values.get)

    deferred: tuple[int, dict[int, float]] | None = None  # a number of states whose walk waits (capacity first)
    try:
        try:
            previous = math.inf
            for number, states in enumerate(states_list):
                # the first number of states walks upwards first; larger ones start lower by the states' growth and
                # walk downwards first, since more states share the counts and want less smoothing (alice, macbeth,
                # hamlet, milton, calgary-book1: 1e-3 best at 1,000 states, 1e-4 at 3,000)
                if number > 0:
                    position = pseudocount_start(grid, position, states, states_list[number - 1])
                values = {position: evaluate(states, grid[position])}
                if values[position] < previous:
                    deferred = None
                larger = states_list[number + 1] if number + 1 < len(states_list) else None
                # capacity first: a number of states whose start beats the smaller ones goes on to the next one
                # and walks only if it stays the best (below); the first walks at once, to place the others' starts
                if number > 0 and values[position] < previous and larger is not None and affordable(larger):
                    deferred = (states, values)
                else:
                    position = walk(states, values, 1 if number == 0 else -1)
                    if values[position] >= previous:  # more states stopped helping
                        break
                previous = values[position]
        except _OverBudget:  # the larger candidates cost more still: the search ends with the best so far
            pass
        if deferred is not None and best is not None and best[1].options.states == deferred[0]:
            walk(*deferred, -1)  # the best number of states had its start only: its walk, within the budget
    except _SearchStopped as stopped:
        return stopped.selection, record
    except _OverBudget:  # the larger candidates cost more still: the search ends with the best so far
        pass
    assert best is not None
    value, selection, seconds = best
    restarts = selection.options.resolved_restarts() if not selection.schedule else 1
    if options.search_minutes is not None and restarts > 1:
        spent = time.perf_counter() - search_started
        fits = restarts_within(restarts - 1, seconds, 60.0 * options.search_minutes - spent, backend)
        if fits < restarts - 1 and log:
            which = f"restart {restarts}" if fits + 2 == restarts else f"restarts {fits + 2}-{restarts}"
            log(
                f"{which} of the chosen setting left out: each takes about {seconds / 60:.1f} min, and they would "
                f"pass the search's {options.search_minutes:g} min"
            )
        restarts = fits + 1
    if restarts > 1:  # the other restarts of the chosen setting (a grown model has none)
        chosen = len(record)
        tagged = None if callback is None else (lambda r: callback(r._replace(candidate=chosen)))
        start, result, lines = best_of_restarts(
            corpus, selection.options, selection.config, replace(alone, callback=tagged), range(1, restarts)
        )
        lines = [restart_line(0, value, selection.result, selection.options), *lines]
        if result.stopped in STOPPED_BAD:
            return replace(selection, start=start, result=result, restarts=lines), record
        if min(line["bps"] for line in lines[1:]) < value:
            selection = replace(selection, start=start, result=result)
        selection = replace(selection, restarts=lines)
    if log:
        chosen = selection.options
        log(f"chose {chosen.states:,} states and pseudocount {chosen.pseudocount:g} on validation")
    return selection, record
