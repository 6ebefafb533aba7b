"""Array-backend selection: NumPy on the CPU, CuPy on a GPU. CuPy is imported lazily, only when asked for, so
that processes which never touch the GPU (the web server, forked workers) never initialise CUDA."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

BACKENDS = ("cpu", "gpu", "auto")


class BackendError(RuntimeError):
    """The requested backend cannot be used on this machine."""


def gpu_status() -> tuple[bool, str]:
    """Whether CuPy imports and sees at least one CUDA device, and a one-line reason when not."""
    try:
        cupy = importlib.import_module("cupy")
    except ImportError:
        return False, "CuPy is not installed (pip install 'chmm-explorer[gpu]')"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDA driver errors come in many types
        return False, f"CuPy cannot reach a CUDA device ({exc})"
    if count < 1:
        return False, "no CUDA device is visible"
    return True, f"{count} CUDA device(s)"


def gpu_probably_available() -> tuple[bool, str]:
    """Whether the GPU backend can be offered, judged without importing CuPy (a web process must not initialise
    CUDA before forking its job workers): CuPy is installed and the machine exposes an NVIDIA device node. The job
    that trains confirms with :func:`resolve_backend` and reports the reason if the GPU still cannot be used."""
    if importlib.util.find_spec("cupy") is None:
        return False, "CuPy is not installed (pip install 'chmm-explorer[gpu]')"
    if not any(Path("/dev").glob("nvidia[0-9]*")):
        return False, "no NVIDIA device is visible on this machine"
    return True, "CuPy and an NVIDIA device are present"


def resolve_backend(name: str) -> str:
    """Map "cpu" | "gpu" | "auto" to the backend that will run: "auto" is "gpu" when a CUDA device is usable,
    else "cpu"; "gpu" without one raises :class:`BackendError`."""
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "cpu":
        return "cpu"
    available, reason = gpu_status()
    if name == "auto":
        return "gpu" if available else "cpu"
    if not available:
        raise BackendError(f"the GPU backend is not available: {reason}")
    return "gpu"


def get_xp(name: str) -> ModuleType:
    """The array module of a resolved backend: numpy for "cpu", cupy for "gpu"."""
    if resolve_backend(name) == "gpu":
        return importlib.import_module("cupy")
    return importlib.import_module("numpy")
