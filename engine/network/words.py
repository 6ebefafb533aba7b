"""Generalized words: the whole words a community of the clone graph generates (:func:`generalized_words`; paper,
section 4.2.1: "a community subgraph of a character-level CHMM can be thought of as a generalized word", whose Milton
module generates "battle" and the novel "rattle").

A walk starts at a word start in the module -- a letter clone entered from a space clone, with probability
proportional to that edge flow, where such starts carry at least :data:`WORD_START_SHARE` of the flow entering the
module --, follows T through the module's clones and ends when it reaches a space clone
(anywhere: the space ends the word and is not part of it); a walk that leaves the module before a space generates
no word of this module. A word's probability is the sum over the walks that spell it (so the probabilities sum to
at most 1). A module that completes no word this way (it holds no word start, or its words all leave it before their
end: the middle or the end of words) generates fragments instead, labelled so: walks from where flow enters it to
where it leaves it or reaches a space clone. A beam search over (clone, string) states -- walks that reach the same
clone with the same string merge exactly -- keeps the ``beam`` most probable states per step, up to ``max_length``
characters, a loop walked once (no symbol three times running), and the ``k`` most probable strings of two symbols
or more and of probability at least :data:`MIN_WORD_PROBABILITY` are returned.
Against a reference (the whole raw training text, normalised as the model's corpus was but with every word kept,
:func:`engine.api.reference_text`) a word is seen when it is a word of the text and novel otherwise; a fragment is
seen when it occurs anywhere in the text. The
placeholder ``rare`` (the paper's normalisation) is marked as such.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.corpora.text import RARE_WORD
from engine.network.graph import CloneGraph

MIN_WORD_PROBABILITY = 1e-3
"""Generalized words less probable than this are left out: after pruning, a clone in the middle of a word may
keep a transition of about the threshold into a space clone, which spells a stray prefix ("whic") with a
probability of 1e-4 or less."""
WORD_START_SHARE = 0.05
"""A module generates whole words only where word starts (a space clone leading into one of its letter clones)
carry at least this share of the flow entering it; below it (a suffix module: "ful", "ived" had under 1.5%) its
walks start where flow enters it, and give fragments."""
WORD, FRAGMENT, PLACEHOLDER = "word", "fragment", "placeholder"
"""The kinds of generalized word: a whole word (between word boundaries), a fragment (from a module that holds
no word start) or the rare-word placeholder."""


@dataclass
class GeneralizedWord:
    """A string a module generates, its probability given that a walk starts in the module (at a word start, or
    where flow enters it for a fragment), whether it is seen in the reference (None when no reference was given)
    and its ``kind`` (:data:`WORD`, :data:`FRAGMENT` or :data:`PLACEHOLDER`)."""

    text: str
    probability: float
    seen: bool | None = None
    kind: str = WORD

    def summary(self) -> dict[str, Any]:
        """The word as plain JSON-ready values (``dataclasses.asdict`` without its deep copy: 811 modules' words
        took 0.15 s of an Infomap run's job)."""
        return {"text": self.text, "probability": self.probability, "seen": self.seen, "kind": self.kind}


@dataclass(frozen=True)
class Reference:
    """A reference text for seen/novel: the text itself (fragments are looked up in it) and its words."""

    text: str
    vocabulary: frozenset[str]

    @classmethod
    def of(cls, reference: str | Iterable[str] | Reference | None) -> Reference | None:
        """A text (split on spaces into its vocabulary) or a collection of words (joined by spaces) as a
        Reference; None stays None."""
        if reference is None or isinstance(reference, Reference):
            return reference
        if isinstance(reference, str):
            return cls(reference, frozenset(w for w in reference.split(" ") if w))
        words = [str(w) for w in reference]
        return cls(" " + " ".join(words) + " ", frozenset(words))


def generalized_words(
    graph: CloneGraph,
    nodes: np.ndarray,
    k: int = 10,
    beam: int = 500,
    max_length: int = 16,
    reference: str | Iterable[str] | Reference | None = None,
    link_flow: np.ndarray | None = None,
) -> list[GeneralizedWord]:
    """The ``k`` most probable whole words the subgraph on ``nodes`` generates, from its word starts to a space
    clone, or its fragments when it completes no word (see the module docstring for the walks), by a beam
    search of width ``beam`` over (clone, string) states, strings of at most ``max_length`` symbols; marked
    seen/novel against ``reference`` (a text, its words, or a :class:`Reference`)."""
    nodes = np.asarray(nodes, dtype=np.int64)
    if len(nodes) == 0 or k <= 0:
        return []
    known = Reference.of(reference)
    inside = np.zeros(graph.n_states, dtype=bool)
    inside[nodes] = True
    flows = graph.edge_flow if link_flow is None else link_flow
    starts = graph.word_start_flow(flows)[nodes]  # one pass over the edges for every module of a run
    entering, _ = graph.incident_edges(nodes, inside)
    entering_flow = float(flows[entering].sum())
    found: list[tuple[str, float]] = []
    kind = WORD
    if starts.sum() > 0 and (entering_flow <= 0 or starts.sum() >= WORD_START_SHARE * entering_flow):
        found = _walks(graph, nodes, inside, starts / starts.sum(), k, beam, max_length, whole_words=True)
    if not found:
        kind = FRAGMENT
        targets = graph.weight.indices
        start = np.bincount(targets[entering], weights=flows[entering], minlength=graph.n_states)[nodes]
        if start.sum() <= 0:  # nothing enters (the module is all the graph, or a closed class): start by node flow
            start = graph.flow[nodes].astype(np.float64)
        if start.sum() <= 0:
            start = np.ones(len(nodes))
        found = _walks(graph, nodes, inside, start / start.sum(), k, beam, max_length, whole_words=False)
    placeholder = (
        graph.metadata.get("normalisation") == "paper" and graph.metadata.get("unit", "characters") == "characters"
    )
    words = []
    for word, probability in found:
        seen = None
        if known is not None:
            seen = word in known.vocabulary if kind == WORD else word in known.text
        marked = PLACEHOLDER if placeholder and kind == WORD and word == RARE_WORD else kind
        words.append(GeneralizedWord(word, float(probability), seen, marked))
    return words


def _walks(
    graph: CloneGraph,
    nodes: np.ndarray,
    inside: np.ndarray,
    start: np.ndarray,
    k: int,
    beam: int,
    max_length: int,
    whole_words: bool,
) -> list[tuple[str, float]]:
    """The ``k`` most probable strings of the walks from ``start`` (a distribution over ``nodes``) through the
    module: with ``whole_words`` a string is finished only by a step into a space clone (a step out of the module
    drops the walk); else also by leaving the module or a dead end (fragments), and a leading space is skipped."""
    is_space = graph.is_space()
    W = graph.weight
    chars = graph.clone_chars()
    gap = "" if graph.metadata.get("unit", "characters") == "characters" else " "  # words and tokens: phrases
    internal: dict[int, list[tuple[int, float]]] = {}
    stop: dict[int, float] = {}
    for node in nodes.tolist():
        lo, hi = W.indptr[node], W.indptr[node + 1]
        succ, prob = W.indices[lo:hi], W.data[lo:hi]
        if whole_words:
            spaces = is_space[succ]
            stop[node] = float(prob[spaces].sum())  # the word ends at a space clone, inside or out
            keep = inside[succ] & ~spaces
        else:
            keep = inside[succ]
            stop[node] = max(0.0, 1.0 - float(prob[keep].sum()))
        internal[node] = list(zip(succ[keep].tolist(), prob[keep].tolist(), strict=True))
    finished: dict[str, float] = defaultdict(float)
    states: dict[tuple[int, str], float] = {}
    for node, p in zip(nodes.tolist(), start.tolist(), strict=True):
        if p > 0:
            text = "" if is_space[node] else chars[node]
            states[(node, text)] = states.get((node, text), 0.0) + p
    for _ in range(max_length + 1):
        if not states:
            break
        following: dict[tuple[int, str], float] = defaultdict(float)
        for (node, text), p in states.items():
            if text:
                finished[text] += p * stop[node]
            for succ, t in internal[node]:
                if is_space[succ]:  # only without whole_words: a space inside the module
                    if text:
                        finished[text] += p * t
                    else:
                        following[(succ, "")] += p * t
                elif len(text) < max_length and not text.endswith(gap.join([chars[succ]] * 2)):
                    # a loop is walked once: no symbol three times running ("ellllllliot", "gooooood")
                    following[(succ, text + gap + chars[succ] if text else chars[succ])] += p * t
        if len(following) > beam:
            states = dict(sorted(following.items(), key=lambda item: -item[1])[:beam])
        else:
            states = dict(following)
    kept = [(text, p) for text, p in finished.items() if p >= MIN_WORD_PROBABILITY and len(text) > 1]  # no letters
    return sorted(kept, key=lambda item: (-item[1], item[0]))[:k]
