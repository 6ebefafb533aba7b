"""CUDA kernels for the block-sparse CHMM on the GPU (compiled at run time by CuPy through NVRTC).

The layout is the CPU one (:mod:`engine.backends.cpu.kernels`): block ``k`` of symbol pair (i, j) is stored row-major at
``flat[block_offset[k]:]`` with shape ``n_clones[i] x n_clones[j]``; a second buffer holds every block transposed.

The forward and backward recursions are one *persistent* kernel launch each (``chain_sum``): every step of the
sequence is a matrix-vector product with one block, spread over all warps of the GPU, and the steps are separated by
a grid-wide barrier instead of a kernel launch. A step costs one read of its block (the memory floor) plus one
barrier (about a microsecond), with no per-step Python or launch overhead. The grid is sized so that all its blocks
are resident at once (a requirement of the barrier); a barrier that waits for more than a few seconds sets an error
flag and every block leaves, so a violated assumption raises instead of hanging.

This module reads the CUDA source (``kernels.cu``) and compiles it; the array logic lives in
:mod:`engine.backends.gpu.device_blocks`, and the twins that run that logic without a GPU in
:mod:`engine.backends.gpu.twins`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import ModuleType

THREADS = 512
"""Threads per block of the persistent kernels (16 warps); two such blocks fit on every multiprocessor."""

SOURCE = (Path(__file__).with_name("kernels.cu")).read_text(encoding="utf-8")
"""The CUDA source of the kernels (``kernels.cu`` beside this module)."""


LOCKSTEP_TILE_MAX = 8
"""Most chunks of a group one thread block of ``lockstep_chain_f32`` / ``_f16`` stages at once (its ``#define``)."""
LOCKSTEP_ROWS = 128
"""Output rows of one work item of the lockstep kernels by default (their ``rows`` argument;
``DeviceBlocks.lockstep_rows``). Measured on an H200 at 30,000 states (bench/RESULTS.md, issue 49): a batch-EM
iteration over 750,000 symbols in 2,048 chunks 3.90 s at 128 rows against 4.17 s at 64 (float16 blocks: 2.72 / 2.85
s); the forward pass over 42,297 symbols prefers 64 (0.314 s against 0.343 s at 64 chunks), and 256 is slower in
both."""

LOCKSTEP_LOADS = 4
"""Loads of a block row each lane of the lockstep kernels keeps in flight by default (``lockstep_chain_f32`` /
``_f16``, the ``#define``; ``DeviceBlocks.lockstep_loads`` picks 1, 4 or 8). With one (the kernel before), a row of a
few hundred entries is a chain of dependent loads, one memory latency each. Measured on an H200 at 30,000 states
(bench/RESULTS.md, "Loads in flight"): a batch-EM iteration over 750,000 symbols on float16 blocks 2.47 s with 4 loads
against 2.76 s with 1 and 2.50 s with 8; the forward pass over 42,297 symbols 0.123 s / 0.169 s / 0.119 s."""
LOCKSTEP_LOADS_CHOICES = (1, 4, 8)
"""The ``lockstep_loads`` the CUDA source has kernels for."""
LOCKSTEP_ROWS_IN_FLIGHT = 1
"""Rows of a block each warp of the lockstep kernels reads at once by default (``DeviceBlocks.lockstep_rows_in_flight``
picks 1 or 2; 2 with the default loads only: the ``_rows2`` kernels). With one, a warp drains its loads at the end of
every row before its sums and writes; with two it keeps 2 x 4 loads of two rows in flight. Not yet measured on a GPU
(the forward pass over 42,297 symbols is at half the copy bandwidth, issue 49), hence not the default."""
LOCKSTEP_DYNAMIC = False
"""Whether the thread blocks of the lockstep kernels take a step's work items as they come free (an atomic counter per
step; ``DeviceBlocks.lockstep_dynamic``) rather than in turn (thread block b: items b, b + G, ...). A step ends at
the grid barrier; ``bench/bench_lockstep_items.py`` puts the busiest thread block's bytes at 1.2-1.5 times the mean
in turn and 1.0-1.15 dynamically on the forward pass of issue 49. Not yet measured on a GPU, hence not the default."""
LOCKSTEP_ROWS_IN_FLIGHT_CHOICES = (1, 2)
"""The ``lockstep_rows_in_flight`` the CUDA source has kernels for (2 with :data:`LOCKSTEP_LOADS` loads only)."""

PAIR_TILE = 1024
"""Entries of one work item of ``pair_counts`` (its ``#define``)."""
PAIR_COUNTS_MAX_OCCURRENCES = 256
"""``DeviceBlocks`` computes an E-step's counts with ``pair_counts`` (one launch for every pair) when no pair occurs
more often than this in it, and with one cuBLAS product per pair otherwise (batch EM over a whole text, where a
frequent pair's product is large and cuBLAS's tiles pay). An online batch of 1,076 symbols touches a few hundred
pairs a few times each: one product each cost a Python call and a launch per pair."""

KERNELS = (
    "chain_sum_f32",
    "chain_sum_f16",
    "scale_messages",
    "pair_weights",
    "row_totals",
    "row_write",
    "pair_counts",
    "viterbi_chain",
    "sample_chain",
    "lockstep_chain_f32",
    "lockstep_chain_f16",
    "lockstep_chain_f32_loads1",
    "lockstep_chain_f16_loads1",
    "lockstep_chain_f32_loads8",
    "lockstep_chain_f16_loads8",
    "lockstep_chain_f32_rows2",
    "lockstep_chain_f16_rows2",
)
"""The kernels of :data:`SOURCE`; each has a NumPy/numba twin of the same signature in
:mod:`engine.backends.gpu.twins`."""


@functools.lru_cache(maxsize=1)
def module(cupy: ModuleType):
    """The compiled CUDA module (one per process)."""
    return cupy.RawModule(code=SOURCE, options=("--std=c++17",))


def kernel(cupy: ModuleType, name: str):
    """A kernel of :data:`SOURCE` by name."""
    return module(cupy).get_function(name)
