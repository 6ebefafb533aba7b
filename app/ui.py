"""Small layout helpers shared by the pages (messages, cards, labelled fields)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dash import ClientsideFunction, Input, Output, State, callback, clientside_callback, dcc, html, no_update
from dash.exceptions import PreventUpdate

from app import config, ids, jobs, memory, sessions
from app.errors import UserError, describe_error
from engine.errors import CHMMError

# errors a callback turns into a message in the page (anything else is a bug and goes to the Dash error log)
EXPECTED_ERRORS = (UserError, sessions.SessionError, CHMMError, OSError)
ANSWER_POLL_MS = 250
"""How often the page asks for the answer of a background callback a person waits on (Dash's default: each second,
half a second lost on average after the Infomap run, the whole graph's drawing or its filter)."""


@contextmanager
def request_job(folder: Path, what: str, advice: str = "try a shorter text or a smaller model.") -> Iterator[None]:
    """The body of a scoring, decoding or prune-sweep callback, which runs as a background job (never in a web
    worker: on a 24,000-state model a sweep drove a worker to the OOM killer and a score ran into gunicorn's 120 s):
    a job process (:func:`jobs.job_process`) stopped after :func:`config.max_request_seconds` or past the
    memory limit per job (:func:`config.max_job_bytes`), either of which it then says as a :class:`UserError`. A body
    that cannot be stopped so (C code that holds the GIL) is killed by its sentinel, which leaves the sentence in
    the session's notice (``folder``, :func:`jobs.read_notice`) for the shell to show, ``what`` (e.g.
    "Scoring") naming the job in it."""
    sessions.check_disk(what)  # on a full disk its answer could not be stored: said at once instead
    limit = config.max_request_seconds()
    notice = (folder / sessions.NOTICE, f"{what} stopped: {{cause}}; {advice}")
    held = memory.job_room()  # reserved by the web worker before it forked this job (before its sentinel starts)
    try:
        with jobs.job_process(time_limit=limit, notice=notice):
            yield
    except jobs.JobTimeout:
        raise UserError(
            f"This stopped after {limit:g} s, the server's limit for one request (CHMM_MAX_REQUEST_SECONDS); {advice}"
        ) from None
    except jobs.JobMemoryError as exc:
        raise UserError(f"This stopped: {exc}; {advice}") from None
    except MemoryError:  # the machine's memory (the model being read, for instance): not the model's fault
        raise UserError(f"This ran out of the server's memory; {advice}") from None
    finally:
        held.release()


def queue_start(enter: Callable[[], tuple[Any, Any]]) -> tuple[Any, Any]:
    """The (queue view, go) pair of a Start button that queues a job (training, comparison, map): ``enter`` checks
    the job, puts its ticket into the server's queue and returns the queue's view and, when its turn has come at
    once, the job's go; a refusal (the server busy, or a bad setting) becomes the view ``refused`` with its sentence."""
    try:
        view, go = enter()
    except jobs.QueueFull as exc:
        return {"state": "refused", "message": str(exc)}, no_update
    except EXPECTED_ERRORS as exc:
        return {"state": "refused", "message": describe_error(exc)}, no_update
    return view, go or no_update


def session_action(
    said: Output, stamp: Output, trigger: Input, act: Callable[..., str], *states: State
) -> Callable[..., tuple[Any, Any]]:
    """Register the callback of a button or an upload that changes the session: when ``trigger`` fires (a click, an
    upload's contents), ``act(session folder, trigger's value, *the states' values)`` does it and returns its
    sentence, said in ``said`` (a refusal in one sentence, as an error), and ``stamp`` is stamped with the time when
    it worked (a version that the pages which show what it changed follow)."""

    @callback(said, stamp, trigger, *states, State(ids.SESSION, "data"), prevent_initial_call=True)
    def action(value: Any, *rest: Any) -> tuple[Any, Any]:
        *values, session_id = rest
        require_click(value)
        try:
            text = act(sessions.session_folder(session_id), value, *values)
        except EXPECTED_ERRORS as exc:
            return error_message(exc), no_update
        return message(text, "ok"), time.time()

    return action


def message(text: str, kind: str = "info") -> html.Div:
    """A one-line message box; ``kind`` is info, ok or error (styled in assets/style.css)."""
    return html.Div(text, className=f"message message-{kind}", role="alert" if kind == "error" else "status")


def outcome_message(outcome: dict[str, Any] | None) -> html.Div:
    """How a job ended (its result or its record: ``status`` and ``message``) in a message box: ok when it finished,
    info when it was cancelled, an error otherwise."""
    outcome = outcome or {}
    kind = {jobs.FINISHED: "ok", jobs.CANCELLED: "info"}.get(outcome.get("status", ""), "error")
    return message(outcome.get("message", ""), kind)


def error_message(exc: BaseException) -> html.Div:
    return message(describe_error(exc), "error")


MODEL_DOWNLOAD_NAME = "chmm-model.npz"
"""The name the browser saves the current model under."""


def send_current_model(clicks: int | None, session_id: str | None) -> tuple[Any, Any]:
    """The (download link, message) pair of a "download the current model" button: a link that streams the
    session's current model file from disk (:func:`app.sessions.download_link`: never base64 in a callback's
    answer), or an error message (and no link)."""
    require_click(clicks)
    try:
        folder = sessions.session_folder(session_id)
        path = sessions.current_model_path(folder)
        if not path.is_file():
            raise UserError("This session has no model to download yet.")
    except EXPECTED_ERRORS as exc:
        return no_update, error_message(exc)
    return sessions.download_link(folder, path, MODEL_DOWNLOAD_NAME), no_update


def start_downloads(store: str) -> None:
    """Register, once per page module, the browser's start of a download whenever the store ``store`` (a
    ``dcc.Store`` in the page) is given a download link (:func:`app.sessions.download_link`): the file is streamed
    by its route (``assets/downloads.js``)."""
    clientside_callback(
        ClientsideFunction("chmm", "startDownload"),
        Output(store, "clear_data"),
        Input(store, "data"),
        prevent_initial_call=True,
    )


def told_upload(upload: Any, kind: str, limit: int, message: str, remedy: str = "") -> html.Div:
    """``upload`` (a ``dcc.Upload``) in a wrapper that ``assets/upload_limit.js`` reads: when a file is chosen or
    dropped, the browser says at once in the box ``message`` why a file over ``limit`` bytes, the limit of uploads of
    ``kind`` (:data:`app.transfers.UPLOAD_LIMITS`), is refused (the server's sentence, ending with ``remedy``), or else
    sends it through the upload route with its progress and then hands the upload its reference as ``contents``: the
    file never travels in a callback's body."""
    attributes = {
        "data-upload-limit": str(int(limit)),
        "data-upload-message": message,
        "data-upload-remedy": remedy,
        "data-upload-kind": kind,
        "data-upload-target": upload.id,
        "data-upload-multiple": "true" if getattr(upload, "multiple", False) else "false",
    }
    return html.Div(upload, className="told-upload", **attributes)


def card(title: str, *children: Any, **kwargs: Any) -> html.Section:
    return html.Section([html.H3(title), *children], className="card", **kwargs)


def buttons(*children: Any) -> html.Div:
    """A row of buttons (and the controls or hints that go with them), as every page lays them out."""
    return html.Div(list(children), className="buttons")


def field(label: str, control: Any, help_text: str | None = None) -> html.Div:
    """A labelled form control with an optional hint underneath."""
    parts: list[Any] = [html.Label(label, className="field-label"), control]
    if help_text:
        parts.append(html.Div(help_text, className="field-help"))
    return html.Div(parts, className="field")


def choice(label: str, component_id: str, choices: dict[Any, str], value: Any, width: str = "10em") -> html.Div:
    """A labelled dropdown of ``choices`` (value -> what the option says, in order), ``value`` chosen, never empty."""
    options = [{"label": said, "value": key} for key, said in choices.items()]
    control = dcc.Dropdown(id=component_id, options=options, value=value, clearable=False, style={"minWidth": width})
    return field(label, control)


def facts(rows: list[tuple[str, Any]]) -> html.Table:
    """A two-column table of label/value facts; rows whose value is None are left out."""
    return html.Table(
        html.Tbody([html.Tr([html.Th(k), html.Td(v)]) for k, v in rows if v is not None]), className="facts"
    )


def bps(value: float | None) -> str | None:
    return None if value is None else f"{value:.4f}"


def require_click(value: Any) -> None:
    """Stop a callback that Dash fires without a user action: opening a page inserts its buttons and upload fields,
    and Dash may then call their callbacks (prevent_initial_call notwithstanding) with n_clicks or contents None.
    An action (undo, prune, load, cancel, ...) must only ever run on a real click or upload."""
    if not value:
        raise PreventUpdate
