"""The Train and Compare pages' form values checked and turned into what the services take: the training options
(:func:`options_from_form`) and the learners and settings of a comparison, with one sentence on a value that cannot
work; the time estimates the pages show beside them.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from app import config, services
from app.errors import UserError
from app.services.learner_settings import (  # the learners' settings, below the form layer (re-exported here)
    APP_OPTIONS,
    LEARNER_LABELS,
    PICKED,
    SECONDS_PER_SYMBOL,
    SETTINGS,
    SHORT_NAMES,
    Setting,
    check_learners,
    chmm_runs,
    estimate_seconds,
    shown_settings,
    unavailable,
)
from engine import api

DEFAULTS = api.TrainOptions()


def _number(form: dict[str, Any], name: str, label: str, kind: type, low: float, high: float) -> Any:
    value = form.get(name)
    if value is None or value == "":
        raise UserError(f"Enter the {label}, a number from {low:,g} to {high:,g}.")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"The {label} must be a number, got {value!r}.") from None
    if kind is int and not number.is_integer():
        raise UserError(f"The {label} must be a whole number, got {value!r}.")
    if not (low <= number <= high) or not math.isfinite(number):
        raise UserError(f"The {label} must lie between {low:g} and {high:g}, got {value!r}.")
    return int(number) if kind is int else number


def _optional_number(form: dict[str, Any], name: str, label: str, kind: type, low: float, high: float) -> Any:
    """:func:`_number`, or None (the engine's automatic choice) for an empty field."""
    if form.get(name) is None or form.get(name) == "":
        return None
    return _number(form, name, label, kind, low, high)


def _choice(form: dict[str, Any], name: str, choices: tuple[str, ...], default: str) -> str:
    """The form's ``name`` if it is one of ``choices`` (empty: ``default``), else UserError in one sentence."""
    value = form.get(name) or default
    if value not in choices:
        raise UserError(f"Unknown {name} {value!r}; choose one of {', '.join(choices)}.")
    return value


def options_from_form(form: dict[str, Any]) -> api.TrainOptions:
    """The training options of the Train page's form (keys: states, allocation, normalisation, algorithm,
    iterations, batch_size, restarts, start, pseudocount, budget, validation, seed, backend), with a clear
    UserError on a value that cannot work. An empty field is the engine's default (:data:`DEFAULTS`, the same
    object the command line reads): the states and the pseudocount are then chosen on validation within the budget
    (minutes, at most :data:`SEARCH_SHARE` of this server's job limit), the batch size and restarts automatic."""
    backend = form.get("backend") or DEFAULTS.backend
    choices = api.backend_choices(in_app=True)
    if backend not in choices:
        raise UserError(f"Unknown backend {backend!r}; choose one of {', '.join(c.upper() for c in choices)}.")
    available, reason = api.backend_status(backend, cheap=True)
    if not available:
        raise UserError(
            f"The {backend.upper()} backend is not available here: {reason}. Choose the {DEFAULTS.backend.upper()} "
            "backend."
        )
    algorithm = form.get("algorithm") or DEFAULTS.algorithm
    if algorithm not in api.CHOICES.ALGORITHMS:
        raise UserError(f"Unknown algorithm {algorithm!r}; choose one of {', '.join(api.CHOICES.ALGORITHMS)}.")
    start = form.get("start") or DEFAULTS.start
    if start not in api.CHOICES.STARTS:
        raise UserError(f"Unknown start {start!r}; choose one of {', '.join(api.CHOICES.STARTS)}.")
    states = _optional_number(form, "states", "number of states", int, 2, 10**8)
    pseudocount = _optional_number(form, "pseudocount", "pseudocount", float, 0.0, 1.0)
    options = api.TrainOptions(
        states=DEFAULTS.states if states is None else states,
        pseudocount=DEFAULTS.pseudocount if pseudocount is None else pseudocount,
        max_memory=config.max_train_bytes(),
        allocation=form.get("allocation") or DEFAULTS.allocation,
        normalisation=form.get("normalisation") or DEFAULTS.normalisation,
        unit=_choice(form, "unit", api.CHOICES.UNITS, DEFAULTS.unit),
        algorithm=algorithm,
        iterations=_number(form, "iterations", "number of iterations", int, 1, 100_000),
        batch_size=_optional_number(form, "batch_size", "batch size", int, 2, 10**9),
        restarts=_optional_number(form, "restarts", "number of restarts", int, 1, api.DEFAULTS.MAX_RESTARTS),
        start=start,
        validation=_number(form, "validation", "validation share", float, 0.0, 0.5),
        seed=_number(form, "seed", "seed", int, 0, 2**32 - 1),
        backend=backend,
    )
    if options.searches:
        most = SEARCH_SHARE * config.max_job_seconds() / 60
        budget = _optional_number(form, "budget", "budget in minutes", float, 0.1, most)
        options = replace(options, budget=min(DEFAULTS.budget or most, most) if budget is None else budget)
    options.validate()
    return options


SEARCH_SHARE = 0.7
"""Share of the job's time limit (CHMM_MAX_JOB_MINUTES) the automatic search of states or pseudocount may use, its
chosen setting's restarts included, so that the refit still fits: the search leaves out candidates and restarts
predicted to pass it."""


def learner_settings(values: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """The page's settings as learner options: each typed value checked as a whole number in its range (UserError
    with a sentence otherwise); an empty field takes the default."""
    chosen: dict[str, dict[str, Any]] = {}
    for kind, settings in SETTINGS.items():
        given = (values or {}).get(kind, {})
        chosen[kind] = {}
        for setting in settings:
            value = given.get(setting.option)
            if value in (None, ""):
                continue
            what = f"the {SHORT_NAMES[kind]}'s {setting.label}"
            chosen[kind][setting.option] = services.whole_number(value, what, setting.low, setting.high)
    return chosen


__all__ = [
    "APP_OPTIONS", "LEARNER_LABELS", "PICKED", "SECONDS_PER_SYMBOL", "SETTINGS", "SHORT_NAMES", "Setting",
    "check_learners", "chmm_runs", "estimate_seconds", "learner_settings", "options_from_form", "shown_settings",
    "unavailable",
]  # fmt: skip
