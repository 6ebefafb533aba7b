"""The app's background jobs, called directly (no browser): the training job (progress, cancel, time and memory limits,
its record and heartbeat), the job process, the server's places and queue, and the Infomap run as a job of the
session. Every test works in its own ``CHMM_DATA_DIR``.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest
from dash import no_update
from support import TINY_FORM

from app import config, figures, forms, jobs, sessions
from app.services import UserError, training_jobs
from app.services import generate as generate_service
from app.services import graphs as graph_service
from app.services import models as model_service
from engine import training
from engine.backends import model_files
from engine.training import learning

TINY = TINY_FORM


@pytest.fixture(autouse=True)
def _isolated(data_dir: Path) -> Path:
    """Every test in its own data folder."""
    return data_dir


def current_bytes(folder: Path) -> bytes:
    return sessions.current_model_path(folder).read_bytes()


# ------------------------------------------------------------------------------------------ training jobs
def test_training_job_makes_a_new_current_model_and_writes_progress(with_corpus: Path) -> None:
    before = current_bytes(with_corpus)
    reports: list[dict] = []
    outcome = training_jobs.run_training_job(with_corpus, forms.options_from_form(TINY), report=reports.append)
    assert outcome.status == jobs.FINISHED, outcome.message
    assert outcome.key and "now the current model" in outcome.message
    model = model_files.load_model(sessions.current_model_path(with_corpus))
    assert model.n_states == 60 and model.metadata["corpus"] == "alice-short.txt"
    assert "Our Kneser-Ney n-gram on the same split: test" in outcome.message  # where the CHMM stands
    assert model.metadata["ngram"]["test_bps"] > 0
    assert sessions.previous_model_path(with_corpus).read_bytes() == before
    progress = training_jobs.read_progress(with_corpus)
    assert progress is not None and progress["status"] == jobs.FINISHED and progress["key"] == outcome.key
    assert [h["iteration"] for h in progress["history"]] == [1, 2]
    assert all(h["validation_bps"] is not None for h in progress["history"])
    assert training_jobs.read_job(with_corpus)["status"] == jobs.FINISHED and not training_jobs.job_running(with_corpus)
    assert reports and reports[-1]["status"] == jobs.FINISHED
    value, label, figure = figures.progress_view(progress)
    assert value == 100.0 and label.startswith("Finished") and len(figure.data) >= 2
    # undo goes back to the sample model, and again forward
    model_service.undo_model(with_corpus)
    assert current_bytes(with_corpus) == before
    model_service.undo_model(with_corpus)
    assert model_files.load_model(sessions.current_model_path(with_corpus)).n_states == 60


def test_a_job_whose_heartbeat_stopped_is_reported_failed(with_corpus: Path) -> None:
    """A job killed without a word (its record says running, its heartbeat is stale) becomes failed, with a
    message, its progress failed and its cancel flag raised; a job that beats is left alone."""
    before = current_bytes(with_corpus)
    record = {"key": "k1", "status": "running", "started": time.time()}
    (with_corpus / sessions.JOB).write_text(json.dumps(record))
    (with_corpus / sessions.PROGRESS).write_text(json.dumps({"key": "k1", "status": "running", "history": []}))
    (with_corpus / sessions.HEARTBEAT).touch()
    assert training_jobs.reap_dead_job(with_corpus) is None and training_jobs.job_running(with_corpus)
    later = time.time() + jobs.STALE_AFTER_S + 0.5
    message = training_jobs.reap_dead_job(with_corpus, now=later)
    assert message is not None and "died" in message and "previous model is still current" in message
    assert training_jobs.read_job(with_corpus)["status"] == jobs.FAILED
    assert training_jobs.read_progress(with_corpus)["status"] == jobs.FAILED
    assert (with_corpus / sessions.CANCEL).exists() and current_bytes(with_corpus) == before
    assert training_jobs.reap_dead_job(with_corpus, now=later) is None  # reported once
    value, label, _ = figures.progress_view(training_jobs.read_progress(with_corpus))
    assert label.startswith("Failed: The training job stopped without finishing")


def _score_past_the_limit(folder: str, answer: multiprocessing.Queue) -> None:
    """A scoring job (forked, as Dash's diskcache manager starts one) of a text too long for the request limit."""
    from app import ui

    os.environ["CHMM_MAX_REQUEST_SECONDS"] = "0.3"
    started = time.monotonic()
    try:
        with ui.request_job(Path(folder), "Scoring"):
            while True:  # as long as scoring would take, well past the limit
                generate_service.score(Path(folder), "alice was beginning to get very tired " * 200)
    except UserError as exc:
        answer.put((str(exc), time.monotonic() - started, signal_handler_restored()))


def signal_handler_restored() -> bool:
    import signal

    return signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None) and signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_a_request_job_stops_at_its_time_limit_and_says_so(folder: Path) -> None:
    """Issue 36, item 2: scoring 10^6 characters ran into gunicorn's 120 s timeout in the web worker. Scoring,
    decoding and the prune sweep now run as background jobs (``ui.request_job``), each stopped after
    CHMM_MAX_REQUEST_SECONDS with a message that says so; the timer is cleared after the job."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    answer = context.Queue()
    child = context.Process(target=_score_past_the_limit, args=(str(folder), answer))
    child.start()
    message, seconds, restored = answer.get(timeout=60)
    child.join(timeout=10)
    assert "stopped after 0.3 s" in message and "CHMM_MAX_REQUEST_SECONDS" in message
    assert 0.3 <= seconds < 5.0 and restored


def _long_job(folder: str) -> None:
    """A forked job process, as Dash's diskcache manager starts one from a gunicorn worker."""
    with jobs.job_process():
        form = TINY | {"states": 200, "iterations": 100_000, "validation": 0}
        training_jobs.run_training_job(Path(folder), forms.options_from_form(form))


