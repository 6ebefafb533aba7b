"""Browser tests of the app's tables (dash-ag-grid) and of the Communities page's view in the URL (issue 47): the
module table has every module's row and a click on one opens it; a link with a view (run, module, level, T, layout)
opens that view, and what it names that the run lacks is left out with a note; Back undoes a view change; a selected
row stays selected while other callbacks run.

The app, its server and the browser are test_browser.py's fixtures (headless Debian Chromium)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import test_browser
from support import (
    assert_no_errors,
    click_grid_row,
    grid_rows,
    grid_script,
    grid_selected,
    open_page,
    session_folder,
    wait_idle,
    wait_until,
)

from app import ids
from app.services import graphs as graph_service

dash_app, server, browser, screenshot = (
    test_browser.dash_app,
    test_browser.server,
    test_browser.browser,
    test_browser.screenshot,
)
run_infomap = test_browser.run_infomap

pytestmark = [
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:HTTPResponse.getheader:DeprecationWarning"),
]


def search_of(page: Any) -> str:
    """The query string of the page's URL."""
    return page.driver.execute_script("return window.location.search;")


def top_modules(folder: Path, run: str = graph_service.CURRENT_RUN, parent: str = "") -> list[str]:
    """The ids of a level's modules, most flow first (the module table's order)."""
    saved = graph_service.read_run(folder, run)
    return [row["id"] for row in graph_service.module_rows(saved, parent=parent)]


def wait_for_rows(page: Any, expected: list[str]) -> None:
    """Until the module table's rows are the modules ``expected``, in this order."""

    def shown() -> list[str]:
        return [row["id"] for row in grid_rows(page, ids.COMMUNITIES_TABLE)]

    wait_until(lambda: shown() == expected, 15, lambda: f"the module table shows {shown()}, not {expected}")


def wait_for_module(page: Any, module: str | None) -> None:
    """Until the Module card, the table's selection and the URL show ``module`` open (None: none)."""
    if module:
        page.wait_for_contains_text(f"#{ids.COMMUNITIES_DETAIL}", f"{module}:")
    else:
        page.wait_for_contains_text(f"#{ids.COMMUNITIES_DETAIL}", "Click a module on the map")
    wait_until(
        lambda: grid_selected(page, ids.COMMUNITIES_TABLE) == ([module] if module else []),
        10,
        lambda: f"the table selects {grid_selected(page, ids.COMMUNITIES_TABLE)}, not {module}",
    )
    wait_idle(page)


