"""What the automatic search (:mod:`engine.training.search`) knows of time: a candidate's run measured stage by
stage (:func:`candidate_stages`), the machine's pace as the search goes (:class:`Pace`), a candidate's seconds
predicted from the nearest number of states measured at that pace (:func:`predict_stages`), and a short probe of a
number of states not yet run (:func:`probe_online`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine.backends import engines
from engine.corpora import text
from engine.training import learning, stages
from engine.training.options import TrainOptions, check_memory

PREDICTION_EXPONENTS = (0.5, 1.5)
"""The range of the exponent :func:`predict_stages` fits to a stage's seconds per epoch or iteration against the
stored transition entries: at least the square root of the entries' ratio (small models' seconds hold per-batch and
per-step work that does not grow with the states), at most 1.5. Measured on calgary-book1 (2-core Xeon): seconds per
online epoch 2.9 / 37 / 83 and per batch-EM iteration 0.56 / 5.0 / 14.3 at 1,000 / 3,000 / 5,000 states, stored
entries in the ratio 1 : 9.0 : 25.1 (exponents 0.79-1.16)."""


USEFUL_BATCH_ITERATIONS = 3
"""Batch EM iterations a larger candidate of the search needs before the budget's end for it to be worth starting
(with its online stage before them): batch EM's first iteration from the online stage brings most of its gain
(Moby Dick, bench/HISTORY.md: the online stage's 2.06 validation BPS at 5,000 and 10,000 states, 1.828 and 1.802
after one batch iteration, 1.768 and 1.743 at batch EM's best), and the budget's end stops batch EM keeping its best
model so far (:class:`_Judge`)."""


PROBE_SHARE = 0.02
"""The share of the budget a probe of a number of states may take (:func:`probe_online`; 12 s of the default 10
minutes, and at most a quarter of what is left): long enough for tens of online batches at 10,000 states on two busy
cores, and a few hundred at 1,000-3,000."""

PROBE_BATCHES = 300
"""The most online batches a probe runs (:func:`probe_online`)."""


def probe_online(corpus: text.Corpus, options: TrainOptions, backend: str, seconds: float) -> dict[str, float] | None:
    """Online EM's pace at ``options.states`` measured now: a new model of that size (:func:`initial_model_for`) runs
    online EM's batches over the training text for about ``seconds`` (at most :data:`PROBE_BATCHES`; the first, which
    sets up the pass, is not timed), and the seconds of one epoch follow from the seconds per batch times the
    epoch's batches, times (training + validation symbols) / training symbols for the epoch's validation score.
    Returns the batches timed, their seconds and the epoch's seconds, or None when the model does not fit the
    machine's memory (:func:`check_memory`). The model is dropped afterwards."""
    try:
        check_memory(corpus, options)
    except ValueError:
        return None
    model = stages.initial_model_for(corpus, options)
    config = options.training_config()
    if config.batch_size is None:
        config = replace(config, batch_size=learning.automatic_batch_size(model.layout.n_blocks))
    engine = engines.engine_for(model, backend, None)
    sequences = [x for x in corpus.train_parts if len(x) > 1]
    batches = learning.online_batches([len(x) for x in sequences], int(config.batch_size))
    polls: list[float] = []

    def enough() -> bool:
        polls.append(time.perf_counter())  # online EM asks before each batch
        return len(polls) > PROBE_BATCHES + 1 or (len(polls) > 2 and polls[-1] - polls[1] >= seconds)

    begun = time.perf_counter()
    learning.online_epoch(
        engine, engine.load(model), sequences, config, learning.OnlineState(), learning.CancelToken(poll=enough)
    )
    ended = time.perf_counter()
    timed = len(polls) - 2  # the batches between the first poll after batch 0 and the last poll
    if timed >= 1:
        per_batch, spent = (polls[-1] - polls[1]) / timed, polls[-1] - polls[1]
    else:  # the whole epoch ran
        timed, spent = len(batches), ended - begun
        per_batch = spent / max(timed, 1)
    share = (len(corpus.train) + len(corpus.validation)) / max(len(corpus.train), 1)
    return {"batches": float(timed), "seconds": float(spent), "epoch_seconds": per_batch * len(batches) * share}


