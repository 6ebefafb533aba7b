"""Issue 47, item 3: the Communities page's overviews read at scale (hundreds of modules): distinct colours and
names, labels that never overlap, a limit on the modules drawn, a searched path brought into view, the module card's
flows and degree, flow and degree distributions, an alluvial of the top modules, and degree and flow filters on the
subgraph. Services and callbacks called directly (no browser), on a two-level Infomap run of the sample model (about
90 modules) and on a synthetic level of 362 modules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app import figures, sessions
from app.pages.community import module_card
from app.services import UserError, overviews
from app.services import community_layout as layout
from app.services import graphs as graph_service
from engine.network import drawing


@pytest.fixture(autouse=True)
def _isolated(data_dir: Path) -> Path:
    """Every test in its own data folder."""
    return data_dir


@pytest.fixture
def sid(data_dir: Path) -> str:
    """A new session's id."""
    return sessions.new_session_id()


@pytest.fixture
def folder(sid: str) -> Path:
    """The session's folder (its current model is the sample model)."""
    return sessions.session_folder(sid)


@pytest.fixture
def run(folder: Path) -> dict[str, Any]:
    """A two-level Infomap run of the sample model (many small modules), saved in ``folder``."""
    return graph_service.run_communities(folder, trials=1, two_level=True, seed=1, threshold="2e-3")


def _nodes(drawn: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in drawn["elements"] if "source" not in e["data"]]


def _overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _label_boxes(nodes: list[dict[str, Any]]) -> list[tuple[float, ...]]:
    """The rectangle of every drawn label, from the elements as the page gets them."""
    return [
        layout.label_box(
            e["position"]["x"],
            e["position"]["y"],
            e["data"]["size"],
            e["data"]["label"],
            e["data"]["font"],
            e["classes"].removeprefix("label-"),
        )
        for e in nodes
        if e["data"]["label"]
    ]


def _no_overlaps(boxes: list[tuple[float, ...]]) -> bool:
    return not any(_overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])


# ------------------------------------------------------------------------------------------ colours and names
def test_module_colours_are_distinct_for_every_module_the_map_can_show() -> None:
    """No two module indices up to the map's largest limit share a colour, the first 20 keep the palette, and the
    first hundreds look apart (no pair closer than the palette's own closest pair)."""
    colours = [drawing.module_colour(i) for i in range(1, graph_service.MAP_MAX_MODULES + 1)]
    assert len(set(colours)) == len(colours)
    assert colours[:20] == list(drawing.PALETTE)
    rgb = np.array([[int(c[k : k + 2], 16) for k in (1, 3, 5)] for c in colours[:362]], dtype=float)
    distance = drawing._colour_distance(rgb[:, None], rgb[None])  # noqa: SLF001
    np.fill_diagonal(distance, np.inf)
    palette = distance[:20, :20]
    assert distance.min() >= palette.min() - 1e-9 > 30


def test_names_are_unique_among_siblings_and_whitespace_is_visible() -> None:
    def module(mid: str, name: str, flow: float) -> dict[str, Any]:
        return {"id": mid, "parent": mid.rpartition(":")[0], "name": name, "flow": flow}

    saved = {
        "modules": [
            module("1", "rare", 0.4),
            module("2", "the", 0.3),
            module("3", "rare", 0.2),
            module("4", " ", 0.05),
            module("5", "rare (2)", 0.03),
            module("6", "", 0.02),
            module("1:1", "rare", 0.1),
        ]
    }
    named = layout.unique_names(saved)
    names = {m["id"]: m["name"] for m in named["modules"]}
    assert names == {
        "1": "rare",
        "2": "the",
        "3": "rare (2)",
        "4": "\u2423",
        "5": "rare (2) (2)",
        "6": "\u2423 (2)",
        "1:1": "rare",
    }
    assert saved["modules"][2]["name"] == "rare"  # the saved run is left as it was


def test_the_run_the_pages_read_has_unique_names_and_colours(folder: Path, run: dict[str, Any]) -> None:
    saved = graph_service.read_communities(folder)
    tops = [m for m in saved["modules"] if not m["parent"]]
    assert len(tops) >= 50 and len({m["name"] for m in tops}) == len(tops)
    assert all(m["name"].strip() for m in tops)
    drawn = overviews.module_map(folder)
    nodes = _nodes(drawn)
    assert len({n["data"]["colour"] for n in nodes}) == len(nodes)
    rows = graph_service.module_rows(saved)
    assert {n["data"]["id"]: n["data"]["name"] for n in nodes} == {r["id"]: r["name"] for r in rows[: len(nodes)]}


