"""Synthetic data sets of the CHMM paper (Dedieu et al. 2019, section 4.1): toy FSM with holes, brackets.

Each data set comes with a sampler, its exact entropy rate (the best BPS any model can reach on a long
sequence) and, where it is practical, the generating process written as a CHMM (``*_true_model``), so that
learned models can be compared against the truth.

Toy FSM with k holes (paper, sections 2 and 4.1.1)
--------------------------------------------------
Alphabet ``0 .. 4k+1``: signal symbols 0, 1, 2, 3 and noise symbols ``4 .. 4k+1``. The sequence is a
concatenation of independent blocks of length ``3k``::

    o, c_1, 4+2, 4+3, c_2, 8+2, 8+3, ..., c_{k-1}, 4(k-1)+2, 4(k-1)+3, c_k, close(o)

* ``o`` (the opening signal) is 0 or 2 with probability 1/2 each;
* the ``3k - 2`` noise symbols come from the paper's loop: for n = 1 .. k-1, ``c_n`` is ``4n`` or ``4n+1``
  with probability 1/2 each, followed deterministically by ``4n+2`` and ``4n+3``; the loop ends with
  ``c_k``, which is ``4k`` or ``4k+1`` with probability 1/2 each;
* the block closes with the signal paired with ``o``: 0 -> 1 and 2 -> 3 (``TOY_FSM_SIGNAL_PAIRS``).

The pairing follows section 2 ("observing a 0 guarantees a 1 appearing eight time-steps later. Similarly, a 2
will predict a 3", for k = 3) and the first sentence of 4.1.1 ("node 0 deterministically led to node 1 ...
Node 2 deterministically led to node 3"). One later sentence of 4.1.1 reads as if 0 -> 2 and 1 -> 3; the
pairing changes neither the entropy rate nor the clone counts, only the labels.

For k = 3 this is the 24-node FSM of Fig. 1(e): 4 signal nodes plus 2 copies (one per opening signal) of each
of the 10 noise symbols. Hence 1 clone per signal symbol and 2 per noise symbol: ``8k`` clones in all.

Bracket language (paper, section 4.1.2)
---------------------------------------
Alphabet ``BRACKET_SYMBOLS = ["|", "(", ")", "[", "]"]``. Sentences of correctly nested brackets of depth at
most k, each ended by ``|``. The paper does not spell the probabilities out; it says (4.1.3) that its setting
has equal probabilities for "(" and "[" when starting a sentence, and equal probabilities for "(", "[" and
"close" once a bracket is open. The process used here ("variant A") is:

* at the start of a sentence (just after ``|``): "(" or "[", probability 1/2 each (no empty sentences);
* at depth d with 1 <= d < k: "(", "[" or close the innermost bracket, probability 1/3 each;
* at depth k: close the innermost bracket (probability 1);
* back at depth 0 inside a sentence: "(", "[" or end the sentence with "|", probability 1/3 each.

Its entropy rate is 1.0537 bits/symbol for k = 2, 1.1291 for k = 3 and 1.1605 for k = 4, against the paper's
optimal BPS 1.053, 1.130 and 1.161 (Table 2; its third row, with 15 clones, matches k = 4). Two other natural
variants miss: allowing empty sentences (``|`` also right after ``|``) gives 1.097 / 1.148, and one top-level
bracket group per sentence (``|`` forced on returning to depth 0) gives 0.822 / 1.018. The generated sequence
starts with ``|`` (a sentence boundary), like the paper's example.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from engine.errors import CHMMError
from engine.model.blocks import BlockLayout, dense_to_blocks
from engine.model.dense import CHMM

__all__ = [
    "BRACKET_SYMBOLS",
    "TOY_FSM_PAPER_EXTRA_CLONES",
    "TOY_FSM_SIGNAL_PAIRS",
    "TOY_FSM_TRAINING_SIZES",
    "TABLE3_BRACKET_TEST",
    "TABLE3_BRACKET_TRAIN",
    "bracket_alpha_bits",
    "bracket_alpha_sequence",
    "bracket_optimal_bps",
    "bracket_sequence",
    "bracket_true_model",
    "toy_fsm_block",
    "toy_fsm_clones",
    "toy_fsm_n_symbols",
    "toy_fsm_optimal_bps",
    "toy_fsm_sequence",
    "toy_fsm_true_model",
    "toy_alpha_optimal_bps",
    "toy_alpha_sequence",
]

# Training set sizes of the toy FSM experiments, per k (paper, Table 1).
TOY_FSM_TRAINING_SIZES: dict[int, int] = {2: 11250, 3: 33750, 4: 90000, 5: 225000}

# Extra clones per noise symbol the paper allocates for training, per k (section 4.1.1: "an extra clone to
# each noise element for k = 4, and an additional one for k = 5"); pass as ``toy_fsm_clones(k, extra)``.
TOY_FSM_PAPER_EXTRA_CLONES: dict[int, int] = {2: 0, 3: 0, 4: 1, 5: 2}

# Opening signal -> the closing signal it forces 3k - 1 steps later.
TOY_FSM_SIGNAL_PAIRS: dict[int, int] = {0: 1, 2: 3}

BRACKET_SYMBOLS: list[str] = ["|", "(", ")", "[", "]"]

# Largest nesting depth bracket_true_model accepts (the model has 4 * 2**k - 3 clones).
BRACKET_MAX_MODEL_DEPTH = 8


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise CHMMError(f"k must be a positive integer, got {k!r}")
    return int(k)


def _check_length(length: int) -> int:
    if isinstance(length, bool) or not isinstance(length, int | np.integer) or length < 0:
        raise CHMMError(f"length must be a non-negative integer, got {length!r}")
    return int(length)


def _model_from_dense(
    symbols: list[str], n_clones: np.ndarray, dense: np.ndarray, pi: np.ndarray, metadata: dict
) -> CHMM:
    """A CHMM storing exactly the symbol-pair blocks of ``dense`` that hold a non-zero entry."""
    n_clones = np.asarray(n_clones, dtype=np.int64)
    clone_symbol = np.repeat(np.arange(n_clones.size), n_clones)
    rows, cols = np.nonzero(dense)
    pairs = np.unique(np.stack([clone_symbol[rows], clone_symbol[cols]], axis=1), axis=0)
    layout = BlockLayout.build(n_clones, pairs)
    return CHMM(list(symbols), layout, dense_to_blocks(layout, dense), pi, None, metadata)


# =============================================================================================== toy FSM
def toy_fsm_n_symbols(k: int) -> int:
    """Alphabet size of the toy FSM with k holes: signals 0 .. 3 plus noise symbols 4 .. 4k+1, i.e. 4k + 2."""
    return 4 * _check_k(k) + 2


def toy_fsm_block(k: int) -> int:
    """Length of one toy FSM block: opening signal, 3k - 2 noise symbols, closing signal (3k)."""
    return 3 * _check_k(k)


def toy_fsm_sequence(k: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """Sample ``length`` symbols (int64) of the toy FSM with k holes, starting at a block boundary.

    Blocks of length 3k are independent (see the module docstring); the last block is cut short when
    ``length`` is not a multiple of 3k.
    """
    k = _check_k(k)
    length = _check_length(length)
    block = 3 * k
    n_blocks = -(-length // block)
    opening = 2 * rng.integers(0, 2, size=n_blocks)  # 0 or 2
    coins = rng.integers(0, 2, size=(n_blocks, k))  # c_n = 4n + coin
    x = np.empty((n_blocks, block), dtype=np.int64)
    x[:, 0] = opening
    for n in range(1, k):
        col = 3 * (n - 1) + 1
        x[:, col] = 4 * n + coins[:, n - 1]
        x[:, col + 1] = 4 * n + 2
        x[:, col + 2] = 4 * n + 3
    x[:, block - 2] = 4 * k + coins[:, k - 1]
    x[:, block - 1] = opening + 1  # TOY_FSM_SIGNAL_PAIRS: 0 -> 1, 2 -> 3
    return x.reshape(-1)[:length].copy()


def toy_fsm_optimal_bps(k: int) -> float:
    """Entropy rate of the toy FSM with k holes in bits per symbol: (k + 1) / (3k).

    Derivation: blocks of 3k symbols are independent and identically distributed, and inside a block every
    symbol is a deterministic function of k + 1 fair coins (the opening signal 0/2 and the noise choices
    4n/4n+1 for n = 1 .. k); the other 2k - 1 symbols, closing signal included, are forced. A block thus
    carries exactly k + 1 bits, so -log2 P(x) / N -> (k + 1) / (3k): 0.500, 0.444, 0.417, 0.400 for
    k = 2, 3, 4, 5 (paper, Table 1, "optimal BPS").
    """
    k = _check_k(k)
    return (k + 1) / (3 * k)


def toy_fsm_clones(k: int, extra: int = 0) -> np.ndarray:
    """The paper's training clone allocation for the toy FSM: 1 per signal, 2 + ``extra`` per noise symbol.

    With ``extra = 0`` this is the minimal allocation that can represent the process (``8k`` clones). The
    paper (section 4.1.1) adds one clone per noise symbol for k = 4 and two for k = 5
    (``TOY_FSM_PAPER_EXTRA_CLONES``), which gives its overcomplete HMM sizes "8k for k <= 3, 46 for k = 4 and
    76 for k = 5" and its "Max clones" column 2, 2, 3, 4 of Table 1.
    """
    k = _check_k(k)
    if isinstance(extra, bool) or not isinstance(extra, int | np.integer) or extra < 0:
        raise CHMMError(f"extra must be a non-negative integer, got {extra!r}")
    n_clones = np.full(toy_fsm_n_symbols(k), 2 + int(extra), dtype=np.int64)
    n_clones[:4] = 1
    return n_clones


def toy_fsm_true_model(k: int) -> CHMM:
    """The toy FSM with k holes as a CHMM (float64): 1 clone per signal, 2 per noise symbol (8k in all).

    Clone 0 of a noise symbol is used in blocks opened by 0, clone 1 in blocks opened by 2. ``pi`` puts 1/2 on
    each opening signal (sequences start at a block boundary). The model is unifilar (the current clone and
    the next symbol determine the next clone), so its forward pass reaches ``toy_fsm_optimal_bps(k)``.
    """
    k = _check_k(k)
    n_symbols = toy_fsm_n_symbols(k)
    n_clones = toy_fsm_clones(k)
    clone_start = np.concatenate([[0], np.cumsum(n_clones)])
    n_states = int(clone_start[-1])

    def state(symbol: int, branch: int) -> int:
        return int(clone_start[symbol]) + (branch if symbol >= 4 else 0)

    dense = np.zeros((n_states, n_states), dtype=np.float64)
    for branch, (opening, closing) in enumerate(TOY_FSM_SIGNAL_PAIRS.items()):
        # sources: the states from which the next coin c_n is drawn (the opening signal, then 4n+3 for n >= 1)
        sources = [state(opening, branch)]
        for n in range(1, k):
            for coin in (0, 1):
                dense[sources[-1], state(4 * n + coin, branch)] = 0.5
                dense[state(4 * n + coin, branch), state(4 * n + 2, branch)] = 1.0
            dense[state(4 * n + 2, branch), state(4 * n + 3, branch)] = 1.0
            sources.append(state(4 * n + 3, branch))
        for coin in (0, 1):
            dense[sources[-1], state(4 * k + coin, branch)] = 0.5
            dense[state(4 * k + coin, branch), state(closing, branch)] = 1.0
        for next_opening in TOY_FSM_SIGNAL_PAIRS:
            dense[state(closing, branch), state(next_opening, 0)] = 0.5
    pi = np.zeros(n_states, dtype=np.float64)
    for opening in TOY_FSM_SIGNAL_PAIRS:
        pi[state(opening, 0)] = 0.5
    symbols = [str(s) for s in range(n_symbols)]
    metadata = {"source": "synthetic", "process": "toy_fsm", "k": k}
    return _model_from_dense(symbols, n_clones, dense, pi, metadata)


# =============================================================================================== brackets
_BAR, _OPEN_PAREN, _CLOSE_PAREN, _OPEN_SQUARE, _CLOSE_SQUARE = range(5)
_OPEN = (_OPEN_PAREN, _OPEN_SQUARE)  # bracket type t opens with _OPEN[t] ...
_CLOSE = (_CLOSE_PAREN, _CLOSE_SQUARE)  # ... and closes with _CLOSE[t]


def bracket_sequence(k: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """Sample ``length`` symbols (indices into ``BRACKET_SYMBOLS``, int64) of the bracket process, depth <= k.

    The sequence starts with ``|`` and follows the process of the module docstring ("variant A"); the last
    sentence is cut short when ``length`` ends inside it.
    """
    k = _check_k(k)
    length = _check_length(length)
    draws = rng.random(length)
    bracket_type = rng.integers(0, 2, size=length)

    def choose(n: int, depth: int, sentence_start: bool) -> tuple[str, int]:
        if sentence_start or (depth < k and draws[n] < 2.0 / 3.0):
            return "open", int(bracket_type[n])
        return ("close" if depth > 0 else "end"), 0

    return _bracket_walk(length, choose)


def _bracket_walk(length: int, choose: Callable[[int, int, bool], tuple[str, int]]) -> np.ndarray:
    """A bracket sequence of ``length`` symbols starting with ``|``: ``choose(n, depth, sentence_start)`` gives
    position n's action ("open" with its bracket type, "close" the innermost bracket, or "end" the sentence)."""
    x = np.empty(length, dtype=np.int64)
    if length == 0:
        return x
    stack: list[int] = []
    x[0] = _BAR
    sentence_start = True
    for n in range(1, length):
        action, t = choose(n, len(stack), sentence_start)
        if action == "open":
            stack.append(t)
            x[n] = _OPEN[t]
        elif action == "close":
            x[n] = _CLOSE[stack.pop()]
        else:
            x[n] = _BAR
        sentence_start = action == "end"
    return x


