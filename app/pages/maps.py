"""Maps page (issue 37, cognitive maps): type a room (or upload a walk), learn a CHMM with actions from a walk in it
as a background job, and explore the learned map: its clones laid out like the room, a clone's place field, a route
planned between two clones and its detour around closed clones, Infomap's modules; download the map's model and graph;
match a walk in a new room to a library of maps (the schema view, :mod:`app.pages.mapping.schemas`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import dash
import dash_cytoscape as cyto
from dash import Input, Output, State, callback, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from app import figures, ids, jobs, panels, services, sessions, transfers, ui
from app.jobs import panel
from app.pages.mapping import schemas
from app.services import map_routes, map_uploads, maps
from engine import api

dash.register_page(__name__, path="/maps", name="Maps", title="CHMM Explorer · Maps", order=8)

QUEUE_ACTIVE = panel.QUEUE_ACTIVE
ROUTE_COLOUR = "#e6007e"
"""The planned route's colour: apart from every observation's colour (the palette's red is an observation's)."""
DETOUR_COLOUR = "#111111"
"""The detour's colour (dashed), and a closed clone's."""
BASE_STYLE = [
    {
        "selector": "node",
        "style": {
            "label": "data(label)",
            "width": 26,
            "height": 26,
            "font-size": 10,
            "text-valign": "center",
            "text-halign": "center",
            "color": "#111",
            "border-width": 1,
            "border-color": "#555",
        },
    },
    {"selector": "edge", "style": {"width": 2, "line-color": "#9a9a9a", "curve-style": "straight", "opacity": 0.8}},
]


def layout(**_query: Any) -> html.Div:
    room = ui.card(
        "Room and walk",
        ui.field(
            "Learn from",
            dcc.RadioItems(
                id=ids.MAP_SOURCE,
                options=[{"label": f" {label}", "value": value} for value, label in maps.SOURCES.items()],
                value="room",
                inline=True,
            ),
        ),
        ui.field(
            "Room",
            dcc.Textarea(id=ids.MAP_ROOM, value=maps.NOTEBOOK_ROOM, className="room-editor", rows=8),
            "One row per line, cells separated by commas: each cell's observation (0, 1, 2, ...), -1 for a wall. "
            "Prefilled with the 6 x 8 room of the paper's public notebook.",
        ),
        html.Div(id=ids.MAP_ROOM_MESSAGE),
        dcc.Graph(id=ids.MAP_ROOM_PREVIEW, figure=figures.empty_figure(), config={"displaylogo": False}),
        html.Div(
            [
                ui.field(
                    "Walk length (steps)",
                    dcc.Input(
                        id=ids.MAP_LENGTH, type="number", step="any", value=maps.APP_WALK_LENGTH, className="num"
                    ),
                    f"a random walk in the room (moves left, right, up, down); 2 to {maps.MAX_WALK_LENGTH:,}",
                ),
                ui.field(
                    "Clones per observation",
                    dcc.Input(id=ids.MAP_CLONES, type="number", step="any", value=maps.APP_CLONES, className="num"),
                    f"the engine's default is {api.maps.MAP_DEFAULTS.clones}; {maps.APP_CLONES} learn the notebook's "
                    "room from 10,000 steps in about 3 s a restart on 2 cores (70 take about four times as long)",
                ),
                ui.field("Seed", dcc.Input(id=ids.MAP_SEED, type="number", step="any", value=0, className="num")),
                ui.field(
                    "Restarts",
                    dcc.Input(
                        id=ids.MAP_RESTARTS,
                        type="number",
                        step="any",
                        value=api.maps.MAP_DEFAULTS.restarts,
                        className="num",
                    ),
                    f"learn from this many random starts and keep the one whose map predicts the walk's last "
                    f"{api.maps.MAP_HELD_OUT_SHARE:.0%} best (1 to {api.DEFAULTS.MAX_RESTARTS}; 1: one start on the "
                    f"whole walk)",
                ),
                ui.field(
                    "Sensor noise",
                    dcc.Input(id=ids.MAP_NOISE, type="number", step="any", value=0, className="num"),
                    f"0 to {api.maps.MAX_NOISE:g}: the walk in the room is read by a sensor wrong with this "
                    "probability, and the map is learned from the readings' soft evidence (transitions held dense)",
                ),
            ],
            className="form-grid",
        ),
        ui.field(
            "Or upload a walk",
            ui.told_upload(
                dcc.Upload(
                    html.Div(
                        [
                            "Drop a walk file here (CSV with the columns action and observation, or JSON), or ",
                            html.A("choose a file"),
                        ]
                    ),
                    id=ids.MAP_UPLOAD,
                    className="upload",
                ),
                "walk",
                transfers.UPLOAD_LIMITS["walk"](),
                ids.MAP_UPLOAD_MESSAGE,
            ),
            "A walk written by `chmm walk` also has the columns row and column (the true places): then the map is "
            "laid out like the room and clones have place fields.",
        ),
        html.Div(id=ids.MAP_UPLOAD_MESSAGE),
        ui.field(
            "And the sensor's likelihoods (optional)",
            ui.told_upload(
                dcc.Upload(
                    html.Div(
                        [
                            "Drop the uploaded walk's likelihood file here (.npy, .csv or .txt), or ",
                            html.A("choose a file"),
                        ]
                    ),
                    id=ids.MAP_EVIDENCE_UPLOAD,
                    className="upload",
                ),
                "evidence",
                transfers.UPLOAD_LIMITS["evidence"](),
                ids.MAP_EVIDENCE_MESSAGE,
            ),
            "For a sensor that is not symmetric (`chmm map WALK --evidence FILE`): one row per step of the uploaded "
            "walk and one column per observation, P(reading | observation), as a .npy array in the walk's order of "
            "observations or a table whose optional first line names them. The map is then learned from this soft "
            "evidence (transitions held dense); it applies to an uploaded walk, and a new walk forgets it.",
        ),
        html.Div(id=ids.MAP_EVIDENCE_MESSAGE),
        ui.buttons(html.Button("Forget the likelihood file", id=ids.MAP_EVIDENCE_FORGET, className="button")),
    )
    learn = ui.card(
        "Learn the map",
        html.Div(
            "Batch EM, then Viterbi EM (which keeps only the clones the walk uses), then clones with the same future "
            "merged, from each restart's random start: the recipe of `chmm map`. It runs in the background; Cancel "
            "keeps the previous map.",
            className="hint",
        ),
        panels.MAP.buttons("Learn the map"),
        *panels.MAP.progress_bar(),
        panels.MAP.status_line(),
    )
    learned = ui.card(
        "The learned map",
        html.Div(id=ids.MAP_SUMMARY),
        html.Div(
            [
                ui.field(
                    "Colour clones",
                    dcc.RadioItems(
                        id=ids.MAP_COLOUR,
                        options=[
                            {"label": " by observation", "value": "observation"},
                            {"label": " by module (Infomap)", "value": "module"},
                        ],
                        value="observation",
                        inline=True,
                    ),
                ),
                ui.field(
                    "A click on a clone sets",
                    dcc.RadioItems(
                        id=ids.MAP_CLICK_SETS,
                        options=[
                            {"label": " the start", "value": "start"},
                            {"label": " the goal", "value": "goal"},
                            {"label": " closes it (a door)", "value": "close"},
                        ],
                        value="start",
                        inline=True,
                    ),
                    "and shows its place field; after a start the next click sets the goal; a click on a closed "
                    "clone opens it again",
                ),
                ui.field("Start", dcc.Dropdown(id=ids.MAP_ROUTE_START, options=[], placeholder="click a clone")),
                ui.field("Goal", dcc.Dropdown(id=ids.MAP_ROUTE_GOAL, options=[], placeholder="click a second clone")),
                ui.field(
                    "Closed clones",
                    dcc.Dropdown(id=ids.MAP_BLOCKED, options=[], multi=True, placeholder="none"),
                    "no move enters a closed clone: the route is planned again around it (the detour, dashed)",
                ),
            ],
            className="form-grid",
        ),
        html.Div(id=ids.MAP_ROUTE_TEXT),
        html.Div(id=ids.MAP_DETOUR_TEXT),
        html.Div(
            [
                html.Div(
                    cyto.Cytoscape(
                        id=ids.MAP_GRAPH,
                        elements=[],
                        layout={"name": "preset", "fit": True, "padding": 30},
                        stylesheet=BASE_STYLE,
                        style={"width": "100%", "height": "520px"},
                        minZoom=0.1,
                        maxZoom=6,
                    )
                ),
                html.Div(
                    [
                        dcc.Graph(
                            id=ids.MAP_FIELD, figure=figures.place_field_figure(None), config={"displaylogo": False}
                        ),
                        html.Div(id=ids.MAP_FIELD_NOTE, className="hint"),
                    ]
                ),
            ],
            className="two-columns",
        ),
        ui.buttons(
            html.Button("Download the map model (.npz)", id=ids.MAP_DOWNLOAD_MODEL, className="button"),
            html.Button("Download the map graph (GraphML)", id=ids.MAP_DOWNLOAD_GRAPHML, className="button"),
        ),
        html.Div(id=ids.MAP_EXPORT_MESSAGE),
        dcc.Download(id=ids.MAP_DOWNLOAD),
        dcc.Store(id=ids.MAP_VERSION, storage_type="memory", data=0),
        *panels.MAP.watchers(),
        dcc.Store(id=ids.MAP_ROUTE, storage_type="memory"),
        dcc.Store(id=ids.MAP_DETOUR, storage_type="memory"),
        dcc.Store(id=ids.MAP_SELECTED, storage_type="memory"),
    )
    return html.Div(
        [
            html.H2("Cognitive maps"),
            html.P(
                "A CHMM whose transitions depend on actions learns a map of a room from a walk in it (George et al., "
                "2021): each clone of an observation becomes one place. Type a room, learn, then click the clones.",
                className="intro",
            ),
            html.Div([room, learn], className="two-columns"),
            learned,
            schemas.schema_card(),
        ]
    )


# ------------------------------------------------------------------------------------------ input
@callback(
    Output(ids.MAP_ROOM_PREVIEW, "figure"),
    Output(ids.MAP_ROOM_MESSAGE, "children"),
    Input(ids.MAP_ROOM, "value"),
)
def show_room(content: str | None) -> tuple[Any, Any]:
    """The room as a coloured grid, or why it cannot be read (one sentence)."""
    try:
        room = maps.parse_room(content)
    except ui.EXPECTED_ERRORS as exc:
        return figures.empty_figure(note="No room to show."), ui.error_message(exc)
    preview = figures.room_figure(room.tolist(), list(maps.PALETTE), maps.WALL_COLOUR)
    cells = int((room >= 0).sum())
    return preview, ui.message(f"{cells} open cells, {len(set(room[room >= 0].tolist()))} observations.")


@callback(
    Output(ids.MAP_UPLOAD_MESSAGE, "children"),
    Output(ids.MAP_SOURCE, "value"),
    Output(ids.MAP_EVIDENCE_MESSAGE, "children"),
    Input(ids.MAP_UPLOAD, "contents"),
    State(ids.MAP_UPLOAD, "filename"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def upload_walk(contents: str | None, filename: str | None, session_id: str | None) -> tuple[Any, Any, Any]:
    """Keep the uploaded walk (learn from it next), forgetting the previous walk's likelihood file."""
    ui.require_click(contents)
    try:
        folder = sessions.session_folder(session_id)
        previous = map_uploads.evidence_info(folder)
        info = maps.store_walk_upload(folder, contents, filename)
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc), no_update, no_update
    forgot = f"The likelihood file {previous['name']} went with the previous walk." if previous else None
    return ui.message(maps.describe_upload(info), "ok"), "walk", forgot and ui.message(forgot)


