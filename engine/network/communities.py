"""Communities of the clone graph: Infomap, the module tree with flows, module summaries and generalized words
(paper, section 4.2.1: "a community subgraph of a character-level CHMM can be thought of as a generalized word").

Infomap runs through the ``infomap`` package's Python API (``infomap>=2.15,<3``) with the flow model always
passed explicitly. By default the link weights are the model's own edge flows, node flow x T (the stationary
distribution of :func:`engine.network.graph.stationary_distribution`), with ``flow_model="rawdir"``: Infomap then uses
these flows as they are, without its PageRank teleportation (which would bias the flow of a sparse text graph).
``flow="counts"`` feeds the expected transition counts of the last E-step instead (the posterior edge flow of
the training text), also as ``rawdir``; ``flow="directed"`` feeds T and lets Infomap compute the flow with its
``directed`` model (PageRank, teleportation 0.15) -- the fallback for a model without counts when one wants
Infomap's own flow.

Generalized words, the whole words a module generates, are :mod:`engine.network.words`.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from engine.errors import CHMMError
from engine.network.graph import CloneGraph, visible_char
from engine.network.words import FRAGMENT, GeneralizedWord, Reference, generalized_words

FLOW_SOURCES = ("stationary", "counts", "directed")


class ModuleNotFoundInResult(CHMMError):
    """A module id that the community result does not have."""


MAX_TRIALS = 10_000
"""Infomap trials beyond this only cost time (the best of 10 rarely changes after a few dozen)."""


@dataclass
class CommunityOptions:
    """Settings of :func:`find_communities`.

    two_level: a two-level partition (modules of clones) instead of Infomap's multilevel hierarchy.
    trials: independent Infomap trials; the partition with the shortest code length is kept.
    markov_time: scales link flow; larger values give fewer, bigger modules.
    seed: random seed (Infomap's seed is ``seed + 1``, since Infomap needs a seed >= 1).
    flow: link weights and flow model: "stationary" (node flow x T, rawdir), "counts" (expected counts, rawdir)
        or "directed" (T, Infomap's directed flow with teleportation).
    words: generalized words kept per module; beam, max_length: the search's beam width and length cap.
    """

    two_level: bool = False
    trials: int = 10
    markov_time: float = 1.0
    seed: int = 0
    flow: str = "stationary"
    words: int = 10
    beam: int = 500
    max_length: int = 16

    def validate(self) -> None:
        """Raise ValueError (one sentence) on impossible settings."""
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or not 1 <= self.trials <= MAX_TRIALS:
            raise CHMMError(f"the number of trials must be an integer from 1 to {MAX_TRIALS:,}, got {self.trials!r}")
        if not (np.isfinite(self.markov_time) and self.markov_time > 0):
            raise CHMMError(f"the Markov time must be a positive number, got {self.markov_time!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise CHMMError(f"the seed must be a non-negative integer, got {self.seed!r}")
        if self.flow not in FLOW_SOURCES:
            raise CHMMError(f"flow must be one of {', '.join(FLOW_SOURCES)}, not {self.flow!r}")
        if self.words < 0 or self.beam < 1 or self.max_length < 1:
            raise CHMMError("words must be >= 0, beam and max_length >= 1")


@dataclass
class Module:
    """One module of the Infomap tree.

    Attributes:
        path: tree path from the root, one-based child indices (``(3,)`` is top module 3, ``(3, 2)`` its second
            submodule); ``id`` is the colon-joined form ("3:2") used by the CLI and the exports.
        nodes: the clones in the module and all its submodules (global clone indices), sorted.
        flow: the module's flow (sum of its clones' flows as Infomap computed them; top modules sum to 1).
        enter_flow, exit_flow: link flow entering / leaving the module from / to the rest of the graph.
        chars: the symbols its clones emit, most flow first (spaces shown as U+2423; words and tokens apart).
        children: ids of its submodules (empty for a leaf module).
        words: its most probable generalized words; name: the default name (the most probable word(s)).
    """

    path: tuple[int, ...]
    nodes: np.ndarray
    flow: float
    enter_flow: float = 0.0
    exit_flow: float = 0.0
    chars: str = ""
    children: list[str] = field(default_factory=list)
    words: list[GeneralizedWord] = field(default_factory=list)
    name: str = ""

    @property
    def id(self) -> str:
        return ":".join(str(p) for p in self.path)

    @property
    def level(self) -> int:
        return len(self.path)

    @property
    def size(self) -> int:
        return int(len(self.nodes))

    @property
    def parent(self) -> str:
        return ":".join(str(p) for p in self.path[:-1])

    def summary(self) -> dict[str, Any]:
        """The module as plain JSON-ready values."""
        return {
            "id": self.id,
            "level": self.level,
            "parent": self.parent,
            "name": self.name,
            "size": self.size,
            "flow": float(self.flow),
            "enter_flow": float(self.enter_flow),
            "exit_flow": float(self.exit_flow),
            "chars": self.chars,
            "children": list(self.children),
            "words": [w.summary() for w in self.words],
        }


@dataclass
class Communities:
    """The result of :func:`find_communities`.

    Attributes:
        graph: the clone graph that was partitioned.
        nodes: the clones given to Infomap (those with at least one edge), sorted.
        node_path: tree path of each of those clones (its leaf module path plus its index in it), by clone.
        modules: every module of the tree by id, depth first in tree order (top modules sorted by flow).
        codelength: the map equation code length (bits); one_level_codelength: without modules.
        options: the settings; seconds: Infomap's wall time (trials included).
        infomap_result: the ``infomap.Result`` (its writers produce ``.tree``, ``.ftree``, ``.clu``).
    """

    graph: CloneGraph
    nodes: np.ndarray
    node_path: dict[int, tuple[int, ...]]
    modules: dict[str, Module]
    codelength: float
    one_level_codelength: float
    options: CommunityOptions
    seconds: float
    infomap_result: Any = field(repr=False, default=None)
    infomap_network: Any = field(repr=False, default=None)
    node_flow: dict[int, float] | None = field(repr=False, default=None)  # a restored result's leaf flows
    origin: str = ""  # where a restored result comes from (said in every export of it)

    @property
    def top_modules(self) -> list[Module]:
        return [m for m in self.modules.values() if m.level == 1]

    @property
    def n_levels(self) -> int:
        return max((len(p) for p in self.node_path.values()), default=1)

    def module(self, module_id: str | int) -> Module:
        """The module with this id ("3", "3:2" or the integer 3); ValueError naming the valid range if absent."""
        key = str(module_id).strip()
        if key not in self.modules:
            raise ModuleNotFoundInResult(
                f"module {key!r} does not exist: the result has top modules 1..{len(self.top_modules)}"
                + (" (submodules as 1:1, 1:2, ...)" if self.n_levels > 2 else "")
            )
        return self.modules[key]

    def top_module_of(self) -> dict[int, int]:
        """Top module number of every partitioned clone."""
        return {node: path[0] for node, path in self.node_path.items()}

    def summary(self) -> dict[str, Any]:
        """Figures of the run (the CLI's --json object)."""
        return {
            "modules": len(self.top_modules),
            "leaf_modules": sum(1 for m in self.modules.values() if not m.children),
            "levels": self.n_levels,
            "codelength": float(self.codelength),
            "one_level_codelength": float(self.one_level_codelength),
            "nodes": int(len(self.nodes)),
            "edges": int(self.graph.n_edges),
            "seconds": float(self.seconds),
        }


# ============================================================================================ Infomap
def _infomap_network(graph: CloneGraph, flow: str) -> tuple[Any, str]:
    """An ``infomap.Network`` of the graph's active clones (node id = clone index, name = label) and the
    flow model to run it with."""
    from infomap import Network

    sources, targets = graph.edges()
    if flow == "stationary":
        weights, flow_model = graph.edge_flow, "rawdir"
    elif flow == "counts":
        if graph.count is None:
            raise CHMMError(
                "the model keeps no expected counts (`chmm train --keep-statistics` saves them); use flow 'stationary' "
                "or 'directed'"
            )
        weights, flow_model = graph.count, "rawdir"
    else:
        weights, flow_model = graph.weight.data, "directed"
    network = Network()
    for node in np.flatnonzero(graph.active()):
        network.add_node(int(node), graph.label(int(node)))
    ok = weights > 0
    # as one array, read by Infomap's C++ (a list of tuples went through a Python loop: 5 s of 974,822 links)
    network.add_links(np.column_stack([sources[ok], targets[ok], weights[ok]]).astype(np.float64))
    return network, flow_model


def find_communities(
    graph: CloneGraph,
    options: CommunityOptions | None = None,
    reference: str | Iterable[str] | None = None,
) -> Communities:
    """Run Infomap on the clone graph and build the module tree with flows, enter/exit flows, covered symbols
    and generalized words (marked seen/novel against ``reference``: the training text, or a collection of its
    words). Module names default to their most probable generalized word(s)."""
    from infomap import Options

    options = options or CommunityOptions()
    options.validate()
    if graph.n_edges == 0:
        raise CHMMError("the clone graph has no edges (was everything pruned?)")
    network, flow_model = _infomap_network(graph, options.flow)
    infomap_options = Options(
        flow_model=flow_model,
        two_level=options.two_level,
        num_trials=options.trials,
        markov_time=float(options.markov_time),
        seed=options.seed + 1,
        silent=True,
    )
    started = time.perf_counter()
    try:
        result = network.run(options=infomap_options)
    except (MemoryError, KeyboardInterrupt):
        raise
    except Exception as exc:  # infomap.errors.InfomapError and the C++ errors it wraps (bad_alloc, ...)
        raise CHMMError(f"Infomap failed: {str(exc).strip() or type(exc).__name__}") from exc
    seconds = time.perf_counter() - started

    node_path: dict[int, tuple[int, ...]] = {}
    module_flow: dict[tuple[int, ...], float] = {}
    for item in result.tree():
        path = tuple(int(p) for p in item.path)
        if item.is_leaf:
            node_path[int(item.node_id)] = path
        elif path:
            module_flow[path] = float(item.flow)
    nodes = np.array(sorted(node_path), dtype=np.int64)
    members: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for node, path in node_path.items():
        for depth in range(1, len(path)):
            members[path[:depth]].append(node)
    modules: dict[str, Module] = {}
    for path, flow in module_flow.items():  # tree order (depth first, children sorted by flow)
        module = Module(path, np.array(sorted(members[path]), dtype=np.int64), flow)
        modules[module.id] = module
    for module in modules.values():
        if module.level > 1:
            modules[module.parent].children.append(module.id)
    known = Reference.of(reference)
    link_flow = _link_flow(graph, options.flow)
    for module in modules.values():
        _describe_module(graph, module, link_flow, options, known)
    return Communities(
        graph,
        nodes,
        node_path,
        modules,
        float(result.codelength),
        float(result.one_level_codelength),
        options,
        seconds,
        result,
        network,
    )


def _link_flow(graph: CloneGraph, flow: str) -> np.ndarray:
    """Per-edge flow in the graph's CSR order, normalised to sum 1, as Infomap sees it for rawdir; for the
    directed model the graph's own edge flow (close to Infomap's, which adds teleportation)."""
    weights = graph.count if flow == "counts" and graph.count is not None else graph.edge_flow
    total = weights.sum()
    return weights / total if total > 0 else weights


# ================================================================================= module summaries
def _describe_module(
    graph: CloneGraph, module: Module, link_flow: np.ndarray, options: CommunityOptions, reference: Reference | None
) -> None:
    """Fill in enter/exit flow, covered symbols, generalized words and the default name of ``module``."""
    inside = np.zeros(graph.n_states, dtype=bool)
    inside[module.nodes] = True
    entering, leaving = graph.incident_edges(module.nodes, inside)
    module.enter_flow = float(link_flow[entering].sum())
    module.exit_flow = float(link_flow[leaving].sum())
    by_symbol: dict[int, float] = defaultdict(float)
    for node in module.nodes:
        by_symbol[int(graph.clone_symbol[node])] += float(graph.flow[node])
    ranked = sorted(by_symbol, key=lambda s: (-by_symbol[s], s))
    gap = "" if graph.metadata.get("unit", "characters") == "characters" else " "  # words and tokens: apart
    module.chars = gap.join(visible_char(graph.symbols[s]) for s in ranked)
    if options.words:
        module.words = generalized_words(
            graph, module.nodes, options.words, options.beam, options.max_length, reference, link_flow
        )
    module.name = module_name(module)


def module_name(module: Module) -> str:
    """Default name: the most probable generalized word, with the second joined by "/" when it is at least half
    as probable; fragments between hyphens ("-ell-"); the covered symbols when the module generates nothing."""
    words = [w for w in module.words if w.text]
    if not words:
        return module.chars[:12]
    shown = [f"-{w.text}-" if w.kind == FRAGMENT else w.text for w in words]
    name = shown[0]
    if len(words) > 1 and words[1].probability >= 0.5 * words[0].probability:
        name += "/" + shown[1]
    return name


# ================================================================================ module links
def module_links(communities: Communities, limit: int | None = None) -> dict[str, list[tuple[str, str, float]]]:
    """The module map's links: for the root ("") and every module with submodules, the link flow between its
    children, ``(child id, child id, flow)`` most flow first (ties in the children's order), summed over the edges
    from a clone under one child to a clone under another (the flow Infomap's ``.ftree`` lists in its ``*Links``
    sections; normalised link flow, :func:`_link_flow`); with ``limit``, each parent's ``limit`` links of most flow.
    Vectorised over the edges, depth by depth."""
    graph = communities.graph
    link_flow = _link_flow(graph, communities.options.flow)
    sources, targets = graph.edges()
    depth = communities.n_levels - 1  # module levels: every path ends with the clone's index in its leaf
    ids: dict[tuple[int, ...], int] = {(): 0}
    names = [""]
    prefix = np.full((depth + 1, graph.n_states), -1, dtype=np.int64)  # prefix[d, node]: id of path[:d], if a module
    for node, path in communities.node_path.items():
        for d in range(min(depth, len(path) - 1) + 1):
            key = path[:d]
            if key not in ids:
                ids[key] = len(names)
                names.append(":".join(map(str, key)))
            prefix[d, node] = ids[key]
    links: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
    for d in range(depth):
        parent_s, parent_t = prefix[d, sources], prefix[d, targets]
        child_s, child_t = prefix[d + 1, sources], prefix[d + 1, targets]
        keep = (parent_s >= 0) & (parent_s == parent_t) & (child_s >= 0) & (child_t >= 0) & (child_s != child_t)
        if not keep.any():
            continue
        # one int64 key per (parent, child, child), ordered as the triples are (a row-wise np.unique sorted
        # structured rows: 3 s of a 974,822-edge graph's Infomap run)
        m = np.int64(len(names))
        keys = (parent_s[keep] * m + child_s[keep]) * m + child_t[keep]
        unique, inverse = np.unique(keys, return_inverse=True)
        flows = np.bincount(inverse.ravel(), weights=link_flow[keep], minlength=len(unique))
        parents = unique // (m * m)
        order = np.lexsort((-flows, parents))  # by parent, then the most flow first (stable: the children's order)
        if limit is not None:  # each parent's first ``limit`` links: rank within its run of the sorted parents
            sorted_parents = parents[order]
            starts = np.flatnonzero(np.r_[True, sorted_parents[1:] != sorted_parents[:-1]])
            rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
            order = order[rank < limit]
        kept = unique[order]
        firsts, seconds = (kept // m) % m, kept % m
        for parent, a, b, flow in zip(
            parents[order].tolist(), firsts.tolist(), seconds.tolist(), flows[order].tolist(), strict=True
        ):
            links[names[parent]].append((names[a], names[b], float(flow)))
    return dict(links)


# ================================================================================ partitions compared
def normalised_mutual_information(first: Iterable[Any], second: Iterable[Any]) -> float:
    """How much two labelings of the same items agree: NMI = 2 I(U; V) / (H(U) + H(V)) (the arithmetic mean of the
    entropies, as scikit-learn's default), with I and H over the items' joint and marginal label frequencies; 1 for
    the same partition under any renaming, 0 for independent ones, and 1 when both put every item in one group.
    ValueError for labelings of different lengths or of no items."""
    a = np.asarray(list(first) if not isinstance(first, np.ndarray) else first)
    b = np.asarray(list(second) if not isinstance(second, np.ndarray) else second)
    if a.ndim != 1 or a.shape != b.shape or len(a) == 0:
        raise CHMMError("the two labelings must give one label to each of the same items (at least one)")
    _, u = np.unique(a, return_inverse=True)
    _, v = np.unique(b, return_inverse=True)
    joint = np.zeros((u.max() + 1, v.max() + 1))
    np.add.at(joint, (u, v), 1.0)
    joint /= len(a)
    pu, pv = joint.sum(axis=1), joint.sum(axis=0)
    h_u, h_v = -_plogp_sum(pu), -_plogp_sum(pv)
    if h_u == 0 and h_v == 0:
        return 1.0
    nonzero = joint > 0
    mutual = float(np.sum(joint[nonzero] * np.log2(joint[nonzero] / np.outer(pu, pv)[nonzero])))
    return float(np.clip(2.0 * mutual / (h_u + h_v), 0.0, 1.0))


# ================================================================================ result writers
TABLE_COLUMNS = ("id", "level", "parent", "name", "size", "flow", "enter_flow", "exit_flow", "chars", "words", "novel")


def module_table(communities: Communities, words: int = 5) -> list[dict[str, Any]]:
    """One row per module (tree order): the CSV columns of :data:`TABLE_COLUMNS` as plain values."""
    rows = []
    for module in communities.modules.values():
        rows.append(
            {
                "id": module.id,
                "level": module.level,
                "parent": module.parent,
                "name": module.name,
                "size": module.size,
                "flow": float(module.flow),
                "enter_flow": float(module.enter_flow),
                "exit_flow": float(module.exit_flow),
                "chars": module.chars,
                "words": " ".join(w.text for w in module.words[:words]),
                "novel": " ".join(w.text for w in module.words if w.seen is False),
            }
        )
    return rows


def module_table_csv(communities: Communities) -> str:
    """The module table as CSV text (header line first)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(TABLE_COLUMNS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(module_table(communities))
    return buffer.getvalue()


def restore_communities(graph: CloneGraph, saved: dict[str, Any], origin: str = "") -> Communities:
    """The community result that ``saved`` describes, without running Infomap again, so that an export carries the
    very modules a user was shown. ``saved`` is a run as the app keeps it: ``summary`` (:meth:`Communities.summary`),
    ``options``, ``modules`` (:meth:`Module.summary` with their ``nodes``), ``node_flow`` (clone -> Infomap's leaf
    flow) and, where kept, ``node_path`` (clone -> "1:2:3"; else each leaf module's clones are numbered in the order
    of their indices). ``graph`` is the clone graph at the run's threshold. ValueError when ``saved`` does not hold
    a result on this graph (a clone outside it, a module without its parent)."""
    modules: dict[str, Module] = {}
    for item in saved["modules"]:
        path = tuple(int(p) for p in str(item["id"]).split(":"))
        nodes = np.asarray(sorted(int(n) for n in item["nodes"]), dtype=np.int64)
        if nodes.size and not 0 <= nodes[0] <= nodes[-1] < graph.n_states:
            raise CHMMError(f"module {item['id']} holds clones outside the clone graph of {graph.n_states} states")
        words = [GeneralizedWord(**word) for word in item.get("words") or []]
        modules[":".join(map(str, path))] = Module(
            path, nodes, float(item["flow"]), float(item.get("enter_flow", 0.0)), float(item.get("exit_flow", 0.0)),
            str(item.get("chars", "")), [str(c) for c in item.get("children") or []], words, str(item.get("name", "")),
        )  # fmt: skip
    for module in modules.values():
        if module.level > 1 and module.parent not in modules:
            raise CHMMError(f"module {module.id} has no parent {module.parent} in the saved result")
    saved_paths = saved.get("node_path")
    if saved_paths:
        node_path = {int(node): tuple(int(p) for p in str(path).split(":")) for node, path in saved_paths.items()}
    else:
        node_path = {
            int(node): (*module.path, rank)
            for module in modules.values()
            if not module.children
            for rank, node in enumerate(module.nodes.tolist(), start=1)
        }
    summary = saved.get("summary") or {}
    node_flow = {int(node): float(flow) for node, flow in (saved.get("node_flow") or {}).items()}
    return Communities(
        graph,
        np.asarray(sorted(node_path), dtype=np.int64),
        node_path,
        modules,
        float(summary.get("codelength", float("nan"))),
        float(summary.get("one_level_codelength", float("nan"))),
        CommunityOptions(**saved["options"]),
        float(summary.get("seconds", 0.0)),
        node_flow={node: node_flow.get(node, float(graph.flow[node])) for node in node_path},
        origin=origin,
    )


def _plogp_sum(values: Iterable[float]) -> float:
    """sum of x log2 x over the positive values (0 log 0 = 0)."""
    x = np.asarray(list(values), dtype=np.float64)
    x = x[x > 0]
    return float(np.sum(x * np.log2(x)))


def node_flows(communities: Communities) -> np.ndarray:
    """Each clone's flow as Infomap saw it (the out-flow of the link flows it was given, normalised), by clone."""
    graph = communities.graph
    sources, _ = graph.edges()
    return np.bincount(sources, weights=_link_flow(graph, communities.options.flow), minlength=graph.n_states)


def codelength_terms(communities: Communities) -> dict[str, Any] | None:
    """The map equation's code length split over the module tree (the hierarchical map equation of Rosvall and
    Bergstrom, with the Markov time t scaling the flow into and out of modules):

        L = q H(Q) + sum over top modules M of L(M),
        L(M) = p_M H(P_M) + sum over M's children C of L(C)   (a leaf: its exit and its clones' visits),

    where q H(Q) is the index codebook (t times the top modules' enter flows), P_M the use of M's codebook: t times
    its exit flow and, for a module with submodules, t times their enter flows, for a leaf its clones' flows, and
    p_M their sum. Returns the index codebook's bits (``index``), each module's own codebook bits (``modules``, by
    id), their sums per level (``levels``: level 0 is the index) and the ``total``, which is Infomap's code length
    (to 1e-6 on the project's models). None for the ``directed`` flow, whose node flows Infomap computes itself."""
    options = communities.options
    if options.flow == "directed":
        return None
    t = float(options.markov_time)
    node_flow = node_flows(communities)
    own: dict[str, float] = {}
    for module in communities.modules.values():
        if module.children:
            uses = [t * module.exit_flow] + [t * communities.modules[c].enter_flow for c in module.children]
        else:
            uses = [t * module.exit_flow, *node_flow[module.nodes].tolist()]
        own[module.id] = _plogp_sum([sum(uses)]) - _plogp_sum(uses)
    enters = [t * m.enter_flow for m in communities.top_modules]
    index = _plogp_sum([sum(enters)]) - _plogp_sum(enters)
    levels: dict[int, float] = {0: index}
    for module in communities.modules.values():
        levels[module.level] = levels.get(module.level, 0.0) + own[module.id]
    return {"index": index, "modules": own, "levels": levels, "total": index + sum(own.values())}


def result_json(communities: Communities) -> dict[str, Any]:
    """The whole result as JSON-ready values: run figures and settings, every module with its words and
    members, and each partitioned clone's path."""
    import infomap

    graph = communities.graph
    return {
        "summary": communities.summary(),
        "options": asdict(communities.options),
        "infomap_version": infomap.__version__,
        "infomap_seed": communities.options.seed + 1,
        "model": graph.metadata,
        "modules": [m.summary() | {"nodes": m.nodes.tolist()} for m in communities.modules.values()],
        "nodes": [
            {
                "id": int(node),
                "label": graph.label(int(node)),
                "char": graph.char(int(node)),
                "clone": int(graph.clone_rank[node]),
                "flow": float(graph.flow[node]),
                "path": ":".join(map(str, communities.node_path[int(node)])),
            }
            for node in communities.nodes
        ],
    }


def write_result(
    communities: Communities, directory: str, partition_texts: dict[str, str], stem: str = "clones"
) -> list[str]:
    """Write the result directory: ``modules.csv``, ``modules.json``, and ``<stem>.<ext>`` for each
    ``partition_texts`` entry (the ``.tree``, ``.ftree`` and ``.clu`` as :mod:`engine.network.export` writes them,
    numbered as its Pajek ``.net``). All files are written to a temporary folder first and moved in at the end, so a
    failure leaves nothing partial. Returns the paths."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise CHMMError(f"{directory} exists and is not a folder")
    parent = os.path.dirname(os.path.abspath(directory))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".tmp-communities-", dir=parent)
    try:
        with open(os.path.join(staging, "modules.csv"), "w", encoding="utf-8", newline="") as handle:
            handle.write(module_table_csv(communities))
        with open(os.path.join(staging, "modules.json"), "w", encoding="utf-8") as handle:
            json.dump(result_json(communities), handle, ensure_ascii=False, indent=1)
        for extension, content in partition_texts.items():
            with open(os.path.join(staging, f"{stem}.{extension}"), "w", encoding="utf-8") as handle:
                handle.write(content)
        names = sorted(os.listdir(staging))
        umask = os.umask(0)
        os.umask(umask)
        for name in names:
            os.chmod(os.path.join(staging, name), 0o666 & ~umask)
        if not os.path.exists(directory):
            os.chmod(staging, 0o777 & ~umask)  # mkdtemp creates 0700; a result folder gets the usual permissions
            os.replace(staging, directory)
            staging = ""
        else:
            for name in names:
                os.replace(os.path.join(staging, name), os.path.join(directory, name))
        return [os.path.join(directory, name) for name in names]
    finally:
        if staging and os.path.exists(staging):
            shutil.rmtree(staging, ignore_errors=True)
