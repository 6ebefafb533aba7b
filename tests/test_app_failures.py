"""Failures nobody was told of (issue 51, item 3): a full disk under Score, the prune sweep and Run Infomap, a disk
that fills mid-training, and a job short of memory while it reads a model. Each is said in a sentence with its true
cause."""

from __future__ import annotations

import collections
import errno
import sqlite3
import time
from pathlib import Path

import pytest
from support import TINY_FORM

from app import forms, jobs, sessions, ui
from app.services import UserError, kept, training_jobs
from app.services import generate as generate_service
from app.services import graphs as graph_service
from app.services import models as model_service
from engine.model import archive

USAGE = collections.namedtuple("usage", "total used free")


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The data folder's disk with 1 MB free."""
    monkeypatch.setattr(sessions.shutil, "disk_usage", lambda path: USAGE(10**10, 10**10 - 2**20, 2**20))


def test_score_the_sweep_and_infomap_on_a_full_disk_are_told(folder: Path, full_disk: None) -> None:
    """On a full disk no job or request can store its answer (Dash's store of background results is on that disk):
    Score and the prune sweep said nothing, and nor did Run Infomap. A request refuses at once with the cause, and the
    shell of every page says the disk is full while it is."""
    import app.main as main

    for what in ("Scoring", "The prune sweep", "Decoding"):
        with pytest.raises(sessions.SessionError) as refused, ui.request_job(folder, what):
            raise AssertionError(f"{what} started on a full disk")
        assert str(refused.value).startswith(f"{what} cannot start: the server's disk is full (1.0 MB free")
    with pytest.raises(sessions.SessionError, match="The Infomap run cannot start: the server's disk is full"):
        graph_service.run_communities(folder, trials=1)
    sid = sessions.new_session_id()
    shown, stamp = main.show_notice(1, sid, None)
    text = str(shown.children)
    assert text.startswith("The server's disk is full (1.0 MB free): nothing can be saved") and stamp is not None
    assert text.endswith("try again later.") and ". " not in text
    assert main.show_notice(2, sid, stamp) == (main.no_update, main.no_update)  # said once, kept on the page


