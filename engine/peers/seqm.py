"""The sequence memoizer (Wood et al. 2011; the paper's SEQM column): an unbounded-depth hierarchical Pitman-Yor
model of the next symbol given the whole past, with one table per dish (kind "seqm").

Every context u (the last k symbols, for every k) has a restaurant whose base distribution is the restaurant of
u's suffix u' (u without its oldest symbol); the root's base is uniform over the alphabet. Concentrations are 0,
as in the sequence memoizer, and the discount depends on the context's length: d_k for k = 0..3 are the sequence
memoizer's (0.62, 0.69, 0.74, 0.80), and every deeper restaurant has the deep discount d (0.95 in the sequence
memoizer's papers; chosen on validation here, as the paper tuned its smoothing on validation). Each training symbol
x_i is a customer of the restaurant of its whole history x_<i. With one table per dish, a restaurant opens one
table per symbol it has seen and sends one customer to its parent, so the restaurant of u has

    c(u, s) = the number of distinct left extensions of the string u s in the training text,

counting the start of the text as an extension of its own (a history that is exactly u): the continuation count
of Kneser-Ney, at every depth. Then with c(u) = sum_s c(u, s) and t(u) the number of symbols s with c(u, s) > 0,

    P(s | u) = (c(u, s) - d_|u| [c(u, s) > 0]) / c(u) + d_|u| t(u) / c(u) * P(s | u'),

and a restaurant with no customers passes its parent's prediction on. A prediction goes down the contexts of its
history until the training text has none longer: the depth is unbounded.

Computation: depth by depth, only the training positions whose context of that length also precedes a scored
position are kept, and contexts get dense ids from ``np.unique`` over both texts at once (exact, no hashing), so
memory stays linear in the two texts' lengths and the loop ends when no scored context is left in the training
text. A scored context found at one training position only is followed symbol by symbol in a compiled loop
(each deeper restaurant on that path has one customer), so scoring a text against itself stays linear too.
``fit`` keeps the training text and chooses the deep discount; it is stored with the model.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
from numba import njit

from engine.errors import CHMMError
from engine.peers import registry
from engine.peers.base import PeerFormatError, as_symbols, load_arrays, save_arrays

__all__ = ["DEEP_DISCOUNTS", "SHALLOW_DISCOUNTS", "SequenceMemoizer"]

SHALLOW_DISCOUNTS = (0.62, 0.69, 0.74, 0.80)
"""The sequence memoizer's discounts for contexts of 0, 1, 2 and 3 symbols (Wood et al.)."""
DEEP_DISCOUNTS = (0.85, 0.9, 0.95, 0.97, 0.99)
"""The deep discounts validation chooses among (0.95: the sequence memoizer's)."""
START = -1


