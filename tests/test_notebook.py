"""The notebook's door: the ``chmm`` package's public names, its generated reference (docs/api.md), and the
quickstart notebook (docs/quickstart.ipynb) run in a fresh kernel: text, tokens, an event log, the graph's figures
and the explorer served from the kernel."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import chmm

ROOT = Path(__file__).resolve().parents[1]


def _docs_module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_every_public_name_exists_and_says_what_it_is() -> None:
    assert len(chmm.__all__) == len(set(chmm.__all__)) <= 20
    for name in chmm.__all__:
        assert (getattr(chmm, name).__doc__ or "").strip(), name


def test_the_api_reference_is_current() -> None:
    written = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert written == _docs_module("make_api").reference_markdown(), "docs/api.md is stale: run python docs/make_api.py"


def test_the_quickstart_notebook_is_the_one_its_script_writes() -> None:
    nbformat = pytest.importorskip("nbformat")
    written = nbformat.read(ROOT / "docs" / "quickstart.ipynb", as_version=4)
    made = _docs_module("make_quickstart").notebook()
    assert [(c.cell_type, c.source) for c in written.cells] == [(c.cell_type, c.source) for c in made.cells]


@pytest.mark.slow
def test_the_quickstart_notebook_runs() -> None:
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    book = _docs_module("make_quickstart").execute(nbformat.read(ROOT / "docs" / "quickstart.ipynb", as_version=4))
    outputs = [o for c in book.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    plots = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(plots) >= 4  # the training curves, the module map, a module's subgraph, the whole graph
    printed = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "bits per character" in printed and "bits per word" in printed
    assert printed.rstrip().endswith(" 200")  # the explorer answered from the kernel


def test_exploring_another_model_changes_the_open_tabs_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from app import config, sessions
    from app.main import app as dash_app
    from engine import api

    for name in ("CHMM_START_MODEL", "CHMM_DATA_DIR", "CHMM_START_CORPUS"):
        monkeypatch.setenv(name, "")  # restored after the test: explore sets them for its kernel
    served: list[dict] = []
    monkeypatch.setattr(dash_app, "run", lambda **kwargs: served.append(kwargs))
    first = api.load_model(config.SAMPLE_MODEL)
    url = chmm.explore(first, mode="external", port=8123)
    assert url == "http://127.0.0.1:8123/" and served[-1]["jupyter_mode"] == "external"
    root = config.data_dir()
    tab = sessions.session_folder(sessions.new_session_id(root), root)  # a browser tab's session
    assert api.load_model(sessions.current_model_path(tab)).n_states == first.n_states
    second = chmm.CHMM(states=30, pseudocount=1e-3, iterations=2, jobs=1).fit("abc abd abe " * 50)
    chmm.explore(second, mode="external", port=8123)
    assert config.data_dir() == root  # the same sessions, so the tab's session stays valid
    assert api.load_model(sessions.current_model_path(tab)).n_states == second.n_states_
    assert api.load_model(sessions.previous_model_path(tab)).n_states == first.n_states  # Undo
    with pytest.raises(chmm.CHMMError, match="unknown mode"):
        chmm.explore(second, mode="popup")
