"""Browser tests: the Dash app in headless Chromium through ``dash[testing]`` (Selenium).

The app (``app.main.app``, as built at import) is served once per module by dash's threaded test server; every test
gets a fresh ``CHMM_DATA_DIR`` and a fresh browser (so a fresh session starting on the sample model). Background
callbacks (training, Infomap) run through the app's own DiskcacheManager: each job is a forked process.

Needs Debian's ``chromium`` and ``chromium-driver`` (``/usr/bin/chromium``, ``/usr/bin/chromedriver``); the module is
skipped without them. Chromium runs as root here, hence ``--no-sandbox``.

Screenshots of the pages go to a temporary folder; set ``CHMM_SCREENSHOT_DIR`` (e.g. ``docs/screenshots``) to keep
them::

    CHMM_SCREENSHOT_DIR=docs/screenshots python -m pytest -q tests/test_browser.py
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import (  # support imports no browser package
    CHROMEDRIVER,
    CHROMIUM,
    HEIGHT,
    SHORT_TEXT,
    WIDTH,
    assert_no_errors,
    chrome_options,
    click_grid_row,
    graph_points,
    grid_rows,
    grid_script,
    grid_selected,
    open_page,
    prepare_training,
    session_folder,
    set_number,
    wait_idle,
    wait_until,
)

if not CHROMIUM or not CHROMEDRIVER:
    pytest.skip(
        "browser tests need Chromium and its driver (apt-get install chromium chromium-driver)", allow_module_level=True
    )
pytest.importorskip("selenium", reason="browser tests need dash[testing] (pip install -e '.[test]')")

from dash.testing.application_runners import ThreadedRunner  # noqa: E402
from dash.testing.composite import DashComposite  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

from app import ids, panels, sessions  # noqa: E402
from engine import api  # noqa: E402
from engine.backends import model_files  # noqa: E402

TRAINING = panels.TRAINING
"""The Train page's job panel (its component ids)."""

pytestmark = [
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:HTTPResponse.getheader:DeprecationWarning"),  # selenium 4.2 on urllib3 2
]

MAX_SHOT_HEIGHT = 1600
JOB_TIMEOUT = 180
"""Seconds for a background job (training, Infomap) to report back: a liveness bound, not a speed target. Jobs run
at nice 10, below the server, so on a machine kept busy by normal-priority work (CI beside a training) a
3-iteration job that takes seconds alone took over 60 s."""


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def dash_app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The app as ``chmm app`` serves it. Built at the first import of ``app.main``: its background cache then lies
    in the data folder of that moment (a temporary one here, unless another test module imported it first)."""
    saved = os.environ.get("CHMM_DATA_DIR")
    os.environ["CHMM_DATA_DIR"] = str(tmp_path_factory.mktemp("browser-cache"))
    try:
        from app import main
    finally:
        if saved is None:
            os.environ.pop("CHMM_DATA_DIR", None)
        else:
            os.environ["CHMM_DATA_DIR"] = saved
    return main.app


@pytest.fixture(scope="module")
def server(dash_app: Any) -> Iterator[ThreadedRunner]:
    """Dash's threaded test server, with the dev tools' prop checks on (errors land in the renderer's store)."""
    with ThreadedRunner() as runner:
        runner.start(
            dash_app,
            start_timeout=10,
            dev_tools_ui=True,
            dev_tools_props_check=True,
            dev_tools_hot_reload=False,
            dev_tools_silence_routes_logging=True,
        )
        yield runner


@pytest.fixture
def screenshot(tmp_path: Path) -> Callable[..., Path]:
    folder = Path(os.environ.get("CHMM_SCREENSHOT_DIR") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)

    def take(browser: DashComposite, name: str, max_height: int = MAX_SHOT_HEIGHT, start: str | None = None) -> Path:
        """The whole page (up to ``max_height`` pixels) at the window's width, through Chrome's DevTools; from the
        top of the element ``start`` (a CSS selector) when given."""
        metrics = browser.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
        top = 0
        if start:
            top = int(
                browser.driver.execute_script(
                    "return document.querySelector(arguments[0]).getBoundingClientRect().top + window.scrollY;", start
                )
            )
        height = min(int(metrics["cssContentSize"]["height"]) - top, max_height)
        shot = browser.driver.execute_cdp_cmd(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": top, "width": WIDTH, "height": height, "scale": 1},
            },
        )
        path = folder / f"{name}.png"
        path.write_bytes(base64.b64decode(shot["data"]))
        assert path.stat().st_size < 300_000, f"{path} is too large for the docs"
        return path

    return take


@pytest.fixture
def browser(server: ThreadedRunner, data_dir: Path, tmp_path: Path) -> Iterator[DashComposite]:
    """A fresh headless Chromium on the app's start page; the test fails on any severe console message or Dash
    renderer error at its end."""
    options = chrome_options()
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    with DashComposite(
        server=server,
        browser="Chrome",
        headless=True,
        options=[options],
        download_path=str(downloads),
        percy_run=False,
        wait_timeout=15,
    ) as composite:
        composite.driver.set_window_size(WIDTH, HEIGHT)
        composite.server_url = server.url  # opens "/" and waits for the Dash renderer
        wait_idle(composite)
        yield composite
        assert_no_errors(composite)


# ------------------------------------------------------------------------------------------ helpers


def upload(browser: DashComposite, component: str, path: Path) -> None:
    browser.find_element(f"#{component} input[type=file]").send_keys(str(path))


# ------------------------------------------------------------------------------------------ tests
def test_every_page_opens_without_errors(browser: DashComposite, screenshot: Callable) -> None:
    import dash

    browser.wait_for_contains_text(f"#{ids.MODEL_SUMMARY}", "600")
    browser.wait_for_contains_text(f"#{ids.MODEL_BADGE}", "current model: 600 states")
    wait_until(lambda: any(graph_points(browser, ids.MODEL_CLONES_CHART)), 10, "the clones chart is empty")
    screenshot(browser, "model")
    pages = sorted(dash.page_registry.values(), key=lambda page: page.get("order") or 0)
    paths = [page["relative_path"] for page in pages]
    assert {"/", "/train", "/generate", "/decode", "/prune", "/communities", "/export"} <= set(paths)
    for page in pages:
        open_page(browser, page["relative_path"])
        assert browser.driver.title == page["title"]
        assert_no_errors(browser)
    browser.wait_for_page(browser.server_url + "/compare")  # a full load of a page other than "/" works too
    browser.wait_for_element("#_pages_content h2")
    wait_idle(browser)


