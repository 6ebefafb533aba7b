"""Settings of the web app, read from the environment each time they are needed (so tests and ``chmm app`` can
set them before or after import).

==========================  ===========================================================  ====================
variable                    meaning                                                      default
==========================  ===========================================================  ====================
``CHMM_DATA_DIR``           folder holding one sub-folder per browser session            ``<tmp>/chmm-explorer``
``CHMM_START_MODEL``        model every new session starts with                          ``sample_models/alice-600.npz``
``CHMM_START_CORPUS``       the start model's training text (seen/novel words, prefix)   unset
``CHMM_SESSION_TTL_HOURS``  session folders untouched for longer are deleted             24
``CHMM_MAX_UPLOAD_MB``      largest corpus upload accepted                               20
``CHMM_MAX_MODEL_MB``        largest model upload accepted                                400
``CHMM_MAX_CALLBACK_MB``     largest body of any other request (a callback's)             8
``CHMM_MAX_MODEL_MEMORY_MB`` largest memory a model's arrays may take once loaded          2000
``CHMM_MAX_TRAIN_MB``       largest estimated training memory accepted                   half the machine's RAM
``CHMM_MAX_SESSIONS``       sessions past which idle ones give way to newcomers           500
``CHMM_MAX_SESSIONS_DISK_MB`` disk all sessions' files may take before recent ones give way 10000
``CHMM_MAX_SESSION_MB``     disk a session's files may take                              2000
``CHMM_SECRET_KEY``         the key session ids are signed with                          random, kept in the data folder
``CHMM_MAX_JOBS``           training and comparison jobs running at once on the server   cores - 1 (at least 1)
``CHMM_MAX_JOB_MINUTES``    wall-clock limit of one training job                         120
``CHMM_MAX_JOB_MB``         resident memory of one background job (its processes)       3/4 of the machine's RAM
``CHMM_MAX_WAITING_JOBS``   jobs waiting for a place at once (tickets, not processes)    4
``CHMM_MAX_REQUEST_SECONDS`` wall-clock limit of a score, decoding or prune sweep        120
``CHMM_MAX_EXPORT_EDGES``   largest clone graph the Export page writes (edges)           1000000
``CHMM_KEPT_MB``            what a web process keeps of the views' models, graphs, runs  1.25 models, >= 1000
``CHMM_SERVER_MEMORY_MB``   memory of the model loads and heavy requests, all processes   max(RAM / 4, 2 models)
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
DEFAULT_MAX_SESSIONS = 500
DEFAULT_SESSIONS_DISK_MB = 10_000.0
DEFAULT_MAX_EXPORT_EDGES = 1_000_000  # a 30,000-state model at 1e-3: 524,624 edges, GEXF 19 s
DEFAULT_KEPT_MB = 1000.0
DEFAULT_MAX_JOB_MINUTES = 120.0
DEFAULT_MAX_REQUEST_SECONDS = 120.0
DEFAULT_MAX_SESSION_MB = 2000.0
DEFAULT_MAX_UPLOAD_MB = 20.0
DEFAULT_MAX_MODEL_MB = 400.0
"""The plain `chmm train` writes 5,000 states of the Father Brown stories in 58 MB (no counts; T dense, as pruning
cost more than the prune bound there) and a few MB where it prunes; files saved with --keep-statistics and models
made before it (163 MB with their counts) fit too."""
DEFAULT_MAX_MODEL_MEMORY_MB = 2000.0
DEFAULT_MIN_FREE_MB = 200.0
DEFAULT_MAX_CALLBACK_MB = 8.0
MEGABYTE = 1_000_000
BROWSER_SLACK = 1.25
"""The browser refuses a file over this multiple of its limit outright (without a word: ``dcc.Upload`` gives no
reason); up to it, the server refuses with a message that says the size and the limit."""


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


def start_corpus() -> Path | None:
    """The training text of the start model, when the operator gave it (``chmm app --corpus`` sets
    ``CHMM_START_CORPUS``): it marks generalized words seen or novel and gives Generate's default prefix for every
    model trained on it (matched by content, :func:`app.services.corpus.reference_corpus`)."""
    raw = os.environ.get("CHMM_START_CORPUS", "").strip()
    return Path(raw) if raw else None


def secret_key() -> str | None:
    """The key session ids are signed with (``CHMM_SECRET_KEY``), or None: a random key kept in the data folder."""
    return os.environ.get("CHMM_SECRET_KEY", "").strip() or None


def max_sessions() -> int:
    """The sessions past which idle ones give way to a newcomer, least recently used first (a newcomer is never
    refused; :func:`app.sessions.make_room`)."""
    return int(_float_env("CHMM_MAX_SESSIONS", DEFAULT_MAX_SESSIONS))


def max_sessions_disk_bytes() -> int:
    """The disk all session folders may take (``CHMM_MAX_SESSIONS_DISK_MB``) before sessions used within the last
    hour give way too, least recently used first."""
    return int(_float_env("CHMM_MAX_SESSIONS_DISK_MB", DEFAULT_SESSIONS_DISK_MB) * MEGABYTE)


def max_session_bytes() -> int:
    """Disk a session's files may take."""
    return int(_float_env("CHMM_MAX_SESSION_MB", DEFAULT_MAX_SESSION_MB) * MEGABYTE)


