"""The Communities page's services and callbacks, called directly (no browser): Infomap runs, the module tree, the
module map and word search, subgraphs, tables and the inspector, and two runs compared. Every test works in its
own ``CHMM_DATA_DIR``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import TINY_FORM, data_uri

from app import figures, sessions
from app.services import UserError, overviews
from app.services import graphs as graph_service
from app.services import models as model_service
from app.services import pruning as prune_service
from app.services import tables as table_service
from engine import api

TINY = TINY_FORM


@pytest.fixture(autouse=True)
def _isolated(data_dir: Path) -> Path:
    """Every test in its own data folder."""
    return data_dir


# ------------------------------------------------------------------------------------------ communities
def test_a_new_session_starts_with_the_sample_models_precomputed_communities(folder: Path) -> None:
    saved = graph_service.read_communities(folder)
    assert saved is not None and saved["reference"] and saved["threshold"] == 1e-3
    rows = graph_service.module_rows(saved)
    assert rows and sum(r["flow"] for r in rows) == pytest.approx(1.0, abs=1e-4)
    assert any("the" in r["words"].split() for r in rows)
    detail = graph_service.module_detail(folder, rows[0]["id"])
    assert detail["elements"] and detail["words"]
    prune_service.apply_prune(folder, -2)  # a new current model: the precomputed run no longer applies
    assert graph_service.read_communities(folder) is None


def test_communities_run_is_saved_and_its_modules_cover_the_flow(folder: Path) -> None:
    saved = graph_service.run_communities(folder, trials=2, two_level=True, seed=0)
    assert (folder / graph_service.COMMUNITIES).is_file()
    assert graph_service.read_communities(folder) == saved
    assert saved["options"]["two_level"] and saved["options"]["trials"] == 2
    assert sum(m["flow"] for m in saved["modules"] if not m["parent"]) == pytest.approx(1.0, abs=1e-6)
    rows = graph_service.module_rows(saved)
    assert len(rows) == len(saved["modules"]) > 1  # two-level: every module is a top module
    assert [r["flow"] for r in rows] == sorted((r["flow"] for r in rows), reverse=True)
    assert graph_service.module_rows(saved, "zzzzzz") == []
    word = saved["modules"][0]["words"][0]["text"]
    assert any(r["id"] == saved["modules"][0]["id"] for r in graph_service.module_rows(saved, word))
    detail = graph_service.module_detail(folder, rows[0]["id"])
    assert detail["words"] and detail["reference"] and detail["words"][0]["seen"] is not None
    nodes = [e for e in detail["elements"] if "source" not in e["data"]]
    edges = [e for e in detail["elements"] if "source" in e["data"]]
    assert len(nodes) == rows[0]["size"] and edges and detail["note"] is None
    assert all("position" in n and n["data"]["colour"].startswith("#") for n in nodes)
    ids_ = {n["data"]["id"] for n in nodes}
    assert all(e["data"]["source"] in ids_ and e["data"]["target"] in ids_ and e["data"]["width"] > 0 for e in edges)
    # the export uses the saved run's settings, so module ids agree with the page
    _, _, note = graph_service.export_graph(folder, "clu", 1e-3, rows[0]["id"])
    assert f"{rows[0]['size']} clones" in note


def test_multilevel_result_keeps_the_tree_for_the_breadcrumb(folder: Path) -> None:
    saved = graph_service.run_communities(folder, trials=2, two_level=False, seed=1, threshold="2e-3")
    assert saved["threshold"] == 2e-3
    top = graph_service.module_rows(saved)
    assert sum(r["flow"] for r in top) == pytest.approx(1.0, abs=1e-4)
    by_id = {m["id"]: m for m in saved["modules"]}
    for module in saved["modules"]:  # the whole tree is kept: every child is listed and points back to its parent
        assert all(by_id[child]["parent"] == module["id"] for child in module["children"])
    with pytest.raises(UserError, match="between 0 and 1"):
        graph_service.run_communities(folder, threshold="2")
    for bad, expected in (("abc", "must be a number such as 0.5"), ("0", "above 0"), ("1e9", "at most 100")):
        with pytest.raises(UserError, match=expected):
            graph_service.run_communities(folder, markov_time=bad)
    assert graph_service.run_communities(folder, trials=1, markov_time="0.5")["options"]["markov_time"] == 0.5


def test_word_search_and_module_map_services(folder: Path) -> None:
    graph_service.run_communities(folder, trials=2)
    found = graph_service.find_word(folder, "Alice")
    assert found["text"] == " alice " and [s["char"] for s in found["steps"]][1:6] == list("alice")
    assert found["modules"] and found["modules"][0]["id"] == found["steps"][0]["top"] and not found["replaced"]
    model = model_service.load_current(folder)
    path = api.graph.clone_path(model, "alice")
    assert found["clones"] == path.clones.tolist() and found["bps"] > 0
    assert graph_service.find_word(folder, "zorblax")["replaced"] == ["zorblax"]
    for bad, expected in (("", "Type a word"), ("x" * 300, "at most 200"), ("!!!", "Cannot find '!!!'")):
        with pytest.raises(UserError, match=expected):
            graph_service.find_word(folder, bad)
    drawn = overviews.module_map(folder)
    nodes = [e for e in drawn["elements"] if "source" not in e["data"]]
    edges = [e for e in drawn["elements"] if "source" in e["data"]]
    assert len(nodes) == drawn["modules"] and len(edges) == drawn["links"] <= 4 * len(nodes)
    ends = {e["data"]["source"] for e in edges} | {e["data"]["target"] for e in edges}
    assert ends <= {n["data"]["id"] for n in nodes}
    assert all(n["data"]["colour"] == graph_service.module_colour(n["data"]["id"]) for n in nodes)
    assert any("flat" in note for note in drawn["notes"])


def test_module_rows_and_trail_walk_a_module_tree() -> None:
    def module(mid: str, flow: float, children: list[str], word: str) -> dict:
        parent = mid.rpartition(":")[0]
        words = [{"text": word, "probability": 0.5, "seen": True}]
        return {
            "id": mid,
            "parent": parent,
            "name": word,
            "size": 3,
            "flow": flow,
            "chars": word,
            "children": children,
            "words": words,
        }

    saved = {
        "modules": [
            module("1", 0.6, ["1:1", "1:2"], "the"),
            module("1:1", 0.4, [], "th"),
            module("1:2", 0.2, ["1:2:1"], "he"),
            module("1:2:1", 0.2, [], "e"),
            module("2", 0.4, [], "and"),
        ]
    }
    assert [r["id"] for r in graph_service.module_rows(saved)] == ["1", "2"]
    assert [r["submodules"] for r in graph_service.module_rows(saved)] == [2, 0]
    assert [r["id"] for r in graph_service.module_rows(saved, parent="1")] == ["1:1", "1:2"]
    assert [r["id"] for r in graph_service.module_rows(saved, "he", parent="1")] == ["1:2"]
    assert graph_service.module_trail(saved, "1:2:1") == [
        ("", "All modules"),
        ("1", "1 the"),
        ("1:2", "1:2 he"),
        ("1:2:1", "1:2:1 e"),
    ]
    assert graph_service.module_trail(saved, "9") == [("", "All modules")]


def test_module_subgraph_is_capped(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = graph_service.run_communities(folder, trials=1)
    monkeypatch.setattr(graph_service, "MAX_GRAPH_ELEMENTS", 10)
    big = max(saved["modules"], key=lambda m: m["size"])
    detail = graph_service.module_detail(folder, big["id"])
    assert len(detail["elements"]) <= 10 and "Showing" in detail["note"]


def test_subgraph_clones_come_grouped_by_module_for_the_circular_layout(folder: Path) -> None:
    """Issue 35 (control: circular by module): the circular layout places the clones in the elements' order, so the
    subgraph lists them grouped by their deepest (sub)module, most flow first within each, before the transitions."""
    saved = graph_service.run_communities(folder, trials=1, seed=0, markov_time=0.5)  # submodules at 0.5
    parent = max((m for m in saved["modules"] if m.get("children")), key=lambda m: len(m["children"]))
    detail = graph_service.module_detail(folder, parent["id"])
    nodes = [e["data"] for e in detail["elements"] if "source" not in e["data"]]
    assert detail["elements"][: len(nodes)] == [e for e in detail["elements"] if "source" not in e["data"]]
    modules = [n["module"] for n in nodes]
    assert len(set(modules)) > 1 and modules == sorted(modules)
    for module in set(modules):
        flows = [n["flow"] for n in nodes if n["module"] == module]
        assert flows == sorted(flows, reverse=True)


def test_subgraph_layout_keeps_weak_links_and_separate_pieces_readable() -> None:
    import networkx as nx

    graph = nx.DiGraph()
    for leaf in "bcde":  # a star: hub a, leaf e reached only by a rare transition
        graph.add_edge("a", leaf, weight=0.3 if leaf != "e" else 1e-4)
    graph.add_edge("b", "b", weight=0.5)  # a self-loop
    graph.add_edge("x", "y", weight=0.9)  # two more connected pieces
    graph.add_edge("p", "q", weight=0.9)
    graph.add_edge("q", "r", weight=0.9)
    positions = graph_service.graph_positions(graph)
    assert set(positions) == set(graph)
    points = {node: np.array(xy) for node, xy in positions.items()}
    assert all(np.all(np.isfinite(p)) and np.all(np.abs(p) <= 1.0 + 1e-9) for p in points.values())

    def gap(u: str, v: str) -> float:
        return float(np.linalg.norm(points[u] - points[v]))

    assert gap("a", "e") < 1.5 * gap("a", "b")  # the rare transition's clone sits with the other leaves
    pieces = ["abcde", "xy", "pqr"]
    between = min(gap(u, v) for i, one in enumerate(pieces) for other in pieces[i + 1 :] for u in one for v in other)
    assert between > gap("a", "b")  # the pieces lie apart, not interleaved
    big = nx.gnm_random_graph(graph_service.KAMADA_KAWAI_NODES + 20, 400, seed=1, directed=True)
    assert len(graph_service.graph_positions(big)) == big.number_of_nodes()  # the spring layout above the limit


def test_communities_bad_input_and_stale_results(folder: Path) -> None:
    prune_service.apply_prune(folder, -2)  # leaves the precomputed run of the sample model behind
    with pytest.raises(UserError, match="Run Infomap first"):
        graph_service.module_detail(folder, "1")
    with pytest.raises(UserError, match="trials"):
        graph_service.run_communities(folder, trials=0)
    graph_service.run_communities(folder, trials=1)
    with pytest.raises(UserError, match="does not exist"):
        graph_service.module_detail(folder, "999")
    prune_service.apply_prune(folder, -2)  # a new current model: the saved run no longer applies
    assert graph_service.read_communities(folder) is None


def test_the_inspector_says_where_a_clones_flow_comes_from(folder: Path) -> None:
    """Issue 35, defect 7: "Most probable previous clones" listed T(previous -> clone), which says where the previous
    clone goes; a clone's incoming flow shares, computed here from the dense flow matrix, are what it lists now."""
    saved = graph_service.read_communities(folder)
    detail = graph_service.module_detail(folder, graph_service.module_rows(saved)[0]["id"])
    model = model_service.load_current(folder)
    graph = api.model_graph(model, saved["threshold"])
    dense_flow = graph.weight.multiply(graph.flow[:, None]).toarray()  # flow(u -> v) = flow(u) T(u, v)
    checked = 0
    for element in detail["elements"]:
        data = element["data"]
        if "source" in data or not data["in"]:
            continue
        v = int(data["state"])
        column = dense_flow[:, v] / dense_flow[:, v].sum()
        for label, share, _ in data["in"]:
            u = next(i for i in np.flatnonzero(column) if graph.label(int(i)) == label)
            assert share == pytest.approx(column[u], abs=1e-6)
        assert [row[1] for row in data["in"]] == sorted((row[1] for row in data["in"]), reverse=True)
        checked += 1
    assert checked > 3


