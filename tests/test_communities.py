"""Infomap communities of the clone graph, module summaries, generalized words and the result folder."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from engine import api, training
from engine.backends import model_files
from engine.corpora import text
from engine.model import synthetic
from engine.model.dense import CHMM
from engine.network import communities as cm
from engine.network import export, graph
from engine.network import words as words_mod

DATA = Path(__file__).parent / "data"
ALICE = DATA / "carroll-alice.txt"
K = 2


@pytest.fixture(scope="module")
def toy() -> cm.Communities:
    model = synthetic.toy_fsm_true_model(K)
    sample = model.decode_symbols(synthetic.toy_fsm_sequence(K, 3000, np.random.default_rng(0)))
    return cm.find_communities(graph.clone_graph(model), cm.CommunityOptions(trials=3), reference=sample)


@pytest.fixture(scope="module")
def alice_small(alice_model: CHMM) -> tuple[CHMM, str]:
    return alice_model, text.read_text(ALICE)


def test_toy_fsm_splits_into_its_two_branches(toy: cm.Communities) -> None:
    # clone 0 of each noise symbol serves blocks opened by 0, clone 1 blocks opened by 2
    assert len(toy.top_modules) == 2
    g = toy.graph
    for module in toy.top_modules:
        openings = {g.char(n) for n in module.nodes if g.char(n) in ("0", "2")}
        assert len(openings) == 1
        branch = 0 if openings == {"0"} else 1
        noise = [n for n in module.nodes if int(g.clone_symbol[n]) >= 4]
        assert all(int(g.clone_rank[n]) == branch for n in noise)
    assert sum(m.flow for m in toy.top_modules) == pytest.approx(1.0)
    # one block boundary every 3k = 6 symbols; it enters a branch from the other one with probability 1/4
    for module in toy.top_modules:
        assert module.enter_flow == pytest.approx(1 / 24, rel=1e-3)
        assert module.exit_flow == pytest.approx(1 / 24, rel=1e-3)


def test_toy_fsm_generalized_words_are_its_blocks(toy: cm.Communities) -> None:
    for module in toy.top_modules:
        opening = "0" if "0" in module.chars else "2"
        closing = {"0": "1", "2": "3"}[opening]
        blocks = {f"{opening}{a}67{b}{closing}" for a in "45" for b in "89"}
        top = module.words[:4]
        assert {w.text for w in top} == blocks
        # entering at the opening signal, each of the four coin outcomes has probability 1/4, and the walk
        # leaves the module after the closing signal with probability 1/2
        assert all(w.probability == pytest.approx(0.125, rel=1e-3) for w in top)
        assert all(w.seen for w in top)
        assert module.name in {w.text for w in top} or "/" in module.name


def test_words_are_marked_novel_against_a_reference(toy: cm.Communities) -> None:
    module = next(m for m in toy.top_modules if "0" in m.chars)  # its blocks are 0a67b1 (no spaces: fragments)
    reference = ["046781", "046791", "056781"]
    words = words_mod.generalized_words(toy.graph, module.nodes, k=50, max_length=6, reference=reference)
    marks = {w.text: w.seen for w in words}
    assert marks["046781"] is True and marks["056791"] is False
    assert all(w.kind == words_mod.FRAGMENT for w in words)
    assert words_mod.generalized_words(toy.graph, module.nodes, k=3)[0].seen is None  # no reference: unknown


def one_edit_apart(a: str, b: str) -> bool:
    """Whether one substitution, insertion or deletion turns ``a`` into ``b``."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) == 1
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def test_alice_modules_generate_whole_words_and_plausible_novel_ones() -> None:
    """Paper 4.2.1: on the bundled alice model the top modules' generalized words are whole English words, "seen"
    means in the training vocabulary (not a substring of the text), and some novel words are one edit from a word
    of the text, as "rattle" is from "battle"."""
    model = model_files.load_model(Path(__file__).parents[1] / "sample_models" / "alice-600.npz")
    raw = text.read_text(ALICE)
    result = api.model_communities(model, 1e-3, cm.CommunityOptions(trials=3), raw)
    vocabulary = set(model.codec.normalise(raw).split())
    top = sorted(result.top_modules, key=lambda m: -m.flow)[:15]
    top_words = {w.text for m in top for w in m.words[:2]}
    assert {"the", "and", "said", "she", "of"} <= top_words
    words = [w for m in result.modules.values() for w in m.words]
    for word in words:
        assert word.text and " " not in word.text and word.probability >= words_mod.MIN_WORD_PROBABILITY
        if word.kind == words_mod.WORD:
            assert word.seen == (word.text in vocabulary), word
    assert [w.kind for m in top for w in m.words if w.text == "rare"] == [words_mod.PLACEHOLDER]
    novel = {w.text for w in words if w.kind == words_mod.WORD and w.seen is False}
    plausible = {w for w in novel if len(w) >= 3 and any(one_edit_apart(w, v) for v in vocabulary)}
    assert len(plausible) >= 3, novel
    assert any(w not in raw.lower() for w in plausible)  # novel: some are not even a substring of the text
    fragments = [m for m in result.modules.values() if m.words and m.words[0].kind == words_mod.FRAGMENT]
    assert 0 < len(fragments) < len(result.modules) / 2
    for module in fragments:  # labelled as fragments, in the name too
        assert all(w.kind == words_mod.FRAGMENT for w in module.words) and module.name.startswith("-")


