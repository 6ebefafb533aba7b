"""Writing files so that nothing partial is ever seen: the one atomic writer of the project.

Every file the engine and the app write (models, exports, JSON records of jobs and sessions, uploads) is written
under a temporary name in the same folder and renamed over its path, so a failure or a killed process leaves an
existing file intact and no half-written file behind."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: str | os.PathLike[str], write: Callable[[str], None]) -> None:
    """Call ``write(temporary_path)`` for a temporary file beside ``path`` (same extension), then rename it to
    ``path`` with the usual permissions (0666 less the umask); on any failure the temporary file is removed and an
    existing ``path`` is left untouched."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=path.suffix, dir=directory)
    os.close(fd)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`)."""
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def atomic_write_json(path: str | os.PathLike[str], value: Any) -> None:
    """Write ``value`` as JSON (UTF-8) to ``path`` atomically (see :func:`atomic_write`)."""
    atomic_write_bytes(path, json.dumps(value, ensure_ascii=False).encode("utf-8"))
