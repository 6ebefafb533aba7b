"""The CHMM Explorer Dash app.

``app`` is built at import; ``server = app.server`` is the WSGI entry point, so several workers can serve it::

    gunicorn app.main:server --workers 2 --bind 0.0.0.0:8050 --timeout 120

Training runs as a Dash background callback: with the default :class:`dash.DiskcacheManager` (a cache folder
under ``CHMM_DATA_DIR``, no server needed) each job is a separate process; with ``REDIS_URL`` set, a
:class:`dash.CeleryManager` over Redis queues the jobs for Celery workers (``celery -A app.main:celery_app worker``).
The web process never imports CuPy (a GPU job imports it). A job that must wait for a place (``CHMM_MAX_JOBS``) waits
as a ticket, not as a process: the shell's queue polling (:func:`tend_queue`) starts its background callback when its
turn comes (:class:`app.jobs.JobSlot`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import dash
from dash import Dash, Input, Output, State, dcc, html, no_update

from app import config, ids, jobs, panels, services, sessions, transfers, ui
from app.jobs import panel
from app.services import models as model_service
from app.services import training_jobs

PAGES = Path(__file__).resolve().parent / "pages"
BACKGROUND_CACHE = ".background-cache"
MODEL_WATCH_MS = 2000
"""How often a tab checks whether its session's current model was replaced (one file stat)."""
QUEUE_WATCH_MS = 1000
"""How often a tab whose job waits for a place asks whether its turn has come (only while one waits)."""


def background_manager() -> tuple[Any, Any]:
    """The background callback manager and, with ``REDIS_URL``, the Celery app (else None)."""
    url = config.redis_url()
    if url:
        from celery import Celery  # only needed with Redis; install with pip install "celery[redis]"

        celery = Celery(__name__, broker=url, backend=url)
        return dash.CeleryManager(celery), celery
    root = config.data_dir()
    root.mkdir(parents=True, exist_ok=True)
    return jobs.diskcache_manager(root / BACKGROUND_CACHE), None


def navigation() -> html.Nav:
    pages = sorted(dash.page_registry.values(), key=lambda page: page.get("order") or 0)
    links = [dcc.Link(page["name"], href=page["relative_path"], className="nav-link") for page in pages]
    return html.Nav(
        [
            html.Span("CHMM Explorer", className="brand"),
            *links,
            html.Span(
                [html.Span(id=ids.JOB_BADGE, className="job-badge"), html.Span(id=ids.MODEL_BADGE, className="badge")],
                className="nav-right",
            ),
        ],
        id=ids.NAV,
        className="nav",
    )


def serve_layout() -> html.Div:
    """The app shell, built per page load: a fresh session id is issued here; a tab that already has one (kept
    in the browser's sessionStorage) keeps it, since a session ``dcc.Store`` prefers the stored value."""
    return html.Div(
        [
            dcc.Store(id=ids.SESSION, storage_type="session", data=sessions.new_session_id()),
            dcc.Store(id=ids.MODEL_VERSION, storage_type="memory", data=0),
            dcc.Store(id=ids.MODEL_STAMP, storage_type="memory"),
            # the Train, Compare and Maps pages' background jobs report here, in the shell, so that leaving the page
            # mid-job leaves the renderer with components to update (and the page, opened again, reads them); a job
            # waiting for a place is a ticket that this tab keeps alive and starts when its turn comes (app.jobs.panel)
            *(store for job_panel in panels.PANELS for store in job_panel.stores()),
            dcc.Interval(id=ids.QUEUE_WATCH, interval=QUEUE_WATCH_MS, disabled=True),
            dcc.Interval(id=ids.MODEL_WATCH, interval=MODEL_WATCH_MS),
            dcc.Store(id=ids.NOTICE_SHOWN, storage_type="memory"),
            dcc.Store(id=ids.WATCH_SEEN, storage_type="memory"),
            navigation(),
            html.Div(id=ids.NOTICE, className="notice"),
            html.Main(dash.page_container, className="page"),
        ]
    )


