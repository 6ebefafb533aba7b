"""Settings of the web app, read from the environment each time they are needed (so tests and ``chmm app`` can
set them before or after import).

==========================  ===========================================================  ====================
variable                    meaning                                                      default
==========================  ===========================================================  ====================
``CHMM_DATA_DIR``           folder holding one sub-folder per browser session            ``<tmp>/chmm-explorer``
``CHMM_START_MODEL``        model every new session starts with                          ``sample_models/alice-600.npz``
``CHMM_SESSION_TTL_HOURS``  session folders untouched for longer are deleted             24
``CHMM_MAX_UPLOAD_MB``      largest corpus upload accepted                               20
``CHMM_MAX_MODEL_MB``        largest model upload accepted                                100
``CHMM_MAX_TRAIN_MB``       largest estimated training memory accepted                   half the machine's RAM
``REDIS_URL``               use Celery + Redis for background jobs instead of diskcache  unset
==========================  ===========================================================  ====================
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
SAMPLE_MODEL = REPOSITORY / "sample_models" / "alice-600.npz"
SAMPLE_CORPUS = REPOSITORY / "sample_models" / "carroll-alice.txt"
ASSETS = REPOSITORY / "assets"

DEFAULT_TTL_HOURS = 24.0
DEFAULT_MAX_UPLOAD_MB = 20.0
DEFAULT_MAX_MODEL_MB = 100.0
MEGABYTE = 1_000_000


def _float_env(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {raw!r}")
    return value


def data_dir() -> Path:
    """Root of the per-session folders (created on demand)."""
    raw = os.environ.get("CHMM_DATA_DIR", "").strip()
    return Path(raw) if raw else Path(tempfile.gettempdir()) / "chmm-explorer"


def start_model() -> Path:
    """The model a new session starts with (``chmm app --model`` sets ``CHMM_START_MODEL``)."""
    raw = os.environ.get("CHMM_START_MODEL", "").strip()
    return Path(raw) if raw else SAMPLE_MODEL


def session_ttl_seconds() -> float:
    return _float_env("CHMM_SESSION_TTL_HOURS", DEFAULT_TTL_HOURS) * 3600.0


def max_upload_bytes() -> int:
    return int(_float_env("CHMM_MAX_UPLOAD_MB", DEFAULT_MAX_UPLOAD_MB) * MEGABYTE)


def max_model_upload_bytes() -> int:
    return int(_float_env("CHMM_MAX_MODEL_MB", DEFAULT_MAX_MODEL_MB) * MEGABYTE)


def max_train_bytes() -> int:
    """Training runs whose estimated memory exceeds this are refused (default: half the physical memory)."""
    raw = os.environ.get("CHMM_MAX_TRAIN_MB", "").strip()
    if raw:
        return int(_float_env("CHMM_MAX_TRAIN_MB", 1.0) * MEGABYTE)
    try:
        import psutil

        return int(psutil.virtual_memory().total // 2)
    except Exception:  # psutil missing or unusable: assume a small machine
        return 4_000 * MEGABYTE


def redis_url() -> str | None:
    raw = os.environ.get("REDIS_URL", "").strip()
    return raw or None


def dask_scheduler() -> str | None:
    """The Dask scheduler training jobs run batch EM's E-step on (``DASK_SCHEDULER_ADDRESS``), or None: in-process."""
    return os.environ.get("DASK_SCHEDULER_ADDRESS", "").strip() or None