def test_the_module_pane_does_not_ask_for_a_run_that_exists(data_dir: Path) -> None:
    """Issue 35, defect 13: on the sample model (its communities come with it) the module pane said "Run Infomap"."""
    import app.main  # noqa: F401  (registers the pages)
    from app.pages import communities as communities_page

    sid = sessions.new_session_id()
    folder = sessions.session_folder(sid)
    assert graph_service.read_communities(folder) is not None
    pane = str(communities_page.show_module(None, "current", sid)[0])
    assert "Run Infomap" not in pane and "Click a module on the map" in pane
    prune_service.apply_prune(folder, -2)  # a new current model: no result for it yet
    assert "Run Infomap" in str(communities_page.show_module(None, "current", sid)[0])


def test_hierarchy_and_two_runs_compared(data_dir: Path) -> None:
    """Issue 35 (hierarchy): the module tree sized by flow with each module's codebook bits, the code length by level
    (summing to Infomap's), and an alluvial diagram of two runs whose bands are the flow of the clones they share."""
    import app.main  # noqa: F401  (registers the pages)
    from app.pages import communities as communities_page

    sid = sessions.new_session_id()
    folder = sessions.session_folder(sid)
    first = graph_service.run_communities(folder, trials=2, seed=0, markov_time=1)
    assert graph_service.read_previous_communities(folder) is not None  # the bundled run of the sample model
    second = graph_service.run_communities(folder, trials=2, seed=0, markov_time=0.5)
    assert graph_service.read_previous_communities(folder)["options"] == first["options"]
    assert sum(second["codelength"]["levels"].values()) == pytest.approx(second["summary"]["codelength"], abs=1e-5)
    tree = graph_service.module_tree(second, sectors=10**6)  # every module
    by_id = dict(zip(tree["ids"], tree["flows"], strict=True))
    for module in second["modules"]:
        if module["children"]:
            assert sum(by_id[c] for c in module["children"]) == pytest.approx(by_id[module["id"]], rel=1e-6)
    assert set(tree["parents"]) <= set(tree["ids"]) | {""}
    small = graph_service.module_tree(second, sectors=6)  # the 6 modules of most flow whose parents are drawn
    drawn = dict(zip(small["ids"][:-1], small["flows"][:-1], strict=True))
    assert len(drawn) == 6 and all(parent in drawn or parent == "" for parent in small["parents"][:-1])
    frontier = [m for m in second["modules"] if m["id"] not in drawn and (not m["parent"] or m["parent"] in drawn)]
    assert max(m["flow"] for m in frontier) <= min(drawn.values())
    tops = [m["flow"] for m in second["modules"] if not m["parent"]]
    left_out = len(tops) - sum(not parent for parent in small["parents"][:-1])
    assert small["ids"][-1] == "more" and small["labels"][-1].startswith(f"{left_out:,} more top modules")
    assert sum(f for f, p in zip(small["flows"], small["parents"], strict=True) if not p) == pytest.approx(sum(tops))
    assert small["colours"][:-1] == [graph_service.module_colour(i) for i in small["ids"][:-1]]  # as on the map
    flows = graph_service.alluvial(first, second, top=10_000)  # every module: no "other"
    node_flow = {int(k): v for k, v in second["node_flow"].items()}
    tops = [sorted((m for m in run["modules"] if not m["parent"]), key=lambda m: -m["flow"]) for run in (first, second)]
    brute = {}
    for i, a in enumerate(tops[0]):
        for j, b in enumerate(tops[1]):
            shared = set(a["nodes"]) & set(b["nodes"])
            if shared:
                brute[(i, len(tops[0]) + j)] = sum(node_flow[n] for n in shared)
    found = dict(zip(zip(flows["sources"], flows["targets"], strict=True), flows["flows"], strict=True))
    assert found.keys() == brute.keys() and all(found[k] == pytest.approx(brute[k]) for k in brute)
    assert sum(flows["flows"]) == pytest.approx(1.0, abs=1e-6)
    hierarchy, levels, alluvial = communities_page.show_hierarchy(1, 0, sid)
    assert hierarchy.data[0].type == "treemap" and alluvial.data[0].type == "sankey"
    assert "Index codebook (top modules)" in str(levels) and "Modules of level 2" in str(levels)


