"""The choices and defaults every form and flag offers, as two frozen groups the door names (:data:`CHOICES` and
:data:`DEFAULTS`), each constant under the name of the wing's own constant (``api.CHOICES.ALGORITHMS`` is
:data:`engine.training.learning.ALGORITHMS`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from engine.api.use import DEFAULT_PRUNE_THRESHOLD
from engine.backends.chunks import DEFAULT_BURN_IN, EXACT, LOCKSTEP_BURN_IN, LOCKSTEP_MIN_SYMBOLS, LOCKSTEP_STEPS
from engine.backends.reading import MAX_PREFIX_CHARACTERS
from engine.corpora.allocation import ALLOCATION_METHODS
from engine.corpora.sequences import FORMATS as CORPUS_FORMATS
from engine.corpora.text import NORMALISATIONS, RARE_TOKEN, RARE_WORD, UNITS
from engine.network.communities import FLOW_SOURCES
from engine.network.export import EXTENSIONS
from engine.network.export import FORMATS as EXPORT_FORMATS
from engine.network.filters import MAX_STEPS as MAX_EGO_STEPS
from engine.training import (
    ALIGNED_SHARE,
    AUTO,
    DTYPES,
    MAX_RESTARTS,
    ONLINE_RESTARTS,
    PRUNE_BOUND,
    PRUNE_THRESHOLDS,
    PSEUDOCOUNT_GRID,
    RESTART_MEMORY,
    STARTS,
    STATES_GRID,
    SYMBOLS_PER_STATE,
)
from engine.training.learning import ALGORITHMS, BATCH_PER_BLOCK, ONLINE_BATCH_SIZE


def _read_only(mapping: Mapping[str, Any]) -> Any:
    """A field holding a read-only view of ``mapping`` (a frozen group's mapping cannot be changed through it)."""
    return field(default_factory=lambda: MappingProxyType(dict(mapping)))


@dataclass(frozen=True)
class Choices:
    """The lists a form or flag chooses from: training algorithms, clone allocations, units, corpus formats,
    normalisations, float types, starts, the states, pseudocount and pruning grids, the export formats and their
    file extensions, Infomap's flow sources; and ``AUTO``, the value that leaves a setting to the engine."""

    ALGORITHMS: tuple[str, ...] = ALGORITHMS
    ALLOCATION_METHODS: tuple[str, ...] = ALLOCATION_METHODS
    AUTO: str = AUTO
    CORPUS_FORMATS: tuple[str, ...] = CORPUS_FORMATS
    DTYPES: Mapping[str, Any] = _read_only(DTYPES)
    EXPORT_FORMATS: tuple[str, ...] = EXPORT_FORMATS
    EXTENSIONS: Mapping[str, str] = _read_only(EXTENSIONS)
    FLOW_SOURCES: tuple[str, ...] = FLOW_SOURCES
    NORMALISATIONS: tuple[str, ...] = NORMALISATIONS
    PRUNE_THRESHOLDS: tuple[float, ...] = PRUNE_THRESHOLDS
    PSEUDOCOUNT_GRID: tuple[float, ...] = PSEUDOCOUNT_GRID
    STARTS: tuple[str, ...] = STARTS
    STATES_GRID: tuple[int, ...] = STATES_GRID
    UNITS: tuple[str, ...] = UNITS


@dataclass(frozen=True)
class Defaults:
    """The defaults and limits a form or flag shows: shares, batch sizes, burn-ins and lockstep steps of training
    on a device, restarts, the pruning threshold and bound, the longest prefix and ego network, the placeholders of
    rare words and tokens, the share of memory restarts may take and the symbols per state of the memory check."""

    ALIGNED_SHARE: float = ALIGNED_SHARE
    BATCH_PER_BLOCK: int = BATCH_PER_BLOCK
    DEFAULT_BURN_IN: int = DEFAULT_BURN_IN
    DEFAULT_PRUNE_THRESHOLD: float = DEFAULT_PRUNE_THRESHOLD
    EXACT: int = EXACT
    LOCKSTEP_BURN_IN: int = LOCKSTEP_BURN_IN
    LOCKSTEP_MIN_SYMBOLS: int = LOCKSTEP_MIN_SYMBOLS
    LOCKSTEP_STEPS: int = LOCKSTEP_STEPS
    MAX_EGO_STEPS: int = MAX_EGO_STEPS
    MAX_PREFIX_CHARACTERS: int = MAX_PREFIX_CHARACTERS
    MAX_RESTARTS: int = MAX_RESTARTS
    ONLINE_BATCH_SIZE: int = ONLINE_BATCH_SIZE
    ONLINE_RESTARTS: int = ONLINE_RESTARTS
    PRUNE_BOUND: float = PRUNE_BOUND
    RARE_TOKEN: str = RARE_TOKEN
    RARE_WORD: str = RARE_WORD
    RESTART_MEMORY: float = RESTART_MEMORY
    SYMBOLS_PER_STATE: int = SYMBOLS_PER_STATE


CHOICES = Choices()
"""The choice lists (:class:`Choices`)."""
DEFAULTS = Defaults()
"""The defaults and limits (:class:`Defaults`)."""
