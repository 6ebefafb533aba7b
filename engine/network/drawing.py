"""2-D positions of clone graphs and module maps, computed on the server (the browser, Gephi and Cytoscape draw
them as given), and the module colours every view shares.

:func:`force_layout` is Fruchterman and Reingold's force-directed placement (1991): every pair of nodes repels
with force k^2 / d, every link attracts with force w d^2 / k (w the square root of its weight relative to the
largest, so a rare transition pulls less), a gravity G d pulls every node towards the centre, and each step moves
a node at most a temperature that cools linearly to zero; k is the ideal distance sqrt(area / n). The O(n^2) pair
loop is a numba kernel: networkx's ``spring_layout`` took 13.7 s for 2,000 nodes and 42.5 s for 4,000 on this
project's 2-core machine, too slow for a page that lays out a few thousand modules; this kernel 0.98 s and 4.6 s
(``bench/bench_layout.py``, bench/RESULTS.md).

:func:`grouped_layout` places clones module by module: the modules (groups) are laid out as a graph of their link
weights, each gets a disc whose area grows with its number of clones, and its clones are laid out inside it.
"""

from __future__ import annotations

import colorsys
from functools import cache

import numba
import numpy as np

PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363",
)  # fmt: skip
"""The first module colours: the module with index i (one-based, most flow first among its siblings) gets
PALETTE[i-1] up to 20, then :func:`module_colours`' next ones, in the module table, the module map, the subgraph and
the exported GEXF / Cytoscape files alike."""

DISTINCT_COLOURS = 400
"""Colours after the palette chosen each as far as can be from all before it (the rest: the remaining candidates)."""

ITERATIONS = 120
GRAVITY = 2.0
"""Pull towards the centre, G d: a node without links settles where it balances the others' repulsion (about
4 / R at radius R in the unit of k^2 n), near radius sqrt(4 / G) = 1.4."""


def module_colour(index: int) -> str:
    """The colour (``#rrggbb``) of the module with this one-based index among its siblings: :data:`PALETTE`, then
    :func:`module_colours` (all distinct: 3,380 colours, then they repeat)."""
    colours = module_colours()
    return colours[(max(1, int(index)) - 1) % len(colours)]


def _colour_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The "redmean" distance between RGB colours (rows of 0..255; a cheap approximation of how far apart they
    look)."""
    mean_red = (a[..., 0] + b[..., 0]) / 2
    d = a - b
    return np.sqrt(
        (2 + mean_red / 256) * d[..., 0] ** 2 + 4 * d[..., 1] ** 2 + (2 + (255 - mean_red) / 256) * d[..., 2] ** 2
    )


@cache
def module_colours() -> tuple[str, ...]:
    """Every module colour in order, all distinct: :data:`PALETTE`, then from a grid of hues, lightnesses and
    saturations the :data:`DISTINCT_COLOURS` each farthest (:func:`_colour_distance`) from all chosen before it
    (farthest-point order: the modules with the most flow, which the map shows and labels, look the most apart),
    then the grid's other colours."""
    grid = [
        colorsys.hls_to_rgb(hue / 120, lightness, saturation)
        for hue in range(120)
        for lightness in (0.25, 0.33, 0.41, 0.49, 0.57, 0.65, 0.72)
        for saturation in (0.4, 0.55, 0.7, 0.85)
    ]
    unique = dict.fromkeys("#" + "".join(f"{round(v * 255):02x}" for v in rgb) for rgb in grid)
    hexes = [c for c in unique if c not in PALETTE]
    candidates = np.array([[int(c[k : k + 2], 16) for k in (1, 3, 5)] for c in hexes], dtype=np.float64)
    nearest = np.full(len(hexes), np.inf)
    for colour in PALETTE:
        nearest = np.minimum(
            nearest, _colour_distance(candidates, np.array([int(colour[k : k + 2], 16) for k in (1, 3, 5)], float))
        )
    chosen = list(PALETTE)
    used = np.zeros(len(hexes), dtype=bool)
    for _ in range(min(DISTINCT_COLOURS, len(hexes))):
        best = int(np.argmax(np.where(used, -1.0, nearest)))
        used[best] = True
        chosen.append(hexes[best])
        nearest = np.minimum(nearest, _colour_distance(candidates, candidates[best]))
    return tuple(chosen + [c for c, taken in zip(hexes, used, strict=True) if not taken])


