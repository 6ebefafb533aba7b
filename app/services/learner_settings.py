"""The learners a comparison may train and their settings (issue 9): their labels, the settings the Compare page
offers for each and trains with (:data:`APP_OPTIONS`, :data:`SETTINGS`), the check of the picked learners and the
time estimates. Below the form layer (:mod:`app.forms` reads the page's values into these) so that the comparison's
service (:mod:`app.services.comparisons`) needs nothing from above it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from app.services import UserError
from engine import api

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
    options = api.TrainOptions(**({"states": 1000, "pseudocount": 1e-3} | APP_OPTIONS["chmm"] | settings))
    restarts = options.resolved_restarts()
    rounds = math.ceil(restarts / api.restart_processes(restarts, options.backend))
    return rounds * (2.0 if options.algorithm == "online" and options.validation else 1.0)


def shown_settings(kind: str, options: dict[str, Any]) -> dict[str, Any]:
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