def test_train_then_cancel_a_second_training(
    browser: DashComposite, data_dir: Path, tmp_path: Path, screenshot: Callable
) -> None:
    corpus = tmp_path / "alice-short.txt"
    corpus.write_text(SHORT_TEXT, encoding="utf-8")
    open_page(browser, "/train")
    browser.wait_for_contains_text(f"#{ids.CORPUS_PREVIEW}", "No corpus yet")
    upload(browser, ids.CORPUS_UPLOAD, corpus)
    browser.wait_for_contains_text(f"#{ids.CORPUS_MESSAGE}", "Uploaded alice-short.txt")
    browser.wait_for_contains_text(f"#{ids.CORPUS_PREVIEW}", "27 symbols")
    sent = list((session_folder(browser, data_dir) / sessions.UPLOADS).iterdir())  # by the upload route, not base64
    assert [path.read_text(encoding="utf-8") for path in sent] == [SHORT_TEXT]
    set_number(browser, ids.TRAIN_STATES, 60)
    set_number(browser, ids.TRAIN_PSEUDOCOUNT, 1e-3)  # given: no choice on validation
    set_number(browser, ids.TRAIN_ITERATIONS, 3)
    wait_idle(browser)
    browser.find_element(f"#{TRAINING.start}").click()
    browser.wait_for_contains_text(f"#{TRAINING.status}", "Trained 60 states", timeout=JOB_TIMEOUT)
    assert "early_stopping" not in browser.find_element(f"#{TRAINING.status}").text  # stop reasons in words
    ticks = browser.driver.execute_script(
        "const g = document.querySelector(arguments[0] + ' .js-plotly-plot');"
        "return g ? Array.from(g.querySelectorAll('.xtick text')).map(t => t.textContent) : [];",
        f"#{ids.TRAIN_CHART}",
    )
    assert ticks and len(ticks) == len(set(ticks)), f"repeated iteration ticks: {ticks}"  # not "0 1 1 2 2"
    wait_until(lambda: any(graph_points(browser, ids.TRAIN_CHART)), 10, "the progress chart shows no iteration")
    browser.wait_for_contains_text(f"#{TRAINING.label}", "Finished")
    assert browser.find_element(f"#{TRAINING.bar}").get_attribute("value") == "100"
    browser.wait_for_contains_text(f"#{ids.MODEL_BADGE}", "current model: 60 states")
    wait_idle(browser)
    screenshot(browser, "train", max_height=1500)  # the form, the progress and the chart

    # a second, longer run, cancelled while it trains: the first model stays current
    set_number(browser, ids.TRAIN_STATES, 400)
    set_number(browser, ids.TRAIN_PSEUDOCOUNT, 1e-3)  # given: no choice on validation
    set_number(browser, ids.TRAIN_ITERATIONS, 2000)
    set_number(browser, ids.TRAIN_VALIDATION, 0)  # no validation text: no early stopping, it runs until cancelled
    wait_idle(browser)
    start, cancel = browser.find_element(f"#{TRAINING.start}"), browser.find_element(f"#{TRAINING.cancel}")

    def cancel_button() -> Any:
        return browser.find_element(f"#{TRAINING.cancel}")

    start.click()
    wait_until(lambda: not cancel.get_attribute("disabled"), 15, "the Cancel button was not enabled")
    assert start.get_attribute("disabled")
    browser.wait_for_contains_text(f"#{TRAINING.label}", "of at most 2000", timeout=JOB_TIMEOUT)
    # every page's navigation bar says a training runs, and links to it
    open_page(browser, "/generate")
    browser.wait_for_contains_text(f"#{ids.JOB_BADGE}", "Training: iteration", timeout=10)
    open_page(browser, "/train")
    wait_until(lambda: not cancel_button().get_attribute("disabled"), 15, "Cancel is not enabled on coming back")
    start, cancel = browser.find_element(f"#{TRAINING.start}"), cancel_button()
    # the form kept the values of the run (they were typed before it started)
    assert browser.find_element(f"#{ids.TRAIN_STATES}").get_attribute("value") == "400"
    cancel.click()
    browser.wait_for_contains_text(f"#{TRAINING.status}", "cancelled", timeout=JOB_TIMEOUT)
    # the progress line is reset, not left at "iteration N of at most 2000, ... left"
    browser.wait_for_contains_text(f"#{TRAINING.label}", "Cancelled")
    assert browser.find_element(f"#{TRAINING.bar}").get_attribute("value") == "0"
    wait_until(lambda: not browser.find_element(f"#{ids.JOB_BADGE}").text, 10, "the running-job indicator stayed")
    # both trainings overlaid on the session's chart, named by their settings
    names = lambda: browser.driver.execute_script(  # noqa: E731
        "const g = document.querySelector(arguments[0] + ' .js-plotly-plot');return g ? g.data.map(t => t.name) : [];",
        f"#{ids.TRAIN_RUNS_CHART}",
    )
    wait_until(lambda: len(names()) == 2, 10, lambda: f"the runs chart shows {names()}")
    assert names()[0].startswith("#1 60 states") and names()[1].startswith("#2 400 states")
    wait_idle(browser)
    screenshot(browser, "trainings", max_height=700, start=f"#{ids.TRAIN_RUNS_CHART}")
    wait_until(lambda: not start.get_attribute("disabled"), 15, "the Start button stayed disabled")
    wait_idle(browser)
    browser.wait_for_contains_text(f"#{ids.MODEL_BADGE}", "current model: 60 states")
    assert "alice-short.txt" in browser.find_element(f"#{ids.MODEL_BADGE}").text
    folder = session_folder(browser, data_dir)
    assert not list((folder / sessions.JOBS).glob("*.npz")), "the cancelled job left a model behind"
    assert model_files.load_model(sessions.current_model_path(folder)).n_states == 60
    # the Model page's summary: see test_opening_pages_keeps_the_current_model for why it is not read here


def test_opening_pages_keeps_the_current_model(browser: DashComposite, data_dir: Path) -> None:
    folder = session_folder(browser, data_dir)
    start = sessions.model_stamp(folder)
    assert browser.find_element(f"#{ids.MODEL_MESSAGE}").text == ""  # the start page is the Model page
    open_page(browser, "/prune")
    assert browser.find_element(f"#{ids.PRUNE_MESSAGE}").text == ""
    assert sessions.model_stamp(folder) == start
    browser.find_element(f"#{ids.PRUNE_APPLY}").click()  # a real change of model survives opening the Model page
    browser.wait_for_contains_text(f"#{ids.PRUNE_MESSAGE}", "It is now the current model")
    wait_idle(browser)
    pruned = sessions.model_stamp(folder)
    assert pruned != start
    open_page(browser, "/")
    assert browser.find_element(f"#{ids.MODEL_MESSAGE}").text == ""
    assert sessions.model_stamp(folder) == pruned
    # the header says the model is pruned; the Model page counts transitions that mean something
    browser.wait_for_contains_text(f"#{ids.MODEL_BADGE}", "pruned at 0.001")
    browser.wait_for_contains_text(f"#{ids.MODEL_SUMMARY}", "set to zero")
    assert "Next:" in browser.find_element(f"#{ids.MODEL_INTRO}").text


def test_a_file_too_large_to_upload_is_told_at_once(
    browser: DashComposite, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 51, item 2: a model over the upload's limit, dropped on the Model page, showed nothing (the drop zone
    refuses a file over its size without a word; one within it showed nothing until the server answered, 90 s for
    152 MB). The page says at once why such a file is refused, with the server's own sentence, and the model stays."""
    folder = session_folder(browser, data_dir)
    before = sessions.model_stamp(folder)
    monkeypatch.setenv("CHMM_MAX_MODEL_MB", "0.5")  # 500 kB; the drop zone takes up to 625 kB
    open_page(browser, "/train")
    open_page(browser, "/")  # the Model page laid out under that limit
    big = tmp_path / "mine.npz"
    big.write_bytes(os.urandom(1_000_000))  # over the drop zone's size: it would drop it without a word
    upload(browser, ids.MODEL_UPLOAD, big)
    said = "mine.npz is too large: 1.0 MB, the limit is 500.0 kB; `chmm prune MODEL -o SMALLER.npz` writes a smaller"
    browser.wait_for_contains_text(f"#{ids.MODEL_MESSAGE}", said, timeout=5)
    assert browser.find_element(f"#{ids.MODEL_MESSAGE} .message-error").text.endswith("raises the limit.")
    wait_idle(browser)
    middle = tmp_path / "middle.npz"
    middle.write_bytes(os.urandom(550_000))  # within the drop zone's size, over the server's: said before it is sent
    upload(browser, ids.MODEL_UPLOAD, middle)
    browser.wait_for_contains_text(f"#{ids.MODEL_MESSAGE}", "middle.npz is too large: ")  # at once, then the server
    wait_idle(browser)
    assert "550.0 kB, the limit is 500.0 kB; `chmm prune" in browser.find_element(f"#{ids.MODEL_MESSAGE}").text
    assert sessions.model_stamp(folder) == before


def test_out_of_range_numbers_get_a_message(browser: DashComposite) -> None:
    """Found by a UX review: with min/max on the inputs the browser turned -5 into None ("Enter the number of
    states.") and a negative sampling seed into the default, silently."""
    open_page(browser, "/train")
    browser.find_element(f"#{ids.CORPUS_SAMPLE_BUTTON}").click()
    browser.wait_for_contains_text(f"#{ids.CORPUS_PREVIEW}", "27 symbols")
    set_number(browser, ids.TRAIN_STATES, -5)
    browser.wait_for_contains_text(f"#{ids.TRAIN_ESTIMATE}", "must lie between 2 and")
    open_page(browser, "/generate")
    set_number(browser, ids.SAMPLE_SEED, -1)
    browser.find_element(f"#{ids.SAMPLE_BUTTON}").click()
    browser.wait_for_contains_text(f"#{ids.SAMPLE_OUTPUT}", "The seed must be a whole number from 0")


