"""The web app as a whole, called directly (no browser): the Dash app, its layout and its pages build, the request
limits, and what the web process must not import. The app's parts are tested by what they hold:
``test_app_uploads.py``, ``test_app_sessions.py``, ``test_app_jobs.py``, ``test_app_models.py`` and
``test_app_communities.py`` (and the Compare and Maps pages in ``test_compare_page.py``, ``test_maps_page.py``).

The callbacks only unpack inputs and call ``app.services`` (the training jobs and comparisons among them),
``app.forms`` and ``app.sessions``, so these tests cover what a browser would trigger. Every test works in its own
``CHMM_DATA_DIR``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support import TINY_FORM, data_uri

from app import config, forms, sessions
from app.services import UserError
from app.services import corpus as corpus_service

TINY = TINY_FORM


@pytest.fixture(autouse=True)
def _isolated(data_dir: Path) -> Path:
    """Every test in its own data folder."""
    return data_dir


# ------------------------------------------------------------------------------------------ the Dash app
def test_dash_app_builds_with_its_pages(data_dir: Path) -> None:
    import dash

    from app import ids, main

    modules = {page["module"] for page in dash.page_registry.values()}
    assert {
        "app.pages.model",
        "app.pages.train",
        "app.pages.generate",
        "app.pages.decode",
        "app.pages.prune",
        "app.pages.export",
        "app.pages.communities",
    } <= modules
    assert {page["path"] for page in dash.page_registry.values()} >= {
        "/",
        "/train",
        "/generate",
        "/decode",
        "/prune",
        "/export",
        "/communities",
    }
    shell = main.serve_layout()
    store = shell.children[0]
    assert store.id == ids.SESSION and store.storage_type == "session" and sessions.check_session_id(store.data)
    assert main.serve_layout().children[0].data != store.data
    for page in dash.page_registry.values():
        assert page["layout"]() is not None
    assert main.server is main.app.server and main.celery_app is None
    client = main.server.test_client()
    response = client.get("/")
    assert response.status_code == 200 and b"_dash-config" in response.data and b"CHMM Explorer" in response.data
    assert client.get("/_dash-layout").status_code == 200
    assert client.get("/_dash-dependencies").status_code == 200
    for path in ("/decode", "/prune", "/export", "/communities"):
        assert client.get(path).status_code == 200


def test_browser_limits_agree_with_the_guide() -> None:
    guide = (config.REPOSITORY / "docs" / "guide.md").read_text(encoding="utf-8")
    # the proxy the guide recommends takes every request the server takes, route by route (a model of the plain
    # command once came back as HTTP 413 from a proxy sized for corpora), and no larger callback body
    callbacks = re.search(r"\n    client_max_body_size (\d+)m;", guide)
    uploads = re.search(r"location /upload/ \{ client_max_body_size (\d+)m;", guide)
    assert callbacks is not None and int(callbacks.group(1)) * config.MEGABYTE == config.max_callback_bytes()
    assert uploads is not None and int(uploads.group(1)) * config.MEGABYTE >= config.max_model_upload_bytes()
    import app.main  # noqa: F401  (registers the pages, so this test also runs alone)
    from app.pages import model as model_page
    from app.pages import train as train_page

    def upload_max(layout: object) -> list[int]:
        found = []
        stack = [layout]
        while stack:
            node = stack.pop()
            if type(node).__name__ == "Upload":
                found.append(node.max_size)
            children = getattr(node, "children", None)
            stack.extend(children if isinstance(children, list) else [children] if children is not None else [])
        return found

    assert upload_max(train_page.layout()) == [config.browser_upload_bytes(config.max_upload_bytes())]
    assert upload_max(model_page.layout()) == [config.browser_upload_bytes(config.max_model_upload_bytes())]


def test_one_byte_over_the_limit_reads_as_over(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    limit = config.max_upload_bytes()
    with pytest.raises(UserError, match=f"{limit + 1:,} bytes, the limit is {limit:,} bytes"):
        corpus_service.decode_upload(data_uri(b"a" * (limit + 1)), "big.txt", limit)


def test_web_process_does_not_import_cupy() -> None:
    import sys

    import app.main  # noqa: F401

    assert "cupy" not in sys.modules


def test_gpu_backend_is_checked_without_importing_cupy(monkeypatch) -> None:
    import sys

    from engine.backends import engines
    from engine.backends.gpu import backend

    monkeypatch.setattr(backend, "gpu_probably_available", lambda: (False, "no NVIDIA device is visible"))
    with pytest.raises(ValueError, match="GPU backend is not available here: no NVIDIA device"):
        forms.options_from_form(TINY | {"backend": "gpu"})
    monkeypatch.setattr(backend, "gpu_probably_available", lambda: (True, "present"))
    assert forms.options_from_form(TINY | {"backend": "gpu"}).backend == "gpu"
    monkeypatch.undo()
    engines.backend_status("gpu", cheap=True)
    assert "cupy" not in sys.modules
