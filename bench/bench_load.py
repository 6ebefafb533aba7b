"""Benchmark: the app under load. N concurrent sessions (default 20) against gunicorn with the recommended settings
(``app/gunicorn_conf.py``: 2 workers of 16 threads), browsing the pages while some of them (default 10) train small
models, beside a flood of new-session requests (default 1,000) and slow clients that trickle a request a byte at a
time (default 4), under Dash's Diskcache manager and under Celery + Redis. Prints p50 / p95 / max seconds per page
load, the errors, and whether every new visitor of the flood was served, one table per manager.

Each session is a thread speaking the Dash renderer's HTTP protocol (no browser, so the client's CPU does not
compete with the server's): it reads its server-issued session id from ``/_dash-layout``, and a *page load* is the
page's HTML, the layout request, the page-content callback (Dash's page routing) and the callbacks the renderer
fires when the page opens (the navigation bar's model badge, the page's own summary or preview), timed from the
first request to the last answer. A training session picks the
sample corpus and runs the Train page's background callback (60 states, online EM, 10 epochs) over and over,
polling it every second as the renderer does. Everything shares one temporary ``CHMM_DATA_DIR``.

    python bench/bench_load.py [--sessions 20] [--trainers 10] [--seconds 120] [--managers diskcache celery]
                               [--flood 1000] [--slow 4] [--repository CHECKOUT]   # another checkout: before/after

Celery needs ``redis-server`` and the ``celery`` and ``gunicorn`` commands (``pip install -e '.[server]'``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support import callback_request, store_data  # noqa: E402 (the renderer's protocol, shared with the tests)

from app import ids, panels  # noqa: E402
from bench.machine import describe_machine  # noqa: E402

TRAINING = panels.TRAINING
"""The Train page's job panel (its component ids)."""

REPOSITORY = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PAGES = {
    "/": [ids.MODEL_BADGE, ids.MODEL_SUMMARY],
    "/train": [ids.MODEL_BADGE, ids.CORPUS_PREVIEW],
    "/generate": [ids.MODEL_BADGE],
    "/communities": [ids.MODEL_BADGE],
}
"""Each page and the outputs of the callbacks its opening fires (found in ``/_dash-dependencies``)."""
TRAIN_FORM = {
    ids.TRAIN_STATES: 60,
    ids.TRAIN_ALLOCATION: "ngram",
    ids.TRAIN_NORMALISATION: "paper",
    ids.TRAIN_ALGORITHM: "online",
    ids.TRAIN_ITERATIONS: 10,
    ids.TRAIN_BATCH_SIZE: None,
    ids.TRAIN_RESTARTS: 1,
    ids.TRAIN_PSEUDOCOUNT: 1e-3,
    ids.TRAIN_BUDGET: None,
    ids.TRAIN_VALIDATION: 0.1,
    ids.TRAIN_SEED: 0,
    ids.TRAIN_BACKEND: "cpu",
}
TIMEOUT_S = 60.0


