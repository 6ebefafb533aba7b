"""The Maps page's likelihood file (``chmm map WALK --evidence FILE`` on the page) without a browser: an uploaded
walk and a file of a sensor's likelihoods learned into a map that recovers the room (the map job's progress and
cancel, the walk drawn as the map reads it), each refusal in one sentence (at upload and at Start), a new walk
forgetting the file, and the page's upload field and callbacks. Every test works in its own ``CHMM_DATA_DIR``."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from contextvars import copy_context
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import data_uri

from app import jobs, sessions
from app.services import UserError, map_uploads, maps
from engine import api
from engine.cognitive import actions, walks

ROOM = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1]])
"""The 3 x 3 room of ``tests/test_evidence.py``'s confused sensor."""
CONFUSION = np.array([[0.7, 0.3, 0.0], [0.3, 0.7, 0.0], [0.05, 0.0, 0.95]])
"""P(reading y | observation i): 0 and 1 read as each other 30% of the time, 2 rarely wrong."""
ONE_MORE = re.compile(r"[.!?]\s+[A-Z]")


@pytest.fixture
def folder(data_dir: Path) -> Path:
    return sessions.session_folder(sessions.new_session_id())


def confused(observations: np.ndarray, seed: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """The confused sensor's readings of ``observations`` and their soft evidence, L_n(i) = CONFUSION[i, reading_n]."""
    rng = np.random.default_rng(seed)
    readings = (rng.random(len(observations))[:, None] > np.cumsum(CONFUSION, axis=1)[observations]).sum(axis=1)
    return readings, CONFUSION[:, readings].T.copy()


def as_csv(likelihood: np.ndarray, header: str = "0,1,2") -> bytes:
    rows = "\n".join(",".join(f"{v:g}" for v in row) for row in likelihood)
    return ((header + "\n" if header else "") + rows).encode()


def as_npy(table: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, table)
    return out.getvalue()


def upload_walk(folder: Path, walk: actions.Walk, name: str = "walk.csv") -> dict:
    return maps.store_walk_upload(folder, data_uri(walks.format_walk(walk).encode()), name)


def request(folder: Path, **change: object) -> maps.MapRequest:
    form = {"source": "walk", "clones": 4, "seed": 0, "restarts": 1, "noise": None} | change
    return maps.check_request(
        folder, form["source"], "0,1\n2,3", 2000, form["clones"], form["seed"], form["restarts"], form["noise"]
    )


def refused(call: object, expected: str) -> str:
    with pytest.raises(UserError) as caught:
        call()  # type: ignore[operator]
    message = str(caught.value)
    assert expected in message, message
    assert message.endswith(".") and not ONE_MORE.search(message), message
    return message


def test_a_walk_and_its_sensors_likelihoods_learn_a_map_that_recovers_the_room(folder: Path) -> None:
    """The walk file of ``chmm walk`` (true observations and places) with the confused sensor's likelihoods as a
    table whose header names the columns in another order: the map job learns from them (with the page's clones,
    seed and restarts), says so, reports its progress, and the map recovers the room, each cell a clone with a
    place field; the walk file's observations are the map's reading of the likelihoods."""
    walk = actions.generate_walk(ROOM, 3000, seed=7)
    _, likelihood = confused(walk.observations)
    upload_walk(folder, walk)
    info = map_uploads.store_evidence_upload(folder, data_uri(as_csv(likelihood[:, [2, 0, 1]], "2,0,1")), "ev.csv")
    assert info == {"name": "ev.csv", "file": "ev.csv", "steps": 3000, "observations": 3}
    assert "the sensor's likelihoods of 3,000 steps over 3 observations" in map_uploads.describe_evidence(info)
    chosen = request(folder, restarts=2)
    assert chosen.evidence == "ev.csv" and chosen.restarts == 2 and chosen.noise == 0
    reports: list[dict] = []
    outcome = maps.run_map_job(folder, chosen, report=reports.append)
    assert outcome["status"] == jobs.FINISHED, outcome
    assert "Learned from the sensor's likelihoods in ev.csv (soft evidence)." in outcome["message"]
    assert " of 2 kept: its map predicted the walk's held-out last 300 steps best." in outcome["message"]
    assert "The map reads" not in outcome["message"]
    stages = {(r.get("stage"), r.get("restart")) for r in reports}
    assert {("em", 0), ("em", 1), ("soft-refit", 0)} <= stages  # each restart's iterations, then the kept one's
    assert all(0 <= maps.progress_of(r)[0] <= 100 for r in reports)
    refit = next(r for r in reports if r.get("stage") == "soft-refit")
    value, label = maps.progress_of(refit)
    assert 90 <= value <= 99 and "Restart" not in label
    assert label.startswith("The kept restart on the whole walk: iteration ")
    model = api.maps.load_map(maps.model_file(folder)[0])
    assert api.maps.recovers_room(model, walk.observations, walk.actions, ROOM)
    view = maps.load_view(folder)
    assert view["summary"]["evidence"] == "ev.csv" and view["summary"]["read_other"] == 0.0
    assert len(view["nodes"]) == 9 and view["layout"] == "room"
    field = maps.place_field(folder, view["nodes"][0]["clone"])
    assert max(v for row in field["field"] for v in row if v is not None) > 0.5


def test_a_walk_file_of_the_sensors_readings_is_drawn_as_the_map_reads_it(folder: Path) -> None:
    """A walk file whose observation column holds the sensor's readings (22% wrong) with their likelihoods as a
    .npy: the map is learned from the likelihoods, and the walk is drawn as the map reads them (the true
    observations here), which the result sentence says; drawn through the wrong readings it was 4 clones."""
    walk = actions.generate_walk(ROOM, 3000, seed=7)
    readings, likelihood = confused(walk.observations)
    upload_walk(folder, actions.Walk(readings, walk.actions, walk.positions), "readings.csv")
    npy = data_uri(as_npy(likelihood), "application/octet-stream")
    assert map_uploads.store_evidence_upload(folder, npy, "sensor.npy")["steps"] == 3000
    maps.queue_map(folder, request(folder))  # as Start does: the request travels in the queue's ticket
    _, go = maps.queue_view(folder, None)
    outcome = maps.run_queued_map(folder, go["ticket"])
    assert outcome["status"] == jobs.FINISHED, outcome
    assert "Learned from the sensor's likelihoods in sensor.npy (soft evidence)." in outcome["message"]
    share = float(np.mean(readings != walk.observations))
    assert f"The map reads {share:.1%} of the steps as another observation than the walk file's" in outcome["message"]
    view = maps.load_view(folder)
    assert len(view["nodes"]) == 9
    drawn = api.maps.parse_walk((maps.current_map(folder) / maps.WALK).read_text(), "walk")
    np.testing.assert_array_equal([int(drawn.symbols[i]) for i in drawn.observations], walk.observations)


def test_bad_likelihood_files_are_refused_in_one_sentence_and_the_previous_one_kept(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    walk = actions.generate_walk(ROOM, 300, seed=1)
    _, likelihood = confused(walk.observations)
    good = data_uri(as_csv(likelihood))
    refused(lambda: map_uploads.store_evidence_upload(folder, good, "ev.csv"), "applies to an uploaded walk")
    upload_walk(folder, walk)
    kept = map_uploads.store_evidence_upload(folder, good, "ev.csv")
    for payload, name, expected in (
        (as_csv(likelihood[:-1], ""), "short.csv", "The evidence file short.csv needs 300 rows (one per step of the"),
        (
            as_csv(likelihood[:, :2], "a,b"),
            "ab.csv",
            "names the columns a, b, but the walk's observation",
        ),
        (as_csv(likelihood[:, :2], ""), "two.txt", "of 3 numbers (one per observation symbol), got 300 x 2"),
        (b"0,1,2\n0.5,x,1\n", "words.csv", "The evidence file words.csv holds something other than numbers."),
        (as_npy(np.array([["a", "b", "c"]] * 300)), "words.npy", "holds <U1 values, not numbers"),
        (b"not an array", "broken.npy", "is not a readable .npy array"),
        (b"#" * 500_000, "padded.csv", "is larger than 300 rows of numbers can be"),  # the engine's bound by walk
        (as_csv(-likelihood), "negative.csv", "Soft evidence must be finite and non-negative."),
        (b"{}", "ev.json", "ev.json: a likelihood file is a .npy array or a .csv or .txt table of numbers."),
        (as_csv(likelihood), "bad name;.csv", "bad name;.csv"),
    ):
        if name == "bad name;.csv":  # an unsafe name is kept under another, but said as uploaded
            payload = as_csv(likelihood[:-2])
        refused(lambda p=payload, n=name: map_uploads.store_evidence_upload(folder, data_uri(p), n), expected)
        assert map_uploads.evidence_info(folder) == kept and not list(folder.glob(".map-evidence-*"))
    monkeypatch.setattr(map_uploads, "MAX_EVIDENCE_UPLOAD_BYTES", 100)
    refused(lambda: map_uploads.store_evidence_upload(folder, good, "big.csv"), "big.csv is too large")
    assert map_uploads.evidence_info(folder) == kept


def test_a_likelihood_file_is_refused_at_start_with_the_room_walk_or_noise_and_forgotten_with_its_walk(
    folder: Path,
) -> None:
    walk = actions.generate_walk(ROOM, 300, seed=1)
    _, likelihood = confused(walk.observations)
    upload_walk(folder, walk)
    map_uploads.store_evidence_upload(folder, data_uri(as_csv(likelihood)), "ev.csv")
    refused(lambda: request(folder, source="room"), "The likelihood file ev.csv applies to the uploaded walk")
    refused(lambda: request(folder, noise=0.1), "Sensor noise and the likelihood file ev.csv both say what the sensor")
    queued = request(folder)
    assert queued.evidence == "ev.csv"
    # a new walk forgets the file: the request learns from the walk alone, and a job queued with it is refused
    upload_walk(folder, actions.generate_walk(ROOM, 400, seed=2), "other.csv")
    assert map_uploads.evidence_info(folder) is None and not (folder / map_uploads.EVIDENCE).exists()
    assert request(folder).evidence is None and request(folder, source="room").source == "room"
    outcome = maps.run_map_job(folder, queued)
    assert outcome["status"] == jobs.REFUSED
    assert outcome["message"] == "The likelihood file ev.csv is gone (a new walk forgets it): upload it again."
    # a walk file of two walks takes no likelihood file
    two = "document,action,observation\n" + "\n".join(f"{d},right,{n % 3}" for d in "ab" for n in range(5))
    maps.store_walk_upload(folder, data_uri(two.encode()), "two.csv")
    refused(
        lambda: map_uploads.store_evidence_upload(folder, data_uri(as_csv(likelihood[:10])), "ev.csv"),
        "A likelihood file learns from one walk, and two.csv holds 2 walks.",
    )


def test_a_map_too_large_to_hold_dense_is_refused_at_start(folder: Path) -> None:
    room = np.arange(12).reshape(3, 4)
    walk = actions.generate_walk(room, 500, seed=0)
    upload_walk(folder, walk)
    indicator = np.eye(12)[walk.observations]
    header = ",".join(str(i) for i in range(12))
    map_uploads.store_evidence_upload(folder, data_uri(as_csv(indicator, header)), "ev.csv")
    refused(lambda: request(folder, clones=200), "at most 2,000 clones; 200 for each of 12 observations make 2,400")


def test_a_cancelled_evidence_job_keeps_the_previous_map(folder: Path) -> None:
    """Cancel during a restart's soft EM (the restarts on the walk without its tail report their iterations): the
    job stops there and the session keeps its previous map."""
    walk = actions.generate_walk(ROOM, 2000, seed=7)
    _, likelihood = confused(walk.observations)
    upload_walk(folder, walk)
    assert maps.run_map_job(folder, request(folder, clones=1))["status"] == jobs.FINISHED
    before = maps.current_map(folder)
    map_uploads.store_evidence_upload(folder, data_uri(as_csv(likelihood)), "ev.csv")
    cancelled: list[str] = []

    def cancel_midway(record: dict) -> None:
        if record.get("stage") == "em" and not cancelled:
            cancelled.append(maps.request_cancel(folder))

    outcome = maps.run_map_job(folder, request(folder, restarts=3), report=cancel_midway)
    assert outcome["status"] == jobs.CANCELLED and "previous map is kept" in outcome["message"]
    assert maps.current_map(folder) == before and len(list((folder / maps.MAPS).iterdir())) == 1


def test_the_page_takes_forgets_and_refuses_a_likelihood_file(data_dir: Path) -> None:
    """The page's field sits in the told upload wrapper with the page's limit; the callbacks keep a file (switching
    to the uploaded walk), refuse a bad one in one sentence, forget it, and a new walk says it forgot it."""
    import dash

    from app import ids, main  # noqa: F401 - builds the app, which registers the page
    from app.pages import maps as page

    layout = next(p for p in dash.page_registry.values() if p["path"] == "/maps")["layout"]()
    told = [c for c in components(layout) if c.get("className") == "told-upload" and ids.MAP_EVIDENCE_UPLOAD in str(c)]
    assert len(told) == 1 and told[0]["data-upload-message"] == ids.MAP_EVIDENCE_MESSAGE
    assert told[0]["data-upload-limit"] == str(map_uploads.MAX_EVIDENCE_UPLOAD_BYTES)
    assert ids.MAP_EVIDENCE_FORGET in str([c.get("id") for c in components(layout)])
    session = sessions.new_session_id()
    walk = actions.generate_walk(ROOM, 300, seed=1)
    _, likelihood = confused(walk.observations)
    good = data_uri(as_csv(likelihood))

    def evidence(contents: str | None, name: str, forget: int | None = None) -> tuple:
        trigger = f"{ids.MAP_EVIDENCE_FORGET}.n_clicks" if forget else f"{ids.MAP_EVIDENCE_UPLOAD}.contents"
        return clicked(trigger, page.upload_evidence, contents, forget, name, session)

    message, source = evidence(good, "ev.csv")
    assert "message-error" in str(message) and "applies to an uploaded walk" in str(message)
    assert source is dash.no_update
    walk_file = data_uri(walks.format_walk(walk).encode())
    walk_message, source, evidence_message = page.upload_walk(walk_file, "walk.csv", session)
    assert "Uploaded walk.csv" in str(walk_message) and source == "walk" and evidence_message is None
    message, source = evidence(good, "ev.csv")
    assert "Uploaded ev.csv: the sensor's likelihoods of 300 steps" in str(message) and source == "walk"
    message, _ = evidence(data_uri(b"0,1,2\n1,2\n"), "bad.csv")
    assert "message-error" in str(message) and "bad.csv" in str(message)
    _, _, evidence_message = page.upload_walk(walk_file, "again.csv", session)
    assert "The likelihood file ev.csv went with the previous walk." in str(evidence_message)
    evidence(good, "ev.csv")
    message, source = evidence(good, "ev.csv", forget=1)
    assert "Forgot the likelihood file ev.csv." in str(message) and source is dash.no_update
    assert map_uploads.evidence_info(sessions.session_folder(session)) is None
    message, _ = evidence(good, "ev.csv", forget=2)
    assert "There is no likelihood file to forget." in str(message)


def clicked(trigger: str, callback: Callable[..., Any], *arguments: Any) -> Any:
    """``callback(*arguments)`` as Dash runs it when ``trigger`` ("id.property") fired."""
    from dash._callback_context import context_value
    from dash._utils import AttributeDict

    def run() -> Any:
        context_value.set(AttributeDict(triggered_inputs=[{"prop_id": trigger, "value": 1}]))
        return callback(*arguments)

    return copy_context().run(run)


def components(layout: Any) -> list[dict]:
    """The props of every component of ``layout``, depth first."""
    found: list[dict] = []
    stack = [layout]
    while stack:
        node = stack.pop()
        if isinstance(node, list | tuple):
            stack.extend(node)
        elif hasattr(node, "to_plotly_json"):
            props = node.to_plotly_json()["props"]
            found.append(props)
            stack.append(props.get("children"))
    return found