def candidate_stages(result: learning.TrainingResult, seconds: float) -> dict[str, Any]:
    """A search candidate's run (its selection ``result``, which took ``seconds`` in all) split by stage: online EM's
    epochs, their seconds and the median epoch's, batch EM's iterations, their seconds and the median iteration's (the
    whole run for batch or Viterbi EM alone; on the support where it ran there), the other seconds (the start, the
    passes' plans, the validation scores outside the iterations, the support's choice: ``seconds`` less the
    iterations'), the batch iterations the refit would run (validation's best batch iteration, as
    :func:`engine.training.stages.refit_stage` counts) and online EM's validation curve (``online_curve``, one value
    per epoch: :func:`online_epochs_with` reads it to predict the epochs of another number of states)."""
    online = [r.seconds for r in result.history if r.online]
    batch = [r.seconds for r in result.history if not r.online]
    curve = [float(r.validation_bps) for r in result.history if r.online]
    refit = result.best_iteration
    if result.online_model is not None:
        refit = max(0, refit - result.online_iterations)
    return {
        "online_epochs": len(online),
        "online_seconds": float(sum(online)),
        "online_epoch_seconds": float(np.median(online)) if online else 0.0,
        "batch_iterations": len(batch),
        "batch_seconds": float(sum(batch)),
        "batch_iteration_seconds": float(np.median(batch)) if batch else 0.0,
        "other_seconds": max(float(seconds) - float(sum(online)) - float(sum(batch)), 0.0),
        "refit_iterations": int(refit),
        **({"online_curve": curve} if curve else {}),
    }


@dataclass(frozen=True)
class StagePrediction:
    """The seconds a search candidate is expected to take, stage by stage (:func:`predict_stages`): online EM's
    epochs and seconds per epoch, batch EM's iterations and seconds per iteration, the other seconds of the run, and
    the refit's iterations and seconds per iteration should it be chosen."""

    online_epochs: float
    online_epoch_seconds: float
    batch_iterations: float
    batch_iteration_seconds: float
    other_seconds: float
    refit_iterations: float
    refit_iteration_seconds: float

    @property
    def online_seconds(self) -> float:
        return self.online_epochs * self.online_epoch_seconds

    @property
    def batch_seconds(self) -> float:
        return self.batch_iterations * self.batch_iteration_seconds

    @property
    def seconds(self) -> float:
        """The whole candidate: the other seconds, online EM's epochs and batch EM's iterations."""
        return self.other_seconds + self.online_seconds + self.batch_seconds

    @property
    def useful_seconds(self) -> float:
        """The candidate up to the point where it is worth having: the other seconds, online EM's epochs and the
        first :data:`USEFUL_BATCH_ITERATIONS` batch EM iterations (all of them when it is predicted fewer)."""
        iterations = min(self.batch_iterations, USEFUL_BATCH_ITERATIONS)
        return self.other_seconds + self.online_seconds + iterations * self.batch_iteration_seconds

    @property
    def refit_seconds(self) -> float:
        """The refit's seconds, should the candidate be chosen: its iterations times its seconds per iteration."""
        return self.refit_iterations * self.refit_iteration_seconds

    def line(self) -> dict[str, float]:
        """The prediction as the search's record keeps it, beside the measured stages (:func:`candidate_stages`)."""
        return {
            "online_epochs": self.online_epochs,
            "online_seconds": self.online_seconds,
            "batch_iterations": self.batch_iterations,
            "batch_seconds": self.batch_seconds,
            "other_seconds": self.other_seconds,
            "seconds": self.seconds,
            "useful_seconds": self.useful_seconds,
            "refit_iterations": self.refit_iterations,
            "refit_seconds": self.refit_seconds,
        }


PACE_UNITS = 3
"""How many of the latest epochs or iterations set the machine's current pace (:class:`Pace`)."""


class Pace:
    """The machine's pace as the search goes, measured on its own candidates: each number of states and stage has
    a reference, the median seconds of all its units (online epochs, batch EM iterations) so far, or a probe's; the
    current pace is the median ratio of the latest :data:`PACE_UNITS` units to their references (1 where the load
    has not changed; 2 when the same work now takes twice as long, as when other processes come to share the cores).
    A prediction is a reference times the current pace: the recent rate at the reference's number of states, carried
    to the others, so that the rate of a quiet machine is not carried into a busy one, nor the reverse. (A
    reference of the first units alone made the pace look 3 times too fast on a busy machine, where a process's first
    units, which compile the kernels, were slower than the rest.)"""

    def __init__(self) -> None:
        self.units: dict[tuple[int, str], list[float]] = {}
        self.probed: dict[tuple[int, str], float] = {}
        self.latest: list[tuple[int, str, float]] = []

    def observe(self, states: int, stage: str, seconds: float) -> None:
        """One unit of ``stage`` ("online" or "batch") at ``states`` took ``seconds``."""
        if not seconds > 0.0:
            return
        self.units.setdefault((states, stage), []).append(float(seconds))
        self.latest = [*self.latest[-(PACE_UNITS - 1) :], (states, stage, float(seconds))]

    def probe(self, states: int, stage: str, seconds: float) -> None:
        """A probe measured ``seconds`` per unit of ``stage`` at ``states`` now: kept as the reference there,
        divided by the current pace."""
        self.probed[(states, stage)] = float(seconds) / self.now()

    def reference(self, states: int, stage: str) -> float:
        """The reference seconds of a unit of ``stage`` at ``states`` (0 where none was measured nor probed)."""
        units = self.units.get((states, stage))
        if units:
            return float(np.median(units))
        return self.probed.get((states, stage), 0.0)

    def sizes(self, stage: str) -> list[int]:
        """The numbers of states with a reference for ``stage``, smallest first."""
        found = {n for (n, g) in self.units if g == stage} | {n for (n, g) in self.probed if g == stage}
        return sorted(found)

    def now(self) -> float:
        """The current pace: the median ratio of the latest :data:`PACE_UNITS` units to their references (1 before
        any)."""
        if not self.latest:
            return 1.0
        return float(np.median([seconds / self.reference(n, g) for n, g, seconds in self.latest]))


