"""The explorer inline: the Dash app, with every page, on an in-memory model, in a Jupyter notebook."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from chmm.views import engine_model
from engine import api
from engine.errors import CHMMError

__all__ = ["MODES", "explore"]

MODES = ("inline", "tab", "external", "jupyterlab")
"""Where the app opens (Dash's ``jupyter_mode``): in the cell's output, in a JupyterLab tab, as a link to a browser
tab of its own, or in JupyterLab's own tab."""


def explore(
    model: Any,
    mode: str = MODES[0],
    port: int = 8050,
    host: str = "127.0.0.1",
    height: int = 800,
    corpus: str | os.PathLike[str] | None = None,
) -> str:
    """Open the explorer on ``model`` (a fitted estimator, an engine model or a model file's path): the app every
    new browser session of which starts with this model (``corpus``: its training text, for seen/novel words and
    the default prefix), served on ``host``:``port`` from a thread of the notebook's kernel and shown as ``mode``
    says. Outside Jupyter the app is served in this process until interrupted, as ``chmm app --model`` does.
    Returns the address."""
    if mode not in MODES:
        raise CHMMError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    if not 1 <= int(port) <= 65535:
        raise CHMMError(f"the port must lie between 1 and 65535, got {port}")
    folder = Path(tempfile.mkdtemp(prefix="chmm-explore-"))
    path = folder / "model.npz"
    api.save_model(engine_model(model), path)
    os.environ["CHMM_START_MODEL"] = str(path)
    os.environ["CHMM_DATA_DIR"] = str(folder / "sessions")  # new sessions, so a browser already open starts afresh
    if corpus is not None:
        if not os.path.isfile(corpus):
            raise CHMMError(f"{corpus}: no readable corpus file there")
        os.environ["CHMM_START_CORPUS"] = os.path.abspath(corpus)
    else:
        os.environ.pop("CHMM_START_CORPUS", None)
    from app.main import app as dash_app

    dash_app.run(host=host, port=int(port), jupyter_mode=mode, jupyter_height=height)
    return f"http://{host}:{int(port)}/"
