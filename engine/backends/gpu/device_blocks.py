"""The CHMM engine on a GPU: forward/backward, BPS, E-step counts, M-step, Viterbi with soft evidence and sampling on
the block-sparse layout, with the model and the messages kept on the device (:class:`DeviceBlocks`; the lockstep
passes in :mod:`engine.backends.gpu.lockstep`, Viterbi and sampling in :mod:`engine.backends.gpu.decoding`, the protocol
in
:mod:`engine.backends.gpu.implementation`).

The code here is array logic over a :class:`engine.backends.gpu.devices.Device`: an array module ``xp`` and a table of
kernels by name, CuPy and the CUDA kernels of :mod:`engine.backends.gpu.kernels` on a CUDA GPU, NumPy and their twins
anywhere (the ``gpu-sim`` implementation), so every line of this module runs in every CI run and a device run only adds
the kernels themselves.

The arithmetic is the CPU engine's (:mod:`engine.backends.cpu.inference`): float32 blocks and messages, float64
normalisers and log-likelihoods; the per-step recursions run as persistent kernels and the E-step counts as one matrix
product per symbol pair, counts(i, j) = T(i, j) o (A_ij^T B_ij) (the DESIGN's grouping, as on the CPU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.backends.cpu import inference
from engine.backends.gpu import kernels
from engine.backends.gpu.decoding import DecodingPasses
from engine.backends.gpu.devices import Device, DeviceModel
from engine.backends.gpu.lockstep import LockstepPasses
from engine.errors import CHMMError
from engine.model.blocks import BlockLayout
from engine.model.dense import CHMM

_WARPS_PER_LAUNCH_BLOCK = 8  # one-warp-per-item kernels: 256 threads per block
_PAIR_THREADS = 256  # pair_counts: threads per work item
PASS_PRECISIONS = ("float32", "float16")
HALF_SCALE = 2.0**14
"""float16 copies of T hold T * 2^14: entries down to ~4e-12 stay representable (rows sum to 1, so nothing
overflows); the factor cancels in every normalised message and is divided out of the forward normalisers."""


@dataclass
class _DeviceEStep:
    """An E-step on the device: the protocol's result and beta at the first position, normalised (carried back by
    a segmented E-step)."""

    result: inference.EStepResult
    first_beta: np.ndarray


class DeviceBlocks(LockstepPasses, DecodingPasses):
    """One :class:`BlockLayout`'s index tables on a device, and the passes over models with that layout.

    The tables are uploaded once; models with the layout are uploaded with :meth:`upload` and come back with
    :meth:`download`.
    """

    def __init__(
        self,
        layout: BlockLayout,
        device: Device,
        pass_precision: str = "float32",
        lockstep_precision: str | None = None,
    ) -> None:
        lockstep_precision = pass_precision if lockstep_precision is None else lockstep_precision
        for name, value in (("pass_precision", pass_precision), ("lockstep_precision", lockstep_precision)):
            if value not in PASS_PRECISIONS:
                raise CHMMError(f"{name} must be one of {', '.join(PASS_PRECISIONS)}")
        xp = device.xp
        self.device = device
        self.xp = xp
        self.host = device.host
        self.pass_precision = pass_precision
        self.lockstep_precision = lockstep_precision
        self.layout = layout
        self.sm_count = device.sm_count
        self.device_name = device.name
        self.width = int(layout.n_clones.max())
        self.n_clones = xp.asarray(layout.n_clones, dtype=xp.int32)
        self.clone_start = xp.asarray(layout.clone_start, dtype=xp.int32)
        self.block_lookup = xp.asarray(layout.block_lookup.astype(np.int32))
        self.block_offset = xp.asarray(layout.block_offset, dtype=xp.int64)
        self.block_pairs = xp.asarray(layout.block_pairs.astype(np.int32).ravel())
        self.clone_symbol = xp.asarray(layout.clone_symbol(), dtype=xp.int32)
        self.row_block_start = xp.asarray(
            np.searchsorted(layout.block_pairs[:, 0], np.arange(layout.n_symbols + 1)).astype(np.int32)
        )
        # one entry per row of every block (the M-step's unit of work)
        rows = layout.n_clones[layout.block_pairs[:, 0]]
        cols = layout.n_clones[layout.block_pairs[:, 1]]
        block_of_row = np.repeat(np.arange(layout.n_blocks), rows)
        first_row = np.concatenate([[0], np.cumsum(rows)[:-1]]) if layout.n_blocks else np.zeros(0, np.int64)
        u = np.arange(int(rows.sum())) - np.repeat(first_row, rows)
        self.n_rows = int(rows.sum())
        self.row_block = block_of_row
        self.row_offset = xp.asarray(layout.block_offset[block_of_row] + u * cols[block_of_row], dtype=xp.int64)
        self.row_len = xp.asarray(cols[block_of_row], dtype=xp.int32)
        self.row_clone = xp.asarray(layout.clone_start[layout.block_pairs[block_of_row, 0]] + u, dtype=xp.int32)
        self.row_base = xp.asarray(layout.block_offset[block_of_row], dtype=xp.int64)
        self.row_u = xp.asarray(u, dtype=xp.int32)
        self.row_m = xp.asarray(rows[block_of_row], dtype=xp.int32)
        self._chain = device.kernel("chain_sum_f32" if pass_precision == "float32" else "chain_sum_f16")
        self._viterbi = device.kernel("viterbi_chain")
        self._scale = device.kernel("scale_messages")
        self._weights = device.kernel("pair_weights")
        self._row_totals = device.kernel("row_totals")
        self._row_write = device.kernel("row_write")
        self._sample = device.kernel("sample_chain")
        self._pair_counts = device.kernel("pair_counts")
        self.pair_counts_max_occurrences = kernels.PAIR_COUNTS_MAX_OCCURRENCES
        self._lockstep = {
            ("float32", 4, 1): device.kernel("lockstep_chain_f32"),
            ("float16", 4, 1): device.kernel("lockstep_chain_f16"),
            ("float32", 1, 1): device.kernel("lockstep_chain_f32_loads1"),
            ("float16", 1, 1): device.kernel("lockstep_chain_f16_loads1"),
            ("float32", 8, 1): device.kernel("lockstep_chain_f32_loads8"),
            ("float16", 8, 1): device.kernel("lockstep_chain_f16_loads8"),
            ("float32", 4, 2): device.kernel("lockstep_chain_f32_rows2"),
            ("float16", 4, 2): device.kernel("lockstep_chain_f16_rows2"),
        }  # by (precision, loads in flight per lane, rows in flight per warp)
        self.lockstep_rows = kernels.LOCKSTEP_ROWS
        self.lockstep_loads = kernels.LOCKSTEP_LOADS
        self.lockstep_rows_in_flight = kernels.LOCKSTEP_ROWS_IN_FLIGHT
        self.lockstep_dynamic = kernels.LOCKSTEP_DYNAMIC

    # ------------------------------------------------------------------------------------------- transfers
    def upload(self, model: CHMM) -> DeviceModel:
        """Copy ``model`` to the device (T as float32, and its transposed blocks; its support when it keeps
        its zeros)."""
        xp = self.xp
        T = xp.array(np.asarray(model.T, dtype=np.float32))  # a copy on every device (the simulated one too)
        TT = xp.empty_like(T)
        self._launch_rows(self._row_write, T, 0.0, None, None, None, TT)
        counts = None if model.counts is None else xp.array(np.asarray(model.counts, dtype=np.float32))
        support = model.support()
        mask = None if support is None else xp.asarray(support.astype(np.uint8))
        return DeviceModel(T, TT, np.asarray(model.pi, dtype=np.float32), counts, mask, self, model)

    def download(self, device_model: DeviceModel) -> CHMM:
        """A host :class:`CHMM` with the template's alphabet, layout and metadata and the device model's arrays."""
        template = device_model.template
        counts = None if device_model.counts is None else self.host(device_model.counts).astype(np.float64)
        T = self.host(device_model.T).astype(template.T.dtype, copy=False)
        return template.with_arrays(T=T, pi=device_model.pi.astype(template.pi.dtype), counts=counts)

    def free_bytes(self) -> int:
        """Free device memory (bytes)."""
        return self.device.free_bytes()

    # ------------------------------------------------------------------------------------------- helpers
    def _launch_items(self, kernel: Any, n_items: int, args: tuple) -> None:
        """Launch a one-warp-per-item kernel over ``n_items`` items."""
        if n_items <= 0:
            return
        threads = 32 * _WARPS_PER_LAUNCH_BLOCK
        blocks = (n_items + _WARPS_PER_LAUNCH_BLOCK - 1) // _WARPS_PER_LAUNCH_BLOCK
        kernel((blocks,), (threads,), args)

    def _launch_rows(
        self, kernel: Any, values: Any, pseudocount: float, support: Any, totals: Any, T: Any, TT: Any
    ) -> None:
        args = (
            values,
            np.float64(pseudocount),
            support,
            self.row_offset,
            self.row_len,
            self.row_clone,
            self.row_base,
            self.row_u,
            self.row_m,
            np.int64(self.n_rows),
            totals,
            T,
            TT,
        )
        self._launch_items(kernel, self.n_rows, args)

    def _initial_message(self, start: np.ndarray, symbol: int) -> tuple[np.ndarray, float]:
        """The first forward message: ``start`` (pi or a carried message over all clones) restricted to the clones
        of ``symbol`` and normalised (uniform if it has no mass), and its mass (P(x_1); 0 at a zero event)."""
        lo = int(self.layout.clone_start[symbol])
        m = int(self.layout.n_clones[symbol])
        segment = np.asarray(start[lo : lo + m], dtype=np.float64)
        total = float(segment.sum())
        if total > 0:
            return (segment / total).astype(np.float32), total
        return np.full(m, 1.0 / m, dtype=np.float32), 0.0

    def _pass_matrices(self, device_model: DeviceModel, precision: str | None = None) -> tuple[Any, Any, float]:
        """The blocks the forward pass reads (transposed), those the backward pass reads, and their scale, in
        ``precision`` (default: the sequential passes' ``pass_precision``)."""
        if (precision or self.pass_precision) == "float32":
            return device_model.TT, device_model.T, 1.0
        if device_model.half is None:
            xp = self.xp
            device_model.half = (
                (device_model.T * HALF_SCALE).astype(xp.float16),
                (device_model.TT * HALF_SCALE).astype(xp.float16),
            )
        return device_model.half[1], device_model.half[0], HALF_SCALE

    def _pass_steps(
        self, x: np.ndarray, backward: bool, row_key: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per step of a pass (in pass order): the offset of its block (-1: no block) and its output size; the
        block of step n -> n+1 is that of (row_key[n], x[n+1]) (``x`` for text; see ``forward_pass`` of
        :mod:`engine.backends.cpu.kernels`)."""
        layout = self.layout
        rows = layout.n_clones[x]
        pair_block = layout.find_blocks((x if row_key is None else row_key)[:-1], x[1:])
        if backward:
            rows = rows[::-1]
            pair_block = pair_block[::-1]
        step_block = np.concatenate([[-1], pair_block])
        step_offset = np.where(step_block >= 0, layout.block_offset[np.maximum(step_block, 0)], -1)
        return step_offset.astype(np.int64), np.ascontiguousarray(rows, dtype=np.int32)

    def _run_chain(
        self,
        M: Any,
        x: np.ndarray,
        backward: bool,
        initial: np.ndarray,
        store: Any,
        offsets: Any,
        grid: int,
        stream: Any,
        row_key: np.ndarray | None = None,
    ) -> tuple[Any, Any, Any]:
        """One persistent forward or backward pass over the host sequence ``x``; returns the per-position
        normalisers (device float64), the kernel's abort flag and its work buffer (the raw message of the last
        position of the pass sits at offset ((n - 1) % 2) * width)."""
        xp = self.xp
        n = len(x)
        step_offset, step_rows = self._pass_steps(x, backward, row_key)
        with stream:
            work = xp.empty(2 * self.width, dtype=xp.float32)
            norm = xp.ones(n, dtype=xp.float64)
            partial = xp.zeros(2 * grid, dtype=xp.float64)
            barrier = xp.zeros(1, dtype=xp.uint32)
            abort = xp.zeros(1, dtype=xp.int32)
            first = xp.asarray(initial, dtype=xp.float32)
            if n > 1:
                args = (
                    M,
                    xp.asarray(step_offset),
                    xp.asarray(step_rows),
                    np.int32(n),
                    np.int32(int(backward)),
                    first,
                    work,
                    np.int32(self.width),
                    store,
                    offsets,
                    norm,
                    partial,
                    barrier,
                    abort,
                )
                self._chain((grid,), (kernels.THREADS,), args, shared_mem=4 * self.width)
            elif store is not None:
                begin = int(self.host(offsets[:1])[0])
                store[begin : begin + len(initial)] = first
        return norm, abort, work

    def _check_aborts(self, *flags: Any) -> None:
        if any(int(self.host(f)[0]) for f in flags):
            raise RuntimeError(
                "a persistent GPU kernel could not synchronise its blocks (another process may be using the GPU)"
            )

    def _normalise_messages(self, store: Any, offsets: Any, x: Any, norm: Any, n: int) -> None:
        self._launch_items(
            self._scale, n, (store, offsets, x, self.n_clones, norm, np.int32(0), np.int32(n), np.int32(0))
        )

    # ------------------------------------------------------------------------------------------- forward
    def forward(
        self,
        device_model: DeviceModel,
        x: np.ndarray,
        initial: np.ndarray | None = None,
        row_key: np.ndarray | None = None,
    ) -> tuple[np.ndarray, int]:
        """Scaled forward pass (see :func:`engine.backends.cpu.inference.forward`): the predictive probabilities
        P(x_n | x_<n) (float64, host) and the number of zero-probability events; ``row_key``: each step's block
        row (a walk with actions, checked by the caller)."""
        result = self.forward_messages(device_model, x, initial, row_key, store=False)
        return result.predictive, result.zero_events

    def forward_messages(
        self,
        device_model: DeviceModel,
        x: np.ndarray,
        initial: np.ndarray | None = None,
        row_key: np.ndarray | None = None,
        store: bool = True,
    ) -> inference.ForwardResult:
        """:meth:`forward` with, when ``store``, the normalised messages (float32) on the host in time order
        (message n at ``offsets[n]``)."""
        x = np.ascontiguousarray(x, dtype=np.int64)
        start = device_model.pi if initial is None else np.asarray(initial)
        message, p0 = self._initial_message(start, int(x[0]))
        forward_blocks, _, scale = self._pass_matrices(device_model)
        alpha = offsets_dev = None
        offsets = np.zeros(0, dtype=np.int64)
        if store:
            offsets = inference.sequential_offsets(self.layout, x)
            offsets_dev = self.xp.asarray(offsets)
            alpha = self.xp.empty(int(offsets[-1]), dtype=self.xp.float32)
        norm, abort, _ = self._run_chain(
            forward_blocks, x, False, message, alpha, offsets_dev, 2 * self.sm_count, self.device.current_stream(),
            row_key,
        )  # fmt: skip
        if store:
            self._normalise_messages(alpha, offsets_dev, self.xp.asarray(x, dtype=self.xp.int32), norm, len(x))
        predictive = self.host(norm) / scale
        self._check_aborts(abort)
        predictive[0] = p0
        messages = self.host(alpha) if store else np.zeros(0, dtype=np.float32)
        return inference.ForwardResult(predictive, int(np.count_nonzero(predictive <= 0)), messages, offsets)

    def log_likelihood(self, device_model: DeviceModel, x: np.ndarray, row_key: np.ndarray | None = None) -> float:
        """log P(x) in nats; -inf if x is impossible under the model (``row_key``: as for :meth:`forward`)."""
        predictive, zero_events = self.forward(device_model, x, row_key=row_key)
        return -math.inf if zero_events else float(np.sum(np.log(predictive)))

    def block_sums(self, values: Any) -> np.ndarray:
        """Sum of each stored block of ``values`` (device flat layout), float64 on the host."""
        row_sum = self.xp.empty(self.n_rows, dtype=self.xp.float64)
        args = (
            values,
            np.float64(0.0),
            None,
            self.row_offset,
            self.row_len,
            self.row_clone,
            np.int64(self.n_rows),
            None,
            row_sum,
        )
        self._launch_items(self._row_totals, self.n_rows, args)
        return np.bincount(self.row_block, weights=self.host(row_sum), minlength=self.layout.n_blocks)

    # ------------------------------------------------------------------------------------------- E-step
    def e_step(
        self,
        device_model: DeviceModel,
        x: np.ndarray,
        pair_layout: inference.PairLayout | None = None,
        initial: np.ndarray | None = None,
        counts_out: Any | None = None,
        terminal: np.ndarray | None = None,
        accumulate: bool = False,
        row_key: np.ndarray | None = None,
    ) -> _DeviceEStep:
        """Expected transition counts sum_n xi(n) (see :func:`engine.backends.cpu.inference.e_step`) on the device.

        The forward and the backward pass run concurrently on two streams (each on one block per multiprocessor);
        the counts of block (i, j) are T(i, j) o (A^T B), one cuBLAS product per occurring pair, written into
        ``counts_out`` (zeroed first) or a fresh float32 buffer. ``terminal`` replaces the uniform beta at the last
        position (a segment of a longer sequence, see :meth:`e_step_segmented`); with ``accumulate`` the products
        A^T B are added to ``counts_out`` and the caller multiplies by T once at the end."""
        xp = self.xp
        layout = self.layout
        x = np.ascontiguousarray(x, dtype=np.int64)
        n = len(x)
        pl = inference.pair_sorted_offsets(layout, x, row_key=row_key) if pair_layout is None else pair_layout
        x_dev = xp.asarray(x, dtype=xp.int32)
        alpha_offsets = xp.asarray(pl.alpha_offsets)
        beta_offsets = xp.asarray(pl.beta_offsets)
        alpha = xp.empty(pl.alpha_size, dtype=xp.float32)
        beta = xp.empty(pl.beta_size, dtype=xp.float32)
        start = device_model.pi if initial is None else np.asarray(initial)
        first_message, p0 = self._initial_message(start, int(x[0]))
        m_last = int(layout.n_clones[x[-1]])
        if terminal is None:
            last_message = np.full(m_last, 1.0 / m_last, dtype=np.float32)
        else:
            last_message = np.asarray(terminal, dtype=np.float32)
        forward_blocks, backward_blocks, scale = self._pass_matrices(device_model)
        self.device.synchronize()  # the streams below do not wait for the current one
        forward_stream, backward_stream = self.device.stream(), self.device.stream()
        predictive, abort_forward, _ = self._run_chain(
            forward_blocks, x, False, first_message, alpha, alpha_offsets, self.sm_count, forward_stream, row_key
        )
        beta_norm, abort_backward, _ = self._run_chain(
            backward_blocks, x, True, last_message, beta, beta_offsets, self.sm_count, backward_stream, row_key
        )
        forward_stream.synchronize()
        backward_stream.synchronize()
        self._check_aborts(abort_forward, abort_backward)
        self._normalise_messages(alpha, alpha_offsets, x_dev, predictive, n)
        self._normalise_messages(beta, beta_offsets, x_dev, beta_norm, n)
        if scale != 1.0:
            predictive /= scale
        predictive[0] = p0
        predictive_host = self.host(predictive)
        zero_events = int(np.count_nonzero(predictive_host <= 0))

        m_first = int(layout.n_clones[x[0]])
        a0, b0 = int(pl.alpha_offsets[0]), int(pl.beta_offsets[0])
        first_beta = self.host(beta[b0 : b0 + m_first])
        g = self.host(alpha[a0 : a0 + m_first]).astype(np.float64) * first_beta
        gamma_first = np.zeros(layout.n_states)
        lo = int(layout.clone_start[x[0]])
        if g.sum() > 0:
            gamma_first[lo : lo + m_first] = g / g.sum()
        last_alpha = np.zeros(layout.n_states, dtype=np.float32)
        al = int(pl.alpha_offsets[n - 1])
        lo = int(layout.clone_start[x[-1]])
        last_alpha[lo : lo + m_last] = self.host(alpha[al : al + m_last])

        messages = (x_dev, predictive, alpha, alpha_offsets, beta, beta_offsets)
        counts = self._counts(messages, pl, device_model.T, counts_out, accumulate)
        log_likelihood = -math.inf if zero_events else float(np.sum(np.log(predictive_host)))
        result = inference.EStepResult(counts, gamma_first, log_likelihood, zero_events, last_alpha, pl.pair_count > 0)
        return _DeviceEStep(result, first_beta)

    def e_step_segmented(
        self, device_model: DeviceModel, x: np.ndarray, segment: int, counts_out: Any | None = None
    ) -> _DeviceEStep:
        """The exact E-step of :meth:`e_step` with device memory bounded by ``segment`` positions instead of len(x).

        A first forward pass over the segments (each started from the last message of the one before) keeps only
        the normalised alpha at every segment start. Then, from the last segment to the first, one E-step per
        segment (the segments overlap by one position) starts its forward pass from that checkpoint and its backward
        pass from the beta carried back from the segment after it, so every xi(n) is the one of the whole sequence.
        Costs one extra forward pass."""
        xp = self.xp
        layout = self.layout
        x = np.ascontiguousarray(x, dtype=np.int64)
        n = len(x)
        if segment < 2:
            raise CHMMError("a segment must hold at least two positions")
        starts = list(range(0, n - 1, segment))
        forward_blocks, _, _ = self._pass_matrices(device_model)
        checkpoints: list[np.ndarray] = []
        carry: np.ndarray | None = None
        for begin in starts:
            end = min(begin + segment, n - 1)
            piece = x[begin : end + 1]
            start = device_model.pi if carry is None else carry
            message, _ = self._initial_message(start, int(piece[0]))
            checkpoints.append(np.asarray(start, dtype=np.float32))
            norm, abort, work = self._run_chain(
                forward_blocks, piece, False, message, None, None, 2 * self.sm_count, self.device.current_stream()
            )
            self._check_aborts(abort)
            m = int(layout.n_clones[piece[-1]])
            total = float(self.host(norm[len(piece) - 1 : len(piece)])[0])
            offset = ((len(piece) - 1) % 2) * self.width
            raw = self.host(work[offset : offset + m]).astype(np.float64)
            carry = np.zeros(layout.n_states, dtype=np.float32)
            lo = int(layout.clone_start[piece[-1]])
            carry[lo : lo + m] = raw / total if total > 0 else 1.0 / m
        counts = xp.zeros(layout.size, dtype=xp.float32) if counts_out is None else counts_out
        counts.fill(0)
        terminal: np.ndarray | None = None
        log_likelihood = 0.0
        zero_events = 0
        touched = np.zeros(layout.n_blocks, dtype=bool)
        last_alpha = gamma_first = None
        for index in range(len(starts) - 1, -1, -1):
            begin = starts[index]
            end = min(begin + segment, n - 1)
            step = self.e_step(
                device_model,
                x[begin : end + 1],
                initial=checkpoints[index] if index else None,
                counts_out=counts,
                terminal=terminal,
                accumulate=True,
            )
            terminal, e = step.first_beta, step.result
            log_likelihood += e.log_likelihood
            zero_events += e.zero_events
            touched |= e.touched
            if last_alpha is None:
                last_alpha = e.last_alpha
            gamma_first = e.gamma_first
        counts *= device_model.T
        result = inference.EStepResult(counts, gamma_first, log_likelihood, zero_events, last_alpha, touched)
        return _DeviceEStep(result, terminal)

    def _counts(
        self, messages: tuple, pl: inference.PairLayout, T: Any, counts_out: Any | None, accumulate: bool
    ) -> Any:
        """Expected counts from normalised messages ``(x, predictive, alpha, alpha offsets, beta, beta offsets)``
        over the positions of ``x``: each alpha(n) scaled by its step's weight 1 / (P(x_{n+1} | x_<=n)
        <alpha(n+1), beta(n+1)>) (kernels ``pair_weights``, ``scale_messages``), then per block A^T B over the steps
        of ``pl``, times T; with ``accumulate`` the products are added to ``counts_out`` and T is left to the
        caller. Steps outside ``pl`` (the seams between chunks laid end to end) get weights nobody reads."""
        xp = self.xp
        x_dev, predictive, alpha, alpha_offsets, beta, beta_offsets = messages
        n = len(x_dev)
        weights = xp.empty(max(n - 1, 1), dtype=xp.float64)
        self._launch_items(
            self._weights,
            n - 1,
            (x_dev, np.int32(n), self.n_clones, predictive, alpha, alpha_offsets, beta, beta_offsets, weights),
        )
        self._launch_items(
            self._scale,
            n - 1,
            (alpha, alpha_offsets, x_dev, self.n_clones, weights, np.int32(0), np.int32(n - 1), np.int32(1)),
        )
        counts = xp.zeros(self.layout.size, dtype=xp.float32) if counts_out is None else counts_out
        if counts_out is not None and not accumulate:
            counts.fill(0)
        self._accumulate_counts(pl, alpha, beta, counts, accumulate)
        if not accumulate:
            counts *= T
        return counts

    def _accumulate_counts(self, pl: inference.PairLayout, alpha: Any, beta: Any, counts: Any, add: bool) -> None:
        """counts(i, j) = A_ij^T B_ij (or += with ``add``) per occurring pair: all in one ``pair_counts`` launch when
        no pair occurs more than ``pair_counts_max_occurrences`` times (an online batch), else one cuBLAS product
        each."""
        xp = self.xp
        layout = self.layout
        touched = np.flatnonzero(pl.pair_count)
        if not len(touched):
            return
        if int(pl.pair_count[touched].max()) <= self.pair_counts_max_occurrences:
            table, item_block, item_tile = self._pair_items(pl, touched)
            n_items = len(item_block)
            args = (alpha, beta, table, item_block, item_tile, np.int32(n_items), np.int32(add), counts)
            self._pair_counts((n_items,), (_PAIR_THREADS,), args)
            return
        for k in touched:
            i, j = layout.block_pairs[k]
            m_i, m_j = int(layout.n_clones[i]), int(layout.n_clones[j])
            rows = int(pl.pair_count[k])
            first = int(pl.pair_first[k])
            a0 = int(pl.alpha_offsets[first])
            b0 = int(pl.beta_offsets[first + 1])
            A = alpha[a0 : a0 + rows * m_i].reshape(rows, m_i)
            B = beta[b0 : b0 + rows * m_j].reshape(rows, m_j)
            lo, hi = int(layout.block_offset[k]), int(layout.block_offset[k + 1])
            if add:
                counts[lo:hi] += xp.matmul(A.T, B).ravel()
            else:
                xp.matmul(A.T, B, out=counts[lo:hi].reshape(m_i, m_j))

    def _pair_items(self, pl: inference.PairLayout, touched: np.ndarray) -> tuple[Any, Any, Any]:
        """The work of ``pair_counts`` for the ``touched`` blocks, on the device: a row per block (its first alpha
        slot, the beta slot after it, its occurrences, m_i, m_j, its offset in the counts) and per work item its
        block and its tile of :data:`kernels.PAIR_TILE` entries."""
        xp, layout = self.xp, self.layout
        pairs = layout.block_pairs[touched]
        m_i, m_j = layout.n_clones[pairs[:, 0]].astype(np.int64), layout.n_clones[pairs[:, 1]].astype(np.int64)
        first = pl.pair_first[touched]
        table = np.stack(
            [pl.alpha_offsets[first], pl.beta_offsets[first + 1], pl.pair_count[touched], m_i, m_j,
             layout.block_offset[touched]],
            axis=1,
        ).astype(np.int64)  # fmt: skip
        tiles = -(-(m_i * m_j) // kernels.PAIR_TILE)
        item_block = np.repeat(np.arange(len(touched), dtype=np.int32), tiles)
        item_tile = np.arange(int(tiles.sum()), dtype=np.int64) - np.repeat(np.cumsum(tiles) - tiles, tiles)
        return xp.asarray(table.ravel()), xp.asarray(item_block), xp.asarray(item_tile.astype(np.int32))

    # ------------------------------------------------------------------------------------------- M-step
    def clone_totals(self, values: Any, pseudocount: float = 0.0, support: Any | None = None) -> Any:
        """Each clone's row sum of ``values + pseudocount`` over the stored blocks (the pseudocount only on
        ``support`` where given), float64 on the device (the ``row_totals`` kernel)."""
        totals = self.xp.zeros(self.layout.n_states, dtype=self.xp.float64)
        args = (
            values,
            np.float64(pseudocount),
            support,
            self.row_offset,
            self.row_len,
            self.row_clone,
            np.int64(self.n_rows),
            totals,
            None,
        )
        self._launch_items(self._row_totals, self.n_rows, args)
        return totals

    def normalise(self, values: Any, pseudocount: float, support: Any | None) -> tuple[Any, Any]:
        """T = row-normalise(values + pseudocount) over the stored blocks (the pseudocount only on ``support``
        where given), returned row-major and block-transposed (see :func:`engine.model.blocks.normalise_rows`)."""
        xp = self.xp
        totals = self.clone_totals(values, pseudocount, support)
        T = xp.empty(self.layout.size, dtype=xp.float32)
        TT = xp.empty_like(T)
        self._launch_rows(self._row_write, values, pseudocount, support, totals, T, TT)
        return T, TT
