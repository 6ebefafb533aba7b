"""Decode page: scramble a sentence (word interiors permuted, seeded) and decode it back under the current model
by MAP inference, with the characters the decoding changed highlighted."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, callback, dcc, html, no_update

from app import ids, jobs, sessions, ui
from app.services import decode as decode_service

dash.register_page(__name__, path="/decode", name="Decode", title="CHMM Explorer · Decode", order=3)

EXAMPLE = "Alice was beginning to get very tired of sitting by her sister on the bank."


def layout(**_query: Any) -> html.Div:
    return html.Div(
        [
            html.H2("Decode scrambled text"),
            ui.card(
                "Sentence",
                dcc.Textarea(id=ids.DECODE_TEXT, value=EXAMPLE, className="text"),
                html.Div(
                    [
                        ui.field(
                            "Seed",
                            dcc.Input(id=ids.DECODE_SEED, type="number", value=0, step="any", className="num"),
                            "Scramble permutes the letters inside each word (first and last letters stay)",
                        ),
                        ui.field(
                            "Decoder",
                            dcc.Checklist(
                                id=ids.DECODE_CONSTRAINED,
                                options=[
                                    {"label": " constrained (each word a permutation of its letters)", "value": 1}
                                ],
                                value=[],
                            ),
                            "unconstrained is the paper's decoder",
                        ),
                    ],
                    className="form-grid",
                ),
                ui.buttons(
                    html.Button("Scramble", id=ids.DECODE_SCRAMBLE, className="button"),
                    html.Button("Decode", id=ids.DECODE_BUTTON, className="button primary"),
                ),
                html.Div(id=ids.DECODE_MESSAGE),
                dcc.Store(id=ids.DECODE_SCRAMBLED_FROM),
            ),
            ui.card("Decoded", dcc.Loading(html.Div(id=ids.DECODE_OUTPUT))),
        ]
    )


def decoded_view(result: dict[str, Any]) -> html.Div:
    """The decoded text with every changed run marked, and a line of figures."""
    pieces = [html.Mark(piece, className="changed") if changed else piece for piece, changed in result["segments"]]
    notes = [f"{result['changed']:,} character(s) changed", f"decoded in {result['seconds'] * 1000:,.0f} ms"]
    notes.append("constrained" if result["constrained"] else "unconstrained")
    if result["relaxed_words"]:
        notes.append(f"{result['relaxed_words']} word(s) too long for the constraint, decoded unconstrained")
    if result["unresolved_words"]:
        notes.append(f"{result['unresolved_words']} word(s) the model cannot explain, left as given")
    children = [
        html.Div("Input after normalisation:", className="field-label"),
        html.Pre(result["scrambled"], className="preview"),
        html.Div("Decoded (changes highlighted):", className="field-label"),
        html.Pre(pieces, className="preview"),
        html.Div("; ".join(notes) + ".", className="hint"),
    ]
    restored = result.get("restored")
    if restored:
        words, characters = restored["words"], restored["characters"]
        children += [
            html.Div("Before scrambling:", className="field-label"),
            html.Pre(result["original"], className="preview"),
            html.Div(
                f"Restored {restored['words_restored']:,} of {words:,} words "
                f"({restored['words_restored'] / max(words, 1):.1%}) and "
                f"{restored['characters_restored'] / max(characters, 1):.1%} of the characters.",
                id=ids.DECODE_RESTORED,
                className="message message-info",
            ),
        ]
    return html.Div(children)


@callback(
    Output(ids.DECODE_TEXT, "value"),
    Output(ids.DECODE_MESSAGE, "children"),
    Output(ids.DECODE_SCRAMBLED_FROM, "data"),
    Input(ids.DECODE_SCRAMBLE, "n_clicks"),
    State(ids.DECODE_TEXT, "value"),
    State(ids.DECODE_SEED, "value"),
    State(ids.DECODE_SCRAMBLED_FROM, "data"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def scramble(
    _clicks: int | None, raw_text: str | None, seed: Any, previous: dict[str, Any] | None, session_id: str | None
) -> tuple[Any, Any, Any]:
    ui.require_click(_clicks)
    try:
        pair = decode_service.scramble_with_original(sessions.session_folder(session_id), raw_text, seed, previous)
    except ui.EXPECTED_ERRORS as exc:
        return no_update, ui.error_message(exc), no_update
    note = "Scrambled: now press Decode (the result is scored against the sentence before scrambling)."
    return pair["scrambled"], ui.message(note), pair


@callback(
    Output(ids.DECODE_OUTPUT, "children"),
    Output(ids.DECODE_MESSAGE, "children", allow_duplicate=True),
    Input(ids.DECODE_BUTTON, "n_clicks"),
    State(ids.DECODE_TEXT, "value"),
    State(ids.DECODE_CONSTRAINED, "value"),
    State(ids.DECODE_SCRAMBLED_FROM, "data"),
    State(ids.SESSION, "data"),
    background=True,
    running=[(Output(ids.DECODE_BUTTON, "disabled"), True, False)],
    prevent_initial_call=True,
)
@jobs.charged_from_fork  # its job's process charged to the memory budget from its fork
def decode(
    _clicks: int | None,
    raw_text: str | None,
    constrained: list[Any] | None,
    scrambled_from: dict[str, Any] | None,
    session_id: str | None,
) -> Any:
    ui.require_click(_clicks)
    try:
        folder = sessions.session_folder(session_id)
        with ui.request_job(folder, "Decoding"):
            result = decode_service.decode(folder, raw_text, bool(constrained), scrambled_from)
    except ui.EXPECTED_ERRORS as exc:
        return None, ui.error_message(exc)
    return decoded_view(result), None
