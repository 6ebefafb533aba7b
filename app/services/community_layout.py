"""How a community run is drawn (the Communities page): the module tree as a treemap draws it, the alluvial of two
runs, and the module map's layout with its labels placed so that they stay readable at the fit zoom. Pure functions
of a saved run (:func:`app.services.graphs.read_communities`) and of positions; :mod:`app.services.graphs` reads and
builds what the page shows from them."""

from __future__ import annotations

from typing import Any

import numpy as np

from engine import api


def module_tree(saved: dict[str, Any]) -> dict[str, list[Any]]:
    """The module tree as a treemap draws it (Infomap Network Navigator's nested view): ids, labels, parents
    (the root ""), flows (each module's flow contains its submodules') and each module's own codebook bits."""
    terms = (saved.get("codelength") or {}).get("modules") or {}
    modules = saved["modules"]
    return {
        "ids": [m["id"] for m in modules],
        "labels": [f"{m['id']} {m['name']}" for m in modules],
        "parents": [m["parent"] for m in modules],
        "flows": [m["flow"] for m in modules],
        "bits": [terms.get(m["id"]) for m in modules],
    }


def alluvial(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """How the flow of the top modules of one run goes to those of another on the same clones (an alluvial,
    Sankey, diagram; the clones' flow is the last run's): for every pair (module of ``before``, module of
    ``after``) the flow of the clones in both, pairs without flow left out; sources and targets index ``labels``
    (``before``'s modules, then ``after``'s)."""
    flows = {int(node): float(flow) for node, flow in (after.get("node_flow") or {}).items()}

    def top_of(saved: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[int, int]]:
        tops = sorted((m for m in saved["modules"] if not m["parent"]), key=lambda m: -m["flow"])
        return tops, {node: i for i, m in enumerate(tops) for node in m["nodes"]}

    first, in_first = top_of(before)
    second, in_second = top_of(after)
    pairs: dict[tuple[int, int], float] = {}
    for node, flow in flows.items():
        if node in in_first and node in in_second:
            key = (in_first[node], in_second[node])
            pairs[key] = pairs.get(key, 0.0) + flow
    links = sorted(((a, b, f) for (a, b), f in pairs.items() if f > 0), key=lambda link: -link[2])
    labels = [f"{m['id']} {m['name']}" for m in first] + [f"{m['id']} {m['name']}" for m in second]
    return {
        "labels": labels,
        "sources": [a for a, _, _ in links],
        "targets": [len(first) + b for _, b, _ in links],
        "flows": [f for _, _, f in links],
        "before": {
            "modules": len(first),
            "markov_time": before["options"].get("markov_time"),
            "threshold": before.get("threshold"),
            "other_model": bool(before.get("other_model")),
        },
        "after": {
            "modules": len(second),
            "markov_time": after["options"].get("markov_time"),
            "threshold": after.get("threshold"),
        },
    }


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


def place_labels(xy: np.ndarray, sizes: np.ndarray, texts: list[str], font: float) -> tuple[list[str], int]:
    """A place (:data:`PLACES`) for each label, greedily in the given order (the most flow first): the first place
    whose rectangle overlaps no label placed so far and no circle; returns the places and the labels that still
    overlap another (none is the goal: a map readable at its fit zoom)."""
    circles = [
        (x - s / 2, y - s / 2, x + s / 2, y + s / 2) for (x, y), s in zip(xy.tolist(), sizes.tolist(), strict=True)
    ]
    placed: list[tuple[float, ...]] = []
    places, clashes = [], 0
    for i, text in enumerate(texts):
        x, y = xy[i]
        best = None
        for place in PLACES:
            box = label_box(float(x), float(y), float(sizes[i]), text, font, place)
            hits = any(_overlap(box, other) for other in placed) or any(
                _overlap(box, circle) for j, circle in enumerate(circles) if j != i
            )
            if not hits:
                best = (place, box)
                break
        if best is None:
            clashes += 1
            best = (PLACES[0], label_box(float(x), float(y), float(sizes[i]), text, font, PLACES[0]))
        places.append(best[0])
        placed.append(best[1])
    return places, clashes


def map_layout(
    modules: list[dict[str, Any]], links: list[tuple[int, int, float]]
) -> tuple[np.ndarray, np.ndarray, float, list[str], int]:
    """Where the module map draws ``modules`` (their ``flow``, ``id`` and ``name``) linked by ``links`` (module
    indices and flow): laid out by :func:`engine.network.drawing.force_layout` (link weights = flow) and spread so that
    the labels of the :data:`MAP_LABELS` largest fit, :data:`MAP_FONT_PX` pixels high on screen at the fit zoom. Returns
    the positions, the circles' sizes, the labels' font size, each label's place and how many labels still clash."""
    positions = api.force_layout(
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
    places, clashes = place_labels(xy[: len(texts)], sizes[: len(texts)], texts, font)
    return xy, sizes, font, places, clashes
