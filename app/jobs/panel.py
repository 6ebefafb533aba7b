"""The job panel: what a page that runs a queued background job (the Train, Compare and Maps pages; the Maps page has
two: the map and its schema match) does with its Start and Cancel buttons, its status line and its progress label,
written once (:class:`JobPanel`).

A panel is built from a job kind (:class:`app.jobs.kinds.JobKind`) alone: its component ids are the kind's name and
each part's word (:data:`PARTS`). Its state lives in the app shell (:meth:`JobPanel.stores`), so that a job started
on a page goes on, and reports, while another page is open:

* ``flag``: whether this tab's job runs (the background callback's ``running=``);
* ``progress``: what the running job reported last (its ``progress=``);
* ``result``: what it returned when it ended;
* ``queued``: the session's job in the server's queue (:data:`app.jobs.QueueView`: its place, "starting", or why
  it was refused or dropped), kept by the shell's one-second poll (``main.tend_queue``);
* ``go``: set by that poll when the job's turn has come, which starts the background callback.

The panel registers the callbacks every such page shares, each page mounting them with its own form and views:
Start (:meth:`JobPanel.register_start`: check, queue, the queue's view), the background job itself
(:meth:`JobPanel.register`: the kind's job in a job process, :func:`app.jobs.job_process`, with Dash's ``running=``,
``progress=`` and ``cancel=``; the queue's place in the status line; Start and Cancel enabled by turns), Cancel
(:meth:`JobPanel.register_cancel`) and the following of a job started in another tab
(:meth:`JobPanel.register_follow`); and its layout: the buttons (:meth:`JobPanel.buttons`) and the progress bar
(:meth:`JobPanel.progress_bar`). What a page shows of its job's progress and result stays on the page."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dash import Input, Output, State, callback, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from app import ids, sessions, ui
from app.errors import describe_error
from app.jobs import FAILED, FINISHED, REFUSED, RUNNING, JobMemoryError, job_process
from app.jobs.kinds import JobKind

QUEUE_ACTIVE = ("waiting", "starting")
FOLLOW_MS = 1000
"""How often a page follows a job of its kind that it did not start (another tab's) while one runs."""
IDLE_FOLLOW_MS = 10_000
"""How often an idle page looks for a job of its kind that another tab started, or one that died (its pages' watch
intervals start at :data:`FOLLOW_MS`, so that a page opened again mid-job follows it at once, and come here at the
first look that finds nothing running)."""
"""The states of a job in the queue (:data:`app.jobs.QueueView`) during which Start waits and Cancel works."""

Report = Callable[[dict[str, Any]], None]
JobBody = Callable[[Path, Any, Report], dict[str, Any]]
"""The kind's job: ``(session folder, started ticket's name, report)`` to what the page gets when it ends (a dict
with ``status`` and ``message``; never a model)."""


PARTS = {
    "start": "start", "cancel": "cancel", "status": "status", "bar": "progress", "label": "progress-label",
    "flag": "running", "progress": "reported", "result": "result", "queued": "queued", "go": "go", "watch": "watch",
    "watch_state": "watch-state",
}  # fmt: skip
"""A panel's parts and the word each one's component id adds to its kind's name (:meth:`JobPanel.part`)."""


@dataclass(frozen=True)
class JobPanel:
    """One page's job panel, made from the ``kind`` of its job alone: every component id is the kind's name and
    the part's word (:data:`PARTS`; the Train page's Start button is ``training-start``). Its buttons (``start``,
    ``cancel``), where it says the queue's sentences (``status``, and ``label`` under its progress ``bar``), its
    state in the app shell (``flag``, ``progress``, ``result``, ``queued``, ``go``; see the module docstring) and the
    page's follow of a job another tab started (``watch``, an interval, and ``watch_state``, whether it follows one).

    The panel's callbacks are registered per kind with these string ids, not once with ``MATCH`` over ids made of
    dicts: Dash refuses pattern-matching ids in a background callback's ``progress=`` and ``cancel=``
    (``WildcardInLongCallback``), and the Cancel button and the progress store are the job's own."""

    kind: JobKind
    keyed: bool = True
    """Whether the job's result carries its key (an empty one when the job never began)."""

    def part(self, name: str) -> str:
        """The component id of the panel's part ``name`` (a key of :data:`PARTS`)."""
        return f"{self.kind.name}-{PARTS[name]}"

    start = property(lambda self: self.part("start"))
    cancel = property(lambda self: self.part("cancel"))
    status = property(lambda self: self.part("status"))
    bar = property(lambda self: self.part("bar"))
    label = property(lambda self: self.part("label"))
    flag = property(lambda self: self.part("flag"))
    progress = property(lambda self: self.part("progress"))
    result = property(lambda self: self.part("result"))
    queued = property(lambda self: self.part("queued"))
    go = property(lambda self: self.part("go"))
    watch = property(lambda self: self.part("watch"))
    watch_state = property(lambda self: self.part("watch_state"))

    def status_line(self) -> html.Div:
        """The status line, for the page's layout."""
        return html.Div(id=self.status)

    def watchers(self, state: bool = True) -> list[Any]:
        """The page's follow of a job another tab started (:meth:`register_follow`): its interval, starting at
        :data:`FOLLOW_MS`, and (with ``state``) whether it follows one, for the page's layout."""
        interval = dcc.Interval(id=self.watch, interval=FOLLOW_MS)
        return [interval, dcc.Store(id=self.watch_state, storage_type="memory", data=False)] if state else [interval]

    def buttons(self, start_label: str) -> html.Div:
        """Start (named ``start_label``) and Cancel, for the page's layout (Cancel works while a job runs or
        waits: :meth:`register` gives them by turns)."""
        return ui.buttons(
            html.Button(start_label, id=self.start, className="button primary"),
            html.Button("Cancel", id=self.cancel, className="button", disabled=True),
        )

    def progress_bar(self) -> list[Any]:
        """The progress bar and its label, for the page's layout."""
        return [
            html.Progress(id=self.bar, value="0", max="100", className="progress"),
            html.Div(id=self.label, className="hint"),
        ]

    def stores(self) -> list[dcc.Store]:
        """The panel's state, for the app shell (see the module docstring)."""
        return [
            dcc.Store(id=self.flag, storage_type="memory", data=False),
            dcc.Store(id=self.progress, storage_type="memory"),
            dcc.Store(id=self.result, storage_type="memory"),
            dcc.Store(id=self.queued, storage_type="memory"),
            dcc.Store(id=self.go, storage_type="memory"),
        ]

    def outcome(self, status: str, message: str) -> dict[str, str]:
        """What the page gets of a job that ended before its kind's job body ran, or outside it."""
        return ({"key": ""} if self.keyed else {}) | {"status": status, "message": message}

    def register(self, job: JobBody, stopped: str) -> tuple[Callable[..., Any], ...]:
        """Register the panel's callbacks: the background job running ``job`` (``stopped``, with ``{exc}``, is its
        sentence when it passes the memory limit outside the kind's own handlers), the queue's view and the
        buttons; returns them (``run``, ``show_queued``, ``show_running``), for the page to name."""
        return self._register_run(job, stopped), self._register_queued(), self._register_running()

    def register_start(
        self, queue: Callable[..., Any], *states: State, note: Callable[[], str | None] | None = None
    ) -> Callable[..., tuple[Any, Any]]:
        """Register the Start button's callback: in the web worker, ``queue(session folder, *the states' values)``
        checks the job and puts it into the server's queue (a ticket, not a process; see :class:`app.jobs.JobSlot`);
        it starts at once when a place is free and nobody waits, else when the app shell's polling
        (``main.tend_queue``) finds its turn has come. A refusal says why in one sentence (:func:`ui.queue_start`).
        ``note``, when it says something, is added to a view that was not refused (e.g. that no worker runs)."""

        @callback(
            Output(self.queued, "data", allow_duplicate=True),
            Output(self.go, "data", allow_duplicate=True),
            Input(self.start, "n_clicks"),
            State(ids.SESSION, "data"),
            *states,
            prevent_initial_call=True,
        )
        def start(_clicks: int | None, session_id: str | None, *values: Any) -> tuple[Any, Any]:
            ui.require_click(_clicks)

            def enter() -> tuple[Any, Any]:
                folder = sessions.session_folder(session_id)
                queue(folder, *values)
                return self.kind.queue_view(folder, None)

            view, go = ui.queue_start(enter)
            said = note() if note is not None else None
            if said and view and view.get("state") != "refused":
                view = view | {"note": said}
            return view, go

        return start

    def ended_outcome(self, session_id: str | None, progress: dict[str, Any]) -> Any:
        """How the job whose ``progress`` just reached the page ended, as the status line's message, when the
        session's record of the kind says it has ended (None while it runs, or for another job's record). A
        progress answered just before a Cancel killed the job reaches the page after the Cancel's answer; its
        running stage ("Training for 3.0 s: restart 1 of 4.") then stood for good, the killed job sending nothing
        more (a CI run)."""
        try:
            record = self.kind.read(sessions.session_folder(session_id))
        except ui.EXPECTED_ERRORS:
            return None
        if not record or record.get("status") in (None, RUNNING):
            return None
        if record.get("key") and progress.get("key") and record["key"] != progress["key"]:
            return None
        return ui.outcome_message(record)

    def progress_outputs(
        self, session_id: str | None, progress: dict[str, Any], shown: tuple[Any, ...], status: str | None
    ) -> tuple[Any, ...]:
        """A page's outputs for a running job's ``progress``: ``shown`` (the bar, its label, ...) and the status
        line ``status`` (left as it is when None); once the job has ended (:meth:`ended_outcome`), nothing of
        ``shown`` and how the job ended in the status line."""
        if status is None:
            return (*shown, no_update)
        ended = self.ended_outcome(session_id, progress)
        return (*(no_update,) * len(shown), ended) if ended is not None else (*shown, ui.message(status))

    def register_cancel(
        self, request_cancel: Callable[[Path], str], reset: Callable[[str], tuple[str, str] | None] | None = None
    ) -> Callable[..., Any]:
        """Register the Cancel button's callback: ``request_cancel`` (the kind's: a waiting job leaves the queue, a
        running one gets its cancel flag; it returns the sentence to show) and the queue's view cleared. With
        ``reset``, the progress bar and its label are reset to ``reset(sentence)`` (a value and a label; None leaves
        them), so that the cancelled run's last progress does not stay on the page."""
        outputs = [Output(self.status, "children", allow_duplicate=True)]
        if reset is not None:
            outputs += [
                Output(self.bar, "value", allow_duplicate=True),
                Output(self.label, "children", allow_duplicate=True),
            ]
        outputs.append(Output(self.queued, "data", allow_duplicate=True))
        resets = 2 if reset is not None else 0

        @callback(*outputs, Input(self.cancel, "n_clicks"), State(ids.SESSION, "data"), prevent_initial_call=True)
        def cancel(_clicks: int | None, session_id: str | None) -> tuple[Any, ...]:
            """Take a waiting job out of the queue, or raise the cancel flag of a running one (its job stops within
            an iteration even where it cannot be killed), and say so."""
            ui.require_click(_clicks)
            try:
                message = request_cancel(sessions.session_folder(session_id))
            except ui.EXPECTED_ERRORS as exc:
                return (ui.error_message(exc), *(no_update,) * resets, no_update)
            shown = (reset(message) if reset is not None else None) if resets else ()
            return (ui.message(message), *(shown or (no_update,) * resets), None)

        return cancel

    def register_follow(
        self,
        reap: Callable[[Path], str | None],
        view: Callable[[Path, bool], tuple[tuple[Any, ...], tuple[Any, ...]]],
        shown: tuple[Output, ...] = (),
        after: tuple[Output, ...] = (),
        died_view: Callable[[Path, str], tuple[Any, ...]] | None = None,
    ) -> Callable[..., tuple[Any, ...]]:
        """Register the page's follow (:meth:`watchers`: ``watch``, every :data:`IDLE_FOLLOW_MS` while nothing runs
        and :data:`FOLLOW_MS` while a job runs; ``watch_state``, whether it follows a job): a job whose process or
        worker died (``reap(folder)``, the kind's, says so) is said as failed, whichever tab started it. A job this
        page did not start (neither running nor waiting in this tab, :func:`own_job`: started in another tab of the
        session, or before the page was opened again) is followed: ``view(folder, running)`` gives the values of
        the bar, its label and ``shown``, and once the job has ended those of the status line and ``after``; Start
        stays disabled and Cancel enabled while it runs, and they are given back when it ends. A job started from
        this page is followed by its own background callback. ``died_view(folder, sentence)`` gives the bar's, its
        label's and ``shown``'s values for a job that died (by default ``view``'s)."""
        watch, watch_state = self.watch, self.watch_state
        quiet = (no_update,) * (7 + len(shown) + len(after))
        untouched = (no_update,) * len(after)

        @callback(
            Output(self.bar, "value", allow_duplicate=True),
            Output(self.label, "children", allow_duplicate=True),
            *shown,
            Output(self.start, "disabled", allow_duplicate=True),
            Output(self.cancel, "disabled", allow_duplicate=True),
            Output(watch_state, "data"),
            Output(self.status, "children", allow_duplicate=True),
            *after,
            Output(watch, "interval"),
            Input(watch, "n_intervals"),
            State(ids.SESSION, "data"),
            State(watch_state, "data"),
            Input(self.flag, "data"),  # at once when this tab's job starts or ends
            Input(self.queued, "data"),
            prevent_initial_call=True,
        )
        def follow_job(
            _ticks: int | None, session_id: str | None, watching: bool | None, flag: Any, queued: Any
        ) -> tuple:
            try:
                folder = sessions.session_folder(session_id)
                died = reap(folder)
            except ui.EXPECTED_ERRORS:
                return quiet
            if died is not None:
                values = died_view(folder, died) if died_view is not None else view(folder, False)[0]
                return (*values, False, True, False, ui.message(died, "error"), *untouched, IDLE_FOLLOW_MS)
            if own_job(flag, queued):  # this tab's job: its own callback follows it, this only watches for its death
                return (*quiet[:-1], FOLLOW_MS)
            running = self.kind.running(folder)
            if not running and not watching:
                return (*quiet[:-1], IDLE_FOLLOW_MS)
            values, ended = view(folder, running)
            if running:
                return (*values, True, False, True, no_update, *untouched, FOLLOW_MS)
            return (*values, False, True, False, *ended, IDLE_FOLLOW_MS)

        return follow_job

    def _register_run(self, job: JobBody, stopped: str) -> Callable[..., Any]:
        @callback(
            Output(self.result, "data"),
            Input(self.go, "data"),
            State(ids.SESSION, "data"),
            background=True,
            running=[(Output(self.flag, "data"), True, False)],
            cancel=[Input(self.cancel, "n_clicks")],
            progress=[Output(self.progress, "data")],
            interval=1000,
            prevent_initial_call=True,
        )
        def run(set_progress: Any, go: dict[str, Any] | None, session_id: str | None) -> dict[str, str]:
            """The background job of a queued run whose turn has come: runs in a separate process (diskcache) or on
            a Celery worker, takes the place its ticket held and returns a status and a message; what it makes goes
            to the session folder. Its inputs are in the app shell, so that it starts whichever page is open."""
            if not go:
                raise PreventUpdate
            try:
                folder = sessions.session_folder(session_id)
            except ui.EXPECTED_ERRORS as exc:
                return self.outcome(REFUSED, describe_error(exc))

            def report(progress: dict[str, Any]) -> None:
                set_progress((progress,))

            try:
                with job_process(record=self.kind.files(folder)):
                    return job(folder, go.get("ticket"), report)
            except JobMemoryError as exc:  # past the memory limit outside the kind's own handlers
                return self.outcome(FAILED, stopped.format(exc=exc))

        return run

    def _register_queued(self) -> Callable[..., Any]:
        @callback(
            Output(self.status, "children", allow_duplicate=True),
            Output(self.label, "children", allow_duplicate=True),
            Input(self.queued, "data"),
            prevent_initial_call="initial_duplicate",
        )
        def show_queued(view: dict[str, Any] | None) -> tuple[Any, Any]:
            """The session's job in the queue: its place while it waits, "starting" when its turn came, or why it
            was refused or dropped (on opening the page, only a job that waits: a refusal was said when it
            happened)."""
            if not view or (ctx.triggered_id is None and view.get("state") not in QUEUE_ACTIVE):
                return no_update, no_update
            if view.get("state") in ("refused", "dropped"):
                return ui.message(view.get("message", ""), "error"), no_update
            status = ui.message(view["note"], "error") if view.get("note") else ui.message(view.get("message", ""))
            return status, view.get("message", "")

        return show_queued

    def _register_running(self) -> Callable[..., Any]:
        @callback(
            Output(self.start, "disabled"),
            Output(self.cancel, "disabled"),
            Input(self.flag, "data"),
            Input(self.queued, "data"),
        )
        def show_running(running: bool | None, queued: dict[str, Any] | None) -> tuple[bool, bool]:
            """Start while no job of this tab runs or waits, Cancel while one does (the flag and the queue's view
            live in the app shell, so they are right when the page is opened again mid-job)."""
            busy = own_job(running, queued)
            return busy, not busy

        return show_running


def own_job(flag: bool | None, queued: dict[str, Any] | None) -> bool:
    """Whether this tab's own background callback follows its panel's job: it runs (``flag``), or waits in the
    queue (``queued``)."""
    return bool(flag) or (queued or {}).get("state") in QUEUE_ACTIVE


def result_outputs(result: dict[str, str] | None) -> tuple[Any, Any, Any, Any]:
    """A map or schema job's result as its page shows it: the status line, the bar and its label, and a new
    version stamp for what the job made when it finished (unchanged otherwise)."""
    if not result:
        return (no_update,) * 4
    finished = result.get("status", "") == FINISHED
    return (
        ui.outcome_message(result),
        "100" if finished else "0",
        "Finished." if finished else result.get("message", ""),
        time.time() if finished else no_update,
    )
