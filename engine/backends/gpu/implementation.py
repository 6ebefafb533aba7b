"""The :class:`engine.backends.engines.Engine` protocol on a device (:class:`GpuDenseEngine`, registered as "gpu" on a
CUDA GPU and "gpu-sim" on the simulated one), its options and what it plans per training sequence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.backends import chunks, engines
from engine.backends.chunks import LOCKSTEP_BURN_IN, LockstepPlan, LockstepSchedule
from engine.backends.cpu import inference, sampling
from engine.backends.gpu import backend, devices
from engine.backends.gpu.device_blocks import PASS_PRECISIONS, DeviceBlocks
from engine.backends.gpu.devices import Device, DeviceMemoryError, DeviceModel, estimate_device_bytes
from engine.backends.gpu.lockstep import DeviceLockstep
from engine.errors import CHMMError
from engine.model import pruning, row_keys
from engine.model.backoff import Backoff
from engine.model.blocks import BlockLayout
from engine.model.dense import CHMM


@dataclass(frozen=True)
class GpuOptions:
    """Settings of the GPU implementations.

    pass_precision: the copy of T the sequential forward and backward passes read (scores, online EM, exact batch
        EM), "float32" or "float16" (half the bytes per step; arithmetic stays float32, see :data:`HALF_SCALE`).
    lockstep_precision: the copy the lockstep E-steps of batch EM read (the lockstep forward pass, which scores,
        reads ``pass_precision``'s); float16 by default: on an H200 at 30,000
        states a batch-EM iteration over 750,000 symbols takes 2.72 s against 3.90 s in float32, and after 20
        iterations at 10,000 states the training BPS is within 1e-5 of float32's on three corpora (bench/RESULTS.md,
        issue 49).
    segment: batch EM processes each sequence in exact segments of this many positions (device memory bounded by
        the segment, see :meth:`DeviceBlocks.e_step_segmented`); None picks the whole sequence, or the longest
        segment that fits in device memory.
    """

    pass_precision: str = "float32"
    lockstep_precision: str = "float16"
    segment: int | None = None

    def __post_init__(self) -> None:
        for name in ("pass_precision", "lockstep_precision"):
            if getattr(self, name) not in PASS_PRECISIONS:
                raise CHMMError(f"{name} must be one of {', '.join(PASS_PRECISIONS)}")
        if self.segment is not None and self.segment < 2:
            raise CHMMError("a GPU segment must hold at least two positions")


@dataclass
class GpuPlan:
    """What repeated E-steps on one sequence reuse on the GPU: its pair-sorted message offsets; or the length of
    the exact segments of a segmented E-step, when the whole sequence's messages do not fit in device memory; or
    its lockstep chunks on the device."""

    pair_layout: inference.PairLayout | None
    segment: int | None
    lockstep: DeviceLockstep | None = None


class GpuDenseEngine:
    """The :class:`engine.backends.engines.Engine` protocol for dense-block models on a :class:`Device` (a CUDA GPU, or
    the simulated one): the state is a :class:`DeviceModel`, so a training run moves the model to the device once and
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
            options = self.options
            self._blocks = (
                layout, DeviceBlocks(layout, self.device, options.pass_precision, options.lockstep_precision)
            )  # fmt: skip
        return self._blocks[1]

    # the host <-> device copies
    def load(self, model: CHMM) -> DeviceModel:
        return self.blocks(model.layout).upload(model)

    def host(self, state: DeviceModel) -> CHMM:
        return state.blocks.download(state)

    def copy(self, state: DeviceModel) -> DeviceModel:
        return state.with_values(state.T.copy(), state.TT.copy(), state.counts, state.pi.copy())

    # inference
    def forward(
        self,
        state: DeviceModel,
        x: np.ndarray,
        initial: np.ndarray | None = None,
        row_key: np.ndarray | None = None,
        store: bool = False,
    ) -> inference.ForwardResult:
        x = np.asarray(x, dtype=np.int64)
        if row_key is not None:
            row_key = row_keys.check_row_key(state.blocks.layout, x, row_key)
        return state.blocks.forward_messages(state, x, initial, row_key, store)

    def _backoff(self, state: DeviceModel) -> Backoff:
        # the device's counts when it has them, else the model file's sums per block (a model saved without counts)
        sums = state.template.block_counts() if state.counts is None else state.blocks.block_sums(state.counts)
        return inference.backoff_from_block_sums(state.template, sums)

    def score(self, state: DeviceModel, x: np.ndarray) -> inference.ScoreResult:
        x = np.asarray(x, dtype=np.int64)
        predictive, zero_events = state.blocks.forward(state, x)
        return inference.score_from_predictive(
            x, predictive, zero_events, self._backoff(state), state.template.backoff_weight
        )

    def surprisal(self, state: DeviceModel, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.int64)
        predictive, _ = state.blocks.forward(state, x)
        return inference.surprisal_from_predictive(x, predictive, self._backoff(state), state.template.backoff_weight)

    # learning
    def plan(
        self,
        state: DeviceModel,
        x: np.ndarray,
        algorithm: str,
        batch_size: int,
        chunk: int | None = None,
        burn_in: int | None = None,
        row_key: np.ndarray | None = None,
    ) -> GpuPlan:
        """Check that a run on ``x`` fits in device memory (messages of the whole sequence for batch EM, of one
        batch of ``batch_size`` symbols for online EM) and choose the segment of a segmented E-step when the whole
        sequence does not fit. Batch EM's E-steps are lockstep passes over chunks of ``chunk`` steps with
        ``burn_in`` symbols before and after each (:func:`engine.backends.chunks.chunk`; default
        :data:`engine.backends.chunks.LOCKSTEP_BURN_IN`; see :meth:`DeviceBlocks.lockstep_e_step`); ``chunk`` None is
        the length :func:`engine.backends.chunks.lockstep_length` chooses (exact passes on a short sequence, or where
        the chunks' messages do not fit), :data:`engine.backends.chunks.EXACT` asks for exact passes. A walk with
        actions (``row_key``) runs exact whole-sequence passes."""
        blocks = state.blocks
        layout = blocks.layout
        x = np.asarray(x, dtype=np.int64)
        if row_key is not None:
            if chunk:
                raise CHMMError("a walk with actions runs exact passes on the GPU (no chunks)")
            chunk = chunks.EXACT
        chosen = chunk is None
        if chosen:
            chunk = chunks.lockstep_length(len(x))
        lockstep = None
        if algorithm == "em" and chunk:
            burn_in = LOCKSTEP_BURN_IN if burn_in is None else burn_in
            lockstep = LockstepPlan.build(layout, chunks.chunk([x], chunk, burn_in))
        positions = x if lockstep is None else lockstep.x  # the messages of every chunk position, burn-in included
        mean_clones = float(layout.n_clones[positions].mean())
        per_position = 8 * mean_clones + 64
        model_bytes = estimate_device_bytes(layout, [], mean_clones)
        if lockstep is not None and blocks.lockstep_precision == "float16":
            model_bytes += 4 * layout.size  # the float16 copies of T and its transposed blocks
        free = blocks.free_bytes()
        if lockstep is not None and chosen and model_bytes + per_position * len(positions) > free:
            return self.plan(state, x, algorithm, batch_size, chunks.EXACT)  # exact segments fit where chunks do not
        longest = len(positions) if algorithm == "em" else min(len(positions), batch_size + 1)
        room = int(0.8 * (free - model_bytes) / per_position)
        segment = self.options.segment
        if segment is None and algorithm == "em" and len(positions) > room and lockstep is None:
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
        if row_key is not None and algorithm == "em" and not whole:
            raise DeviceMemoryError(
                f"a walk with actions runs whole-sequence passes, whose messages ({need / 2**30:.1f} GiB) do not fit "
                f"in the {free / 2**30:.1f} GiB free on {blocks.device_name}; use fewer clones or a shorter walk"
            )
        pair_layout = inference.pair_sorted_offsets(layout, x, row_key=row_key) if whole else None
        return GpuPlan(pair_layout, None if whole else segment)

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
        row_key: np.ndarray | None = None,
    ) -> inference.EStepResult:
        if counted is not None:
            raise CHMMError("chunks with a burn-in run on the CPU engines")
        if row_key is not None:
            if plan is not None and (plan.lockstep is not None or plan.segment is not None):
                raise CHMMError("a walk with actions runs exact whole-sequence passes on the GPU")
            pair_layout = None if plan is None else plan.pair_layout
            row_key = row_keys.check_row_key(state.blocks.layout, np.asarray(x, dtype=np.int64), row_key)
            step = state.blocks.e_step(state, x, pair_layout, initial=initial, counts_out=counts_out, row_key=row_key)
            return step.result
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

    def viterbi(
        self, state: DeviceModel, evidence: np.ndarray | inference.Evidence, row_shift: np.ndarray | None = None
    ) -> inference.ViterbiResult:
        return state.blocks.viterbi(state, evidence, row_shift=row_shift)

    def hard_counts(
        self, state: DeviceModel, x: np.ndarray, row_key: np.ndarray | None = None, score: str = "likelihood"
    ) -> tuple[Any, float]:
        _, counts, log_likelihood = inference.hard_counts(
            lambda x, shift: state.blocks.viterbi(state, x, row_shift=shift),
            lambda x, key: state.blocks.log_likelihood(state, x, key),
            state.blocks.layout, x, row_key, score,
        )  # fmt: skip
        return self.xp.asarray(counts.astype(np.float32)), log_likelihood

    def sample(
        self, state: DeviceModel, length: int, rng: np.random.Generator, prefix: np.ndarray | None = None
    ) -> np.ndarray:
        """Sampling as :func:`engine.backends.cpu.sampling.sample` (the same draws from ``rng``), the path followed on
        the device by the ``sample_chain`` kernel."""
        blocks = state.blocks
        outgoing = blocks.host(blocks.clone_totals(state.T))
        # a prefix is filtered on the host (one forward pass that keeps its messages); without one only pi is read
        primed = prefix is not None and len(prefix) > 0
        start = self.host(state) if primed else state.template.with_arrays(pi=state.pi)
        first, out, primed = sampling.sampling_start(start, length, rng, prefix, inference.forward, outgoing)
        symbols = blocks.sample_path(state, first, rng.random(len(out)))
        return symbols[1:] if primed else symbols

    def lockstep_forward(self, state: DeviceModel, sequences: Any) -> list[np.ndarray]:
        """The forward passes of several sequences or pieces at once (see :meth:`DeviceBlocks.lockstep_forward`):
        each one's predictive probabilities, as :meth:`forward` gives them for it alone (exactly, up to float32
        rounding; a piece's burn-in is the caller's to leave out, see
        :func:`engine.backends.chunks.counted_log_likelihood`)."""
        return state.blocks.lockstep_forward(state, LockstepSchedule.build(state.blocks.layout, sequences))

    def prune(self, state: DeviceModel, threshold: float) -> DeviceModel:
        """:func:`engine.model.pruning.prune` of the model the device holds (its float32 values), loaded back."""
        return self.load(pruning.prune(self.host(state), threshold=threshold))

    def transitions(self, state: DeviceModel) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        return self.host(state).transitions()

    def as_dense(self, state: DeviceModel, what: str) -> CHMM:
        return self.host(state)

    def finite(self, state: DeviceModel) -> bool:
        return bool(self.xp.all(self.xp.isfinite(state.T)))


def _is_dense(model: Any) -> bool:
    return model.form == "dense"


engines.register(
    engines.Implementation(
        "gpu", "gpu", lambda options: GpuDenseEngine(devices.cuda_device(), options, "gpu"), _is_dense, GpuOptions,
        available=lambda: backend.gpu_status(), offerable=lambda: backend.gpu_probably_available(), auto_rank=1,
        host=False, lockstep=True, latency_bound=True,
    )
)  # fmt: skip
engines.register(
    engines.Implementation(
        "gpu-sim", "gpu-sim", lambda options: GpuDenseEngine(devices.SimulatedDevice(), options, "gpu-sim"),
        _is_dense, GpuOptions, in_app=False, lockstep=True,
    )
)  # fmt: skip
