"""Positions of every node of a large clustered graph, computed from its module tree alone (no force layout): the
whole clone graph of a model of 5,000 to 30,000 clones in a fraction of a second.

:func:`packed_layout` packs the modules hierarchically: at each level of the tree the children of a module share
its cell as a squarified treemap (Bruls, Huizing and van Wijk 2000), each child's area proportional to its weight
(the app gives a module's number of clones, so every clone gets the same room), the largest first from the cell's
top-left corner; every cell is shrunk by a small margin so that siblings stand apart. The nodes of a leaf module sit
on a sunflower spiral (Vogel's phyllotaxis: the k-th of K at radius sqrt((k + 1/2) / K) and angle k times the golden
angle) stretched to the ellipse inscribed in its cell, the node with the highest key at the centre. The work is a
loop over modules and a few array operations over the nodes: O(nodes + modules log modules).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.errors import CHMMError

GOLDEN_ANGLE = math.pi * (3.0 - math.sqrt(5.0))
"""The angle between successive nodes of the spiral (about 137.5 degrees): no two nodes line up radially."""

GAP = 0.06
"""Each cell gives up this share of its shorter side as a margin (half on each side) before its children or its
nodes are placed in it: siblings are separated by a visible gap at every level."""

SPIRAL_FILL = 0.92
"""The spiral fills this share of the ellipse inscribed in a leaf's cell (a node's dot stays inside the cell)."""


@dataclass(frozen=True)
class PackedLayout:
    """The result of :func:`packed_layout`: ``positions`` (n x 2, x then y, y growing downwards as on a screen),
    ``cells`` (m x 4: x0, y0, x1, y1 of each module's cell, margins taken) and ``rest`` (the cell of the nodes in no
    module, or None when every node has one)."""

    positions: np.ndarray
    cells: np.ndarray
    rest: np.ndarray | None


def squarify(weights: np.ndarray, x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    """The squarified treemap of ``weights`` (positive, sorted from the largest) in the rectangle (x0, y0)-(x1, y1):
    one rectangle (x0, y0, x1, y1) per weight, areas proportional to the weights, tiling the rectangle without
    overlap. Rows are laid along the shorter side and grown while that improves their worst aspect ratio."""
    k = len(weights)
    rects = np.zeros((k, 4))
    width, height = x1 - x0, y1 - y0
    total = float(np.sum(weights))
    if k == 0 or total <= 0 or width <= 0 or height <= 0:
        rects[:] = (x0, y0, x1, y1)
        return rects
    areas = np.asarray(weights, dtype=np.float64) * (width * height / total)
    x, y, i = x0, y0, 0
    while i < k:
        width, height = x1 - x, y1 - y
        short = min(width, height)
        row, j = areas[i], i + 1
        worst = max(short * short * areas[i] / (row * row), row * row / (short * short * areas[i]))
        while j < k:
            grown = row + areas[j]
            ratio = max(short * short * areas[i] / (grown * grown), grown * grown / (short * short * areas[j]))
            if ratio > worst:
                break
            row, worst, j = grown, ratio, j + 1
        last = j == k
        if width >= height:  # a column at the left: thickness row / height, items stacked downwards
            thickness = width if last else row / height
            edges = y + np.concatenate([[0.0], np.cumsum(areas[i:j] / thickness)])
            edges[-1] = y1
            rects[i:j] = np.column_stack([np.full(j - i, x), edges[:-1], np.full(j - i, x + thickness), edges[1:]])
            x += thickness
        else:  # a row at the top, items side by side
            thickness = height if last else row / width
            edges = x + np.concatenate([[0.0], np.cumsum(areas[i:j] / thickness)])
            edges[-1] = x1
            rects[i:j] = np.column_stack([edges[:-1], np.full(j - i, y), edges[1:], np.full(j - i, y + thickness)])
            y += thickness
        i = j
    return rects


def _shrunk(cell: np.ndarray, gap: float) -> np.ndarray:
    """The cell less a margin of ``gap / 2`` of its shorter side on each side."""
    margin = 0.5 * gap * min(cell[2] - cell[0], cell[3] - cell[1])
    return cell + np.array([margin, margin, -margin, -margin])


def _children(parents: np.ndarray, weights: np.ndarray) -> tuple[list[int], dict[int, np.ndarray]]:
    """The top modules and each module's children, every list sorted by weight (largest first; ties by index)."""
    order = np.lexsort((np.arange(len(parents)), -weights))
    by_parent: dict[int, list[int]] = {}
    for module in order.tolist():
        by_parent.setdefault(int(parents[module]), []).append(module)
    tops = by_parent.pop(-1, [])
    return tops, {parent: np.asarray(kids, dtype=np.int64) for parent, kids in by_parent.items()}


