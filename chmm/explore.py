"""The explorer inline: the Dash app, with every page, on an in-memory model, in a Jupyter notebook."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from app import sessions
from chmm.views import engine_model
from engine import api
from engine.errors import CHMMError

__all__ = ["MODES", "explore"]

MODES = ("inline", "tab", "external", "jupyterlab")
"""Where the app opens (Dash's ``jupyter_mode``): in the cell's output, in a JupyterLab tab, as a link to a browser
tab of its own, or in JupyterLab's own tab."""


@functools.cache
def _data_folder() -> Path:
    """The sessions' folder of this process's explorer: one, for every call (so that a tab opened before keeps its
    session), deleted when the process ends."""
    folder = Path(tempfile.mkdtemp(prefix="chmm-explore-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def explore(
    model: Any,
    mode: str = MODES[0],
    port: int = 8050,
    host: str = "127.0.0.1",
    height: int = 800,
    corpus: str | os.PathLike[str] | None = None,
) -> str:
    """Open the explorer on ``model`` (a fitted estimator, an engine model or a model file's path): the app whose
    sessions start with this model (``corpus``: its training text, for seen/novel words and the default prefix),
    served on ``host``:``port`` from a thread of the notebook's kernel and shown as ``mode`` says. Called again with
    another model, the app's open tabs change to it (the one before stays for the Model page's Undo). Outside
    Jupyter the app is served in this process until interrupted, as ``chmm app --model`` does. Returns the
    address."""
    if mode not in MODES:
        raise CHMMError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    if not 1 <= int(port) <= 65535:
        raise CHMMError(f"the port must lie between 1 and 65535, got {port}")
    if corpus is not None and not os.path.isfile(corpus):
        raise CHMMError(f"{corpus}: no readable corpus file there")
    chosen = engine_model(model)
    folder = _data_folder()
    path = folder / f"start-{uuid.uuid4().hex}.npz"
    api.save_model(chosen, path)
    previous = os.environ.get("CHMM_START_MODEL", "")
    os.environ["CHMM_START_MODEL"] = str(path)
    os.environ["CHMM_DATA_DIR"] = str(folder / "sessions")
    if corpus is not None:
        os.environ["CHMM_START_CORPUS"] = os.path.abspath(corpus)
    else:
        os.environ.pop("CHMM_START_CORPUS", None)
    for session in sessions.session_folders(folder / "sessions"):  # the tabs open before: the new model
        copy = session / f"explore-{uuid.uuid4().hex}.npz"
        shutil.copyfile(path, copy)
        sessions.install_model(session, copy)
    if previous.startswith(str(folder)) and previous != str(path):
        Path(previous).unlink(missing_ok=True)
    from app.main import app as dash_app

    dash_app.run(host=host, port=int(port), jupyter_mode=mode, jupyter_height=height)
    return f"http://{host}:{int(port)}/"
