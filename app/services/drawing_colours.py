"""How the explorer draws clones and modules: their colours (the same in tables, maps and exports) and the
positions of a module's subgraph."""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np

from engine import api


def module_colour(module_id: str) -> str:
    """The colour of a module (by its index among its siblings), the same in the table, the map and the exports."""
    return api.drawing.module_colour(int(str(module_id).split(":")[-1]))


def symbol_colour(index: int) -> str:
    """The colour of the clones of the model's symbol ``index`` (its place in the alphabet) in the subgraph and the
    whole graph: the module colours in order (:func:`engine.api.drawing.module_colour`), distinct for the first 3,380
    symbols (a hash of the character into 20 colours gave two symbols of a 27-letter alphabet the same one)."""
    return api.drawing.module_colour(int(index) + 1)


KAMADA_KAWAI_NODES = 150
"""Subgraphs up to this many clones are laid out by Kamada-Kawai (slower, but weakly linked clones do not fly off)."""


def graph_positions(graph: nx.DiGraph, seed: int = 0) -> dict[Any, tuple[float, float]]:
    """2-D positions in [-1, 1] for drawing a module's subgraph, edge directions and weights ignored (a rare
    transition still places its clone next to its neighbour). Up to :data:`KAMADA_KAWAI_NODES` clones:
    Kamada-Kawai on hop distances, with clones in different connected pieces one hop further apart than the
    farthest connected pair (at the library's default of 10^6 they barely repel, and the pieces interleave);
    larger subgraphs: :func:`engine.network.drawing.force_layout` (``seed``; networkx's spring layout took 13.7 s for
    2,000 nodes, bench/bench_layout.py)."""
    if len(graph) == 0:
        return {}
    undirected = nx.Graph(graph)
    undirected.remove_edges_from(nx.selfloop_edges(undirected))
    if len(undirected) > KAMADA_KAWAI_NODES:
        names = list(undirected)
        index = {name: i for i, name in enumerate(names)}
        pairs = np.array([(index[a], index[b]) for a, b in undirected.edges()], dtype=np.int64).reshape(-1, 2)
        xy = api.drawing.force_layout(len(names), pairs[:, 0], pairs[:, 1], seed=seed)
        positions = dict(zip(names, xy, strict=True))
    else:
        hops = dict(nx.shortest_path_length(undirected))
        far = max((d for row in hops.values() for d in row.values()), default=0) + 1
        distance = {u: {v: hops[u].get(v, far) for v in undirected} for u in undirected}
        positions = nx.kamada_kawai_layout(undirected, dist=distance, weight=None)
    return {node: (float(x), float(y)) for node, (x, y) in positions.items()}
