"""The Communities and Export pages: Infomap on the clone graph, module tables, subgraphs, exports."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import networkx as nx

from app import config, sessions
from app.background import FAILED, FINISHED, RUNNING, JobFiles
from app.services import UserError, describe_error, format_bytes, parse_threshold, visible, whole_number
from app.services.corpus import joined_corpus_text
from app.services.models import load_current
from engine import communities as communities_mod
from engine import export as export_mod
from engine import layout, text, workflows
from engine.files import atomic_write_bytes
from engine.model import CHMM

EXPORT_FORMATS = export_mod.FORMATS


EXPORT_DESCRIPTIONS = {
    "graphml": "GraphML (Gephi, Cytoscape, yEd, igraph)",
    "gexf": "GEXF (Gephi)",
    "cyjs": "Cytoscape JSON (.cyjs)",
    "pajek": "Pajek .net (Infomap, Pajek)",
    "clu": "Infomap .clu (top modules)",
    "tree": "Infomap .tree",
    "ftree": "Infomap .ftree (Network Navigator)",
    "npz": "NumPy arrays (.npz)",
}


EXPORTS = "exports"  # folder in the session folder for the export files


COMMUNITIES = sessions.COMMUNITIES  # the last community run of the session (summary and modules)
COMMUNITIES_JOB = "communities-job.json"  # the record of the session's Infomap job


MAX_TRIALS = 100


MAX_GRAPH_ELEMENTS = 2_000


def _reference_corpus(folder: Path, model: CHMM) -> str | None:
    """The raw text the generalized words are checked against (seen/novel): the session's corpus, or the bundled
    sample corpus when the model was trained on it; None when neither applies."""
    session_text = joined_corpus_text(folder)
    if session_text is not None:
        return session_text
    if model.metadata.get("corpus") == config.SAMPLE_CORPUS.name and config.SAMPLE_CORPUS.is_file():
        return text.read_text(config.SAMPLE_CORPUS)
    return None


def _saved_community_options(folder: Path, threshold: float) -> communities_mod.CommunityOptions | None:
    """The Infomap settings of the session's last community run when it was made for the current model at this
    threshold (so an export's module ids match the Communities page), else None (the defaults)."""
    saved = read_communities(folder)
    if saved is None or abs(saved["threshold"] - threshold) > 1e-12 * threshold:
        return None
    return communities_mod.CommunityOptions(**saved["options"])


def export_graph(folder: Path, fmt: Any, threshold: Any = 1e-3, module: Any = None) -> tuple[Path, str, str]:
    """Export the current model's clone graph (pruned at ``threshold``), or one module's subgraph, in ``fmt``
    (:data:`EXPORT_FORMATS`) into the session's ``exports`` folder. Returns the file, the name the browser saves
    it under and a one-line description. Module ids are those of the Communities page's last run at the same
    threshold (Infomap's default settings when there is none)."""
    if fmt not in EXPORT_FORMATS:
        raise UserError(f"Choose an export format: one of {', '.join(EXPORT_FORMATS)}.")
    cut = parse_threshold(threshold)
    module_id = str(module).strip() if module is not None and str(module).strip() else None
    sessions.check_space(folder, 0, "Another export")
    model = load_current(folder)
    edges, limit = workflows.graph_edges(model, cut), config.max_export_edges()
    if edges > limit:
        raise UserError(
            f"At threshold {cut:.2g} the clone graph has {edges:,} edges, more than the {limit:,} the Export page "
            "writes (CHMM_MAX_EXPORT_EDGES); raise the threshold, or export it with `chmm export`."
        )
    out = folder / EXPORTS
    out.mkdir(exist_ok=True)
    written = out / f"export{export_mod.EXTENSIONS[fmt]}"
    try:
        figures = workflows.export_model_graph(
            model,
            written,
            fmt,
            module=module_id,
            threshold=cut,
            options=_saved_community_options(folder, cut),
            corpus_text=_reference_corpus(folder, model),
        )
    except communities_mod.ModuleNotFoundInResult as exc:
        raise UserError(f"{describe_error(exc)}.") from None
    what = "the whole clone graph" if module_id is None else f"module {module_id}"
    note = (
        f"Exported {what} as {EXPORT_DESCRIPTIONS[fmt]}: {figures['nodes']:,} clones, {figures['edges']:,} edges "
        f"(pruned at {cut:.2g}; {figures['modules']} top modules), {format_bytes(written.stat().st_size)}, saved as "
        f"{figures['file_name']}."
    )
    return written, figures["file_name"], note


# ------------------------------------------------------------------------------------------ communities
def _option_number(value: Any, what: str, low: int, high: int, default: int) -> int:
    return whole_number(default if value in (None, "") else value, what, low, high)


def run_communities(
    folder: Path, trials: Any = 10, two_level: Any = False, seed: Any = 0, threshold: Any = None
) -> dict[str, Any]:
    """Run Infomap on the current model's clone graph (pruned at ``threshold``, default 1e-3) and save the result
    (run figures, settings, every module of the tree with its parent, children, words and clones) as
    ``communities.json`` in the session folder. Returns what was saved. The run is a background job of the session
    (:func:`communities_files`: its record and heartbeat); a second one while it runs is refused."""
    options = communities_mod.CommunityOptions(
        two_level=bool(two_level),
        trials=_option_number(trials, "the number of trials", 1, MAX_TRIALS, 10),
        seed=_option_number(seed, "the seed", 0, 2**31 - 1, 0),
    )
    threshold = workflows.DEFAULT_PRUNE_THRESHOLD if threshold in (None, "") else parse_threshold(threshold)
    files = communities_files(folder)
    if files.running():
        raise UserError("Infomap is already running in this session; wait for it to finish.")
    record = {"status": RUNNING, "started": time.time(), "threshold": threshold, "options": asdict(options)}
    files.write(record)
    try:
        with files.alive():
            saved = _communities(folder, options, threshold)
    except BaseException as exc:
        files.write(record | {"status": FAILED, "message": describe_error(exc), "finished": time.time()})
        raise
    files.write(record | {"status": FINISHED, "finished": time.time()})
    return saved


def communities_files(folder: Path) -> JobFiles:
    """The Infomap job's record, heartbeat and cancel flag in a session folder."""
    return JobFiles(folder / COMMUNITIES_JOB, folder / "communities-heartbeat", folder / "communities-cancel")


def _communities(folder: Path, options: communities_mod.CommunityOptions, threshold: float) -> dict[str, Any]:
    model = load_current(folder)
    corpus_text = _reference_corpus(folder, model)
    result = workflows.model_communities(model, threshold, options, corpus_text)
    saved = {
        "model": sessions.model_stamp(folder),
        "threshold": threshold,
        "options": asdict(options),
        "reference": corpus_text is not None,
        "summary": result.summary(),
        "modules": [m.summary() | {"nodes": m.nodes.tolist()} for m in result.modules.values()],
    }
    atomic_write_bytes(folder / COMMUNITIES, json.dumps(saved, ensure_ascii=False).encode("utf-8"))
    return saved


def read_communities(folder: Path) -> dict[str, Any] | None:
    """The session's last community run, or None when there is none or it was made for another model."""
    try:
        saved = json.loads((folder / COMMUNITIES).read_text(encoding="utf-8"))
        if saved.get("model") != sessions.model_stamp(folder):
            return None
        return saved
    except (OSError, ValueError, TypeError):
        return None


def module_rows(saved: dict[str, Any], query: str | None = None, parent: str = "") -> list[dict[str, Any]]:
    """Table rows of the submodules of ``parent`` ("" for the top modules), most flow first, keeping those whose
    generalized words contain ``query`` (case-insensitive) or, for a single character, whose clones emit it."""
    wanted = (query or "").strip().lower()
    rows = []
    for module in sorted(saved["modules"], key=lambda m: -m["flow"]):
        if module.get("parent", "") != parent:
            continue
        words = [w["text"] for w in module["words"]]
        if wanted:
            in_chars = len(wanted) == 1 and (wanted in module["chars"].lower() or visible(wanted) in module["chars"])
            if not in_chars and not any(wanted in w.lower() for w in words):
                continue
        rows.append(
            {
                "id": module["id"],
                "name": module["name"],
                "size": module["size"],
                "flow": round(float(module["flow"]), 6),
                "chars": module["chars"],
                "words": " ".join(words[:5]),
                "submodules": len(module.get("children", [])),
            }
        )
    return rows


def module_trail(saved: dict[str, Any], module_id: str) -> list[tuple[str, str]]:
    """The breadcrumb of a module of a multilevel result: (id, label) from the top level ("", "All modules") down
    to ``module_id`` itself; an id that is not in the result gives just the top level."""
    by_id = {m["id"]: m for m in saved["modules"]}
    trail = [("", "All modules")]
    if module_id not in by_id:
        return trail
    parts = module_id.split(":")
    for depth in range(1, len(parts) + 1):
        key = ":".join(parts[:depth])
        trail.append((key, f"{key} {by_id[key]['name']}".strip()))
    return trail


def _colour(char: str) -> str:
    return layout.PALETTE[sum(ord(c) for c in char) % len(layout.PALETTE)]


KAMADA_KAWAI_NODES = 150
"""Subgraphs up to this many clones are laid out by Kamada-Kawai (slower, but weakly linked clones do not fly off)."""


def graph_positions(graph: nx.DiGraph, seed: int = 0) -> dict[Any, tuple[float, float]]:
    """2-D positions in [-1, 1] for drawing a module's subgraph, edge directions and weights ignored (a rare
    transition still places its clone next to its neighbour). Up to :data:`KAMADA_KAWAI_NODES` clones:
    Kamada-Kawai on hop distances, with clones in different connected pieces one hop further apart than the
    farthest connected pair (at the library's default of 10^6 they barely repel, and the pieces interleave);
    larger subgraphs: a spring layout (``seed``)."""
    if len(graph) == 0:
        return {}
    undirected = nx.Graph(graph)
    undirected.remove_edges_from(nx.selfloop_edges(undirected))
    if len(undirected) > KAMADA_KAWAI_NODES:
        positions = nx.spring_layout(undirected, seed=seed, weight=None)
    else:
        hops = dict(nx.shortest_path_length(undirected))
        far = max((d for row in hops.values() for d in row.values()), default=0) + 1
        distance = {u: {v: hops[u].get(v, far) for v in undirected} for u in undirected}
        positions = nx.kamada_kawai_layout(undirected, dist=distance, weight=None)
    return {node: (float(x), float(y)) for node, (x, y) in positions.items()}


def module_detail(folder: Path, module_id: Any, seed: int = 0) -> dict[str, Any]:
    """A top module of the last community run: its generalized words (with seen/novel when a reference text was
    available) and its subgraph as dash-cytoscape elements with preset positions (:func:`graph_positions`, ``seed``
    for large subgraphs), at most :data:`MAX_GRAPH_ELEMENTS` elements: the clones with the most flow and then the
    most probable edges are kept, with a note saying so."""
    saved = read_communities(folder)
    if saved is None:
        raise UserError("Run Infomap first (the current model has no community result yet).")
    key = str(module_id).strip() if module_id is not None else ""
    module = next((m for m in saved["modules"] if m["id"] == key), None)
    if module is None:
        top = sum(1 for m in saved["modules"] if not m.get("parent"))
        raise UserError(f"Module {key!r} does not exist: the result has top modules 1..{top} (submodules 1:1, ...).")
    graph = workflows.model_graph(load_current(folder), saved["threshold"])
    flows = {node: float(graph.flow[node]) for node in module["nodes"]}
    nodes = sorted(module["nodes"], key=lambda n: -flows[n])[:MAX_GRAPH_ELEMENTS]
    G = export_mod.to_networkx(graph, nodes=nodes, ids="state")
    edges = sorted(G.edges(data=True), key=lambda e: -e[2]["weight"])[: max(0, MAX_GRAPH_ELEMENTS - len(nodes))]
    kept = nx.DiGraph(**G.graph)
    kept.add_nodes_from(G.nodes(data=True))
    kept.add_edges_from(edges)
    total = module["size"] + G.number_of_edges()
    positions = graph_positions(kept, seed)
    elements = export_mod.cytoscape_elements(kept)
    for element in elements:
        data = element["data"]
        if "source" not in data:
            x, y = positions[data["id"]]
            element["position"] = {"x": round(float(x) * 300, 2), "y": round(float(y) * 300, 2)}
            data["char"] = visible(data["char"])
            data["colour"] = _colour(data["char"])
    note = None
    if len(elements) < total:
        note = (
            f"Showing {len(elements):,} of {total:,} elements (the {kept.number_of_nodes():,} clones with the most "
            f"flow and the {kept.number_of_edges():,} most probable edges among them)."
        )
    return {
        "id": module["id"],
        "name": module["name"],
        "size": module["size"],
        "flow": module["flow"],
        "chars": module["chars"],
        "words": module["words"],
        "reference": saved["reference"],
        "elements": elements,
        "note": note,
    }