def test_a_training_job_is_followed_across_pages(browser: DashComposite) -> None:
    """Found by a UX review: a job that finished while its page was closed never reached the badge or the Model
    page, the Train page opened again mid-job offered Start (and no Cancel), and the renderer logged "ID running
    component not found in layout" every second (the job's running/progress outputs were on the page that was
    left; they are in the app shell now)."""
    prepare_training(browser, states=60, iterations=3000, validation=0)  # no early stopping: runs until cancelled
    browser.find_element(f"#{TRAINING.start}").click()
    browser.wait_for_contains_text(f"#{TRAINING.label}", "of at most 3000", timeout=JOB_TIMEOUT)
    open_page(browser, "/")
    open_page(browser, "/train")  # a new page instance while the job runs
    start, cancel = browser.find_element(f"#{TRAINING.start}"), browser.find_element(f"#{TRAINING.cancel}")
    wait_until(lambda: start.get_attribute("disabled") and not cancel.get_attribute("disabled"), 10, "Start/Cancel")
    first = browser.find_element(f"#{TRAINING.label}").text
    wait_until(lambda: browser.find_element(f"#{TRAINING.label}").text != first, 10, "no progress shown")
    cancel.click()
    browser.wait_for_contains_text(f"#{TRAINING.status}", "cancelled", timeout=JOB_TIMEOUT)
    wait_until(lambda: not start.get_attribute("disabled"), 15, "Start stayed disabled after the cancel")
    # a short job that finishes while the Model page is open: the badge follows without a reload
    browser.wait_for_contains_text(f"#{ids.MODEL_BADGE}", "current model: 600 states")
    set_number(browser, ids.TRAIN_STATES, 60)
    set_number(browser, ids.TRAIN_PSEUDOCOUNT, 1e-3)  # given: no choice on validation
    set_number(browser, ids.TRAIN_ITERATIONS, 3)
    wait_idle(browser)
    start.click()
    open_page(browser, "/")
    browser.wait_for_contains_text(f"#{ids.MODEL_BADGE}", "current model: 60 states", timeout=JOB_TIMEOUT)
    browser.wait_for_contains_text(f"#{ids.MODEL_SUMMARY}", "60")


def test_a_killed_job_is_reported_as_failed(browser: DashComposite, data_dir: Path) -> None:
    """kill -9 of the job's process: the page said "Iteration 18 of at most 500 ..." forever, also after a reload.
    Its heartbeat stops, and the page reports the job failed within 10 s, with the previous model current."""
    prepare_training(browser, states=60, iterations=3000, validation=0)
    folder = session_folder(browser, data_dir)
    before = sessions.current_model_path(folder).read_bytes()
    browser.find_element(f"#{TRAINING.start}").click()
    browser.wait_for_contains_text(f"#{TRAINING.label}", "of at most 3000", timeout=JOB_TIMEOUT)
    pid = json.loads((folder / sessions.JOB).read_text())["pid"]
    assert pid != os.getpid()
    os.kill(pid, signal.SIGKILL)
    killed = time.time()
    browser.wait_for_contains_text(f"#{TRAINING.status}", "died", timeout=10)
    assert time.time() - killed < 10
    browser.wait_for_contains_text(f"#{TRAINING.label}", "Failed")
    start = browser.find_element(f"#{TRAINING.start}")
    wait_until(lambda: not start.get_attribute("disabled"), 5, "Start stayed disabled after the job died")
    assert sessions.current_model_path(folder).read_bytes() == before
    open_page(browser, "/train")  # and after a reload
    browser.wait_for_contains_text(f"#{TRAINING.label}", "Failed")


def test_a_job_waits_for_a_place_without_a_process_and_starts_on_any_page(
    browser: DashComposite, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36: a job waiting for a place held a forked process. With the only place taken, Start queues a ticket:
    the page shows its place and offers Cancel, and no job process exists; the job starts when the place frees, on
    whatever page the tab shows then (the queue's polling and the job's callback live in the app shell)."""
    import psutil

    from app import jobs

    monkeypatch.setenv("CHMM_MAX_JOBS", "1")
    held = jobs.JobSlot(data_dir, 1)
    assert held.acquire(lambda place: None, stop=lambda: False)  # another session's job runs
    try:
        prepare_training(browser, states=60, iterations=3)
        before = {child.pid for child in psutil.Process().children(recursive=True)}
        start, cancel = browser.find_element(f"#{TRAINING.start}"), browser.find_element(f"#{TRAINING.cancel}")
        start.click()
        browser.wait_for_contains_text(f"#{TRAINING.label}", "number 1 in the queue", timeout=15)
        wait_until(lambda: not cancel.get_attribute("disabled"), 10, "Cancel was not enabled while the job waits")
        assert start.get_attribute("disabled")
        time.sleep(2)  # two turns of the queue's polling
        new = [c for c in psutil.Process().children(recursive=True) if c.pid not in before and c.is_running()]
        assert not [c for c in new if c.status() != psutil.STATUS_ZOMBIE], "the waiting job holds a process"
        open_page(browser, "/generate")
        browser.wait_for_contains_text(f"#{ids.JOB_BADGE}", "Training: waiting for a place", timeout=10)
    finally:
        held.release()
    browser.wait_for_contains_text(f"#{ids.MODEL_BADGE}", "current model: 60 states", timeout=JOB_TIMEOUT)
    open_page(browser, "/train")
    browser.wait_for_contains_text(f"#{TRAINING.label}", "Finished: Trained 60 states")
    assert not list((data_dir / jobs.QUEUE).glob("*"))


CY = (
    "const c = document.querySelector(arguments[0]);"
    "const reg = c && (c._cyreg || (c.firstElementChild || {})._cyreg);"
    "const cy = reg && reg.cy; if (!cy) { return null; }"
)


def cy_script(browser: DashComposite, component: str, body: str, *args: Any) -> Any:
    """Run ``body`` with ``cy`` bound to the Cytoscape instance of ``component`` (None while it is not drawn)."""
    return browser.driver.execute_script(CY + body, f"#{component}", *args)


def view_button(browser: DashComposite, view: str, action: str) -> Any:
    """A network view's button ("map" or "graph"; "in", "out", "fit", "png", "svg"): its id is a pattern id."""
    found = [
        b
        for b in browser.driver.find_elements("css selector", "button")
        if (b.get_attribute("id") or "").startswith("{")
        and json.loads(b.get_attribute("id")) == {"type": ids.COMMUNITIES_VIEW_BUTTON, "view": view, "action": action}
    ]
    assert len(found) == 1, (view, action, len(found))
    return found[0]


def run_infomap(browser: DashComposite, markov_time: str = "1") -> None:
    open_page(browser, "/communities")
    set_number(browser, ids.COMMUNITIES_TRIALS, 2)
    set_number(browser, ids.COMMUNITIES_MARKOV_TIME, markov_time)
    browser.find_element(f"#{ids.COMMUNITIES_RUN}").click()
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_MESSAGE}", "top modules over", timeout=JOB_TIMEOUT)
    wait_idle(browser)


def test_the_module_maps_node_limit_changes_the_modules_drawn(browser: DashComposite) -> None:
    """Issue 47, item 3: the map shows the node-limit control; 5, then 12, draws that many modules (the sample
    model's bundled run has more), with a note of the rest; the flow and degree distributions are drawn."""
    open_page(browser, "/communities")
    browser.wait_for_element(f"#{ids.COMMUNITIES_MAP_LIMIT}")
    drawn = wait_until(
        lambda: cy_script(browser, ids.COMMUNITIES_MAP, "return cy.nodes().length;"), 20, "the module map is empty"
    )
    assert drawn > 12
    for limit in (5, 12):
        set_number(browser, ids.COMMUNITIES_MAP_LIMIT, limit)
        wait_until(
            lambda limit=limit: cy_script(browser, ids.COMMUNITIES_MAP, "return cy.nodes().length;") == limit,
            20,
            lambda: f"the map draws {cy_script(browser, ids.COMMUNITIES_MAP, 'return cy.nodes().length;')} modules",
        )
        browser.wait_for_contains_text(
            f"#{ids.COMMUNITIES_MAP_NOTE}", f"Showing the {limit} modules with the most flow"
        )
    wait_until(lambda: graph_points(browser, ids.COMMUNITIES_DISTRIBUTIONS)[:1] == [drawn], 20, "no distributions")
    # a searched word's path: its modules marked and brought into view, closer than the whole map's fit
    set_number(browser, ids.COMMUNITIES_MAP_LIMIT, 100)
    wait_until(lambda: cy_script(browser, ids.COMMUNITIES_MAP, "return cy.nodes().length;") == drawn, 20, "no map")
    fit = cy_script(browser, ids.COMMUNITIES_MAP, "cy.fit(undefined, 20); return cy.zoom();")
    set_number(browser, ids.COMMUNITIES_SEARCH, "alice")
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_SEARCH_RESULT}", "Modules on the path")
    in_view = (
        "const marked = cy.nodes().filter(n => n.style('border-width') === '5px');"
        "return [cy.zoom(), marked.length, marked.every(n => { const p = n.renderedPosition();"
        " return p.x >= 0 && p.y >= 0 && p.x <= cy.width() && p.y <= cy.height(); })];"
    )
    wait_until(
        lambda: (lambda z: z[0] > fit * 1.01 and z[1] > 0 and z[2])(cy_script(browser, ids.COMMUNITIES_MAP, in_view)),
        20,
        lambda: f"the path is not in view: {cy_script(browser, ids.COMMUNITIES_MAP, in_view)}, fit zoom {fit}",
    )
    assert_no_errors(browser)


