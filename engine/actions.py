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
``a_n * E + x_n`` (:func:`engine.kernels.cpu.forward_pass`). A text is the walk with one action: its row keys are
its symbols and its layout the text layout, so every text figure is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine import inference
from engine.archive import MAX_MODEL_BYTES, ArchiveError, ModelArchive
from engine.blocks import BlockLayout, normalise_rows, row_sums
from engine.kernels import cpu
from engine.model import CHMM, ModelFormatError, check_row_sums, write_npz_atomic

MOVES = ("left", "right", "up", "down")
"""The actions of a walk in a grid room, in the order of the paper's public code (0 left, 1 right, 2 up, 3 down)."""
STEPS = np.array([[0, -1], [0, 1], [-1, 0], [1, 0]], dtype=np.int64)
"""(row, column) change of each move of :data:`MOVES`."""
WALL = -1
"""A cell of a room that cannot be entered."""


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
        raise ValueError("a room must be a rectangular table of whole numbers") from None
    if grid.ndim != 2 or grid.size == 0:
        raise ValueError(f"a room must be a non-empty 2-D table of observations, got shape {grid.shape}")
    if grid.dtype.kind not in "iu" and not (grid.dtype.kind == "f" and np.all(grid == np.round(grid))):
        raise ValueError("a room's cells must be whole numbers (an observation, or -1 for a wall)")
    grid = grid.astype(np.int64)
    if np.any(grid < WALL):
        raise ValueError("a room's cells must be observations 0, 1, 2, ... or -1 for a wall")
    if not np.any(grid >= 0):
        raise ValueError("a room needs at least one cell that is not a wall")
    return grid


def generate_walk(room: Any, length: int, seed: int = 0, start: tuple[int, int] | None = None) -> Walk:
    """A random walk of ``length`` steps in a grid ``room``: at every step one of the four :data:`MOVES` uniformly
    at random; a move out of the room or into a wall cell leaves the walker where it is (it still observes its
    cell again). The semantics of the paper's room generator (``datagen_structured_obs_room``)."""
    grid = check_room(room)
    if not isinstance(length, int | np.integer) or length < 2:
        raise ValueError(f"a walk needs at least 2 steps, got {length!r}")
    rng = np.random.default_rng(seed)
    height, width = grid.shape
    if start is None:
        open_cells = np.argwhere(grid >= 0)
        r, c = (int(v) for v in open_cells[rng.integers(len(open_cells))])
    else:
        r, c = int(start[0]), int(start[1])
        if not (0 <= r < height and 0 <= c < width) or grid[r, c] < 0:
            raise ValueError(f"the start {start} is not an open cell of the {height} x {width} room")
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
        raise ValueError("a walk needs one action per observation (two 1-D sequences of the same length)")
    if len(x) < 2:
        raise ValueError("a walk needs at least 2 steps")
    if x.min() < 0 or (n_symbols is not None and x.max() >= n_symbols):
        raise ValueError(f"the walk has observations outside 0..{(n_symbols or 1) - 1}")
    if a.min() < 0 or (n_actions is not None and a[:-1].max(initial=0) >= n_actions):
        raise ValueError(f"the walk has actions outside 0..{(n_actions or 1) - 1}")
    return x, a


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
        raise ValueError("a model needs at least one action")
    if triples.size and (triples[:, 0].max() >= n_actions or triples[:, 0].min() < 0):
        raise ValueError("a block names an action outside the model's actions")
    E = len(n_clones)
    if triples.size and (triples[:, 1:].max() >= E or triples[:, 1:].min() < 0):
        raise ValueError("a block names a symbol outside the model's alphabet")
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
            raise ValueError(
                f"the layout has {self.layout.n_symbols} row symbols; {A} actions x {E} symbols need {A * E}"
            )
        if self.T.shape != (self.layout.size,):
            raise ValueError(f"T has shape {self.T.shape}, the layout needs ({self.layout.size},)")
        if self.pi.shape != (self.n_states,):
            raise ValueError(f"pi has shape {self.pi.shape}, the model has {self.n_states} clones")

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