def test_a_job_process_frees_the_server_port_and_ends_on_sigterm(with_corpus: Path) -> None:
    """An orphaned job kept gunicorn's listening socket (a restart failed with "Address already in use") and
    ignored SIGTERM (gunicorn's handler, inherited by the fork). The job closes inherited listeners and turns
    SIGTERM into a clean cancel."""
    import multiprocessing
    import signal
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # what gunicorn's worker does with SIGTERM
    try:
        child = multiprocessing.get_context("fork").Process(target=_long_job, args=(str(with_corpus),))
        child.start()
    finally:
        signal.signal(signal.SIGTERM, previous)
    try:
        deadline = time.time() + 60
        while (training_jobs.read_progress(with_corpus) or {}).get(
            "phase"
        ) != "training" or not training_jobs.read_progress(with_corpus).get("history"):
            assert time.time() < deadline and child.is_alive(), "the job did not start training"
            time.sleep(0.2)
        listener.close()  # the server dies; the job lives on
        with socket.create_server(("127.0.0.1", port)):  # a restart binds the same port
            pass
        assert child.is_alive()
        child.terminate()  # SIGTERM
        child.join(timeout=15)
        assert child.exitcode == 0, child.exitcode
    finally:
        if child.is_alive():
            child.kill()
    record = training_jobs.read_job(with_corpus)
    assert record["status"] == jobs.CANCELLED and "server stopped the training job" in record["message"]
    assert not list((with_corpus / sessions.JOBS).glob("*.npz"))


def _report_priority(pipe: Any) -> None:
    with jobs.job_process(memory_limit=1 << 40):
        watch = jobs.process._WATCHES[-1]
        sentinel = watch._sentinel.pid if watch._sentinel is not None else None
        sentinel_priority = os.getpriority(os.PRIO_PROCESS, sentinel) if sentinel else None
        pipe.send((os.getpriority(os.PRIO_PROCESS, 0), sentinel_priority))


def test_a_job_process_runs_below_the_server_and_leaves_it_where_it_was() -> None:
    """A job runs at :data:`app.jobs.process.JOB_NICENESS` (below the web workers, so that pages stay fast while jobs
    use every core), in its own process only (its sentinel, started first, keeps the server's priority: at nice 10
    a heartbeat came 2.6 s late beside two trainings): the process that forked it keeps its priority, and so does
    the test process when a test runs a job body in it (the suite's guard: it would otherwise run on at the jobs'
    niceness)."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    if before >= jobs.process.JOB_NICENESS:
        pytest.skip(f"this test process already runs at nice {before}")
    receive, send = multiprocessing.get_context("fork").Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(target=_report_priority, args=(send,))
    child.start()
    assert receive.poll(60), "the job process said nothing"
    job, sentinel = receive.recv()
    assert job == jobs.process.JOB_NICENESS
    assert sentinel == before  # the sentinel keeps the server's priority: its heartbeat stays on time under load
    child.join(timeout=30)
    assert child.exitcode == 0
    assert os.getpriority(os.PRIO_PROCESS, 0) == before
    with jobs.job_process(memory_limit=1 << 40):
        pass
    assert os.getpriority(os.PRIO_PROCESS, 0) == before


def _start_long_job(folder: Path) -> multiprocessing.process.BaseProcess:
    before = (training_jobs.read_job(folder) or {}).get("key")
    child = multiprocessing.get_context("fork").Process(target=_long_job, args=(str(folder),))
    child.start()
    deadline = time.time() + 60

    def training() -> bool:
        key, progress = (training_jobs.read_job(folder) or {}).get("key"), training_jobs.read_progress(folder) or {}
        return key != before and progress.get("key") == key and bool(progress.get("history"))

    while not training():
        assert time.time() < deadline and child.is_alive(), "the job did not start training"
        time.sleep(0.2)
    return child


def test_a_cancel_is_said_as_the_users_whichever_comes_first(with_corpus: Path) -> None:
    """Cancel under Celery writes the cancel flag and revokes the task (SIGTERM to the job) in two requests, in
    either order; the job must end as the user's cancel, not as "the server stopped the training job" (a CI run
    showed that message after Cancel)."""
    # the flag first, SIGTERM right after
    child = _start_long_job(with_corpus)
    training_jobs.training_files(with_corpus).request_cancel()
    child.terminate()
    child.join(timeout=15)
    assert child.exitcode == 0
    record = training_jobs.read_job(with_corpus)
    assert record["status"] == jobs.CANCELLED and record["message"].startswith("Training cancelled"), record
    # SIGTERM first: the job ends as stopped by the server; the cancel request that follows says it was the user
    child = _start_long_job(with_corpus)
    child.terminate()
    child.join(timeout=15)
    assert training_jobs.read_job(with_corpus)["message"] == training_jobs.SERVER_STOPPED
    assert training_jobs.request_cancel(with_corpus) == training_jobs.USER_CANCELLED
    assert training_jobs.read_job(with_corpus)["message"] == training_jobs.USER_CANCELLED
    assert training_jobs.read_progress(with_corpus)["message"] == training_jobs.USER_CANCELLED
    # a server stop of long ago is not rewritten by a later click
    child = _start_long_job(with_corpus)
    child.terminate()
    child.join(timeout=15)
    files = training_jobs.training_files(with_corpus)
    files.write(files.read() | {"finished": time.time() - 120})
    training_jobs.request_cancel(with_corpus)
    assert training_jobs.read_job(with_corpus)["message"] == training_jobs.SERVER_STOPPED


def test_a_cancel_between_the_jobs_check_and_its_record_is_said_as_the_users(
    with_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CI run (Celery): the job, stopped by the revoke's SIGTERM, read no cancel flag; the Cancel's request then
    raised it and recorded the user's cancel; the job's record "the server stopped the training job" came last and
    stood. The job's end now holds off the Cancel until it has written, and the Cancel reads it as just stopped."""
    real_finish = training_jobs._finish
    reached = with_corpus / "reached"

    def slow_finish(folder: Path, job: dict, progress: object, status: str, message: str) -> object:
        if message == training_jobs.SERVER_STOPPED:  # between the flag's check and the record's write
            reached.touch()
            time.sleep(1.5)
        return real_finish(folder, job, progress, status, message)

    monkeypatch.setattr(training_jobs, "_finish", slow_finish)  # the forked job inherits it
    child = _start_long_job(with_corpus)
    child.terminate()
    deadline = time.time() + 15
    while not reached.exists():
        assert time.time() < deadline and child.is_alive(), "the stopped job did not reach its record"
        time.sleep(0.02)
    assert training_jobs.request_cancel(with_corpus) == training_jobs.USER_CANCELLED
    child.join(timeout=15)
    assert child.exitcode == 0
    assert training_jobs.read_job(with_corpus)["message"] == training_jobs.USER_CANCELLED
    assert training_jobs.read_progress(with_corpus)["message"] == training_jobs.USER_CANCELLED


