"""User-level operations shared by the command line and the web app: train a corpus into a model (with progress
and cancellation), score text, sample text. ``cli.py`` and ``app/`` call these and never re-assemble the steps,
so both always behave the same."""

from __future__ import annotations

import math
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from engine import allocation, engines, inference, learning, scramble, text
from engine import communities as communities_mod
from engine import export as export_mod
from engine import graph as graph_mod
from engine import model as model_io
from engine import sparse as sparse_mod
from engine.allocation import DEFAULT_NGRAM_ORDER
from engine.archive import MAX_MODEL_BYTES, read_header
from engine.codec import TextCodec
from engine.model import CHMM, MAX_STATES, pairs_in_sequence, random_model
from engine.peers.base import PEER_FORMAT

ENGINE_VERSION = "0.1.0"
DTYPES = {"float32": np.float32, "float64": np.float64}
STOPPED_BAD = ("cancelled", "failed")


ONLINE_RESTARTS = 4
"""Restarts of online EM when none are asked for: online EM leaves the toy FSM's plateaus at random times, and the
best of four seeds on validation reaches the optimum where one seed may not (bench/RESULTS.md, issue 15). Batch
and Viterbi EM run one seed unless asked."""
MAX_RESTARTS = 64
AUTO = "auto"
"""The value of ``states`` or ``pseudocount`` that asks for a choice on validation (:func:`search_settings`)."""
PSEUDOCOUNT_GRID = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2)
"""The pseudocounts ``--pseudocount auto`` chooses from (on alice the best was 1e-3 at 1,000 states and 1e-5 at
3,000: bench/RESULTS.md)."""
FIRST_PSEUDOCOUNT = 1e-4
"""Where the search on :data:`PSEUDOCOUNT_GRID` starts for the smallest number of states; each larger number of
states starts where :func:`pseudocount_start` puts it."""
STATES_GRID = (300, 1_000, 3_000, 5_000, 10_000, 30_000)
"""The numbers of states ``--states auto`` chooses from: those with at least two clones per symbol and at most one
state per :data:`SYMBOLS_PER_STATE` training symbols (and, with ``max_memory``, within it). 5,000 is the step that
fits 90 minutes on 2 cores for the largest texts of Table 4, where 3,000 states are short of capacity and 10,000
do not fit (bench/RESULTS.md, issue 15)."""
PSEUDOCOUNT_STATES_EXPONENT = 2.0
"""The best pseudocount falls as the number of states to this power: a row's stored entries grow with the square
of the clones, and the pseudocount is added to each (measured: one decade lower per three times the states, from
1,000 to 3,000 states on alice, macbeth, hamlet, milton, calgary-book1, War and Peace and Moby Dick)."""
SYMBOLS_PER_STATE = 10
SHARP_CONCENTRATION = 0.1
"""Aligned restarts draw T from a Dirichlet of this concentration (clones close to a few successors) before the
aligned share is added (:data:`ALIGNED_SHARE`)."""
ALIGNED_SHARE = 0.9
"""An aligned start is a sharp draw (:data:`SHARP_CONCENTRATION`) with this share of every row on its aligned
entries, clone c of one symbol to clone c of the next (:func:`engine.model.align_rows`). From such starts online EM
left the toy FSM's plateaus in 20 of 20 restarts at k = 3, 4 and 5, where uniform starts stay on them for whole seeds
(k = 5: 0.467 in 16 of 16 restarts of uniform and plain sharp starts), and on alice it reaches a lower validation
BPS (1.701 against 1.711 at 3,000 states); bench/RESULTS.md, issue 15."""
STARTS = ("aligned", "uniform")
"""The kinds of random start of T (``--start``): ``aligned`` (:data:`ALIGNED_SHARE`) or ``uniform`` (uniform(0, 1)
entries, row-normalised: the paper's random start). Restarts alternate between the two, beginning with the one
asked for (:func:`restart_plan`)."""
RESTART_MEMORY = 0.5
"""Online EM's lambda in restarts 2 and 3 of every four (the others use ``memory``): larger steps leave the toy
FSM's plateaus sooner (10 of 10 seeds at k = 3 within 300 epochs against 7 of 10 at 0.9) and cost text a little
(alice: 1.600 against 1.590), so validation keeps whichever is better (bench/RESULTS.md, issue 15)."""


def restart_plan(restart: int, start: str = STARTS[0]) -> tuple[bool, bool]:
    """Restart ``restart``'s start and step: (T starts aligned, online EM's lambda :data:`RESTART_MEMORY`). Every
    four restarts run ``start``, the other start, ``start`` with larger steps, the other with larger steps; restart
    0 is the plain run."""
    return (restart % 2 == 0) == (start == "aligned"), restart % 4 >= 2


