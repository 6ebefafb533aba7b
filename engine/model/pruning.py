"""Pruning a CHMM's transitions (paper, Fig 3(d): about 99% of the entries of a trained T can be set to zero at
little cost in BPS): zero transitions by one or more rules, renormalise the rows that keep some mass, and return a
*smaller* model: the same clones and the same block-sparse layout, minus the symbol-pair blocks that became all-zero.
Inference and EM run on it unchanged; its ``fixed_zeros`` field tells the M-step to keep the zeros at zero
(:func:`engine.model.dense.transition_support`). The rules:

* ``threshold``: zero every entry of T below an absolute threshold in (0, 1);
* ``top_mass``: per row, keep the largest entries until they hold this share of the row's mass (a row never
  loses all its entries this way);
* ``keep_clones``: keep only transitions between the given clones (e.g. the clones the Viterbi path of the
  training text uses, :func:`engine.network.graph.viterbi_clones`); the other clones lose all their transitions.

A row whose every entry falls below the threshold becomes all-zero: the clone is a dead end (the forward pass
and the scorer handle this; see :func:`engine.backends.cpu.inference.score`). In a trained model these are the clones
that the training text never used: their rows hold only the pseudocount spread over thousands of entries. The clone
graph and the sweep of thresholds against validation text are :mod:`engine.network.graph`'s."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from engine.errors import CHMMError
from engine.model.blocks import BlockLayout, entry_rows_cols, normalise_rows, row_sums
from engine.model.dense import BACKOFF_WEIGHT, CHMM


def check_threshold(threshold: float) -> float:
    """The threshold as a float, or ValueError unless 0 < threshold < 1."""
    try:
        value = float(threshold)
    except (TypeError, ValueError):
        raise CHMMError(f"the threshold must be a number in (0, 1), got {threshold!r}") from None
    if not (np.isfinite(value) and 0.0 < value < 1.0):
        raise CHMMError(f"the threshold must lie strictly between 0 and 1, got {threshold!r}")
    return value


def _top_mass_mask(model: CHMM, top_mass: float) -> np.ndarray:
    """Flat mask: per row, the largest entries whose cumulative mass first reaches ``top_mass`` of the row."""
    T = np.asarray(model.T, dtype=np.float64)
    keep = np.zeros(T.shape, dtype=bool)
    nz = np.flatnonzero(T)
    if nz.size == 0:
        return keep
    rows, _ = entry_rows_cols(model.layout, nz)
    values = T[nz]
    order = np.lexsort((-values, rows))  # by row, then largest first
    rows_sorted, values_sorted = rows[order], values[order]
    cumulative = np.cumsum(values_sorted)
    starts = np.flatnonzero(np.r_[True, rows_sorted[1:] != rows_sorted[:-1]])
    run = np.diff(np.r_[starts, len(rows_sorted)])
    before_row = np.repeat(cumulative[starts] - values_sorted[starts], run)  # mass of earlier rows
    row_total = np.repeat(np.add.reduceat(values_sorted, starts), run)
    mass_before = cumulative - values_sorted - before_row  # mass of the larger entries of the same row
    keep[nz[order[mass_before < top_mass * row_total * (1.0 - 1e-12)]]] = True
    return keep


def prune(
    model: CHMM,
    threshold: float | None = None,
    top_mass: float | None = None,
    keep_clones: np.ndarray | None = None,
) -> CHMM:
    """A pruned copy of ``model``: zero the entries of T that the given rules drop, renormalise every row that
    keeps some mass, and drop the blocks that became all-zero (a new, smaller :class:`BlockLayout` over the same
    clones). Rules (any combination, at least one): ``threshold`` (keep T >= threshold, 0 < threshold < 1),
    ``top_mass`` (per row, keep the largest entries holding this share of the row, 0 < top_mass <= 1),
    ``keep_clones`` (boolean mask or index array of clones: keep transitions between them only).

    The expected counts, if kept, are zeroed on the same entries (a model without them keeps the ``pair_counts``
    of the blocks that stay, and weights every row alike in the back-off weight below). Clones left with neither
    incoming nor outgoing transitions lose their initial probability (pi is renormalised over the others).
    ``metadata["pruned"]`` records the rules and the non-zeros before and after; ``fixed_zeros`` makes EM keep the
    zeros at zero.
    ``backoff_weight`` becomes the removed transition mass (occupancy-weighted mean over rows, with what
    earlier prunings removed, see :func:`pruned_backoff_weight`): :func:`engine.backends.cpu.inference.score` mixes that
    much of the symbol bigram into every prediction.
    """
    if threshold is None and top_mass is None and keep_clones is None:
        raise CHMMError("prune needs a threshold, a top mass or a set of clones to keep")
    layout = model.layout
    T = np.asarray(model.T)
    keep, record = _kept_entries(model, threshold, top_mass, keep_clones)
    nonzeros_before = int(np.count_nonzero(T))
    raw = np.zeros(layout.size, dtype=np.float64)  # the kept entries in float64, written in place: one copy of T
    np.copyto(raw, T, where=keep)  # (np.where over T.astype(float64) held two: 5.3x T at its peak, now 3.3x)
    kept_mass = row_sums(layout, raw)
    removed = 1.0 - kept_mass  # per clone: the transition mass the rules take away
    occupancy = row_sums(layout, model.counts) if model.counts is not None else np.ones(layout.n_states)
    # rows that lose everything belong to clones no path uses any more; they predict nothing
    weights = np.where(kept_mass > 0, occupancy, 0.0)
    removed_mass = float(np.sum(weights * np.clip(removed, 0.0, 1.0)) / weights.sum()) if weights.sum() > 0 else 0.0
    T_new = normalise_rows(layout, raw, 0.0, model.T.dtype)
    del raw
    block_kept = np.add.reduceat(keep, layout.block_offset[:-1]) > 0 if layout.n_blocks else np.zeros(0, bool)
    sizes = np.diff(layout.block_offset)
    entry_kept = np.repeat(block_kept, sizes)
    new_layout = BlockLayout.build(layout.n_clones, layout.block_pairs[block_kept])
    counts = None
    if model.counts is not None:
        counts = np.where(keep, model.counts, 0.0)[entry_kept]
    pair_counts = None if model.pair_counts is None else model.pair_counts[block_kept]  # a model saved without counts
    T_new = np.ascontiguousarray(T_new[entry_kept])
    pi, nonzeros_after = _connected_pi(new_layout, T_new, model.pi)
    record.update(
        nonzeros_before=nonzeros_before,
        nonzeros_after=nonzeros_after,
        kept_fraction=nonzeros_after / nonzeros_before if nonzeros_before else 1.0,
        blocks_before=layout.n_blocks,
        blocks_after=new_layout.n_blocks,
        removed_mass=removed_mass,
    )
    # The scorer backs off to the symbol bigram with the mass the pruning took away (occupancy-weighted mean over
    # rows), instead of the unpruned model's 1e-6: transitions that only the pseudocount supported become
    # impossible, and this is what they are worth (see inference.score).
    return model.with_arrays(
        symbols=list(model.symbols),
        layout=new_layout,
        T=T_new,
        pi=pi.astype(model.pi.dtype),
        counts=counts,
        pair_counts=None if counts is not None else pair_counts,
        metadata=pruned_metadata(model.metadata, record),
        backoff_weight=pruned_backoff_weight(model.backoff_weight, removed_mass),
        fixed_zeros=True,
    )


def _kept_entries(
    model: CHMM, threshold: float | None, top_mass: float | None, keep_clones: np.ndarray | None
) -> tuple[np.ndarray, dict[str, Any]]:
    """The entries of T the rules of :func:`prune` keep (a mask in the flat layout) and the record of the rules."""
    layout = model.layout
    T = np.asarray(model.T)
    keep = T > 0
    record: dict[str, Any] = {}
    if threshold is not None:
        threshold = check_threshold(threshold)
        keep &= T >= threshold
        record["threshold"] = threshold
    if top_mass is not None:
        top_mass = float(top_mass)
        if not 0.0 < top_mass <= 1.0:
            raise CHMMError(f"the top mass must lie in (0, 1], got {top_mass!r}")
        keep &= _top_mass_mask(model, top_mass)
        record["top_mass"] = top_mass
    if keep_clones is not None:
        clones = np.asarray(keep_clones)
        if clones.dtype != bool:
            mask = np.zeros(layout.n_states, dtype=bool)
            mask[clones.astype(np.int64)] = True
            clones = mask
        if clones.shape != (layout.n_states,):
            raise CHMMError("keep_clones must be a mask over the model's clones")
        nz = np.flatnonzero(keep)
        rows, cols = entry_rows_cols(layout, nz)
        keep[nz[~(clones[rows] & clones[cols])]] = False
        record["kept_clones"] = int(clones.sum())
    return keep, record


def _connected_pi(layout: BlockLayout, T: np.ndarray, pi: np.ndarray) -> tuple[np.ndarray, int]:
    """pi without the clones that no transition of T enters or leaves (they cannot be part of a path),
    renormalised (float64), and the number of non-zero transitions."""
    nz = np.flatnonzero(T)
    rows, cols = entry_rows_cols(layout, nz)
    connected = np.zeros(layout.n_states, dtype=bool)
    connected[rows] = True
    connected[cols] = True
    kept = np.where(connected, np.asarray(pi, dtype=np.float64), 0.0)
    return (kept / kept.sum() if kept.sum() > 0 else np.asarray(pi, dtype=np.float64)), int(nz.size)


def pruned_metadata(metadata: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``metadata`` with ``record`` as the last pruning (shown to people) and the earlier one, if any,
    appended to ``pruned_history``."""
    metadata = json.loads(json.dumps(metadata))
    history = list(metadata.get("pruned_history", []))
    if metadata.get("pruned"):
        history.append(metadata["pruned"])
    metadata["pruned"] = record
    if history:
        metadata["pruned_history"] = history
    return metadata


def pruned_backoff_weight(before: float, removed_mass: float) -> float:
    """The back-off weight of a model after a pruning that took away ``removed_mass``: the mass taken away by this
    and every earlier pruning, 1 - (1 - w)(1 - removed_mass), w the model's weight ``before`` if an earlier pruning
    set one (else 0), within [1e-6, 0.5]. (Pruning a pruned model again at the same threshold removes nothing new:
    its weight stays, instead of falling to 1e-6 and leaving the earlier removals without a back-off.)"""
    before = float(before or 0.0)
    if before <= BACKOFF_WEIGHT:
        before = 0.0
    combined = 1.0 - (1.0 - before) * (1.0 - removed_mass)
    return max(BACKOFF_WEIGHT, min(combined, 0.5))
