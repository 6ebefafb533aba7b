"""The settings of a training run (:class:`TrainOptions`, recorded in the model), the protocol's constants and
result types, and the memory a run needs before it starts."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from engine.backends import chunks, engines
from engine.corpora import allocation, text
from engine.corpora.allocation import DEFAULT_NGRAM_ORDER
from engine.errors import CHMMError
from engine.model.blocks import pairs_in_sequence
from engine.model.dense import CHMM, MAX_STATES
from engine.training import learning

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

MOST_SYMBOLS_PER_STATE = 1_000
"""The automatic search leaves out numbers of states with more than this many training symbols each, up to
:data:`LARGEST_FIRST_STATES`: on eleven corpora of the benchmarks it never kept fewer states than one per 313
training symbols (Tiny Shakespeare, 3,000 states), and on Milton its three 300-state candidates took 1.3 of its 10
minutes (bench/RESULTS.md, issue 34)."""

LARGEST_FIRST_STATES = 1_000
"""The most states the search's first candidate has, however long the text: the budget cannot stop a first
candidate, and a first candidate of 3,000 states on War and Peace (2.76 million symbols) ran for more than half an
hour on 2 cores (bench/RESULTS.md, issue 34)."""


DEVICE_FIRST_STATES = 10_000
"""The most states the search's first candidate has on a latency-bound implementation (a GPU; the capability
``latency_bound``): there a step of online EM's exact passes costs about the same whatever the number of states up to
tens of thousands (about 4 us), so small candidates buy nothing. Measured on an H200 (bench/RESULTS.md, issue 49):
`chmm train calgary-book1.txt --backend gpu --budget 3.5` spent its minutes on three 1,000-state candidates (the
first 90 s) and ended 0.136 bits above our n-gram."""

DEVICE_PREDICTION_EXPONENT = 0.5
"""On a latency-bound implementation, the exponent :func:`engine.training.search.predict_stages` scales a stage's
measured seconds per epoch or iteration by (the stored entries' ratio) before two numbers of states ran it (1
elsewhere): its seconds grow far slower than the model's memory."""

SUPPORT_BOUND = 0.0
"""Bits of validation BPS that pruning the online model before batch EM may cost (``TrainOptions.support_bound``,
``--support-bound``; :mod:`engine.training.support`); 0, the default, trains on every stored entry. Off by default as
measured: after online EM, and after each of 8 batch iterations, pruning costs more than 0.002 bits at every threshold
of :data:`PRUNE_THRESHOLDS` on alice at 1,000 states (0.004-0.074 bits) and on chesterton-brown at 3,000 (0.003-0.099),
so the rule would only spend its trials (bench/RESULTS.md, issue 48)."""

BUDGET_MINUTES = 10.0
"""The default wall-clock budget of the automatic search (minutes on the machine at hand): the candidates and the
chosen setting's restarts fit in it; the refit on training + validation text comes after it."""


REFIT_SHARE = 0.3
"""The refit's expected time as a share of the search's budget (it runs the chosen candidate's batch EM iterations
again, on training + validation text): the basis of :func:`expected_minutes`, checked against the time taken by
``bench/bench_defaults.py``."""


def expected_minutes(options: TrainOptions) -> float | None:
    """The wall-clock minutes a run with ``options`` is expected to take, stated before it starts: with an automatic
    search, its budget plus the refit (:data:`REFIT_SHARE` of it, none without refit); None without a search or a
    budget (there is no basis before the first iteration)."""
    if not options.searches or options.budget is None:
        return None
    return float(options.budget) * (1.0 + (REFIT_SHARE if options.refit else 0.0))


def expected_sentence(options: TrainOptions) -> str | None:
    """:func:`expected_minutes` in words for people (the CLI and the Train page say the same), or None."""
    minutes = expected_minutes(options)
    if minutes is None:
        return None
    plural = "" if round(minutes) == 1 else "s"
    about = "Under a minute" if minutes < 1 else f"At most about {minutes:.0f} minute{plural}"
    refit = ", then the refit" if options.refit else ""
    return (
        f"{about}: the states and pseudocount chosen on validation within {options.budget:g} min{refit} (less when "
        "more states stop helping sooner)."
    )


SHARP_CONCENTRATION = 0.1
"""Aligned restarts draw T from a Dirichlet of this concentration (clones close to a few successors) before the
aligned share is added (:data:`ALIGNED_SHARE`)."""