@dataclass
class TrainOptions:
    """Everything that defines a training run (recorded in the model's metadata)."""

    states: int | str = 3000  # or AUTO
    allocation: str = "ngram"
    ngram_order: int = DEFAULT_NGRAM_ORDER
    normalisation: str = "paper"
    algorithm: str = "em"
    iterations: int = 100
    batch_size: int | None = None
    memory: float = 0.9
    validation: float = 0.1
    test_fraction: float = 0.1
    max_train: int | None = None
    pseudocount: float | str = 1e-6  # or AUTO
    tolerance: float = 1e-6
    patience: int = 5
    seed: int = 0
    restarts: int | None = None
    start: str = STARTS[0]
    refit: bool = True
    backend: str = "cpu"
    dtype: str = "float32"
    init: str | None = None
    grow_from: int | None = None
    grow_threshold: float = 1e-3
    grow_noise: float = 0.05
    grow_iterations: int | None = None
    chunk: int | None = None
    burn_in: int | None = None
    max_memory: int | None = None  # bytes: automatic states (AUTO) whose training memory estimate is within it
    search_minutes: float | None = None  # wall-clock budget of the automatic search (AUTO): see search_settings

    @property
    def searches(self) -> bool:
        """Whether the number of states or the pseudocount is chosen on validation (:func:`search_settings`)."""
        return self.states == AUTO or self.pseudocount == AUTO

    def validate(self) -> None:
        """Raise ValueError (one clear sentence) on impossible settings, before any work is done."""
        if self.states != AUTO and (
            isinstance(self.states, bool) or not isinstance(self.states, int) or not 2 <= self.states <= MAX_STATES
        ):
            raise ValueError(
                f"the number of states must be an integer from 2 to {MAX_STATES:,} or {AUTO!r}, got {self.states!r}"
            )
        if self.pseudocount != AUTO and (
            isinstance(self.pseudocount, (bool, str)) or not (self.pseudocount >= 0 and math.isfinite(self.pseudocount))
        ):
            raise ValueError(f"the pseudocount must be a number at least 0 or {AUTO!r}, got {self.pseudocount!r}")
        if self.searches and self.init is not None:
            raise ValueError(f"--init continues one model with its own settings: {AUTO!r} applies to new models")
        if self.search_minutes is not None and not (
            isinstance(self.search_minutes, (int, float)) and 0 < self.search_minutes < math.inf
        ):
            raise ValueError(f"the search's minutes must be a positive number, got {self.search_minutes!r}")
        if self.search_minutes is not None and not self.searches:
            raise ValueError(f"--search-minutes bounds the search of {AUTO!r} states or pseudocount: give one of them")
        if self.searches and not self.validation:
            raise ValueError(f"{AUTO!r} chooses on the validation text: give a validation share above 0")
        if self.states == AUTO and self.grow_from:
            raise ValueError(f"--grow-from needs a number of states, not {AUTO!r}")
        if self.allocation not in allocation.ALLOCATION_METHODS:
            raise ValueError(
                f"unknown allocation {self.allocation!r}; choose one of {', '.join(allocation.ALLOCATION_METHODS)}"
            )
        if self.normalisation not in text.NORMALISATIONS:
            raise ValueError(
                f"unknown normalisation {self.normalisation!r}; choose one of {', '.join(text.NORMALISATIONS)}"
            )
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}")
        if self.start not in STARTS:
            raise ValueError(f"unknown start {self.start!r}; choose one of {', '.join(STARTS)}")
        if not 0.0 <= self.validation <= 0.5:
            raise ValueError(f"the validation share must lie in [0, 0.5], got {self.validation}")
        if not 0.0 <= self.test_fraction <= 0.5:
            raise ValueError(f"the test share must lie in [0, 0.5], got {self.test_fraction}")
        if self.seed < 0:
            raise ValueError("the seed must be a non-negative integer")
        if self.restarts is not None and not 1 <= self.restarts <= MAX_RESTARTS:
            raise ValueError(f"the number of restarts must be from 1 to {MAX_RESTARTS}, got {self.restarts!r}")
        if self.restarts not in (None, 1) and self.init is not None:
            raise ValueError("restarts start from random models; --init continues one model: leave out --restarts")
        if self.grow_from is not None and self.grow_from != 0 and not 2 <= self.grow_from < int(self.states):
            raise ValueError(
                f"--grow-from must be at least 2 and below the number of states ({self.states}), got {self.grow_from}"
            )
        if not 0.0 < self.grow_threshold < 1.0:
            raise ValueError(f"the grow threshold must lie strictly between 0 and 1, got {self.grow_threshold}")
        if self.grow_iterations is not None and self.grow_iterations < 1:
            raise ValueError("the grown model's iterations must be at least 1")
        if not 0.0 <= self.grow_noise < 1.0:
            raise ValueError(f"the grow noise must lie in [0, 1), got {self.grow_noise}")
        chosen = replace(self, pseudocount=FIRST_PSEUDOCOUNT) if self.pseudocount == AUTO else self
        chosen.training_config().validate()

    def resolved_restarts(self) -> int:
        """The restarts to run: as given, else :data:`ONLINE_RESTARTS` for online EM and 1 for batch or Viterbi EM."""
        if self.restarts is not None:
            return self.restarts
        return ONLINE_RESTARTS if self.algorithm == "online" else 1

    def training_config(self) -> learning.TrainingConfig:
        """The training loop's settings (a chosen pseudocount: :func:`search_settings` resolves :data:`AUTO`)."""
        if self.pseudocount == AUTO:
            raise ValueError(f"the pseudocount {AUTO!r} is chosen by search_settings before training")
        return learning.TrainingConfig(
            algorithm=self.algorithm,
            max_iterations=self.iterations,
            tolerance=self.tolerance,
            patience=self.patience,
            pseudocount=self.pseudocount,
            batch_size=self.batch_size,
            memory=self.memory,
            chunk=self.chunk,
            burn_in=self.burn_in,
        )


@dataclass
class TrainOutcome:
    """The trained model, the figures of the run (the CLI's ``--json`` object) and the training result."""

    model: CHMM
    summary: dict[str, Any]
    result: learning.TrainingResult
    corpus: text.Corpus = field(repr=False)
    selected: Any = field(default=None, repr=False)  # the selection run's model (before the refit), if refitted


def _score(model: Any, sequences: np.ndarray | list[np.ndarray], backend: str) -> float:
    """BPS of one sequence or of several independent ones, on the implementation that runs ``model`` there."""
    engine = engines.engine_for(model, backend)
    return engines.score_sequences(engine, engine.load(model), sequences).bps


def train_text(
    corpus_text: str | Sequence[Any],
    options: TrainOptions,
    callback: learning.ProgressCallback | None = None,
    cancel: learning.CancelToken | None = None,
    name: str = "corpus",
    log: Callable[[str], None] | None = None,
    initial_model: CHMM | None = None,
    cluster: Any = None,
) -> TrainOutcome:
    """Train a model on raw text (one document, or a list of documents: independent sequences) with the paper's
    protocol, in named stages:

    1. :func:`prepare_training_corpus`: normalise and split (paper: first 90% train with its last ``validation``
       share held out for early stopping, last 10% test; several documents are split each in the same way).
    2. the start: clones allocated and T random on the symbol pairs seen in training (:func:`initial_model_for`), or
       ``options.init`` / ``initial_model`` extended to the new text, or, for a grown model, a dense model of
       ``grow_from`` states trained with this same protocol, pruned and split (:func:`grown_starts`);
    3. :func:`select_on_validation`: EM with early stopping on the validation text, from each restart
       (:func:`best_of_restarts`); with ``states`` or ``pseudocount`` :data:`AUTO`, for each candidate setting
       (:func:`search_settings`);
    4. :func:`refit`: with ``options.refit`` (the paper's protocol, section 4.2) the model is retrained from the same
       start on training + validation text for the number of iterations validation chose.

    Returns the model and its figures; ``validation_bps`` is always the held-out figure of the selection run. With
    ``cluster`` (a ``dask.distributed.Client``, see :mod:`engine.distributed`) batch EM's E-steps run on its workers.
    """
    options.validate()
    backend = engines.resolve_backend(options.backend)
    started = time.perf_counter()
    init_model = initial_model if initial_model is not None else (load_model(options.init) if options.init else None)
    corpus = prepare_training_corpus(corpus_text, options, name, init_model)
    search: list[dict[str, Any]] = []
    try:
        if options.searches:
            selection, search = search_settings(corpus_text, corpus, options, backend, callback, cancel, name, log)
        else:
            selection = select_stage(
                corpus_text, corpus, options, init_model, backend, callback, cancel, name, log, cluster
            )
    except _StageStopped as stopped:  # cancelled or failed in the dense stage: report that run as it ended
        return stopped.outcome
    options, result, restarts, schedule = selection.options, selection.result, selection.restarts, selection.schedule
    selected = result.model
    has_validation = bool(corpus.validation_parts)
    validation_bps = _score(selected, corpus.validation_parts, backend) if has_validation else None
    trained, refit_iterations, refitted = selected, 0, False
    if options.refit and has_validation and result.stopped not in STOPPED_BAD:
        # a grown model refits from the grown dense refit (it exists whenever the dense stage refitted)
        trained, refit_iterations, refitted = refit(
            selection.refit_start if selection.refit_start is not None else selection.start,
            result,
            corpus,
            selection.config,
            backend,
            callback,
            cancel,
            log,
            grown=selection.refit_start is not None,
            cluster=cluster,
        )
    trained_on = corpus.train_full_parts if refitted else corpus.train_parts
    test = corpus.test_parts
    figures = {
        "train_bps": _score(trained, trained_on, backend),
        "validation_bps": validation_bps,
        "test_bps": _score(trained, test, backend) if test else None,
    }
    seconds = time.perf_counter() - started
    trained.metadata = {
        "engine_version": ENGINE_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "corpus": name,
        "documents": len(corpus.documents),
        "allocation": options.allocation if init_model is None else init_model.metadata.get("allocation"),
        "settings": asdict(options) | {"backend": backend},
        "seed": options.seed,
        "stopped": result.stopped,
        "best_iteration": result.best_iteration,
        "refit_iterations": refit_iterations,
        "history": [r._asdict() for r in result.history],
        "sizes": {"train": len(corpus.train), "validation": len(corpus.validation), "test": len(corpus.test)},
        **({"rare_share": placeholder_share(corpus.train_full_text)} if corpus.vocabulary is not None else {}),
        **figures,
        # continuing from a pruned model keeps it pruned (fixed_zeros) and shows the pruning it had
        **{key: init_model.metadata[key] for key in PRUNED_KEYS if key in (init_model.metadata if init_model else {})},
        **({"schedule": schedule} if schedule else {}),
        **({"restarts": restarts} if restarts else {}),
        **({"search": search} if search else {}),
    }
    trained.codec = TextCodec(corpus.normalisation, corpus.vocabulary)
    summary = {
        **figures,
        "iterations": len(result.history),
        "best_iteration": result.best_iteration,
        "refit_iterations": refit_iterations,
        "stopped": result.stopped,
        "seconds": seconds,
        "states": trained.n_states,
        "symbols": int(sum(len(x) for x in trained_on)),
        "alphabet": trained.n_symbols,
    }
    if result.online_model is not None:  # online EM epochs, then batch EM iterations
        summary["online_iterations"] = result.online_iterations
    if restarts:
        summary["restarts"] = restarts
    if search:
        summary["search"] = search
        summary["pseudocount"] = options.pseudocount
    if schedule:
        summary["schedule"] = schedule
        summary["nonzeros"] = trained.n_nonzero()
    if result.error:
        summary["error"] = result.error
    return TrainOutcome(trained, summary, result, corpus, selected)


