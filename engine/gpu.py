"""The CHMM engine on a GPU: forward/backward, BPS, E-step counts, M-step, Viterbi with soft evidence and sampling on
the block-sparse layout, with the model and the messages kept on the device.

The code here is array logic over a :class:`Device`: an array module ``xp`` and a table of kernels by name. On a
CUDA GPU (:class:`CudaDevice`) ``xp`` is CuPy and the kernels are the CUDA kernels of :mod:`engine.kernels.gpu`; on
any machine (:class:`SimulatedDevice`, the ``gpu-sim`` implementation) ``xp`` is NumPy and the kernels are their
NumPy/numba twins (:mod:`engine.kernels.gpu_twins`), so every line of this module runs in every CI run and a
device run only adds the kernels themselves. CuPy is imported when a :class:`CudaDevice` is created, never at module
import, so the web process and CPU-only installs never touch CUDA.

The arithmetic is the CPU engine's (:mod:`engine.inference`): float32 blocks and messages, float64 normalisers and
log-likelihoods; the per-step recursions run as persistent kernels and the E-step counts as one matrix product per
symbol pair, counts(i, j) = T(i, j) o (A_ij^T B_ij) (the DESIGN's grouping, as on the CPU).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import math
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from engine import chunks, graph, inference
from engine.backend import BackendError, gpu_status
from engine.chunks import LOCKSTEP_BURN_IN, LockstepPlan, LockstepSchedule
from engine.kernels import gpu as kernels
from engine.kernels.gpu_twins import TWINS
from engine.model import CHMM, BlockLayout

_WARPS_PER_LAUNCH_BLOCK = 8  # one-warp-per-item kernels: 256 threads per block
PASS_PRECISIONS = ("float32", "float16")
HALF_SCALE = 2.0**14
"""float16 copies of T hold T * 2^14: entries down to ~4e-12 stay representable (rows sum to 1, so nothing
overflows); the factor cancels in every normalised message and is divided out of the forward normalisers."""


_DEFAULT_SHARED = 48 * 1024
"""Dynamic shared memory a kernel may use without asking (bytes)."""
LOCKSTEP_SHARED = 96 * 1024
"""Dynamic shared memory the lockstep kernel asks for (bytes): up to 8 staged messages of 3,000 clones."""


class DeviceMemoryError(MemoryError):
    """A run would need more device memory than the GPU has free (the message gives both figures)."""


# ---------------------------------------------------------------------------------------------- devices
class CudaDevice:
    """A CUDA GPU through CuPy: ``xp`` is CuPy and :meth:`kernel` gives the compiled CUDA kernels."""

    simulated = False

    def __init__(self) -> None:
        available, reason = gpu_status()
        if not available:
            raise BackendError(f"the gpu backend is not available: {reason}")
        cp = importlib.import_module("cupy")
        self.xp: ModuleType = cp
        device = cp.cuda.Device()
        self.sm_count = int(device.attributes["MultiProcessorCount"])
        self.shared_per_multiprocessor = int(device.attributes.get("MaxSharedMemoryPerMultiprocessor", 0))
        self.name = cp.cuda.runtime.getDeviceProperties(device.id)["name"].decode()

    def kernel(self, name: str) -> Any:
        """The CUDA kernel ``name``, launched as ``kernel(grid, block, args, shared_mem=...)``."""
        return kernels.kernel(self.xp, name)

    def allow_shared(self, kernel: Any, nbytes: int) -> int:
        """Let ``kernel`` use up to ``nbytes`` of dynamic shared memory, capped so that two of its thread blocks
        fit on a multiprocessor (the persistent kernels need all their blocks resident); returns what it may use
        (48 KiB, the default, where the driver refuses more)."""
        limit = min(nbytes, self.shared_per_multiprocessor // 2 - 4096)
        if not self.shared_per_multiprocessor or limit <= _DEFAULT_SHARED:
            return min(nbytes, _DEFAULT_SHARED)
        try:
            attribute = getattr(self.xp.cuda.driver, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 8)
            self.xp.cuda.driver.funcSetAttribute(kernel.ptr, attribute, int(limit))
        except Exception:  # noqa: BLE001 - an older CuPy or driver: keep the default
            return _DEFAULT_SHARED
        return limit

    def host(self, values: Any) -> np.ndarray:
        return values.get()

    def stream(self) -> Any:
        """A new stream (a context manager making it current, with ``synchronize``)."""
        return self.xp.cuda.Stream(non_blocking=True)

    def current_stream(self) -> Any:
        return self.xp.cuda.get_current_stream()

    def synchronize(self) -> None:
        self.xp.cuda.get_current_stream().synchronize()

    def free_bytes(self) -> int:
        """Free device memory (bytes), counting what CuPy's pool holds but does not use."""
        free, _ = self.xp.cuda.runtime.memGetInfo()
        return int(free + self.xp.get_default_memory_pool().free_bytes())


