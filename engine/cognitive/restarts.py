"""Restarts of a map (issue 50, "a map found every time"): the recipe of :class:`engine.cognitive.walks.MapOptions`
run from several random starts, and the start whose map predicts the walk best kept, chosen without the room.

One run of the recipe (:func:`recipe`) is batch EM, Viterbi EM and the merging of clones with the same future. With
restarts, restart r starts from its own random T (seed ``seed + r``) and runs the recipe on the walk without its tail
(:func:`hold_out_tail`); its map is scored by the bits per step of the held-out tail, -log2 P(tail | actions) / N,
each walk of the tail from the map's uniform pi (:func:`engine.cognitive.actions.bits_per_step`). A map that has
not found the room confuses places, so it predicts the tail worse (or gives it probability 0: infinite bits); of two
maps that predict it as well, the one with fewer clones costs less on the tail's first step. The restart of the
lowest held-out bits is kept (:func:`chosen`) and refitted on the whole walk (:func:`refit`: Viterbi EM from its
batch-EM model, then merging).

With ``options.race`` (the default) the restarts race (:func:`race`): each runs batch EM in segments of
``options.race_every`` iterations (:func:`em_segment`: the iterations of one run, ended by stop when worse or once
EM has settled, :func:`on_plateau`), is scored on the held-out tail after each segment (the tail's bits per step
under its current EM model), and :func:`judge` stops the racers far behind the leader; the others finish the recipe
and the map kept is chosen among them as without the race, after :func:`revive` has set running again any stopped
racer whose EM model predicted the tail better than the best finished map. The racers run in threads of this
process, as many at once as :func:`map_restart_processes` allows, with BLAS on one thread (:func:`one_blas_thread`).
Without it the restarts run to the end in worker processes, one core
each, when there are cores to spare and a restart is worth a process's start (:func:`map_restart_processes`),
through the text restarts' own pool (:func:`engine.training.restarts.run_in_processes`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.cognitive import actions, maps
from engine.errors import CHMMError
from engine.training import one_blas_thread, restart_processes, run_in_processes

MAP_PROCESS_WORK = 2_000_000
"""The least steps x clones (the walk's steps times the model's clones, what a batch-EM iteration's work grows with)
for which map restarts run at once (racing: in threads; without the race: in worker processes, where a process
starts in about 5 s on 2 cores with Python, NumPy and the compiled kernels); smaller maps (the Maps page's 10,000
steps x 80 clones: about a second a restart) learn their restarts in turn in this process."""

Report = Callable[[str, int, float], None]
"""A restart's progress: its stage ("em", "viterbi"), the iteration (from 0) and the bits per step."""


class RestartCancelled(Exception):
    """Raised in a restart worker's progress when the parent cancelled (or died): the restart stops there."""


@dataclass
class MapRun:
    """One run of the recipe: the model after batch EM (``em_model``, the start of :func:`refit`), the map after
    Viterbi EM and merging (``model``), the iterations of each stage and the clones Viterbi EM kept before merging."""

    em_model: actions.ActionCHMM
    model: actions.ActionCHMM
    em_iterations: int
    viterbi_iterations: int
    clones_before_merging: int


@dataclass
class MapRestart:
    """A restart: its number (from 0), its seed, its run on the walk without the tail, the held-out bits per step of
    its map on the tail (infinite when the map cannot make the tail), its bits per step on the rest, and the seconds
    it took."""

    restart: int
    seed: int
    run: MapRun
    held_out_bits: float
    bits_per_step: float
    seconds: float = 0.0
    stopped: str | None = None

    def line(self) -> dict[str, Any]:
        """The restart's line in the map's summary (infinite bits as None, so that it stays JSON)."""
        finite = [float(v) if np.isfinite(v) else None for v in (self.held_out_bits, self.bits_per_step)]
        return {
            "restart": self.restart,
            "seed": self.seed,
            "held_out_bits_per_step": finite[0],
            "bits_per_step": finite[1],
            "em_iterations": self.run.em_iterations,
            "viterbi_iterations": self.run.viterbi_iterations,
            "clones_used": int(len(maps.used_clones(self.run.model))),
            "seconds": round(self.seconds, 3),
            "stopped_by_race": self.stopped,
        }


def recipe(
    model: actions.ActionCHMM,
    x: actions.Walks,
    a: actions.Walks,
    options: Any,
    progress: Callable[[str], actions.Progress | None] | None = None,
) -> MapRun:
    """One run of the recipe from ``model`` on the walk (or walks): batch EM (``options.iterations`` at most,
    ``options.pseudocount``, stopped when the likelihood stops improving), Viterbi EM (``options.viterbi_iterations``
    at most, pseudocount 0: only the clones the walk's MAP path uses keep transitions) and, when ``options.merge``,
    the clones with the same future merged (:func:`engine.cognitive.maps.merge_equivalent_clones`). ``progress(stage)``
    gives each stage's callback (iteration, bits per step)."""

    def stage(name: str) -> actions.Progress | None:
        return None if progress is None else progress(name)

    em_model, em = actions.learn_em(model, x, a, options.iterations, options.pseudocount, progress=stage("em"))
    return refine(em_model, len(em), x, a, options, stage("viterbi"))


def refine(
    em_model: actions.ActionCHMM,
    em_iterations: int,
    x: actions.Walks,
    a: actions.Walks,
    options: Any,
    progress: actions.Progress | None = None,
) -> MapRun:
    """The recipe after batch EM: Viterbi EM from ``em_model`` (``options.viterbi_iterations`` at most, pseudocount
    0; ``progress`` sees its iterations), then, when ``options.merge``, the clones with the same future merged; the
    run of ``em_iterations`` batch-EM iterations that ended on ``em_model``."""
    learned, hard = actions.learn_viterbi(em_model, x, a, options.viterbi_iterations, 0.0, progress=progress)
    split = len(maps.used_clones(learned))
    if options.merge:
        learned, _ = maps.merge_equivalent_clones(learned)
    return MapRun(em_model, learned, em_iterations, len(hard), split)


class _Worse(Exception):
    """Raised in a segment's first iteration when it is not better than the last one before the segment."""


def em_segment(
    model: actions.ActionCHMM,
    x: actions.Walks,
    a: actions.Walks,
    options: Any,
    history: list[float],
    length: int,
    progress: actions.Progress | None = None,
) -> tuple[actions.ActionCHMM, bool]:
    """Up to ``length`` more iterations of the recipe's batch EM (``options.pseudocount``) from ``model``, the model
    the iterations so far (their bits per step in ``history``, which grows by this segment's) ended on: what one run
    of :func:`engine.cognitive.actions.learn_em` does over the same iterations, stop when worse included across the
    segments' seams (batch EM keeps no state but T). Returns the model and whether EM has ended: stopped when worse
    (the model that entered the iteration that did not improve kept), ``options.iterations`` reached, or on a
    plateau (:func:`on_plateau`). ``progress`` sees each iteration, numbered from the first segment's."""
    before = len(history)
    length = min(int(length), int(options.iterations) - before)
    if length < 1:
        return model, True

    def each(iteration: int, bits: float) -> None:
        if iteration == 0 and history and not bits < history[-1]:
            history.append(bits)
            raise _Worse
        if progress is not None:
            progress(before + iteration, bits)

    try:
        learned, bits = actions.learn_em(model, x, a, length, options.pseudocount, progress=each)
    except _Worse:
        if progress is not None:
            progress(before, history[-1])
        return model, True
    history.extend(bits)
    worse = len(bits) > 1 and not bits[-1] < bits[-2]
    ended = worse or len(history) >= int(options.iterations) or on_plateau(history, options)
    return learned, ended


def on_plateau(history: Sequence[float], options: Any) -> bool:
    """Whether batch EM has settled: its bits per step b improved over the last ``options.plateau_window``
    iterations by less than ``options.plateau_gain`` times their latest value, b(t - W) - b(t) < g b(t) (never
    with a window of 0). Relative, because a walk's bits per step fall with its length (the pseudocount's share of
    the counts): at 50,000 steps they are about a twentieth of those at 10,000, where a fixed gain ends EM too early."""
    window = int(getattr(options, "plateau_window", 0))
    if window < 1 or len(history) <= window:
        return False
    return history[-1 - window] - history[-1] < float(options.plateau_gain) * history[-1]


def hold_out_tail(
    walks: Sequence[tuple[np.ndarray, np.ndarray]], share: float
) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[tuple[np.ndarray, np.ndarray]]]:
    """The walks (each (observations, actions)) split into the part restarts learn from and the held-out tail: the
    last ``share`` of all steps (at least 2), taken from the end: whole walks, then the tail of the walk where the cut
    falls (its head keeps at least 2 steps, else it goes whole to the tail). Returns (learned from, held out), each
    a list of walks of at least 2 steps. ValueError in one sentence when nothing would be left to learn from."""
    total = sum(len(x) for x, _ in walks)
    want = max(2, int(round(share * total)))
    kept, held = list(walks), []
    while want >= 2 and kept:
        x, a = kept[-1]
        if len(x) - want < 2:  # the whole walk goes to the tail
            held.insert(0, kept.pop())
            want -= len(x)
        else:
            kept[-1] = (x[:-want], a[:-want])
            held.insert(0, (x[-want:], a[-want:]))
            want = 0
    if not kept:
        raise CHMMError(
            f"a walk of {total} steps is too short to hold out its tail for choosing among restarts; learn with 1 "
            "restart"
        )
    return kept, held