def test_module_lookup_and_deterministic_seed(toy: cm.Communities) -> None:
    assert toy.module("1").path == (1,)
    assert toy.module(2).id == "2"
    with pytest.raises(ValueError, match="does not exist"):
        toy.module("7")
    with pytest.raises(ValueError, match="does not exist"):
        toy.module("1:99")
    again = cm.find_communities(toy.graph, cm.CommunityOptions(trials=3), None)
    assert again.node_path == toy.node_path
    # Infomap's .clu module ids are the top-level tree indices (path[0]): ids are global, paths local
    assert toy.infomap_result.modules() == toy.top_module_of()


def test_options_are_validated() -> None:
    for bad in (
        cm.CommunityOptions(trials=0),
        cm.CommunityOptions(markov_time=0.0),
        cm.CommunityOptions(seed=-1),
        cm.CommunityOptions(flow="pagerank"),
    ):
        with pytest.raises(ValueError):
            bad.validate()


@pytest.mark.parametrize("flow", ["stationary", "counts", "directed"])
def test_flow_sources_on_a_text_model(alice_small: tuple[CHMM, str], flow: str) -> None:
    model, raw = alice_small
    options = cm.CommunityOptions(trials=2, flow=flow, two_level=flow == "directed")
    result = api.model_communities(model, 1e-3, options, raw)
    assert len(result.top_modules) >= 2
    assert sum(m.flow for m in result.top_modules) == pytest.approx(1.0, abs=1e-6)
    for module in result.modules.values():
        if module.children:
            assert sum(result.modules[c].flow for c in module.children) == pytest.approx(module.flow, abs=1e-9)
        assert 0 <= module.enter_flow <= 1 and 0 <= module.exit_flow <= 1
        assert module.chars and module.name
        probabilities = [w.probability for w in module.words]
        assert probabilities == sorted(probabilities, reverse=True) and sum(probabilities) <= 1 + 1e-9
        assert all(w.seen is not None and " " not in w.text and w.text for w in module.words)
    # every partitioned clone is in exactly one top module
    members = np.concatenate([m.nodes for m in result.top_modules])
    assert len(members) == len(set(members.tolist())) == len(result.nodes)


