"""Cognitive maps: CHMMs whose transitions depend on actions (clone-structured cognitive graphs, George et al.,
Nature Communications 2021).

A walk is a sequence of observations x_1..x_N and actions a_1..a_N: a_n is the action taken at n, which moves the
walker from x_n to x_{n+1} (the last action is not used). The model has one transition matrix per action,
T[a](u, v) = P(z_{n+1} = v | z_n = u, a_n = a), and each clone still emits one symbol deterministically, so T[a]
splits into blocks T[a](i, j) between the clones of symbols i and j; only the blocks of (action, symbol, symbol)
triples that occur are stored, and each row of T[a] sums to 1 over them.

The whole engine runs such a model unchanged through one idea: the block layout of a model with A actions has
A * E *row symbols* ``a * E + i`` (row symbol ``a * E + i`` has the clones of symbol i) and the E symbols as
columns, so block ``(a * E + i, j)`` is T[a](i, j), its rows are normalised over the blocks of row symbol
``a * E + i`` (per action, as the paper's M-step), and a pass reads the block of step n -> n+1 from the *row key*
``a_n * E + x_n`` (:func:`engine.backends.cpu.kernels.forward_pass`). A text is the walk with one action: its row keys
are its symbols and its layout the text layout, so every text figure is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.backends.cpu import inference
from engine.errors import CHMMError
from engine.model.archive import MAX_MODEL_BYTES, ArchiveError, ModelArchive
from engine.model.blocks import BlockLayout, normalise_rows, row_sums
from engine.model.dense import CHMM, ModelFormatError, check_row_sums, write_npz_atomic

MOVES = ("left", "right", "up", "down")
"""The actions of a walk in a grid room, in the order of the paper's public code (0 left, 1 right, 2 up, 3 down)."""
STEPS = np.array([[0, -1], [0, 1], [-1, 0], [1, 0]], dtype=np.int64)
"""(row, column) change of each move of :data:`MOVES`."""
WALL = -1
"""A cell of a room that cannot be entered."""
MAX_OBSERVATION = 10_000
"""The largest observation a room's cell may hold (cells are observations 0..MAX_OBSERVATION or :data:`WALL`): what
reads or draws a room then does work bounded by the room's size, never by its values."""
ROOM_VALUES = f"a room's cells must be observations from 0 to {MAX_OBSERVATION:,} or -1 for a wall"
"""The one sentence (uncapitalised) that refuses a room cell outside -1..:data:`MAX_OBSERVATION`."""


# ------------------------------------------------------------------------------------------------ walks
@dataclass(frozen=True)
class Walk:
    """A walk: ``observations[n]`` seen at step n, ``actions[n]`` taken there (it leads to step n + 1; the last
    is not used), and, for a generated walk, the true ``positions`` (row, column) in the room, shape (N, 2)."""

    observations: np.ndarray
    actions: np.ndarray
    positions: np.ndarray | None = None

    def __len__(self) -> int:
        return int(len(self.observations))


def check_room(room: Any) -> np.ndarray:
    """``room`` as a 2-D int64 array of observations (-1: a wall cell); ValueError in one sentence otherwise."""
    try:
        grid = np.asarray(room)
    except (TypeError, ValueError):
        raise CHMMError("a room must be a rectangular table of whole numbers") from None
    if grid.ndim != 2 or grid.size == 0:
        raise CHMMError(f"a room must be a non-empty 2-D table of observations, got shape {grid.shape}")
    if grid.dtype.kind == "O" and all(isinstance(v, int) and not isinstance(v, bool) for v in grid.ravel()):
        raise CHMMError(ROOM_VALUES)  # whole numbers too large for int64
    if grid.dtype.kind not in "iu" and not (
        grid.dtype.kind == "f" and np.all(np.isfinite(grid)) and np.all(grid == np.round(grid))
    ):
        raise CHMMError("a room's cells must be whole numbers (an observation, or -1 for a wall)")
    if np.any(grid < WALL) or np.any(grid > MAX_OBSERVATION):
        raise CHMMError(ROOM_VALUES)
    grid = grid.astype(np.int64)
    if not np.any(grid >= 0):
        raise CHMMError("a room needs at least one cell that is not a wall")
    return grid


