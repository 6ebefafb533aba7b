"""The Communities page's whole graph (app/services/whole_graph.py, app/pages/community/whole_graph.py), called
directly: every clone handed to the canvas, placed in its module's cell and coloured by its top module, the
transitions of most flow, a click that opens the clone's module, and a model without an Infomap run grouped by
character."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app import config, ids, sessions
from app.services import UserError, visible
from app.services import graphs as graph_service
from app.services import pruning as prune_service
from app.services import whole_graph as whole_service
from engine import api


@pytest.fixture(autouse=True)
def _isolated(data_dir: Path) -> Path:
    """Every test in its own data folder."""
    return data_dir


def test_every_clone_is_a_point_in_its_modules_cell_coloured_by_its_top_module() -> None:
    import app.main  # noqa: F401  (registers the pages)
    from app.pages.community import whole_graph as page

    sid = sessions.new_session_id()
    folder = sessions.session_folder(sid)
    saved = graph_service.run_communities(folder, trials=1, seed=0, markov_time=0.5)  # multilevel: submodules
    n = graph_service.load_current(folder).n_states
    not_asked = page.show_whole_graph(None, 2000, "packed", "module", "none", 1, 0, None, sid)
    assert not_asked == (None, None, None, page.HIDDEN, None)  # not asked yet (or hidden again by Back)
    clones, marked, note, style, legend = page.show_whole_graph(1, 2000, "packed", "module", "none", 1, 0, None, sid)
    assert marked is None and style == page.SHOWN
    assert len(clones["x"]) == len(clones["y"]) == len(clones["group"]) == len(clones["labels"]) == n
    assert np.isfinite(np.array(clones["x"], dtype=float)).all() and np.isfinite(np.array(clones["y"])).all()
    groups = clones["groups"]
    assert len(groups["text"]) == len(groups["colour"]) == len(groups["module"]) > max(clones["group"])
    top = {int(v): m["id"] for m in saved["modules"] if not m["parent"] for v in m["nodes"]}
    module_of = [groups["module"][g] for g in clones["group"]]  # the click's module: the clone's top module
    assert [module_of[v] for v in top] == list(top.values())
    for v, module in top.items():
        assert groups["colour"][clones["group"][v]] == graph_service.module_colour(module)
    leaf = {int(v): m["id"] for m in saved["modules"] if not m["children"] for v in m["nodes"]}
    for v in list(leaf)[:50]:  # the hover text names the clone's own (leaf) module and its top module
        assert groups["text"][clones["group"][v]].startswith(f"module {leaf[v]} (top: {top[v]} ")
    json.dumps(clones)  # plain lists: the store's JSON
    drawn = whole_service.whole_graph(folder, 2000)
    leaves = [m for m in saved["modules"] if not m["children"]]
    assert any(m["parent"] for m in leaves)  # the test covers submodules
    for module in leaves:  # the clones of a leaf module lie together: in a box that holds no other module's clone
        nodes = np.array(module["nodes"])
        low = np.array([drawn["x"][nodes].min(), drawn["y"][nodes].min()])
        high = np.array([drawn["x"][nodes].max(), drawn["y"][nodes].max()])
        inside = (drawn["x"] >= low[0]) & (drawn["x"] <= high[0]) & (drawn["y"] >= low[1]) & (drawn["y"] <= high[1])
        assert set(np.flatnonzero(inside)) == set(nodes.tolist())
    assert drawn["drawn_edges"] == 2000 == len(clones["source"]) == len(clones["target"]) < drawn["edges"]
    graph = graph_service.api.model_graph(graph_service.load_current(folder), saved["threshold"])
    sources, targets = graph.edges()
    flow = {(int(a), int(b)): float(f) for a, b, f in zip(sources, targets, graph.edge_flow, strict=True) if a != b}
    drawn_flows = [flow[(a, b)] for a, b in zip(clones["source"], clones["target"], strict=True)]
    assert drawn_flows == sorted(drawn_flows, reverse=True)  # most flow first ...
    assert min(drawn_flows) >= sorted(flow.values(), reverse=True)[1999]  # ... and no transition of more left out
    # each drawn transition's T in the clone graph drawn (the model pruned at the run's threshold), as the canvas has it
    T = api.prune_model(graph_service.load_current(folder), saved["threshold"]).model.dense_T()
    pairs = zip(clones["source"], clones["target"], strict=True)
    assert clones["weight"] == [round(float(T[a, b]), 4) for a, b in pairs]
    text = str(note)
    assert f"{n:,} clones and the 2,000 transitions with the most flow of {drawn['edges']:,}" in text
    assert "No Infomap run" not in text
    none = page.show_whole_graph(1, 0, "packed", "module", "none", 1, 0, None, sid)[0]
    assert none["source"] == none["target"] == [] and len(none["x"]) == n


def test_clicking_a_clone_opens_its_module_and_marks_it() -> None:
    from test_app_views import navigate

    import app.main  # noqa: F401  (registers the pages)
    from app.pages.community import view
    from app.pages.community import whole_graph as page

    sid = sessions.new_session_id()
    folder = sessions.session_folder(sid)
    saved = graph_service.read_communities(folder)  # the sample model's bundled run
    module = max((m for m in saved["modules"] if not m["parent"]), key=lambda m: m["size"])
    clone = module["nodes"][0]
    click = {"clone": clone, "module": module["id"], "count": 1}  # what assets/whole_graph.js writes
    out = navigate(view, f"{ids.COMMUNITIES_WHOLE_CLICKED}.data", clicked=click, session_id=sid)
    assert out["selected"] == module["id"] and out["search"] == f"?module={module['id']}"
    outside = {"clone": clone, "module": "", "count": 2}  # a clone in no module: nothing opens
    assert set(navigate(view, f"{ids.COMMUNITIES_WHOLE_CLICKED}.data", clicked=outside, session_id=sid).values()) == {
        page.no_update
    }
    for mounted in (None, {}):  # the store set up as the page opens is no click: the URL's view is read
        opened = navigate(view, f"{ids.COMMUNITIES_WHOLE_CLICKED}.data", clicked=mounted, search="?layout=circle")
        assert opened["layout"] == "circle" and opened["search"] is page.no_update
    assert page.mark_module(module["id"], 1, sid) == sorted(module["nodes"])
    assert page.mark_module(None, 1, sid) is None  # none selected: none marked
    assert page.mark_module(module["id"], None, sid) is page.no_update  # the view was never drawn
    _, marked, *_ = page.show_whole_graph(
        1, 0, "packed", "module", "none", 1, 0, module["id"], sid
    )  # drawn, a module selected
    assert marked == sorted(module["nodes"])


def test_without_an_infomap_run_the_clones_are_grouped_by_character() -> None:
    import app.main  # noqa: F401  (registers the pages)
    from app.pages.community import whole_graph as page

    sid = sessions.new_session_id()
    folder = sessions.session_folder(sid)
    prune_service.apply_prune(folder, -2)  # a new current model: no run for it
    assert graph_service.read_communities(folder) is None
    model = graph_service.load_current(folder)
    clones, _, note, *_ = page.show_whole_graph(1, 5000, "packed", "module", "none", 1, 0, None, sid)
    assert len(clones["x"]) == model.n_states and set(clones["groups"]["module"]) == {""}
    assert [clones["groups"]["text"][g] for g in clones["group"][:1]] == [f"character {visible(model.symbols[0])}"]
    assert "No Infomap run for this model yet" in str(note)
    colours = clones["groups"]["colour"]  # a colour per character, none shared (a hash into 20 colours repeated)
    assert len(colours) == len(model.symbols) == len(set(colours)) == 27
    symbols = np.repeat(np.arange(len(model.symbols)), model.layout.n_clones)
    x = np.array(clones["x"], dtype=float)
    for s in range(len(model.symbols)):  # one cell per character: its clones' x range meets no other character's
        mine, others = x[symbols == s], x[symbols != s]
        y, y_others = np.array(clones["y"], dtype=float)[symbols == s], np.array(clones["y"], dtype=float)[symbols != s]
        overlap = (others >= mine.min()) & (others <= mine.max()) & (y_others >= y.min()) & (y_others <= y.max())
        assert not overlap.any()


def test_the_whole_graph_has_a_work_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1.2 MB model file of 300,000 symbols made the view run 177 s in the web worker and send 20.7 MB: a model
    past the clone bound is refused at once in one sentence, and past the group bound the symbols of least flow
    share one group, so what is sent grows with the clones alone."""
    import app.main  # noqa: F401  (registers the pages)
    from app.pages.community import whole_graph as page

    sid = sessions.new_session_id()
    folder = sessions.session_folder(sid)
    prune_service.apply_prune(folder, -2)  # no run for this model: grouped by symbol
    model = graph_service.load_current(folder)
    monkeypatch.setattr(whole_service, "MAX_CLONES", model.n_states - 1)
    assert api.model_file_states(sessions.current_model_path(folder)) == model.n_states
    with monkeypatch.context() as unloaded:  # refused from the file's clone table: the model is never loaded
        unloaded.setattr(graph_service, "view_model", lambda _folder: pytest.fail("the model was loaded"))
        with pytest.raises(UserError, match=f"at most {model.n_states - 1:,} clones and this model has"):
            whole_service.whole_graph(folder)
    assert api.model_file_states(config.SAMPLE_CORPUS) is None  # not a model file
    _, _, said, *_ = page.show_whole_graph(1, 5000, "packed", "module", "none", 1, 0, None, sid)
    assert "at most" in str(said)
    monkeypatch.setattr(whole_service, "MAX_CLONES", model.n_states)
    monkeypatch.setattr(whole_service, "MAX_GROUPS", 5)
    drawn = whole_service.whole_graph(folder)
    assert len(drawn["groups"]) == 5 and set(np.unique(drawn["group"])) == set(range(5))
    assert drawn["groups"][-1]["text"].startswith(f"one of the {len(model.symbols) - 4:,} other symbols")
    assert len(drawn["x"]) == model.n_states
    shown = [g["text"].split(" ", 1)[1] for g in drawn["groups"][:4]]
    graph = graph_service.session_graph(folder, api.DEFAULTS.DEFAULT_PRUNE_THRESHOLD)
    symbol_flow = np.bincount(graph.clone_symbol, weights=graph.flow)
    top = sorted(np.argsort(-symbol_flow, kind="stable")[:4])
    assert shown == [visible(model.symbols[k]) for k in top]  # the symbols of most flow keep their own


