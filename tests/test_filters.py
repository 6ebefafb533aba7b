"""Filters on the clone graph (engine/network/filters.py) against networkx on random directed graphs: the degree
range, least flow, k-core, largest component and ego network, alone and chained."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from engine.network.filters import CloneFilter, filter_clones
from engine.network.graph import CloneGraph


def random_graph(n: int, edges: int, seed: int) -> CloneGraph:
    """A directed graph of ``n`` clones with about ``edges`` random edges (self-loops among them), random flow."""
    rng = np.random.default_rng(seed)
    rows, cols = rng.integers(0, n, edges), rng.integers(0, n, edges)
    weight = sp.csr_array((rng.random(edges), (rows, cols)), shape=(n, n))
    weight.sum_duplicates()
    flow = rng.random(n) ** 3
    flow /= flow.sum()
    sources = np.repeat(np.arange(n), np.diff(weight.indptr))
    return CloneGraph(
        symbols=["a"], clone_symbol=np.zeros(n, dtype=np.int64), clone_rank=np.arange(n), weight=weight, count=None,
        edge_flow=flow[sources] * weight.data, flow=flow,
    )  # fmt: skip


def reference(graph: CloneGraph, spec: CloneFilter) -> list[int]:
    """The same filter by networkx, step by step in the documented order."""
    directed = nx.DiGraph()
    directed.add_nodes_from(range(graph.n_states))
    sources = np.repeat(np.arange(graph.n_states), np.diff(graph.weight.indptr))
    directed.add_edges_from(zip(sources.tolist(), graph.weight.indices.tolist(), strict=True))
    plain = nx.Graph(directed)
    plain.remove_edges_from(nx.selfloop_edges(plain))
    keep = set(range(graph.n_states))
    if spec.centre is not None:
        keep &= set(nx.single_source_shortest_path_length(plain, spec.centre, cutoff=spec.steps))
    degree = {v: directed.in_degree(v) + directed.out_degree(v) for v in directed}  # a self-loop both ways
    keep = {v for v in keep if degree[v] >= spec.min_degree}
    if spec.max_degree is not None:
        keep = {v for v in keep if degree[v] <= spec.max_degree}
    keep = {v for v in keep if graph.flow[v] >= spec.min_flow}
    if spec.core:
        keep = set(nx.k_core(plain.subgraph(keep).copy(), spec.core))
    if spec.largest_component and keep:
        parts = sorted(nx.connected_components(plain.subgraph(keep)), key=lambda c: (-len(c), min(c)))
        keep = parts[0]
    return sorted(keep)


SPECS = [
    CloneFilter(),
    CloneFilter(min_degree=3),
    CloneFilter(min_degree=2, max_degree=4),
    CloneFilter(min_flow=0.01),
    CloneFilter(core=2),
    CloneFilter(core=3),
    CloneFilter(largest_component=True),
    CloneFilter(centre=0, steps=1),
    CloneFilter(centre=5, steps=2),
    CloneFilter(centre=7, steps=3, core=2, largest_component=True),
    CloneFilter(min_degree=2, core=2, largest_component=True),
]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe() or "nothing")
def test_each_filter_keeps_what_networkx_keeps(seed: int, spec: CloneFilter) -> None:
    graph = random_graph(60, 90 + 20 * seed, seed)  # sparse: several components, cores of 2 and 3
    assert filter_clones(graph, spec).tolist() == reference(graph, spec)


def test_the_default_keeps_every_clone_and_says_nothing() -> None:
    graph = random_graph(30, 20, 1)
    assert filter_clones(graph, CloneFilter()).tolist() == list(range(30))
    assert not CloneFilter().active and CloneFilter().describe() == ""
    said = CloneFilter(centre=4, steps=2, min_degree=2, core=3, largest_component=True).describe()
    assert said == "within 2 steps of clone 4, degree at least 2, the 3-core, the largest component"


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (CloneFilter(centre=30), "there is no clone 30"),
        (CloneFilter(centre=1, steps=0), "1 to 10 steps"),
        (CloneFilter(min_degree=3, max_degree=2), "degree range"),
        (CloneFilter(min_flow=2.0), "between 0 and 1"),
        (CloneFilter(core=-1), "core"),
    ],
)
def test_a_setting_no_graph_can_take_is_said(spec: CloneFilter, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        filter_clones(random_graph(30, 20, 1), spec)
