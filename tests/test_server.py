"""The production server under a crash: gunicorn with two workers and Dash's Diskcache manager, killed with SIGKILL
(master and workers) while a training job runs, then started again on the same port.

Before issue 17 the orphaned job process had inherited gunicorn's listening socket, so the restart failed with
"Address already in use" for as long as the job ran. The job now closes the listening sockets it inherits. The job
is started as the browser starts it: the Train page's background callback, posted in the Dash renderer's protocol.

Skipped unless the ``gunicorn`` command is installed (``pip install -e '.[test]'`` installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
from support import callback_request, store_data

from app import config, ids, panels

TRAINING = panels.TRAINING
"""The Train page's job panel (its component ids)."""

GUNICORN = shutil.which("gunicorn") or str(Path(sys.executable).parent / "gunicorn")
if not os.access(GUNICORN, os.X_OK):
    pytest.skip("the server crash test needs gunicorn (pip install -e '.[test]')", allow_module_level=True)

REPOSITORY = Path(__file__).resolve().parent.parent
FORM = {
    ids.TRAIN_STATES: 200,
    ids.TRAIN_ALLOCATION: "ngram",
    ids.TRAIN_NORMALISATION: "paper",
    ids.TRAIN_ALGORITHM: "em",
    ids.TRAIN_ITERATIONS: 100_000,  # no validation text: it runs until it is stopped
    ids.TRAIN_BATCH_SIZE: None,
    ids.TRAIN_RESTARTS: 1,
    ids.TRAIN_PSEUDOCOUNT: 1e-6,
    ids.TRAIN_BUDGET: None,
    ids.TRAIN_VALIDATION: 0,
    ids.TRAIN_SEED: 0,
    ids.TRAIN_BACKEND: "cpu",
}


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url + "/_dash-update-component", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 (our own server)
        raw = response.read()
    return json.loads(raw) if raw else None