def test_a_disk_that_fills_mid_training_is_said_as_such(with_corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk that filled mid-training was said as "its process or worker died": the progress store raised
    ``sqlite3.OperationalError`` (not an OSError) out of the job, whose record, unwritable, was later reaped as dead.
    The job ends with the disk's sentence, and a record left running on a full disk is reaped with that cause."""
    writes = {"n": 0}
    real = training_jobs.atomic_write_json

    def filling(path: Path, value: object) -> None:
        writes["n"] += 1
        if writes["n"] > 3:  # the job's record and its first progress were written; then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, value)

    def progress_store(_state: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(training_jobs, "atomic_write_json", filling)
    monkeypatch.setattr(jobs.records, "atomic_write_json", lambda path, value: filling(path, value))
    outcome = training_jobs.run_training_job(with_corpus, forms.options_from_form(TINY_FORM), report=progress_store)
    assert outcome.status == jobs.FAILED
    assert "The server's disk is full" in outcome.message and "died" not in outcome.message
    files = training_jobs.training_files(with_corpus)
    assert files.read()["status"] == jobs.RUNNING  # its end could not be recorded
    monkeypatch.setattr(sessions.shutil, "disk_usage", lambda path: USAGE(10**10, 10**10 - 2**20, 2**20))
    reaped = files.reap(now=time.time() + 60)
    assert reaped is not None and reaped["status"] == jobs.FAILED
    assert reaped["message"].startswith("The job stopped: the server's disk filled up while it ran (1.0 MB free)")
    assert "died" not in reaped["message"]


def test_a_disk_that_filled_mid_training_is_said_so_after_space_returns(
    with_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that filled during training was reported, once space had returned, as "its process or worker died":
    the record could not be written, and the reaper looked at the disk only later. The job leaves its cause in a
    file it made at its start, overwritten in place (no block to allocate), and the reaper says it."""
    writes = {"n": 0}
    real = training_jobs.atomic_write_json

    def filling(path: Path, value: object) -> None:
        writes["n"] += 1
        if writes["n"] > 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, value)

    monkeypatch.setattr(training_jobs, "atomic_write_json", filling)
    monkeypatch.setattr(jobs.records, "atomic_write_json", lambda path, value: filling(path, value))
    outcome = training_jobs.run_training_job(with_corpus, forms.options_from_form(TINY_FORM))
    assert outcome.status == jobs.FAILED
    files = training_jobs.training_files(with_corpus)
    assert files.read()["status"] == jobs.RUNNING  # its end could not be recorded
    monkeypatch.undo()  # space has returned
    said = training_jobs.reap_dead_job(with_corpus, now=time.time() + 60)
    assert said is not None and "the server's disk filled up while it ran" in said
    assert "died" not in said and files.read()["status"] == jobs.FAILED


def test_the_progress_stores_full_disk_is_said_as_a_full_disk() -> None:
    from app import services

    assert services.describe_error(sqlite3.OperationalError("database or disk is full")) == services.DISK_FULL
    wrapped = RuntimeError("the job failed")
    wrapped.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    assert services.describe_error(wrapped) == services.DISK_FULL


def test_a_job_short_of_memory_while_reading_a_model_is_not_told_the_model_is_unreadable(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of memory while reading a model's arrays was said as "not a readable CHMM Explorer model (array T does not
    fit in memory)": the file is fine, the server is short. A model upload, a request and an Infomap run each say
    the memory instead."""
    from support import data_uri

    from app import config

    real = archive.ModelArchive.array

    def short_of_memory(self: archive.ModelArchive, name: str, *args: object, **kwargs: object) -> object:
        if name == "T":
            raise MemoryError
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(archive.ModelArchive, "array", short_of_memory)
    kept.forget()
    with pytest.raises(UserError) as upload:
        model_service.load_model_upload(
            folder, data_uri(config.SAMPLE_MODEL.read_bytes(), "application/octet-stream"), "mine.npz"
        )
    assert "readable" not in str(upload.value) and "ran out of memory" in str(upload.value)
    with pytest.raises(UserError) as request, ui.request_job(folder, "Scoring"):
        generate_service.score(folder, "alice was beginning to get very tired")
    assert "readable" not in str(request.value) and str(request.value).startswith("This ran out of the server's memory")
    with pytest.raises(MemoryError):
        graph_service.run_communities(folder, trials=1)
    record = graph_service.communities_files(folder).read()
    assert record["status"] == jobs.FAILED and "readable" not in record["message"]
    assert record["message"] == "The server ran out of memory for this, so nothing changed; try again in a moment."


def test_no_job_is_forked_while_another_thread_is_inside_the_background_store(tmp_path: Path) -> None:
    """A score of the concurrency bench never answered: its process, forked while another thread of the web worker was
    inside SQLite (a page polling its job), waited for ever for SQLite's mutex. Every call into the store and every
    fork take one lock, so a fork waits for the store call in flight, and the job it starts can use the store."""
    import threading

    manager = jobs.diskcache_manager(tmp_path / "store")
    store = manager.handle
    inside, leave = threading.Event(), threading.Event()
    real = store._cache.get

    def slow_get(*args: object, **kwargs: object) -> object:
        inside.set()
        leave.wait(10)
        return real(*args, **kwargs)

    store._cache.get = slow_get  # a poll that is inside the store
    poll = threading.Thread(target=store.get, args=("progress",))
    poll.start()
    assert inside.wait(10)
    forked: list[int] = []

    def job(result_key: str, _progress_key: str, _args: object, _context: object) -> None:
        store.set(result_key, "answered")  # the job's own use of the store (its progress, its answer)

    fork = threading.Thread(target=lambda: forked.append(manager.call_job_fn("k", job, (), {})))
    fork.start()
    fork.join(0.5)
    assert forked == []  # the fork waits for the store call in flight
    leave.set()
    fork.join(10)
    poll.join(10)
    assert len(forked) == 1
    deadline = time.monotonic() + 20
    while store.get("k") != "answered":
        assert time.monotonic() < deadline, "the forked job could not use the store"
        time.sleep(0.05)
    jobs.reap_finished_children()


def test_a_job_that_ends_while_dash_looks_at_it_is_taken_as_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load a job's process ended between Dash's check that it exists and its look at it: NoSuchProcess out of
    the page's poll, an HTTP 500, and the job's answer lost. Such a job is taken as ended."""
    import psutil

    manager = jobs.diskcache_manager(tmp_path / "store")
    gone = psutil.Popen(["true"])
    gone.wait()
    monkeypatch.setattr(psutil, "pid_exists", lambda pid: True)  # it existed a moment ago
    manager.terminate_job(gone.pid)  # no NoSuchProcess
    assert manager.job_running(gone.pid) is False


def test_no_job_is_forked_while_another_thread_compiles(tmp_path: Path) -> None:
    """An Infomap job of the concurrency bench never answered: forked while another thread of the worker compiled a
    numba kernel, it waited for ever for numba's compiler lock at its own first compilation. A fork waits for the
    compilation in flight, and the job compiles as it needs."""
    import threading

    from numba.core.compiler_lock import global_compiler_lock

    manager = jobs.diskcache_manager(tmp_path / "store")
    compiling, done = threading.Event(), threading.Event()

    def compile_for_a_while() -> None:
        with global_compiler_lock:
            compiling.set()
            done.wait(10)

    compiler = threading.Thread(target=compile_for_a_while)
    compiler.start()
    assert compiling.wait(10)
    forked: list[int] = []

    def job(result_key: str, _progress_key: str, _args: object, _context: object) -> None:
        import numba

        numba.njit(lambda x: x + 1)(1)  # a compilation of its own
        manager.handle.set(result_key, "compiled")

    fork = threading.Thread(target=lambda: forked.append(manager.call_job_fn("k", job, (), {})))
    fork.start()
    fork.join(0.5)
    assert forked == []  # the fork waits for the compilation in flight
    done.set()
    fork.join(10)
    compiler.join(10)
    assert len(forked) == 1
    deadline = time.monotonic() + 30
    while manager.handle.get("k") != "compiled":
        assert time.monotonic() < deadline, "the forked job could not compile"
        time.sleep(0.05)
    jobs.reap_finished_children()


def test_no_job_is_forked_while_another_thread_imports_a_module(tmp_path: Path) -> None:
    """A Score job of the concurrency bench never answered: forked while another thread of the worker imported a
    module (zipfile's ``cp437`` codec, at the worker's first model file), it inherited that module's import lock held
    by a thread it does not have, and waited for ever at its own import of the module. A fork waits for the import in
    flight, and the job imports the module as it needs."""
    import sys
    import threading

    (tmp_path / "slow_module_of_a_test.py").write_text("import time\ntime.sleep(1.0)\nVALUE = 7\n")
    sys.path.insert(0, str(tmp_path))
    try:
        manager = jobs.diskcache_manager(tmp_path / "store")
        importer = threading.Thread(target=lambda: __import__("slow_module_of_a_test"))
        importer.start()
        time.sleep(0.2)  # the import is in flight
        forked: list[int] = []

        def job(result_key: str, _progress_key: str, _args: object, _context: object) -> None:
            import slow_module_of_a_test  # type: ignore[import-not-found]

            manager.handle.set(result_key, slow_module_of_a_test.VALUE)

        fork = threading.Thread(target=lambda: forked.append(manager.call_job_fn("k", job, (), {})))
        fork.start()
        fork.join(0.3)
        assert forked == []  # the fork waits for the import in flight
        importer.join(10)
        fork.join(10)
        assert len(forked) == 1
        deadline = time.monotonic() + 30
        while manager.handle.get("k") != 7:
            assert time.monotonic() < deadline, "the forked job could not import the module"
            time.sleep(0.05)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("slow_module_of_a_test", None)
        jobs.reap_finished_children()