def test_runs_of_a_model_and_of_its_pruned_copy_are_compared_clone_by_clone(data_dir: Path, tmp_path: Path) -> None:
    """Issue 35 (hierarchy, two models): an Infomap run of the model and one of its pruned copy (the same clones)
    are drawn as an alluvial diagram marked as two models; a model with other clones is not compared with either."""
    from engine.model import dense as model_module

    sid = sessions.new_session_id()
    folder = sessions.session_folder(sid)
    first = graph_service.run_communities(folder, trials=1, seed=0, markov_time=1)
    prune_service.apply_prune(folder, -2)
    assert graph_service.read_communities(folder) is None  # the run was of the model before the prune
    second = graph_service.run_communities(folder, trials=1, seed=0, markov_time=1)
    assert second["clones"] == first["clones"] and second["model"] != first["model"]
    previous = graph_service.read_previous_communities(folder)
    assert previous is not None and previous["other_model"] and previous["model"] == first["model"]
    flows = graph_service.alluvial(previous, second)
    assert flows["before"]["other_model"] and 0.99 <= sum(flows["flows"]) <= 1.0 + 1e-6
    assert "previous model" in figures.alluvial_figure(flows).layout.title.text

    current = graph_service.load_current(folder)
    rng = np.random.default_rng(0)
    other = model_module.random_model(
        list(current.symbols), current.layout.n_clones + 1, current.layout.block_pairs, rng
    )
    path = tmp_path / "other.npz"
    other.save(path)
    model_service.load_model_upload(folder, data_uri(path.read_bytes(), "application/octet-stream"), "other.npz")
    third = graph_service.run_communities(folder, trials=1, seed=0, markov_time=1)
    assert third["clones"] != second["clones"]
    assert graph_service.read_previous_communities(folder) is None


