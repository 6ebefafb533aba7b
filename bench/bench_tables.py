"""The Communities page's clone and transition tables at the size of a user's model, in headless Chromium: the app
serves a model (``--model``), the page runs Infomap, then "Show the whole graph's tables"; timed in the page: until
the grids show their first rows, and for each sort (a column, ascending then descending) until the first row shown
changes: the server sorts every row and sends the first block. The sizes of the answers the page received are
summed per callback (the tables stay on the server and come a block at a time: ``app/services/grid_rows.py``).

    python bench/bench_tables.py --model moby-words.npz

Needs Debian's chromium and chromium-driver, as the browser tests do.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe_machine  # noqa: E402

FIRST_ROW_CHANGES = """
const [grid, column, direction, done] = arguments;
const api = window.dash_ag_grid.getApi(grid);
const first = () => { const n = api.getDisplayedRowAtIndex(0); return n && n.data ? JSON.stringify(n.data) : null; };
const before = first(), started = performance.now();
api.applyColumnState({state: [{colId: column, sort: direction}], defaultState: {sort: null}});
const poll = () => {
  const now = first();
  if (now && now !== before) { done([performance.now() - started, api.getDisplayedRowCount()]); }
  else if (performance.now() - started > 60000) { done([-1, 0]); }
  else { setTimeout(poll, 5); }
};
setTimeout(poll, 0);
"""
ROWS_SHOWN = """
try {
  const api = window.dash_ag_grid.getApi(arguments[0]), row = api.getDisplayedRowAtIndex(0);
  return row && row.data ? api.getDisplayedRowCount() : 0;
} catch (error) { return 0; }
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    args = parser.parse_args()
    os.environ["CHMM_DATA_DIR"] = tempfile.mkdtemp(prefix="chmm-tables-")
    os.environ["CHMM_START_MODEL"] = str(args.model.resolve())
    from bench_explorer import browser, idle, text_of, until
    from flask import request
    from selenium.webdriver.common.by import By
    from werkzeug.serving import make_server

    from app import ids
    from app import main as app_main

    received: dict[str, int] = {}

    @app_main.server.after_request
    def _size(response):  # type: ignore[no-untyped-def]
        if request.path.endswith("_dash-update-component"):
            output = (request.get_json(silent=True) or {}).get("output", "")
            if "table" in output:
                received[output[:60]] = received.get(output[:60], 0) + (response.content_length or 0)
        return response

    server = make_server("127.0.0.1", 0, app_main.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    driver = browser()
    driver.set_script_timeout(90)
    rows: list[tuple[str, str, int, list[float]]] = []
    try:
        driver.get(f"http://127.0.0.1:{server.server_port}/communities")
        until(lambda: idle(driver) and text_of(driver, ids.COMMUNITIES_MAP_NOTE))
        said = text_of(driver, ids.COMMUNITIES_MESSAGE)
        driver.find_element(By.ID, ids.COMMUNITIES_RUN).click()
        until(lambda: text_of(driver, ids.COMMUNITIES_MESSAGE) not in ("", said), 900)
        until(lambda: idle(driver), 900)
        received.clear()
        started = time.perf_counter()
        driver.find_element(By.ID, ids.COMMUNITIES_TABLES_WHOLE).click()
        until(lambda: driver.execute_script(ROWS_SHOWN, ids.COMMUNITIES_EDGE_TABLE), 600)
        shown = time.perf_counter() - started
        note = text_of(driver, ids.COMMUNITIES_TABLES_NOTE)
        shown_bytes = dict(received)
        for grid, column in (
            (ids.COMMUNITIES_EDGE_TABLE, "flow"),
            (ids.COMMUNITIES_EDGE_TABLE, "probability"),
            (ids.COMMUNITIES_EDGE_TABLE, "from"),
            (ids.COMMUNITIES_CLONE_TABLE, "degree"),
            (ids.COMMUNITIES_CLONE_TABLE, "clone"),
        ):
            times, count = [], 0
            for direction in ("asc", "desc"):
                seconds, count = driver.execute_async_script(FIRST_ROW_CHANGES, grid, column, direction)
                times.append(seconds / 1000.0)
            rows.append((grid, column, count, times))
    finally:
        driver.quit()
        server.shutdown()
    print(describe_machine() + "; headless Chromium")
    print(f"model: {args.model.name}; {note[:90]}\n")
    print(f"the whole graph's tables shown: {shown:.2f} s; answers received: " + ", ".join(
        f"{key.strip('.')} {size / 1000:,.1f} kB" for key, size in shown_bytes.items()
    ))  # fmt: skip
    print("\n| table | column | rows | seconds until the first row shown changes: ascending / descending |")
    print("|---|---|---:|---|")
    for grid, column, count, times in rows:
        print(f"| {grid} | {column} | {count:,} | {' / '.join(f'{t:.3f}' for t in times)} |")


if __name__ == "__main__":
    main()