# ------------------------------------------------------------------------------------------ the module map
def _synthetic_level(n: int, seed: int = 0) -> tuple[list[dict[str, Any]], list[tuple[int, int, float]]]:
    """``n`` modules with a long-tailed flow and long names, linked like a dense core (362: issue 47's model)."""
    rng = np.random.default_rng(seed)
    flows = np.sort(rng.pareto(1.2, n) + 0.01)[::-1]
    flows /= flows.sum()
    modules = [{"id": str(i + 1), "name": f"word{i}/other{i}", "flow": float(f)} for i, f in enumerate(flows)]
    links = [(int(a), int(b), float(rng.random())) for a, b in rng.integers(0, n, size=(4 * n, 2)) if a != b]
    return modules, links


def test_labels_of_a_362_module_level_never_overlap() -> None:
    modules, links = _synthetic_level(362)
    xy, sizes, font, places = layout.map_layout(modules, links)
    assert font * layout.fit_zoom(xy, sizes) == pytest.approx(layout.MAP_FONT_PX, rel=1e-3)
    texts = [f"{m['id']} {m['name']}" for m in modules[: layout.MAP_LABELS]]
    boxes = [
        layout.label_box(float(xy[i, 0]), float(xy[i, 1]), float(sizes[i]), texts[i], font, place)
        for i, place in enumerate(places)
        if place
    ]
    assert len(boxes) >= layout.MAP_LABELS // 2 and _no_overlaps(boxes)
    assert len(boxes) == layout.MAP_LABELS  # spread apart, every one of the largest gets a place
    labelled = zip(xy[: len(texts)].tolist(), sizes, strict=False)  # drawn above the other, smaller circles
    circles = [(x - s / 2, y - s / 2, x + s / 2, y + s / 2) for (x, y), s in labelled]
    for i, place in enumerate(places):
        if place:
            box = layout.label_box(float(xy[i, 0]), float(xy[i, 1]), float(sizes[i]), texts[i], font, place)
            assert not any(_overlap(box, c) for j, c in enumerate(circles) if j != i)


def test_a_label_with_no_free_place_is_left_off() -> None:
    """Five circles on one spot: four labels take the four places around it, the fifth is left off."""
    xy = np.zeros((5, 2))
    sizes = np.full(5, 10.0)
    places = layout.place_labels(xy, sizes, ["1 a", "2 b", "3 c", "4 d", "5 e"], 5.0)
    assert places == list(layout.PLACES) + [""]


def test_the_node_limit_limits_and_says_what_it_leaves_out(folder: Path, run: dict[str, Any]) -> None:
    total = run["summary"]["modules"]
    for limit in (1, 7, 40):
        drawn = overviews.module_map(folder, "", limit)
        nodes = _nodes(drawn)
        assert len(nodes) == drawn["shown"] == limit and drawn["modules"] == total
        assert [n["data"]["id"] for n in nodes] == [str(i) for i in range(1, limit + 1)]  # the most flow first
        ids = {n["data"]["id"] for n in nodes}
        assert all(e["data"]["source"] in ids and e["data"]["target"] in ids for e in drawn["elements"][limit:])
        assert any(f"Showing the {limit:,} modules with the most flow of {total:,}" in n for n in drawn["notes"])
        labelled = [n for n in nodes if n["data"]["label"]]
        assert 0 < len(labelled) <= min(limit, layout.MAP_LABELS) and _no_overlaps(_label_boxes(nodes))
        assert [i["id"] for i in drawn["legend"]] == [n["data"]["id"] for n in labelled]
    everything = overviews.module_map(folder, "", "")  # empty: the default
    assert everything["shown"] == min(total, overviews.MAP_LIMIT)
    assert not any("Showing the" in n for n in overviews.module_map(folder, "", 3000)["notes"])
    for bad in (0, 2.5, "many", 10**6):
        with pytest.raises(UserError, match="number of modules shown"):
            overviews.module_map(folder, "", bad)