@callback(
    Output(ids.MAP_EVIDENCE_MESSAGE, "children", allow_duplicate=True),
    Output(ids.MAP_SOURCE, "value", allow_duplicate=True),
    Input(ids.MAP_EVIDENCE_UPLOAD, "contents"),
    Input(ids.MAP_EVIDENCE_FORGET, "n_clicks"),
    State(ids.MAP_EVIDENCE_UPLOAD, "filename"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def upload_evidence(contents: str | None, forget: int | None, filename: str | None, session_id: str | None) -> Any:
    """Keep the uploaded walk's likelihood file, read as the engine reads it (the map of the uploaded walk is
    learned from it next), or forget it; a bad file is refused in one sentence."""
    forgetting = ctx.triggered_id == ids.MAP_EVIDENCE_FORGET
    ui.require_click(forget if forgetting else contents)
    try:
        folder = sessions.session_folder(session_id)
        if forgetting:
            gone = map_uploads.forget_evidence(folder)
            said = f"Forgot the likelihood file {gone['name']}." if gone else "There is no likelihood file to forget."
            return ui.message(said), no_update
        info = map_uploads.store_evidence_upload(folder, contents, filename)
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc), no_update
    return ui.message(map_uploads.describe_evidence(info), "ok"), "walk"


# ------------------------------------------------------------------------------------------ the job
def _queue(
    folder: Path, source: Any, room: Any, length: Any, clones: Any, seed: Any, restarts: Any, noise: Any
) -> None:
    """Check the map job's form and put the job into the server's queue (as the Train page does)."""
    maps.queue_map(folder, maps.check_request(folder, source, room, length, clones, seed, restarts, noise))


start = panels.MAP.register_start(
    _queue,
    State(ids.MAP_SOURCE, "value"),
    State(ids.MAP_ROOM, "value"),
    State(ids.MAP_LENGTH, "value"),
    State(ids.MAP_CLONES, "value"),
    State(ids.MAP_SEED, "value"),
    State(ids.MAP_RESTARTS, "value"),
    State(ids.MAP_NOISE, "value"),
)


def _map_job(folder: Path, ticket: Any, report: Any) -> dict[str, str]:
    """The job of a queued map whose turn has come: the map goes to the session folder, the page gets a key, a
    status and a message."""
    return maps.run_queued_map(folder, ticket, report=report)


learn, show_queued, show_running = panels.MAP.register(_map_job, "The map job stopped: {exc}.")


@callback(
    Output(panels.MAP.bar, "value"),
    Output(panels.MAP.label, "children"),
    Output(panels.MAP.status, "children", allow_duplicate=True),
    Input(panels.MAP.progress, "data"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def show_progress(record: dict[str, Any] | None, session_id: str | None) -> tuple[Any, Any, Any]:
    """The running job's stage, iteration and bits per step, as its background callback reports them, and the
    status line kept current (how the job ended instead, for a progress that arrives after it:
    :meth:`app.jobs.panel.JobPanel.ended_outcome`)."""
    if not record:
        return no_update, no_update, no_update
    value, label = maps.progress_of(record)
    status = figures.job_status("Learning the map", record, label)
    return panels.MAP.progress_outputs(session_id, record, (str(value), label), status)


@callback(
    Output(panels.MAP.status, "children"),
    Output(panels.MAP.bar, "value", allow_duplicate=True),
    Output(panels.MAP.label, "children", allow_duplicate=True),
    Output(ids.MAP_VERSION, "data"),
    Input(panels.MAP.result, "data"),
    prevent_initial_call=True,
)
def show_result(result: dict[str, str] | None) -> tuple[Any, Any, Any, Any]:
    """The job's message when it ends; a finished job's map is drawn (the map version changes)."""
    return panel.result_outputs(result)


cancel = panels.MAP.register_cancel(maps.request_cancel, lambda message: ("0", message))
"""Cancel: a waiting job leaves the queue, a running one gets its cancel flag; the previous map stays."""


@callback(
    Output(panels.MAP.bar, "value", allow_duplicate=True),
    Output(panels.MAP.label, "children", allow_duplicate=True),
    Input(ids.SESSION, "data"),
    State(panels.MAP.queued, "data"),
    prevent_initial_call="initial_duplicate",
)
def show_last_job(session_id: str | None, queued: dict[str, Any] | None) -> tuple[Any, Any]:
    """On opening the page: the latest map job (a job whose process died is said as failed), or its queue place."""
    try:
        folder = sessions.session_folder(session_id)
        died = maps.reap_dead_job(folder)
        record = maps.read_job(folder)
    except ui.EXPECTED_ERRORS as exc:
        return "0", services.describe_error(exc)
    if (queued or {}).get("state") in QUEUE_ACTIVE:
        return "0", queued.get("message", "")
    if died:
        return "0", died
    value, label = maps.progress_of(record)
    return str(value), label


def _followed(folder: Path, running: bool) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The map job's stage as the page shows it (its bar and label) and, once it has ended, how (its sentence) and
    the map version (changed when it finished, so that its map is drawn)."""
    record = maps.read_job(folder)
    value, label = maps.progress_of(record)
    if running:
        return (str(value), label), ()
    finished = (record or {}).get("status") == jobs.FINISHED
    return (str(value), label), (ui.outcome_message(record), time.time() if finished else no_update)


follow_job = panels.MAP.register_follow(
    maps.reap_dead_job,
    _followed,
    after=(Output(ids.MAP_VERSION, "data", allow_duplicate=True),),
    died_view=lambda _folder, died: ("0", died),
)


# ------------------------------------------------------------------------------------------ the map
@callback(
    Output(ids.MAP_GRAPH, "elements"),
    Output(ids.MAP_SUMMARY, "children"),
    Output(ids.MAP_ROUTE_START, "options"),
    Output(ids.MAP_ROUTE_GOAL, "options"),
    Output(ids.MAP_ROUTE_START, "value"),
    Output(ids.MAP_ROUTE_GOAL, "value"),
    Output(ids.MAP_SELECTED, "data"),
    Output(ids.MAP_BLOCKED, "options"),
    Output(ids.MAP_BLOCKED, "value"),
    Input(ids.SESSION, "data"),
    Input(ids.MAP_VERSION, "data"),
)
def show_map(session_id: str | None, _version: Any) -> tuple[Any, ...]:
    """The session's map: its clones and edges, what it learned in a sentence, and its clones to plan between."""
    try:
        view = maps.load_view(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS as exc:
        return [], ui.error_message(exc), [], [], None, None, None, [], []
    if view is None:
        return (
            [],
            ui.message("No map yet: type a room (or upload a walk) and press Learn the map."),
            [],
            [],
            None,
            None,
            None,
            [],
            [],
        )
    kind = "ok" if view.get("recovers_room") else "info"
    placed = (
        "Each clone sits at the mean place (row, column) of the steps the walk's most probable clone path spends on it."
        if view["layout"] == "room"
        else "The walk has no true places: the clones are laid out by a force layout."
    )
    summary = html.Div(
        [
            ui.message(maps.summary_sentence(view), kind),
            html.Div(
                f"{placed} Steps into a wall (staying on a clone) are not drawn. {maps.modules_sentence(view)}",
                className="hint",
            ),
        ]
    )
    options = maps.clone_options(view)
    return maps.map_elements(view), summary, options, options, None, None, None, options, []


@callback(
    Output(ids.MAP_SELECTED, "data", allow_duplicate=True),
    Output(ids.MAP_ROUTE_START, "value", allow_duplicate=True),
    Output(ids.MAP_ROUTE_GOAL, "value", allow_duplicate=True),
    Output(ids.MAP_CLICK_SETS, "value"),
    Output(ids.MAP_BLOCKED, "value", allow_duplicate=True),
    Input(ids.MAP_GRAPH, "tapNodeData"),
    State(ids.MAP_CLICK_SETS, "value"),
    State(ids.MAP_BLOCKED, "value"),
    prevent_initial_call=True,
)
def click_clone(node: dict[str, Any] | None, sets: str | None, closed: list[int] | None) -> tuple[Any, ...]:
    """A clicked clone: its place field is shown, and it becomes the start (then the next click sets the goal) or
    the goal; or, when clicks close clones, it is closed (opened again when it was)."""
    if not node or node.get("clone") is None:
        raise PreventUpdate
    clone = int(node["clone"])
    if sets == "close":
        shut = [c for c in (closed or []) if c != clone]
        return no_update, no_update, no_update, no_update, shut if len(shut) < len(closed or []) else [*shut, clone]
    if sets == "goal":
        return clone, no_update, clone, "start", no_update
    return clone, clone, no_update, "goal", no_update


@callback(
    Output(ids.MAP_FIELD, "figure"),
    Output(ids.MAP_FIELD_NOTE, "children"),
    Input(ids.MAP_SELECTED, "data"),
    State(ids.SESSION, "data"),
)
def show_field(clone: Any, session_id: str | None) -> tuple[Any, Any]:
    """The selected clone's place field: where in the room it is active (mean filtered probability per cell)."""
    if clone is None:
        return figures.place_field_figure(None), None
    try:
        field = maps.place_field(sessions.session_folder(session_id), clone)
    except ui.EXPECTED_ERRORS as exc:
        return figures.place_field_figure(None, services.describe_error(exc)), ui.error_message(exc)
    note = (
        f"Clone {field['clone']}: the mean probability of being on it given the walk so far, in each cell the walk "
        "visited (blank: never visited)."
    )
    return figures.place_field_figure(field), note


@callback(
    Output(ids.MAP_ROUTE, "data"),
    Output(ids.MAP_ROUTE_TEXT, "children"),
    Input(ids.MAP_ROUTE_START, "value"),
    Input(ids.MAP_ROUTE_GOAL, "value"),
    State(ids.SESSION, "data"),
)
def plan_route(start: Any, goal: Any, session_id: str | None) -> tuple[Any, Any]:
    """The route from the start clone to the goal, as actions, once both are picked."""
    if start is None or goal is None:
        hint = "Pick a start and a goal clone (click two clones on the map) to plan a route." if start is None else None
        return None, ui.message(hint or "Now pick the goal: click a second clone.")
    try:
        route = maps.plan_route(sessions.session_folder(session_id), start, goal)
    except ui.EXPECTED_ERRORS as exc:
        return None, ui.error_message(exc)
    return route["route"], html.Div(
        [html.Strong("Route: "), html.Span(route["text"], className="route-actions")], className="message message-ok"
    )


@callback(
    Output(ids.MAP_DETOUR, "data"),
    Output(ids.MAP_DETOUR_TEXT, "children"),
    Input(ids.MAP_ROUTE_START, "value"),
    Input(ids.MAP_ROUTE_GOAL, "value"),
    Input(ids.MAP_BLOCKED, "value"),
    State(ids.SESSION, "data"),
)
def plan_detour(start: Any, goal: Any, closed: list[int] | None, session_id: str | None) -> tuple[Any, Any]:
    """The route planned again with the closed clones blocked (every way into them), once a start, a goal and a
    closed clone are picked."""
    if start is None or goal is None or not closed:
        return None, None
    try:
        detour = map_routes.plan_detour(sessions.session_folder(session_id), start, goal, closed)
    except ui.EXPECTED_ERRORS as exc:
        return None, ui.error_message(exc)
    if detour is None:
        return None, None
    return detour["route"], html.Div(
        [html.Strong("Detour: "), html.Span(detour["text"], className="route-actions")], className="message message-ok"
    )


@callback(
    Output(ids.MAP_GRAPH, "stylesheet"),
    Input(ids.MAP_COLOUR, "value"),
    Input(ids.MAP_ROUTE, "data"),
    Input(ids.MAP_SELECTED, "data"),
    Input(ids.MAP_DETOUR, "data"),
    Input(ids.MAP_BLOCKED, "value"),
)
def style_map(
    colour: str | None, route: list[int] | None, selected: Any, detour: list[int] | None, closed: list[int] | None
) -> list[dict[str, Any]]:
    """Clones coloured by observation or by Infomap module; the planned route, its detour around the closed clones,
    the closed clones and the selected clone marked."""
    field = "module_colour" if colour == "module" else "obs_colour"
    rules = [*BASE_STYLE, {"selector": "node", "style": {"background-color": f"data({field})"}}]
    nodes, edges = maps.route_elements(route)
    for node in nodes:
        rules.append({"selector": f"#{node}", "style": {"border-width": 4, "border-color": ROUTE_COLOUR}})
    for edge in edges:
        rules.append({"selector": f"#{edge}", "style": {"line-color": ROUTE_COLOUR, "width": 6, "opacity": 1}})
    nodes, edges = maps.route_elements(detour)
    for edge in edges:
        rules.append(
            {"selector": f"#{edge}", "style": {"line-color": DETOUR_COLOUR, "line-style": "dashed", "width": 5}}
        )
    for clone in closed or []:
        rules.append(
            {"selector": f"#c{int(clone)}", "style": {"shape": "rectangle", "background-color": DETOUR_COLOUR,
                                                       "color": "#fff"}}
        )  # fmt: skip
    if selected is not None:
        rules.append({"selector": f"#c{int(selected)}", "style": {"width": 34, "height": 34, "font-weight": "bold"}})
    return rules


# ------------------------------------------------------------------------------------------ exports
@callback(
    Output(ids.MAP_DOWNLOAD, "data"),
    Output(ids.MAP_EXPORT_MESSAGE, "children"),
    Input(ids.MAP_DOWNLOAD_MODEL, "n_clicks"),
    Input(ids.MAP_DOWNLOAD_GRAPHML, "n_clicks"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def download(model_clicks: int | None, graph_clicks: int | None, session_id: str | None) -> tuple[Any, Any]:
    """The map's model file (.npz, loadable with engine.cognitive.actions.load) or its clone graph as GraphML."""
    ui.require_click(model_clicks if ctx.triggered_id == ids.MAP_DOWNLOAD_MODEL else graph_clicks)
    try:
        folder = sessions.session_folder(session_id)
        if ctx.triggered_id == ids.MAP_DOWNLOAD_MODEL:
            path, name = maps.model_file(folder)
            return dcc.send_file(str(path), filename=name), ui.message(f"Downloading {name}.", "ok")
        content, name = maps.graphml(folder)
    except ui.EXPECTED_ERRORS as exc:
        return no_update, ui.error_message(exc)
    return dcc.send_string(content, name), ui.message(f"Downloading {name}.", "ok")
