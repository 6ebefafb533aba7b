"""What a person waits for on the Communities and Export pages, in headless Chromium, on a model of their own size.

Starts ``chmm app --model MODEL`` (the app of this checkout, and with ``--against DIR`` the app of another checkout
too, e.g. a worktree of the commit before a change: both served at once, every step timed on each in turn) and
drives a fresh browser session through what a user does, timing each step from the click to what the page shows:

* ``Infomap run``: Run Infomap, until the map's note says how many modules it drew; ``page idle``: until no callback
  is pending (the map, the tables, the hierarchy); beside them Infomap's own time, as the page's message states it;
* ``page ready``: the Communities page reloaded with a run, until it is idle;
* ``open a module``: a module button on a word's clone path, until the module card names that module, and until
  the page is idle;
* ``word search``: Find, until the clone path of that word is shown;
* ``export``: Export at the Communities page's threshold (GraphML), until the message says what it wrote;
* ``the whole graph``: "Draw the whole graph", until every clone is drawn (the canvas's renderer has drawn them, or,
  in a checkout before it, every clone is a point of the Plotly figure); then frames per second over a 90-frame drag
  (one move a frame), both with no transition chosen; then with 2,000 transitions chosen: until they are drawn, and
  the drag again;
* ``stays put``: after a second Infomap run, whether a module opened stays open 10 s later (the page reloaded
  itself every 2 s, issue 47);
* ``console errors``: the browser console's errors over the whole session.

Medians of ``--repeats`` (default 5). Prints a table; nothing is asserted (speed goals are read off the table).

With ``--layouts``, no browser: the whole graph's two layouts (``app.services.whole_graph.LAYOUTS``) computed by the
app's service for a new session on each model (Infomap run first, at the default threshold), one row per model and
layout: seconds, and the layout's quality (``engine.api.drawing.layout_quality``: ``stretch``, the flow-weighted length
of the transitions over the distance between random clones, lower is better; ``purity``, the share of each clone's five
nearest clones in its own top module, higher is better). The layout by transitions is timed twice: made, then drawn
again as another process would (nothing kept in memory; its layout kept on disk per run).

    python bench/bench_explorer.py --model /work/models/brown5000.npz
    python bench/bench_explorer.py --model M.npz --against /tmp/before   # the same steps on another checkout
    python bench/bench_explorer.py --layouts --model A.npz B.npz
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from app import ids  # noqa: E402

WORDS = ["the", "and", "father", "said", "brown", "which", "there", "little"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """``chmm app --model`` of one checkout, in its own data folder."""

    def __init__(self, checkout: Path, model: Path, name: str) -> None:
        self.name, self.port = name, free_port()
        self.data = Path(tempfile.mkdtemp(prefix=f"bench-explorer-{name}-"))
        environment = dict(os.environ, CHMM_DATA_DIR=str(self.data), PYTHONPATH=str(checkout))
        command = [sys.executable, "-c", "from engine.cli import main; raise SystemExit(main())"]
        command += ["app", "--model", str(model), "--port", str(self.port)]
        self.log = open(self.data.with_suffix(".log"), "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            command, cwd=checkout, env=environment, start_new_session=True, stdout=self.log, stderr=self.log
        )
        self.url = f"http://127.0.0.1:{self.port}"
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"the app of {checkout} did not start")

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=30)
        self.log.close()
        shutil.rmtree(self.data, ignore_errors=True)


def browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


PENDING = """
var state = window.store && window.store.getState();
if (!state) { return 1; }
var callbacks = Object.assign({}, state.callbacks); delete callbacks.stored; delete callbacks.completed;
var pending = [].concat.apply([], Object.values(callbacks));
return pending.filter(function (rq) { return !(rq.callback && rq.callback.background); }).length;
"""


def until(condition: Callable[[], Any], timeout: float = 300.0) -> float:
    """Seconds until ``condition()`` is true (polled every 20 ms)."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        try:
            if condition():
                return time.perf_counter() - start
        except Exception:  # noqa: BLE001 - a stale element while React renders
            pass
        time.sleep(0.02)
    raise TimeoutError("the page did not get there")