def test_clone_and_transition_tables(folder: Path) -> None:
    """Issue 35 (tables): per clone its flows, the flow it sends out of its module, degree and betweenness; per
    transition T and flow, and which cross the module's boundary. The boundary adds up to the module's exit and
    enter flows, and betweenness is networkx's on the module's subgraph."""
    import networkx as nx

    saved = graph_service.read_communities(folder)
    module = max((m for m in saved["modules"] if not m["parent"]), key=lambda m: m["size"])
    tables = table_service.graph_tables(folder, module["id"])
    clones, transitions = (tables[k].rows_of(np.arange(tables[k].rows)) for k in ("clones", "transitions"))
    assert {c["state"] for c in clones} == set(module["nodes"])
    assert sum(c["exit_flow"] for c in clones) == pytest.approx(module["exit_flow"], rel=1e-4)
    assert sum(c["enter_flow"] for c in clones) == pytest.approx(module["enter_flow"], rel=1e-4)
    into = sum(t["flow"] for t in transitions if t["boundary"] == "in")
    assert into == pytest.approx(module["enter_flow"], rel=1e-4)
    assert sum(c["flow"] for c in clones) == pytest.approx(module["flow"], rel=1e-4)
    inner = nx.DiGraph()
    inner.add_nodes_from(c["clone"] for c in clones)
    inner.add_edges_from((t["from"], t["to"]) for t in transitions if not t["boundary"])
    expected = nx.betweenness_centrality(inner)
    assert all(c["betweenness"] == pytest.approx(expected[c["clone"]], abs=1e-6) for c in clones)
    whole = table_service.graph_tables(folder)
    assert whole["module"] == "" and whole["clone_count"] >= len(clones)
    assert all(t["boundary"] == "" for t in whole["transitions"].rows_of(np.arange(whole["transition_count"])))
    with pytest.raises(UserError, match="does not exist"):
        table_service.graph_tables(folder, "999")


