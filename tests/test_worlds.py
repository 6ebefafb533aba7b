"""Worlds of several rooms joined by doors (engine.cognitive.worlds), the rooms a map's Infomap modules find
(engine.cognitive.hierarchy) and planning over them (engine.cognitive.planning): the NMI against its definition on
tiny labelings, worlds and their rooms, the true map of a world, Infomap on true and learned maps, hierarchical
routes against flat ones, and a blocked door."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest

from engine.cognitive import actions, hierarchy, maps, planning, walks, worlds
from engine.network.communities import normalised_mutual_information


def nmi_by_definition(first: list[int], second: list[int]) -> float:
    """2 I(U; V) / (H(U) + H(V)) with every sum written out over the label pairs (1 when both entropies are 0)."""
    n = len(first)
    p_u = {u: first.count(u) / n for u in set(first)}
    p_v = {v: second.count(v) / n for v in set(second)}
    h_u = -sum(p * math.log(p) for p in p_u.values())
    h_v = -sum(p * math.log(p) for p in p_v.values())
    if h_u == 0 and h_v == 0:
        return 1.0
    mutual = 0.0
    for u in p_u:
        for v in p_v:
            p = sum(1 for a, b in zip(first, second, strict=True) if a == u and b == v) / n
            if p > 0:
                mutual += p * math.log(p / (p_u[u] * p_v[v]))
    return 2 * mutual / (h_u + h_v)


def test_the_nmi_is_its_definition_on_tiny_labelings() -> None:
    """Every pair of labelings of 4 items with labels 0..2 (81 x 81), and random ones of 9 items, against the sums
    written out; a renaming gives 1, independent halves 0, one group each 1; bad input one sentence."""
    labelings = [list(v) for v in itertools.product(range(3), repeat=4)]
    for first in labelings:
        for second in labelings:
            assert normalised_mutual_information(first, second) == pytest.approx(
                nmi_by_definition(first, second), abs=1e-12
            )
    rng = np.random.default_rng(0)
    for _ in range(200):
        first, second = rng.integers(0, 4, 9).tolist(), rng.integers(0, 3, 9).tolist()
        assert normalised_mutual_information(first, second) == pytest.approx(nmi_by_definition(first, second))
    assert normalised_mutual_information([0, 0, 1, 2], ["b", "b", "a", "c"]) == pytest.approx(1.0)
    assert normalised_mutual_information([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(0.0)
    assert normalised_mutual_information([5, 5, 5], [1, 1, 1]) == 1.0
    with pytest.raises(ValueError, match="the same items"):
        normalised_mutual_information([0, 1], [0, 1, 2])
    with pytest.raises(ValueError, match="at least one"):
        normalised_mutual_information([], [])


@pytest.mark.parametrize(
    ("spec", "doors", "rooms", "walls"),
    [("3x3,3x3", 1, 2, 1), ("4x5,4x5,4x5", 2, 3, 2), ("3x4,3x4/3x4,3x4", 1, 4, 4), ("3x6,3x6/3x6,3x6", 2, 4, 4)],
)
def test_a_world_has_its_rooms_doors_and_observations(spec: str, doors: int, rooms: int, walls: int) -> None:
    """The rooms read back from the grid alone are the generator's, each of the given size; every wall between two
    rooms has its doors, one cell wide and never side by side; observations in range; the same seed the same
    world."""
    world = worlds.make_world(spec, observations=3, doors=doors, seed=7)
    found, door_mask = worlds.world_rooms(world.grid)
    np.testing.assert_array_equal(found, world.rooms)
    assert world.n_rooms == rooms and len(world.doors) == doors * walls
    assert sorted(map(tuple, np.argwhere(door_mask).tolist())) == list(world.doors)
    sizes = [tuple(int(v) for v in side.split("x")) for row in spec.split("/") for side in row.split(",")]
    assert [int((world.rooms == r).sum()) for r in range(rooms)] == [h * w for h, w in sizes]
    for a, b in itertools.combinations(world.doors, 2):
        assert abs(a[0] - b[0]) + abs(a[1] - b[1]) > 1
    open_cells = world.grid >= 0
    assert set(np.unique(world.grid[open_cells]).tolist()) <= {0, 1, 2}
    assert np.array_equal(open_cells, (world.rooms >= 0) | door_mask)
    assert nx.is_connected(maps.room_graph(world.grid))
    np.testing.assert_array_equal(worlds.make_world(spec, 3, doors, seed=7).grid, world.grid)
    assert not np.array_equal(worlds.make_world(spec, 3, doors, seed=8).grid, world.grid)


def test_a_room_without_walls_is_one_room() -> None:
    rooms, doors = worlds.world_rooms(np.array([[0, 1, 2, 0], [2, 3, 1, 3], [1, 0, 3, 2]]))
    assert rooms.max() == 0 and rooms.min() == 0 and not doors.any()


@pytest.mark.parametrize(
    ("spec", "observations", "doors", "message"),
    [
        ("", 4, 1, 'rooms "HxW" separated by ","'),
        ("4x5;4x5", 4, 1, "'4x5;4x5' is not a room"),
        ("4x5", 4, 1, "2 to 16 rooms, '4x5' has 1"),
        (",".join(["2x2"] * 17), 4, 1, "2 to 16 rooms"),
        ("1x5,1x5", 4, 1, "room 1x5 is not 2 to 50 cells on each side"),
        ("4x51,4x5", 4, 1, "not 2 to 50 cells"),
        ("4x5,5x5", 4, 1, "the same height"),
        ("4x5,4x5/4x6,4x5", 4, 1, "the same width"),
        ("4x5,4x5/4x5", 4, 1, "as many rooms"),
        ("4x5,4x5", 0, 1, "1 to 1,000 observations, got 0"),
        ("4x5,4x5", 4, 0, "at least 1 door"),
        ("3x5,3x5", 4, 3, "3 doors, never two side by side, do not fit in a wall of 3 cells"),
    ],
)
def test_a_bad_world_is_refused_in_one_sentence(spec: str, observations: int, doors: int, message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        worlds.make_world(spec, observations, doors)
    assert "\n" not in str(error.value)


def test_the_true_map_of_a_world_moves_as_the_walk_generator() -> None:
    """One clone per open cell; a walk generated in the world is possible under the true map with no surprise after
    its first steps, and the places of the clones decoded from it are the cells they stand for."""
    world = worlds.make_world("3x4,3x4", observations=3, seed=2)
    model, places = worlds.world_model(world.grid)
    assert model.n_states == int((world.grid >= 0).sum()) and model.actions == list(actions.MOVES)
    assert [world.grid[r, c] for r, c in places] == [int(model.symbols[s]) for s in model.clone_symbol()]
    walk = actions.generate_walk(world.grid, 3000, seed=2)
    assert actions.bits_per_step(model, walk.observations, walk.actions) < 0.01
    found = hierarchy.clone_places(model, walk.observations, walk.actions, walk.positions)
    visited = found[:, 0] >= 0
    assert visited.sum() == model.n_states
    np.testing.assert_array_equal(found, places)


def true_map(spec: str, doors: int = 1, seed: int = 0):
    """A world, its true map, each clone's cell and the clone of each cell."""
    world = worlds.make_world(spec, observations=4, doors=doors, seed=seed)
    model, places = worlds.world_model(world.grid)
    return world, model, places, {tuple(int(v) for v in p): clone for clone, p in enumerate(places)}