def bracket_optimal_bps(k: int) -> float:
    """Entropy rate (bits/symbol) of the bracket process of depth <= k.

    It is (1 + (9 * 2**(k-1) - 6) log2 3) / (6 * 2**k - 5).

    The choice made at each step depends only on the depth d and on whether a sentence is just starting, and
    each choice emits a different symbol, so the entropy rate is sum_s mu(s) H(s) over the stationary
    distribution mu of the Markov chain on the states S (sentence start), Z (depth 0 inside a sentence) and
    D_1 .. D_k (depth d). With H(S) = 1 bit, H(Z) = H(D_d) = log2 3 for d < k and H(D_k) = 0, and the
    transitions S -> D_1; Z -> D_1 (2/3), S (1/3); D_d -> D_{d+1} (2/3, d < k), D_{d-1} or Z (1/3);
    D_k -> D_{k-1} or Z (1), detailed balance gives, with mu(D_1) = x: mu(D_d) = 2**(d-1) x for d < k,
    mu(D_k) = 2**(k-1) x / 3, mu(Z) = x / 3, mu(S) = x / 9 (for k = 1, mu(D_1) = x as D_1 always
    closes: the same formula holds). Normalising, x = 9 / (6 * 2**k - 5), and
    sum_s mu(s) H(s) = x (1/9 + (2**(k-1) - 2/3) log2 3), which is the formula above:
    1.0537 (k = 2), 1.1291 (k = 3), 1.1605 (k = 4).
    """
    k = _check_k(k)
    return (1.0 + (9 * 2 ** (k - 1) - 6) * math.log2(3.0)) / (6 * 2**k - 5)