def test_the_whole_graphs_hint_names_the_renderer_its_script_uses() -> None:
    """The hint said "drawn with WebGL" over a Canvas 2D renderer."""
    import app.main  # noqa: F401  (registers the pages)
    from app.pages import communities

    script = (Path(__file__).parents[1] / "assets" / "whole_graph.js").read_text()
    assert "getContext('2d'" in script and "webgl" not in script.lower()
    text = json.dumps(communities.layout().to_plotly_json(), default=str)
    assert "drawn on a 2D canvas" in text and "WebGL" not in text


def test_the_layout_by_transitions_keeps_transitions_short_and_modules_together(folder: Path, monkeypatch) -> None:
    """The packed layout ignores the transitions, so drawn transitions cross the canvas. The layout by transitions
    places top modules by the flow between them and clones by the flow within: on the sample model its
    flow-weighted transitions are shorter and more of each clone's nearest clones share its top module (the
    measure the page states); it stays in the view's frame, and past its work bound it is refused in a sentence."""
    packed = whole_service.whole_graph(folder, 2_000, "packed")
    force = whole_service.whole_graph(folder, 2_000, "transitions")
    assert packed["layout"] == "packed" and force["layout"] == "transitions"
    assert force["quality"]["stretch"] < 0.85 * packed["quality"]["stretch"]
    assert force["quality"]["purity"] > packed["quality"]["purity"]
    x, y = np.asarray(force["x"]), np.asarray(force["y"])
    assert x.min() >= -1e-9 and y.min() >= -1e-9 and x.max() <= whole_service.ASPECT + 1e-9 and y.max() <= 1 + 1e-9
    assert np.array_equal(force["group"], packed["group"]) and len(x) == packed["clones"]
    assert whole_service.whole_graph(folder, 2_000, "nonsense")["layout"] == whole_service.DEFAULT_LAYOUT
    kept_file = folder / whole_service.KEPT_LAYOUT  # made once per run, kept on disk for any process
    assert kept_file.is_file() and sessions.untouched(folder)  # a cache: not a session with work
    monkeypatch.setattr(whole_service, "MAX_FORCE_WORK", 10)
    again = whole_service.whole_graph(folder, 1_000, "transitions")  # another drawing: the kept layout, no work
    assert np.array_equal(again["x"], force["x"]) and np.array_equal(again["y"], force["y"])
    graph_service.run_communities(folder, trials=1, seed=5)  # a new run: the kept layout is not its own
    with pytest.raises(UserError, match="The layout by transitions would weigh"):
        whole_service.whole_graph(folder, 1_000, "transitions")


