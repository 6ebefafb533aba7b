"""Exports of the clone graph (whole, or one module's subgraph) for network-analysis tools.

Formats: GraphML (Gephi, Cytoscape, yEd, igraph), GEXF (Gephi), Cytoscape JSON (``.cyjs``: Cytoscape desktop,
Cytoscape.js; :func:`cytoscape_elements` gives dash-cytoscape's flat element list), Pajek ``.net`` (Infomap,
Pajek, Gephi), the Infomap partition files ``.clu``, ``.tree`` and ``.ftree`` (map equation Network Navigator),
and ``.npz`` (plain arrays, no pickle).

One numbering per export: the exported clones, in the order of their global indices, are vertices 1..n in every
format (Pajek's one-based ids, which Infomap keeps for a ``.net`` it reads), so the ``.net``, ``.clu``, ``.tree``
and ``.ftree`` of one export join on node id. Node attributes: ``label`` ("t:3": visible symbol and clone rank),
``char``, ``clone`` (rank among the clones of its symbol), ``state`` (the clone's global index in the model's T),
``flow`` (stationary), and with communities ``module`` (module number within the export, as in its ``.clu``),
``path`` (the export's tree path, one-based, as in its ``.tree``), ``module_id`` (the module's id in the whole
result, "3:2") and ``module_name``; GEXF and Cytoscape JSON also carry positions (:mod:`engine.network.drawing`, module
by module), sizes (by flow) and module colours (``colour``, ``size`` data fields in Cytoscape JSON). Edge attributes
``weight`` (T), ``count`` (expected counts, when the model kept them) and ``flow`` (node flow x T). All values are
plain Python str / int / float. A module's export keeps its module's structure: its submodules, or one module 1
when it is a leaf. Every format that can hold them carries the export's description (model, corpus, states,
threshold, BPS, Infomap settings): graph attributes, GEXF's ``meta``, ``#`` header lines in the Pajek and Infomap
files. Every file is written to a temporary name and renamed, so a failure leaves nothing partial.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any
from xml.etree.ElementTree import SubElement

import networkx as nx
import numpy as np

from engine.corpora.documents import corpus_file_name
from engine.errors import CHMMError
from engine.files import atomic_write
from engine.network import drawing
from engine.network.communities import Communities, _link_flow
from engine.network.graph import CloneGraph

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
POSITION_SCALE = 1000.0
"""Exported positions span [-POSITION_SCALE, POSITION_SCALE] (Gephi's and Cytoscape's pixels)."""


def _write_text(path: str | os.PathLike[str], text: str) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)

    atomic_write(path, write)


# ============================================================================================ selection
def select_nodes(
    graph: CloneGraph, communities: Communities | None = None, module: str | int | None = None
) -> np.ndarray:
    """The clones to export, sorted: those of ``module`` (an id like "3" or "3:2"; ValueError if it does not
    exist), or every clone with at least one edge."""
    if module is not None:
        if communities is None:
            raise CHMMError("exporting a module needs a community result")
        return communities.module(module).nodes
    return np.flatnonzero(graph.active())


@dataclass
class Scope:
    """What one export holds and how it numbers it.

    Attributes:
        nodes: the exported clones (global indices), sorted; clone ``nodes[i]`` is vertex i + 1 in every format.
        module: the exported module's id ("3:2"), or None for the whole graph.
        paths: each exported clone's tree path within the export (one-based; relative to the module, with a
            leading 1 when the module is a leaf, so the export is one module), by clone; empty without communities.
    """

    nodes: np.ndarray
    module: str | None
    paths: dict[int, tuple[int, ...]]

    @property
    def vertex(self) -> dict[int, int]:
        """Global clone index -> the export's one-based vertex id."""
        return {int(node): i + 1 for i, node in enumerate(self.nodes.tolist())}


def export_scope(graph: CloneGraph, communities: Communities | None = None, module: str | int | None = None) -> Scope:
    """The clones of an export and their tree paths within it (see :class:`Scope`)."""
    nodes = np.asarray(select_nodes(graph, communities, module), dtype=np.int64)
    paths: dict[int, tuple[int, ...]] = {}
    module_id = None
    if communities is not None:
        root: tuple[int, ...] = ()
        leaf = False
        if module is not None:
            found = communities.module(module)
            root, module_id, leaf = found.path, found.id, not found.children
        depth = len(root)
        for node in nodes.tolist():
            path = communities.node_path.get(int(node))
            if path is not None:
                paths[int(node)] = ((1,) if leaf else ()) + path[depth:]
    return Scope(nodes, module_id, paths)