def _stacks(max_depth: int) -> list[tuple[int, ...]]:
    """All stacks (tuples of bracket types, bottom first) of depth 0 .. max_depth, by depth then content."""
    out: list[tuple[int, ...]] = [()]
    layer: list[tuple[int, ...]] = [()]
    for _ in range(max_depth):
        layer = [s + (t,) for s in layer for t in (0, 1)]
        out.extend(layer)
    return out


def bracket_true_model(k: int) -> CHMM:
    """The bracket process of depth <= k as a CHMM (float64); one clone per (emitted symbol, stack after it).

    Clones: ``|`` has 1 (empty stack, sentence start); "(" has one per stack of depth 1 .. k whose top is "("
    (2**k - 1 clones), "[" likewise; ")" and "]" have one per stack of depth 0 .. k - 1 left after the close
    (2**k - 1 each). That is 4 * 2**k - 3 clones: 13 for k = 2 and 29 for k = 3, with at most 3 and 7 clones
    per symbol, the paper's "optimal clones" of Table 2. ``pi`` puts all mass on the ``|`` clone (sequences
    start with ``|``). The model is unifilar, so its forward pass reaches ``bracket_optimal_bps(k)``.
    """
    k = _check_k(k)
    if k > BRACKET_MAX_MODEL_DEPTH:
        raise CHMMError(f"bracket_true_model supports k <= {BRACKET_MAX_MODEL_DEPTH}, got {k}")
    stacks = _stacks(k)
    clones: list[list[tuple[int, ...]]] = [[] for _ in BRACKET_SYMBOLS]
    clones[_BAR] = [()]
    for t in (0, 1):
        clones[_OPEN[t]] = [s for s in stacks if s and s[-1] == t]
        clones[_CLOSE[t]] = [s for s in stacks if len(s) < k]
    n_clones = np.array([len(c) for c in clones], dtype=np.int64)
    clone_start = np.concatenate([[0], np.cumsum(n_clones)])
    index = {
        (symbol, stack): int(clone_start[symbol]) + u for symbol in range(5) for u, stack in enumerate(clones[symbol])
    }
    n_states = int(clone_start[-1])
    dense = np.zeros((n_states, n_states), dtype=np.float64)
    for (symbol, stack), row in index.items():
        depth = len(stack)
        moves: list[tuple[int, tuple[int, ...]]] = []  # (next symbol, stack after it), equally likely
        if symbol == _BAR:
            moves = [(_OPEN[t], (t,)) for t in (0, 1)]
        elif depth == k:
            moves = [(_CLOSE[stack[-1]], stack[:-1])]
        else:
            moves = [(_OPEN[t], stack + (t,)) for t in (0, 1)]
            moves.append((_CLOSE[stack[-1]], stack[:-1]) if depth > 0 else (_BAR, ()))
        for move in moves:
            dense[row, index[move]] = 1.0 / len(moves)
    pi = np.zeros(n_states, dtype=np.float64)
    pi[index[(_BAR, ())]] = 1.0
    metadata = {"source": "synthetic", "process": "brackets", "k": k}
    return _model_from_dense(list(BRACKET_SYMBOLS), n_clones, dense, pi, metadata)