@pytest.mark.parametrize("which", ["maps", "map_schemas"])
def test_a_map_or_schema_cancel_is_said_as_the_users_in_either_order(folder: Path, which: str) -> None:
    """The map and schema jobs end the same way under Celery's Cancel (flag and SIGTERM): the server's stop is
    recorded as the user's cancel whether the flag came first, between the job's check and its write, or after."""
    import importlib
    import threading

    service = importlib.import_module(f"app.services.{which}")
    kind = service.MAP if which == "maps" else service.SCHEMA
    files = kind.files(folder)

    def end_of_a_stopped_job(pause: float, reached: threading.Event | None = None) -> None:
        with kind.ending(folder, service.SERVER_STOPPED, service.SERVER_STOPPED, service.USER_CANCELLED) as said:
            if reached is not None:
                reached.set()
            time.sleep(pause)
            files.write(files.read() | {"status": jobs.CANCELLED, "message": said, "finished": time.time()})

    # the Cancel between the job's check of the flag and its record
    files.write(kind.new_record(folder, "k1", "Running."))
    reached = threading.Event()
    job = threading.Thread(target=end_of_a_stopped_job, args=(1.0, reached))
    job.start()
    assert reached.wait(10)
    assert service.request_cancel(folder) == service.USER_CANCELLED
    job.join(timeout=10)
    assert files.read()["message"] == service.USER_CANCELLED
    # the flag first
    files.write(kind.new_record(folder, "k2", "Running."))
    assert service.request_cancel(folder) == service.USER_CANCELLED
    end_of_a_stopped_job(0.0)
    assert files.read()["message"] == service.USER_CANCELLED
    # SIGTERM first: the Cancel that follows says it was the user's; long after, it does not
    files.write(kind.new_record(folder, "k3", "Running."))
    end_of_a_stopped_job(0.0)
    assert files.read()["message"] == service.SERVER_STOPPED
    service.request_cancel(folder)
    assert files.read()["message"] == service.USER_CANCELLED
    files.write(kind.new_record(folder, "k4", "Running."))
    end_of_a_stopped_job(0.0)
    files.write(files.read() | {"finished": time.time() - 120})
    service.request_cancel(folder)
    assert files.read()["message"] == service.SERVER_STOPPED


def test_a_map_job_stopped_by_the_server_after_the_users_cancel_says_the_users(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The map job's own end (not only its kind's lock): stopped by the server (SIGTERM) when the user's cancel flag
    is up, its outcome and its record say the user's cancel; without the flag, the server's stop."""
    from app.services import maps

    flag = [True]

    def stopped(folder: Path, *_: object) -> tuple[str, str]:
        if flag[0]:
            maps.MAP.files(folder).request_cancel()
        return jobs.CANCELLED, maps.SERVER_STOPPED

    monkeypatch.setattr(maps, "_learn", stopped)
    request = maps.check_request(folder, "room", "0,1,2\n2,0,1", 1000, 2, 0, None, None)
    for flag[0], said in ((True, maps.USER_CANCELLED), (False, maps.SERVER_STOPPED)):
        outcome = maps.run_map_job(folder, request)
        assert outcome["status"] == jobs.CANCELLED and outcome["message"] == said
        assert maps.map_files(folder).read()["message"] == said


def test_a_cancel_while_a_map_is_installed_says_the_map_job_finished(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Cancel that comes while the map job installs its map waits for it, and says the job finished (its map is
    current); before, it recorded "cancelled; the previous map is kept" over the new map."""
    import threading

    from app.services import maps

    real_install, said = maps._install, []

    def install_then_cancel(*args: object) -> None:
        real_install(*args)
        cancel = threading.Thread(target=lambda: said.append(maps.request_cancel(folder)))
        cancel.start()
        cancel.join(timeout=0.5)  # the Cancel comes now, and waits for the job's lock

    monkeypatch.setattr(maps, "_install", install_then_cancel)
    request = maps.check_request(folder, "room", "0,1,2\n2,0,1", 1000, 2, 0, None, None)
    outcome = maps.run_map_job(folder, request)
    deadline = time.time() + 10
    while not said and time.time() < deadline:
        time.sleep(0.05)
    assert outcome["status"] == jobs.FINISHED and said == ["The map job had already finished; its map is shown."]
    assert maps.map_files(folder).read()["status"] == jobs.FINISHED
    assert maps.current_map(folder).name == outcome["key"]