def test_module_table_opens_modules_and_back_undoes_it(
    browser: Any, data_dir: Path, tmp_path: Path, screenshot: Any
) -> None:
    open_page(browser, "/communities")
    folder = session_folder(browser, data_dir)
    modules = top_modules(folder)  # the sample model comes with its (flat) run
    assert len(modules) > 3
    wait_for_rows(browser, modules)  # every module, one row each, most flow first: a grid, not the DataTable
    assert browser.find_elements(f"#{ids.COMMUNITIES_TABLE} .ag-root-wrapper")
    assert not browser.find_elements(".dash-spreadsheet")
    assert search_of(browser) == ""
    # a click on a row opens its module, and the URL says so
    click_grid_row(browser, ids.COMMUNITIES_TABLE, modules[1])
    wait_for_module(browser, modules[1])
    assert search_of(browser) == f"?module={modules[1]}"
    # a filter on the clone table (as typed under a header) ...
    wait_until(lambda: grid_rows(browser, ids.COMMUNITIES_CLONE_TABLE), 10, "the clone table is empty")
    grid_script(browser, ids.COMMUNITIES_CLONE_TABLE, "api.setFilterModel({flow: {filterType: 'number', type: "
                "'greaterThan', filter: 1}}); return 1;")  # fmt: skip
    wait_until(lambda: not grid_rows(browser, ids.COMMUNITIES_CLONE_TABLE), 10, "the clone filter hides nothing")
    # ... is not carried over to a module clicked further down the table (scrolled into view: the grid draws only
    # the rows in view)
    click_grid_row(browser, ids.COMMUNITIES_TABLE, modules[-1])
    wait_for_module(browser, modules[-1])
    wait_until(lambda: grid_rows(browser, ids.COMMUNITIES_CLONE_TABLE), 10, "the clone filter stayed on")
    assert not grid_script(browser, ids.COMMUNITIES_CLONE_TABLE, "return api.isAnyFilterPresent();")
    assert search_of(browser) == f"?module={modules[-1]}"
    screenshot(browser, "module-table", max_height=900, start=f"#{ids.COMMUNITIES_FILTER}")
    # Back: the module before, then none
    browser.driver.back()
    wait_for_module(browser, modules[1])
    assert search_of(browser) == f"?module={modules[1]}"
    browser.driver.back()
    wait_for_module(browser, None)
    assert search_of(browser) == ""
    # Forward opens it again
    browser.driver.forward()
    wait_for_module(browser, modules[1])
    # CSV: the grid's own export of the rows it shows
    browser.find_element(f"#{ids.COMMUNITIES_TABLE_CSV}").click()
    exported = tmp_path / "downloads" / "modules.csv"
    wait_until(lambda: exported.is_file() and exported.stat().st_size, 10, "no modules.csv downloaded")
    lines = exported.read_text(encoding="utf-8-sig").splitlines()  # ag-grid writes a byte order mark
    assert lines[0].startswith('"Module","Name') and len(lines) == len(modules) + 1
    # the clone table's CSV, made on the server: every row its filter keeps, in its sort
    wait_until(lambda: grid_rows(browser, ids.COMMUNITIES_CLONE_TABLE), 10, "the clone table is empty")
    rows = grid_rows(browser, ids.COMMUNITIES_CLONE_TABLE)
    least = sorted(row["degree"] for row in rows)[len(rows) // 2]
    asked = (
        "api.setFilterModel({degree: {filterType: 'number', type: 'greaterThanOrEqual', filter: LEAST}});"
        "api.applyColumnState({state: [{colId: 'degree', sort: 'desc'}]}); return 1;"
    ).replace("LEAST", str(least))
    grid_script(browser, ids.COMMUNITIES_CLONE_TABLE, asked)
    kept = sorted((row for row in rows if row["degree"] >= least), key=lambda row: -row["degree"])
    wait_until(
        lambda: [r["clone"] for r in grid_rows(browser, ids.COMMUNITIES_CLONE_TABLE)] == [r["clone"] for r in kept],
        10,
        "the clone table is not filtered and sorted as asked",
    )
    browser.find_element(f"#{ids.COMMUNITIES_CLONE_TABLE_CSV}").click()
    made = tmp_path / "downloads" / f"clones-module-{modules[1].replace(':', '-')}.csv"
    wait_until(lambda: made.is_file() and made.stat().st_size, 20, "no clone table CSV downloaded")
    lines = made.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("clone,symbol,module") and [line.split(",")[0] for line in lines[1:]] == [
        r["clone"] for r in kept
    ]


def test_a_selected_row_stays_while_other_callbacks_run(browser: Any, data_dir: Path) -> None:
    """The table's rows come again (the filter box, the model watch every 2 s): the open module's row stays
    selected, the module stays open and the URL is not rewritten."""
    open_page(browser, "/communities")
    modules = top_modules(session_folder(browser, data_dir))
    wait_for_rows(browser, modules)
    click_grid_row(browser, ids.COMMUNITIES_TABLE, modules[2])
    wait_for_module(browser, modules[2])
    history = browser.driver.execute_script("return window.history.length;")
    row = next(r for r in grid_rows(browser, ids.COMMUNITIES_TABLE) if r["id"] == modules[2])
    word = row["words"].split(" ")[0]
    box = browser.find_element(f"#{ids.COMMUNITIES_FILTER}")
    box.send_keys(word)  # new rows, the open module's among them
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_TRAIL}", f"the filter {word!r} shows")
    wait_idle(browser)
    assert grid_selected(browser, ids.COMMUNITIES_TABLE) == [modules[2]]
    time.sleep(10)
    assert grid_selected(browser, ids.COMMUNITIES_TABLE) == [modules[2]]
    assert f"{modules[2]}:" in browser.find_element(f"#{ids.COMMUNITIES_DETAIL}").text
    assert search_of(browser) == f"?module={modules[2]}"
    assert browser.driver.execute_script("return window.history.length;") == history


