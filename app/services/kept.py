"""What the views need of a session's files, computed once and kept in this process while the files are unchanged.

Opening a module of a 5,000-state model read its 150 MB file, rebuilt the clone graph (a stationary distribution)
and parsed the Infomap run for every callback: 8-23 s. Here each of those is computed once per version of the files
it comes from and kept, least recently used first out, within :func:`app.config.max_kept_bytes` per process.

A value is keyed by what it is (``what`` and its arguments) and by the identity of each file it was computed from
(device, inode, size, modification time in nanoseconds): a replaced file is a new key, so nothing is ever served
stale, and the sessions that share the start model (hard links of one file) share its entries. The values are
shared: callers read them and never change them. Nothing of a session is kept that its own files do not say, so
no user's state lives here; a killed worker only loses time.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import scipy.sparse

from app import config

Value = TypeVar("Value")

_ENTRIES: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
_LOCK = threading.Lock()
_HELD = [0]  # bytes held


def identity(path: Path) -> tuple[int, int, int, int]:
    """A file's identity: (device, inode, size, modification time in ns); FileNotFoundError when it is missing."""
    stat = os.stat(path)
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def kept(what: Hashable, files: Sequence[Path], compute: Callable[[], Value]) -> Value:
    """``compute()``, or the value kept for ``what`` computed from these very ``files`` (each unchanged since).
    The value's size is estimated (:func:`size_of`); one larger than the whole budget is returned and not kept."""
    key = (what, tuple(identity(path) for path in files))
    with _LOCK:
        found = _ENTRIES.get(key)
        if found is not None:
            _ENTRIES.move_to_end(key)
            return found[0]
    value = compute()  # outside the lock: two callbacks may compute one value at once, and one of them is kept
    size, budget = size_of(value), config.max_kept_bytes()
    if size > budget:
        return value
    with _LOCK:
        if key not in _ENTRIES:
            _ENTRIES[key] = (value, size)
            _HELD[0] += size
        while _HELD[0] > budget and _ENTRIES:
            _, (_, dropped) = _ENTRIES.popitem(last=False)
            _HELD[0] -= dropped
    return value


def held_bytes() -> int:
    """The bytes the kept values take (estimated)."""
    with _LOCK:
        return _HELD[0]


def forget() -> None:
    """Drop every kept value (tests; a worker short of memory)."""
    with _LOCK:
        _ENTRIES.clear()
        _HELD[0] = 0


def size_of(value: Any, depth: int = 0) -> int:
    """An estimate of the bytes ``value`` holds: NumPy arrays and SciPy sparse arrays by their buffers, containers
    and objects by their items and attributes (six levels deep), anything else by ``sys.getsizeof``."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes) + 112
    if scipy.sparse.issparse(value):  # a compressed sparse array: its three buffers
        return sum(int(part.nbytes) for part in vars(value).values() if isinstance(part, np.ndarray))
    if depth > 6:
        return sys.getsizeof(value)
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(size_of(k, depth + 1) + size_of(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return sys.getsizeof(value) + sum(size_of(item, depth + 1) for item in value)
    if hasattr(value, "__dict__"):
        return sys.getsizeof(value) + sum(size_of(v, depth + 1) for v in vars(value).values())
    return sys.getsizeof(value)
