"""Chunks of sequences, one definition for every user: a chunk of a long document carries a burn-in of the document
before and after it whose steps are not counted (the messages settle there), so that chunks can be processed
independently (the cluster's workers, :mod:`engine.training.distributed`) or together (lockstep passes, where all chunks
advance one step at a time and those standing at the same symbol pair share one read of the pair's block,
:class:`LockstepSchedule`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.backends.cpu.inference import PairLayout, pair_sorted_offsets
from engine.errors import CHMMError
from engine.model.blocks import BlockLayout

DEFAULT_BURN_IN = 1000
"""Symbols of burn-in before and after a chunk of a long document (see :func:`chunk`): the BPS after 20 EM iterations
differs from the exact one by less than 1e-4 bits per symbol with it (bench/RESULTS.md)."""

LOCKSTEP_BURN_IN = 50
"""Symbols of burn-in of the chunks of a lockstep E-step (see :class:`LockstepPlan`): after 20 EM iterations in
chunks of 200 steps with it, the BPS differs from the exact one by at most 1.2e-7 bits per symbol on every corpus of
the benchmarks, and an H200 runs an EM iteration at 30,000 states 1.5 times faster than with 100 (bench/RESULTS.md)."""

EXACT = 0
"""The chunk length that asks for exact passes (no chunks) where the engine would otherwise choose lockstep chunks."""

LOCKSTEP_STEPS = 200
"""Fewest counted steps of an automatic lockstep chunk (see :func:`lockstep_length`)."""

LOCKSTEP_CHUNKS = 2048
"""Most chunks of an automatic lockstep E-step: on an H200, batch EM over 750,000 symbols ran fastest at 2,048 chunks
of 366 steps (3,000 to 30,000 states), and over 100,000 symbols at 512 chunks of 195 steps (bench/RESULTS.md)."""

LOCKSTEP_MIN_SYMBOLS = 100_000
"""Shortest sequence whose batch EM an engine with lockstep passes runs in automatic lockstep chunks: on an H200 they
paid 4-11 times over 100,000 symbols at 3,000 to 10,000 states, and nothing over 30,000 (bench/RESULTS.md)."""


def lockstep_length(n_symbols: int) -> int | None:
    """The chunk length of the automatic lockstep E-step over a sequence of ``n_symbols``: as many chunks as fill the
    device (up to :data:`LOCKSTEP_CHUNKS`) of at least :data:`LOCKSTEP_STEPS` counted steps each; None (exact
    passes) for a sequence shorter than :data:`LOCKSTEP_MIN_SYMBOLS`."""
    if n_symbols < LOCKSTEP_MIN_SYMBOLS:
        return None
    return max(LOCKSTEP_STEPS, -(-(n_symbols - 1) // LOCKSTEP_CHUNKS))


@dataclass(frozen=True)
class Chunk:
    """A chunk of a document: its symbols with a burn-in before and after, and which of its steps n -> n+1 are
    counted (``lo <= n < hi``); ``first`` when it starts the document (its gamma(1) estimates pi)."""

    x: np.ndarray
    lo: int
    hi: int
    first: bool
    initial: np.ndarray | None = None  # replaces pi at the piece's start (online EM's carried message)
    order: int = -1

    @property
    def nbytes(self) -> int:
        """The bytes of its symbols (what sending it costs), as a document array's ``nbytes``."""
        return int(self.x.nbytes)

    def __len__(self) -> int:
        return self.hi - self.lo


def chunk(sequences: Sequence[np.ndarray], size: int | None, burn_in: int = DEFAULT_BURN_IN) -> list[Any]:
    """Documents longer than ``size`` symbols cut into chunks of ``size`` steps, each with ``burn_in`` symbols of the
    document before and after it whose steps are not counted: the messages settle in the burn-in, so the counts are
    those of the whole document up to the message error at the chunk boundaries. Shorter documents (and all of them
    with ``size`` None) stay whole: their counts are exact."""
    if size is None:
        return list(sequences)
    if size < 2 or burn_in < 0:
        raise CHMMError("a chunk needs at least 2 symbols and a burn-in of at least 0")
    out: list[Any] = []
    for x in sequences:
        if len(x) <= size:
            out.append(x)
            continue
        steps = len(x) - 1
        for start in range(0, steps, size):
            stop = min(start + size, steps)
            a, b = max(0, start - burn_in), min(len(x), stop + 1 + burn_in)
            out.append(Chunk(x[a:b], start - a, stop - a, start == 0))
    return out


