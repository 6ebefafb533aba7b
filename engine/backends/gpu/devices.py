"""The devices the GPU engine runs on: an array module ``xp`` and a table of kernels by name. :class:`CudaDevice` is a
CUDA GPU through CuPy (the kernels of :mod:`engine.backends.gpu.kernels`); :class:`SimulatedDevice` is NumPy with each
kernel's NumPy/numba twin (:mod:`engine.backends.gpu.twins`), so that the GPU engine's array logic runs in every CI run.
CuPy is imported when a :class:`CudaDevice` is created, never at module import. :class:`DeviceModel` is a model's arrays
on a device."""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from engine.backends.gpu import kernels
from engine.backends.gpu.backend import gpu_status
from engine.backends.gpu.twins import TWINS
from engine.errors import BackendError
from engine.model.blocks import BlockLayout
from engine.model.dense import CHMM

_DEFAULT_SHARED = 48 * 1024
"""Dynamic shared memory a kernel may use without asking (bytes)."""


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
    (:mod:`engine.backends.gpu.twins`); free memory is the host's available memory."""

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
    blocks: Any  # the DeviceBlocks of its layout (engine.backends.gpu.device_blocks)
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
