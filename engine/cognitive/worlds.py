"""Worlds of several rooms joined by doors (George et al. 2021, Fig. 7: a map's communities are its rooms), as plain
room grids (:func:`engine.cognitive.actions.check_room`) that ``chmm walk`` walks and ``chmm map --room`` reads: the
true room of every cell follows from the grid itself (:func:`world_rooms`), so a world needs no file of its own.

A world is a grid of rectangular rooms: rows of rooms separated by a wall row one cell thick, the rooms of a row by a
wall column one cell thick (the grid's edge is the outer wall). Between every two rooms side by side (left and right,
or above and below) the wall has ``doors`` doors: open cells one cell wide, never two next to each other. Every open
cell (doors included) shows an observation drawn uniformly from 0..``observations``-1, so places are aliased within a
room and between rooms, and only the sequence of observations and actions tells them apart.

Also the true map of a grid (:func:`world_model`): the CHMM with actions that has one clone per open cell and moves
as the walk generator does, for checking communities and planning apart from learning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from engine.cognitive.actions import MOVES, STEPS, WALL, ActionCHMM, check_room, from_dense
from engine.errors import CHMMError

MIN_SIDE = 2
"""The fewest rows or columns of a room (a room one cell wide would be a corridor, read as doors)."""
MAX_SIDE = 50
"""The most rows or columns of a room."""
MAX_ROOMS = 16
"""The most rooms of a world."""
MAX_OBSERVATIONS = 1000
"""The most observations a world's cells draw from."""
WORLD_SPEC = 'a world is rooms "HxW" separated by "," within a row of rooms and by "/" between rows, e.g. "4x5,4x5"'
"""The one sentence (uncapitalised) that says how a world is written."""


@dataclass(frozen=True)
class World:
    """A generated world: ``grid`` the observation of every cell (-1: wall), ``rooms`` the room of every cell
    (0, 1, ... numbered in reading order; -1 for walls and doors), ``doors`` the (row, column) of every door."""

    grid: np.ndarray
    rooms: np.ndarray
    doors: tuple[tuple[int, int], ...]

    @property
    def n_rooms(self) -> int:
        return int(self.rooms.max()) + 1


def parse_world_spec(spec: str) -> list[list[tuple[int, int]]]:
    """The rooms of a world written as ``"HxW,HxW/HxW,HxW"`` (H rows by W columns each; "," between the rooms of a
    row of rooms, "/" between rows of rooms), as rows of (height, width); ValueError in one sentence when the text
    is not such a list, a side is outside :data:`MIN_SIDE`..:data:`MAX_SIDE`, there are more than
    :data:`MAX_ROOMS` rooms or fewer than 2, or the rooms do not line up (the rows of rooms must hold as many rooms
    each, the rooms of one row the same height and those of one column the same width)."""
    if not isinstance(spec, str) or not spec.strip():
        raise CHMMError(WORLD_SPEC)
    rows: list[list[tuple[int, int]]] = []
    for row_text in spec.replace(" ", "").split("/"):
        row = []
        for room in row_text.split(","):
            match = re.fullmatch(r"(\d{1,4})x(\d{1,4})", room.lower())
            if match is None:
                raise CHMMError(f"{room!r} is not a room: {WORLD_SPEC}")
            height, width = int(match.group(1)), int(match.group(2))
            if not (MIN_SIDE <= height <= MAX_SIDE and MIN_SIDE <= width <= MAX_SIDE):
                raise CHMMError(f"room {room} is not {MIN_SIDE} to {MAX_SIDE} cells on each side")
            row.append((height, width))
        rows.append(row)
    count = sum(len(row) for row in rows)
    if not 2 <= count <= MAX_ROOMS:
        raise CHMMError(f"a world has 2 to {MAX_ROOMS} rooms, {spec!r} has {count}")
    if len({len(row) for row in rows}) != 1:
        raise CHMMError("every row of rooms of a world must hold as many rooms")
    if any(len({h for h, _ in row}) != 1 for row in rows):
        raise CHMMError("the rooms of one row of a world must have the same height")
    if any(len({rows[r][c][1] for r in range(len(rows))}) != 1 for c in range(len(rows[0]))):
        raise CHMMError("the rooms of one column of a world must have the same width")
    return rows


def make_world(spec: str, observations: int = 4, doors: int = 1, seed: int = 0) -> World:
    """The world of ``spec`` (:func:`parse_world_spec`): its rooms laid out as a grid between walls one cell thick,
    ``doors`` doors in every wall between two rooms side by side (at distinct random places along the wall, never
    two adjacent), and every open cell an observation drawn uniformly from 0..``observations``-1 (numpy's
    generator seeded with ``seed``). ValueError in one sentence for a bad spec or counts."""
    layout = parse_world_spec(spec)
    if isinstance(observations, bool) or not isinstance(observations, int | np.integer):
        raise CHMMError(f"the observations of a world must be a whole number, got {observations!r}")
    if not 1 <= observations <= MAX_OBSERVATIONS:
        raise CHMMError(f"a world draws from 1 to {MAX_OBSERVATIONS:,} observations, got {observations}")
    if isinstance(doors, bool) or not isinstance(doors, int | np.integer) or doors < 1:
        raise CHMMError(f"every wall between two rooms needs at least 1 door, got {doors!r}")
    heights = [row[0][0] for row in layout]
    widths = [room[1] for room in layout[0]]
    shortest = min((heights if len(widths) > 1 else []) + (widths if len(heights) > 1 else []))  # of the walls
    if doors > (shortest + 1) // 2:
        raise CHMMError(f"{doors} doors, never two side by side, do not fit in a wall of {shortest} cells")
    top = np.concatenate([[0], np.cumsum(np.array(heights) + 1)])  # first row of each row of rooms
    left = np.concatenate([[0], np.cumsum(np.array(widths) + 1)])
    rng = np.random.default_rng(seed)
    open_cells = np.zeros((int(top[-1]) - 1, int(left[-1]) - 1), dtype=bool)
    rooms = np.full(open_cells.shape, WALL, dtype=np.int64)
    for r, height in enumerate(heights):
        for c, width in enumerate(widths):
            rooms[top[r] : top[r] + height, left[c] : left[c] + width] = r * len(widths) + c
    open_cells[rooms >= 0] = True
    placed: list[tuple[int, int]] = []
    for r, height in enumerate(heights):
        for c, width in enumerate(widths):
            if c + 1 < len(widths):  # the wall column to the right: doors at rows of this row of rooms
                placed += [(int(top[r] + k), int(left[c + 1] - 1)) for k in _door_places(height, doors, rng)]
            if r + 1 < len(heights):  # the wall row below: doors at columns of this column of rooms
                placed += [(int(top[r + 1] - 1), int(left[c] + k)) for k in _door_places(width, doors, rng)]
    for cell in placed:
        open_cells[cell] = True
    grid = np.where(open_cells, rng.integers(observations, size=open_cells.shape), WALL).astype(np.int64)
    return World(grid, rooms, tuple(sorted(placed)))


