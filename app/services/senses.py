"""The senses of a word (or token, or character) on the Communities page: each of its clones with the company it
keeps, its previous and next words in the clone graph of the run on screen and, where the session has the model's
training text (:func:`app.services.corpus.reference_corpus`), how often it reads the word there with an example
(:func:`engine.api.graph.word_senses`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app import sessions
from app.services import UserError, kept, visible
from app.services import graphs as graph_service
from app.services.corpus import reference_corpus
from engine import api

SHOWN_SENSES = 12
"""The clones a word's senses list (those with the most flow); the rest are counted."""


def single_symbol(model: Any, phrase: Any) -> str | None:
    """The one symbol ``phrase`` is, normalised as the model's corpus was ("Bank" -> "bank" in a word model), or
    None when it is none or several."""
    text = "" if phrase is None else str(phrase)
    parts = [p for p in model.codec.split(model.codec.normalise_all(text).strip(" ")) if p]  # no placeholder
    return parts[0] if len(parts) == 1 else None


def _company(model: Any, pairs: tuple[tuple[int, float], ...]) -> str:
    """Symbols with their probabilities: "the (41%), a (12%)"."""
    return ", ".join(f"{visible(model.symbols[s])} ({p:.0%})" for s, p in pairs if p >= 0.005)


def _example(model: Any, codes: Any, example: tuple[int, int, int] | None) -> str:
    """One occurrence's window with the word in brackets: "…said the [bank] of the…"."""
    if example is None or codes is None:
        return ""
    start, stop, at = example
    before, after = model.decode_symbols(codes[start:at]), model.decode_symbols(codes[at + 1 : stop])
    joiner = "" if model.codec.characters else " "
    return f"…{before}{joiner}[{visible(model.symbols[int(codes[at])])}]{joiner}{after}…"


def word_senses(folder: Path, phrase: Any, run: str = graph_service.CURRENT_RUN) -> dict[str, Any]:
    """The senses of the one symbol ``phrase`` is: rows (clone label, deepest module, share of the symbol's flow,
    previous and next words, how many decoded occurrences it reads, an example), the symbol, how often it occurs
    in the training text and how many occurrences were decoded (0 without the text). UserError in one sentence
    when ``phrase`` is not one symbol of the model."""
    saved = graph_service.read_run(folder, run, "Run Infomap first: a word's clones are read in the current run.")
    model = graph_service.view_model(folder)
    symbol = single_symbol(model, phrase)
    if symbol is None or symbol not in model.symbol_index():
        unit = model.codec.unit.rstrip("s")
        raise UserError(f"Senses are shown for one {unit} of the model's alphabet; {str(phrase)[:40]!r} is not one.")
    graph = graph_service.session_graph(folder, saved["threshold"])
    text = reference_corpus(folder, model)
    model_file = [sessions.current_model_path(folder)]
    text_key = None if text is None else (len(text), hash(text))
    codes = None
    if text is not None:  # the training text's symbols, read once per model and text
        codes = kept.kept(("reference codes", text_key), model_file, lambda: api.encode_for_model(model, text))
    key = ("senses", symbol, saved["threshold"], text_key)
    found = kept.kept(key, model_file, lambda: api.graph.word_senses(model, graph, symbol, codes))
    deepest = graph_service.deepest_modules(folder, saved, run)
    total = sum(s.flow for s in found.senses) or 1.0
    rows = [
        {
            "label": f"{visible(symbol)}:{sense.rank}",
            "clone": sense.clone,
            "module": deepest.get(sense.clone, ""),
            "share": sense.flow / total,
            "previous": _company(model, sense.previous),
            "next": _company(model, sense.following),
            "reads": sense.occurrences,
            "example": _example(model, codes, sense.example),
        }
        for sense in found.senses[:SHOWN_SENSES]
    ]
    return {
        "symbol": visible(symbol),
        "rows": rows,
        "more": max(len(found.senses) - SHOWN_SENSES, 0),
        "occurrences": found.occurrences,
        "decoded": found.decoded,
        "unread": found.unread,
        "window": found.window,
        "reference": text is not None,
    }