def test_the_layout_measure_tells_apart_grouped_and_scattered_places() -> None:
    rng = np.random.default_rng(0)
    groups = np.repeat([0, 1], 50)
    sources = rng.integers(0, 50, 200) + 50 * np.repeat([0, 1], 100)  # links within each group
    targets = rng.integers(0, 50, 200) + 50 * np.repeat([0, 1], 100)
    flow = np.ones(200)
    apart = np.vstack([rng.normal(0, 0.05, (50, 2)), rng.normal(0, 0.05, (50, 2)) + 5])
    scattered = rng.uniform(0, 5, (100, 2))
    good, bad = (
        api.drawing.layout_quality(apart, sources, targets, flow, groups),
        api.drawing.layout_quality(scattered, sources, targets, flow, groups),
    )
    assert good["purity"] == 1.0 and good["stretch"] < 0.1
    assert 0.3 < bad["purity"] < 0.7 and 0.8 < bad["stretch"] < 1.2


def test_a_filter_on_the_whole_graph_shows_its_clones_and_the_transitions_among_them() -> None:
    """The whole graph's filter (degree, flow, k-core, largest component, the ego network of a clone): the page's
    callback hands the canvas the clones :func:`engine.api.graph.filter_clones` keeps on the graph drawn, and the
    transitions among them with the most flow; a bad value is one sentence; "Show every clone" clears it."""
    from dash._callback_context import context_value
    from dash._utils import AttributeDict

    import app.main  # noqa: F401  (registers the pages)
    from app.pages.community import whole_graph as page

    sid = sessions.new_session_id()
    folder = sessions.session_folder(sid)
    saved = graph_service.run_communities(folder, trials=1, seed=0)
    graph = graph_service.session_graph(folder, saved["threshold"])

    def press(button: str, *fields: Any, edges: int = 2000) -> tuple[Any, Any]:
        """Filter (or Show every clone) pressed: the filter set, then what the canvas is handed (or the refusal)."""
        context_value.set(AttributeDict(triggered_inputs=[{"prop_id": f"{button}.n_clicks", "value": 1}]))
        query, said = page.apply_filter(1, None, *fields)
        if query is page.no_update:
            return query, said
        return page.filter_graph(query, {"clicks": 1}, edges, 1, sid)

    centre = int(np.argmax(graph.flow))
    shown, said = press(ids.COMMUNITIES_WHOLE_FILTER, "", "", "", "", [], str(centre), "1")
    expected = api.graph.filter_clones(graph, api.graph.CloneFilter(centre=centre, steps=1))
    assert shown["clones"] == expected.tolist() and centre in shown["clones"] and len(expected) < graph.n_states
    sources, targets = graph.edges()
    inside = np.isin(sources, expected) & np.isin(targets, expected) & (sources != targets)
    assert shown["among"] == int(inside.sum()) == len(shown["source"])  # fewer than 2,000: all drawn
    pairs = set(zip(shown["source"], shown["target"], strict=True))
    assert pairs == set(zip(sources[inside].tolist(), targets[inside].tolist(), strict=True))
    T = api.prune_model(graph_service.load_current(folder), saved["threshold"]).model.dense_T()
    assert shown["weight"] == [round(float(T[a, b]), 4) for a, b in zip(shown["source"], shown["target"], strict=True)]
    assert f"Showing {len(expected):,} of {graph.n_states:,} clones (within 1 step of clone {centre})" in str(said)
    few, _ = press(ids.COMMUNITIES_WHOLE_FILTER, "", "", "", "", [], str(centre), "1", edges=5)
    order = np.argsort(-graph.edge_flow[inside], kind="stable")[:5]  # the 5 with the most flow
    assert few["source"] == sources[inside][order].tolist() and few["clones"] == shown["clones"]

    fields = ("4", "", "", "3", ["largest"], "", "")
    assert page.show_filter_fields("degree=4-;core=3;largest") == (*fields, True)  # a link's filter: seen, open
    assert page.show_filter_fields("ego=7/2")[5:] == ("7", "2", True)
    shown, _ = press(ids.COMMUNITIES_WHOLE_FILTER, *fields)
    spec = api.graph.CloneFilter(min_degree=4, core=3, largest_component=True)
    assert shown["clones"] == api.graph.filter_clones(graph, spec).tolist() and shown["filter"] == spec.describe()

    kept_before, said = press(ids.COMMUNITIES_WHOLE_FILTER, "5", "2", "", "", [], "", "")
    assert kept_before is page.no_update and "The greatest degree (2) is below the least (5)." in str(said)
    _, said = press(ids.COMMUNITIES_WHOLE_FILTER, "", "", "", "", [], str(graph.n_states), "1")
    assert f"There is no clone {graph.n_states}" in str(said)
    _, said = press(ids.COMMUNITIES_WHOLE_FILTER, "", "", "2", "", [], "", "")
    assert "between 0 and 1" in str(said)
    assert press(ids.COMMUNITIES_WHOLE_UNFILTER, "4", "", "", "", [], "", "") == (None, None)
    assert press(ids.COMMUNITIES_WHOLE_FILTER, "", "", "", "", [], "", "") == (None, None)  # nothing set: all