def test_clone_size_and_colour_show_any_numeric_column_of_the_clone_table(folder: Path) -> None:
    """Issue 35 (control): the subgraph's clones sized and coloured by any numeric column of the clone table, scaled
    to the subgraph's own range: the clone with the most (degree, betweenness, ...) is the largest and darkest, the
    one with the least the smallest and lightest; flow still works from the nodes alone."""
    import app.main  # noqa: F401  (registers the pages)
    from app.pages import communities as communities_page

    saved = graph_service.read_communities(folder)
    module = max((m for m in saved["modules"] if not m["parent"]), key=lambda m: m["size"])
    table = table_service.graph_tables(folder, module["id"])["clones"]
    clones = table.rows_of(np.arange(table.rows))
    elements = [{"data": {"id": str(c["state"]), "label": c["clone"], "flow": c["flow"]}} for c in clones]
    states = [c["state"] for c in clones]  # the rows the page reads on the server for the subgraph's clones
    assert table_service.clone_rows(folder, module["id"], "current", states[::-1]) == clones
    assert {o["value"] for o in communities_page.MAPPED_OPTIONS} == set(communities_page.MAPPED_COLUMNS)
    for key in communities_page.MAPPED_COLUMNS:
        rules = communities_page.graph_controls(0, key, None, elements, key, clones)
        width = {r["selector"]: r["style"]["width"] for r in rules if "width" in r["style"]}
        colour = {r["selector"]: r["style"]["background-color"] for r in rules if "background-color" in r["style"]}
        assert len(width) == len(colour) == len(clones)
        most = max(clones, key=lambda c: c[key])
        least = min(clones, key=lambda c: c[key])
        if most[key] > least[key]:
            assert width[f'node[id = "{most["state"]}"]'] == communities_page.NODE_SIZES[1]
            assert width[f'node[id = "{least["state"]}"]'] == communities_page.NODE_SIZES[0]
            assert colour[f'node[id = "{most["state"]}"]'] == "#08306b"
            assert colour[f'node[id = "{least["state"]}"]'] == "#c6dbef"
        ordered = sorted(clones, key=lambda c: c[key])
        sizes = [width[f'node[id = "{c["state"]}"]'] for c in ordered]
        assert sizes == sorted(sizes)
    sides = communities_page.graph_controls(0, "same", None, elements, "boundary", clones)  # the module's boundary
    colour = {r["selector"]: r["style"]["background-color"] for r in sides}
    named = {v: k for k, v in communities_page.BOUNDARY_COLOURS.items()}
    share = communities_page.BOUNDARY_SHARE
    for c in clones:
        side = named[colour[f'node[id = "{c["state"]}"]']]
        assert (side in ("enters", "both")) == (c["enter_flow"] >= share * c["flow"] > 0)
        assert (side in ("leaves", "both")) == (c["exit_flow"] >= share * c["flow"] > 0)
    assert len({named[v] for v in colour.values()}) >= 2
    from_nodes = communities_page.graph_controls(0, "flow", None, elements, "character")
    assert len({r["style"]["width"] for r in from_nodes}) > 1  # no table rows: flow from the nodes
    assert communities_page.graph_controls(0, "same", None, elements, "character") == []