def _door_places(length: int, doors: int, rng: np.random.Generator) -> list[int]:
    """``doors`` distinct places 0..length-1 along a wall, no two adjacent, uniformly among such sets (a set of k
    places among n with gaps is a set of k among n - k + 1, each shifted by its rank)."""
    chosen = np.sort(rng.choice(length - doors + 1, size=doors, replace=False))
    return [int(v) + rank for rank, v in enumerate(chosen)]


def world_rooms(room: object) -> tuple[np.ndarray, np.ndarray]:
    """The rooms of a grid and its doors: a door is an open cell one cell wide, closed (a wall or the grid's edge)
    on both sides along one axis and open on both sides along the other; the rooms are the groups of open cells
    that are not doors and join side by side (4-neighbours), numbered 0, 1, ... in reading order of their first
    cell. Returns the room of every cell (-1 for walls and doors) and the mask of the doors. A world of
    :func:`make_world` gives back its own rooms; a plain room without walls is one room."""
    grid = check_room(room)
    is_open = np.pad(grid >= 0, 1, constant_values=False)
    centre = is_open[1:-1, 1:-1]
    up, down, left, right = is_open[:-2, 1:-1], is_open[2:, 1:-1], is_open[1:-1, :-2], is_open[1:-1, 2:]
    doors = centre & (((~left & ~right) & (up & down)) | ((~up & ~down) & (left & right)))
    rooms = np.full(grid.shape, WALL, dtype=np.int64)
    inside = centre & ~doors
    count = 0
    for r, c in np.argwhere(inside):
        if rooms[r, c] >= 0:
            continue
        stack = [(int(r), int(c))]
        rooms[r, c] = count
        while stack:
            y, x = stack.pop()
            for dy, dx in STEPS:
                ny, nx = y + int(dy), x + int(dx)
                if 0 <= ny < grid.shape[0] and 0 <= nx < grid.shape[1] and inside[ny, nx] and rooms[ny, nx] < 0:
                    rooms[ny, nx] = count
                    stack.append((ny, nx))
        count += 1
    return rooms, doors


def world_model(room: object, dtype: type = np.float32) -> tuple[ActionCHMM, np.ndarray]:
    """The true map of a grid: a CHMM with the actions :data:`engine.cognitive.actions.MOVES` and one clone per open
    cell (the clones of each observation are its cells in reading order; symbols are the observations present as
    text, in numeric order, as a walk file names them), T[a](cell, next) = 1 for the cell the move leads to (the
    cell itself when it leads into a wall or out of the grid), pi uniform. Returns the model and the (row, column)
    of every clone, shape (H, 2)."""
    grid = check_room(room)
    values = np.unique(grid[grid >= 0])
    cells = [np.argwhere(grid == value) for value in values]  # reading order within each observation
    places = np.concatenate(cells)
    index = np.full(grid.shape, -1, dtype=np.int64)
    index[places[:, 0], places[:, 1]] = np.arange(len(places))
    H = len(places)
    transitions = np.zeros((len(MOVES), H, H), dtype=dtype)
    for k, (dr, dc) in enumerate(STEPS):
        r, c = places[:, 0] + dr, places[:, 1] + dc
        inside = (r >= 0) & (r < grid.shape[0]) & (c >= 0) & (c < grid.shape[1])
        target = np.arange(H)
        moved = np.flatnonzero(inside)
        moved = moved[grid[r[moved], c[moved]] >= 0]
        target[moved] = index[r[moved], c[moved]]
        transitions[k, np.arange(H), target] = 1.0
    n_clones = np.array([len(group) for group in cells], dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(n_clones)])
    block_mass = np.add.reduceat(np.add.reduceat(transitions, start[:-1], axis=1), start[:-1], axis=2)
    model = from_dense(
        transitions, n_clones, triples=np.argwhere(block_mass > 0),
        symbols=[str(int(v)) for v in values], actions=list(MOVES),
    )  # fmt: skip
    return model, places


def room_text(room: object) -> str:
    """A grid as the text of a room file (:func:`engine.cognitive.walks.parse_room` reads it back): one line per row,
    its cells' whole numbers separated by commas."""
    grid = check_room(room)
    return "".join(",".join(str(int(v)) for v in row) + "\n" for row in grid)
