"""The automatic search of :func:`engine.training.protocol.train_text`: the number of states and/or the pseudocount
chosen on validation within a time budget, each candidate run by the callable the protocol passes."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

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
    states_candidates,
    stored_entries,
)
from engine.training.pacing import PROBE_SHARE as PROBE_SHARE
from engine.training.pacing import USEFUL_BATCH_ITERATIONS as USEFUL_BATCH_ITERATIONS
from engine.training.pacing import (
    Pace,
    StagePrediction,
    candidate_stages,
    predict_stages,
    probe_online,
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


FIRST_WALK_STEPS = 1
"""Where the first number of states' pseudocount walk is taken to end when it waits (:meth:`_Search.walk_crowds_out`):
this many grid steps above its start, as it ended on seven corpora (1e-3 best at 1,000 states from 1e-4); the next
number of states starts from there (:func:`pseudocount_start`)."""


PROBE_RANGE = 10.0
"""The next number of states is probed (:meth:`_Search.next_rung`) unless its extrapolated useful part passes what is
left of the budget this many times over: an extrapolation from one number of states has been 6 times too long."""


PREDICTION_MARGIN = 1.5
"""The factor the search allows for its predictions' errors where a wrong one costs a larger number of states: it
takes a smaller number of states on the way to the largest that fits (:meth:`_Search.next_rung`) only when the
smaller one's whole run and the larger one's useful part, times this, fit what is left of the budget. Measured on
calgary-book1: the 3,000-state candidate's seconds per batch iteration predicted 1.7 times what they took, its
online epochs 0.9 times (bench/RESULTS.md, issue 48, item 2)."""


START_MARGIN = 1.1
"""The factor the search allows for its predictions' errors before it starts any candidate after the first: the
part of it that must run (its whole run for the pseudocount walk, its useful part for a larger number of states)
times this must fit what is left of the budget. The budget's end cuts what overruns (:class:`_Judge`); the margin
keeps the search from starting a candidate it can finish only if every prediction holds."""


HOPELESS_AFTER = 3
"""Iterations (epochs) a candidate of the search runs before its learning curve is judged (:func:`hopeless`)."""

HOPELESS_DECAY = 0.8
"""The slowest shrinking of a candidate's validation gains that :func:`hopeless` allows for: from its latest gain g,
all later gains together are bounded by g * DECAY / (1 - DECAY) (4 g)."""


def _still_to_come(values: Sequence[float]) -> float:
    """A geometric bound on the validation gain still to come after ``values`` (at least two): the larger of its
    last two gains times DECAY / (1 - DECAY) (:data:`HOPELESS_DECAY`)."""
    gain = max(max(values[-2] - values[-1], 0.0), max(values[-3] - values[-2], 0.0) if len(values) > 2 else 0.0)
    return gain * HOPELESS_DECAY / (1.0 - HOPELESS_DECAY)


def hopeless(curve: Sequence[float], best_so_far: float) -> bool:
    """Whether a candidate whose validation BPS went ``curve`` (one value per iteration so far) cannot reach
    ``best_so_far`` (the best candidate's): after :data:`HOPELESS_AFTER` iterations, its best value less a geometric
    bound on what is still to come (:func:`_still_to_come`) stays above ``best_so_far``. A curve that still falls
    fast is never judged so."""
    values = [float(v) for v in curve if math.isfinite(v)]
    if len(values) < HOPELESS_AFTER or not math.isfinite(best_so_far):
        return False
    return min(values) - _still_to_come(values) > best_so_far


SETTLED_BITS = 0.002
"""The validation gain still to come (:func:`_still_to_come`) under which a candidate smaller than the largest
number of states of the search's grid is :func:`settled`: its batch EM stops there and the search goes on (its value
is known well enough to compare with: a step of capacity gained 0.03-0.1 bits of validation BPS on Calgary, War and
Peace and Moby Dick), and it is resumed should it be chosen (:meth:`_Search.resume`). On calgary-book1 the first
candidate (1,000 states) ran batch EM to its cap of 100 iterations, 56 of its 75 s, and its refit 100 more."""


def settled(curve: Sequence[float]) -> bool:
    """Whether a candidate whose validation BPS went ``curve`` has settled: after :data:`HOPELESS_AFTER`
    iterations, the gain still to come (:func:`_still_to_come`) is below :data:`SETTLED_BITS` (two gains in a row
    below 0.0005 bits)."""
    values = [float(v) for v in curve if math.isfinite(v)]
    return len(values) >= HOPELESS_AFTER and _still_to_come(values) < SETTLED_BITS


class _Judge:
    """Watches one candidate's validation curve (its progress records: batch EM's iterations, after online EM's
    epochs, which start slowly: the 3,000-state candidates of a novel were stopped after 3 epochs while they would
    have won) and asks it to stop once it is :func:`hopeless` against the best candidate so far (``reason``
    "hopeless"), once it has :func:`settled` where ``settle`` allows it ("settled"), or at the budget's end
    (``deadline``, a :func:`time.perf_counter` time; "budget"), keeping its best model so far.

    The budget's end is a deadline, held once the candidate has a model to give (any candidate after the first; the
    first after its first epoch or iteration). Online EM's stage follows ``hand_over``, which it checks before each
    batch: set once the next batch, as long as the time since the last check, would end past the deadline (the run
    stops), or once an epoch ends and the next one, as long as it, would (a cut epoch is lost: the stage hands over
    to batch EM). Batch EM follows ``cancel``, which
    it checks before each iteration: set once the next iteration (as long as the last one, or ``batch_seconds``,
    predicted, before the first) would end past the deadline. Both also follow the run's own token ``outer``."""

    def __init__(
        self,
        best_so_far: float,
        cancel: Any,
        deadline: float | None = None,
        settle: bool = False,
        batch_seconds: float = 0.0,
    ) -> None:
        self.best_so_far, self.outer, self.curve, self.stopped = best_so_far, cancel, [], False
        self.deadline, self.settle, self.reason, self.batch_seconds = deadline, settle, "", batch_seconds
        self.has_model, self.online_ends = math.isfinite(best_so_far), False
        self.polled: float | None = None  # when online EM last asked: the gap between two asks is one batch
        self.cancel = learning.CancelToken(poll=lambda: self._stop(self.batch_seconds))
        self.hand_over = learning.CancelToken(poll=self._online_poll)

    def _online_poll(self) -> bool:
        now = time.perf_counter()
        batch = 0.0 if self.polled is None else now - self.polled
        self.polled = now
        return self._stop(batch) or self.online_ends

    def _stop(self, ahead: float) -> bool:
        """Whether the run stops: stopped, cancelled, or ``ahead`` seconds from now pass the deadline."""
        if not self.stopped and self.has_model and self.passed(ahead):
            self.stopped, self.reason = True, "budget"
        return self.stopped or bool(self.outer and self.outer.cancelled)

    def passed(self, seconds: float) -> bool:
        """Whether ``seconds`` from now is at or past the deadline (never without one)."""
        return self.deadline is not None and time.perf_counter() + seconds >= self.deadline

    def observe(self, record: learning.IterationRecord) -> None:
        self.has_model = True
        if record.online:  # online EM starts slowly and crawls along plateaus: only batch EM's curve is judged
            self.online_ends = self.online_ends or self.passed(record.seconds)
            return
        self.curve.append(record.validation_bps)
        self.batch_seconds = record.seconds
        if self.stopped:
            return
        if hopeless(self.curve, self.best_so_far):
            self.stopped, self.reason = True, "hopeless"
        elif self.passed(record.seconds):
            self.stopped, self.reason = True, "budget"
        elif self.settle and settled(self.curve):
            self.stopped, self.reason = True, "settled"