def text_of(driver: Any, component: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.ID, component).text)


def idle(driver: Any) -> bool:
    return driver.execute_script(PENDING) == 0


WHOLE_EDGES = 2000
"""The transitions of the whole graph's second draw (one of the page's choices)."""
WHOLE_DRAWN = """
const box = document.getElementById(arguments[0]);
if (!box) { return [0, 0]; }
if (box.wholeGraph) { const v = box.wholeGraph; return v.cacheView ? [v.n, v.edges] : [0, 0]; }
const g = box.querySelector('.js-plotly-plot');  // the renderer before: Plotly Scattergl (clones, segments)
return g && g.data && g.data.length > 1 ? [g.data[1].x.length, g.data[0].x.length / 3] : [0, 0];
"""
PAN = """
const done = arguments[arguments.length - 1], box = document.getElementById(arguments[0]), count = 90;
box.scrollIntoView({block: 'center'});
let target, events, area;
if (box.wholeGraph) {  // ours: pointer events on the canvas
  area = box.wholeGraph.canvas; target = area;
  events = ['pointerdown', 'pointermove', 'pointerup'];
} else {  // Plotly: mouse events on its drag layer
  area = box.querySelector('.nsewdrag'); target = area;
  events = ['mousedown', 'mousemove', 'mouseup'];
}
const r = area.getBoundingClientRect(), Make = events[0].startsWith('pointer') ? PointerEvent : MouseEvent;
const at = (type, i, on) => on.dispatchEvent(new Make(type, {bubbles: true, cancelable: true, button: 0, buttons: 1,
  pointerId: 1, isPrimary: true, clientX: r.left + r.width / 2 + 3 * i, clientY: r.top + r.height / 2 + 2 * i}));
at(events[0], 0, target);
const times = [];
let i = 0;
const f = t => {
  times.push(t);
  if (i >= count) { at(events[2], count, window); at(events[2], count, document);
    done(1000 * (times.length - 2) / (times[times.length - 1] - times[1])); return; }
  at(events[1], ++i, box.wholeGraph ? window : document);
  requestAnimationFrame(f);
};
requestAnimationFrame(f);
"""


