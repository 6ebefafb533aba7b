"""The learned graph: the CHMM as a directed weighted clone graph (paper, 4.2), the clones a Viterbi path keeps, and
the sweep of pruning thresholds against validation text (the pruning itself is :mod:`engine.model.pruning`).

The clone graph (:class:`CloneGraph`) is the H x H scipy CSR matrix of the non-zero transitions with node
attributes ``char``, ``clone``, ``flow`` and edge attributes ``weight`` (T), ``count`` (the expected counts of
the last E-step, if the model kept them) and ``flow`` (node flow x T). Node flow is the stationary distribution
of T, computed robustly for reducible chains (see :func:`stationary_distribution`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from engine.backends.cpu import inference
from engine.errors import CHMMError
from engine.model import pruning
from engine.model.dense import CHMM

TELEPORTATION = 1e-6
"""Teleportation probability of :func:`stationary_distribution` (see there)."""

VISIBLE_CHARS = {" ": "\u2423", "\n": "\u23ce", "\t": "\u21e5", '"': "''"}
"""How a symbol is shown in node labels and file formats that quote names (space as the open-box glyph)."""


def viterbi_clones(model: CHMM, x: np.ndarray) -> np.ndarray:
    """Boolean mask of the clones the Viterbi (MAP) clone path of the symbol sequence ``x`` visits."""
    path = inference.viterbi(model, x).clones
    if np.any(path < 0):
        raise CHMMError("the text has probability zero under the model; no Viterbi path to keep")
    used = np.zeros(model.n_states, dtype=bool)
    used[path] = True
    return used


def prune_to_viterbi(model: CHMM, x: np.ndarray, threshold: float | None = None) -> CHMM:
    """Keep only the clones the Viterbi path of ``x`` uses (and, optionally, the entries >= ``threshold``)."""
    return pruning.prune(model, threshold=threshold, keep_clones=viterbi_clones(model, x))


class SweepPoint(NamedTuple):
    """One threshold of :func:`prune_sweep`: kept share of the non-zeros, non-zeros left, validation BPS, and
    the validation steps that hit a pruned (zero-probability) transition."""

    threshold: float
    kept_fraction: float
    nonzeros: int
    bps: float
    zero_probability_events: int


def prune_sweep(model: CHMM, thresholds: list[float], validation: np.ndarray) -> list[SweepPoint]:
    """For each threshold: prune ``model`` and score the symbol sequence ``validation`` (the paper's Fig 3(d)).
    The BPS uses :func:`engine.backends.cpu.inference.score` (bigram back-off for transitions that pruning removed)."""
    points = []
    for threshold in thresholds:
        pruned = pruning.prune(model, threshold=threshold)
        result = inference.score(pruned, validation)
        points.append(
            SweepPoint(
                float(threshold),
                pruned.metadata["pruned"]["kept_fraction"],
                pruned.n_nonzero(),
                result.bps,
                result.zero_probability_events,
            )
        )
    return points


# ========================================================================================= clone graph
def visible_char(symbol: str) -> str:
    """The symbol as shown in labels: whitespace as a visible glyph (space as U+2423), double quotes as ''."""
    return VISIBLE_CHARS.get(symbol, symbol)


def stationary_distribution(
    weight: sp.csr_array | sp.csr_matrix, teleportation: float = TELEPORTATION, active: np.ndarray | None = None
) -> np.ndarray:
    """Stationary distribution of the Markov chain with (sub-)stochastic transition matrix ``weight``, robust
    for reducible and periodic chains.

    Computed as PageRank with a small teleportation probability tau (default 1e-6): p = (1 - tau) p T + tau u
    + (mass on dead-end rows) u, with u uniform over the ``active`` clones (default: the clones with at least
    one transition in or out; the others get flow 0). It is solved exactly, as the sparse linear system
    (I - (1 - tau) T^T) y = u followed by p = y / sum(y) (the normalisation sends dead-end mass back to u),
    not by power iteration, which does not converge on periodic chains such as the toy FSM: BiCGSTAB first
    (milliseconds on pruned text graphs), checked by its residual, else a sparse LU solve. For an irreducible
    T the result is the stationary distribution up to O(tau); for a reducible one it is the tau -> 0 limit that
    weighs each closed class by how much teleported flow drains into it. Falls back to the uniform
    distribution over active clones if the solver fails.
    """
    n = weight.shape[0]
    W = sp.csr_array(weight, dtype=np.float64)
    if active is None:
        active = (np.diff(W.indptr) > 0) | (np.bincount(W.indices, minlength=n) > 0)
    u = active.astype(np.float64)
    if u.sum() == 0:
        return np.zeros(n)
    u /= u.sum()
    system = (sp.identity(n, format="csr") - (1.0 - teleportation) * W.T.tocsr()).tocsr()
    y = None
    with np.errstate(all="ignore"):
        try:  # BiCGSTAB: milliseconds on text graphs; it can fail on periodic chains, then solve directly
            guess, info = spla.bicgstab(system, u, x0=u, rtol=1e-12, atol=0.0, maxiter=2000)
            if info == 0 or (np.all(np.isfinite(guess)) and np.abs(system @ guess - u).sum() < 1e-9):
                y = guess
        except (ArithmeticError, ValueError):
            y = None
    if y is None or not np.all(np.isfinite(y)) or np.abs(system @ y - u).sum() > 1e-8:
        try:
            y = spla.spsolve(system.tocsc(), u)
        except (RuntimeError, ValueError):  # singular or failed factorisation: fall back to uniform
            y = u.copy()
    y = np.where(active & np.isfinite(y), np.maximum(y, 0.0), 0.0)
    total = y.sum()
    return y / total if total > 0 else u


@dataclass
class CloneGraph:
    """The CHMM as a directed weighted graph over its H clones (nodes are global clone indices).

    Attributes:
        symbols: the model's alphabet.
        clone_symbol: symbol index of each clone, shape (H,).
        clone_rank: index of each clone among the clones of its symbol (the ``clone`` attribute), shape (H,).
        weight: H x H CSR array of the non-zero transition probabilities T (the edges; only non-zeros stored).
        count: expected transition counts on the same edges (aligned with ``weight.data``), or None.
        edge_flow: node flow x T on the same edges (aligned with ``weight.data``).
        flow: node flow, the stationary distribution of T (see :func:`stationary_distribution`), shape (H,).
        teleportation: the teleportation probability used for ``flow``.
        metadata: facts about the source model (pruning record, corpus, ...).
    """

    symbols: list[str]
    clone_symbol: np.ndarray
    clone_rank: np.ndarray
    weight: sp.csr_array
    count: np.ndarray | None
    edge_flow: np.ndarray
    flow: np.ndarray
    teleportation: float = TELEPORTATION
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def n_states(self) -> int:
        return int(self.weight.shape[0])

    @property
    def n_edges(self) -> int:
        return int(self.weight.nnz)

    def active(self) -> np.ndarray:
        """Mask of the clones with at least one edge in or out (the nodes of networks and exports)."""
        out_degree = np.diff(self.weight.indptr)
        in_degree = np.bincount(self.weight.indices, minlength=self.n_states)
        return (out_degree > 0) | (in_degree > 0)

    def degree(self) -> np.ndarray:
        """Each clone's degree: its edges in plus its edges out (a self-loop counts as both), shape (H,)."""
        return np.diff(self.weight.indptr) + np.bincount(self.weight.indices, minlength=self.n_states)

    def link_counts(self, nodes: np.ndarray) -> dict[str, int]:
        """How many edges enter the node set ``nodes`` from outside it, leave it, and join two of its nodes
        (self-loops included): the degree of a module in the clone graph."""
        nodes = np.asarray(nodes, dtype=np.int64)
        inside = np.zeros(self.n_states, dtype=bool)
        inside[nodes] = True
        entering, leaving = self.incident_edges(nodes, inside)
        out_edges = _ranges(self.weight.indptr[nodes], self.weight.indptr[nodes + 1])
        within = int(inside[self.weight.indices[out_edges]].sum())
        return {"in": len(entering), "out": len(leaving), "within": within}

    def char(self, node: int) -> str:
        """The symbol the clone emits."""
        return self.symbols[int(self.clone_symbol[node])]

    def label(self, node: int) -> str:
        """A readable unique node name: the visible symbol, a colon, the clone rank (e.g. ``t:3``)."""
        return f"{visible_char(self.char(node))}:{int(self.clone_rank[node])}"

    def is_space(self) -> np.ndarray:
        """Mask of the clones that emit a whitespace symbol (word boundaries); computed at the first call and kept
        with the graph, read-only (the generalized words of every module read it)."""
        cached = self.__dict__.get("_space_cache")
        if cached is None:
            space = np.array([s.isspace() for s in self.symbols], dtype=bool)
            cached = space[self.clone_symbol]
            cached.setflags(write=False)
            self.__dict__["_space_cache"] = cached
        return cached

    def clone_chars(self) -> list[str]:
        """Each clone's symbol, in state order (kept with the graph after the first call)."""
        cached = self.__dict__.get("_chars_cache")
        if cached is None:
            cached = [self.symbols[int(s)] for s in self.clone_symbol]
            self.__dict__["_chars_cache"] = cached
        return cached

    def word_start_flow(self, flows: np.ndarray | None = None) -> np.ndarray:
        """Per clone, the flow of the edges into it from space clones (the word starts at it), by ``flows`` per
        edge (default ``edge_flow``; Infomap's link flow for a run): read-only, kept with the graph for the last
        ``flows`` asked (the generalized words of every module of a run read their clones' values)."""
        flows = self.edge_flow if flows is None else flows
        cached = self.__dict__.get("_word_start_cache")
        if cached is None or cached[0] is not flows:
            space = self.is_space()
            sources, targets = self.edges()
            start = space[sources] & ~space[targets]
            values = np.bincount(targets[start], weights=np.asarray(flows)[start], minlength=self.n_states)
            values.setflags(write=False)
            cached = (flows, values)
            self.__dict__["_word_start_cache"] = cached
        return cached[1]

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """(sources, targets) of the edges, in CSR order (aligned with ``weight.data``, ``count``, ``edge_flow``)."""
        sources = np.repeat(np.arange(self.n_states), np.diff(self.weight.indptr))
        return sources, self.weight.indices.astype(np.int64)

    def edges_among(self, nodes: np.ndarray) -> np.ndarray:
        """Edge indices (CSR order) with both ends in the sorted node set ``nodes``, found through the nodes' own
        rows, so the cost grows with their degree, not the graph."""
        nodes = np.asarray(nodes, dtype=np.int64)
        inside = np.zeros(self.n_states, dtype=bool)
        inside[nodes] = True
        out_edges = _ranges(self.weight.indptr[nodes], self.weight.indptr[nodes + 1])
        return out_edges[inside[self.weight.indices[out_edges]]]

    def edge_sources(self, edges: np.ndarray) -> np.ndarray:
        """The source clone of each of the edge indices ``edges`` (CSR order)."""
        return np.searchsorted(self.weight.indptr, np.asarray(edges, dtype=np.int64), side="right") - 1

    def incident_edges(self, nodes: np.ndarray, inside: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Edge indices (CSR order) entering and leaving the node set ``nodes`` (``inside``: its mask, if known),
        found through the nodes' own rows and columns, so the cost grows with their degree, not the graph."""
        nodes = np.asarray(nodes, dtype=np.int64)
        if inside is None:
            inside = np.zeros(self.n_states, dtype=bool)
            inside[nodes] = True
        indptr = self.weight.indptr
        out_edges = _ranges(indptr[nodes], indptr[nodes + 1])
        leaving = out_edges[~inside[self.weight.indices[out_edges]]]
        in_ptr, in_edges_all, in_sources = self.incoming_index()
        in_edges = _ranges(in_ptr[nodes], in_ptr[nodes + 1])
        entering = in_edges_all[in_edges][~inside[in_sources[in_edges]]]
        return entering, leaving

    def incoming_index(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indptr by target, edge index, source) of the edges sorted by target: computed at the first call and kept
        with the graph (two integers an edge), which a holder that accounts for the graph's size calls first."""
        cached = self.__dict__.get("_incoming_cache")
        if cached is None:
            sources, targets = self.edges()
            order = np.argsort(targets, kind="stable")
            indptr = np.zeros(self.n_states + 1, dtype=np.int64)
            np.cumsum(np.bincount(targets, minlength=self.n_states), out=indptr[1:])
            cached = (indptr, order, sources[order])
            self.__dict__["_incoming_cache"] = cached
        return cached

    def matrix(self, attribute: str = "weight") -> sp.csr_array:
        """The H x H CSR array of one edge attribute: "weight", "count" or "flow" (same sparsity as T)."""
        data = {"weight": self.weight.data, "count": self.count, "flow": self.edge_flow}.get(attribute)
        if data is None:
            raise CHMMError(f"the graph has no edge attribute {attribute!r}")
        return sp.csr_array((data, self.weight.indices, self.weight.indptr), shape=self.weight.shape)


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(start, stop)`` over the pairs, vectorised."""
    lengths = stops - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
    return np.arange(total, dtype=np.int64) + offsets


def clone_graph(model: CHMM, teleportation: float = TELEPORTATION) -> CloneGraph:
    """The clone graph of ``model`` (prune first to keep it small): CSR of the non-zero T, node flow and edge
    attributes (see :class:`CloneGraph`)."""
    layout = model.layout
    rows, cols, values, counts = model.transitions()
    order = np.lexsort((cols, rows))
    rows, cols, values = rows[order], cols[order], values[order]
    n = layout.n_states
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    weight = sp.csr_array((values, cols, indptr), shape=(n, n))
    count = None if counts is None else counts[order]
    metadata = {k: model.metadata[k] for k in ("pruned", "corpus", "test_bps") if k in model.metadata}
    return transition_graph(
        weight, layout.clone_symbol(), list(model.symbols), count, teleportation,
        metadata | {"normalisation": model.codec.normalisation, "unit": model.codec.unit},
    )  # fmt: skip


def transition_graph(
    weight: sp.csr_array,
    clone_symbol: np.ndarray,
    symbols: list[str],
    count: np.ndarray | None = None,
    teleportation: float = TELEPORTATION,
    metadata: dict[str, Any] | None = None,
) -> CloneGraph:
    """The clone graph of any transition matrix over clones that each emit one symbol (a text model's T, or a
    cognitive map's T averaged over its actions): ``weight`` an H x H CSR array with sorted indices, each row summing
    to 1 or 0, ``clone_symbol`` the symbol of each clone, ``count`` values aligned with ``weight.data`` or None. Node
    flow is :func:`stationary_distribution` of ``weight``, edge flow node flow x weight, each clone's rank among the
    clones of its symbol from the order of ``clone_symbol`` (clones of a symbol consecutive)."""
    weight = sp.csr_array(weight)
    clone_symbol = np.asarray(clone_symbol, dtype=np.int64)
    flow = stationary_distribution(weight, teleportation)
    sources = np.repeat(np.arange(weight.shape[0]), np.diff(weight.indptr))
    edge_flow = flow[sources] * weight.data
    first = np.searchsorted(clone_symbol, np.arange(len(symbols))) if len(clone_symbol) else np.zeros(0, np.int64)
    clone_rank = np.arange(len(clone_symbol)) - first[clone_symbol]
    return CloneGraph(
        list(symbols), clone_symbol, clone_rank, weight, count, edge_flow, flow, teleportation, dict(metadata or {})
    )