def _nearest(sizes: Sequence[int], states: int, cost: Callable[[int], float]) -> int:
    """Of ``sizes``, the one whose stored entries are nearest ``states``' by ratio (the larger on a tie)."""
    target = math.log(max(cost(states), 1.0))
    return min(sorted(sizes, reverse=True), key=lambda n: abs(math.log(max(cost(n), 1.0)) - target))


def _fitted_exponent(rate: dict[int, float], sizes: Sequence[int], cost: Callable[[int], float], first: float) -> float:
    """The exponent of a stage's seconds per unit against the stored entries, fitted on the two largest of ``sizes``
    within :data:`PREDICTION_EXPONENTS` (``first`` with one)."""
    if len(sizes) < 2:
        return first
    small, large = sizes[-2], sizes[-1]
    grown, cost_grown = rate[large] / max(rate[small], 1e-12), cost(large) / max(cost(small), 1.0)
    if cost_grown > 1.0 and grown > 0.0:
        low, high = PREDICTION_EXPONENTS
        return min(max(math.log(grown) / math.log(cost_grown), low), high)
    return first


def _stage_rate(
    record: Sequence[dict[str, Any]],
    stage: str,
    cost: Callable[[int], float],
    states: int,
    first_exponent: float,
    pace: Pace | None = None,
) -> tuple[float, float]:
    """The seconds per unit (epoch or iteration) of ``stage`` ("online" or "batch") for a candidate of ``states``,
    and the exponent used. From ``pace`` where it has references for the stage: the reference of the number of
    states nearest ``states`` (by stored entries; a probe counts), times (cost(states) / cost(that)) ** e, times the
    current pace; a probed online reference without a batch one gives the batch one by the ratio of the two at the
    nearest number of states that measured both. Otherwise from ``record``: the largest number of states that ran
    the stage, its candidates' median seconds per unit weighted by their units. e is fitted on the two largest
    numbers of states measured (``first_exponent`` with one) within :data:`PREDICTION_EXPONENTS`; (0,
    first_exponent) where none ran the stage."""
    if pace is not None and pace.sizes(stage):
        measured = pace.sizes(stage)
        rate = {n: pace.reference(n, stage) for n in measured}
        exponent = _fitted_exponent(rate, measured, cost, first_exponent)
        other = "online" if stage == "batch" else "batch"
        if (states, other) in pace.probed and states not in rate:
            both = [n for n in pace.sizes(other) if n in rate and pace.units.get((n, other))]
            if both:
                near = _nearest(both, states, cost)
                ratio = rate[near] / pace.reference(near, other)
                return pace.reference(states, other) * ratio * pace.now(), exponent
        reference = _nearest(measured, states, cost)
        return rate[reference] * (cost(states) / max(cost(reference), 1.0)) ** exponent * pace.now(), exponent
    unit = "epoch" if stage == "online" else "iteration"
    units, median = f"{stage}_{unit}s", f"{stage}_{unit}_seconds"
    totals: dict[int, list[float]] = {}
    for line in record:
        if line.get(units):
            total = totals.setdefault(int(line["states"]), [0.0, 0.0])
            total[0] += float(line[median]) * float(line[units])
            total[1] += float(line[units])
    if not totals:
        return 0.0, first_exponent
    rate = {n: total / count for n, (total, count) in totals.items()}
    measured = sorted(rate)
    reference = measured[-1]
    exponent = _fitted_exponent(rate, measured, cost, first_exponent)
    return rate[reference] * (cost(states) / max(cost(reference), 1.0)) ** exponent, exponent


