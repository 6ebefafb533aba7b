"""Character-level interpolated modified Kneser-Ney n-gram model (Chen & Goodman 1998, section 3.5 / eq. 17-19).

For an n-gram model of order K the probability of symbol ``w`` after the context ``h`` (the last K-1 symbols) is

    p_m(w | h) = max(a_m(hw) - D_m(a_m(hw)), 0) / A_m(h)  +  gamma_m(h) p_{m-1}(w | h')
    gamma_m(h) = (D_m1 N_1(h) + D_m2 N_2(h) + D_m3+ N_3+(h)) / A_m(h),        p_0(w) = 1 / V,

where ``h'`` drops the oldest symbol of ``h``, ``A_m(h) = sum_w a_m(hw)`` and ``N_k(h)`` is the number of symbols
``w`` with ``a_m(hw) = k`` (``N_3+``: at least 3). At the top level (m = K) ``a`` is the raw count of the n-gram;
at every lower level it is the continuation count N_1+(. hw), the number of distinct symbols seen before ``hw``
(Kneser & Ney's marginal constraint). A context with ``A_m(h) = 0`` (never seen) backs off entirely to level m-1.
The three discounts of each level come from that level's count-of-counts n_1..n_4 (Chen & Goodman eq. 26):
Y = n_1 / (n_1 + 2 n_2), D_1 = 1 - 2Y n_2/n_1, D_2 = 2 - 3Y n_3/n_2, D_3+ = 3 - 4Y n_4/n_3.

Counting is done with numpy only: the m-gram ending at position i gets the key ``id_{m-1}(i-1) * V + x_i`` (the
dense id of its (m-1)-symbol prefix times the alphabet size plus its last symbol), and ``np.unique`` turns the keys
of all positions into sorted tables and dense ids for the next order, so keys never overflow whatever the order.
Looking up a text is a ``searchsorted`` per order, vectorised over all positions.
"""

from __future__ import annotations

import math
import operator
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import CHMMError
from engine.peers import registry
from engine.peers.base import PeerFormatError, as_symbols, load_arrays, save_arrays

__all__ = ["KneserNeyNgram", "modified_kn_discounts"]

_DEFAULT_DISCOUNTS = (0.5, 1.0, 1.5)
_DISCOUNT_MARGIN = 0.02


def _check_int(value: object, what: str, minimum: int) -> int:
    """``value`` as an int, or ValueError unless it is an integer (not a bool) of at least ``minimum``."""
    if isinstance(value, bool):
        raise CHMMError(f"{what} must be an integer, got {value!r}")
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise CHMMError(f"{what} must be an integer, got {value!r}") from None
    if number < minimum:
        raise CHMMError(f"{what} must be at least {minimum}, got {number}")
    return int(number)


def modified_kn_discounts(a: np.ndarray) -> np.ndarray:
    """The three modified Kneser-Ney discounts (D_1, D_2, D_3+) of one order from its counts ``a``.

    Chen & Goodman (1998) eq. 26: with n_k the number of n-grams whose count is exactly k, Y = n_1 / (n_1 + 2 n_2),
    D_1 = 1 - 2Y n_2/n_1, D_2 = 2 - 3Y n_3/n_2, D_3+ = 3 - 4Y n_4/n_3. A discount the formula leaves undefined
    (a count-of-count is 0, e.g. the handful of unigrams or a deterministic sequence without singletons) takes the
    default 0.5 / 1.0 / 1.5; every discount is then clipped into [0.02, k - 0.02] so that 0 < D_k < k (a discount
    never removes a whole count, which keeps every probability positive).
    """
    a = np.asarray(a, dtype=np.int64)
    n = [int(np.count_nonzero(a == k)) for k in range(1, 5)]
    y = n[0] / (n[0] + 2 * n[1]) if n[0] > 0 and n[1] > 0 else math.nan
    formulas = (
        1.0 - 2.0 * y * n[1] / n[0] if n[0] > 0 else math.nan,
        2.0 - 3.0 * y * n[2] / n[1] if n[1] > 0 else math.nan,
        3.0 - 4.0 * y * n[3] / n[2] if n[2] > 0 else math.nan,
    )
    out = np.empty(3, dtype=np.float64)
    for k, (value, default) in enumerate(zip(formulas, _DEFAULT_DISCOUNTS, strict=True), start=1):
        if not math.isfinite(value):
            value = default
        out[k - 1] = min(max(value, _DISCOUNT_MARGIN), k - _DISCOUNT_MARGIN)
    return out


