"""The Communities page's Tables card: the clones and the transitions of the open module, or of the whole graph,
kept on the server in columns and served to the grids a block at a time, sorted and filtered there
(:func:`app.services.tables.table_block`); "CSV" downloads every row a grid's filter keeps, in its sort."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from dash import Input, Output, State, callback, clientside_callback, ctx, html, no_update

from app import ids, jobs, sessions, ui
from app.pages.community.look import CLONE_COLUMNS, EDGE_COLUMNS
from app.services import graphs as graph_service
from app.services import tables as table_service

EMPTY: dict[str, Any] = {"rowData": []}
"""A grid's answer when it has no table to show: no rows, and no count (dash-ag-grid answers the ask after a count
of 0 by another path, which lost the block a new table asked for)."""


@callback(
    Output(ids.COMMUNITIES_TABLES_SOURCE, "data"),
    Output(ids.COMMUNITIES_TABLES_NOTE, "children"),
    Output(ids.COMMUNITIES_CLONE_TABLE, "selectedRows"),
    Input(ids.COMMUNITIES_SELECTED, "data"),
    Input(ids.COMMUNITIES_VERSION, "data"),
    Input(ids.COMMUNITIES_RUN_SHOWN, "value"),
    Input(ids.COMMUNITIES_TABLES_WHOLE, "n_clicks"),
    State(ids.SESSION, "data"),
    State(ids.COMMUNITIES_WHOLE_CLICKED, "data"),
)
def show_tables(
    selected: str | None,
    _version: Any,
    run: str | None,
    whole: int | None,
    session_id: str | None,
    clicked: dict[str, Any] | None = None,
) -> tuple[Any, Any, Any]:
    """Which tables the grids show (the module open below the map or, when asked, the whole graph: made only then)
    and how many rows each has: every row, served a block at a time. The grids then clear their filters (a filter
    set on one module does not hide rows of the next) and ask for their rows again (the clientside callback below).
    The button shows the whole graph's tables even while a module is open; opening another module shows that
    module's. A module opened by a click on one of its clones in the whole graph (``clicked``) says where that
    clone's row is (``clicked_row``: the grid scrolls there and selects it once its block has come)."""
    if ctx.triggered_id == ids.COMMUNITIES_TABLES_WHOLE:
        selected = None
    if not selected and not whole:
        hint = "Open a module to see its clones and transitions, or show the whole graph's."
        return None, ui.message(hint), []
    run = run or graph_service.CURRENT_RUN
    try:
        tables = table_service.graph_tables(sessions.session_folder(session_id), selected, run)
    except ui.EXPECTED_ERRORS as exc:
        return None, ui.error_message(exc), []
    where = f"module {tables['module']}" if tables["module"] else "the whole graph (open a module to see its own)"
    note = (
        f"{tables['clone_count']:,} clones and {tables['transition_count']:,} transitions of {where}; sort by a "
        "column's header, filter under it (e.g. > 0.01), select a clone to mark it in the subgraph; CSV downloads "
        "every row the filter keeps, in the order shown."
    )
    source: dict[str, Any] = {"module": tables["module"], "run": run, "at": time.time()}
    clone = (clicked or {}).get("clone")
    if ctx.triggered_id == ids.COMMUNITIES_SELECTED and isinstance(clone, int):
        rows = np.flatnonzero(tables["clones"].columns["state"] == clone)  # the table's own order: no sort yet
        source["clicked_row"] = int(rows[0]) if len(rows) else None
    return source, note, []  # a clone clicked in the whole graph is selected once its row comes (below)


def serve(which: str, request: Any, source: dict[str, Any] | None, session_id: str | None) -> dict[str, Any]:
    """A grid's block of the table ``which`` (:func:`app.services.tables.table_block`); no rows without a table."""
    if not source:
        return EMPTY
    try:
        folder = sessions.session_folder(session_id)
        return table_service.table_block(folder, source.get("module"), source.get("run"), which, request)
    except ui.EXPECTED_ERRORS:
        return EMPTY


def _server(which: str, grid: str) -> Callable[[Any, dict[str, Any] | None, str | None], dict[str, Any]]:
    """The callback that answers the grid ``grid``'s asks with blocks of the table ``which``."""

    @callback(
        Output(grid, "getRowsResponse"),
        Input(grid, "getRowsRequest"),
        State(ids.COMMUNITIES_TABLES_SOURCE, "data"),
        State(ids.SESSION, "data"),
        prevent_initial_call=True,
    )
    def answer(request: Any, source: dict[str, Any] | None, session_id: str | None) -> dict[str, Any]:
        return serve(which, request, source, session_id)

    answer.__doc__ = f"The {which} table's block of rows that its grid asks for."
    return answer


serve_clones = _server("clones", ids.COMMUNITIES_CLONE_TABLE)
serve_transitions = _server("transitions", ids.COMMUNITIES_EDGE_TABLE)


