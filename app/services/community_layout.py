"""How a community run is drawn (the Communities page): the module tree as a treemap draws it, the alluvial of two
runs, and the module map's layout with its labels placed so that they stay readable at the fit zoom. Pure functions
of a saved run (:func:`app.services.graphs.read_communities`) and of positions; :mod:`app.services.graphs` reads and
builds what the page shows from them."""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from app.services import visible
from app.services.drawing_colours import module_colour
from engine import api

HIERARCHY_SECTORS = 150
"""The most modules the hierarchy draws (a treemap's sectors cost its render about 1.6 ms each: 811 took 1.3 s)."""


def module_tree(saved: dict[str, Any], sectors: int = HIERARCHY_SECTORS) -> dict[str, list[Any]]:
    """The module tree as a treemap draws it (Infomap Network Navigator's nested view): ids, labels, parents
    (the root ""), flows (each module's flow contains its submodules'), each module's own codebook bits and its
    colour (the table's and the map's). At most
    ``sectors`` modules, those of most flow whose parents are drawn (a module's submodules left out leave its area
    partly empty); the top modules left out are one sector, "N more top modules", of their flow."""
    terms = (saved.get("codelength") or {}).get("modules") or {}
    modules = saved["modules"]
    index = {m["id"]: i for i, m in enumerate(modules)}
    frontier = [(-float(m["flow"]), i) for i, m in enumerate(modules) if not m["parent"]]
    heapq.heapify(frontier)
    chosen: list[int] = []
    while frontier and len(chosen) < sectors:
        _, i = heapq.heappop(frontier)
        chosen.append(i)
        for child in modules[i].get("children") or []:
            if child in index:
                heapq.heappush(frontier, (-float(modules[index[child]]["flow"]), index[child]))
    chosen.sort()  # the saved order: parents before their children
    tree = {
        "ids": [modules[i]["id"] for i in chosen],
        "labels": [f"{modules[i]['id']} {modules[i]['name']}" for i in chosen],
        "parents": [modules[i]["parent"] for i in chosen],
        "flows": [modules[i]["flow"] for i in chosen],
        "bits": [terms.get(modules[i]["id"]) for i in chosen],
        "colours": [module_colour(modules[i]["id"]) for i in chosen],  # as the table and the map have them
    }
    left_out = [-flow for flow, i in frontier if not modules[i]["parent"]]
    if left_out:
        tree["ids"].append(OTHER_MODULES)
        tree["labels"].append(f"{len(left_out):,} more top modules of less flow")
        tree["parents"].append("")
        tree["flows"].append(float(sum(left_out)))
        tree["bits"].append(None)
        tree["colours"].append(OTHER_COLOUR)
    return tree


OTHER_MODULES = "more"
"""The id of the hierarchy's sector of the top modules it leaves out (no module's id: those are numbers)."""


ALLUVIAL_TOP = 12
"""Modules of each run the alluvial diagram draws (the most flow first); the others are one node, "other"."""

OTHER_COLOUR = "#b8c4d0"