def load(path: Any, max_bytes: int = MAX_MODEL_BYTES) -> ActionCHMM:
    """Load a model saved by :meth:`ActionCHMM.save`, read as untrusted input: every array's size checked against
    the layout and the byte budget before it is inflated, and every stored row of every T[a] summing to 1 (or 0);
    a missing, damaged or foreign file raises :class:`ModelFormatError` in one sentence."""
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
            n_clones = archive.array("n_clones", shape=(len(symbols),), kind="iu").astype(np.int64)
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
        raise ValueError(f"{len(names)} {kind} names for {count} {kind}s")
    return [str(v) for v in names]


def random_action_model(
    n_clones: np.ndarray,
    x: np.ndarray,
    a: np.ndarray,
    seed: int = 0,
    symbols: list[str] | None = None,
    actions: list[str] | None = None,
    dtype: Any = np.float32,
) -> ActionCHMM:
    """A model with a block for every (action, symbol, symbol) triple of the walk, each row of T[a] uniform(0, 1)
    entries normalised over its blocks, and pi uniform."""
    n_clones = np.asarray(n_clones, dtype=np.int64)
    x, a = check_walk(x, a, len(n_clones))
    n_actions = int(a[:-1].max()) + 1 if actions is None else len(actions)
    layout = action_layout(n_clones, n_actions, triples_in_walk(x, a, len(n_clones)))
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
        raise ValueError(f"transitions have shape {transitions.shape}, {H} clones need (A, {H}, {H})")
    E = len(n_clones)
    layout = action_layout(n_clones, A, all_triples(E, A) if triples is None else triples)
    T = np.empty(layout.size, dtype=transitions.dtype)
    start = layout.clone_start
    for k, (row, j) in enumerate(layout.block_pairs):
        action, i = divmod(int(row), E)
        T[layout.block_offset[k] : layout.block_offset[k + 1]] = transitions[
            action, start[i] : start[i + 1], start[j] : start[j + 1]
        ].ravel()
    pi = np.full(H, 1.0 / H, dtype=transitions.dtype) if pi is None else np.asarray(pi, dtype=transitions.dtype)
    return ActionCHMM(_names(E, symbols, "symbol"), _names(A, actions, "action"), layout, T, pi)


# ------------------------------------------------------------------------------------------------ inference
def log_likelihood(model: ActionCHMM, x: np.ndarray, a: np.ndarray) -> float:
    """log P(x_1..x_N | a_1..a_{N-1}) in nats, by the scaled forward pass with each step's block from its action
    (alpha(n+1)^T = alpha(n)^T T[a_n](x_n, x_{n+1}), normalised); -inf when the walk is impossible."""
    x, a = check_walk(x, a, model.n_symbols, model.n_actions)
    view = model.engine_view()
    layout = view.layout
    predictive = np.empty(len(x), dtype=np.float64)
    events = cpu.forward_pass(
        view.T, view.pi, x, row_keys(x, a, model.n_symbols), layout.n_clones, layout.clone_start,
        layout.block_lookup, layout.block_offset, np.zeros(0, dtype=view.T.dtype), np.zeros(0, dtype=np.int64),
        predictive,
    )  # fmt: skip
    return -np.inf if events else float(np.sum(np.log(predictive)))


def bits_per_step(model: ActionCHMM, x: np.ndarray, a: np.ndarray) -> float:
    """-log2 P(walk) / N: the mean surprisal of an observation given the walk so far and its actions."""
    return -log_likelihood(model, x, a) / len(x) / np.log(2.0)


def e_step(model: ActionCHMM, x: np.ndarray, a: np.ndarray) -> inference.EStepResult:
    """Expected transition counts sum_n xi(n) in the model's block layout (each step's counts land in the block of
    its action), with the walk's log-likelihood: the text E-step over the row keys."""
    x, a = check_walk(x, a, model.n_symbols, model.n_actions)
    return inference.e_step(model.engine_view(), x, row_key=row_keys(x, a, model.n_symbols))


def viterbi(model: ActionCHMM, x: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, float]:
    """The MAP clone path of the walk (global clone indices, all -1 when the walk is impossible) and
    log max_z P(z, x | a) in nats, by max-product over each step's block of its action."""
    x, a = check_walk(x, a, model.n_symbols, model.n_actions)
    result = inference.viterbi(model.engine_view(), x, row_shift=a * model.n_symbols)
    return result.clones, result.log_probability