def test_result_folder(alice_small: tuple[CHMM, str], tmp_path: Path) -> None:
    model, raw = alice_small
    result = api.model_communities(model, 1e-3, cm.CommunityOptions(trials=2), raw)
    paths = api.graph.write_communities(result, tmp_path / "out")
    names = sorted(Path(p).name for p in paths)
    assert names == ["clones.clu", "clones.ftree", "clones.tree", "modules.csv", "modules.json"]
    with open(tmp_path / "out" / "modules.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(result.modules)
    assert sum(float(r["flow"]) for r in rows if r["level"] == "1") == pytest.approx(1.0, abs=1e-6)
    data = json.loads((tmp_path / "out" / "modules.json").read_text(encoding="utf-8"))
    assert data["summary"]["modules"] == len(result.top_modules)
    assert data["infomap_seed"] == 1 and data["options"]["trials"] == 2
    # the partition files number the clones as the whole graph's Pajek export does (1..n), not Infomap's 0-based
    # clone indices: joined with `chmm export --format pajek` of the same result by vertex id, labels and modules agree
    export.export_graph(result.graph, tmp_path / "g.net", "pajek", result)
    net = (tmp_path / "g.net").read_text(encoding="utf-8").split("*Arcs")[0].splitlines()
    label = {int(line.split()[0]): line.split('"')[1] for line in net if line[:1].isdigit()}
    clone = {vertex: node for node, vertex in export.export_scope(result.graph, result).vertex.items()}
    clu = [line.split() for line in (tmp_path / "out" / "clones.clu").read_text().splitlines() if line[0] != "#"]
    assert sorted(int(n) for n, _, _ in clu) == sorted(label) == list(range(1, len(result.nodes) + 1))
    assert {clone[int(n)]: int(m) for n, m, _ in clu} == result.top_module_of()
    tree = (tmp_path / "out" / "clones.tree").read_text(encoding="utf-8").splitlines()
    for line in (line for line in tree if line[0] != "#"):
        path, name, vertex = line.split(" ", 1)[0], line.split('"')[1], int(line.rsplit(" ", 1)[1])
        assert name == label[vertex] == result.graph.label(clone[vertex])
        assert path == ":".join(map(str, result.node_path[clone[vertex]]))
    assert "model:" in tree[1] and "Infomap" in tree[2]  # the export's header: what ran
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]
    # writing again into the existing folder replaces the files
    api.graph.write_communities(result, tmp_path / "out")
    assert len(list((tmp_path / "out").iterdir())) == 5


@pytest.mark.slow
def test_alice_3000_states_finds_common_and_novel_words() -> None:
    raw = text.read_text(ALICE)
    options = training.TrainOptions(
        states=3000, algorithm="online", batch_size=2000, pseudocount=1e-5, iterations=10, refit=False, restarts=1
    )
    model = training.train_text(raw, options).model
    result = api.model_communities(model, 1e-3, cm.CommunityOptions(trials=3), raw)
    assert sum(m.flow for m in result.top_modules) == pytest.approx(1.0, abs=1e-6)
    top_words = {w.text for m in result.top_modules for w in m.words[:3]}
    assert {"the", "and"} <= top_words
    names = {m.name for m in result.top_modules}
    assert "the" in names or any(n.startswith("the/") for n in names)
    novel = [w.text for m in result.modules.values() for w in m.words if w.seen is False]
    assert novel


def _word_graph(T: dict[tuple[str, str], float]) -> graph.CloneGraph:
    """The clone graph of a CHMM of one clone per symbol with the transitions ``T`` (rows normalised here)."""
    from engine.model.blocks import BlockLayout, dense_to_blocks
    from engine.model.codec import TextCodec

    symbols = sorted({s for pair in T for s in pair})
    index = {s: i for i, s in enumerate(symbols)}
    dense = np.zeros((len(symbols), len(symbols)))
    for (a, b), p in T.items():
        dense[index[a], index[b]] = p
    dense /= dense.sum(axis=1, keepdims=True)
    layout = BlockLayout.build(np.ones(len(symbols), dtype=np.int64), np.argwhere(dense > 0))
    pi = np.full(len(symbols), 1.0 / len(symbols))
    model = CHMM(symbols, layout, dense_to_blocks(layout, dense), pi, None, {}, TextCodec("raw", None))
    return graph.clone_graph(model)