def colour_rgb(colour: str) -> dict[str, int]:
    """``#rrggbb`` as GEXF's ``{"r", "g", "b"}`` integers."""
    value = colour.lstrip("#")
    return {"r": int(value[0:2], 16), "g": int(value[2:4], 16), "b": int(value[4:6], 16)}


@numba.njit(cache=True)
def _fruchterman_reingold(
    positions: np.ndarray, sources: np.ndarray, targets: np.ndarray, weights: np.ndarray, iterations: int
) -> None:
    n = positions.shape[0]
    k = np.sqrt(4.0 / n)  # area 4: the square [-1, 1]^2
    displacement = np.zeros((n, 2))
    for step in range(iterations):
        temperature = 0.2 * (1.0 - step / iterations) + 1e-4
        displacement[:] = 0.0
        for i in range(n):
            for j in range(i + 1, n):
                dx = positions[i, 0] - positions[j, 0]
                dy = positions[i, 1] - positions[j, 1]
                d2 = dx * dx + dy * dy
                if d2 < 1e-12:
                    dx, dy, d2 = 1e-6 * (i - j), 1e-6, 1e-12 * (1 + (i - j) ** 2)
                force = k * k / d2  # repulsion k^2 / d, as a multiple of the unit vector times d
                displacement[i, 0] += dx * force
                displacement[i, 1] += dy * force
                displacement[j, 0] -= dx * force
                displacement[j, 1] -= dy * force
        for e in range(sources.shape[0]):
            a, b = sources[e], targets[e]
            if a == b:
                continue
            dx = positions[a, 0] - positions[b, 0]
            dy = positions[a, 1] - positions[b, 1]
            d = np.sqrt(dx * dx + dy * dy)
            force = weights[e] * d / k  # attraction w d^2 / k along the unit vector
            displacement[a, 0] -= dx * force
            displacement[a, 1] -= dy * force
            displacement[b, 0] += dx * force
            displacement[b, 1] += dy * force
        for i in range(n):  # gravity towards the centre, so pieces without links stay near the rest
            displacement[i, 0] -= GRAVITY * positions[i, 0]
            displacement[i, 1] -= GRAVITY * positions[i, 1]
            length = np.sqrt(displacement[i, 0] ** 2 + displacement[i, 1] ** 2)
            if length > 0:
                scale = min(length, temperature) / length
                positions[i, 0] += displacement[i, 0] * scale
                positions[i, 1] += displacement[i, 1] * scale


def force_layout(
    n: int,
    sources: np.ndarray,
    targets: np.ndarray,
    weights: np.ndarray | None = None,
    seed: int = 0,
    iterations: int = ITERATIONS,
) -> np.ndarray:
    """Positions (n x 2, centred, scaled into [-1, 1]) of n nodes linked by the undirected links ``sources[e]`` --
    ``targets[e]`` of ``weights`` (any positive scale; None: all 1) by Fruchterman-Reingold (module docstring),
    from positions drawn with ``seed``. Deterministic for a given input and seed."""
    if n == 0:
        return np.zeros((0, 2))
    if n == 1:
        return np.zeros((1, 2))
    sources = np.asarray(sources, dtype=np.int64)
    targets = np.asarray(targets, dtype=np.int64)
    w = np.ones(len(sources)) if weights is None else np.asarray(weights, dtype=np.float64)
    top = float(w.max()) if len(w) else 1.0
    w = np.sqrt(w / top) if top > 0 else np.ones(len(sources))  # square root: rare links still pull a little
    positions = np.random.default_rng(seed).uniform(-1.0, 1.0, size=(n, 2))
    _fruchterman_reingold(positions, sources, targets, w, int(iterations))
    positions -= positions.mean(axis=0)
    extent = float(np.abs(positions).max())
    return positions / extent if extent > 0 else positions


def spread_evenly(centres: np.ndarray) -> np.ndarray:
    """Centres (m x 2) moved along their rays from their mean so that their ranks by distance fill a unit disc
    evenly (the k-th nearest at radius sqrt((k + 1/2) / m)): a force layout of many weakly linked groups packs most
    into a dense core and flings a few far out, and a view fitted to those hid the core's groups in one blob; the
    directions, and so which groups lie side by side, are kept."""
    m = len(centres)
    if m < 2:
        return np.zeros_like(centres)
    offsets = centres - centres.mean(axis=0)
    radius = np.linalg.norm(offsets, axis=1)
    angle = np.arctan2(offsets[:, 1], offsets[:, 0])
    rank = np.empty(m)
    rank[np.argsort(radius, kind="stable")] = np.arange(m)
    even = np.sqrt((rank + 0.5) / m)
    return np.column_stack([even * np.cos(angle), even * np.sin(angle)])


