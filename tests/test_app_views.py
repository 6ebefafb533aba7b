"""The Communities page's view in the URL (issue 47), without a browser: the query string read (untrusted: only
well-formed values, a sentence for each other) and written (a fixed order, defaults left out), checked against the
session's run, the one callback that owns the view (from the URL or from what the user did, never both: no loop),
and the page's callbacks free of cycles between them (the renderer refuses those). The tables are grids."""

from __future__ import annotations

import json
from collections import defaultdict
from contextvars import copy_context
from pathlib import Path
from typing import Any

import pytest
from dash import no_update
from dash._callback_context import context_value
from dash._utils import AttributeDict

from app import ids, sessions
from app.services import graphs as graph_service


@pytest.fixture(autouse=True)
def _isolated(data_dir: Path) -> Path:
    """Every test in its own data folder."""
    return data_dir


@pytest.fixture(scope="module")
def pages() -> Any:
    from app import main
    from app.pages import communities
    from app.pages.community import view

    return main, communities, view


def test_a_query_is_read_and_written_back(pages: Any) -> None:
    _, _, view = pages
    asked, problems = view.parse_view("?module=3%3A1&level=3&run=previous&threshold=0.25&layout=circle&x=1")
    assert asked == view.DEFAULT_VIEW | {
        "run": "previous", "module": "3:1", "level": "3", "threshold": 0.25, "layout": "circle"
    }  # fmt: skip
    assert problems == []  # unknown keys are ignored
    assert view.view_search(asked) == "?run=previous&module=3%3A1&level=3&threshold=0.25&layout=circle"
    assert view.parse_view(view.view_search(asked))[0] == asked
    assert view.view_search(view.DEFAULT_VIEW) == "" and view.parse_view("")[0] == view.DEFAULT_VIEW
    assert view.parse_view({"module": "7", "level": ""})[0]["module"] == "7"  # Dash pages' keywords


@pytest.mark.parametrize(
    ("query", "key"),
    [
        ("module=<script>", "module"),
        ("module=1;drop", "module"),
        ("module=" + "9" * 400, "module"),
        ("level=../..", "level"),
        ("run=yesterday", "run"),
        ("threshold=2", "threshold"),
        ("threshold=nan", "threshold"),
        ("threshold=-0.1", "threshold"),
        ("layout=cose", "layout"),
    ],
)
def test_a_query_value_that_is_not_well_formed_is_left_out(pages: Any, query: str, key: str) -> None:
    _, _, view = pages
    asked, problems = view.parse_view(query)
    assert asked[key] == view.DEFAULT_VIEW[key]
    assert len(problems) == 1 and f"The link's {key} " in problems[0]


def test_a_view_is_checked_against_the_sessions_run(pages: Any) -> None:
    _, _, view = pages
    sid = sessions.new_session_id()
    folder = sessions.session_folder(sid)
    modules = [row["id"] for row in graph_service.module_rows(graph_service.read_communities(folder))]
    good = dict(view.DEFAULT_VIEW, module=modules[1])
    assert view.checked_view(good, sid) == (good, [])
    checked, problems = view.checked_view(dict(good, module="999", level="998"), sid)
    assert checked["module"] is None and checked["level"] == ""
    assert problems == [
        "The link's module 999 is not in this run; it is not opened.",
        "The link's level (the submodules of module 998) is not in this run; it is not opened.",
    ]
    # the sample's session has no run before its bundled one
    checked, problems = view.checked_view(dict(good, run="previous", layout="circle"), sid)
    assert checked == dict(view.DEFAULT_VIEW, layout="circle") and "no earlier Infomap run" in problems[0]


def navigate(view: Any, trigger: str | None, **values: Any) -> dict[str, Any]:
    """Call the view callback as the renderer would after ``trigger`` ("id.property", None: the page opened) with
    the page's ``values`` (by argument name; the rest at the page's defaults); its outputs by name."""
    arguments = {
        "search": "", "table_rows": [], "tapped": None, "path": [], "crumbs": [], "drill": None, "run": "current",
        "threshold": 0, "layout": "preset", "_version": 0, "clicked": None, "selected": None, "level": "",
        "session_id": None, "kept_layout": None, "whole_drawn": None, "whole_layout": "packed", "whole_edges": 2000,
        "whole_filter": "", "share": None,
    } | values  # fmt: skip
    triggered = [{"prop_id": trigger, "value": None}] if trigger else []  # the initial call: none

    def run() -> Any:
        context_value.set(AttributeDict(triggered_inputs=triggered, inputs_list=[], states_list=[]))
        return view.navigate(**arguments)

    names = (
        "selected", "level", "run", "threshold", "layout", "table", "draw", "whole", "edges", "filter", "search",
        "note",
    )  # fmt: skip
    return dict(zip(names, copy_context().run(run), strict=True))


