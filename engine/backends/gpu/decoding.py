"""Decoding on the GPU engine: Viterbi with per-position soft evidence (and the row shifts of a walk with actions)
and sampling a clone path. :class:`DecodingPasses` adds them to :class:`engine.backends.gpu.device_blocks.DeviceBlocks`,
whose tables, kernels and helpers they use (the kernels ``viterbi_chain`` and ``sample_path`` of
:mod:`engine.backends.gpu.kernels`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from engine.backends.cpu import inference
from engine.backends.cpu import kernels as cpu
from engine.backends.gpu import kernels
from engine.backends.gpu.devices import DeviceModel
from engine.model import row_keys


class DecodingPasses:
    """Viterbi and sampling of :class:`engine.backends.gpu.device_blocks.DeviceBlocks` (a mixin over its tables
    and kernels)."""

    xp: Any
    layout: Any
    sm_count: int
    host: Any
    n_clones: Any
    clone_start: Any
    clone_symbol: Any
    row_block_start: Any
    block_pairs: Any
    block_offset: Any
    block_lookup: Any
    _viterbi: Any
    _sample: Any
    _check_aborts: Any

    # ------------------------------------------------------------------------------------------- Viterbi
    def viterbi(
        self,
        device_model: DeviceModel,
        evidence: np.ndarray | inference.Evidence,
        row_shift: np.ndarray | None = None,
    ) -> inference.ViterbiResult:
        """MAP clone path with per-position soft evidence (see :func:`engine.backends.cpu.inference.viterbi`); the same
        arithmetic as the CPU kernel, so the same path. ``row_shift[n]`` (None: zeros, a text) is added to the
        symbols of position n to name the block row of step n -> n+1 (``a_n * E`` for a walk with actions), as on
        the CPU."""
        xp = self.xp
        layout = self.layout
        evidence, slot_offset = inference.viterbi_evidence(layout, evidence)
        n_pos = len(evidence.ptr) - 1
        symbols = np.asarray(evidence.symbol, dtype=np.int64)
        weights = np.asarray(evidence.weight, dtype=np.float64)
        shift = row_shift if row_shift is None else row_keys.check_row_shift(layout, evidence.ptr, symbols, row_shift)
        sizes = np.diff(slot_offset)
        # position 0 on the host, exactly as the CPU kernel
        first = np.zeros(int(slot_offset[evidence.ptr[1]]), dtype=np.float64)
        for c in range(evidence.ptr[0], evidence.ptr[1]):
            s = symbols[c]
            lo = int(layout.clone_start[s])
            first[slot_offset[c] : slot_offset[c + 1]] = (
                device_model.pi[lo : lo + sizes[c]].astype(np.float64) * weights[c]
            )
        best0 = float(first.max()) if first.size else 0.0
        if best0 <= 0.0:
            return inference.ViterbiResult(np.full(n_pos, -1), np.full(n_pos, -1), -math.inf)
        first /= best0
        delta = xp.zeros(int(slot_offset[-1]), dtype=xp.float64)
        delta[: first.size] = xp.asarray(first)
        backpointer = xp.full(int(slot_offset[-1]), -1, dtype=xp.int64)
        scale = xp.ones(n_pos, dtype=xp.float64)
        grid = 2 * self.sm_count
        partial = xp.zeros(2 * grid, dtype=xp.float64)
        barrier = xp.zeros(1, dtype=xp.uint32)
        abort = xp.zeros(1, dtype=xp.int32)
        if n_pos > 1:
            self._viterbi(
                (grid,),
                (kernels.THREADS,),
                (
                    device_model.TT,
                    self.block_offset,
                    self.block_lookup,
                    np.int32(layout.n_symbols),
                    self.n_clones,
                    None if shift is None else xp.asarray(shift),
                    xp.asarray(evidence.ptr, dtype=xp.int64),
                    xp.asarray(symbols, dtype=xp.int32),
                    xp.asarray(weights),
                    xp.asarray(slot_offset),
                    np.int32(n_pos),
                    delta,
                    backpointer,
                    scale,
                    partial,
                    barrier,
                    abort,
                ),
            )
        self._check_aborts(abort)
        scales = self.host(scale)
        if np.any(scales[1:] <= 0):
            return inference.ViterbiResult(np.full(n_pos, -1), np.full(n_pos, -1), -math.inf)
        log_probability = math.log(best0) + float(np.sum(np.log(scales[1:])))
        # the CPU kernels' backtrack, on the host: it reads delta at the last position only
        lo, hi = int(slot_offset[evidence.ptr[n_pos - 1]]), int(slot_offset[evidence.ptr[n_pos]])
        last = np.zeros(hi, dtype=np.float64)
        last[lo:hi] = self.host(delta[lo:hi])
        path_slots = np.empty(n_pos, dtype=np.int64)
        ptr = np.asarray(evidence.ptr, dtype=np.int64)
        cpu.backtrack_slots(last, ptr, symbols, layout.n_clones, slot_offset, self.host(backpointer), path_slots)
        clones = np.full(n_pos, -1, dtype=np.int64)
        cpu.slots_to_clones(path_slots, ptr, symbols, layout.n_clones, layout.clone_start, slot_offset, clones)
        return inference.ViterbiResult(clones, layout.clone_symbol()[clones], log_probability)

    # ------------------------------------------------------------------------------------------- sampling
    def sample_path(self, device_model: DeviceModel, first_clone: int, uniforms: np.ndarray) -> np.ndarray:
        """Follow T from ``first_clone`` with one uniform draw per step (see ``cpu.sample_path``); the symbols."""
        xp = self.xp
        length = len(uniforms)
        out = xp.zeros(length, dtype=xp.int32)
        written = xp.zeros(1, dtype=xp.int32)
        self._sample(
            (1,),
            (32,),
            (
                device_model.T,
                self.n_clones,
                self.clone_start,
                self.clone_symbol,
                self.row_block_start,
                self.block_pairs,
                self.block_offset,
                np.int32(first_clone),
                xp.asarray(uniforms, dtype=xp.float64),
                np.int32(length),
                out,
                written,
            ),
        )
        return self.host(out[: int(self.host(written)[0])]).astype(np.int64)
