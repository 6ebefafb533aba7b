"""A symbol's senses (engine.network.senses): each clone's previous and next symbols against the dense T and its
stationary flow computed by hand, and the windowed decoding against full Viterbi."""

from __future__ import annotations

import numpy as np
import pytest

from engine import api
from engine.backends.cpu import inference
from engine.model.dense import random_model
from engine.network import senses
from engine.network.graph import clone_graph

SYMBOLS = ["a", "b", "c", "d"]


@pytest.fixture(scope="module")
def model() -> api.CHMM:
    pairs = np.array([(i, j) for i in range(4) for j in range(4)], dtype=np.int64)
    return random_model(SYMBOLS, np.array([3, 2, 2, 1]), pairs, np.random.default_rng(7), dtype=np.float64)


def test_each_clones_company_is_its_flow_weighted_previous_and_its_next_symbols(model: api.CHMM) -> None:
    graph = clone_graph(model)
    T = model.dense_T()
    flow = graph.flow
    assert flow @ T == pytest.approx(flow, abs=1e-6)  # the graph's flow is T's stationary distribution
    symbol_of = model.layout.clone_symbol()
    found = senses.symbol_senses(graph, 0, top=4)
    assert sorted(s.clone for s in found.senses) == [0, 1, 2]
    assert [s.flow for s in found.senses] == sorted((s.flow for s in found.senses), reverse=True)
    for sense in found.senses:
        c = sense.clone
        into = flow * T[:, c]
        expected_previous = np.bincount(symbol_of, weights=into, minlength=4) / into.sum()
        expected_next = np.bincount(symbol_of, weights=T[c], minlength=4)
        assert dict(sense.previous) == pytest.approx({s: expected_previous[s] for s, _ in sense.previous})
        assert dict(sense.following) == pytest.approx({s: expected_next[s] for s, _ in sense.following})
        assert sum(p for _, p in sense.following) == pytest.approx(1.0)  # all four symbols listed: T's row
        assert [p for _, p in sense.previous] == sorted((p for _, p in sense.previous), reverse=True)


def test_a_window_as_long_as_the_text_decodes_as_viterbi_does(model: api.CHMM) -> None:
    x = np.random.default_rng(3).integers(0, 4, 60)
    full = inference.viterbi(model, x).clones

    def decode(window: np.ndarray) -> np.ndarray:
        return inference.viterbi(model, window).clones

    positions, clones, occurring = senses.decoded_occurrences(x, 1, decode, window=len(x))
    assert occurring == int(np.count_nonzero(x == 1)) == len(positions)
    assert clones.tolist() == full[positions].tolist()
    found = senses.symbol_senses(clone_graph(model), 1, x, decode, window=len(x))
    assert sum(s.occurrences for s in found.senses) == occurring and found.unread == 0
    for sense in found.senses:
        if sense.occurrences:
            start, stop, at = sense.example
            assert x[at] == 1 and full[at] == sense.clone and start == 0 and stop >= len(x)
    few, _, _ = senses.decoded_occurrences(x, 1, decode, window=2, limit=3)
    assert len(few) == 3 and few[0] == positions[0] and few[-1] == positions[-1]  # spread over the text


def test_a_window_the_model_cannot_read_is_counted_unread() -> None:
    pairs = np.array([(0, 1), (1, 0), (1, 1)], dtype=np.int64)  # "a a" never seen
    model = random_model(["a", "b"], np.array([2, 2]), pairs, np.random.default_rng(1), dtype=np.float64)
    x = np.array([1, 0, 0, 1, 0, 1], dtype=np.int64)

    def decode(window: np.ndarray) -> np.ndarray:
        result = inference.viterbi(model, window)
        return result.clones if np.isfinite(result.log_probability) else np.full(len(window), -1)

    found = senses.symbol_senses(clone_graph(model), 0, x, decode, window=1)
    assert found.occurrences == found.decoded == 3 and found.unread == 2  # the two a's beside each other
    with pytest.raises(ValueError, match="outside the alphabet"):
        senses.symbol_senses(clone_graph(model), 5)
