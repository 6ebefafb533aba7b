"""Tests for engine.peers.pdfa: the PAC PDFA learner of Gavaldà, Keller, Pineau & Precup (2006)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.corpora.text import prepare_corpus, read_text
from engine.peers.base import PeerFormatError, bits_per_symbol, save_arrays
from engine.peers.pdfa import PdfaLearner, largeness_threshold
from engine.peers.pdfa_graph import GraphLearner, word_trajectories

DATA = Path(__file__).parent / "data"

# --------------------------------------------------------------------------- generators of the paper's section 6

A, B, C, END = 0, 1, 2, 3

THREE_WORDS = ([A, B, B], [A, A, A], [B, B, A])  # abb#, aaa#, bba# with # = symbol 2


def three_word_text(n_words: int, seed: int) -> np.ndarray:
    """Words drawn uniformly from {abb, aaa, bba} (the paper gives no probabilities), each followed by # = 2."""
    rng = np.random.default_rng(seed)
    table = np.array([w + [2] for w in THREE_WORDS], dtype=np.int64)
    return table[rng.integers(0, 3, size=n_words)].ravel()


# The Cheese maze of section 6 (McCallum's maze, cells numbered as in the paper's belief states):
#   s0 s1 s2 s3 s4
#   s5    s6    s7
#   s8    s10   s9
# The agent starts in s5 or s7, floats to a uniformly chosen adjacent cell, observes the number of walls of its cell
# (a = 1, b = 2, c = 3) and stops at s10, which emits the terminator #.
CHEESE_NEIGHBOURS = {0: [1, 5], 1: [0, 2], 2: [1, 3, 6], 3: [2, 4], 4: [3, 7], 5: [0, 8], 6: [2, 10], 7: [4, 9]}
CHEESE_NEIGHBOURS.update({8: [5], 9: [7]})
CHEESE_OBS = np.array([B, B, A, B, B, B, B, B, C, C, END])


def cheese_text(n_trajectories: int, seed: int) -> np.ndarray:
    """Concatenated Cheese-maze trajectories, simulated all at once (each ends with the terminator)."""
    rng = np.random.default_rng(seed)
    neighbours = np.full((11, 3), -1)
    degree = np.zeros(11, dtype=np.int64)
    for cell, adjacent in CHEESE_NEIGHBOURS.items():
        neighbours[cell, : len(adjacent)] = adjacent
        degree[cell] = len(adjacent)
    cell = rng.choice([5, 7], size=n_trajectories)
    active = np.arange(n_trajectories)
    steps = []
    while active.size:
        steps.append((active, CHEESE_OBS[cell[active]]))
        active = active[cell[active] != 10]
        here = cell[active]
        cell[active] = neighbours[here, (rng.random(active.size) * degree[here]).astype(np.int64)]
    lengths = np.zeros(n_trajectories, dtype=np.int64)
    for who, _ in steps:
        lengths[who] += 1
    fill = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    out = np.empty(int(lengths.sum()), dtype=np.int64)
    for who, obs in steps:
        out[fill[who]] = obs
        fill[who] += 1
    return out


def cheese_belief_pdfa() -> tuple[list[dict[int, float]], np.ndarray, dict[tuple[int, int], int]]:
    """The generator's PDFA: belief states over cells before each observation (the paper's N0..N5), their
    next-symbol distributions and transitions, found by breadth-first search from the start belief."""
    beliefs: list[dict[int, float]] = [{5: 0.5, 7: 0.5}]
    emissions: list[np.ndarray] = []
    trans: dict[tuple[int, int], int] = {}
    key_of = {tuple(sorted(beliefs[0].items())): 0}
    i = 0
    while i < len(beliefs):
        belief = beliefs[i]
        emission = np.zeros(4)
        for cell, p in belief.items():
            emission[CHEESE_OBS[cell]] += p
        emissions.append(emission)
        for obs in (A, B, C):
            if emission[obs] == 0:
                continue
            nxt: dict[int, float] = {}
            for cell, p in belief.items():
                if CHEESE_OBS[cell] == obs:
                    for adjacent in CHEESE_NEIGHBOURS[cell]:
                        nxt[adjacent] = nxt.get(adjacent, 0.0) + p / emission[obs] / len(CHEESE_NEIGHBOURS[cell])
            key = tuple(sorted((c, round(p, 12)) for c, p in nxt.items()))
            if key not in key_of:
                key_of[key] = len(beliefs)
                beliefs.append(nxt)
            trans[(i, obs)] = key_of[key]
        i += 1
    return beliefs, np.array(emissions), trans


# --------------------------------------------------------------------------- (a) three words