def spiral(members: np.ndarray, keys: np.ndarray, cells: np.ndarray, n: int) -> np.ndarray:
    """Positions (n x 2) of nodes on sunflower spirals: node v in the ellipse inscribed in ``cells[members[v]]``, the
    nodes of one cell from the centre outwards by decreasing ``keys``; nodes with a negative member stay at 0."""
    positions = np.zeros((n, 2))
    placed = np.flatnonzero(members >= 0)
    if len(placed) == 0:
        return positions
    group = members[placed]
    order = placed[np.lexsort((placed, -keys[placed], group))]  # by cell, then by key (highest first), then by index
    counts = np.bincount(members[order], minlength=len(cells))
    starts = np.concatenate([[0], np.cumsum(counts)])[:-1]
    rank = np.arange(len(order)) - starts[members[order]]
    size = counts[members[order]]
    radius = np.sqrt((rank + 0.5) / size) * SPIRAL_FILL
    angle = rank * GOLDEN_ANGLE
    box = cells[members[order]]
    centre_x, centre_y = (box[:, 0] + box[:, 2]) / 2, (box[:, 1] + box[:, 3]) / 2
    positions[order, 0] = centre_x + radius * np.cos(angle) * (box[:, 2] - box[:, 0]) / 2
    positions[order, 1] = centre_y + radius * np.sin(angle) * (box[:, 3] - box[:, 1]) / 2
    return positions


def packed_layout(
    parents: np.ndarray,
    weights: np.ndarray,
    members: np.ndarray,
    keys: np.ndarray | None = None,
    aspect: float = 1.0,
    gap: float = GAP,
) -> PackedLayout:
    """Positions of n nodes grouped by a tree of m modules (module docstring), inside [0, aspect] x [0, 1].

    ``parents[i]``: the index of module i's parent, -1 for a top module; ``weights[i]``: its area's share among its
    siblings (positive; the app gives its number of nodes); ``members[v]``: the leaf module holding node v, -1 for a
    node in no module (those share one more top cell, after the modules, weighted as the average node);
    ``keys[v]``: the order of the nodes in their cell, the highest at the centre (e.g. their flow; None: index
    order). Deterministic; raises ValueError for a module that is its own ancestor or a node of a module with
    children (Infomap's trees hold nodes in their leaves only)."""
    parents = np.asarray(parents, dtype=np.int64)
    weights = np.maximum(np.asarray(weights, dtype=np.float64), 1e-12)
    members = np.asarray(members, dtype=np.int64)
    n, m = len(members), len(parents)
    keys = -np.arange(n, dtype=np.float64) if keys is None else np.asarray(keys, dtype=np.float64)
    if len(weights) != m or len(keys) != n or np.any(members >= m) or np.any(parents >= m):
        raise CHMMError("parents, weights, members and keys do not describe one tree of modules")
    tops, children = _children(parents, weights)
    has_children = np.zeros(m, dtype=bool)
    has_children[list(children)] = True
    if np.any(has_children[members[members >= 0]]):
        raise CHMMError("a node belongs to a module with submodules (nodes must sit in leaf modules)")
    outside = int(np.sum(members < 0))
    top_weights = weights[tops]
    if outside:
        inside = n - outside
        top_weights = np.append(top_weights, outside * (float(top_weights.sum()) / inside if inside else 1.0))
    cells = np.full((m, 4), np.nan)
    placed = squarify(top_weights, 0.0, 0.0, float(aspect), 1.0)
    stack: list[tuple[np.ndarray, np.ndarray]] = [(np.asarray(tops, dtype=np.int64), placed[: len(tops)])]
    while stack:
        modules, rects = stack.pop()
        for module, rect in zip(modules.tolist(), rects, strict=True):
            cells[module] = _shrunk(rect, gap)
            kids = children.get(module)
            if kids is not None:
                inner = cells[module]
                stack.append((kids, squarify(weights[kids], inner[0], inner[1], inner[2], inner[3])))
    if np.isnan(cells).any():
        raise CHMMError("a module is not below a top module (its parents make a cycle)")
    rest = _shrunk(placed[-1], gap) if outside else None
    every = cells if rest is None else np.vstack([cells, rest])
    positions = spiral(np.where(members >= 0, members, m), keys, every, n)
    return PackedLayout(positions=positions, cells=cells, rest=rest)
