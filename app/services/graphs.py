"""The Communities and Export pages: Infomap on the clone graph, module tables, subgraphs, exports."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from app import config, memory, sessions
from app.jobs import FAILED, FINISHED, RUNNING, JobFiles
from app.jobs.kinds import JobKind
from app.services import UserError, describe_error, format_bytes, kept, parse_threshold, visible, whole_number
from app.services.community_layout import MAP_CANVAS as MAP_CANVAS
from app.services.community_layout import MAP_FONT_PX as MAP_FONT_PX
from app.services.community_layout import PLACES as PLACES
from app.services.community_layout import alluvial as alluvial
from app.services.community_layout import fit_zoom as fit_zoom
from app.services.community_layout import label_box as label_box
from app.services.community_layout import module_tree as module_tree
from app.services.community_layout import place_labels as place_labels
from app.services.community_layout import spread_for_labels as spread_for_labels
from app.services.community_layout import unique_names
from app.services.corpus import reference_corpus
from app.services.drawing_colours import KAMADA_KAWAI_NODES as KAMADA_KAWAI_NODES
from app.services.drawing_colours import graph_positions as graph_positions
from app.services.drawing_colours import module_colour as module_colour
from app.services.drawing_colours import symbol_colour as symbol_colour
from app.services.models import (
    DETAIL_BYTES,
    DETAIL_EDGE_BYTES,
    INCOMING_EDGE_BYTES,
    export_bytes,
    graph_bytes,
    infomap_bytes,
    view_model,
)
from app.services.models import load_current as load_current  # the tests and the pages read it from here
from engine import api
from engine.errors import CHMMError
from engine.files import atomic_write_bytes

EXPORT_FORMATS = api.CHOICES.EXPORT_FORMATS


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


MAX_SAVED_LINKS = 20_000
"""Links between sibling modules kept per level in the saved result (most flow first), for the module map."""


MAP_MAX_MODULES = 3_000
"""The module map draws at most this many modules of a level (most flow first) and four links per module."""


def shown_run(folder: Path, saved: dict[str, Any]) -> Any:
    """The Infomap run the Communities page shows (``saved``: the session's last, of the current model) as an engine
    result on its clone graph (:func:`engine.api.graph.restore_communities`, kept per version of the run's file), its
    ``origin`` saying which run it is."""
    finished = saved.get("finished") or (folder / COMMUNITIES).stat().st_mtime
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(finished)))
    origin = (
        f"the Infomap run shown on the Communities page ({when}, threshold {saved['threshold']:g}, "
        f"{saved['summary'].get('modules', 0)} top modules)"
    )
    graph = session_graph(folder, saved["threshold"])
    path = folder / COMMUNITIES
    return kept.kept(("restored",), [path], lambda: api.graph.restore_communities(graph, saved, origin))


def export_stage(
    stage: str, fmt: str, threshold: float, edges: int, options: api.CommunityOptions | None = None
) -> str:
    """What an export does now, in a sentence for its page: one of :data:`engine.api.use.EXPORT_STAGES` (the clone graph
    of ``edges`` edges at ``threshold`` built, Infomap run on it with ``options``' trials, the ``fmt`` file written)."""
    trials = (options or api.CommunityOptions()).trials
    said = {
        "graph": f"Building the clone graph at threshold {threshold:.2g} ({edges:,} edges).",
        "infomap": f"Running Infomap on the clone graph ({edges:,} edges, {trials} trial{'s' if trials != 1 else ''})"
        " for the export; this is the long part.",
        "writing": f"Writing the {EXPORT_DESCRIPTIONS[fmt]} file.",
    }
    return said[stage]


def export_graph(
    folder: Path, fmt: Any, threshold: Any = None, module: Any = None, report: Callable[[str], None] | None = None
) -> tuple[Path, str, str]:
    """Export the current model's clone graph, or one module's subgraph, in ``fmt`` (:data:`EXPORT_FORMATS`) into
    the session's ``exports`` folder, with the modules shown on the Communities page: its last Infomap run, at the
    run's threshold (``threshold`` empty or equal to it). At another threshold, or with no run, Infomap runs for the
    export with the run's settings (its defaults with no run), and the file and the note say so. ``report`` is told
    each stage as it begins, in a sentence (:func:`export_stage`). Returns the file, the name the browser saves it
    under and a one-line description."""
    if fmt not in EXPORT_FORMATS:
        raise UserError(f"Choose an export format: one of {', '.join(EXPORT_FORMATS)}.")
    saved = read_communities(folder)
    if threshold is None or not str(threshold).strip():
        cut = saved["threshold"] if saved is not None else api.DEFAULTS.DEFAULT_PRUNE_THRESHOLD
    else:
        cut = parse_threshold(threshold)
    same = saved is not None and abs(saved["threshold"] - cut) <= 1e-12 * cut
    shown = shown_run(folder, saved) if same else None  # restored only to be exported
    module_id = str(module).strip() if module is not None and str(module).strip() else None
    sessions.check_space(folder, 0, "Another export")
    model = view_model(folder)
    edges, limit = api.graph.graph_edges(model, cut), config.max_export_edges()
    if edges > limit:
        raise UserError(
            f"At threshold {cut:.2g} the clone graph has {edges:,} edges, more than the {limit:,} the Export page "
            "writes (CHMM_MAX_EXPORT_EDGES); raise the threshold, or export it with `chmm export`."
        )
    out = folder / EXPORTS
    out.mkdir(exist_ok=True)
    written = out / f"export{api.CHOICES.EXTENSIONS[fmt]}"
    need = export_bytes(model, cut, fmt, infomap=shown is None)  # the run it makes, if any, and the writer
    options = None if saved is None else api.CommunityOptions(**saved["options"])
    tell = report or (lambda _sentence: None)

    def stage(name: str) -> None:
        tell(export_stage(name, fmt, cut, edges, options))

    try:
        with memory.reserved(need, "Exporting this clone graph"):
            figures = api.graph.export_model_graph(
                model,
                written,
                fmt,
                module=module_id,
                threshold=cut,
                options=options,
                corpus_text=None if same else reference_corpus(folder, model),
                communities=shown,
                progress=stage,
            )
    except api.graph.ModuleNotFoundInResult as exc:
        raise UserError(f"{describe_error(exc)}.") from None
    what = "the whole clone graph" if module_id is None else f"module {module_id}"
    if shown is not None:
        modules = "the modules on the Communities page"
    elif saved is None:
        modules = "modules of an Infomap run made for this export (no run on the Communities page yet)"
    else:
        modules = (
            f"modules of an Infomap run made for this export (the Communities page's run is at threshold "
            f"{saved['threshold']:g})"
        )
    note = (
        f"Exported {what} as {EXPORT_DESCRIPTIONS[fmt]}: {figures['nodes']:,} clones, {figures['edges']:,} edges "
        f"(pruned at {cut:.2g}; {figures['modules']} top modules, {modules}), "
        f"{format_bytes(written.stat().st_size)}, saved as {figures['file_name']}."
    )
    return written, figures["file_name"], note


# ------------------------------------------------------------------------------------------ communities
def _option_number(value: Any, what: str, low: int, high: int, default: int) -> int:
    return whole_number(default if value in (None, "") else value, what, low, high)


def parse_markov_time(value: Any) -> float:
    """A Markov time typed by the user: a positive number up to :data:`MAX_MARKOV_TIME` (empty: 1)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return 1.0
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"The Markov time must be a number such as 0.5 or 2, not {str(value)[:40]!r}.") from None
    if not (0 < number <= MAX_MARKOV_TIME):
        raise UserError(f"The Markov time must be above 0 and at most {MAX_MARKOV_TIME:g}, not {number:g}.")
    return number


MAX_MARKOV_TIME = 100.0


def run_communities(
    folder: Path, trials: Any = 10, two_level: Any = False, seed: Any = 0, threshold: Any = None, markov_time: Any = 1
) -> dict[str, Any]:
    """Run Infomap on the current model's clone graph (pruned at ``threshold``, default 1e-3) and save the result
    (run figures, settings, every module of the tree with its parent, children, words and clones) as
    ``communities.json`` in the session folder. Returns what was saved. The run is a background job of the session
    (:func:`communities_files`: its record and heartbeat); a second one while it runs is refused."""
    sessions.check_disk("The Infomap run")  # on a full disk it never answered
    options = api.CommunityOptions(
        two_level=bool(two_level),
        trials=_option_number(trials, "the number of trials", 1, MAX_TRIALS, 10),
        seed=_option_number(seed, "the seed", 0, 2**31 - 1, 0),
        markov_time=parse_markov_time(markov_time),
    )
    threshold = api.DEFAULTS.DEFAULT_PRUNE_THRESHOLD if threshold in (None, "") else parse_threshold(threshold)
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


INFOMAP = JobKind("infomap", "Infomap run", (COMMUNITIES_JOB, "communities-heartbeat", "communities-cancel"))
"""The Infomap run's lifecycle (:class:`app.jobs.kinds.JobKind`): a background job of the session that runs at once
(it takes no place in the server's queue), refused while one runs."""


def communities_files(folder: Path) -> JobFiles:
    """The Infomap job's record, heartbeat and cancel flag in a session folder."""
    return INFOMAP.files(folder)


def _communities(folder: Path, options: api.CommunityOptions, threshold: float) -> dict[str, Any]:
    model = view_model(folder)  # in the job's process: the web worker's copy when it keeps one, else loaded here
    corpus_text = reference_corpus(folder, model)
    with memory.reserved(infomap_bytes(model, threshold), "Running Infomap on this model"):
        result = api.model_communities(model, threshold, options, corpus_text)
        terms = api.graph.codelength_terms(result)
        flows = api.graph.node_flows(result)
        saved = {
            "model": sessions.model_stamp(folder),
            "clones": clone_signature(model),
            "threshold": threshold,
            "options": asdict(options),
            "reference": corpus_text is not None,
            "summary": result.summary(),
            "modules": [m.summary() | {"nodes": m.nodes.tolist()} for m in result.modules.values()],
            "links": {
                parent: [[a, b, round(flow, 12)] for a, b, flow in links]
                for parent, links in api.graph.module_links(result, MAX_SAVED_LINKS).items()
            },
            "codelength": None
            if terms is None
            else terms | {"levels": {str(k): v for k, v in terms["levels"].items()}},
            "node_flow": {str(int(node)): round(float(flows[node]), 12) for node in result.nodes},
            "node_path": {str(int(node)): ":".join(map(str, path)) for node, path in result.node_path.items()},
            "degrees": degree_counts(result.graph),  # the page's distribution, without the graph built again
            "finished": time.time(),
        }
        saved = unique_names(saved)  # the names the pages show, in the file too
        if _comparable(_read_json(folder / COMMUNITIES), saved):  # the run before, kept to compare with
            os.replace(folder / COMMUNITIES, folder / PREVIOUS_COMMUNITIES)
        atomic_write_bytes(folder / COMMUNITIES, json.dumps(saved, ensure_ascii=False).encode("utf-8"))
        del result  # the run and its graph go before the reservation does
    return saved


def degree_counts(graph: Any) -> dict[str, list[int]]:
    """How many clones of ``graph`` have each degree (edges in plus out; clones without edges left out): the
    degrees that occur, ascending, and their counts."""
    degree = graph.degree()
    counts = np.bincount(degree[degree > 0])
    seen = np.flatnonzero(counts)
    return {"degrees": seen.tolist(), "clones": counts[seen].tolist()}


def clone_signature(model: Any) -> str:
    """What two models must share for their community runs to be compared clone by clone: their symbols and the
    clones of each (a pruned or retrained model of the same allocation has the same; a new training of other
    states does not)."""
    clones = np.asarray(model.layout.n_clones, dtype=np.int64)
    return hashlib.sha256(json.dumps(list(model.symbols)).encode("utf-8") + clones.tobytes()).hexdigest()[:24]


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return None
    return saved if isinstance(saved, dict) else None


def _comparable(before: dict[str, Any] | None, after: dict[str, Any] | None) -> bool:
    """Whether two community runs can be compared clone by clone: of the same model, or of two models with the
    same clones (:func:`clone_signature`; e.g. a model and its pruned copy)."""
    if before is None or after is None:
        return False
    if before.get("model") == after.get("model"):
        return True
    return before.get("clones") is not None and before.get("clones") == after.get("clones")


def read_previous_communities(folder: Path) -> dict[str, Any] | None:
    """The community run before the last one, of the same model or of a model with the same clones (then marked
    ``other_model``), or None."""
    path = folder / PREVIOUS_COMMUNITIES
    try:
        previous = kept.kept(("run",), [path], lambda: _read_json(path))  # parsed once per version, kept
    except OSError:
        previous = None
    last = read_communities(folder)
    if previous is None or last is None or not _comparable(previous, last):
        return None
    return unique_names(previous) | {"other_model": previous.get("model") != last.get("model")}


PREVIOUS_COMMUNITIES = "communities-previous.json"


def read_communities(folder: Path) -> dict[str, Any] | None:
    """The session's last community run, or None when there is none or it was made for another model (parsed
    once per version of its file and kept: shared, never changed by its callers), its modules' names as the pages
    show them (:func:`app.services.community_layout.unique_names`: distinct among siblings, whitespace visible)."""
    path = folder / COMMUNITIES
    try:
        saved = kept.kept(("run",), [path], lambda: unique_names(json.loads(path.read_text(encoding="utf-8"))))
        if not isinstance(saved, dict) or saved.get("model") != sessions.model_stamp(folder):
            return None
        return saved
    except (OSError, ValueError, TypeError):  # json's ValueError: a damaged run
        return None


def session_graph(folder: Path, threshold: float) -> Any:
    """The current model's clone graph pruned at ``threshold`` (:func:`engine.api.model_graph`), built once per
    version of the model file and kept."""
    path = sessions.current_model_path(folder)
    return kept.kept(
        ("graph", float(threshold)),
        [path],
        lambda: _indexed(api.model_graph(view_model(folder), threshold)),
        charge=lambda: graph_bytes(view_model(folder), threshold),  # +850 MB a module click before (issue 51)
        label="Building this model's clone graph",
    )


def _indexed(graph: Any) -> Any:
    """``graph`` with its index of edges by target built (:meth:`CloneGraph.incoming_index`), so that
    the size kept for it counts the index a module's degree builds later (12 MB of 776,648 edges, uncounted before)."""
    graph.incoming_index()
    return graph


def run_file(folder: Path, run: str = "current") -> Path:
    """The file of the session's community run ``run`` (:data:`CURRENT_RUN` or :data:`PREVIOUS_RUN`)."""
    return folder / (PREVIOUS_COMMUNITIES if run == PREVIOUS_RUN else COMMUNITIES)


def kept_of_run(
    folder: Path, run: str, what: tuple[Any, ...], compute: Callable[[], Any], model: bool = True,
    charge: Callable[[], int] | None = None, label: str = "This view",
) -> Any:  # fmt: skip
    """``compute()`` of the session's community run ``run`` (a UserError saying why when there is none), kept per
    version of the run's file and, with ``model``, of the current model's (:mod:`app.services.kept`; ``charge``
    and ``label`` as there)."""
    read_run(folder, run)
    files = [run_file(folder, run), *([sessions.current_model_path(folder)] if model else [])]
    return kept.kept(what, files, compute, charge, label)


def deepest_modules(folder: Path, saved: dict[str, Any], run: str = "current") -> dict[int, str]:
    """Clone -> the id of the deepest module of the session's community run ``saved`` (``run``) that holds it
    (kept per version of the run's file)."""
    return kept.kept(("deepest",), [run_file(folder, run)], lambda: _deepest_modules(saved))


CURRENT_RUN, PREVIOUS_RUN = "current", "previous"
"""The community runs a page can show: the session's last one and the one before it
(:func:`read_previous_communities`)."""


def read_run(folder: Path, run: str = CURRENT_RUN, missing: str | None = None) -> dict[str, Any]:
    """The community run ``run`` (:data:`CURRENT_RUN` or :data:`PREVIOUS_RUN`) of the session; a UserError
    (``missing`` or a sentence of its own) when there is none."""
    if run == PREVIOUS_RUN:
        saved = read_previous_communities(folder)
        if saved is None:
            raise UserError("There is no earlier Infomap run on this model's clones to show.")
        return saved
    saved = read_communities(folder)
    if saved is None:
        raise UserError(missing or "Run Infomap first (the current model has no community result yet).")
    return saved


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


NEIGHBOURS = 5
"""Transitions in and out listed for a clone when it is inspected."""

def _deepest_modules(saved: dict[str, Any]) -> dict[int, str]:
    """Clone -> the id of the deepest module of the saved result that holds it."""
    deepest: dict[int, str] = {}
    for module in sorted(saved["modules"], key=lambda m: m["level"]):
        for node in module["nodes"]:
            deepest[int(node)] = module["id"]
    return deepest


def _neighbours(graph: Any, clones: np.ndarray, probabilities: np.ndarray, deepest: dict[int, str]) -> list[Any]:
    """The :data:`NEIGHBOURS` most probable of these transitions as [label, probability, module id] rows."""
    order = np.argsort(-probabilities, kind="stable")[:NEIGHBOURS]
    return [
        [graph.label(int(clones[i])), round(float(probabilities[i]), 6), deepest.get(int(clones[i]), "")] for i in order
    ]


def _incoming_shares(graph: Any) -> Any:
    """The clone graph by columns, each entry the share of the target clone's incoming flow that comes from the
    source clone: flow(u -> v) / sum over u' of flow(u' -> v), with flow(u -> v) = node flow of u times T(u, v)
    (the "previous clones" of the inspector; T(u -> v) alone says where u goes, not where v's flow comes from)."""
    flows = sp.csr_matrix((graph.edge_flow, graph.weight.indices, graph.weight.indptr), shape=graph.weight.shape)
    incoming = flows.tocsc()
    totals = np.asarray(incoming.sum(axis=0)).ravel()
    counts = np.diff(incoming.indptr)
    incoming.data = incoming.data / np.repeat(np.where(totals > 0, totals, 1.0), counts)
    return incoming


def module_detail(folder: Path, module_id: Any, seed: int = 0, run: str = CURRENT_RUN) -> dict[str, Any]:
    """:func:`computed_module_detail`, computed once per version of the run's and the model's files and kept."""
    key = str(module_id).strip() if module_id is not None else ""

    def charge() -> int:  # read when the card is computed, not when it is kept
        return DETAIL_BYTES + DETAIL_EDGE_BYTES * session_graph(folder, read_run(folder, run)["threshold"]).n_edges

    compute = lambda: computed_module_detail(folder, key, seed, run)  # noqa: E731
    return kept_of_run(folder, run, ("detail", key, seed), compute, charge=charge, label="Opening this module")


def computed_module_detail(folder: Path, module_id: Any, seed: int = 0, run: str = CURRENT_RUN) -> dict[str, Any]:
    """A module of a community run (``run``: the last or the one before): its flow, the flow entering and leaving
    it (Infomap's, as saved), its degree in the clone graph (``links``: edges in, out and within,
    :meth:`CloneGraph.link_counts`), its generalized words (with seen/novel when a reference text was available) and
    its subgraph as dash-cytoscape elements (each clone with its deepest module, its degree and its
    :data:`NEIGHBOURS` most probable transitions in and out, for inspection) with preset positions
    (:func:`graph_positions`, ``seed`` for large subgraphs), at most :data:`MAX_GRAPH_ELEMENTS` elements: the clones
    with the most flow and then the most probable edges are kept, with a note saying so."""
    saved = read_run(folder, run)
    key = str(module_id).strip() if module_id is not None else ""
    module = next((m for m in saved["modules"] if m["id"] == key), None)
    if module is None:
        top = sum(1 for m in saved["modules"] if not m.get("parent"))
        raise UserError(f"Module {key!r} does not exist: the result has top modules 1..{top} (submodules 1:1, ...).")
    graph = session_graph(folder, saved["threshold"])
    flows = {node: float(graph.flow[node]) for node in module["nodes"]}
    nodes = sorted(module["nodes"], key=lambda n: -flows[n])[:MAX_GRAPH_ELEMENTS]
    drawn = api.to_networkx(graph, nodes=nodes, ids="state", most_edges=MAX_GRAPH_ELEMENTS - len(nodes))
    total = module["size"] + graph.link_counts(np.asarray(nodes, dtype=np.int64))["within"]
    positions = graph_positions(drawn, seed)
    elements = api.graph.cytoscape_elements(drawn)
    path = sessions.current_model_path(folder)
    incoming = kept.kept(
        ("incoming", saved["threshold"]), [path], lambda: _incoming_shares(graph),
        charge=INCOMING_EDGE_BYTES * graph.n_edges, label="Opening this module",
    )  # fmt: skip
    deepest = deepest_modules(folder, saved, run)
    degree = kept.kept(("degree", saved["threshold"]), [path], graph.degree)
    for element in elements:
        data = element["data"]
        if "source" in data:
            data["source_label"] = graph.label(int(data["source"]))
            data["target_label"] = graph.label(int(data["target"]))
        else:
            x, y = positions[data["id"]]
            element["position"] = {"x": round(float(x) * 300, 2), "y": round(float(y) * 300, 2)}
            data["char"] = visible(data["char"])
            data["long"] = len(data["char"]) > 2  # a word or a token: written under the clone, not inside it
            node = int(data["state"])
            data["colour"] = symbol_colour(int(graph.clone_symbol[node]))
            data["degree"] = int(degree[node])
            data["module"] = deepest.get(node, "")
            data["module_colour"] = module_colour(data["module"]) if data["module"] else "#cccccc"
            row = slice(graph.weight.indptr[node], graph.weight.indptr[node + 1])
            column = slice(incoming.indptr[node], incoming.indptr[node + 1])
            data["out"] = _neighbours(graph, graph.weight.indices[row], graph.weight.data[row], deepest)
            data["in"] = _neighbours(graph, incoming.indices[column], incoming.data[column], deepest)
    nodes_first = sorted(  # the circular layout places clones in this order: grouped by (sub)module, most flow first
        (e for e in elements if "source" not in e["data"]),
        key=lambda e: (e["data"]["module"], -float(e["data"].get("flow", 0.0))),
    )
    elements = nodes_first + [e for e in elements if "source" in e["data"]]
    note = None
    if len(elements) < total:
        note = (
            f"Showing {len(elements):,} of {total:,} elements (the {drawn.number_of_nodes():,} clones with the most "
            f"flow and the {drawn.number_of_edges():,} most probable edges among them)."
        )
    return {
        "id": module["id"],
        "name": module["name"],
        "size": module["size"],
        "flow": module["flow"],
        "enter_flow": module.get("enter_flow"),
        "exit_flow": module.get("exit_flow"),
        "links": graph.link_counts(np.asarray(module["nodes"], dtype=np.int64)),
        "chars": module["chars"],
        "unit": graph.metadata.get("unit", "characters"),
        "words": module["words"],
        "submodules": len(module.get("children", [])),
        "reference": saved["reference"],
        "elements": elements,
        "note": note,
    }


def find_clone(folder: Path, label: Any, run: str = CURRENT_RUN) -> dict[str, Any]:
    """The clone with this label (``h:3``: its symbol as shown, a colon, its rank among the symbol's clones; a bare
    symbol, ``h``: its clone of most flow) in the clone graph of a community run, and the deepest module that holds
    it ("" when pruning left it out of every module); a UserError that says what labels look like when there is
    none."""
    text_in = "" if label is None else str(label).strip()
    saved = read_run(folder, run)
    graph = session_graph(folder, saved["threshold"])
    labels = kept.kept(
        ("labels", saved["threshold"]),
        [sessions.current_model_path(folder)],
        lambda: {graph.label(node): node for node in range(graph.n_states)},
    )
    if text_in not in labels and f"{text_in}:0" in labels:  # a bare symbol: its clone of most flow
        symbol = int(graph.clone_symbol[labels[f"{text_in}:0"]])
        clones = np.flatnonzero(graph.clone_symbol == symbol)
        text_in = graph.label(int(clones[np.argmax(graph.flow[clones])]))
    if text_in not in labels:
        unit = str(graph.metadata.get("unit", "characters")).rstrip("s")
        example = "h:3" if unit == "character" else "the:3"
        said = f"a label is a {unit}, a colon and a number ({example})"
        raise UserError(f"No clone is labelled {text_in[:20]!r}: {said}.")
    node = labels[text_in]
    return {"label": text_in, "state": int(node), "module": deepest_modules(folder, saved, run).get(int(node), "")}


MAX_SEARCH_CHARS = 200


def find_word(folder: Path, phrase: Any, run: str = CURRENT_RUN) -> dict[str, Any]:
    """Where a word or phrase lives in the clone graph: its Viterbi clone path under the current model
    (:func:`engine.api.graph.clone_path`: normalised as the corpus was, with spaces around it), each position's
    clone and the deepest module of the last community run that holds it, and the top modules the path passes
    through in order. Returns the steps, the modules, the clones, the words the normalisation read as ``rare`` and
    the path's bits per symbol."""
    text_in = "" if phrase is None else str(phrase)
    if not text_in.strip():
        raise UserError("Type a word or a phrase to find, e.g. alice.")
    if len(text_in) > MAX_SEARCH_CHARS:
        raise UserError(f"Find takes at most {MAX_SEARCH_CHARS} characters; this is {len(text_in):,}.")
    saved = read_run(folder, run, "Run Infomap first: a word is found in the modules of the current community result.")
    model = view_model(folder)
    try:
        found = api.graph.clone_path(model, text_in)
    except CHMMError as exc:
        raise UserError(f"Cannot find {text_in.strip()[:40]!r}: {describe_error(exc)}.") from None
    deepest = deepest_modules(folder, saved, run)
    names = {m["id"]: m["name"] for m in saved["modules"]}
    layout_ = model.layout
    symbols = layout_.clone_symbol()
    steps = []
    for char, clone in zip(model.codec.split(found.text), found.clones.tolist(), strict=True):
        module = deepest.get(int(clone))
        top = module.split(":")[0] if module else None
        rank = int(clone - layout_.clone_start[symbols[clone]])
        steps.append(
            {
                "char": visible(char),
                "clone": int(clone),
                "label": f"{visible(char)}:{rank}",
                "module": module,
                "top": top,
                "name": names.get(top, "") if top else "",
            }
        )
    modules: list[dict[str, Any]] = []
    for step in steps:
        if step["top"] and (not modules or modules[-1]["id"] != step["top"]):
            modules.append({"id": step["top"], "name": step["name"]})
    return {
        "text": found.text,
        "steps": steps,
        "modules": modules,
        "clones": [s["clone"] for s in steps],
        "replaced": found.replaced,
        "bps": -found.log_probability / np.log(2) / len(found.clones),
        "outside": sum(1 for s in steps if s["module"] is None),
    }
