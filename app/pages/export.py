"""Export page: write the current model's clone graph (pruned at a threshold), or one module's subgraph, in a
network format into the session folder and send it to the browser; download the current model."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, callback, dcc, html, no_update

from app import ids, jobs, sessions, ui
from app.services import graphs as graph_service

dash.register_page(__name__, path="/export", name="Export", title="CHMM Explorer · Export", order=6)
ui.start_downloads(ids.EXPORT_DOWNLOAD)
HIDDEN, SHOWN = {"display": "none"}, {}
ADVICE = "raise the pruning threshold, or export with `chmm export`."


def layout(module: str | None = None, **_query: Any) -> html.Div:
    """The page; ``/export?module=ID`` (the Communities page's link) fills in the module."""
    options = [{"label": graph_service.EXPORT_DESCRIPTIONS[fmt], "value": fmt} for fmt in graph_service.EXPORT_FORMATS]
    return html.Div(
        [
            html.H2("Export the clone graph"),
            ui.card(
                "Format and selection",
                html.Div(
                    [
                        ui.field(
                            "Format",
                            dcc.Dropdown(id=ids.EXPORT_FORMAT, options=options, value="graphml", clearable=False),
                            "clu, tree and ftree are Infomap partition files; the others carry the graph.",
                        ),
                        ui.field(
                            "Pruning threshold",
                            dcc.Input(
                                id=ids.EXPORT_THRESHOLD,
                                type="text",
                                value="",
                                placeholder="the Communities page's",
                                className="num",
                            ),
                            "Transitions below it are removed before export (a number between 0 and 1). Empty: the "
                            "threshold of the Infomap run on the Communities page (1e-3 with none), whose modules the "
                            "export carries; at another threshold Infomap runs again for the export.",
                        ),
                        ui.field(
                            "Module (optional)",
                            dcc.Input(
                                id=ids.EXPORT_MODULE,
                                type="text",
                                value=module if isinstance(module, str) else None,
                                placeholder="e.g. 3 or 3:2",
                                className="num",
                            ),
                            "Export only this module's subgraph. Ids as on the Communities page.",
                        ),
                    ],
                    className="form-grid",
                ),
                ui.buttons(
                    html.Button("Export", id=ids.EXPORT_BUTTON, className="button primary"),
                    html.Button("Cancel", id=ids.EXPORT_CANCEL, className="button", style=HIDDEN),
                    html.Button("Download the current model (.npz)", id=ids.EXPORT_MODEL_BUTTON, className="button"),
                ),
                html.Div(
                    "Exporting in the background (an Infomap run first, at a threshold without one) ...",
                    id=ids.EXPORT_RUNNING,
                    className="message message-info",
                    style=HIDDEN,
                ),
                dcc.Store(id=ids.EXPORT_DOWNLOAD),  # a download link (the file by its route)
                html.Div(id=ids.EXPORT_MESSAGE),
            ),
        ]
    )


@callback(
    Output(ids.EXPORT_DOWNLOAD, "data"),
    Output(ids.EXPORT_MESSAGE, "children"),
    Input(ids.EXPORT_BUTTON, "n_clicks"),
    State(ids.EXPORT_FORMAT, "value"),
    State(ids.EXPORT_THRESHOLD, "value"),
    State(ids.EXPORT_MODULE, "value"),
    State(ids.SESSION, "data"),
    background=True,
    running=[
        (Output(ids.EXPORT_BUTTON, "disabled"), True, False),
        (Output(ids.EXPORT_CANCEL, "style"), SHOWN, HIDDEN),
        (Output(ids.EXPORT_RUNNING, "style"), SHOWN, HIDDEN),
    ],
    cancel=[Input(ids.EXPORT_CANCEL, "n_clicks")],
    progress=[Output(ids.EXPORT_RUNNING, "children")],
    prevent_initial_call=True,
)
@jobs.charged_from_fork  # its job's process charged to the memory budget from its fork
def export(
    set_progress: Any, _clicks: int | None, fmt: Any, threshold: Any, module: Any, session_id: str | None
) -> tuple[Any, Any]:
    """The background job: the export (and the Infomap run it needs at a threshold without one) in a job process,
    bounded in time and memory (:func:`app.ui.request_job`), each stage said as it begins; the answer is a download
    link, not the file."""
    ui.require_click(_clicks)
    try:
        folder = sessions.session_folder(session_id)
        with ui.request_job(folder, "The export", ADVICE):
            path, name, note = graph_service.export_graph(
                folder, fmt, threshold, module, report=lambda said: set_progress((said,))
            )
        link = sessions.download_link(folder, path, name)
    except ui.EXPECTED_ERRORS as exc:
        return no_update, ui.error_message(exc)
    return link, ui.message([f"{note} ", html.A("Download it again", href=link)], "ok")


@callback(
    Output(ids.EXPORT_DOWNLOAD, "data", allow_duplicate=True),
    Output(ids.EXPORT_MESSAGE, "children", allow_duplicate=True),
    Input(ids.EXPORT_MODEL_BUTTON, "n_clicks"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def download_model(clicks: int | None, session_id: str | None) -> tuple[Any, Any]:
    return ui.send_current_model(clicks, session_id)
