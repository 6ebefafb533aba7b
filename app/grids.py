"""The app's tables: dash-ag-grid grids (virtual rows, so a table of 100,000 rows scrolls without paging; sorting and
a filter in every column; a CSV export of what the grid shows), in one look that follows assets/style.css.

dash-ag-grid replaces Dash's DataTable, which Plotly deprecated and recommends it for: its rows are rendered only
where the table is scrolled to, it is maintained, and it sorts and filters on the client.
"""

from __future__ import annotations

from typing import Any

import dash_ag_grid as dag
from dash import Input, Output, clientside_callback, html

from app.services.grid_rows import BLOCK_ROWS

THEME = {
    "function": (
        "themeAlpine.withParams({fontFamily: 'inherit', fontSize: 13, headerFontWeight: 600, spacing: 5, "
        "accentColor: '#1f6feb', borderColor: '#dde3ea', headerBackgroundColor: '#f5f7fa', "
        "foregroundColor: '#1d2733', wrapperBorderRadius: 4})"
    )
}
"""The grids' theme (ag-grid's theming API, no CSS from a CDN: the app works offline): Alpine in the page's font and
colours."""
ROW_HEIGHT = 30
"""Pixels per row, so that a table's height can be told in rows."""



def column(key: str, header: str, kind: str = "text", tooltip: str | None = None, **more: Any) -> dict[str, Any]:
    """A grid column of the field ``key`` under ``header``: ``kind`` "text", "number" (a number filter, right
    aligned) or a d3 format such as ".4f" or "," (a number shown in that format)."""
    spec: dict[str, Any] = {"field": key, "headerName": header}
    if kind != "text":
        spec |= {"filter": "agNumberColumnFilter", "type": "rightAligned"}
    if kind not in ("text", "number"):
        spec["valueFormatter"] = {"function": f"params.value == null ? '' : d3.format('{kind}')(params.value)"}
    if tooltip:
        spec["headerTooltip"] = tooltip
    return spec | more


def grid(
    component: str,
    columns: list[dict[str, Any]],
    *,
    csv_button: str,
    file_name: str,
    rows: int = 12,
    selectable: bool = False,
    row_id: str | None = None,
    tools: list[Any] | None = None,
    server_rows: bool = False,
) -> html.Div:
    """A grid with its tool row: ``tools`` (e.g. a note) and a "CSV" button that downloads the rows the grid shows
    (sorted and filtered as shown) as ``file_name``. ``rows`` rows show at once (the rest scroll, rendered as they
    come into view); ``selectable``: one row is selected by clicking it (``selectedRows``); ``row_id``: the field
    that names a row (then a selection can be set by id and survives new row data). ``server_rows``: the rows stay
    on the server and come a block at a time, sorted and filtered there (ag-grid's infinite row model: a callback
    answers ``getRowsRequest`` with ``getRowsResponse``, :func:`app.services.tables.table_block`), and "CSV"
    downloads every row the filter keeps, made on the server."""
    options: dict[str, Any] = {
        "theme": THEME,
        "rowHeight": ROW_HEIGHT,
        "headerHeight": ROW_HEIGHT + 4,
        "animateRows": False,
        "tooltipShowDelay": 200,
        "enableCellTextSelection": not selectable,
    }
    if selectable:
        options["rowSelection"] = {"mode": "singleRow", "checkboxes": False, "enableClickSelection": True}
    row_model: dict[str, Any] = {"rowData": []}
    if server_rows:  # one block asked at a time, so that each answer meets its own request
        options |= {"cacheBlockSize": BLOCK_ROWS, "maxBlocksInCache": 50, "maxConcurrentDatasourceRequests": 1}
        row_model = {"rowModelType": "infinite"}
    table = dag.AgGrid(
        id=component,
        columnDefs=columns,
        **row_model,
        defaultColDef={"sortable": True, "filter": True, "floatingFilter": True, "resizable": True, "minWidth": 90},
        columnSize="responsiveSizeToFit",
        dashGridOptions=options,
        getRowId=f"params.data.{row_id}" if row_id else None,
        csvExportParams={"fileName": file_name},
        style={"height": f"{(rows + 2) * ROW_HEIGHT + 12}px", "width": "100%"},
        className="grid",
    )
    button = html.Button("CSV", id=csv_button, className="button small", title=f"Download the rows shown ({file_name})")
    return html.Div([html.Div([*(tools or []), button], className="grid-tools"), table], className="grid-box")


def export_on_click(component: str, csv_button: str) -> None:
    """Register the browser-side callback that has the grid ``component`` export its rows when ``csv_button`` is
    clicked (the grid's own exportDataAsCsv: no round trip to the server)."""
    clientside_callback(
        "function(clicks) { return clicks ? true : window.dash_clientside.no_update; }",
        Output(component, "exportDataAsCsv"),
        Input(csv_button, "n_clicks"),
        prevent_initial_call=True,
    )
