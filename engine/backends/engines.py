"""One protocol for what a model's implementation does, and the registry of implementations that picks one.

A CHMM is held in one of several forms: dense blocks on the CPU (:class:`engine.model.dense.CHMM`, kernels in
:mod:`engine.backends.cpu.inference`), CSR blocks on the CPU (:class:`engine.backends.cpu.sparse.SparseCHMM`, kernels in
:mod:`engine.backends.cpu.sparse`), or dense blocks on a GPU (:mod:`engine.backends.gpu.device_blocks`: CUDA through
CuPy, or the same code on NumPy twins of its kernels, "gpu-sim"). Each implementation of :class:`Engine` works on its
own *state* (the host model itself on the CPU, a device copy on the GPU): ``load`` makes the state from a host model and
``host`` gives the host model back. Every caller outside the implementations (the training loop and protocol, the graph
tools) goes through this protocol and the registry (:func:`engine_for`, :func:`supports`, :func:`backend_choices`) and
never tests what kind of model it holds or which backend it runs on.

The operations (paper, section 3): the scaled forward pass, scores and surprisal; the E-step of one sequence,
returning expected counts sum_n xi(n) in the state's own layout; the M-step T = row-normalise(counts + pseudocount)
over the stored entries (online EM's update is written once over these, :func:`engine.training.learning.online_update`);
Viterbi with soft evidence and its hard counts; sampling; pruning; the non-zero transitions as clone pairs.

Corpora of several documents are lists of independent sequences (each starts from pi): :func:`e_step_sequences`
sums their counts and :func:`score_sequences` their code lengths, on any implementation.

Adding an implementation is one class (the protocol) and one :func:`register` call with its capabilities, made by
the implementation's own module; :mod:`engine.backends` imports the implementations, so the registry is full once
the package is imported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from engine.backends.cpu import inference
from engine.errors import BackendError, CHMMError
from engine.model import dense as model_io
from engine.model.dense import CHMM, CloneModel

Model = CloneModel
"""A host model of either form (dense :class:`engine.model.dense.CHMM` or sparse
:class:`engine.backends.cpu.sparse.SparseCHMM`)."""


@runtime_checkable
class Engine(Protocol):
    """What an implementation of a CHMM does. ``State`` is the implementation's own form of a model (see the
    module docstring); every method takes and returns states, never host models, except :meth:`load`/:meth:`host`.
    """

    name: str

    def load(self, model: Model) -> Any:
        """The state of a host model (the model itself on the CPU; a device copy on the GPU)."""

    def host(self, state: Any) -> Model:
        """The host model of a state."""

    def copy(self, state: Any) -> Any:
        """A state whose transition values may be changed in place without changing ``state``."""

    def forward(
        self,
        state: Any,
        x: np.ndarray,
        initial: np.ndarray | None = None,
        row_key: np.ndarray | None = None,
        store: bool = False,
    ) -> inference.ForwardResult:
        """Scaled forward pass: the one-step predictive probabilities P(x_n | x_<n) and the zero-probability events
        (``initial`` replaces pi). ``row_key``: the block row of each step of a walk with actions (as for
        :meth:`e_step`). With ``store`` the normalised messages alpha(n) (the filtered posteriors over the clones of
        x_n) come back on the host in time order (message n at ``offsets[n]``); without it they may be empty."""

    def score(self, state: Any, x: np.ndarray) -> inference.ScoreResult:
        """Bits per symbol of one sequence with the model's back-off (:func:`engine.backends.cpu.inference.score`)."""

    def surprisal(self, state: Any, x: np.ndarray) -> np.ndarray:
        """-log2 P(x_n | x_<n) of every position, as :meth:`score` counts it."""

    def plan(
        self,
        state: Any,
        x: np.ndarray,
        algorithm: str,
        batch_size: int,
        chunk: int | None = None,
        burn_in: int | None = None,
        row_key: np.ndarray | None = None,
    ) -> Any:
        """What repeated E-steps on ``x`` reuse (offsets, buffers), or None; may refuse a run that cannot fit
        (online EM processes ``batch_size`` symbols at a time). With ``chunk``, batch EM's E-steps are lockstep
        passes over chunks of ``x`` with a burn-in (:mod:`engine.backends.chunks`); implementations without them refuse.
        ``row_key``: the block row of each step of a walk with actions (as for :meth:`e_step`)."""

    def zero_counts(self, state: Any) -> Any:
        """A zeroed array of counts in the state's layout."""

    def as_counts(self, state: Any, values: Any) -> Any:
        """``values`` (counts in the state's layout, on the host or where the state lives) as the state's arrays:
        counts that come from elsewhere (a cluster's workers) join the state's own."""

    def e_step(
        self,
        state: Any,
        x: np.ndarray,
        initial: np.ndarray | None = None,
        plan: Any = None,
        counts_out: Any = None,
        counted: tuple[int, int] | None = None,
        row_key: np.ndarray | None = None,
    ) -> inference.EStepResult:
        """Expected transition counts sum_n xi(n) of one sequence in the state's layout (only the blocks of pairs
        that occur in ``x`` are written into ``counts_out`` when given), gamma(1), the log-likelihood and the last
        alpha (online EM carries it into the next batch). ``counted``: only those steps, for a chunk with a burn-in
        (see :func:`engine.backends.cpu.inference.e_step`; the dense CPU engine only). ``row_key``: the block row of
        each step n -> n+1 of a walk with actions (``a_n * E + x_n`` over the layout of
        :func:`engine.cognitive.actions.action_layout`; None for text); every implementation runs it."""

    def m_step(self, state: Any, counts: Any, pseudocount: float, pi: np.ndarray | None = None) -> Any:
        """T = row-normalise(counts + pseudocount) over the entries EM may update (see ``fixed_zeros``)."""

    def with_counts(self, state: Any, counts: Any) -> Any:
        """``state`` with ``counts`` as its expected counts (used by the back-off bigram and by pruning)."""

    def viterbi(
        self, state: Any, evidence: np.ndarray | inference.Evidence, row_shift: np.ndarray | None = None
    ) -> inference.ViterbiResult:
        """MAP clone path with hard or per-position soft evidence (see :func:`engine.backends.cpu.inference.viterbi`).
        ``row_shift[n]`` is added to the symbols of position n to name the block row of step n -> n+1 of a walk
        with actions (``a_n * E`` over the layout of :func:`engine.cognitive.actions.action_layout`; None for text), as
        ``row_key`` names it for :meth:`e_step` (a bad one is refused in one sentence, :mod:`engine.model.row_keys`)."""

    def hard_counts(
        self, state: Any, x: np.ndarray, row_key: np.ndarray | None = None, score: str = "likelihood"
    ) -> tuple[Any, float]:
        """Viterbi EM's counts (one per transition of the MAP clone path of ``x``) and log P(x), or with ``score``
        "path" the path's own log max_z P(z, x) (:func:`engine.backends.cpu.inference.hard_counts`). ``row_key``: the
        block row of each step of a walk with actions (as for :meth:`e_step`)."""

    def sample(self, state: Any, length: int, rng: np.random.Generator, prefix: np.ndarray | None = None) -> np.ndarray:
        """``length`` sampled symbols, continuing ``prefix`` if given (:func:`engine.backends.cpu.sampling.sample`)."""

    def prune(self, state: Any, threshold: float) -> Any:
        """The state pruned at ``threshold`` (see :func:`engine.model.pruning.prune`)."""

    def transitions(self, state: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """The non-zero transitions as (row clone, column clone, probability, expected count or None) arrays."""

    def as_dense(self, state: Any, what: str) -> CHMM:
        """The model with dense blocks on the host, for tools written for them; ValueError (naming ``what``)
        when that would not fit."""

    def finite(self, state: Any) -> bool:
        """Whether every transition value is finite."""


# ---------------------------------------------------------------------------------------------- several sequences
def as_sequences(x: np.ndarray | Sequence[np.ndarray] | None) -> list[np.ndarray]:
    """One sequence (a 1-D array) or several, as a list of contiguous int64 arrays; None or empty parts drop out."""
    if x is None:
        return []
    if isinstance(x, np.ndarray) and x.ndim == 1:
        parts = [x]
    else:
        parts = list(x)
    return [np.ascontiguousarray(p, dtype=np.int64) for p in parts if len(p)]


def score_sequences(engine: Engine, state: Any, sequences: np.ndarray | Sequence[np.ndarray]) -> inference.ScoreResult:
    """The BPS of independent sequences together: -sum log2 P(x^d) / sum |x^d| (each sequence from its own start)."""
    parts = as_sequences(sequences)
    if not parts:
        raise CHMMError("there is no text to score")
    results = [engine.score(state, x) for x in parts]
    log2_probability = float(sum(r.log2_probability for r in results))
    symbols = int(sum(r.symbols for r in results))
    zero_events = int(sum(r.zero_probability_events for r in results))
    return inference.ScoreResult(-log2_probability / symbols, log2_probability, symbols, zero_events)


FEW_BLOCKS = 64
"""A sequence whose E-step touches fewer blocks than this adds its counts block by block (a sentence's few, not
the whole of T)."""


def e_step_sequences(
    engine: Engine,
    state: Any,
    sequences: Sequence[np.ndarray],
    plans: Sequence[Any] | None = None,
    row_keys: Sequence[np.ndarray] | None = None,
) -> inference.EStepResult:
    """The E-step of independent sequences: their expected counts and log-likelihoods add up (they share T);
    gamma(1) is the mean over the sequences (the M-step of pi for several sequences). ``last_alpha`` is the last
    sequence's. ``row_keys``: each walk's block rows, for walks with actions (see :meth:`Engine.e_step`)."""
    total = None
    gamma_first = None
    log_likelihood = 0.0
    zero_events = 0
    touched = None
    last = None
    offsets = state.layout.block_offset if isinstance(state, CHMM) else None  # counts in the flat block layout
    for k, x in enumerate(sequences):
        e = engine.e_step(
            state, x, plan=None if plans is None else plans[k], row_key=None if row_keys is None else row_keys[k]
        )
        if total is None:
            total, gamma_first, touched = e.counts, e.gamma_first.astype(np.float64), e.touched.copy()
        elif isinstance(total, np.ndarray) and offsets is not None and np.count_nonzero(e.touched) < FEW_BLOCKS:
            for block in np.flatnonzero(e.touched):  # a short sequence's few blocks, not the whole of T
                total[offsets[block] : offsets[block + 1]] += e.counts[offsets[block] : offsets[block + 1]]
            gamma_first = gamma_first + e.gamma_first
            touched |= e.touched
        else:
            total += e.counts
            gamma_first = gamma_first + e.gamma_first
            touched |= e.touched
        log_likelihood += e.log_likelihood
        zero_events += e.zero_events
        last = e
    if last is None:
        raise CHMMError("the E-step needs at least one sequence")
    return inference.EStepResult(
        total, gamma_first / len(sequences), log_likelihood, zero_events, last.last_alpha, touched
    )


# ---------------------------------------------------------------------------------------------- dense, CPU
# ---------------------------------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class NoOptions:
    """An implementation without settings of its own."""


def _always() -> tuple[bool, str]:
    return True, "always available"


@dataclass(frozen=True)
class Implementation:
    """One registered implementation of :class:`Engine`.

    name: the implementation ("dense", "sparse", "gpu", "gpu-sim"); backend: the ``--backend`` choice that selects
    it (several implementations may share one: dense and sparse models on "cpu"); factory: its options -> a new
    engine; accepts: which host models it runs; options: its options dataclass; available: whether it can run on
    this machine and why not (may import heavy modules); offerable: the same judged cheaply, for the web process
    (must not initialise CUDA); auto_rank: "auto" picks the available backend of highest rank (None: never).
    Capabilities: ``grows`` (the training protocol may grow a dense start into a large sparse model), ``chunks``
    (its E-step counts only a range of steps: chunks with a burn-in, the cluster), ``lockstep`` (its plan takes
    ``chunk``: batch EM's passes run over all chunks of a sequence at once), ``restart_processes``
    (restarts may run in worker processes), ``host`` (runs on the CPU: peers and CPU-only tools accept the
    backend), ``in_app`` (offered on the Train page), ``latency_bound`` (a step of its passes costs about the same
    from 1,000 to 10,000 states: a GPU, whose sequential steps wait on latency, so the automatic search may start
    large, :data:`engine.training.options.DEVICE_FIRST_STATES`). ``file_format`` and ``read``: the ``format`` its
    host models' files name in their header and their reader (:func:`reader_for`); ``adopt``: a host model of
    another form in this implementation's (:func:`in_form_for`)."""

    name: str
    backend: str
    factory: Callable[[Any], Engine]
    accepts: Callable[[Model], bool]
    options: type = NoOptions
    available: Callable[[], tuple[bool, str]] = _always
    offerable: Callable[[], tuple[bool, str]] | None = None
    auto_rank: int | None = None
    grows: bool = False
    chunks: bool = False
    lockstep: bool = False
    restart_processes: bool = False
    host: bool = True
    in_app: bool = True
    latency_bound: bool = False
    file_format: str | None = None
    read: Callable[..., Model] | None = None
    adopt: Callable[[Model], Model] | None = None

    def create(self, options: Any = None) -> Engine:
        """A new engine with ``options`` when they are this implementation's (else its defaults)."""
        return self.factory(options if isinstance(options, self.options) else self.options())


AUTO_BACKEND = "auto"
"""The backend choice that picks the best available backend (see :func:`resolve_backend`)."""

_REGISTRY: dict[str, Implementation] = {}


def register(implementation: Implementation) -> Implementation:
    """Add an implementation (a new backend is one class and one call of this); ValueError on a taken name."""
    if implementation.name in _REGISTRY:
        raise ValueError(f"an implementation named {implementation.name!r} is already registered")
    _REGISTRY[implementation.name] = implementation
    return implementation


def unregister(name: str) -> None:
    """Remove a registered implementation (a test's toy)."""
    _REGISTRY.pop(name, None)


def implementations(backend: str | None = None) -> list[Implementation]:
    """The registered implementations (of ``backend``, "auto" resolved), in registration order; a backend that
    cannot run here still has its implementations (their capabilities do not depend on the machine)."""
    if backend is None:
        return list(_REGISTRY.values())
    chosen = resolve_backend(backend) if backend == AUTO_BACKEND else backend
    return [i for i in _REGISTRY.values() if i.backend == chosen]


def backend_choices(in_app: bool = False) -> tuple[str, ...]:
    """The ``--backend`` choices (every registered backend, then "auto"), or with ``in_app`` the Train page's."""
    names = dict.fromkeys(i.backend for i in _REGISTRY.values() if i.in_app or not in_app)
    return (*names, AUTO_BACKEND) if not in_app else tuple(names)


def backend_status(backend: str, cheap: bool = False) -> tuple[bool, str]:
    """Whether ``backend`` can run here and a one-line reason when not (``cheap``: judged without importing heavy
    modules, for the web process)."""
    chosen = [i for i in _REGISTRY.values() if i.backend == backend]
    if not chosen:
        return False, f"unknown backend {backend!r}; choose one of {', '.join(backend_choices())}"
    check = (chosen[0].offerable or chosen[0].available) if cheap else chosen[0].available
    return check()


def resolve_backend(name: str) -> str:
    """The backend that will run for the choice ``name``: "auto" is the available backend of highest
    ``auto_rank``; any other available backend is itself; BackendError (with the reason) otherwise."""
    if name == AUTO_BACKEND:
        ranked = sorted((i for i in _REGISTRY.values() if i.auto_rank is not None), key=lambda i: -(i.auto_rank or 0))
        for implementation in ranked:
            if implementation.available()[0]:
                return implementation.backend
        raise BackendError("no backend is available")
    available, reason = backend_status(name)
    if not available:
        if not any(i.backend == name for i in _REGISTRY.values()):
            raise BackendError(reason)
        raise BackendError(f"the {name.upper()} backend is not available: {reason}")
    return name


def on_host(backend: str) -> bool:
    """Whether work that runs only on the CPU (the peer learners, CPU-only tools) may run under the choice
    ``backend``: "auto", or a backend whose implementations all run on the host."""
    return backend == AUTO_BACKEND or all(i.host for i in _REGISTRY.values() if i.backend == backend)


def supports(backend: str, capability: str) -> bool:
    """Whether some implementation of ``backend`` has ``capability`` (see :class:`Implementation`)."""
    return any(getattr(i, capability) for i in implementations(backend))


def implementation_for(model: Model, backend: str = "cpu") -> Implementation:
    """The implementation that runs ``model`` on ``backend``: the first of the backend's implementations that
    accepts the model, else the first host implementation that does (sparse models run on the CPU whatever the
    backend)."""
    chosen = resolve_backend(backend) if backend == AUTO_BACKEND else backend
    candidates = [i for i in _REGISTRY.values() if i.backend == chosen and i.accepts(model)]
    if candidates or not any(i.backend == chosen for i in _REGISTRY.values()):
        resolve_backend(chosen)  # the reason, when the backend cannot run here or is unknown
    candidates += [i for i in _REGISTRY.values() if i.host and i.accepts(model)]
    if not candidates:
        raise CHMMError(f"no implementation runs this model on the {chosen} backend")
    return candidates[0]


def reader_for(file_format: str | None) -> Callable[..., Model]:
    """The reader of model files whose header names ``file_format`` (the registered implementations' formats); the
    dense reader otherwise (it raises :class:`engine.model.dense.ModelFormatError` with the reason on a missing,
    damaged or foreign file)."""
    readers = {i.file_format: i.read for i in _REGISTRY.values() if i.file_format and i.read is not None}
    return readers.get(file_format or "", model_io.load)


def in_form_for(model: Model, name: str) -> tuple[Model, str]:
    """``model`` in the form that ``name`` runs and the backend that selects it: ``name`` a backend (cpu, gpu,
    gpu-sim, auto) leaves the model as it is; the name of an implementation that is not a backend's own ("dense",
    "sparse": both on "cpu") converts a model it does not accept (a dense model to its non-zeros as CSR blocks, a
    sparse one to dense blocks), so that a tool may run one model on every implementation."""
    chosen = _REGISTRY.get(name)
    if chosen is None or chosen.backend == name:
        return model, name
    if not chosen.accepts(model):
        if chosen.adopt is None:
            raise CHMMError(f"the {name} implementation cannot take this model")
        model = chosen.adopt(model)
    return model, chosen.backend


def engine_for(model: Model, backend: str = "cpu", options: Any = None) -> Engine:
    """A new engine for ``model`` on ``backend`` (see :func:`implementation_for`) with ``options`` when they are
    that implementation's options dataclass (otherwise its defaults)."""
    return implementation_for(model, backend).create(options)