def test_communities_module_map_subgraph_and_inspection(browser: DashComposite, screenshot: Callable) -> None:
    run_infomap(browser)
    # the module map: one node per top module, a note that Infomap's result is flat (the sample model's is)
    modules = wait_until(
        lambda: cy_script(browser, ids.COMMUNITIES_MAP, "return cy.nodes().length;"), 10, "the module map is empty"
    )
    rows = wait_until(lambda: len(grid_rows(browser, ids.COMMUNITIES_TABLE)), 10, "the module table is empty")
    assert modules == rows  # every module of the level has its row (the grid scrolls them; no page of 15)
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_MAP_NOTE}", "the result is flat")
    assert cy_script(browser, ids.COMMUNITIES_MAP, "return cy.edges().length;") > 0
    # clicking a module on the map opens its subgraph
    first = cy_script(
        browser, ids.COMMUNITIES_MAP, "const n = cy.nodes().max(x => x.data('flow')).ele; n.emit('tap'); return n.id();"
    )
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_DETAIL}", f"{first}:")
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_DETAIL}", "Generalized words")
    nodes = wait_until(
        lambda: cy_script(browser, ids.COMMUNITIES_GRAPH, "return cy.nodes().length;"), 10, "no subgraph"
    )
    assert nodes > 0 and browser.find_elements(f"#{ids.COMMUNITIES_GRAPH} canvas")
    # inspecting a clone and a transition
    label = cy_script(browser, ids.COMMUNITIES_GRAPH, "const n = cy.nodes()[0]; n.emit('tap'); return n.data('label');")
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_INSPECT}", f"Clone {label}")
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_INSPECT}", "Most probable next clones")
    assert cy_script(browser, ids.COMMUNITIES_GRAPH, "return cy.edges().length;") > 0
    cy_script(browser, ids.COMMUNITIES_GRAPH, "cy.edges()[0].emit('tap'); return 1;")
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_INSPECT}", "Probability (T)")
    # hovering another clone shows its character and flow as the subgraph's data carry them
    last_node = "const n = cy.nodes()[cy.nodes().length - 1]; n.emit('mouseover'); return n.data();"
    hovered = cy_script(browser, ids.COMMUNITIES_GRAPH, last_node)
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_INSPECT}", f"Clone {hovered['label']}")
    inspector = browser.find_element(f"#{ids.COMMUNITIES_INSPECT}").text
    assert f"{hovered['flow']:.4g}" in inspector and f"state {hovered['state']}" in inspector
    rank = hovered["label"].rsplit(":", 1)[1]  # issue 35: clone h:21 read "Clone 22 of its character's clones"
    assert f"number {rank} of its character's clones, from 0 as in its label" in inspector
    assert "Where its flow comes from" in inspector
    # the view's buttons: zoom in changes the zoom, fit brings the whole subgraph back into the canvas
    before = cy_script(browser, ids.COMMUNITIES_GRAPH, "return cy.zoom();")
    view_button(browser, "graph", "in").click()
    wait_until(lambda: cy_script(browser, ids.COMMUNITIES_GRAPH, "return cy.zoom();") > before * 1.1, 10, "no zoom")
    view_button(browser, "graph", "fit").click()
    wait_until(
        lambda: cy_script(
            browser,
            ids.COMMUNITIES_GRAPH,
            "const b = cy.elements().renderedBoundingBox(); "
            "return b.x1 >= -1 && b.y1 >= -1 && b.x2 <= cy.width() + 1 && b.y2 <= cy.height() + 1;",
        ),
        10,
        lambda: (
            "fit left the subgraph outside the canvas: "
            + str(cy_script(browser, ids.COMMUNITIES_GRAPH, "return [cy.elements().renderedBoundingBox(), cy.zoom()];"))
        ),
    )
    # SVG and full-graph PNG downloads (issue 35, defect 4: SVG did nothing, cy.svg was not a function)
    downloads = Path(browser.download_path)
    assert cy_script(browser, ids.COMMUNITIES_GRAPH, "return typeof cy.svg;") == "function"
    for kind in ("svg", "png"):
        view_button(browser, "graph", kind).click()
        wait_until(
            lambda kind=kind: [p for p in downloads.glob(f"module-subgraph-*.{kind}") if p.stat().st_size > 0],
            15,
            lambda kind=kind: f"no {kind} download in {sorted(p.name for p in downloads.iterdir())}",
        )
    svg = next(downloads.glob("module-subgraph-*.svg")).read_text(encoding="utf-8")
    assert "<svg" in svg
    screenshot(browser, "communities", max_height=1500)  # the run, the search box and the module map
    screenshot(browser, "module", max_height=1000, start=f"#{ids.COMMUNITIES_GRAPH_NOTE}")
    # the tables (issue 35): the open module's clones and transitions; a clone selected in the table is marked in
    # the subgraph, and a clone clicked in the subgraph is selected in the table
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_TABLES_NOTE}", "clones and")
    clones = wait_until(lambda: grid_rows(browser, ids.COMMUNITIES_CLONE_TABLE), 10, "the clone table is empty")
    click_grid_row(browser, ids.COMMUNITIES_CLONE_TABLE, clones[0]["clone"])
    red = "return cy.nodes().filter(n => n.style('border-color') === 'rgb(214,39,40)').length;"
    wait_until(lambda: cy_script(browser, ids.COMMUNITIES_GRAPH, red) == 1, 10, "the selected clone is not marked")
    tapped = cy_script(browser, ids.COMMUNITIES_GRAPH, "const n = cy.nodes()[1]; n.emit('tap'); return n.data('label')")
    wait_until(
        lambda: grid_selected(browser, ids.COMMUNITIES_CLONE_TABLE) == [tapped], 10, "the clicked clone is not selected"
    )
    # every transition of the module is a row of the grid (its rows come from the server a block at a time)
    edges = wait_until(
        lambda: grid_script(browser, ids.COMMUNITIES_EDGE_TABLE, "return api.getDisplayedRowCount();"), 10, "no rows"
    )
    assert edges > 0 and str(edges) in browser.find_element(f"#{ids.COMMUNITIES_TABLES_NOTE}").text.replace(",", "")
    assert 0 < len(grid_rows(browser, ids.COMMUNITIES_EDGE_TABLE)) <= edges
    screenshot(browser, "tables", max_height=900, start=f"#{ids.COMMUNITIES_TABLES_NOTE}")
    # control (issue 35): a circular layout, transitions filtered by T, clones sized by flow, a clone found by label
    before = cy_script(browser, ids.COMMUNITIES_GRAPH, "return cy.nodes().map(n => n.position('x'));")
    browser.select_dcc_dropdown(f"#{ids.COMMUNITIES_GRAPH_LAYOUT}", "circular, by (sub)module")
    wait_until(
        lambda: cy_script(browser, ids.COMMUNITIES_GRAPH, "return cy.nodes().map(n => n.position('x'));") != before,
        10,
        "the layout did not change",
    )
    shown = "return cy.edges().filter(e => e.style('display') !== 'none').length;"
    every = cy_script(browser, ids.COMMUNITIES_GRAPH, shown)
    set_number(browser, ids.COMMUNITIES_EDGE_MIN, "0.3")
    wait_until(lambda: cy_script(browser, ids.COMMUNITIES_GRAPH, shown) < every, 10, "no transition was hidden")
    browser.select_dcc_dropdown(f"#{ids.COMMUNITIES_NODE_SIZE}", "by flow")
    widths = "return new Set(cy.nodes().map(n => n.style('width'))).size;"
    wait_until(lambda: cy_script(browser, ids.COMMUNITIES_GRAPH, widths) > 1, 10, "the clones are not sized by flow")
    browser.select_dcc_dropdown(f"#{ids.COMMUNITIES_NODE_COLOUR}", "by flow")
    colours = "return new Set(cy.nodes().map(n => n.style('background-color'))).size;"
    wait_until(lambda: cy_script(browser, ids.COMMUNITIES_GRAPH, colours) > 2, 10, "not coloured by flow")
    sizes = "return cy.nodes().map(n => n.numericStyle('width'));"
    by_flow = cy_script(browser, ids.COMMUNITIES_GRAPH, sizes)
    browser.select_dcc_dropdown(f"#{ids.COMMUNITIES_NODE_SIZE}", "by degree")  # any numeric column of the table
    wait_until(lambda: cy_script(browser, ids.COMMUNITIES_GRAPH, sizes) != by_flow, 10, "not sized by degree")
    browser.select_dcc_dropdown(f"#{ids.COMMUNITIES_NODE_COLOUR}", "by the boundary (flow in, out)")
    wait_until(lambda: cy_script(browser, ids.COMMUNITIES_GRAPH, colours) >= 2, 10, "no boundary drawn")
    label = cy_script(browser, ids.COMMUNITIES_GRAPH, "return cy.nodes()[2].data('label');")
    box = browser.find_element(f"#{ids.COMMUNITIES_CLONE_SEARCH}")
    box.send_keys(label)
    wait_until(
        lambda: (
            cy_script(browser, ids.COMMUNITIES_GRAPH, "return cy.nodes()[2].style('border-color');") == "rgb(214,39,40)"
        ),
        10,
        "the clone found by its label is not marked",
    )
    # the module's export link opens the Export page with the module filled in
    browser.find_element(f"#{ids.COMMUNITIES_EXPORT_LINK}").click()
    browser.wait_for_element(f"#{ids.EXPORT_MODULE}")
    wait_idle(browser)
    assert browser.find_element(f"#{ids.EXPORT_MODULE}").get_attribute("value") == first
    browser.find_element(f"#{ids.EXPORT_BUTTON}").click()
    browser.wait_for_contains_text(f"#{ids.EXPORT_MESSAGE}", f"module {first}")
    # a filter that matches nothing says so (found by a UX review: an empty table without a word)
    open_page(browser, "/communities")
    box = browser.find_element(f"#{ids.COMMUNITIES_FILTER}")
    box.send_keys("qqzz")  # no Enter: it filters as one types (issue 35, defect 8)
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_TRAIL}", "no module here matches 'qqzz'")


