"""The Communities page's whole-graph view: every clone of the current model placed by its modules (the last Infomap
run's tree, :func:`engine.api.drawing.packed_layout`), coloured by top module, with the transitions of most flow."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import networkx
import numpy as np

from app import memory, sessions
from app.services import UserError, format_bytes, kept, least_flow, optional_whole, visible
from app.services import graphs as graph_service
from app.services.models import export_bytes
from engine import api
from engine.errors import CHMMError
from engine.files import atomic_write

EDGE_CHOICES = (0, 1_000, 2_000, 5_000, 20_000, 60_000)
"""How many transitions the view may draw (the most flow first)."""

DEFAULT_EDGES = 2_000
"""The transitions drawn at first: the canvas pans a cached bitmap, so transitions cost only its full redraws (about
1 ms a thousand without a GPU: bench/bench_whole_graph.py, bench/RESULTS.md)."""
WEIGHT_DECIMALS = 4
"""The decimals of a drawn transition's T sent to the canvas (it writes two, and draws its width by it)."""
ASPECT = 1.6
"""Width over height of the packed layout (the view is wider than tall)."""

LABELLED_MODULES = 12
"""The top modules with the most flow whose names are written on the view."""

MAX_CLONES = 100_000
"""The most clones the whole graph draws (what it sends grows with them: about 60 bytes a clone); a larger model is
refused at once, from its file's clone table, before the model is loaded."""

MAX_GROUPS = 2_000
"""The most colour groups the whole graph has: leaf modules (or symbols) past it, those of least flow, share one."""

LAYOUTS = {
    "packed": "by modules: a treemap of cells",
    "transitions": "by transitions: modules and clones pulled together by their flow",
}
"""How the whole graph places its clones: by the module tree alone (:func:`engine.api.drawing.packed_layout`: instant,
the transitions ignored), or by the transitions (:func:`engine.api.drawing.grouped_layout`: the top modules placed by
the flow between them, each one's clones by the flow within it; bench/bench_explorer.py measures both)."""
DEFAULT_LAYOUT = "packed"

MAX_FORCE_WORK = 200_000_000
"""The most work the layout by transitions takes: the sum over top modules of their clones squared (the pairs its
force layout weighs each of 120 iterations; 47 million took 12 s here, so this bound about 50 s, within a job's
:func:`app.config.max_request_seconds`). Past it the layout is refused at once, before any work. It runs in the
whole graph's job (never in a web worker) and is kept on disk per run (:data:`KEPT_LAYOUT`)."""
KEPT_LAYOUT = sessions.WHOLE_LAYOUT
"""The layout by transitions, kept in the session folder with the model and run it was made for (made once per run,
read by every later drawing, in any process; a cache, which does not make a session one with work)."""

OUTSIDE = "#bbbbbb"
"""The colour of clones in no module (no transition above the threshold: Infomap never saw them)."""