def path_counts(model: ActionCHMM, x: np.ndarray, a: np.ndarray, path: np.ndarray) -> np.ndarray:
    """Viterbi EM's hard counts: one per transition of the clone ``path``, in the block of its step's action."""
    counts = np.zeros(model.layout.size, dtype=np.float64)
    if np.any(path < 0):
        return counts
    layout, E = model.layout, model.n_symbols
    k = layout.find_blocks(row_keys(x[:-1], a[:-1], E), x[1:])
    local_from = path[:-1] - layout.clone_start[x[:-1]]
    local_to = path[1:] - layout.clone_start[x[1:]]
    flat = layout.block_offset[k] + local_from * layout.n_clones[x[1:]] + local_to
    counts += np.bincount(flat, minlength=layout.size)
    return counts


Progress = Callable[[int, float], None]


def learn_em(
    model: ActionCHMM,
    x: np.ndarray,
    a: np.ndarray,
    iterations: int = 100,
    pseudocount: float = 0.0,
    stop_when_worse: bool = True,
    progress: Progress | None = None,
    backend: str = "cpu",
) -> tuple[ActionCHMM, list[float]]:
    """Batch EM on T with the emissions fixed (paper, section 3, per action): E-step counts, then
    T[a] = row-normalise(counts[a] + pseudocount) over the stored blocks. Returns the model and the bits per step
    of the walk under the model each iteration started from; with ``stop_when_worse``, stops at the first
    iteration that does not improve on the one before (the paper's code's early stop). Runs on any dense
    implementation of the engine protocol (``backend``: cpu, gpu, gpu-sim), the walk's row keys passed to its
    E-steps; the model moves to the implementation once and back once."""
    from engine import engines

    x, a = check_walk(x, a, model.n_symbols, model.n_actions)
    keys = row_keys(x, a, model.n_symbols)
    engine = engines.engine_for(model.engine_view(), backend)
    state = engine.load(model.engine_view())
    plan = engine.plan(state, x, "em", len(x), row_key=keys)
    history: list[float] = []
    for iteration in range(iterations):
        e = engine.e_step(state, x, plan=plan, row_key=keys)
        bits = -e.log_likelihood / len(x) / np.log(2.0)
        history.append(bits)
        if progress is not None:
            progress(iteration, bits)
        if stop_when_worse and len(history) > 1 and not bits < history[-2]:
            break
        state = engine.m_step(state, e.counts, pseudocount)
    return model.with_T(np.asarray(engine.host(state).T, dtype=model.T.dtype)), history


def learn_viterbi(
    model: ActionCHMM,
    x: np.ndarray,
    a: np.ndarray,
    iterations: int = 100,
    pseudocount: float = 0.0,
    progress: Progress | None = None,
) -> tuple[ActionCHMM, list[float]]:
    """Viterbi (hard) EM: the counts of the MAP clone path, then T[a] = row-normalise(counts[a] + pseudocount);
    stops when the path's probability no longer improves. Returns the model and -log2 max_z P(z, x | a) / N per
    iteration (the paper's refinement step, which prunes the clones the path does not use)."""
    x, a = check_walk(x, a, model.n_symbols, model.n_actions)
    history: list[float] = []
    for iteration in range(iterations):
        path, log_probability = viterbi(model, x, a)
        bits = -log_probability / len(x) / np.log(2.0)
        history.append(bits)
        if progress is not None:
            progress(iteration, bits)
        if len(history) > 1 and not bits < history[-2]:
            break
        model = model.with_T(normalise_rows(model.layout, path_counts(model, x, a, path), pseudocount, model.T.dtype))
    return model, history