def test_the_clones_shown_are_exported_with_their_filter() -> None:
    """Export what is on screen: the clones the filter keeps, every transition among them, each clone's module of
    the run on screen, and the filter written in the file (networkx reads it back); with no filter, a sentence."""
    import networkx

    folder = sessions.session_folder(sessions.new_session_id())
    saved = graph_service.run_communities(folder, trials=1, seed=0)
    graph = graph_service.session_graph(folder, saved["threshold"])
    spec = api.graph.CloneFilter(min_degree=4, core=3, largest_component=True)
    path, name, said = whole_service.export_shown(folder, whole_service.filter_query(spec))
    read = networkx.read_graphml(path)
    shown = api.graph.filter_clones(graph, spec)
    assert sorted(int(data["state"]) for _, data in read.nodes(data=True)) == shown.tolist()
    sources, targets = graph.edges()
    inside = np.isin(sources, shown) & np.isin(targets, shown)
    assert read.number_of_edges() == int(inside.sum())  # every transition among them, self-loops too
    assert read.graph["filter"] == "degree at least 4, the 3-core, the largest component"
    top = {int(v): m["id"] for m in saved["modules"] if not m["parent"] for v in m["nodes"]}
    assert all(data["module_id"].split(":")[0] == top[int(data["state"])] for _, data in read.nodes(data=True))
    assert name == f"clones-shown-{len(shown)}.graphml" and f"Exported the {len(shown):,} clones shown" in said
    with pytest.raises(UserError, match="No filter is set"):
        whole_service.export_shown(folder, "")


