"""The Train and Compare pages' form values checked and turned into what the services take: the training options
(:func:`options_from_form`) and the learners and settings of a comparison, with one sentence on a value that cannot
work; the time estimates the pages show beside them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from app import config, services
from app.services import UserError
from engine import training
from engine.backends import engines
from engine.peers import learners
from engine.training.learning import ALGORITHMS

DEFAULTS = training.TrainOptions()


def _number(form: dict[str, Any], name: str, label: str, kind: type, low: float, high: float) -> Any:
    value = form.get(name)
    if value is None or value == "":
        raise ValueError(f"Enter the {label}, a number from {low:,g} to {high:,g}.")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"The {label} must be a number, got {value!r}.") from None
    if kind is int and not number.is_integer():
        raise ValueError(f"The {label} must be a whole number, got {value!r}.")
    if not (low <= number <= high) or not math.isfinite(number):
        raise ValueError(f"The {label} must lie between {low:g} and {high:g}, got {value!r}.")
    return int(number) if kind is int else number


def _optional_number(form: dict[str, Any], name: str, label: str, kind: type, low: float, high: float) -> Any:
    """:func:`_number`, or None (the engine's automatic choice) for an empty field."""
    if form.get(name) is None or form.get(name) == "":
        return None
    return _number(form, name, label, kind, low, high)


def options_from_form(form: dict[str, Any]) -> training.TrainOptions:
    """The training options of the Train page's form (keys: states, allocation, normalisation, algorithm,
    iterations, batch_size, restarts, start, pseudocount, budget, validation, seed, backend), with a clear
    ValueError on a value that cannot work. An empty field is the engine's default (:data:`DEFAULTS`, the same
    object the command line reads): the states and the pseudocount are then chosen on validation within the budget
    (minutes, at most :data:`SEARCH_SHARE` of this server's job limit), the batch size and restarts automatic."""
    backend = form.get("backend") or DEFAULTS.backend
    choices = engines.backend_choices(in_app=True)
    if backend not in choices:
        raise ValueError(f"Unknown backend {backend!r}; choose one of {', '.join(c.upper() for c in choices)}.")
    available, reason = engines.backend_status(backend, cheap=True)
    if not available:
        raise ValueError(
            f"The {backend.upper()} backend is not available here: {reason}. Choose the {DEFAULTS.backend.upper()} "
            "backend."
        )
    algorithm = form.get("algorithm") or DEFAULTS.algorithm
    if algorithm not in ALGORITHMS:
        raise ValueError(f"Unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}.")
    start = form.get("start") or DEFAULTS.start
    if start not in training.STARTS:
        raise ValueError(f"Unknown start {start!r}; choose one of {', '.join(training.STARTS)}.")
    states = _optional_number(form, "states", "number of states", int, 2, 10**8)
    pseudocount = _optional_number(form, "pseudocount", "pseudocount", float, 0.0, 1.0)
    options = training.TrainOptions(
        states=DEFAULTS.states if states is None else states,
        pseudocount=DEFAULTS.pseudocount if pseudocount is None else pseudocount,
        max_memory=config.max_train_bytes(),
        allocation=form.get("allocation") or DEFAULTS.allocation,
        normalisation=form.get("normalisation") or DEFAULTS.normalisation,
        algorithm=algorithm,
        iterations=_number(form, "iterations", "number of iterations", int, 1, 100_000),
        batch_size=_optional_number(form, "batch_size", "batch size", int, 2, 10**9),
        restarts=_optional_number(form, "restarts", "number of restarts", int, 1, training.MAX_RESTARTS),
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


LEARNER_LABELS = {
    "chmm": "CHMM (online EM)",
    "densehmm": "DenseHMM (Sicking et al.)",
    "hmm": "HMM (Baum-Welch)",
    "pdfa": "PAC PDFA (Gavaldà et al.)",
    "ngram": "Kneser-Ney n-gram",
}


SHORT_NAMES = {"chmm": "CHMM", "densehmm": "DenseHMM", "hmm": "HMM", "pdfa": "PAC PDFA", "ngram": "n-gram"}
"""Display names of the learners in charts."""


APP_OPTIONS: dict[str, dict[str, Any]] = {
    "chmm": {"states": 1000, "algorithm": "online", "batch_size": 2000, "iterations": 30, "pseudocount": 1e-3},
    "densehmm": {},
    "hmm": {},
    "pdfa": {},
    "ngram": {},
}
"""The settings each learner trains with here (the peers: the registry's defaults for text)."""


@dataclass(frozen=True)
class Setting:
    """A learner setting the page offers: its option name, label, default and range (whole numbers)."""

    option: str
    label: str
    default: int
    low: int
    high: int


SETTINGS: dict[str, tuple[Setting, ...]] = {
    "chmm": (Setting("states", "clones", 1000, 2, 10_000), Setting("iterations", "iterations", 30, 1, 500)),
    "densehmm": (Setting("n_states", "states", 100, 2, 1000), Setting("dim", "l (embedding size)", 16, 1, 256)),
    "hmm": (Setting("n_states", "states", 100, 2, 1000),),
    "pdfa": (),
    "ngram": (Setting("max_order", "order at most", 8, 1, 20),),
}
"""The settings each learner takes on the page (defaults as :data:`APP_OPTIONS` and the registry's)."""


SECONDS_PER_SYMBOL = {"chmm": 10 / 106_910, "densehmm": 49 / 106_910, "hmm": 50 / 106_910, "pdfa": 4 / 106_910,
                      "ngram": 0.4 / 106_910}  # fmt: skip
"""Training seconds per training symbol at the default settings, measured on carroll-alice.txt (106,910 training
symbols, 2 cores; engine/peers/learners.py), for the time estimates. The CHMM's is one run of online EM; the run the
page starts is more (:func:`chmm_runs`)."""


def chmm_runs(settings: dict[str, Any]) -> float:
    """How many single online EM runs' time a CHMM of the page takes: its restarts
    (:data:`engine.training.ONLINE_RESTARTS` for online EM) in rounds of one process per core, each online EM run
    followed by batch EM from its best epoch (about as long again). Without them the estimate was 10 times too low
    (5.1 s estimated, 49.5 s taken)."""
    options = training.TrainOptions(**({"states": 1000, "pseudocount": 1e-3} | APP_OPTIONS["chmm"] | settings))
    restarts = options.resolved_restarts()
    rounds = math.ceil(restarts / training.restart_processes(restarts, options.backend))
    return rounds * (2.0 if options.algorithm == "online" and options.validation else 1.0)


def _shown_settings(kind: str, options: dict[str, Any]) -> dict[str, Any]:
    """The page's settings of a learner (defaults filled in) as it trains."""
    return {s.option: options.get(s.option, s.default) for s in SETTINGS[kind]}


def estimate_seconds(kind: str, settings: dict[str, Any], symbols: int) -> float:
    """A rough training time: the measured rate (:data:`SECONDS_PER_SYMBOL`) times the training symbols, scaled by
    the settings' cost (states squared for the HMMs and the CHMM's dense blocks, iterations, the n-gram order)."""
    seconds = SECONDS_PER_SYMBOL[kind] * symbols
    defaults = {s.option: s.default for s in SETTINGS[kind]}
    scale = 1.0
    for option in ("states", "n_states"):
        if option in defaults and option in settings:
            scale *= (float(settings[option]) / defaults[option]) ** 2
    for option in ("iterations", "dim", "max_order"):
        if option in defaults and option in settings:
            scale *= float(settings[option]) / defaults[option]
    if kind == "chmm":
        scale *= chmm_runs(settings)
    return seconds * scale


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


def check_learners(picked: Any) -> list[str]:
    """The picked learners in the order of :data:`engine.peers.learners.LEARNERS`; UserError when none is picked
    or one is unknown."""
    if not picked:
        raise UserError("Pick at least one learner to compare.")
    if isinstance(picked, str):
        picked = [picked]
    unknown = [str(kind) for kind in picked if kind not in learners.LEARNERS]
    if unknown:
        raise UserError(f"Unknown learner {unknown[0]!r}; choose among {', '.join(learners.LEARNERS)}.")
    return [kind for kind in learners.LEARNERS if kind in picked]