def test_word_search_marks_the_path(browser: DashComposite, screenshot: Callable) -> None:
    run_infomap(browser)
    wait_until(lambda: cy_script(browser, ids.COMMUNITIES_MAP, "return cy.nodes().length;"), 10, "no module map")
    set_number(browser, ids.COMMUNITIES_SEARCH, "alice")
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_SEARCH_RESULT}", "Modules on the path")
    steps = browser.find_elements(f"#{ids.COMMUNITIES_SEARCH_RESULT} .path-step")
    assert "".join(s.find_element(By.CSS_SELECTOR, ".path-char").text for s in steps).strip("␣ ") == "alice"
    red = "return cy.nodes().filter(n => n.style('border-color') === 'rgb(214,39,40)').length;"
    marked = wait_until(lambda: cy_script(browser, ids.COMMUNITIES_MAP, red), 10, "no module marked on the map")
    path_modules = browser.find_elements(f"#{ids.COMMUNITIES_SEARCH_RESULT} .path-module")
    assert marked == len({b.text.split(" ")[0] for b in path_modules}) > 0
    # the map coloured by flow: a scale and its legend, the path's modules still marked
    colours = "return new Set(cy.nodes().map(n => n.style('background-color'))).size;"
    own = cy_script(browser, ids.COMMUNITIES_MAP, colours)
    browser.select_dcc_dropdown(f"#{ids.COMMUNITIES_MAP_COLOUR}", "flow (log)")
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_MAP_LEGEND}", "Colour: flow (log)")
    wait_until(lambda: cy_script(browser, ids.COMMUNITIES_MAP, colours) != own, 10, "the map kept its colours")
    assert cy_script(browser, ids.COMMUNITIES_MAP, red) == marked
    browser.select_dcc_dropdown(f"#{ids.COMMUNITIES_MAP_COLOUR}", "module (as the table)")
    # opening a module of the path shows its subgraph with the path's clones marked
    path_modules[0].click()
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_DETAIL}", path_modules[0].text.split(" ")[0] + ":")
    wait_until(lambda: cy_script(browser, ids.COMMUNITIES_GRAPH, "return cy.nodes().length;"), 10, "no subgraph")
    assert wait_until(lambda: cy_script(browser, ids.COMMUNITIES_GRAPH, red), 10, "no clone of the path marked")
    screenshot(browser, "word-search", max_height=950, start=f"#{ids.COMMUNITIES_SEARCH}")
    # another Infomap run: the path's module links follow it (issue 35, defect 5: "46 captain" opened "Module 46:
    # under" after a new run)
    before = [b.text for b in browser.find_elements(f"#{ids.COMMUNITIES_SEARCH_RESULT} .path-module")]
    set_number(browser, ids.COMMUNITIES_MARKOV_TIME, "0.5")  # on the same page: the search stays in its box
    browser.find_element(f"#{ids.COMMUNITIES_RUN}").click()
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_MESSAGE}", "levels of modules", timeout=JOB_TIMEOUT)
    assert browser.find_element(f"#{ids.COMMUNITIES_SEARCH}").get_attribute("value") == "alice"
    wait_until(
        lambda: [b.text for b in browser.find_elements(f"#{ids.COMMUNITIES_SEARCH_RESULT} .path-module")] != before,
        15,
        "the word search's module links did not follow the new Infomap run",
    )
    assert browser.find_elements(f"#{ids.COMMUNITIES_SEARCH_RESULT} .path-module")  # a result, not a blank
    # a word outside the vocabulary is read as the placeholder, and the page says so
    set_number(browser, ids.COMMUNITIES_SEARCH, "caf\u00e9!")
    result = f"#{ids.COMMUNITIES_SEARCH_RESULT}"
    browser.wait_for_contains_text(result, "read as the placeholder \u201crare\u201d: cafe")
    # text that normalises to nothing gets a sentence, not a traceback
    set_number(browser, ids.COMMUNITIES_SEARCH, "!!!")
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_SEARCH_RESULT}", "Cannot find '!!!'")


def test_multilevel_map_opens_submodules(browser: DashComposite, screenshot: Callable) -> None:
    run_infomap(browser, markov_time="0.5")
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_MESSAGE}", "levels of modules")
    # the hierarchy (issue 35): the module tree sized by flow, the code length by level, and this run beside the
    # session's run before it (the sample model's bundled one)
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_LEVELS}", "Modules of level 2")
    wait_until(
        lambda: browser.find_elements(f"#{ids.COMMUNITIES_HIERARCHY} g.treemaplayer path"), 15, "no treemap drawn"
    )
    wait_until(lambda: browser.find_elements(f"#{ids.COMMUNITIES_ALLUVIAL} g.sankey"), 15, "no alluvial drawn")
    screenshot(browser, "hierarchy", max_height=600, start=f"#{ids.COMMUNITIES_HIERARCHY}")
    parent = wait_until(
        lambda: cy_script(
            browser,
            ids.COMMUNITIES_MAP,
            "const n = cy.nodes().filter(x => x.data('submodules') > 0)[0]; if (!n) { return null; }"
            "n.emit('tap'); return [n.id(), n.data('submodules')];",
        ),
        10,
        "no module with submodules on the map",
    )
    drill = browser.find_element(f"#{ids.COMMUNITIES_DRILL}")
    wait_until(lambda: not drill.get_attribute("disabled"), 10, "Open its submodules stayed disabled")
    drill.click()
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_TRAIL}", f"{parent[0]} ")
    wait_until(
        lambda: cy_script(browser, ids.COMMUNITIES_MAP, "return cy.nodes().length;") == parent[1],
        10,
        "the map does not show the submodules",
    )
    ids_on_map = cy_script(browser, ids.COMMUNITIES_MAP, "return cy.nodes().map(n => n.id());")
    assert all(i.startswith(f"{parent[0]}:") for i in ids_on_map)


CHESTERTON = (  # The Innocence of Father Brown (public domain)
    "Between the silver ribbon of morning and the green glittering ribbon of sea, the boat touched Harwich and let "
    "loose a swarm of folk like flies, among whom the man we must follow was by no means conspicuous"
)


WHOLE_GRAPH_STATE = """
const v = document.querySelector(arguments[0]).wholeGraph;
if (!v || !v.cacheView) { return null; }
const c = v.canvas, pixels = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
let inked = 0;
for (let k = 0; k < pixels.length; k += 4) {
  if (pixels[k] < 250 || pixels[k + 1] < 250 || pixels[k + 2] < 250) { inked++; }
}
return {clones: v.n, edges: v.edges, draws: v.draws, marked: v.markedCount, inked: inked, pixels: pixels.length / 4,
        shown: v.shownCount};
"""
# a clone on the canvas: from its top left, and from its centre (where Selenium's moves start)
WHOLE_GRAPH_POINT = """
const v = document.querySelector(arguments[0]).wholeGraph, box = v.canvas.getBoundingClientRect();
const [x, y] = v.screenOf(arguments[1]);
return [x, y, x - box.width / 2, y - box.height / 2];
"""


