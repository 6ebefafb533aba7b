"""What the app's test modules share: the sample text, upload payloads and, for the browser tests
(tests/test_browser.py, tests/test_celery.py), the headless Chromium set-up and the helpers that drive a page.

Selenium is imported only inside the browser helpers, so modules that skip without a browser can import this one.
"""

from __future__ import annotations

import base64
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ALICE = Path(__file__).parent / "data" / "carroll-alice.txt"
SHORT_TEXT = ALICE.read_text(encoding="utf-8")[:30_000]


FIXED = ["--pseudocount", "1e-6", "--algorithm", "em"]
"""``chmm train`` options of a run with nothing to choose on validation (batch EM, the old pseudocount), for tests
that train a small model quickly rather than the recipe's search."""


TINY_FORM = {
    "states": 60,
    "allocation": "ngram",
    "normalisation": "paper",
    "algorithm": "em",
    "iterations": 2,
    "pseudocount": 1e-6,
    "batch_size": 2000,
    "validation": 0.1,
    "seed": 0,
    "backend": "cpu",
}
"""The Train page's form for a training of a few seconds."""


def data_uri(data: bytes, mime: str = "text/plain") -> str:
    """What dcc.Upload hands a callback for a file with these bytes."""
    return f"data:{mime};base64," + base64.b64encode(data).decode("ascii")


# ------------------------------------------------------------------------------------------ the renderer's protocol
def callback_outputs(output: str) -> list[str]:
    """The "id.property" outputs of a callback's ``output`` string (several: "..a.children...b.data..")."""
    return [part for part in output.strip(".").split("...") if part] if output.startswith("..") else [output]


def callback_request(dependencies: list[dict[str, Any]], writes: str, changed: str, values: dict[str, Any]) -> dict:
    """The body the Dash renderer posts to ``/_dash-update-component`` for the callback (from
    ``/_dash-dependencies``) that writes component ``writes`` when ``changed`` ("id.property") changes; ``values``
    maps "id.property" to what the page holds (missing: None)."""
    for dependency in dependencies:
        parts = callback_outputs(dependency["output"])
        inputs = {f"{spec['id']}.{spec['property']}" for spec in dependency["inputs"]}
        if any(part.split(".")[0] == writes for part in parts) and changed in inputs:
            break
    else:
        raise KeyError(f"no callback writes {writes} on {changed}")

    def item(spec: dict[str, Any]) -> dict[str, Any]:
        key = f"{spec['id']}.{spec['property']}"
        return {"id": spec["id"], "property": spec["property"], "value": values.get(key)}

    output = dependency["output"]
    outputs = [{"id": part.rsplit(".", 1)[0], "property": part.rsplit(".", 1)[1]} for part in parts]
    return {
        "output": output,
        "outputs": outputs if output.startswith("..") else outputs[0],
        "inputs": [item(spec) for spec in dependency["inputs"]],
        "changedPropIds": [changed],
        "state": [item(spec) for spec in dependency.get("state", [])],
    }


def store_data(layout: Any, component: str) -> str:
    """The ``data`` of the store ``component`` in a ``/_dash-layout`` answer (e.g. the server-issued session id)."""
    stack = [layout]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            props = node.get("props", {})
            if props.get("id") == component:
                return str(props["data"])
            stack.extend(props.values())
        elif isinstance(node, list):
            stack.extend(node)
    raise KeyError(component)


# ------------------------------------------------------------------------------------------ browsers
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
CHROMEDRIVER = shutil.which("chromedriver")
WIDTH, HEIGHT = 1400, 1000
CHROME_ARGUMENTS = [  # Chromium runs as root here, hence --no-sandbox
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    f"--window-size={WIDTH},{HEIGHT}",
]


def chrome_options() -> Any:
    """Selenium options for headless Debian Chromium with :data:`CHROME_ARGUMENTS`."""
    from selenium.webdriver import ChromeOptions

    options = ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in CHROME_ARGUMENTS:
        options.add_argument(argument)
    return options


def wait_idle(browser: Any, timeout: float = 20) -> None:
    """Until the Dash renderer has no callback in flight, other than a background callback following its running job
    (the Train and Compare pages' jobs write only to the app shell, so their callbacks stay in flight on every page
    until the job ends; a test waits for the job's end by what the page says)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not browser.window_store or not _in_flight(browser):
            return
        time.sleep(0.1)
    raise AssertionError(f"callbacks still pending after {timeout} s: {browser.redux_state_rqs}")


def _in_flight(browser: Any) -> list[Any]:
    """The renderer's pending callbacks (dash.testing's redux store), less background callbacks."""
    return [rq for rq in browser.redux_state_rqs or [] if not (rq.get("callback") or {}).get("background")]


def _known_library_warning(entry: dict[str, Any]) -> bool:
    """React's development warning from dash-cytoscape's extra bundle (the one with the SVG exporter, loaded by
    ``cyto.load_extra_layouts()``): its component sets state while it renders, inside the library, on every
    graph update; it is logged at the console's error level but breaks nothing."""
    message = str(entry.get("message", ""))
    return "Warning: Cannot update a component" in message and "dash_cytoscape_extra" in message


def assert_no_errors(browser: Any) -> None:
    """No severe console message (a failed request, a JavaScript error) and no error in the Dash renderer's store
    (what the dev tools would list: callback exceptions, invalid props)."""
    logs = [e for e in browser.get_logs() if e.get("level") == "SEVERE" and not _known_library_warning(e)]
    assert not logs, f"severe browser console messages: {logs}"
    errors = browser.driver.execute_script(
        "const s = window.store && window.store.getState();"
        "if (!s || !s.error) return [];"
        "return [].concat(s.error.frontEnd || [], s.error.backEnd || []).map(e => (e.error || {}).message || e.type);"
    )
    assert not errors, f"Dash renderer errors (callbacks, prop checks): {errors}"