def alluvial(before: dict[str, Any], after: dict[str, Any], top: int = ALLUVIAL_TOP) -> dict[str, Any]:
    """How the flow of the top modules of one run goes to those of another on the same clones (an alluvial,
    Sankey, diagram; the clones' flow is the last run's): each run's ``top`` modules of most flow and, when it has
    more, one node "other" for the rest; for every pair (node of ``before``, node of ``after``) the flow of the
    clones in both, pairs without flow left out, the links grouped by source and the most flow first. Sources and
    targets index ``labels`` (``before``'s nodes, then ``after``'s); nodes are coloured as the modules (the table's
    colours), links as their source, and placed (``x``, ``y``) in flow order, "other" last."""
    flows = {int(node): float(flow) for node, flow in (after.get("node_flow") or {}).items()}

    def side(saved: dict[str, Any]) -> tuple[list[str], list[str], dict[int, int], int]:
        tops = sorted((m for m in saved["modules"] if not m["parent"]), key=lambda m: -m["flow"])
        shown = tops[:top]
        labels = [f"{m['id']} {m['name']}" for m in shown]
        colours = [api.drawing.module_colour(int(m["id"])) for m in shown]
        if len(tops) > len(shown):
            labels.append(f"other ({len(tops) - len(shown):,} modules)")
            colours.append(OTHER_COLOUR)
        return labels, colours, {node: min(i, top) for i, m in enumerate(tops) for node in m["nodes"]}, len(tops)

    left, left_colours, in_first, first_count = side(before)
    right, right_colours, in_second, second_count = side(after)
    pairs: dict[tuple[int, int], float] = {}
    for node, flow in flows.items():
        if node in in_first and node in in_second:
            key = (in_first[node], in_second[node])
            pairs[key] = pairs.get(key, 0.0) + flow
    links = sorted(((a, b, f) for (a, b), f in pairs.items() if f > 0), key=lambda link: (link[0], -link[2]))
    return {
        "labels": left + right,
        "sources": [a for a, _, _ in links],
        "targets": [len(left) + b for _, b, _ in links],
        "flows": [f for _, _, f in links],
        "colours": left_colours + right_colours,
        "link_colours": [_translucent(left_colours[a]) for a, _, _ in links],
        "x": [0.001] * len(left) + [0.999] * len(right),
        "y": _stacked(links, len(left), 0) + _stacked(links, len(right), 1),
        "before": {
            "modules": first_count,
            "markov_time": before["options"].get("markov_time"),
            "threshold": before.get("threshold"),
            "other_model": bool(before.get("other_model")),
        },
        "after": {
            "modules": second_count,
            "markov_time": after["options"].get("markov_time"),
            "threshold": after.get("threshold"),
        },
    }


def _translucent(colour: str, alpha: float = 0.45) -> str:
    """``#rrggbb`` as a CSS ``rgba`` colour of opacity ``alpha`` (a band under which the others still show)."""
    value = colour.lstrip("#")
    red, green, blue = (int(value[k : k + 2], 16) for k in (0, 2, 4))
    return f"rgba({red},{green},{blue},{alpha})"


def _stacked(links: list[tuple[int, int, float]], count: int, end: int) -> list[float]:
    """The vertical centres (0 top, 1 bottom) of ``count`` nodes of one side of an alluvial stacked in order,
    each as tall as its flow (``end`` 0: the links' sources, 1: their targets)."""
    heights = [0.0] * count
    for link in links:
        heights[link[end]] += link[2]
    total = sum(heights) or 1.0
    centres, top = [], 0.0
    for height in heights:
        centres.append(min(0.999, max(0.001, (top + height / 2) / total)))
        top += height
    return centres


BLANK_NAME = "\u2423"
"""A module whose name is whitespace or empty is shown by its whitespace made visible, or by this (an open box)."""


def unique_names(saved: dict[str, Any]) -> dict[str, Any]:
    """``saved`` (a community run) with its modules' names as the pages show them, distinct among siblings (the
    modules of one level, which the map and the table show together): a name of whitespace made visible (" " as
    "\u2423"), and a name a sibling of more flow already has followed by " (2)", " (3)", ... A new dictionary; the
    modules are copied, ``saved`` is not changed."""
    renamed: dict[str, str] = {}
    taken: dict[str, set[str]] = {}
    for module in sorted(saved.get("modules") or [], key=lambda m: -float(m["flow"])):
        name = str(module.get("name") or "")
        if not name.strip():
            name = "".join(visible(c) for c in name) if name else BLANK_NAME
        names = taken.setdefault(module.get("parent", ""), set())
        unique, copy = name, 1
        while unique in names:
            copy += 1
            unique = f"{name} ({copy})"
        names.add(unique)
        renamed[module["id"]] = unique
    modules = [module | {"name": renamed[module["id"]]} for module in saved.get("modules") or []]
    return saved | {"modules": modules}


MAP_LABELS = 20
"""Modules of the map labelled (the most flow first); the others are named in the inspector when clicked."""

