"""The block layout of a CHMM's transition matrix and arithmetic on its flat block buffer.

Hidden states ("clones") are ordered by the symbol they emit, so clone ``u`` of symbol ``i`` has global index
``clone_start[i] + u`` and the transition matrix T splits into blocks T(i, j) of shape
``n_clones[i] x n_clones[j]`` (paper, section 3). Only the blocks of symbol pairs listed in ``block_pairs`` are
stored: one flat buffer holds them back to back (row-major), ``block_offset[k]`` is where block ``k`` starts, and
:meth:`BlockLayout.find_blocks` (or :func:`engine.backends.cpu.kernels.find_block` in a kernel) gives ``k`` for a pair
(i, j), or -1 for a pair that has no block (all its transitions are zero). The lookup table is sized by the stored
pairs, not by the square of the alphabet (a model of 20,000 symbols once cost 3 GB in an n_symbols^2 index). The same
flat layout works for NumPy and CuPy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numba import njit

from engine.errors import CHMMError


@dataclass(frozen=True)
class BlockLayout:
    """Index tables of the block-sparse layout (derived from ``n_clones`` and ``block_pairs``).

    Attributes:
        n_clones: clones per symbol, shape (E,).
        clone_start: first global clone index of each symbol, shape (E + 1,); ``clone_start[E] = H``.
        block_pairs: (i, j) symbol pairs with a stored block, shape (K, 2), sorted.
        block_offset: start of each block in the flat buffer, shape (K + 1,); the last entry is the buffer size.
        block_lookup: the pair -> block table, shape (E + 1 + K,): ``block_lookup[i]`` is the number of the first
            block of row symbol i (blocks are sorted by (i, j), so row i's blocks are numbers ``block_lookup[i]`` to
            ``block_lookup[i + 1] - 1``) and ``block_lookup[E + 1 + k]`` is the column symbol of block k; a pair's
            block is found by a binary search in its row (:func:`engine.backends.cpu.kernels.find_block`).
    """

    n_clones: np.ndarray
    clone_start: np.ndarray
    block_pairs: np.ndarray
    block_offset: np.ndarray
    block_lookup: np.ndarray

    @staticmethod
    def build(n_clones: np.ndarray, block_pairs: np.ndarray) -> BlockLayout:
        """Build the index tables for clones per symbol ``n_clones`` and the stored symbol pairs."""
        n_clones = np.ascontiguousarray(n_clones, dtype=np.int64)
        if n_clones.ndim != 1 or n_clones.size == 0 or np.any(n_clones < 1):
            raise CHMMError("n_clones must be a non-empty 1-D array of positive integers")
        n_symbols = n_clones.size
        pairs = np.asarray(block_pairs, dtype=np.int64).reshape(-1, 2)
        if pairs.size and (pairs.min() < 0 or pairs.max() >= n_symbols):
            raise CHMMError("block_pairs refers to a symbol outside the alphabet")
        order = np.lexsort((pairs[:, 1], pairs[:, 0]))
        pairs = pairs[order]
        if len(pairs) > 1 and np.any(np.all(pairs[1:] == pairs[:-1], axis=1)):
            raise CHMMError("block_pairs lists a pair twice")
        clone_start = np.zeros(n_symbols + 1, dtype=np.int64)
        np.cumsum(n_clones, out=clone_start[1:])
        sizes = n_clones[pairs[:, 0]] * n_clones[pairs[:, 1]]
        block_offset = np.zeros(len(pairs) + 1, dtype=np.int64)
        np.cumsum(sizes, out=block_offset[1:])
        row_start = np.searchsorted(pairs[:, 0], np.arange(n_symbols + 1), side="left")
        block_lookup = np.concatenate([row_start, pairs[:, 1]]).astype(np.int64)
        return BlockLayout(n_clones, clone_start, np.ascontiguousarray(pairs), block_offset, block_lookup)

    def find_blocks(self, rows: Any, cols: Any) -> np.ndarray:
        """The block number of each symbol pair (rows[n], cols[n]), or -1 where the pair has no block; scalars or
        arrays of the same shape (vectorised: a search among the sorted pair codes i * E + j)."""
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        n_symbols = self.n_symbols
        codes = self._pair_codes
        wanted = rows * n_symbols + cols
        if len(codes) == 0:
            return np.full(wanted.shape, -1, dtype=np.int64)
        found = np.minimum(np.searchsorted(codes, wanted), len(codes) - 1)
        return np.where(codes[found] == wanted, found, -1).astype(np.int64)

    @cached_property
    def _pair_codes(self) -> np.ndarray:
        """The stored pairs' codes i * E + j, sorted (made once per layout: a sentence's lookup is then O(log K))."""
        return self.block_pairs[:, 0] * self.n_symbols + self.block_pairs[:, 1]

    def find_block(self, i: int, j: int) -> int:
        """The block number of the pair (i, j), or -1 when it has no block."""
        return int(self.find_blocks(i, j))

    @property
    def n_symbols(self) -> int:
        return int(self.n_clones.size)

    @property
    def n_states(self) -> int:
        return int(self.clone_start[-1])

    @property
    def n_blocks(self) -> int:
        return int(len(self.block_pairs))

    @property
    def size(self) -> int:
        """Number of entries in the flat block buffer."""
        return int(self.block_offset[-1])

    def block_shape(self, k: int) -> tuple[int, int]:
        i, j = self.block_pairs[k]
        return int(self.n_clones[i]), int(self.n_clones[j])

    def clone_symbol(self) -> np.ndarray:
        """The symbol emitted by each clone, shape (H,)."""
        return np.repeat(np.arange(self.n_symbols), self.n_clones)


def pairs_in_sequence(x: np.ndarray, n_symbols: int) -> np.ndarray:
    """The distinct (x_n, x_{n+1}) symbol pairs that occur in the sequence ``x``, shape (K, 2), sorted."""
    x = np.asarray(x, dtype=np.int64)
    if x.size < 2:
        return np.zeros((0, 2), dtype=np.int64)
    codes = np.unique(x[:-1] * n_symbols + x[1:])
    return np.stack([codes // n_symbols, codes % n_symbols], axis=1)


def entry_rows_cols(layout: BlockLayout, flat_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Global (row clone, column clone) of entries of the flat block buffer given by their flat indices."""
    flat_index = np.asarray(flat_index, dtype=np.int64)
    k = np.searchsorted(layout.block_offset, flat_index, side="right") - 1
    local = flat_index - layout.block_offset[k]
    cols_per_row = layout.n_clones[layout.block_pairs[k, 1]]
    rows = layout.clone_start[layout.block_pairs[k, 0]] + local // cols_per_row
    cols = layout.clone_start[layout.block_pairs[k, 1]] + local % cols_per_row
    return rows, cols