def node_attributes(
    graph: CloneGraph, node: int, communities: Communities | None = None, scope: Scope | None = None
) -> dict[str, Any]:
    """The export attributes of one clone, as plain Python values (module docstring); paths and module numbers
    within ``scope`` (the whole graph when None)."""
    attributes: dict[str, Any] = {
        "label": graph.label(node),
        "char": graph.char(node),
        "clone": int(graph.clone_rank[node]),
        "state": int(node),
        "flow": float(graph.flow[node]),
    }
    if communities is not None:
        full = communities.node_path.get(int(node))
        path = full if scope is None else scope.paths.get(int(node))
        if path is not None and full is not None:
            attributes["module"] = int(path[0])
            attributes["path"] = ":".join(str(p) for p in path)
            depth = len(full) - len(path) + 1  # the depth of the export's top modules in the whole tree
            module_id = ":".join(str(p) for p in full[:depth])
            attributes["module_id"] = module_id
            attributes["module_name"] = communities.modules[module_id].name if module_id in communities.modules else ""
    return attributes


def describe_export(
    graph: CloneGraph, communities: Communities | None = None, scope: Scope | None = None
) -> dict[str, Any]:
    """What an export holds, as plain values for every format's metadata: ``title``, the model's ``corpus``,
    ``states``, ``symbols``, ``threshold`` (pruning), ``model_test_bps``, the export's ``nodes`` and ``module``,
    the ``numbering``, and with communities the Infomap settings and code length."""
    meta = graph.metadata
    pruned = meta.get("pruned") or {}
    threshold = pruned.get("threshold")
    what = "whole clone graph" if scope is None or scope.module is None else f"module {scope.module}"
    described: dict[str, Any] = {
        "title": f"CHMM clone graph: {what}",
        "corpus": corpus_file_name(meta.get("corpus")) or "unknown",
        "states": int(graph.n_states),
        "symbols": len(graph.symbols),
        "threshold": float(threshold) if threshold is not None else 0.0,  # 0: not pruned
        "pruned": threshold is not None,
        "model_test_bps": float(meta["test_bps"]) if meta.get("test_bps") is not None else float("nan"),
        "nodes": int(len(scope.nodes)) if scope is not None else int(graph.active().sum()),
        "module": scope.module if scope is not None and scope.module else "",
        "numbering": "vertices 1..n in the order of the clones' global indices (attribute state)",
    }
    if communities is not None:
        import infomap

        o = communities.options
        described |= {
            "infomap": f"Infomap {infomap.__version__}",
            "infomap_flow": f"{o.flow} ({_flow_words(o.flow)})",
            "infomap_levels": "two-level" if o.two_level else "multilevel",
            "infomap_trials": int(o.trials),
            "infomap_markov_time": float(o.markov_time),
            "infomap_seed": f"{o.seed} (Infomap --seed {o.seed + 1})",
            "codelength": float(communities.codelength),
            "top_modules": len(communities.top_modules),
            "levels": int(communities.n_levels),
            "infomap_run": communities.origin or "run for this export",
        }
    return described


def _flow_words(flow: str) -> str:
    return {
        "stationary": "link weights node flow x T, --flow-model rawdir",
        "counts": "link weights the expected transition counts, --flow-model rawdir",
        "directed": "link weights T, --flow-model directed",
    }[flow]


def _header_lines(description: dict[str, Any]) -> list[str]:
    """``#`` comment lines (Infomap and networkx skip them) describing an export."""
    lines = [f"# {description['title']} (CHMM Explorer export)"]
    bps = description["model_test_bps"]
    lines.append(
        f"# model: {description['states']:,} states over {description['symbols']} symbols, corpus "
        f"{description['corpus']}, "
        + (f"pruned at {description['threshold']:g}" if description["pruned"] else "not pruned")
        + (f", test BPS {bps:.4f}" + (" before pruning" if description["pruned"] else "") if bps == bps else "")
    )
    if "infomap" in description:
        lines.append(
            f"# {description['infomap']}: flow {description['infomap_flow']}, {description['infomap_levels']}, "
            f"trials {description['infomap_trials']}, markov time {description['infomap_markov_time']:g}, seed "
            f"{description['infomap_seed']}; codelength {description['codelength']:g} bits"
        )
        lines.append(f"# modules: {description['infomap_run']}")
    lines.append(f"# {description['nodes']:,} nodes numbered 1..n by the clones' global indices (state)")
    return lines


