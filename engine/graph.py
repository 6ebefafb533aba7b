"""The learned graph: pruning small transitions, and the CHMM as a directed weighted clone graph (paper, 4.2).

Pruning (paper, Fig 3(d): about 99% of the entries of a trained T can be set to zero at little cost in BPS)
zeroes transitions by one or more rules, renormalises the rows that keep some mass, and returns a *smaller*
model: the same clones and the same block-sparse layout, minus the symbol-pair blocks that became all-zero.
Inference and EM run on it unchanged; its ``fixed_zeros`` field tells the M-step to keep the zeros at zero
(:func:`engine.model.transition_support`). The rules:

* ``threshold``: zero every entry of T below an absolute threshold in (0, 1);
* ``top_mass``: per row, keep the largest entries until they hold this share of the row's mass (a row never
  loses all its entries this way);
* ``keep_clones``: keep only transitions between the given clones (e.g. the clones the Viterbi path of the
  training text uses, :func:`viterbi_clones`); the other clones lose all their transitions.

A row whose every entry falls below the threshold becomes all-zero: the clone is a dead end (the forward pass
and the scorer handle this; see :func:`engine.inference.score`). In a trained model these are the clones that
the training text never used: their rows hold only the pseudocount spread over thousands of entries.

The clone graph (:class:`CloneGraph`) is the H x H scipy CSR matrix of the non-zero transitions with node
attributes ``char``, ``clone``, ``flow`` and edge attributes ``weight`` (T), ``count`` (the expected counts of
the last E-step, if the model kept them) and ``flow`` (node flow x T). Node flow is the stationary distribution
of T, computed robustly for reducible chains (see :func:`stationary_distribution`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from engine import inference
from engine.blocks import BlockLayout, entry_rows_cols, normalise_rows, row_sums
from engine.inference import BACKOFF_WEIGHT
from engine.model import CHMM

TELEPORTATION = 1e-6
"""Teleportation probability of :func:`stationary_distribution` (see there)."""

VISIBLE_CHARS = {" ": "\u2423", "\n": "\u23ce", "\t": "\u21e5", '"': "''"}
"""How a symbol is shown in node labels and file formats that quote names (space as the open-box glyph)."""


# ============================================================================================ pruning
def check_threshold(threshold: float) -> float:
    """The threshold as a float, or ValueError unless 0 < threshold < 1."""
    try:
        value = float(threshold)
    except (TypeError, ValueError):
        raise ValueError(f"the threshold must be a number in (0, 1), got {threshold!r}") from None
    if not (np.isfinite(value) and 0.0 < value < 1.0):
        raise ValueError(f"the threshold must lie strictly between 0 and 1, got {threshold!r}")
    return value


def _top_mass_mask(model: CHMM, top_mass: float) -> np.ndarray:
    """Flat mask: per row, the largest entries whose cumulative mass first reaches ``top_mass`` of the row."""
    T = np.asarray(model.T, dtype=np.float64)
    keep = np.zeros(T.shape, dtype=bool)
    nz = np.flatnonzero(T)
    if nz.size == 0:
        return keep
    rows, _ = entry_rows_cols(model.layout, nz)
    values = T[nz]
    order = np.lexsort((-values, rows))  # by row, then largest first
    rows_sorted, values_sorted = rows[order], values[order]
    cumulative = np.cumsum(values_sorted)
    starts = np.flatnonzero(np.r_[True, rows_sorted[1:] != rows_sorted[:-1]])
    run = np.diff(np.r_[starts, len(rows_sorted)])
    before_row = np.repeat(cumulative[starts] - values_sorted[starts], run)  # mass of earlier rows
    row_total = np.repeat(np.add.reduceat(values_sorted, starts), run)
    mass_before = cumulative - values_sorted - before_row  # mass of the larger entries of the same row
    keep[nz[order[mass_before < top_mass * row_total * (1.0 - 1e-12)]]] = True
    return keep


def prune(
    model: CHMM,
    threshold: float | None = None,
    top_mass: float | None = None,
    keep_clones: np.ndarray | None = None,
) -> CHMM:
    """A pruned copy of ``model``: zero the entries of T that the given rules drop, renormalise every row that
    keeps some mass, and drop the blocks that became all-zero (a new, smaller :class:`BlockLayout` over the same
    clones). Rules (any combination, at least one): ``threshold`` (keep T >= threshold, 0 < threshold < 1),
    ``top_mass`` (per row, keep the largest entries holding this share of the row, 0 < top_mass <= 1),
    ``keep_clones`` (boolean mask or index array of clones: keep transitions between them only).

    The expected counts, if kept, are zeroed on the same entries. Clones left with neither incoming nor outgoing
    transitions lose their initial probability (pi is renormalised over the others). ``metadata["pruned"]``
    records the rules and the non-zeros before and after; ``fixed_zeros`` makes EM keep the zeros at zero.
    ``backoff_weight`` becomes the removed transition mass (occupancy-weighted mean over rows, with what
    earlier prunings removed, see :func:`pruned_backoff_weight`): :func:`engine.inference.score` mixes that much of
    the symbol bigram into every prediction.
    """
    if threshold is None and top_mass is None and keep_clones is None:
        raise ValueError("prune needs a threshold, a top mass or a set of clones to keep")
    layout = model.layout
    T = np.asarray(model.T)
    keep, record = _kept_entries(model, threshold, top_mass, keep_clones)
    nonzeros_before = int(np.count_nonzero(T))
    raw = np.where(keep, T.astype(np.float64), 0.0)
    kept_mass = row_sums(layout, raw)
    removed = 1.0 - kept_mass  # per clone: the transition mass the rules take away
    occupancy = row_sums(layout, model.counts) if model.counts is not None else np.ones(layout.n_states)
    # rows that lose everything belong to clones no path uses any more; they predict nothing
    weights = np.where(kept_mass > 0, occupancy, 0.0)
    removed_mass = float(np.sum(weights * np.clip(removed, 0.0, 1.0)) / weights.sum()) if weights.sum() > 0 else 0.0
    T_new = normalise_rows(layout, raw, 0.0, model.T.dtype)
    block_kept = np.add.reduceat(keep, layout.block_offset[:-1]) > 0 if layout.n_blocks else np.zeros(0, bool)
    sizes = np.diff(layout.block_offset)
    entry_kept = np.repeat(block_kept, sizes)
    new_layout = BlockLayout.build(layout.n_clones, layout.block_pairs[block_kept])
    counts = None
    if model.counts is not None:
        counts = np.where(keep, model.counts, 0.0)[entry_kept]
    T_new = np.ascontiguousarray(T_new[entry_kept])
    pi, nonzeros_after = _connected_pi(new_layout, T_new, model.pi)
    record.update(
        nonzeros_before=nonzeros_before,
        nonzeros_after=nonzeros_after,
        kept_fraction=nonzeros_after / nonzeros_before if nonzeros_before else 1.0,
        blocks_before=layout.n_blocks,
        blocks_after=new_layout.n_blocks,
        removed_mass=removed_mass,
    )
    # The scorer backs off to the symbol bigram with the mass the pruning took away (occupancy-weighted mean over
    # rows), instead of the unpruned model's 1e-6: transitions that only the pseudocount supported become
    # impossible, and this is what they are worth (see inference.score).
    return model.with_arrays(
        symbols=list(model.symbols),
        layout=new_layout,
        T=T_new,
        pi=pi.astype(model.pi.dtype),
        counts=counts,
        metadata=pruned_metadata(model.metadata, record),
        backoff_weight=pruned_backoff_weight(model.backoff_weight, removed_mass),
        fixed_zeros=True,
    )


def _kept_entries(
    model: CHMM, threshold: float | None, top_mass: float | None, keep_clones: np.ndarray | None
) -> tuple[np.ndarray, dict[str, Any]]:
    """The entries of T the rules of :func:`prune` keep (a mask in the flat layout) and the record of the rules."""
    layout = model.layout
    T = np.asarray(model.T)
    keep = T > 0
    record: dict[str, Any] = {}
    if threshold is not None:
        threshold = check_threshold(threshold)
        keep &= T >= threshold
        record["threshold"] = threshold
    if top_mass is not None:
        top_mass = float(top_mass)
        if not 0.0 < top_mass <= 1.0:
            raise ValueError(f"the top mass must lie in (0, 1], got {top_mass!r}")
        keep &= _top_mass_mask(model, top_mass)
        record["top_mass"] = top_mass
    if keep_clones is not None:
        clones = np.asarray(keep_clones)
        if clones.dtype != bool:
            mask = np.zeros(layout.n_states, dtype=bool)
            mask[clones.astype(np.int64)] = True
            clones = mask
        if clones.shape != (layout.n_states,):
            raise ValueError("keep_clones must be a mask over the model's clones")
        nz = np.flatnonzero(keep)
        rows, cols = entry_rows_cols(layout, nz)
        keep[nz[~(clones[rows] & clones[cols])]] = False
        record["kept_clones"] = int(clones.sum())
    return keep, record


def _connected_pi(layout: BlockLayout, T: np.ndarray, pi: np.ndarray) -> tuple[np.ndarray, int]:
    """pi without the clones that no transition of T enters or leaves (they cannot be part of a path),
    renormalised (float64), and the number of non-zero transitions."""
    nz = np.flatnonzero(T)
    rows, cols = entry_rows_cols(layout, nz)
    connected = np.zeros(layout.n_states, dtype=bool)
    connected[rows] = True
    connected[cols] = True
    kept = np.where(connected, np.asarray(pi, dtype=np.float64), 0.0)
    return (kept / kept.sum() if kept.sum() > 0 else np.asarray(pi, dtype=np.float64)), int(nz.size)


def pruned_metadata(metadata: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``metadata`` with ``record`` as the last pruning (shown to people) and the earlier one, if any,
    appended to ``pruned_history``."""
    metadata = json.loads(json.dumps(metadata))
    history = list(metadata.get("pruned_history", []))
    if metadata.get("pruned"):
        history.append(metadata["pruned"])
    metadata["pruned"] = record
    if history:
        metadata["pruned_history"] = history
    return metadata


