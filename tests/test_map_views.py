"""The Maps page's schema view and detour (issue 50) without a browser: the session's library of maps (the learned
map added, uploaded map files, bad files and names refused in one sentence), the schema job (the right layout chosen
for a repainted room, its progress, cancel, a map whose actions differ, an empty library) and the detour around a
closed clone. Every test works in its own ``CHMM_DATA_DIR``."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from support import data_uri

from app import figures, jobs, panels, sessions
from app.jobs import panel
from app.services import UserError, map_routes, map_schemas, maps
from engine.cognitive import actions, schemas, worlds

WORLD = worlds.make_world("3x3,3x3", observations=4, seed=0).grid
"""Two 3 x 3 rooms joined by a door: 19 cells, 4 observations."""
OPEN = np.array([[0, 1, 2, 3, 0, 1, 2], [1, 2, 3, 0, 1, 2, 3], [3, 0, 1, 2, 3, 0, 1]])
"""An open 3 x 7 room: another layout of about as many cells."""
REPAINTED = np.where(WORLD >= 0, (WORLD * 3 + 1) % 4, -1)
"""The world's layout with other observations (new wallpaper)."""
ONE_MORE = re.compile(r"[.!?]\s+[A-Z]")


@pytest.fixture
def folder(data_dir: Path) -> Path:
    return sessions.session_folder(sessions.new_session_id())


def upload_map(folder: Path, model: actions.ActionCHMM, name: str, tmp_path: Path) -> str:
    path = tmp_path / name
    model.save(path)
    return map_schemas.store_map_upload(folder, data_uri(path.read_bytes(), "application/octet-stream"), name)


def learn_world(folder: Path) -> dict:
    request = maps.check_request(folder, "room", maps.room_text(WORLD), 4000, 12, 0, None, None)
    assert maps.run_map_job(folder, request)["status"] == jobs.FINISHED
    return maps.load_view(folder)


def one_sentence(message: str) -> bool:
    return message.endswith(".") and not ONE_MORE.search(message) and "\n" not in message