def test_three_word_generator_is_learned_with_the_papers_parameters() -> None:
    text = three_word_text(160_000, seed=1)
    model = PdfaLearner(delta=0.05, n_max_states=8, mu=0.1, min_multiset=None, separator=2).fit(text, 3)
    assert model.threshold_ == pytest.approx(largeness_threshold(0.1, 0.05, 8, 3))
    assert 48_000 < model.threshold_ < 50_000  # eq. (2): about 49,000 suffixes per decided candidate
    probs = [model.string_probability(np.array(w)) for w in THREE_WORDS]
    for p in probs:
        assert abs(p - 1 / 3) < 0.02
    assert 1.0 - sum(probs) < 0.02
    # the minimal generator has six states: s0, a, b, ab, aa = bb, and the word ends aaa = abb = bba
    assert model.n_states == 6

    def state(word: list[int]) -> int:
        s = 0
        for sym in word:
            s = int(model.transitions_[s, sym])
        return s

    reached = {w: state(list(w)) for w in [(), (A,), (B,), (A, B), (A, A), (A, B, B)]}
    assert len(set(reached.values())) == 6
    assert state([B, B]) == reached[(A, A)]
    assert state([A, A, A]) == state([B, B, A]) == reached[(A, B, B)]


def test_too_little_data_for_the_largeness_threshold_keeps_only_the_initial_state() -> None:
    model = PdfaLearner(delta=0.05, n_max_states=8, mu=0.1, min_multiset=None, separator=2)
    model.fit(three_word_text(2_000, seed=2), 3)
    assert model.n_states == 1
    assert model.learning_stats_["promotions"] == 0
    assert 1.0 - sum(model.string_probability(np.array(w)) for w in THREE_WORDS) > 0.5


def test_state_bound_n_is_respected() -> None:
    text = three_word_text(3_000, seed=3)
    model = PdfaLearner(mu=0.1, n_max_states=3, min_multiset=50, separator=2).fit(text, 3)
    assert model.n_states == 3
    assert model.learning_stats_["blocked_candidates"] > 0
    assert np.allclose(model.probabilities_.sum(axis=1), 1.0)
    assert np.all(model.predictive(text[:200]) > 0)


# --------------------------------------------------------------------------- (b) Cheese maze


def test_cheese_maze_belief_states_match_the_paper() -> None:
    beliefs, emissions, _ = cheese_belief_pdfa()
    assert len(beliefs) == 6  # N0..N5; the paper's N6 (end of trajectory) is the implicit restart
    assert beliefs[3] == pytest.approx({8: 0.125, 9: 0.125, 0: 0.25, 4: 0.25, 2: 0.25})
    assert emissions[5] == pytest.approx([0.5, 1 / 3, 0.0, 1 / 6])


def test_cheese_maze_structure_is_recovered() -> None:
    text = cheese_text(30_000, seed=4)
    model = PdfaLearner(delta=0.05, n_max_states=8, mu=0.2, min_multiset=None, separator=END).fit(text, 4)
    _, emissions, gen_trans = cheese_belief_pdfa()
    assert model.n_states == emissions.shape[0] == 6
    # walk both automata along the same strings: a bijection of states with matching next-symbol distributions
    pairing = {0: 0}
    queue = [0]
    while queue:
        g = queue.pop()
        learned = pairing[g]
        assert np.max(np.abs(model.probabilities_[learned] - emissions[g])) < 0.05
        for obs in (A, B, C):
            if (g, obs) not in gen_trans:
                continue
            g_next, l_next = gen_trans[(g, obs)], int(model.transitions_[learned, obs])
            if g_next in pairing:
                assert pairing[g_next] == l_next
            else:
                pairing[g_next] = l_next
                queue.append(g_next)
    assert sorted(pairing.values()) == list(range(6))


# --------------------------------------------------------------------------- distances


def test_prefix_distance() -> None:
    # trajectories: ab# ab# ac# b#  (a=0, b=1, c=2, #=3)
    seq = np.array([0, 1, 3, 0, 1, 3, 0, 2, 3, 1, 3], dtype=np.int64)
    graph = GraphLearner(seq, 4, 3, mu=0.1, n_max=4, threshold=1)
    ab_ab, ab_ac = np.array([0, 3]), np.array([0, 6])
    assert graph.prefix_linf(ab_ab, ab_ab, 0.0) == 0.0
    assert graph.prefix_linf(ab_ab, ab_ac, 0.0) == pytest.approx(0.5)  # prefix "ab": 1 vs 1/2
    assert graph.prefix_linf(ab_ac, np.array([9]), 0.0) == pytest.approx(1.0)  # "a" vs "b"
    assert graph.prefix_linf(np.array([1]), np.array([9]), 0.0) == 0.0  # "b#" after a, and the word "b#"


def test_vectorised_leftover_mapping_finds_the_closest_state(blake) -> None:
    seq, starts = word_trajectories(blake.train, 0)
    graph = GraphLearner(seq, blake.n_symbols, 0, mu=0.05, n_max=3000, threshold=5)
    graph.learn(starts)
    mapping = graph.map_leftovers()
    assert len(mapping) == len(graph.candidates) > 50
    for key, target in list(mapping.items())[:60]:
        positions = graph.candidates[key].positions()
        _, best = graph.closest_safe(positions)
        chosen = graph.prefix_linf(positions, graph.safe[target].positions(), 0.0)
        assert chosen == pytest.approx(best, abs=1e-12)


# --------------------------------------------------------------------------- (c) text


@pytest.fixture(scope="module")
def blake():
    return prepare_corpus(read_text(DATA / "blake-poems.txt"))