def _positions(graph: CloneGraph, scope: Scope, seed: int = 0) -> dict[int, tuple[float, float]]:
    """Layout of the exported clones (:func:`engine.network.drawing.grouped_layout` by top module of the export, or
    :func:`engine.network.drawing.force_layout` without communities), scaled to :data:`POSITION_SCALE`."""
    vertex = scope.vertex
    sources, targets = graph.edges()
    edges = graph.edges_among(scope.nodes)
    a = np.array([vertex[int(s)] - 1 for s in sources[edges]], dtype=np.int64)
    b = np.array([vertex[int(t)] - 1 for t in targets[edges]], dtype=np.int64)
    weights = graph.edge_flow[edges]
    if scope.paths:
        groups = np.array([scope.paths.get(int(n), (0,))[0] for n in scope.nodes], dtype=np.int64)
        xy = drawing.grouped_layout(groups, a, b, weights, seed)
    else:
        xy = drawing.force_layout(len(scope.nodes), a, b, weights, seed)
    xy = xy * POSITION_SCALE
    return {int(n): (float(x), float(y)) for n, (x, y) in zip(scope.nodes.tolist(), xy.tolist(), strict=True)}


def _node_size(flow: float, top: float) -> float:
    """A drawing size from 4 to 40 growing with the square root of the clone's flow."""
    return round(4.0 + 36.0 * float(np.sqrt(flow / top)) if top > 0 else 4.0, 3)


def to_networkx(
    graph: CloneGraph,
    communities: Communities | None = None,
    module: str | int | None = None,
    nodes: np.ndarray | None = None,
    ids: str = "vertex",
    positions: bool = False,
    most_edges: int | None = None,
) -> nx.DiGraph:
    """The (sub)graph as a networkx DiGraph with string node ids and plain-typed attributes (module docstring) and
    the export's description as graph attributes. ``ids``: "vertex" (the export's 1..n) or "state" (global clone
    indices, as the app's views use); ``nodes`` (global clone indices) picks the clones directly instead of
    ``module``; ``positions`` adds ``x``, ``y``, ``size`` and ``colour`` (module colour, grey without modules).
    ``most_edges``: only that many edges, the most probable (largest weight; equal weights in CSR order), added most
    probable first; the others are never built (a module's 185,000 edges took 93 MB as networkx objects when a view
    draws 2,000 elements)."""
    if nodes is None:
        scope = export_scope(graph, communities, module)
    else:
        scope = Scope(np.sort(np.asarray(nodes, dtype=np.int64)), None, {})
        if communities is not None:
            known = communities.node_path
            scope.paths = {int(n): known[int(n)] for n in scope.nodes if int(n) in known}
    vertex = scope.vertex
    name = (lambda node: str(vertex[node])) if ids == "vertex" else str
    G = nx.DiGraph()
    G.graph.update(describe_export(graph, communities, scope))
    G.graph["name"] = G.graph["title"]
    where = _positions(graph, scope) if positions else {}
    top = float(graph.flow[scope.nodes].max()) if len(scope.nodes) else 0.0
    for node in scope.nodes.tolist():
        data = node_attributes(graph, node, communities, scope)
        if positions:
            x, y = where[node]
            data |= {"x": round(x, 3), "y": round(y, 3), "size": _node_size(data["flow"], top)}
            data["colour"] = drawing.module_colour(data["module"]) if "module" in data else "#7f7f7f"
        G.add_node(name(node), **data)
    edges = graph.edges_among(scope.nodes)
    if most_edges is not None:
        edges = edges[np.argsort(-graph.weight.data[edges], kind="stable")[: max(int(most_edges), 0)]]
    sources, targets = graph.edge_sources(edges), graph.weight.indices[edges]
    for e, source, target in zip(edges.tolist(), sources.tolist(), targets.tolist(), strict=True):
        data: dict[str, Any] = {"weight": float(graph.weight.data[e]), "flow": float(graph.edge_flow[e])}
        if graph.count is not None:
            data["count"] = float(graph.count[e])
        G.add_edge(name(int(source)), name(int(target)), **data)
    return G