def test_the_module_map_is_readable_at_its_fit_zoom(folder: Path) -> None:
    """Issue 35, defect 12: 158 modules were a hairball at fit zoom, big circles hid labels, colours repeated with no
    legend. The 20 largest are labelled, 12 px on screen at the page's fit zoom, placed so none overlaps another
    label or a circle (computed from the layout the page gets), with a legend of their colours."""
    drawn = overviews.module_map(folder)
    nodes = [e for e in drawn["elements"] if "source" not in e["data"]]
    labelled = [e for e in nodes if e["data"]["label"]]
    assert len(labelled) == min(overviews.MAP_LABELS, len(nodes)) - drawn["unlabelled"] > 0
    xy = np.array([[e["position"]["x"], e["position"]["y"]] for e in nodes])
    sizes = np.array([e["data"]["size"] for e in nodes])
    on_screen = nodes[0]["data"]["font"] * graph_service.fit_zoom(xy, sizes)
    assert on_screen == pytest.approx(graph_service.MAP_FONT_PX, rel=1e-3)
    boxes = []
    for e in labelled:
        place = e["classes"].removeprefix("label-")
        x, y, s = e["position"]["x"], e["position"]["y"], e["data"]["size"]
        boxes.append(graph_service.label_box(x, y, s, e["data"]["label"], e["data"]["font"], place))
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3])
    assert [item["id"] for item in drawn["legend"]] == [e["data"]["id"] for e in labelled]


def test_export_writes_the_run_on_screen(folder: Path) -> None:
    """Issue 47: Export ran Infomap again, so 13% of clones carried another module than the page showed. The page's
    run is what Export writes: here the kept run is altered (top modules 1 and 2 trade their clones), which no new
    Infomap run would reproduce, and the exported ``.clu`` follows it, says which run it is, and at another
    threshold says that Infomap ran for the export."""
    import json

    graph_service.run_communities(folder, trials=2, two_level=True, seed=1, threshold="2e-3")
    path = folder / graph_service.COMMUNITIES
    saved = json.loads(path.read_text(encoding="utf-8"))
    by_id = {m["id"]: m for m in saved["modules"]}
    by_id["1"]["nodes"], by_id["2"]["nodes"] = by_id["2"]["nodes"], by_id["1"]["nodes"]
    saved["node_path"] = {
        node: {"1": "2", "2": "1"}.get(p.split(":")[0], p.split(":")[0]) + p[p.index(":") :]
        for node, p in saved["node_path"].items()
    }
    path.write_text(json.dumps(saved), encoding="utf-8")
    shown = {int(n): m["id"] for m in saved["modules"] for n in m["nodes"]}
    said: list[str] = []
    written, _, note = graph_service.export_graph(folder, "clu", "", report=said.append)
    assert "the modules on the Communities page" in note and "pruned at 0.002" in note
    assert said == ["Writing the Infomap .clu (top modules) file."]  # the run on screen: no Infomap
    text = written.read_text(encoding="utf-8")
    assert "# modules: the Infomap run shown on the Communities page" in text
    rows = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    graph = graph_service.session_graph(folder, 2e-3)
    vertex_state = np.flatnonzero(graph.active())  # vertices 1..n are the active clones by index
    assert {int(vertex_state[int(v) - 1]): module for v, module, _ in rows} == shown
    said.clear()
    _, _, other = graph_service.export_graph(folder, "clu", "1e-3", report=said.append)
    assert "an Infomap run made for this export" in other and "at threshold 0.002" in other
    edges = f"{api.graph.graph_edges(graph_service.view_model(folder), 1e-3):,} edges"
    assert [s.split(" ")[0] for s in said] == ["Building", "Running", "Writing"]  # each stage as it begins
    assert edges in said[0] and "2 trials" in said[1]  # the run's settings


