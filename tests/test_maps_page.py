"""The Maps page (issue 37, cognitive maps) without a browser: its services (the room and walk checks, the map job,
place fields, routes, Infomap modules, exports, cancel, session isolation) and that the page registers and serves.
Every test works in its own ``CHMM_DATA_DIR``."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import dash
import networkx as nx
import pytest
from support import data_uri

from app import figures, jobs, panels, sessions
from app.jobs import panel
from app.services import UserError, maps
from engine.cognitive import actions, walks

SMALL_ROOM = "0,1,2,0\n2,3,1,3\n1,0,3,2"
"""A 3 x 4 room that 3 clones per observation learn from a 5,000-step walk in a fraction of a second."""

ONE_MORE = re.compile(r"[.!?]\s+[A-Z]")
"""A second sentence in a message."""


@pytest.fixture(autouse=True)
def _isolated(data_dir: Path) -> Path:
    return data_dir


def small_request(folder: Path, **change: object) -> maps.MapRequest:
    form = {"source": "room", "room": SMALL_ROOM, "length": 5000, "clones": 3, "seed": 0} | change
    return maps.check_request(
        folder, form["source"], form["room"], form["length"], form["clones"], form["seed"], None, form.get("noise")
    )


@pytest.mark.parametrize(
    ("room", "expected"),
    [
        ("", "Type the room: one row of whole numbers per line"),
        (None, "Type the room"),
        ("0,1\n2,x", "The room: line 2 holds a cell that is not a whole number."),
        ("0,1,2\n2,3", "The room: the room's rows have different lengths (a room must be rectangular)."),
        ("0,-2\n1,1", "The room: line 1: a room's cells must be observations from 0 to 10,000 or -1 for a wall."),
        ("0,1\n2," + "9" * 30, "The room: line 2: a room's cells must be observations from 0 to 10,000 or -1"),
        ("-1,-1\n-1,-1", "A room needs at least one cell that is not a wall."),
        ("\n".join([",".join(["0"] * 60)] * 60), "The room has 3,600 cells; the page takes at most 2,500."),
    ],
)
def test_a_bad_room_is_said_in_one_sentence(room: object, expected: str) -> None:
    with pytest.raises(UserError) as caught:
        maps.parse_room(room)
    message = str(caught.value)
    assert message.startswith(expected) and message.endswith(".") and not ONE_MORE.search(message), message


def test_the_page_shows_a_bad_room_as_one_sentence_and_a_good_room_as_a_grid(data_dir: Path) -> None:
    from app import main  # noqa: F401 - builds the app, which registers the page
    from app.pages import maps as page

    figure, message = page.show_room("0,1\n2,x")
    assert "line 2 holds a cell that is not a whole number" in str(message) and "message-error" in str(message)
    figure, message = page.show_room(maps.NOTEBOOK_ROOM)
    assert "48 open cells, 4 observations" in str(message)
    heatmap = figure.data[0]
    assert len(heatmap.z) == 6 and len(heatmap.z[0]) == 8 and heatmap.text[0][0] == "1"
    # one colour per observation, the same as the map's nodes, and walls dark
    walled = figures.room_figure([[0, -1], [1, 2]], list(maps.PALETTE), maps.WALL_COLOUR)
    colours = [colour for _, colour in walled.data[0].colorscale]
    assert colours[0] == maps.WALL_COLOUR and maps.PALETTE[0] in colours and maps.PALETTE[2] in colours
    assert maps.observation_colour("2", ["0", "1", "2"]) == maps.PALETTE[2]


@pytest.mark.parametrize("cell", [3_000_000, 10**15])
def test_the_preview_of_a_room_with_a_huge_observation_is_refused_at_once(data_dir: Path, cell: int) -> None:
    """Issue 51: a 101-character room with a cell of 3,000,000 took 269 s and 188 MB to preview (one colour band per
    value up to it), 10**15 a MemoryError; the preview now refuses it in one sentence, at once."""
    import time

    from app import main  # noqa: F401 - builds the app, which registers the page
    from app.pages import maps as page

    room = ("0," * 48 + "1\n")[:99] + "\n" + str(cell)
    started = time.perf_counter()
    figure, message = page.show_room(room)
    assert time.perf_counter() - started < 2.0
    assert "message-error" in str(message) and "from 0 to 10,000 or -1 for a wall" in str(message)
    assert not figure.data


def test_the_preview_colour_scale_has_one_band_per_distinct_value() -> None:
    """The colour scale is built from the room's distinct values (their ranks), not from 0 to the largest value,
    and each observation keeps the colour the map's nodes give it."""
    room = [[0, actions.MAX_OBSERVATION], [-1, 5], [5, 0]]
    heatmap = figures.room_figure(room, list(maps.PALETTE), maps.WALL_COLOUR).data[0]
    assert len(heatmap.colorscale) == 2 * 4  # four distinct values: -1, 0, 5 and MAX_OBSERVATION
    assert heatmap.z == ((1, 3), (0, 2), (2, 1)) or [list(r) for r in heatmap.z] == [[1, 3], [0, 2], [2, 1]]
    bands = [colour for _, colour in heatmap.colorscale][::2]
    assert bands == [maps.WALL_COLOUR, maps.PALETTE[0], maps.PALETTE[5], maps.observation_colour("10000", [])]
    assert heatmap.text[0][1] == "10000" and heatmap.zmin == -0.5 and heatmap.zmax == 3.5


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"length": 1}, "The walk length must be a whole number from 2 to 200,000."),
        ({"length": None}, "Enter the walk length, a whole number from 2 to 200,000."),
        ({"clones": 0}, "The clones per observation must be a whole number from 1 to 200."),
        ({"clones": 2.5}, "The clones per observation must be a whole number from 1 to 200."),
        ({"source": "elsewhere"}, "Choose what to learn from"),
        ({"source": "walk"}, "No walk uploaded yet"),
        (
            {"clones": 200, "room": "\n".join(",".join(str(c + 8 * r) for c in range(8)) for r in range(4))},
            "make 6,400",
        ),
        ({"noise": 0.6}, "The sensor noise must be a number from 0 to 0.5, got 0.6."),
        ({"noise": "loud"}, "The sensor noise must be a number from 0 to 0.5, got 'loud'."),
        ({"noise": 0.1, "source": "walk"}, "Sensor noise applies to a walk the page makes in the room"),
        (
            {"noise": 0.1, "clones": 200, "room": "0,1,2,3\n4,5,6,7\n8,9,10,11"},
            "at most 2,000 clones; 200 for each of 12 observations make 2,400",
        ),
    ],
)
def test_bad_form_values_are_refused_in_one_sentence(folder: Path, change: dict, expected: str) -> None:
    with pytest.raises(UserError, match=expected.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        small_request(folder, **change)


def test_a_small_room_trains_to_a_map_that_recovers_it(folder: Path) -> None:
    reports: list[dict] = []
    outcome = maps.run_map_job(folder, small_request(folder), report=reports.append)
    assert outcome["status"] == jobs.FINISHED, outcome
    assert "It recovers the room: 12 clones used for 12 cells" in outcome["message"]
    assert reports[0]["status"] == jobs.RUNNING and reports[-1]["status"] == jobs.FINISHED
    assert maps.progress_of(reports[-1]) == (100, outcome["message"])
    value, label = maps.progress_of({"status": jobs.RUNNING, "stage": "em", "iteration": 99, "bits": 0.5})
    assert 0 < value < 90 and label.startswith("EM iteration 100 ") and "0.5000 bits per step" in label
    view = maps.load_view(folder)
    assert view["recovers_room"] is True and view["layout"] == "room" and view["cells"] == 12
    assert len(view["nodes"]) == 12 and view["modules"] >= 1
    # nodes placed at their clone's mean place: on this walk every clone is one cell of the room
    room = walks.parse_room(SMALL_ROOM)
    for node in view["nodes"]:
        r, c = round(node["row"]), round(node["column"])
        assert abs(node["row"] - r) < 1e-9 and abs(node["column"] - c) < 1e-9 and str(room[r, c]) == node["symbol"]
    elements = maps.map_elements(view)
    nodes = [e for e in elements if "source" not in e["data"]]
    edges = [e for e in elements if "source" in e["data"]]
    assert len(nodes) == 12 and len(edges) == nx.grid_2d_graph(3, 4).number_of_edges()  # 17, no self-loops drawn
    assert {n["data"]["obs_colour"] for n in nodes} == {maps.PALETTE[o] for o in range(4)}
    assert len({n["data"]["module_colour"] for n in nodes}) == view["modules"] or view["modules"] > 8
    # the model, the walk and the room are in the session folder (none in the app's memory)
    path = maps.current_map(folder)
    assert path is not None and path.parent.parent == folder
    assert actions.load(path / maps.MODEL).n_symbols == 4
    assert walks.parse_walk((path / maps.WALK).read_text()).positions is not None
    assert (path / maps.ROOM).read_text() == SMALL_ROOM


def test_place_field_and_route_through_the_service(folder: Path) -> None:
    maps.run_map_job(folder, small_request(folder))
    view = maps.load_view(folder)
    by_place = {(round(n["row"]), round(n["column"])): n["clone"] for n in view["nodes"]}
    corner = by_place[(0, 0)]
    field = maps.place_field(folder, corner)
    assert len(field["field"]) == 3 and len(field["field"][0]) == 4
    best = max((v, (r, c)) for r, row in enumerate(field["field"]) for c, v in enumerate(row) if v is not None)
    assert best[1] == (0, 0) and best[0] > 0.5
    assert figures.place_field_figure(field).data[0].z is not None
    route = maps.plan_route(folder, corner, by_place[(2, 3)])
    assert len(route["actions"]) == 5 and sorted(route["actions"]) == ["down", "down", "right", "right", "right"]
    clones = ", ".join(str(c) for c in route["route"])
    assert route["text"] == (
        f"5 steps from clone {corner} to clone {by_place[(2, 3)]}: {', '.join(route['actions'])}"
        f" (through clones {clones})."
    )
    assert len(route["route"]) == 6
    assert route["route"][0] == corner and route["route"][-1] == by_place[(2, 3)]
    nodes, edges = maps.route_elements(route["route"])
    drawn = {e["data"]["id"] for e in maps.map_elements(view)}
    assert set(nodes) <= drawn and set(edges) <= drawn
    assert maps.plan_route(folder, corner, corner)["actions"] == []
    for bad, expected in ((None, "Pick the start clone"), (999, "Clone 999 is not on the learned map")):
        with pytest.raises(UserError, match=expected):
            maps.plan_route(folder, bad, corner)
    with pytest.raises(UserError, match="Clone 999 is not on the learned map"):
        maps.place_field(folder, 999)


def test_exports_write_the_model_and_a_graphml_graph(folder: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no map yet"):
        maps.graphml(folder)
    maps.run_map_job(folder, small_request(folder))
    path, name = maps.model_file(folder)
    assert name.endswith(".npz") and actions.load(path).n_actions == 4
    content, name = maps.graphml(folder)
    assert name.endswith(".graphml")
    (tmp_path / name).write_text(content)
    graph = nx.read_graphml(tmp_path / name)
    assert graph.number_of_nodes() == 12 and all(isinstance(d["actions"], str) for *_, d in graph.edges(data=True))


def test_an_uploaded_walk_learns_a_map_and_bad_walks_are_refused(folder: Path) -> None:
    walk = actions.generate_walk(walks.parse_room(SMALL_ROOM), 3000, seed=1)
    info = maps.store_walk_upload(folder, data_uri(walks.format_walk(walk).encode()), "walk.csv")
    assert info == {
        "name": "walk.csv",
        "steps": 3000,
        "walks": 1,
        "observations": 4,
        "actions": list(actions.MOVES),
        "places": True,
    }
    assert "3,000 steps, 4 observations" in maps.describe_upload(info)
    for payload, expected in (
        (b"a,b\n1,2\n", 'walk.csv: a walk file needs a header with the columns "action" and "observation".'),
        (b"\xff\xfe", "walk.csv is not UTF-8 text"),
        (b"{", "walk.csv: not valid JSON."),
    ):
        with pytest.raises(UserError, match=expected.replace(".", r"\.")):
            maps.store_walk_upload(folder, data_uri(payload), "walk.csv")
    assert maps.upload_info(folder) == info  # a bad upload keeps the good one
    outcome = maps.run_map_job(folder, small_request(folder, source="walk"))
    assert outcome["status"] == jobs.FINISHED and "recovers" not in outcome["message"]
    view = maps.load_view(folder)
    assert view["room"] is None and view["layout"] == "room" and "recovers_room" not in view
    # a JSON walk has no true places: a force layout and no place fields
    as_json = json.dumps(
        {"actions": [actions.MOVES[i] for i in walk.actions], "observations": walk.observations.tolist()}
    )
    maps.store_walk_upload(folder, data_uri(as_json.encode()), "walk.json")
    assert maps.run_map_job(folder, small_request(folder, source="walk"))["status"] == jobs.FINISHED
    view = maps.load_view(folder)
    assert view["layout"] == "force" and not view["places"]
    with pytest.raises(UserError, match="no true places"):
        maps.place_field(folder, view["nodes"][0]["clone"])


def test_an_uploaded_file_of_two_walks_learns_one_map_and_each_walk_starts_afresh(folder: Path) -> None:
    """A walk file of several documents (a ``document`` column): one map learned from all of them, each walk
    decoded and filtered from its own start (its place fields are those of the walks pooled)."""
    room = walks.parse_room(SMALL_ROOM)
    lines = ["document,action,observation,row,column"]
    for name, seed in (("morning", 1), ("evening", 2)):
        walk = actions.generate_walk(room, 2000, seed=seed)
        for n in range(len(walk)):
            row, column = walk.positions[n]
            lines.append(f"{name},{actions.MOVES[walk.actions[n]]},{walk.observations[n]},{row},{column}")
    info = maps.store_walk_upload(folder, data_uri("\n".join(lines).encode()), "walks.csv")
    assert info["steps"] == 4000 and info["walks"] == 2
    assert "4,000 steps in 2 walks, 4 observations" in maps.describe_upload(info)
    outcome = maps.run_map_job(folder, small_request(folder, source="walk"))
    assert outcome["status"] == jobs.FINISHED, outcome
    view = maps.load_view(folder)
    assert view["layout"] == "room" and len(view["nodes"]) >= 12
    field = maps.place_field(folder, view["nodes"][0]["clone"])
    assert len(field["field"]) == 3 and max(v for row in field["field"] for v in row if v is not None) > 0.5


def test_a_cancelled_job_keeps_the_previous_map(folder: Path) -> None:
    maps.run_map_job(folder, small_request(folder))
    before = maps.current_map(folder)
    cancelled = []

    def cancel_midway(record: dict) -> None:
        if record.get("stage") == "em" and not cancelled:
            cancelled.append(maps.request_cancel(folder))

    outcome = maps.run_map_job(folder, small_request(folder, room=maps.NOTEBOOK_ROOM, clones=5), report=cancel_midway)
    assert outcome["status"] == jobs.CANCELLED and "previous map is kept" in outcome["message"]
    assert maps.current_map(folder) == before and maps.load_view(folder)["cells"] == 12
    assert len(list((folder / maps.MAPS).iterdir())) == 1


def test_a_map_that_cannot_make_its_walk_fails_and_keeps_the_previous_map(folder: Path, monkeypatch) -> None:
    """Issue 51: a map of infinite bits per step (its walk uses 0 clones) was installed as finished; now the job
    fails with the engine's sentence and the session's map stays as it was."""
    import numpy as np

    from engine.cognitive import maps as engine_maps

    maps.run_map_job(folder, small_request(folder))
    before = maps.current_map(folder)

    def broken(model: actions.ActionCHMM, threshold: float = 0.5) -> tuple[actions.ActionCHMM, np.ndarray]:
        return model.with_T(np.zeros_like(model.T)), np.arange(model.n_states)

    monkeypatch.setattr(engine_maps, "merge_equivalent_clones", broken)
    outcome = maps.run_map_job(folder, small_request(folder, seed=1))
    assert outcome["status"] == jobs.FAILED, outcome
    assert outcome["message"] == (
        "The map job failed: The learned map cannot make its walk (inf bits per step, the walk uses 0 of 12 clones). "
        "The previous map is kept."
    )
    assert maps.current_map(folder) == before and len(list((folder / maps.MAPS).iterdir())) == 1


def test_a_second_job_in_the_session_is_refused(folder: Path) -> None:
    maps.queue_map(folder, small_request(folder))
    with pytest.raises(UserError, match="already running or waiting"):
        maps.queue_map(folder, small_request(folder))
    assert maps.request_cancel(folder) == maps.WAITED_CANCELLED
    assert maps.map_ticket(folder) is None


def test_sessions_keep_their_own_maps(data_dir: Path) -> None:
    first = sessions.session_folder(sessions.new_session_id())
    second = sessions.session_folder(sessions.new_session_id())
    maps.run_map_job(first, small_request(first))
    assert maps.load_view(second) is None
    with pytest.raises(UserError, match="no map yet"):
        maps.plan_route(second, 0, 1)
    maps.run_map_job(second, small_request(second, room="0,1\n2,3", length=2000, clones=1))
    assert maps.load_view(first)["cells"] == 12 and maps.load_view(second)["cells"] == 4
    assert maps.current_map(first).parent.parent == first and maps.current_map(second).parent.parent == second


def test_the_queued_job_runs_from_its_ticket(folder: Path) -> None:
    ticket = maps.queue_map(folder, small_request(folder))
    view, go = maps.queue_view(folder, None)
    assert view["state"] == "starting" and go == {"ticket": view["ticket"]} and ticket.path.exists() is False
    outcome = maps.run_queued_map(folder, go["ticket"])
    assert outcome["status"] == jobs.FINISHED and maps.map_ticket(folder) is None
    assert maps.run_queued_map(folder, "not-a-ticket")["status"] == jobs.CANCELLED


def test_maps_page_registers_and_serves(data_dir: Path) -> None:
    import dash

    from app import ids, main

    pages = {page["path"]: page for page in dash.page_registry.values()}
    assert "/maps" in pages and pages["/maps"]["module"] == "app.pages.maps"
    layout = str(pages["/maps"]["layout"]())
    for component in (ids.MAP_ROOM, panels.MAP.start, ids.MAP_GRAPH, ids.MAP_FIELD, ids.MAP_ROUTE_TEXT):
        assert component in layout
    client = main.server.test_client()
    assert client.get("/maps").status_code == 200
    dependencies = client.get("/_dash-dependencies").get_data(as_text=True)
    assert panels.MAP.result in dependencies and panels.MAP.go in dependencies


def test_the_page_follows_a_map_job_started_in_another_tab() -> None:
    """A map job that this page did not start (another tab of the session): every second the page shows its
    progress with Learn disabled and Cancel enabled, and when it ends gives them back, says how it ended and draws
    the map (the map version changes); a job of this tab is left to its own callback, and one whose process died
    is said as failed."""
    from app import main  # noqa: F401 (the Dash app, which registers the pages)
    from app.pages import maps as page

    session = sessions.new_session_id()
    folder = sessions.session_folder(session)
    nothing = (dash.no_update,) * 7 + (panel.IDLE_FOLLOW_MS,)
    assert page.follow_job(1, session, False, False, None) == nothing  # nothing runs
    seen: list[tuple] = []

    def look(record: dict) -> None:
        if not seen:
            seen.append(page.follow_job(2, session, False, False, None))
            seen.append(maps.progress_of(maps.read_job(folder)))
            seen.append(page.follow_job(3, session, False, True, None))  # this tab's own job

    outcome = maps.run_map_job(folder, small_request(folder), report=look)
    assert outcome["status"] == jobs.FINISHED
    value, label, start_disabled, cancel_disabled, watching, status, version, interval = seen[0]
    assert (start_disabled, cancel_disabled, watching, interval) == (True, False, True, panel.FOLLOW_MS)
    assert (value, label) == (str(seen[1][0]), seen[1][1]) and label, label
    assert seen[2] == (dash.no_update,) * 7 + (panel.FOLLOW_MS,)  # its own callback follows it
    value, label, start_disabled, cancel_disabled, watching, status, version, interval = page.follow_job(
        4, session, True, False, None
    )
    assert (value, start_disabled, cancel_disabled, watching) == ("100", False, True, False)
    assert interval == panel.IDLE_FOLLOW_MS  # the job ended: the page looks again every few seconds only
    assert "message-ok" in json.dumps(status.to_plotly_json(), default=str) and isinstance(version, float)
    files = maps.map_files(folder)
    files.write({"key": "k", "status": jobs.RUNNING, "started": 0.0})
    files.heartbeat.touch()
    os.utime(files.heartbeat, (1.0, 1.0))  # its heartbeat stopped long ago
    value, label, *_, status, version, interval = page.follow_job(5, session, False, False, None)
    assert interval == panel.IDLE_FOLLOW_MS
    assert label.startswith("The map job stopped without finishing") and "previous map is kept" in label


def test_a_world_of_two_rooms_shows_its_modules_against_the_rooms_and_plans_across_them(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 50: a world typed as the room (``chmm world``'s file) learns a map whose Infomap modules (the engine's)
    are its rooms, said with their NMI; a route from one room to the other says what planning across the modules
    cost against planning on the whole map. The map's door fields are made once and kept for every route on it."""
    from engine import api
    from engine.cognitive import worlds

    made: list[int] = []
    door_fields = api.maps.door_fields
    monkeypatch.setattr(api.maps, "door_fields", lambda *args: made.append(1) or door_fields(*args))

    world = worlds.make_world("3x3,3x3", observations=4, seed=0)
    room = worlds.room_text(world.grid)
    outcome = maps.run_map_job(folder, small_request(folder, room=room, length=4000, clones=12))
    assert outcome["status"] == jobs.FINISHED, outcome
    view = maps.load_view(folder)
    assert view["modules"] == 2 and view["rooms"]["rooms"] == 2 and view["rooms"]["nmi"] >= 0.9
    sentence = maps.modules_sentence(view)
    assert sentence.startswith("Infomap finds 2 modules") and "a world of 2 rooms" in sentence
    assert "NMI of 1.000" in sentence
    by_place = {(round(n["row"]), round(n["column"])): n["clone"] for n in view["nodes"]}
    route = maps.plan_route(folder, by_place[(0, 0)], by_place[(2, 6)])
    assert len(route["actions"]) == 8
    assert "Planned across the modules (" in route["text"] and "8 steps," in route["text"]
    fields = re.search(
        r"door fields, once for the map and kept for its routes, took ([\d,]+) messages\.", route["text"]
    )
    assert fields and int(fields.group(1).replace(",", "")) > 0 and made == [1]
    back = maps.plan_route(folder, by_place[(2, 6)], by_place[(0, 0)])
    assert len(back["actions"]) == 8 and "Planned across the modules (" in back["text"] and made == [1]
    outcome = maps.run_map_job(folder, small_request(folder, room=room, length=4000, clones=12, seed=1))
    assert outcome["status"] == jobs.FINISHED, outcome  # a new map: its own fields
    view = maps.load_view(folder)
    by_place = {(round(n["row"]), round(n["column"])): n["clone"] for n in view["nodes"]}
    assert "Planned across the modules (" in maps.plan_route(folder, by_place[(0, 0)], by_place[(2, 6)])["text"]
    assert made == [1, 1]


def test_a_map_learned_through_sensor_noise_says_so_and_recovers_the_room(folder: Path) -> None:
    """Sensor noise 0.1 on the Maps page: the job learns from the readings' soft evidence, says how many readings
    were wrong, and the map (judged on the walk's true observations) recovers the room."""
    request = small_request(folder, noise=0.1, clones=4, length=4000)
    assert request.noise == 0.1
    outcome = maps.run_map_job(folder, request)
    assert outcome["status"] == jobs.FINISHED, outcome
    assert "Learned through a sensor wrong with probability 0.1 (" in outcome["message"]
    assert "It recovers the room:" in outcome["message"]
    summary = maps.load_view(folder)["summary"]
    assert 0.08 < summary["read_wrong"] < 0.12


def test_a_long_route_names_its_first_and_last_clones_and_how_many_between() -> None:
    """The route sentence names the clones it passes (it said only the actions); a long route names the first and
    last :data:`app.services.maps.ROUTE_CLONES_SHOWN` and counts the rest."""
    route = list(range(100, 130))
    said = maps._clone_list(route)
    assert said == "100, 101, 102, 103, 104, 105, ... 18 more ..., 124, 125, 126, 127, 128, 129"
    assert maps._clone_list([7, 3]) == "7, 3"