# ------------------------------------------------------------------------------------------------ the map
def clone_graph(model: ActionCHMM, x: np.ndarray, a: np.ndarray) -> Any:
    """The learned map: a directed graph over the clones the walk's MAP path uses, an edge u -> v where the path
    steps from u to v, with ``count`` (path transitions) and ``actions`` (the action names taken along it)."""
    import networkx as nx

    x, a = check_walk(x, a, model.n_symbols, model.n_actions)
    path, _ = viterbi(model, x, a)
    graph = nx.DiGraph()
    if np.any(path < 0):
        return graph
    symbol = model.clone_symbol()
    for clone in np.unique(path):
        graph.add_node(int(clone), symbol=model.symbols[symbol[clone]])
    codes, counts = np.unique((path[:-1] * model.n_states + path[1:]) * model.n_actions + a[:-1], return_counts=True)
    for code, count in zip(codes.tolist(), counts.tolist(), strict=True):
        edge, action = divmod(code, model.n_actions)
        u, v = divmod(edge, model.n_states)
        if graph.has_edge(u, v):
            graph[u][v]["count"] += count
            graph[u][v]["actions"].append(model.actions[action])
        else:
            graph.add_edge(u, v, count=count, actions=[model.actions[action]])
    return graph


def room_graph(room: Any) -> Any:
    """The grid graph of a room: its open cells, an edge between cells side by side (the map a walk should
    recover)."""
    import networkx as nx

    grid = check_room(room)
    graph = nx.Graph()
    cells = [tuple(int(v) for v in cell) for cell in np.argwhere(grid >= 0)]
    graph.add_nodes_from(cells)
    for r, c in cells:
        for dr, dc in ((0, 1), (1, 0)):
            if (r + dr, c + dc) in graph:
                graph.add_edge((r, c), (r + dr, c + dc))
    return graph


def recovers_room(model: ActionCHMM, x: np.ndarray, a: np.ndarray, room: Any) -> bool:
    """Whether the learned map (:func:`clone_graph`, as an undirected graph without self-loops: steps into a wall)
    is isomorphic to the room's grid graph."""
    import networkx as nx

    learned = clone_graph(model, x, a).to_undirected()
    learned.remove_edges_from(list(nx.selfloop_edges(learned)))
    return bool(nx.is_isomorphic(learned, room_graph(room)))