def test_the_view_callback_reads_the_url_or_writes_it_never_both(pages: Any) -> None:
    _, _, view = pages
    sid = sessions.new_session_id()
    saved = graph_service.read_communities(sessions.session_folder(sid))
    modules = [row["id"] for row in graph_service.module_rows(saved)]
    # the page opens on a link: the view is set, the URL is left as it is
    out = navigate(view, None, search=f"?module={modules[2]}&layout=circle", session_id=sid)
    assert out["selected"] == modules[2] and out["layout"] == "circle" and out["table"] == {"ids": [modules[2]]}
    assert out["search"] is no_update and out["note"] is None
    # Back to a URL without a view: nothing open
    out = navigate(view, f"{ids.COMMUNITIES_URL}.search", search="", selected=modules[2], session_id=sid)
    assert out["selected"] is None and out["table"] == {"ids": []} and out["search"] is no_update
    # Back or Forward draws the page anew, and the first call of its fresh callbacks can be said as the grid's (a
    # browser test: its rows None, the fresh stores empty): the URL's view is opened, as when the page opens
    out = navigate(view, f"{ids.COMMUNITIES_TABLE}.selectedRows", table_rows=None, search=f"?module={modules[2]}",
                   session_id=sid)  # fmt: skip
    assert out["selected"] == modules[2] and out["table"] == {"ids": [modules[2]]} and out["search"] is no_update
    # a click on a row: the module opens, the URL gets it, the table (already selected) is left alone
    picked = [{"id": modules[3]}]
    out = navigate(view, f"{ids.COMMUNITIES_TABLE}.selectedRows", table_rows=picked, selected=modules[2])
    assert out["selected"] == modules[3] and out["search"] == f"?module={modules[3]}" and out["table"] is no_update
    # the table saying again what is open (its rows came again): nothing changes
    out = navigate(view, f"{ids.COMMUNITIES_TABLE}.selectedRows", table_rows=[{"id": modules[3]}], selected=modules[3])
    assert all(value is no_update for value in out.values())
    # a module on the map: the table follows; the layout: only the URL changes
    out = navigate(view, f"{ids.COMMUNITIES_MAP}.tapNodeData", tapped={"id": modules[1]}, search="?module=9")
    assert out["selected"] == modules[1] and out["table"] == {"ids": [modules[1]]}
    assert out["search"] == f"?module={modules[1]}"
    out = navigate(
        view, f"{ids.COMMUNITIES_GRAPH_LAYOUT}.value", layout="circle", selected="4", search="?module=4", threshold=0.5
    )
    assert out["search"] == "?module=4&threshold=0.5&layout=circle" and out["selected"] is no_update
    # the breadcrumb drawn anew (its buttons unclicked) changes nothing; a click on one goes up to its level
    crumb = f'{{"index":"","type":"{ids.COMMUNITIES_CRUMB}"}}.n_clicks'
    out = navigate(view, crumb, crumbs=[None], level="4", search="?level=4")
    assert all(value is no_update for value in out.values())
    out = navigate(view, crumb, crumbs=[1], level="4", search="?level=4")
    assert out["level"] == "" and out["search"] == ""
    # a new run, or the other run: its top level, nothing open
    out = navigate(view, f"{ids.COMMUNITIES_VERSION}.data", selected="4", level="4", search="?module=4&level=4")
    assert out["selected"] is None and out["level"] == "" and out["search"] == ""
    out = navigate(view, f"{ids.COMMUNITIES_RUN_SHOWN}.value", run="previous", selected="4", search="?module=4")
    assert out["selected"] is None and out["search"] == "?run=previous"
    # a link with what the run lacks: a sentence, the rest opens
    out = navigate(view, None, search="?module=999&layout=zigzag&threshold=0.2", session_id=sid)
    assert out["selected"] is no_update and out["threshold"] == 0.2
    note = json.dumps(out["note"].to_plotly_json(), default=str)
    assert "module 999 is not in this run" in note and "layout 'zigzag'" in note


