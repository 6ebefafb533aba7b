"""The views' store of what they read (:mod:`app.services.kept`): one computation per version of the files, never
a stale value, and a bound on the bytes kept."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from app import sessions
from app.services import graphs as graph_service
from app.services import kept
from app.services import models as model_service
from app.services import tables as table_service


@pytest.fixture(autouse=True)
def _fresh(data_dir: Path) -> None:
    kept.forget()


def test_a_value_is_computed_once_per_version_of_its_files(tmp_path: Path) -> None:
    source = tmp_path / "source.txt"
    source.write_text("one")
    calls: list[str] = []

    def compute() -> str:
        calls.append(source.read_text())
        return calls[-1]

    assert kept.kept("text", [source], compute) == "one"
    assert kept.kept("text", [source], compute) == "one" and calls == ["one"]
    replacement = tmp_path / "new.txt"
    replacement.write_text("two")
    os.replace(replacement, source)  # as the app replaces files: a new inode
    assert kept.kept("text", [source], compute) == "two" and calls == ["one", "two"]
    os.utime(source, ns=(time.time_ns(), source.stat().st_mtime_ns + 1))  # rewritten in place: a new mtime
    assert kept.kept("text", [source], compute) == "two" and len(calls) == 3
    assert kept.kept("other", [source], compute) == "two" and len(calls) == 4  # another value of the same file


def test_the_store_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHMM_KEPT_MB", "1")  # 1,000,000 bytes
    source = tmp_path / "source"
    source.write_bytes(b"x")
    for n in range(5):
        kept.kept(("array", n), [source], lambda: np.zeros(30_000))  # 240 kB each
    assert kept.held_bytes() <= 1_000_000
    calls = []
    kept.kept(("array", 4), [source], lambda: calls.append(1))  # the newest stayed
    kept.kept(("array", 0), [source], lambda: calls.append(1) or np.zeros(30_000))  # the oldest went
    assert calls == [1]
    big = kept.kept("big", [source], lambda: np.zeros(200_000))  # 1.6 MB: returned, not kept
    assert big.size == 200_000 and kept.held_bytes() <= 1_000_000


def test_a_session_reads_its_model_and_run_once(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 47: the views read the model file, rebuilt its clone graph and parsed the run in every callback. Now
    a second view of the same files loads nothing; a new model (a new file) is read again."""
    graph_service.run_communities(folder, trials=1, two_level=True, seed=1, threshold="2e-3")
    module = graph_service.module_rows(graph_service.read_communities(folder))[0]["id"]
    graph_service.module_detail(folder, module)
    loads: list[Path] = []
    real = model_service.api.load_model
    monkeypatch.setattr(model_service.api, "load_model", lambda path, **kw: loads.append(path) or real(path, **kw))
    graph_service.module_detail(folder, module)
    table_service.graph_tables(folder, module)
    graph_service.find_word(folder, "alice")
    assert loads == []
    path = sessions.current_model_path(folder)
    os.utime(path, ns=(time.time_ns(), path.stat().st_mtime_ns + 1))  # the model file replaced
    assert graph_service.read_communities(folder) is None  # the run belonged to the model before
    assert model_service.view_model(folder).n_states > 0 and len(loads) == 1
