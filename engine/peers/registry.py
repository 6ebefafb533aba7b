"""Every learner registers itself once, here: its name, label, colour, defaults, the settings a page offers, its
cost per training symbol, the option names the command line's shared flags set, and what validation fixes for the
refit. The command line (``chmm train --learner``), the Compare page, its figures and the benchmarks read only
this table, so a new learner is its own module plus one :func:`register` call (and one line in
:data:`engine.peers.learners.PEER_MODULES` that imports it).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Learner", "Setting", "available", "entry", "refit_by_history", "register", "registered"]


@dataclass(frozen=True)
class Setting:
    """A learner setting a page offers: its option name, label, default and range (whole numbers), how a
    comparison's row writes it (``shown``, formatted with ``value`` and ``label``) and the power of its value in the
    cost estimate (2 for a count of states whose transitions are dense, 1 for iterations, 0 for none)."""

    option: str
    label: str
    default: int
    low: int
    high: int
    shown: str = "{value:,} {label}"
    cost_power: float = 1.0


@dataclass(frozen=True)
class Learner:
    """One learner as every front end knows it.

    ``factory``: "module:Class" of a peer (empty for the CHMM, trained by :mod:`engine.training`). ``defaults``: the
    options it starts from (the constructor fills the rest). ``compare_options``: what the Compare page trains it
    with before the page's settings. ``seconds_per_symbol``: training seconds per training symbol at the page's
    defaults on 2 cores (measured on ``carroll-alice.txt``). ``states_option`` / ``iterations_option`` /
    ``seed_option``: the option ``chmm train --states`` / ``--iterations`` / ``--seed`` sets. ``budget_option``: an
    option in minutes that caps training time (the estimate does not exceed it). ``refit``: the options validation
    fixed, for the refit on training + validation text (None: no refit). ``requires``: a module that must be
    importable, and ``install`` the sentence that says how to add it. ``on_device``: whether it trains on a GPU when
    one is asked for (``--backend gpu``). ``picked``: whether the Compare page picks it before the user does (not
    for a learner that takes minutes by design)."""

    name: str
    label: str
    short: str
    colour: str
    factory: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)
    compare_options: dict[str, Any] = field(default_factory=dict)
    settings: tuple[Setting, ...] = ()
    seconds_per_symbol: float = 0.0
    states_option: str | None = None
    iterations_option: str | None = None
    seed_option: str | None = None
    budget_option: str | None = None
    refit: Callable[[Any, dict[str, Any]], dict[str, Any] | None] | None = None
    requires: str | None = None
    install: str = ""
    on_device: bool = False
    picked: bool = True


_REGISTERED: dict[str, Learner] = {}


def register(learner: Learner) -> Learner:
    """Add ``learner`` to the table (registering one name twice raises ValueError); returns it."""
    if learner.name in _REGISTERED and _REGISTERED[learner.name] != learner:
        raise ValueError(f"a learner named {learner.name!r} is already registered")
    _REGISTERED[learner.name] = learner
    return learner


def registered() -> dict[str, Learner]:
    """The registered learners by name, in the order they registered (the CHMM first)."""
    return dict(_REGISTERED)


def entry(name: str) -> Learner:
    """The registered learner ``name`` (KeyError if none)."""
    return _REGISTERED[name]


def available(name: str) -> str | None:
    """None when learner ``name`` can train here, else the sentence that says what to install."""
    learner = _REGISTERED[name]
    if learner.requires is None or importlib.util.find_spec(learner.requires) is not None:
        return None
    return f"The {learner.label} needs {learner.requires}, which is not installed here: {learner.install}"


def refit_by_history(learner: Any, options: dict[str, Any]) -> dict[str, Any] | None:
    """The refit's options of a learner trained in iterations with a validation check each (``history`` records
    with ``iteration`` and ``validation_bps``): as many iterations as gave the best validation BPS, with no early
    stop; None when it kept no validation figure."""
    history = [h for h in getattr(learner, "history", []) if h.get("validation_bps") is not None]
    if not history:
        return None
    best = min(history, key=lambda h: h["validation_bps"])
    return options | {"iterations": int(best["iteration"]), "tolerance": 0.0}