def as_chunks(sequences: Sequence[Any]) -> list[Chunk]:
    """Documents and pieces as pieces: a whole document of n symbols is the piece that counts its steps 0..n-2 and
    starts its document."""
    return [p if isinstance(p, Chunk) else Chunk(np.asarray(p, dtype=np.int64), 0, len(p) - 1, True) for p in sequences]


def counted_log_likelihood(pieces: Sequence[Chunk], predictive: Sequence[np.ndarray]) -> float:
    """log P of what ``pieces`` count, from each piece's predictive probabilities P(x_n | x_<n) over its own
    symbols (burn-in included): its counted steps n -> n+1 (``lo <= n < hi``), and its first symbol when it starts
    its document. -inf at a zero-probability event."""
    total = 0.0
    with np.errstate(divide="ignore"):
        for piece, p in zip(pieces, predictive, strict=True):
            total += float(np.sum(np.log(p[piece.lo + 1 : piece.hi + 1])))
            if piece.first and piece.lo == 0:
                total += float(np.log(p[0]))
    return total


@dataclass(frozen=True)
class LockstepSchedule:
    """The steps of a lockstep pass over ``pieces`` (C chunks advancing together, step s taking every chunk from
    position s to s + 1): at each step the chunks are grouped by the block of the symbol pair they stand at, so that
    one read of a block serves every chunk of its group.

    Per step s, groups ``step_group_start[s]:step_group_start[s + 1]``; per group: ``group_block`` (the block, -1
    when the pair has none: a zero-probability step for its chunks), ``group_in`` / ``group_out`` (clones of the
    pair's first and second symbol), ``group_row_base`` (its first output row among the step's ``step_rows``; a
    group without a block has no rows) and its chunks ``chunk_ids[group_chunk_start[g]:group_chunk_start[g + 1]]``.
    ``length`` is the longest piece (the predictive arrays are C x length)."""

    pieces: list[Chunk]
    length: int
    step_group_start: np.ndarray
    step_rows: np.ndarray
    group_block: np.ndarray
    group_in: np.ndarray
    group_out: np.ndarray
    group_row_base: np.ndarray
    group_chunk_start: np.ndarray
    chunk_ids: np.ndarray

    @staticmethod
    def build(layout: BlockLayout, sequences: Sequence[Any], backward: bool = False) -> LockstepSchedule:
        """The schedule of documents and pieces (see :func:`as_chunks`) under ``layout``. With ``backward`` each
        piece is walked from its own last symbol to its first (the backward pass: the step from x_{n+1} to x_n
        reads the block of the pair (x_n, x_{n+1}), row by row of T); ``pieces`` then holds the reversed pieces."""
        pieces = as_chunks(sequences)
        if backward:
            pieces = [Chunk(p.x[::-1], 0, len(p.x) - 1, False) for p in pieces]
        if not pieces or any(len(p.x) < 1 for p in pieces):
            raise CHMMError("a lockstep pass needs at least one non-empty sequence")
        length = max(len(p.x) for p in pieces)
        symbols = np.full((len(pieces), length), -1, dtype=np.int64)
        for c, p in enumerate(pieces):
            symbols[c, : len(p.x)] = p.x
        source, target = symbols[:, :-1], symbols[:, 1:]
        chunk_of, step_of = np.nonzero(target >= 0)
        pair = (target, source) if backward else (source, target)
        block_of = layout.find_blocks(pair[0][chunk_of, step_of], pair[1][chunk_of, step_of])
        target_symbol = target[chunk_of, step_of]
        # a group per (step, block); chunks at a pair without a block (a zero-probability step) group by the
        # symbol they step to, whose clones the restarted message covers
        order = np.lexsort((chunk_of, target_symbol, block_of, step_of))
        chunk_of, step_of, block_of, target_symbol = (a[order] for a in (chunk_of, step_of, block_of, target_symbol))
        key = np.where(block_of >= 0, block_of, -1 - target_symbol)
        new = (key[1:] != key[:-1]) | (step_of[1:] != step_of[:-1])
        first = np.flatnonzero(np.concatenate([[True], new]))
        n_steps = length - 1
        group_step = step_of[first]
        group_block = block_of[first].astype(np.int64)
        source_symbol = source[chunk_of[first], group_step]
        group_in = layout.n_clones[source_symbol].astype(np.int32)
        group_out = layout.n_clones[target_symbol[first]].astype(np.int32)
        rows = np.where(group_block >= 0, group_out, 0).astype(np.int64)
        step_group_start = np.searchsorted(group_step, np.arange(n_steps + 1)).astype(np.int32)
        step_rows = np.add.reduceat(rows, step_group_start[:-1]) if len(rows) else np.zeros(n_steps, np.int64)
        step_rows = np.where(np.diff(step_group_start) > 0, step_rows, 0).astype(np.int32)
        cumulative = np.cumsum(rows) - rows
        group_row_base = (cumulative - cumulative[step_group_start[group_step]]).astype(np.int32)
        group_chunk_start = np.concatenate([first, [len(chunk_of)]]).astype(np.int32)
        return LockstepSchedule(
            pieces, length, step_group_start, step_rows, group_block, group_in, group_out, group_row_base,
            group_chunk_start, chunk_of.astype(np.int32),
        )  # fmt: skip

    @property
    def n_chunks(self) -> int:
        return len(self.pieces)

    @property
    def n_steps(self) -> int:
        return self.length - 1


