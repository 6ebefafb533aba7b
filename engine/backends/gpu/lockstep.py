"""Lockstep passes of the GPU engine: many chunks (or documents) advance together, one step at a time, and the chunks
standing at one symbol pair share one read of its block (:mod:`engine.backends.chunks` builds the schedule and the plan;
the kernels are ``lockstep_chain_f32`` and, on the float16 copy of the blocks, ``lockstep_chain_f16`` of
:mod:`engine.backends.gpu.kernels`). :class:`LockstepPasses` adds them to
:class:`engine.backends.gpu.device_blocks.DeviceBlocks`, whose tables, kernels and helpers they use."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.backends.chunks import LockstepPlan, LockstepSchedule
from engine.backends.cpu import inference
from engine.backends.gpu import kernels
from engine.backends.gpu.devices import DeviceModel
from engine.errors import CHMMError

LOCKSTEP_SHARED = 96 * 1024
"""Dynamic shared memory the lockstep kernel asks for (bytes): up to 8 staged messages of 3,000 clones."""


@dataclass
class DeviceSchedule:
    """A :class:`LockstepSchedule` on the device (see :meth:`DeviceBlocks.upload_schedule`): the kernel that runs
    it (``lockstep_chain_f32`` or ``_f16``), its arrays in the order the kernel takes them, the chunks (``tile``)
    and output rows (``rows``) of one work item, and the shared memory the staged messages take (bytes)."""

    schedule: LockstepSchedule
    kernel: Any
    tile: int
    rows: int
    shared_bytes: int
    arrays: tuple


def work_items(schedule: LockstepSchedule, tile: int, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How the lockstep kernels share out a step's work: each group's items (its chunks cut into tiles of up to
    ``tile``, times its output rows cut into runs of ``rows``; a group without a block has none), each group's first
    item among its step's (``group_item_base``, counted from 0 at every step) and each step's items. A thread block
    takes items blockIdx.x, blockIdx.x + gridDim.x, ... of every step, or with ``lockstep_dynamic`` the next item
    not yet taken, in this order, whenever it is free."""
    n_steps = schedule.n_steps
    blocked = schedule.group_block >= 0
    out_rows = np.where(blocked, schedule.group_out, 0).astype(np.int64)
    chunks = np.diff(schedule.group_chunk_start).astype(np.int64)
    items = -(-chunks // tile) * -(-out_rows // rows)
    group_step = np.repeat(np.arange(n_steps), np.diff(schedule.step_group_start))
    before = np.cumsum(items) - items
    group_item_base = before - before[schedule.step_group_start[group_step]] if len(items) else before
    step_items = np.bincount(group_step, weights=items, minlength=n_steps).astype(np.int64)
    return items, group_item_base, step_items


@dataclass
class DeviceLockstep:
    """A :class:`LockstepPlan` on the device (see :meth:`DeviceBlocks.upload_lockstep`)."""

    plan: LockstepPlan
    forward: DeviceSchedule
    backward: DeviceSchedule
    x: Any
    alpha_offsets: Any
    beta_offsets: Any
    forward_offsets: Any
    backward_offsets: Any
    forward_index: Any
    backward_index: Any
    counted_positions: Any
    firsts: Any  # each piece's first position in x
    lasts: Any  # and its last
    first_slots: Any  # the alpha slots of the pieces' first messages, end to end
    last_slots: Any  # the beta slots of their last messages
    last_values: Any  # the last messages (uniform)


class LockstepPasses:
    """The lockstep passes of :class:`engine.backends.gpu.device_blocks.DeviceBlocks` (a mixin over its tables
    and kernels)."""

    xp: Any
    layout: Any
    width: int
    sm_count: int
    device: Any
    host: Any
    n_clones: Any
    _lockstep: Any
    _counts: Any
    _normalise_messages: Any
    _check_aborts: Any
    _pass_matrices: Any
    lockstep_rows: int
    lockstep_loads: int
    lockstep_rows_in_flight: int
    lockstep_dynamic: bool
    lockstep_precision: str

    def _first_messages(self, start: np.ndarray, symbols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_initial_message` for many chunks at once: ``start`` restricted to the clones of each of
        ``symbols`` and normalised (uniform where it has no mass); returns the messages end to end (float32), where
        each chunk's begins, and each one's mass."""
        layout = self.layout
        sizes = layout.n_clones[symbols].astype(np.int64)
        begins = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        within = np.arange(int(sizes.sum())) - np.repeat(begins, sizes)
        values = np.asarray(start, dtype=np.float64)[np.repeat(layout.clone_start[symbols], sizes) + within]
        mass = np.add.reduceat(values, begins) if len(values) else np.zeros(0)
        spread = np.repeat(mass, sizes)
        messages = np.where(spread > 0, values / np.where(spread > 0, spread, 1.0), 1.0 / np.repeat(sizes, sizes))
        return messages.astype(np.float32), begins, mass

    def upload_schedule(self, schedule: LockstepSchedule, precision: str | None = None) -> DeviceSchedule:
        """``schedule`` on the device, its groups cut into the work items of ``lockstep_chain_f32`` (up to ``tile``
        chunks by ``lockstep_rows`` rows, :data:`kernels.LOCKSTEP_ROWS` by default; ``tile`` as many staged messages
        of the widest symbol as the shared memory the kernel is granted holds), run by the kernel of the blocks'
        ``precision`` (default: ``lockstep_precision``), ``lockstep_loads`` and ``lockstep_rows_in_flight``."""
        xp, layout = self.xp, self.layout
        if self.lockstep_loads not in kernels.LOCKSTEP_LOADS_CHOICES:
            raise CHMMError(f"lockstep_loads is one of {kernels.LOCKSTEP_LOADS_CHOICES}, not {self.lockstep_loads!r}")
        in_flight = self.lockstep_rows_in_flight
        if in_flight not in kernels.LOCKSTEP_ROWS_IN_FLIGHT_CHOICES or (
            in_flight > 1 and self.lockstep_loads != kernels.LOCKSTEP_LOADS
        ):
            raise CHMMError(
                f"lockstep_rows_in_flight is one of {kernels.LOCKSTEP_ROWS_IN_FLIGHT_CHOICES} (above 1 only with "
                f"{kernels.LOCKSTEP_LOADS} loads in flight), not {in_flight!r} with {self.lockstep_loads!r} loads"
            )
        kernel = self._lockstep[(precision or self.lockstep_precision, self.lockstep_loads, in_flight)]
        granted = self.device.allow_shared(kernel, LOCKSTEP_SHARED)
        tile = min(kernels.LOCKSTEP_TILE_MAX, granted // (4 * self.width))
        if tile < 1:
            raise CHMMError(
                f"a lockstep pass stages a message of the widest symbol ({self.width:,} clones) in shared memory, "
                f"which holds {granted // 4:,}; use fewer clones per symbol or the sequential passes"
            )
        _, group_item_base, step_items = work_items(schedule, tile, self.lockstep_rows)
        blocked = schedule.group_block >= 0
        group_offset = np.where(blocked, layout.block_offset[np.maximum(schedule.group_block, 0)], -1)
        arrays = (
            xp.asarray(schedule.step_group_start), xp.asarray(step_items.astype(np.int32)),
            xp.asarray(group_offset.astype(np.int64)), xp.asarray(schedule.group_in),
            xp.asarray(schedule.group_out), xp.asarray(group_item_base.astype(np.int32)),
            xp.asarray(schedule.group_chunk_start), xp.asarray(schedule.chunk_ids),
        )  # fmt: skip
        return DeviceSchedule(schedule, kernel, tile, self.lockstep_rows, 4 * tile * self.width, arrays)

    def _lockstep_pass(
        self, M: Any, schedule: DeviceSchedule, offsets: Any, store: Any, norm: Any, grid: int, stream: Any
    ) -> tuple[Any, Any]:
        """One launch of the lockstep kernel of ``schedule`` (messages at ``offsets`` in ``store``, sums into
        ``norm``) on ``stream``, its thread blocks taking the work items in turn or, with ``lockstep_dynamic``, as
        they come free; returns its abort flag and its barrier and item counter (kept until the stream is
        synchronised)."""
        xp = self.xp
        n_steps = schedule.schedule.n_steps
        with stream:
            abort = xp.zeros(1, dtype=xp.int32)
            barrier = xp.zeros(1, dtype=xp.uint32)
            counter = xp.zeros(n_steps, dtype=xp.int32) if self.lockstep_dynamic else None
            if n_steps > 0:
                args = (
                    M, np.int32(n_steps), np.int32(schedule.schedule.length), np.int32(schedule.tile),
                    np.int32(schedule.rows), *schedule.arrays, offsets, store, norm, barrier, abort, counter,
                )  # fmt: skip
                schedule.kernel((grid,), (kernels.THREADS,), args, shared_mem=schedule.shared_bytes)
        return abort, (barrier, counter)

    def upload_lockstep(self, plan: LockstepPlan) -> DeviceLockstep:
        """What every lockstep E-step over ``plan`` reads, on the device once (both schedules, the message slots and
        where the first and the last messages go)."""
        xp, layout, pl = self.xp, self.layout, plan.pair_layout

        def slots(offsets: np.ndarray, symbols: np.ndarray) -> np.ndarray:
            sizes = layout.n_clones[symbols].astype(np.int64)
            begins = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
            return np.repeat(offsets, sizes) + np.arange(int(sizes.sum())) - np.repeat(begins, sizes)

        firsts, lasts = plan.start[:-1], plan.start[1:] - 1
        last_sizes = layout.n_clones[plan.x[lasts]]
        return DeviceLockstep(
            plan,
            self.upload_schedule(plan.forward),
            self.upload_schedule(plan.backward),
            xp.asarray(plan.x, dtype=xp.int32),
            xp.asarray(pl.alpha_offsets),
            xp.asarray(pl.beta_offsets),
            xp.asarray(plan.forward_offsets),
            xp.asarray(plan.backward_offsets),
            xp.asarray(plan.forward_index),
            xp.asarray(plan.backward_index),
            xp.asarray(plan.counted_positions),
            xp.asarray(firsts),
            xp.asarray(lasts),
            xp.asarray(slots(pl.alpha_offsets[firsts], plan.x[firsts])),
            xp.asarray(slots(pl.beta_offsets[lasts], plan.x[lasts])),
            xp.asarray((1.0 / np.repeat(last_sizes, last_sizes)).astype(np.float32)),
        )

    def lockstep_forward(self, device_model: DeviceModel, schedule: LockstepSchedule) -> list[np.ndarray]:
        """The forward pass of every piece of ``schedule`` at once (the ``lockstep_chain_f32`` kernel: the chunks
        advance together, one read of a block per group of chunks standing at its pair, one grid barrier per step
        instead of one per symbol): each piece's predictive probabilities P(x_n | x_<n) over its own symbols
        (position 0: the mass of pi on its first symbol), as :meth:`forward` gives them for each piece alone. Keeps
        two messages per chunk (two planes used in turn)."""
        xp = self.xp
        pieces, width, length = schedule.pieces, self.width, schedule.length
        n_chunks = len(pieces)
        if any(p.initial is not None for p in pieces):
            raise CHMMError("a lockstep pass starts every piece from pi; carried messages are not supported")
        messages, begins, mass = self._first_messages(device_model.pi, np.array([p.x[0] for p in pieces]))
        plane = np.zeros((2, n_chunks, width), dtype=np.float32)
        for c in range(n_chunks):
            m = (begins[c + 1] if c + 1 < n_chunks else len(messages)) - begins[c]
            plane[0, c, :m] = messages[begins[c] : begins[c] + m]
        offsets = (np.arange(length)[None, :] % 2) * (n_chunks * width) + np.arange(n_chunks)[:, None] * width
        norm = xp.zeros(n_chunks * length, dtype=xp.float64)
        forward_blocks, _, scale = self._pass_matrices(device_model)
        on_device = self.upload_schedule(schedule, self.pass_precision)
        abort, _ = self._lockstep_pass(
            forward_blocks, on_device, xp.asarray(offsets.ravel().astype(np.int64)), xp.asarray(plane.ravel()), norm,
            2 * self.sm_count, self.device.current_stream(),
        )  # fmt: skip
        self._check_aborts(abort)
        out = self.host(norm).reshape(n_chunks, length) / scale
        out[:, 0] = mass
        return [out[c, : len(piece.x)] for c, piece in enumerate(pieces)]

    def lockstep_e_step(
        self, device_model: DeviceModel, plan: LockstepPlan | DeviceLockstep, counts_out: Any | None = None
    ) -> inference.EStepResult:
        """The E-step of :meth:`e_step` over the pieces of ``plan`` in lockstep: the forward and the backward
        lockstep pass (concurrently, on two streams) keep every message in its slot of the plan's pair-sorted
        layout, and the counts of each block are T(i, j) o (A^T B) over the counted steps of all pieces (one
        product per block, as in :meth:`e_step`). With whole documents as pieces the counts are the sum of each
        document's own E-step; with chunks of a document they differ by the message error at the chunk seams (the
        burn-in bounds it). gamma_first is the mean over the pieces that start a document. A host plan is
        uploaded first (:meth:`upload_lockstep`; EM uploads it once)."""
        on_device = plan if isinstance(plan, DeviceLockstep) else self.upload_lockstep(plan)
        plan = on_device.plan
        xp, layout = self.xp, self.layout
        pl, pieces = plan.pair_layout, plan.pieces
        n_chunks, length = plan.n_chunks, plan.forward.length
        x_dev, alpha_offsets, beta_offsets = on_device.x, on_device.alpha_offsets, on_device.beta_offsets
        alpha = xp.empty(pl.alpha_size, dtype=xp.float32)
        beta = xp.empty(pl.beta_size, dtype=xp.float32)
        messages, _, mass = self._first_messages(device_model.pi, plan.x[plan.start[:-1]])
        alpha[on_device.first_slots] = xp.asarray(messages)
        beta[on_device.last_slots] = on_device.last_values
        forward_norm = xp.zeros(n_chunks * length, dtype=xp.float64)
        backward_norm = xp.zeros(n_chunks * length, dtype=xp.float64)
        forward_blocks, backward_blocks, scale = self._pass_matrices(device_model, self.lockstep_precision)
        self.device.synchronize()  # the streams below do not wait for the current one
        forward_stream, backward_stream = self.device.stream(), self.device.stream()
        abort_forward, _forward_barrier = self._lockstep_pass(
            forward_blocks, on_device.forward, on_device.forward_offsets, alpha, forward_norm, self.sm_count,
            forward_stream,
        )  # fmt: skip
        abort_backward, _backward_barrier = self._lockstep_pass(
            backward_blocks, on_device.backward, on_device.backward_offsets, beta, backward_norm, self.sm_count,
            backward_stream,
        )  # fmt: skip
        forward_stream.synchronize()
        backward_stream.synchronize()
        self._check_aborts(abort_forward, abort_backward)
        n = len(plan.x)
        predictive = forward_norm[on_device.forward_index]
        beta_norm = backward_norm[on_device.backward_index]
        predictive[on_device.firsts] = 1.0  # the first messages are stored normalised
        beta_norm[on_device.lasts] = 1.0
        self._normalise_messages(alpha, alpha_offsets, x_dev, predictive, n)
        self._normalise_messages(beta, beta_offsets, x_dev, beta_norm, n)
        if scale != 1.0:  # the raw messages and their sums carry the scale of the float16 blocks
            predictive /= scale
        predictive[on_device.firsts] = xp.asarray(mass)
        counted = self.host(predictive[on_device.counted_positions])
        zero_events = int(np.count_nonzero(counted <= 0))

        gamma_first = np.zeros(layout.n_states)
        starters = [c for c, p in enumerate(pieces) if p.first and p.lo == 0]
        for c in starters:
            q, symbol = int(plan.start[c]), int(plan.x[plan.start[c]])
            m, lo = int(layout.n_clones[symbol]), int(layout.clone_start[symbol])
            a0, b0 = int(pl.alpha_offsets[q]), int(pl.beta_offsets[q])
            g = self.host(alpha[a0 : a0 + m]).astype(np.float64) * self.host(beta[b0 : b0 + m])
            if g.sum() > 0:
                gamma_first[lo : lo + m] += g / g.sum() / len(starters)
        last_alpha = np.zeros(layout.n_states, dtype=np.float32)
        q, symbol = n - 1, int(plan.x[-1])
        m, lo = int(layout.n_clones[symbol]), int(layout.clone_start[symbol])
        last_alpha[lo : lo + m] = self.host(alpha[int(pl.alpha_offsets[q]) : int(pl.alpha_offsets[q]) + m])

        messages = (x_dev, predictive, alpha, alpha_offsets, beta, beta_offsets)
        counts = self._counts(messages, pl, device_model.T, counts_out, False)
        with np.errstate(divide="ignore"):
            log_likelihood = -math.inf if zero_events else float(np.sum(np.log(counted)))
        return inference.EStepResult(counts, gamma_first, log_likelihood, zero_events, last_alpha, pl.pair_count > 0)