@pytest.mark.parametrize("spec", ["4x4,4x4", "5x5,5x5,5x5", "4x5,4x5/4x5,4x5", "8x8,8x8"])
def test_infomap_finds_the_rooms_of_a_true_map(spec: str) -> None:
    """On the true map of a world, Infomap's top modules are its rooms (NMI 1, one module per room), the clones
    placed by a walk decoded on the map."""
    world, model, _, _ = true_map(spec)
    walk = actions.generate_walk(world.grid, 4000, seed=1)
    match = hierarchy.match_rooms(model, walk.observations, walk.actions, walk.positions, world.grid)
    assert match.nmi == pytest.approx(1.0) and match.modules == match.rooms == world.n_rooms
    visited = np.unique(walk.positions, axis=0)
    assert match.clones == int((world.rooms[visited[:, 0], visited[:, 1]] >= 0).sum())


def test_infomap_finds_the_rooms_of_a_map_learned_from_a_walk() -> None:
    """Two 3 x 3 rooms joined by a door, 4 observations, a 4,000-step walk and 12 clones per observation: the map
    ``chmm map``'s recipe learns has modules that are the rooms (NMI at least 0.9)."""
    world = worlds.make_world("3x3,3x3", observations=4, seed=0)
    walk = walks.parse_walk(walks.format_walk(actions.generate_walk(world.grid, 4000, seed=0)))
    model, _ = walks.learn_map(walk, walks.MapOptions(clones=12, iterations=1000))
    match = hierarchy.match_rooms(model, *walk.walks(), walk.positions, world.grid)
    assert match.nmi >= 0.9 and match.rooms == 2
    with pytest.raises(ValueError, match="the room has 1 room: no rooms"):
        hierarchy.match_rooms(model, *walk.walks(), walk.positions, np.zeros((3, 7), dtype=int))


