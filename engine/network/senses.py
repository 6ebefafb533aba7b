"""The senses of a symbol: what each of its clones stands for. The clones of a symbol "come to represent the
different temporal contexts in which a particular symbol occurs in the training data" (paper, section 2); a clone's
company is read two ways:

* from the clone graph: the symbols that lead into the clone, weighted by the flow they send it (the share of the
  clone's incoming flow, P(previous symbol | clone) under the stationary chain), and the symbols it leads to
  (P(next symbol | clone) = the sum of T over the next symbol's clones);
* from a text: the occurrences of the symbol, each decoded by Viterbi on a window around it (the clone path's
  dependence on far symbols fades quickly), tell how often each clone is the one that reads it, with an example.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.errors import CHMMError
from engine.network.graph import CloneGraph

TOP_CONTEXTS = 3
"""The previous and next symbols a sense lists (the most probable first)."""
WINDOW = 8
"""The symbols on either side of an occurrence that its Viterbi window reads."""
MAX_OCCURRENCES = 120
"""The most occurrences of a symbol decoded (spread evenly over the text): a bound on the work, whatever the text."""


@dataclass(frozen=True)
class Sense:
    """One clone of a symbol and its company: ``clone`` (its index among all clones) and ``rank`` (among the
    symbol's), its ``flow`` (stationary share of all clones), ``previous`` and ``following`` ((symbol index,
    probability) pairs, most probable first), ``occurrences`` (of the decoded ones, how many read as this clone)
    and ``example`` ((start, stop, position) of one such occurrence's window in the text's symbols; None if
    none)."""

    clone: int
    rank: int
    flow: float
    previous: tuple[tuple[int, float], ...]
    following: tuple[tuple[int, float], ...]
    occurrences: int
    example: tuple[int, int, int] | None


@dataclass(frozen=True)
class Senses:
    """A symbol's senses (:class:`Sense`, the clones with the most flow first), how many times the symbol occurs
    in the text, how many of those were decoded (at most :data:`MAX_OCCURRENCES`), how many of the decoded had
    no clone path (a window the model gives probability zero: a pair never seen in training), and the symbols on
    either side that each decoding read (``window``)."""

    symbol: int
    senses: tuple[Sense, ...]
    occurrences: int
    decoded: int
    unread: int
    window: int


def _top(symbols: np.ndarray, weights: np.ndarray, n_symbols: int, top: int) -> tuple[tuple[int, float], ...]:
    """The ``top`` symbols by their summed weight, as shares of the whole."""
    total = float(weights.sum())
    if total <= 0:
        return ()
    by_symbol = np.bincount(symbols, weights=weights, minlength=n_symbols)
    order = np.argsort(-by_symbol, kind="stable")[:top]
    return tuple((int(s), float(by_symbol[s] / total)) for s in order if by_symbol[s] > 0)


def decoded_occurrences(
    codes: np.ndarray,
    symbol: int,
    decode: Callable[[np.ndarray], np.ndarray],
    window: int = WINDOW,
    limit: int = MAX_OCCURRENCES,
) -> tuple[np.ndarray, np.ndarray, int]:
    """(positions, clones, occurrences) of ``symbol`` in ``codes``: at most ``limit`` occurrences spread evenly
    over the text, each read by ``decode`` (the Viterbi clone path of a window of symbols; a negative clone when
    the window has probability zero) on the ``window`` symbols either side; the clone that reads it (-1: none)."""
    every = np.flatnonzero(np.asarray(codes) == symbol)
    if len(every) > limit:
        every = every[np.linspace(0, len(every) - 1, limit).round().astype(np.int64)]
    clones = np.full(len(every), -1, dtype=np.int64)
    for k, t in enumerate(every.tolist()):
        lo, hi = max(0, t - window), min(len(codes), t + window + 1)
        path = np.asarray(decode(np.asarray(codes[lo:hi], dtype=np.int64)))
        if len(path) == hi - lo and path[t - lo] >= 0:
            clones[k] = int(path[t - lo])
    return every, clones, int(np.count_nonzero(np.asarray(codes) == symbol))


def symbol_senses(
    graph: CloneGraph,
    symbol: int,
    codes: np.ndarray | None = None,
    decode: Callable[[np.ndarray], np.ndarray] | None = None,
    top: int = TOP_CONTEXTS,
    window: int = WINDOW,
    limit: int = MAX_OCCURRENCES,
) -> Senses:
    """The senses of ``symbol`` (its index) in the clone ``graph``: per clone, the previous symbols by the flow
    they send it and the next symbols by T (see the module docstring); with ``codes`` (a text's symbols) and
    ``decode`` (:func:`decoded_occurrences`), how often each clone reads the symbol there and an example window."""
    n_symbols = len(graph.symbols)
    if not 0 <= symbol < n_symbols:
        raise CHMMError(f"symbol index {symbol} is outside the alphabet of {n_symbols}")
    clones = np.flatnonzero(graph.clone_symbol == symbol)
    indptr, order, sources = graph.incoming_index()
    weight = graph.weight
    positions = found = np.zeros(0, dtype=np.int64)
    occurring = 0
    if codes is not None and decode is not None:
        positions, found, occurring = decoded_occurrences(codes, symbol, decode, window, limit)
    senses = []
    for clone in clones.tolist():
        into = slice(indptr[clone], indptr[clone + 1])
        senders = sources[into]
        sent = graph.flow[senders] * weight.data[order[into]]
        out = slice(weight.indptr[clone], weight.indptr[clone + 1])
        mine = positions[found == clone]
        senses.append(
            Sense(
                clone=int(clone),
                rank=int(graph.clone_rank[clone]),
                flow=float(graph.flow[clone]),
                previous=_top(graph.clone_symbol[senders], sent, n_symbols, top),
                following=_top(graph.clone_symbol[weight.indices[out]], weight.data[out], n_symbols, top),
                occurrences=len(mine),
                example=(max(0, int(mine[0]) - window), int(mine[0]) + window + 1, int(mine[0])) if len(mine) else None,
            )
        )
    senses.sort(key=lambda s: (-s.flow, s.rank))
    return Senses(symbol, tuple(senses), occurring, len(positions), int(np.count_nonzero(found < 0)), window)