@dataclass
class Selection:
    """Stages 2 and 3 of one setting: the options that ran (no :data:`AUTO` left), the start the refit begins from
    (and, for a grown model, the grown refit start), the selection run kept, a line per restart, the grown
    schedule, and the training loop's settings."""

    options: TrainOptions
    start: Any
    result: learning.TrainingResult
    config: learning.TrainingConfig
    refit_start: Any = None
    restarts: list[dict[str, Any]] = field(default_factory=list)
    schedule: dict[str, Any] = field(default_factory=dict)


def select_stage(
    corpus_text: str | Sequence[Any],
    corpus: text.Corpus,
    options: TrainOptions,
    init_model: CHMM | None,
    backend: str,
    callback: learning.ProgressCallback | None,
    cancel: learning.CancelToken | None,
    name: str,
    log: Callable[[str], None] | None,
    cluster: Any = None,
    restarts: int | None = None,
) -> Selection:
    """Stages 2 and 3 for concrete ``options``: the start (new, continued or grown) and the selection run on
    validation, from ``restarts`` (default ``options.resolved_restarts()``) random starts for a new model. Raises
    :class:`_StageStopped` when a grown model's dense stage was cancelled or failed."""
    grow_from = options.grow_from
    grows = engines.supports(backend, "grows")
    if grow_from is None and grows and options.states > DENSE_STATE_LIMIT and init_model is None:
        grow_from = options.states // GROW_FACTOR
    config = options.training_config()
    schedule: dict[str, Any] = {}
    refit_start = None
    if init_model is None and grow_from:
        start, refit_start, schedule = grown_starts(corpus_text, options, grow_from, callback, cancel, name, log)
        config = replace(config, algorithm="em", max_iterations=options.grow_iterations or options.iterations)
    elif init_model is None:
        start = initial_model_for(corpus, options)  # restart 0; best_of_restarts makes the others
    else:
        rng = np.random.default_rng(options.seed)
        start = extend_model(init_model, _corpus_pairs(corpus), rng, DTYPES[options.dtype])
    if log:
        log(
            f"{name}: {len(corpus.train):,} training, {len(corpus.validation):,} validation, {len(corpus.test):,} "
            f"test symbols; {start.n_states:,} states over {start.n_symbols} symbols, "
            f"{start.layout.n_blocks} blocks ({start.layout.size:,} transition entries)"
        )
    record: list[dict[str, Any]] = []
    n_restarts = options.resolved_restarts() if restarts is None else restarts
    if init_model is None and not grow_from and n_restarts > 1:
        start, result, record = best_of_restarts(
            corpus, options, config, backend, callback, cancel, cluster, log, range(n_restarts)
        )
    else:
        result = select_on_validation(start, corpus, config, backend, callback, cancel, cluster)
    return Selection(options, start, result, config, refit_start, record, schedule)


class _SearchStopped(Exception):
    """A candidate of the automatic search was cancelled or failed; ``selection`` is its run."""

    def __init__(self, selection: Selection) -> None:
        super().__init__(selection.result.stopped)
        self.selection = selection


class _OverBudget(Exception):
    """The next candidate of the automatic search would pass ``search_minutes``."""


def states_candidates(corpus: text.Corpus, options: TrainOptions) -> list[int]:
    """The numbers of states ``states=AUTO`` tries, smallest first: :data:`STATES_GRID` from two clones per symbol
    to one state per :data:`SYMBOLS_PER_STATE` training symbols (at least the smallest such), and within
    ``options.max_memory`` when set (:func:`estimate_training_memory`)."""
    low, high = 2 * corpus.n_symbols, max(1, len(corpus.train_full)) // SYMBOLS_PER_STATE
    grid = [n for n in STATES_GRID if low <= n <= high] or [max(low, min(STATES_GRID[0], high))]
    if options.max_memory is not None:
        fits = [n for n in grid if estimate_training_memory(corpus, replace(options, states=n)) <= options.max_memory]
        grid = fits or grid[:1]
    return grid


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
    backend: str,
    callback: learning.ProgressCallback | None,
    cancel: learning.CancelToken | None,
    name: str,
    log: Callable[[str], None] | None,
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
    validation BPS, iterations, seconds)."""
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
        selection = select_stage(corpus_text, corpus, concrete, None, backend, tagged, cancel, name, log, restarts=1)
        if selection.result.stopped in STOPPED_BAD:
            raise _SearchStopped(selection)
        value = _score(selection.result.model, held_out, backend)
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
            corpus, selection.options, selection.config, backend, tagged, cancel, None, log, range(1, restarts)
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


def prepare_training_corpus(
    corpus_text: str | Sequence[Any], options: TrainOptions, name: str, init_model: Any | None
) -> text.Corpus:
    """Stage 1: the corpus normalised and split as ``options`` say; continued training (``init_model``) reads the
    text with the model's own codec and alphabet."""
    codec = init_model.codec if init_model is not None else None
    return text.prepare_corpus(
        corpus_text,
        normalisation=codec.normalisation if codec is not None else options.normalisation,
        test_fraction=options.test_fraction,
        validation=options.validation,
        max_train=options.max_train,
        name=name,
        fixed_alphabet=(init_model.symbols, codec.vocabulary_list) if init_model is not None else None,
    )