def create_app() -> tuple[Dash, Any]:
    """Build the Dash app (pages from ``app/pages``), clean expired session folders and sweep the temporary files
    that jobs killed mid-write left in the others (:func:`app.jobs.sweep_temporary`)."""
    sessions.cleanup_sessions()
    for folder in sessions.session_folders():
        jobs.sweep_temporary(folder)
        transfers.uploads_expired(folder)
    manager, celery = background_manager()
    dash_app = Dash(
        "app",  # the package: pages are imported as app.pages.<name>
        use_pages=True,
        pages_folder=str(PAGES),
        assets_folder=str(config.ASSETS),
        background_callback_manager=manager,
        title="CHMM Explorer",
        update_title=None,
    )
    dash_app.layout = serve_layout
    transfers.install(dash_app.server)  # files by routes of their own; every other body capped before it is read
    # every request collects the worker's ended job processes, so none stays a zombie until a page polls (the load
    # bench's clients, which never poll, left 7 behind)
    dash_app.server.before_request(jobs.reap_finished_children)
    page_layouts = [
        page["layout"]() if callable(page["layout"]) else page["layout"] for page in dash.page_registry.values()
    ]
    dash_app.validation_layout = html.Div([serve_layout(), *page_layouts])
    return dash_app, celery


WATCH_REFRESH_S = 30.0
"""However quiet the session's folder, the watch looks again this often (a job whose heartbeat stopped changes no
file; its badge goes within this)."""


def session_change(folder: Any) -> str:
    """One stat that says whether anything the watch shows may have changed: the session folder's modification time
    (every model install, job record, notice and progress is written by a rename into it), the disk's state and the
    time in :data:`WATCH_REFRESH_S` buckets."""
    full = sessions.disk_full() is not None
    return f"{folder.stat().st_mtime_ns}:{full}:{int(time.time() // WATCH_REFRESH_S)}"


@dash.callback(
    Output(ids.MODEL_STAMP, "data"),
    Output(ids.MODEL_VERSION, "data", allow_duplicate=True),
    Output(ids.NOTICE, "children"),
    Output(ids.NOTICE_SHOWN, "data"),
    Output(ids.JOB_BADGE, "children", allow_duplicate=True),
    Output(ids.WATCH_SEEN, "data"),
    Input(ids.MODEL_WATCH, "n_intervals"),
    State(ids.SESSION, "data"),
    State(ids.MODEL_STAMP, "data"),
    State(ids.NOTICE_SHOWN, "data"),
    State(ids.WATCH_SEEN, "data"),
    prevent_initial_call=True,
)
def watch_session(
    ticks: int | None, session_id: str | None, stamp: Any, shown: float | None, seen: str | None
) -> tuple[Any, ...]:
    """The tab's one question every few seconds, answered with one stat when nothing changed
    (:func:`session_change`): else whether the current model was replaced (:func:`watch_model`), the session's
    notice (:func:`show_notice`) and its running jobs (:func:`running_jobs`)."""
    jobs.reap_finished_children()  # a cancelled job's process is not left a zombie until the next job
    quiet = (no_update,) * 6
    try:
        folder = sessions.session_folder(session_id)
        change = session_change(folder)
    except ui.EXPECTED_ERRORS:
        return quiet
    if change == seen:
        return quiet
    return (*watch_model(ticks, session_id, stamp), *show_notice(ticks, session_id, shown),
            running_jobs(session_id), change)  # fmt: skip