def generate_walk(room: Any, length: int, seed: int = 0, start: tuple[int, int] | None = None) -> Walk:
    """A random walk of ``length`` steps in a grid ``room``: at every step one of the four :data:`MOVES` uniformly
    at random; a move out of the room or into a wall cell leaves the walker where it is (it still observes its
    cell again). The semantics of the paper's room generator (``datagen_structured_obs_room``)."""
    grid = check_room(room)
    if not isinstance(length, int | np.integer) or length < 2:
        raise CHMMError(f"a walk needs at least 2 steps, got {length!r}")
    rng = np.random.default_rng(seed)
    height, width = grid.shape
    if start is None:
        open_cells = np.argwhere(grid >= 0)
        r, c = (int(v) for v in open_cells[rng.integers(len(open_cells))])
    else:
        r, c = int(start[0]), int(start[1])
        if not (0 <= r < height and 0 <= c < width) or grid[r, c] < 0:
            raise CHMMError(f"the start {start} is not an open cell of the {height} x {width} room")
    actions = rng.integers(len(MOVES), size=length).astype(np.int64)
    positions = np.empty((length, 2), dtype=np.int64)
    for n in range(length):
        positions[n] = r, c
        nr, nc = r + STEPS[actions[n], 0], c + STEPS[actions[n], 1]
        if 0 <= nr < height and 0 <= nc < width and grid[nr, nc] >= 0:
            r, c = int(nr), int(nc)
    actions[-1] = 0
    return Walk(grid[positions[:, 0], positions[:, 1]], actions, positions)


def check_walk(x: Any, a: Any, n_symbols: int | None = None, n_actions: int | None = None) -> tuple[np.ndarray, ...]:
    """Observations and actions as int64 arrays of one length (at least 2), within the alphabet and the actions
    when those are given; ValueError in one sentence otherwise."""
    x = np.ascontiguousarray(x, dtype=np.int64)
    a = np.ascontiguousarray(a, dtype=np.int64)
    if x.ndim != 1 or a.ndim != 1 or len(x) != len(a):
        raise CHMMError("a walk needs one action per observation (two 1-D sequences of the same length)")
    if len(x) < 2:
        raise CHMMError("a walk needs at least 2 steps")
    if x.min() < 0 or (n_symbols is not None and x.max() >= n_symbols):
        raise CHMMError(f"the walk has observations outside 0..{(n_symbols or 1) - 1}")
    if a.min() < 0 or (n_actions is not None and a[:-1].max(initial=0) >= n_actions):
        raise CHMMError(f"the walk has actions outside 0..{(n_actions or 1) - 1}")
    return x, a


Walks = np.ndarray | Sequence[Any]
"""One walk's observations (or actions), a 1-D sequence, or several walks' (documents: a list of 1-D sequences,
walk d being ``x[d]`` with ``a[d]``)."""


def _several(value: Any) -> bool:
    return isinstance(value, list | tuple) and len(value) > 0 and all(np.ndim(part) == 1 for part in value)


