"""Whether a CUDA GPU can be used here. CuPy is imported only when asked for, so that processes which never touch
the GPU (the web server, forked workers) never initialise CUDA; the choice of an implementation is the registry's
(:mod:`engine.backends.engines`)."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path


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
    that trains confirms with :func:`gpu_status` and reports the reason if the GPU still cannot be used."""
    if importlib.util.find_spec("cupy") is None:
        return False, "CuPy is not installed (pip install 'chmm-explorer[gpu]')"
    if not any(Path("/dev").glob("nvidia[0-9]*")):
        return False, "no NVIDIA device is visible on this machine"
    return True, "CuPy and an NVIDIA device are present"