def test_the_map_callback_draws_as_many_modules_as_asked(folder: Path, sid: str, run: dict[str, Any]) -> None:
    import app.main  # noqa: F401  (registers the pages)
    from app.pages.community import module_map

    elements, notes = module_map.show_map(1, 0, "", 12, "current", sid)
    assert sum(1 for e in elements if "source" not in e["data"]) == 12 and "Showing the 12" in str(notes)
    elements, _ = module_map.show_map(1, 0, "", 30, "current", sid)
    assert sum(1 for e in elements if "source" not in e["data"]) == 30
    elements, notes = module_map.show_map(1, 0, "", -3, "current", sid)
    assert elements == [] and "number of modules shown" in str(notes)


def test_a_searched_path_is_brought_into_view(folder: Path, sid: str, run: dict[str, Any]) -> None:
    """The map centres the modules of the word's path, closer than the whole map's fit; modules beyond the limit
    are named in a note."""
    from app.pages.community import overviews as overview_page

    found = graph_service.find_word(folder, "alice")
    modules = overviews.path_on_map(found, "")
    assert modules == list(dict.fromkeys(m["id"] for m in found["modules"]))
    drawn = overviews.module_map(folder, "", 100)
    view = overviews.path_in_view(drawn, modules)
    assert view["shown"] == modules and not view["missing"]
    nodes = {n["data"]["id"]: n for n in _nodes(drawn)}
    xy = np.array([[n["position"]["x"], n["position"]["y"]] for n in nodes.values()])
    sizes = np.array([n["data"]["size"] for n in nodes.values()])
    whole = layout.fit_zoom(xy, sizes)
    assert whole <= view["zoom"] <= layout.PATH_ZOOM * whole + 1e-9
    width, height, _ = layout.MAP_CANVAS
    for module in modules:  # each module of the path is drawn inside the canvas
        x = nodes[module]["position"]["x"] * view["zoom"] + view["pan"]["x"]
        y = nodes[module]["position"]["y"] * view["zoom"] + view["pan"]["y"]
        assert 0 <= x <= width and 0 <= y <= height
    layout_, note = overview_page.path_into_view(found, "", 100, sid)
    assert layout_["name"] == "preset" and not layout_["fit"] and layout_["zoom"] == pytest.approx(view["zoom"])
    assert note is None
    beyond = max(modules, key=int)
    _, note = overview_page.path_into_view(found, "", int(beyond) - 1, sid)
    assert beyond in str(note) and "Modules shown" in str(note)


# ------------------------------------------------------------------------------------------ the module card
def test_the_module_card_shows_flow_in_and_out_and_degree(folder: Path, sid: str, run: dict[str, Any]) -> None:
    graph = graph_service.session_graph(folder, run["threshold"])
    sources, targets = graph.edges()
    for saved_module in run["modules"][:3]:
        detail = graph_service.module_detail(folder, saved_module["id"])
        assert detail["enter_flow"] == saved_module["enter_flow"] and detail["exit_flow"] == saved_module["exit_flow"]
        inside = np.zeros(graph.n_states, dtype=bool)
        inside[saved_module["nodes"]] = True
        expected = {
            "in": int((~inside[sources] & inside[targets]).sum()),
            "out": int((inside[sources] & ~inside[targets]).sum()),
            "within": int((inside[sources] & inside[targets]).sum()),
        }
        assert detail["links"] == expected
        degree = np.bincount(sources, minlength=graph.n_states) + np.bincount(targets, minlength=graph.n_states)
        for node in (e["data"] for e in detail["elements"] if "source" not in e["data"]):
            assert node["degree"] == degree[int(node["state"])]
    facts = str(module_card.show_module(run["modules"][0]["id"], "current", sid)[0])
    assert f"{run['modules'][0]['enter_flow']:.4f} enters" in facts and "edges cross its boundary" in facts


# ------------------------------------------------------------------------------------------ distributions
def test_flow_and_degree_distributions(folder: Path, sid: str, run: dict[str, Any]) -> None:
    from app.pages.community import overviews as overview_page

    found = overviews.distributions(folder)
    tops = sorted((m["flow"] for m in run["modules"] if not m["parent"]), reverse=True)
    assert found["flows"] == pytest.approx(tops)
    graph = graph_service.session_graph(folder, run["threshold"])
    assert sum(found["clones"]) == int(graph.active().sum())
    assert sum(d * c for d, c in zip(found["degrees"], found["clones"], strict=True)) == 2 * graph.n_edges
    saved = graph_service.read_communities(folder)  # saved by the run's job, which had the graph: read, not rebuilt
    assert saved["degrees"] == graph_service.degree_counts(graph) == {k: found[k] for k in ("degrees", "clones")}
    figure = overview_page.show_distributions(1, 0, sid)
    assert [t.type for t in figure.data] == ["scatter", "scatter"] and figure.layout.xaxis.type == "log"
    assert figures.distributions_figure(None).layout.annotations  # no run: a note