def _corpus_pairs(corpus: text.Corpus) -> np.ndarray:
    """The distinct symbol pairs of the training part (train + validation), within documents."""
    codes = [pairs_in_sequence(x, corpus.n_symbols) for x in corpus.train_full_parts]
    if not codes:
        return np.zeros((0, 2), dtype=np.int64)
    return np.unique(np.concatenate(codes), axis=0)


def initial_model_for(corpus: text.Corpus, options: TrainOptions, restart: int = 0) -> CHMM:
    """Stage 2 of a new model: clones allocated by ``options.allocation`` over the training part, T random on the
    symbol pairs it has, seeded by ``options.seed`` (restart 0) or by (``options.seed``, ``restart``); aligned or
    uniform as :func:`restart_plan` says for ``options.start``."""
    n_clones = allocation.allocate_clones(
        corpus.train_full_parts, corpus.n_symbols, options.states, options.allocation, options.ngram_order
    )
    rng = np.random.default_rng(options.seed if restart == 0 else [options.seed, restart])
    aligned = restart_plan(restart, options.start)[0]
    return random_model(
        corpus.symbols,
        n_clones,
        _corpus_pairs(corpus),
        rng,
        DTYPES[options.dtype],
        concentration=SHARP_CONCENTRATION if aligned else None,
        aligned_share=ALIGNED_SHARE if aligned else 0.0,
    )


RESTART_PROCESSES_ENV = "CHMM_RESTART_PROCESSES"
"""The most restarts run at once in worker processes (default: one per core this process may use; 1 runs them one
after the other in this process)."""


def restart_processes(n_restarts: int, backend: str, cluster: Any = None) -> int:
    """How many restarts run at once: one per core (or :data:`RESTART_PROCESSES_ENV`), at most ``n_restarts``; 1 on
    a backend without the ``restart_processes`` capability (the GPU), with a cluster (its workers share each E-step
    instead), and in a process that may not start children (a daemon, such as a Celery pool worker)."""
    if n_restarts < 2 or cluster is not None or multiprocessing.current_process().daemon:
        return 1
    if not engines.supports(backend, "restart_processes"):
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    setting = os.environ.get(RESTART_PROCESSES_ENV, "").strip()
    if setting:
        cores = int(setting) if setting.isdigit() and int(setting) > 0 else 1
    return max(1, min(n_restarts, cores))


def _run_restart(
    corpus: text.Corpus,
    options: TrainOptions,
    config: learning.TrainingConfig,
    backend: str,
    restart: int,
    callback: learning.ProgressCallback | None,
    cancel: learning.CancelToken | None,
    cluster: Any = None,
) -> tuple[CHMM, learning.TrainingResult, float]:
    """One restart's selection run (start and, for online EM, lambda by :func:`restart_plan`): its start, its result
    and its held-out BPS (infinite if cancelled or failed)."""
    start = initial_model_for(corpus, options, restart)
    if config.algorithm == "online" and restart_plan(restart)[1]:
        config = replace(config, memory=RESTART_MEMORY)
    tagged = None if callback is None else (lambda r: callback(r._replace(restart=restart)))
    result = select_on_validation(start, corpus, config, backend, tagged, cancel, cluster)
    if result.stopped in STOPPED_BAD:
        return start, result, math.inf
    return start, result, _score(result.model, corpus.validation_parts or corpus.train_parts, backend)


_RESTART_WORKER: dict[str, Any] = {}
"""In a restart worker process only: the queue its progress records go to and the event that cancels it."""


ORPHAN_CHECK_S = 1.0
"""How often an idle restart worker checks that its parent still lives."""


def _restart_worker_start(queue: Any, cancelled: Any) -> None:
    os.environ[inference.ONE_THREAD_ENV] = "1"  # one core per process: the processes share the machine's cores
    _RESTART_WORKER.update(queue=queue, cancelled=cancelled, parent=os.getppid())
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()


def _exit_when_orphaned(parent: int) -> None:
    """End this worker once its parent has died (a killed job): a worker waiting for its next task holds both ends
    of the pool's pipe and would otherwise wait for ever."""
    while os.getppid() == parent:
        time.sleep(ORPHAN_CHECK_S)
    os._exit(0)


def _restart_worker_stopped() -> bool:
    """Whether this restart worker should stop: its parent cancelled, or died (killed, e.g. a revoked Celery task),
    which leaves the worker to its new parent, and it must not train on for nobody."""
    return _RESTART_WORKER["cancelled"].is_set() or os.getppid() != _RESTART_WORKER["parent"]


def _restart_in_worker(
    corpus: text.Corpus, options: TrainOptions, config: learning.TrainingConfig, backend: str, restart: int
) -> tuple[CHMM, learning.TrainingResult, float]:
    queue = _RESTART_WORKER["queue"]
    try:
        cancel = learning.CancelToken(_restart_worker_stopped)
        return _run_restart(corpus, options, config, backend, restart, queue.put, cancel)
    finally:
        queue.put(("done", restart))  # after its records: the parent shows restarts in order


def _restarts_in_processes(
    corpus: text.Corpus,
    options: TrainOptions,
    config: learning.TrainingConfig,
    backend: str,
    which: range,
    processes: int,
    callback: learning.ProgressCallback | None,
    cancel: learning.CancelToken | None,
) -> list[tuple[CHMM, learning.TrainingResult, float]]:
    """:func:`_run_restart` for every restart of ``which`` in ``processes`` worker processes (spawned: safe beside
    the app's threads). The callback sees the records restart by restart, as if they ran one after the other: the
    lowest unfinished restart's live, the later ones' when it ends; a cancel reaches every worker within a batch."""
    context = multiprocessing.get_context("spawn")
    queue, cancelled = context.Queue(), context.Event()
    waiting: dict[int, list[learning.IterationRecord]] = {r: [] for r in which}
    finished: set[int] = set()
    order = list(which)
    shown = 0
    with ProcessPoolExecutor(
        processes, mp_context=context, initializer=_restart_worker_start, initargs=(queue, cancelled)
    ) as pool:
        futures = [pool.submit(_restart_in_worker, corpus, options, config, backend, r) for r in which]
        while shown < len(order):
            if cancel is not None and cancel.cancelled:
                cancelled.set()
            if any(f.done() and f.exception() is not None for f in futures):
                break  # a worker failed (its exception is raised below)
            try:
                item = queue.get(timeout=0.2)
            except Exception:  # queue.Empty
                continue
            if isinstance(item, tuple) and item[:1] == ("done",):
                finished.add(item[1])
            else:
                waiting[item.restart].append(item)
            while shown < len(order):
                restart = order[shown]
                for record in waiting[restart]:
                    if callback is not None:
                        callback(record)
                waiting[restart] = []
                if restart not in finished:
                    break
                shown += 1
        if cancel is not None and cancel.cancelled:
            cancelled.set()
        return [f.result() for f in futures]


