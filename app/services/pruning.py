"""The Prune page: the sweep of thresholds against bits per symbol, and applying a pruning."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from app import config, memory, sessions
from app.services import UserError, describe_error, file_name, parse_threshold
from app.services.corpus import corpus_info, read_corpus
from app.services.models import load_current, prune_bytes, view_model
from engine import api
from engine.api import CHMM
from engine.errors import CHMMError

PRUNE_THRESHOLDS = [1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1]


PRUNE_VALIDATION_SHARE = 0.1


# ------------------------------------------------------------------------------------------ prune
PRUNE_LOWEST, PRUNE_HIGHEST = 1e-5, 1e-1
"""The Prune page's range of thresholds (the slider's ends)."""


def threshold_from_slider(value: Any) -> float:
    """The pruning threshold for the slider's value (its base-10 logarithm, -5 to -1)."""
    try:
        exponent = float(value)
    except (TypeError, ValueError):
        raise UserError(f"The threshold slider gave {value!r}, not a number.") from None
    if not -5.0 <= exponent <= -1.0:
        raise UserError("The threshold must lie between 1e-5 and 1e-1.")
    return 10.0**exponent


def prune_threshold(value: Any) -> float:
    """A pruning threshold typed on the Prune page: a probability from 1e-5 to 0.1 (the slider's range)."""
    threshold = parse_threshold(value)
    if not PRUNE_LOWEST <= threshold <= PRUNE_HIGHEST * (1 + 1e-9):
        raise UserError(f"The threshold must lie between {PRUNE_LOWEST:g} and {PRUNE_HIGHEST:g}, got {value!r}.")
    return threshold


def prune_validation_text(folder: Path, model: CHMM | None = None) -> tuple[str, str]:
    """The text the sweep scores and where it comes from: the split the model's training held out (validation, or
    test after a refit) when the session's corpus (or the bundled sample corpus) is the text the model was trained
    on, else the last 10% of that corpus."""
    info = corpus_info(folder)
    if info is not None:
        given, name = read_corpus(folder)[0], info.name
        corpus_text = given if isinstance(given, str) else "\n\n".join(d.text for d in given)
    model = load_current(folder) if model is None else model
    if info is None:
        trained_on = file_name(model.metadata.get("corpus"))
        if trained_on != config.SAMPLE_CORPUS.name or not config.SAMPLE_CORPUS.is_file():
            # the sample corpus is not this model's text (issue 47: a model opened with --model was scored on it)
            what = f"its training text ({trained_on})" if trained_on else "a text like its training text"
            raise UserError(f"There is no text to score this model on: upload {what} on the Train page first.")
        corpus_text, name = api.corpora.read_text(config.SAMPLE_CORPUS), config.SAMPLE_CORPUS.name
    held_out = api.held_out_split_text(model, given if info is not None else corpus_text)
    if held_out:
        split, part = held_out
        note = "" if part == "validation" else "; its validation part was trained on in the refit"
        return split, f"the model's held-out {part} split of {name} ({len(split):,} characters{note})"
    tail = corpus_text[int(len(corpus_text) * (1 - PRUNE_VALIDATION_SHARE)) :]
    if not tail.strip():
        raise UserError(f"The last {PRUNE_VALIDATION_SHARE:.0%} of {name} is empty; upload a longer corpus.")
    sizes = model.metadata.get("sizes") or {}
    why = "not the model's corpus"
    if sizes.get("validation") == 0:
        why = "the model was trained without a validation split"
    return tail, f"the last {PRUNE_VALIDATION_SHARE:.0%} of {name} ({len(tail):,} characters; {why})"


MAX_SWEEP_WORK = 10_000_000_000
"""The sweep scores at most this many (character, non-zero transition) pairs per threshold, so that it stays
within a second or two in a web request: 33,809 characters on the sample model (295,775 non-zeros; the whole
sweep 0.14 s for 6,761 characters on 2 cores), at least 1,000 however large the model."""