def test_generalized_words_walk_a_loop_once_and_are_longer_than_a_letter() -> None:
    """Issue 35, defect 9: loop artefacts ("ellllllliot") and single letters were listed as words."""
    g = _word_graph({(" ", "e"): 0.5, (" ", "a"): 0.5, ("a", " "): 1, ("e", "l"): 1, ("l", "l"): 0.5,
                     ("l", "o"): 0.5, ("o", " "): 1})  # fmt: skip
    letters = np.array([i for i in range(g.n_states) if not g.is_space()[i]])
    found = {w.text: w for w in words_mod.generalized_words(g, letters, k=20)}
    assert set(found) == {"elo", "ello"}  # not "a", not "elllo", "ellllo" ...
    assert all(w.kind == words_mod.WORD for w in found.values())


def test_a_module_entered_mostly_mid_word_gives_fragments() -> None:
    """Issue 35, defect 9: suffix modules gave "whole words" ("ful", "ived") from word starts that carried under
    1.5% of the flow entering them; below WORD_START_SHARE a module's walks give fragments."""
    g = _word_graph({(" ", "e"): 0.99, (" ", "l"): 0.01, ("e", "l"): 1, ("l", "o"): 1, ("o", " "): 1})
    suffix = np.array([i for i in range(g.n_states) if g.char(i) in "lo"])
    found = words_mod.generalized_words(g, suffix, k=5)
    assert found and all(w.kind == words_mod.FRAGMENT for w in found)
    g = _word_graph({(" ", "e"): 0.5, (" ", "l"): 0.5, ("e", "l"): 1, ("l", "o"): 1, ("o", " "): 1})
    assert words_mod.generalized_words(g, suffix, k=5)[0].kind == words_mod.WORD  # a real share: whole words


def test_novel_means_absent_from_the_whole_raw_text(alice_model: CHMM) -> None:
    """Issue 35, defect 9: the reference was the training text after the "rare" replacement, so a word of the text
    that the vocabulary replaced ("ear") was marked novel."""
    raw = text.read_text(ALICE)
    reference = api.use.reference_text(alice_model, raw)
    vocabulary = set(alice_model.codec.vocabulary)
    replaced = [w for w in text.normalise_paper_base(raw).split() if w not in vocabulary]
    assert replaced and set(replaced) <= set(reference.split())
    assert words_mod.Reference.of(reference).vocabulary >= set(replaced)


@pytest.mark.parametrize(("two_level", "markov_time"), [(True, 1.0), (False, 1.0), (False, 0.5)])
def test_the_codelength_by_module_adds_up_to_infomaps(alice_model: CHMM, two_level: bool, markov_time: float) -> None:
    """Issue 35 (hierarchy): the map equation split over the module tree, index codebook and each module's own,
    sums to the code length Infomap reports, for two-level and multilevel results and another Markov time."""
    options = cm.CommunityOptions(trials=2, two_level=two_level, markov_time=markov_time)
    result = api.model_communities(alice_model, 1e-3, options)
    terms = cm.codelength_terms(result)
    assert terms is not None
    assert terms["total"] == pytest.approx(result.codelength, abs=1e-5)
    assert sum(terms["levels"].values()) == pytest.approx(terms["total"], abs=1e-9)
    assert set(terms["modules"]) == set(result.modules) and all(v >= 0 for v in terms["modules"].values())
    if markov_time == 0.5:
        assert result.n_levels > 2 and len(terms["levels"]) > 2  # a level of submodules has its own codebooks
    directed = api.model_communities(alice_model, 1e-3, cm.CommunityOptions(trials=1, flow="directed"))
    assert cm.codelength_terms(directed) is None