def blocks_to_dense(layout: BlockLayout, flat: np.ndarray) -> np.ndarray:
    """Scatter a flat block buffer into a dense H x H matrix."""
    dense = np.zeros((layout.n_states, layout.n_states), dtype=flat.dtype)
    for k, (i, j) in enumerate(layout.block_pairs):
        rows = slice(layout.clone_start[i], layout.clone_start[i + 1])
        cols = slice(layout.clone_start[j], layout.clone_start[j + 1])
        dense[rows, cols] = flat[layout.block_offset[k] : layout.block_offset[k + 1]].reshape(layout.block_shape(k))
    return dense


def dense_to_blocks(layout: BlockLayout, dense: np.ndarray) -> np.ndarray:
    """Gather the stored blocks of a dense H x H matrix into a flat buffer (the inverse of blocks_to_dense)."""
    flat = np.empty(layout.size, dtype=dense.dtype)
    for k, (i, j) in enumerate(layout.block_pairs):
        rows = slice(layout.clone_start[i], layout.clone_start[i + 1])
        cols = slice(layout.clone_start[j], layout.clone_start[j + 1])
        flat[layout.block_offset[k] : layout.block_offset[k + 1]] = dense[rows, cols].ravel()
    return flat


def row_sums(layout: BlockLayout, flat: np.ndarray) -> np.ndarray:
    """Sum of every clone's row over all stored blocks, shape (H,), in float64."""
    return block_row_sums(flat, layout.block_pairs, layout.block_offset, layout.n_clones, layout.clone_start)


def normalise_rows(
    layout: BlockLayout, counts: np.ndarray, pseudocount: float, dtype: Any, support: np.ndarray | None = None
) -> np.ndarray:
    """M-step: T = row-normalise(counts + pseudocount) over the stored blocks (paper, section 3).

    The pseudocount is added to stored entries only, so pairs without a block stay at zero. With a ``support``
    (a boolean mask in the flat layout, see :meth:`CHMM.support`) it is added only where the mask is true
    and every other entry is zero, so a pruned model stays pruned under EM. A row with no mass at all (possible
    only with pseudocount 0, or with an empty support row) stays all-zero.
    """
    out = np.empty(layout.size, dtype=dtype)
    counts = np.ascontiguousarray(counts, dtype=np.float64)
    if support is not None:
        counts = np.where(support, counts + float(pseudocount), 0.0)
        pseudocount = 0.0
    normalise_blocks(
        counts,
        float(pseudocount),
        out,
        layout.block_pairs,
        layout.block_offset,
        layout.n_clones,
        layout.clone_start,
    )
    return out