SWEEP_COPIES = 6
"""Copies of the model's transitions (4 bytes each) a threshold of the sweep holds at once (the pruned model in
float32 and its float64 row normalisation): a 24,000-state model (1.9 GB of T) drove a web
worker to 21.4 GB and the OOM killer before this bound."""


def sweep_bytes(model: Any) -> int:
    """The memory a sweep's threshold or a pruning takes beside the model: the larger of :data:`SWEEP_COPIES`
    float32 copies of its non-zero transitions and what pruning it takes (:func:`app.services.models.prune_bytes`)."""
    return max(model.n_nonzero() * 4 * SWEEP_COPIES, prune_bytes(model))


def check_sweep_memory(model: Any) -> None:
    """Refuse (UserError) a sweep or a prune whose copies of T would pass the app's model memory bound."""
    need = sweep_bytes(model)
    limit = config.max_model_memory_bytes()
    if need > limit:
        raise UserError(
            f"Pruning this model in a web request would need about {config.format_bytes(need)} of memory, more than "
            f"the {config.format_bytes(limit)} this server allows (CHMM_MAX_MODEL_MEMORY_MB); use `chmm prune` on "
            "the command line."
        )


def _bounded_validation(folder: Path, model: Any) -> tuple[str, str]:
    """The text a prune scores the model on and its source in words, after :func:`check_sweep_memory`: at most
    :data:`MAX_SWEEP_WORK` over the model's non-zeros characters of it (a web request: bounded to a few seconds
    whatever the model and the corpus)."""
    check_sweep_memory(model)
    validation, source = prune_validation_text(folder, model)
    most = max(1_000, MAX_SWEEP_WORK // max(model.n_nonzero(), 1))
    if len(validation) > most:
        validation, source = validation[:most], f"the first {most:,} characters of {source}"
    return validation, source


def prune_sweep(folder: Path, thresholds: list[float] | None = None) -> dict[str, Any]:
    """Kept share of the non-zeros and BPS of the validation text for each threshold (the paper's Fig 3(d))."""
    model = view_model(folder)
    validation, source = _bounded_validation(folder, model)
    with memory.reserved(sweep_bytes(model), "The prune sweep"):
        try:
            points = api.prune_sweep_text(model, list(thresholds or PRUNE_THRESHOLDS), validation)
            unpruned = api.score_text(model, validation)
        except CHMMError as exc:
            raise UserError(f"The sweep cannot score {source}: {describe_error(exc)}") from None
    return {
        "points": [point._asdict() for point in points],
        "bps_unpruned": unpruned.bps,
        "nonzeros": model.n_nonzero(),
        "source": source,
    }


def apply_prune(folder: Path, log10_threshold: Any = None, typed: Any = None) -> str:
    """Prune the current model at the slider's threshold (its base-10 logarithm) or at a ``typed`` one, and make the
    result current (the old model is kept for undo)."""
    threshold = prune_threshold(typed) if typed is not None else threshold_from_slider(log10_threshold)
    model = view_model(folder)  # shared, read only: the pruned model is a new one
    validation, source = _bounded_validation(folder, model)
    with memory.reserved(sweep_bytes(model), "Pruning this model"):  # the pruned model and its copies until saved
        try:
            outcome = api.prune_model(model, threshold=threshold, validation_text=validation)
        except CHMMError as exc:
            raise UserError(f"The model cannot be pruned: {describe_error(exc)}") from None
        outcome.model.metadata["pruned"]["scored_on"] = source
        jobs_dir = folder / sessions.JOBS
        jobs_dir.mkdir(exist_ok=True)
        candidate = jobs_dir / f"prune-{uuid.uuid4().hex}.npz"
        try:
            api.save_model(outcome.model, candidate)
            sessions.install_model(folder, candidate)
        finally:
            candidate.unlink(missing_ok=True)
        s = outcome.summary
        del outcome
    return (
        f"Pruned at {threshold:.2g}: kept {s['nonzeros_after']:,} of {s['nonzeros_before']:,} non-zero transitions "
        f"({s['kept_fraction']:.1%}); BPS on {source}: {s['bps_before']:.4f} before, {s['bps_after']:.4f} after. "
        "It is now the current model (undo on the Model page goes back)."
    )