def test_a_link_opens_its_view(browser: Any, data_dir: Path) -> None:
    run_infomap(browser, markov_time="0.5")  # a multilevel run; the sample's bundled run becomes the one before
    folder = session_folder(browser, data_dir)
    saved = graph_service.read_communities(folder)
    parent = next(m for m in saved["modules"] if not m["parent"] and m.get("children"))["id"]
    children = top_modules(folder, parent=parent)
    child = children[-1]
    browser.driver.get(f"{browser.server_url}/communities?level={parent}&module={child}&threshold=0.3&layout=circle")
    browser.wait_for_element(f"#{ids.COMMUNITIES_TABLE}")
    wait_for_rows(browser, children)
    wait_for_module(browser, child)
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_TRAIL}", f"{parent} ")
    assert browser.find_element(f"#{ids.COMMUNITIES_EDGE_MIN}").get_attribute("value") == "0.3"
    assert "circular" in browser.find_element(f"#{ids.COMMUNITIES_GRAPH_LAYOUT}").text
    assert not browser.find_element(f"#{ids.COMMUNITIES_VIEW_NOTE}").text
    # the run before (the bundled flat one): its own modules
    previous = top_modules(folder, graph_service.PREVIOUS_RUN)
    browser.driver.get(f"{browser.server_url}/communities?run=previous&module={previous[0]}")
    browser.wait_for_element(f"#{ids.COMMUNITIES_TABLE}")
    wait_for_rows(browser, previous)
    wait_for_module(browser, previous[0])
    # what the run lacks, or what is not a value, is left out with a sentence; the rest opens
    browser.driver.get(f"{browser.server_url}/communities?module=999&layout=zigzag&threshold=0.2")
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_VIEW_NOTE}", "module 999 is not in this run")
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_VIEW_NOTE}", "layout 'zigzag'")
    wait_for_module(browser, None)
    assert browser.find_element(f"#{ids.COMMUNITIES_EDGE_MIN}").get_attribute("value") == "0.2"


def test_the_layout_chosen_last_comes_back(browser: Any, data_dir: Path) -> None:
    """Issue 47: the subgraph's layout went back to the server's whenever the page was opened from the navigation
    bar (its link carries no view); the choice comes back now."""
    open_page(browser, "/communities")
    browser.driver.get(f"{browser.server_url}/communities?layout=circle")
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_GRAPH_LAYOUT}", "circular")
    wait_idle(browser)
    open_page(browser, "/export")
    open_page(browser, "/communities")
    assert search_of(browser) in ("", "?layout=circle")
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_GRAPH_LAYOUT}", "circular")


def test_a_shared_view_opens_in_another_session_and_named_views_come_back(browser: Any, data_dir: Path) -> None:
    """A link pasted into another tab (a new session, as a colleague's browser) met that session's own model: "Run
    Infomap first". "Share this view" publishes the model and its run; the link, opened in a fresh session, offers
    to open them, and then shows the same view. A named view comes back in one click, and Back returns from it."""
    run_infomap(browser, markov_time="0.5")  # a run of this session's own: a new session has only the bundled one
    folder = session_folder(browser, data_dir)
    modules = top_modules(folder)
    module = modules[1]
    browser.driver.get(f"{browser.server_url}/communities?module={module}&layout=circle")
    wait_for_module(browser, module)
    browser.find_element(f"#{ids.COMMUNITIES_SHARE_BUTTON}").click()
    anchor = browser.wait_for_element(f"#{ids.COMMUNITIES_SHARE_ANCHOR}")
    link = anchor.get_attribute("href")
    assert "share=" in link and f"module={module.replace(':', '%3A')}" in link and "layout=circle" in link
    # a named view of this one, then another view, then the named one again
    browser.find_element(f"#{ids.COMMUNITIES_VIEW_NAME}").send_keys("second module")
    browser.find_element(f"#{ids.COMMUNITIES_SAVE_VIEW}").click()
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_VIEWS_MESSAGE}", "Saved this view as 'second module'.")
    click_grid_row(browser, ids.COMMUNITIES_TABLE, modules[0])
    wait_for_module(browser, modules[0])
    browser.select_dcc_dropdown(f"#{ids.COMMUNITIES_SAVED_VIEWS}", "second module")
    wait_for_module(browser, module)
    assert "layout=circle" in search_of(browser)
    browser.driver.back()  # Back: the view before the named one
    wait_for_module(browser, modules[0])

    first_tab = browser.driver.current_window_handle
    browser.driver.switch_to.new_window("tab")  # a new tab: a new session (its id lives in the tab's storage)
    try:
        browser.driver.get(link)
        browser.wait_for_contains_text(f"#{ids.COMMUNITIES_SHARE_OFFER}", "This link shows a model another session")
        other = session_folder(browser, data_dir)
        assert other != folder and graph_service.read_communities(other)["finished"] != top_finished(folder)
        browser.find_element(f"#{ids.COMMUNITIES_OPEN_SHARE}").click()
        wait_for_module(browser, module)  # the page opened afresh at the link's view, on the shared model and run
        assert top_modules(other) == modules and "circular" in browser.find_element(
            f"#{ids.COMMUNITIES_GRAPH_LAYOUT}"
        ).text
        assert not browser.find_element(f"#{ids.COMMUNITIES_SHARE_BOX}").is_displayed()
        assert (other / "previous.npz").is_file()  # its own model is one undo away
    finally:
        browser.driver.close()
        browser.driver.switch_to.window(first_tab)


