"""The Communities page's views as links beyond the session (:mod:`app.services.shares`): "Share this view" gives a
link that opens the same view in any session (another browser's too), and a link that carries a share offers to
open its model; named views saved per session come back in one click (they set the page's URL, from which
:func:`app.pages.community.view.navigate` sets the view)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlencode

import flask
from dash import Input, Output, State, callback, dcc, html, no_update

from app import ids, sessions, ui
from app.errors import describe_error
from app.services import shares

HIDDEN = {"display": "none"}
SHOWN: dict[str, str] = {}


def controls(token: str | None) -> html.Div:
    """The view's links: Share this view (the link, copyable), a shared model to open (``token``: the page's link
    carried one), and the session's named views."""
    return html.Div(
        [
            dcc.Store(id=ids.COMMUNITIES_SHARE, storage_type="memory", data=token),
            dcc.Location(id=ids.COMMUNITIES_RELOAD, refresh=True),
            html.Div(
                [
                    html.Span(id=ids.COMMUNITIES_SHARE_OFFER),
                    html.Button("Open it here", id=ids.COMMUNITIES_OPEN_SHARE, className="button primary"),
                ],
                id=ids.COMMUNITIES_SHARE_BOX,
                className="message message-info",
                style=HIDDEN,
            ),
            ui.buttons(
                html.Button("Share this view", id=ids.COMMUNITIES_SHARE_BUTTON, className="button"),
                dcc.Dropdown(
                    id=ids.COMMUNITIES_SAVED_VIEWS, options=[], placeholder="Saved views", style={"minWidth": "14em"}
                ),
                dcc.Input(id=ids.COMMUNITIES_VIEW_NAME, type="text", placeholder="a name for this view", value=""),
                html.Button("Save the view", id=ids.COMMUNITIES_SAVE_VIEW, className="button"),
                html.Button("Delete it", id=ids.COMMUNITIES_DELETE_VIEW, className="button"),
            ),
            html.Div(id=ids.COMMUNITIES_SHARE_LINK),
            html.Div(id=ids.COMMUNITIES_VIEWS_MESSAGE),
        ],
        className="view-links",
    )


def share_link(token: str, search: str | None, base: str) -> str:
    """The link of a shared view: the page at ``base`` with the view's query and the share's token."""
    query = parse_qs((search or "").lstrip("?"), keep_blank_values=True)
    pairs = [(key, values[-1]) for key, values in query.items() if key != "share"] + [("share", token)]
    return f"{base.rstrip('/')}/communities?{urlencode(pairs)}"


def without_share(search: str | None) -> str:
    """The page's query with the share's token left out (the view alone)."""
    query = parse_qs((search or "").lstrip("?"), keep_blank_values=True)
    pairs = [(key, values[-1]) for key, values in query.items() if key != "share"]
    return f"?{urlencode(pairs)}" if pairs else ""


@callback(
    Output(ids.COMMUNITIES_SHARE_LINK, "children"),
    Input(ids.COMMUNITIES_SHARE_BUTTON, "n_clicks"),
    State(ids.COMMUNITIES_URL, "search"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def share(clicks: int | None, search: str | None, session_id: str | None) -> Any:
    """Publish the session's model and run, and show the link of the view on screen with it."""
    ui.require_click(clicks)
    try:
        token = shares.share_view(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc)
    link = share_link(token, search, flask.request.host_url)
    return ui.message(
        [
            "Anyone with this link sees this view of this model (read-only; it expires with sessions): ",
            html.A(link, href=link, id=ids.COMMUNITIES_SHARE_ANCHOR),
        ],
        "ok",
    )


@callback(
    Output(ids.COMMUNITIES_SHARE_OFFER, "children"),
    Output(ids.COMMUNITIES_SHARE_BOX, "style"),
    Output(ids.COMMUNITIES_OPEN_SHARE, "style"),
    Input(ids.COMMUNITIES_SHARE, "data"),
    State(ids.SESSION, "data"),
)
def offer_share(token: str | None, session_id: str | None) -> tuple[Any, Any, Any]:
    """A link that carries a share the session does not hold: say what it is and offer to open it (or that it
    is gone)."""
    if not token:
        return None, HIDDEN, HIDDEN
    try:
        folder = sessions.session_folder(session_id)
        if shares.holds_share(folder, token):
            return None, HIDDEN, HIDDEN
        said = shares.share_sentence(token)
    except ui.EXPECTED_ERRORS as exc:
        return describe_error(exc), SHOWN, HIDDEN
    return f"{said} Your current model stays one undo away (the Model page). ", SHOWN, SHOWN


@callback(
    Output(ids.COMMUNITIES_RELOAD, "href"),
    Output(ids.COMMUNITIES_SHARE_OFFER, "children", allow_duplicate=True),
    Input(ids.COMMUNITIES_OPEN_SHARE, "n_clicks"),
    State(ids.COMMUNITIES_SHARE, "data"),
    State(ids.COMMUNITIES_URL, "search"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def open_share(clicks: int | None, token: str | None, search: str | None, session_id: str | None) -> Any:
    """Make the shared model the session's, then open the link's view afresh (a reload of the page at the view)."""
    ui.require_click(clicks)
    try:
        shares.open_share(sessions.session_folder(session_id), token)
    except ui.EXPECTED_ERRORS as exc:
        return no_update, describe_error(exc)
    return f"/communities{without_share(search)}", "Opening the shared model ... "


# ------------------------------------------------------------------------------------------ named views
@callback(
    Output(ids.COMMUNITIES_SAVED_VIEWS, "options"),
    Output(ids.COMMUNITIES_VIEWS_MESSAGE, "children"),
    Output(ids.COMMUNITIES_SAVED_VIEWS, "value"),
    Input(ids.SESSION, "data"),
    Input(ids.COMMUNITIES_SAVE_VIEW, "n_clicks"),
    Input(ids.COMMUNITIES_DELETE_VIEW, "n_clicks"),
    State(ids.COMMUNITIES_VIEW_NAME, "value"),
    State(ids.COMMUNITIES_SAVED_VIEWS, "value"),
    State(ids.COMMUNITIES_URL, "search"),
)
def keep_views(
    session_id: str | None, saved: int | None, deleted: int | None, name: Any, chosen: Any, search: str | None
) -> tuple[Any, Any, Any]:
    """The session's named views in the dropdown; Save keeps the view on screen under the name, Delete removes the
    chosen one."""
    from dash import ctx

    said: Any = None
    try:
        folder = sessions.session_folder(session_id)
        if ctx.triggered_id == ids.COMMUNITIES_SAVE_VIEW and saved:
            said = ui.message(shares.save_view(folder, name, without_share(search)), "ok")
        elif ctx.triggered_id == ids.COMMUNITIES_DELETE_VIEW and deleted:
            said = ui.message(shares.delete_view(folder, chosen), "ok")
        views = shares.saved_views(folder)
    except ui.EXPECTED_ERRORS as exc:
        return no_update, ui.error_message(exc), no_update
    options = [{"label": name, "value": name} for name in views]
    return options, said, None if ctx.triggered_id == ids.COMMUNITIES_DELETE_VIEW else no_update


@callback(
    Output(ids.COMMUNITIES_URL, "search", allow_duplicate=True),
    Input(ids.COMMUNITIES_SAVED_VIEWS, "value"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def go_to_view(name: Any, session_id: str | None) -> Any:
    """A saved view chosen: the page's URL becomes its query (the view follows, and Back returns)."""
    if not name:
        return no_update
    try:
        views = shares.saved_views(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS:
        return no_update
    return views.get(name, no_update)