def walk_the_moves(grid: np.ndarray, start: tuple[int, int], moves: list[str]) -> list[tuple[int, int]]:
    """The cells a walker passes taking ``moves`` in the grid from ``start`` (a move into a wall keeps it there)."""
    cells = [start]
    for move in moves:
        r, c = np.add(cells[-1], actions.STEPS[actions.MOVES.index(move)])
        if 0 <= r < grid.shape[0] and 0 <= c < grid.shape[1] and grid[r, c] >= 0:
            cells.append((int(r), int(c)))
        else:
            cells.append(cells[-1])
    return cells


@pytest.mark.parametrize(("start", "goal"), [((0, 0), (4, 16)), ((4, 0), (0, 16)), ((2, 7), (2, 12))])
def test_a_hierarchical_route_is_as_short_as_the_flat_one_and_holds_fewer_messages(start, goal) -> None:
    """Three 5 x 5 rooms in a row: the flat and the hierarchical route both take the grid's shortest way (the
    moves, taken in the world, lead from the start cell to the goal's), as :func:`maps.plan_route` does, and the
    hierarchical plan holds fewer messages (sparse and dense) and reaches fewer clones."""
    world, model, _, clone_of = true_map("5x5,5x5,5x5")
    match = hierarchy.match_rooms(model, *_walk(world), world.grid)
    flat = planning.plan_flat(model, clone_of[start], clone_of[goal])
    tiered = planning.plan_hierarchical(model, match.module, clone_of[start], clone_of[goal])
    shortest = nx.shortest_path_length(maps.room_graph(world.grid), start, goal)
    assert flat.steps == tiered.steps == len(maps.plan_route(model, clone_of[start], clone_of[goal])[1]) == shortest
    for plan in (flat, tiered):
        cells = walk_the_moves(world.grid, start, plan.moves)
        assert cells[-1] == goal and plan.route[0] == clone_of[start] and plan.route[-1] == clone_of[goal]
    assert len(tiered.modules) == len({int(world.rooms[c]) for c in cells if world.rooms[c] >= 0})
    assert tiered.summary()["updates"] < flat.updates and tiered.summary()["dense_updates"] < flat.dense_updates
    assert tiered.reached <= flat.reached


def _walk(world: worlds.World) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    walk = actions.generate_walk(world.grid, 4000, seed=1)
    return walk.observations, walk.actions, walk.positions