def watch_model(_ticks: int | None, session_id: str | None, stamp: Any) -> tuple[Any, Any]:
    """When the session's current model file was replaced (a training job that finished while its page was closed,
    another tab): its new stamp, and a new model version, so that the badge and the open page follow."""
    try:
        now = sessions.model_stamp(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS:
        return no_update, no_update
    if now == stamp:
        return no_update, no_update
    return now, (time.time() if stamp is not None else no_update)


def show_notice(_ticks: int | None, session_id: str | None, shown: float | None) -> tuple[Any, Any]:
    """The session's notice (a request job that its sentinel had to kill, and why) above the page, for
    :data:`jobs.NOTICE_SHOWN_S` seconds; the request's own callback could not say it, its process being gone. While
    the server's disk is full (:func:`sessions.disk_full`), that instead: no job or request can store its answer
    then."""
    try:
        notice = jobs.read_notice(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS:
        return no_update, no_update
    full = sessions.disk_full()  # no job or request can store its answer then: every page says it instead
    if full is not None:
        notice = {"time": "disk full", "message": full}
    stamp = notice["time"] if notice else None
    if stamp == shown:
        return no_update, no_update
    return (ui.message(notice["message"], "error") if notice else None), stamp


@dash.callback(
    *(Output(store, "data") for job_panel in panels.PANELS for store in (job_panel.queued, job_panel.go)),
    Input(ids.QUEUE_WATCH, "n_intervals"),
    Input(ids.SESSION, "data"),
    *(State(job_panel.queued, "data") for job_panel in panels.PANELS),
)
def tend_queue(_ticks: int | None, session_id: str | None, *shown: dict[str, Any] | None) -> tuple[Any, ...]:
    """Every second while a job of this tab waits for a place, and once when the tab opens (which finds a job the
    session left waiting before a reload): keep its ticket alive, show its place, and start it when its turn has
    come, by setting the store its background callback listens to (:class:`app.jobs.JobSlot`: waiting jobs
    hold no process)."""
    try:
        folder = sessions.session_folder(session_id)
    except ui.EXPECTED_ERRORS:
        return (no_update,) * (2 * len(panels.PANELS))
    outputs: list[Any] = []
    for job_panel, before in zip(panels.PANELS, shown, strict=True):
        view, go = job_panel.kind.queue_view(folder, before)
        if view and before and before.get("note") and view.get("state") in ("waiting", "starting"):
            view = view | {"note": before["note"]}  # e.g. that no Celery worker runs
        outputs += [no_update if view == before else view, go or no_update]
    return tuple(outputs)


@dash.callback(
    Output(ids.QUEUE_WATCH, "disabled"),
    *(Input(job_panel.queued, "data") for job_panel in panels.PANELS),
)
def watch_queue(*views: dict[str, Any] | None) -> bool:
    """The queue's polling runs only while a job of this tab waits for a place or starts."""
    return not any((view or {}).get("state") in panel.QUEUE_ACTIVE for view in views)


@dash.callback(
    Output(ids.JOB_BADGE, "children"),
    Input(ids.SESSION, "data"),
    Input(ids.MODEL_VERSION, "data"),
    Input(panels.TRAINING.flag, "data"),
    Input(panels.COMPARISON.flag, "data"),
)
def show_running_jobs(session_id: str | None, *_changes: Any) -> Any:
    """On every page, when a job of this tab starts or ends (and with the tab's watch, :func:`watch_session`): the
    session's running training or comparison, linking to its page."""
    return running_jobs(session_id)


def running_jobs(session_id: str | None) -> Any:
    """The session's running training or comparison, as links to its page (None when none runs)."""
    try:
        running = training_jobs.running_summary(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS:
        return None
    return [dcc.Link(text, href=href, className="job-link") for text, href in running] or None


@dash.callback(Output(ids.MODEL_BADGE, "children"), Input(ids.SESSION, "data"), Input(ids.MODEL_VERSION, "data"))
def show_model_badge(session_id: str | None, _version: Any) -> str:
    """The current model in one line, in the navigation bar."""
    try:
        summary = model_service.model_summary(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS as exc:
        return services.describe_error(exc)
    if summary is None:
        return "no model yet"
    name = services.file_name(summary.get("corpus"))  # a path's last part (a model opened with --model)
    corpus = f" · {name}" if name else ""
    pruned = summary.get("pruned") or {}
    if pruned:
        rule = f"at {pruned['threshold']:.2g}" if pruned.get("threshold") is not None else "by rule"
        corpus += f" · pruned {rule} ({pruned.get('kept_fraction', 1.0):.1%} kept)"
    return f"current model: {summary['states']:,} states, {summary['alphabet_size']} symbols{corpus}"


app, celery_app = create_app()
server = app.server