def test_an_empty_subgraph_is_not_downloaded() -> None:
    """Issue 47: PNG and SVG of the subgraph with no module open downloaded an empty image; they say why instead,
    and download once a module is open."""
    import json

    from dash._callback_context import context_value
    from dash._utils import AttributeDict

    from app import ids
    from app.pages.community import module_map

    def clicked(view: str, action: str) -> None:
        key = json.dumps({"action": action, "type": ids.COMMUNITIES_VIEW_BUTTON, "view": view}, separators=(",", ":"))
        context_value.set(AttributeDict(triggered_inputs=[{"prop_id": f"{key}.n_clicks", "value": 1}]))

    clicked("graph", "png")
    out = module_map.view_action([1], 1.0, 1.0, None)
    assert out[5] is module_map.no_update and "Open a module first" in str(out[6])
    out = module_map.view_action([1], 1.0, 1.0, "3")
    assert out[5]["type"] == "png" and out[6] is module_map.no_update
    clicked("map", "svg")
    out = module_map.view_action([1], 1.0, 1.0, None)
    assert out[2]["type"] == "svg" and out[6] is module_map.no_update


def test_a_clone_is_found_beyond_the_open_module(data_dir: Path) -> None:
    """Issue 47: "Find a clone" marked only the open module's clones. A clone of another module is named with its
    module and a button that opens it; one of the open module is marked in place (nothing said); a wrong label says
    what labels look like."""
    from app import ids, sessions
    from app.pages.community import module_card

    sid = sessions.new_session_id()
    folder = sessions.session_folder(sid)
    saved = graph_service.run_communities(folder, trials=1, two_level=True, seed=1, threshold="2e-3")
    first, second = saved["modules"][0], saved["modules"][1]
    label = graph_service.session_graph(folder, 2e-3).label(int(second["nodes"][0]))
    found = graph_service.find_clone(folder, f" {label} ")
    assert found == {"label": label, "state": int(second["nodes"][0]), "module": second["id"]}
    said = module_card.find_clone(label, first["id"], "current", sid)
    button = said.children[1]
    assert f"is in module {second['id']}" in str(said.children[0])
    assert button.id == {"type": ids.COMMUNITIES_PATH_MODULE, "index": 10_000, "module": second["id"]}
    assert module_card.find_clone(label, second["id"], "current", sid) is None  # marked in the open module
    assert "a character, a colon and a number" in str(module_card.find_clone("zz:999", None, "current", sid))
    graph = graph_service.session_graph(folder, 2e-3)  # a bare symbol: its clone of most flow, in the graph ...
    symbol = label.rsplit(":", 1)[0]  # as labels show it (a space: ␣)
    clones = np.flatnonzero(graph.clone_symbol == graph.clone_symbol[int(second["nodes"][0])])
    best = int(clones[np.argmax(graph.flow[clones])])
    assert graph_service.find_clone(folder, symbol)["label"] == graph.label(best)
    elements = graph_service.module_detail(folder, second["id"])["elements"]  # ... and among the subgraph's clones
    drawn = [e["data"] for e in elements if "source" not in e["data"] and e["data"]["label"].startswith(f"{symbol}:")]
    top = max(drawn, key=lambda n: n["flow"])["label"]
    assert module_card.found_label(elements, symbol) == top and module_card.found_label(elements, label) == label


