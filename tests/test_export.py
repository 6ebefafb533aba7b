"""Graph exports read back by the tools that consume them, and the prune / communities / export commands."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from engine import cli, export, text, workflows
from engine import communities as cm
from engine.model import CHMM, load

DATA = Path(__file__).parent / "data"
ALICE = DATA / "carroll-alice.txt"
THRESHOLD = 5e-3


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    raw = text.read_text(ALICE)
    options = workflows.TrainOptions(states=200, iterations=8, refit=False, max_train=30_000)
    path = tmp_path_factory.mktemp("models") / "alice.npz"
    workflows.save_model(workflows.train_text(raw, options).model, path)
    return path


@pytest.fixture(scope="module")
def model(model_path: Path) -> CHMM:
    return load(model_path)


@pytest.fixture(scope="module")
def result(model: CHMM) -> cm.Communities:
    return workflows.model_communities(model, THRESHOLD, cm.CommunityOptions(trials=2), text.read_text(ALICE))


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


NODE_KEYS = ("label", "char", "clone", "flow", "module", "path", "module_name")
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
    assert_same_graph(read, reference, (), ("weight",))
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


def test_infomap_partition_files(result: cm.Communities, tmp_path: Path) -> None:
    for fmt in ("clu", "tree", "ftree"):
        export.export_graph(result.graph, tmp_path / f"g.{fmt}", fmt, result)
    clu = [line.split() for line in (tmp_path / "g.clu").read_text().splitlines() if not line.startswith("#")]
    assert {int(n): int(m) for n, m, _ in clu} == result.top_module_of()
    assert sum(float(f) for *_, f in clu) == pytest.approx(1.0, abs=1e-4)
    tree = parse_tree(tmp_path / "g.tree")
    assert {n: p for n, (p, _, _) in tree.items()} == {n: ":".join(map(str, p)) for n, p in result.node_path.items()}
    assert {n: name for n, (_, _, name) in tree.items()} == {n: result.graph.label(n) for n in result.nodes}
    assert parse_tree(tmp_path / "g.ftree") == tree


def test_own_ftree_writer_matches_infomap(result: cm.Communities, tmp_path: Path) -> None:
    # the whole-graph files come from Infomap's writers; module subgraphs use our writer: on the whole graph the
    # two must agree (paths, names, flows, and the aggregated link flows of every module)
    result.infomap_result.write_flow_tree(str(tmp_path / "infomap.ftree"))
    (tmp_path / "own.ftree").write_text(export.ftree_text(result), encoding="utf-8")
    theirs, ours = parse_tree(tmp_path / "infomap.ftree"), parse_tree(tmp_path / "own.ftree")
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


def test_module_subgraph_exports(result: cm.Communities, reference: nx.DiGraph, tmp_path: Path) -> None:
    module = max(result.top_modules, key=lambda m: m.size)
    expected = reference.subgraph([str(n) for n in module.nodes])
    export.export_graph(result.graph, tmp_path / "m.graphml", "graphml", result, module=module.id)
    assert_same_graph(nx.read_graphml(tmp_path / "m.graphml"), expected, NODE_KEYS, EDGE_KEYS)
    export.export_graph(result.graph, tmp_path / "m.tree", "tree", result, module=module.id)
    tree = parse_tree(tmp_path / "m.tree")
    assert set(tree) == set(module.nodes.tolist())
    assert all(p == ":".join(map(str, result.node_path[n][1:])) for n, (p, _, _) in tree.items())
    export.export_graph(result.graph, tmp_path / "m.ftree", "ftree", result, module=module.id)
    links = parse_ftree_links(tmp_path / "m.ftree")
    assert links["root"][0] == pytest.approx(module.enter_flow, rel=1e-5)
    assert links["root"][1] == pytest.approx(module.exit_flow, rel=1e-5)
    export.export_graph(result.graph, tmp_path / "m.clu", "clu", result, module=module.id)
    export.export_graph(result.graph, tmp_path / "m.net", "pajek", result, module=module.id)
    assert nx.read_pajek(tmp_path / "m.net").number_of_edges() == expected.number_of_edges()


def test_npz_export(result: cm.Communities, reference: nx.DiGraph, tmp_path: Path) -> None:
    export.export_graph(result.graph, tmp_path / "g.npz", "npz", result)
    with np.load(tmp_path / "g.npz", allow_pickle=False) as data:
        assert set(map(str, data["node"])) == set(reference.nodes)
        assert {(str(s), str(t)) for s, t in zip(data["source"], data["target"], strict=True)} == set(reference.edges)
        node = str(data["node"][0])
        assert data["label"][0] == reference.nodes[node]["label"] and data["path"][0] == reference.nodes[node]["path"]
        assert json.loads(bytes(data["metadata_json"]))["format"] == "chmm-explorer-clone-graph"


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
    code, _, err = run_cli(["export", model_path, "--format", fmt, "-o", tmp_path / "m", "--module", "1"], capsys)
    assert code == 0, err


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