def place_field(model: ActionCHMM, x: np.ndarray, a: np.ndarray, positions: np.ndarray, clone: int) -> np.ndarray:
    """Where in the room a clone is active: for every cell, the mean over the walk's visits of the filtered
    probability P(z_n = clone | x_1..x_n, a_1..a_{n-1}) (the forward message), shape (rows, columns) of the room
    the ``positions`` (true (row, column) of each step) come from; NaN for cells never visited."""
    x, a = check_walk(x, a, model.n_symbols, model.n_actions)
    positions = np.asarray(positions, dtype=np.int64)
    if positions.shape != (len(x), 2) or positions.min() < 0:
        raise ValueError("a place field needs the walk's true place (row, column) at every step")
    if not 0 <= clone < model.n_states:
        raise ValueError(f"clone {clone} is outside 0..{model.n_states - 1}")
    view = model.engine_view()
    layout = view.layout
    offsets = inference.sequential_offsets(layout, x)
    alpha = np.empty(int(offsets[-1]), dtype=view.T.dtype)
    cpu.forward_pass(
        view.T, view.pi, x, row_keys(x, a, model.n_symbols), layout.n_clones, layout.clone_start,
        layout.block_lookup, layout.block_offset, alpha, offsets, np.empty(len(x)),
    )  # fmt: skip
    symbol = int(model.clone_symbol()[clone])
    local = clone - int(layout.clone_start[symbol])
    activation = np.zeros(len(x))
    seen = x == symbol
    activation[seen] = alpha[offsets[:-1][seen] + local]
    shape = (int(positions[:, 0].max()) + 1, int(positions[:, 1].max()) + 1)
    total = np.zeros(shape)
    visits = np.zeros(shape)
    np.add.at(total, (positions[:, 0], positions[:, 1]), activation)
    np.add.at(visits, (positions[:, 0], positions[:, 1]), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(visits > 0, total / visits, np.nan)


def plan(model: ActionCHMM, start: int, goal: int, threshold: float = 1e-3) -> tuple[list[int], list[str]]:
    """The most probable route from clone ``start`` to clone ``goal`` in the learned map and the actions that take
    it: the path maximising prod_n max_a T[a](z_n, z_{n+1}) over transitions above ``threshold`` (a shortest path
    on -log T, networkx's Dijkstra); ValueError in one sentence when the goal cannot be reached."""
    import networkx as nx

    for name, clone in (("start", start), ("goal", goal)):
        if not 0 <= clone < model.n_states:
            raise ValueError(f"the {name} clone {clone} is outside 0..{model.n_states - 1}")
    E, layout = model.n_symbols, model.layout
    best: dict[tuple[int, int], tuple[float, int]] = {}
    for k, (row, j) in enumerate(layout.block_pairs):
        action, i = divmod(int(row), E)
        m_i, m_j = int(layout.n_clones[i]), int(layout.n_clones[j])
        block = model.T[layout.block_offset[k] : layout.block_offset[k + 1]].reshape(m_i, m_j)
        for u, v in np.argwhere(block > threshold):
            edge = (int(layout.clone_start[i] + u), int(layout.clone_start[j] + v))
            p = float(block[u, v])
            if edge not in best or p > best[edge][0]:
                best[edge] = (p, action)
    graph = nx.DiGraph()
    for (u, v), (p, action) in best.items():
        graph.add_edge(u, v, weight=-np.log(p), action=action)
    if start == goal:
        return [start], []
    try:
        route = nx.dijkstra_path(graph, start, goal)
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        raise ValueError(f"clone {goal} cannot be reached from clone {start} in the learned map") from None
    moves = [model.actions[graph[u][v]["action"]] for u, v in zip(route[:-1], route[1:], strict=True)]
    return [int(c) for c in route], moves


def used_clones(model: ActionCHMM) -> np.ndarray:
    """The clones with outgoing mass under some action (after Viterbi EM: the clones of the learned map)."""
    sums = row_sums(model.layout, model.T).reshape(model.n_actions, model.n_states)
    return np.flatnonzero(sums.max(axis=0) > 0)


def learn_emissions(
    model: ActionCHMM, x: np.ndarray, a: np.ndarray, n_observations: int, iterations: int = 50, seed: int = 0
) -> tuple[np.ndarray, list[float]]:
    """Transfer a map to a room with the same layout and new observations: EM on the emission matrix
    E(u, o) = P(x_n = o | z_n = u) of the map's clones (:func:`used_clones`) with their transitions T[a] fixed
    (the paper's code's ``learn_em_E``). Scaled forward-backward over the clones: alpha(n+1) = (alpha(n) T[a_n]) o
    E(., x_{n+1}), normalised; E = row-normalise(sum_n gamma(n) [x_n = o]). Returns E over every clone, shape
    (H, n_observations) (zero rows for clones outside the map), and the bits per step each iteration started from.
    A (clone, action) the map never took keeps the clone where it is (a step into a wall)."""
    x, a = check_walk(x, a, n_observations, model.n_actions)
    clones = used_clones(model)
    if len(clones) == 0:
        raise ValueError("the map has no transitions to transfer (train it first)")
    m = len(clones)
    transitions = np.stack(
        [model.transition(k)[np.ix_(clones, clones)].astype(np.float64) for k in range(model.n_actions)]
    )
    for k in range(model.n_actions):
        stuck = np.flatnonzero(transitions[k].sum(axis=1) <= 0)
        transitions[k][stuck, stuck] = 1.0
        transitions[k] /= transitions[k].sum(axis=1, keepdims=True)
    emissions = np.random.default_rng(seed).random((m, n_observations)) + 1.0
    emissions /= emissions.sum(axis=1, keepdims=True)
    n = len(x)
    history: list[float] = []
    alpha = np.empty((n, m))
    beta = np.empty((n, m))
    for _ in range(iterations):
        log_likelihood = 0.0
        message = emissions[:, x[0]] / m
        for step in range(n):
            if step:
                message = (alpha[step - 1] @ transitions[a[step - 1]]) * emissions[:, x[step]]
            total = message.sum()
            if total <= 0:
                raise ValueError("the walk is impossible under the map (no clone can emit its observations)")
            log_likelihood += np.log(total)
            alpha[step] = message / total
        beta[-1] = 1.0
        for step in range(n - 2, -1, -1):
            message = transitions[a[step]] @ (beta[step + 1] * emissions[:, x[step + 1]])
            beta[step] = message / message.sum()
        history.append(-log_likelihood / n / np.log(2.0))
        gamma = alpha * beta
        gamma /= gamma.sum(axis=1, keepdims=True)
        counts = np.zeros((m, n_observations))
        np.add.at(counts.T, x, gamma)
        emissions = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1e-300)
        if len(history) > 1 and history[-2] - history[-1] < 1e-9:
            break
    full = np.zeros((model.n_states, n_observations))
    full[clones] = emissions
    return full, history