def test_the_whole_graphs_tables_show_while_a_module_is_open(folder: Path) -> None:
    """"Show the whole graph's tables" did nothing while a module was open (the open module won). The click shows
    the whole graph's rows; opening a module afterwards shows that module's again."""
    from dash._callback_context import context_value
    from dash._utils import AttributeDict

    import app.main  # noqa: F401  (registers the pages)
    from app import ids
    from app.pages.community import tables as tables_page

    session = f"{folder.name}.{sessions._signature(folder.name)}"
    saved = graph_service.read_communities(folder)
    module = max((m for m in saved["modules"] if not m["parent"]), key=lambda m: m["size"])
    whole = table_service.graph_tables(folder)

    def tables(trigger: str) -> tuple[Any, ...]:
        context_value.set(AttributeDict(triggered_inputs=[{"prop_id": trigger, "value": 1}]))
        return tables_page.show_tables(module["id"], None, None, 1, session)

    source, note, _ = tables(f"{ids.COMMUNITIES_TABLES_WHOLE}.n_clicks")
    served = tables_page.serve_clones({"startRow": 0, "endRow": 100}, source, session)
    assert source["module"] == "" and served["rowCount"] == whole["clone_count"] > module["size"]
    assert "of the whole graph" in str(note) and len(served["rowData"]) == min(100, whole["clone_count"])
    source, note, _ = tables(f"{ids.COMMUNITIES_SELECTED}.data")
    served = tables_page.serve_clones({"startRow": 0, "endRow": 100}, source, session)
    assert served["rowCount"] == module["size"] and f"of module {module['id']}" in str(note)


def test_the_tables_serve_blocks_sorted_and_filtered_as_a_brute_force_reference(folder: Path) -> None:
    """The clone and transition tables kept in columns on the server serve a grid's blocks: the rows its filter
    keeps (numbers and text, one condition or two), in its sort (one column or two), a block at a time; the same
    rows as sorting and filtering every row in Python. CSV holds every row kept, in that order."""
    import csv

    from app.pages.community.look import EDGE_COLUMNS

    whole = table_service.graph_tables(folder)
    transitions = whole["transitions"].rows_of(np.arange(whole["transition_count"]))
    every = whole["transition_count"]

    def served(sort: list[dict[str, Any]], kept: dict[str, Any]) -> list[dict[str, Any]]:
        rows, start = [], 0
        while True:
            request = {"startRow": start, "endRow": start + 100, "sortModel": sort, "filterModel": kept}
            block = table_service.table_block(folder, None, "current", "transitions", request)
            rows += block["rowData"]
            start += 100
            if start >= block.get("rowCount", 0):
                return rows

    sort = [{"colId": "from", "sort": "asc"}, {"colId": "flow", "sort": "desc"}]
    kept = {
        "probability": {"filterType": "number", "type": "greaterThan", "filter": 0.05},
        "to": {"filterType": "text", "operator": "OR", "conditions": [
            {"filterType": "text", "type": "startsWith", "filter": "E"}, {"filterType": "text", "type": "contains",
                                                                          "filter": ":1"}]},
    }  # fmt: skip
    to_kept = [t["to"].lower().startswith("e") or ":1" in t["to"] for t in transitions]
    expected = [t for t, ok in zip(transitions, to_kept, strict=True) if t["probability"] > 0.05 and ok]
    expected.sort(key=lambda t: -t["flow"])  # stable sorts: the second key first
    expected.sort(key=lambda t: t["from"])
    got = served(sort, kept)
    assert got == expected and 0 < len(got) < every
    assert served([], {}) == transitions  # no sort, no filter: the table's own order, the most flow first
    assert [t["flow"] for t in transitions] == sorted((t["flow"] for t in transitions), reverse=True)
    in_range = {"flow": {"filterType": "number", "type": "inRange", "filter": 1e-3, "filterTo": 1e-2}}
    assert served([{"colId": "probability", "sort": "asc"}], in_range) == sorted(
        (t for t in transitions if 1e-3 < t["flow"] < 1e-2), key=lambda t: t["probability"]
    )
    nothing = table_service.table_block(
        folder, None, "current", "transitions", {"startRow": 0, "endRow": 100, "filterModel": {
            "flow": {"filterType": "number", "type": "lessThan", "filter": -1}}}  # fmt: skip
    )
    assert nothing == {"rowData": []}  # no count of 0 (dash-ag-grid answers the next ask by another path then)
    request = {"sortModel": sort, "filterModel": kept}
    path, name, said = table_service.table_csv(folder, None, "current", "transitions", request, EDGE_COLUMNS)
    with path.open(encoding="utf-8") as f:
        lines = list(csv.reader(f))
    assert lines[0] == [header for _, header in EDGE_COLUMNS] and len(lines) == len(expected) + 1
    assert [row[0] for row in lines[1:]] == [t["from"] for t in expected] and f"{len(expected):,} rows" in said
    assert name == "transitions-whole-graph.csv"
