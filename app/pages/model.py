"""Model page: the session's current model (summary, clones per symbol, training history), load a saved model,
download the current one, undo back to the previous model."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, callback, dcc, html

from app import config, figures, ids, services, sessions, transfers, ui
from app.services import models as model_service

dash.register_page(__name__, path="/", name="Model", title="CHMM Explorer · Model", order=0)
ui.start_downloads(ids.MODEL_DOWNLOAD)


def term(label: str, explanation: str) -> html.Abbr:
    """A term with its explanation as a tooltip (dotted underline)."""
    return html.Abbr(label, title=explanation, className="term")


CLONE = (
    "A clone is a hidden state that always emits the same character. A character's clones tell apart the contexts "
    "it occurs in (the 'e' of 'the' and the 'e' of 'she'), which is how a CHMM learns long-range structure."
)
BPS = (
    "Bits per symbol: the average of -log2 P(next character | the text before it) on a text. Lower is better; "
    "1.6 means each character costs 1.6 bits to encode. Test BPS is measured on the last 10% of the corpus, which "
    "training never saw."
)
STORED = (
    "Entries of T the model keeps: one per pair of clones whose characters follow each other somewhere in the "
    "corpus (the blocks T(i, j) of the paper)."
)


def intro() -> html.Div:
    """What the app is and what to do first."""
    return html.Div(
        [
            html.P(
                [
                    "CHMM Explorer learns ",
                    html.Strong("cloned hidden Markov models"),
                    " of text (Dedieu et al., 2019): every character gets several hidden states, its ",
                    term("clones", CLONE),
                    ", and the transitions between clones learn which contexts a character occurs in. The model "
                    "below is the current one of this session; every page works on it.",
                ]
            ),
            html.P(
                [
                    html.Strong("Next: "),
                    dcc.Link("train a model on your text", href="/train"),
                    " (or on the sample), ",
                    dcc.Link("sample and score text", href="/generate"),
                    ", or ",
                    dcc.Link("see the words its graph has learned", href="/communities"),
                    " (Infomap modules).",
                ]
            ),
        ],
        className="intro card",
        id=ids.MODEL_INTRO,
    )


def layout(**_query: Any) -> html.Div:
    return html.Div(
        [
            html.H2("Current model"),
            intro(),
            html.Div(id=ids.MODEL_SUMMARY),
            html.Div(
                [
                    dcc.Graph(id=ids.MODEL_CLONES_CHART, config={"displaylogo": False}),
                    dcc.Graph(id=ids.MODEL_HISTORY_CHART, config={"displaylogo": False}),
                ],
                className="two-columns",
            ),
            ui.card(
                "Load, download, undo",
                ui.told_upload(
                    dcc.Upload(
                        html.Div(["Drop a saved model (.npz) here or ", html.A("choose a file")]),
                        id=ids.MODEL_UPLOAD,
                        max_size=config.browser_upload_bytes(config.max_model_upload_bytes()),
                        className="upload",
                    ),
                    "model",
                    transfers.UPLOAD_LIMITS["model"](),
                    ids.MODEL_MESSAGE,
                    model_service.MODEL_TOO_LARGE,
                ),
                ui.buttons(
                    html.Button("Download the current model", id=ids.MODEL_DOWNLOAD_BUTTON, className="button"),
                    html.Button("Undo (back to the previous model)", id=ids.MODEL_UNDO, className="button"),
                ),
                dcc.Store(id=ids.MODEL_DOWNLOAD),  # a download link (the file by its route)
                html.Div(id=ids.MODEL_MESSAGE),
            ),
        ]
    )


def summary_view(summary: dict[str, Any] | None) -> tuple[Any, Any, Any]:
    """The summary table and the two charts for a model summary (see :func:`app.model_service.model_summary`)."""
    if summary is None:
        note = "no model yet: train one on the Train page or load a saved .npz below"
        return ui.message(note.capitalize() + "."), figures.empty_figure(), figures.empty_figure()
    sizes = summary.get("sizes") or {}
    size_text = (
        f"{sizes.get('train', 0):,} train, {sizes.get('validation', 0):,} validation, {sizes.get('test', 0):,} test"
        if sizes
        else None
    )
    stopped = services.stop_reason(summary["stopped"]) if summary.get("stopped") else None
    if stopped and summary.get("best_iteration"):
        stopped = f"{stopped} (best iteration {summary['best_iteration']}, refit {summary.get('refit_iterations')})"
    pruned = summary.get("pruned") or {}
    when = " (before pruning)" if pruned else ""
    table = ui.facts(
        [
            (term("States (clones)", CLONE), f"{summary['states']:,}"),
            ("Alphabet", alphabet_text(summary)),
            (term("Transitions", STORED), model_service.transitions_text(summary)),
            ("Pruned", pruned_text(pruned) if pruned else "no (Prune page: remove the small transitions)"),
            (term("BPS train" + when, BPS), ui.bps(summary.get("train_bps"))),
            (term("BPS validation" + when, BPS), ui.bps(summary.get("validation_bps"))),
            (term("BPS test" + when, BPS), ui.bps(summary.get("test_bps"))),
            ("Corpus", summary.get("corpus")),
            ("Symbols (train/validation/test)", size_text),
            ("Normalisation", summary.get("normalisation")),
            ("Unit", summary.get("unit")),
            ("Algorithm", summary.get("algorithm")),
            ("Allocation", summary.get("allocation")),
            ("Seed", summary.get("seed")),
            ("Stopped", stopped),
            ("Created", summary.get("created")),
            ("File size", services.format_bytes(summary["file_bytes"])),
        ]
    )
    return table, figures.clones_figure(summary), figures.history_figure(summary.get("history") or [])


ALPHABET_SHOWN = 200
"""The most symbols the Model page lists (a model of words has thousands)."""


def alphabet_text(summary: dict[str, Any]) -> str:
    """The alphabet in one line: its characters side by side, or its first words separated by spaces."""
    symbols = summary["symbols"]
    if summary.get("unit", "characters") == "characters":
        return f"{summary['alphabet_size']} symbols: {''.join(symbols)}"
    more = f" … and {len(symbols) - ALPHABET_SHOWN:,} more" if len(symbols) > ALPHABET_SHOWN else ""
    return f"{summary['alphabet_size']:,} {summary['unit']}: {' '.join(symbols[:ALPHABET_SHOWN])}{more}"


def pruned_text(record: dict[str, Any]) -> str:
    """The last pruning of the model in one line: its rule, what it kept and what it cost."""
    rule = f"below {record['threshold']:.2g}" if record.get("threshold") is not None else "by rule"
    text = f"{rule}: {record.get('kept_fraction', 1.0):.1%} of the non-zero transitions kept"
    if record.get("bps_after") is not None:
        text += f"; BPS {record['bps_before']:.4f} before, {record['bps_after']:.4f} after"
        if record.get("scored_on"):
            text += f" on {record['scored_on']}"
    return text


@callback(
    Output(ids.MODEL_SUMMARY, "children"),
    Output(ids.MODEL_CLONES_CHART, "figure"),
    Output(ids.MODEL_HISTORY_CHART, "figure"),
    Input(ids.SESSION, "data"),
    Input(ids.MODEL_VERSION, "data"),
)
def show_model(session_id: str | None, _version: Any) -> tuple[Any, Any, Any]:
    try:
        summary = model_service.model_summary(sessions.session_folder(session_id))
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc), figures.empty_figure(), figures.empty_figure()
    return summary_view(summary)


load_model = ui.session_action(
    Output(ids.MODEL_MESSAGE, "children"),
    Output(ids.MODEL_VERSION, "data", allow_duplicate=True),
    Input(ids.MODEL_UPLOAD, "contents"),
    lambda folder, contents, filename: model_service.load_model_upload(folder, contents, filename),
    State(ids.MODEL_UPLOAD, "filename"),
)
"""Load a saved model (an upload) as the session's current model."""


undo = ui.session_action(
    Output(ids.MODEL_MESSAGE, "children", allow_duplicate=True),
    Output(ids.MODEL_VERSION, "data", allow_duplicate=True),
    Input(ids.MODEL_UNDO, "n_clicks"),
    lambda folder, _clicks: model_service.undo_model(folder),
)
"""Undo: the previous model becomes current again."""


@callback(
    Output(ids.MODEL_DOWNLOAD, "data"),
    Output(ids.MODEL_MESSAGE, "children", allow_duplicate=True),
    Input(ids.MODEL_DOWNLOAD_BUTTON, "n_clicks"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def download(clicks: int | None, session_id: str | None) -> tuple[Any, Any]:
    return ui.send_current_model(clicks, session_id)
