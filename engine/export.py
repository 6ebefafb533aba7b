"""Exports of the clone graph (whole, or one module's subgraph) for network-analysis tools.

Formats: GraphML (Gephi, Cytoscape, yEd, igraph), GEXF (Gephi), Cytoscape JSON (``.cyjs``: Cytoscape desktop,
Cytoscape.js; :func:`cytoscape_elements` gives dash-cytoscape's flat element list), Pajek ``.net`` (Infomap,
Pajek, Gephi), the Infomap partition files ``.clu``, ``.tree`` and ``.ftree`` (map equation Network Navigator),
and ``.npz`` (plain arrays, no pickle).

Node ids are the global clone indices as strings ("0" .. "H-1"); node attributes ``label`` ("t:3": visible
symbol and clone rank), ``char``, ``clone`` (rank among the clones of its symbol), ``flow`` (stationary), and
with communities ``module`` (top module number), ``path`` (Infomap tree path "3:2:1", one-based, ending with
the clone's index in its leaf module) and ``module_name``. Edge attributes ``weight`` (T), ``count`` (expected
counts, when the model kept them) and ``flow`` (node flow x T). All values are plain Python str / int / float.
Pajek keeps only labels and weights (``weight`` = T unless told otherwise). Every file is written to a
temporary name and renamed, so a failure leaves nothing partial.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any

import networkx as nx
import numpy as np

from engine.communities import Communities, _link_flow
from engine.files import atomic_write
from engine.graph import CloneGraph

FORMATS = ("graphml", "gexf", "cyjs", "pajek", "clu", "tree", "ftree", "npz")
EXTENSIONS = {
    "graphml": ".graphml",
    "gexf": ".gexf",
    "cyjs": ".cyjs",
    "pajek": ".net",
    "clu": ".clu",
    "tree": ".tree",
    "ftree": ".ftree",
    "npz": ".npz",
}
PARTITION_FORMATS = ("clu", "tree", "ftree")


def _write_text(path: str | os.PathLike[str], text: str) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)

    atomic_write(path, write)


# ============================================================================================ selection
def select_nodes(
    graph: CloneGraph, communities: Communities | None = None, module: str | int | None = None
) -> np.ndarray:
    """The clones to export: those of ``module`` (an id like "3" or "3:2"; ValueError if it does not exist), or
    every clone with at least one edge."""
    if module is not None:
        if communities is None:
            raise ValueError("exporting a module needs a community result")
        return communities.module(module).nodes
    return np.flatnonzero(graph.active())


def _edge_subset(graph: CloneGraph, nodes: np.ndarray) -> np.ndarray:
    """Indices (CSR order) of the edges with both ends in ``nodes``."""
    inside = np.zeros(graph.n_states, dtype=bool)
    inside[nodes] = True
    sources, targets = graph.edges()
    return np.flatnonzero(inside[sources] & inside[targets])


def node_attributes(graph: CloneGraph, node: int, communities: Communities | None = None) -> dict[str, Any]:
    """The export attributes of one clone, as plain Python values."""
    attributes: dict[str, Any] = {
        "label": graph.label(node),
        "char": graph.char(node),
        "clone": int(graph.clone_rank[node]),
        "flow": float(graph.flow[node]),
    }
    if communities is not None:
        path = communities.node_path.get(int(node))
        if path is not None:
            attributes["module"] = int(path[0])
            attributes["path"] = ":".join(str(p) for p in path)
            module_id = ":".join(str(p) for p in path[:1])
            attributes["module_name"] = communities.modules[module_id].name if module_id in communities.modules else ""
    return attributes


def to_networkx(
    graph: CloneGraph,
    communities: Communities | None = None,
    module: str | int | None = None,
    nodes: np.ndarray | None = None,
) -> nx.DiGraph:
    """The (sub)graph as a networkx DiGraph with string node ids and plain-typed attributes (see module doc);
    ``nodes`` (global clone indices) picks the clones directly instead of ``module``."""
    if nodes is None:
        nodes = select_nodes(graph, communities, module)
    nodes = np.asarray(nodes, dtype=np.int64)
    G = nx.DiGraph()
    G.graph["name"] = "CHMM clone graph" + (f", module {module}" if module is not None else "")
    for node in nodes.tolist():
        G.add_node(str(node), **node_attributes(graph, node, communities))
    sources, targets = graph.edges()
    for e in _edge_subset(graph, nodes).tolist():
        data: dict[str, Any] = {"weight": float(graph.weight.data[e]), "flow": float(graph.edge_flow[e])}
        if graph.count is not None:
            data["count"] = float(graph.count[e])
        G.add_edge(str(int(sources[e])), str(int(targets[e])), **data)
    return G


# ============================================================================================ formats
def cytoscape_json(G: nx.DiGraph) -> dict[str, Any]:
    """Cytoscape JSON (the ``.cyjs`` layout networkx's ``cytoscape_data`` writes and ``cytoscape_graph`` reads):
    node data carry ``id``/``value`` (the string node id) and ``name`` (the label); edges carry an ``id`` and
    ``source``/``target`` equal to node ids, as Cytoscape.js requires."""
    nodes = []
    for node, data in G.nodes(data=True):
        nodes.append({"data": {**data, "id": node, "value": node, "name": data.get("label", node)}})
    edges = []
    for source, target, data in G.edges(data=True):
        edges.append({"data": {**data, "id": f"{source}-{target}", "source": source, "target": target}})
    return {
        "data": dict(G.graph),
        "directed": True,
        "multigraph": False,
        "elements": {"nodes": nodes, "edges": edges},
    }


def cytoscape_elements(G: nx.DiGraph) -> list[dict[str, Any]]:
    """dash-cytoscape's flat element list (nodes, then edges), each ``{"data": {...}}``."""
    data = cytoscape_json(G)
    return data["elements"]["nodes"] + data["elements"]["edges"]


def pajek_text(graph: CloneGraph, nodes: np.ndarray, edge_weight: str = "weight") -> str:
    """Pajek ``.net`` text: ``*Vertices`` with 1-based ids and quoted labels, ``*Arcs`` with the edge weight
    (``"weight"`` = T, or ``"flow"`` = node flow x T, which Infomap can read with ``--flow-model rawdir``)."""
    index = {int(node): i + 1 for i, node in enumerate(nodes.tolist())}
    lines = [f"*Vertices {len(index)}"]
    lines += [f'{i} "{graph.label(node)}"' for node, i in index.items()]
    lines.append("*Arcs")
    sources, targets = graph.edges()
    values = graph.weight.data if edge_weight == "weight" else graph.edge_flow
    for e in _edge_subset(graph, nodes).tolist():
        lines.append(f"{index[int(sources[e])]} {index[int(targets[e])]} {float(values[e])!r}")
    return "\n".join(lines) + "\n"


def _header(communities: Communities) -> list[str]:
    import infomap

    o = communities.options
    return [
        f"# v{infomap.__version__} (CHMM Explorer export)",
        f"# flow {o.flow}, {'two-level' if o.two_level else 'multilevel'}, trials {o.trials}, "
        f"markov time {o.markov_time:g}, seed {o.seed + 1}",
        f"# codelength {communities.codelength:g} bits",
    ]


def _subtree(communities: Communities, root: tuple[int, ...]) -> list[tuple[tuple[int, ...], int]]:
    """(path relative to ``root``, clone) of every clone under ``root``, in tree order."""
    depth = len(root)
    items = [(path[depth:], node) for node, path in communities.node_path.items() if path[:depth] == root]
    return sorted(items)


def _infomap_flow(communities: Communities) -> dict[int, float]:
    """Node flow as Infomap computed it (leaf flows of the tree)."""
    return {int(n.node_id): float(n.flow) for n in communities.infomap_result.nodes()}


def clu_text(communities: Communities, root: tuple[int, ...] = ()) -> str:
    """Infomap ``.clu``: ``node_id module flow`` with the top module under ``root`` (all the tree for ())."""
    flows = _infomap_flow(communities)
    lines = _header(communities) + ["# node_id module flow"]
    for rel, node in _subtree(communities, root):
        lines.append(f"{node} {rel[0]} {flows[node]:g}")
    return "\n".join(lines) + "\n"


def tree_text(communities: Communities, root: tuple[int, ...] = ()) -> str:
    """Infomap ``.tree``: ``path flow "name" node_id`` for the clones under ``root``, paths relative to it."""
    flows = _infomap_flow(communities)
    graph = communities.graph
    lines = _header(communities) + ["# path flow name node_id"]
    for rel, node in _subtree(communities, root):
        lines.append(f'{":".join(map(str, rel))} {flows[node]:g} "{graph.label(node)}" {node}')
    return "\n".join(lines) + "\n"


def ftree_text(communities: Communities, root: tuple[int, ...] = ()) -> str:
    """Infomap ``.ftree`` (Network Navigator): the ``.tree`` lines, then ``*Links directed`` and, for the root
    and every module under it, the aggregated link flow between its children (``*Links path enterFlow exitFlow
    numEdges numChildren`` and ``source target flow`` lines, child indices one-based)."""
    graph = communities.graph
    lines = tree_text(communities, root).rstrip("\n").split("\n")
    lines += ["*Links directed", "#*Links path enterFlow exitFlow numEdges numChildren"]
    depth = len(root)
    rel_path = {node: communities.node_path[node][depth:] for _, node in _subtree(communities, root)}
    link_flow = _link_flow(graph, communities.options.flow)
    sources, targets = graph.edges()
    links: dict[tuple[int, ...], dict[tuple[int, int], float]] = defaultdict(lambda: defaultdict(float))
    for e in range(graph.n_edges):
        a, b = rel_path.get(int(sources[e])), rel_path.get(int(targets[e]))
        if a is None or b is None:
            continue
        common = 0
        while common < min(len(a), len(b)) and a[common] == b[common]:
            common += 1
        if common == len(a) or common == len(b):  # a self-link
            continue
        links[a[:common]][(a[common], b[common])] += float(link_flow[e])
    module_paths = [()] + sorted({path[:d] for path in rel_path.values() for d in range(1, len(path))}, key=lambda p: p)
    for path in module_paths:
        module = communities.modules.get(":".join(map(str, root + path))) if root + path else None
        enter = module.enter_flow if module is not None else 0.0
        exit_ = module.exit_flow if module is not None else 0.0
        children = {p[len(path)] for p in rel_path.values() if p[: len(path)] == path and len(p) > len(path)}
        pairs = links.get(path, {})
        name = ":".join(map(str, path)) if path else "root"
        lines.append(f"*Links {name} {enter:g} {exit_:g} {len(pairs)} {len(children)}")
        lines += [f"{s} {t} {f:g}" for (s, t), f in sorted(pairs.items())]
    return "\n".join(lines) + "\n"


def npz_arrays(graph: CloneGraph, nodes: np.ndarray, communities: Communities | None = None) -> dict[str, np.ndarray]:
    """The (sub)graph as plain arrays: node arrays (``node`` = clone index, ``label``, ``char``, ``clone``,
    ``flow``, ``module``, ``path``) and edge arrays (``source``, ``target`` as clone indices, ``weight``,
    ``count``, ``edge_flow``), plus ``metadata_json``."""
    edges = _edge_subset(graph, nodes)
    sources, targets = graph.edges()
    arrays: dict[str, np.ndarray] = {
        "node": nodes.astype(np.int64),
        "label": np.array([graph.label(int(n)) for n in nodes], dtype=str),
        "char": np.array([graph.char(int(n)) for n in nodes], dtype=str),
        "clone": graph.clone_rank[nodes].astype(np.int64),
        "flow": graph.flow[nodes].astype(np.float64),
        "source": sources[edges].astype(np.int64),
        "target": targets[edges].astype(np.int64),
        "weight": graph.weight.data[edges].astype(np.float64),
        "edge_flow": graph.edge_flow[edges].astype(np.float64),
    }
    if graph.count is not None:
        arrays["count"] = graph.count[edges].astype(np.float64)
    if communities is not None:
        paths = [communities.node_path.get(int(n), ()) for n in nodes]
        arrays["module"] = np.array([p[0] if p else 0 for p in paths], dtype=np.int64)
        arrays["path"] = np.array([":".join(map(str, p)) for p in paths], dtype=str)
    meta = {"format": "chmm-explorer-clone-graph", "version": 1, "model": graph.metadata}
    arrays["metadata_json"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    return arrays


def export_graph(
    graph: CloneGraph,
    path: str | os.PathLike[str],
    fmt: str,
    communities: Communities | None = None,
    module: str | int | None = None,
    pajek_weight: str = "weight",
) -> dict[str, Any]:
    """Write the whole graph, or one module's subgraph, in format ``fmt`` (one of :data:`FORMATS`) to ``path``
    atomically. The partition formats need ``communities``. Returns figures: format, nodes, edges, path."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt in PARTITION_FORMATS and communities is None:
        raise ValueError(f"the {fmt} format needs a community result")
    nodes = select_nodes(graph, communities, module)  # raises before anything is written
    root: tuple[int, ...] = () if module is None else communities.module(module).path  # type: ignore[union-attr]
    n_edges = len(_edge_subset(graph, nodes))
    if fmt in ("graphml", "gexf", "cyjs"):
        G = to_networkx(graph, communities, module)
        if fmt == "graphml":
            atomic_write(path, lambda tmp: nx.write_graphml(G, tmp))
        elif fmt == "gexf":
            atomic_write(path, lambda tmp: nx.write_gexf(G, tmp))
        else:
            _write_text(path, json.dumps(cytoscape_json(G), ensure_ascii=False))
    elif fmt == "pajek":
        _write_text(path, pajek_text(graph, nodes, pajek_weight))
    elif fmt in PARTITION_FORMATS:
        assert communities is not None
        if module is None and communities.infomap_result is not None:
            writer = {"clu": "write_clu", "tree": "write_tree", "ftree": "write_flow_tree"}[fmt]
            atomic_write(path, lambda tmp: getattr(communities.infomap_result, writer)(tmp))
        else:
            text = {"clu": clu_text, "tree": tree_text, "ftree": ftree_text}[fmt](communities, root)
            _write_text(path, text)
    else:
        arrays = npz_arrays(graph, nodes, communities)

        def write_npz(tmp: str) -> None:
            with open(tmp, "wb") as handle:
                np.savez_compressed(handle, **arrays)

        atomic_write(path, write_npz)
    return {"format": fmt, "nodes": int(len(nodes)), "edges": int(n_edges), "path": str(path)}
