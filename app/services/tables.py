"""The Communities page's tables (as Gephi's data laboratory): the clones and the transitions of a module of a
community run, or of the whole clone graph, computed once per version of the run's and the model's files, kept, and
charged to the server's memory budget before they are computed (:mod:`app.memory`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from app.services import UserError, visible
from app.services.graphs import CURRENT_RUN, deepest_modules, kept_of_run, read_run, session_graph

MAX_TABLE_ROWS = 200_000
"""Rows the clone and transition tables send at most (the most flow first; the page says "showing N of M" when a
table has more): the grid's virtual rows scroll 100,000 lean rows without paging."""

EXACT_BETWEENNESS_NODES = 500
"""Up to this many clones betweenness centrality is exact; above, estimated from this many sampled sources."""

MAX_BETWEENNESS_NODES = 2_000
"""Above this many clones the tables leave betweenness out (None): estimated from 500 sources it took 24 s for the
5,000 clones of a user's model (networkx, on 2 cores), while a module's own subgraph takes milliseconds."""


TABLE_ROW_BYTES = 512
TABLE_EDGE_BYTES = 48
"""What the tables take: :data:`TABLE_ROW_BYTES` a row sent (a dict of 5 to 11 plain values) and
:data:`TABLE_EDGE_BYTES` an edge of the clone graph (its sources, targets, masks and flow sums): 4,320 + 200,000 rows
of a graph of 776,648 edges, 93 MB at their peak, charged 141 MB (uncharged before)."""
BETWEENNESS_EDGE_BYTES = 600
"""What betweenness centrality takes an edge within the module: its subgraph as networkx objects."""


def graph_tables(folder: Path, module_id: Any = None, run: str = CURRENT_RUN) -> dict[str, Any]:
    """:func:`computed_graph_tables`, computed once per version of the run's and the model's files and kept."""
    key = "" if module_id in (None, "") else str(module_id).strip()
    return kept_of_run(
        folder, run, ("tables", key), lambda: computed_graph_tables(folder, key, run),
        charge=lambda: tables_bytes(folder, key, run), label="Making these tables",
    )  # fmt: skip


def tables_bytes(folder: Path, module_id: str = "", run: str = CURRENT_RUN) -> int:
    """The most memory :func:`computed_graph_tables` takes: :data:`TABLE_ROW_BYTES` a row sent,
    :data:`TABLE_EDGE_BYTES` an edge of the clone graph and, where betweenness is measured,
    :data:`BETWEENNESS_EDGE_BYTES` an edge within the module (a UserError when the module does not exist)."""
    saved = read_run(folder, run)
    graph = session_graph(folder, saved["threshold"])
    members = _members(saved, graph, module_id)
    rows = min(len(members), MAX_TABLE_ROWS) + min(graph.n_edges, MAX_TABLE_ROWS)
    within = len(graph.edges_among(np.sort(members))) if 2 < len(members) <= MAX_BETWEENNESS_NODES else 0
    return TABLE_ROW_BYTES * rows + TABLE_EDGE_BYTES * graph.n_edges + BETWEENNESS_EDGE_BYTES * within


def _members(saved: dict[str, Any], graph: Any, key: str) -> np.ndarray:
    """The clones of module ``key`` of a saved run ("": every clone with an edge); a UserError when it does not
    exist."""
    if not key:
        return np.flatnonzero(graph.active())
    module = next((m for m in saved["modules"] if m["id"] == key), None)
    if module is None:
        raise UserError(f"Module {key!r} does not exist in the community run shown.")
    return np.asarray(module["nodes"], dtype=np.int64)


def computed_graph_tables(folder: Path, module_id: Any = None, run: str = CURRENT_RUN) -> dict[str, Any]:
    """The clone and transition tables of a community run (``run``; as Gephi's data laboratory), for the module
    ``module_id`` (its clones and the transitions among them) or, without one, the whole graph: per clone its
    label, character, deepest module, flow, in/out flow, the flow it sends out of the module (``exit_flow``: its
    part of the module's boundary), degree and betweenness centrality (on the module's subgraph, unweighted); per
    transition its clones, T and flow, and whether it crosses the module's boundary. At most
    :data:`MAX_TABLE_ROWS` rows each, the most flow first; ``clone_count`` and ``transition_count`` say how many
    there are in all."""
    saved = read_run(folder, run)
    graph = session_graph(folder, saved["threshold"])
    deepest = deepest_modules(folder, saved, run)
    key = "" if module_id in (None, "") else str(module_id).strip()
    members = _members(saved, graph, key)
    inside = np.zeros(graph.n_states, dtype=bool)
    inside[members] = True  # every member, also those beyond the rows sent
    clone_count = len(members)
    members = members[np.argsort(-graph.flow[members], kind="stable")][:MAX_TABLE_ROWS]
    sources, targets = graph.edges()
    flows = graph.edge_flow
    out_flow = np.bincount(sources, weights=flows, minlength=graph.n_states)
    in_flow = np.bincount(targets, weights=flows, minlength=graph.n_states)
    crossing = inside[sources] & ~inside[targets]
    exit_flow = np.bincount(sources[crossing], weights=flows[crossing], minlength=graph.n_states)
    entering = ~inside[sources] & inside[targets]
    enter_flow = np.bincount(targets[entering], weights=flows[entering], minlength=graph.n_states)
    measured = 2 < clone_count <= MAX_BETWEENNESS_NODES
    betweenness: dict[int, float] = {}
    if measured:
        within = inside[sources] & inside[targets]
        subgraph = nx.DiGraph()
        subgraph.add_nodes_from(int(n) for n in members)
        subgraph.add_edges_from(zip(sources[within].tolist(), targets[within].tolist(), strict=True))
        sample = None if clone_count <= EXACT_BETWEENNESS_NODES else EXACT_BETWEENNESS_NODES
        betweenness = nx.betweenness_centrality(subgraph, k=sample, seed=0)
    degree = np.bincount(sources, minlength=graph.n_states) + np.bincount(targets, minlength=graph.n_states)
    clones = [
        {
            "clone": graph.label(int(n)),
            "state": int(n),
            "character": visible(graph.char(int(n))),
            "module": deepest.get(int(n), ""),
            "flow": round(float(graph.flow[n]), 8),
            "in_flow": round(float(in_flow[n]), 8),
            "out_flow": round(float(out_flow[n]), 8),
            "exit_flow": round(float(exit_flow[n]), 8),
            "enter_flow": round(float(enter_flow[n]), 8),
            "degree": int(degree[n]),
            "betweenness": round(float(betweenness.get(int(n), 0.0)), 6) if measured or clone_count <= 2 else None,
        }
        for n in members
    ]
    touching = np.flatnonzero(inside[sources] | inside[targets])
    transition_count = len(touching)
    touching = touching[np.argsort(-flows[touching], kind="stable")][:MAX_TABLE_ROWS]
    transitions = [
        {
            "from": graph.label(int(sources[e])),
            "to": graph.label(int(targets[e])),
            "probability": round(float(graph.weight.data[e]), 6),
            "flow": round(float(flows[e]), 8),
            "boundary": "out" if inside[sources[e]] and not inside[targets[e]] else (
                "in" if inside[targets[e]] and not inside[sources[e]] else ""
            ),
        }
        for e in touching
    ]  # fmt: skip
    return {
        "module": key, "clones": clones, "transitions": transitions, "clone_count": clone_count,
        "transition_count": transition_count,
    }  # fmt: skip