def test_colour_and_size_map_an_attribute_with_a_legend() -> None:
    """Colour and size by attribute on the whole graph, with a legend: by symbol (a colour per symbol), by degree
    or flow (ordered bins, low to high, each clone in the bin of its value), sizes growing with flow or degree."""
    import app.main  # noqa: F401  (registers the pages)
    from app.pages.community import whole_graph as page

    sid = sessions.new_session_id()
    folder = sessions.session_folder(sid)
    saved = graph_service.run_communities(folder, trials=1, seed=0)
    graph = graph_service.session_graph(folder, saved["threshold"])
    clones, _, _, _, legend = page.show_whole_graph(1, 0, "packed", "module", "none", 1, 0, None, sid)
    assert clones["colour_group"] is None and clones["sizes"] is None and legend is None  # the modules' colours
    clones, *_, legend = page.show_whole_graph(1, 0, "packed", "symbol", "flow", 1, 0, None, sid)
    assert clones["colour_group"] == graph.clone_symbol.tolist() and len(set(clones["colours"])) == 27
    assert "Colour: symbol" in str(legend) and "and 15 more symbols" in str(legend) and "Size: larger" in str(legend)
    sizes, flow = np.array(clones["sizes"]), np.asarray(graph.flow)
    assert sizes.min() >= 0.5 and sizes.max() <= 2.2 and sizes[np.argmax(flow)] == sizes.max()
    assert np.all(np.diff(sizes[np.argsort(flow)]) >= 0)  # larger with more flow
    clones, *_ = page.show_whole_graph(1, 0, "packed", "degree", "none", 1, 0, None, sid)
    bins, degree = np.array(clones["colour_group"]), graph.degree()
    assert len(set(bins.tolist())) > 3 and np.all(np.diff(bins[np.argsort(degree, kind="stable")]) >= 0)  # ordered
    assert clones["colours"] == list(whole_service.SEQUENTIAL[: len(clones["colours"])])
    mapping = whole_service.attribute_mapping(folder, "degree", "none")
    for colour, text in mapping["legend"]:  # each bin's range holds exactly its clones' degrees
        members = degree[bins == whole_service.SEQUENTIAL.index(colour)]
        assert text == (
            f"{members.min():,}" if members.min() == members.max() else f"{members.min():,} to {members.max():,}"
        )