ALIGNED_SHARE = 0.9
"""An aligned start is a sharp draw (:data:`SHARP_CONCENTRATION`) with this share of every row on its aligned
entries, clone c of one symbol to clone c of the next (:func:`engine.model.blocks.align_rows`). From such starts online
EM left the toy FSM's plateaus in 20 of 20 restarts at k = 3, 4 and 5, where uniform starts stay on them for whole seeds
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
    """Everything that defines a training run (recorded in the model's metadata). The defaults are the recipe that
    wins on text, the same for the command line, the app and the Python API: online EM then batch EM from the best
    online epoch (the paper's Table 4 recipe), with the number of states and the pseudocount chosen on validation
    within :data:`BUDGET_MINUTES` (``budget``), then the refit on training + validation text."""

    states: int | str = AUTO  # or a number
    allocation: str = "ngram"
    ngram_order: int = DEFAULT_NGRAM_ORDER
    normalisation: str = "paper"
    unit: str = text.UNITS[0]  # what one symbol is: characters, words or tokens
    min_count: int = text.MIN_COUNT  # words and tokens seen fewer times in training become one rare symbol
    by_sequence: bool = False  # many short sequences (lines, cases): the last tenth of them is the test part
    algorithm: str = "online"
    iterations: int = 100
    batch_size: int | None = None
    memory: float = 0.9
    validation: float = 0.1
    test_fraction: float = 0.1
    max_train: int | None = None
    pseudocount: float | str = AUTO  # or a number
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
    budget: float | None = BUDGET_MINUTES  # minutes the automatic search (AUTO) may take; None: no limit
    support_bound: float = SUPPORT_BOUND  # bits of validation BPS batch EM on the support may cost; 0: every entry

    @property
    def searches(self) -> bool:
        """Whether the number of states or the pseudocount is chosen on validation (:func:`search_settings`): for a
        new model (one continued with ``init`` keeps its own, see :meth:`continuing`)."""
        return (self.states == AUTO or self.pseudocount == AUTO) and self.init is None

    def continuing(self, model: CHMM) -> TrainOptions:
        """These options for continuing ``model``: its number of states, and where the pseudocount is :data:`AUTO`
        the one ``model`` was trained with (:data:`FIRST_PSEUDOCOUNT` when its file does not say); ``init`` is spent
        (validate the options as given first: the rules of continuing a model read it)."""
        if self.unit not in (text.UNITS[0], model.codec.unit):
            raise CHMMError(
                f"the model to continue reads {model.codec.unit}, not {self.unit}: leave out the unit (--unit), "
                "a continued model keeps its own"
            )
        pseudocount = self.pseudocount
        if pseudocount == AUTO:
            recorded = (model.metadata.get("settings") or {}).get("pseudocount")
            ok = isinstance(recorded, (int, float)) and not isinstance(recorded, bool) and recorded >= 0
            pseudocount = float(recorded) if ok and math.isfinite(recorded) else FIRST_PSEUDOCOUNT
        return replace(self, states=model.n_states, pseudocount=pseudocount, init=None)  # the model is given now

    def validate(self, cluster: bool = False) -> None:
        """Raise ValueError (one clear sentence) on impossible settings, before any work is done: every rule of the
        training settings, for the command line, the app's form and job service, and the cluster alike
        (``cluster``: batch EM's E-step will run on a Dask cluster)."""
        if self.states != AUTO and (
            isinstance(self.states, bool) or not isinstance(self.states, int) or not 2 <= self.states <= MAX_STATES
        ):
            raise CHMMError(
                f"the number of states must be an integer from 2 to {MAX_STATES:,} or {AUTO!r}, got {self.states!r}"
            )
        if self.pseudocount != AUTO and (
            isinstance(self.pseudocount, (bool, str)) or not (self.pseudocount >= 0 and math.isfinite(self.pseudocount))
        ):
            raise CHMMError(f"the pseudocount must be a number at least 0 or {AUTO!r}, got {self.pseudocount!r}")
        if isinstance(self.support_bound, bool) or not (
            isinstance(self.support_bound, (int, float)) and 0 <= self.support_bound < math.inf
        ):
            raise CHMMError(f"the support bound must be a number of bits at least 0, got {self.support_bound!r}")
        if self.budget is not None and (
            isinstance(self.budget, bool) or not isinstance(self.budget, (int, float)) or not 0 < self.budget < math.inf
        ):
            raise CHMMError(f"the budget must be a positive number of minutes, got {self.budget!r}")
        if self.searches and not self.validation:
            raise CHMMError(
                f"the states and pseudocount ({AUTO!r}) are chosen on the validation text: give a validation share "
                "above 0, or give both"
            )
        if self.states == AUTO and self.grow_from:
            raise CHMMError(f"--grow-from needs a number of states, not {AUTO!r}")
        if self.allocation not in allocation.ALLOCATION_METHODS:
            raise CHMMError(
                f"unknown allocation {self.allocation!r}; choose one of {', '.join(allocation.ALLOCATION_METHODS)}"
            )
        if self.normalisation not in text.NORMALISATIONS:
            raise CHMMError(
                f"unknown normalisation {self.normalisation!r}; choose one of {', '.join(text.NORMALISATIONS)}"
            )
        if self.unit not in text.UNITS:
            raise CHMMError(f"unknown unit {self.unit!r}; choose one of {', '.join(text.UNITS)}")
        if isinstance(self.min_count, bool) or not isinstance(self.min_count, int) or self.min_count < 1:
            raise CHMMError(f"the minimum count must be an integer of at least 1, got {self.min_count!r}")
        if self.dtype not in DTYPES:
            raise CHMMError(f"dtype must be one of {', '.join(DTYPES)}")
        if self.start not in STARTS:
            raise CHMMError(f"unknown start {self.start!r}; choose one of {', '.join(STARTS)}")
        if not 0.0 <= self.validation <= 0.5:
            raise CHMMError(f"the validation share must lie in [0, 0.5], got {self.validation}")
        if not 0.0 <= self.test_fraction <= 0.5:
            raise CHMMError(f"the test share must lie in [0, 0.5], got {self.test_fraction}")
        if self.seed < 0:
            raise CHMMError("the seed must be a non-negative integer")
        if self.restarts is not None and not 1 <= self.restarts <= MAX_RESTARTS:
            raise CHMMError(f"the number of restarts must be from 1 to {MAX_RESTARTS}, got {self.restarts!r}")
        if self.init is not None and self.states != AUTO:
            raise CHMMError("--init continues a model with its own states: leave out the number of states (--states)")
        if self.restarts not in (None, 1) and self.init is not None:
            raise CHMMError("restarts start from random models; --init continues one model: leave out --restarts")
        if self.grow_from is not None and self.grow_from != 0 and not 2 <= self.grow_from < int(self.states):
            raise CHMMError(
                f"--grow-from must be at least 2 and below the number of states ({self.states}), got {self.grow_from}"
            )
        if not 0.0 < self.grow_threshold < 1.0:
            raise CHMMError(f"the grow threshold must lie strictly between 0 and 1, got {self.grow_threshold}")
        if self.grow_iterations is not None and self.grow_iterations < 1:
            raise CHMMError("the grown model's iterations must be at least 1")
        if not 0.0 <= self.grow_noise < 1.0:
            raise CHMMError(f"the grow noise must lie in [0, 1), got {self.grow_noise}")
        self._validate_budget_and_chunks(cluster)
        chosen = replace(self, pseudocount=FIRST_PSEUDOCOUNT) if self.pseudocount == AUTO else self
        chosen.training_config().validate()

    def _validate_budget_and_chunks(self, cluster: bool) -> None:
        """The rules of the search's budget, of chunks and burn-in, and of the cluster."""
        if self.budget != BUDGET_MINUTES and self.budget is not None and not self.searches:
            raise CHMMError(
                "--budget bounds the choice of states and pseudocount on validation, and there is none: both are "
                "given, or --init continues a model with its own"
            )
        lockstep = self.backend in engines.backend_choices() and engines.supports(self.backend, "lockstep")
        if self.burn_in is not None and (self.chunk == chunks.EXACT or (self.chunk is None and not lockstep)):
            raise CHMMError("--burn-in belongs to chunks: give the chunk length too (--chunk)")
        if self.chunk and not cluster and not lockstep:
            raise CHMMError(
                "--chunk cuts documents into chunks for a cluster (--workers or --cluster) or for lockstep passes on "
                "the GPU (--backend gpu)"
            )
        if cluster and self.algorithm == "viterbi":
            raise CHMMError("training on a cluster (--cluster, --workers) runs batch or online EM, not Viterbi EM")

    def resolved_restarts(self) -> int:
        """The restarts to run: as given, else :data:`ONLINE_RESTARTS` for online EM and 1 for batch or Viterbi EM."""
        if self.restarts is not None:
            return self.restarts
        return ONLINE_RESTARTS if self.algorithm == "online" else 1

    def training_config(self) -> learning.TrainingConfig:
        """The training loop's settings (a chosen pseudocount: :func:`search_settings` resolves :data:`AUTO`)."""
        if self.pseudocount == AUTO:
            raise CHMMError(f"the pseudocount {AUTO!r} is chosen by search_settings before training")
        return learning.TrainingConfig(
            algorithm=self.algorithm,
            iterations=self.iterations,
            tolerance=self.tolerance,
            patience=self.patience,
            pseudocount=self.pseudocount,
            batch_size=self.batch_size,
            memory=self.memory,
            chunk=self.chunk,
            burn_in=self.burn_in,
            update_pi=self.by_sequence,  # many short sequences (cases) tell where a sequence starts
        )


@dataclass(frozen=True)
class RunContext:
    """Who a training run reports to and who may stop it, passed as one value through the protocol's stages: the
    resolved ``backend`` (no "auto"), the progress ``callback`` (a record per iteration), the ``cancel`` token, the
    ``log`` (a line per stage), the Dask ``cluster`` (a ``distributed.Client``) that runs batch EM's E-steps, or
    None, and the ``hand_over`` token that ends online EM's stage before its own stop (the automatic search sets it
    when the next epoch would pass the budget's end: a cut epoch is lost, while batch EM can still use the time)."""

    backend: str = "cpu"
    callback: learning.ProgressCallback | None = None
    cancel: learning.CancelToken | None = None
    log: Callable[[str], None] | None = None
    cluster: Any = None
    hand_over: learning.CancelToken | None = None  # ends online EM's stage early; batch EM follows from its best epoch

    def say(self, line: str) -> None:
        """Log ``line`` where the run has a log."""
        if self.log is not None:
            self.log(line)


@dataclass
class TrainOutcome:
    """The trained model, the figures of the run (the CLI's ``--json`` object) and the training result."""

    model: CHMM
    summary: dict[str, Any]
    result: learning.TrainingResult
    corpus: text.Corpus = field(repr=False)
    selected: Any = field(default=None, repr=False)  # the selection run's model (before the refit), if refitted


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
    reason: str = ""  # why the automatic search chose these options (empty without a search)
    refit_seconds: float | None = None  # the refit's seconds as the search predicts them (None without a search)


def states_candidates(corpus: text.Corpus, options: TrainOptions, backend: str | None = None) -> list[int]:
    """The numbers of states ``states=AUTO`` tries, smallest first: :data:`STATES_GRID` from two clones per symbol
    and one state per :data:`MOST_SYMBOLS_PER_STATE` training symbols (at most :data:`LARGEST_FIRST_STATES`) to one
    state per :data:`SYMBOLS_PER_STATE` (at least the smallest such), and within ``options.max_memory`` when set
    (:func:`estimate_training_memory`). On a latency-bound ``backend`` (a GPU) the first is the largest of the grid up
    to :data:`DEVICE_FIRST_STATES` that the text allows (one state per :data:`SYMBOLS_PER_STATE` symbols)."""
    n_train = max(1, len(corpus.train_full))
    if corpus.unit != text.UNITS[0]:
        return _token_states(corpus, options, n_train)
    low = max(2 * corpus.n_symbols, min(n_train // MOST_SYMBOLS_PER_STATE, LARGEST_FIRST_STATES))
    high = n_train // SYMBOLS_PER_STATE
    if backend is not None and engines.supports(backend, "latency_bound"):
        low = max([low] + [n for n in STATES_GRID if n <= min(high, DEVICE_FIRST_STATES)])
    grid = [n for n in STATES_GRID if low <= n <= high] or [max(2 * corpus.n_symbols, min(STATES_GRID[0], high))]
    if options.max_memory is not None:
        fits = [n for n in grid if estimate_training_memory(corpus, replace(options, states=n)) <= options.max_memory]
        grid = fits or grid[:1]
    return grid


def _token_states(corpus: text.Corpus, options: TrainOptions, n_train: int) -> list[int]:
    """The numbers of states tried for words and tokens: one clone per symbol plus :data:`STATES_GRID` more (shared
    out by the allocation, so frequent words get many clones and a word seen twice keeps one), as long as the extra
    states are at most one per :data:`SYMBOLS_PER_STATE` training symbols (the smallest always), within
    ``options.max_memory`` when set."""
    extra = [n for n in STATES_GRID if n <= n_train // SYMBOLS_PER_STATE] or [STATES_GRID[0]]
    grid = sorted({min(corpus.n_symbols + n, MAX_STATES) for n in extra})
    limit = options.max_memory if options.max_memory is not None else machine_memory_bytes()
    if limit is not None:  # frequent words pair with frequent words: the blocks grow fast with the states
        share = 1.0 if options.max_memory is not None else TOKEN_MEMORY_SHARE
        fits = [n for n in grid if estimate_training_memory(corpus, replace(options, states=n)) <= share * limit]
        grid = fits or grid[:1]
    return grid


TOKEN_MEMORY_SHARE = 0.3
"""The share of this machine's memory a candidate number of states of words or tokens may need by the estimate
(:func:`estimate_training_memory`): the search keeps the best model beside the one training, and a War and Peace
search whose 40,945-state candidate was estimated at 10.8 GB peaked at 17.8 GB."""


DENSE_STATE_LIMIT = 10_000
"""Above this many states, CPU training grows the model from a dense one (see :func:`grown_starts`)."""


GROW_FACTOR = 10


PRUNED_KEYS = ("pruned", "pruned_history")
"""Metadata of a pruned model that training from it (``init``) carries over, to show people."""


TRANSITION_ENTRY_BYTES = 20


MESSAGE_COPIES = 3


def _clones_pairs_entries(corpus: text.Corpus, options: TrainOptions) -> tuple[np.ndarray, np.ndarray, int]:
    """The clones per symbol a new model of ``options.states`` gets on ``corpus``'s training part, the symbol pairs
    seen there and the stored transition entries: the sum over those pairs of M_i * M_j."""
    train = corpus.train_full
    n_clones = allocation.allocate_clones(
        train, corpus.n_symbols, options.states, options.allocation, options.ngram_order
    )
    pairs = pairs_in_sequence(train, corpus.n_symbols)
    return n_clones, pairs, int(np.sum(n_clones[pairs[:, 0]] * n_clones[pairs[:, 1]]))


def stored_entries(corpus: text.Corpus, options: TrainOptions) -> int:
    """The transition entries a new model of ``options.states`` (a number) stores on ``corpus``: the sum over the
    symbol pairs seen in training of M_i * M_j. What an EM iteration's and an online epoch's work grows with (the
    automatic search scales its candidates' measured seconds by it: :func:`engine.training.search.predict_stages`)."""
    return _clones_pairs_entries(corpus, options)[2]


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
        raise CHMMError(
            f"{options.states} states are fewer than the {corpus.n_symbols} symbols of the alphabet; "
            "every symbol needs at least one clone"
        )
    train = corpus.train_full
    n_clones, pairs, entries = _clones_pairs_entries(corpus, options)
    message_values = float(np.bincount(train, minlength=corpus.n_symbols) @ n_clones)
    batch_size = options.batch_size or learning.automatic_batch_size(len(pairs))
    if options.algorithm == "online" and len(train) > batch_size:
        message_values *= batch_size / len(train)
    itemsize = np.dtype(DTYPES[options.dtype]).itemsize
    return int(entries * TRANSITION_ENTRY_BYTES + MESSAGE_COPIES * itemsize * message_values)


def machine_memory_bytes() -> int | None:
    """This machine's physical memory (bytes), or None where the system does not say."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not POSIX
        return None


def check_memory(corpus: text.Corpus, options: TrainOptions, grown_to: int | None = None) -> None:
    """Refuse, before any work, a new dense model of ``options.states`` whose training memory estimate
    (:func:`estimate_training_memory`) passes ``options.max_memory``, or this machine's memory when none is set:
    one sentence with the figures (``grown_to``: the states grown from this dense stage, to name it so)."""
    limit = options.max_memory if options.max_memory is not None else machine_memory_bytes()
    if limit is None or options.states == AUTO:
        return
    need = estimate_training_memory(corpus, options)
    if need > limit:
        where = "the limit" if options.max_memory is not None else "this machine's memory"
        what = f"{options.states:,} states" if grown_to is None else (
            f"{grown_to:,} states grow from a dense model of {options.states:,}, which"
        )  # fmt: skip
        raise CHMMError(
            f"{what} would need about {need / 2**30:,.1f} GiB to train on this corpus, more than {where} "
            f"({limit / 2**30:,.1f} GiB); choose fewer states"
        )


PRUNE_BOUND = 0.002
"""The most validation BPS (bits per symbol) that pruning T for saving may cost (``chmm train --prune-bound``; 0
saves T dense): the largest of :data:`PRUNE_THRESHOLDS` within it is kept
(:func:`engine.training.thresholds.choose_threshold`). Measured in bench/RESULTS.md ("Models a tenth the size",
issue 48)."""


PRUNE_THRESHOLDS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3)
"""The thresholds the prune bound and the support bound try, largest first
(:func:`engine.training.thresholds.choose_threshold`)."""