def restart_line(restart: int, value: float, result: learning.TrainingResult, options: TrainOptions) -> dict[str, Any]:
    """A restart's line in the summary and metadata: its held-out BPS, iterations, stop reason, start (uniform or
    aligned) and, for online EM, its lambda (:func:`restart_plan`)."""
    aligned, larger_steps = restart_plan(restart, options.start)
    line = {
        "restart": restart,
        "bps": value,
        "iterations": len(result.history),
        "stopped": result.stopped,
        "start": "aligned" if aligned else "uniform",
    }
    if options.algorithm == "online":
        line["memory"] = RESTART_MEMORY if larger_steps else options.memory
    return line


def best_of_restarts(
    corpus: text.Corpus,
    options: TrainOptions,
    config: learning.TrainingConfig,
    backend: str,
    callback: learning.ProgressCallback | None,
    cancel: learning.CancelToken | None,
    cluster: Any = None,
    log: Callable[[str], None] | None = None,
    which: range | None = None,
) -> tuple[CHMM, learning.TrainingResult, list[dict[str, Any]]]:
    """Stage 3 with restarts: :func:`select_on_validation` from random starts (:func:`initial_model_for`), restarts
    ``which`` (default all of ``options.resolved_restarts()``), in :func:`restart_processes` processes at once;
    keeps the run whose model has the lowest validation BPS (the lowest training BPS without validation text).
    Progress records carry their restart and come restart by restart. A cancelled or failed restart ends the stage
    with that run. Returns the kept run's start, its result and a line per restart."""
    which = range(options.resolved_restarts()) if which is None else which
    processes = restart_processes(len(which), backend, cluster)
    if processes > 1:
        runs = iter(_restarts_in_processes(corpus, options, config, backend, which, processes, callback, cancel))
    else:  # one after the other, each started only when the one before ended well
        runs = (_run_restart(corpus, options, config, backend, r, callback, cancel, cluster) for r in which)
    best: tuple[float, CHMM, learning.TrainingResult] | None = None
    record: list[dict[str, Any]] = []
    for restart, (start, result, value) in zip(which, runs, strict=False):
        if result.stopped in STOPPED_BAD:
            return start, result, record
        record.append(restart_line(restart, value, result, options))
        if log:
            log(f"restart {restart + 1}: {'validation' if corpus.validation_parts else 'training'} BPS {value:.4f}")
        if best is None or value < best[0]:
            best = (value, start, result)
    assert best is not None
    return best[1], best[2], record


def select_on_validation(
    start: Any,
    corpus: text.Corpus,
    config: learning.TrainingConfig,
    backend: str,
    callback: learning.ProgressCallback | None,
    cancel: learning.CancelToken | None,
    cluster: Any = None,
) -> learning.TrainingResult:
    """Stage 3: train on the training part, keeping the model best on the validation part (early stopping). Online
    EM is followed, with validation text, by batch EM from its best model (the paper's recipe of section 4.2: It_1
    iterations of online EM, then It_2 of batch EM, both chosen on validation); the result's history holds both and
    ``online_model`` the online stage's model."""
    validation = corpus.validation_parts or None
    result = learning.fit(
        start, corpus.train_parts, validation, config, callback, cancel, backend=backend, cluster=cluster
    )
    if config.algorithm != "online" or validation is None or result.stopped in STOPPED_BAD:
        return result
    online_epochs = len(result.history)
    shifted = None if callback is None else (lambda r: callback(r._replace(iteration=r.iteration + online_epochs)))
    batch_config = replace(config, algorithm="em")
    batch = learning.fit(
        result.model, corpus.train_parts, validation, batch_config, shifted, cancel, backend=backend, cluster=cluster
    )
    batch.history = result.history + [r._replace(iteration=r.iteration + online_epochs) for r in batch.history]
    batch.online_model = result.model
    batch.online_iterations = online_epochs
    batch.best_iteration = online_epochs + batch.best_iteration if batch.best_iteration else result.best_iteration
    return batch


def refit(
    start: Any,
    selection: learning.TrainingResult,
    corpus: text.Corpus,
    config: learning.TrainingConfig,
    backend: str,
    callback: learning.ProgressCallback | None,
    cancel: learning.CancelToken | None,
    log: Callable[[str], None] | None,
    grown: bool = False,
    cluster: Any = None,
) -> tuple[Any, int, bool]:
    """Stage 4, the paper's protocol: the validation split chose the number of iterations; train from the same start
    on training + validation text for that many. A grown start is already the dense refit, grown: with no sparse
    iteration chosen it is the model. Returns (model, refit iterations, whether the model is a refit). A cancelled
    or failed refit marks ``selection`` so. After online EM the refit continues from the online stage's model
    with the batch EM iterations chosen (see :func:`select_on_validation`)."""
    iterations = selection.best_iteration
    if selection.online_model is not None:  # online EM, then batch EM (see select_on_validation)
        # online EM's path from the same start on other text is another random walk: the refit continues from the
        # online stage's model with the batch EM iterations that validation chose
        start = selection.online_model
        iterations = max(0, iterations - selection.online_iterations)
        config = replace(config, algorithm="em")
    if iterations == 0:
        return (start, 0, True) if grown else (selection.model, 0, False)
    if log:
        log(f"refitting on training + validation text for {iterations} iteration(s)")
    refit_config = replace(config, max_iterations=iterations, tolerance=0.0)
    tagged = None if callback is None else (lambda r: callback(r._replace(refit=True)))
    again = learning.fit(
        start, corpus.train_full_parts, None, refit_config, tagged, cancel, backend=backend, cluster=cluster
    )
    if again.stopped in STOPPED_BAD:
        selection.stopped, selection.error = again.stopped, again.error
    return again.model, iterations, True


class _StageStopped(Exception):
    """The dense stage of a grown model was cancelled or failed; ``outcome`` is that stage's run."""

    def __init__(self, outcome: TrainOutcome) -> None:
        super().__init__(outcome.result.stopped)
        self.outcome = outcome


DENSE_STATE_LIMIT = 10_000
"""Above this many states, CPU training grows the model from a dense one (see :func:`grown_starts`)."""
GROW_FACTOR = 10