@pytest.fixture(scope="module")
def blake_model(blake):
    return PdfaLearner().fit(blake.train, blake.n_symbols, blake.validation)


def test_blake_bps_is_finite_and_beats_the_uniform_code(blake_model, blake) -> None:
    bps = bits_per_symbol(blake_model, blake.test)
    # Recorded with the defaults: about 480 states, test BPS 1.58 (uniform: log2(27) = 4.75).
    assert np.isfinite(bps) and bps < np.log2(27)
    assert blake_model.separator_ == 0  # the space
    assert blake_model.n_parameters == blake_model.n_states * blake.n_symbols
    assert blake_model.smoothing_ in (0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0)
    assert np.allclose(blake_model.probabilities_.sum(axis=1), 1.0)
    assert np.all(blake_model.probabilities_ > 0)


def test_predictive_restarts_after_the_separator(blake_model, blake) -> None:
    text = blake.test[:300]
    cut = int(np.flatnonzero(text == 0)[3]) + 1
    whole = blake_model.predictive(text)
    assert np.array_equal(whole[cut:], blake_model.predictive(text[cut:]))
    first = blake_model.predictive(text[:1])[0]
    assert first == pytest.approx(blake_model.probabilities_[0, text[0]])


def test_unseen_symbols_get_positive_probability() -> None:
    text = three_word_text(500, seed=5)
    model = PdfaLearner(separator=2).fit(text, 5)  # symbols 3 and 4 never occur
    p = model.predictive(np.array([3, 0, 4, 1, 2, 4, 4], dtype=np.int64))
    assert np.all(p > 0) and np.all(np.isfinite(p))


# --------------------------------------------------------------------------- (d) files


def test_save_load_round_trip(blake_model, blake, tmp_path: Path) -> None:
    path = tmp_path / "pdfa.npz"
    blake_model.save(path, metadata={"corpus": "blake"})
    loaded = PdfaLearner.load(path)
    assert loaded.kind == "pdfa"
    assert loaded.n_states == blake_model.n_states
    assert loaded.n_parameters == blake_model.n_parameters
    assert loaded.smoothing_ == blake_model.smoothing_
    assert loaded.separator_ == blake_model.separator_
    assert np.array_equal(loaded.transitions_, blake_model.transitions_)
    assert np.array_equal(loaded.predictive(blake.test), blake_model.predictive(blake.test))
    assert loaded.learning_stats_ == blake_model.learning_stats_


def test_load_rejects_other_files(tmp_path: Path) -> None:
    other = tmp_path / "ngram.npz"
    save_arrays(other, "ngram", {"x": np.zeros(2)}, {})
    with pytest.raises(PeerFormatError):
        PdfaLearner.load(other)
    with pytest.raises(PeerFormatError):
        PdfaLearner.load(tmp_path / "missing.npz")
    broken = tmp_path / "broken.npz"
    arrays = {"transitions": np.array([[0, 5]]), "counts": np.ones((1, 2), dtype=np.int64), "unigram": np.ones(2) / 2}
    save_arrays(broken, "pdfa", arrays, {"n_symbols": 2, "separator": 1, "smoothing": 1.0, "params": {}})
    with pytest.raises(PeerFormatError):
        PdfaLearner.load(broken)


# --------------------------------------------------------------------------- (e) bad input


def test_bad_input_is_rejected() -> None:
    good = three_word_text(20, seed=6)
    with pytest.raises(ValueError, match="empty"):
        PdfaLearner().fit(np.zeros(0, dtype=np.int64), 3)
    with pytest.raises(ValueError, match="outside"):
        PdfaLearner().fit(np.array([0, 1, 3]), 3)
    with pytest.raises(ValueError, match="outside"):
        PdfaLearner().fit(np.array([0, -1, 2]), 3)
    with pytest.raises(ValueError, match="outside"):
        PdfaLearner().fit(good, 3, validation=np.array([7]))
    with pytest.raises(ValueError, match="separator"):
        PdfaLearner(separator=3).fit(good, 3)
    with pytest.raises(ValueError, match="1-D"):
        PdfaLearner().fit(good.reshape(2, -1), 3)
    for kwargs in (
        {"mu": 0.0},
        {"mu": 1.5},
        {"delta": 0.0},
        {"delta": 1.0},
        {"n_max_states": 0},
        {"n_max_states": 2.5},
        {"min_multiset": 0},
        {"separator": -1},
        {"smoothing": 0.0},
        {"smoothing": -1.0},
        {"smoothing": float("inf")},
    ):
        with pytest.raises(ValueError):
            PdfaLearner(**kwargs)
    with pytest.raises(ValueError):
        PdfaLearner().fit(good, 0)
    with pytest.raises(RuntimeError):
        PdfaLearner().predictive(good)
    model = PdfaLearner(separator=2).fit(good, 3)
    with pytest.raises(ValueError, match="outside"):
        model.predictive(np.array([0, 3]))
    with pytest.raises(ValueError, match="separator"):
        model.string_probability(np.array([0, 2]))
    assert model.predictive(np.zeros(0, dtype=np.int64)).size == 0