def test_the_library_takes_the_learned_map_and_uploads_and_refuses_bad_ones(folder: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no map yet"):
        map_schemas.add_current_map(folder, "room-a")
    with pytest.raises(UserError, match="The library holds no maps") as caught:
        map_schemas.check_request(folder, "room", maps.room_text(REPAINTED), 1000, 0)
    assert one_sentence(str(caught.value))
    learn_world(folder)
    assert map_schemas.add_current_map(folder, "world") == "Added 'world' to the library (19 clones)."
    said = upload_map(folder, schemas.map_of_room(OPEN), "open.npz", tmp_path)
    assert said == "Added 'open' to the library (21 clones)."
    said = upload_map(folder, schemas.map_of_room(OPEN), "open.npz", tmp_path)
    assert said.endswith("in place of the map of that name.")
    shown = map_schemas.library(folder)
    assert [(e["name"], e["clones"], e["origin"]) for e in shown] == [
        ("open", 21, "uploaded"),
        ("world", 19, "learned here"),
    ]
    assert shown[0]["actions"] == ["left", "right", "up", "down"]
    for contents, name, expected in (
        (data_uri(b"not a model"), "broken.npz", "broken.npz is not a map with actions: "),
        (data_uri(b"x"), "my map!.npz", "Name the map with 1 to 40 letters"),
        ("garbage", "fine.npz", "arrived damaged"),
    ):
        with pytest.raises(UserError, match=re.escape(expected)) as caught:
            map_schemas.store_map_upload(folder, contents, name)
        assert one_sentence(str(caught.value)) and str(tmp_path) not in str(caught.value), caught.value
    assert len(map_schemas.library(folder)) == 2  # nothing bad was kept
    assert not list(folder.glob(".map-upload-*"))
    assert map_schemas.clear_library(folder) == "The library is empty." and map_schemas.library(folder) == []


def test_the_schema_job_chooses_the_layout_of_a_repainted_room(folder: Path, tmp_path: Path) -> None:
    """A learned two-room world and an open room in the library; a walk in the world repainted: the world's map is
    chosen, its evidence (the margin to the runner-up) said in one sentence, the progress goes map by map, and the
    chart marks the chosen map."""
    learn_world(folder)
    map_schemas.add_current_map(folder, "world")
    upload_map(folder, schemas.map_of_room(OPEN), "open.npz", tmp_path)
    request = map_schemas.check_request(folder, "room", maps.room_text(REPAINTED), 1000, 1)
    reports: list[dict] = []
    outcome = map_schemas.run_schema_job(folder, request, report=reports.append)
    assert outcome["status"] == jobs.FINISHED, outcome
    record = map_schemas.read_job(folder)
    fits = record["fits"]
    assert [f["name"] for f in fits] == ["world", "open"] and record["held_out_steps"] == 200
    assert fits[1]["held_out_bits"] - fits[0]["held_out_bits"] > 0.1
    assert outcome["message"] == "Matched a 1,000-step walk to the library's 2 maps."
    sentence = map_schemas.schema_sentence(record)
    assert one_sentence(sentence)
    assert sentence.startswith("The walk follows 'world': ") and "below the runner-up 'open'" in sentence
    running = [map_schemas.progress_of(r) for r in reports if r.get("status") == jobs.RUNNING and "map" in r]
    assert running and running[0][1].startswith("Map 1 of 2 (") and any("Map 2 of 2" in label for _, label in running)
    assert [v for v, _ in running] == sorted(v for v, _ in running)
    chart = figures.schema_figure(fits)
    assert list(chart.data[0].y) == ["world", "open"]
    assert chart.data[0].marker.color[0] == figures.SCHEMA_CHOSEN_COLOUR != chart.data[0].marker.color[1]
    impossible = map_schemas.schema_sentence(record | {"fits": [fits[0], fits[1] | {"held_out_bits": None}]})
    assert "cannot make those steps at all" in impossible and one_sentence(impossible)


def test_the_schema_job_refuses_a_map_of_other_actions_and_stops_on_cancel(folder: Path, tmp_path: Path) -> None:
    upload_map(folder, schemas.map_of_room(OPEN), "open.npz", tmp_path)
    compass = schemas.map_of_room(WORLD)
    renamed = actions.from_dense(
        np.stack([compass.transition(k) for k in range(4)]),
        compass.n_clones,
        actions=["west", "east", "north", "south"],
    )
    upload_map(folder, renamed, "compass.npz", tmp_path)
    request = map_schemas.check_request(folder, "room", maps.room_text(REPAINTED), 600, 0)
    outcome = map_schemas.run_schema_job(folder, request)
    assert outcome["status"] == jobs.REFUSED and one_sentence(outcome["message"]), outcome
    assert outcome["message"].startswith("The map 'compass' has the actions west, east, north, south, not the walk's")
    map_schemas.clear_library(folder)
    upload_map(folder, schemas.map_of_room(OPEN), "open.npz", tmp_path)

    def cancel_midway(record: dict) -> None:
        if record.get("map") is not None:
            map_schemas.SCHEMA.files(folder).cancel.touch()

    outcome = map_schemas.run_schema_job(folder, request, report=cancel_midway)
    assert outcome == {"key": outcome["key"], "status": jobs.CANCELLED, "message": "Schema match cancelled."}
    assert "fits" not in map_schemas.read_job(folder)
    with pytest.raises(UserError, match="The walk length must be a whole number from 10 to 50,000"):
        map_schemas.check_request(folder, "room", maps.room_text(REPAINTED), 60_000, 0)
    with pytest.raises(UserError, match="No walk uploaded yet"):
        map_schemas.check_request(folder, "walk", None, None, 0)


def test_the_queued_schema_job_runs_from_its_ticket(folder: Path, tmp_path: Path) -> None:
    upload_map(folder, schemas.map_of_room(OPEN), "open.npz", tmp_path)
    map_schemas.queue_schema(folder, map_schemas.check_request(folder, "room", maps.room_text(OPEN), 500, 0))
    with pytest.raises(UserError, match="already running or waiting"):
        map_schemas.queue_schema(folder, map_schemas.check_request(folder, "room", maps.room_text(OPEN), 500, 0))
    view, go = map_schemas.SCHEMA.queue_view(folder, None)
    assert view["state"] == "starting"
    outcome = map_schemas.run_queued_schema(folder, go["ticket"])
    assert outcome["status"] == jobs.FINISHED and outcome["message"].endswith("the library's 1 map.")
    assert "the only map in the library" in map_schemas.schema_sentence(map_schemas.read_job(folder))
    assert map_schemas.SCHEMA.ticket(folder) is None


def test_a_closed_clone_gives_a_detour_that_avoids_it(folder: Path) -> None:
    """A route across the world's door, then with a clone on it closed: the detour leaves it out and differs from
    the route; closing the door itself leaves no way, said in one sentence; the start cannot be closed."""
    view = learn_world(folder)
    by_place = {(round(n["row"]), round(n["column"])): n["clone"] for n in view["nodes"]}
    start, goal = by_place[(0, 0)], by_place[(2, 6)]
    assert map_routes.plan_detour(folder, start, goal, []) is None
    route = maps.plan_route(folder, start, goal)["route"]
    closed = route[2]
    detour = map_routes.plan_detour(folder, start, goal, [closed])
    assert closed not in detour["route"] and detour["route"] != route
    assert detour["route"][0] == start and detour["route"][-1] == goal
    assert detour["text"].startswith(f"With clone {closed} closed: a detour of {len(detour['moves'])} steps")
    assert one_sentence(detour["text"])
    with pytest.raises(UserError, match="no way is left") as caught:
        map_routes.plan_detour(folder, start, goal, [by_place[(2, 3)]])  # the door
    assert one_sentence(str(caught.value))
    with pytest.raises(UserError, match="The start and the goal cannot be closed"):
        map_routes.plan_detour(folder, start, goal, [start])
    with pytest.raises(UserError, match="is not on the learned map"):
        map_routes.plan_detour(folder, start, goal, [999])


def test_the_page_serves_the_schema_view_and_the_detour(data_dir: Path) -> None:
    import dash

    from app import ids, main

    pages = {page["path"]: page for page in dash.page_registry.values()}
    layout = str(pages["/maps"]["layout"]())
    for component in (panels.SCHEMA.start, ids.SCHEMA_CHART, ids.SCHEMA_UPLOAD, ids.MAP_BLOCKED, ids.MAP_DETOUR_TEXT):
        assert component in layout
    dependencies = main.server.test_client().get("/_dash-dependencies").get_data(as_text=True)
    assert panels.SCHEMA.go in dependencies and panels.SCHEMA.result in dependencies and ids.MAP_DETOUR in dependencies


def test_the_page_shows_the_last_match_and_follows_one_of_another_tab(data_dir: Path, tmp_path: Path) -> None:
    """On opening the page the session's last finished match is drawn (its chart and sentence); a match this tab did
    not start is followed every second (Match disabled while it runs), and said when it ends."""
    import dash

    from app import main  # noqa: F401 (the Dash app, which registers the pages)
    from app.pages.mapping import schemas as part

    session = sessions.new_session_id()
    folder = sessions.session_folder(session)
    chart, sentence = part.show_match(session, 0)
    assert sentence is None and not chart.data
    assert part.follow_job(1, session, False, False, None) == (dash.no_update,) * 7 + (panel.IDLE_FOLLOW_MS,)
    upload_map(folder, schemas.map_of_room(OPEN), "open.npz", tmp_path)
    request = map_schemas.check_request(folder, "room", maps.room_text(OPEN), 500, 0)
    seen: list[tuple] = []

    def look(record: dict) -> None:
        if not seen and record.get("status") == jobs.RUNNING:
            seen.append(part.follow_job(2, session, False, False, None))

    assert map_schemas.run_schema_job(folder, request, report=look)["status"] == jobs.FINISHED
    value, label, start_disabled, cancel_disabled, watching, status, version, interval = seen[0]
    assert (start_disabled, cancel_disabled, watching, interval) == (True, False, True, panel.FOLLOW_MS)
    value, label, start_disabled, cancel_disabled, watching, status, version, interval = part.follow_job(
        3, session, True, False, None
    )
    assert (value, start_disabled, cancel_disabled, watching) == ("100", False, True, False)
    assert interval == panel.IDLE_FOLLOW_MS  # the job ended: the page looks again every few seconds only
    assert "Matched a 500-step walk" in str(status) and isinstance(version, float)
    chart, sentence = part.show_match(session, version)
    assert list(chart.data[0].y) == ["open"] and "The walk follows 'open'" in str(sentence)


def test_an_uploaded_map_meets_the_limits_of_a_learned_one(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library admitted forged maps (1,000,000 clones: +289 MB; 500,000 actions: +497 MB) and the refusal was a
    4.39 MB sentence: an upload is held to the clones and actions a learned map may have, checked before any table
    of it is built, and refused in one bounded sentence."""
    monkeypatch.setattr(maps, "MAX_TOTAL_CLONES", 20)  # the open room has 21 clones
    with pytest.raises(UserError, match="21 clones, more than the 20 allowed") as caught:
        upload_map(folder, schemas.map_of_room(OPEN), "open.npz", tmp_path)
    assert one_sentence(str(caught.value)) and len(str(caught.value)) < 200
    monkeypatch.setattr(maps, "MAX_TOTAL_CLONES", 5_000)
    monkeypatch.setattr(map_schemas, "MAX_MAP_ACTIONS", 3)  # it has four
    with pytest.raises(UserError, match="4 actions, more than the 3 allowed"):
        upload_map(folder, schemas.map_of_room(OPEN), "open.npz", tmp_path)
    assert map_schemas.library(folder) == [] and not list(folder.glob(".map-upload-*"))