def _module_tree(saved: dict[str, Any], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
    """(parents, weights, members, modules) of a saved Infomap run for :func:`engine.api.drawing.packed_layout`: modules
    in the saved order, each clone's leaf module (-1: in none), weights the modules' clone counts."""
    modules = saved["modules"]
    index = {m["id"]: i for i, m in enumerate(modules)}
    parents = np.array([index.get(m.get("parent") or "", -1) for m in modules], dtype=np.int64)
    weights = np.array([max(1, int(m["size"])) for m in modules], dtype=np.float64)
    members = np.full(n, -1, dtype=np.int64)
    for i, module in enumerate(modules):
        if not module.get("children"):
            nodes = np.asarray(module["nodes"], dtype=np.int64)
            members[nodes[nodes < n]] = i
    return parents, weights, members, modules


def _by_symbol(graph: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
    """The same tree with one module per symbol (no Infomap run yet): clones grouped by the symbol they emit; past
    :data:`MAX_GROUPS` symbols, those of least flow share the last group ("other symbols")."""
    symbols = graph.symbols
    counts = np.bincount(graph.clone_symbol, minlength=len(symbols))
    flows = np.bincount(graph.clone_symbol, weights=graph.flow, minlength=len(symbols))
    kept_symbols = np.arange(len(symbols))
    if len(symbols) > MAX_GROUPS:
        kept_symbols = np.sort(np.argsort(-flows, kind="stable")[: MAX_GROUPS - 1])
    group_of = np.full(len(symbols), len(kept_symbols), dtype=np.int64)
    group_of[kept_symbols] = np.arange(len(kept_symbols))
    modules = [
        {"id": "", "name": visible(symbols[k]), "flow": float(flows[k]), "size": int(counts[k]), "symbol": int(k)}
        for k in kept_symbols
    ]
    if len(kept_symbols) < len(symbols):
        rest = group_of == len(kept_symbols)
        modules.append({
            "id": "", "name": f"{int(rest.sum()):,} other symbols", "flow": float(flows[rest].sum()),
            "size": int(counts[rest].sum()), "symbol": None,
        })  # fmt: skip
    weights = np.maximum([m["size"] for m in modules], 1).astype(np.float64)
    return np.full(len(modules), -1, dtype=np.int64), weights, group_of[graph.clone_symbol], modules


def _view_files(folder: Path, saved: dict[str, Any] | None) -> list[Path]:
    """The files a whole-graph value is kept by: the run (when there is one) and the current model."""
    return [*([folder / graph_service.COMMUNITIES] if saved else []), sessions.current_model_path(folder)]


def _run_graph(folder: Path, saved: dict[str, Any] | None) -> Any:
    """The clone graph the whole graph draws: at the run's threshold (``saved``), or the default without a run."""
    return graph_service.session_graph(folder, saved["threshold"] if saved else api.DEFAULTS.DEFAULT_PRUNE_THRESHOLD)


def whole_graph(folder: Path, max_edges: Any = DEFAULT_EDGES, layout: Any = DEFAULT_LAYOUT) -> dict[str, Any]:
    """Every clone of the session's current model with its position (in [0, 1.6] x [0, 1], y downwards), label and
    group, and the ``max_edges`` transitions of most flow as segment ends. Laid out by the last Infomap run's modules
    (a group per leaf module and one for the clones in no module), or, with none for this model, grouped by
    character (``by_module`` False); each group has its hover text, colour (of its top module, or character) and
    top module (the click's module; "" for none). Also the counts the page states and the labels of the
    :data:`LABELLED_MODULES` top modules with the most flow. ``layout``: a key of :data:`LAYOUTS`."""
    try:
        limit = max(0, min(int(max_edges), EDGE_CHOICES[-1]))
    except (TypeError, ValueError):
        limit = DEFAULT_EDGES
    layout = layout if layout in LAYOUTS else DEFAULT_LAYOUT
    clones = api.model_file_states(sessions.current_model_path(folder))  # from the file, before any load
    if clones is None:
        clones = graph_service.view_model(folder).n_states  # (says why the file cannot be read)
    if clones > MAX_CLONES:
        raise UserError(
            f"The whole graph draws at most {MAX_CLONES:,} clones and this model has {clones:,}; browse it by "
            "module in the table, or export it for Gephi or Cytoscape."
        )
    saved = graph_service.read_communities(folder)
    files = _view_files(folder, saved)
    return kept.kept(("whole graph", limit, layout), files, lambda: _whole_graph(folder, saved, limit, layout))


def _whole_graph(folder: Path, saved: dict[str, Any] | None, limit: int, layout_name: str) -> dict[str, Any]:
    """:func:`whole_graph` computed (``saved``: the run, None without one)."""
    graph = _run_graph(folder, saved)
    unit = graph_service.view_model(folder).codec.unit.removesuffix("s")  # "character", "word" or "token"
    n = graph.n_states
    parents, weights, members, modules = _module_tree(saved, n) if saved else _by_symbol(graph)
    layout = api.drawing.packed_layout(parents, weights, members, keys=graph.flow, aspect=ASPECT)
    if layout_name == "transitions":
        layout = _kept_layout(
            folder, saved, layout_name, layout, lambda: _by_transitions(graph, parents, members, layout)
        )
    if saved:
        leaves = [i for i in range(len(modules)) if not modules[i].get("children")]
        group_of = np.full(len(modules), len(leaves), dtype=np.int64)
        group_of[leaves] = np.arange(len(leaves))
        groups = []
        for i in leaves:
            top = modules[_top(parents, i)]
            groups.append({
                "text": f"module {modules[i]['id']} (top: {top['id']} {top['name']})",
                "colour": graph_service.module_colour(top["id"]),
                "module": top["id"],
            })  # fmt: skip
        groups.append({"text": "in no module (no transition above the threshold)", "colour": OUTSIDE, "module": ""})
        group = np.where(members >= 0, group_of[np.maximum(members, 0)], len(leaves))  # the last: in none
    else:
        groups = [
            {"text": f"{unit} {m['name']}", "colour": graph_service.symbol_colour(m["symbol"]), "module": ""}
            if m["symbol"] is not None
            else {"text": f"one of the {m['name']} (of least flow)", "colour": OUTSIDE, "module": ""}
            for m in modules
        ]
        group = members
    sources, targets = graph.edges()
    loops = sources == targets
    order = np.flatnonzero(~loops)[np.argsort(-graph.edge_flow[~loops], kind="stable")][:limit]
    ranked = sorted(
        (i for i in range(len(modules)) if parents[i] < 0), key=lambda i: -float(modules[i].get("flow", 0.0))
    )
    module_labels = [
        {
            "text": f"{modules[i]['id']} {modules[i]['name']}".strip(),
            "x": float(layout.cells[i, 0]),
            "y": float(layout.cells[i, 1]),
        }
        for i in ranked[:LABELLED_MODULES]
    ]
    return {
        "x": layout.positions[:, 0],
        "y": layout.positions[:, 1],
        "group": group,
        "groups": groups,
        "clone_labels": [graph.label(v) for v in range(n)],
        "edge_sources": sources[order],
        "edge_targets": targets[order],
        "edge_weights": graph.weight.data[order],
        "clones": n,
        "edges": int(np.sum(~loops)),
        "drawn_edges": len(order),
        "by_module": saved is not None,
        "top_modules": int(np.sum(parents < 0)),
        "outside": int(np.sum(members < 0)),
        "threshold": saved["threshold"] if saved else api.DEFAULTS.DEFAULT_PRUNE_THRESHOLD,
        "module_labels": module_labels,
        "layout": layout_name,
        "quality": api.drawing.layout_quality(
            layout.positions, sources[~loops], targets[~loops], graph.edge_flow[~loops], _top_groups(parents, members)
        ),
    }


def _top_groups(parents: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Each clone's top module (its index; the number of modules for a clone in none)."""
    top_of = np.array([_top(parents, i) for i in range(len(parents))], dtype=np.int64)
    return np.where(members >= 0, top_of[np.maximum(members, 0)], len(parents))


def _layout_stamp(folder: Path, saved: dict[str, Any] | None) -> str:
    """What a kept layout was made for: the model file and the run (when it finished)."""
    return f"{sessions.model_stamp(folder)}|{(saved or {}).get('finished')!r}"


def _kept_layout(folder: Path, saved: dict[str, Any] | None, name: str, packed: Any, make: Callable[[], Any]) -> Any:
    """The layout ``name`` as kept on disk for this model and run (:data:`KEPT_LAYOUT`), else made by ``make`` and
    kept (read with ``allow_pickle=False``; a file of another model or run, or unreadable, is made again)."""
    path = folder / KEPT_LAYOUT
    stamp = f"{name}|{_layout_stamp(folder, saved)}"
    try:
        with np.load(path, allow_pickle=False) as kept_file:
            if str(kept_file["stamp"]) == stamp and kept_file["positions"].shape == packed.positions.shape:
                return replace(packed, positions=kept_file["positions"], cells=kept_file["cells"])
    except (OSError, ValueError, KeyError):  # numpy's ValueError: a damaged kept layout, made again
        pass
    layout = make()

    def write(tmp: str) -> None:
        with open(tmp, "wb") as handle:
            np.savez(handle, positions=layout.positions, cells=layout.cells, stamp=np.array(stamp))

    with contextlib.suppress(OSError):  # a full disk costs the keeping, not the drawing
        atomic_write(path, write)
    return layout


def _by_transitions(graph: Any, parents: np.ndarray, members: np.ndarray, packed: Any) -> Any:
    """The layout by transitions (:data:`LAYOUTS`): each top module's clones placed by the flow of the transitions
    within it, the top modules by the flow between them (:func:`engine.api.drawing.grouped_layout`), scaled into the
    packed layout's frame; each top module's cell (where its label goes) becomes the box around its clones.
    UserError when its work passes :data:`MAX_FORCE_WORK`."""
    groups = _top_groups(parents, members)
    work = float(np.sum(np.bincount(groups).astype(np.float64) ** 2))
    if work > MAX_FORCE_WORK:
        raise UserError(
            f"The layout by transitions would weigh {work:,.0f} pairs of clones in a module, past this server's "
            f"bound of {MAX_FORCE_WORK:,}; use the layout by modules, or a run with smaller top modules."
        )
    sources, targets = graph.edges()
    keep = sources != targets
    xy = api.drawing.grouped_layout(groups, sources[keep], targets[keep], graph.edge_flow[keep], spread=True)
    span = np.ptp(xy, axis=0)
    scale = min(ASPECT / span[0] if span[0] > 0 else 1.0, 1.0 / span[1] if span[1] > 0 else 1.0)
    xy = (xy - xy.min(axis=0)) * scale
    xy += (np.array([ASPECT, 1.0]) - np.ptp(xy, axis=0)) / 2  # centred in the frame
    cells = np.array(packed.cells, copy=True)
    for module in range(len(parents)):
        inside = groups == module
        if inside.any():
            cells[module] = [*xy[inside].min(axis=0), *xy[inside].max(axis=0)]
    return replace(packed, positions=xy, cells=cells)


def _top(parents: np.ndarray, module: int) -> int:
    """The top module above ``module`` (itself when it is one)."""
    while parents[module] >= 0:
        module = int(parents[module])
    return module


def module_clones(folder: Path, module_id: Any) -> list[int]:
    """The clones of a module of the last Infomap run (the whole graph's points to mark), [] for none or no run."""
    saved = graph_service.read_communities(folder)
    key = str(module_id or "").strip()
    if saved is None or not key:
        return []
    module = next((m for m in saved["modules"] if m["id"] == key), None)
    return sorted(int(v) for v in module["nodes"]) if module else []


# ------------------------------------------------------------------------------------------ filters
def check_filter(
    min_degree: Any = None, max_degree: Any = None, min_flow: Any = None, core: Any = None,
    largest: Any = None, centre: Any = None, steps: Any = None,
) -> api.graph.CloneFilter:  # fmt: skip
    """The whole graph's filter from its fields (empty: no bound); UserError in one sentence for a value out of
    range. ``largest`` is truthy for "the largest component only"."""
    flow = least_flow(min_flow)
    low = optional_whole(min_degree, "the least degree", 0, 10**9) or 0
    high = optional_whole(max_degree, "the greatest degree", 0, 10**9)
    if high is not None and high < low:
        raise UserError(f"The greatest degree ({high:,}) is below the least ({low:,}).")
    return api.graph.CloneFilter(
        min_degree=low, max_degree=high, min_flow=flow, core=optional_whole(core, "the core", 0, 10**6) or 0,
        largest_component=bool(largest), centre=optional_whole(centre, "the clone", 0, MAX_CLONES),
        steps=optional_whole(steps, "the steps", 1, api.DEFAULTS.MAX_EGO_STEPS) or 1,
    )  # fmt: skip


def shown_clones(
    folder: Path, spec: api.graph.CloneFilter, max_edges: Any = DEFAULT_EDGES
) -> tuple[dict[str, Any] | None, str]:
    """What the whole graph shows under ``spec``: the clones it keeps (:func:`engine.api.graph.filter_clones` on the
    clone graph the view draws, at the last run's threshold) and the ``max_edges`` transitions among them with the most
    flow (self-loops left out, as the view draws none), kept per version of the model and run; and the sentence the view
    says of them. (None, "") when the filter keeps every clone."""
    if not spec.active:
        return None, ""
    try:
        limit = max(0, min(int(max_edges), EDGE_CHOICES[-1]))
    except (TypeError, ValueError):
        limit = DEFAULT_EDGES
    saved = graph_service.read_communities(folder)
    graph = _run_graph(folder, saved)
    try:
        spec.validate(graph.n_states)
    except CHMMError as exc:
        raise UserError(f"{str(exc)[:1].upper()}{str(exc)[1:]}.") from None
    files = _view_files(folder, saved)
    shown = kept.kept(("whole filter", spec, limit), files, lambda: _shown(graph, spec, limit))
    count, among = len(shown["clones"]), shown["among"]
    drawn = f"the {len(shown['source']):,} with the most flow" if len(shown["source"]) < among else "all"
    return shown, (
        f"Showing {count:,} of {graph.n_states:,} clones ({spec.describe()}) and {drawn} of the {among:,} "
        "transitions between them."
    )


def _shown(graph: Any, spec: api.graph.CloneFilter, limit: int) -> dict[str, Any]:
    """:func:`shown_clones` computed: the clones, the transitions among them (most flow first) and their count."""
    clones = api.graph.filter_clones(graph, spec)
    keep = np.zeros(graph.n_states, dtype=bool)
    keep[clones] = True
    sources, targets = graph.edges()
    among = np.flatnonzero(keep[sources] & keep[targets] & (sources != targets))
    order = among[np.argsort(-graph.edge_flow[among], kind="stable")][:limit]
    return {
        "clones": clones.tolist(), "source": sources[order].tolist(), "target": targets[order].tolist(),
        "weight": np.round(graph.weight.data[order], WEIGHT_DECIMALS).tolist(),
        "among": int(among.size), "filter": spec.describe(), "centre": spec.centre,
    }  # fmt: skip


def filter_query(spec: api.graph.CloneFilter) -> str:
    """The filter as the page's URL writes it ("" for none): its parts joined by ``;`` (``degree=4-9``,
    ``flow=0.0001``, ``core=3``, ``largest``, ``ego=12/2``); :func:`parse_filter_query` reads it back."""
    parts = []
    if spec.min_degree or spec.max_degree is not None:
        parts.append(f"degree={spec.min_degree}-{'' if spec.max_degree is None else spec.max_degree}")
    if spec.min_flow:
        parts.append(f"flow={spec.min_flow:g}")
    if spec.core:
        parts.append(f"core={spec.core}")
    if spec.largest_component:
        parts.append("largest")
    if spec.centre is not None:
        parts.append(f"ego={spec.centre}/{spec.steps}")
    return ";".join(parts)


def parse_filter_query(text: Any) -> api.graph.CloneFilter:
    """The filter a URL's ``filter`` value names (:func:`filter_query`); UserError in one sentence when it is not
    one."""
    fields: dict[str, Any] = {}
    for part in str(text or "").strip()[:300].split(";"):
        key, _, value = part.strip().partition("=")
        low, _, high = value.partition("-") if key == "degree" else value.partition("/")
        if not key:
            continue
        if key == "degree":
            fields.update(min_degree=low, max_degree=high)
        elif key in ("flow", "core"):
            fields["min_flow" if key == "flow" else "core"] = value
        elif key == "largest" and not value:
            fields["largest"] = True
        elif key == "ego":
            fields.update(centre=low, steps=high)
        else:
            raise UserError(f"The link's filter {str(text)[:60]!r} is not one this page knows; it is left out.")
    return check_filter(**fields)


def export_shown(folder: Path, query: Any) -> tuple[Path, str, str]:
    """The whole graph's clones that the filter ``query`` keeps (:func:`parse_filter_query`), with every transition
    among them, as GraphML in the session's ``exports`` folder: each clone with its module of the run on screen, the
    filter written in the file's ``filter`` attribute. Returns the file, the name it downloads as, and a sentence."""
    spec = parse_filter_query(query)
    if not spec.active:
        raise UserError("No filter is set: the whole graph is exported from the Export page.")
    return write_shown(folder, lambda: shown_clones(folder, spec)[0]["clones"], spec.describe(), "clones-shown")


def write_shown(
    folder: Path, shown: Callable[[], Any], described: str, stem: str, least_weight: float = 0.0
) -> tuple[Path, str, str]:
    """The clones ``shown()`` (global indices) of the clone graph the run on screen was made on, with every
    transition among them of T at least ``least_weight``, their modules, and ``described`` (the filter) in the
    file's ``filter`` attribute, as GraphML in the session's ``exports`` folder, charged to the memory budget.
    Returns the file, the name it downloads as (``stem``-N.graphml), and a sentence."""
    saved = graph_service.read_communities(folder)
    threshold = saved["threshold"] if saved else api.DEFAULTS.DEFAULT_PRUNE_THRESHOLD
    model = graph_service.view_model(folder)
    sessions.check_space(folder, 0, "Another export")
    need = export_bytes(model, threshold, "graphml", infomap=False)
    with memory.reserved(need, "Exporting the clones shown"):
        graph = _run_graph(folder, saved)
        nodes = np.asarray(shown(), dtype=np.int64)
        communities = graph_service.shown_run(folder, saved) if saved else None
        network = api.to_networkx(graph, communities, nodes=nodes)
        if least_weight > 0:
            network.remove_edges_from(
                [(a, b) for a, b, weight in network.edges(data="weight") if weight < least_weight]
            )
        network.graph["filter"] = described
        network.graph["title"] = f"{network.graph.get('title', 'clone graph')}, filtered: {described}"
        out = folder / graph_service.EXPORTS
        out.mkdir(exist_ok=True)
        written = out / f"{stem}.graphml"
        atomic_write(written, lambda tmp: networkx.write_graphml(network, tmp))
    name = f"{stem}-{len(nodes)}.graphml"
    note = (
        f"Exported the {network.number_of_nodes():,} clones shown ({described}) and the "
        f"{network.number_of_edges():,} transitions among them as GraphML, "
        f"{format_bytes(written.stat().st_size)}, saved as {name}."
    )
    return written, name, note


# ------------------------------------------------------------------------------------------ colour and size
COLOUR_BY = {"module": "top module", "symbol": "symbol", "degree": "degree", "flow": "flow"}
"""What the whole graph's colours map (the first: its modules' colours, as the table's)."""
SIZE_BY = {"none": "all alike", "flow": "flow", "degree": "degree"}
"""What the whole graph's clone sizes map."""
SEQUENTIAL = ("#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30", "#fde725")
"""The colours of a measure's bins, low to high (viridis: ordered, and readable by colour-blind eyes)."""
LEGEND_ENTRIES = 12
"""The most entries a categorical legend lists (the rest summed up in one line)."""


def _bins(values: np.ndarray, log: bool) -> tuple[np.ndarray, list[str]]:
    """Each value's bin among up to ``len(SEQUENTIAL)`` quantile bins (on log10 for ``log``) and each bin's range."""
    keyed = np.log10(np.maximum(values, 1e-300)) if log else values.astype(np.float64)
    cuts = np.unique(np.quantile(keyed, np.linspace(0, 1, len(SEQUENTIAL) + 1)[1:-1]))
    index = np.searchsorted(cuts, keyed, side="right")
    texts = []
    for b in range(len(cuts) + 1):
        members = values[index == b]
        if members.size == 0:
            texts.append("")
            continue
        low, high = members.min(), members.max()
        show = (lambda v: f"{v:.2g}") if log else (lambda v: f"{int(v):,}")
        texts.append(show(low) if low == high else f"{show(low)} to {show(high)}")
    return index, texts


def attribute_mapping(folder: Path, colour_by: Any, size_by: Any) -> dict[str, Any]:
    """The whole graph's colour and size by an attribute of its clones (:data:`COLOUR_BY`, :data:`SIZE_BY`) on the
    clone graph it draws: per clone a colour group (None: the modules' colours) and a size factor (None: alike),
    the groups' colours, and the legend (colour, text) a reader needs; kept per version of the model and run."""
    colour = colour_by if colour_by in COLOUR_BY else "module"
    size = size_by if size_by in SIZE_BY else "none"
    saved = graph_service.read_communities(folder)
    graph = _run_graph(folder, saved)
    files = _view_files(folder, saved)
    return kept.kept(("whole mapping", colour, size), files, lambda: _mapping(graph, colour, size))


def _mapping(graph: Any, colour: str, size: str) -> dict[str, Any]:
    """:func:`attribute_mapping` computed."""
    degree, flow = graph.degree(), np.asarray(graph.flow, dtype=np.float64)
    out: dict[str, Any] = {
        "colour_group": None, "colours": None, "sizes": None, "legend": [], "colour_by": colour, "size_by": size,
    }  # fmt: skip
    if colour == "symbol":
        symbol_flow = np.bincount(graph.clone_symbol, weights=flow, minlength=len(graph.symbols))
        out["colour_group"] = graph.clone_symbol.tolist()
        out["colours"] = [graph_service.symbol_colour(k) for k in range(len(graph.symbols))]
        ranked = np.argsort(-symbol_flow, kind="stable")
        out["legend"] = [(out["colours"][k], visible(graph.symbols[k])) for k in ranked[:LEGEND_ENTRIES]]
        if len(ranked) > LEGEND_ENTRIES:
            out["legend"].append(("", f"and {len(ranked) - LEGEND_ENTRIES:,} more symbols of less flow"))
    elif colour in ("degree", "flow"):
        index, texts = _bins(flow if colour == "flow" else degree, log=colour == "flow")
        out["colour_group"] = index.tolist()
        out["colours"] = list(SEQUENTIAL[: len(texts)])
        out["legend"] = [(SEQUENTIAL[b], text) for b, text in enumerate(texts) if text]
    if size != "none":
        values = np.sqrt(flow / max(flow.max(), 1e-300)) if size == "flow" else degree / max(degree.max(), 1)
        out["sizes"] = np.round(0.5 + 1.7 * values, 3).tolist()  # 0.5 to 2.2 times the clones' common size
    return out