def test_a_job_killed_by_a_cancel_after_its_install_is_said_as_finished(with_corpus: Path) -> None:
    """A Cancel at the moment of install was answered truly, but the job was killed (Dash's cancel) before it wrote
    its end, so the page said it "died ... the previous model is still current" over the new model. A record that
    says its model was installed is reaped as finished, and the page says the new model is current."""
    files = training_jobs.training_files(with_corpus)
    record = {"key": "k1", "status": jobs.RUNNING, "started": time.time(), "installed": True}
    files.write(record)
    files.heartbeat.touch()
    assert training_jobs.reap_dead_job(with_corpus, now=time.time() + jobs.STALE_AFTER_S + 1) is None
    ended = files.read()
    assert ended["status"] == jobs.FINISHED and "its result is current" in ended["message"]
    assert "previous model" not in ended["message"]


def test_a_progress_arriving_after_a_cancel_does_not_stand_over_it(with_corpus: Path) -> None:
    """A CI run: the running job's last progress reached the page after the Cancel's answer, and its "Training for
    3.0 s: restart 1 of 4." stood for good (the killed job sends nothing more). A late progress says how the job
    ended; a page opened again mid-job says it when the job ends."""
    import app.main  # noqa: F401  (registers the pages)
    from app.pages import train as train_page

    child = _start_long_job(with_corpus)
    try:
        session_id = f"{with_corpus.name}.{sessions._signature(with_corpus.name)}"
        progress = training_jobs.read_progress(with_corpus)
        assert progress["status"] == jobs.RUNNING
        shown = train_page.show_progress(progress, session_id)
        assert "Training for" in str(shown[3])  # running: the stage
        assert training_jobs.request_cancel(with_corpus) == training_jobs.USER_CANCELLED
        late = train_page.show_progress(progress, session_id)  # the same progress, after the Cancel
        assert "Training cancelled" in str(late[3]) and "Training for" not in str(late[3])
        followed, ended = train_page._followed(with_corpus, False)
        assert "Training cancelled" in str(ended[0])
        assert train_page._followed(with_corpus, True)[1] == (no_update,)  # while it runs, the line is left
    finally:
        child.terminate()
        child.join(timeout=15)


@pytest.mark.parametrize("which", ["COMPARISON", "MAP", "SCHEMA"])
def test_every_job_page_says_how_a_job_ended_over_a_late_progress(folder: Path, which: str) -> None:
    """The other job pages keep their status lines the same way: a running record leaves the running stage, an
    ended one of the same job is said, another job's record is not."""
    import app.main  # noqa: F401  (registers the pages)
    from app import panels

    job = getattr(panels, which)
    session_id = f"{folder.name}.{sessions._signature(folder.name)}"
    progress = {"key": "k1", "status": jobs.RUNNING, "started": time.time()}
    assert job.ended_outcome(session_id, progress) is None  # no record yet
    job.kind.files(folder).write({"key": "k1", "status": jobs.RUNNING})
    assert job.ended_outcome(session_id, progress) is None
    job.kind.files(folder).write({"key": "k1", "status": jobs.CANCELLED, "message": "The job was cancelled."})
    assert "The job was cancelled." in str(job.ended_outcome(session_id, progress))
    assert job.ended_outcome(session_id, progress | {"key": "k2"}) is None  # a later job's progress
    assert job.ended_outcome("not a session", progress) is None


