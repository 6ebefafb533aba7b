"""The machine description every benchmark prints with its table."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def describe_machine() -> str:
    """CPU model, core count, OS, architecture and Python version, in one line."""
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    system = f"{platform.system()} {platform.machine()}"
    return f"{cpu}, {os.cpu_count()} cores, {system}, Python {platform.python_version()}"