def top_finished(folder: Path) -> Any:
    """When the session's last Infomap run finished (what tells two runs apart)."""
    return graph_service.read_communities(folder)["finished"]


def test_the_whole_graph_and_the_clone_table_share_the_selected_clone(browser: Any, data_dir: Path) -> None:
    """A clone clicked in the whole graph opens its module with the clone's row selected in the clone table, and the
    canvas rings it; a row selected in the table is ringed in the canvas, brought into view. Zoomed in, each drawn
    transition's T is written on it, and no label written overlaps another."""
    from selenium.webdriver.common.action_chains import ActionChains

    run_infomap(browser)
    view = f"#{ids.COMMUNITIES_WHOLE_GRAPH}"
    canvas_state = (
        "const v = document.querySelector(arguments[0]).wholeGraph; if (!v || !v.n) { return null; }"
        "return {selected: v.selected, weights: v.weightsDrawn, labels: v.labelsDrawn, boxes: v.labelBoxes,"
        " scale: v.view.s / v.fitScale, edges: v.edges};"
    )
    state = lambda: browser.driver.execute_script(canvas_state, view)  # noqa: E731
    browser.find_element(f"#{ids.COMMUNITIES_WHOLE_SHOW}").click()
    wait_until(lambda: (state() or {}).get("edges") == 2000, 30, "the whole graph is not drawn")
    folder = session_folder(browser, data_dir)
    saved = graph_service.read_communities(folder)
    graph = graph_service.session_graph(folder, saved["threshold"])
    module = max((m for m in saved["modules"] if not m["parent"]), key=lambda m: m["size"])
    clone = int(module["nodes"][0])
    canvas = browser.find_element(f"{view} canvas")
    browser.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", canvas)
    point = "const v = document.querySelector(arguments[0]).wholeGraph, b = v.canvas.getBoundingClientRect();" + (
        "const [x, y] = v.screenOf(arguments[1]); return [x - b.width / 2, y - b.height / 2];"
    )
    x, y = browser.driver.execute_script(point, view, clone)
    nearest = (
        "const v = document.querySelector(arguments[0]).wholeGraph; return v.nearest(...v.screenOf(arguments[1]));"
    )
    clicked = browser.driver.execute_script(nearest, view, clone)  # the clone a click there reaches
    ActionChains(browser.driver).move_to_element(canvas).move_by_offset(round(x), round(y)).click().perform()
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_DETAIL}", f"{module['id']}:")
    label = graph.label(clicked)
    wait_until(
        lambda: grid_selected(browser, ids.COMMUNITIES_CLONE_TABLE) == [label],
        10,
        lambda: f"the clone table selects {grid_selected(browser, ids.COMMUNITIES_CLONE_TABLE)}, not {label}",
    )
    wait_until(lambda: state()["selected"] == clicked, 10, lambda: f"the canvas rings {state()['selected']}")
    # a row selected in the table: ringed in the canvas
    rows = grid_rows(browser, ids.COMMUNITIES_CLONE_TABLE)
    other = next(row for row in rows if row["state"] != clicked)
    click_grid_row(browser, ids.COMMUNITIES_CLONE_TABLE, other["clone"])
    wait_until(lambda: state()["selected"] == other["state"], 10, lambda: f"the canvas rings {state()['selected']}")
    # zoomed in on it: the transitions' T written, labels that never overlap
    browser.driver.execute_script(
        "const v = document.querySelector(arguments[0]).wholeGraph, i = arguments[1], s = 8 * v.fitScale;"
        "v.view = {s: s, ox: v.width / 2 - s * v.x[i], oy: v.height / 2 - s * v.y[i]}; v.drawScene(); v.present();",
        view,
        other["state"],
    )
    zoomed = state()
    assert zoomed["weights"] > 0 and zoomed["labels"] > 0, zoomed
    boxes = zoomed["boxes"]
    for k, (x0, y0, w0, h0) in enumerate(boxes):
        for x1, y1, w1, h1 in boxes[k + 1 :]:
            assert x0 + w0 <= x1 or x1 + w1 <= x0 or y0 + h0 <= y1 or y1 + h1 <= y0, (boxes[k], (x1, y1, w1, h1))


