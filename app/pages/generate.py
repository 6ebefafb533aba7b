"""Generate page: sample text from the current model (length, seed, optional prefix) and score pasted text."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, callback, dcc, html

from app import ids, jobs, services, sessions, ui
from app.services import generate as generate_service
from engine import api

dash.register_page(__name__, path="/generate", name="Generate", title="CHMM Explorer · Generate", order=2)


def layout(**_query: Any) -> html.Div:
    sample_card = ui.card(
        "Sample",
        html.Div(
            [
                ui.field(
                    "Symbols",
                    dcc.Input(id=ids.SAMPLE_LENGTH, type="number", value=300, step="any"),
                    "characters, or words for a model of words",
                ),
                ui.field("Seed", dcc.Input(id=ids.SAMPLE_SEED, type="number", value=0, step="any")),
                ui.field(
                    "Prefix (optional)",
                    dcc.Input(id=ids.SAMPLE_PREFIX, type="text", value="", debounce=True),
                    "text to continue, normalised like the model's corpus (the default: a frequent phrase of the "
                    "model's own text)",
                ),
                ui.field(
                    "Placeholder",
                    dcc.Checklist(
                        id=ids.SAMPLE_MARK_RARE,
                        options=[{"label": " mark \u201crare\u201d", "value": "on"}],
                        value=["on"],
                    ),
                    "The paper's normalisation writes every word outside the vocabulary as \u201crare\u201d.",
                ),
            ],
            className="form-grid",
        ),
        ui.buttons(html.Button("Sample", id=ids.SAMPLE_BUTTON, className="button primary")),
        dcc.Loading(html.Div(id=ids.SAMPLE_OUTPUT)),
    )
    score_card = ui.card(
        "Score",
        dcc.Textarea(id=ids.SCORE_TEXT, placeholder="Paste text to score under the current model", className="text"),
        ui.buttons(
            html.Button("Score", id=ids.SCORE_BUTTON, className="button primary"),
            dcc.Checklist(
                id=ids.SCORE_PLACEHOLDER_MODE,
                options=[{"label": " words outside the vocabulary as \u201crare\u201d", "value": "on"}],
                value=[],
                inline=True,
            ),
            html.Span(
                "Off (the default for a text that is not the model's own): every word is read letter by letter, "
                "so an unknown or foreign word costs what its letters cost. On: the paper's test protocol (a model "
                "of words or tokens always reads an unknown one as its placeholder <rare>).",
                className="hint",
            ),
        ),
        dcc.Loading(html.Div(id=ids.SCORE_OUTPUT)),
    )
    return html.Div([html.H2("Generate and score"), sample_card, score_card])


@callback(
    Output(ids.SAMPLE_PREFIX, "value"),
    Input(ids.SESSION, "data"),
    Input(ids.MODEL_VERSION, "data"),
)
def prefix_for_model(session_id: str | None, _version: Any) -> str:
    """The default prefix: a frequent phrase of the current model's own text (not the sample corpus's)."""
    try:
        return generate_service.default_prefix(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS:
        return ""


def marked(sample_text: str, mark_rare: bool, placeholder: str = api.DEFAULTS.RARE_WORD) -> list[Any]:
    """The sampled text with the placeholder (``rare``, or ``<rare>`` in a model of words) marked as a token (when
    asked)."""
    if not mark_rare:
        return [sample_text]
    return [
        html.Mark(piece, className="rare-token", title="the placeholder for a word outside the vocabulary")
        if is_placeholder
        else piece
        for piece, is_placeholder in generate_service.placeholder_pieces(sample_text, placeholder)
    ]


@callback(
    Output(ids.SAMPLE_OUTPUT, "children"),
    Input(ids.SAMPLE_BUTTON, "n_clicks"),
    State(ids.SAMPLE_LENGTH, "value"),
    State(ids.SAMPLE_SEED, "value"),
    State(ids.SAMPLE_PREFIX, "value"),
    State(ids.SAMPLE_MARK_RARE, "value"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def sample(
    _clicks: int | None, length: Any, seed: Any, prefix: str | None, mark_rare: Any, session_id: str | None
) -> Any:
    ui.require_click(_clicks)
    try:
        folder = sessions.session_folder(session_id)
        generated = generate_service.sample(folder, length, seed, prefix)
        shown = generate_service.as_model_reads(folder, prefix) if prefix else ""
        gap, placeholder = generate_service.reading(folder)
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc)
    # the prefix (as the model read it) in muted type, then the sampled continuation
    shown += gap if shown else ""
    text = html.Pre(
        [
            html.Span(marked(shown, bool(mark_rare), placeholder), className="prefix"),
            html.Span(marked(generated, bool(mark_rare), placeholder)),
        ],
        className="preview",
    )
    if len(generated) >= int(float(length)):
        return text
    note = (
        f"Sampling stopped after {len(generated):,} characters: the model has no transition out of the last clone "
        "it reached (a clone of a symbol that ends the training text, for instance)."
    )
    return html.Div([text, html.Div(note, className="hint")])


@callback(
    Output(ids.SCORE_OUTPUT, "children"),
    Input(ids.SCORE_BUTTON, "n_clicks"),
    State(ids.SCORE_TEXT, "value"),
    State(ids.SCORE_PLACEHOLDER_MODE, "value"),
    State(ids.SESSION, "data"),
    background=True,
    running=[(Output(ids.SCORE_BUTTON, "disabled"), True, False)],
    prevent_initial_call=True,
)
@jobs.charged_from_fork  # its job's process charged to the memory budget from its fork
def score(_clicks: int | None, raw_text: str | None, placeholder: Any, session_id: str | None) -> Any:
    ui.require_click(_clicks)
    try:
        folder = sessions.session_folder(session_id)
        with ui.request_job(folder, "Scoring"):
            result = generate_service.score(folder, raw_text, placeholder=bool(placeholder))
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc)
    note = ""
    if result["zero_probability_events"]:
        note = f"; {result['zero_probability_events']:,} zero-probability transition(s) scored by the back-off"
    symbols = services.plural(result["symbols"], "symbol")
    return html.Div(
        [
            ui.message(f"{result['bps']:.4f} bits per symbol over {symbols}{note}.", "ok"),
            placeholder_report(result["rare"]),
            surprisal_view(result["surprisal"], result["symbols"]),
        ]
    )


def placeholder_report(rare: dict[str, Any]) -> Any:
    """How many words the model read as the placeholder, and a warning when the share is far from the training
    text's (the placeholder is easy to predict, so the BPS flatters a text full of unknown words)."""
    if not rare["vocabulary"]:
        return None
    words = services.plural(rare["words"], "word")
    examples = f" (e.g. {', '.join(rare['examples'][:5])})" if rare["examples"] else ""
    how = "scored as the placeholder \u201crare\u201d" if rare.get("placeholder") else "scored letter by letter"
    line = f"{rare['replaced']:,} of the {words} ({rare['share']:.0%}) are outside the model's vocabulary and were "
    line += how + examples
    if rare["training_share"] is not None:
        line += f"; in the model's own held-out text {rare['training_share']:.0%} of the words are."
    else:
        line += "."
    if rare["far"] and rare.get("placeholder"):
        warning = (
            " The share is far from the model's own held-out text's, so this BPS does not compare with the model's "
            "own: "
            "\u201crare\u201d is easy to predict, and a text full of unknown words scores too well."
        )
        return html.Div(ui.message(line + warning, "error"), id=ids.SCORE_PLACEHOLDER)
    return html.Div(line, className="hint", id=ids.SCORE_PLACEHOLDER)


SURPRISAL_FULL_BITS = 8.0
"""The surprisal at which a character's shading is darkest."""


def surprisal_view(characters: list[tuple[str, float]], total: int) -> html.Div:
    """The normalised text with every character shaded by its surprisal -log2 P(x_n | x_<n) (hover: the bits)."""
    spans = [
        html.Span(
            char,
            title=f"{char!r}: {bits:.2f} bits",
            style={"backgroundColor": f"rgba(214, 39, 40, {min(bits / SURPRISAL_FULL_BITS, 1.0):.2f})"},
        )
        for char, bits in characters
    ]
    shown = f" (the first {len(characters):,} of {total:,})" if len(characters) < total else ""
    return html.Div(
        [
            html.Div(
                f"Each character shaded by its surprisal, -log2 P(character | the text before it): clear at 0 bits, "
                f"darkest at {SURPRISAL_FULL_BITS:g} bits or more; hover for the figure{shown}.",
                className="hint",
            ),
            html.Pre(spans, id=ids.SCORE_SURPRISAL, className="preview"),
        ]
    )