def serves(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/", timeout=5) as response:  # noqa: S310
            return response.status == 200
    except OSError:
        return False


def start_gunicorn(port: int, env: dict[str, str], log: Path, recommended: bool = False) -> subprocess.Popen:
    """gunicorn with two workers on ``port``: plain synchronous workers, or (``recommended``) the settings of the
    guide's public deployment (``app/gunicorn_conf.py``)."""
    handle = open(log, "ab")  # noqa: SIM115 (inherited by the process; closed when the test process ends)
    settings = ["-c", "python:app.gunicorn_conf"] if recommended else ["-w", "2", "--timeout", "120"]
    return subprocess.Popen(
        [GUNICORN, *settings, "-b", f"127.0.0.1:{port}", "app.main:server"],
        cwd=REPOSITORY,
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def start_training(url: str, data_dir: Path) -> tuple[Path, int]:
    """As a visitor of the server at ``url``: a new session, the sample corpus, Start with :data:`FORM`; once the
    job reports its first iteration, the session's folder and the job's process id."""
    with urllib.request.urlopen(url + "/_dash-layout", timeout=30) as response:  # noqa: S310
        session = store_data(json.loads(response.read()), ids.SESSION)
    with urllib.request.urlopen(url + "/_dash-dependencies", timeout=30) as response:  # noqa: S310
        dependencies = json.loads(response.read())
    values = {f"{ids.SESSION}.data": session, f"{ids.CORPUS_SAMPLE_BUTTON}.n_clicks": 1}
    post(url, callback_request(dependencies, ids.CORPUS_MESSAGE, f"{ids.CORPUS_SAMPLE_BUTTON}.n_clicks", values))
    values |= {f"{component}.value": value for component, value in FORM.items()}
    values[f"{TRAINING.start}.n_clicks"] = 1
    # Start puts the job into the queue; with a place free it answers at once with the job to start, which the
    # renderer then starts as the Train page's background callback
    answer = post(url, callback_request(dependencies, TRAINING.queued, f"{TRAINING.start}.n_clicks", values))
    values[f"{TRAINING.go}.data"] = answer["response"][TRAINING.go]["data"]
    post(url, callback_request(dependencies, TRAINING.result, f"{TRAINING.go}.data", values))
    folder = data_dir / session.split(".")[0]
    progress = folder / "progress.json"
    wait(
        lambda: progress.is_file() and json.loads(progress.read_text()).get("history"),
        120,
        "the training job never reported an iteration",
    )
    return folder, json.loads((folder / "job.json").read_text())["pid"]


def wait(check: Any, seconds: float, what: str) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(what)


@pytest.mark.slow
def test_a_restart_after_the_server_was_killed_mid_job_serves_again(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    data_dir = tmp_path / "data"
    env = dict(os.environ, CHMM_DATA_DIR=str(data_dir), PYTHONUNBUFFERED="1")
    env.pop("REDIS_URL", None)
    log = tmp_path / "gunicorn.log"
    server = start_gunicorn(port, env, log)
    job_pid = None
    try:
        wait(lambda: serves(url), 60, f"gunicorn did not start: {log.read_text(errors='replace')[-2000:]}")
        folder, job_pid = start_training(url, data_dir)
        master = psutil.Process(server.pid)
        workers = master.children()  # the job is a worker's child: it is not killed
        assert job_pid not in {worker.pid for worker in workers}
        for process in [master, *workers]:
            process.kill()  # SIGKILL
        server.wait(10)
        os.kill(job_pid, 0)  # the orphaned job still runs
        server = start_gunicorn(port, env, log)
        wait(lambda: serves(url), 60, f"the restarted server does not serve: {log.read_text(errors='replace')[-2000:]}")
        assert "Address already in use" not in log.read_text(errors="replace")
        os.kill(job_pid, 0)  # ... and it was running all along
    finally:
        if job_pid is not None:
            try:
                os.kill(job_pid, signal.SIGTERM)  # a job ends cleanly on SIGTERM
            except ProcessLookupError:
                pass
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        server.wait(10)


@pytest.mark.slow
def test_a_server_stopped_with_sigterm_stops_its_jobs_and_says_so(tmp_path: Path) -> None:
    """Issue 36, item 5: SIGTERM to gunicorn's master left the training jobs running (orphans). Under the guide's
    settings each worker stops the jobs it started on its way out: the job records that the server stopped it, its
    process is gone with the server, and the session's model is the one before the training."""
    from app.services.training_jobs import SERVER_STOPPED

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    data_dir = tmp_path / "data"
    env = dict(os.environ, CHMM_DATA_DIR=str(data_dir), PYTHONUNBUFFERED="1")
    env.pop("REDIS_URL", None)
    log = tmp_path / "gunicorn.log"
    server = start_gunicorn(port, env, log, recommended=True)
    job_pid = None
    try:
        wait(lambda: serves(url), 60, f"gunicorn did not start: {log.read_text(errors='replace')[-2000:]}")
        before = config.SAMPLE_MODEL.read_bytes()  # a new session starts on the sample model
        folder, job_pid = start_training(url, data_dir)
        server.send_signal(signal.SIGTERM)
        server.wait(45)
        assert not psutil.pid_exists(job_pid) or psutil.Process(job_pid).status() == psutil.STATUS_ZOMBIE
        record = json.loads((folder / "job.json").read_text())
        assert record["status"] == "cancelled" and record["message"] == SERVER_STOPPED, record
        assert (folder / "current.npz").read_bytes() == before
    finally:
        if job_pid is not None and psutil.pid_exists(job_pid):
            os.kill(job_pid, signal.SIGKILL)
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        server.wait(10)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_slow_clients_delay_nobody_under_the_recommended_settings(tmp_path: Path) -> None:
    """Issue 36: two connections trickling 10 bytes a second held another visitor's page for 121.7 s (synchronous
    workers). Under the guide's settings four such clients hold four threads, and a page still loads at once."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, CHMM_DATA_DIR=str(tmp_path / "data"), PYTHONUNBUFFERED="1")
    env.pop("REDIS_URL", None)
    log = tmp_path / "gunicorn.log"
    server = start_gunicorn(port, env, log, recommended=True)
    slow: list[socket.socket] = []
    try:
        wait(lambda: serves(url), 60, f"gunicorn did not start: {log.read_text(errors='replace')[-2000:]}")
        for _ in range(4):  # each sends the start of a request and then a byte now and then, never the end
            client = socket.create_connection(("127.0.0.1", port), timeout=5)
            client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            slow.append(client)
        time.sleep(1.0)
        for client in slow:
            client.sendall(b"X")
        started = time.monotonic()
        with urllib.request.urlopen(url + "/", timeout=30) as response:  # noqa: S310
            assert response.status == 200
        assert time.monotonic() - started < 5.0, "a visitor waited behind the slow clients"
    finally:
        for client in slow:
            client.close()
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        server.wait(10)


def test_gunicorn_says_so_when_it_listens_with_no_proxy_in_front() -> None:
    """Issue 51: without nginx a few dozen slow clients block every visitor; the guide puts nginx in front and binds
    gunicorn to the loopback. The recommended settings now say at start-up when gunicorn listens on a public address
    (and say nothing behind the proxy, on the loopback or a unix socket)."""
    from types import SimpleNamespace

    from app import gunicorn_conf

    said: list[str] = []
    for binds, warned in (
        (["0.0.0.0:8050"], True),
        (["[::]:8050"], True),
        (["192.0.2.7:80", "127.0.0.1:8050"], True),
        (["127.0.0.1:8050"], False),
        (["localhost:8050", "[::1]:8050", "unix:/run/chmm.sock"], False),
    ):
        said.clear()
        server = SimpleNamespace(cfg=SimpleNamespace(bind=binds), log=SimpleNamespace(warning=said.append))
        gunicorn_conf.when_ready(server)
        assert bool(said) is warned, binds
        if warned:
            assert "put a buffering proxy such as nginx in front" in said[0] and binds[0] in said[0]
