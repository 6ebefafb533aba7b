"""The services behind the pages' callbacks, one module per concern: each function takes a session folder and the
callback's inputs and returns what the page shows, raising :class:`UserError` (or an engine error) with a
one-sentence message on bad input. The callbacks only unpack inputs, call these and format the result, so the tests
call these directly. Everything that computes goes through :mod:`engine.training`, :mod:`engine.api`,
:mod:`engine.backends.model_files` and :mod:`engine.corpora.text`.

- :mod:`app.services.corpus`: uploads of corpora, the session's corpus and its preview;
- :mod:`app.services.models`: the session's current model: summary, upload, download, undo;
- :mod:`app.services.generate`: sampling and scoring text;
- :mod:`app.services.decode`: scrambling and decoding sentences;
- :mod:`app.services.pruning`: the pruning sweep and applying a pruning;
- :mod:`app.services.graphs`: Infomap communities, module tables and subgraphs, exports;
- :mod:`app.services.training_jobs`: the training job (run in the background), its progress, runs and cancel;
- :mod:`app.services.comparisons`: the comparison job of the Compare page and its saved results;
- :mod:`app.services.maps`: the Maps page: rooms, walks, the map job (a CHMM with actions), place fields, routes.

The pages check their forms with :mod:`app.forms` and draw with :mod:`app.figures`.

This module holds what they share: the error type, messages, number formats and input parsing.
"""

from __future__ import annotations

from typing import Any

from app.config import format_bytes as format_bytes  # the services' callers format sizes with it
from app.errors import DISK_FULL as DISK_FULL
from app.errors import MAX_MESSAGE_CHARACTERS as MAX_MESSAGE_CHARACTERS
from app.errors import OUT_OF_MEMORY as OUT_OF_MEMORY
from app.errors import SERVER_NAMES as SERVER_NAMES
from app.errors import SESSION_GONE as SESSION_GONE
from app.errors import UserError as UserError
from app.errors import bounded as bounded
from app.errors import describe_error as describe_error
from app.errors import disk_full_error as disk_full_error
from engine.api import check_threshold, corpora
from engine.errors import CHMMError

VISIBLE = {" ": "\u2423", "\n": "\u23ce", "\t": "\u21e5", "\r": "\u240d"}


def visible(symbol: str) -> str:
    """A symbol as shown in the page: whitespace as a visible glyph."""
    return VISIBLE.get(symbol, symbol)


file_name = corpora.corpus_file_name
"""The last part of a path as a model's metadata records it: the corpus's file name, never the folder it lay in on
another machine (:func:`engine.api.corpora.corpus_file_name`)."""


STOP_REASONS = {
    "early_stopping": "early stopping on validation",
    "max_iterations": "at the iteration limit",
    "converged": "converged (likelihood gain below the tolerance)",
    "budget": "at the search's time budget (its best model so far)",
    "cancelled": "cancelled",
    "failed": "failed",
}
"""Why training stopped, in words, by the engine's code (engine.training.learning's ``stopped``)."""


def stop_reason(code: Any) -> str:
    """The engine's stop code in words (:data:`STOP_REASONS`); an unknown code as it is."""
    return STOP_REASONS.get(str(code), str(code).replace("_", " "))


def plural(count: int, noun: str) -> str:
    """``count`` and the noun, plural unless the count is 1: "1 symbol", "2,000 symbols"."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


# ------------------------------------------------------------------------------------------ generate and score
def whole_number(value: Any, what: str, low: int, high: int) -> int:
    if value is None or value == "":
        raise UserError(f"Enter {what}, a whole number from {low:,} to {high:,}.")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{what[:1].upper() + what[1:]} must be a whole number, got {value!r}.") from None
    if not number.is_integer() or not low <= number <= high:
        raise UserError(f"{what[:1].upper() + what[1:]} must be a whole number from {low:,} to {high:,}.")
    return int(number)


def optional_whole(value: Any, what: str, low: int, high: int) -> int | None:
    """A whole number typed in a filter's field, None when the field is empty."""
    if value is None or str(value).strip() == "":
        return None
    return whole_number(value, what, low, high)


def least_flow(value: Any) -> float:
    """A filter's least flow, a share of the graph's flow between 0 and 1, typed in a field (0 when empty)."""
    if value is None or str(value).strip() == "":
        return 0.0
    try:
        share = float(str(value).strip())
    except ValueError:
        raise UserError(f"The least flow must be a number between 0 and 1, got {str(value)[:40]!r}.") from None
    if not 0.0 <= share <= 1.0:
        raise UserError("The least flow is a share of the graph's flow: a number between 0 and 1.")
    return share


# ------------------------------------------------------------------------------------------ work in a web request
SCORE_WORK = 4e12
"""Characters times non-zero transitions that scoring may take in a web request (measured about 800 G a second on
the sample model, 2 cores: the sample model scores 1,000,000 characters in under a second; a 24,000-state model
scored 10^6 characters past gunicorn's 120 s before this bound)."""

DECODE_WORK = 2e10
"""The same for decoding scrambled text (constrained decoding: about 4 G a second on the sample model; on a
24,000-state model 5,000 characters took 47 s in the web worker before this bound)."""

PREFIX_WORK = 1e12
"""The same for the prefix Generate continues (a forward pass at about scoring's rate: 100,000 characters in 0.04 s
either way on the sample model, 2 cores), a quarter of scoring's budget, as what is sampled depends on the prefix's
end (issue 51: a 100,000-character prefix took 55 s in the web worker on a 24,174-state model before this bound).
Its length alone is bounded by the engine too (:data:`engine.api.DEFAULTS.MAX_PREFIX_CHARACTERS`, also ``chmm
sample``)."""


def check_work(characters: int, nonzeros: int, budget: float, what: str, command: str) -> None:
    """Refuse (UserError, one sentence) work that grows with the model and the input past ``budget`` (characters
    times non-zero transitions), before it starts, so no request holds a web worker for minutes; ``command`` is
    where to do it instead."""
    if characters * max(nonzeros, 1) > budget:
        most = int(budget // max(nonzeros, 1))
        raise UserError(
            f"{what} {characters:,} characters under this model ({nonzeros:,} transitions) is too much for a web "
            f"request: at most {most:,} characters here; use `{command}` on the command line for more."
        )


# ------------------------------------------------------------------------------------------ export
def parse_threshold(value: Any) -> float:
    """A pruning threshold typed by the user: a number strictly between 0 and 1 (e.g. ``1e-3``); the check is the
    engine's (:func:`engine.model.pruning.check_threshold`), its message shown in the page."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise UserError("Enter a pruning threshold between 0 and 1, e.g. 1e-3.")
    try:
        return check_threshold(value)
    except CHMMError as exc:
        message = str(exc)
        raise UserError(message[0].upper() + message[1:] + ".") from None
