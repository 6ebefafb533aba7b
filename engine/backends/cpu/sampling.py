"""Sampling text from a model (dense blocks on the CPU; the sparse and GPU engines share :func:`sampling_start`): the
first clone from pi or from the filtered posterior of a prefix's last clone, then following T. Walks of a model with
actions (:mod:`engine.cognitive.actions`) are sampled given their actions (:func:`sample_walks`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from engine.backends.cpu import kernels as cpu
from engine.backends.cpu.inference import ForwardResult, check_sequence, forward
from engine.errors import CHMMError
from engine.model.blocks import row_sums
from engine.model.dense import CHMM


def sampling_start(
    model: Any,
    length: int,
    rng: np.random.Generator,
    prefix: np.ndarray | None,
    forward_pass: Callable[..., ForwardResult],
    outgoing: np.ndarray,
) -> tuple[int, np.ndarray, bool]:
    """Where sampling starts: the first clone, drawn from pi, or, given a prefix, the prefix's last clone drawn from
    its filtered posterior (computed by ``forward_pass``), in both cases conditioned on the sequence going on:
    clones without outgoing transitions (``outgoing``: each clone's row sum of T) are left out. (pi is uniform over
    all clones, so without this a sample could start at a clone of a symbol never seen in training and stop at
    once.) Returns the clone, the output buffer and whether its first entry is that prefix clone (to be dropped).
    Shared by the dense and sparse engines; ValueError when no clone can go on."""
    if length < 1:
        raise CHMMError("length must be at least 1")
    layout = model.layout
    live = np.asarray(outgoing) > 0
    if prefix is None or len(prefix) == 0:
        p = model.pi.astype(np.float64) * live
        if p.sum() <= 0:
            raise CHMMError("the model has no clone with outgoing transitions to start from")
        return int(rng.choice(layout.n_states, p=p / p.sum())), np.empty(length, dtype=np.int64), False
    prefix = check_sequence(model, prefix)
    fwd = forward_pass(model, prefix, store=True)
    s = prefix[-1]
    m = layout.n_clones[s]
    lo = layout.clone_start[s]
    a = fwd.alpha[fwd.offsets[-2] : fwd.offsets[-2] + m].astype(np.float64) * live[lo : lo + m]
    if a.sum() <= 0:
        raise CHMMError(f"the model has no transition out of the prefix's last symbol {model.symbols[s]!r}")
    return int(lo + rng.choice(m, p=a / a.sum())), np.empty(length + 1, dtype=np.int64), True


def sample(model: CHMM, length: int, rng: np.random.Generator, prefix: np.ndarray | None = None) -> np.ndarray:
    """Sample ``length`` symbols from the model: the first clone from pi, or, given a prefix, from the filtered
    posterior of the prefix's last clone (forward pass) followed by one transition (see :func:`sampling_start`);
    then by following T. The prefix itself is not part of the output. Sampling stops early at a clone with no
    outgoing mass (one that T itself leads to, e.g. a clone of the training text's last symbol)."""
    layout = model.layout
    outgoing = row_sums(layout, model.T)
    first, out, primed = sampling_start(model, length, rng, prefix, forward, outgoing)
    row_block_start = np.searchsorted(layout.block_pairs[:, 0], np.arange(layout.n_symbols + 1))
    uniforms = rng.random(len(out))
    written = cpu.sample_path(
        model.T,
        layout.n_clones,
        layout.clone_start,
        layout.clone_symbol(),
        row_block_start,
        layout.block_pairs,
        layout.block_offset,
        first,
        uniforms,
        out,
    )
    return out[1:written] if primed else out[:written]