# ------------------------------------------------------------------------------------------ the alluvial
def test_the_alluvial_shows_the_top_modules_and_other_and_conserves_flow(folder: Path) -> None:
    first = graph_service.run_communities(folder, trials=1, two_level=True, seed=1, threshold="2e-3")
    second = graph_service.run_communities(folder, trials=1, two_level=True, seed=2, threshold="2e-3", markov_time=0.7)
    drawn = graph_service.alluvial(first, second, top=12)
    left = sum(1 for x in drawn["x"] if x < 0.5)
    right = len(drawn["labels"]) - left
    assert left == right == 13 and drawn["labels"][12].startswith("other (") and drawn["labels"][-1].startswith("other")
    assert drawn["before"]["modules"] == first["summary"]["modules"]
    node_flow = {int(k): v for k, v in second["node_flow"].items()}
    tops = sorted((m for m in first["modules"] if not m["parent"]), key=lambda m: -m["flow"])
    in_second = {n for m in second["modules"] if not m["parent"] for n in m["nodes"]}
    for i in range(13):  # each left node sends on the flow of its clones (the rest, for "other")
        group = tops[i : i + 1] if i < 12 else tops[12:]
        expected = sum(node_flow[n] for m in group for n in m["nodes"] if n in in_second)
        sent = sum(f for s, f in zip(drawn["sources"], drawn["flows"], strict=True) if s == i)
        assert sent == pytest.approx(expected)
    assert sum(drawn["flows"]) == pytest.approx(1.0, abs=1e-6)
    assert drawn["colours"][:12] == [drawing.module_colour(i) for i in range(1, 13)]
    assert all(c.startswith("rgba(") for c in drawn["link_colours"]) and len(drawn["link_colours"]) == len(
        drawn["flows"]
    )
    for s, colour in zip(drawn["sources"], drawn["link_colours"], strict=True):
        red, green, blue = (int(drawn["colours"][s][k : k + 2], 16) for k in (1, 3, 5))
        assert colour.startswith(f"rgba({red},{green},{blue},")
    assert drawn["y"][:13] == sorted(drawn["y"][:13])  # the most flow on top, "other" last
    sankey = figures.alluvial_figure(drawn).data[0]
    assert list(sankey.node.color) == drawn["colours"] and len(sankey.node.label) == 26


# ------------------------------------------------------------------------------------------ subgraph filters
def _hidden(rules: list[dict[str, Any]], elements: list[dict[str, Any]]) -> set[str]:
    """The node ids the ``display: none`` rules of the form ``node[key < value]`` hide."""
    hidden = set()
    for rule in rules:
        selector = rule["selector"]
        if rule["style"].get("display") != "none" or not selector.startswith("node["):
            continue
        key, _, value = selector[len("node[") : -1].partition(" < ")
        hidden |= {
            str(e["data"]["id"]) for e in elements if "source" not in e["data"] and e["data"][key] < float(value)
        }
    return hidden