# ------------------------------------------------------------------------------------------ servers
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(check: Any, what: str, seconds: float = 60.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not come up in {seconds:.0f} s")


@contextlib.contextmanager
def servers(manager: str, data_dir: Path, logs: Path, repository: Path = REPOSITORY) -> Any:
    """gunicorn with 2 workers (and, for Celery, Redis and a worker with 2 pool processes); yields the app's URL."""
    http_port, redis_port = free_port(), free_port()
    path = f"{BIN}{os.pathsep}{os.environ['PATH']}"
    env = dict(os.environ, CHMM_DATA_DIR=str(data_dir), PYTHONUNBUFFERED="1", PATH=path, PYTHONPATH=str(repository))
    env.pop("REDIS_URL", None)
    commands: dict[str, list[str]] = {}
    if manager == "celery":
        env["REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
        commands["redis"] = [shutil.which("redis-server") or "redis-server", "--port", str(redis_port), "--save", ""]
        commands["celery"] = [str(BIN / "celery"), "-A", "app.main:celery_app", "worker", "--concurrency=2",
                              "--loglevel=WARNING", "--without-mingle", "--without-gossip"]  # fmt: skip
    settings = (
        ["-c", "python:app.gunicorn_conf"]
        if (repository / "app" / "gunicorn_conf.py").is_file()
        else ["-w", "2", "--timeout", "120"]
    )  # an older checkout: its own recipe
    commands["gunicorn"] = [str(BIN / "gunicorn"), *settings, "-b", f"127.0.0.1:{http_port}", "app.main:server"]
    processes = []
    try:
        for name, command in commands.items():
            log = open(logs / f"{manager}-{name}.log", "wb")  # noqa: SIM115 (closed with the process)
            processes.append((subprocess.Popen(command, cwd=repository, env=env, stdout=log, stderr=log,
                                               start_new_session=True), log))  # fmt: skip
            if name == "redis":
                wait_for(lambda: socket.create_connection(("127.0.0.1", redis_port), 1).close() is None, "Redis")
        url = f"http://127.0.0.1:{http_port}"
        wait_for(lambda: urllib.request.urlopen(url + "/", timeout=5).status == 200, "gunicorn")
        yield url
    finally:
        for process, log in reversed(processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
            log.close()


# ------------------------------------------------------------------------------------------ the client
class Client:
    """One browser session, speaking the renderer's protocol: page HTML, callback POSTs, background-callback polls."""

    def __init__(self, url: str, dependencies: list[dict[str, Any]]) -> None:
        self.url, self.dependencies = url, dependencies
        layout = self.get_json("/_dash-layout")
        self.session = store_data(layout, ids.SESSION)
        self.values: dict[str, Any] = {f"{ids.SESSION}.data": self.session, f"{ids.MODEL_VERSION}.data": 0}
        self.values |= {f"{component}.value": value for component, value in TRAIN_FORM.items()}

    def request(self, path: str, body: dict[str, Any] | None = None) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310 (our own server)
            return response.read()

    def get_json(self, path: str) -> Any:
        return json.loads(self.request(path))

    def fire(self, component: str, changed: str, values: dict[str, Any] | None = None) -> Any:
        answer = self.request("/_dash-update-component", self.body(component, changed, values or {}))
        return json.loads(answer) if answer else None

    def body(self, component: str, changed: str, values: dict[str, Any]) -> dict[str, Any]:
        return callback_request(self.dependencies, component, changed, self.values | values)

    def open_page(self, page: str) -> None:
        self.request(page)
        self.request("/_dash-layout")  # what the renderer asks for first
        location = "_pages_location.pathname"
        self.fire("_pages_content", location, {location: page})  # the page's content (Dash's page routing)
        for component in PAGES[page]:
            self.fire(component, f"{ids.SESSION}.data")

    def train(self) -> str:
        """Pick the sample corpus, then start a training and poll it to its end; returns the job's status."""
        sample = f"{ids.CORPUS_SAMPLE_BUTTON}.n_clicks"
        self.fire(ids.CORPUS_MESSAGE, sample, {sample: 1})
        start = f"{TRAINING.start}.n_clicks"
        if self.queues():
            body = self.body(TRAINING.result, f"{TRAINING.go}.data", {f"{TRAINING.go}.data": self.wait_turn()})
        else:  # a checkout before the queue of tickets: Start starts the background callback itself
            body = self.body(TRAINING.result, start, {start: 1})  # the form's values are the session's (self.values)
        handles = json.loads(self.request("/_dash-update-component", body))
        query = urllib.parse.urlencode({"cacheKey": handles["cacheKey"], "job": handles["job"]})
        end = time.monotonic() + 600
        while time.monotonic() < end:
            time.sleep(1.0)
            answer = json.loads(self.request(f"/_dash-update-component?{query}", body) or b"{}")
            result = (answer.get("response") or {}).get(TRAINING.result, {}).get("data")
            if result:
                if result.get("status") not in ("finished", "cancelled"):
                    raise RuntimeError(f"{result.get('status')}: {result.get('message')}")
                return str(result.get("status"))
        return "timed out"

    def queues(self) -> bool:
        """Whether the server puts a started job into its queue of tickets (Start writes the queue's store)."""
        start = f"{TRAINING.start}.n_clicks"
        return any(
            TRAINING.queued in dependency["output"]
            and start in {f"{i['id']}.{i['property']}" for i in dependency["inputs"]}
            for dependency in self.dependencies
        )

    def wait_turn(self) -> Any:
        """Press Start, then ask every second, as the app shell's queue polling does, until the job's turn has come;
        what the background callback then starts with. A refusal (the server is busy) raises."""
        start, ticks = f"{TRAINING.start}.n_clicks", f"{ids.QUEUE_WATCH}.n_intervals"
        answer = self.fire(TRAINING.queued, start, {start: 1}) or {}
        view, tick, end = None, 0, time.monotonic() + 600
        while time.monotonic() < end:
            response = answer.get("response") or {}
            view = response.get(TRAINING.queued, {}).get("data", view)
            go = response.get(TRAINING.go, {}).get("data")
            if go:
                return go
            if not view or view.get("state") not in ("waiting", "starting"):
                raise RuntimeError(f"{(view or {}).get('state')}: {(view or {}).get('message')}")
            time.sleep(1.0)
            tick += 1
            answer = self.fire(TRAINING.queued, ticks, {ticks: tick, f"{TRAINING.queued}.data": view}) or {}
        raise RuntimeError("waited 600 s for a place")


# ------------------------------------------------------------------------------------------ the load
@dataclass
class Figures:
    loads: dict[str, list[float]] = field(default_factory=lambda: {page: [] for page in PAGES})
    errors: list[str] = field(default_factory=list)
    trainings: dict[str, int] = field(default_factory=dict)
    newcomers: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def browse(client: Client, figures: Figures, stop: float, offset: int) -> None:
    pages = list(PAGES)
    step = offset
    while time.monotonic() < stop:
        page = pages[step % len(pages)]
        step += 1
        started = time.perf_counter()
        try:
            client.open_page(page)
        except Exception as exc:  # an HTTP error, a time-out: counted, and the session goes on
            with figures.lock:
                figures.errors.append(f"{page}: {type(exc).__name__}: {exc}"[:200])
            continue
        with figures.lock:
            figures.loads[page].append(time.perf_counter() - started)
        time.sleep(1.0)  # a person reading the page


def train(client: Client, figures: Figures, stop: float) -> None:
    while time.monotonic() < stop:
        try:
            status = client.train()
        except Exception as exc:
            status = "error"
            with figures.lock:
                figures.errors.append(f"training: {type(exc).__name__}: {exc}"[:200])
        with figures.lock:
            figures.trainings[status] = figures.trainings.get(status, 0) + 1


def flood(url: str, count: int, figures: Figures) -> None:
    """A script fetching ``/_dash-layout`` ``count`` times as fast as it can (each answer mints a session id)."""
    for _ in range(count):
        try:
            with urllib.request.urlopen(url + "/_dash-layout", timeout=TIMEOUT_S) as response:  # noqa: S310
                response.read()
        except Exception as exc:
            with figures.lock:
                figures.errors.append(f"flood: {type(exc).__name__}: {exc}"[:200])


def slow_client(url: str, stop: float) -> None:
    """A client that sends the start of a request and then a byte every few seconds, never the end."""
    address = urllib.parse.urlparse(url)
    with socket.create_connection((address.hostname, address.port), timeout=TIMEOUT_S) as connection:
        connection.sendall(b"GET / HTTP/1.1\r\nHost: load\r\n")
        while time.monotonic() < stop:
            time.sleep(3.0)
            with contextlib.suppress(OSError):
                connection.sendall(b"X")


def newcomer(url: str, dependencies: list[dict[str, Any]], figures: Figures) -> None:
    """A new visitor after the flood: served a session and its first page, or an error counted."""
    try:
        Client(url, dependencies).open_page("/")
        with figures.lock:
            figures.newcomers += 1
    except Exception as exc:
        with figures.lock:
            figures.errors.append(f"newcomer: {type(exc).__name__}: {exc}"[:200])


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def run(manager: str, load: argparse.Namespace, logs: Path, repository: Path) -> Figures:
    figures = Figures()
    with (
        tempfile.TemporaryDirectory(prefix="chmm-load-") as folder,
        servers(manager, Path(folder), logs, repository) as url,
    ):
        dependencies = json.loads(urllib.request.urlopen(url + "/_dash-dependencies", timeout=30).read())
        clients = [Client(url, dependencies) for _ in range(load.sessions)]
        stop = time.monotonic() + load.seconds
        threads = [threading.Thread(target=browse, args=(client, figures, stop, i)) for i, client in enumerate(clients)]
        threads += [threading.Thread(target=train, args=(client, figures, stop)) for client in clients[: load.trainers]]
        threads += [threading.Thread(target=slow_client, args=(url, stop), daemon=True) for _ in range(load.slow)]
        threads.append(threading.Thread(target=flood, args=(url, load.flood, figures)))
        for thread in threads:
            thread.start()
        for thread in threads:
            if not thread.daemon:
                thread.join()
        newcomers = [threading.Thread(target=newcomer, args=(url, dependencies, figures)) for _ in range(5)]
        for thread in newcomers:
            thread.start()
        for thread in newcomers:
            thread.join()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20, help="browsing sessions")
    parser.add_argument("--trainers", type=int, default=10, help="of the sessions, this many also train")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--flood", type=int, default=1000, help="new-session requests fired beside the sessions")
    parser.add_argument("--slow", type=int, default=4, help="slow clients held open beside the sessions")
    parser.add_argument("--managers", nargs="+", default=["diskcache", "celery"], choices=["diskcache", "celery"])
    parser.add_argument("--logs", type=Path, default=Path(tempfile.gettempdir()) / "chmm-load-logs")
    parser.add_argument("--repository", type=Path, default=REPOSITORY, help="the checkout whose app is served")
    args = parser.parse_args()
    args.logs.mkdir(parents=True, exist_ok=True)
    print(describe_machine())
    print(f"{args.sessions} browsing sessions, {args.trainers} training sessions, a flood of {args.flood} new "
          f"sessions, {args.slow} slow clients, {args.seconds:.0f} s each run; serving {args.repository}")  # fmt: skip
    for manager in args.managers:
        figures = run(manager, args, args.logs, args.repository.resolve())
        print(f"\n{manager}: trainings {dict(sorted(figures.trainings.items()))}, errors {len(figures.errors)}, "
              f"new visitors after the flood served {figures.newcomers} of 5")  # fmt: skip
        print("| page | loads | p50 s | p95 s | max s |")
        print("| --- | ---: | ---: | ---: | ---: |")
        everything: list[float] = []
        for page, times in figures.loads.items():
            everything += times
            print(f"| {page} | {len(times)} | {percentile(times, 0.5):.2f} | {percentile(times, 0.95):.2f} | "
                  f"{max(times, default=float('nan')):.2f} |")  # fmt: skip
        print(f"| all | {len(everything)} | {percentile(everything, 0.5):.2f} | {percentile(everything, 0.95):.2f} | "
              f"{max(everything, default=float('nan')):.2f} |")  # fmt: skip
        for error in figures.errors[:10]:
            print(f"  error: {error}")


if __name__ == "__main__":
    main()