def max_waiting_jobs() -> int:
    """Jobs that may wait in the queue at once (``CHMM_MAX_WAITING_JOBS``); past it, Start says the server is busy and
    queues nothing. A waiting job is a small ticket file that its page keeps alive, not a process (each used to wait
    in a fork of a web worker: 20 sessions left 19 processes and 3.26 GB waiting); the bound keeps the wait short."""
    return int(_float_env("CHMM_MAX_WAITING_JOBS", 4))


def max_jobs() -> int:
    """Training and comparison jobs that run at once on the whole server; the rest wait in a queue. The default
    leaves one core to the web workers (on 2 cores, page loads p95 1.0 s with one job at a time, 2.1 s with two:
    bench/RESULTS.md)."""
    return int(_float_env("CHMM_MAX_JOBS", max(1, (os.cpu_count() or 2) - 1)))


def min_free_bytes() -> int:
    """The free disk space a job needs to start (``CHMM_MIN_FREE_MB``): below it, the job's records, its model and
    the background store could not be written, and the page would never hear how the job ended."""
    return int(_float_env("CHMM_MIN_FREE_MB", DEFAULT_MIN_FREE_MB) * 2**20)


def max_job_seconds() -> float:
    """The wall-clock limit of one training job: it stops there, and its model is not installed."""
    return _float_env("CHMM_MAX_JOB_MINUTES", DEFAULT_MAX_JOB_MINUTES) * 60.0


def max_request_seconds() -> float:
    """The wall-clock limit of a scoring, decoding or prune-sweep job (``CHMM_MAX_REQUEST_SECONDS``): each runs as a
    background job of its own, never in a web worker, and stops there."""
    return _float_env("CHMM_MAX_REQUEST_SECONDS", DEFAULT_MAX_REQUEST_SECONDS)


def max_export_edges() -> int:
    """The largest clone graph (in edges) the Export page writes: its background job (bounded by
    :func:`max_request_seconds`, its memory reserved) writes the Infomap run on screen, or runs Infomap first at a
    threshold without one; at 524,624 edges (a 30,000-state model at 1e-3) the writers took GraphML 10 s, GEXF 19 s,
    Pajek and ``.npz`` under 1 s on 2 cores. ``chmm export`` has no such bound."""
    return int(_float_env("CHMM_MAX_EXPORT_EDGES", DEFAULT_MAX_EXPORT_EDGES))


def max_kept_bytes() -> int:
    """What one web process keeps of the views' models, clone graphs and Infomap runs (``CHMM_KEPT_MB``,
    :mod:`app.services.kept`), least recently used first out. Default: 1,000 MB, and at least 1.25 times
    :func:`max_model_memory_bytes`, so that the largest model a file may hold is kept once loaded (a value larger
    than this is loaded again by every request that wants it). What all processes keep together is bounded by
    :func:`server_memory_bytes`."""
    default = max(DEFAULT_KEPT_MB, 1.25 * max_model_memory_bytes() / MEGABYTE)
    return int(_float_env("CHMM_KEPT_MB", default) * MEGABYTE)