def test_degree_and_flow_filters_hide_the_clones_below_them(folder: Path, run: dict[str, Any]) -> None:
    biggest = max(run["modules"], key=lambda m: m["size"])
    elements = graph_service.module_detail(folder, biggest["id"])["elements"]
    nodes = [e["data"] for e in elements if "source" not in e["data"]]
    degrees = sorted(n["degree"] for n in nodes)
    flows = sorted(n["flow"] for n in nodes)
    low_degree, low_flow = degrees[len(degrees) // 2], flows[len(flows) // 2]
    assert module_card.graph_controls(0, "same", None, elements, "character", None, 0, "") == []
    rules = module_card.graph_controls(0, "same", None, elements, "character", None, low_degree, None)
    assert _hidden(rules, elements) == {str(n["id"]) for n in nodes if n["degree"] < low_degree} != set()
    rules = module_card.graph_controls(0, "same", None, elements, "character", None, None, low_flow)
    assert _hidden(rules, elements) == {str(n["id"]) for n in nodes if n["flow"] < low_flow} != set()
    rules = module_card.graph_controls(0, "same", None, elements, "character", None, low_degree, low_flow)
    both = {str(n["id"]) for n in nodes if n["flow"] < low_flow or n["degree"] < low_degree}
    assert _hidden(rules, elements) == both
    _, sheet = module_card.highlight_path(None, "", None, 0, "same", "character", None, None, elements, low_degree, 0)
    assert {"selector": f"node[degree < {float(low_degree)!r}]", "style": {"display": "none"}} in sheet
    assert module_card.clone_filters("abc", -1) == []


def test_the_module_map_is_coloured_and_sized_by_a_measure_with_a_legend(folder: Path, sid: str, run: Any) -> None:
    """Colour and size by attribute on the module map: by flow or clones (log) or submodules, on a sequential
    scale from the map's least to its greatest, with the legend's ends; area by clones; by default the modules' own
    colours and areas by flow (no rule added)."""
    from app.pages.community import module_card
    from app.pages.community import module_map as page
    from app.pages.community.look import MAP_STYLESHEET

    elements = overviews.module_map(folder, "", 100)["elements"]
    nodes = [e["data"] for e in elements if "source" not in e["data"]]
    assert page.map_style("module", "flow", 1, 0, "", 100, "current", "", "", "", "", sid) == ([], None)
    rules, legend = page.map_style("flow", "clones", 1, 0, "", 100, "current", "", "", "", "", sid)
    colour, size = rules
    sheet, _ = module_card.highlight_path(None, "", None, 0, None, None, None, None, None, None, None, rules)
    assert sheet == MAP_STYLESHEET + rules  # the map's stylesheet: its own, then the mapping
    flows = [n["log_flow"] for n in nodes]
    assert colour["style"]["background-color"] == f"mapData(log_flow, {min(flows)}, {max(flows)}, #440154, #fde725)"
    clones = [n["log_clones"] for n in nodes]
    assert size["style"]["width"] == f"mapData(log_clones, {min(clones)}, {max(clones)}, 12.0, 90.0)"
    text = str(legend)
    assert "Colour: flow (log)" in text and "Area: more clones" in text
    assert f"{min(n['flow'] for n in nodes):.2g}" in text
    for n in nodes:  # the logs the scale reads are the modules' own figures
        assert abs(10 ** n["log_flow"] - n["flow"]) <= 1e-3 * n["flow"] and round(10 ** n["log_clones"]) == n["clones"]


# ------------------------------------------------------------------------------------------ ego networks on the views
def _shown(rules: list[dict[str, Any]], elements: list[dict[str, Any]]) -> set[str]:
    """The node ids left shown by rules that hide every node (``node``, ``display: none``) and show some again by id
    (``node[id = "x"]``, ``display: element``); every node when no rule hides them all."""
    nodes = {str(e["data"]["id"]) for e in elements if "source" not in e["data"]}
    if {"selector": "node", "style": {"display": "none"}} not in rules:
        return nodes
    return {r["selector"][len('node[id = "') : -2] for r in rules if r["style"].get("display") == "element"}


def test_a_neighbourhood_is_the_ego_network_networkx_finds() -> None:
    import networkx

    rng = np.random.default_rng(3)
    for trial in range(20):
        n = int(rng.integers(2, 30))
        pairs = rng.integers(0, n, size=(int(rng.integers(1, 3 * n)), 2))
        elements = [{"data": {"id": str(v)}} for v in range(n)]
        elements += [{"data": {"id": f"{a}-{b}", "source": str(a), "target": str(b)}} for a, b in pairs.tolist()]
        graph = networkx.Graph()
        graph.add_nodes_from(str(v) for v in range(n))
        graph.add_edges_from((str(a), str(b)) for a, b in pairs.tolist())
        centre, steps = str(int(rng.integers(0, n))), int(rng.integers(0, 4))
        expected = set(networkx.ego_graph(graph, centre, radius=steps).nodes)
        assert overviews.neighbourhood(elements, centre, steps) == expected, trial
        assert _shown(overviews.only_nodes(expected), elements) == expected


def test_the_module_map_filter_keeps_flow_clones_and_a_modules_neighbours(folder: Path, sid: str, run: Any) -> None:
    """The module map's filter: modules of less flow or fewer clones hidden, a module's neighbours within some
    links, the sentence that says how many are shown; a bad value is one sentence and hides nothing."""
    from app.pages.community import module_map as page

    elements = overviews.module_map(folder, "", 100)["elements"]
    nodes = [e["data"] for e in elements if "source" not in e["data"]]
    assert overviews.map_filter(elements, "", "", "", "") == ([], "")
    flows = sorted(n["flow"] for n in nodes)
    low = flows[len(flows) // 2]
    rules, said = overviews.map_filter(elements, f"{low!r}", "3", "", "")
    kept = {n["id"] for n in nodes if n["flow"] >= low and n["clones"] >= 3}
    assert _shown(rules, elements) == kept and 0 < len(kept) < len(nodes)
    assert said == f"Showing {len(kept):,} of {len(nodes):,} modules (flow at least {low:g}, at least 3 clones)."
    centre = max(nodes, key=lambda n: n["flow"])["id"]
    rules, said = overviews.map_filter(elements, "", "", centre, "1")
    near = {centre} | {e["data"]["target"] for e in elements if e["data"].get("source") == centre}
    near |= {e["data"]["source"] for e in elements if e["data"].get("target") == centre}
    assert _shown(rules, elements) == near and f"within 1 link of module {centre} on the map" in said
    with pytest.raises(UserError, match="is not on the map"):
        overviews.map_filter(elements, "", "", "no-such", "1")
    with pytest.raises(UserError, match="between 0 and 1"):
        overviews.map_filter(elements, "2", "", "", "")
    page_rules, legend = page.map_style("module", "flow", 1, 0, "", 100, "current", "", "", centre, "1", sid)
    assert page_rules == rules and "Showing" in str(legend)  # the page's rules: the filter's, and its sentence
    page_rules, legend = page.map_style("module", "flow", 1, 0, "", 100, "current", "x", "", "", "", sid)
    assert page_rules == [] and "must be a number" in str(legend)


def test_the_subgraph_shows_a_found_clones_neighbours_within_steps(folder: Path, run: dict[str, Any]) -> None:
    biggest = max(run["modules"], key=lambda m: m["size"])
    elements = graph_service.module_detail(folder, biggest["id"])["elements"]
    nodes = [e["data"] for e in elements if "source" not in e["data"]]
    centre = max(nodes, key=lambda n: n["flow"])
    rules = module_card.graph_controls(0, "same", centre["label"], elements, "character", None, None, None, 1)
    edges = [e["data"] for e in elements if "source" in e["data"]]
    near = {str(centre["id"])} | {str(e["target"]) for e in edges if str(e["source"]) == str(centre["id"])}
    near |= {str(e["source"]) for e in edges if str(e["target"]) == str(centre["id"])}
    assert _shown(rules, elements) == near and len(near) < len(nodes)
    assert _shown(module_card.graph_controls(0, "same", centre["label"], elements, "character", None, None, None, 0),
                  elements) == {str(n["id"]) for n in nodes}  # fmt: skip


def test_the_module_map_shown_is_exported_with_its_filter(folder: Path, sid: str, run: Any) -> None:
    """Export what is on screen, for the module map: the modules its filter keeps, the map's links among them, and
    the filter in the file (networkx reads it back)."""
    import networkx

    from app.pages.community import module_map as page

    elements = overviews.module_map(folder, "", 100)["elements"]
    nodes = [e["data"] for e in elements if "source" not in e["data"]]
    centre = max(nodes, key=lambda n: n["flow"])["id"]
    fields = ("", "2", centre, "1")
    kept = overviews.neighbourhood(elements, centre, 1) & {n["id"] for n in nodes if n["clones"] >= 2}
    link, note = page.export_map(1, "", 100, "current", *fields, sid)
    read = networkx.read_graphml(folder / graph_service.EXPORTS / "module-map.graphml")
    assert set(read.nodes) == kept and 1 < len(kept) < len(nodes)
    links = {(e["data"]["source"], e["data"]["target"]) for e in elements if "source" in e["data"]}
    assert set(read.edges) == {(a, b) for a, b in links if a in kept and b in kept}
    assert read.graph["filter"].startswith(f"Showing {len(kept):,} of {len(nodes):,} modules (at least 2 clones")
    assert link.startswith("/download/") and f"Exported the {len(kept):,} modules shown" in str(note)
    assert "must be" in str(page.export_map(1, "", 100, "current", "x", "", "", "", sid)[1])