# ============================================================================================ formats
def cytoscape_json(G: nx.DiGraph) -> dict[str, Any]:
    """Cytoscape JSON (the ``.cyjs`` layout networkx's ``cytoscape_data`` writes and ``cytoscape_graph`` reads):
    node data carry ``id``/``value`` (the string node id) and ``name`` (the label); edges carry an ``id`` and
    ``source``/``target`` equal to node ids, as Cytoscape.js requires. Nodes with ``x``/``y`` get a
    ``position`` (Cytoscape's preset layout) and edges a drawing ``width``."""
    nodes = []
    for node, data in G.nodes(data=True):
        element: dict[str, Any] = {"data": {**data, "id": node, "value": node, "name": data.get("label", node)}}
        if "x" in data:
            element["position"] = {"x": data["x"], "y": data["y"]}
        nodes.append(element)
    edges = []
    for source, target, data in G.edges(data=True):
        edges.append(
            {
                "data": {
                    **data,
                    "id": f"{source}-{target}",
                    "source": source,
                    "target": target,
                    "width": round(0.5 + 5.0 * float(data["weight"]), 3),
                }
            }
        )
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


def gexf_text(G: nx.DiGraph) -> str:
    """GEXF 1.2 with each node's ``viz`` position, size and colour (from ``x``, ``y``, ``size``, ``colour``) and the
    export's description in ``meta`` (creator, description, keywords)."""
    H = G.copy()
    for _, data in H.nodes(data=True):
        if "x" in data:
            data["viz"] = {
                "position": {"x": data["x"], "y": data["y"], "z": 0.0},
                "size": data["size"],
                "color": drawing.colour_rgb(data["colour"]) | {"a": 1.0},
            }
    writer = nx.readwrite.gexf.GEXFWriter(version="1.2draft")
    writer.add_graph(H)
    meta = writer.xml.find("meta")
    if meta is not None:
        for child in list(meta):
            if child.tag == "creator":
                child.text = "CHMM Explorer"
        SubElement(meta, "description").text = "; ".join(f"{k}: {v}" for k, v in G.graph.items() if k != "name")
        SubElement(meta, "keywords").text = "cloned hidden Markov model, clone graph, Infomap"
    return str(writer)


def pajek_text(graph: CloneGraph, scope: Scope, weights: np.ndarray, header: list[str] | None = None) -> str:
    """Pajek ``.net`` text: ``#`` header lines, ``*Vertices`` with the export's 1-based ids and quoted labels,
    ``*Arcs`` with ``weights`` (per edge of the graph, CSR order)."""
    vertex = scope.vertex
    lines = list(header or [])
    lines.append(f"*Vertices {len(vertex)}")
    lines += [f'{i} "{graph.label(node)}"' for node, i in vertex.items()]
    lines.append("*Arcs")
    sources, targets = graph.edges()
    for e in graph.edges_among(scope.nodes).tolist():
        lines.append(f"{vertex[int(sources[e])]} {vertex[int(targets[e])]} {float(weights[e])!r}")
    return "\n".join(lines) + "\n"


def infomap_weights(graph: CloneGraph, communities: Communities | None) -> np.ndarray:
    """The per-edge weights Infomap partitioned (node flow x T, the expected counts, or T: see
    :mod:`engine.network.communities`), or T without communities."""
    if communities is None or communities.options.flow == "directed":
        return graph.weight.data
    if communities.options.flow == "counts" and graph.count is not None:
        return graph.count
    return graph.edge_flow


def _infomap_flow(communities: Communities) -> dict[int, float]:
    """Node flow as Infomap computed it (leaf flows of the tree; a restored result's saved flows)."""
    if communities.node_flow is not None:
        return communities.node_flow
    return {int(n.node_id): float(n.flow) for n in communities.infomap_result.nodes()}