class _HostStream(contextlib.nullcontext):
    """A stream on the host: work is done when it is issued."""

    def synchronize(self) -> None:
        return None


class SimulatedDevice:
    """The GPU engine on the CPU: ``xp`` is NumPy and :meth:`kernel` gives each CUDA kernel's twin
    (:mod:`engine.kernels.gpu_twins`); free memory is the host's available memory."""

    simulated = True
    name = "simulated GPU (NumPy twins of the CUDA kernels)"
    sm_count = 4  # sizes only the persistent kernels' partial sums, which the twins do not use

    def __init__(self) -> None:
        self.xp: ModuleType = np

    def kernel(self, name: str) -> Any:
        return TWINS[name]

    def allow_shared(self, kernel: Any, nbytes: int) -> int:
        return nbytes

    def host(self, values: Any) -> np.ndarray:
        """A copy, as a device-to-host transfer makes (no state shares memory with what the host is given)."""
        return np.array(values)

    def stream(self) -> _HostStream:
        return _HostStream()

    def current_stream(self) -> _HostStream:
        return _HostStream()

    def synchronize(self) -> None:
        return None

    def free_bytes(self) -> int:
        try:
            return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):  # not POSIX
            return 8 * 2**30


Device = CudaDevice | SimulatedDevice


@functools.lru_cache(maxsize=1)
def cuda_device() -> CudaDevice:
    """The process's CUDA device (created once: CuPy's context and compiled kernels are per process)."""
    return CudaDevice()


@dataclass
class DeviceModel:
    """A model's arrays on the device: T (row-major blocks), TT (each block transposed), pi (float32, host copy
    too), counts (float32 expected counts in the flat layout, or None), support (uint8 mask of the entries EM may
    update, see ``fixed_zeros``, or None), the layout's index tables on the device and the host model whose
    alphabet, layout and metadata the state carries."""

    T: Any
    TT: Any
    pi: np.ndarray
    counts: Any | None
    support: Any | None
    blocks: DeviceBlocks
    template: CHMM
    half: tuple[Any, Any] | None = None  # float16 copies of (T, TT) times HALF_SCALE, made when first needed

    def with_values(self, T: Any, TT: Any, counts: Any | None, pi: np.ndarray | None = None) -> DeviceModel:
        """This model with new transition values (and counts, and pi when given)."""
        return DeviceModel(T, TT, self.pi if pi is None else pi, counts, self.support, self.blocks, self.template)


def estimate_device_bytes(layout: BlockLayout, x_lengths: list[int], mean_clones: float, models: int = 3) -> int:
    """Device memory a training run needs: ``models`` copies of (T, TT) (current, next and best model), the counts
    and the running statistic (float32 each), plus the stored alpha and beta messages of the longest sequence
    processed at once (float32, ``mean_clones`` entries per position) and per-position float64 scalars."""
    size = layout.size
    longest = max(x_lengths) if x_lengths else 0
    return int(4 * size * (2 * models + 2) + longest * (8 * mean_clones + 64))