def test_a_blocked_door_gives_a_detour_through_the_other() -> None:
    """Two rooms joined by two doors, a route through one of them from the cell on its left to the cell on its
    right: with the ways into that door blocked (their transitions set to zero), both planners take the other door,
    a longer route that never enters the blocked one, and the moves still lead to the goal in the world."""
    world, model, _, clone_of = true_map("5x6,5x6", doors=2, seed=3)
    modules = hierarchy.match_rooms(model, *_walk(world), world.grid).module
    door = world.doors[0]
    start, goal = (door[0], door[1] - 1), (door[0], door[1] + 1)
    before = planning.plan_flat(model, clone_of[start], clone_of[goal])
    assert before.route == [clone_of[start], clone_of[door], clone_of[goal]]
    blocked = planning.block(model, planning.ways_into(model, clone_of[door]))
    for plan in (
        planning.plan_flat(blocked, clone_of[start], clone_of[goal]),
        planning.plan_hierarchical(blocked, modules, clone_of[start], clone_of[goal]),
    ):
        assert clone_of[door] not in plan.route and plan.steps > before.steps
        cells = walk_the_moves(world.grid, start, plan.moves)
        assert cells[-1] == goal and door not in cells and world.doors[1] in cells
        assert plan.steps == 2 + 2 * abs(world.doors[1][0] - door[0])


def test_a_blocked_only_door_leaves_no_route_in_one_sentence() -> None:
    world, model, _, clone_of = true_map("4x4,4x4")
    modules = hierarchy.match_rooms(model, *_walk(world), world.grid).module
    door = clone_of[world.doors[0]]
    blocked = planning.block(model, planning.ways_into(model, door))
    start, goal = clone_of[(0, 0)], clone_of[(3, 8)]
    for plan in (planning.plan_flat, lambda m, s, g: planning.plan_hierarchical(m, modules, s, g)):
        with pytest.raises(ValueError, match=f"clone {goal} cannot be reached from clone {start}") as error:
            plan(blocked, start, goal)
        assert "\n" not in str(error.value)
    assert planning.plan_flat(blocked, start, clone_of[(3, 3)]).steps == 6  # its own room is still open
    with pytest.raises(ValueError, match="outside 0..3"):
        planning.block(model, [(0, 4)])
    with pytest.raises(ValueError, match="clone -1 is outside"):
        planning.plan_flat(model, -1, goal)
    with pytest.raises(ValueError, match="give each of the map's"):
        planning.plan_hierarchical(model, modules[:-1], start, goal)


def test_the_world_walk_map_and_plan_commands(tmp_path, capsys) -> None:
    """``chmm world`` writes a room file that ``chmm walk`` walks; ``chmm map --room`` says the modules of the map
    it learns are the rooms; ``chmm plan`` routes between the rooms flat and hierarchically, and with the door on
    the way blocked takes the other door."""
    import json

    from engine.cli import main

    world_file, walk_file, map_file = tmp_path / "world.csv", tmp_path / "walk.csv", tmp_path / "map.npz"
    assert main(["world", "4x4,4x4", "--doors", "2", "--seed", "0", "-o", str(world_file), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"rooms": 2, "doors": 2, "open_cells": 34, "rows": 4, "columns": 9}
    grid = walks.read_room(world_file)
    _, door_mask = worlds.world_rooms(grid)
    doors = [tuple(int(v) for v in d) for d in np.argwhere(door_mask)]
    assert main(["walk", str(world_file), "--length", "4000", "--seed", "0", "-o", str(walk_file)]) == 0
    learn = ["map", str(walk_file), "-o", str(map_file), "--clones", "12", "--iterations", "1000"]
    assert main([*learn, "--room", str(world_file), "--json"]) == 0
    rooms = json.loads(capsys.readouterr().out.splitlines()[-1])["rooms"]
    assert rooms["rooms"] == 2 and rooms["nmi"] >= 0.9
    row, column = doors[0]
    ends = ["--start", f"{row},{column - 1}", "--goal", f"{row},{column + 1}"]
    assert main(["plan", str(map_file), str(walk_file), *ends, "--block", f"{row},{column}", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["flat"]["steps"] == out["hierarchical"]["steps"] == 2
    other = abs(doors[1][0] - row)
    assert out["blocked_flat"]["steps"] == out["blocked_hierarchical"]["steps"] == 2 + 2 * other
    assert main(["plan", str(map_file), str(walk_file), *ends, "--room", str(world_file)]) == 0
    said = capsys.readouterr().out
    assert "against the world's 2 rooms: NMI" in said and "hierarchical: 2 steps across modules" in said


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["world", "3x3;3x3"], "'3x3;3x3' is not a room"),
        (["world", "3x3,3x3", "--doors", "5"], "5 doors, never two side by side, do not fit"),
        (["plan", "MAP", "PLAIN", "--start", "0,0", "--goal", "0,1"], "has no row and column columns"),
        (["plan", "MAP", "WALK", "--start", "0,0", "--goal", "9,9"], "the walk never visits the goal 9,9"),
        (["plan", "MAP", "WALK", "--start", "0,0", "--goal", "0,4", "--block", "1,2"], "cannot be reached from"),
    ],
)
def test_the_world_and_plan_commands_refuse_in_one_line(tmp_path, capsys, arguments, message) -> None:
    from engine.cli import main

    grid = np.array([[0, 1, -1, 2, 3], [4, 5, 6, 7, 8]])  # two rooms of 2 x 2 and a door at 1,2; every cell its own
    model, _ = worlds.world_model(grid)
    walk = actions.generate_walk(grid, 400, seed=0)
    model.save(tmp_path / "map.npz")
    walks.write_walk(walk, tmp_path / "walk.csv")
    (tmp_path / "plain.csv").write_text("action,observation\nup,0\ndown,0\n")
    paths = {"MAP": tmp_path / "map.npz", "WALK": tmp_path / "walk.csv", "PLAIN": tmp_path / "plain.csv"}
    arguments = [str(paths.get(a, a)) for a in arguments]
    code = main([*arguments, "-o", str(tmp_path / "out.csv")] if arguments[0] == "world" else arguments)
    error = capsys.readouterr().err
    assert code == 1 and message in error and error.count("\n") == 1, error
    assert not (tmp_path / "out.csv").exists()