def _ordered(scope: Scope) -> list[tuple[tuple[int, ...], int]]:
    """(path within the export, clone) of every exported clone, in tree order."""
    return sorted((path, node) for node, path in scope.paths.items())


def clu_text(communities: Communities, scope: Scope, header: list[str]) -> str:
    """Infomap ``.clu``: ``node_id module flow`` with the export's vertex ids and top modules."""
    flows, vertex = _infomap_flow(communities), scope.vertex
    lines = [*header, "# node_id module flow"]
    lines += [f"{vertex[node]} {path[0]} {flows[node]:g}" for path, node in _ordered(scope)]
    return "\n".join(lines) + "\n"


def tree_text(communities: Communities, scope: Scope, header: list[str]) -> str:
    """Infomap ``.tree``: ``path flow "name" node_id`` with the export's tree paths and vertex ids."""
    flows, vertex, graph = _infomap_flow(communities), scope.vertex, communities.graph
    lines = [*header, "# path flow name node_id"]
    lines += [
        f'{":".join(map(str, path))} {flows[node]:g} "{graph.label(node)}" {vertex[node]}'
        for path, node in _ordered(scope)
    ]
    return "\n".join(lines) + "\n"


def ftree_text(communities: Communities, scope: Scope, header: list[str]) -> str:
    """Infomap ``.ftree`` (Network Navigator): the ``.tree`` lines, then ``*Links directed`` and, for the export's
    root and every module under it, the aggregated link flow between its children (``*Links path enterFlow
    exitFlow numEdges numChildren`` and ``source target flow`` lines, child indices one-based)."""
    graph = communities.graph
    lines = tree_text(communities, scope, header).rstrip("\n").split("\n")
    lines += ["*Links directed", "#*Links path enterFlow exitFlow numEdges numChildren"]
    rel_path = scope.paths
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
    module_paths = [()] + sorted({path[:d] for path in rel_path.values() for d in range(1, len(path))})
    by_export_path = _modules_by_export_path(communities, scope)
    for path in module_paths:
        module = by_export_path.get(path)
        enter = module.enter_flow if module is not None else 0.0
        exit_ = module.exit_flow if module is not None else 0.0
        children = {p[len(path)] for p in rel_path.values() if p[: len(path)] == path and len(p) > len(path)}
        pairs = links.get(path, {})
        name = ":".join(map(str, path)) if path else "root"
        lines.append(f"*Links {name} {enter:g} {exit_:g} {len(pairs)} {len(children)}")
        lines += [f"{s} {t} {f:g}" for (s, t), f in sorted(pairs.items())]
    return "\n".join(lines) + "\n"


_PARTITION_WRITERS = {"clu": clu_text, "tree": tree_text, "ftree": ftree_text}


def partition_texts(communities: Communities) -> dict[str, str]:
    """The whole graph's ``.clu``, ``.tree`` and ``.ftree`` texts by extension, numbered and headed as an export
    of the whole graph (so they join with ``chmm export --format pajek`` of the same model and threshold)."""
    scope = export_scope(communities.graph, communities)
    header = _header_lines(describe_export(communities.graph, communities, scope))
    return {fmt: writer(communities, scope, header) for fmt, writer in _PARTITION_WRITERS.items()}


def _modules_by_export_path(communities: Communities, scope: Scope) -> dict[tuple[int, ...], Any]:
    """The result's modules by their tree path within the export: the exported module is the export's root (),
    and a leaf module exported alone is also its one module (1,)."""
    if scope.module is None:
        return {m.path: m for m in communities.modules.values()}
    root = communities.module(scope.module)
    if not root.children:
        return {(): root, (1,): root}
    depth = len(root.path)
    return {m.path[depth:]: m for m in communities.modules.values() if m.path[:depth] == root.path}