@dataclass
class DeviceSchedule:
    """A :class:`LockstepSchedule` on the device (see :meth:`DeviceBlocks.upload_schedule`): its arrays in the
    order ``lockstep_chain_f32`` takes them, the chunks one work item stages (``tile``) and the shared memory that
    takes (bytes)."""

    schedule: LockstepSchedule
    tile: int
    shared_bytes: int
    arrays: tuple


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


@dataclass
class _DeviceEStep:
    """An E-step on the device: the protocol's result and beta at the first position, normalised (carried back by
    a segmented E-step)."""

    result: inference.EStepResult
    first_beta: np.ndarray


class DeviceBlocks:
    """One :class:`BlockLayout`'s index tables on a device, and the passes over models with that layout.

    The tables are uploaded once; models with the layout are uploaded with :meth:`upload` and come back with
    :meth:`download`.
    """

    def __init__(self, layout: BlockLayout, device: Device, pass_precision: str = "float32") -> None:
        if pass_precision not in PASS_PRECISIONS:
            raise ValueError(f"pass_precision must be one of {', '.join(PASS_PRECISIONS)}")
        xp = device.xp
        self.device = device
        self.xp = xp
        self.host = device.host
        self.pass_precision = pass_precision
        self.layout = layout
        self.sm_count = device.sm_count
        self.device_name = device.name
        self.width = int(layout.n_clones.max())
        self.n_clones = xp.asarray(layout.n_clones, dtype=xp.int32)
        self.clone_start = xp.asarray(layout.clone_start, dtype=xp.int32)
        self.block_index = xp.asarray(layout.block_index.astype(np.int32).ravel())
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
        self._lockstep = device.kernel("lockstep_chain_f32")

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

    def _pass_matrices(self, device_model: DeviceModel) -> tuple[Any, Any, float]:
        """The blocks the forward pass reads (transposed), those the backward pass reads, and their scale."""
        if self.pass_precision == "float32":
            return device_model.TT, device_model.T, 1.0
        if device_model.half is None:
            xp = self.xp
            device_model.half = (
                (device_model.T * HALF_SCALE).astype(xp.float16),
                (device_model.TT * HALF_SCALE).astype(xp.float16),
            )
        return device_model.half[1], device_model.half[0], HALF_SCALE

    def _pass_steps(self, x: np.ndarray, backward: bool) -> tuple[np.ndarray, np.ndarray]:
        """Per step of a pass (in pass order): the offset of its block (-1: no block) and its output size."""
        layout = self.layout
        rows = layout.n_clones[x]
        pair_block = layout.block_index[x[:-1], x[1:]]
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
    ) -> tuple[Any, Any, Any]:
        """One persistent forward or backward pass over the host sequence ``x``; returns the per-position
        normalisers (device float64), the kernel's abort flag and its work buffer (the raw message of the last
        position of the pass sits at offset ((n - 1) % 2) * width)."""
        xp = self.xp
        n = len(x)
        step_offset, step_rows = self._pass_steps(x, backward)
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
        self, device_model: DeviceModel, x: np.ndarray, initial: np.ndarray | None = None
    ) -> tuple[np.ndarray, int]:
        """Scaled forward pass (see :func:`engine.inference.forward`): the predictive probabilities
        P(x_n | x_<n) (float64, host) and the number of zero-probability events."""
        x = np.ascontiguousarray(x, dtype=np.int64)
        start = device_model.pi if initial is None else np.asarray(initial)
        message, p0 = self._initial_message(start, int(x[0]))
        forward_blocks, _, scale = self._pass_matrices(device_model)
        norm, abort, _ = self._run_chain(
            forward_blocks, x, False, message, None, None, 2 * self.sm_count, self.device.current_stream()
        )
        predictive = self.host(norm) / scale
        self._check_aborts(abort)
        predictive[0] = p0
        return predictive, int(np.count_nonzero(predictive <= 0))

    def log_likelihood(self, device_model: DeviceModel, x: np.ndarray) -> float:
        """log P(x) in nats; -inf if x is impossible under the model."""
        predictive, zero_events = self.forward(device_model, x)
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
    ) -> _DeviceEStep:
        """Expected transition counts sum_n xi(n) (see :func:`engine.inference.e_step`) on the device.

        The forward and the backward pass run concurrently on two streams (each on one block per multiprocessor);
        the counts of block (i, j) are T(i, j) o (A^T B), one cuBLAS product per occurring pair, written into
        ``counts_out`` (zeroed first) or a fresh float32 buffer. ``terminal`` replaces the uniform beta at the last
        position (a segment of a longer sequence, see :meth:`e_step_segmented`); with ``accumulate`` the products
        A^T B are added to ``counts_out`` and the caller multiplies by T once at the end."""
        xp = self.xp
        layout = self.layout
        x = np.ascontiguousarray(x, dtype=np.int64)
        n = len(x)
        pl = inference.pair_sorted_offsets(layout, x) if pair_layout is None else pair_layout
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
            forward_blocks, x, False, first_message, alpha, alpha_offsets, self.sm_count, forward_stream
        )
        beta_norm, abort_backward, _ = self._run_chain(
            backward_blocks, x, True, last_message, beta, beta_offsets, self.sm_count, backward_stream
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
        counts = xp.zeros(layout.size, dtype=xp.float32) if counts_out is None else counts_out
        if counts_out is not None and not accumulate:
            counts.fill(0)
        self._accumulate_counts(pl, alpha, beta, counts, accumulate)
        if not accumulate:
            counts *= device_model.T
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
            raise ValueError("a segment must hold at least two positions")
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

    def _accumulate_counts(self, pl: inference.PairLayout, alpha: Any, beta: Any, counts: Any, add: bool) -> None:
        """counts(i, j) = A_ij^T B_ij (or += with ``add``) per occurring pair, one cuBLAS product each."""
        xp = self.xp
        layout = self.layout
        touched = np.flatnonzero(pl.pair_count)
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
        where given), returned row-major and block-transposed (see :func:`engine.model.normalise_rows`)."""
        xp = self.xp
        totals = self.clone_totals(values, pseudocount, support)
        T = xp.empty(self.layout.size, dtype=xp.float32)
        TT = xp.empty_like(T)
        self._launch_rows(self._row_write, values, pseudocount, support, totals, T, TT)
        return T, TT

    # ------------------------------------------------------------------------------------------- Viterbi
    def viterbi(self, device_model: DeviceModel, evidence: np.ndarray | inference.Evidence) -> inference.ViterbiResult:
        """MAP clone path with per-position soft evidence (see :func:`engine.inference.viterbi`); the same
        arithmetic as the CPU kernel, so the same path."""
        xp = self.xp
        layout = self.layout
        evidence, slot_offset = inference.viterbi_evidence(layout, evidence)
        n_pos = len(evidence.ptr) - 1
        symbols = np.asarray(evidence.symbol, dtype=np.int64)
        weights = np.asarray(evidence.weight, dtype=np.float64)
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
                    self.block_index,
                    np.int32(layout.n_symbols),
                    self.n_clones,
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
        lo, hi = int(slot_offset[evidence.ptr[n_pos - 1]]), int(slot_offset[evidence.ptr[n_pos]])
        last = lo + int(np.argmax(self.host(delta[lo:hi])))
        pointers = self.host(backpointer)
        path_slots = np.empty(n_pos, dtype=np.int64)
        slot = last
        for n in range(n_pos - 1, -1, -1):
            path_slots[n] = slot
            slot = pointers[slot]
        candidate = np.searchsorted(slot_offset, path_slots, side="right") - 1
        clones = layout.clone_start[symbols[candidate]] + path_slots - slot_offset[candidate]
        return inference.ViterbiResult(clones, layout.clone_symbol()[clones], log_probability)

    # ------------------------------------------------------------------------------------------- lockstep
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

    def upload_schedule(self, schedule: LockstepSchedule) -> DeviceSchedule:
        """``schedule`` on the device, its groups cut into the work items of ``lockstep_chain_f32`` (up to ``tile``
        chunks by :data:`kernels.LOCKSTEP_ROWS` rows; ``tile`` as many staged messages of the widest symbol as the
        shared memory the kernel is granted holds)."""
        xp, layout = self.xp, self.layout
        granted = self.device.allow_shared(self._lockstep, LOCKSTEP_SHARED)
        tile = min(kernels.LOCKSTEP_TILE_MAX, granted // (4 * self.width))
        if tile < 1:
            raise ValueError(
                f"a lockstep pass stages a message of the widest symbol ({self.width:,} clones) in shared memory, "
                f"which holds {granted // 4:,}; use fewer clones per symbol or the sequential passes"
            )
        n_steps = schedule.n_steps
        blocked = schedule.group_block >= 0
        rows = np.where(blocked, schedule.group_out, 0).astype(np.int64)
        chunks = np.diff(schedule.group_chunk_start).astype(np.int64)
        items = -(-chunks // tile) * -(-rows // kernels.LOCKSTEP_ROWS)
        group_step = np.repeat(np.arange(n_steps), np.diff(schedule.step_group_start))
        before = np.cumsum(items) - items
        group_item_base = before - before[schedule.step_group_start[group_step]] if len(items) else before
        step_items = np.bincount(group_step, weights=items, minlength=n_steps)
        group_offset = np.where(blocked, layout.block_offset[np.maximum(schedule.group_block, 0)], -1)
        arrays = (
            xp.asarray(schedule.step_group_start), xp.asarray(step_items.astype(np.int32)),
            xp.asarray(group_offset.astype(np.int64)), xp.asarray(schedule.group_in),
            xp.asarray(schedule.group_out), xp.asarray(group_item_base.astype(np.int32)),
            xp.asarray(schedule.group_chunk_start), xp.asarray(schedule.chunk_ids),
        )  # fmt: skip
        return DeviceSchedule(schedule, tile, 4 * tile * self.width, arrays)

    def _lockstep_pass(
        self, M: Any, schedule: DeviceSchedule, offsets: Any, store: Any, norm: Any, grid: int, stream: Any
    ) -> tuple[Any, Any]:
        """One launch of ``lockstep_chain_f32`` (messages at ``offsets`` in ``store``, sums into ``norm``) on
        ``stream``; returns its abort flag and barrier (kept until the stream is synchronised)."""
        xp = self.xp
        with stream:
            abort = xp.zeros(1, dtype=xp.int32)
            barrier = xp.zeros(1, dtype=xp.uint32)
            if schedule.schedule.n_steps > 0:
                args = (
                    M, np.int32(schedule.schedule.n_steps), np.int32(schedule.schedule.length),
                    np.int32(schedule.tile), *schedule.arrays, offsets, store, norm, barrier, abort,
                )  # fmt: skip
                self._lockstep((grid,), (kernels.THREADS,), args, shared_mem=schedule.shared_bytes)
        return abort, barrier

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
            raise ValueError("a lockstep pass starts every piece from pi; carried messages are not supported")
        messages, begins, mass = self._first_messages(device_model.pi, np.array([p.x[0] for p in pieces]))
        plane = np.zeros((2, n_chunks, width), dtype=np.float32)
        for c in range(n_chunks):
            m = (begins[c + 1] if c + 1 < n_chunks else len(messages)) - begins[c]
            plane[0, c, :m] = messages[begins[c] : begins[c] + m]
        offsets = (np.arange(length)[None, :] % 2) * (n_chunks * width) + np.arange(n_chunks)[:, None] * width
        norm = xp.zeros(n_chunks * length, dtype=xp.float64)
        abort, _ = self._lockstep_pass(
            device_model.TT, self.upload_schedule(schedule), xp.asarray(offsets.ravel().astype(np.int64)),
            xp.asarray(plane.ravel()), norm, 2 * self.sm_count, self.device.current_stream(),
        )  # fmt: skip
        self._check_aborts(abort)
        out = self.host(norm).reshape(n_chunks, length)
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
        self.device.synchronize()  # the streams below do not wait for the current one
        forward_stream, backward_stream = self.device.stream(), self.device.stream()
        abort_forward, _forward_barrier = self._lockstep_pass(
            device_model.TT, on_device.forward, on_device.forward_offsets, alpha, forward_norm, self.sm_count,
            forward_stream,
        )  # fmt: skip
        abort_backward, _backward_barrier = self._lockstep_pass(
            device_model.T, on_device.backward, on_device.backward_offsets, beta, backward_norm, self.sm_count,
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

        weights = xp.empty(max(n - 1, 1), dtype=xp.float64)  # the seams between pieces get weights nobody reads
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
        counts = xp.zeros(layout.size, dtype=xp.float32) if counts_out is None else counts_out
        if counts_out is not None:
            counts.fill(0)
        self._accumulate_counts(pl, alpha, beta, counts, False)
        counts *= device_model.T
        with np.errstate(divide="ignore"):
            log_likelihood = -math.inf if zero_events else float(np.sum(np.log(counted)))
        return inference.EStepResult(counts, gamma_first, log_likelihood, zero_events, last_alpha, pl.pair_count > 0)

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


# ---------------------------------------------------------------------------------------------- the protocol
@dataclass(frozen=True)
class GpuOptions:
    """Settings of the GPU implementations.

    pass_precision: the copy of T the forward and backward passes read, "float32" or "float16" (half the bytes per
        step; arithmetic stays float32, see :data:`HALF_SCALE`).
    segment: batch EM processes each sequence in exact segments of this many positions (device memory bounded by
        the segment, see :meth:`DeviceBlocks.e_step_segmented`); None picks the whole sequence, or the longest
        segment that fits in device memory.
    """

    pass_precision: str = "float32"
    segment: int | None = None

    def __post_init__(self) -> None:
        if self.pass_precision not in PASS_PRECISIONS:
            raise ValueError(f"pass_precision must be one of {', '.join(PASS_PRECISIONS)}")
        if self.segment is not None and self.segment < 2:
            raise ValueError("a GPU segment must hold at least two positions")


@dataclass
class GpuPlan:
    """What repeated E-steps on one sequence reuse on the GPU: its pair-sorted message offsets; or the length of
    the exact segments of a segmented E-step, when the whole sequence's messages do not fit in device memory; or
    its lockstep chunks on the device."""

    pair_layout: inference.PairLayout | None
    segment: int | None
    lockstep: DeviceLockstep | None = None


class GpuDenseEngine:
    """The :class:`engine.engines.Engine` protocol for dense-block models on a :class:`Device` (a CUDA GPU, or the
    simulated one): the state is a :class:`DeviceModel`, so a training run moves the model to the device once and
    back once. Any layout: each layout's index tables are uploaded once and kept with the states that use them.
    Before a sequence's E-steps are planned (:meth:`plan`) the device memory they need is estimated and the run is
    refused with both figures when it does not fit; batch EM whose messages do not fit runs in exact chunks."""

    def __init__(self, device: Device, options: GpuOptions | None = None, name: str = "gpu") -> None:
        self.device = device
        self.options = options or GpuOptions()
        self.name = name
        self.xp = device.xp
        self._blocks: tuple[BlockLayout, DeviceBlocks] | None = None

    def blocks(self, layout: BlockLayout) -> DeviceBlocks:
        """The device tables of ``layout`` (uploaded when the layout changes)."""
        if self._blocks is None or self._blocks[0] is not layout:
            self._blocks = (layout, DeviceBlocks(layout, self.device, self.options.pass_precision))
        return self._blocks[1]

    # the host <-> device copies
    def load(self, model: CHMM) -> DeviceModel:
        return self.blocks(model.layout).upload(model)

    def host(self, state: DeviceModel) -> CHMM:
        return state.blocks.download(state)

    def copy(self, state: DeviceModel) -> DeviceModel:
        return state.with_values(state.T.copy(), state.TT.copy(), state.counts, state.pi.copy())

    # inference
    def forward(self, state: DeviceModel, x: np.ndarray, initial: np.ndarray | None = None) -> inference.ForwardResult:
        predictive, zero_events = state.blocks.forward(state, np.asarray(x, dtype=np.int64), initial)
        empty = np.zeros(0, dtype=np.int64)
        return inference.ForwardResult(predictive, zero_events, np.zeros(0, dtype=np.float32), empty)

    def _bigram(self, state: DeviceModel) -> np.ndarray:
        sums = None if state.counts is None else state.blocks.block_sums(state.counts)
        return inference.symbol_bigram_from_block_sums(state.blocks.layout, sums)

    def score(self, state: DeviceModel, x: np.ndarray) -> inference.ScoreResult:
        x = np.asarray(x, dtype=np.int64)
        predictive, zero_events = state.blocks.forward(state, x)
        return inference.score_from_predictive(
            x, predictive, zero_events, self._bigram(state), state.template.backoff_weight
        )

    def surprisal(self, state: DeviceModel, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.int64)
        predictive, _ = state.blocks.forward(state, x)
        return inference.surprisal_from_predictive(x, predictive, self._bigram(state), state.template.backoff_weight)

    # learning
    def plan(
        self,
        state: DeviceModel,
        x: np.ndarray,
        algorithm: str,
        batch_size: int,
        chunk: int | None = None,
        burn_in: int | None = None,
    ) -> GpuPlan:
        """Check that a run on ``x`` fits in device memory (messages of the whole sequence for batch EM, of one
        batch of ``batch_size`` symbols for online EM) and choose the segment of a segmented E-step when the whole
        sequence does not fit. With ``chunk``, batch EM's E-steps are lockstep passes over chunks of ``chunk``
        steps with ``burn_in`` symbols before and after each (:func:`engine.chunks.chunk`; default
        :data:`engine.chunks.LOCKSTEP_BURN_IN`; see :meth:`DeviceBlocks.lockstep_e_step`)."""
        blocks = state.blocks
        layout = blocks.layout
        x = np.asarray(x, dtype=np.int64)
        lockstep = None
        if algorithm == "em" and chunk is not None:
            burn_in = LOCKSTEP_BURN_IN if burn_in is None else burn_in
            lockstep = LockstepPlan.build(layout, chunks.chunk([x], chunk, burn_in))
            x = lockstep.x  # the messages of every chunk position, burn-in included
        mean_clones = float(layout.n_clones[x].mean())
        per_position = 8 * mean_clones + 64
        model_bytes = estimate_device_bytes(layout, [], mean_clones)
        free = blocks.free_bytes()
        longest = len(x) if algorithm == "em" else min(len(x), batch_size + 1)
        room = int(0.8 * (free - model_bytes) / per_position)
        segment = self.options.segment
        if segment is None and algorithm == "em" and len(x) > room and lockstep is None:
            segment = room
        need = model_bytes + int(per_position * min(longest, segment or longest))
        if need > free or (segment is not None and segment < 2):
            raise DeviceMemoryError(
                f"this run needs about {need / 2**30:.1f} GiB of GPU memory but {free / 2**30:.1f} GiB are free on "
                f"{blocks.device_name}; use fewer states"
                + (", longer chunks or a shorter burn-in" if lockstep is not None else " or a smaller batch")
            )
        if lockstep is not None:
            return GpuPlan(None, None, blocks.upload_lockstep(lockstep))
        whole = algorithm == "em" and (segment is None or segment >= len(x) - 1)
        return GpuPlan(inference.pair_sorted_offsets(layout, x) if whole else None, None if whole else segment)

    def zero_counts(self, state: DeviceModel) -> Any:
        return self.xp.zeros(state.blocks.layout.size, dtype=self.xp.float32)

    def as_counts(self, state: DeviceModel, values: Any) -> Any:
        return self.xp.asarray(values, dtype=self.xp.float32)

    def e_step(
        self,
        state: DeviceModel,
        x: np.ndarray,
        initial: np.ndarray | None = None,
        plan: GpuPlan | None = None,
        counts_out: Any = None,
        counted: tuple[int, int] | None = None,
    ) -> inference.EStepResult:
        if counted is not None:
            raise ValueError("chunks with a burn-in run on the CPU engines")
        if plan is not None and plan.lockstep is not None:
            return state.blocks.lockstep_e_step(state, plan.lockstep, counts_out=counts_out)
        if plan is not None and plan.segment is not None and plan.segment < len(x) - 1:
            return state.blocks.e_step_segmented(state, x, plan.segment, counts_out=counts_out).result
        pair_layout = None if plan is None else plan.pair_layout
        return state.blocks.e_step(state, x, pair_layout, initial=initial, counts_out=counts_out).result

    def m_step(self, state: DeviceModel, counts: Any, pseudocount: float, pi: np.ndarray | None = None) -> DeviceModel:
        counts = self.xp.asarray(counts, dtype=self.xp.float32)
        T, TT = state.blocks.normalise(counts, pseudocount, state.support)
        return state.with_values(T, TT, counts, None if pi is None else np.asarray(pi, dtype=np.float32))

    def with_counts(self, state: DeviceModel, counts: Any) -> DeviceModel:
        return state.with_values(state.T, state.TT, counts)

    def viterbi(self, state: DeviceModel, evidence: np.ndarray | inference.Evidence) -> inference.ViterbiResult:
        return state.blocks.viterbi(state, evidence)

    def hard_counts(self, state: DeviceModel, x: np.ndarray) -> tuple[Any, float]:
        log_likelihood = state.blocks.log_likelihood(state, x)
        path = state.blocks.viterbi(state, x).clones
        counts = inference.path_counts(state.blocks.layout, x, path).astype(np.float32)
        return self.xp.asarray(counts), log_likelihood

    def sample(
        self, state: DeviceModel, length: int, rng: np.random.Generator, prefix: np.ndarray | None = None
    ) -> np.ndarray:
        """Sampling as :func:`engine.inference.sample` (the same draws from ``rng``), the path followed on the
        device by the ``sample_chain`` kernel."""
        blocks = state.blocks
        outgoing = blocks.host(blocks.clone_totals(state.T))
        # a prefix is filtered on the host (one forward pass that keeps its messages); without one only pi is read
        primed = prefix is not None and len(prefix) > 0
        start = self.host(state) if primed else state.template.with_arrays(pi=state.pi)
        first, out, primed = inference.sampling_start(start, length, rng, prefix, inference.forward, outgoing)
        symbols = blocks.sample_path(state, first, rng.random(len(out)))
        return symbols[1:] if primed else symbols

    def lockstep_forward(self, state: DeviceModel, sequences: Any) -> list[np.ndarray]:
        """The forward passes of several sequences or pieces at once (see :meth:`DeviceBlocks.lockstep_forward`):
        each one's predictive probabilities, as :meth:`forward` gives them for it alone (exactly, up to float32
        rounding; a piece's burn-in is the caller's to leave out, see :func:`engine.chunks.counted_log_likelihood`)."""
        return state.blocks.lockstep_forward(state, LockstepSchedule.build(state.blocks.layout, sequences))

    def prune(self, state: DeviceModel, threshold: float) -> DeviceModel:
        """:func:`engine.graph.prune` of the model the device holds (its float32 values), loaded back."""
        return self.load(graph.prune(self.host(state), threshold=threshold))

    def transitions(self, state: DeviceModel) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        return self.host(state).transitions()

    def as_dense(self, state: DeviceModel, what: str) -> CHMM:
        return self.host(state)

    def finite(self, state: DeviceModel) -> bool:
        return bool(self.xp.all(self.xp.isfinite(state.T)))