def choose(driver: Any, dropdown: str, label: str) -> None:
    """Pick the option ``label`` of a dcc.Dropdown (opened by a click), as dash.testing's select_dcc_dropdown."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.ID, dropdown).click()
    found: list[Any] = []
    until(lambda: found.extend(e for e in driver.find_elements(By.CSS_SELECTOR, ".dash-dropdown-option")
                               if e.text == label) or found)  # fmt: skip
    found[0].click()


def pan_fps(driver: Any) -> float:
    """Frames per second over a drag of the whole graph, 90 frames, one move a frame (as bench_whole_graph.py)."""
    driver.set_script_timeout(120)
    return float(driver.execute_async_script(PAN, ids.COMMUNITIES_WHOLE_GRAPH))


def steps(server: Server, repeats: int) -> dict[str, list[float]]:
    """One fresh session through the steps; seconds per step, ``repeats`` times where a step repeats."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver, times = browser(), {}
    try:
        driver.get(server.url + "/communities")
        until(lambda: idle(driver) and text_of(driver, ids.COMMUNITIES_MAP_NOTE))
        said = text_of(driver, ids.COMMUNITIES_MESSAGE)
        start = time.perf_counter()
        driver.find_element(By.ID, ids.COMMUNITIES_RUN).click()
        until(lambda: text_of(driver, ids.COMMUNITIES_MESSAGE) not in ("", said), 900)
        until(lambda: "links with the most flow" in text_of(driver, ids.COMMUNITIES_MAP_NOTE), 900)
        shown = time.perf_counter() - start
        until(lambda: idle(driver), 900)
        times["Infomap run: map shown"], times["Infomap run: page idle"] = [shown], [time.perf_counter() - start]
        took = re.search(r"Infomap took ([0-9.]+) s", text_of(driver, ids.COMMUNITIES_MESSAGE))
        if took:  # Infomap's own time, as the page states it: the page idle should be at most this plus 3 s
            times["Infomap itself (as the page states it)"] = [float(took.group(1))]
        for _ in range(repeats):
            driver.get(server.url + "/communities")
            start = time.perf_counter()
            until(lambda: "links with the most flow" in text_of(driver, ids.COMMUNITIES_MAP_NOTE))
            until(lambda: idle(driver))
            times.setdefault("page ready", []).append(time.perf_counter() - start)
        for word in WORDS[:repeats]:
            search = driver.find_element(By.ID, ids.COMMUNITIES_SEARCH)
            search.clear()
            start = time.perf_counter()
            search.send_keys(word, Keys.ENTER)
            try:
                until(lambda w=word: f"Read as '{w}'" in text_of(driver, ids.COMMUNITIES_SEARCH_RESULT), 60)
            except TimeoutError:  # the model does not read the word (a stand-in's text): what the page said
                times["word search said"] = [text_of(driver, ids.COMMUNITIES_SEARCH_RESULT)[:110]]  # type: ignore
                break
            times.setdefault("word search", []).append(time.perf_counter() - start)
            until(lambda: idle(driver))
            button = driver.find_elements(By.CSS_SELECTOR, ".path-module")[-1]
            module = button.text.split(" ")[0]
            start = time.perf_counter()
            button.click()
            until(lambda m=module: f"Export module {m}'s" in text_of(driver, ids.COMMUNITIES_DETAIL))
            times.setdefault("open a module: card", []).append(time.perf_counter() - start)
            until(lambda: idle(driver))
            times.setdefault("open a module: page idle", []).append(time.perf_counter() - start)
        for _ in range(repeats):
            driver.get(server.url + "/communities")
            until(lambda: "links with the most flow" in text_of(driver, ids.COMMUNITIES_MAP_NOTE) and idle(driver))
            if not driver.find_elements(By.ID, ids.COMMUNITIES_WHOLE_SHOW):
                break  # a checkout without the whole graph
            choose(driver, ids.COMMUNITIES_WHOLE_EDGES, "none")  # not drawn yet: draws nothing
            start = time.perf_counter()
            driver.find_element(By.ID, ids.COMMUNITIES_WHOLE_SHOW).click()
            until(lambda: driver.execute_script(WHOLE_DRAWN, ids.COMMUNITIES_WHOLE_GRAPH)[0] > 0)
            times.setdefault("the whole graph: every clone drawn", []).append(time.perf_counter() - start)
            times["the whole graph: clones drawn"] = [
                driver.execute_script(WHOLE_DRAWN, ids.COMMUNITIES_WHOLE_GRAPH)[0]
            ]
            times.setdefault("the whole graph: fps while panning", []).append(pan_fps(driver))
            start = time.perf_counter()
            choose(driver, ids.COMMUNITIES_WHOLE_EDGES, f"the {WHOLE_EDGES:,} with the most flow")
            until(lambda: driver.execute_script(WHOLE_DRAWN, ids.COMMUNITIES_WHOLE_GRAPH)[1] == WHOLE_EDGES)
            times.setdefault(f"the whole graph, {WHOLE_EDGES:,} transitions: drawn", []).append(
                time.perf_counter() - start
            )
            times.setdefault(f"the whole graph, {WHOLE_EDGES:,} transitions: fps while panning", []).append(
                pan_fps(driver)
            )
        driver.find_element(By.ID, ids.COMMUNITIES_RUN).click()  # a second Infomap run (issue 47: console errors)
        with contextlib.suppress(TimeoutError):
            until(lambda: not idle(driver), 5)
        until(lambda: idle(driver), 900)
        if "word search" in times:
            search = driver.find_element(By.ID, ids.COMMUNITIES_SEARCH)  # the word again, in the new run's modules
            search.clear()
            search.send_keys(WORDS[1], Keys.ENTER)
            until(lambda: f"Read as '{WORDS[1]}'" in text_of(driver, ids.COMMUNITIES_SEARCH_RESULT) and idle(driver))
            button = driver.find_elements(By.CSS_SELECTOR, ".path-module")[-1]
            module = button.text.split(" ")[0]
            button.click()
            until(lambda m=module: f"Export module {m}'s" in text_of(driver, ids.COMMUNITIES_DETAIL))
            time.sleep(10)
            times["stays put (1 = the module is still open 10 s later)"] = [
                float(f"Export module {module}'s" in text_of(driver, ids.COMMUNITIES_DETAIL))
            ]
        driver.get(server.url + "/export")
        until(lambda: driver.find_elements(By.ID, ids.EXPORT_BUTTON) and idle(driver))
        for _ in range(min(repeats, 3)):
            start = time.perf_counter()
            driver.find_element(By.ID, ids.EXPORT_BUTTON).click()
            with contextlib.suppress(TimeoutError):  # the request is sent (a repeat's message reads the same)
                until(lambda: not idle(driver), 2)
            until(lambda: text_of(driver, ids.EXPORT_MESSAGE) and idle(driver))
            times.setdefault("export (GraphML, the page's threshold)", []).append(time.perf_counter() - start)
            times["export said"] = [text_of(driver, ids.EXPORT_MESSAGE)[:110]]  # type: ignore[list-item]
        severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        times["console errors"] = [float(len(severe))]
    finally:
        driver.quit()
    return times