def test_a_module_cut_inside_is_planned_around_across_the_other_modules() -> None:
    """Four rooms of 3 x 4 in a ring; the top-left room cut by blocking its column 3 (every way into its 3 cells),
    so its door to the top-right room cannot be reached from its corner: the hierarchical planner, whose module
    graph still joins the two rooms, fails inside the first, strikes that step and plans the modules again, around
    the ring through the rooms below, as short as the flat route and without falling back on it."""
    world, model, _, clone_of = true_map("3x4,3x4/3x4,3x4", seed=0)
    assert world.doors == ((2, 4), (3, 2), (3, 7), (4, 4))
    modules = hierarchy.match_rooms(model, *_walk(world), world.grid).module
    barrier = [clone_of[(r, 3)] for r in range(3)]
    blocked = planning.block(model, [way for c in barrier for way in planning.ways_into(model, c)])
    start, goal = (0, 0), (0, 8)
    flat = planning.plan_flat(blocked, clone_of[start], clone_of[goal])
    tiered = planning.plan_hierarchical(blocked, modules, clone_of[start], clone_of[goal])
    walled = world.grid.copy()
    walled[0:3, 3] = -1
    shortest = nx.shortest_path_length(maps.room_graph(walled), start, goal)
    for plan in (flat, tiered):
        cells = walk_the_moves(walled, start, plan.moves)
        assert cells[-1] == goal and plan.steps == shortest and (2, 4) not in cells
    assert len(tiered.modules) == 4
    unblocked = planning.plan_hierarchical(model, modules, clone_of[start], clone_of[goal])
    assert unblocked.modules == tiered.modules[:1] + tiered.modules[-1:]  # the direct way, before the cut


def test_any_door_of_a_ring_blocked_is_planned_around_without_falling_back() -> None:
    """Four rooms of 4 x 4 in a ring, each door blocked in turn (whichever module Infomap put its clone in): the
    hierarchical route from every corner to every other goes round by the other doors, as short as the flat one,
    without planning flat."""
    world, model, _, clone_of = true_map("4x4,4x4/4x4,4x4", seed=0)
    modules = hierarchy.match_rooms(model, *_walk(world), world.grid).module
    corners = [(0, 0), (8, 8), (0, 8), (8, 0)]
    for door, (start, goal) in itertools.product(world.doors, itertools.permutations(corners, 2)):
        blocked = planning.block(model, planning.ways_into(model, clone_of[door]))
        flat = planning.plan_flat(blocked, clone_of[start], clone_of[goal])
        tiered = planning.plan_hierarchical(blocked, modules, clone_of[start], clone_of[goal])
        assert tiered.steps == flat.steps and clone_of[door] not in tiered.route