MAP_CANVAS = (1000.0, 560.0, 20.0)
"""The module map's canvas as the page draws it (width and height in pixels, at a 1280-pixel window, and the fit's
padding): the fit zoom and the labels' placement are computed for it."""

MAP_FONT_PX = 12.0
"""The labels' size on screen at the fit zoom (they scale with the zoom, so they are sized in the map's units)."""

PLACES = ("below", "above", "right", "left")
"""Where a label may go around its circle, tried in this order."""


def fit_zoom(xy: np.ndarray, sizes: np.ndarray, canvas: tuple[float, float, float] = MAP_CANVAS) -> float:
    """The zoom at which Cytoscape's fit shows every circle (positions ``xy``, diameters ``sizes``) on ``canvas``."""
    width, height, padding = canvas
    if len(xy) == 0:
        return 1.0
    low = (xy - sizes[:, None] / 2).min(axis=0)
    high = (xy + sizes[:, None] / 2).max(axis=0)
    extent = np.maximum(high - low, 1e-9)
    return float(min((width - 2 * padding) / extent[0], (height - 2 * padding) / extent[1]))


def label_box(x: float, y: float, size: float, text: str, font: float, place: str) -> tuple[float, ...]:
    """The rectangle (x0, y0, x1, y1, in the map's units) a label of ``text`` in ``font`` takes beside a circle of
    diameter ``size`` at (x, y), ``place`` one of :data:`PLACES` (about 0.6 font widths a character)."""
    w, h, gap = 0.6 * font * len(text), 1.25 * font, 0.25 * font
    r = size / 2
    if place == "below":
        return (x - w / 2, y + r + gap, x + w / 2, y + r + gap + h)
    if place == "above":
        return (x - w / 2, y - r - gap - h, x + w / 2, y - r - gap)
    if place == "right":
        return (x + r + gap, y - h / 2, x + r + gap + w, y + h / 2)
    return (x - r - gap - w, y - h / 2, x - r - gap, y + h / 2)


def _overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def spread_for_labels(
    xy: np.ndarray, sizes: np.ndarray, texts: list[str], font: float, rounds: int = 300
) -> np.ndarray:
    """``xy`` with the labelled circles (the first ``len(texts)``) pushed apart until the rectangles of their labels
    below them and their circles overlap no more (or ``rounds`` passes end): each overlapping pair moves apart along
    the line between them, half the overlap each; unlabelled circles stay where the layout put them."""
    xy = np.array(xy, dtype=np.float64)
    n = len(texts)
    for _ in range(rounds):
        boxes = [
            (min(b[0], x - s / 2), y - s / 2, max(b[2], x + s / 2), b[3])  # the circle and the label below it
            for (x, y), s, b in (
                (xy[i], sizes[i], label_box(float(xy[i, 0]), float(xy[i, 1]), float(sizes[i]), texts[i], font, "below"))
                for i in range(n)
            )
        ]
        moved = False
        for i in range(n):
            for j in range(i + 1, n):
                a, b = boxes[i], boxes[j]
                dx = min(a[2], b[2]) - max(a[0], b[0])
                dy = min(a[3], b[3]) - max(a[1], b[1])
                if dx <= 0 or dy <= 0:
                    continue
                moved = True
                if dx < dy:  # the cheaper way apart
                    step = (dx / 2 + 0.5) * (1 if xy[i, 0] >= xy[j, 0] else -1)
                    xy[i, 0] += step
                    xy[j, 0] -= step
                else:
                    step = (dy / 2 + 0.5) * (1 if xy[i, 1] >= xy[j, 1] else -1)
                    xy[i, 1] += step
                    xy[j, 1] -= step
        if not moved:
            break
    return xy