def test_the_whole_graph_and_its_filter_are_in_the_url(pages: Any) -> None:
    """Every part of the screen comes from the URL: the whole graph drawn (in its layout), its transitions and its
    filter open from a link and go back with Back; what the user changes there is written to the URL."""
    _, _, view = pages
    sid = sessions.new_session_id()
    link = "?whole=transitions&edges=5000&filter=degree%3D4-%3Bcore%3D3%3Blargest"
    out = navigate(view, None, search=link, session_id=sid)
    assert (out["draw"], out["whole"], out["edges"]) == (1, "transitions", 5000)
    assert out["filter"] == "degree=4-;core=3;largest" and out["search"] is no_update and out["note"] is None
    drawn = {"whole_drawn": 1, "whole_layout": "transitions", "whole_edges": 5000, "whole_filter": out["filter"]}
    out = navigate(view, f"{ids.COMMUNITIES_URL}.search", search="", session_id=sid, **drawn)  # Back: a plain page
    assert (out["draw"], out["whole"], out["edges"], out["filter"]) == (0, no_update, 2000, "")
    # the user draws it, picks the layout by modules and filters: each is written to the URL
    out = navigate(view, f"{ids.COMMUNITIES_WHOLE_SHOW}.n_clicks", whole_drawn=1, session_id=sid)
    assert out["search"] == "?whole=packed" and out["draw"] is no_update
    out = navigate(
        view, f"{ids.COMMUNITIES_WHOLE_FILTER_SPEC}.data", whole_drawn=1, whole_filter="ego=7/2", search="?whole=packed"
    )
    assert out["search"] == "?whole=packed&filter=ego%3D7%2F2" and out["filter"] is no_update
    # a link that carries a share the session does not hold: its whole graph waits for the shared model
    from app.services import shares

    other = sessions.session_folder(sessions.new_session_id())
    graph_service.run_communities(other, trials=1, seed=9)
    token = shares.share_view(other)
    out = navigate(view, None, search="?whole=packed", session_id=sid, share=token)
    assert out["draw"] is no_update and out["whole"] is no_update
    out = navigate(
        view, None, search="?whole=packed", session_id=sid, share=shares.share_view(sessions.session_folder(sid))
    )  # its own share: drawn at once
    assert out["draw"] == 1
    out = navigate(view, None, search="?whole=spiral&edges=7&filter=nonsense", session_id=sid)
    note = json.dumps(out["note"].to_plotly_json(), default=str)
    assert "whole 'spiral'" in note and "edges '7'" in note and "filter 'nonsense'" in note
    assert out["draw"] is no_update and out["filter"] is no_update


def test_the_page_builds_its_url_from_the_query_and_its_tables_are_grids(pages: Any) -> None:
    _, communities, _ = pages
    page = str(communities.layout(module="3", level="", junk="x" * 1000))
    assert "search='?module=3&level='" in page and "junk" not in page
    assert page.count("AgGrid(") == 3 and "DataTable" not in page


def test_no_output_is_written_by_two_callbacks_unmarked(pages: Any) -> None:
    """Two callbacks writing one property without ``allow_duplicate`` fight over it (the module map's colour rules
    and its searched path both set its stylesheet: the last one wrote over the other): every page's outputs are
    each one callback's, or marked."""
    main, _, _ = pages
    client = main.server.test_client()
    for path in ("/", "/train", "/communities", "/maps", "/compare", "/export", "/prune", "/generate", "/decode"):
        client.get(path)
    callbacks = json.loads(client.get("/_dash-dependencies").get_data(as_text=True))
    written: dict[str, int] = defaultdict(int)
    for callback in callbacks:
        text = callback["output"]
        for part in [p for p in text.strip(".").split("...") if p] if text.startswith("..") else [text]:
            written[part] += 1  # a marked duplicate carries its own suffix ("@<hash>")
    assert [output for output, count in written.items() if count > 1] == []


def test_no_two_callbacks_form_a_loop(pages: Any) -> None:
    """The renderer refuses a cycle between callbacks (one writes what the other reads and back); the view callback
    reads and writes the URL, the view's stores and the table's selection in one callback."""
    main, _, _ = pages
    client = main.server.test_client()
    client.get("/communities")
    callbacks = json.loads(client.get("/_dash-dependencies").get_data(as_text=True))

    def outputs(callback: dict[str, Any]) -> set[str]:
        text = callback["output"]
        parts = [p for p in text.strip(".").split("...") if p] if text.startswith("..") else [text]
        return {part.split("@")[0] for part in parts}

    inputs = [{f"{i['id']}.{i['property']}" for i in callback["inputs"]} for callback in callbacks]
    after = defaultdict(set)
    for a, callback in enumerate(callbacks):
        after[a] = {b for b in range(len(callbacks)) if b != a and outputs(callback) & inputs[b]}
    state: dict[int, int] = {}

    def visit(node: int, path: list[int]) -> None:
        state[node] = 1
        for following in after[node]:
            assert state.get(following) != 1, [callbacks[i]["output"][:60] for i in path + [node, following]]
            if not state.get(following):
                visit(following, path + [node])
        state[node] = 2

    for node in range(len(callbacks)):
        if not state.get(node):
            visit(node, [])


def test_the_layout_chosen_last_comes_back(data_dir: Path) -> None:
    """Issue 47: the subgraph's layout went back to "preset" whenever the page was opened from the navigation bar
    (its link carries no view). The choice is kept in the browser and opens again, unless a link names another."""
    from app.pages.community import view

    sid = sessions.new_session_id()
    sessions.session_folder(sid)
    assert view.keep_layout("circle") == "circle" and view.keep_layout("zigzag") is view.no_update
    assert navigate(view, None, search="", kept_layout="circle", session_id=sid)["layout"] == "circle"
    linked = navigate(view, None, search="?layout=concentric", kept_layout="circle", session_id=sid)
    assert linked["layout"] == "concentric"
    assert navigate(view, None, search="", kept_layout="zigzag", session_id=sid)["layout"] is view.no_update
