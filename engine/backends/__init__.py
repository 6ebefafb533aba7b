"""The engines: the :class:`~engine.backends.engines.Engine` protocol and its registry, and the implementations on
each backend (``cpu/``: dense and sparse blocks with their numba kernels; ``gpu/``: dense blocks on a CUDA device or
on the NumPy twins of its kernels). Each implementation registers itself when its module is imported; importing
this package imports them, in the order "auto" and the choice lists follow (CPU first)."""

from engine.backends.cpu import implementation as _cpu  # noqa: F401 (registers "dense" and "sparse")
from engine.backends.gpu import implementation as _gpu  # noqa: F401 (registers "gpu" and "gpu-sim")