def npz_arrays(
    graph: CloneGraph, scope: Scope, communities: Communities | None = None, description: dict[str, Any] | None = None
) -> dict[str, np.ndarray]:
    """The (sub)graph as plain arrays: node arrays (``vertex`` = the export's 1..n, ``state`` = global clone
    index, ``label``, ``char``, ``clone``, ``flow``, ``module``, ``path``) and edge arrays (``source``,
    ``target`` as vertex ids, ``weight``, ``count``, ``edge_flow``), plus ``metadata_json``."""
    nodes, vertex = scope.nodes, scope.vertex
    edges = graph.edges_among(nodes)
    sources, targets = graph.edges()
    arrays: dict[str, np.ndarray] = {
        "vertex": np.arange(1, len(nodes) + 1, dtype=np.int64),
        "state": nodes.astype(np.int64),
        "label": np.array([graph.label(int(n)) for n in nodes], dtype=str),
        "char": np.array([graph.char(int(n)) for n in nodes], dtype=str),
        "clone": graph.clone_rank[nodes].astype(np.int64),
        "flow": graph.flow[nodes].astype(np.float64),
        "source": np.array([vertex[int(s)] for s in sources[edges]], dtype=np.int64),
        "target": np.array([vertex[int(t)] for t in targets[edges]], dtype=np.int64),
        "weight": graph.weight.data[edges].astype(np.float64),
        "edge_flow": graph.edge_flow[edges].astype(np.float64),
    }
    if graph.count is not None:
        arrays["count"] = graph.count[edges].astype(np.float64)
    if communities is not None:
        paths = [scope.paths.get(int(n), ()) for n in nodes]
        arrays["module"] = np.array([p[0] if p else 0 for p in paths], dtype=np.int64)
        arrays["path"] = np.array([":".join(map(str, p)) for p in paths], dtype=str)
    meta = {"format": "chmm-explorer-clone-graph", "version": 2, "export": description or {}, "model": graph.metadata}
    arrays["metadata_json"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    return arrays


def export_file_name(graph: CloneGraph, fmt: str, module: str | None = None) -> str:
    """An informative file name: corpus, states, pruning threshold and the module (or "whole"), e.g.
    ``carroll-alice-600-states-pruned-0.001-module-3-2.gexf``."""
    corpus = corpus_file_name(graph.metadata.get("corpus")) or "model"
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", os.path.splitext(os.path.basename(corpus))[0]).strip("-.") or "model"
    threshold = (graph.metadata.get("pruned") or {}).get("threshold")
    parts = [stem[:60], f"{graph.n_states}-states"]
    if threshold is not None:
        parts.append(f"pruned-{float(threshold):g}")
    parts.append("whole" if module is None else "module-" + str(module).replace(":", "-"))
    return "-".join(parts) + EXTENSIONS[fmt]


def export_graph(
    graph: CloneGraph,
    path: str | os.PathLike[str],
    fmt: str,
    communities: Communities | None = None,
    module: str | int | None = None,
) -> dict[str, Any]:
    """Write the whole graph, or one module's subgraph, in format ``fmt`` (one of :data:`FORMATS`) to ``path``
    atomically, numbered and described as the module docstring says (the Pajek arcs carry the weights Infomap
    partitioned, :func:`infomap_weights`). The partition formats need ``communities``. Returns figures: format,
    nodes, edges, path."""
    if fmt not in FORMATS:
        raise CHMMError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt in PARTITION_FORMATS and communities is None:
        raise CHMMError(f"the {fmt} format needs a community result")
    scope = export_scope(graph, communities, module)  # raises before anything is written
    description = describe_export(graph, communities, scope)
    header = _header_lines(description)
    n_edges = len(graph.edges_among(scope.nodes))
    if fmt in ("graphml", "gexf", "cyjs"):
        G = to_networkx(graph, communities, module, positions=fmt != "graphml")
        if fmt == "graphml":
            atomic_write(path, lambda tmp: nx.write_graphml(G, tmp))
        elif fmt == "gexf":
            _write_text(path, gexf_text(G))
        else:
            _write_text(path, json.dumps(cytoscape_json(G), ensure_ascii=False))
    elif fmt == "pajek":
        _write_text(path, pajek_text(graph, scope, infomap_weights(graph, communities), header))
    elif fmt in PARTITION_FORMATS:
        assert communities is not None
        _write_text(path, _PARTITION_WRITERS[fmt](communities, scope, header))
    else:
        arrays = npz_arrays(graph, scope, communities, description)

        def write_npz(tmp: str) -> None:
            with open(tmp, "wb") as handle:
                np.savez_compressed(handle, **arrays)

        atomic_write(path, write_npz)
    return {"format": fmt, "nodes": int(len(scope.nodes)), "edges": int(n_edges), "path": str(path)}