def online_epochs_with(curve: Sequence[float], wait: int, ran_with: int) -> float:
    """The online epochs a run whose validation curve went ``curve`` (one value per epoch; it waited ``ran_with``
    epochs for a gain of :data:`~engine.training.learning.PLATEAU_GAIN`) would have run waiting ``wait`` epochs:
    the same rule replayed on the same curve (the first epoch counts as a gain), or, waiting longer than it did,
    its epochs plus the difference. Online EM's early stopping waits by the model's size
    (:func:`~engine.training.learning.online_wait`): 10 epochs at 300 states on a novel, 1 from 1,000 states on."""
    if wait >= ran_with:
        return float(len(curve) + wait - ran_with)
    best, since = math.inf, 0
    for epoch, value in enumerate(curve, 1):
        if value < best - learning.PLATEAU_GAIN:
            best, since = value, 0
        else:
            since += 1
        if since >= wait:
            return float(epoch)
    return float(len(curve))


def predict_stages(
    record: Sequence[dict[str, Any]],
    cost: Callable[[int], float],
    states: int,
    first_exponent: float = 1.0,
    refit_scale: float = 1.0,
    pace: Pace | None = None,
    wait: Callable[[int], int] | None = None,
) -> StagePrediction:
    """The seconds a search candidate with ``states`` is expected to take, stage by stage, from the candidates run so
    far (``record``: their lines, with the stages :func:`candidate_stages` measured). Each stage's seconds per epoch
    or iteration come from :func:`_stage_rate`: with ``pace``, the reference at the number of states nearest
    ``states`` (measured, or probed) times the machine's current pace; without it, the largest number of states'
    measured seconds; either scaled by (cost(states) / cost(that)) ** e (``cost`` is the stored transition entries,
    which each stage's work grows with; e fitted per stage, ``first_exponent`` before two numbers of states ran it).
    The number of online epochs is the mean over the nearest measured number of states' candidates, each replayed
    with the wait of ``states`` (``wait(n)``, online EM's :func:`~engine.training.learning.online_wait`) by
    :func:`online_epochs_with` where the two waits differ (not copied from a smaller model that waited longer); the
    batch iterations and the refit's are the most that a candidate ran to its own end or until it :func:`settled`
    (not stopped as hopeless or at the budget's end) at the largest number of states that has one (larger models
    stop sooner: calgary-book1 ran 106, 19 and 15 at 1,000, 3,000 and 5,000 states, so this bounds them from above).
    The other seconds are the least of the largest number of states' candidates (the first candidate's hold one-off
    work: compiling, caches), scaled as batch EM's iterations are, times the pace. The refit's iterations cost what
    batch EM's do times ``refit_scale`` (its E-steps run over training + validation text: their symbols over the
    training part's; after batch EM on the support, the refit runs there too)."""
    largest = max(int(line["states"]) for line in record)
    online_rate, _ = _stage_rate(record, "online", cost, states, first_exponent, pace)
    batch_rate, batch_exponent = _stage_rate(record, "batch", cost, states, first_exponent, pace)
    sizes = sorted({int(line["states"]) for line in record if line.get("online_epochs")})
    near = _nearest(sizes, states, cost) if sizes and pace is not None else largest
    at_near = [line for line in record if int(line["states"]) == near]
    epochs = float(np.mean([_epochs_at(line, states, wait) for line in at_near]))
    ended = [line for line in record if line.get("stopped", "settled") == "settled" and line.get("batch_iterations")]
    if ended:
        top = max(int(line["states"]) for line in ended)
        ended = [line for line in ended if int(line["states"]) == top]
        iterations = float(max(line["batch_iterations"] for line in ended))
        refit = float(max(line.get("refit_iterations", 0) for line in ended))
    else:
        iterations = float(max(line.get("batch_iterations", 0) for line in record))
        refit = iterations
    at_largest = [line for line in record if int(line["states"]) == largest]
    other = min(float(line.get("other_seconds", line["seconds"])) for line in at_largest)
    other *= (cost(states) / max(cost(largest), 1.0)) ** batch_exponent
    if pace is not None:
        other *= pace.now()
    return StagePrediction(epochs, online_rate, iterations, batch_rate, other, refit, batch_rate * refit_scale)


def _epochs_at(line: dict[str, Any], states: int, wait: Callable[[int], int] | None) -> float:
    """A record line's online epochs as a candidate of ``states`` would run them (:func:`online_epochs_with`)."""
    epochs = float(line.get("online_epochs", 0))
    curve, ran_with = line.get("online_curve"), line.get("online_wait")
    if wait is None or not curve or ran_with is None or "cut" in line:  # a cut online stage ran short of its rule
        return epochs
    return online_epochs_with(curve, wait(states), int(ran_with))