def test_hovering_the_hierarchys_first_module_raises_no_error(browser: Any) -> None:
    """A hover or a click on the first sector of the module hierarchy (point 0) raises no error in the page: Dash's
    graph read the trace's ``mode`` for such a point of a trace with custom data, and a treemap has none (the
    console's "async-graph ... reading 'includes'" after an Infomap run)."""
    run_infomap(browser)
    graph = f"#{ids.COMMUNITIES_HIERARCHY} .js-plotly-plot"
    wait_until(
        lambda: browser.driver.execute_script(
            "const g = document.querySelector(arguments[0]); return g && g.data && g.data[0] && g.data[0].ids;", graph
        ),
        15,
        "the module hierarchy is not drawn",
    )
    browser.get_logs()  # what came before is other tests' concern
    # a point without a number (the treemap's root): the event handler threw before (a JavascriptException here)
    browser.driver.execute_script(
        "const g = document.querySelector(arguments[0]), trace = g.data[0];"
        "for (const event of ['plotly_hover', 'plotly_click']) {"
        "  g.emit(event, {points: [{curveNumber: 0, pointNumber: null, data: trace, fullData: g._fullData[0],"
        "    id: trace.ids[0], label: trace.labels[0]}]}); }",
        graph,
    )
    time.sleep(0.5)
    assert_no_errors(browser)


def test_the_module_map_and_the_subgraph_filter_to_a_neighbourhood(browser: Any, data_dir: Path) -> None:
    """The module map's filter shows the modules it keeps (Cytoscape's visible nodes), with its sentence; the
    subgraph shows only the found clone's neighbours within the steps asked."""
    from app.services import overviews

    cy_script = test_browser.cy_script
    run_infomap(browser)
    visible = "return cy ? cy.nodes(':visible').map(n => n.id()).sort() : null;"
    wait_until(lambda: cy_script(browser, ids.COMMUNITIES_MAP, visible), 15, "the module map is not drawn")
    folder = session_folder(browser, data_dir)
    elements = overviews.module_map(folder, "", overviews.MAP_LIMIT)["elements"]
    nodes = [e["data"] for e in elements if "source" not in e["data"]]
    centre = max(nodes, key=lambda n: n["flow"])["id"]
    for field, value in ((ids.COMMUNITIES_MAP_CENTRE, centre), (ids.COMMUNITIES_MAP_STEPS, "1")):
        box = browser.find_element(f"#{field}")
        box.send_keys(value)
        box.send_keys("\n")
    expected = sorted(overviews.neighbourhood(elements, centre, 1))
    wait_until(
        lambda: cy_script(browser, ids.COMMUNITIES_MAP, visible) == expected,
        10,
        lambda: f"the map shows {cy_script(browser, ids.COMMUNITIES_MAP, visible)}, not {expected}",
    )
    browser.wait_for_contains_text(f"#{ids.COMMUNITIES_MAP_LEGEND}", f"Showing {len(expected):,} of {len(nodes):,}")
    fills = (
        "const b = cy.nodes(':visible').renderedBoundingBox();"
        "return b.w > 0.6 * cy.width() || b.h > 0.6 * cy.height();"
    )
    wait_until(lambda: cy_script(browser, ids.COMMUNITIES_MAP, fills), 10, "the map is not fitted to the modules kept")
    listed = "return [...document.querySelectorAll('.legend-item[data-module]')].filter(i => i.offsetParent)" + (
        ".map(i => i.dataset.module);"
    )
    assert set(browser.driver.execute_script(listed)) <= set(expected)  # the legend lists no module the filter hides
    assert browser.driver.execute_script(listed)
    # the subgraph of the module with the most flow: its clone of most flow and its neighbours within a step
    click_grid_row(browser, ids.COMMUNITIES_TABLE, top_modules(folder)[0])
    wait_until(lambda: cy_script(browser, ids.COMMUNITIES_GRAPH, visible), 15, "the subgraph is not drawn")
    graph = cy_script(browser, ids.COMMUNITIES_GRAPH, "return cy.elements().map(e => ({data: e.data()}));")
    clones = [e["data"] for e in graph if "source" not in e["data"]]
    found = max(clones, key=lambda n: n["flow"])
    browser.find_element(f"#{ids.COMMUNITIES_CLONE_SEARCH}").send_keys(found["label"])
    steps = browser.find_element(f"#{ids.COMMUNITIES_CLONE_STEPS}")
    steps.send_keys("\b1")
    near = sorted(overviews.neighbourhood(graph, str(found["id"]), 1))
    wait_until(
        lambda: cy_script(browser, ids.COMMUNITIES_GRAPH, visible) == near,
        10,
        lambda: f"the subgraph shows {cy_script(browser, ids.COMMUNITIES_GRAPH, visible)}, not {near}",
    )
    assert len(near) < len(clones)