# =============================================================================================== Table 3's variants
TABLE3_BRACKET_TRAIN = {"start": (15 / 19, 4 / 19), "nested": (15 / 24, 4 / 24, 5 / 24)}
"""The bracket process of the paper's Table 3 for training (section 4.1.3): a sentence starts with "(" or "[" with
probabilities alpha^0, and inside one bracket "(" / "[" / close with probabilities alpha^1."""
TABLE3_BRACKET_TEST = {"start": (4 / 19, 15 / 19), "nested": (4 / 24, 15 / 24, 5 / 24)}
"""The same for the test text (and the validation text the LSTM stops on): the two bracket types swapped."""


def toy_alpha_sequence(
    blocks: int, rng: np.random.Generator, alphas: tuple[float, float] = (0.9, 0.1), up_share: float = 0.95, k: int = 2
) -> np.ndarray:
    """``blocks`` blocks of the toy FSM whose noise has a stochastic length (the paper's Table 3, Fig. 3(a), k = 2):
    after the noise's last deterministic pair the chain goes back to the noise's first symbol with probability
    alpha, so the noise is (c_1, 4+2, 4+3, ..., c_{k-1}, 4(k-1)+2, 4(k-1)+3) repeated m >= 1 times, m geometric
    (P(m) = alpha^(m-1) (1 - alpha)), then c_k and the closing signal; alpha = 0 is the toy FSM of Table 1. Each
    block draws its alpha: ``alphas[0]`` with probability ``up_share``, else ``alphas[1]``."""
    k = _check_k(k)
    if k < 2:
        raise CHMMError("the toy FSM with a looping noise needs k >= 2 (a deterministic pair to loop over)")
    out: list[int] = []
    for _ in range(int(blocks)):
        alpha = alphas[0] if rng.random() < up_share else alphas[1]
        opening = 2 * int(rng.integers(0, 2))
        out.append(opening)
        while True:
            for n in range(1, k):
                out.extend((4 * n + int(rng.integers(0, 2)), 4 * n + 2, 4 * n + 3))
            if rng.random() >= alpha:
                break
        out.extend((4 * k + int(rng.integers(0, 2)), opening + 1))
    return np.asarray(out, dtype=np.int64)


