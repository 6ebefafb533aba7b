"""The Maps page's schema view (issue 50, Guntupalli et al. 2023): a library of learned maps (the session's map added
under a name, or uploaded map files), and a background job that matches the page's walk (a walk in the room typed
above, or the uploaded walk) to each by learning only its emissions; the chart of every map's held-out bits per step,
the chosen one marked, and its evidence in a sentence. The services are :mod:`app.services.map_schemas`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dash import Input, Output, State, callback, ctx, dcc, html, no_update

from app import figures, ids, jobs, panels, services, sessions, transfers, ui
from app.jobs import panel
from app.services import map_schemas
from engine import api

QUEUE_ACTIVE = panel.QUEUE_ACTIVE


def schema_card() -> html.Section:
    """The schema view's card: the library, Match with its progress, and the result."""
    return ui.card(
        "Which known layout? (schemas)",
        html.Div(
            "A map learned in one room is that room's layout. A room of the same layout with other observations (new "
            "wallpaper) is recognised by keeping each stored map's transitions and learning only which observation "
            "each clone shows, from the walk above (a walk in the room typed above, or the uploaded walk); the map "
            f"that then predicts the walk's last {api.maps.SCHEMA_HELD_OUT:.0%} best is its schema.",
            className="hint",
        ),
        html.Div(
            [
                ui.field(
                    "Name",
                    dcc.Input(id=ids.SCHEMA_NAME, type="text", value="room-a", debounce=False),
                    "the name the learned map gets in the library (letters, digits, '_', '.', '-')",
                ),
                ui.field(
                    "Or upload maps",
                    ui.told_upload(
                        dcc.Upload(
                            html.Div(["Drop a map file (.npz) here, or ", html.A("choose a file")]),
                            id=ids.SCHEMA_UPLOAD,
                            className="upload",
                        ),
                        "map",
                        transfers.UPLOAD_LIMITS["map"](),
                        ids.SCHEMA_UPLOAD_MESSAGE,
                    ),
                    "a map written by `chmm map` or downloaded above; its file name is its name",
                ),
            ],
            className="form-grid",
        ),
        ui.buttons(
            html.Button("Add the learned map to the library", id=ids.SCHEMA_ADD, className="button"),
            html.Button("Clear the library", id=ids.SCHEMA_CLEAR, className="button"),
        ),
        html.Div(id=ids.SCHEMA_UPLOAD_MESSAGE),
        html.Div(id=ids.SCHEMA_LIBRARY_MESSAGE),
        html.Div(id=ids.SCHEMA_LIBRARY),
        panels.SCHEMA.buttons("Match the walk to the library"),
        *panels.SCHEMA.progress_bar(),
        panels.SCHEMA.status_line(),
        html.Div(id=ids.SCHEMA_SENTENCE),
        dcc.Graph(id=ids.SCHEMA_CHART, figure=figures.schema_figure(None), config={"displaylogo": False}),
        dcc.Store(id=ids.SCHEMA_LIBRARY_VERSION, storage_type="memory", data=0),
        dcc.Store(id=ids.SCHEMA_MATCH_VERSION, storage_type="memory", data=0),
        *panels.SCHEMA.watchers(),
    )


# ------------------------------------------------------------------------------------------ the library
@callback(
    Output(ids.SCHEMA_LIBRARY, "children"),
    Input(ids.SESSION, "data"),
    Input(ids.SCHEMA_LIBRARY_VERSION, "data"),
)
def show_library(session_id: str | None, _version: Any) -> Any:
    """The session's library, one row a map."""
    try:
        entries = map_schemas.library(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc)
    if not entries:
        return ui.message("The library is empty: learn a map and add it, or upload map files.")
    head = html.Tr([html.Th(h) for h in ("Map", "Clones", "Observations", "Actions", "From")])
    rows = [
        html.Tr([html.Td(e["name"]), html.Td(f"{e['clones']:,}"), html.Td(e["observations"]),
                 html.Td(", ".join(e["actions"])), html.Td(e["origin"])])
        for e in entries
    ]  # fmt: skip
    return html.Table([html.Thead(head), html.Tbody(rows)], className="facts schema-library")


