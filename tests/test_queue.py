"""Issue 36, the last two items of the public deployment's hardening: jobs that wait for a place are tickets, not
processes (first come, first served, cancel and the place on the page kept), and every background job has a memory
limit that ends it with a sentence instead of driving the machine into the OOM killer."""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dash
import numpy as np
import psutil
import pytest
from support import SHORT_TEXT, TINY_FORM, callback_request, data_uri, store_data

from app import config, forms, ids, jobs, panels, sessions
from app.services import UserError, comparisons, training_jobs
from app.services import corpus as corpus_service

TRAINING = panels.TRAINING
"""The Train page's job panel (its component ids)."""

JOB_TIMEOUT = 120.0


# ---------------------------------------------------------------------------------------- the queue, as pages see it
@pytest.fixture
def one_place(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[jobs.JobSlot]:
    """One job at a time on the server, taken by a job of another session (released by the test)."""
    monkeypatch.setenv("CHMM_MAX_JOBS", "1")
    monkeypatch.setenv("CHMM_MAX_WAITING_JOBS", "3")
    held = jobs.JobSlot(data_dir, 1)
    assert held.acquire(lambda place: None, stop=lambda: False)
    yield held
    held.release()


def new_session(corpus: bool = True) -> Path:
    folder = sessions.session_folder(sessions.new_session_id())
    if corpus:
        corpus_service.store_corpus(folder, data_uri(SHORT_TEXT.encode("utf-8")), "alice-short.txt")
    return folder


def test_waiting_is_first_come_first_served_and_a_cancelled_or_abandoned_waiter_blocks_nobody(
    one_place: jobs.JobSlot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three sessions press Start while the only place is taken: each gets a ticket and its place, in the order they
    came; the fourth is told the server is busy, and nothing of it is queued. A waiter that is cancelled leaves the
    queue at once; one whose page stopped asking holds nobody back (and keeps its place for when it asks again)."""
    monkeypatch.setattr(jobs.queue, "TICKET_AWAKE_S", 1.0)
    options = forms.options_from_form(TINY_FORM)
    first, second, third, fourth = (new_session() for _ in range(4))
    for folder in (first, second, third):
        training_jobs.queue_training(folder, options)
    with pytest.raises(jobs.QueueFull, match=r"^The server is busy: 1 job\(s\) run and 3 wait for a place"):
        training_jobs.queue_training(fourth, options)
    assert training_jobs.training_ticket(fourth) is None
    with pytest.raises(UserError, match="already running or waiting in this session"):
        training_jobs.queue_training(first, options)  # a second Start of the same session

    views = {folder: training_jobs.queue_view(folder, None) for folder in (first, second, third)}
    assert [views[f][0]["place"] for f in (first, second, third)] == [1, 2, 3]
    assert all(go is None for _, go in views.values())
    assert "number 2 in the queue (1 jobs run at once on this server)" in views[second][0]["message"]

    # cancelled while it waits: out of the queue at once, its session's page says so
    assert training_jobs.request_cancel(second) == training_jobs.WAITED_CANCELLED
    assert training_jobs.training_ticket(second) is None
    assert training_jobs.queue_view(second, views[second][0]) == (None, None)  # not "dropped": it was cancelled
    assert training_jobs.queue_view(third, views[third][0])[0]["place"] == 2

    # the place frees; the first session's page has stopped asking: the third goes ahead of it
    time.sleep(1.5)
    one_place.release()
    view, go = training_jobs.queue_view(third, views[third][0])
    assert view["state"] == "starting" and go == {"ticket": view["ticket"]} and view["ticket"].endswith(".go")
    # the first asks again: its turn comes once the started job has taken its place and left it
    assert training_jobs.queue_view(first, views[first][0])[0]["place"] == 2
    ticket = jobs.started_ticket(go["ticket"], training_jobs.TRAINING_KIND, third.name)
    slot = jobs.server_queue()
    assert slot.acquire(lambda place: None, stop=lambda: False, ticket=ticket)  # the job takes its place at once
    assert not ticket.path.exists()
    assert training_jobs.queue_view(third, view) == (None, None)  # the job runs: the page follows it from here
    assert training_jobs.queue_view(first, views[first][0])[0]["place"] == 1
    slot.release()
    view, go = training_jobs.queue_view(first, views[first][0])
    assert view["state"] == "starting" and go is not None


def test_a_ticket_whose_page_stopped_asking_is_dropped_and_the_page_says_so(
    one_place: jobs.JobSlot, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = new_session()
    training_jobs.queue_training(folder, forms.options_from_form(TINY_FORM))
    shown, _ = training_jobs.queue_view(folder, None)
    monkeypatch.setattr(jobs.queue, "TICKET_KEEP_S", 0.5)
    time.sleep(1.0)
    assert jobs.server_queue().waiters() == 0  # anyone who looks at the queue drops it
    view, go = training_jobs.queue_view(folder, shown)
    assert view["state"] == "dropped" and "no page of this session asked for its turn" in view["message"]
    assert go is None


def test_a_reloaded_page_finds_its_waiting_job_and_a_forged_ticket_is_refused(one_place: jobs.JobSlot) -> None:
    folder, other = new_session(), new_session()
    ticket = training_jobs.queue_training(folder, forms.options_from_form(TINY_FORM))
    view, _ = training_jobs.queue_view(folder, None)  # a page that knows nothing (reloaded) finds it
    assert view["state"] == "waiting" and view["ticket"] == ticket.name
    assert training_jobs.running_summary(folder) == [("Training: waiting for a place", "/train")]
    assert jobs.started_ticket(ticket.name, training_jobs.TRAINING_KIND, folder.name) is None  # not started
    started = ticket.name.replace(".wait", ".go")
    assert jobs.started_ticket(started, training_jobs.TRAINING_KIND, other.name) is None  # another session's
    assert jobs.started_ticket("../../secret.go", training_jobs.TRAINING_KIND, folder.name) is None
    outcome = training_jobs.run_queued_training(other, started)
    assert outcome.status == jobs.CANCELLED and training_jobs.training_ticket(folder) is not None


def test_a_comparison_waits_as_a_ticket_too(one_place: jobs.JobSlot) -> None:
    folder = new_session()
    comparisons.queue_comparison(folder, ["ngram"], "session", None)
    view, go = comparisons.queue_view(folder, None)
    assert view["state"] == "waiting" and view["place"] == 1 and go is None
    assert comparisons.request_cancel(folder) == comparisons.WAITED_CANCELLED
    assert comparisons.comparison_ticket(folder) is None
    with pytest.raises(UserError, match="Choose the corpus"):
        comparisons.queue_comparison(folder, ["ngram"], "nowhere", None)  # refused at once, not after the wait
    one_place.release()
    comparisons.queue_comparison(folder, ["ngram"], "session", None)
    view, go = comparisons.queue_view(folder, None)
    assert view["state"] == "starting" and go is not None
    saved = comparisons.run_queued_comparison(folder, go["ticket"])
    assert saved["status"] == jobs.FINISHED and comparisons.comparison_ticket(folder) is None


# ------------------------------------------------------------------------------------------ through the web server
class Page:
    """A browser tab of the app as the Dash renderer drives it (its session, the values it holds), on the Flask test
    client of ``app.main.server``; background callbacks run as Dash's Diskcache manager starts them: forked processes
    of this test's process."""

    def __init__(self, client: Any, dependencies: list[dict[str, Any]]) -> None:
        self.client, self.dependencies = client, dependencies
        session = store_data(json.loads(client.get("/_dash-layout").get_data()), ids.SESSION)
        self.values: dict[str, Any] = {f"{ids.SESSION}.data": session}
        self.values |= {f"{component}.value": TINY_FORM.get(name) for name, component in _form()}
        self.folder = config.data_dir() / session.split(".")[0]

    def post(self, writes: str, changed: str) -> dict[str, Any]:
        body = callback_request(self.dependencies, writes, changed, self.values)
        answer = self.client.post("/_dash-update-component", json=body)
        assert answer.status_code in (200, 204), answer.get_data(as_text=True)[:500]
        return answer.get_json(silent=True) or {}

    def outputs(self, answer: dict[str, Any]) -> None:
        """Hold what a callback wrote to the shell's queue stores, as the renderer does."""
        for component in (TRAINING.queued, TRAINING.go):
            if component in (answer.get("response") or {}):
                self.values[f"{component}.data"] = answer["response"][component]["data"]

    def start(self) -> None:
        self.values[f"{TRAINING.start}.n_clicks"] = 1
        self.outputs(self.post(TRAINING.queued, f"{TRAINING.start}.n_clicks"))
        self.go()

    def tend(self) -> None:
        """One tick of the shell's queue polling; starts the job when its turn has come."""
        self.values[f"{ids.QUEUE_WATCH}.n_intervals"] = (self.values.get(f"{ids.QUEUE_WATCH}.n_intervals") or 0) + 1
        go_before = self.values.get(f"{TRAINING.go}.data")
        self.outputs(self.post(TRAINING.queued, f"{ids.QUEUE_WATCH}.n_intervals"))
        if self.values.get(f"{TRAINING.go}.data") != go_before:
            self.go()

    def go(self) -> None:
        if self.queued().get("state") == "starting" and self.values.get(f"{TRAINING.go}.data"):
            self.post(TRAINING.result, f"{TRAINING.go}.data")  # the background callback: a forked job process

    def queued(self) -> dict[str, Any]:
        return self.values.get(f"{TRAINING.queued}.data") or {}


def _form() -> list[tuple[str, str]]:
    from app.pages import train as train_page

    return train_page.FORM


def job_processes(before: set[int]) -> list[psutil.Process]:
    """This process's children started since ``before`` that still run (Dash's Diskcache manager forks each job
    from this process), the jobs' sentinels aside. Not its descendants: a sentinel that its job has forked but that
    has not yet run ``python -m app.jobs.sentinel`` still has its job's command line, and was counted as a second
    job process (a CI failure under load: "a waiting job holds a process", two processes of consecutive ids)."""
    return [
        child
        for child in psutil.Process().children()
        if child.pid not in before and child.status() != psutil.STATUS_ZOMBIE and not is_sentinel(child)
    ]


def is_sentinel(process: psutil.Process) -> bool:
    """Whether ``process`` is a job's sentinel (app.jobs.sentinel), which watches its job from outside."""
    with contextlib.suppress(psutil.Error):
        return "app.jobs.sentinel" in process.cmdline()
    return False


def running_jobs(before: set[int]) -> list[psutil.Process]:
    """The job processes started since ``before`` that run a job: its sentinel watches it and its record (the
    sentinel's ``--record``) says running. A job records its end before it gives its place back, so a process past
    that point is only exiting (under load, seconds: Dash stores its answer), and is not counted."""
    running = []
    for process in job_processes(before):
        with contextlib.suppress(psutil.Error):
            for child in process.children():
                line = child.cmdline()
                if is_sentinel(child) and "--record" in line:
                    record = jobs.read_json(Path(line[line.index("--record") + 1])) or {}
                    if record.get("status") == jobs.RUNNING:
                        running.append(process)
    return running


def test_a_job_forked_while_a_page_looked_at_the_places_does_not_take_one(one_place: jobs.JobSlot) -> None:
    """A page asking how many places are free locks each place a moment: a job forked from the worker at that moment
    kept that place's lock for its life (a two-hour training held a place it never took, and with one place the next
    job never started)."""
    one_place.release()
    slot = jobs.server_queue()
    forked: list[int] = []
    real = jobs.queue.fcntl.flock

    def fork_while_locked(handle: Any, operation: int) -> None:
        real(handle, operation)
        if not forked:  # the first probe holds the place's lock: a job is forked now
            pid = os.fork()
            if pid == 0:
                time.sleep(5)
                os._exit(0)
            forked.append(pid)

    jobs.queue.fcntl.flock = fork_while_locked
    try:
        assert slot.free_slots() == 1
    finally:
        jobs.queue.fcntl.flock = real
    try:  # the job closes its copy as it starts (a few ms); it kept it for its whole life (here 5 s) before
        deadline = time.monotonic() + 2.0
        while slot.free_slots() != 1:
            assert time.monotonic() < deadline, "the forked job kept the place"
            time.sleep(0.01)
    finally:
        os.kill(forked[0], signal.SIGKILL)
        os.waitpid(forked[0], 0)


def finished(folder: Path) -> bool:
    return (training_jobs.read_job(folder) or {}).get("status") == jobs.FINISHED


def test_jobs_waiting_for_a_place_hold_no_process_and_start_first_come_first_served(
    one_place: jobs.JobSlot,
) -> None:
    """Issue 36: each job waiting for a place waited in a forked process of its own (20 sessions pressing Start left
    19 processes and 3.26 GB). Three tabs press Start while the only place is taken: no process is started, each
    page shows its place; when the place frees, the jobs run one after another in the order of the presses."""
    from app import main

    client = main.server.test_client()
    dependencies = json.loads(client.get("/_dash-dependencies").get_data())
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    pages = [Page(client, dependencies) for _ in range(3)]
    for page in pages:
        page.values[f"{ids.CORPUS_SAMPLE_BUTTON}.n_clicks"] = 1
        page.post(ids.CORPUS_MESSAGE, f"{ids.CORPUS_SAMPLE_BUTTON}.n_clicks")
        page.start()
    for _ in range(2):
        for page in pages:
            page.tend()
    assert [page.queued().get("place") for page in pages] == [1, 2, 3]
    assert "number 1 in the queue" in pages[0].queued()["message"]
    assert job_processes(before) == [], "a waiting job holds a process"
    assert len(list((config.data_dir() / jobs.QUEUE).glob("*.wait"))) == 3

    one_place.release()
    order = []
    deadline = time.monotonic() + 3 * JOB_TIMEOUT
    while len(order) < 3:
        assert time.monotonic() < deadline, f"the jobs did not all run: {[p.queued() for p in pages]}"
        for page in pages:
            page.tend()
        running = running_jobs(before)
        assert len(running) <= 1, "more than one job ran at once"
        waiting = [page for page in pages if page.queued().get("state") == "waiting"]
        assert len(job_processes(before)) <= len(pages) - len(waiting), "a waiting job holds a process"
        for number, page in enumerate(pages):
            if number not in order and finished(page.folder):
                order.append(number)
        time.sleep(0.5)
    assert order == [0, 1, 2]
    started = [training_jobs.read_job(page.folder)["started"] for page in pages]
    assert started == sorted(started)
    assert all(sessions.current_model_path(page.folder).is_file() for page in pages)
    assert not list((config.data_dir() / jobs.QUEUE).glob("*"))


# ------------------------------------------------------------------------------------------ the memory limit
SAFETY_CHUNKS = 80
"""The memory tests' jobs allocate 16 MB at a time, 1.28 GB at most: without a limit they end there, failing, rather
than drive the test machine into the OOM killer."""


def _rss_mb() -> float:
    return psutil.Process().memory_info().rss / 1e6


def _request_past_the_memory_limit(folder: str, answer: multiprocessing.Queue) -> None:
    """A request job (forked, as Dash's Diskcache manager starts one) that keeps allocating, like a prune sweep of a
    24,000-state model."""
    from app import ui

    os.environ["CHMM_MAX_JOB_MB"] = str(int(_rss_mb()) + 150)
    kept = []
    try:
        with ui.request_job(Path(folder), "The prune sweep"):
            while len(kept) < SAFETY_CHUNKS:
                kept.append(np.ones(2_000_000))  # 16 MB, touched
                time.sleep(0.01)
        answer.put(("not stopped", len(kept) * 16))
    except UserError as exc:
        size = len(kept) * 16
        kept.clear()
        answer.put((str(exc), size))


def in_child(target: Any, *args: Any) -> Any:
    context = multiprocessing.get_context("fork")
    answer = context.Queue()
    child = context.Process(target=target, args=(*args, answer))
    child.start()
    try:
        return answer.get(timeout=60), child
    finally:
        child.join(timeout=30)


def test_a_request_job_past_the_memory_limit_stops_with_a_sentence(tmp_path: Path) -> None:
    """Issue 36: a heavy request (the prune sweep of a 24,000-state model) drove the machine into the OOM killer.
    Every job process has a memory limit (CHMM_MAX_JOB_MB); past it, the job ends with a sentence that says so."""
    (message, allocated), child = in_child(_request_past_the_memory_limit, str(tmp_path))
    assert message.startswith("This stopped: it needed more than ")
    assert "MB, the server's limit per job (CHMM_MAX_JOB_MB); try a shorter text or a smaller model." in message
    assert 100 <= allocated <= 400, allocated  # stopped near the limit, not at the machine's end
    assert child.exitcode == 0


def _training_past_the_memory_limit(folder: str, answer: multiprocessing.Queue) -> None:
    from engine import api

    def hungry(*_args: Any, **_kwargs: Any) -> None:
        kept = []
        while len(kept) < SAFETY_CHUNKS:
            kept.append(np.ones(2_000_000))
            time.sleep(0.01)
        raise RuntimeError("not stopped")

    api.train_text = hungry  # the engine's training (the app's door to it), as if it needed far more memory
    os.environ["CHMM_MAX_JOB_MB"] = str(int(_rss_mb()) + 150)
    with jobs.job_process(record=training_jobs.training_files(Path(folder))):
        outcome = training_jobs.run_training_job(Path(folder), forms.options_from_form(TINY_FORM))
    answer.put(outcome.as_dict())


def test_a_training_past_the_memory_limit_fails_with_its_cause(with_corpus: Path) -> None:
    before = sessions.current_model_path(with_corpus).read_bytes()
    outcome, child = in_child(_training_past_the_memory_limit, str(with_corpus))
    assert outcome["status"] == jobs.FAILED, outcome
    assert outcome["message"].startswith("Training stopped: it needed more than ")
    assert "the server's limit per job (CHMM_MAX_JOB_MB); choose fewer states" in outcome["message"]
    assert training_jobs.read_job(with_corpus)["message"] == outcome["message"]
    assert sessions.current_model_path(with_corpus).read_bytes() == before


def _job_that_ignores_the_limit(folder: str, answer: multiprocessing.Queue) -> None:
    """A job whose code swallows every MemoryError and allocates on (a stand-in for a kernel that cannot be
    interrupted): its watch must kill it, after recording why."""
    jobs.process.MEMORY_GRACE_S = 1.0
    files = training_jobs.training_files(Path(folder))
    files.write({"key": "k", "status": jobs.RUNNING, "started": time.time()})
    os.environ["CHMM_MAX_JOB_MB"] = str(int(_rss_mb()) + 150)
    answer.put("started")
    kept = []
    with jobs.job_process(record=files), files.alive():
        while len(kept) < 4 * SAFETY_CHUNKS:
            with contextlib.suppress(MemoryError):
                while len(kept) < 4 * SAFETY_CHUNKS:
                    kept.append(np.ones(500_000))
                    time.sleep(0.01)


def test_a_job_that_stays_past_the_memory_limit_is_killed_and_its_page_says_why(with_corpus: Path) -> None:
    started, child = in_child(_job_that_ignores_the_limit, str(with_corpus))
    assert started == "started"
    child.join(timeout=60)
    assert child.exitcode == -9, child.exitcode  # SIGKILL from its own watch
    record = training_jobs.read_job(with_corpus)
    assert "it needed more than" in record["cause"]
    message = training_jobs.reap_dead_job(with_corpus, now=time.time() + jobs.STALE_AFTER_S + 1)
    assert message is not None and message.startswith("The training job stopped: it needed more than ")
    assert "the server's limit per job (CHMM_MAX_JOB_MB)" in message and "died" not in message


def hold_the_gil(seconds: float) -> None:
    """Run for about ``seconds`` inside one C call that never releases the GIL (as Infomap's C++ does for a whole
    run): no other thread of the process runs meanwhile (about 1 s per 10^9 items here)."""
    collections.deque(itertools.repeat(None, int(seconds * 1e9)), maxlen=0)


def grow_past_the_hard_limit(after: float = 1.0) -> None:
    """Start a child process (as a job's restart worker is) that, ``after`` seconds, takes the memory that puts this
    process and its descendants, whose limit is this process's resident memory + 100 MB, past
    MEMORY_HARD_FACTOR (1.25) times the limit: by then the job is inside C code that holds the GIL, as a
    run of Infomap that keeps allocating is."""
    size = int((0.3 * _rss_mb() + 150) * 1e6)
    script = f"import time; time.sleep({after}); kept = b'x' * {size}; time.sleep(120)"
    subprocess.Popen([sys.executable, "-c", script])


def _job_inside_c_code_past_the_limit(folder: str, answer: multiprocessing.Queue) -> None:
    """A job that passes its memory limit by far, then enters C code that holds the GIL for about 40 s: its watch
    thread cannot run, so only the sentinel process can stop it."""
    files = training_jobs.training_files(Path(folder))
    files.write({"key": "k", "status": jobs.RUNNING, "started": time.time()})
    os.environ["CHMM_MAX_JOB_MB"] = str(int(_rss_mb()) + 100)
    with jobs.job_process(record=files), files.alive():
        answer.put(time.time())
        time.sleep(0.5)  # the queue's feeder thread sends it (it needs the GIL)
        grow_past_the_hard_limit()
        hold_the_gil(40.0)
        answer.put("not stopped")


def test_a_job_inside_c_code_that_holds_the_gil_is_still_stopped_at_its_memory_limit(with_corpus: Path) -> None:
    """Issue 36's gap: the watch was a thread of the job, and C code that holds the GIL (Infomap's) kept it from
    running, so such a job could fill the machine. The sentinel, a separate process, kills it within seconds and
    records why first, so that the page says so."""
    started, child = in_child(_job_inside_c_code_past_the_limit, str(with_corpus))
    child.join(timeout=60)
    seconds = time.time() - started
    assert child.exitcode == -9, child.exitcode  # SIGKILL from the sentinel, not the end of the 40 s loop
    assert seconds < 15.0, seconds
    record = training_jobs.read_job(with_corpus)
    assert "it needed more than" in record["cause"] and "CHMM_MAX_JOB_MB" in record["cause"]
    message = training_jobs.reap_dead_job(with_corpus, now=time.time() + jobs.STALE_AFTER_S + 1)
    assert message is not None and message.startswith("The training job stopped: it needed more than ")
    assert not [p for p in psutil.Process().children(recursive=True) if is_sentinel(p)]


def _long_c_call_with_a_heartbeat(folder: str, seconds: float, answer: multiprocessing.Queue) -> None:
    files = training_jobs.training_files(Path(folder))
    files.write({"key": "k", "status": jobs.RUNNING, "started": time.time()})
    with jobs.job_process(record=files), files.alive():
        answer.put("inside")
        time.sleep(0.5)  # the queue's feeder thread sends it (it needs the GIL)
        hold_the_gil(seconds)
    files.write({"key": "k", "status": jobs.FINISHED, "started": time.time()})


def test_a_job_inside_c_code_that_holds_the_gil_is_not_taken_for_dead(with_corpus: Path) -> None:
    """Infomap holds the GIL for its whole run (20 s on a 60,000-node graph), so the job's heartbeat thread stopped
    beating and after 6 s its page called the job dead. The sentinel beats for it while its process lives."""
    seconds = jobs.STALE_AFTER_S + 4.0
    context = multiprocessing.get_context("fork")
    answer = context.Queue()
    child = context.Process(target=_long_c_call_with_a_heartbeat, args=(str(with_corpus), seconds, answer))
    child.start()
    assert answer.get(timeout=30) == "inside"
    files = training_jobs.training_files(with_corpus)
    ages = []
    while child.is_alive() and training_jobs.read_job(with_corpus)["status"] == jobs.RUNNING:
        ages.append(time.time() - files.heartbeat.stat().st_mtime)
        assert files.running(), ages
        time.sleep(0.25)
    child.join(timeout=30)
    assert child.exitcode == 0 and len(ages) > 4 * jobs.STALE_AFTER_S
    assert max(ages) < 2.5, max(ages)


def _request_inside_c_code(folder: str, memory: bool, answer: multiprocessing.Queue) -> None:
    """A scoring request that enters C code holding the GIL, past its memory limit or its time limit: only its
    sentinel can stop it, and the request's callback, its process gone, cannot say why."""
    from app import ui

    jobs.process.MEMORY_GRACE_S = 1.0
    os.environ["CHMM_MAX_REQUEST_SECONDS"] = "60" if memory else "1"  # under load the growth alone took over 1 s
    os.environ["CHMM_MAX_JOB_MB"] = str(int(_rss_mb()) + 100)
    answer.put(time.time())
    time.sleep(0.5)  # the queue's feeder thread sends it (it needs the GIL)
    with ui.request_job(Path(folder), "Scoring"):
        if memory:
            grow_past_the_hard_limit()
        hold_the_gil(40.0)
    answer.put("not stopped")


@pytest.mark.parametrize("memory", [True, False], ids=["memory", "time"])
def test_a_request_killed_inside_c_code_is_told_to_every_tab_of_its_session(memory: bool, data_dir: Path) -> None:
    """Issue 36's second gap: a request job that had to be killed ended with nothing on its page. Its sentinel
    leaves the sentence in the session's notice, which the shell of every tab shows within seconds."""
    from app import main

    session = sessions.new_session_id()
    folder = sessions.session_folder(session)
    started, child = in_child(_request_inside_c_code, str(folder), memory)
    child.join(timeout=60)
    assert child.exitcode == -9 and time.time() - started < 15.0
    shown, stamp = main.show_notice(1, session, None)
    text = json.dumps(shown.to_plotly_json(), default=str)
    assert "Scoring stopped: it " in text and "try a shorter text or a smaller model." in text
    assert ("it needed more than" in text) if memory else ("it ran past its limit of 1 s" in text)
    assert main.show_notice(2, session, stamp) == (dash.no_update, dash.no_update)  # shown once per tab
    assert jobs.read_notice(folder, now=stamp + jobs.NOTICE_SHOWN_S + 1) is None
    assert main.show_notice(3, sessions.new_session_id(), None) == (dash.no_update, dash.no_update)  # its session's


def test_the_job_memory_limit_defaults_to_three_quarters_of_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHMM_MAX_JOB_MB", raising=False)
    assert config.max_job_bytes() == psutil.virtual_memory().total * 3 // 4
    assert config.max_job_bytes() > config.max_train_bytes()  # a training the estimate accepts fits in its job
    monkeypatch.setenv("CHMM_MAX_JOB_MB", "900")
    assert config.max_job_bytes() == 900_000_000
    assert "it needed more than 900 MB, the server's limit per job" in str(jobs.JobMemoryError(900_000_000))


def test_two_tabs_pressing_start_at_once_enter_one_training(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 51: two tabs of one session press Start at the same moment. Each checks that the session has no
    training, then enters one: with both checks passed before either entered (a slow check here), the session held
    two. The Start of a kind is now held per session (``JobKind.entering``): one ticket, and the other tab is told
    in one sentence; a comparison the same."""
    import threading

    options = forms.options_from_form(TINY_FORM)
    folder = new_session()
    checked = threading.Barrier(2, timeout=2)
    slow = training_jobs.check_training

    def check_slowly(*args: Any) -> Any:
        with contextlib.suppress(threading.BrokenBarrierError):
            checked.wait()  # without the lock both tabs meet here, past the busy check; with it the second waits
        return slow(*args)

    monkeypatch.setattr(training_jobs, "check_training", check_slowly)
    outcomes: list[Any] = []

    def press_start() -> None:
        try:
            outcomes.append(training_jobs.queue_training(folder, options))
        except UserError as exc:
            outcomes.append(exc)

    tabs = [threading.Thread(target=press_start) for _ in range(2)]
    for tab in tabs:
        tab.start()
    for tab in tabs:
        tab.join(30)
    tickets = [o for o in outcomes if isinstance(o, jobs.Ticket)]
    refused = [o for o in outcomes if isinstance(o, UserError)]
    assert len(tickets) == 1 and len(refused) == 1
    assert "already running or waiting in this session" in str(refused[0])
    assert training_jobs.training_ticket(folder) is not None
    training_jobs.request_cancel(folder)


def test_temporary_files_a_killed_write_left_are_swept(data_dir: Path) -> None:
    """Issue 51: a job cancelled or killed while it wrote the model left its ``.tmp-*.npz`` (36-80 MB counted
    against the session's disk) that nothing removed. Now the next Start of the session, the reap of a dead job and
    the server's start sweep the temporary files nobody has written for two minutes; a write in progress (a fresh
    file) and the session's other files stay."""
    folder = new_session()
    old = time.time() - 2 * jobs.records.STALE_TEMPORARY_S

    def leave(name: str, stale: bool) -> Path:
        path = folder / name
        path.write_bytes(b"x" * 1000)
        if stale:
            os.utime(path, (old, old))
        return path

    stale, fresh = leave(".tmp-killed.npz", True), leave(".tmp-writing.npz", False)
    kept = leave("corpus-extra.txt", True)
    assert jobs.sweep_temporary(folder) == [stale.name]
    assert fresh.exists() and kept.exists() and not stale.exists()

    stale = leave(".tmp-cancelled.npz", True)  # the next Start of the session sweeps it
    training_jobs.queue_training(folder, forms.options_from_form(TINY_FORM))
    assert not stale.exists() and fresh.exists()
    training_jobs.request_cancel(folder)

    (folder / sessions.JOBS).mkdir(exist_ok=True)  # a Cancel during the job's write left its file in jobs/
    stale, candidate = leave("jobs/.tmp-k-model.npz", True), leave("jobs/upload-1.npz", True)
    assert sorted(jobs.sweep_temporary(folder)) == sorted([stale.name, candidate.name])
    assert fresh.exists() and kept.exists()

    files = training_jobs.training_files(folder)  # a job whose heartbeat stopped: its reap sweeps too
    files.write({"key": "k", "status": jobs.RUNNING, "started": old})
    files.heartbeat.touch()
    os.utime(files.heartbeat, (old, old))
    stale = leave(".tmp-died.npz", True)
    assert files.reap() is not None and not stale.exists()


def test_a_failing_progress_report_never_stops_the_heartbeat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 51: on a disk that filled mid-training, Dash's progress store raised ``sqlite3.OperationalError`` in the
    heartbeat thread, which died with it; the job, still running, was then reaped as dead ("its process or worker
    died"). A report that fails costs that beat's progress only: the heartbeat goes on and the job stays running."""
    import sqlite3

    monkeypatch.setattr(jobs.records, "HEARTBEAT_S", 0.05)
    files = jobs.JobFiles(tmp_path / "job.json", tmp_path / "heartbeat", tmp_path / "cancel")
    files.write({"key": "k", "status": jobs.RUNNING, "started": time.time()})
    calls = []

    def report() -> None:
        calls.append(time.time())
        raise sqlite3.OperationalError("database or disk is full")

    with files.alive(report):
        time.sleep(0.3)
        first = files.heartbeat.stat().st_mtime
        time.sleep(0.3)
        assert files.heartbeat.stat().st_mtime > first  # still beating after the reports failed
        assert len(calls) >= 4 and files.running()
