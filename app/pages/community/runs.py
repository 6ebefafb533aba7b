"""The Communities page's Infomap runs: the run itself (a background job of the session,
:data:`app.services.graphs.INFOMAP`), the module hierarchy of the latest run compared with the run before, and the
level the map shows."""

from __future__ import annotations

import time
from typing import Any

from dash import Input, Output, State, callback, no_update

from app import figures, ids, jobs, memory, sessions, ui
from app.services import graphs as graph_service


@callback(
    Output(ids.COMMUNITIES_HIERARCHY, "figure"),
    Output(ids.COMMUNITIES_LEVELS, "children"),
    Output(ids.COMMUNITIES_ALLUVIAL, "figure"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.MODEL_VERSION, "data"),
    State(ids.SESSION, "data"),
)
def show_hierarchy(_version: Any, _model: Any, session_id: str | None) -> tuple[Any, Any, Any]:
    """The module tree sized by flow, the code length by level, and the last two runs side by side."""
    try:
        folder = sessions.session_folder(session_id)
        saved = graph_service.read_communities(folder)
        previous = graph_service.read_previous_communities(folder)
    except ui.EXPECTED_ERRORS as exc:
        return figures.empty_figure(), ui.error_message(exc), figures.empty_figure()
    if saved is None:
        return figures.hierarchy_figure(None), None, figures.alluvial_figure(None)
    levels = (saved.get("codelength") or {}).get("levels") or {}
    rows = [
        ("Index codebook (top modules)" if level == "0" else f"Modules of level {level}", f"{bits:.4f} bits")
        for level, bits in sorted(levels.items(), key=lambda item: int(item[0]))
    ]
    rows.append(("Code length in all", f"{saved['summary']['codelength']:.4f} bits"))
    alluvial = graph_service.alluvial(previous, saved) if previous is not None else None
    return figures.hierarchy_figure(graph_service.module_tree(saved)), ui.facts(rows), figures.alluvial_figure(alluvial)


@callback(
    Output(ids.COMMUNITIES_MESSAGE, "children"),
    Output(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.COMMUNITIES_RUN, "n_clicks"),
    State(ids.COMMUNITIES_TRIALS, "value"),
    State(ids.COMMUNITIES_TWO_LEVEL, "value"),
    State(ids.COMMUNITIES_SEED, "value"),
    State(ids.COMMUNITIES_THRESHOLD, "value"),
    State(ids.COMMUNITIES_MARKOV_TIME, "value"),
    State(ids.SESSION, "data"),
    background=True,
    interval=ui.ANSWER_POLL_MS,
    running=[
        (Output(ids.COMMUNITIES_RUN, "disabled"), True, False),
        (Output(ids.COMMUNITIES_PROGRESS, "style"), {"display": "block"}, {"display": "none"}),
    ],
    prevent_initial_call=True,
)
@jobs.charged_from_fork  # its job's process charged to the memory budget from its fork
def run(
    _clicks: int | None,
    trials: Any,
    two_level: Any,
    seed: Any,
    threshold: Any,
    markov_time: Any,
    session_id: str | None,
) -> tuple[Any, Any]:
    """The background job: Infomap on the session's current model; returns only a message and a version stamp."""
    ui.require_click(_clicks)
    try:
        folder = sessions.session_folder(session_id)
        with (
            memory.job_room(),  # reserved by the web worker before it forked this job (before its sentinel)
            jobs.job_process(record=graph_service.communities_files(folder)),
        ):
            saved = graph_service.run_communities(folder, trials, bool(two_level), seed, threshold, markov_time)
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc), no_update
    except jobs.JobMemoryError as exc:
        return ui.message(f"Infomap stopped: {exc}; try a higher pruning threshold.", "error"), no_update
    except MemoryError:  # the machine's memory, while reading the model for instance
        return ui.message("Infomap ran out of the server's memory; try a higher pruning threshold.", "error"), no_update
    s = saved["summary"]
    levels = (
        ""
        if saved["options"]["two_level"]
        else (f"; {s['levels'] - 1} levels of modules" if s["levels"] > 2 else "; no submodules (a flat result)")
    )
    note = (
        f"{s['modules']} top modules over {s['nodes']:,} clones and {s['edges']:,} edges (pruned below "
        f"{saved['threshold']:.2g}){levels}; code length {s['codelength']:.3f} bits (one module: "
        f"{s['one_level_codelength']:.3f}); Infomap took {s['seconds']:.2f} s."
    )
    return ui.message(note, "ok"), time.time()


@callback(
    Output(ids.COMMUNITIES_MESSAGE, "children", allow_duplicate=True),
    Output(ids.COMMUNITIES_RUN, "disabled", allow_duplicate=True),
    Output(ids.COMMUNITIES_PROGRESS, "style", allow_duplicate=True),
    Input(ids.COMMUNITIES_WATCH, "n_intervals"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def said_when_it_died(_tick: int | None, session_id: str | None) -> tuple[Any, Any, Any]:
    """An Infomap run whose process died (killed past the job memory limit by the sentinel, or its worker gone)
    never answers its background callback: the page says so, with the cause, and lets the user run again."""
    try:
        died = graph_service.INFOMAP.reap_said(
            sessions.session_folder(session_id),
            "The Infomap run",
            "try a higher pruning threshold",
            "The last run is still shown.",
        )
    except ui.EXPECTED_ERRORS:
        died = None
    if died is None:
        return no_update, no_update, no_update
    return ui.message(died, "error"), False, {"display": "none"}


@callback(
    Output(ids.COMMUNITIES_RUN_SHOWN, "options"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.MODEL_VERSION, "data"),
    State(ids.SESSION, "data"),
)
def offer_runs(_version: Any, _model: Any, session_id: str | None) -> list[dict[str, Any]]:
    """The runs the page can show: the last one, and the one before it when the session has one on these clones."""
    try:
        previous = graph_service.read_previous_communities(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS:
        previous = None
    return run_options(previous is not None)


def run_options(previous: bool) -> list[dict[str, Any]]:
    """The options of the run picker (the one before the last disabled when there is none)."""
    return [
        {"label": " the last run", "value": graph_service.CURRENT_RUN},
        {"label": " the run before it", "value": graph_service.PREVIOUS_RUN, "disabled": not previous},
    ]