def merge_equivalent_clones(model: ActionCHMM, threshold: float = 0.5) -> tuple[ActionCHMM, np.ndarray]:
    """Merge the clones of the map that have the same future: the coarsest partition of the used clones
    (:func:`used_clones`) by observation in which, for every action, the clones of a class step to one class
    (Moore's minimisation of the map read as a deterministic automaton: a clone's move under action a is its most
    probable successor when that holds more than ``threshold`` of its row, else undefined, and an undefined move
    only matches another). Two clones that stand for one place have the same future, so a map that split a place
    between clones becomes one clone per place. T of a merged clone under each action is the mean of its members'
    rows, summed over the merged columns. Returns the merged model (at least one clone per symbol) and the class
    of every clone of ``model`` (-1 for clones outside the map)."""
    clones = used_clones(model)
    symbol = model.clone_symbol()
    transitions = [model.transition(k).astype(np.float64) for k in range(model.n_actions)]
    moves = np.full((model.n_actions, model.n_states), -1, dtype=np.int64)
    for k, dense in enumerate(transitions):
        sure = dense.max(axis=1) > threshold
        moves[k, sure] = dense.argmax(axis=1)[sure]
    classes = np.full(model.n_states, -1, dtype=np.int64)
    classes[clones] = symbol[clones]
    count = len(np.unique(classes[clones]))
    while True:
        signature = [
            (int(classes[u]), *(int(classes[moves[k, u]]) if moves[k, u] >= 0 else -1 for k in range(model.n_actions)))
            for u in clones
        ]
        order = {s: i for i, s in enumerate(sorted(set(signature)))}
        refined = np.full(model.n_states, -1, dtype=np.int64)
        refined[clones] = [order[s] for s in signature]
        classes = refined
        if len(order) == count:
            break
        count = len(order)
    class_symbol = np.zeros(count, dtype=np.int64)
    class_symbol[classes[clones]] = symbol[clones]
    n_clones = np.bincount(class_symbol, minlength=model.n_symbols)
    n_clones[n_clones == 0] = 1  # a symbol the map never uses keeps one clone without transitions
    start = np.concatenate([[0], np.cumsum(n_clones)])
    position = np.empty(count, dtype=np.int64)  # merged clone of each class, laid out symbol by symbol
    placed = start[:-1].copy()
    for c in range(count):
        position[c] = placed[class_symbol[c]]
        placed[class_symbol[c]] += 1
    H = int(start[-1])
    merged_of = np.full(model.n_states, -1, dtype=np.int64)
    merged_of[clones] = position[classes[clones]]
    size = np.bincount(merged_of[clones], minlength=H).astype(np.float64)
    dense = np.zeros((model.n_actions, H, H))
    for k, T_k in enumerate(transitions):
        rows = np.zeros((H, model.n_states))
        np.add.at(rows, merged_of[clones], T_k[clones])
        columns = np.zeros((H, H))
        np.add.at(columns.T, merged_of[clones], rows[:, clones].T)
        dense[k] = columns / np.maximum(size, 1.0)[:, None]
    block_mass = np.add.reduceat(np.add.reduceat(dense, start[:-1], axis=1), start[:-1], axis=2)
    triples = np.argwhere(block_mass > 0)
    merged = from_dense(dense, n_clones, triples=triples, symbols=model.symbols, actions=model.actions)
    merged = merged.with_T(normalise_rows(merged.layout, merged.T.astype(np.float64), 0.0, model.T.dtype))
    merged = ActionCHMM(merged.symbols, merged.actions, merged.layout, merged.T, merged.pi.astype(model.T.dtype))
    return merged, merged_of
