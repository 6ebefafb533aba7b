"""Reading a learned cognitive map (:mod:`engine.cognitive.actions`): its clone graph and whether it recovers a room's
grid, a clone's place field, routes planned on it, the clones it uses, its transfer to a room with new observations, the
merging of clones with the same future, and walks sampled from it given their actions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from engine.cognitive.actions import (
    ActionCHMM,
    Walks,
    check_room,
    check_walk,
    check_walks,
    engine_state,
    from_dense,
    row_keys,
    viterbi,
)
from engine.errors import CHMMError
from engine.model.blocks import normalise_rows, row_sums


def clone_graph(model: ActionCHMM, x: Walks, a: Walks, backend: str = "cpu") -> Any:
    """The learned map: a directed graph over the clones the walk's MAP path uses, an edge u -> v where the path
    steps from u to v, with ``count`` (path transitions) and ``actions`` (the action names taken along it). For
    several walks (:func:`engine.cognitive.actions.check_walks`) the union of their paths' graphs, counts summed; an
    empty graph when a walk is impossible. The paths are decoded on ``backend``
    (:func:`engine.cognitive.actions.viterbi`)."""
    import networkx as nx

    walks = check_walks(x, a, model.n_symbols, model.n_actions)
    decoded, _ = viterbi(model, [x_d for x_d, _ in walks], [a_d for _, a_d in walks], backend)
    paths = list(decoded)
    graph = nx.DiGraph()
    if any(np.any(path < 0) for path in paths):
        return graph
    symbol = model.clone_symbol()
    for clone in np.unique(np.concatenate(paths)):
        graph.add_node(int(clone), symbol=model.symbols[symbol[clone]])
    steps = [
        (p[:-1] * model.n_states + p[1:]) * model.n_actions + a_d[:-1] for p, (_, a_d) in zip(paths, walks, strict=True)
    ]
    codes, counts = np.unique(np.concatenate(steps), return_counts=True)
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


def recovers_room(model: ActionCHMM, x: Walks, a: Walks, room: Any, backend: str = "cpu") -> bool:
    """Whether the learned map (:func:`clone_graph`, as an undirected graph without self-loops: steps into a wall)
    is isomorphic to the room's grid graph."""
    import networkx as nx

    learned = clone_graph(model, x, a, backend).to_undirected()
    learned.remove_edges_from(list(nx.selfloop_edges(learned)))
    return bool(nx.is_isomorphic(learned, room_graph(room)))


