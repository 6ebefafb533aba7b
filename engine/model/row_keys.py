"""The row keys of walks with actions, checked against a block layout before a pass reads blocks by them.

A model with actions (:mod:`engine.cognitive.actions`) has A * E row symbols over E symbols: row symbol ``a * E + i``
holds the clones of symbol i, and step n -> n+1 of a walk reads the block (``row_key[n]``, ``x[n+1]``) with
``row_key[n] = a_n * E + x_n``; for a text the row key is ``x`` itself. A kernel trusts the row key to index its
tables and to have the clones of ``x[n]``, so these checks run before it (an unchecked key would read outside them).
"""

from __future__ import annotations

import numpy as np

from engine.errors import CHMMError
from engine.model.blocks import BlockLayout


def check_row_key(layout: BlockLayout, x: np.ndarray, row_key: np.ndarray | None) -> np.ndarray:
    """The block row of each step n -> n+1 of ``x`` (int64): ``x`` itself for text (None), else ``row_key``
    (``a_n * E + x_n`` over :func:`engine.cognitive.actions.action_layout`) once each step's row symbol is known to lie
    in the layout and to have the clones of ``x_n`` (the last entry, with no step after it, is not read)."""
    if row_key is None:
        return x
    row_key = np.ascontiguousarray(row_key, dtype=np.int64)
    if row_key.shape != x.shape:
        raise CHMMError(f"a walk needs one row key per position, got {row_key.size} for {x.size} positions")
    _check_rows(layout, row_key[:-1], x[:-1])
    return row_key


def check_row_shift(
    layout: BlockLayout, ptr: np.ndarray, symbol: np.ndarray, row_shift: np.ndarray | None
) -> np.ndarray:
    """Each position's row shift for a Viterbi pass (:func:`engine.backends.cpu.inference.viterbi`,
    :func:`engine.backends.cpu.sparse.viterbi`, the GPU's; int64, zeros for text), checked as
    :func:`check_row_key` checks row keys: every candidate symbol of a position before the last, shifted, is a row
    symbol with its clones. ``ptr`` and ``symbol``: the candidate symbols of each position (those of
    :class:`engine.backends.cpu.inference.Evidence`)."""
    n_positions = len(ptr) - 1
    if row_shift is None:
        return np.zeros(n_positions, dtype=np.int64)
    row_shift = np.ascontiguousarray(row_shift, dtype=np.int64)
    if row_shift.shape != (n_positions,):
        raise CHMMError(f"a walk needs one row shift per position, got {row_shift.size} for {n_positions} positions")
    steps = int(ptr[-2])  # the candidates of every position but the last
    position = np.repeat(np.arange(n_positions - 1), np.diff(ptr[:-1]))
    _check_rows(layout, row_shift[position] + symbol[:steps], symbol[:steps])
    return row_shift


def _check_rows(layout: BlockLayout, rows: np.ndarray, symbols: np.ndarray) -> None:
    """ValueError unless every ``rows[n]`` is a row symbol of ``layout`` with as many clones as ``symbols[n]``."""
    if rows.size and (rows.min() < 0 or rows.max() >= layout.n_symbols):
        raise CHMMError(f"the row keys must name row symbols 0..{layout.n_symbols - 1} of the model's layout")
    if np.any(layout.n_clones[rows] != layout.n_clones[symbols]):
        raise CHMMError("a row key names a row symbol whose clone count differs from its position's symbol")