def grouped_layout(
    groups: np.ndarray,
    sources: np.ndarray,
    targets: np.ndarray,
    weights: np.ndarray | None = None,
    seed: int = 0,
    spread: bool = False,
) -> np.ndarray:
    """Positions (n x 2, within [-1, 1]) of n nodes in groups (``groups[i]``: node i's group, any integers; the
    modules of a clone graph): the groups are laid out by :func:`force_layout` on the summed weights of the links
    between them (with ``spread``, then :func:`spread_evenly`), each group gets a disc of radius proportional to
    sqrt(its size) and its nodes are laid out inside it on the links within it, so modules stay together and
    apart."""
    groups = np.asarray(groups)
    n = len(groups)
    if n == 0:
        return np.zeros((0, 2))
    sources = np.asarray(sources, dtype=np.int64)
    targets = np.asarray(targets, dtype=np.int64)
    w = np.ones(len(sources)) if weights is None else np.asarray(weights, dtype=np.float64)
    labels, index = np.unique(groups, return_inverse=True)
    m = len(labels)
    between = index[sources] != index[targets]
    pair_weight: dict[tuple[int, int], float] = {}
    for a, b, value in zip(index[sources[between]], index[targets[between]], w[between], strict=True):
        key = (min(a, b), max(a, b))
        pair_weight[key] = pair_weight.get(key, 0.0) + float(value)
    group_sources = np.array([a for a, _ in pair_weight], dtype=np.int64)
    group_targets = np.array([b for _, b in pair_weight], dtype=np.int64)
    centres = force_layout(m, group_sources, group_targets, np.array(list(pair_weight.values())), seed)
    sizes = np.bincount(index, minlength=m)
    spacing = 1.0 / np.sqrt(m) if m > 1 else 1.0
    radius = spacing * 0.45 * np.sqrt(sizes / sizes.max())
    if spread:  # even rings: each group's share of the disc by its size (about pi / m each on average)
        centres = spread_evenly(centres)
        radius = 0.9 * spacing * np.sqrt(sizes / sizes.mean()) / 2
    positions = np.zeros((n, 2))
    members = np.argsort(index, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    within = ~between
    for g in range(m):
        nodes = members[bounds[g] : bounds[g + 1]]
        local = np.full(n, -1, dtype=np.int64)
        local[nodes] = np.arange(len(nodes))
        inside = within & (index[sources] == g)
        inner = force_layout(len(nodes), local[sources[inside]], local[targets[inside]], w[inside], seed)
        positions[nodes] = centres[g] + radius[g] * inner
    extent = float(np.abs(positions).max())
    return positions / extent if extent > 0 else positions


def layout_quality(
    positions: np.ndarray,
    sources: np.ndarray,
    targets: np.ndarray,
    flow: np.ndarray,
    groups: np.ndarray,
    neighbours: int = 5,
    seed: int = 0,
) -> dict[str, float]:
    """How well ``positions`` (n x 2) show a clustered graph: ``stretch``, the flow-weighted mean length of the links
    ``sources[e]`` -- ``targets[e]`` (weights ``flow``) over the mean distance between random pairs of nodes (lower:
    links are short; 1: no better than random places), and ``purity``, the share of each node's ``neighbours``
    nearest nodes that are in its own group (higher: groups stand apart; the chance level is about the share of the
    nodes a node's group holds)."""
    from scipy.spatial import cKDTree

    positions = np.asarray(positions, dtype=np.float64)
    n = len(positions)
    sources, targets = np.asarray(sources, dtype=np.int64), np.asarray(targets, dtype=np.int64)
    flow = np.asarray(flow, dtype=np.float64)
    rng = np.random.default_rng(seed)
    pairs = rng.integers(0, n, size=(min(200_000, 20 * n), 2))
    random_length = float(np.mean(np.linalg.norm(positions[pairs[:, 0]] - positions[pairs[:, 1]], axis=1)))
    lengths = np.linalg.norm(positions[sources] - positions[targets], axis=1)
    stretch = float(np.sum(flow * lengths) / np.sum(flow) / random_length) if np.sum(flow) > 0 else float("nan")
    k = min(neighbours, n - 1)
    _, nearest = cKDTree(positions).query(positions, k=k + 1)
    groups = np.asarray(groups)
    purity = float(np.mean(groups[nearest[:, 1:]] == groups[:, None])) if k > 0 else float("nan")
    return {"stretch": stretch, "purity": purity}