def place_field(
    model: ActionCHMM, x: Walks, a: Walks, positions: np.ndarray, clone: int, backend: str = "cpu"
) -> np.ndarray:
    """Where in the room a clone is active: for every cell, the mean over the walk's visits of the filtered
    probability P(z_n = clone | x_1..x_n, a_1..a_{n-1}) (the forward message), shape (rows, columns) of the room
    the ``positions`` (true (row, column) of each step) come from; NaN for cells never visited. Several walks
    (:func:`engine.cognitive.actions.check_walks`): each filtered from its own start, ``positions`` those of their steps
    in turn. The forward messages come from the engine protocol on ``backend``
    (:func:`engine.cognitive.actions.engine_state`: cpu, gpu, gpu-sim, sparse)."""
    walks = check_walks(x, a, model.n_symbols, model.n_actions)
    positions = np.asarray(positions, dtype=np.int64)
    steps = sum(len(x_d) for x_d, _ in walks)
    if positions.shape != (steps, 2) or positions.min() < 0:
        raise CHMMError("a place field needs the walk's true place (row, column) at every step")
    if not 0 <= clone < model.n_states:
        raise CHMMError(f"clone {clone} is outside 0..{model.n_states - 1}")
    engine, state = engine_state(model, backend)
    activation = np.concatenate([_filtered(model, engine, state, x_d, a_d, clone) for x_d, a_d in walks])
    shape = (int(positions[:, 0].max()) + 1, int(positions[:, 1].max()) + 1)
    total = np.zeros(shape)
    visits = np.zeros(shape)
    np.add.at(total, (positions[:, 0], positions[:, 1]), activation)
    np.add.at(visits, (positions[:, 0], positions[:, 1]), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(visits > 0, total / visits, np.nan)


def _filtered(model: ActionCHMM, engine: Any, state: Any, x: np.ndarray, a: np.ndarray, clone: int) -> np.ndarray:
    """P(z_n = clone | x_1..x_n, a_1..a_{n-1}) at every step of one walk (0 where x_n is not the clone's symbol)."""
    result = engine.forward(state, x, row_key=row_keys(x, a, model.n_symbols), store=True)
    alpha, offsets = result.alpha, result.offsets
    symbol = int(model.clone_symbol()[clone])
    local = clone - int(model.layout.clone_start[symbol])
    activation = np.zeros(len(x))
    seen = x == symbol
    activation[seen] = alpha[offsets[:-1][seen] + local]
    return activation


def plan_route(model: ActionCHMM, start: int, goal: int, threshold: float = 1e-3) -> tuple[list[int], list[str]]:
    """The most probable route from clone ``start`` to clone ``goal`` in the learned map and the actions that take
    it: the path maximising prod_n max_a T[a](z_n, z_{n+1}) over transitions above ``threshold`` (a shortest path
    on -log T, networkx's Dijkstra); ValueError in one sentence when the goal cannot be reached."""
    import networkx as nx

    for name, clone in (("start", start), ("goal", goal)):
        if not 0 <= clone < model.n_states:
            raise CHMMError(f"the {name} clone {clone} is outside 0..{model.n_states - 1}")
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
        raise CHMMError(f"clone {goal} cannot be reached from clone {start} in the learned map") from None
    moves = [model.actions[graph[u][v]["action"]] for u, v in zip(route[:-1], route[1:], strict=True)]
    return [int(c) for c in route], moves


def used_clones(model: ActionCHMM) -> np.ndarray:
    """The clones with outgoing mass under some action or incoming mass from some clone (after Viterbi EM: the clones
    of the learned map, those where a walk ends without a successor included)."""
    sums = row_sums(model.layout, model.T).reshape(model.n_actions, model.n_states)
    entered = np.zeros(model.n_states, dtype=bool)
    layout, E = model.layout, model.n_symbols
    for k, (row, j) in enumerate(layout.block_pairs):
        i = int(row) % E
        m_i, m_j = int(layout.n_clones[i]), int(layout.n_clones[j])
        block = model.T[layout.block_offset[k] : layout.block_offset[k + 1]].reshape(m_i, m_j)
        start = int(layout.clone_start[j])
        entered[start : start + m_j] |= block.max(axis=0, initial=0) > 0
    return np.flatnonzero((sums.max(axis=0) > 0) | entered)


def transfer_transitions(model: ActionCHMM) -> tuple[np.ndarray, np.ndarray]:
    """The map's clones (:func:`used_clones`) and its T[a] among them, shape (A, m, m) float64, as a transfer to a
    new room reads them: a (clone, action) the map never took keeps the clone where it is (a step into a wall)."""
    clones = used_clones(model)
    if len(clones) == 0:
        raise CHMMError("the map has no transitions to transfer (train it first)")
    transitions = np.stack(
        [model.transition(k)[np.ix_(clones, clones)].astype(np.float64) for k in range(model.n_actions)]
    )
    for k in range(model.n_actions):
        stuck = np.flatnonzero(transitions[k].sum(axis=1) <= 0)
        transitions[k][stuck, stuck] = 1.0
        transitions[k] /= transitions[k].sum(axis=1, keepdims=True)
    return clones, transitions


def learn_emissions(
    model: ActionCHMM,
    x: np.ndarray,
    a: np.ndarray,
    n_observations: int,
    iterations: int = 50,
    seed: int = 0,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[np.ndarray, list[float]]:
    """Transfer a map to a room with the same layout and new observations: EM on the emission matrix
    E(u, o) = P(x_n = o | z_n = u) of the map's clones (:func:`used_clones`) with their transitions T[a] fixed
    (the paper's code's ``learn_em_E``). Scaled forward-backward over the clones: alpha(n+1) = (alpha(n) T[a_n]) o
    E(., x_{n+1}), normalised; E = row-normalise(sum_n gamma(n) [x_n = o]). Returns E over every clone, shape
    (H, n_observations) (zero rows for clones outside the map), and the bits per step each iteration started from.
    A (clone, action) the map never took keeps the clone where it is (a step into a wall). ``progress(iteration,
    bits)`` is called after each iteration (an exception it raises stops the fit: a cancel)."""
    x, a = check_walk(x, a, n_observations, model.n_actions)
    clones, transitions = transfer_transitions(model)
    m = len(clones)
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
                raise CHMMError("the walk is impossible under the map (no clone can emit its observations)")
            log_likelihood += np.log(total)
            alpha[step] = message / total
        beta[-1] = 1.0
        for step in range(n - 2, -1, -1):
            message = transitions[a[step]] @ (beta[step + 1] * emissions[:, x[step + 1]])
            beta[step] = message / message.sum()
        history.append(-log_likelihood / n / np.log(2.0))
        if progress is not None:
            progress(len(history) - 1, history[-1])
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


# ------------------------------------------------------------------------------------------------ walks with actions
def _action_matrices(model: ActionCHMM) -> list[Any]:
    """T[a] of every action as a sparse H x H matrix (float64, CSR) built from the stored blocks."""
    from scipy import sparse

    layout, E, H = model.layout, model.n_symbols, model.n_states
    block = np.repeat(np.arange(layout.n_blocks), np.diff(layout.block_offset))
    local = np.arange(layout.size) - layout.block_offset[block]
    action, i = np.divmod(layout.block_pairs[block, 0], E)
    j = layout.block_pairs[block, 1]
    u = layout.clone_start[i] + local // layout.n_clones[j]
    v = layout.clone_start[j] + local % layout.n_clones[j]
    values = model.T.astype(np.float64)
    return [
        sparse.csr_matrix((values[action == k], (u[action == k], v[action == k])), shape=(H, H))
        for k in range(model.n_actions)
    ]


def sample_walks(model: ActionCHMM, a: Any, count: int, rng: np.random.Generator | int = 0) -> np.ndarray:
    """``count`` walks' observations drawn from the model given the actions a_1..a_N (the last is not used), shape
    (count, N): z_1 ~ pi, z_{n+1} ~ T[a_n](z_n, .), x_n the symbol of clone z_n, conditioned on the walk lasting
    N steps. A row of T[a] sums to 1 or to 0 (a clone the training walk never moved from by action a), so each
    clone is drawn with the survival s_n(u) = P(a clone path goes on from z_n = u to step N | a), s_N = 1,
    s_n(u) = sum_v T[a_n](u, v) s_{n+1}(v) (a backward pass): P(z_1 = u) = pi(u) s_1(u) / Z_1 and
    P(z_{n+1} = v | z_n = u) = T[a_n](u, v) s_{n+1}(v) / s_n(u). Hence P(x | a) is the model's probability of x
    divided by that of all N-step walks (exactly the model's when every row sums to 1). ``rng``: a generator or a
    seed. ValueError in one sentence for bad actions or when no clone path takes all N steps."""
    _, a = check_walk(np.zeros(np.shape(a)[:1], dtype=np.int64), a, None, model.n_actions)
    if not isinstance(count, int | np.integer) or count < 1:
        raise CHMMError(f"the number of walks to sample must be a positive whole number, got {count!r}")
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    matrices = _action_matrices(model)
    n = len(a)
    survival = np.empty((n, model.n_states))
    survival[-1] = 1.0
    for step in range(n - 2, -1, -1):
        s = matrices[a[step]] @ survival[step + 1]
        survival[step] = s / s.max() if s.max() > 0 else s  # a scale per step does not change the draws
    start = model.pi.astype(np.float64) * survival[0]
    if not start.sum() > 0:
        raise CHMMError(f"no clone path of the model takes these {n} actions (the model cannot make this walk)")
    symbol = model.clone_symbol()
    uniforms = rng.random((count, n))
    out = np.empty((count, n), dtype=np.int64)
    cumulative = np.cumsum(start)
    for w in range(count):
        z = min(int(np.searchsorted(cumulative, uniforms[w, 0] * cumulative[-1], side="right")), len(start) - 1)
        out[w, 0] = symbol[z]
        for step in range(n - 1):
            matrix = matrices[a[step]]
            lo, hi = matrix.indptr[z], matrix.indptr[z + 1]
            columns = matrix.indices[lo:hi]
            weights = np.cumsum(matrix.data[lo:hi] * survival[step + 1, columns])
            pick = min(int(np.searchsorted(weights, uniforms[w, step + 1] * weights[-1], side="right")), hi - lo - 1)
            z = int(columns[pick])
            out[w, step + 1] = symbol[z]
    return out


def sample_walk(model: ActionCHMM, a: Any, rng: np.random.Generator | int = 0) -> np.ndarray:
    """One walk's observations drawn given its actions (:func:`sample_walks` with one walk), shape (N,)."""
    return sample_walks(model, a, 1, rng)[0]