def aligned_entries(layout: BlockLayout) -> tuple[np.ndarray, np.ndarray]:
    """The aligned entries of every stored block T(i, j): clone c of symbol i to clone (c mod n_j) of symbol j.

    Returns (their positions in the flat block buffer, the global clone index of their rows), block by block."""
    positions, rows = [], []
    for k, (i, j) in enumerate(layout.block_pairs):
        n_i, n_j = int(layout.n_clones[i]), int(layout.n_clones[j])
        c = np.arange(n_i, dtype=np.int64)
        positions.append(layout.block_offset[k] + c * n_j + c % n_j)
        rows.append(layout.clone_start[i] + c)
    if not positions:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(positions), np.concatenate(rows)


def align_rows(layout: BlockLayout, raw: np.ndarray, share: float) -> np.ndarray:
    """``raw`` (non-negative entries in the flat layout) with mass added to each row's aligned entries
    (:func:`aligned_entries`), split equally among the row's stored blocks, so that they hold ``share`` of the row's
    new total over what ``raw`` gave them; the rest keeps the shape of ``raw``. A clone then starts out passing its
    context on along the clones of the same number, so a hidden bit can ride a chain of clones through a run of
    symbols (the toy FSM's two rows of clones, paper Fig. 1e) instead of dissolving into the mixing of a random T
    (the first-order plateaus, bench/RESULTS.md, issue 15)."""
    if not 0.0 <= share < 1.0:
        raise CHMMError(f"the aligned share must be at least 0 and below 1, got {share!r}")
    positions, rows = aligned_entries(layout)
    mass = row_sums(layout, raw)
    blocks = np.bincount(rows, minlength=layout.n_states)  # a row has one aligned entry per stored block
    out = np.array(raw, dtype=np.float64)
    out[positions] += share / (1.0 - share) * mass[rows] / blocks[rows]
    return out


# The layout's own arithmetic, jitted: row sums and the M-step's normalisation over the flat buffer.
_FLAGS = dict(nogil=True, cache=True, fastmath=False, error_model="numpy")


@njit(**_FLAGS)
def block_row_sums(flat, block_pairs, block_offset, n_clones, clone_start):
    """Sum of each clone's row over all stored blocks, in float64, shape (H,)."""
    totals = np.zeros(clone_start[-1], dtype=np.float64)
    for k in range(block_pairs.shape[0]):
        i = block_pairs[k, 0]
        j = block_pairs[k, 1]
        rows = n_clones[i]
        cols = n_clones[j]
        base = block_offset[k]
        first = clone_start[i]
        for u in range(rows):
            s = 0.0
            for v in range(cols):
                s += flat[base + u * cols + v]
            totals[first + u] += s
    return totals


@njit(**_FLAGS)
def normalise_blocks(counts, pseudocount, out, block_pairs, block_offset, n_clones, clone_start):
    """out = row-normalise(counts + pseudocount) over the stored blocks, written straight into ``out`` (any float
    dtype) with float64 row sums, without a temporary copy of the blocks. A row with no mass stays zero."""
    totals = np.zeros(clone_start[-1], dtype=np.float64)
    for k in range(block_pairs.shape[0]):
        rows = n_clones[block_pairs[k, 0]]
        cols = n_clones[block_pairs[k, 1]]
        base = block_offset[k]
        first = clone_start[block_pairs[k, 0]]
        for u in range(rows):
            s = 0.0
            for v in range(cols):
                s += counts[base + u * cols + v] + pseudocount
            totals[first + u] += s
    for k in range(block_pairs.shape[0]):
        rows = n_clones[block_pairs[k, 0]]
        cols = n_clones[block_pairs[k, 1]]
        base = block_offset[k]
        first = clone_start[block_pairs[k, 0]]
        for u in range(rows):
            total = totals[first + u]
            inverse = 1.0 / total if total > 0.0 else 0.0
            for v in range(cols):
                out[base + u * cols + v] = (counts[base + u * cols + v] + pseudocount) * inverse