def _weighted(model, seed: int = 0):
    """The map with every transition scaled by a random factor in [0.2, 1): routes of one length differ in
    probability, so the most probable of the shortest is one route."""
    rng = np.random.default_rng(seed)
    return model.with_T(model.T * rng.uniform(0.2, 1.0, size=model.T.shape).astype(model.T.dtype))


@pytest.mark.parametrize("cut", [False, True])
def test_door_fields_hold_the_most_probable_shortest_routes_inside_each_module(cut: bool) -> None:
    """Brute force over every shortest route: the exits are the clones with a way into another module and the
    entries the clones such a way leads into; for each exit (entry) and each clone of its module, the field's
    length is that of the shortest route inside the module from the clone to the exit (from the entry to the
    clone), -1 where there is none (the ring's top-left room cut by a wall of blocked cells); its log-probability
    that of the most probable of those routes, which its steps take by the map's ways and their actions."""
    world, model, _, clone_of = true_map("3x4,3x4/3x4,3x4", seed=0)
    modules = hierarchy.match_rooms(model, *_walk(world), world.grid).module
    model = _weighted(model)
    if cut:
        barrier = [clone_of[(r, 3)] for r in range(3)]
        model = planning.block(model, [way for c in barrier for way in planning.ways_into(model, c)])
    fields = planning.door_fields(model, modules)
    ways = planning.successors(model)
    way_of = {(u, int(ways.target[e])): (float(ways.log_p[e]), int(ways.action[e]))
              for u in range(model.n_states) for e in range(ways.indptr[u], ways.indptr[u + 1])}  # fmt: skip
    assert fields.exits.clones.tolist() == sorted({u for u, v in way_of if modules[u] != modules[v]})
    assert fields.entries.clones.tolist() == sorted({v for u, v in way_of if modules[u] != modules[v]})
    unreached = 0
    for side, forwards in ((fields.exits, False), (fields.entries, True)):
        for k, door in enumerate(side.clones.tolist()):
            m = modules[door]
            inside = nx.DiGraph([(u, v) for u, v in way_of if modules[u] == m and modules[v] == m])
            inside.add_nodes_from(np.flatnonzero(modules == m).tolist())
            assert (side.length[k][modules != m] == -1).all()
            for clone in np.flatnonzero(modules == m).tolist():
                ends = (door, clone) if forwards else (clone, door)
                if not nx.has_path(inside, *ends):
                    assert side.length[k, clone] == -1
                    unreached += 1
                    continue
                routes = list(nx.all_shortest_paths(inside, *ends))
                best = max(sum(way_of[u, v][0] for u, v in itertools.pairwise(r)) for r in routes)
                route, moves = side.walk(k, clone)
                route, moves = (route[::-1], moves[::-1]) if forwards else (route, moves)
                assert route[0] == ends[0] and route[-1] == ends[1]
                assert side.length[k, clone] == len(route) - 1 == len(routes[0]) - 1
                assert all(modules[c] == m for c in route)
                assert moves == [way_of[u, v][1] for u, v in itertools.pairwise(route)]
                assert math.isclose(sum(way_of[u, v][0] for u, v in itertools.pairwise(route)), best, abs_tol=1e-9)
                assert math.isclose(side.log_p[k, clone], best, abs_tol=1e-9)
    assert (unreached > 0) == cut


def assert_the_flat_routes(model, modules: np.ndarray, clones: range) -> None:  # noqa: ANN001
    """Between every two of ``clones``, the hierarchical plan on the map's door fields is the flat route, clone for
    clone and move for move, or both planners refuse the pair in one sentence."""
    fields = planning.door_fields(model, modules)
    for start, goal in itertools.permutations(clones, 2):
        try:
            flat = planning.plan_flat(model, start, goal)
        except ValueError:
            with pytest.raises(ValueError, match="cannot be reached"):
                planning.plan_hierarchical(model, modules, start, goal, fields=fields)
            continue
        tiered = planning.plan_hierarchical(model, modules, start, goal, fields=fields)
        assert tiered.route == flat.route and tiered.moves == flat.moves


