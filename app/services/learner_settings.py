"""The learners a comparison may train and their settings (issue 9): their labels, the settings the Compare page
offers for each and trains with (:data:`APP_OPTIONS`, :data:`SETTINGS`), the check of the picked learners and the
time estimates. Below the form layer (:mod:`app.forms` reads the page's values into these) so that the comparison's
service (:mod:`app.services.comparisons`) needs nothing from above it."""

from __future__ import annotations

import math
from typing import Any

from app.services import UserError
from engine import api

_REGISTERED = api.learners.registered_learners()

LEARNER_LABELS = {kind: _REGISTERED[kind].label for kind in api.LEARNERS}
"""Each learner's label on the page (the registry's)."""

SHORT_NAMES = {kind: _REGISTERED[kind].short for kind in api.LEARNERS}
"""Display names of the learners in charts."""

LEARNER_COLOURS = {kind: _REGISTERED[kind].colour for kind in api.LEARNERS}
"""Each learner's colour in charts."""

APP_OPTIONS: dict[str, dict[str, Any]] = {kind: dict(_REGISTERED[kind].compare_options) for kind in api.LEARNERS}
"""The settings each learner trains with here (the peers: the registry's defaults for text)."""

Setting = api.learners.LearnerSetting

SETTINGS: dict[str, tuple[Setting, ...]] = {kind: _REGISTERED[kind].settings for kind in api.LEARNERS}
"""The settings each learner takes on the page (defaults as :data:`APP_OPTIONS` and the registry's)."""

SECONDS_PER_SYMBOL = {kind: _REGISTERED[kind].seconds_per_symbol for kind in api.LEARNERS}
"""Training seconds per training symbol at the default settings, measured on carroll-alice.txt (106,910 training
symbols, 2 cores; the registry's), for the time estimates. The CHMM's is one run of online EM; the run the page
starts is more (:func:`chmm_runs`)."""


PICKED = [kind for kind in api.LEARNERS if _REGISTERED[kind].picked and api.learners.learner_available(kind) is None]
"""The learners the Compare page picks before the user does (those that can train here and take seconds)."""


def unavailable(kind: str) -> str | None:
    """None when learner ``kind`` can train on this server, else the sentence that says how to add it."""
    return api.learners.learner_available(kind)


def chmm_runs(settings: dict[str, Any]) -> float:
    """How many single online EM runs' time a CHMM of the page takes: its restarts
    (:data:`engine.training.ONLINE_RESTARTS` for online EM) in rounds of one process per core, each online EM run
    followed by batch EM from its best epoch (about as long again). Without them the estimate was 10 times too low
    (5.1 s estimated, 49.5 s taken)."""
    options = api.TrainOptions(**({"states": 1000, "pseudocount": 1e-3} | APP_OPTIONS["chmm"] | settings))
    restarts = options.resolved_restarts()
    rounds = math.ceil(restarts / api.restart_processes(restarts, options.backend))
    return rounds * (2.0 if options.algorithm == "online" and options.validation else 1.0)


def shown_settings(kind: str, options: dict[str, Any]) -> dict[str, Any]:
    """The page's settings of a learner (defaults filled in) as it trains."""
    return {s.option: options.get(s.option, s.default) for s in SETTINGS[kind]}


def estimate_seconds(kind: str, settings: dict[str, Any], symbols: int) -> float:
    """A rough training time: the measured rate (:data:`SECONDS_PER_SYMBOL`) times the training symbols, scaled by
    each page setting's ratio to its default to the setting's cost power (states squared for the HMMs and the
    CHMM's dense blocks, iterations, the n-gram order), at most the learner's time budget where it has one."""
    seconds = SECONDS_PER_SYMBOL[kind] * symbols
    scale = 1.0
    for setting in SETTINGS[kind]:
        if setting.option in settings and setting.cost_power:
            scale *= (float(settings[setting.option]) / setting.default) ** setting.cost_power
    if kind == "chmm":
        scale *= chmm_runs(settings)
    budget = _REGISTERED[kind].budget_option
    if budget and settings.get(budget) is not None:
        return min(seconds * scale, 60.0 * float(settings[budget]))
    return seconds * scale


def check_learners(picked: Any) -> list[str]:
    """The picked learners in the order of :data:`engine.peers.learners.LEARNERS`; UserError when none is picked
    or one is unknown."""
    if not picked:
        raise UserError("Pick at least one learner to compare.")
    if isinstance(picked, str):
        picked = [picked]
    unknown = [str(kind) for kind in picked if kind not in api.LEARNERS]
    if unknown:
        raise UserError(f"Unknown learner {unknown[0]!r}; choose among {', '.join(api.LEARNERS)}.")
    return [kind for kind in api.LEARNERS if kind in picked]
