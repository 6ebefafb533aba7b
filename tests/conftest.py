"""Fixtures shared by the app's test modules (each test works in its own ``CHMM_DATA_DIR``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import ALICE, SHORT_TEXT, data_uri

MUST_RUN_IN_CI = ("test_browser.py", "test_browser_views.py", "test_browser_maps.py", "test_celery.py")
"""Modules whose skip is a failure when ``CI`` is set (``.ci/run``): the browser and the Celery end-to-end tests."""


def _skip_is_failure(report: pytest.CollectReport | pytest.TestReport) -> bool:
    return bool(os.environ.get("CI")) and report.skipped and report.nodeid.split("::")[0].endswith(MUST_RUN_IN_CI)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):  # type: ignore[no-untyped-def]
    """In CI, a browser or Celery module skipped for a missing tool fails instead (it must run there)."""
    outcome = yield
    report = outcome.get_result()
    if _skip_is_failure(report):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where it must run: {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    """In CI, a browser or Celery test that skips fails instead."""
    outcome = yield
    report = outcome.get_result()
    if _skip_is_failure(report) and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where it must run: {report.longrepr}"


@pytest.fixture(autouse=True, scope="session")
def _test_process_keeps_its_priority() -> Iterator[None]:
    """A job body that a test runs in the test process (a callback called directly) must not lower that process's
    CPU priority, or the process-wide things a job process does: every later test, and the browser and servers they
    start, would run at the jobs' niceness, starved by any normal-priority work beside the suite. A process forked
    from the test process (a job's, as the app makes them) still lowers its own; its listeners are still closed."""
    from app.jobs import process

    test_process = os.getpid()
    lower, close = process.lower_priority, process.close_inherited_listeners

    def lower_elsewhere(*args: Any, **kwargs: Any) -> None:
        if os.getpid() != test_process:
            lower(*args, **kwargs)

    def close_elsewhere() -> int:
        return close() if os.getpid() != test_process else 0

    process.lower_priority, process.close_inherited_listeners = lower_elsewhere, close_elsewhere
    yield
    process.lower_priority, process.close_inherited_listeners = lower, close


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty data folder for the app's sessions, and none of the app's limits or Redis set."""
    root = tmp_path / "data"
    monkeypatch.setenv("CHMM_DATA_DIR", str(root))
    for name in ("CHMM_MAX_UPLOAD_MB", "CHMM_MAX_TRAIN_MB", "CHMM_START_MODEL", "REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    return root


@pytest.fixture
def folder(data_dir: Path) -> Path:
    """A new session's folder (its current model is the sample model)."""
    from app import sessions

    return sessions.session_folder(sessions.new_session_id())


@pytest.fixture
def with_corpus(folder: Path) -> Path:
    """A session whose corpus is the first 30,000 characters of Alice."""
    from app.services import corpus as corpus_service

    corpus_service.store_corpus(folder, data_uri(SHORT_TEXT.encode("utf-8")), "alice-short.txt")
    return folder


@pytest.fixture(scope="session")
def alice_model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trained model of Alice (300 states, 10 iterations of batch EM on the first 40,000 training characters,
    under a second), saved once and shared by every test that needs a trained text model; read it, never change it
    (``alice_model`` loads a fresh copy for each module)."""
    from engine import training
    from engine.backends import model_files
    from engine.corpora import text

    options = training.TrainOptions(
        algorithm="em", pseudocount=1e-6, states=300, iterations=10, refit=False, max_train=40_000
    )
    path = tmp_path_factory.mktemp("shared-model") / "alice.npz"
    model_files.save_model(training.train_text(text.read_text(ALICE), options, name="carroll-alice.txt").model, path)
    return path


@pytest.fixture(scope="module")
def alice_model(alice_model_file: Path):  # type: ignore[no-untyped-def]
    """The shared model of Alice (:func:`alice_model_file`), loaded for this module."""
    from engine.backends import model_files

    return model_files.load_model(alice_model_file)
