"""The Maps page's sensor noise: the form's value checked, and a map learned from a sensor's readings of the walk
(:func:`engine.cognitive.evidence.learn_map_through_noise`) for the map job of :mod:`app.services.maps`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from app.services import UserError
from engine import api


def check_noise(value: Any) -> float:
    """The form's sensor noise as a probability from 0 to :data:`engine.api.maps.MAX_NOISE` (empty: 0)."""
    if value is None or value == "":
        return 0.0
    try:
        noise = float(value)
    except (TypeError, ValueError):
        noise = float("nan")
    if not 0.0 <= noise <= api.maps.MAX_NOISE:
        raise UserError(f"The sensor noise must be a number from 0 to {api.maps.MAX_NOISE:g}, got {value!r}.")
    return noise


def learn_through_noise(
    walk: api.maps.WalkFile, request: Any, progress: Callable[..., None]
) -> tuple[api.maps.ActionCHMM, dict[str, Any]]:
    """The map of ``walk`` as a sensor wrong with probability ``request.noise`` reads it (its readings drawn with the
    request's seed), learned from their soft evidence with the engine's map defaults; the summary says how many
    readings were wrong. The walk itself (the true observations) stays what the page shows and keeps."""
    readings = api.maps.noisy_readings(walk.observations, len(walk.symbols), request.noise, seed=request.seed)
    options = api.maps.MAP_DEFAULTS
    model, summary = api.maps.learn_map_through_noise(
        readings.symbols, walk.actions, walk.symbols, walk.action_names, request.noise, request.clones,
        options.iterations, options.pseudocount, options.viterbi_iterations, request.seed, options.merge,
        restarts=request.restarts, **soft_progress(progress, request.restarts),
    )  # fmt: skip
    summary["read_wrong"] = float(np.mean(readings.symbols != walk.observations))
    return model, summary


def soft_progress(progress: Callable[..., None], restarts: int) -> dict[str, Any]:
    """The engine's progress callbacks (keyword arguments ``progress`` and ``restart_progress``) of a map learned
    from soft evidence, as the map job's ``progress(stage, iteration, bits, restart)`` hears them: with one restart
    its iterations are stage "em"; with several, each restart's are stage "em" of that restart and the kept one's on
    the whole walk stage "soft-refit" (:func:`app.services.maps.progress_of`). A cancel raised by ``progress`` stops
    the engine in either."""
    if restarts > 1:
        return {
            "progress": lambda iteration, bits: progress("soft-refit", iteration, bits, 0),
            "restart_progress": lambda restart, iteration, bits: progress("em", iteration, bits, restart),
        }
    return {"progress": lambda iteration, bits: progress("em", iteration, bits, 0), "restart_progress": None}