def grown_starts(
    corpus_text: str | Sequence[Any],
    options: TrainOptions,
    grow_from: int,
    callback: learning.ProgressCallback | None,
    cancel: learning.CancelToken | None,
    name: str,
    log: Callable[[str], None] | None,
) -> tuple[Any, Any, dict[str, Any]]:
    """Stage 2 of a grown model (paper-scale models on the CPU): train a dense model of ``grow_from`` states with the
    same settings and protocol (early stopping on validation, then the refit unless turned off), prune it at
    ``options.grow_threshold``, and split its clones up to ``options.states`` in proportion to the clones each symbol
    has (:func:`engine.sparse.split_clones`: exact, plus ``options.grow_noise`` to break the copies' symmetry).
    Returns the grown selection model (from the dense selection run, for sparse EM with early stopping on
    validation), the grown refit model (from the dense refit, or None without refit) and a record of the stage."""
    if log:
        log(f"growing: first a dense model of {grow_from:,} states")
    base = train_text(corpus_text, replace(options, states=grow_from, grow_from=0), callback, cancel, name, log)
    if base.result.stopped in STOPPED_BAD:
        raise _StageStopped(base)

    def grow(model: CHMM) -> Any:
        pruned = graph_mod.prune(model, threshold=options.grow_threshold)
        targets = pruned.n_clones + allocation.largest_remainder(pruned.n_clones, options.states - pruned.n_states)
        grown = sparse_mod.split_clones(pruned, targets, np.random.default_rng(options.seed), options.grow_noise)
        grown.metadata = {}
        return grown, pruned.metadata["pruned"]["kept_fraction"]

    selection, kept = grow(base.selected)
    refit_start = grow(base.model)[0] if options.refit else None
    schedule = {
        "grow_from": grow_from,
        "base_test_bps": base.summary["test_bps"],
        "base_validation_bps": base.summary["validation_bps"],
        "base_iterations": base.summary["iterations"],
        "base_refit_iterations": base.summary["refit_iterations"],
        "base_seconds": base.summary["seconds"],
        "threshold": options.grow_threshold,
        "base_kept_fraction": kept,
        "noise": options.grow_noise,
        "nonzeros_after_split": selection.n_nonzero(),
    }
    if log:
        log(
            f"grown to {selection.n_states:,} states: {selection.n_nonzero():,} stored transitions (dense stage: "
            f"test BPS {base.summary['test_bps']:.4f}, pruned to {kept:.2%} at {options.grow_threshold:g}); "
            "sparse batch EM follows"
        )
    return selection, refit_start, schedule


def extend_model(model: CHMM, pairs: np.ndarray, rng: np.random.Generator, dtype: Any) -> CHMM:
    """Continue from ``model`` on new data: keep its blocks and values, add random blocks for symbol pairs the
    new data has and the model lacks (weighted 1e-3 against the existing row mass), renormalise rows."""
    layout = model.layout
    known = {(int(i), int(j)) for i, j in layout.block_pairs}
    extra = [p for p in map(tuple, pairs.tolist()) if p not in known]
    if not extra:
        return model.with_arrays(T=model.T.astype(dtype), pi=model.pi.astype(dtype), counts=None)
    new_layout = model_io.BlockLayout.build(layout.n_clones, np.concatenate([layout.block_pairs, np.array(extra)]))
    raw = np.zeros(new_layout.size)
    for k, (i, j) in enumerate(new_layout.block_pairs):
        lo, hi = new_layout.block_offset[k], new_layout.block_offset[k + 1]
        old = layout.block_index[i, j]
        if old >= 0:
            raw[lo:hi] = model.T[layout.block_offset[old] : layout.block_offset[old + 1]]
        else:
            raw[lo:hi] = 1e-3 * rng.random(hi - lo) / new_layout.n_clones[j]
    T = model_io.normalise_rows(new_layout, raw, 0.0, dtype)
    return model.with_arrays(layout=new_layout, T=T, pi=model.pi.astype(dtype), counts=None)


PRUNED_KEYS = ("pruned", "pruned_history")
"""Metadata of a pruned model that training from it (``init``) carries over, to show people."""

TRANSITION_ENTRY_BYTES = 20
MESSAGE_COPIES = 3


def estimate_training_memory(corpus: text.Corpus, options: TrainOptions) -> int:
    """Rough peak memory (bytes) of training a new model with ``options`` on ``corpus``, to refuse impossible
    runs before any work: ``TRANSITION_ENTRY_BYTES`` per stored transition entry (the sum over the symbol pairs
    seen in training of M_i * M_j: T, the expected counts, the M-step buffers and the best model kept) plus the
    forward/backward messages (alpha, beta and their pair-sorted copies: ``MESSAGE_COPIES`` values per clone of
    each symbol of the longest sequence processed at once, one batch for online EM). Raises ValueError when
    ``options.states`` is smaller than the alphabet. With ``states`` :data:`AUTO`, the largest candidate's
    (:func:`states_candidates`)."""
    if options.states == AUTO:
        return max(
            estimate_training_memory(corpus, replace(options, states=n)) for n in states_candidates(corpus, options)
        )
    if options.states < corpus.n_symbols:
        raise ValueError(
            f"{options.states} states are fewer than the {corpus.n_symbols} symbols of the alphabet; "
            "every symbol needs at least one clone"
        )
    train = corpus.train_full
    n_clones = allocation.allocate_clones(
        train, corpus.n_symbols, options.states, options.allocation, options.ngram_order
    )
    pairs = pairs_in_sequence(train, corpus.n_symbols)
    entries = int(np.sum(n_clones[pairs[:, 0]] * n_clones[pairs[:, 1]]))
    message_values = float(np.bincount(train, minlength=corpus.n_symbols) @ n_clones)
    batch_size = options.batch_size or learning.automatic_batch_size(len(pairs))
    if options.algorithm == "online" and len(train) > batch_size:
        message_values *= batch_size / len(train)
    itemsize = np.dtype(DTYPES[options.dtype]).itemsize
    return int(entries * TRANSITION_ENTRY_BYTES + MESSAGE_COPIES * itemsize * message_values)


# ------------------------------------------------------------------------------------------ using a model
def load_model(path: str | Path, max_bytes: int = MAX_MODEL_BYTES) -> CHMM:
    """Load a model file, dense or sparse, told apart by its header (clear :class:`engine.model.ModelFormatError` on
    a missing, damaged or foreign file). The file is untrusted input: its arrays are checked against its layout and
    all together against ``max_bytes`` before they are inflated (:mod:`engine.archive`)."""
    header = read_header(path) if Path(path).is_file() else None
    kind = header.get("format") if header is not None else None
    if kind == PEER_FORMAT:
        raise model_io.ModelFormatError(
            f"{path}: a {header.get('kind')!r} peer-learner model; only `chmm score` reads those (this needs a CHMM)"
        )
    return engines.reader_for(kind)(path, max_bytes=max_bytes)


def save_model(model: Any, path: str | Path) -> None:
    """Save atomically (temporary file + rename): a failure leaves an existing file untouched."""
    model.save(path)


SPARSE_TOOL_LIMIT = engines.SPARSE_TOOL_LIMIT


def dense_for_tools(model: Any, what: str) -> CHMM:
    """``model`` as dense blocks for a tool that needs them: a sparse model up to :data:`SPARSE_TOOL_LIMIT` states is
    converted; a larger one raises a clear ValueError (its dense blocks would not fit this machine)."""
    engine = engines.engine_for(model)
    return engine.as_dense(engine.load(model), what)


def encode_for_model(model: CHMM, raw_text: str) -> np.ndarray:
    """Normalise raw text the way the model's training corpus was (the model's codec) and map it to symbol indices;
    characters outside the alphabet raise a clear ValueError."""
    normalised = model.codec.normalise(raw_text)
    if not normalised:
        raise text.CorpusError("the text is empty after the model's normalisation")
    return model.encode(normalised)