@dataclass(frozen=True)
class LockstepPlan:
    """What every lockstep E-step over the same pieces reuses (built once per training sequence): the forward and
    the backward schedule, and where each message lives.

    The pieces' symbols are laid end to end in ``x`` (piece c at ``start[c]:start[c + 1]``); every position of
    ``x`` has one alpha and one beta slot (``pair_layout``, pair-sorted over the counted steps only, so that the
    counts are one matrix product per block). ``forward_offsets[c, s]`` is the alpha slot of piece c's position
    s, ``backward_offsets[c, s]`` the beta slot of its position len_c - 1 - s (the backward schedule walks each piece
    from its end); both are 0 past a piece's end, where no group reads or writes. ``forward_index`` and
    ``backward_index`` give, per position of ``x``, the entry of the C x length normaliser arrays of the two passes
    that belongs to it; ``counted_positions`` are the positions whose predictive probabilities the log-likelihood
    counts (see :func:`counted_log_likelihood`)."""

    pieces: list[Chunk]
    forward: LockstepSchedule
    backward: LockstepSchedule
    x: np.ndarray
    start: np.ndarray
    pair_layout: PairLayout
    forward_offsets: np.ndarray
    backward_offsets: np.ndarray
    forward_index: np.ndarray
    backward_index: np.ndarray
    counted_positions: np.ndarray

    @staticmethod
    def build(layout: BlockLayout, sequences: Sequence[Any]) -> LockstepPlan:
        """The plan of documents and pieces (see :func:`as_chunks`) under ``layout``; pieces that replace pi by a
        carried message (online EM) are refused."""
        pieces = as_chunks(sequences)
        if any(p.initial is not None for p in pieces):
            raise CHMMError("a lockstep E-step starts every piece from pi; carried messages are not supported")
        forward = LockstepSchedule.build(layout, pieces)
        backward = LockstepSchedule.build(layout, pieces, backward=True)
        lengths = np.array([len(p.x) for p in pieces], dtype=np.int64)
        start = np.concatenate([[0], np.cumsum(lengths)])
        x = np.concatenate([np.asarray(p.x, dtype=np.int64) for p in pieces])
        piece_of = np.repeat(np.arange(len(pieces)), lengths)
        position = np.arange(len(x)) - start[piece_of]
        counted = np.zeros(max(len(x) - 1, 0), dtype=bool)
        counted_positions = []
        for c, p in enumerate(pieces):
            counted[start[c] + p.lo : start[c] + p.hi] = True
            if p.first and p.lo == 0:
                counted_positions.append([start[c]])
            counted_positions.append(start[c] + np.arange(p.lo + 1, p.hi + 1))
        pair_layout = pair_sorted_offsets(layout, x, counted)
        length = forward.length
        forward_index = piece_of * length + position
        backward_index = piece_of * length + (lengths[piece_of] - 1 - position)
        forward_offsets = np.zeros(len(pieces) * length, dtype=np.int64)
        backward_offsets = np.zeros(len(pieces) * length, dtype=np.int64)
        forward_offsets[forward_index] = pair_layout.alpha_offsets
        backward_offsets[backward_index] = pair_layout.beta_offsets
        return LockstepPlan(
            pieces, forward, backward, x, start, pair_layout, forward_offsets, backward_offsets, forward_index,
            backward_index, np.concatenate(counted_positions).astype(np.int64),
        )  # fmt: skip

    @property
    def n_chunks(self) -> int:
        return len(self.pieces)
