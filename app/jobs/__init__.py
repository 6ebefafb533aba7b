"""The app's background jobs, one lifecycle for every kind (training, comparison, map, Infomap run).

* :mod:`app.jobs.records`: a job's record, heartbeat and cancel flag (:class:`JobFiles`), the statuses, and the rule
  that a job is running only while its heartbeat is fresh;
* :mod:`app.jobs.process`: the process a job runs as (:func:`job_process`: its priority, its signals, its time limit
  and its memory limit, :class:`MemoryWatch`), and the web worker's care of its job processes;
* :mod:`app.jobs.sentinel`: the watch outside a job's process that kills it past its limits;
* :mod:`app.jobs.queue`: the server's places and its first-come queue (:class:`JobSlot`: a job waiting for a place
  is a ticket file that its pages keep alive, not a process);
* :mod:`app.jobs.kinds`: one kind of job (:class:`JobKind`: its files, its ticket, its cancel, its queue view).

The names most used are importable from here (``from app import jobs``; ``jobs.RUNNING``, ``jobs.JobSlot``)."""

from __future__ import annotations

from app.jobs.process import (
    JOB_NICENESS,
    JOB_STOP_S,
    MEMORY_CHECK_S,
    MEMORY_GRACE_S,
    MEMORY_HARD_FACTOR,
    JobMemoryError,
    JobTerminated,
    JobTimeout,
    MemoryWatch,
    charged_from_fork,
    close_inherited_listeners,
    diskcache_manager,
    job_process,
    lower_priority,
    memory_clause,
    memory_exceeded,
    reap_finished_children,
    stop_children,
    time_clause,
)
from app.jobs.queue import (
    QUEUE,
    SLOTS,
    START_GRACE_S,
    STARTED,
    TICKET_AWAKE_S,
    TICKET_KEEP_S,
    WAITING,
    JobSlot,
    QueueFull,
    QueueView,
    Ticket,
    held_place,
    place_message,
    queue_view,
    server_queue,
    started_ticket,
    waiting_message,
)
from app.jobs.records import (
    CANCELLED,
    DIED,
    FAILED,
    FINISHED,
    HEARTBEAT_S,
    NOTICE_SHOWN_S,
    REFUSED,
    RUNNING,
    STALE_AFTER_S,
    JobFiles,
    read_json,
    read_notice,
    sweep_temporary,
)

__all__ = [
    "CANCELLED", "DIED", "FAILED", "FINISHED", "HEARTBEAT_S", "JOB_NICENESS", "JOB_STOP_S", "MEMORY_CHECK_S",
    "MEMORY_GRACE_S", "MEMORY_HARD_FACTOR", "NOTICE_SHOWN_S", "QUEUE", "REFUSED", "RUNNING", "SLOTS", "STALE_AFTER_S",
    "STARTED", "START_GRACE_S", "TICKET_AWAKE_S", "TICKET_KEEP_S", "WAITING", "JobFiles", "JobMemoryError", "JobSlot",
    "JobTerminated", "JobTimeout", "MemoryWatch", "QueueFull", "QueueView", "Ticket", "charged_from_fork",
    "close_inherited_listeners", "diskcache_manager",
    "held_place", "job_process", "lower_priority", "memory_clause", "memory_exceeded", "queue_view", "read_json",
    "read_notice", "reap_finished_children", "server_queue", "started_ticket", "stop_children", "time_clause",
    "place_message", "sweep_temporary", "waiting_message",
]  # fmt: skip