def layout_rows(models: list[Path]) -> None:
    """The whole graph's layouts on each model, timed through the app's service (see the module docstring)."""
    os.environ["CHMM_DATA_DIR"] = tempfile.mkdtemp(prefix="bench-layouts-")
    from app import sessions
    from app.services import graphs, kept, whole_graph

    print("| model | clones | top modules | layout | seconds | stretch | purity |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for model in models:
        os.environ["CHMM_START_MODEL"] = str(model.resolve())
        folder = sessions.session_folder(sessions.new_session_id())
        graphs.run_communities(folder, trials=1)
        for layout in [*whole_graph.LAYOUTS, "transitions"]:
            kept_on_disk = (folder / whole_graph.KEPT_LAYOUT).is_file() and layout == "transitions"
            kept.forget()  # as another process draws it: only what is on disk is kept
            started = time.perf_counter()
            drawn = whole_graph.whole_graph(folder, 2_000, layout)
            seconds = time.perf_counter() - started
            quality = drawn["quality"]
            name = f"{layout} (kept on disk)" if kept_on_disk else layout
            print(
                f"| {model.name} | {drawn['clones']:,} | {drawn['top_modules']:,} | {name} | {seconds:.2f} | "
                f"{quality['stretch']:.3f} | {quality['purity']:.3f} |",
                flush=True,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, nargs="+")
    parser.add_argument("--against", type=Path, default=None, help="another checkout, timed in turn with this one")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layouts", action="store_true", help="time the whole graph's layouts (no browser)")
    args = parser.parse_args()
    if args.layouts:
        layout_rows(args.model)
        return 0
    args.model = args.model[0]
    checkouts = [("this", HERE)] + ([("against", args.against.resolve())] if args.against else [])
    servers = [Server(path, args.model.resolve(), name) for name, path in checkouts]
    results: dict[str, dict[str, list[Any]]] = {s.name: {} for s in servers}
    try:
        for server in servers:  # in turn: each session's steps on one app, then the other
            for step, values in steps(server, args.repeats).items():
                results[server.name].setdefault(step, []).extend(values)
    finally:
        for server in servers:
            server.stop()
    names = [s.name for s in servers]
    print(f"model {args.model.name}; medians of {args.repeats}; seconds")
    print("| step | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for step in results[names[0]]:
        cells = []
        for name in names:
            values = results[name].get(step, [])
            if values and isinstance(values[0], str):
                cells.append(str(values[0]))
            else:
                cells.append(f"{statistics.median(values):.2f}" if values else "-")
        print(f"| {step} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