def deadline_token(outer: Any, deadline: float | None) -> learning.CancelToken:
    """A token set by ``outer`` or once :func:`time.perf_counter` reaches ``deadline`` (None: never)."""
    return learning.CancelToken(
        poll=lambda: bool(outer and outer.cancelled) or (deadline is not None and time.perf_counter() >= deadline)
    )


def _duration(seconds: float) -> str:
    """Seconds for people: '42 s' under two minutes, '3.5 min' above."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


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
    started: float | None = None,
) -> tuple[Selection, list[dict[str, Any]]]:
    """Choose the number of states and/or the pseudocount (whichever is :data:`AUTO`) on the validation text, as the
    paper suggests for its Table 4 (section 4.2): every candidate is a selection run (stage 3, restart 0) scored by
    validation BPS. The number of states goes up :func:`states_candidates` until it stops helping, capacity first.
    The first number of states walks the pseudocount over :data:`PSEUDOCOUNT_GRID` from :data:`FIRST_PSEUDOCOUNT`
    upwards while validation improves (downwards only if that did not help), unless the walk would crowd the next
    number of states out of the budget (:meth:`_Search.walk_crowds_out`: then it waits, capacity first).
    Each larger one starts below the
    previous start or best by :func:`pseudocount_start`; when that start beats every smaller number of states and
    a larger number of states fits the budget, the search goes on to it, and the walk (downwards first) is made
    only for the number of states that ends best; otherwise it walks at once. (Capacity first: on Calgary, War and
    Peace and Moby Dick the step from 3,000 to 5,000 states gained 0.026 to 0.034 BPS of validation, while the
    walk at 3,000 states never beat its start.)

    With ``options.budget`` (minutes) each candidate's time is predicted stage by stage from the candidates' own
    measured seconds (:func:`predict_stages`). The next number of states is the largest of the grid whose useful
    part (the online stage and :data:`USEFUL_BATCH_ITERATIONS` batch iterations) fits what is left, or the next of
    the grid on the way to it when both fit with :data:`PREDICTION_MARGIN` to spare (:meth:`_Search.next_rung`):
    rungs are skipped rather than the search ending below the largest it can afford. A candidate of the pseudocount
    walk must fit whole. Any candidate's batch EM stops at the budget's end keeping its best model so far (a line
    marked "stopped": "budget", which may be chosen); one with fewer states than the grid's largest stops it once it
    has :func:`settled`, and goes on should it be chosen (:meth:`_Search.resume`). The best candidate then gets its
    other restarts (:func:`best_of_restarts`), as many as still fit the budget (:func:`restarts_within`: capacity
    comes before restarts, which change text little), and :func:`train_text` refits it (after the budget). Returns
    the kept selection and a line per candidate (states, pseudocount, validation BPS, iterations, seconds, the
    measured stages of :func:`candidate_stages` and, with a budget, from the second candidate on, the stages
    predicted before it ran, "predicted"). ``run_candidate`` runs one candidate (it has the signature of
    :func:`engine.training.protocol.select_stage`, which :func:`train_text` passes). Candidates run in this process,
    without ``run``'s cluster.

    The budget counts from ``started`` (a :func:`time.perf_counter` time; default now) and its end is a deadline
    (:class:`_Judge`): no candidate, online epoch, batch iteration, continuation or restart runs past it. A
    candidate cut before its batch EM began gives way to the best one so far (it is chosen only when it is the
    first). Predictions follow the machine's current pace (:class:`Pace`), come from the nearest number of states
    measured, and a number of states more than one rung above the largest measured is first probed
    (:func:`probe_online`: a few seconds of its online EM) before it is started on a prediction."""
    search = _Search(corpus_text, corpus, options, run, name, run_candidate, started)
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
        started: float | None = None,
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
        self.best_line = 0  # the best candidate's line in the record
        self.ended = "every candidate was tried"  # why the search ended where it did
        self.entries: dict[int, float] = {}
        self.started = time.perf_counter() if started is None else started
        self.pace = Pace()
        self.probes: dict[int, dict[str, float]] = {}  # a probe's figures by number of states
        self.waits: dict[int, int] = {}

    def cost(self, states: int) -> float:
        """The stored transition entries of a candidate with ``states`` (:func:`stored_entries`), once each."""
        if states not in self.entries:
            changed = replace(self.options, states=states, pseudocount=FIRST_PSEUDOCOUNT)
            self.entries[states] = float(stored_entries(self.corpus, changed))
        return self.entries[states]

    def prediction(self, states: int) -> StagePrediction:
        """:func:`predict_stages` for a candidate with ``states`` from the candidates run so far (the refit's
        iterations over training + validation text)."""
        refit_scale = len(self.corpus.train_full) / max(len(self.corpus.train), 1)
        return predict_stages(self.record, self.cost, states, self.first_exponent, refit_scale, self.pace, self.wait)

    def wait(self, states: int) -> int:
        """The epochs online EM waits for a gain at ``states`` (:func:`~engine.training.learning.online_wait`)."""
        if states not in self.waits:
            config = replace(self.options, states=states, pseudocount=FIRST_PSEUDOCOUNT).training_config()
            if config.batch_size is None:
                pairs = getattr(self.corpus, "train_full_parts", None)
                blocks = len(stages.corpus_pairs(self.corpus)) if pairs else 0
                config = replace(config, batch_size=learning.automatic_batch_size(blocks))
            self.waits[states] = learning.online_wait(config, len(self.corpus.train), int(self.cost(states)))
        return self.waits[states]

    def spent(self) -> float:
        """The seconds since the search started."""
        return time.perf_counter() - self.started

    def deadline(self) -> float | None:
        """The :func:`time.perf_counter` time at which the budget ends (None without a budget)."""
        return None if self.options.budget is None else self.started + 60.0 * self.options.budget

    def fits(self, states: int, whole: bool = False, before: float = 0.0, margin: float = 1.0) -> bool:
        """Whether a candidate with ``states``, started after ``before`` more seconds of other candidates, is
        predicted to fit what is left of ``options.budget``: its whole run (``whole``: a candidate of the pseudocount
        walk) or its useful part (:attr:`StagePrediction.useful_seconds`: a larger number of states, whose batch EM
        the budget's end may cut), the predicted seconds (``before`` and its own) times ``margin``. The first
        candidate always fits, and every one without a budget."""
        if self.options.budget is None or not self.record:
            return True
        if self.probes.get(states) == {}:  # its probe found no room for the model
            return False
        predicted = self.prediction(states)
        need = predicted.seconds if whole else predicted.useful_seconds
        return self.spent() + max(margin, START_MARGIN) * (before + need) <= 60.0 * self.options.budget

    def next_rung(self, number: int) -> int | None:
        """The index (into the states grid) of the number of states to try after the grid's ``number``: the largest
        later one whose useful part fits (the target; None when none does, :meth:`fits`), or the next one on the way
        to it when the next one's whole run and then the target's useful part fit with :data:`PREDICTION_MARGIN` to
        spare (the rungs between the two are skipped otherwise: capacity first). A number of states whose prediction
        would be an extrapolation (:meth:`unmeasured`) is probed first (:meth:`probe`): the next one, unless its
        extrapolation passes what is left :data:`PROBE_RANGE` times over, and the target, which is left for a smaller
        one when its probed pace does not fit."""
        states_list = self.states_list
        following = number + 1
        if following < len(states_list) and self.unmeasured(following):
            if self.prediction(states_list[following]).useful_seconds <= PROBE_RANGE * self.deadline_left():
                self.probe(states_list[following])
        fitting = [m for m in range(following, len(states_list)) if self.fits(states_list[m])]
        while fitting and self.unmeasured(fitting[-1]):
            self.probe(states_list[fitting[-1]])
            if not self.fits(states_list[fitting[-1]]):
                fitting.pop()
        if not fitting:
            return None
        target = fitting[-1]
        if target == following:
            return following
        step = self.prediction(states_list[following]).seconds
        return following if self.fits(states_list[target], before=step, margin=PREDICTION_MARGIN) else target

    def unmeasured(self, index: int) -> bool:
        """Whether the grid's ``index`` would be predicted by extrapolation alone, so a probe comes first: with a
        budget, neither run nor probed, and either more than one rung above the largest number of states run, or one
        rung above it with a single number of states run (no growth of the seconds fitted yet: from 300 to 1,000
        states on alice the first exponent predicted 3.1 s an online epoch, 0.5 s measured)."""
        states = self.states_list[index]
        ran = {int(line["states"]) for line in self.record}
        if self.options.budget is None or states in self.probes or states in ran:
            return False
        top = max(self.states_list.index(n) for n in ran if n in self.states_list)
        return index > top + 1 or len(ran) < 2

    def probe(self, states: int) -> None:
        """Measure online EM's pace at ``states`` now (:func:`probe_online`, for at most :data:`PROBE_SHARE` of the
        budget) and keep it as that number of states' online reference (:class:`Pace`); a probe that cannot run
        (memory) leaves the states without one, and they do not fit."""
        seconds = min(PROBE_SHARE * 60.0 * float(self.options.budget or 0.0), max(self.deadline_left(), 0.0) / 4)
        figures = probe_online(
            self.corpus, replace(self.options, states=states, pseudocount=FIRST_PSEUDOCOUNT), self.run.backend, seconds
        )
        self.probes[states] = figures or {}
        if figures is None:
            self.run.say(f"{states:,} states left out: their model does not fit this machine's memory")
            return
        self.pace.probe(states, "online", figures["epoch_seconds"])
        self.run.say(
            f"probed {states:,} states: {figures['batches']:.0f} online batches in {figures['seconds']:.1f} s, "
            f"about {_duration(figures['epoch_seconds'])} an online epoch at the machine's current pace"
        )

    def deadline_left(self) -> float:
        """The seconds left before the budget's end (infinite without a budget)."""
        return math.inf if self.options.budget is None else 60.0 * self.options.budget - self.spent()

    def evaluate(self, states: int, pseudocount: float, whole: bool = True) -> float:
        """Run the candidate (``states``, ``pseudocount``) and return its validation BPS; :class:`_OverBudget` if it
        would pass the budget (:meth:`fits`; ``whole``: its whole run must fit), :class:`_SearchStopped` if it was
        cancelled or failed."""
        run, candidate = self.run, len(self.record)
        if not self.fits(states, whole=whole):
            self.left_out(states, pseudocount, whole)
        predicted = self.prediction(states) if self.record and self.options.budget is not None else None
        callback = run.callback
        settle = self.options.budget is not None and states < max(self.states_list)  # more states are to come
        first_batch = predicted.batch_iteration_seconds if predicted is not None else 0.0
        best_so_far = self.best[0] if self.best is not None else math.inf
        judge = _Judge(best_so_far, run.cancel, self.deadline(), settle, first_batch)

        def tagged(record: learning.IterationRecord, c: int = candidate) -> None:
            self.pace.observe(states, "online" if record.online else "batch", record.seconds)
            judge.observe(record)
            if callback is not None:
                callback(record._replace(candidate=c))

        concrete = replace(self.options, states=states, pseudocount=pseudocount)
        options_budget = self.options.budget is not None
        started = time.perf_counter()
        expect = "" if predicted is None else f" (predicted {predicted.seconds / 60:.1f} min)"
        run.say(f"candidate {candidate + 1}: {states:,} states, pseudocount {pseudocount:g}{expect}")
        watched = replace(self.alone, callback=tagged, cancel=judge.cancel, hand_over=judge.hand_over)
        selection = self.run_candidate(self.corpus_text, self.corpus, concrete, None, watched, self.name, restarts=1)
        stopped_early = judge.stopped and not (run.cancel is not None and run.cancel.cancelled)
        # cut before its batch EM began: its online model gives way to the best so far (the refit continues an
        # online stage's model with batch EM, and this one has none)
        cut_online = (
            stopped_early
            and judge.reason == "budget"
            and concrete.algorithm == "online"
            and bool(self.corpus.validation_parts)
            and selection.result.online_model is None
        )
        if selection.result.stopped in STOPPED_BAD and not stopped_early:
            raise _SearchStopped(selection)
        if stopped_early and judge.reason in ("budget", "settled"):
            selection.result.stopped = judge.reason  # its best model so far, as a run stopped early on validation
        value = stages.sequences_bps(selection.result.model, self.corpus.validation_parts, run.backend)
        seconds = time.perf_counter() - started
        self.record.append(
            {
                "states": states,
                "pseudocount": pseudocount,
                "validation_bps": value,
                "iterations": len(selection.result.history),
                "seconds": seconds,
                **candidate_stages(selection.result, seconds),
                **({"predicted": predicted.line()} if predicted is not None else {}),
                **({"stopped": judge.reason} if stopped_early else {}),
                **({"cut": "online"} if cut_online else {}),
                **({"online_wait": self.wait(states)} if concrete.algorithm == "online" and options_budget else {}),
            }
        )
        note = {
            "hopeless": "; stopped early: it could not reach the best so far",
            "budget": "; cut at the budget's end in its online stage, before batch EM"
            if cut_online
            else "; its batch EM stopped at the budget's end",
            "settled": "; its batch EM stopped as it settled, to go on should it be chosen",
        }.get(judge.reason if stopped_early else "", "")
        run.say(f"candidate {candidate + 1}: validation BPS {value:.4f} ({seconds / 60:.1f} min{note})")
        if stopped_early and judge.reason == "hopeless" or (cut_online and self.best is not None):
            return value
        if self.best is None or value < self.best[0]:
            self.best, self.best_line = (value, selection, seconds), candidate
        return value

    def left_out(self, states: int, pseudocount: float, whole: bool = False) -> None:
        """Say that the candidate (``states``, ``pseudocount``) is left out, with its predicted minutes (whole or its
        useful part), and raise :class:`_OverBudget`."""
        predicted = self.prediction(states)
        self.run.say(
            f"candidate {len(self.record) + 1}: {states:,} states, pseudocount {pseudocount:g} left out: about "
            f"{(predicted.seconds if whole else predicted.useful_seconds) / 60:.1f} min more would pass the "
            f"search's {self.options.budget:g} min"
        )
        raise _OverBudget

    def walk(self, states: int, values: dict[int, float], first: int) -> int:
        """The pseudocount walk at ``states`` from the one value in ``values``: towards ``first`` while validation
        improves, the other way only if that did not help; returns the best index. Each candidate must fit
        whole."""
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
        deferred: tuple[int, dict[int, float], int] | None = None  # a walk that waits (capacity first), its way
        try:
            previous, number, before = math.inf, 0, None
            while True:
                states = states_list[number]
                # the first number of states walks upwards first; larger ones start lower by the states' growth and
                # walk downwards first, since more states share the counts and want less smoothing (alice, macbeth,
                # hamlet, milton, calgary-book1: 1e-3 best at 1,000 states, 1e-4 at 3,000)
                if before is not None:
                    position = pseudocount_start(grid, position, states, states_list[before])
                values = {position: self.evaluate(states, grid[position], whole=before is None)}
                if values[position] < previous:
                    deferred = None
                following = self.next_rung(number)
                # capacity first: a number of states whose start beats the smaller ones goes on to a larger one and
                # walks only if it stays the best (below); the first walks at once, to place the others' starts
                if before is not None and values[position] < previous and following is not None:
                    deferred = (states, values, -1)
                elif before is None and following is not None and self.walk_crowds_out(states, following):
                    deferred = (states, values, 1)
                    self.run.say(
                        f"{states:,} states' pseudocount walk waits: with it, {states_list[following]:,} states would "
                        f"not fit what is left of the search's {self.options.budget:g} min (capacity first)"
                    )
                else:
                    position = self.walk(states, values, 1 if before is None else -1)
                    if values[position] >= previous:  # more states stopped helping
                        self.ended = f"{states:,} states did no better than {states_list[before]:,}"
                        break
                    following = self.next_rung(number)
                previous = min(values.values())
                if deferred is not None and deferred[2] > 0 and deferred[0] == states:  # where the first walk ends
                    position = min(position + FIRST_WALK_STEPS, len(grid) - 1)  # as a rule: the next start from there
                if following is None:
                    if number + 1 < len(states_list):
                        start = pseudocount_start(grid, position, states_list[number + 1], states)
                        self.left_out(states_list[number + 1], grid[start])
                    break
                if following > number + 1:
                    skipped = ", ".join(f"{n:,}" for n in states_list[number + 1 : following])
                    self.run.say(
                        f"{skipped} states skipped: {states_list[following]:,} states fit what is left of the "
                        f"search's {self.options.budget:g} min only without them"
                    )
                before, number = number, following
        except _OverBudget:  # the larger candidates cost more still: the search ends with the best so far
            self.ended = f"the next candidate would have passed the budget of {self.options.budget:g} min"
        if deferred is not None and self.best is not None and self.best[1].options.states == deferred[0]:
            try:
                self.walk(*deferred)  # the best number of states had its start only: its walk, within the budget
            except _OverBudget:
                pass

    def walk_crowds_out(self, states: int, following: int) -> bool:
        """Whether the first number of states' pseudocount walk (at least two more whole candidates of ``states``)
        would leave no room for the grid's ``following`` number of states, whose useful part fits now: on a tight
        budget (a busy machine's is one) capacity comes first, and the walk waits (chesterton-brown, 4 min, two busy
        processes: the walk at 1,000 states took 85 s, 3,000 states were left out and the model ended 0.12 bits
        above our n-gram; 3,000 states gained 0.12 bits of validation BPS where the walk gained 0.03)."""
        if self.options.budget is None or len(self.grid) < 2:
            return False
        walk = 2.0 * self.prediction(states).seconds
        return not self.fits(self.states_list[following], before=walk)

    def with_other_restarts(self) -> Selection:
        """The best candidate with its other restarts, as many as still fit the budget (capacity first)."""
        assert self.best is not None
        options, run = self.options, self.run
        value, selection, seconds = self.resume(*self.best)
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
            bounded = deadline_token(run.cancel, self.deadline())
            start, result, lines = best_of_restarts(
                self.corpus, selection.options, selection.config, replace(self.alone, callback=tagged, cancel=bounded),
                range(1, restarts),
            )  # fmt: skip
            lines = [restart_line(0, value, selection.result, selection.options), *lines]
            cut = result.stopped == "cancelled" and not (run.cancel is not None and run.cancel.cancelled)
            if cut:  # the budget's end came first: the chosen run without the restarts still running
                run.say("the chosen setting's other restarts were cut at the budget's end; its first run is kept")
                lines = lines[:1]
            elif result.stopped in STOPPED_BAD:
                return replace(selection, start=start, result=result, restarts=lines)
            if len(lines) > 1 and min(line["bps"] for line in lines[1:]) < value:
                selection = replace(selection, start=start, result=result)
                value = min(line["bps"] for line in lines[1:])
            selection = replace(selection, restarts=lines)
        picked = selection.options
        reason = self.reason(value)
        run.say(f"chose {picked.states:,} states and pseudocount {picked.pseudocount:g}: {reason}")
        refit = self.refit_seconds(selection)
        if refit is not None:
            run.say(f"its refit: about {refit / 60:.1f} min, predicted from its own batch EM iterations")
        return replace(selection, reason=reason, refit_seconds=refit)

    def refit_seconds(self, selection: Selection) -> float | None:
        """The seconds the refit of the chosen ``selection`` is predicted to take: the batch iterations validation
        chose (:func:`candidate_stages`) times its number of states' measured seconds per batch iteration, times
        the training + validation text's symbols over the training part's; None without a refit, for a grown
        model, or where no batch iteration was measured at its number of states."""
        if not self.options.refit or selection.schedule:
            return None
        states = int(selection.options.states)
        ran = [line for line in self.record if int(line["states"]) == states and line.get("batch_iterations")]
        if not ran:
            return None
        rate = sum(line["batch_seconds"] for line in ran) / sum(line["batch_iterations"] for line in ran)
        if self.pace.reference(states, "batch"):  # at the machine's current pace
            rate = self.pace.reference(states, "batch") * self.pace.now()
        iterations = candidate_stages(selection.result, 0.0)["refit_iterations"]
        return iterations * rate * len(self.corpus.train_full) / max(len(self.corpus.train), 1)

    def resume(self, value: float, selection: Selection, seconds: float) -> tuple[float, Selection, float]:
        """The best candidate (its validation BPS, its run, its seconds) as it is, or, when its batch EM stopped as
        it :func:`settled`, with batch EM continued from its model on the same text until validation stops it or
        the budget ends: its history, best iteration and model as if it had run on (the refit runs the iterations
        validation chose), its record's line given "resumed" (iterations, seconds, validation BPS). A cancelled or
        failed continuation keeps the settled model, marked so."""
        result, run = selection.result, self.run
        if result.stopped != "settled" or self.spent() >= 60.0 * float(self.options.budget or 0.0):
            return value, selection, seconds
        chosen, offset, callback = self.best_line, len(result.history), run.callback
        batch = [r.seconds for r in result.history if not r.online]
        judge = _Judge(math.inf, run.cancel, self.deadline(), batch_seconds=batch[-1] if batch else 0.0)
        judge.has_model = True  # the settled model is there to give
        states = int(selection.options.states)

        def tagged(record: learning.IterationRecord) -> None:
            self.pace.observe(states, "batch", record.seconds)
            judge.observe(record)
            if callback is not None:
                callback(record._replace(iteration=record.iteration + offset, candidate=chosen))

        run.say(f"candidate {chosen + 1} was chosen after it settled: its batch EM goes on")
        started = time.perf_counter()
        more = learning.fit(
            result.model, self.corpus.train_parts, self.corpus.validation_parts or None,
            replace(selection.config, algorithm="em"), tagged, judge.cancel, backend=run.backend,
        )  # fmt: skip
        if more.stopped in STOPPED_BAD and not (judge.stopped and not (run.cancel and run.cancel.cancelled)):
            return value, replace(selection, result=replace(result, stopped=more.stopped, error=more.error)), seconds
        history = result.history + [r._replace(iteration=r.iteration + offset) for r in more.history]
        model, best = (more.model, offset + more.best_iteration) if more.best_iteration else (result.model, None)
        stopped = "budget" if judge.stopped else more.stopped
        resumed = replace(result, model=model, history=history, stopped=stopped)
        resumed.best_iteration = best if best is not None else result.best_iteration
        value = stages.sequences_bps(model, self.corpus.validation_parts, run.backend)
        more_seconds = time.perf_counter() - started
        self.record[chosen]["resumed"] = {
            "iterations": len(more.history), "seconds": more_seconds, "validation_bps": value
        }  # fmt: skip
        run.say(f"candidate {chosen + 1}: validation BPS {value:.4f} after {len(more.history)} more iteration(s)")
        return value, replace(selection, result=resumed), seconds + more_seconds

    def reason(self, value: float) -> str:
        """Why the kept candidate was chosen, in one sentence for people: its validation BPS among the candidates,
        those stopped early or at the budget's end, and why the search ended."""
        early = sum(line.get("stopped") == "hopeless" for line in self.record)
        cut = sum(line.get("stopped") == "budget" for line in self.record)
        stopped = f", {early} of them stopped early as they could not reach it" if early else ""
        stopped += f", {cut} stopped at the budget's end" if cut else ""
        return (
            f"the lowest validation BPS ({value:.4f}) of {len(self.record)} candidate settings{stopped}; "
            f"the search ended as {self.ended}"
        )