def toy_alpha_optimal_bps(alphas: tuple[float, float] = (0.9, 0.1), up_share: float = 0.95, k: int = 2) -> float:
    """The entropy rate of :func:`toy_alpha_sequence`'s process (bits per symbol): per block, 1 bit for the opening
    signal, 1 for each c_n drawn, and the entropy of the number m of noise loops (a mixture of two geometric laws),
    over the expected block length 2 + 3 (k - 1) E[m] + 1."""
    k = _check_k(k)
    m = np.arange(1, 20_000, dtype=np.float64)
    law = up_share * alphas[0] ** (m - 1) * (1 - alphas[0]) + (1 - up_share) * alphas[1] ** (m - 1) * (1 - alphas[1])
    law = law[law > 0]
    mean = float(np.sum(np.arange(1, law.size + 1) * law))
    bits = 1.0 + (k - 1) * mean + 1.0 + float(-np.sum(law * np.log2(law)))
    return bits / (3.0 + 3.0 * (k - 1) * mean)


def bracket_alpha_sequence(
    length: int, rng: np.random.Generator, start: tuple[float, float], nested: tuple[float, float, float], k: int = 2
) -> np.ndarray:
    """``length`` symbols of the bracket process of the paper's Table 3 (indices into ``BRACKET_SYMBOLS``): a
    sentence opens "(" or "[" with probabilities ``start``; inside brackets below depth k, "(", "[" or closing the
    innermost bracket with probabilities ``nested``; at depth k the bracket closes. Back at depth 0 inside a
    sentence (which the paper leaves open) the sentence ends with probability 1/3, as in :func:`bracket_sequence`,
    and else opens "(" or "[" in the proportions of ``start``."""
    k = _check_k(k)
    length = _check_length(length)
    draws = rng.random(length)

    def choose(n: int, depth: int, sentence_start: bool) -> tuple[str, int]:
        u = draws[n]
        if depth == k:
            return "close", 0
        if depth > 0:
            return ("open", int(u >= nested[0])) if u < nested[0] + nested[1] else ("close", 0)
        if sentence_start:
            return "open", int(u >= start[0])
        return ("end", 0) if u < 1.0 / 3.0 else ("open", int((u - 1.0 / 3.0) * 1.5 >= start[0]))

    return _bracket_walk(length, choose)


def bracket_alpha_bits(
    x: np.ndarray, start: tuple[float, float], nested: tuple[float, float, float], k: int = 2
) -> float:
    """Bits per symbol of ``x`` (after its first ``|``) under the process of :func:`bracket_alpha_sequence` with
    ``start`` and ``nested``: exact, since the process's state (the open brackets and whether a sentence just ended)
    is read off the symbols. Under the training process it is the least any model of the training text can expect
    on text of another process."""
    k = _check_k(k)
    bits, stack, sentence_start = 0.0, 0, True
    for symbol in np.asarray(x)[1:]:
        if stack == k:
            p = 1.0
        elif stack > 0:
            p = nested[0] if symbol == _OPEN_PAREN else nested[1] if symbol == _OPEN_SQUARE else nested[2]
        elif sentence_start:
            p = start[0] if symbol == _OPEN_PAREN else start[1]
        else:
            p = 1.0 / 3.0 if symbol == _BAR else 2.0 / 3.0 * (start[0] if symbol == _OPEN_PAREN else start[1])
        bits -= math.log2(p)
        stack += 1 if symbol in _OPEN else -1 if symbol in _CLOSE else 0
        sentence_start = symbol == _BAR
    return bits / max(len(x) - 1, 1)