def pruned_backoff_weight(before: float, removed_mass: float) -> float:
    """The back-off weight of a model after a pruning that took away ``removed_mass``: the mass taken away by this
    and every earlier pruning, 1 - (1 - w)(1 - removed_mass), w the model's weight ``before`` if an earlier pruning
    set one (else 0), within [1e-6, 0.5]. (Pruning a pruned model again at the same threshold removes nothing new:
    its weight stays, instead of falling to 1e-6 and leaving the earlier removals without a back-off.)"""
    before = float(before or 0.0)
    if before <= BACKOFF_WEIGHT:
        before = 0.0
    combined = 1.0 - (1.0 - before) * (1.0 - removed_mass)
    return max(BACKOFF_WEIGHT, min(combined, 0.5))


def viterbi_clones(model: CHMM, x: np.ndarray) -> np.ndarray:
    """Boolean mask of the clones the Viterbi (MAP) clone path of the symbol sequence ``x`` visits."""
    path = inference.viterbi(model, x).clones
    if np.any(path < 0):
        raise ValueError("the text has probability zero under the model; no Viterbi path to keep")
    used = np.zeros(model.n_states, dtype=bool)
    used[path] = True
    return used


def prune_to_viterbi(model: CHMM, x: np.ndarray, threshold: float | None = None) -> CHMM:
    """Keep only the clones the Viterbi path of ``x`` uses (and, optionally, the entries >= ``threshold``)."""
    return prune(model, threshold=threshold, keep_clones=viterbi_clones(model, x))


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
    The BPS uses :func:`engine.inference.score` (bigram back-off for transitions that pruning removed)."""
    points = []
    for threshold in thresholds:
        pruned = prune(model, threshold=threshold)
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

    def char(self, node: int) -> str:
        """The symbol the clone emits."""
        return self.symbols[int(self.clone_symbol[node])]

    def label(self, node: int) -> str:
        """A readable unique node name: the visible symbol, a colon, the clone rank (e.g. ``t:3``)."""
        return f"{visible_char(self.char(node))}:{int(self.clone_rank[node])}"

    def is_space(self) -> np.ndarray:
        """Mask of the clones that emit a whitespace symbol (word boundaries)."""
        space = np.array([s.isspace() for s in self.symbols], dtype=bool)
        return space[self.clone_symbol]

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """(sources, targets) of the edges, in CSR order (aligned with ``weight.data``, ``count``, ``edge_flow``)."""
        sources = np.repeat(np.arange(self.n_states), np.diff(self.weight.indptr))
        return sources, self.weight.indices.astype(np.int64)

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
        in_ptr, in_edges_all, in_sources = self._incoming()
        in_edges = _ranges(in_ptr[nodes], in_ptr[nodes + 1])
        entering = in_edges_all[in_edges][~inside[in_sources[in_edges]]]
        return entering, leaving

    def _incoming(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indptr by target, edge index, source) of the edges sorted by target (computed once)."""
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
            raise ValueError(f"the graph has no edge attribute {attribute!r}")
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
    flow = stationary_distribution(weight, teleportation)
    edge_flow = flow[rows] * weight.data
    clone_symbol = layout.clone_symbol()
    clone_rank = np.arange(n) - layout.clone_start[clone_symbol]
    return CloneGraph(
        list(model.symbols),
        clone_symbol,
        clone_rank,
        weight,
        count,
        edge_flow,
        flow,
        teleportation,
        {k: model.metadata[k] for k in ("pruned", "corpus", "test_bps") if k in model.metadata}
        | {"normalisation": model.codec.normalisation},
    )
