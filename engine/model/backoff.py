"""The back-off distribution Q(x_n | x_{n-1}) that scoring mixes with the CHMM's prediction,

    P(x_n | x_<n) = (1 - w) P_CHMM(x_n | x_<n) + w Q(x_n | x_{n-1}),

so that a symbol pair never seen in training (no stored block: the CHMM gives it probability zero) still gets its
due. Q is built from the pair counts the model keeps per block (the expected counts of its training text summed per
block), in memory of the stored pairs, never of the square of the alphabet:

- characters ("bigram"): the add-1/2 symbol bigram, Q(j | i) = (c_ij + 1/2) / (c_i + V/2), with w = 1e-6 (or the mass a
  pruning removed): a guard that keeps every score finite at a cost of about 1e-6 bits per symbol;
- words and tokens ("kneser-ney"): the interpolated absolute-discount bigram of Kneser and Ney,
  Q(j | i) = max(c_ij - D, 0) / c_i + gamma_i P_cont(j), gamma_i = 1 - sum_j max(c_ij - D, 0) / c_i, with the
  continuation distribution P_cont(j) = (N_1+(. j) + 1) / (K + V) (K stored pairs; add-one keeps every symbol
  possible) and D = n_1 / (n_1 + 2 n_2) from the count-of-counts; a symbol never seen before another backs off to
  P_cont. Its weight w is chosen on validation text (:func:`choose_weight`), where half the word pairs of a novel
  may never have occurred in training.

Every Q row sums to one, so every factor above is a proper distribution and the bits per symbol are a code length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.errors import CHMMError
from engine.model.blocks import BlockLayout

__all__ = ["BACKOFF_KINDS", "Backoff", "backoff_kind", "choose_weight"]

BACKOFF_KINDS: dict[str, str] = {"characters": "bigram", "words": "kneser-ney", "tokens": "kneser-ney"}
"""The back-off each unit scores with."""
LOWEST_WEIGHT = 1e-6
"""The smallest back-off weight :func:`choose_weight` returns (the guard a character model always has)."""
HIGHEST_WEIGHT = 0.999


def backoff_kind(unit: str) -> str:
    """The back-off a model of ``unit`` scores with (:data:`BACKOFF_KINDS`)."""
    return BACKOFF_KINDS[unit]


@dataclass(frozen=True)
class Backoff:
    """Q(j | i) of a model, sparse: the stored pairs' codes i * V + j (sorted), their probabilities, and each row's
    share for pairs without a block (add-1/2: 1/2 / (c_i + V/2) for every such j; Kneser-Ney: gamma_i, times
    P_cont(j))."""

    n_symbols: int
    kind: str
    codes: np.ndarray
    stored: np.ndarray
    row_rest: np.ndarray
    unigram: np.ndarray | None

    @staticmethod
    def build(layout: BlockLayout, block_sums: np.ndarray | None, kind: str = "bigram") -> Backoff:
        """Q from the summed expected counts of each stored block (``block_sums``; None: no counts kept, so Q is
        uniform for "bigram" and P_cont of the stored pairs for "kneser-ney")."""
        n = layout.n_symbols
        pairs = layout.block_pairs
        counts = np.zeros(len(pairs)) if block_sums is None else np.asarray(block_sums, dtype=np.float64)
        rows = np.bincount(pairs[:, 0], weights=counts, minlength=n) if len(pairs) else np.zeros(n)
        codes = pairs[:, 0] * n + pairs[:, 1]
        if kind == "bigram":
            denominator = rows + 0.5 * n
            return Backoff(n, kind, codes, (counts + 0.5) / denominator[pairs[:, 0]], 0.5 / denominator, None)
        if kind != "kneser-ney":
            raise CHMMError(f"unknown back-off {kind!r}")
        seen = counts > 0
        continuation = np.bincount(pairs[seen, 1], minlength=n).astype(np.float64) + 1.0
        unigram = continuation / continuation.sum()
        n1 = np.count_nonzero((counts > 0) & (counts < 1.5))
        n2 = np.count_nonzero((counts >= 1.5) & (counts < 2.5))
        discount = float(np.clip(n1 / (n1 + 2 * n2), 0.1, 0.95)) if n1 + n2 else 0.5
        safe_rows = np.where(rows > 0, rows, 1.0)
        kept = np.maximum(counts - discount, 0.0) / safe_rows[pairs[:, 0]]
        kept_per_row = np.bincount(pairs[:, 0], weights=kept, minlength=n) if len(pairs) else np.zeros(n)
        gamma = np.where(rows > 0, 1.0 - kept_per_row, 1.0)
        return Backoff(n, kind, codes, kept + gamma[pairs[:, 0]] * unigram[pairs[:, 1]], gamma, unigram)

    def _rest(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Q(j | i) for pairs without a stored block."""
        if self.unigram is None:
            return self.row_rest[i]
        return self.row_rest[i] * self.unigram[j]

    def probabilities(self, previous: np.ndarray, following: np.ndarray) -> np.ndarray:
        """Q(following[n] | previous[n]) for every n."""
        previous = np.asarray(previous, dtype=np.int64)
        following = np.asarray(following, dtype=np.int64)
        wanted = previous * self.n_symbols + following
        if len(self.codes) == 0:
            return self._rest(previous, following)
        found = np.minimum(np.searchsorted(self.codes, wanted), len(self.codes) - 1)
        hit = self.codes[found] == wanted
        return np.where(hit, self.stored[found], self._rest(previous, following))

    def sequence(self, x: np.ndarray) -> np.ndarray:
        """Q of every position of ``x``: the first from the start (uniform for "bigram", P_cont for "kneser-ney"),
        then Q(x_n | x_{n-1})."""
        x = np.asarray(x, dtype=np.int64)
        q = np.empty(len(x))
        if len(x):
            q[0] = 1.0 / self.n_symbols if self.unigram is None else self.unigram[x[0]]
            q[1:] = self.probabilities(x[:-1], x[1:])
        return q

    def row(self, i: int) -> np.ndarray:
        """The whole distribution Q(. | i), shape (V,) (sampling; O(V))."""
        j = np.arange(self.n_symbols)
        return self.probabilities(np.full(self.n_symbols, i), j)


def choose_weight(predictive: np.ndarray, backoff: np.ndarray) -> float:
    """The back-off weight w in [1e-6, 0.999] that maximises sum_n log((1 - w) p_n + w q_n) over validation text
    (``predictive`` p: the CHMM's P(x_n | x_<n); ``backoff`` q: Q(x_n | x_{n-1})). The sum is concave in w, so its
    derivative sum_n (q_n - p_n) / ((1 - w) p_n + w q_n) falls as w grows and bisection finds its root."""
    p = np.asarray(predictive, dtype=np.float64)
    q = np.asarray(backoff, dtype=np.float64)

    def slope(w: float) -> float:
        return float(np.sum((q - p) / ((1.0 - w) * p + w * q)))

    low, high = LOWEST_WEIGHT, HIGHEST_WEIGHT
    if slope(low) <= 0.0:
        return low
    if slope(high) >= 0.0:
        return high
    for _ in range(60):
        middle = 0.5 * (low + high)
        if slope(middle) > 0.0:
            low = middle
        else:
            high = middle
    return 0.5 * (low + high)
