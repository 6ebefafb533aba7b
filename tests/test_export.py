"""Graph exports read back by the tools that consume them, and the prune / communities / export commands."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from engine import api, cli
from engine.corpora import text
from engine.model.dense import CHMM, load
from engine.network import communities as cm
from engine.network import drawing, export

DATA = Path(__file__).parent / "data"
ALICE = DATA / "carroll-alice.txt"
THRESHOLD = 5e-3


@pytest.fixture(scope="module")
def model_path(alice_model_file: Path) -> Path:
    return alice_model_file


@pytest.fixture(scope="module")
def model(model_path: Path) -> CHMM:
    return load(model_path)


@pytest.fixture(scope="module")
def result(model: CHMM) -> cm.Communities:
    return api.model_communities(model, THRESHOLD, cm.CommunityOptions(trials=2), text.read_text(ALICE))


@pytest.fixture(scope="module")
def multilevel(model: CHMM) -> cm.Communities:
    """A result with submodules (Markov time 0.5: at 1 Infomap's tree is flat on this model)."""
    found = api.model_communities(model, THRESHOLD, cm.CommunityOptions(trials=2, markov_time=0.5), None)
    assert found.n_levels > 2 and any(m.children for m in found.top_modules)
    return found


@pytest.fixture(scope="module", params=["flat", "multilevel"])
def either(request: pytest.FixtureRequest, result: cm.Communities) -> cm.Communities:
    return result if request.param == "flat" else request.getfixturevalue("multilevel")


@pytest.fixture(scope="module")
def reference(result: cm.Communities) -> nx.DiGraph:
    return export.to_networkx(result.graph, result)


def same_value(a: object, b: object) -> bool:
    if isinstance(b, float):
        return math.isclose(float(a), b, rel_tol=1e-12, abs_tol=1e-300)
    return a == b


def assert_same_graph(read: nx.Graph, expected: nx.DiGraph, node_keys: tuple[str, ...], edge_keys: tuple[str, ...]):
    assert set(read.nodes) == set(expected.nodes)
    assert {(u, v) for u, v, *_ in read.edges} == set(expected.edges)
    assert read.number_of_edges() == expected.number_of_edges()
    for node, data in expected.nodes(data=True):
        for key in node_keys:
            assert same_value(read.nodes[node][key], data[key]), (node, key, read.nodes[node][key], data[key])
    for u, v, data in expected.edges(data=True):
        got = read.edges[u, v, 0] if read.is_multigraph() else read.edges[u, v]
        for key in edge_keys:
            assert same_value(got[key], data[key]), (u, v, key)


NODE_KEYS = ("label", "char", "clone", "state", "flow", "module", "path", "module_id", "module_name")
EDGE_KEYS = ("weight", "count", "flow")


def test_attributes_are_plain_python_values(reference: nx.DiGraph, result: cm.Communities) -> None:
    assert reference.number_of_nodes() == len(result.nodes)
    assert reference.number_of_edges() == result.graph.n_edges
    for _, data in reference.nodes(data=True):
        assert {type(data[k]) for k in NODE_KEYS} <= {str, int, float}
        assert data["module"] == int(data["path"].split(":")[0])
    for _, _, data in reference.edges(data=True):
        assert {type(v) for v in data.values()} == {float}
    assert any(data["char"] == " " and data["label"].startswith("\u2423") for _, data in reference.nodes(data=True))


def test_graphml_round_trip(result: cm.Communities, reference: nx.DiGraph, tmp_path: Path) -> None:
    export.export_graph(result.graph, tmp_path / "g.graphml", "graphml", result)
    read = nx.read_graphml(tmp_path / "g.graphml")
    assert read.is_directed()
    assert_same_graph(read, reference, NODE_KEYS, EDGE_KEYS)


def test_gexf_round_trip(result: cm.Communities, reference: nx.DiGraph, tmp_path: Path) -> None:
    export.export_graph(result.graph, tmp_path / "g.gexf", "gexf", result)
    read = nx.read_gexf(tmp_path / "g.gexf")
    assert read.is_directed()
    assert_same_graph(read, reference, NODE_KEYS, EDGE_KEYS)


def test_cytoscape_json_round_trip(result: cm.Communities, reference: nx.DiGraph, tmp_path: Path) -> None:
    export.export_graph(result.graph, tmp_path / "g.cyjs", "cyjs", result)
    data = json.loads((tmp_path / "g.cyjs").read_text(encoding="utf-8"))
    read = nx.cytoscape_graph(data)
    assert read.is_directed()
    assert_same_graph(read, reference, NODE_KEYS, EDGE_KEYS)
    # Cytoscape.js / dash-cytoscape: string ids, edge ends equal to node ids, unique edge ids
    ids = {n["data"]["id"] for n in data["elements"]["nodes"]}
    assert all(isinstance(i, str) for i in ids)
    edges = data["elements"]["edges"]
    assert all(e["data"]["source"] in ids and e["data"]["target"] in ids for e in edges)
    assert len({e["data"]["id"] for e in edges}) == len(edges)
    elements = export.cytoscape_elements(reference)
    assert len(elements) == reference.number_of_nodes() + reference.number_of_edges()


def test_pajek_is_read_by_networkx_and_infomap(result: cm.Communities, reference: nx.DiGraph, tmp_path: Path) -> None:
    import infomap

    export.export_graph(result.graph, tmp_path / "g.net", "pajek", result)
    read = nx.read_pajek(tmp_path / "g.net")
    by_label = {data["label"]: node for node, data in reference.nodes(data=True)}
    read = nx.relabel_nodes(read, by_label)
    for *_, data in read.edges(data=True):  # the arcs carry the weights Infomap partitioned: node flow x T
        data["flow"] = data.pop("weight")
    assert_same_graph(read, reference, (), ("flow",))
    run = infomap.run(str(tmp_path / "g.net"), flow_model="directed", num_trials=1, silent=True)
    assert run.num_nodes == reference.number_of_nodes()
    assert run.num_links == reference.number_of_edges()
    assert set(run.names.values()) == set(by_label)


def parse_tree(path: Path) -> dict[int, tuple[str, float, str]]:
    """node_id -> (path, flow, name) of a .tree / .ftree file."""
    nodes = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("*"):
            break
        if line.startswith("#") or not line.strip():
            continue
        tree_path, flow, rest = line.split(" ", 2)
        name, node_id = rest.rsplit(" ", 1)
        nodes[int(node_id)] = (tree_path, float(flow), name.strip('"'))
    return nodes


def parse_ftree_links(path: Path) -> dict[str, tuple[float, float, int, int, dict[tuple[int, int], float]]]:
    sections: dict[str, tuple] = {}
    current = None
    links: dict = defaultdict(dict)
    started = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("*Links directed"):
            started = True
            continue
        if not started or line.startswith("#"):
            continue
        if line.startswith("*Links"):
            _, name, enter, exit_, n_edges, n_children = line.split()
            current = name
            sections[name] = (float(enter), float(exit_), int(n_edges), int(n_children))
            continue
        s, t, f = line.split()
        links[current][(int(s), int(t))] = float(f)
    return {name: (*figures, links[name]) for name, figures in sections.items()}


def read_pajek_labels(path: Path) -> dict[int, str]:
    """vertex id -> label of a Pajek .net file."""
    labels, inside = {}, False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("*Vertices"):
            inside = True
        elif line.startswith("*"):
            break
        elif inside and line.strip():
            vertex, label = line.split(" ", 1)
            labels[int(vertex)] = label.strip('"')
    return labels


def read_clu(path: Path) -> dict[int, int]:
    rows = [line.split() for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    return {int(n): int(m) for n, m, _ in rows}


def export_all(result: cm.Communities, folder: Path, module: str | None = None) -> dict[str, Path]:
    files = {}
    for fmt in ("pajek", "clu", "tree", "ftree", "graphml"):
        files[fmt] = folder / f"g{export.EXTENSIONS[fmt]}"
        export.export_graph(result.graph, files[fmt], fmt, result, module=module)
    return files


def test_one_numbering_joins_net_clu_and_tree(either: cm.Communities, tmp_path: Path) -> None:
    """The .net, .clu, .tree and .ftree of one export number the clones alike (Pajek's 1..n): joined on node id,
    labels, modules and tree paths agree with the result (the bug: .clu from 0, .net from 1)."""
    result = either
    files = export_all(result, tmp_path)
    labels, clu, tree = read_pajek_labels(files["pajek"]), read_clu(files["clu"]), parse_tree(files["tree"])
    assert sorted(labels) == list(range(1, len(result.nodes) + 1))
    assert set(clu) == set(labels) == set(tree)
    state = {int(v): d["state"] for v, d in nx.read_graphml(files["graphml"]).nodes(data=True)}
    assert list(state.values()) == sorted(state.values())  # vertex order = clone order
    for vertex, label in labels.items():
        clone = state[vertex]
        assert label == result.graph.label(clone) == tree[vertex][2]
        assert clu[vertex] == result.node_path[clone][0]
        assert tree[vertex][0] == ":".join(map(str, result.node_path[clone]))
    assert parse_tree(files["ftree"]) == tree
    assert sum(f for _, f, _ in tree.values()) == pytest.approx(1.0, abs=1e-4)


def test_infomap_reading_the_net_agrees_with_the_clu(result: cm.Communities, tmp_path: Path) -> None:
    import infomap

    files = export_all(result, tmp_path)
    o = result.options
    options = infomap.Options(flow_model="rawdir", two_level=o.two_level, num_trials=o.trials, seed=o.seed + 1)
    theirs = infomap.Infomap(options=options, silent=True)
    theirs.read_file(str(files["pajek"]))
    run = theirs.run()
    assert run.num_nodes == len(result.nodes)
    ours = read_clu(files["clu"])
    partition = run.modules()  # node id -> top module
    assert set(partition) == set(ours)
    assert run.codelength == pytest.approx(result.codelength, rel=1e-3)
    groups = lambda labels: {frozenset(n for n in labels if labels[n] == m) for m in set(labels.values())}  # noqa: E731
    assert groups(partition) == groups(ours)


def test_headers_say_what_ran(model: CHMM, tmp_path: Path) -> None:
    options = cm.CommunityOptions(trials=3, seed=4, markov_time=1.5)
    result = api.model_communities(model, THRESHOLD, options, text.read_text(ALICE))
    files = export_all(result, tmp_path)
    module = result.top_modules[0].id
    export.export_graph(result.graph, tmp_path / "m.clu", "clu", result, module=module)
    for path in [*files.values(), tmp_path / "m.clu"]:
        if path.suffix == ".graphml":
            meta = nx.read_graphml(path).graph
            assert (meta["infomap_trials"], meta["infomap_markov_time"]) == (3, 1.5)
            assert meta["infomap_seed"] == "4 (Infomap --seed 5)" and meta["corpus"] == "carroll-alice.txt"
            assert meta["threshold"] == THRESHOLD and meta["states"] == model.n_states and meta["pruned"]
            assert meta["model_test_bps"] == pytest.approx(model.metadata["test_bps"])
            continue
        header = "\n".join(line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("#"))
        assert "trials 3, markov time 1.5, seed 4 (Infomap --seed 5)" in header, path
        assert "flow stationary (link weights node flow x T, --flow-model rawdir)" in header
        assert f"{model.n_states:,} states" in header and f"pruned at {THRESHOLD:g}" in header
        assert f"test BPS {model.metadata['test_bps']:.4f} before pruning" in header
    assert f"module {module}" in (tmp_path / "m.clu").read_text(encoding="utf-8").splitlines()[0]


def test_module_exports_keep_structure_and_own_numbering(either: cm.Communities, tmp_path: Path) -> None:
    result = either
    with_children = [m for m in result.top_modules if m.children]
    leaves = [m for m in result.modules.values() if not m.children and m.size > 1]
    assert leaves, "the fixture's result has no leaf module with two clones"
    for module in [*with_children[:1], leaves[0]]:
        folder = tmp_path / module.id.replace(":", "-")
        folder.mkdir()
        files = export_all(result, folder, module.id)
        labels, clu, tree = read_pajek_labels(files["pajek"]), read_clu(files["clu"]), parse_tree(files["tree"])
        assert sorted(labels) == list(range(1, module.size + 1)) and set(clu) == set(tree) == set(labels)
        clones = module.nodes.tolist()  # vertex i is the i-th clone of the module
        for vertex, label in labels.items():
            clone = clones[vertex - 1]
            assert label == tree[vertex][2] == result.graph.label(clone)
            within = result.node_path[clone][module.level :]
            if module.children:  # its submodules are the export's modules
                assert clu[vertex] == within[0] and tree[vertex][0] == ":".join(map(str, within))
            else:  # a leaf module is one module
                assert clu[vertex] == 1 and tree[vertex][0] == "1:" + ":".join(map(str, within))
        assert len(set(clu.values())) == (len(module.children) if module.children else 1)
        links = parse_ftree_links(files["ftree"])
        first = links["root"] if module.children else links["1"]
        assert first[0] == pytest.approx(module.enter_flow, rel=1e-5)
        assert first[1] == pytest.approx(module.exit_flow, rel=1e-5)
        read = nx.read_graphml(files["graphml"])
        assert {d["state"] for _, d in read.nodes(data=True)} == set(clones)
        assert nx.read_pajek(files["pajek"]).number_of_edges() == read.number_of_edges()
        assert {d["module_id"] for _, d in read.nodes(data=True)} <= {module.id, *module.children}


def test_own_ftree_writer_matches_infomap(result: cm.Communities, tmp_path: Path) -> None:
    # our writer against Infomap's own on the whole graph: paths, names, flows and the aggregated link flows of every
    # module agree (Infomap's node ids are the clone indices it was given, ours the export's 1..n)
    result.infomap_result.write_flow_tree(str(tmp_path / "infomap.ftree"))
    scope = export.export_scope(result.graph, result)
    (tmp_path / "own.ftree").write_text(export.ftree_text(result, scope, []), encoding="utf-8")
    vertex = scope.vertex
    theirs = {vertex[n]: value for n, value in parse_tree(tmp_path / "infomap.ftree").items()}
    ours = parse_tree(tmp_path / "own.ftree")
    assert {n: (p, name) for n, (p, _, name) in theirs.items()} == {n: (p, name) for n, (p, _, name) in ours.items()}
    for node, (_, flow, _) in theirs.items():
        assert ours[node][1] == pytest.approx(flow, rel=1e-5)
    links_theirs, links_ours = parse_ftree_links(tmp_path / "infomap.ftree"), parse_ftree_links(tmp_path / "own.ftree")
    assert set(links_theirs) == set(links_ours)
    for name, (enter, exit_, n_edges, n_children, links) in links_theirs.items():
        o_enter, o_exit, o_edges, o_children, o_links = links_ours[name]
        assert (n_edges, n_children) == (o_edges, o_children)
        assert o_enter == pytest.approx(enter, rel=1e-4, abs=1e-9) and o_exit == pytest.approx(
            exit_, rel=1e-4, abs=1e-9
        )
        assert set(links) == set(o_links)
        for key, flow in links.items():
            assert o_links[key] == pytest.approx(flow, rel=1e-4, abs=1e-9)


def test_gexf_and_cytoscape_carry_layout_and_colours(result: cm.Communities, tmp_path: Path) -> None:
    export.export_graph(result.graph, tmp_path / "g.gexf", "gexf", result)
    read = nx.read_gexf(tmp_path / "g.gexf")
    xml = (tmp_path / "g.gexf").read_text(encoding="utf-8")
    assert "<creator>CHMM Explorer</creator>" in xml and "corpus: carroll-alice.txt" in xml
    positions = {}
    for _, data in read.nodes(data=True):
        viz = data["viz"]
        positions[data["state"]] = (viz["position"]["x"], viz["position"]["y"])
        colour = drawing.colour_rgb(drawing.module_colour(data["module"]))
        assert {k: viz["color"][k] for k in "rgb"} == colour
        assert 4 <= viz["size"] <= 40
    spread = np.array(list(positions.values()))
    assert spread.std(axis=0).min() > 50  # laid out, not stacked at the origin
    # clones of one module lie closer together than clones of different modules
    module_of = {d["state"]: d["module"] for _, d in read.nodes(data=True)}
    same, other = [], []
    states = sorted(positions)
    for a in states[:200]:
        for b in states[:200]:
            if a < b:
                d = float(np.hypot(*np.subtract(positions[a], positions[b])))
                (same if module_of[a] == module_of[b] else other).append(d)
    assert np.median(same) < np.median(other)
    export.export_graph(result.graph, tmp_path / "g.cyjs", "cyjs", result)
    data = json.loads((tmp_path / "g.cyjs").read_text(encoding="utf-8"))
    assert data["data"]["corpus"] == "carroll-alice.txt" and data["data"]["infomap_trials"] == result.options.trials
    for node in data["elements"]["nodes"]:
        assert node["position"] == {"x": node["data"]["x"], "y": node["data"]["y"]}
        assert node["data"]["colour"] == drawing.module_colour(node["data"]["module"])
        assert positions[node["data"]["state"]] == pytest.approx((node["data"]["x"], node["data"]["y"]), abs=1e-3)
    assert all(edge["data"]["width"] > 0 for edge in data["elements"]["edges"])


def test_file_names_say_what_is_inside(result: cm.Communities) -> None:
    name = export.export_file_name(result.graph, "gexf", "3:2")
    assert name == f"carroll-alice-{result.graph.n_states}-states-pruned-{THRESHOLD:g}-module-3-2.gexf"
    assert export.export_file_name(result.graph, "pajek").endswith("-whole.net")


def test_npz_export(result: cm.Communities, reference: nx.DiGraph, tmp_path: Path) -> None:
    export.export_graph(result.graph, tmp_path / "g.npz", "npz", result)
    with np.load(tmp_path / "g.npz", allow_pickle=False) as data:
        assert set(map(str, data["vertex"])) == set(reference.nodes)
        assert {(str(s), str(t)) for s, t in zip(data["source"], data["target"], strict=True)} == set(reference.edges)
        node = str(data["vertex"][0])
        assert data["label"][0] == reference.nodes[node]["label"] and data["path"][0] == reference.nodes[node]["path"]
        assert int(data["state"][0]) == reference.nodes[node]["state"]
        meta = json.loads(bytes(data["metadata_json"]))
        assert meta["format"] == "chmm-explorer-clone-graph" and meta["export"]["corpus"] == "carroll-alice.txt"


# ======================================================================================= command line
def run_cli(args: list[object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_prune_command(model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.npz"
    code, stdout, _ = run_cli(
        ["prune", model_path, "-o", out, "--threshold", "1e-3", "--validation", ALICE, "--json"], capsys
    )
    assert code == 0
    figures = json.loads(stdout.strip().splitlines()[-1])
    assert {"threshold", "kept_fraction", "bps_before", "bps_after"} <= set(figures)
    assert figures["threshold"] == 1e-3 and 0 < figures["kept_fraction"] < 1
    assert figures["bps_after"] >= figures["bps_before"] - 0.01
    pruned = load(out)
    assert pruned.metadata["pruned"]["threshold"] == 1e-3
    assert pruned.n_nonzero() == figures["nonzeros_after"]
    code, stdout, _ = run_cli(["prune", model_path, "-o", tmp_path / "v.npz", "--viterbi", ALICE, "--json"], capsys)
    assert code == 0 and json.loads(stdout)["viterbi_clones"] > 0


def test_communities_command(model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "res"
    code, stdout, _ = run_cli(
        ["communities", model_path, "-o", out, "--trials", "2", "--seed", "3", "--corpus", ALICE, "--json"], capsys
    )
    assert code == 0
    figures = json.loads(stdout.strip().splitlines()[-1])
    assert {"modules", "codelength", "nodes", "edges", "seconds"} <= set(figures)
    assert sorted(p.name for p in out.iterdir()) == [
        "clones.clu",
        "clones.ftree",
        "clones.tree",
        "modules.csv",
        "modules.json",
    ]


@pytest.mark.parametrize("fmt", export.FORMATS)
def test_export_command(model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    out = tmp_path / f"g{export.EXTENSIONS[fmt]}"
    code, stdout, err = run_cli(["export", model_path, "--format", fmt, "-o", out, "--trials", "1", "--json"], capsys)
    assert code == 0, err
    assert out.stat().st_size > 0 and json.loads(stdout)["format"] == fmt
    stdout_whole = stdout
    code, stdout, err = run_cli(
        ["export", model_path, "--format", fmt, "-o", tmp_path / "m", "--module", "1", "--json"], capsys
    )
    assert code == 0, err
    figures = json.loads(stdout)
    assert Path(figures["path"]).stat().st_size > 0
    assert 0 < figures["nodes"] < json.loads(stdout_whole)["nodes"]  # the module, not the whole graph


def assert_clean_failure(code: int, err: str, tmp_path: Path, pattern: str) -> None:
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("chmm: error:") and pattern in lines[0], err
    assert [p.name for p in tmp_path.iterdir() if p.name != "existing.txt"] == []


@pytest.mark.parametrize("threshold", ["0", "1", "1.5", "-0.001", "nan"])
def test_bad_threshold(model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], threshold: str) -> None:
    for args in (
        ["prune", model_path, "-o", tmp_path / "p.npz", "--threshold", threshold],
        ["communities", model_path, "-o", tmp_path / "res", "--threshold", threshold],
        ["export", model_path, "--format", "gexf", "-o", tmp_path / "g.gexf", "--threshold", threshold],
    ):
        code, _, err = run_cli(args, capsys)
        assert_clean_failure(code, err, tmp_path, "threshold")


def test_not_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = tmp_path / "existing.txt"
    fake.write_text("not a model")
    for args in (
        ["prune", fake, "-o", tmp_path / "p.npz"],
        ["communities", fake, "-o", tmp_path / "res"],
        ["export", fake, "--format", "graphml", "-o", tmp_path / "g.graphml"],
    ):
        code, _, err = run_cli(args, capsys)
        assert_clean_failure(code, err, tmp_path, "model")


def test_missing_module(model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    existing = tmp_path / "existing.txt"
    existing.write_text("keep me")
    for module in ("999", "1:999", "x"):
        code, _, err = run_cli(
            ["export", model_path, "--format", "graphml", "-o", existing, "--module", module, "--trials", "1"], capsys
        )
        assert_clean_failure(code, err, tmp_path, "does not exist")
    assert existing.read_text() == "keep me"  # the existing output is untouched


def test_module_links_are_the_ftree_link_flows(either: cm.Communities, tmp_path: Path) -> None:
    """The module map's links (engine.network.communities.module_links, vectorised) against the .ftree's *Links sections
    (a loop over the edges): every parent's links between its children, flow for flow."""
    result = either
    export.export_graph(result.graph, tmp_path / "g.ftree", "ftree", result)
    sections = parse_ftree_links(tmp_path / "g.ftree")
    links = cm.module_links(result)
    parents = [m.id for m in result.modules.values() if m.children] + [""]
    for parent in parents:
        expected = sections["root" if not parent else parent][4]
        depth = len(parent.split(":")) if parent else 0
        got = {(int(a.split(":")[depth]), int(b.split(":")[depth])): f for a, b, f in links.get(parent, [])}
        assert set(got) == set(expected), parent
        for key, flow in expected.items():
            assert got[key] == pytest.approx(flow, rel=1e-4, abs=1e-9)
    assert all(a != b for items in links.values() for a, b, _ in items)
    for parent, items in links.items():  # the most flow first; a limit keeps each parent's first links
        assert [f for _, _, f in items] == sorted((f for _, _, f in items), reverse=True)
        assert cm.module_links(result, 3).get(parent, []) == items[:3]


def _as_kept(result: cm.Communities, with_paths: bool) -> dict[str, object]:
    """A run as the app keeps it (JSON: summary, options, modules with their clones, node flow, maybe paths)."""
    from dataclasses import asdict

    flows = export._infomap_flow(result)
    kept: dict[str, object] = {
        "summary": result.summary(),
        "options": asdict(result.options),
        "modules": [m.summary() | {"nodes": m.nodes.tolist()} for m in result.modules.values()],
        "node_flow": {str(node): flow for node, flow in flows.items()},
    }
    if with_paths:
        kept["node_path"] = {str(node): ":".join(map(str, path)) for node, path in result.node_path.items()}
    return json.loads(json.dumps(kept))


@pytest.mark.parametrize("with_paths", [True, False])
def test_a_restored_run_exports_the_modules_shown(either: cm.Communities, with_paths: bool, tmp_path: Path) -> None:
    """Issue 47: Export ran Infomap again, and 13% of clones changed module against the run on screen. A run
    restored from what the app keeps exports the same partition: with the saved paths, the very ``.clu`` and
    ``.tree``; without them (runs kept before), the same module of every clone at every level."""
    restored = cm.restore_communities(either.graph, _as_kept(either, with_paths), origin="the run on screen")
    assert restored.summary() == either.summary()
    original = export.partition_texts(either)
    again = export.partition_texts(restored)
    def body(text: str) -> list[str]:
        return [line for line in text.split("\n") if not line.startswith("# modules:")]

    same = (lambda a, b: a == b) if with_paths else (lambda a, b: sorted(a) == sorted(b))  # clone order in a leaf
    assert same(body(again["clu"]), body(original["clu"]))
    assert "# modules: the run on screen" in again["clu"] and "# modules: run for this export" in original["clu"]
    modules_of = {node: path[:-1] for node, path in either.node_path.items()}
    assert {node: path[:-1] for node, path in restored.node_path.items()} == modules_of
    if with_paths:
        assert body(again["tree"]) == body(original["tree"]) and body(again["ftree"]) == body(original["ftree"])
    written = tmp_path / "restored.graphml"
    api.graph.export_model_graph(None, written, "graphml", communities=restored)  # type: ignore[arg-type]
    read = nx.read_graphml(written)
    paths = {int(data["state"]): data["path"] for _, data in read.nodes(data=True)}
    assert paths == {node: ":".join(map(str, p)) for node, p in restored.node_path.items()}


def test_a_kept_run_of_another_graph_is_refused(result: cm.Communities) -> None:
    kept = _as_kept(result, True)
    kept["modules"][0]["nodes"].append(result.graph.n_states + 5)  # type: ignore[index]
    with pytest.raises(ValueError, match="outside the clone graph"):
        cm.restore_communities(result.graph, kept)


def test_edges_among_are_the_edges_with_both_ends_inside(result: cm.Communities) -> None:
    """A node set's edges found through its own rows are exactly the edges of the whole graph with both ends in it,
    in CSR order, and each one's source is the row that holds it."""
    graph = result.graph
    sources, targets = graph.edges()
    rng = np.random.default_rng(0)
    for nodes in (np.sort(rng.choice(graph.n_states, size=size, replace=False)) for size in (1, 40, graph.n_states)):
        inside = np.zeros(graph.n_states, dtype=bool)
        inside[nodes] = True
        expected = np.flatnonzero(inside[sources] & inside[targets])
        found = graph.edges_among(nodes)
        assert np.array_equal(found, expected)
        assert np.array_equal(graph.edge_sources(found), sources[expected])


@pytest.mark.parametrize("most", [0, 25, 400, 10**6])
def test_most_edges_builds_only_the_most_probable_edges(result: cm.Communities, most: int) -> None:
    """``most_edges`` gives the graph the module card drew before, when it built every edge of the module as
    networkx objects (185,000 edges, 93 MB, on a 5,000-clone model) and kept the most probable: the same nodes with
    the same attributes, the same edges in the same order, and no other edge built."""
    graph = result.graph
    nodes = np.sort(np.argsort(-graph.flow, kind="stable")[:150])
    whole = export.to_networkx(graph, nodes=nodes, ids="state")
    kept_edges = sorted(whole.edges(data=True), key=lambda e: -e[2]["weight"])[:most]
    before = nx.DiGraph(**whole.graph)
    before.add_nodes_from(whole.nodes(data=True))
    before.add_edges_from(kept_edges)
    assert whole.number_of_edges() > 400  # the cut is real at 25 and at 400
    drawn = export.to_networkx(graph, nodes=nodes, ids="state", most_edges=most)
    assert drawn.graph == before.graph
    assert list(drawn.nodes(data=True)) == list(before.nodes(data=True))
    assert list(drawn.edges(data=True)) == list(before.edges(data=True))
    assert drawn.number_of_edges() == min(most, whole.number_of_edges())


def test_headers_name_the_corpus_file_never_the_machines_folders(model: CHMM, tmp_path: Path) -> None:
    """A model trained with an absolute path recorded it, and every export's header (GraphML, .clu, .net, .tree)
    carried the server's folders. Exports name the file only; so does the file name they suggest."""
    import copy

    travelled = copy.deepcopy(model)
    travelled.metadata["corpus"] = "/srv/private/alice/carroll-alice.txt"
    result = api.model_communities(travelled, THRESHOLD, cm.CommunityOptions(trials=1, seed=1))
    files = export_all(result, tmp_path)
    files["gexf"] = tmp_path / "g.gexf"
    export.export_graph(result.graph, files["gexf"], "gexf", result)
    for path in files.values():
        written = path.read_text(encoding="utf-8")
        assert "/srv/private" not in written, path.suffix
        assert "carroll-alice.txt" in written, path.suffix
    assert export.export_file_name(result.graph, "clu").startswith("carroll-alice-")