@dataclass(frozen=True)
class RareWords:
    """How many of a text's words the model's normalisation replaces by the placeholder ``rare`` (words outside
    its vocabulary: the paper's normalisation keeps the words seen at least twice in the training part), of how
    many words, with a few of them; ``training_share`` is the share of ``rare`` among the training text's words
    (None when unknown)."""

    replaced: int
    words: int
    examples: list[str]
    training_share: float | None

    @property
    def share(self) -> float:
        return self.replaced / self.words if self.words else 0.0

    @property
    def far_from_training(self) -> bool:
        """Whether the text's count is far from what the training text's share predicts: further from n p than
        three binomial standard deviations plus one word, and by more than half of n p (34 of 188 words against a
        share of 6% is; 13 of 228 is not, nor 0 of 15)."""
        if self.training_share is None or not self.words:
            return False
        p = self.training_share
        expected = self.words * p
        gap = abs(self.replaced - expected)
        return gap > 3.0 * math.sqrt(self.words * p * (1.0 - p)) + 1.0 and gap > 0.5 * expected


def rare_words(model: CHMM, raw_text: str, examples: int = 8) -> RareWords:
    """Count the words of ``raw_text`` the model reads as the placeholder ``rare`` (:class:`RareWords`; none for a
    model without a vocabulary)."""
    codec = model.codec
    base = text.apply_normalisation(raw_text, codec.normalisation, None)
    words = [w for w in base.split(" ") if w]
    share = model.metadata.get("rare_share")
    training = float(share) if isinstance(share, (int, float)) else None
    if codec.vocabulary is None:
        return RareWords(0, len(words), [], training)
    known = frozenset(codec.vocabulary)
    replaced = [w for w in words if w not in known]
    return RareWords(len(replaced), len(words), list(dict.fromkeys(replaced))[:examples], training)


def placeholder_share(normalised_text: str) -> float:
    """The share of the placeholder ``rare`` among the words of an already normalised text."""
    words = [w for w in normalised_text.split(" ") if w]
    return sum(1 for w in words if w == text.RARE_WORD) / len(words) if words else 0.0


def score_text(model: CHMM, raw_text: str, backend: str = "cpu") -> inference.ScoreResult:
    """Bits per symbol of raw text under the model (with the documented back-off, see inference.score), on the CPU
    or the GPU engine ("auto": the GPU when usable)."""
    x = encode_for_model(model, raw_text)
    engine = engines.engine_for(model, backend)
    return engine.score(engine.load(model), x)


def surprisal_text(model: CHMM, raw_text: str) -> tuple[str, np.ndarray]:
    """``raw_text`` normalised like the model's corpus (one character per symbol) and every symbol's surprisal
    -log2 P(x_n | x_<n) in bits, as the BPS counts it (their mean is :func:`score_text`'s BPS)."""
    x = encode_for_model(model, raw_text)
    engine = engines.engine_for(model)
    bits = engine.surprisal(engine.load(model), x)
    return "".join(model.symbols[int(i)] for i in x), bits


def sample_text(model: CHMM, length: int, seed: int = 0, prefix: str | None = None) -> str:
    """``length`` sampled symbols as text, continuing ``prefix`` (normalised like the model's corpus) if given."""
    rng = np.random.default_rng(seed)
    encoded = encode_for_model(model, prefix) if prefix else None
    engine = engines.engine_for(model)
    return model.decode_symbols(engine.sample(engine.load(model), length, rng, encoded))


# ------------------------------------------------------------------------------------------ decoding scrambled text
def decode_text(model: CHMM, raw_text: str, constrained: bool = False) -> scramble.DecodeResult:
    """Decode scrambled text (word interiors permuted) by MAP inference with uncertain evidence for the word
    interiors (paper, section 4.2.2; see :func:`engine.scramble.decode_scrambled`). The result holds the decoded
    text, the changed positions against the normalised input (``scramble.mark_changes(result.scrambled,
    result.decoded)`` marks them) and the log-probability of the decoding."""
    return scramble.decode_scrambled(dense_for_tools(model, "decoding"), raw_text, constrained=constrained)


# ------------------------------------------------------------------------------------------ the learned graph
DEFAULT_PRUNE_THRESHOLD = 1e-3


@dataclass
class PruneOutcome:
    """The pruned model and its figures (the CLI's ``--json`` object): threshold, kept_fraction, non-zeros
    before/after, and the BPS of the validation text before/after (None without one)."""

    model: CHMM
    summary: dict[str, Any]


def prune_model(
    model: CHMM,
    threshold: float | None = DEFAULT_PRUNE_THRESHOLD,
    top_mass: float | None = None,
    viterbi_text: str | None = None,
    validation_text: str | None = None,
) -> PruneOutcome:
    """Prune ``model`` (see :func:`engine.graph.prune`): entries below ``threshold``, beyond the ``top_mass``
    share of each row, or outside the clones the Viterbi path of ``viterbi_text`` uses (raw text, normalised
    like the model's corpus). With ``validation_text`` the summary has its BPS before and after."""
    if threshold is not None:
        threshold = graph_mod.check_threshold(threshold)
    validation = encode_for_model(model, validation_text) if validation_text else None
    engine = engines.engine_for(model)
    if top_mass is None and viterbi_text is None and threshold:
        pruned: Any = engine.host(engine.prune(engine.load(model), threshold))
    else:
        model = dense_for_tools(model, "pruning by top mass or Viterbi clones")
        keep = graph_mod.viterbi_clones(model, encode_for_model(model, viterbi_text)) if viterbi_text else None
        pruned = graph_mod.prune(model, threshold=threshold, top_mass=top_mass, keep_clones=keep)
    record = pruned.metadata["pruned"]
    summary: dict[str, Any] = {
        "threshold": threshold,
        "kept_fraction": record["kept_fraction"],
        "nonzeros_before": record["nonzeros_before"],
        "nonzeros_after": record["nonzeros_after"],
        "bps_before": None,
        "bps_after": None,
    }
    if top_mass is not None:
        summary["top_mass"] = top_mass
    if viterbi_text is not None:
        summary["viterbi_clones"] = int(pruned.metadata["pruned"].get("kept_clones", 0))
    if validation is not None:
        before = engine.score(engine.load(model), validation)
        pruned_engine = engines.engine_for(pruned)
        after = pruned_engine.score(pruned_engine.load(pruned), validation)
        summary.update(
            bps_before=before.bps, bps_after=after.bps, zero_probability_events=after.zero_probability_events
        )
        pruned.metadata["pruned"].update(bps_before=before.bps, bps_after=after.bps)
    return PruneOutcome(pruned, summary)


def prune_sweep_text(model: CHMM, thresholds: list[float], validation_text: str) -> list[graph_mod.SweepPoint]:
    """Kept share of the non-zeros and validation BPS for each threshold (the paper's Fig 3(d))."""
    return graph_mod.prune_sweep(
        model, [graph_mod.check_threshold(t) for t in thresholds], encode_for_model(model, validation_text)
    )


