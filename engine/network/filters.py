"""Filters on the clone graph (:class:`CloneFilter`): which clones a view shows, as a network scientist narrows a
graph in Gephi or Cytoscape: a degree range, a least flow, a k-core, the largest component, and the ego network of
one clone (its neighbours within k steps).

Every filter reads the graph without the direction of its edges and without self-loops, as those tools do for cores,
components and neighbourhoods; the degree is the graph's own (:meth:`CloneGraph.degree`: edges in plus edges out, a
self-loop counting as both), the flow its stationary flow. They apply in a fixed order, each to what the one before
kept: the ego network, then the degree range and least flow (measured on the whole graph), then the k-core of what
is left, then its largest component."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from engine.errors import CHMMError
from engine.network.graph import CloneGraph

__all__ = ["CloneFilter", "MAX_STEPS", "filter_clones"]

MAX_STEPS = 10
"""The most steps an ego network reaches (past a few, it is most of a connected graph)."""


@dataclass(frozen=True)
class CloneFilter:
    """What a view shows: clones of degree in [``min_degree``, ``max_degree``] (None: no upper bound) and flow at
    least ``min_flow``, in the ``core``-core (0: any), in the largest component when ``largest_component``, and
    within ``steps`` steps of clone ``centre`` (None: anywhere)."""

    min_degree: int = 0
    max_degree: int | None = None
    min_flow: float = 0.0
    core: int = 0
    largest_component: bool = False
    centre: int | None = None
    steps: int = 1

    @property
    def active(self) -> bool:
        """Whether the filter leaves anything out at all (the default keeps every clone)."""
        return self != CloneFilter()

    def validate(self, n_states: int) -> None:
        """ValueError in one sentence for a setting no graph of ``n_states`` clones can take."""
        if self.min_degree < 0 or (self.max_degree is not None and self.max_degree < self.min_degree):
            raise CHMMError("the degree range must run from a whole number of at least 0 up to one no smaller")
        if not 0.0 <= self.min_flow <= 1.0:
            raise CHMMError("the least flow is a share of the graph's flow, between 0 and 1")
        if self.core < 0:
            raise CHMMError("the core must be a whole number of at least 0")
        if self.centre is not None and not 0 <= self.centre < n_states:
            raise CHMMError(f"there is no clone {self.centre}: clones are numbered 0 to {n_states - 1}")
        if not 1 <= self.steps <= MAX_STEPS:
            raise CHMMError(f"an ego network reaches 1 to {MAX_STEPS} steps")

    def describe(self) -> str:
        """The filter in words, for a note or a file's header ("" when it keeps every clone)."""
        parts = []
        if self.centre is not None:
            parts.append(f"within {self.steps} step{'s' if self.steps != 1 else ''} of clone {self.centre}")
        if self.min_degree or self.max_degree is not None:
            top = "" if self.max_degree is None else f" to {self.max_degree}"
            parts.append(f"degree {self.min_degree}{top}" if top else f"degree at least {self.min_degree}")
        if self.min_flow:
            parts.append(f"flow at least {self.min_flow:.3g}")
        if self.core:
            parts.append(f"the {self.core}-core")
        if self.largest_component:
            parts.append("the largest component")
        return ", ".join(parts)


def _undirected(graph: CloneGraph) -> sp.csr_array:
    """The graph's adjacency without direction or self-loops, 0/1 entries (symmetric)."""
    adjacency = sp.csr_array(graph.weight, copy=True)
    adjacency.data = np.ones_like(adjacency.data, dtype=np.int8)
    adjacency.setdiag(0)
    adjacency.eliminate_zeros()
    return sp.csr_array(((adjacency + adjacency.T) > 0).astype(np.int32))


def _within(adjacency: sp.csr_array, centre: int, steps: int) -> np.ndarray:
    """Mask of the clones at most ``steps`` undirected steps from ``centre`` (itself included)."""
    reached = np.zeros(adjacency.shape[0], dtype=bool)
    reached[centre] = True
    frontier = reached.copy()
    for _ in range(steps):
        step = (adjacency @ frontier.astype(np.int32)) > 0
        frontier = step & ~reached
        if not frontier.any():
            break
        reached |= frontier
    return reached


def _core(adjacency: sp.csr_array, keep: np.ndarray, k: int) -> np.ndarray:
    """The ``k``-core of the subgraph on ``keep``: clones left once every clone with fewer than ``k`` neighbours
    among those left has been removed, again and again."""
    keep = keep.copy()
    while True:
        degree = adjacency @ keep.astype(np.int32)
        drop = keep & (degree < k)
        if not drop.any():
            return keep
        keep &= ~drop


def _largest_component(adjacency: sp.csr_array, keep: np.ndarray) -> np.ndarray:
    """The largest connected component of the subgraph on ``keep`` (the one with the smallest clone on a tie)."""
    nodes = np.flatnonzero(keep)
    if nodes.size == 0:
        return keep
    count, label = csgraph.connected_components(adjacency[nodes][:, nodes], directed=False)
    sizes = np.bincount(label, minlength=count)
    result = np.zeros_like(keep)
    result[nodes[label == int(np.argmax(sizes))]] = True
    return result


def filter_clones(graph: CloneGraph, spec: CloneFilter) -> np.ndarray:
    """The clones ``spec`` keeps, ascending (see the module docstring for the order in which its parts apply)."""
    spec.validate(graph.n_states)
    keep = np.ones(graph.n_states, dtype=bool)
    if not spec.active:
        return np.arange(graph.n_states)
    adjacency = _undirected(graph)
    if spec.centre is not None:
        keep &= _within(adjacency, spec.centre, spec.steps)
    degree = graph.degree()
    keep &= degree >= spec.min_degree
    if spec.max_degree is not None:
        keep &= degree <= spec.max_degree
    if spec.min_flow:
        keep &= np.asarray(graph.flow) >= spec.min_flow
    if spec.core:
        keep = _core(adjacency, keep, spec.core)
    if spec.largest_component:
        keep = _largest_component(adjacency, keep)
    return np.flatnonzero(keep)