def test_the_whole_graph_is_a_charged_cancellable_job() -> None:
    """The whole graph ran in the web request, bounded only by its work. It is a background job now, charged to the
    memory budget from its fork, bounded in time (a request job), with a Cancel while it runs; so is the download
    of the clones shown."""
    import dash

    from app import jobs, main
    from app.pages.community import whole_graph as page

    registered = {**dash._callback.GLOBAL_CALLBACK_MAP, **main.app.callback_map}
    drawn = next(v for k, v in registered.items() if f"{ids.COMMUNITIES_WHOLE_DATA}.data" in k and v["background"])
    assert drawn["background"]["cancel"] == [{"id": ids.COMMUNITIES_WHOLE_CANCEL, "property": "n_clicks"}]
    assert getattr(page.draw_whole_graph, jobs.process.CHARGED_FROM_FORK)
    asked = page.ask_whole_graph(None, 2000, "packed", "module", "none", 1, 0)  # not shown: hidden, no job asked
    assert asked == (page.no_update, None, None, None, page.HIDDEN, None)  # the job's store untouched: no job
    asked = page.ask_whole_graph(1, 2000, "transitions", "degree", "flow", 3, 4)[0]
    assert asked == {"clicks": 1, "edges": 2000, "layout": "transitions", "colour": "degree", "size": "flow",
                     "version": [3, 4]}  # fmt: skip
    filtered = next(v for k, v in registered.items() if f"{ids.COMMUNITIES_WHOLE_SHOWN}.data" in k)
    assert filtered["background"] and getattr(page.filter_graph, jobs.process.CHARGED_FROM_FORK)
    inputs = [i["id"] for i in filtered["inputs"]]  # a few values, never the drawn columns (megabytes a body)
    assert ids.COMMUNITIES_WHOLE_DATA not in inputs and ids.COMMUNITIES_WHOLE_REQUEST in inputs
    exported = next(v for k, v in registered.items() if f"{ids.COMMUNITIES_WHOLE_DOWNLOAD}.data" in k)
    assert exported["background"] and getattr(page.export_shown, jobs.process.CHARGED_FROM_FORK)


def test_the_subgraphs_clones_shown_are_exported_with_its_filter() -> None:
    """Export what is on screen, for a module's subgraph: its clones that the degree minimum and the found clone's
    neighbourhood keep, the transitions among them of T at least the one asked, and the filter in the file."""
    import networkx

    import app.main  # noqa: F401  (registers the pages)
    from app.pages.community import module_card

    sid = sessions.new_session_id()
    folder = sessions.session_folder(sid)
    saved = graph_service.run_communities(folder, trials=1, seed=0)
    module = max((m for m in saved["modules"] if not m["parent"]), key=lambda m: m["size"])
    elements = graph_service.module_detail(folder, module["id"])["elements"]
    nodes = [e["data"] for e in elements if "source" not in e["data"]]
    centre = max(nodes, key=lambda n: n["flow"])
    low = sorted(n["degree"] for n in nodes)[len(nodes) // 4]
    undirected = networkx.Graph([(str(e["data"]["source"]), str(e["data"]["target"])) for e in elements
                                 if "source" in e["data"]])  # fmt: skip
    near = set(networkx.ego_graph(undirected, str(centre["id"]), radius=1).nodes)
    expected = sorted(int(n["id"]) for n in nodes if n["degree"] >= low and str(n["id"]) in near)
    link, note = module_card.export_subgraph_shown(1, module["id"], elements, "0.2", str(low), None, centre["label"],
                                                   1, sid)  # fmt: skip
    path = folder / graph_service.EXPORTS / f"module-{module['id']}-shown.graphml"
    read = networkx.read_graphml(path)
    assert sorted(int(data["state"]) for _, data in read.nodes(data=True)) == expected
    assert 1 < len(expected) < len(nodes)
    graph = graph_service.session_graph(folder, saved["threshold"])
    sources, targets = graph.edges()
    among = np.isin(sources, expected) & np.isin(targets, expected) & (graph.weight.data >= 0.2)
    assert read.number_of_edges() == int(among.sum()) and all(w >= 0.2 for *_, w in read.edges(data="weight"))
    said = f"module {module['id']}: degree at least {low:g}, within 1 step of clone {centre['label']}"
    assert read.graph["filter"] == said + ", transitions of T at least 0.2"
    assert link.startswith("/download/") and f"Exported the {len(expected):,} clones shown" in str(note)