def _check_discount(value: Any, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CHMMError(f"{what} must be a number in (0, 1), got {value!r}") from None
    if not (math.isfinite(number) and 0.0 < number < 1.0):
        raise CHMMError(f"{what} must be a number in (0, 1), got {value!r}")
    return number


def _context_step(ids: np.ndarray, symbols: np.ndarray, n_symbols: int) -> np.ndarray:
    """Dense ids of contexts one symbol longer: the context's id and the symbol before it, renumbered."""
    keys = ids.astype(np.int64) * (n_symbols + 1) + symbols
    return np.unique(keys, return_inverse=True)[1].reshape(-1)


def _restaurants(
    ctx: np.ndarray, nxt: np.ndarray, ext: np.ndarray, n_symbols: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The one-table-per-dish counts of the restaurants of the training positions at one depth (context id
    ``ctx``, next symbol ``nxt``, left extension ``ext``): sorted (context, symbol) keys with c(u, s), and per
    context id present (sorted) c(u) and t(u)."""
    pair = ctx.astype(np.int64) * n_symbols + nxt
    pair_ids, pair_of = np.unique(pair, return_inverse=True)
    triples = np.unique(pair_of.reshape(-1).astype(np.int64) * (n_symbols + 1) + (ext + 1))
    c_us = np.bincount(triples // (n_symbols + 1), minlength=pair_ids.size)
    contexts, first = np.unique(pair_ids // n_symbols, return_index=True)
    c_u = np.add.reduceat(c_us, first)
    t_u = np.diff(np.append(first, pair_ids.size))
    return pair_ids, c_us, contexts, np.stack([c_u, t_u])


@njit(cache=True)
def _follow_single_matches(
    x: np.ndarray, train: np.ndarray, scored: np.ndarray, matched: np.ndarray, depth: int, p: np.ndarray,
    discounts: np.ndarray,
) -> None:  # fmt: skip
    """Scored positions whose context of ``depth`` symbols occurs at one training position only: every longer
    context that still matches is a restaurant with one customer, of that position's symbol, so each such depth k
    gives P <- (1 - d_k) [x_n = train_i] + d_k P. Followed until the match breaks or either text's start is reached;
    where x_n is that position's symbol P only grows towards 1, and the walk stops once the remaining depths cannot
    move it by 1e-17 (their discounts' product), which bounds the walk when a text is scored against itself."""
    last = discounts.shape[1] - 1
    for j in range(scored.size):
        n, i = scored[j], matched[j]
        hit = 1.0 if x[n] == train[i] else 0.0
        for c in range(discounts.shape[0]):
            k, weight, q = depth + 1, 1.0, p[c, n]
            while n - k >= 0 and i - k >= 0 and x[n - k] == train[i - k] and (hit == 0.0 or weight > 1e-17):
                d = discounts[c, min(k, last)]
                q = (1.0 - d) * hit + d * q
                weight *= d
                k += 1
            p[c, n] = q


def _single_matches(t_ids: np.ndarray, t_pos: np.ndarray, x_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each scored context id: whether it occurs at exactly one training position, and that position."""
    contexts, first, occurrences = np.unique(t_ids, return_index=True, return_counts=True)
    where = np.searchsorted(contexts, x_ids)
    return occurrences[where] == 1, t_pos[first[where]]


def memoizer_predictive(train: np.ndarray, x: np.ndarray, n_symbols: int, discounts: np.ndarray) -> np.ndarray:
    """P(x_n | x_<n) under the sequence memoizer of ``train`` for every position of ``x``, one row per row of
    ``discounts`` (shape (candidates, depths): the discount of a context of k symbols is column min(k, depths - 1)).
    See the module docstring for the model and the computation."""
    discounts = np.atleast_2d(np.asarray(discounts, dtype=np.float64))
    p = np.full((discounts.shape[0], x.size), 1.0 / n_symbols)
    t_pos = np.arange(train.size)  # training positions alive at this depth
    x_pos = np.arange(x.size)  # scored positions alive at this depth
    t_ids = np.zeros(train.size, dtype=np.int64)
    x_ids = np.zeros(x.size, dtype=np.int64)
    depth = 0
    while x_pos.size and t_pos.size:
        if depth:
            keep_t, keep_x = t_pos >= depth, x_pos >= depth
            t_pos, t_ids, x_pos, x_ids = t_pos[keep_t], t_ids[keep_t], x_pos[keep_x], x_ids[keep_x]
            ids = _context_step(
                np.concatenate([t_ids, x_ids]), np.concatenate([train[t_pos - depth], x[x_pos - depth]]), n_symbols
            )
            t_ids, x_ids = ids[: t_pos.size], ids[t_pos.size :]
            shared = np.intersect1d(t_ids, x_ids)
            keep_t, keep_x = np.isin(t_ids, shared), np.isin(x_ids, shared)
            t_pos, t_ids, x_pos, x_ids = t_pos[keep_t], t_ids[keep_t], x_pos[keep_x], x_ids[keep_x]
            if not x_pos.size:
                break
        ext = np.where(t_pos > depth, train[np.maximum(t_pos - depth - 1, 0)], START)
        pairs, c_us, contexts, c_t = _restaurants(t_ids, train[t_pos], ext, n_symbols)
        where = np.searchsorted(contexts, x_ids)
        c_u, t_u = c_t[0, where], c_t[1, where]
        wanted = x_ids * n_symbols + x[x_pos]
        found = np.minimum(np.searchsorted(pairs, wanted), pairs.size - 1)
        c_s = np.where(pairs[found] == wanted, c_us[found], 0)
        d = discounts[:, min(depth, discounts.shape[1] - 1)][:, None]
        p[:, x_pos] = (c_s - d * (c_s > 0)) / c_u + d * t_u / c_u * p[:, x_pos]
        single, matched = _single_matches(t_ids, t_pos, x_ids)
        if single.any():
            _follow_single_matches(x, train, x_pos[single], matched[single], depth, p, discounts)
            x_pos, x_ids = x_pos[~single], x_ids[~single]
        depth += 1
    return p


class SequenceMemoizer:
    """The sequence memoizer with one table per dish (kind "seqm"; module docstring). ``deep_discount``: the
    discount of contexts of 4 symbols and more; None lets :meth:`fit` choose it among :data:`DEEP_DISCOUNTS` by
    validation BPS (without validation it takes the sequence memoizer's 0.95)."""

    kind = "seqm"

    def __init__(self, deep_discount: float | None = None) -> None:
        self.deep_discount = None if deep_discount is None else _check_discount(deep_discount, "deep_discount")
        self.n_symbols: int | None = None
        self.deep_discount_: float | None = None
        self.validation_bps_: list[float] | None = None
        self._train = np.zeros(0, dtype=np.int64)
        self.metadata: dict[str, Any] = {}

    def _discounts(self, deep: float) -> np.ndarray:
        return np.array([*SHALLOW_DISCOUNTS, deep], dtype=np.float64)

    def fit(self, train: np.ndarray, n_symbols: int, validation: np.ndarray | None = None) -> SequenceMemoizer:
        """Keep the training text; choose the deep discount with the lowest validation BPS (ties to the larger) when
        none was given. Returns self."""
        if isinstance(n_symbols, bool) or not isinstance(n_symbols, int | np.integer) or n_symbols < 1:
            raise CHMMError(f"n_symbols must be a positive whole number, got {n_symbols!r}")
        self._train = as_symbols(train, int(n_symbols), "train")
        self.n_symbols = int(n_symbols)
        self.validation_bps_ = None
        val = None if validation is None else as_symbols(validation, self.n_symbols, "validation", allow_empty=True)
        if self.deep_discount is not None:
            self.deep_discount_ = self.deep_discount
        elif val is None or val.size == 0:
            self.deep_discount_ = DEEP_DISCOUNTS[-1]
        else:
            table = np.stack([self._discounts(d) for d in DEEP_DISCOUNTS])
            p = memoizer_predictive(self._train, val, self.n_symbols, table)
            bps = -np.log2(p).mean(axis=1)
            self.validation_bps_ = [float(b) for b in bps]
            best = min(range(len(DEEP_DISCOUNTS)), key=lambda i: (round(float(bps[i]), 12), -i))
            self.deep_discount_ = DEEP_DISCOUNTS[best]
        return self

    def _require_fitted(self) -> int:
        if self.n_symbols is None or self.deep_discount_ is None:
            raise RuntimeError("the sequence memoizer is not fitted yet")
        return self.n_symbols

    def predictive(self, x: np.ndarray) -> np.ndarray:
        """P(x_n | x_<n) for every position of ``x`` (its own past only, from its first symbol)."""
        v = self._require_fitted()
        x = as_symbols(x, v, "x")
        return memoizer_predictive(self._train, x, v, self._discounts(float(self.deep_discount_)))[0]

    @property
    def n_parameters(self) -> int:
        """The symbols it keeps: the training text (its restaurants are counted from it when it predicts)."""
        self._require_fitted()
        return int(self._train.size)

    def save(self, path: str | os.PathLike[str], metadata: dict[str, Any] | None = None) -> None:
        """Write the training text and the deep discount as .npz + JSON header (no pickle)."""
        v = self._require_fitted()
        dtype = np.uint8 if v <= 256 else np.uint16 if v <= 65_536 else np.int32
        header = {
            "n_symbols": v,
            "deep_discount": self.deep_discount_,
            "fixed_deep_discount": self.deep_discount,
            "validation_bps": self.validation_bps_,
            "metadata": metadata or {},
        }
        save_arrays(path, self.kind, {"train": self._train.astype(dtype)}, header)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SequenceMemoizer:
        """Read a model written by :meth:`save`; PeerFormatError if the file is not one."""
        arrays, header = load_arrays(path, cls.kind)
        try:
            model = cls(deep_discount=header.get("fixed_deep_discount"))
            v = int(header["n_symbols"])
            model._train = as_symbols(np.asarray(arrays["train"]).astype(np.int64), v, "the stored training text")
            model.n_symbols = v
            model.deep_discount_ = _check_discount(header["deep_discount"], "deep_discount")
            model.validation_bps_ = header.get("validation_bps")
        except (KeyError, TypeError, ValueError) as exc:
            raise PeerFormatError(f"{path}: damaged sequence memoizer ({exc})") from exc
        return model


registry.register(
    registry.Learner(
        "seqm",
        "Sequence memoizer (Wood et al.)",
        "SEQM",
        "#8c564b",
        factory="engine.peers.seqm:SequenceMemoizer",
        seconds_per_symbol=2.7 / 106_910,
        refit=lambda learner, options: options | {"deep_discount": float(learner.deep_discount_)},
    )
)