def _lists(walks: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [x for x, _ in walks], [a for _, a in walks]


def run_restart(
    x: actions.Walks,
    a: actions.Walks,
    learned_from: Sequence[tuple[np.ndarray, np.ndarray]],
    held_out: Sequence[tuple[np.ndarray, np.ndarray]],
    n_clones: np.ndarray,
    symbols: list[str],
    action_names: list[str],
    options: Any,
    restart: int,
    report: Report | None = None,
    cancel: Any = None,
) -> MapRestart | None:
    """Restart ``restart``: a random start of seed ``options.seed + restart`` with a block for every (action,
    observation, observation) triple of the whole walk ``x``, ``a``
    (:func:`engine.cognitive.actions.random_action_model`), :func:`recipe` on ``learned_from``, and its map's bits
    per step on ``held_out`` and on ``learned_from``. Each iteration goes to ``report(stage, iteration, bits)``; None
    when ``cancel`` (a :class:`engine.training.learning.CancelToken`) is set, checked after every iteration."""
    began = time.perf_counter()
    seed = int(options.seed) + restart
    start = actions.random_action_model(n_clones, x, a, seed, symbols, action_names)

    def progress(stage: str) -> actions.Progress:
        def each(iteration: int, bits: float) -> None:
            if cancel is not None and cancel.cancelled:
                raise RestartCancelled
            if report is not None:
                report(stage, iteration, bits)

        return each

    try:
        run = recipe(start, *_lists(learned_from), options, progress)
    except RestartCancelled:
        return None
    held = actions.bits_per_step(run.model, *_lists(held_out))
    learned = actions.bits_per_step(run.model, *_lists(learned_from))
    return MapRestart(restart, seed, run, held, learned, time.perf_counter() - began)


def map_restart_processes(n_restarts: int, steps: int, clones: int) -> int:
    """How many map restarts run at once: 1 below :data:`MAP_PROCESS_WORK` steps x clones, else one per core
    (:func:`engine.training.restarts.restart_processes` on the CPU: at most ``n_restarts``, 1 in a process that may
    not start children)."""
    if steps * clones < MAP_PROCESS_WORK:
        return 1
    return restart_processes(n_restarts, "cpu")


def _in_worker(*job: Any, report: Callable[[Any], None], cancel: Any) -> MapRestart | None:
    """:func:`run_restart` in a restart worker (one core, BLAS on one thread:
    :func:`engine.training.restarts.run_in_processes` holds it for every task): its progress as records (stage,
    iteration, bits) to ``report``."""
    return run_restart(*job, report=lambda stage, i, bits: report((stage, i, bits)), cancel=cancel)


def run_restarts(
    x: actions.Walks,
    a: actions.Walks,
    n_clones: np.ndarray,
    symbols: list[str],
    action_names: list[str],
    options: Any,
    held_out_share: float,
    progress: Callable[[str, int, float, int], None] | None = None,
) -> tuple[list[MapRestart], int]:
    """Every restart of ``options.restarts`` (:func:`run_restart`) on the walk (or walks) without its held-out tail
    (the last ``held_out_share`` of the steps, :func:`hold_out_tail`), in :func:`map_restart_processes` processes;
    ``progress(stage, iteration, bits, restart)`` sees each restart's iterations restart by restart. A raise in
    ``progress`` (a cancel) stops every restart and is raised again. When every map of the round gives the tail
    probability 0 (none can make the walk's last steps: the room was not found, as on the notebook's empty room,
    where one start finds it about 3 times in 10 and four restarts all missed on one seed of five), another round of
    ``options.restarts`` runs (seeds continuing), until a map gives the tail a probability or
    :func:`restarts_at_most` restarts have run. Returns the restarts and the held-out steps."""
    walks = actions.check_walks(x, a, len(n_clones), len(action_names))
    learned_from, held_out = hold_out_tail(walks, held_out_share)
    steps = sum(len(x_d) for x_d, _ in walks)
    job = (x, a, learned_from, held_out, n_clones, symbols, action_names, options)
    most = restarts_at_most(options)
    tried: list[MapRestart] = []
    while not tried or (len(tried) < most and not any(np.isfinite(r.held_out_bits) for r in tried)):
        first = len(tried)  # a round: the next restarts, as many as options.restarts (the last may be fewer)
        jobs = [(*job, r) for r in range(first, min(first + options.restarts, most))]
        processes = map_restart_processes(len(jobs), steps, int(np.sum(n_clones)))
        if getattr(options, "race", False) and len(jobs) > 1:
            results = race(job, [j[-1] for j in jobs], processes, progress)
        elif processes > 1:
            callback = None if progress is None else (lambda r, record, first=first: progress(*record, first + r))
            results = run_in_processes(_in_worker, jobs, processes, callback)
        else:
            results = [
                run_restart(*job, report=None if progress is None else _report(progress, job[-1])) for job in jobs
            ]
        if any(result is None for result in results):
            raise RuntimeError("the map's restarts stopped before they ended (cancelled)")
        tried += [r for r in results if r is not None]
    return tried, sum(len(x_d) for x_d, _ in held_out)


def restarts_at_most(options: Any) -> int:
    """The most restarts a map runs (``options.max_restarts``, never fewer than ``options.restarts``): further
    rounds run only while every restart so far gives the held-out tail probability 0 (:func:`run_restarts`)."""
    return max(int(options.restarts), int(getattr(options, "max_restarts", options.restarts)))


def _report(progress: Callable[[str, int, float, int], None], restart: int) -> Report:
    """``progress`` as one restart's :data:`Report`."""
    return lambda stage, iteration, bits: progress(stage, iteration, bits, restart)


def chosen(restarts: Sequence[MapRestart]) -> MapRestart:
    """The restart kept: the lowest held-out bits per step, then the lowest bits per step on the rest of the walk
    (when every map gives the tail probability 0), then the first; among the restarts that finished (not stopped by
    the race: :func:`race`) when any did."""
    finished = [r for r in restarts if r.stopped is None] or list(restarts)
    return min(finished, key=lambda r: (r.held_out_bits, r.bits_per_step, r.restart))


def best_of_restarts(
    x: actions.Walks,
    a: actions.Walks,
    n_clones: np.ndarray,
    symbols: list[str],
    action_names: list[str],
    options: Any,
    held_out_share: float,
    progress: Callable[[str, int, float, int], None] | None = None,
) -> tuple[MapRun, list[MapRestart], MapRestart, int]:
    """The map of ``options.restarts`` restarts: every restart on the walk without its held-out tail
    (:func:`run_restarts`), the one :func:`chosen` keeps, refitted on the whole walk (:func:`refit`, its Viterbi
    iterations to ``progress`` as stage "refit"). Returns the refitted run, every restart, the kept one and the
    held-out steps. BLAS runs on one thread meanwhile (:func:`one_blas_thread`)."""
    with one_blas_thread():
        tried, held_steps = run_restarts(x, a, n_clones, symbols, action_names, options, held_out_share, progress)
        kept = chosen(tried)
        report = None if progress is None else _report(progress, kept.restart)
        refit_progress = None if report is None else (lambda iteration, bits: report("refit", iteration, bits))
        return refit(kept, x, a, options, refit_progress), tried, kept, held_steps


def refit(
    kept: MapRestart, x: actions.Walks, a: actions.Walks, options: Any, progress: actions.Progress | None = None
) -> MapRun:
    """The kept restart's map on the whole walk (its tail included): Viterbi EM from the restart's batch-EM model
    (``options.viterbi_iterations`` at most, pseudocount 0) on every step, then, when ``options.merge``, the clones
    with the same future merged; ``progress(iteration, bits)`` sees the Viterbi iterations."""
    return refine(kept.run.em_model, kept.run.em_iterations, x, a, options, progress)


@dataclass
class Racer:
    """A restart in the race: its number and seed, its batch-EM model so far with the bits per step of each
    iteration (``history``), the held-out tail's bits per step under that model after each segment (``tail``:
    (iterations, bits)), whether its EM has ended, and, once it ends, its :class:`MapRestart` (``result``) or why
    the race stopped it (``stopped``); ``records`` are the progress records (stage, iteration, bits) of its last
    step, ``seconds`` the time it has taken."""

    restart: int
    seed: int
    model: actions.ActionCHMM
    history: list[float] = field(default_factory=list)
    tail: list[tuple[int, float]] = field(default_factory=list)
    em_ended: bool = False
    result: MapRestart | None = None
    stopped: str | None = None
    records: list[tuple[str, int, float]] = field(default_factory=list)
    seconds: float = 0.0
    revived: bool = False

    @property
    def live(self) -> bool:
        """Whether the racer still runs (neither finished nor stopped)."""
        return self.result is None and self.stopped is None

    @property
    def score(self) -> float:
        """The held-out tail's bits per step under its latest batch-EM model (infinite before the first)."""
        return self.tail[-1][1] if self.tail else np.inf

    def gain(self, window: int) -> float:
        """How much its tail score fell over the last ``window`` iterations (from the last score at or before them;
        infinite when it has run fewer)."""
        then = len(self.history) - int(window)
        before = [bits for iterations, bits in self.tail if iterations <= then]
        return before[-1] - self.score if then >= 0 and before else np.inf

    def advance(self, learned_from: Sequence, held_out: Sequence, options: Any) -> None:
        """One step: ``options.race_every`` more batch-EM iterations (:func:`em_segment`) and the tail's score under
        the model they end on; once EM has ended, the rest of the recipe (:func:`refine`) and the map's bits per
        step on the tail and on the rest (:class:`MapRestart`)."""
        began, self.records = time.perf_counter(), []
        head, tail = _lists(learned_from), _lists(held_out)
        if not self.em_ended:
            each = lambda i, bits: self.records.append(("em", i, bits))  # noqa: E731
            self.model, self.em_ended = em_segment(self.model, *head, options, self.history, options.race_every, each)
            self.tail.append((len(self.history), actions.bits_per_step(self.model, *tail)))
        else:
            each = lambda i, bits: self.records.append(("viterbi", i, bits))  # noqa: E731
            run = refine(self.model, len(self.history), *head, options, each)
            held, learned = actions.bits_per_step(run.model, *tail), actions.bits_per_step(run.model, *head)
            self.result = MapRestart(self.restart, self.seed, run, held, learned)
        self.seconds += time.perf_counter() - began

    def restart_line(self) -> MapRestart:
        """The racer as a :class:`MapRestart`: its finished map, or, stopped, its batch-EM model so far (no map:
        infinite bits) with why."""
        if self.result is not None:
            result = self.result
        else:
            run = MapRun(self.model, self.model, len(self.history), 0, 0)
            result = MapRestart(self.restart, self.seed, run, np.inf, np.inf)
        result.seconds, result.stopped = self.seconds, self.stopped
        return result


def judge(racers: Sequence[Racer], options: Any) -> list[Racer]:
    """The race's rule after a step, in place: the leader is the racer of the lowest tail score (:attr:`Racer.score`)
    among those not stopped whose map, when finished, gives the tail a probability; a racer still in batch EM after
    at least ``options.race_grace`` iterations that cannot catch the leader (:func:`_behind`) is stopped, and a
    finished racer whose map gives the tail probability 0 where a finished one's does not is stopped at once.
    Returns the racers stopped now."""
    contenders = [r for r in racers if r.stopped is None and (r.result is None or np.isfinite(r.result.held_out_bits))]
    if not contenders:
        return []
    leader = min(contenders, key=lambda r: (r.score, r.restart))
    found = sorted((r for r in contenders if r.result is not None), key=lambda r: r.result.held_out_bits)
    now = []
    for racer in racers:
        if racer.stopped is not None or racer is leader:
            continue
        if racer.result is not None and found and not np.isfinite(racer.result.held_out_bits):
            racer.stopped = f"its map gives the held-out tail probability 0 where restart {found[0].restart}'s does not"
        elif racer.result is None and not racer.em_ended and (why := _behind(racer, leader, options)) is not None:
            racer.stopped = (
                f"stopped at EM iteration {len(racer.history)}: tail {racer.score:.4f} bits per step against the "
                f"leader's {leader.score:.4f} (restart {leader.restart}), {why}"
            )
        else:
            continue
        now.append(racer)
    return now


def _behind(racer: Racer, leader: Racer, options: Any) -> str | None:
    """Why ``racer`` (in batch EM) cannot catch ``leader`` (None while it may, within ``options.race_grace``
    iterations, or once :func:`revive` has set it running again): its tail score more than ``options.race_margin``
    times the leader's above it, or above it by more than its score fell over the last ``options.race_window``
    iterations (when that is not 0)."""
    if racer.revived or len(racer.history) < int(options.race_grace) or not racer.score > leader.score:
        return None
    if racer.score > leader.score * (1.0 + float(options.race_margin)):
        return f"more than {1.0 + float(options.race_margin):g} times it"
    window = int(getattr(options, "race_window", 0))
    if window > 0 and (gain := racer.gain(window)) < racer.score - leader.score:
        return f"behind by more than it gained over the last {window} iterations ({gain:.4f})"
    return None


def race(
    job: tuple[Any, ...],
    numbers: Sequence[int],
    workers: int,
    progress: Callable[[str, int, float, int], None] | None = None,
) -> list[MapRestart]:
    """The restarts ``numbers`` of ``job`` (:func:`run_restart`'s arguments before the restart) raced: each a
    :class:`Racer` from its random start (seed ``options.seed + restart``), the live ones advanced a step each in
    turn (``workers`` at once, in threads: the compiled kernels release the GIL), :func:`judge` after every round,
    until every racer has finished or been stopped. ``progress(stage, iteration, bits, restart)`` sees every
    iteration restart by restart (:func:`_show`), and each racer the race stops or :func:`revive` sets running
    again as a record ("race" or "revive", the restarts stopped in all, its tail score, its number); a raise in it
    stops the race (between rounds) and is raised again.
    Returns the racers as :class:`MapRestart` in the order of ``numbers``."""
    x, a, learned_from, held_out, n_clones, symbols, action_names, options = job
    racers = []
    for number in numbers:
        seed = int(options.seed) + number
        racers.append(Racer(number, seed, actions.random_action_model(n_clones, x, a, seed, symbols, action_names)))
    step = lambda racer: racer.advance(learned_from, held_out, options)  # noqa: E731
    waiting: dict[int, list[tuple[str, int, float]]] = {r.restart: [] for r in racers}
    with ThreadPoolExecutor(max(1, workers)) as pool:
        while live := [r for r in racers if r.live] or _told("revive", revive(racers), racers, progress):
            if workers > 1 and len(live) > 1:
                list(pool.map(step, live))
            else:
                for racer in live:
                    step(racer)
            for racer in live:
                waiting[racer.restart] += racer.records
            stopped = judge(racers, options)
            if progress is not None:
                _show(racers, waiting, progress)
                _told("race", stopped, racers, progress)
    return [r.restart_line() for r in racers]


def _told(
    stage: str,
    racers: list[Racer],
    every: Sequence[Racer],
    progress: Callable[[str, int, float, int], None] | None,
) -> list[Racer]:
    """``racers``, each told to ``progress`` as a record of ``stage`` ("race": the race stopped it; "revive": it runs
    again): (stage, the restarts stopped now in all, its tail score, its number)."""
    if progress is not None:
        for racer in racers:
            progress(stage, sum(r.stopped is not None for r in every), racer.score, racer.restart)
    return racers


def revive(racers: Sequence[Racer]) -> list[Racer]:
    """Once every racer has finished or been stopped: the racers stopped in batch EM whose tail score
    (:attr:`Racer.score`, under their soft EM model) is below the held-out bits of the best finished map (every one
    of them when no finished map gives the tail a probability), set running again (in place) to finish the recipe,
    and never stopped again. A map that finds the room predicts the tail better than the EM model it came from (its
    held-out bits a third to a fifth of its EM model's on every recorded restart that recovered its room,
    bench/RESULTS.md), so a stopped racer that already beat the kept map in EM would likely have won: the race only
    saves the work of racers that could not have. Returns the racers revived."""
    finished = [r.result.held_out_bits for r in racers if r.result is not None and r.stopped is None]
    best = min(finished, default=np.inf)
    again = [r for r in racers if r.result is None and r.stopped is not None and r.score < best]
    for racer in again:
        racer.stopped, racer.revived = None, True
    return again


def _show(
    racers: Sequence[Racer],
    waiting: dict[int, list[tuple[str, int, float]]],
    progress: Callable[[str, int, float, int], None],
) -> None:
    """The racers' waiting progress records to ``progress``, restart by restart as if they ran one after the other
    (as :func:`engine.training.restarts.run_in_processes` shows them): the lowest racer still running live, each
    later one's once every racer before it has finished or been stopped."""
    for racer in racers:
        records, waiting[racer.restart] = waiting[racer.restart], []
        for record in records:
            progress(*record, racer.restart)
        if racer.live:
            return