def test_jobs_beyond_the_server_limit_wait_in_a_queue(
    with_corpus: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CHMM_MAX_JOBS jobs run at once on the whole server; the next one waits, shows its place, and runs when a
    slot frees; one cancelled while it waits never runs."""
    import threading

    monkeypatch.setenv("CHMM_MAX_JOBS", "1")
    other = jobs.JobSlot(data_dir, 1)
    assert other.acquire(lambda place: None, stop=lambda: True)  # another session's job holds the only slot
    outcomes: list[training_jobs.JobOutcome] = []
    worker = threading.Thread(
        target=lambda: outcomes.append(training_jobs.run_training_job(with_corpus, forms.options_from_form(TINY)))
    )
    worker.start()
    try:
        deadline = time.time() + 30
        while (training_jobs.read_progress(with_corpus) or {}).get("phase") != "queued":
            assert time.time() < deadline, "the job did not queue"
            time.sleep(0.1)
        assert "number 1 in the queue (1 jobs run at once" in training_jobs.read_progress(with_corpus)["message"]
        assert training_jobs.job_running(with_corpus) and not outcomes
        time.sleep(1.5)
        assert not outcomes  # still waiting
    finally:
        other.release()
    worker.join(timeout=60)
    assert outcomes and outcomes[0].status == jobs.FINISHED, outcomes
    # cancelled in the queue
    assert other.acquire(lambda place: None, stop=lambda: True)
    try:
        worker = threading.Thread(
            target=lambda: outcomes.append(training_jobs.run_training_job(with_corpus, forms.options_from_form(TINY)))
        )
        worker.start()
        deadline = time.time() + 30
        while (training_jobs.read_progress(with_corpus) or {}).get("phase") != "queued":
            assert time.time() < deadline, "the job did not queue"
            time.sleep(0.1)
        training_jobs.request_cancel(with_corpus)
        worker.join(timeout=30)
    finally:
        other.release()
    assert outcomes[-1].status == jobs.CANCELLED and "while it waited" in outcomes[-1].message


def _hold_slot(root: str) -> None:
    slot = jobs.JobSlot(Path(root), 1)
    assert slot.acquire(lambda place: None, stop=lambda: True)
    time.sleep(60)


def test_a_killed_job_frees_its_slot(data_dir: Path) -> None:
    import multiprocessing

    child = multiprocessing.get_context("fork").Process(target=_hold_slot, args=(str(data_dir),))
    child.start()
    slot = jobs.JobSlot(data_dir, 1)
    deadline = time.time() + 20
    while not (data_dir / jobs.SLOTS / "0").exists() or slot.acquire(lambda place: None, stop=lambda: True):
        slot.release()
        assert time.time() < deadline, "the child never took the slot"
        time.sleep(0.1)
    child.kill()
    child.join()
    assert slot.acquire(lambda place: None, stop=lambda: True)  # the kernel released the dead job's lock
    slot.release()


def test_a_job_stops_at_the_time_limit(with_corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = current_bytes(with_corpus)
    monkeypatch.setenv("CHMM_MAX_JOB_MINUTES", str(0.5 / 60))  # half a second
    form = TINY | {"iterations": 100_000, "validation": 0}
    outcome = training_jobs.run_training_job(with_corpus, forms.options_from_form(form))
    assert outcome.status == jobs.FAILED and "time limit of" in outcome.message
    assert "CHMM_MAX_JOB_MINUTES" in outcome.message
    assert current_bytes(with_corpus) == before


def test_running_progress_says_time_per_iteration_and_at_most_how_long_is_left() -> None:
    entry = {"train_bps": 2.5, "validation_bps": 2.6}
    progress = {
        "status": "running",
        "phase": "training",
        "max_iterations": 10,
        "history": [
            entry | {"iteration": n, "seconds": s, "validation_bps": 2.6 - 0.01 * n}
            for n, s in ((1, 9.0), (2, 3.0), (3, 3.0), (4, 3.0))
        ],
        "refit": [],
    }
    value, label, _ = figures.progress_view(progress)
    assert value == 40.0 and label.startswith("Iteration 4 of at most 10: train 2.5000 bps, validation 2.5600 bps")
    assert label.endswith("3.0 s per iteration, at most 18 s left")  # the iterations' median, 6 to go
    left = []  # one slow iteration among steady ones: the time left never steps back up
    for k in range(1, 9):
        times = [3.0, 3.0, 3.0, 3.0, 9.0, 3.0, 3.2, 2.9][:k]
        steps = [entry | {"iteration": n + 1, "seconds": t} for n, t in enumerate(times)]
        said = figures.progress_view(progress | {"history": steps})[1]
        left.append(float(said.split("at most ")[-1].removesuffix(" s left")))
    assert left == sorted(left, reverse=True) and left[0] == 27.0, left
    refit = progress | {"phase": "refit", "refit": [entry | {"iteration": 1, "seconds": 200.0}]}
    assert figures.progress_view(refit)[1].endswith("3 min 20 s per iteration, at most 10 min 0 s left")
    assert [figures.duration(s) for s in (0.42, 12.4, 185, 7800)] == ["0.4 s", "12 s", "3 min 5 s", "2 h 10 min"]


def test_cancelled_job_keeps_the_previous_model(with_corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = current_bytes(with_corpus)
    record = training_jobs._Progress.record

    def record_then_cancel(self: training_jobs._Progress, entry: object) -> None:
        record(self, entry)
        training_jobs.request_cancel(with_corpus)  # what the Cancel button does, after the first iteration

    monkeypatch.setattr(training_jobs._Progress, "record", record_then_cancel)
    outcome = training_jobs.run_training_job(with_corpus, forms.options_from_form(TINY | {"iterations": 50}))
    assert outcome.status == jobs.CANCELLED and "previous model is still current" in outcome.message
    assert current_bytes(with_corpus) == before
    progress = training_jobs.read_progress(with_corpus)
    assert progress["status"] == jobs.CANCELLED and len(progress["history"]) < 50
    value, label, _ = figures.progress_view(progress)
    assert label.startswith("Cancelled")
    # the bar as the Cancel button leaves it, whichever of the two reaches the page last (issue 51: under load the
    # job's last progress came after the button's answer, and the bar of a cancelled run stood at 0.1375)
    import app.main  # noqa: F401  (registers the pages)
    from app.pages import train as train_page

    assert value == float(train_page._cancelled("Training cancelled.")[0]) == 0.0


def test_impossible_parameters_are_refused(with_corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = current_bytes(with_corpus)
    outcome = training_jobs.run_training_job(with_corpus, forms.options_from_form(TINY | {"states": 10}))
    assert outcome.status == jobs.REFUSED and "fewer than the 27 symbols" in outcome.message
    monkeypatch.setenv("CHMM_MAX_TRAIN_MB", "1")
    options = forms.options_from_form(TINY | {"states": 2000})
    with pytest.raises(ValueError, match=r"would need about [\d.]+ MB of memory .* limit of 1.0 MB"):
        training_jobs.check_training(with_corpus, options)
    outcome = training_jobs.run_training_job(with_corpus, options)
    assert outcome.status == jobs.REFUSED and "CHMM_MAX_TRAIN_MB" in outcome.message
    assert current_bytes(with_corpus) == before


def test_training_needs_a_corpus(folder: Path) -> None:
    outcome = training_jobs.run_training_job(folder, forms.options_from_form(TINY))
    assert outcome.status == jobs.REFUSED and "No corpus" in outcome.message


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"backend": "tpu"}, "Unknown backend"),
        ({"states": 12.5}, "whole number"),
        ({"validation": 0.9}, "between 0 and 0.5"),
        ({"algorithm": "magic"}, "Unknown algorithm"),
        ({"start": "diagonal"}, "Unknown start"),
        ({"iterations": "x"}, "must be a number"),
        ({"pseudocount": 2}, "between 0 and 1"),
        ({"states": None, "validation": 0.0}, "validation share above 0"),
        ({"states": None, "budget": 0.0}, "budget in minutes must lie between"),
        ({"states": None, "budget": 10_000}, "budget in minutes must lie between"),
    ],
)
def test_form_values_are_checked(change: dict, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        forms.options_from_form(TINY | change)


def test_form_choices_on_validation() -> None:
    options = forms.options_from_form(TINY | {"states": None, "pseudocount": ""})
    assert options.states == training.AUTO and options.pseudocount == training.AUTO and options.searches
    assert options.max_memory == config.max_train_bytes()  # the automatic states stay within the memory limit
    assert options.budget == training.TrainOptions().budget  # the engine's default budget, within the job limit
    assert forms.options_from_form(TINY | {"states": None, "budget": 2.5}).budget == 2.5
    assert forms.options_from_form(TINY).start == training.TrainOptions().start  # the engine's default start
    assert forms.options_from_form(TINY | {"start": "uniform"}).start == "uniform"
    assert forms.options_from_form(TINY | {"pseudocount": 1e-3}).pseudocount == 1e-3
    assert forms.options_from_form(TINY | {"pseudocount": ""}).pseudocount == training.TrainOptions().pseudocount
    assert not forms.options_from_form(TINY).searches  # states and pseudocount given: nothing to choose


def test_progress_follows_candidates_restarts_and_the_refit(tmp_path: Path) -> None:
    progress = training_jobs._Progress(tmp_path, "k", training.TrainOptions(states=training.AUTO, algorithm="online"))
    record = learning.IterationRecord
    for candidate, restart, iteration in ((0, 0, 1), (0, 0, 2), (1, 0, 1), (1, 0, 2), (1, 0, 3), (2, 1, 1)):
        progress.record(record(iteration, 2.0, 2.1, 0.1, restart=restart, candidate=candidate))
        state = training_jobs.read_progress(tmp_path)
        assert [state["candidate"], state["restart"]] == [candidate, restart]
        assert state["history"][-1]["iteration"] == iteration and len(state["history"]) == iteration
    assert figures.progress_view(state)[1].startswith("Candidate setting 3 (the choice within 10 min), iteration 1")
    # the search's work is known only at its end: its bar runs without a value (paced on the budget, it sat at 7%
    # for a minute, then jumped to 87% when an early search ended)
    assert figures.progress_view(state)[0] is None and figures.bar_value(None) is None
    progress.record(record(1, 2.0, math.nan, 0.1, refit=True))
    state = training_jobs.read_progress(tmp_path)
    assert state["phase"] == "refit" and len(state["refit"]) == 1 and state["kept"]
    assert figures.progress_view(state)[0] >= figures.SELECTION_SHARE


def test_progress_shows_the_kept_restart_and_never_goes_back(tmp_path: Path) -> None:
    """Issue 35, defects 1 and 3: the chart showed the last restart's history (the kept model had another), the
    label said "of at most 60" with 30 iterations set, and the bar fell from 68% to 22% between restarts."""
    options = training.TrainOptions(states=100, pseudocount=1e-3, algorithm="online", iterations=30, restarts=3)
    progress = training_jobs._Progress(tmp_path, "k", options)
    record = learning.IterationRecord
    curves = {0: [2.0, 1.8, 1.7], 1: [2.1, 1.9, 1.9], 2: [2.2, 2.0, 1.95]}  # restart 0 is the best on validation
    values = []
    for restart, curve in curves.items():
        for iteration, validation in enumerate(curve, 1):
            progress.record(record(iteration, 2.0, validation, 0.1, restart=restart))
            value, label, _ = figures.progress_view(training_jobs.read_progress(tmp_path))
            values.append(value)
    assert values == sorted(values)  # the bar only moves forward across restarts
    assert label.startswith("Restart 3 of 3, iteration 3 of at most 60 (30 online EM epochs, then 30 batch EM")
    progress.record(record(1, 1.9, math.nan, 0.1, refit=True))  # the refit: the selection kept restart 0
    state = training_jobs.read_progress(tmp_path)
    assert [h["validation_bps"] for h in state["history"]] == curves[0]
    value, label, _ = figures.progress_view(state)
    assert "iteration 1 of 3 (as the kept run chose)" in label
    assert value >= values[-1]  # issue 47: the bar fell from 95% to 17% when the refit started
    progress.record(record(2, 1.9, math.nan, 0.1, refit=True))
    progress.record(record(3, 1.9, math.nan, 0.1, refit=True))
    assert value < figures.progress_view(training_jobs.read_progress(tmp_path))[0] == 100.0


def test_the_refit_counts_batch_iterations_only() -> None:
    """Issue 47: after online EM the refit repeats only the batch EM iterations that validation chose (it said "at
    most 6" and ended after 3); and the status clock runs between iterations, on the time handed with the
    progress."""
    history = [
        {"iteration": i, "train_bps": 2.0, "validation_bps": v, "seconds": 1.0, "online": i <= 3}
        for i, v in enumerate([2.0, 1.9, 1.8, 1.7, 1.6, 1.5, 1.55], 1)
    ]
    state = {"status": "running", "phase": "refit", "history": history, "refit": [history[0]], "max_iterations": 20}
    assert "iteration 1 of 3 (as the kept run chose)" in figures.progress_view(state)[1]  # 6 best - 3 online
    running = {"status": "running", "phase": "training", "started": 1000.0, "updated": 1010.0}
    assert figures.running_status(running) == "Training for 10 s: training."
    assert figures.running_status(running | {"now": 1100.0}) == "Training for 1 min 40 s: training."


def test_a_second_job_is_refused_while_one_runs(with_corpus: Path) -> None:
    (with_corpus / sessions.JOB).write_text('{"key": "other", "status": "running"}')
    (with_corpus / sessions.HEARTBEAT).touch()
    assert training_jobs.job_running(with_corpus)
    outcome = training_jobs.run_training_job(with_corpus, forms.options_from_form(TINY))
    assert outcome.status == jobs.REFUSED and "already running" in outcome.message
    assert not training_jobs.job_running(with_corpus, now=time.time() + 60)  # a silent job goes stale


def test_infomap_runs_as_a_background_job_of_the_session(folder: Path) -> None:
    """Infomap uses the same job helper as training and comparison: a record with its status, a heartbeat, and a
    second run refused while one is running."""
    files = graph_service.communities_files(folder)
    graph_service.run_communities(folder, trials=1)
    record = files.read()
    assert record["status"] == "finished" and record["finished"] >= record["started"] and not files.running()
    files.write(record | {"status": "running"})
    files.heartbeat.touch()
    with pytest.raises(UserError, match="Infomap is already running"):
        graph_service.run_communities(folder, trials=1)
    assert ("Finding communities (Infomap)", "/communities") in training_jobs.running_summary(
        folder
    )  # the navigation bar
    assert not files.running(now=time.time() + 60)  # a job killed without a word goes stale
    os.utime(files.heartbeat, (time.time() - 60, time.time() - 60))
    graph_service.run_communities(folder, trials=1)
    assert training_jobs.running_summary(folder) == []
    with pytest.raises(UserError):
        graph_service.run_communities(folder, trials="many")
    assert files.read()["status"] == "finished"  # bad settings are refused before a job starts


def test_the_status_line_follows_a_running_job() -> None:
    """Issue 35, defect 2: the status line said "Starting the training job." for a whole six-minute run."""
    running = {"status": "running", "phase": "training", "started": 100.0, "updated": 230.0, "restarts": 4}
    assert figures.running_status(running | {"finished_runs": 1}) == "Training for 2 min 10 s: restart 2 of 4."
    searching = running | {"searching": True, "candidate": 2}
    assert "choosing the states and pseudocount on validation (candidate 3)" in figures.running_status(searching)
    assert "the refit" in figures.running_status(running | {"phase": "refit"})
    assert figures.running_status(running | {"status": "finished"}) is None


def test_a_newcomer_does_not_jump_the_queue(tmp_path: Path) -> None:
    """Issue 36: a job arriving when a slot freed took it before the job that had waited in the queue."""
    waiter = tmp_path / jobs.QUEUE
    waiter.mkdir()
    (waiter / f"{time.time_ns() - 10**9:020d}-1-1").touch()  # a job that waits already (a live ticket)
    slot = jobs.JobSlot(tmp_path, 1)  # and the one slot is free
    places: list[int] = []
    assert not slot.acquire(places.append, stop=lambda: bool(places))  # it queues behind the waiter
    assert places == [2] and slot._handle is None
    for ticket in waiter.iterdir():  # the waiter took its slot and left the queue
        ticket.unlink()
    assert slot.acquire(places.append, stop=lambda: True)
    slot.release()


def _sleep_a_minute() -> None:  # a job process's stand-in (module level: the child imports it)
    time.sleep(60)


def test_a_cancelled_job_process_is_not_left_a_zombie() -> None:
    """Issue 36: cancelled jobs stayed zombie processes (24 were seen) until the next job of the web worker."""
    import multiprocess
    import psutil

    child = multiprocess.Process(target=_sleep_a_minute)
    child.start()
    child.terminate()  # what a cancel does to a Diskcache job
    deadline = time.time() + 10
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.time() < deadline:
        time.sleep(0.05)
    assert psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE  # ended, not collected
    jobs.reap_finished_children()
    assert not psutil.pid_exists(child.pid) or psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE


def test_any_request_collects_ended_job_processes(data_dir: Path) -> None:
    """Issue 36: ended job processes stayed zombies until a page's interval callback ran (a client that never polls,
    like the load bench's, left them); every request of the web worker now collects them."""
    import multiprocess
    import psutil

    from app import main

    child = multiprocess.Process(target=_sleep_a_minute)
    child.start()
    child.terminate()
    deadline = time.time() + 10
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.time() < deadline:
        time.sleep(0.05)
    assert psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE
    assert main.server.test_client().get("/_dash-layout").status_code == 200
    assert not psutil.pid_exists(child.pid) or psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE


def test_a_full_disk_is_said_at_once_with_its_cause(with_corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36, item 6: on a full disk Start showed "Starting the training job." for ever and Infomap never
    answered; both say at once that the disk is full, and nothing changes."""
    import collections

    import dash

    import app.main  # noqa: F401  (registers the pages)
    from app.pages import train as train_page

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(sessions.shutil, "disk_usage", lambda path: usage(10**10, 10**10 - 2**20, 2**20))
    before = current_bytes(with_corpus)
    outcome = training_jobs.run_training_job(with_corpus, forms.options_from_form(TINY))
    assert outcome.status == jobs.REFUSED and "the server's disk is full (1.0 MB free" in outcome.message
    assert current_bytes(with_corpus) == before
    sid = sessions.new_session_id()
    view, go = train_page.start(1, sid, *[TINY.get(name) for name, _ in train_page.FORM])
    assert view["state"] == "refused" and "disk is full" in view["message"] and go is dash.no_update
    assert not list((config.data_dir() / jobs.QUEUE).glob("*"))  # nothing queued
    with pytest.raises(sessions.SessionError, match="The Infomap run cannot start: the server's disk is full"):
        graph_service.run_communities(with_corpus, trials=1)


def test_a_job_that_died_on_a_full_disk_says_so(with_corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36, item 6: a disk that filled mid-training froze progress, then 30 s later blamed "out of memory"."""
    import collections

    record = {"key": "k1", "status": "running", "started": time.time()}
    (with_corpus / sessions.JOB).write_text(json.dumps(record))
    (with_corpus / sessions.PROGRESS).write_text(json.dumps({"key": "k1", "status": "running", "history": []}))
    (with_corpus / sessions.HEARTBEAT).touch()
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(sessions.shutil, "disk_usage", lambda path: usage(10**10, 10**10, 0))
    message = training_jobs.reap_dead_job(with_corpus, now=time.time() + jobs.STALE_AFTER_S + 0.5)
    assert message is not None and "the server's disk filled up while it ran" in message
    assert "out of memory" not in message


def test_a_crowd_pressing_start_is_told_the_server_is_busy(
    with_corpus: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36, item 5: 20 sessions pressing Start left 19 forked processes waiting (3.26 GB). Past
    CHMM_MAX_WAITING_JOBS waiting jobs, a job is refused at once with a sentence and nothing changes."""
    monkeypatch.setenv("CHMM_MAX_JOBS", "1")
    monkeypatch.setenv("CHMM_MAX_WAITING_JOBS", "2")
    held = jobs.JobSlot(data_dir, 1)
    assert held.acquire(lambda place: None, stop=lambda: False)  # a running job holds the only place
    queue = data_dir / jobs.QUEUE
    queue.mkdir(exist_ok=True)
    for n in range(2):  # two jobs wait already
        (queue / f"{time.time_ns():020d}-{n}-0").touch()
    before = current_bytes(with_corpus)
    try:
        outcome = training_jobs.run_training_job(with_corpus, forms.options_from_form(TINY))
    finally:
        held.release()
    assert outcome.status == jobs.REFUSED and outcome.message.startswith("The server is busy: 1 job(s) run")
    assert current_bytes(with_corpus) == before


def test_comparison_and_map_status_lines_follow_the_job() -> None:
    """Issue 47: the Maps and Compare status boxes stayed on "Starting..." for the whole run."""
    running = {"status": "running", "started": 1000.0, "updated": 1075.0}
    assert figures.job_status("Comparing", running, "hmm: iteration 3") == "Comparing for 1 min 15 s: hmm: iteration 3."
    assert figures.job_status("Learning the map", running | {"now": 1005.0}, "") == "Learning the map for 5.0 s."
    assert figures.job_status("Comparing", running | {"status": "finished"}, "done") is None


@pytest.mark.parametrize("kind", ["infomap", "map"])
def test_a_job_the_sentinel_killed_is_said_with_its_cause(with_corpus: Path, kind: str) -> None:
    """Issue 51: an Infomap run killed by the sentinel (past the job memory limit) left the Communities page silent:
    its cause sat in the job record, which no page read. The page's watch now reaps it and says the cause, once; a
    map job the same (it said "died" whatever the cause). Without a cause, the job died."""
    from app.pages.community import runs
    from app.services import maps as map_service

    folder = with_corpus
    files = graph_service.communities_files(folder) if kind == "infomap" else map_service.map_files(folder)

    def reap(folder: Path) -> str | None:
        if kind == "map":
            return map_service.reap_dead_job(folder)
        return graph_service.INFOMAP.reap_said(folder, "The Infomap run", "try a higher threshold", "Kept.")

    old = time.time() - 60
    cause = "it needed more than 900 MB, this server's limit per job (CHMM_MAX_JOB_MB)"
    for noted in (cause, None):
        files.write({"key": "k", "status": jobs.RUNNING, "started": old} | ({"cause": noted} if noted else {}))
        files.heartbeat.touch()
        os.utime(files.heartbeat, (old, old))
        said = reap(folder)
        assert said is not None and (cause in said if noted else jobs.DIED in said)
        assert reap(folder) is None  # said once: the record is now failed
        assert files.read()["status"] == jobs.FAILED
    if kind == "infomap":  # the page's watch: the message, the Run button back, the progress hidden
        session_id = sessions.new_session_id()
        files = graph_service.communities_files(sessions.session_folder(session_id))
        files.write({"key": "k", "status": jobs.RUNNING, "started": old, "cause": cause})
        files.heartbeat.touch()
        os.utime(files.heartbeat, (old, old))
        message, disabled, style = runs.said_when_it_died(1, session_id)
        assert cause in json.dumps(message.to_plotly_json(), default=str) and disabled is False
        assert style == {"display": "none"}
        assert runs.said_when_it_died(2, session_id) == (runs.no_update,) * 3


def test_cancel_and_install_never_cross(with_corpus: Path) -> None:
    """Issue 51: a Cancel at the moment the model was installed said "the previous model is still current" while the
    new model was current. The job installs only under the session's install hold with no cancel flag up, and marks
    its record installed there; a Cancel takes the same hold. So a Cancel first keeps the previous model (the new
    file removed), and a Cancel after the install says the new model is current and leaves the record alone."""
    folder = with_corpus
    files = training_jobs.training_files(folder)
    before = current_bytes(folder)
    trained = folder / "trained.npz"

    def running(key: str) -> None:
        files.write({"key": key, "status": jobs.RUNNING, "started": time.time()})
        files.heartbeat.touch()
        files.cancel.unlink(missing_ok=True)

    running("first")  # the Cancel comes first: nothing is installed
    assert "previous model is still current" in training_jobs.request_cancel(folder)
    trained.write_bytes(before)
    assert training_jobs.install_unless_cancelled(folder, "first", trained) is False
    assert not trained.exists() and current_bytes(folder) == before

    running("second")  # the install comes first: the Cancel after it says so
    trained.write_bytes(before)
    assert training_jobs.install_unless_cancelled(folder, "second", trained) is True
    assert files.read()["installed"] is True
    said = training_jobs.request_cancel(folder)
    assert "had already finished; its model is current" in said
    assert files.read()["status"] == jobs.RUNNING  # the job records its own end
