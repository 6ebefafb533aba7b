"""The Communities page's overviews of a run, made to read at scale (hundreds of modules, tens of thousands of
clones): the module map of one level (its modules of most flow up to a limit the user sets, each in a colour of its
own, labels that never overlap, a searched word's path brought into view) and the distributions of the modules' flow
and of the clones' degree. Built from the saved run (:func:`app.services.graphs.read_communities`) and kept per
version of its file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from app.services import UserError, kept, least_flow, optional_whole, whole_number
from app.services.community_layout import MAP_LABELS as MAP_LABELS
from app.services.community_layout import map_layout, path_view
from app.services.graphs import (
    COMMUNITIES,
    CURRENT_RUN,
    EXPORTS,
    MAP_MAX_MODULES,
    degree_counts,
    kept_of_run,
    module_colour,
    read_communities,
    read_run,
    session_graph,
)
from engine import api

MAP_LIMIT = 100
"""Modules the module map shows unless told otherwise (the most flow first; Network Navigator's node limit)."""


def map_limit(value: Any) -> int:
    """The number of modules the map shows, as typed (empty: :data:`MAP_LIMIT`): 1 to :data:`MAP_MAX_MODULES`."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return MAP_LIMIT
    return whole_number(value, "the number of modules shown", 1, MAP_MAX_MODULES)


def module_map(folder: Path, parent: Any = "", limit: Any = MAP_LIMIT, run: str = CURRENT_RUN) -> dict[str, Any]:
    """:func:`drawn_module_map`, drawn once per version of the session's run ``run``, level and limit, and kept
    (shared: never changed)."""
    parent, count = str(parent or ""), map_limit(limit)
    return kept_of_run(folder, run, ("map", parent, count), lambda: drawn_module_map(folder, parent, count, run), False)


def drawn_module_map(folder: Path, parent: Any = "", limit: Any = MAP_LIMIT, run: str = CURRENT_RUN) -> dict[str, Any]:
    """The module map of one level of a community run (``run``: the last or the one before): the ``limit``
    submodules of ``parent`` ("" for the top modules) with the most flow, as dash-cytoscape nodes sized by flow and
    coloured as in the table (:func:`engine.network.drawing.module_colour`: distinct colours), linked by the flow
    between them (the saved :func:`engine.network.communities.module_links`, the 4 x modules links of most flow),
    laid out on the server (:func:`app.services.community_layout.map_layout`). The :data:`MAP_LABELS` largest are
    labelled where their label overlaps no other label nor circle, the rest named when clicked; notes say what the
    map leaves out and when Infomap's result is flat. Returns the elements, the notes, the level's figures and the
    legend (the labelled modules)."""
    saved = read_run(folder, run)
    parent = str(parent or "")
    children = sorted((m for m in saved["modules"] if m.get("parent", "") == parent), key=lambda m: -m["flow"])
    shown = children[: map_limit(limit)]
    index = {m["id"]: i for i, m in enumerate(shown)}
    links = [(a, b, f) for a, b, f in saved.get("links", {}).get(parent, []) if a in index and b in index]
    links = links[: 4 * len(shown)]
    xy, sizes, font, places = map_layout(shown, [(index[a], index[b], f) for a, b, f in links])
    top_link = max((f for *_, f in links), default=1.0) or 1.0
    elements: list[dict[str, Any]] = []
    for rank, (module, (x, y)) in enumerate(zip(shown, xy.tolist(), strict=True)):
        place = places[rank] if rank < len(places) else ""
        elements.append(
            {
                "data": {
                    "id": module["id"],
                    "label": f"{module['id']} {module['name']}" if place else "",
                    "full_label": f"{module['id']} {module['name']}",
                    "name": module["name"],
                    "flow": float(module["flow"]),
                    "clones": int(module["size"]),
                    "submodules": len(module.get("children", [])),
                    "log_flow": round(float(np.log10(max(float(module["flow"]), 1e-300))), 4),  # mapped colours
                    "log_clones": round(float(np.log10(max(int(module["size"]), 1))), 4),
                    "size": round(float(sizes[rank]), 2),
                    "font": round(font, 2),
                    "colour": module_colour(module["id"]),
                },
                "position": {"x": round(x, 2), "y": round(y, 2)},
                "classes": f"label-{place}" if place else "",
            }
        )
    for a, b, flow in links:
        width = round(0.5 + 7.5 * flow / top_link, 2)
        elements.append({"data": {"id": f"{a}->{b}", "source": a, "target": b, "flow": float(flow), "width": width}})
    legend = [
        {"id": m["id"], "name": m["name"], "colour": module_colour(m["id"]), "flow": float(m["flow"])}
        for m, place in zip(shown, places, strict=False)
        if place
    ]
    return {
        "elements": elements,
        "notes": _map_notes(saved, parent, shown, children),
        "modules": len(children),
        "shown": len(shown),
        "links": len(links),
        "legend": legend,
        "unlabelled": sum(1 for place in places if not place),
    }


def _map_notes(saved: dict[str, Any], parent: str, shown: list[Any], children: list[Any]) -> list[str]:
    """What the module map says beside the map: the modules it leaves out and their flow, or that Infomap's result
    is flat."""
    notes = []
    if len(shown) < len(children):
        total = max(sum(m["flow"] for m in children), 1e-300)
        covered = sum(m["flow"] for m in shown) / total
        notes.append(
            f"Showing the {len(shown):,} modules with the most flow of {len(children):,} ({covered:.1%} of the "
            f"flow); the other {len(children) - len(shown):,} hold {1 - covered:.1%}, each at most "
            f"{children[len(shown)]['flow'] / total:.2%} (raise “Modules shown” to draw them; all are in the table)."
        )
    levels = int(saved["summary"].get("levels", 2))
    if not parent and levels <= 2:
        if saved["options"].get("two_level"):
            notes.append("A two-level partition, as asked: modules of clones, no submodules.")
        else:
            notes.append(
                "Infomap's multilevel search found no submodules: the result is flat (one level of modules). A "
                "smaller Markov time (e.g. 0.5) looks for finer, nested modules."
            )
    return notes


def path_on_map(found: dict[str, Any] | None, level: str) -> list[str]:
    """The modules of the map's level (the submodules of ``level``) that a searched word's clone path
    (:func:`app.services.graphs.find_word`) passes through, in order, each once."""
    depth = len(level.split(":")) if level else 0
    on_map = []
    for step in (found or {}).get("steps", []):
        parts = (step["module"] or "").split(":")
        if step["module"] and ":".join(parts[:depth]) == level and len(parts) > depth:
            on_map.append(":".join(parts[: depth + 1]))
    return list(dict.fromkeys(on_map))


def path_in_view(drawn: dict[str, Any], modules: list[str]) -> dict[str, Any]:
    """Where the module map ``drawn`` (:func:`module_map`) must look to show the ``modules`` of a searched path:
    Cytoscape's zoom and pan centring those it draws (:func:`app.services.community_layout.path_view`), and those
    it does not draw (beyond the limit)."""
    nodes = [e for e in drawn["elements"] if "source" not in e["data"]]
    index = {e["data"]["id"]: i for i, e in enumerate(nodes)}
    xy = np.array([[e["position"]["x"], e["position"]["y"]] for e in nodes], dtype=np.float64).reshape(-1, 2)
    sizes = np.array([e["data"]["size"] for e in nodes], dtype=np.float64)
    on_map = [index[m] for m in modules if m in index]
    view = path_view(xy, sizes, on_map) if on_map else {"zoom": None, "pan": None}
    return view | {"shown": [m for m in modules if m in index], "missing": [m for m in modules if m not in index]}


def distributions(folder: Path) -> dict[str, Any]:
    """The run's flow and degree distributions (kept per version of the run): the top modules' flows, the most
    first (flow against rank), and how many clones of the pruned clone graph have each degree
    (:func:`degree_counts`, saved with the run by its job; made here from the graph for a run saved without)."""
    saved = read_communities(folder)
    if saved is None:
        raise UserError("Run Infomap first (the current model has no community result yet).")

    def measure() -> dict[str, Any]:
        flows = sorted((float(m["flow"]) for m in saved["modules"] if not m.get("parent")), reverse=True)
        if isinstance(saved.get("degrees"), dict):  # saved by the run's job, which had the graph
            return {"flows": flows} | {key: list(saved["degrees"][key]) for key in ("degrees", "clones")}
        return {"flows": flows} | degree_counts(session_graph(folder, saved["threshold"]))

    return kept.kept(("distributions",), [folder / COMMUNITIES], measure)


MAP_COLOUR_BY = {
    "module": "module (as the table)",
    "flow": "flow (log)",
    "clones": "clones (log)",
    "submodules": "submodules",
}
"""What the module map's colours map: the modules' own colours, or a measure on a sequential scale."""
MAP_SIZE_BY = {"flow": "flow", "clones": "clones"}
"""What the module map's circle areas map."""
LOW_COLOUR, HIGH_COLOUR = "#440154", "#fde725"
"""The ends of the module map's sequential scale (viridis's)."""
MAP_SIZES = (12.0, 90.0)
"""The smallest and largest circle of a module map sized by clones (CSS pixels)."""


def mapped_style(
    elements: list[dict[str, Any]], colour_by: Any, size_by: Any
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The module map's node style for a colour and size mapping (:data:`MAP_COLOUR_BY`, :data:`MAP_SIZE_BY`) over
    the map's ``elements``: Cytoscape ``mapData`` from the measure's least to its greatest on the map (a log scale for
    flow and clones), and the legend's ends; the modules' own colours and flow-sized circles need no rule."""
    colour = colour_by if colour_by in MAP_COLOUR_BY else "module"
    size = size_by if size_by in MAP_SIZE_BY else "flow"
    nodes = [e["data"] for e in elements if "source" not in e.get("data", {})]
    rules: list[dict[str, Any]] = []
    legend: dict[str, Any] = {"colour": None, "size": size}
    if colour != "module" and nodes:
        key = {"flow": "log_flow", "clones": "log_clones", "submodules": "submodules"}[colour]
        values = [float(n.get(key, 0.0)) for n in nodes]
        low, high = min(values), max(values)
        high = high if high > low else low + 1.0
        rules.append(
            {
                "selector": "node",
                "style": {"background-color": f"mapData({key}, {low}, {high}, {LOW_COLOUR}, {HIGH_COLOUR})"},
            }
        )
        shown = (lambda v: f"{10**v:.2g}") if key.startswith("log_") else (lambda v: f"{v:g}")
        legend["colour"] = {"by": colour, "low": shown(min(values)), "high": shown(max(values))}
    if size == "clones" and nodes:
        values = [float(n.get("log_clones", 0.0)) for n in nodes]
        low, high = min(values), max(values)
        high = high if high > low else low + 1.0
        small, large = MAP_SIZES
        rules.append({"selector": "node", "style": {
            "width": f"mapData(log_clones, {low}, {high}, {small}, {large})",
            "height": f"mapData(log_clones, {low}, {high}, {small}, {large})",
        }})  # fmt: skip
    return rules, legend


def neighbourhood(elements: list[dict[str, Any]], centre: str, steps: int) -> set[str]:
    """The ids of the nodes of Cytoscape ``elements`` within ``steps`` links of the node ``centre``, the links read in
    either direction (as Gephi's and Cytoscape's ego networks read them); the centre itself included."""
    links: dict[str, set[str]] = {}
    for element in elements:
        data = element.get("data", {})
        if "source" in data:
            a, b = str(data["source"]), str(data["target"])
            links.setdefault(a, set()).add(b)
            links.setdefault(b, set()).add(a)
    reached, frontier = {centre}, {centre}
    for _ in range(steps):
        frontier = {n for node in frontier for n in links.get(node, ())} - reached
        reached |= frontier
    return reached


def only_nodes(kept_ids: set[str]) -> list[dict[str, Any]]:
    """Stylesheet rules that hide every node but ``kept_ids`` (Cytoscape hides their links with them)."""
    shown = [{"selector": f'node[id = "{node.replace(chr(34), "")}"]', "style": {"display": "element"}} for node in
             sorted(kept_ids)]  # fmt: skip
    return [{"selector": "node", "style": {"display": "none"}}, *shown]


def map_filter(
    elements: list[dict[str, Any]], min_flow: Any, min_clones: Any, centre: Any, steps: Any
) -> tuple[list[dict[str, Any]], str]:
    """The module map's filter as stylesheet rules (:func:`only_nodes` of :func:`map_kept`), and the sentence that
    says what it shows; nothing set: no rules and no sentence."""
    kept, said = map_kept(elements, min_flow, min_clones, centre, steps)
    return (only_nodes(kept), said) if said else ([], "")


def map_kept(
    elements: list[dict[str, Any]], min_flow: Any, min_clones: Any, centre: Any, steps: Any
) -> tuple[set[str], str]:
    """The module map's modules its filter keeps, and the sentence that says what it shows: modules of flow below
    ``min_flow`` or with fewer clones than ``min_clones`` left out, and with a ``centre`` module only the modules
    within ``steps`` links of it (the ego network over the links the map draws, its links of most flow). Nothing
    set: every module and no sentence; a bad value is a :class:`UserError` of one sentence."""
    nodes = [e["data"] for e in elements if "source" not in e.get("data", {})]
    flow = least_flow(min_flow)
    clones = optional_whole(min_clones, "the least number of clones", 0, 10**9) or 0
    module = str(centre or "").strip()
    reach = optional_whole(steps, "the steps", 1, api.DEFAULTS.MAX_EGO_STEPS) or 1
    if not flow and not clones and not module:
        return {n["id"] for n in nodes}, ""
    if module and module not in {n["id"] for n in nodes}:
        raise UserError(f"Module {module[:40]} is not on the map: open its level, or raise “Modules shown”.")
    near = neighbourhood(elements, module, reach) if module else {n["id"] for n in nodes}
    kept = {n["id"] for n in nodes if n["id"] in near and n["flow"] >= flow and n["clones"] >= clones}
    said = [f"flow at least {flow:g}"] if flow else []
    said += [f"at least {clones:,} clones"] if clones else []
    said += [f"within {reach} link{'s' if reach != 1 else ''} of module {module} on the map"] if module else []
    return kept, f"Showing {len(kept):,} of {len(nodes):,} modules ({', '.join(said)})."


def export_map(
    folder: Path, parent: Any, limit: Any, run: str, fields: tuple[Any, Any, Any, Any]
) -> tuple[Path, str, str]:
    """What the module map shows, as GraphML in the session's ``exports`` folder: its modules that the filter
    ``fields`` keeps (:func:`map_filter`: least flow, least clones, a module and its neighbours) with their name,
    flow, clones, colour and place, the map's links among them with their flow, and the level and the filter in the
    file's graph attributes. Bounded by the map's limit of modules. Returns the file, its download name, a
    sentence."""
    import networkx as nx

    from engine.files import atomic_write

    drawn = module_map(folder, parent, limit, run)
    elements = drawn["elements"]
    kept, said = map_kept(elements, *fields)
    network = nx.DiGraph(level=str(parent or "") or "top", filter=said or "every module the map shows")
    for element in elements:
        data = element["data"]
        if "source" not in data and data["id"] in kept:
            network.add_node(
                data["id"], name=data["name"], flow=data["flow"], clones=data["clones"], colour=data["colour"],
                x=element["position"]["x"], y=element["position"]["y"],
            )  # fmt: skip
    for element in elements:
        data = element["data"]
        if "source" in data and data["source"] in kept and data["target"] in kept:
            network.add_edge(data["source"], data["target"], flow=data["flow"])
    out = folder / EXPORTS
    out.mkdir(exist_ok=True)
    path = out / "module-map.graphml"
    atomic_write(path, lambda tmp: nx.write_graphml(network, tmp))
    name = f"module-map-{str(parent or 'top').replace(':', '-')}-{network.number_of_nodes()}.graphml"
    sentence = (
        f"Exported the {network.number_of_nodes():,} modules shown and the {network.number_of_edges():,} links "
        f"among them as GraphML, saved as {name}."
    )
    return path, name, sentence

