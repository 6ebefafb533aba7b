"""The recommended gunicorn settings of a public deployment: ``gunicorn -c python:app.gunicorn_conf app.main:server
--bind 0.0.0.0:8050``.

Threaded workers, so that a slow client (one that trickles its request a few bytes a second, or never finishes it)
holds one thread of a worker instead of the worker: with gunicorn's default synchronous workers, two such
connections held every other visitor's page for two minutes (issue 36). Behind a buffering proxy (nginx, see
docs/guide.md) slow clients never reach gunicorn at all; these settings keep the server usable without one.
"""

from __future__ import annotations

workers = 2
"""One per core of the project's machines; every job runs in a process of its own, not in a worker."""

worker_class = "gthread"
threads = 16
"""Connections each worker serves at once: a slow client takes one of them, not the worker."""

timeout = 120
"""Seconds a worker may stay silent before the master replaces it (a request is never this long: heavy work runs
as a background job)."""

keepalive = 5
"""Seconds an idle keep-alive connection is kept open."""

limit_request_line = 8190
limit_request_fields = 100
limit_request_field_size = 8190

graceful_timeout = 30
"""Seconds the master gives a worker to finish on SIGTERM, its jobs' stop included (:func:`worker_exit`)."""


def worker_exit(_server: object, _worker: object) -> None:
    """On a worker's way out (the server stopping, or the worker replaced), stop the training, Infomap and compare
    jobs it started, so that each records that the server stopped it and keeps the last good model (a stopped server
    used to leave them running as orphans)."""
    from app.jobs import stop_children

    stop_children()
