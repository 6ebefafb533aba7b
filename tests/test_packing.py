"""The whole graph's layout (engine/network/packing.py): modules packed as nested squarified treemaps, the nodes of a
leaf module on a spiral in its cell."""

from __future__ import annotations

import time

import numpy as np
import pytest

from engine import api
from engine.network.packing import squarify


def random_tree(n: int, tops: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A module tree of ``tops`` top modules, each with 0 to 5 submodules and some of those with 0 to 3 of their own,
    and ``n`` nodes spread over its leaves; weights are the modules' node counts (as the app gives them)."""
    rng = np.random.default_rng(seed)
    parents = [-1] * tops
    for top in range(tops):
        for _ in range(int(rng.integers(0, 6))):
            parents.append(top)
            child = len(parents) - 1
            for _ in range(int(rng.integers(0, 4)) if rng.random() < 0.3 else 0):
                parents.append(child)
    parents_ = np.array(parents)
    m = len(parents_)
    leaves = np.flatnonzero(~np.isin(np.arange(m), parents_))
    members = rng.choice(leaves, size=n)
    weights = np.bincount(members, minlength=m).astype(float)
    for module in range(m - 1, -1, -1):  # children come after their parents
        if parents_[module] >= 0:
            weights[parents_[module]] += weights[module]
    return parents_, np.maximum(weights, 1.0), members


def disjoint(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two rectangles (x0, y0, x1, y1) share no interior point."""
    return bool(a[2] <= b[0] + 1e-12 or b[2] <= a[0] + 1e-12 or a[3] <= b[1] + 1e-12 or b[3] <= a[1] + 1e-12)


def test_squarify_tiles_the_rectangle_with_areas_by_weight() -> None:
    weights = np.array([6.0, 6, 4, 3, 2, 2, 1])  # the example of Bruls et al.
    rects = squarify(weights, 0.0, 0.0, 6.0, 4.0)
    areas = (rects[:, 2] - rects[:, 0]) * (rects[:, 3] - rects[:, 1])
    np.testing.assert_allclose(areas, weights, rtol=1e-9)
    assert rects[:, [0, 1]].min() >= 0 and rects[:, 2].max() <= 6 + 1e-12 and rects[:, 3].max() <= 4 + 1e-12
    assert all(disjoint(rects[i], rects[j]) for i in range(7) for j in range(i))
    aspect = np.maximum(rects[:, 2] - rects[:, 0], rects[:, 3] - rects[:, 1]) / np.minimum(
        rects[:, 2] - rects[:, 0], rects[:, 3] - rects[:, 1]
    )
    assert aspect.max() < 3  # squarified: no sliver (a slice-and-dice layout gives 6 x 0.67, aspect 9)


def test_every_node_is_placed_in_its_own_leafs_cell_and_cells_do_not_overlap() -> None:
    parents, weights, members = random_tree(3000, 40)
    members[:25] = -1  # nodes in no module
    layout = api.drawing.packed_layout(parents, weights, members, keys=np.arange(3000.0), aspect=1.5)
    xy, cells = layout.positions, layout.cells
    assert xy.shape == (3000, 2) and np.isfinite(xy).all() and np.isfinite(cells).all()
    assert xy[:, 0].min() > 0 and xy[:, 0].max() < 1.5 and xy[:, 1].min() > 0 and xy[:, 1].max() < 1
    inside = members >= 0
    box = cells[members[inside]]
    assert np.all((box[:, 0] < xy[inside, 0]) & (xy[inside, 0] < box[:, 2]))
    assert np.all((box[:, 1] < xy[inside, 1]) & (xy[inside, 1] < box[:, 3]))
    rest = layout.rest
    assert rest is not None and np.all((rest[0] < xy[~inside, 0]) & (xy[~inside, 0] < rest[2]))
    leaves = [i for i in range(len(parents)) if i not in set(parents.tolist())]
    every = [cells[i] for i in leaves] + [rest]
    assert all(disjoint(every[i], every[j]) for i in range(len(every)) for j in range(i))
    for module, parent in enumerate(parents.tolist()):  # a submodule lies within its module, apart from its edge
        if parent >= 0:
            assert cells[parent][0] < cells[module][0] and cells[module][2] < cells[parent][2]
            assert cells[parent][1] < cells[module][1] and cells[module][3] < cells[parent][3]
    tops = np.flatnonzero(parents < 0)
    area = (cells[tops, 2] - cells[tops, 0]) * (cells[tops, 3] - cells[tops, 1])
    assert np.corrcoef(area, weights[tops])[0, 1] > 0.99  # area by weight (less the margins)


def test_the_node_with_the_highest_key_sits_at_its_cells_centre() -> None:
    members = np.zeros(50, dtype=np.int64)
    keys = np.random.default_rng(3).random(50)
    layout = api.drawing.packed_layout(np.array([-1]), np.array([50.0]), members, keys)
    centre = layout.cells[0, :2] / 2 + layout.cells[0, 2:] / 2
    distance = np.hypot(*(layout.positions - centre).T)
    assert np.argmin(distance) == np.argmax(keys)
    assert np.corrcoef(distance, -keys)[0, 1] > 0.9  # from the centre outwards by key
    assert len({(round(x, 9), round(y, 9)) for x, y in layout.positions}) == 50  # no two nodes on one point


def test_the_layout_is_deterministic_and_30000_nodes_take_well_under_a_second() -> None:
    parents, weights, members = random_tree(30_000, 300, seed=1)
    keys = np.random.default_rng(2).random(30_000)
    start = time.perf_counter()
    first = api.drawing.packed_layout(parents, weights, members, keys)
    seconds = time.perf_counter() - start
    second = api.drawing.packed_layout(parents.copy(), weights.copy(), members.copy(), keys.copy())
    assert np.array_equal(first.positions, second.positions) and np.array_equal(first.cells, second.cells)
    assert np.isfinite(first.positions).all() and len(parents) > 500
    assert seconds < 1.0, f"{seconds:.2f} s for 30,000 nodes"  # about 0.03 s on 2 cores


def test_bad_trees_are_refused() -> None:
    with pytest.raises(ValueError, match="leaf modules"):  # a node in a module that has submodules
        api.drawing.packed_layout(np.array([-1, 0]), np.array([2.0, 1.0]), np.array([0, 1]))
    with pytest.raises(ValueError, match="cycle"):
        api.drawing.packed_layout(np.array([-1, 2, 1]), np.ones(3), np.array([0, 0]))
    with pytest.raises(ValueError, match="one tree"):
        api.drawing.packed_layout(np.array([-1]), np.ones(1), np.array([0, 1]))
    empty = api.drawing.packed_layout(np.array([-1]), np.ones(1), np.zeros(0, dtype=np.int64))
    assert empty.positions.shape == (0, 2) and empty.rest is None
