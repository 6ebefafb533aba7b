"""End-to-end test of the production set-up: Redis, a Celery worker and gunicorn with two workers.

With ``REDIS_URL`` set, ``app.main`` builds a ``dash.CeleryManager`` over Redis, so the Train page's background
callback is queued in Redis and run by a Celery worker (``celery -A app.main:celery_app worker``), while the pages
are served by ``gunicorn app.main:server`` with two worker processes. The module starts all three as subprocesses
(a private ``redis-server`` on a free port, nothing saved to disk; one Celery worker with one pool process; gunicorn
with two sync workers), all sharing a temporary ``CHMM_DATA_DIR``, and drives the app in headless Chromium:

* a training job started in the browser runs on the Celery worker (its log shows the task) and its model becomes
  the session's current model;
* a cancelled training leaves the previous model current, and the worker takes the next job afterwards;
* two browser sessions at once, served by both gunicorn workers, each see their own current model.

Skipped unless ``redis-server``, the ``celery`` and ``gunicorn`` commands, Chromium and chromedriver are available
(``apt-get install redis-server chromium chromium-driver``; ``pip install -e '.[server,test]'``). On a failure the
Redis, Celery and gunicorn logs are appended to the report. Run it with::

    python -m pytest -q tests/test_celery.py
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support import (  # imports no browser package
    CHROMEDRIVER,
    CHROMIUM,
    HEIGHT,
    WIDTH,
    assert_no_errors,
    chrome_options,
    graph_points,
    prepare_training,
    session_folder,
    set_number,
    text_of,
    wait_idle,
    wait_until,
)


def _command(name: str) -> str | None:
    """A command of this Python environment (its bin folder first), else from PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.is_file() and os.access(local, os.X_OK) else shutil.which(name)


REDIS_SERVER = shutil.which("redis-server")
CELERY = _command("celery")
GUNICORN = _command("gunicorn")
_MISSING = [
    name
    for name, found in [
        ("redis-server (apt-get install redis-server)", REDIS_SERVER),
        ("the celery command (pip install 'celery[redis]')", CELERY),
        ("the gunicorn command (pip install gunicorn)", GUNICORN),
        ("chromium (apt-get install chromium)", CHROMIUM),
        ("chromedriver (apt-get install chromium-driver)", CHROMEDRIVER),
    ]
    if not found
]
if _MISSING:
    pytest.skip(f"the Celery end-to-end test needs {', '.join(_MISSING)}", allow_module_level=True)
pytest.importorskip("selenium", reason="the Celery end-to-end test needs dash[testing] (pip install -e '.[test]')")
pytest.importorskip("redis", reason="the Celery end-to-end test needs celery[redis] (pip install -e '.[server]')")

from dash.testing.browser import Browser  # noqa: E402

from app import ids, panels, sessions  # noqa: E402
from engine.backends import model_files  # noqa: E402

TRAINING = panels.TRAINING
"""The Train page's job panel (its component ids)."""

pytestmark = [
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:HTTPResponse.getheader:DeprecationWarning"),  # selenium 4.2 on urllib3 2
]

REPOSITORY = Path(__file__).resolve().parent.parent
START_TIMEOUT = 60  # seconds for Redis, the Celery worker and gunicorn to come up
JOB_TIMEOUT = 180  # seconds for a training job on the worker to report back (a liveness bound: jobs run at nice 10)
STOP_GRACE = 10  # seconds between SIGTERM and SIGKILL at teardown
LOG_TAIL = 12_000  # characters of each log appended to a failure report
START_BADGE = "current model: 600 states"  # the start model every new session gets (sample_models/alice-600.npz)
TASK_RECEIVED = re.compile(r"Task (background_callback_\w+)\[([0-9a-f-]+)\] received")


# ------------------------------------------------------------------------------------------ the servers
@dataclass
class Stack:
    """The running servers: the app's address, the shared data folder and each process's log file."""

    url: str
    data_dir: Path
    logs: dict[str, Path] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)

    def log(self, name: str) -> str:
        try:
            return self.logs[name].read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"

    def report(self) -> str:
        return "\n".join(f"----- {name} log (tail) -----\n{self.log(name)[-LOG_TAIL:]}" for name in self.logs)

    def tasks_received(self) -> list[str]:
        """Ids of the background-callback tasks the Celery worker has received so far."""
        return [match.group(2) for match in TASK_RECEIVED.finditer(self.log("celery"))]