def place_labels(xy: np.ndarray, sizes: np.ndarray, texts: list[str], font: float) -> list[str]:
    """A place (:data:`PLACES`) for the label of each circle of ``xy`` and ``sizes``, greedily in the given order
    (the most flow first): the first place whose rectangle overlaps no label placed so far and no circle, or "" (the
    label is left off: the module is named when clicked) where none is free. So no two labels overlap, by
    construction. The map passes the labelled circles only: the others are small and drawn under the labels."""
    circles = [
        (x - s / 2, y - s / 2, x + s / 2, y + s / 2) for (x, y), s in zip(xy.tolist(), sizes.tolist(), strict=True)
    ]
    placed: list[tuple[float, ...]] = []
    places = []
    for i, text in enumerate(texts):
        x, y = xy[i]
        found = ""
        for place in PLACES:
            box = label_box(float(x), float(y), float(sizes[i]), text, font, place)
            hits = any(_overlap(box, other) for other in placed) or any(
                _overlap(box, circle) for j, circle in enumerate(circles) if j != i
            )
            if not hits:
                found = place
                placed.append(box)
                break
        places.append(found)
    return places


def map_layout(
    modules: list[dict[str, Any]], links: list[tuple[int, int, float]]
) -> tuple[np.ndarray, np.ndarray, float, list[str]]:
    """Where the module map draws ``modules`` (their ``flow``, ``id`` and ``name``) linked by ``links`` (module
    indices and flow): laid out by :func:`engine.network.drawing.force_layout` (link weights = flow) and spread so that
    the labels of the :data:`MAP_LABELS` largest fit, :data:`MAP_FONT_PX` pixels high on screen at the fit zoom. Returns
    the positions, the circles' sizes, the labels' font size and each label's place (:func:`place_labels`: "" for a
    label left off, as it would overlap another)."""
    positions = api.drawing.force_layout(
        len(modules),
        np.array([a for a, _, _ in links], dtype=np.int64),
        np.array([b for _, b, _ in links], dtype=np.int64),
        np.array([f for _, _, f in links]),
    )
    top_flow = max((m["flow"] for m in modules), default=1.0) or 1.0
    scale = 60.0 * np.sqrt(max(len(modules), 4))  # pixels: room for every module's circle and label
    xy = np.asarray(positions, dtype=np.float64).reshape(-1, 2) * scale
    sizes = np.array([12 + 40 * float(np.sqrt(m["flow"] / top_flow)) for m in modules])
    texts = [f"{m['id']} {m['name']}" for m in modules[:MAP_LABELS]]
    for _ in range(3):  # spreading widens the map, which lowers the fit zoom: size the labels again
        font = MAP_FONT_PX / fit_zoom(xy, sizes)  # 12 pixels on screen at the fit zoom
        xy = spread_for_labels(xy, sizes, texts, font)
    font = MAP_FONT_PX / fit_zoom(xy, sizes)
    return xy, sizes, font, place_labels(xy[: len(texts)], sizes[: len(texts)], texts, font)


PATH_ZOOM = 3.0
"""A searched path is brought into view at most this many times closer than the fit zoom (one module: this)."""


def path_view(
    xy: np.ndarray, sizes: np.ndarray, on_path: list[int], canvas: tuple[float, float, float] = MAP_CANVAS
) -> dict[str, Any]:
    """The zoom and pan (Cytoscape's: a point p of the map is drawn at p x zoom + pan) that centre the circles
    ``on_path`` (indices of ``xy`` and ``sizes``) on ``canvas`` and fit them with its padding, no farther than the
    fit zoom of the whole map and no closer than :data:`PATH_ZOOM` times it."""
    width, height, _ = canvas
    whole = fit_zoom(xy, sizes, canvas)
    if not on_path:
        return {"zoom": whole, "pan": {"x": width / 2, "y": height / 2}}
    chosen_xy, chosen_sizes = xy[on_path], sizes[on_path]
    zoom = min(max(fit_zoom(chosen_xy, chosen_sizes, canvas), whole), PATH_ZOOM * whole)
    low = (chosen_xy - chosen_sizes[:, None] / 2).min(axis=0)
    high = (chosen_xy + chosen_sizes[:, None] / 2).max(axis=0)
    centre = (low + high) / 2
    return {"zoom": zoom, "pan": {"x": width / 2 - float(centre[0]) * zoom, "y": height / 2 - float(centre[1]) * zoom}}