def check_walks(
    x: Walks, a: Walks, n_symbols: int | None = None, n_actions: int | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """One walk or several independent walks (documents: each starts afresh from pi, no transition runs from one
    into the next) as a list of (observations, actions) pairs checked by :func:`check_walk`; ValueError in one
    sentence otherwise (naming the walk at fault)."""
    several = _several(x)
    if several != _several(a):
        raise CHMMError(
            "give one walk (a sequence of observations and one of actions) or several (a list of each), not a mix"
        )
    if not several:
        return [check_walk(x, a, n_symbols, n_actions)]
    if len(x) != len(a):
        raise CHMMError(f"{len(x)} walks of observations need as many walks of actions, got {len(a)}")
    walks = []
    for d, (x_d, a_d) in enumerate(zip(x, a, strict=True)):
        try:
            walks.append(check_walk(x_d, a_d, n_symbols, n_actions))
        except ValueError as exc:
            raise CHMMError(f"walk {d + 1}: {exc}") from None
    return walks


# ------------------------------------------------------------------------------------------------ the layout
def row_keys(x: np.ndarray, a: np.ndarray, n_symbols: int) -> np.ndarray:
    """The block row of each step n -> n+1: ``a_n * E + x_n`` (the last entry, with no step after it, is unused)."""
    return np.ascontiguousarray(a, dtype=np.int64) * n_symbols + np.ascontiguousarray(x, dtype=np.int64)


def triples_in_walk(x: np.ndarray, a: np.ndarray, n_symbols: int) -> np.ndarray:
    """The distinct (a_n, x_n, x_{n+1}) triples of a walk, shape (K, 3), sorted."""
    codes = np.unique(row_keys(x[:-1], a[:-1], n_symbols) * n_symbols + x[1:])
    rows, j = codes // n_symbols, codes % n_symbols
    return np.stack([rows // n_symbols, rows % n_symbols, j], axis=1)


def action_layout(n_clones: np.ndarray, n_actions: int, triples: np.ndarray) -> BlockLayout:
    """The block layout of a model with ``n_actions`` actions over symbols with ``n_clones`` clones each, storing
    the blocks T[a](i, j) of the (a, i, j) ``triples``: A * E row symbols (row symbol a * E + i has the clones of
    symbol i), blocks (a * E + i, j); see the module's docstring."""
    n_clones = np.asarray(n_clones, dtype=np.int64)
    triples = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
    if n_actions < 1:
        raise CHMMError("a model needs at least one action")
    if triples.size and (triples[:, 0].max() >= n_actions or triples[:, 0].min() < 0):
        raise CHMMError("a block names an action outside the model's actions")
    E = len(n_clones)
    if triples.size and (triples[:, 1:].max() >= E or triples[:, 1:].min() < 0):
        raise CHMMError("a block names a symbol outside the model's alphabet")
    pairs = np.stack([triples[:, 0] * E + triples[:, 1], triples[:, 2]], axis=1)
    return BlockLayout.build(np.tile(n_clones, n_actions), pairs)


def all_triples(n_symbols: int, n_actions: int) -> np.ndarray:
    """Every (a, i, j) triple: the layout of a dense T[a] (as the paper's code stores it)."""
    grid = np.indices((n_actions, n_symbols, n_symbols)).reshape(3, -1).T
    return np.ascontiguousarray(grid, dtype=np.int64)


# ------------------------------------------------------------------------------------------------ the model
@dataclass
class ActionCHMM:
    """A CHMM with actions: observation ``symbols``, ``actions`` (their names), the block ``layout`` of
    :func:`action_layout`, T in its flat block buffer and pi over the H clones (kept uniform, as the paper's code
    does: a walk may start anywhere)."""

    symbols: list[str]
    actions: list[str]
    layout: BlockLayout
    T: np.ndarray
    pi: np.ndarray
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        E, A = len(self.symbols), len(self.actions)
        if self.layout.n_symbols != E * A:
            raise CHMMError(
                f"the layout has {self.layout.n_symbols} row symbols; {A} actions x {E} symbols need {A * E}"
            )
        if self.T.shape != (self.layout.size,):
            raise CHMMError(f"T has shape {self.T.shape}, the layout needs ({self.layout.size},)")
        if self.pi.shape != (self.n_states,):
            raise CHMMError(f"pi has shape {self.pi.shape}, the model has {self.n_states} clones")

    @property
    def n_symbols(self) -> int:
        return len(self.symbols)

    @property
    def n_actions(self) -> int:
        return len(self.actions)

    @property
    def n_clones(self) -> np.ndarray:
        return self.layout.n_clones[: self.n_symbols]

    @property
    def n_states(self) -> int:
        return int(self.layout.clone_start[self.n_symbols])

    def clone_symbol(self) -> np.ndarray:
        """The symbol each clone emits, shape (H,)."""
        return np.repeat(np.arange(self.n_symbols), self.n_clones)

    def engine_view(self) -> CHMM:
        """The same arrays as a :class:`CHMM` over the A * E row symbols, for the engine's passes (its pi covers
        the row symbols of action 0, which are the model's clones, and is zero beyond them)."""
        pi = np.zeros(self.layout.n_states, dtype=self.T.dtype)
        pi[: self.n_states] = self.pi
        names = [f"{a}\x00{s}" for a in range(self.n_actions) for s in self.symbols]
        return CHMM(names, self.layout, self.T, pi)

    def transition(self, action: int) -> np.ndarray:
        """T[action] as a dense H x H matrix."""
        H, E = self.n_states, self.n_symbols
        dense = np.zeros((H, H), dtype=self.T.dtype)
        start = self.layout.clone_start
        for k, (row, j) in enumerate(self.layout.block_pairs):
            if row // E != action:
                continue
            i = row % E
            block = self.T[self.layout.block_offset[k] : self.layout.block_offset[k + 1]]
            dense[start[i] : start[i + 1], start[j] : start[j + 1]] = block.reshape(
                int(self.layout.n_clones[i]), int(self.layout.n_clones[j])
            )
        return dense

    def with_T(self, T: np.ndarray) -> ActionCHMM:
        return ActionCHMM(self.symbols, self.actions, self.layout, T, self.pi, dict(self.metadata))

    def block_triples(self) -> np.ndarray:
        """The (action, symbol, symbol) triple of every stored block, in block order, shape (K, 3)."""
        E = self.n_symbols
        rows = self.layout.block_pairs[:, 0]
        return np.stack([rows // E, rows % E, self.layout.block_pairs[:, 1]], axis=1)

    def save(self, path: Any) -> None:
        """Write the model as ``.npz`` arrays plus a JSON header, without pickle, atomically (:func:`load`)."""
        header = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "symbols": list(self.symbols),
            "actions": list(self.actions),
            "metadata": dict(self.metadata),
        }
        arrays = {"n_clones": self.n_clones, "block_triples": self.block_triples(), "T": self.T, "pi": self.pi}
        write_npz_atomic(path, arrays, header)


FORMAT_NAME = "chmm-explorer-action-model"
"""The format marker of a model file with actions (a text model file has another: each loader refuses the other's)."""
FORMAT_VERSION = 1
ACTION_ARRAYS = ("n_clones", "block_triples", "T", "pi")


def _names_in(path: Any, header: dict[str, Any], key: str) -> list[str]:
    names = header.get(key)
    if not isinstance(names, list) or not names or not all(isinstance(v, str) and v for v in names):
        raise ModelFormatError(f"{path}: damaged model with actions (its {key} must be a list of non-empty strings)")
    return names


def load(
    path: Any, max_bytes: int = MAX_MODEL_BYTES, max_clones: int | None = None, max_actions: int | None = None
) -> ActionCHMM:
    """Load a model saved by :meth:`ActionCHMM.save`, read as untrusted input: every array's size checked against
    the layout and the byte budget before it is inflated, and every stored row of every T[a] summing to 1 (or 0);
    a missing, damaged or foreign file raises :class:`ModelFormatError` in one sentence. ``max_clones`` and
    ``max_actions``: the most clones and actions a model may have (a front end's limits on what it learns), checked
    before any table is built."""
    if not Path(path).is_file():
        raise ModelFormatError(f"{path}: no such model file")
    try:
        with ModelArchive(path, known=ACTION_ARRAYS, max_bytes=max_bytes) as archive:
            header = archive.header
            if header.get("format") != FORMAT_NAME:
                raise ModelFormatError(f"{path}: not a CHMM Explorer model with actions (wrong format marker)")
            version = header.get("format_version")
            if version != FORMAT_VERSION:
                raise ModelFormatError(f"{path}: model format version {version!r} is not supported")
            symbols, names = _names_in(path, header, "symbols"), _names_in(path, header, "actions")
            if max_actions is not None and len(names) > max_actions:
                raise ModelFormatError(f"{path}: a map of {len(names):,} actions, more than the {max_actions} allowed")
            n_clones = archive.array("n_clones", shape=(len(symbols),), kind="iu").astype(np.int64)
            if max_clones is not None and (len(symbols) > max_clones or int(n_clones.sum()) > max_clones):
                raise ModelFormatError(
                    f"{path}: a map of {max(len(symbols), int(n_clones.sum())):,} clones, more than the "
                    f"{max_clones:,} allowed"
                )
            triples = archive.array("block_triples", ndim=2, kind="iu").astype(np.int64)
            if triples.shape[1:] != (3,) or np.any(n_clones < 1):
                raise ModelFormatError(f"{path}: damaged model with actions (its block table or clone counts)")
            rows = len(symbols) * len(names)
            archive.charge(8 * (3 * rows + 2 * len(triples) + 2), "its block tables")
            try:
                layout = action_layout(n_clones, len(names), triples)
            except ValueError as exc:
                raise ModelFormatError(f"{path}: damaged model with actions ({exc})") from None
            T = archive.array("T", shape=(layout.size,), kind="f")
            pi = archive.array("pi", shape=(int(n_clones.sum()),), kind="f")
    except ArchiveError as exc:
        raise ModelFormatError(f"{path}: not a readable CHMM Explorer model with actions ({exc})") from None
    metadata = header.get("metadata")
    try:
        model = ActionCHMM(symbols, names, layout, T, pi, dict(metadata) if isinstance(metadata, dict) else {})
    except ValueError as exc:
        raise ModelFormatError(f"{path}: damaged model with actions ({exc})") from None
    check_row_sums(path, row_sums(layout, T))
    return model


def _names(count: int, names: list[str] | None, kind: str) -> list[str]:
    if names is None:
        return [str(v) for v in range(count)]
    if len(names) != count:
        raise CHMMError(f"{len(names)} {kind} names for {count} {kind}s")
    return [str(v) for v in names]


def random_action_model(
    n_clones: np.ndarray,
    x: Walks,
    a: Walks,
    seed: int = 0,
    symbols: list[str] | None = None,
    actions: list[str] | None = None,
    dtype: Any = np.float32,
) -> ActionCHMM:
    """A model with a block for every (action, symbol, symbol) triple of the walk (or walks), each row of T[a]
    uniform(0, 1) entries normalised over its blocks, and pi uniform."""
    n_clones = np.asarray(n_clones, dtype=np.int64)
    walks = check_walks(x, a, len(n_clones))
    n_actions = max(int(a_d[:-1].max()) for _, a_d in walks) + 1 if actions is None else len(actions)
    triples = np.unique(np.concatenate([triples_in_walk(x_d, a_d, len(n_clones)) for x_d, a_d in walks]), axis=0)
    layout = action_layout(n_clones, n_actions, triples)
    T = normalise_rows(layout, np.random.default_rng(seed).random(layout.size), 0.0, dtype)
    H = int(n_clones.sum())
    return ActionCHMM(
        _names(len(n_clones), symbols, "symbol"), _names(n_actions, actions, "action"), layout, T,
        np.full(H, 1.0 / H, dtype=dtype),
    )  # fmt: skip


def from_dense(
    transitions: np.ndarray,
    n_clones: np.ndarray,
    pi: np.ndarray | None = None,
    triples: np.ndarray | None = None,
    symbols: list[str] | None = None,
    actions: list[str] | None = None,
) -> ActionCHMM:
    """A model whose stored blocks hold the entries of the dense ``transitions`` (shape (A, H, H)) as they are (not
    renormalised): every block by default (the dense layout of the paper's code), else the blocks of ``triples``."""
    transitions = np.asarray(transitions)
    n_clones = np.asarray(n_clones, dtype=np.int64)
    A, H = transitions.shape[0], int(n_clones.sum())
    if transitions.shape != (A, H, H):
        raise CHMMError(f"transitions have shape {transitions.shape}, {H} clones need (A, {H}, {H})")
    E = len(n_clones)
    layout = action_layout(n_clones, A, all_triples(E, A) if triples is None else triples)
    T = np.empty(layout.size, dtype=transitions.dtype)
    start = layout.clone_start
    for k, (row, j) in enumerate(layout.block_pairs):
        action, i = divmod(int(row), E)
        block = transitions[action, start[i] : start[i + 1], start[j] : start[j + 1]]
        T[layout.block_offset[k] : layout.block_offset[k + 1]] = block.ravel()
    pi = np.full(H, 1.0 / H, dtype=transitions.dtype) if pi is None else np.asarray(pi, dtype=transitions.dtype)
    return ActionCHMM(_names(E, symbols, "symbol"), _names(A, actions, "action"), layout, T, pi)


# ------------------------------------------------------------------------------------------------ inference
def engine_state(model: ActionCHMM, backend: str = "cpu") -> tuple[Any, Any]:
    """The implementation of the engine protocol that runs ``model`` on ``backend`` and the model's state there:
    the model's :meth:`ActionCHMM.engine_view` loaded once (the caller passes each walk's :func:`row_keys` to the
    protocol's passes). ``backend``: cpu, gpu, gpu-sim, auto, or an implementation's name, "sparse" for the CPU's
    CSR blocks over the map's non-zeros (:func:`engine.backends.engines.in_form_for`)."""
    from engine.backends import engines

    view, backend = _view(model, backend)
    engine = engines.engine_for(view, backend)
    return engine, engine.load(view)


def _view(model: ActionCHMM, backend: str) -> tuple[Any, str]:
    """The host model the engine runs for ``model`` on ``backend`` (see :func:`engine_state`) and the backend."""
    from engine.backends import engines

    return engines.in_form_for(model.engine_view(), backend)


def with_host_T(model: ActionCHMM, host: Any) -> ActionCHMM:
    """``model`` with the transition values of ``host``, a host model of its engine view in any form."""
    from engine.backends import engines

    engine = engines.engine_for(host)
    return model.with_T(np.asarray(engine.as_dense(engine.load(host), "a map").T, dtype=model.T.dtype))


def _log_likelihood_one(engine: Any, state: Any, x: np.ndarray, key: np.ndarray) -> float:
    result = engine.forward(state, x, row_key=key)
    return -np.inf if result.zero_events else float(np.sum(np.log(result.predictive)))


def log_likelihood(model: ActionCHMM, x: Walks, a: Walks, backend: str = "cpu") -> float:
    """log P(x_1..x_N | a_1..a_{N-1}) in nats, by the scaled forward pass with each step's block from its action
    (alpha(n+1)^T = alpha(n)^T T[a_n](x_n, x_{n+1}), normalised); -inf when the walk is impossible. For several
    walks (:func:`check_walks`) the sum over them, log prod_d P(x^d | a^d), each starting from pi. On any
    implementation (``backend`` as for :func:`engine_state`: cpu, gpu, gpu-sim, sparse)."""
    walks = check_walks(x, a, model.n_symbols, model.n_actions)
    engine, state = engine_state(model, backend)
    E = model.n_symbols
    return float(sum(_log_likelihood_one(engine, state, x_d, row_keys(x_d, a_d, E)) for x_d, a_d in walks))


def bits_per_step(model: ActionCHMM, x: Walks, a: Walks, backend: str = "cpu") -> float:
    """-log2 P(walk) / N: the mean surprisal of an observation given the walk so far and its actions; for several
    walks -sum_d log2 P(x^d | a^d) / sum_d N_d (``backend`` as for :func:`log_likelihood`)."""
    steps = sum(len(x_d) for x_d, _ in check_walks(x, a, model.n_symbols, model.n_actions))
    return -log_likelihood(model, x, a, backend) / steps / np.log(2.0)


def e_step(model: ActionCHMM, x: Walks, a: Walks, backend: str = "cpu") -> inference.EStepResult:
    """Expected transition counts sum_n xi(n) in the model's block layout (each step's counts land in the block of
    its action), with the walk's log-likelihood: the text E-step over the row keys. For several walks the counts
    and log-likelihoods are summed over them (each walk's xi from its own forward-backward pass,
    :func:`engine.backends.engines.e_step_sequences`). On the dense implementations (``backend``: cpu, gpu, gpu-sim:
    counts in the model's flat layout, on the device for the GPU)."""
    from engine.backends import engines

    walks = check_walks(x, a, model.n_symbols, model.n_actions)
    engine, state = engine_state(model, backend)
    keys = [row_keys(x_d, a_d, model.n_symbols) for x_d, a_d in walks]
    return engines.e_step_sequences(engine, state, [x_d for x_d, _ in walks], row_keys=keys)


def viterbi(model: ActionCHMM, x: Walks, a: Walks, backend: str = "cpu") -> tuple[Any, float]:
    """The MAP clone path of the walk (global clone indices, all -1 when the walk is impossible) and
    log max_z P(z, x | a) in nats, by max-product over each step's block of its action (the row shift a_n * E), on
    any implementation of the engine protocol (``backend``: cpu, gpu, gpu-sim, sparse). For several walks:
    the list of their paths and the sum of their log-probabilities (each walk's path is its own MAP path)."""
    walks = check_walks(x, a, model.n_symbols, model.n_actions)
    engine, state = engine_state(model, backend)
    paths, total = [], 0.0
    for x_d, a_d in walks:
        result = engine.viterbi(state, x_d, row_shift=a_d * model.n_symbols)
        paths.append(result.clones)
        total += result.log_probability
    return (paths[0] if not _several(x) else paths), float(total)


def path_counts(model: ActionCHMM, x: np.ndarray, a: np.ndarray, path: np.ndarray) -> np.ndarray:
    """Viterbi EM's hard counts: one per transition of the clone ``path``, in the block of its step's action."""
    return inference.path_counts(model.layout, x, path, row_keys(x, a, model.n_symbols))


Progress = Callable[[int, float], None]


def _bits(log_likelihood: float, steps: int) -> float:
    """-log2 P / N, as :func:`engine.training.learning.fit` writes a training BPS (so the two agree to the bit)."""
    return float(-log_likelihood / (steps * np.log(2.0)))


def learn_em(
    model: ActionCHMM,
    x: Walks,
    a: Walks,
    iterations: int = 100,
    pseudocount: float = 0.0,
    stop_when_worse: bool = True,
    progress: Progress | None = None,
    backend: str = "cpu",
) -> tuple[ActionCHMM, list[float]]:
    """Batch EM on T with the emissions fixed (paper, section 3, per action): E-step counts, then
    T[a] = row-normalise(counts[a] + pseudocount) over the stored blocks. Returns the model and the bits per step
    of the walk under the model each iteration started from; with ``stop_when_worse``, stops at the first
    iteration that does not improve on the one before (the paper's code's early stop), keeping the model that
    entered it. The training loop is :func:`engine.training.learning.fit` (``stop_when_worse``, no tolerance), on any
    implementation of the engine protocol (``backend`` as for :func:`engine_state`: cpu, gpu, gpu-sim, sparse),
    the walk's row keys passed to its E-steps; the model moves to the implementation once and back once. Several
    walks (:func:`check_walks`) share T: their counts are summed, and the bits per step are
    -sum_d log2 P(x^d | a^d) / sum_d N_d."""
    return _fit(model, x, a, learning_config("em", iterations, pseudocount, stop_when_worse), progress, backend)


def learn_online(
    model: ActionCHMM,
    x: Walks,
    a: Walks,
    epochs: int = 10,
    batch_size: int = 400,
    memory: float = 0.9,
    pseudocount: float = 0.0,
    progress: Progress | None = None,
    backend: str = "cpu",
) -> tuple[ActionCHMM, list[float]]:
    """Online EM (paper, section 3; the text engine's :func:`engine.training.learning.online_epoch` with the walk's row
    keys): each epoch passes over the walks in batches of ``batch_size`` steps, and after batch b
    A^(b) = lambda A^(b-1) + (1 - lambda) sum_{n in b} xi(n) (each step's xi in the block of its action),
    T^(b)[a] = row-normalise(A^(b)[a] + pseudocount * |b| / N), lambda = ``memory``. The E-step of a batch starts
    from the last forward message of the batch before (each walk from pi). Returns the model and the bits per step
    of each epoch, -sum_b log2 P(batch b | T^(b-1)) / N, as :func:`engine.training.learning.fit` records it: a walk with
    one action gives the text engine's trajectory to the bit. The loop is :func:`engine.training.learning.fit`
    (``epochs`` epochs, no tolerance); ``backend`` as for :func:`learn_em`."""
    from engine.training import learning

    if not isinstance(epochs, int | np.integer) or epochs < 1:
        raise CHMMError(f"online EM needs at least 1 epoch, got {epochs!r}")
    config = learning.TrainingConfig(
        algorithm="online", iterations=int(epochs), tolerance=None, pseudocount=pseudocount,
        batch_size=batch_size, memory=memory,
    )  # fmt: skip
    config.validate()
    return _fit(model, x, a, config, progress, backend)


def learn_viterbi(
    model: ActionCHMM,
    x: Walks,
    a: Walks,
    iterations: int = 100,
    pseudocount: float = 0.0,
    progress: Progress | None = None,
    backend: str = "cpu",
) -> tuple[ActionCHMM, list[float]]:
    """Viterbi (hard) EM: the counts of the MAP clone path, then T[a] = row-normalise(counts[a] + pseudocount);
    stops when the path's probability no longer improves (keeping the model that entered that iteration). Returns
    the model and -log2 max_z P(z, x | a) / N per iteration (the paper's refinement step, which prunes the clones
    the path does not use). The loop is :func:`engine.training.learning.fit` (Viterbi EM scored by the path, stop when
    worse) on ``backend`` (as for :func:`learn_em`). Several walks: each walk's MAP path, their counts summed,
    -sum_d log2 max P(z^d, x^d | a^d) / sum_d N_d."""
    if iterations < 1:  # nothing decoded: the model as it is
        check_walks(x, a, model.n_symbols, model.n_actions)
        return model, []
    return _fit(model, x, a, learning_config("viterbi", iterations, pseudocount, True), progress, backend)


def learning_config(algorithm: str, iterations: int, pseudocount: float, stop_when_worse: bool) -> Any:
    """The :class:`engine.training.learning.TrainingConfig` of the maps' batch or Viterbi EM: ``iterations`` at most, no
    convergence test on the likelihood's relative gain, the stop when worse of the notebook's recipe (the model
    that entered the iteration that did not improve is kept), Viterbi EM scored by its MAP path's probability."""
    from engine.training import learning

    return learning.TrainingConfig(
        algorithm=algorithm, iterations=int(iterations), tolerance=None, pseudocount=pseudocount,
        stop_when_worse=stop_when_worse, viterbi_score="path",
    )  # fmt: skip


def _fit(
    model: ActionCHMM, x: Walks, a: Walks, config: Any, progress: Progress | None, backend: str
) -> tuple[ActionCHMM, list[float]]:
    """Batch, online or Viterbi EM on the walks by :func:`engine.training.learning.fit` with their row keys: the model
    and the bits per step of each iteration (batch and Viterbi EM: that of the model entering it; online EM: the sum
    over an epoch's batches)."""
    from engine.training import learning

    walks = check_walks(x, a, model.n_symbols, model.n_actions)
    if config.iterations < 1:  # the model as the implementation holds it
        engine, state = engine_state(model, backend)
        return with_host_T(model, engine.host(state)), []
    view, backend = _view(model, backend)
    result = learning.fit(
        view, [x_d for x_d, _ in walks], config=config, backend=backend,
        callback=None if progress is None else (lambda record: progress(record.iteration - 1, record.train_bps)),
        row_keys=[row_keys(x_d, a_d, model.n_symbols) for x_d, a_d in walks],
    )  # fmt: skip
    if result.stopped == "failed":
        raise FloatingPointError(f"learning the map failed: {result.error}")
    return with_host_T(model, result.model), [record.train_bps for record in result.history]