class _LogsOnFailure:
    """A pytest plugin (registered while the servers run) that appends the servers' logs to the report of any
    failed test of this module."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Iterator[None]:
        outcome = yield
        report = outcome.get_result()
        if report.failed and Path(str(item.path)).resolve() == Path(__file__).resolve():
            for name in self.stack.logs:
                report.sections.append((f"{name} log (tail)", self.stack.log(name)[-LOG_TAIL:]))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL to what is left of the process group it leads (pool processes, gunicorn workers)."""
    if process.poll() is None:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_GRACE)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # its own group: started with start_new_session=True
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(5)


def redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - our own local server
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Stack]:
    """Redis, one Celery worker (one pool process) and gunicorn with two workers, sharing a data folder."""
    root = tmp_path_factory.mktemp("celery-stack")
    data_dir = root / "data"
    redis_port, http_port = free_port(), free_port()
    env = dict(os.environ)
    for name in ("CHMM_MAX_UPLOAD_MB", "CHMM_MAX_TRAIN_MB", "CHMM_START_MODEL", "CHMM_SESSION_TTL_HOURS"):
        env.pop(name, None)
    env.update(
        REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
        CHMM_DATA_DIR=str(data_dir),
        CHMM_MAX_JOBS="1",  # one job at a time, as the worker's one pool process: a second one waits for a place
        PYTHONUNBUFFERED="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    gunicorn_options = ["--no-control-socket"] if _gunicorn_has_control_socket() else []
    commands = {
        "redis": [REDIS_SERVER, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        "celery": [
            CELERY,
            "-A",
            "app.main:celery_app",
            "worker",
            "--concurrency=1",
            "--loglevel=INFO",
            "--hostname",
            f"chmm-test-{redis_port}@%h",
            "--without-mingle",
            "--without-gossip",
        ],
        "gunicorn": [
            GUNICORN,
            "-w",
            "2",
            "-b",
            f"127.0.0.1:{http_port}",
            "--timeout",
            "120",
            "--access-logfile",
            "-",
            "--access-logformat",
            'pid=%(p)s "%(r)s" %(s)s',
            *gunicorn_options,
            "app.main:server",
        ],
    }
    stack = Stack(url=f"http://127.0.0.1:{http_port}", data_dir=data_dir)
    processes: dict[str, subprocess.Popen] = {}
    files = []
    plugin = _LogsOnFailure(stack)
    request.config.pluginmanager.register(plugin)
    checks: dict[str, Callable[[], bool]] = {
        "redis": lambda: redis_answers(redis_port),
        "celery": lambda: " ready." in stack.log("celery"),
        "gunicorn": lambda: stack.log("gunicorn").count("Booting worker") >= 2 and http_ok(stack.url + "/"),
    }
    try:
        for name, command in commands.items():
            stack.logs[name] = root / f"{name}.log"
            files.append(open(stack.logs[name], "wb"))  # noqa: SIM115 - closed at teardown
            processes[name] = subprocess.Popen(
                command, cwd=REPOSITORY, env=env, stdout=files[-1], stderr=subprocess.STDOUT, start_new_session=True
            )
            stack.pids[name] = processes[name].pid
            _wait_ready(name, processes[name], checks[name], stack)
        yield stack
    finally:
        for name in ("gunicorn", "celery", "redis"):
            if name in processes:
                stop(processes[name])
        for file in files:
            file.close()
        request.config.pluginmanager.unregister(plugin)


def _gunicorn_has_control_socket() -> bool:
    """gunicorn 25+ opens a control socket under ~/.gunicorn by default; the test turns it off where it can."""
    try:
        help_text = subprocess.run([GUNICORN, "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "--no-control-socket" in help_text


def _wait_ready(name: str, process: subprocess.Popen, ready: Callable[[], bool], stack: Stack) -> None:
    end = time.monotonic() + START_TIMEOUT
    while time.monotonic() < end:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with status {process.returncode} at start-up\n{stack.report()}")
        if ready():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{name} was not ready after {START_TIMEOUT} s\n{stack.report()}")


# ------------------------------------------------------------------------------------------ browsers
@pytest.fixture
def new_browser(stack: Stack) -> Iterator[Callable[[], Browser]]:
    """Opens fresh headless Chromium windows on the app's start page (each a new browser session); at the end of
    the test each must show no severe console message and no Dash renderer error."""
    opened: list[Browser] = []
    with contextlib.ExitStack() as exits:

        def open_browser() -> Browser:
            browser = exits.enter_context(
                Browser(browser="Chrome", headless=True, options=[chrome_options()], percy_run=False, wait_timeout=15)
            )
            browser.driver.set_window_size(WIDTH, HEIGHT)
            browser.server_url = stack.url  # opens "/" and waits for the Dash renderer
            wait_idle(browser)
            # the session store writes the tab's storage once it is mounted, which may come after the renderer idles
            wait_until(lambda: browser.get_session_storage(ids.SESSION), 15, "the tab never stored its session id")
            opened.append(browser)
            return browser

        yield open_browser
        for browser in opened:
            assert_no_errors(browser)


def served_by(stack: Stack) -> list[str]:
    """The gunicorn worker (process id) that served each callback request so far, in order."""
    return re.findall(r'pid=<?(\d+)>? "POST /_dash-update-component', stack.log("gunicorn"))


def wait_trained(browser: Browser, stack: Stack, states: int) -> None:
    """Until the page reports the finished job and the navigation bar shows its model as current."""
    wait_until(
        lambda: f"Trained {states} states" in text_of(browser, TRAINING.status),
        JOB_TIMEOUT,
        lambda: (
            f"no 'Trained {states} states' after {JOB_TIMEOUT} s: status {text_of(browser, TRAINING.status)!r}, "
            f"progress {text_of(browser, TRAINING.label)!r}"
        ),
    )
    browser.wait_for_contains_text(f"#{ids.MODEL_BADGE}", f"current model: {states} states")


# ------------------------------------------------------------------------------------------ tests
def test_training_runs_on_the_celery_worker(stack: Stack, new_browser: Callable[[], Browser]) -> None:
    browser = new_browser()
    browser.wait_for_contains_text(f"#{ids.MODEL_BADGE}", START_BADGE)
    prepare_training(browser, states=60, iterations=3)
    received = set(stack.tasks_received())
    browser.find_element(f"#{TRAINING.start}").click()
    wait_trained(browser, stack, 60)
    status = text_of(browser, TRAINING.status)
    # the page's online EM: at most 3 epochs, then at most 3 batch EM iterations (the paper's recipe)
    done = re.search(r"in (\d+) online EM epoch\(s\) and (\d+) batch EM iteration", status)
    assert done and 1 <= int(done.group(1)) <= 3 and int(done.group(2)) <= 3, status
    wait_until(lambda: any(graph_points(browser, ids.TRAIN_CHART)), 10, "the progress chart shows no iteration")
    assert max(graph_points(browser, ids.TRAIN_CHART)) <= 6
    browser.wait_for_contains_text(f"#{TRAINING.label}", "Finished: Trained 60 states")
    assert browser.find_element(f"#{TRAINING.bar}").get_attribute("value") == "100"
    assert "carroll-alice.txt" in text_of(browser, ids.MODEL_BADGE)
    wait_idle(browser)

    # the job ran on the Celery worker, not in a diskcache process of the web server
    new = [task for task in stack.tasks_received() if task not in received]
    assert len(new) == 1, f"the worker received {len(new)} new background tasks: {new}"
    wait_until(
        lambda: re.search(rf"Task background_callback_\w+\[{new[0]}\] succeeded", stack.log("celery")),
        10,
        f"the worker log does not show task {new[0]} as succeeded",
    )
    assert not (stack.data_dir / ".background-cache").exists(), "a diskcache manager was used"
    folder = session_folder(browser, stack.data_dir)
    assert model_files.load_model(sessions.current_model_path(folder)).n_states == 60
    assert not list((folder / sessions.JOBS).glob("*.npz"))


def test_cancelling_keeps_the_previous_model(stack: Stack, new_browser: Callable[[], Browser]) -> None:
    browser = new_browser()
    browser.wait_for_contains_text(f"#{ids.MODEL_BADGE}", START_BADGE)
    prepare_training(browser, states=400, iterations=2000, validation=0)  # no early stopping: runs until cancelled
    received = set(stack.tasks_received())
    start, cancel = browser.find_element(f"#{TRAINING.start}"), browser.find_element(f"#{TRAINING.cancel}")
    start.click()
    wait_until(lambda: not cancel.get_attribute("disabled"), 15, "the Cancel button was not enabled")
    assert start.get_attribute("disabled")
    browser.wait_for_contains_text(f"#{TRAINING.label}", "of at most 2000", timeout=JOB_TIMEOUT)
    cancel.click()
    browser.wait_for_contains_text(f"#{TRAINING.status}", "cancelled", timeout=JOB_TIMEOUT)
    wait_until(lambda: not start.get_attribute("disabled"), 15, "the Start button stayed disabled")
    wait_idle(browser)
    browser.wait_for_contains_text(f"#{ids.MODEL_BADGE}", START_BADGE)
    new = [task for task in stack.tasks_received() if task not in received]
    assert len(new) == 1, f"the worker received {len(new)} new background tasks: {new}"
    folder = session_folder(browser, stack.data_dir)
    wait_until(
        lambda: '"status": "cancelled"' in (folder / sessions.JOB).read_text(),
        20,
        lambda: f"job.json does not say cancelled: {(folder / sessions.JOB).read_text()}",
    )
    assert not list((folder / sessions.JOBS).glob("*.npz")), "the cancelled job left a model behind"
    assert model_files.load_model(sessions.current_model_path(folder)).n_states == 600
    wait_until(  # what the Train page shows when it is opened again
        lambda: json.loads((folder / sessions.PROGRESS).read_text())["status"] == "cancelled",
        10,
        lambda: f"progress.json does not say cancelled: {(folder / sessions.PROGRESS).read_text()[:300]}",
    )
    wait_until(  # Dash revoked the task on the worker, which stopped its pool process, or the job saw its cancel
        # flag first and ended by itself (restarts in worker processes stop within a batch)
        lambda: f"Terminating {new[0]}" in stack.log("celery") or f"[{new[0]}] succeeded" in stack.log("celery"),
        10,
        f"the worker log shows neither 'Terminating {new[0]}' nor that the task ended",
    )

    # the worker takes the next job (its pool process may have been terminated by the cancel)
    set_number(browser, ids.TRAIN_STATES, 60)
    set_number(browser, ids.TRAIN_PSEUDOCOUNT, 1e-3)  # given: no choice on validation
    set_number(browser, ids.TRAIN_ITERATIONS, 2)
    wait_idle(browser)
    start.click()
    wait_trained(browser, stack, 60)
    wait_idle(browser)
    assert model_files.load_model(sessions.current_model_path(folder)).n_states == 60
    assert model_files.load_model(sessions.previous_model_path(folder)).n_states == 600


def test_two_sessions_see_their_own_model(stack: Stack, new_browser: Callable[[], Browser]) -> None:
    first, second = new_browser(), new_browser()
    first_id, second_id = (browser.get_session_storage(ids.SESSION) for browser in (first, second))
    assert first_id and second_id and first_id != second_id
    requests_before = len(served_by(stack))
    for browser, states in ((first, 60), (second, 45)):
        prepare_training(browser, states=states, iterations=2)
    for browser in (first, second):  # both jobs queued at once; the single-process worker runs them in turn
        browser.find_element(f"#{TRAINING.start}").click()
    for browser, states in ((first, 60), (second, 45)):
        wait_trained(browser, stack, states)
        wait_idle(browser)

    # each session keeps its own model, also across full page loads (served by either gunicorn worker)
    for _ in range(2):
        for browser, states in ((first, 60), (second, 45)):
            browser.driver.refresh()
            browser.wait_for_element(f"#{ids.MODEL_BADGE}")
            browser.wait_for_contains_text(f"#{ids.MODEL_BADGE}", f"current model: {states} states")
            wait_idle(browser)
    assert first.get_session_storage(ids.SESSION) == first_id
    assert second.get_session_storage(ids.SESSION) == second_id
    for browser, states in ((first, 60), (second, 45)):
        folder = session_folder(browser, stack.data_dir)
        assert model_files.load_model(sessions.current_model_path(folder)).n_states == states
    third = new_browser()  # a new session still starts on the start model
    third.wait_for_contains_text(f"#{ids.MODEL_BADGE}", START_BADGE)

    served = served_by(stack)[requests_before:]
    assert len(set(served)) == 2, f"the callbacks were not served by both gunicorn workers: {sorted(set(served))}"


def test_cancelling_a_queued_job(stack: Stack, new_browser: Callable[[], Browser]) -> None:
    """With one place (CHMM_MAX_JOBS=1), a second session's job waits in the server's queue as a ticket, its place
    on its page: no Celery task is sent for it while it waits (a waiting task held a pool process, or a process of
    its own under Diskcache). Cancelled there, it never reaches the worker; started again later, it runs."""
    busy, waiting = new_browser(), new_browser()
    prepare_training(busy, states=400, iterations=2000, validation=0)
    prepare_training(waiting, states=60, iterations=2)
    received = set(stack.tasks_received())
    busy.find_element(f"#{TRAINING.start}").click()
    busy.wait_for_contains_text(f"#{TRAINING.label}", "of at most 2000", timeout=JOB_TIMEOUT)
    start, cancel = waiting.find_element(f"#{TRAINING.start}"), waiting.find_element(f"#{TRAINING.cancel}")
    start.click()
    wait_until(lambda: not cancel.get_attribute("disabled"), 15, "the waiting session's Cancel button was not enabled")
    waiting.wait_for_contains_text(f"#{TRAINING.label}", "number 1 in the queue", timeout=15)
    assert start.get_attribute("disabled")
    time.sleep(3)  # three more turns of the waiting page's polling: still only the busy session's task
    assert len([task for task in stack.tasks_received() if task not in received]) == 1
    assert list((stack.data_dir / ".queue").glob("*.wait")), "the waiting job has no ticket"
    cancel.click()
    waiting.wait_for_contains_text(f"#{TRAINING.status}", "cancelled while it waited", timeout=JOB_TIMEOUT)
    wait_until(lambda: not start.get_attribute("disabled"), 15, "the waiting session's Start button stayed disabled")
    assert not list((stack.data_dir / ".queue").glob("*")), "the cancelled job left its ticket in the queue"
    busy.find_element(f"#{TRAINING.cancel}").click()
    busy.wait_for_contains_text(f"#{TRAINING.status}", "cancelled", timeout=JOB_TIMEOUT)
    for browser in (busy, waiting):
        wait_idle(browser)
        browser.wait_for_contains_text(f"#{ids.MODEL_BADGE}", START_BADGE)
    assert len([task for task in stack.tasks_received() if task not in received]) == 1
    folder = session_folder(waiting, stack.data_dir)
    assert not (folder / sessions.PROGRESS).exists(), "the cancelled queued job ran"
    assert model_files.load_model(sessions.current_model_path(folder)).n_states == 600

    # the session trains normally afterwards (the cancel flag left by the queued job does not stop it)
    start.click()
    wait_trained(waiting, stack, 60)
    wait_idle(waiting)


def test_a_killed_worker_is_reported_failed(stack: Stack, new_browser: Callable[[], Browser]) -> None:
    """kill -9 of the whole Celery worker mid-job: the lost task stayed PENDING and the page polled forever. The
    job's heartbeat stops, so the page reports it failed within 10 s; Start then says that no worker is running.
    (The last test of the module: the worker stays dead.)"""
    browser = new_browser()
    prepare_training(browser, states=400, iterations=2000, validation=0)
    folder = session_folder(browser, stack.data_dir)
    before = sessions.current_model_path(folder).read_bytes()
    start = browser.find_element(f"#{TRAINING.start}")
    start.click()
    browser.wait_for_contains_text(f"#{TRAINING.label}", "of at most 2000", timeout=JOB_TIMEOUT)
    os.killpg(stack.pids["celery"], signal.SIGKILL)  # the worker and its pool process
    killed = time.time()
    browser.wait_for_contains_text(f"#{TRAINING.status}", "died", timeout=10)
    assert time.time() - killed < 10
    wait_until(lambda: not start.get_attribute("disabled"), 5, "Start stayed disabled after the worker died")
    assert sessions.current_model_path(folder).read_bytes() == before
    start.click()
    browser.wait_for_contains_text(f"#{TRAINING.status}", "No Celery worker is running", timeout=15)
