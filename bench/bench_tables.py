"""Do the Communities page's tables sort their rows in under a second? The app serves a model (default: a
3,000-state model you trained, ``--model``), headless Chromium opens the Communities page, runs Infomap and waits
for the Tables card (the whole graph's clones and transitions, at most 20,000 rows each); then it clicks a column's
sort arrow and times, in the page (``performance.now()`` and a MutationObserver), the moment the table's first row
changes: the sort of every row and the drawing of the first page.

    python bench/bench_tables.py --model m3000.npz

Needs Debian's chromium and chromium-driver, as the browser tests do.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe_machine  # noqa: E402

TIMED_SORT = """
const [table, column, done] = arguments;
const first = () => {
  const cells = [...document.querySelectorAll(`#${table} tr`)].find(row => row.querySelector("td.dash-cell"));
  return cells && cells.innerText;
};
const before = first();
const button = document.querySelector(`#${table} th[data-dash-column="${column}"] .column-header--sort`);
const started = performance.now();
const watcher = new MutationObserver(() => {
  if (first() !== before) { watcher.disconnect(); done(performance.now() - started); }
});
watcher.observe(document.querySelector(`#${table}`), {subtree: true, childList: true, characterData: true});
button.click();
setTimeout(() => { watcher.disconnect(); done(-1); }, 20000);
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chmm-tables-") as folder:
        os.environ["CHMM_DATA_DIR"] = folder
        os.environ["CHMM_START_MODEL"] = str(args.model.resolve())
        from dash.testing.application_runners import ThreadedRunner
        from dash.testing.composite import DashComposite
        from support import HEIGHT, WIDTH, chrome_options, open_page, wait_until

        from app import ids
        from app import main as app_main

        rows: list[tuple[str, str, int, list[float]]] = []
        with ThreadedRunner() as server:
            server.start(app_main.app, start_timeout=20)
            with DashComposite(server=server, browser="Chrome", headless=True, options=[chrome_options()]) as browser:
                browser.driver.set_window_size(WIDTH, HEIGHT)
                browser.server_url = server.url
                open_page(browser, "/communities")
                browser.find_element(f"#{ids.COMMUNITIES_RUN}").click()
                note = wait_until(
                    lambda: (
                        "clones and" in browser.find_element(f"#{ids.COMMUNITIES_TABLES_NOTE}").text
                        and browser.find_element(f"#{ids.COMMUNITIES_TABLES_NOTE}").text
                    ),
                    600,
                    "the tables did not fill",
                )
                time.sleep(1.0)
                counts = [int(word.replace(",", "")) for word in note.split() if word.replace(",", "").isdigit()]
                browser.driver.set_script_timeout(30)
                for table, column, n in (
                    (ids.COMMUNITIES_EDGE_TABLE, "flow", counts[1]),
                    (ids.COMMUNITIES_EDGE_TABLE, "probability", counts[1]),
                    (ids.COMMUNITIES_CLONE_TABLE, "betweenness", counts[0]),
                ):
                    times = [  # the first click sorts ascending, the second descending (a third would unsort)
                        browser.driver.execute_async_script(TIMED_SORT, table, column) / 1000.0 for _ in range(2)
                    ]
                    rows.append((table, column, n, times))
    print(describe_machine() + "; headless Chromium")
    print(f"model: {args.model.name}\n")
    print("| table | column | rows | seconds to sort and show: ascending / descending |")
    print("|---|---|---:|---|")
    for table, column, n, times in rows:
        print(f"| {table} | {column} | {n:,} | {' / '.join(f'{t:.3f}' for t in times)} |")


if __name__ == "__main__":
    main()