def _lookup(keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Index of each ``query`` key in the sorted array ``keys``, -1 where it is absent."""
    if keys.size == 0:
        return np.full(query.shape, -1, dtype=np.int64)
    idx = np.searchsorted(keys, query)
    idx_c = np.minimum(idx, keys.size - 1)
    return np.where(keys[idx_c] == query, idx_c, -1).astype(np.int64)


@dataclass
class _Tables:
    """All distinct m-grams of a training sequence for m = 1..K: sorted keys, raw and continuation counts."""

    keys: list[np.ndarray]
    counts: list[np.ndarray]
    continuation: list[np.ndarray]  # for m < K; the top order has none


def _count_tables(x: np.ndarray, n_symbols: int, max_order: int) -> _Tables:
    """Sorted m-gram keys, raw counts and continuation counts N_1+(. g) of ``x`` for every order up to max_order."""
    n = x.size
    keys: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    first_pos: list[np.ndarray] = []
    ids: list[np.ndarray] = []
    for m in range(1, max_order + 1):
        if m == 1:
            key = x
        else:
            prev = ids[-1][m - 2 : n - 1]
            key = prev * n_symbols + x[m - 1 :]
        uniq, first, inverse, count = np.unique(key, return_index=True, return_inverse=True, return_counts=True)
        gid = np.full(n, -1, dtype=np.int64)
        gid[m - 1 :] = inverse
        keys.append(uniq.astype(np.int64))
        counts.append(count.astype(np.int64))
        first_pos.append(first.astype(np.int64) + (m - 1))
        ids.append(gid)
    continuation: list[np.ndarray] = []
    for m in range(1, max_order):
        # each distinct (m+1)-gram has one distinct predecessor symbol for its last m symbols: its suffix m-gram
        suffix_ids = ids[m - 1][first_pos[m]]
        continuation.append(np.bincount(suffix_ids, minlength=keys[m - 1].size).astype(np.int64))
    return _Tables(keys, counts, continuation)


@dataclass
class _Level:
    """One interpolation level: m-gram keys, the counts ``a`` used there, its discounts and per-context sums."""

    keys: np.ndarray
    a: np.ndarray
    discounts: np.ndarray
    total: np.ndarray  # A_m(h) per context id (dense id of the (m-1)-gram; a single context for m = 1)
    gamma: np.ndarray  # D_1 N_1(h) + D_2 N_2(h) + D_3+ N_3+(h) per context id


def _make_level(keys: np.ndarray, a: np.ndarray, discounts: np.ndarray, n_contexts: int, n_symbols: int) -> _Level:
    """Per-context totals and back-off mass numerators of one level (the denominators and gamma of eq. 17)."""
    prefix = keys // n_symbols
    positive = a > 0
    d_of = np.where(positive, discounts[np.clip(a, 1, 3) - 1], 0.0)
    total = np.bincount(prefix, weights=a.astype(np.float64), minlength=n_contexts)
    gamma = np.bincount(prefix, weights=d_of, minlength=n_contexts)
    return _Level(keys, a, discounts, total, gamma)


def _gram_ids(levels_keys: list[np.ndarray], x: np.ndarray, n_symbols: int) -> list[np.ndarray]:
    """For each order m, the training id of the m-gram ending at every position of ``x`` (-1: unseen/too early)."""
    n = x.size
    out: list[np.ndarray] = []
    for m, keys in enumerate(levels_keys, start=1):
        gid = np.full(n, -1, dtype=np.int64)
        if m == 1:
            gid[:] = _lookup(keys, x)
        elif n >= m:
            prev = out[-1][m - 2 : n - 1]
            ok = prev >= 0
            sub = np.full(prev.shape, -1, dtype=np.int64)
            sub[ok] = _lookup(keys, prev[ok] * n_symbols + x[m - 1 :][ok])
            gid[m - 1 :] = sub
        out.append(gid)
    return out


class KneserNeyNgram:
    """Interpolated modified Kneser-Ney character n-gram model (the paper's n-gram baseline; kind "ngram").

    ``order`` fixes the n-gram order (context of order-1 symbols). With ``order=None``, :meth:`fit` counts every
    order up to ``max_order`` and keeps the order in 1..max_order with the lowest BPS on ``validation``; without
    validation data it keeps ``max_order`` (modified Kneser-Ney degrades gracefully with a long context: an unseen
    or rare context hands most of its mass to the shorter ones). The model is fitted on ``train`` only; to use the
    validation part for training as well, refit with the chosen ``order`` on train + validation.
    """

    kind = "ngram"

    def __init__(self, max_order: int = 8, order: int | None = None) -> None:
        self.max_order = _check_int(max_order, "max_order", 1)
        self.order = None if order is None else _check_int(order, "order", 1)
        self.n_symbols: int | None = None
        self.order_: int | None = None
        self.validation_bps_: list[float] | None = None
        self._levels: list[_Level] = []

    # ------------------------------------------------------------------------------------------------ fitting
    def fit(self, train: np.ndarray, n_symbols: int, validation: np.ndarray | None = None) -> KneserNeyNgram:
        """Count all n-grams of ``train`` up to the order and estimate the discounts; choose the order on
        ``validation`` when none was fixed (lowest validation BPS, ties to the lower order). Returns self."""
        n_symbols = _check_int(n_symbols, "n_symbols", 1)
        x = as_symbols(train, n_symbols, "train")
        val = None
        if validation is not None:
            val = as_symbols(validation, n_symbols, "validation", allow_empty=True)
            if val.size == 0:
                val = None
        top = self.order if self.order is not None else self.max_order
        tables = _count_tables(x, n_symbols, top)
        self.n_symbols = n_symbols
        self.validation_bps_ = None
        if self.order is not None or val is None:
            chosen = top
        else:
            scores = []
            for k in range(1, top + 1):
                self._levels = self._build_levels(tables, k, n_symbols)
                scores.append(float(-np.mean(np.log2(self.predictive(val)))))
            self.validation_bps_ = scores
            chosen = int(np.argmin(scores)) + 1
        self._levels = self._build_levels(tables, chosen, n_symbols)
        self.order_ = chosen
        return self

    @staticmethod
    def _build_levels(tables: _Tables, order: int, n_symbols: int) -> list[_Level]:
        """Levels 1..order: continuation counts below the top, raw counts at the top, each with its discounts."""
        levels = []
        for m in range(1, order + 1):
            a = tables.counts[m - 1] if m == order else tables.continuation[m - 1]
            n_contexts = 1 if m == 1 else tables.keys[m - 2].size
            keys = tables.keys[m - 1]
            levels.append(_make_level(keys, a, modified_kn_discounts(a[a > 0]), n_contexts, n_symbols))
        return levels

    def _require_fitted(self) -> int:
        """The alphabet size, or RuntimeError if the model has not been fitted or loaded."""
        if self.n_symbols is None or not self._levels:
            raise RuntimeError("the n-gram model is not fitted")
        return self.n_symbols

    # ------------------------------------------------------------------------------------------------ scoring
    def _probabilities(self, contexts: list[np.ndarray], w: np.ndarray) -> np.ndarray:
        """p_K(w | h) of eq. 17 for arrays of symbols ``w``; ``contexts[m-1]`` holds the id of each context at level
        m (the (m-1)-gram id, 0 for m = 1, -1 where that context is unseen or unavailable)."""
        v = self._require_fitted()
        p = np.full(w.shape, 1.0 / v)
        for level, ctx in zip(self._levels, contexts, strict=True):
            ok = ctx >= 0
            idx = np.flatnonzero(ok)
            if idx.size == 0:
                continue
            c = ctx[idx]
            seen = level.total[c] > 0
            idx, c = idx[seen], c[seen]
            g = _lookup(level.keys, c * v + w[idx])
            a = np.where(g >= 0, level.a[np.maximum(g, 0)], 0)
            d = np.where(a > 0, level.discounts[np.clip(a, 1, 3) - 1], 0.0)
            p[idx] = (np.maximum(a - d, 0.0) + level.gamma[c] * p[idx]) / level.total[c]
        return p

    def predictive(self, x: np.ndarray) -> np.ndarray:
        """P(x_n | x_<n) for every position; position n < K-1 uses the level of order n+1 (its shorter context)."""
        v = self._require_fitted()
        x = as_symbols(x, v, "sequence", allow_empty=True)
        n = x.size
        if n == 0:
            return np.zeros(0, dtype=np.float64)
        gids = _gram_ids([lv.keys for lv in self._levels], x, v)
        contexts = [np.zeros(n, dtype=np.int64)]
        for m in range(2, len(self._levels) + 1):
            ctx = np.full(n, -1, dtype=np.int64)
            ctx[m - 1 :] = gids[m - 2][m - 2 : n - 1]
            contexts.append(ctx)
        return self._probabilities(contexts, x)

    def next_distribution(self, context: np.ndarray) -> np.ndarray:
        """P(w | context) for every symbol w (shape (V,), sums to 1): the last order-1 symbols of ``context`` are
        used, fewer if it is shorter (the level of order len(context)+1)."""
        v = self._require_fitted()
        context = as_symbols(context, v, "context", allow_empty=True)
        order = len(self._levels)
        context = context[max(0, context.size - (order - 1)) :]
        k = context.size
        gids = _gram_ids([lv.keys for lv in self._levels], context, v) if k else []
        w = np.arange(v, dtype=np.int64)
        contexts = [np.zeros(v, dtype=np.int64)]
        for m in range(2, order + 1):
            ctx_id = int(gids[m - 2][k - 1]) if k >= m - 1 else -1
            contexts.append(np.full(v, ctx_id, dtype=np.int64))
        return self._probabilities(contexts, w)

    # ------------------------------------------------------------------------------------------------ reporting
    @property
    def discounts(self) -> np.ndarray:
        """The (order, 3) array of discounts (D_1, D_2, D_3+) of each level, unigrams first."""
        self._require_fitted()
        return np.stack([lv.discounts for lv in self._levels])

    @property
    def n_parameters(self) -> int:
        """Number of stored n-gram entries: distinct m-grams over all orders m = 1..order, each with one count (the
        3 discounts per order are derived from those counts and not counted)."""
        self._require_fitted()
        return int(sum(lv.keys.size for lv in self._levels))

    # ------------------------------------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike[str], metadata: dict[str, Any] | None = None) -> None:
        """Write the count tables, discounts and order as .npz + JSON header (no pickle)."""
        v = self._require_fitted()
        arrays: dict[str, np.ndarray] = {"discounts": self.discounts}
        for m, level in enumerate(self._levels, start=1):
            arrays[f"keys_{m}"] = level.keys
            arrays[f"counts_{m}"] = level.a
        header = {
            "n_symbols": v,
            "order": self.order_,
            "max_order": self.max_order,
            "fixed_order": self.order,
            "validation_bps": self.validation_bps_,
            "n_parameters": self.n_parameters,
            "metadata": metadata or {},
        }
        save_arrays(path, self.kind, arrays, header)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> KneserNeyNgram:
        """Read a model written by :meth:`save`; PeerFormatError if the file is not one."""
        arrays, header = load_arrays(path, cls.kind)
        try:
            v = int(header["n_symbols"])
            order = int(header["order"])
            model = cls(max_order=int(header["max_order"]), order=header.get("fixed_order"))
            discounts = np.asarray(arrays["discounts"], dtype=np.float64).reshape(order, 3)
            levels = []
            for m in range(1, order + 1):
                keys = np.asarray(arrays[f"keys_{m}"], dtype=np.int64)
                a = np.asarray(arrays[f"counts_{m}"], dtype=np.int64)
                n_contexts = 1 if m == 1 else levels[-1].keys.size
                levels.append(_make_level(keys, a, discounts[m - 1], n_contexts, v))
        except (KeyError, TypeError, ValueError) as exc:
            raise PeerFormatError(f"{path}: damaged n-gram model ({exc})") from exc
        model.n_symbols = v
        model.order_ = order
        model.validation_bps_ = header.get("validation_bps")
        model._levels = levels
        return model


registry.register(
    registry.Learner(
        "ngram",
        "Kneser-Ney n-gram",
        "n-gram",
        "#ff7f0e",
        factory="engine.peers.ngram:KneserNeyNgram",
        defaults={"max_order": 8},
        settings=(registry.Setting("max_order", "order at most", 8, 1, 20, shown="order <= {value}"),),
        seconds_per_symbol=0.4 / 106_910,
        refit=lambda learner, options: options | {"order": int(learner.order_)},
    )
)