def server_memory_bytes() -> int:
    """The memory that the model loads and heavy requests outside training jobs may take at once on the whole server
    (``CHMM_SERVER_MEMORY_MB``; :mod:`app.memory`): the web workers' kept models and values, model uploads being
    checked, prunings, and the score, decoding, prune-sweep and Infomap jobs; past it a request is refused with "the
    server is busy". Default: a quarter of the physical memory, and at least twice
    :func:`max_model_memory_bytes`, so that the largest model a file may hold always loads."""
    raw = os.environ.get("CHMM_SERVER_MEMORY_MB", "").strip()
    if raw:
        return int(_float_env("CHMM_SERVER_MEMORY_MB", 1.0) * MEGABYTE)
    return max(_physical_memory() // 4, 2 * max_model_memory_bytes())


def session_ttl_seconds() -> float:
    return _float_env("CHMM_SESSION_TTL_HOURS", DEFAULT_TTL_HOURS) * 3600.0


def max_upload_bytes() -> int:
    return int(_float_env("CHMM_MAX_UPLOAD_MB", DEFAULT_MAX_UPLOAD_MB) * MEGABYTE)


def max_model_upload_bytes() -> int:
    return int(_float_env("CHMM_MAX_MODEL_MB", DEFAULT_MAX_MODEL_MB) * MEGABYTE)


def max_model_memory_bytes() -> int:
    """The bound on the bytes of a model file's arrays once loaded: a file asking for more (a zip bomb, or a model
    too large for this server) is refused before it is inflated."""
    return int(_float_env("CHMM_MAX_MODEL_MEMORY_MB", DEFAULT_MAX_MODEL_MEMORY_MB) * MEGABYTE)


def browser_upload_bytes(limit: int) -> int:
    """The largest file the browser sends for an upload limited to ``limit`` bytes on the server."""
    return int(BROWSER_SLACK * limit)


def max_callback_bytes() -> int:
    """The largest body of any request but an upload (``CHMM_MAX_CALLBACK_MB``): a callback carries form values (a
    text to score is at most 1,000,000 characters), never a file; refused with HTTP 413 before it is read. Files go
    through the upload route (:mod:`app.transfers`) under their own limits."""
    return int(_float_env("CHMM_MAX_CALLBACK_MB", DEFAULT_MAX_CALLBACK_MB) * MEGABYTE)


def max_job_bytes() -> int:
    """The resident memory one background job may take, its process and its children together
    (``CHMM_MAX_JOB_MB``): training, comparison, Infomap, scoring, decoding and the prune sweep each stop there with
    a sentence that says so (:class:`app.jobs.MemoryWatch`) instead of driving the machine into the OOM killer.
    Default: three quarters of the physical memory, above the half that :func:`max_train_bytes` lets a training's
    estimate take (the job's process adds the forked server's own footprint to it)."""
    raw = os.environ.get("CHMM_MAX_JOB_MB", "").strip()
    if raw:
        return int(_float_env("CHMM_MAX_JOB_MB", 1.0) * MEGABYTE)
    return _physical_memory() * 3 // 4


def _physical_memory() -> int:
    """The machine's physical memory in bytes (8 GB assumed where psutil cannot tell)."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:  # psutil missing or unusable: assume a small machine
        return 8_000 * MEGABYTE


def max_train_bytes() -> int:
    """Training runs whose estimated memory exceeds this are refused (default: half the physical memory)."""
    raw = os.environ.get("CHMM_MAX_TRAIN_MB", "").strip()
    if raw:
        return int(_float_env("CHMM_MAX_TRAIN_MB", 1.0) * MEGABYTE)
    return _physical_memory() // 2


def redis_url() -> str | None:
    raw = os.environ.get("REDIS_URL", "").strip()
    return raw or None


def dask_scheduler() -> str | None:
    """The Dask scheduler training jobs run batch EM's E-step on (``DASK_SCHEDULER_ADDRESS``), or None: in-process."""
    return os.environ.get("DASK_SCHEDULER_ADDRESS", "").strip() or None


def format_bytes(n: float) -> str:
    """Bytes in the largest unit that keeps the figure >= 1 (decimal units, as the size limits are stated)."""
    for unit in ("bytes", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")  # pragma: no cover