def held_out_split_text(model: CHMM, raw_text: str) -> tuple[str, str] | None:
    """The part of ``raw_text`` that the model's training run held out, exactly as that run split it (its recorded
    normalisation, test share, validation share and training cap, its alphabet and vocabulary), as normalised text,
    with its name: the validation part ("validation"), or the test part ("test") when the run refitted on training
    + validation text, which then is no longer held out. None when ``raw_text`` is not the model's training corpus
    (its split sizes differ from those the model recorded) or the model has no validation split."""
    settings = model.metadata.get("settings") or {}
    sizes = model.metadata.get("sizes") or {}
    if not settings or not sizes.get("validation"):
        return None
    try:
        corpus = text.prepare_corpus(
            raw_text,
            normalisation=model.codec.normalisation,
            test_fraction=settings.get("test_fraction", 0.1),
            validation=settings.get("validation", 0.1),
            max_train=settings.get("max_train"),
            fixed_alphabet=(model.symbols, model.codec.vocabulary_list),
        )
    except (text.CorpusError, ValueError):
        return None
    if (len(corpus.train), len(corpus.validation)) != (sizes.get("train"), sizes.get("validation")):
        return None
    refitted = bool(settings.get("refit")) and (
        (model.metadata.get("refit_iterations") or 0) > 0 or bool(model.metadata.get("schedule"))
    )
    if refitted:
        return (corpus.test_text, "test") if corpus.test_text else None
    return corpus.validation_text, "validation"


def reference_text(model: CHMM, raw_text: str) -> str:
    """``raw_text`` normalised like the model's corpus: the reference that marks generalized words seen/novel."""
    return model.codec.normalise(raw_text)


def model_communities(
    model: CHMM,
    threshold: float | None = DEFAULT_PRUNE_THRESHOLD,
    options: communities_mod.CommunityOptions | None = None,
    corpus_text: str | None = None,
) -> communities_mod.Communities:
    """Prune at ``threshold`` (None: use the model as it is), build the clone graph and run Infomap on it; the
    generalized words are marked seen/novel against ``corpus_text`` (raw training text) when given."""
    options = options or communities_mod.CommunityOptions()
    options.validate()
    reference = reference_text(model, corpus_text) if corpus_text else None
    return communities_mod.find_communities(model_graph(model, threshold), options, reference)


def model_graph(model: CHMM, threshold: float | None = DEFAULT_PRUNE_THRESHOLD) -> graph_mod.CloneGraph:
    """The clone graph :func:`model_communities` partitions (pruned at ``threshold``; None: the model as it is),
    without running Infomap."""
    if threshold is not None:
        threshold = graph_mod.check_threshold(threshold)
        engine = engines.engine_for(model)
        model = engine.host(engine.prune(engine.load(model), threshold))
    return graph_mod.clone_graph(model)


def write_communities(result: communities_mod.Communities, directory: str | Path) -> list[str]:
    """Write the result folder (modules.csv, modules.json, clones.tree/.ftree/.clu numbered as the whole graph's
    Pajek export, :func:`engine.export.partition_texts`) with nothing partial left on failure; returns the paths
    written."""
    return communities_mod.write_result(result, str(directory), export_mod.partition_texts(result))


def graph_edges(model: CHMM, threshold: float) -> int:
    """How many edges the clone graph pruned at ``threshold`` has: the stored transitions with T >= threshold (as
    :func:`engine.graph.prune` keeps them), counted without building the graph."""
    return int(np.count_nonzero(np.asarray(model.T) >= threshold))


def export_model_graph(
    model: CHMM,
    path: str | Path,
    fmt: str,
    module: str | None = None,
    threshold: float | None = DEFAULT_PRUNE_THRESHOLD,
    options: communities_mod.CommunityOptions | None = None,
    corpus_text: str | None = None,
) -> dict[str, Any]:
    """Export the clone graph of ``model`` (pruned at ``threshold``), or one module's subgraph, in ``fmt`` (see
    :data:`engine.export.FORMATS`). Infomap runs first (same settings give the same module ids as
    :func:`model_communities`), so nodes carry ``module`` and ``path``. Returns the export's figures, with an
    informative ``file_name`` (:func:`engine.export.export_file_name`)."""
    if fmt not in export_mod.FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(export_mod.FORMATS)}")
    result = model_communities(model, threshold, options, corpus_text)
    summary = export_mod.export_graph(result.graph, path, fmt, result, module)
    name = export_mod.export_file_name(result.graph, fmt, module)
    return summary | {"modules": len(result.top_modules), "file_name": name}


@dataclass(frozen=True)
class ClonePath:
    """The Viterbi clone path of a word or phrase (:func:`clone_path`): the text as the model read it (normalised,
    spaces around it), each position's clone, and the words the model's normalisation replaced by ``rare``."""

    text: str
    clones: np.ndarray
    log_probability: float
    replaced: list[str]


def clone_path(model: CHMM, raw_text: str) -> ClonePath:
    """The MAP clone path (Viterbi) of ``raw_text`` normalised as the model's corpus was, read as it occurs inside
    a text: with a space before and after when the alphabet has one. ValueError for text that is empty after
    normalisation, characters outside the alphabet, or text the model gives probability zero."""
    normalised = model.codec.normalise(raw_text).strip(" ")
    if not normalised:
        raise text.CorpusError("the text is empty after the model's normalisation")
    base = text.apply_normalisation(raw_text, model.codec.normalisation, None).strip(" ").split(" ")
    replaced = [w for w, n in zip(base, normalised.split(" "), strict=False) if n == text.RARE_WORD != w]
    spaced = f" {normalised} " if " " in model.symbols else normalised
    engine = engines.engine_for(model)
    result = engine.viterbi(engine.load(model), model.encode(spaced))
    if not np.isfinite(result.log_probability):
        raise ValueError("the model gives this text probability zero, so it has no clone path")
    return ClonePath(spaced, np.asarray(result.clones, dtype=np.int64), float(result.log_probability), replaced)


def scramble_for_model(model: CHMM, raw_text: str, seed: int = 0) -> str:
    """``raw_text`` normalised as :func:`decode_text` normalises it, with the interior letters of every word
    permuted by a generator seeded with ``seed`` (see :func:`engine.scramble.scramble_text`). Raises ValueError
    for text that is empty after normalisation or has characters outside the model's alphabet."""
    normalised = normalise_for_decoding(model, raw_text)
    return scramble.scramble_text(normalised, np.random.default_rng(seed))


def normalise_for_decoding(model: CHMM, raw_text: str) -> str:
    """``raw_text`` normalised as :func:`decode_text` and :func:`scramble_for_model` normalise it (the text a
    decoding is compared with). ValueError for text that is empty after normalisation or has characters outside
    the model's alphabet."""
    normalised = scramble.normalise_for_decoding(model, raw_text)
    if not normalised:
        raise text.CorpusError("the text is empty after the model's normalisation")
    scramble.scramble_evidence(model, normalised)  # a clear error for characters outside the alphabet
    return normalised