@callback(
    Output(ids.SCHEMA_LIBRARY_MESSAGE, "children"),
    Output(ids.SCHEMA_LIBRARY_VERSION, "data"),
    Input(ids.SCHEMA_ADD, "n_clicks"),
    Input(ids.SCHEMA_CLEAR, "n_clicks"),
    State(ids.SCHEMA_NAME, "value"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def change_library(added: int | None, cleared: int | None, name: Any, session_id: str | None) -> tuple[Any, Any]:
    """Add the session's map to the library under the name, or clear the library."""
    ui.require_click(added if ctx.triggered_id == ids.SCHEMA_ADD else cleared)
    try:
        folder = sessions.session_folder(session_id)
        if ctx.triggered_id == ids.SCHEMA_ADD:
            said = map_schemas.add_current_map(folder, name)
        else:
            said = map_schemas.clear_library(folder)
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc), no_update
    return ui.message(said, "ok"), time.time()


@callback(
    Output(ids.SCHEMA_UPLOAD_MESSAGE, "children"),
    Output(ids.SCHEMA_LIBRARY_VERSION, "data", allow_duplicate=True),
    Input(ids.SCHEMA_UPLOAD, "contents"),
    State(ids.SCHEMA_UPLOAD, "filename"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def upload_map(contents: str | None, filename: str | None, session_id: str | None) -> tuple[Any, Any]:
    """An uploaded map file into the library (read as untrusted input; a bad file is said in one sentence)."""
    ui.require_click(contents)
    try:
        said = map_schemas.store_map_upload(sessions.session_folder(session_id), contents, filename)
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc), no_update
    return ui.message(said, "ok"), time.time()


# ------------------------------------------------------------------------------------------ the job
def _queue(folder: Path, source: Any, room: Any, length: Any, seed: Any) -> None:
    """Check the schema job's form and put the job into the server's queue."""
    map_schemas.queue_schema(folder, map_schemas.check_request(folder, source, room, length, seed))


start = panels.SCHEMA.register_start(
    _queue,
    State(ids.MAP_SOURCE, "value"),
    State(ids.MAP_ROOM, "value"),
    State(ids.MAP_LENGTH, "value"),
    State(ids.MAP_SEED, "value"),
)


def _schema_job(folder: Path, ticket: Any, report: Any) -> dict[str, str]:
    """The job of a queued schema match whose turn has come: its fits go to its record in the session folder."""
    return map_schemas.run_queued_schema(folder, ticket, report=report)


match, show_queued, show_running = panels.SCHEMA.register(_schema_job, "The schema match stopped: {exc}.")


@callback(
    Output(panels.SCHEMA.bar, "value"),
    Output(panels.SCHEMA.label, "children"),
    Output(panels.SCHEMA.status, "children", allow_duplicate=True),
    Input(panels.SCHEMA.progress, "data"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def show_progress(record: dict[str, Any] | None, session_id: str | None) -> tuple[Any, Any, Any]:
    """The running match's map, iteration and bits per step, as its background callback reports them (how the job
    ended instead, for a progress that arrives after it: :meth:`app.jobs.panel.JobPanel.ended_outcome`)."""
    if not record:
        return no_update, no_update, no_update
    value, label = map_schemas.progress_of(record)
    status = figures.job_status("Matching the walk", record, label)
    return panels.SCHEMA.progress_outputs(session_id, record, (str(value), label), status)


@callback(
    Output(panels.SCHEMA.status, "children"),
    Output(panels.SCHEMA.bar, "value", allow_duplicate=True),
    Output(panels.SCHEMA.label, "children", allow_duplicate=True),
    Output(ids.SCHEMA_MATCH_VERSION, "data"),
    Input(panels.SCHEMA.result, "data"),
    prevent_initial_call=True,
)
def show_result(result: dict[str, str] | None) -> tuple[Any, Any, Any, Any]:
    """The job's message when it ends; a finished match is drawn (the match version changes)."""
    return panel.result_outputs(result)


cancel = panels.SCHEMA.register_cancel(map_schemas.request_cancel, lambda message: ("0", message))
"""Cancel: a waiting match leaves the queue, a running one gets its cancel flag."""


@callback(
    Output(ids.SCHEMA_CHART, "figure"),
    Output(ids.SCHEMA_SENTENCE, "children"),
    Input(ids.SESSION, "data"),
    Input(ids.SCHEMA_MATCH_VERSION, "data"),
)
def show_match(session_id: str | None, _version: Any) -> tuple[Any, Any]:
    """The session's latest finished match: every map's held-out bits per step, the chosen one marked, and its
    evidence in a sentence."""
    try:
        record = map_schemas.read_job(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS as exc:
        return figures.schema_figure(None), ui.error_message(exc)
    if not record or record.get("status") != jobs.FINISHED or not record.get("fits"):
        return figures.schema_figure(None), None
    return figures.schema_figure(record["fits"]), ui.message(map_schemas.schema_sentence(record), "ok")


@callback(
    Output(panels.SCHEMA.bar, "value", allow_duplicate=True),
    Output(panels.SCHEMA.label, "children", allow_duplicate=True),
    Input(ids.SESSION, "data"),
    State(panels.SCHEMA.queued, "data"),
    prevent_initial_call="initial_duplicate",
)
def show_last_job(session_id: str | None, queued: dict[str, Any] | None) -> tuple[Any, Any]:
    """On opening the page: the latest schema job (a job whose process died is said as failed), or its place."""
    try:
        folder = sessions.session_folder(session_id)
        died = map_schemas.reap_dead_job(folder)
        record = map_schemas.read_job(folder)
    except ui.EXPECTED_ERRORS as exc:
        return "0", services.describe_error(exc)
    if (queued or {}).get("state") in QUEUE_ACTIVE:
        return "0", queued.get("message", "")
    if died:
        return "0", died
    value, label = map_schemas.progress_of(record)
    return str(value), label


def _followed(folder: Path, running: bool) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The schema job's bar and label and, once it has ended, its sentence and the match version."""
    record = map_schemas.read_job(folder)
    value, label = map_schemas.progress_of(record)
    if running:
        return (str(value), label), ()
    finished = (record or {}).get("status") == jobs.FINISHED
    return (str(value), label), (ui.outcome_message(record), time.time() if finished else no_update)


follow_job = panels.SCHEMA.register_follow(
    map_schemas.reap_dead_job,
    _followed,
    after=(Output(ids.SCHEMA_MATCH_VERSION, "data", allow_duplicate=True),),
    died_view=lambda _folder, died: ("0", died),
)