def wait_until(condition: Callable[[], Any], timeout: float, message: str | Callable[[], str]) -> Any:
    """Poll ``condition`` until it returns something true (an exception counts as not yet: a stale element while
    React re-renders) and return that; fail with ``message`` (or what it returns) after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            result = condition()
        except Exception:  # noqa: BLE001 - poll again
            result = None
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(message() if callable(message) else message)


def text_of(browser: Any, component: str) -> str:
    return browser.find_element(f"#{component}").text


def open_page(browser: Any, path: str) -> None:
    """Navigate by the navigation bar's link (client-side routing; the tab keeps its session)."""
    from selenium.webdriver.common.by import By

    from app import ids

    browser.driver.find_element(By.CSS_SELECTOR, f'#{ids.NAV} a[href="{path}"]').click()
    browser.wait_for_element("#_pages_content h2")
    wait_idle(browser)


def set_number(browser: Any, component: str, value: float | str) -> None:
    """Replace the text of a debounced input (a number or text) and commit it with Enter."""
    from selenium.webdriver.common.keys import Keys

    box = browser.find_element(f"#{component}")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(str(value), Keys.ENTER)


def graph_points(browser: Any, component: str) -> list[int]:
    """Points per trace of a dcc.Graph, read from Plotly's own graph div."""
    return browser.driver.execute_script(
        "const g = document.querySelector(arguments[0] + ' .js-plotly-plot');"
        "return g && g.data ? g.data.map(t => (t.x || []).length) : [];",
        f"#{component}",
    )


def session_folder(browser: Any, data_dir: Path) -> Path:
    """The browser tab's session folder on the server (under ``data_dir``)."""
    from app import ids

    folder = data_dir / browser.get_session_storage(ids.SESSION).split(".")[0]  # the uuid, without its signature
    assert folder.is_dir(), folder
    return folder


def prepare_training(browser: Any, states: int, iterations: int, validation: float | None = None) -> None:
    """On the Train page: the sample corpus and the given options, committed and idle."""
    from app import ids

    open_page(browser, "/train")
    browser.find_element(f"#{ids.CORPUS_SAMPLE_BUTTON}").click()
    browser.wait_for_contains_text(f"#{ids.CORPUS_MESSAGE}", "Using carroll-alice.txt")
    browser.wait_for_contains_text(f"#{ids.CORPUS_PREVIEW}", "27 symbols")
    set_number(browser, ids.TRAIN_STATES, states)
    set_number(browser, ids.TRAIN_PSEUDOCOUNT, 1e-3)  # given: no choice on validation
    set_number(browser, ids.TRAIN_ITERATIONS, iterations)
    if validation is not None:
        set_number(browser, ids.TRAIN_VALIDATION, validation)
    browser.wait_for_contains_text(f"#{ids.TRAIN_ESTIMATE}", "Estimated training memory")
    wait_idle(browser)


# ------------------------------------------------------------------------------------------ dash-ag-grid tables
def grid_script(browser: Any, component: str, body: str) -> Any:
    """Run ``body`` (JavaScript with ``api``: the ag-grid API of the grid ``component``) and return its result;
    None while the grid is not ready."""
    return browser.driver.execute_script(
        "const api = window.dash_ag_grid && window.dash_ag_grid.getApi(arguments[0]); if (!api) { return null; }"
        + body,
        component,
    )


def grid_rows(browser: Any, component: str) -> list[dict[str, Any]]:
    """The rows the grid ``component`` shows (after its sort and filters), scrolled into view or not; of a grid whose
    rows come from the server a block at a time, the rows of the blocks it holds, in order."""
    return grid_script(browser, component, "const rows = [];"
                       "if (api.getGridOption('rowModelType') === 'infinite') {"
                       "  api.forEachNode(n => { if (n.data) { rows.push(n.data); } });"
                       "} else { api.forEachNodeAfterFilterAndSort(n => rows.push(n.data)); }"
                       "return rows;") or []  # fmt: skip


def grid_selected(browser: Any, component: str) -> list[str]:
    """The ids of the grid's selected rows."""
    return grid_script(browser, component, "return api.getSelectedNodes().map(n => n.id);") or []


def click_grid_row(browser: Any, component: str, row_id: str) -> None:
    """Scroll the grid's row ``row_id`` into view and click its first cell, as a user would: a grid whose rows come
    from the server may redraw them under the pointer (a block loaded, the cache refreshed), and a user whose click
    lands on another row as it moves clicks again once the row is drawn where it stays."""
    from selenium.common.exceptions import ElementClickInterceptedException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    cell = f'#{component} .ag-center-cols-container .ag-row[row-id="{row_id}"] .ag-cell'
    moved: list[str] = []

    def clicked() -> bool:
        grid_script(browser, component, f"api.ensureNodeVisible(api.getRowNode({row_id!r})); return 1;")
        found = browser.driver.find_elements(By.CSS_SELECTOR, cell)
        if not found:
            return False
        try:
            found[0].click()
        except (ElementClickInterceptedException, StaleElementReferenceException) as error:
            moved.append(type(error).__name__)
            return False
        return True

    wait_until(clicked, 10, lambda: f"row {row_id} is not drawn where a click reaches it ({moved or 'never drawn'})")