@pytest.mark.parametrize(("spec", "doors"), [("5x5,5x5,5x5", 1), ("4x5,4x5", 2), ("3x4,3x4/3x4,3x4", 1)])
def test_a_hierarchical_route_is_the_flat_route_between_any_two_clones(spec: str, doors: int) -> None:
    """On a map whose routes differ in probability, open and with a door blocked, the hierarchical route between
    every two clones (any rooms) is the flat one, clone for clone: as short, and the most probable of the shortest
    (flat planning's messages find exactly that route). Where the blocked door leaves no way, both refuse."""
    world, model, _, clone_of = true_map(spec, doors=doors)
    modules = hierarchy.match_rooms(model, *_walk(world), world.grid).module
    model = _weighted(model, seed=2)
    for this in (model, planning.block(model, planning.ways_into(model, clone_of[world.doors[0]]))):
        assert_the_flat_routes(this, modules, range(0, this.n_states, 3))


def test_any_labelling_of_the_clones_gives_the_flat_route() -> None:
    """The door fields hold for any modules, not only rooms: random labellings of a weighted map's clones (0, in no
    module, among the labels; one clone per module; one module for all), with one move of random clones blocked
    in one direction, give the flat route between every two of every fourth clone, and both planners refuse the
    same pairs."""
    world, model, _, clone_of = true_map("4x4,4x4/4x4,4x4", seed=1)
    rng = np.random.default_rng(5)
    model = _weighted(model, seed=3)
    passages = [(int(c), int(rng.integers(len(actions.MOVES)))) for c in rng.choice(model.n_states, 6, replace=False)]
    model = planning.block(model, passages)
    labellings = [rng.integers(0, k, model.n_states) for k in (2, 3, 6)]
    labellings += [np.arange(model.n_states), np.zeros(model.n_states, dtype=np.int64)]
    for modules in labellings:
        assert_the_flat_routes(model, modules, range(0, model.n_states, 4))


def test_a_plan_on_the_maps_fields_counts_them_apart_and_holds_few_messages() -> None:
    """Three 5 x 5 rooms in a row, routes from the first room to the last: the plan on door fields made once is
    the plan made with its own, whose fields' messages it counts; with shared fields it holds under a third of
    flat planning's messages (those on the doors' graph) and reaches under half its clones; fields of another map are
    refused in one sentence."""
    world, model, _, clone_of = true_map("5x5,5x5,5x5")
    modules = hierarchy.match_rooms(model, *_walk(world), world.grid).module
    model = _weighted(model, seed=1)
    fields = planning.door_fields(model, modules)
    for start, goal in [((0, 0), (4, 16)), ((4, 0), (0, 16)), ((2, 2), (2, 14))]:
        shared = planning.plan_hierarchical(model, modules, clone_of[start], clone_of[goal], fields=fields)
        own = planning.plan_hierarchical(model, modules, clone_of[start], clone_of[goal])
        assert shared.route == own.route and shared.moves == own.moves and len(shared.modules) == 3
        assert (shared.field_updates, own.field_updates) == (0, fields.updates) and fields.updates > 0
        assert walk_the_moves(world.grid, start, shared.moves)[-1] == goal
        flat = planning.plan_flat(model, clone_of[start], clone_of[goal])
        assert shared.summary()["updates"] < flat.updates / 3 and shared.reached < flat.reached / 2
    blocked = planning.block(model, planning.ways_into(model, clone_of[world.doors[0]]))
    with pytest.raises(ValueError, match="made for another map") as error:
        planning.plan_hierarchical(blocked, modules, clone_of[(0, 0)], clone_of[(4, 16)], fields=fields)
    assert "\n" not in str(error.value)
    modules[modules == 1] = 4  # the caller's modules changed in place: the fields kept their own
    assert not fields.modules.flags.writeable and (fields.modules != modules).any()
    with pytest.raises(ValueError, match="other modules"):
        planning.plan_hierarchical(model, modules, clone_of[(0, 0)], clone_of[(4, 16)], fields=fields)
