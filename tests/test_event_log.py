"""An event log with a long-range dependency, as a process-mining user brings it: every case is registered, takes one
of two branches, loops through a check a random number of times, and ends with the step its branch decides. The CSV
(rows shuffled, ordered by a time column) is read by case; the CHMM reaches the process's optimal bits per event,
where a first-order model (one state per activity: the directly-follows graph) cannot, and its clone graph, exported,
holds the two branches as two clones of the check (as Table 1 does for the toy automaton)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from engine import api

BRANCHES = {"standard": "ship", "express": "courier"}


def _process(cases: int, seed: int) -> str:
    """The event log as CSV text."""
    rng = np.random.default_rng(seed)
    rows = []
    for case in range(cases):
        branch = "standard" if rng.random() < 0.5 else "express"
        checks = 1 + int(rng.geometric(0.5)) - 1
        steps = ["register", branch, *(["check"] * checks), BRANCHES[branch]]
        rows += [(f"c{case:04d}", step, f"{case * 100 + t:06d}") for t, step in enumerate(steps)]
    rows = [rows[i] for i in rng.permutation(len(rows))]  # a log's rows come in any order: the time column orders
    return "case,activity,time\n" + "".join(f"{c},{a},{t}\n" for c, a, t in rows)


@pytest.fixture(scope="module")
def log() -> tuple[list[api.corpora.Document], float]:
    """The cases and the optimal bits per event of the test part (the last tenth of the cases as read): a case
    costs 1 bit for its branch and 1 bit per check (another check or the end, each 1/2)."""
    cases = api.corpora.read_event_log(_process(1_000, seed=4), "case", "activity", "time")
    test = [case.text.split() for case in cases[len(cases) - len(cases) // 10 :]]
    return cases, sum(1 + steps.count("check") for steps in test) / sum(len(steps) for steps in test)


def _train(documents: list[api.corpora.Document], states: int) -> api.TrainOptions:
    options = api.TrainOptions(
        unit="tokens", by_sequence=True, states=states, pseudocount=1e-4, algorithm="em", iterations=200,
        restarts=4, tolerance=1e-9,
    )  # fmt: skip
    return api.train_text(documents, options)


def test_the_chmm_reaches_the_optimum_a_first_order_model_cannot(log, tmp_path) -> None:
    documents, optimal = log
    assert documents[0].text.split()[0] == "register"  # read by case, in time order
    chmm = _train(documents, states=10)
    first_order = _train(documents, states=7)  # one state per activity (and <rare>): the directly-follows graph
    assert chmm.summary["test_bps"] == pytest.approx(optimal, abs=0.02)
    # the first-order model pays about 1 bit per case at the end: which end follows a check it cannot know
    assert first_order.summary["test_bps"] > optimal + 0.1
    path = tmp_path / "process.graphml"
    api.graph.export_model_graph(chmm.model, path, "graphml", threshold=0.01)
    graph = nx.read_graphml(path)
    name = {node: data["char"] for node, data in graph.nodes(data=True)}
    checks = [node for node in graph if name[node] == "check"]
    branches = set()
    for check in checks:
        before = {name[u] for u, _ in graph.in_edges(check)} - {"check"}
        after = {name[v] for _, v in graph.out_edges(check)} - {"check"}
        if len(before) == 1 and len(after) == 1:
            branches.add((before.pop(), after.pop()))
    assert branches == set(BRANCHES.items())  # one check clone per branch, each leading to its own end
