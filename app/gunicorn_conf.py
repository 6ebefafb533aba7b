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


PROXY_WARNING = (
    "gunicorn listens on {addresses}, a public address: put a buffering proxy such as nginx in front and bind "
    "gunicorn to 127.0.0.1 (docs/guide.md, 'On a public address'); without one, a few dozen slow clients hold every "
    "thread and block every visitor"
)
"""What the master says at start-up when it listens on an address other than the loopback (issue 51)."""


def public_addresses(binds: list[str]) -> list[str]:
    """The addresses of ``binds`` (gunicorn's ``host:port`` or ``unix:path``) that are not the loopback: where
    visitors reach gunicorn directly, with no proxy in front."""
    exposed = []
    for bind in binds:
        if bind.startswith(("unix:", "fd://")):
            continue
        host = bind.rsplit(":", 1)[0].strip("[]") if ":" in bind else bind
        if host not in ("127.0.0.1", "localhost", "::1") and not host.startswith("127."):
            exposed.append(bind)
    return exposed


def when_ready(server: object) -> None:
    """At start-up, say so when gunicorn listens on a public address (:data:`PROXY_WARNING`): the documented
    deployment binds it to the loopback behind nginx."""
    exposed = public_addresses(list(getattr(getattr(server, "cfg", None), "bind", None) or []))
    if exposed:
        server.log.warning(PROXY_WARNING.format(addresses=", ".join(exposed)))  # type: ignore[attr-defined]


def worker_exit(_server: object, _worker: object) -> None:
    """On a worker's way out (the server stopping, or the worker replaced), stop the training, Infomap and compare
    jobs it started, so that each records that the server stopped it and keeps the last good model (a stopped server
    used to leave them running as orphans)."""
    from app.jobs import stop_children

    stop_children()