clientside_callback(  # another table: each grid clears its filter or drops its blocks, and asks once again
    """function (source, clones, transitions) {
        for (const id of [clones, transitions]) {
            let api = null;
            try { api = window.dash_ag_grid.getApi(id); } catch (error) { continue; }  // not made yet: it will ask
            if (!api) { continue; }
            if (api.isAnyFilterPresent()) { api.setFilterModel(null); }  // the filter's change asks again
            else { api.purgeInfiniteCache(); }  // one refresh only: two at once answered one ask with the other
        }
        return Date.now();
    }""",
    Output(ids.COMMUNITIES_TABLES_PURGED, "data"),
    Input(ids.COMMUNITIES_TABLES_SOURCE, "data"),
    State(ids.COMMUNITIES_CLONE_TABLE, "id"),
    State(ids.COMMUNITIES_EDGE_TABLE, "id"),
    prevent_initial_call=True,
)

clientside_callback(  # a clone clicked in the whole graph is selected in the clone table once its row has come
    """function (response, clicked, done, source, grid, store) {
        if (!clicked || clicked.label === undefined || clicked.label === null || clicked.count === done) {
            return window.dash_clientside.no_update;
        }
        let tries = 20;  // the grid takes the block after this callback: look for the row a few times
        const look = () => {
            let api = null;
            try { api = window.dash_ag_grid.getApi(grid); } catch (error) { api = null; }
            const node = api && api.getRowNode(String(clicked.label));
            if (node) {
                if (!node.isSelected()) { node.setSelected(true, true); }
                api.ensureNodeVisible(node, 'middle');
                window.dash_clientside.set_props(store, {data: clicked.count});
            } else if (--tries > 0) {
                setTimeout(look, 100);
            } else if (api && source && Number.isInteger(source.clicked_row)) {
                api.ensureIndexVisible(source.clicked_row, 'middle');  // its block is asked for: found on its answer
            }
        };
        setTimeout(look, 0);
        return window.dash_clientside.no_update;
    }""",
    Output(ids.COMMUNITIES_TABLES_CLICK_SELECTED, "data"),
    Input(ids.COMMUNITIES_CLONE_TABLE, "getRowsResponse"),
    Input(ids.COMMUNITIES_WHOLE_CLICKED, "data"),
    State(ids.COMMUNITIES_TABLES_CLICK_SELECTED, "data"),
    State(ids.COMMUNITIES_TABLES_SOURCE, "data"),
    State(ids.COMMUNITIES_CLONE_TABLE, "id"),
    State(ids.COMMUNITIES_TABLES_CLICK_SELECTED, "id"),
    prevent_initial_call=True,
)

CSV = {
    ids.COMMUNITIES_CLONE_TABLE_CSV: ("clones", ids.COMMUNITIES_CLONE_TABLE, CLONE_COLUMNS),
    ids.COMMUNITIES_EDGE_TABLE_CSV: ("transitions", ids.COMMUNITIES_EDGE_TABLE, EDGE_COLUMNS),
}
"""Each server-side table's CSV button: its table, its grid and its columns."""


@callback(
    Output(ids.COMMUNITIES_TABLES_DOWNLOAD, "data"),
    Output(ids.COMMUNITIES_TABLES_CSV_NOTE, "children"),
    Input(ids.COMMUNITIES_CLONE_TABLE_CSV, "n_clicks"),
    Input(ids.COMMUNITIES_EDGE_TABLE_CSV, "n_clicks"),
    State(ids.COMMUNITIES_CLONE_TABLE, "getRowsRequest"),
    State(ids.COMMUNITIES_EDGE_TABLE, "getRowsRequest"),
    State(ids.COMMUNITIES_TABLES_SOURCE, "data"),
    State(ids.SESSION, "data"),
    background=True,
    prevent_initial_call=True,
)
@jobs.charged_from_fork  # its job's process charged to the memory budget from its fork
def download_table(
    _clones: int | None,
    _transitions: int | None,
    clone_request: Any,
    transition_request: Any,
    source: dict[str, Any] | None,
    session_id: str | None,
) -> tuple[Any, Any]:
    """The CSV of the table whose button was pressed: every row its grid's filter keeps, in its sort (as the grid's
    last block request says them), made in a job process bounded in time and memory (its work grows with the
    table); the answer is a download link."""
    if ctx.triggered_id not in CSV or not source:
        return no_update, ui.message("Open a module, or show the whole graph's tables, first.")
    which, _, columns = CSV[ctx.triggered_id]
    request = clone_request if which == "clones" else transition_request
    try:
        folder = sessions.session_folder(session_id)
        with ui.request_job(folder, "The table's CSV", "filter the table, or open a module."):
            path, name, said = table_service.table_csv(
                folder, source.get("module"), source.get("run"), which, request, list(columns)
            )
        link = sessions.download_link(folder, path, name)
    except ui.EXPECTED_ERRORS as exc:
        return no_update, ui.error_message(exc)
    return link, ui.message([f"The {which}: {said} ", html.A("Download it again", href=link)], "ok")


ui.start_downloads(ids.COMMUNITIES_TABLES_DOWNLOAD)