def test_the_whole_graph_draws_every_clone_and_opens_a_clicked_clones_module(
    browser: DashComposite, data_dir: Path, screenshot: Callable
) -> None:
    """Issue 47, item 2: after an Infomap run the whole graph, drawn when asked, hands every clone of the model to
    its canvas, which draws them (pixels other than the background); a drag pans it, the mouse over a clone names
    its module, a click on it opens the module below and keeps its clones bright."""
    from selenium.webdriver.common.action_chains import ActionChains

    from app.services import graphs as graph_service
    from app.services import whole_graph as whole_service

    run_infomap(browser)
    view = f"#{ids.COMMUNITIES_WHOLE_GRAPH}"
    state = lambda: browser.driver.execute_script(WHOLE_GRAPH_STATE, view)  # noqa: E731
    assert state() is None  # nothing drawn until asked
    browser.find_element(f"#{ids.COMMUNITIES_WHOLE_SHOW}").click()
    folder = session_folder(browser, data_dir)
    n = graph_service.load_current(folder).n_states
    saved = graph_service.read_communities(folder)
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_WHOLE_NOTE}", f"{n:,} clones and the 2,000 transitions", 30)
    with_edges = wait_until(state, 15, "the whole graph is not drawn")
    assert with_edges["clones"] == n == 600 and with_edges["edges"] == 2000  # every clone, the transitions of most flow
    browser.select_dcc_dropdown(f"#{ids.COMMUNITIES_WHOLE_EDGES}", "none")
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_WHOLE_NOTE}", f"{n:,} clones and no transition")
    drawn = wait_until(lambda: (state() or {}).get("edges") == 0 and state(), 10, "the transitions are still drawn")
    assert drawn["clones"] == n and drawn["inked"] > 600, drawn  # at least a pixel a clone is not the background
    assert with_edges["inked"] > drawn["inked"]  # the transitions' lines were drawn too; the shot without (smaller)
    screenshot(browser, "whole-graph", max_height=720, start=f"#{ids.COMMUNITIES_WHOLE_NOTE}")
    canvas = browser.find_element(f"{view} canvas")
    module = max((m for m in saved["modules"] if not m["parent"]), key=lambda m: m["size"])
    clone = module["nodes"][0]
    browser.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", canvas)
    before = browser.driver.execute_script(WHOLE_GRAPH_POINT, view, clone)
    drag = ActionChains(browser.driver).move_to_element(canvas).click_and_hold()  # from the canvas's centre
    drag.move_by_offset(30, 20).move_by_offset(30, 20).release().perform()  # a drag pans: the clone moves with it
    after = browser.driver.execute_script(WHOLE_GRAPH_POINT, view, clone)
    assert [round(a - b) for a, b in zip(after[:2], before[:2], strict=True)] == [60, 40]
    zoom = "const v = document.querySelector(arguments[0]).wholeGraph; return [v.view.s / v.fitScale, v.draws];"
    scale, draws = browser.driver.execute_script(zoom, view)
    browser.driver.execute_script(  # a wheel step closer: the bitmap scaled at once, the full detail drawn soon after
        "arguments[0].dispatchEvent(new WheelEvent('wheel', {deltaY: -200, bubbles: true, cancelable: true,"
        " clientX: arguments[0].getBoundingClientRect().left + 100, clientY: arguments[0].getBoundingClientRect().top"
        " + 100}));",
        canvas,
    )
    wait_until(lambda: browser.driver.execute_script(zoom, view)[1] > draws, 5, "no full redraw after zooming")
    assert browser.driver.execute_script(zoom, view)[0] > 1.2 * scale
    browser.find_element(f"#{ids.COMMUNITIES_WHOLE_FIT}").click()  # Fit: every clone in view again
    wait_until(lambda: browser.driver.execute_script(zoom, view)[0] == 1, 5, "Fit did not bring the whole graph back")
    after = browser.driver.execute_script(WHOLE_GRAPH_POINT, view, clone)
    x, y = after[2:]  # from the canvas's centre
    ActionChains(browser.driver).move_to_element(canvas).move_by_offset(round(x), round(y)).perform()
    tip = f"{view} .whole-graph-tip"
    wait_until(
        lambda: f"module {module['id']}" in browser.find_element(tip).text,
        10,
        lambda: f"no hover label of clone {clone}: {browser.find_element(tip).text!r}",
    )
    ActionChains(browser.driver).click().perform()
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_DETAIL}", f"{module['id']}:")  # the Module card opened it
    wait_until(
        lambda: (state() or {}).get("marked") == len(module["nodes"]),
        10,
        "the clicked clone's module is not marked in the whole graph",
    )
    # the layout by transitions: the same clones, placed by their flow, with the layout's measure stated
    placed = browser.driver.execute_script(WHOLE_GRAPH_POINT, view, clone)
    browser.select_dcc_dropdown(f"#{ids.COMMUNITIES_WHOLE_LAYOUT}", index=1)
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_WHOLE_NOTE}", "placed by the flow between them", 30)
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_WHOLE_NOTE}", "times as long as the distance")
    moved = wait_until(
        lambda: browser.driver.execute_script(WHOLE_GRAPH_POINT, view, clone) != placed and state(),
        15,
        "the layout by transitions is not drawn",
    )
    assert moved["clones"] == n and moved["inked"] > 600
    screenshot(browser, "whole-graph-transitions", max_height=720, start=f"#{ids.COMMUNITIES_WHOLE_NOTE}")
    # a searched word's clone path is drawn on the canvas; zoomed in, the transitions get arrowheads
    set_number(browser, ids.COMMUNITIES_SEARCH, "alice")
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_SEARCH_RESULT}", "Modules on the path")
    path_length = "const v = document.querySelector(arguments[0]).wholeGraph; return v.path ? v.path.length : 0;"
    wait_until(lambda: browser.driver.execute_script(path_length, view) == len(" alice "), 10, "no path drawn")
    browser.select_dcc_dropdown(f"#{ids.COMMUNITIES_WHOLE_EDGES}", index=2)  # the 2,000 of most flow
    wait_until(lambda: (state() or {}).get("edges") == 2000, 30, "the transitions are not drawn")
    arrows = "const v = document.querySelector(arguments[0]).wholeGraph; return v.arrows || 0;"
    before = browser.driver.execute_script(arrows, view)
    browser.driver.execute_script(
        "const v = document.querySelector(arguments[0]).wholeGraph; v.view.s = 4 * v.fitScale; v.drawScene();", view
    )
    assert browser.driver.execute_script(arrows, view) == before + 1  # drawn with the scene at that zoom
    browser.find_element(f"#{ids.COMMUNITIES_WHOLE_FIT}").click()
    # colour by degree, size by flow: a legend of ordered bins, the canvas drawn again in the new colours
    inked = state()["inked"]
    browser.select_dcc_dropdown(f"#{ids.COMMUNITIES_WHOLE_COLOUR}", "degree")
    browser.select_dcc_dropdown(f"#{ids.COMMUNITIES_WHOLE_SIZE}", "flow")
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_WHOLE_LEGEND}", "Colour: degree", 15)
    swatches = browser.driver.find_elements(By.CSS_SELECTOR, f"#{ids.COMMUNITIES_WHOLE_LEGEND} .legend-swatch")
    assert len(swatches) >= 4
    drawn_colours = "return document.querySelector(arguments[0]).wholeGraph.colours;"
    wait_until(lambda: browser.driver.execute_script(drawn_colours, view)[0] == "#440154", 10, "not by degree")
    assert state()["inked"] != inked
    browser.select_dcc_dropdown(f"#{ids.COMMUNITIES_WHOLE_COLOUR}", "top module")
    browser.select_dcc_dropdown(f"#{ids.COMMUNITIES_WHOLE_SIZE}", "all alike")
    # the clicked clone filled in the filter's ego network: Filter shows it and its neighbours within a step
    centre_box = browser.find_element(f"#{ids.COMMUNITIES_WHOLE_CENTRE}")
    centre = int(wait_until(lambda: centre_box.get_attribute("value"), 5, "the click did not fill in the clone"))
    graph = graph_service.session_graph(folder, saved["threshold"])
    ego = api.graph.filter_clones(graph, api.graph.CloneFilter(centre=centre, steps=1))
    browser.select_dcc_dropdown(f"#{ids.COMMUNITIES_WHOLE_EDGES}", index=2)  # the 2,000 of most flow
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_WHOLE_NOTE}", f"{n:,} clones and the 2,000 transitions", 30)
    browser.find_element(".whole-graph-filters summary").click()
    browser.find_element(f"#{ids.COMMUNITIES_WHOLE_FILTER}").click()
    said = f"Showing {len(ego):,} of {n:,} clones (within 1 step of clone {centre})"
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_WHOLE_FILTER_NOTE}", said, 15)
    among = whole_service.shown_clones(folder, api.graph.CloneFilter(centre=centre, steps=1))[0]["among"]
    wait_until(
        lambda: (state() or {}).get("shown") == len(ego) < n and state()["edges"] == min(among, 2000) > 0,
        10,
        lambda: f"not {len(ego)} clones and {among} transitions shown: {state()}",
    )
    screenshot(browser, "whole-graph-ego", max_height=720, start=f"#{ids.COMMUNITIES_WHOLE_NOTE}")
    # a degree range, a k-core and the largest component instead
    centre_box.send_keys(Keys.CONTROL, "a")
    centre_box.send_keys(Keys.BACKSPACE)
    browser.find_element(f"#{ids.COMMUNITIES_WHOLE_MIN_DEGREE}").send_keys("4")
    browser.find_element(f"#{ids.COMMUNITIES_WHOLE_CORE}").send_keys("3")
    browser.find_element(f"#{ids.COMMUNITIES_WHOLE_LARGEST} input").click()
    browser.find_element(f"#{ids.COMMUNITIES_WHOLE_FILTER}").click()
    core = api.graph.filter_clones(graph, api.graph.CloneFilter(min_degree=4, core=3, largest_component=True))
    said = f"Showing {len(core):,} of {n:,} clones (degree at least 4, the 3-core, the largest component)"
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_WHOLE_FILTER_NOTE}", said, 15)
    wait_until(lambda: (state() or {}).get("shown") == len(core), 10, lambda: f"not {len(core)} shown: {state()}")
    # what is on screen, downloaded: the clones shown as GraphML (exactly those), the canvas as a PNG image
    downloads = Path(browser.download_path)
    browser.find_element(f"#{ids.COMMUNITIES_WHOLE_EXPORT}").click()
    exported = wait_until(
        lambda: [p for p in downloads.glob("clones-shown-*.graphml") if p.stat().st_size > 0], 30, "no GraphML"
    )
    import networkx

    read = networkx.read_graphml(exported[0])
    assert sorted(int(d["state"]) for _, d in read.nodes(data=True)) == core.tolist() and read.graph["filter"]
    browser.find_element(f"#{ids.COMMUNITIES_WHOLE_PNG}").click()
    image = wait_until(lambda: [p for p in downloads.glob("whole-graph*.png") if p.stat().st_size > 0], 10, "no PNG")
    assert image[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    search = browser.driver.execute_script("return window.location.search;")
    assert "whole=transitions" in search and "filter=degree%3D4-%3Bcore%3D3%3Blargest" in search  # the view's URL
    browser.driver.back()  # Back (the page drawn anew from the URL): the ego network again, in the fields too
    wait_until(lambda: (state() or {}).get("shown") == len(ego), 15, lambda: f"Back did not undo the filter: {state()}")
    centre_box = browser.find_element(f"#{ids.COMMUNITIES_WHOLE_CENTRE}")
    assert centre_box.get_attribute("value") == str(centre)
    browser.find_element(f"#{ids.COMMUNITIES_WHOLE_UNFILTER}").click()  # every clone again
    wait_until(lambda: (state() or {}).get("shown") == n, 10, lambda: f"not every clone shown: {state()}")


def test_generate_and_decode(browser: DashComposite, screenshot: Callable) -> None:
    open_page(browser, "/generate")
    prefix_box = browser.find_element(f"#{ids.SAMPLE_PREFIX}")
    wait_until(lambda: prefix_box.get_attribute("value") == "said the", 10, "the prefix is not from the model's text")
    browser.find_element(f"#{ids.SAMPLE_BUTTON}").click()
    sample = wait_until(lambda: browser.find_element(f"#{ids.SAMPLE_OUTPUT} pre").text, 15, "no sampled text appeared")
    assert len(sample) > 100 and set(sample) <= set(" abcdefghijklmnopqrstuvwxyz\n"), sample
    assert browser.find_element(f"#{ids.SAMPLE_OUTPUT} pre .prefix").text == "said the"
    marks = browser.find_elements(f"#{ids.SAMPLE_OUTPUT} mark.rare-token")  # the placeholder, marked as a token
    assert len(marks) == len(re.findall(r"(?<!\S)rare(?!\S)", sample)) > 0 and {m.text for m in marks} == {"rare"}
    browser.find_element(f"#{ids.SCORE_TEXT}").send_keys("alice was beginning to get very tired")
    browser.find_element(f"#{ids.SCORE_BUTTON}").click()
    browser.wait_for_contains_text(f"#{ids.SCORE_OUTPUT}", "bits per symbol")
    browser.wait_for_contains_text(f"#{ids.SCORE_PLACEHOLDER}", "0 of the 7 words (0%) are outside")
    shaded = browser.find_elements(f"#{ids.SCORE_SURPRISAL} span")
    assert "".join(span.text or " " for span in shaded) == "alice was beginning to get very tired"
    assert all(re.fullmatch(r"'.': \d+\.\d\d bits", span.get_attribute("title")) for span in shaded)
    # a text of another author: many words outside the vocabulary, read letter by letter (issue 35); with the
    # placeholder switched on, a warning that its BPS flatters it
    box = browser.find_element(f"#{ids.SCORE_TEXT}")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(CHESTERTON)
    browser.find_element(f"#{ids.SCORE_BUTTON}").click()
    browser.wait_for_contains_text(f"#{ids.SCORE_PLACEHOLDER}", "scored letter by letter")
    browser.find_element(f"#{ids.SCORE_PLACEHOLDER_MODE} input").click()
    browser.find_element(f"#{ids.SCORE_BUTTON}").click()
    browser.wait_for_contains_text(f"#{ids.SCORE_PLACEHOLDER}", "far from the model's own held-out text's")
    wait_idle(browser)
    screenshot(browser, "generate")

    open_page(browser, "/decode")
    original = browser.find_element(f"#{ids.DECODE_TEXT}").get_attribute("value")
    browser.find_element(f"#{ids.DECODE_SCRAMBLE}").click()
    browser.wait_for_contains_text(f"#{ids.DECODE_MESSAGE}", "Scrambled")
    scrambled = browser.find_element(f"#{ids.DECODE_TEXT}").get_attribute("value")
    assert scrambled and scrambled != original
    browser.find_element(f"#{ids.DECODE_BUTTON}").click()
    browser.wait_for_contains_text(f"#{ids.DECODE_OUTPUT}", "character(s) changed")
    decoded = browser.find_elements(f"#{ids.DECODE_OUTPUT} pre")
    assert len(decoded) == 3 and decoded[1].text.strip() and decoded[1].text != decoded[0].text  # + the original
    changed = re.search(r"([\d,]+) character\(s\) changed", browser.find_element(f"#{ids.DECODE_OUTPUT}").text)
    assert changed and int(changed.group(1).replace(",", "")) > 0
    assert browser.find_elements(f"#{ids.DECODE_OUTPUT} mark.changed")
    truth = re.sub(r"[^a-z ]", "", original.lower()).split()
    assert decoded[2].text.split() == truth
    right = [sum(a == b for a, b in zip(pre.text.split(), truth, strict=False)) for pre in decoded[:2]]
    assert right[1] > right[0], f"decoding did not bring back words: {right} of {len(truth)}"
    restored = re.search(r"Restored (\d+) of (\d+) words", browser.find_element(f"#{ids.DECODE_RESTORED}").text)
    assert restored and (int(restored.group(1)), int(restored.group(2))) == (right[1], len(truth))
    wait_idle(browser)
    screenshot(browser, "decode")


def test_prune_sweep_and_graphml_export(browser: DashComposite, screenshot: Callable) -> None:
    open_page(browser, "/prune")
    browser.find_element(f"#{ids.PRUNE_SWEEP_BUTTON}").click()
    browser.wait_for_contains_text(f"#{ids.PRUNE_SWEEP_MESSAGE}", "thresholds scored", timeout=30)
    assert any(graph_points(browser, ids.PRUNE_CHART))
    wait_idle(browser)
    screenshot(browser, "prune")
    # a typed threshold moves the slider and the ringed point of the curve
    box = browser.find_element(f"#{ids.PRUNE_THRESHOLD_TEXT}")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("3e-2", Keys.ENTER)
    browser.wait_for_contains_text(f"#{ids.PRUNE_THRESHOLD_LABEL}", "below 0.03 are removed")

    def trace_names() -> list[str]:
        script = "const g = document.querySelector(arguments[0] + ' .js-plotly-plot');"
        script += "return g ? g.data.map(t => t.name) : [];"
        return browser.driver.execute_script(script, f"#{ids.PRUNE_CHART}")

    wait_until(lambda: "threshold 3e-02" in trace_names(), 10, lambda: f"the ringed point stayed: {trace_names()}")

    open_page(browser, "/export")
    browser.find_element(f"#{ids.EXPORT_BUTTON}").click()
    downloads = Path(browser.download_path)
    exported = wait_until(
        lambda: [path for path in downloads.glob("*.graphml") if path.stat().st_size > 0],
        20,
        f"no GraphML file in {downloads}: {sorted(p.name for p in downloads.iterdir())}",
    )
    text = exported[0].read_text(encoding="utf-8")
    assert "<graphml" in text and "<node " in text and "<edge " in text
    assert not list(downloads.glob("*.crdownload"))
    browser.wait_for_contains_text(f"#{ids.EXPORT_MESSAGE}", "Exported the whole clone graph as GraphML")
    wait_idle(browser)
    screenshot(browser, "export")


def test_compare_two_learners_and_make_the_chmm_current(
    browser: DashComposite, data_dir: Path, tmp_path: Path, screenshot: Callable
) -> None:
    corpus = tmp_path / "alice-short.txt"
    corpus.write_text(SHORT_TEXT, encoding="utf-8")
    open_page(browser, "/train")
    upload(browser, ids.CORPUS_UPLOAD, corpus)
    browser.wait_for_contains_text(f"#{ids.CORPUS_MESSAGE}", "Uploaded alice-short.txt")
    open_page(browser, "/compare")
    # the session's corpus is the default once the session has one, and times are estimated from its size
    session_choice = browser.find_element(f"#{ids.COMPARE_CORPUS} input[value=session]")
    wait_until(session_choice.is_selected, 10, "the session's corpus is not the default")
    for box in browser.find_elements(f"#{ids.COMPARE_LEARNERS} input[type=checkbox]"):
        if box.get_attribute("value") not in ("ngram", "chmm") and box.is_selected():
            box.click()
    browser.wait_for_contains_text(f"#{ids.COMPARE_ESTIMATE}", "Estimated on 27,000 training symbols: CHMM about")
    # learner settings: a smaller CHMM and a lower n-gram order
    setting = '[id*="compare-setting"][id*="{learner}"][id*="{option}"]'
    for learner, option, value in (("chmm", "states", 80), ("chmm", "iterations", 3), ("ngram", "max_order", 4)):
        box = browser.find_element(setting.format(learner=learner, option=option))
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(str(value), Keys.ENTER)
    wait_idle(browser)
    browser.find_element(f"#{panels.COMPARISON.start}").click()
    browser.wait_for_contains_text(f"#{ids.COMPARE_TABLE}", "Kneser-Ney", timeout=JOB_TIMEOUT)
    wait_until(
        lambda: not browser.find_element(f"#{panels.COMPARISON.start}").get_attribute("disabled"),
        JOB_TIMEOUT,
        "the comparison did not finish",
    )
    wait_idle(browser)
    rows = grid_rows(browser, ids.COMPARE_TABLE)
    assert [row for row in rows if "Kneser-Ney" in row["learner"]], rows
    assert browser.find_elements(f"#{panels.COMPARISON.status} .message-ok"), browser.find_element(
        f"#{panels.COMPARISON.status}"
    ).text
    assert any(graph_points(browser, ids.COMPARE_CHART))
    saved = json.loads((session_folder(browser, data_dir) / "compare.json").read_text())
    assert saved["results"][0]["settings"]["states"] == 80 and saved["results"][1]["settings"]["max_order"] == 4
    # the compared CHMM becomes the current model
    make = browser.find_element(f"#{ids.COMPARE_MAKE_CURRENT}")
    wait_until(lambda: not make.get_attribute("disabled"), 10, "the make-current button stayed disabled")
    make.click()
    browser.wait_for_contains_text(f"#{panels.COMPARISON.status}", "is now the current model")
    browser.wait_for_contains_text(f"#{ids.MODEL_BADGE}", "current model: 80 states")
    screenshot(browser, "compare")


def test_maps_learn_a_room_click_a_clone_and_plan_a_route(
    browser: DashComposite, data_dir: Path, screenshot: Callable
) -> None:
    """Issue 37: type a small room, learn its map in the background, see the clones laid out like the room, click a
    clone (its place field), click a second one (the route between them, as actions, marked on the map)."""
    open_page(browser, "/maps")
    browser.wait_for_contains_text(f"#{ids.MAP_ROOM_MESSAGE}", "48 open cells, 4 observations")  # the notebook's room
    wait_until(lambda: browser.find_elements(f"#{ids.MAP_ROOM_PREVIEW} .heatmaplayer"), 10, "no room preview")
    room = browser.find_element(f"#{ids.MAP_ROOM}")
    room.send_keys(Keys.CONTROL, "a")
    room.send_keys("0,1,2,0\n2,3,1,x")
    browser.wait_for_contains_text(f"#{ids.MAP_ROOM_MESSAGE}", "line 2 holds a cell that is not a whole number")
    room.send_keys(Keys.BACKSPACE, "3\n1,0,3,2")
    browser.wait_for_contains_text(f"#{ids.MAP_ROOM_MESSAGE}", "12 open cells, 4 observations")
    set_number(browser, ids.MAP_CLONES, 3)
    set_number(browser, ids.MAP_LENGTH, 5000)
    wait_idle(browser)
    browser.find_element(f"#{panels.MAP.start}").click()
    browser.wait_for_contains_text(f"#{panels.MAP.status}", "It recovers the room", timeout=JOB_TIMEOUT)
    browser.wait_for_contains_text(f"#{ids.MAP_SUMMARY}", "12 clones used for 12 cells")
    assert browser.find_element(f"#{panels.MAP.bar}").get_attribute("value") == "100"
    wait_until(lambda: cy_script(browser, ids.MAP_GRAPH, "return cy.nodes().length;") == 12, 10, "no map drawn")
    assert cy_script(browser, ids.MAP_GRAPH, "return cy.edges().length;") == 17  # the 3 x 4 grid's edges
    # the map looks like the room: the clones' x and y take 4 and 3 values (columns and rows)
    xs = cy_script(browser, ids.MAP_GRAPH, "return cy.nodes().map(n => Math.round(n.position('x')));")
    ys = cy_script(browser, ids.MAP_GRAPH, "return cy.nodes().map(n => Math.round(n.position('y')));")
    assert len(set(xs)) == 4 and len(set(ys)) == 3
    assert (session_folder(browser, data_dir) / "map.json").is_file()
    # a click on a clone: its place field; a click on a second: the route between them
    first = cy_script(browser, ids.MAP_GRAPH, "const n = cy.nodes()[0]; n.emit('tap'); return n.data('clone');")
    browser.wait_for_contains_text(f"#{ids.MAP_FIELD_NOTE}", f"Clone {first}:")
    wait_until(lambda: browser.find_elements(f"#{ids.MAP_FIELD} .heatmaplayer"), 10, "no place field")
    browser.wait_for_contains_text(f"#{ids.MAP_ROUTE_TEXT}", "Now pick the goal")
    last = cy_script(browser, ids.MAP_GRAPH, "const n = cy.nodes()[11]; n.emit('tap'); return n.data('clone');")
    browser.wait_for_contains_text(f"#{ids.MAP_ROUTE_TEXT}", f"from clone {first} to clone {last}:")
    route = browser.find_element(f"#{ids.MAP_ROUTE_TEXT}").text
    assert re.search(r": (left|right|up|down)(, (left|right|up|down))* \(through clones [\d, ]+\)\.$", route), route
    marked = "return cy.edges().filter(e => e.style('line-color') === 'rgb(230,0,126)').length;"
    steps = route.split(": ")[-1].split(" (through")[0].count(",") + 1
    wait_until(lambda: cy_script(browser, ids.MAP_GRAPH, marked) == steps, 10, "the route is not marked on the map")
    # colour by Infomap's modules
    colour = "return cy.nodes().map(n => n.style('background-color')).join(';');"
    before = cy_script(browser, ids.MAP_GRAPH, colour)
    browser.find_element(f"#{ids.MAP_COLOUR} input[value=module]").click()
    wait_until(lambda: cy_script(browser, ids.MAP_GRAPH, colour) != before, 10, "the colours did not change")
    browser.find_element(f"#{ids.MAP_COLOUR} input[value=observation]").click()
    wait_until(lambda: cy_script(browser, ids.MAP_GRAPH, colour) == before, 10, "the colours did not come back")
    wait_idle(browser)
    screenshot(browser, "maps", max_height=900, start=f"#{ids.MAP_SUMMARY}")  # the learned map and a route
