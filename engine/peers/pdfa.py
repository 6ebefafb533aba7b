"""The PAC PDFA learner of Gavaldà, Keller, Pineau & Precup (2006), "PAC-learning of Markov models with hidden state".

The learner (the paper's section 4 and Table 1) grows a graph of *safe* states, starting from the initial state s0.
Every safe state s keeps the multiset D_s of the suffixes of the training trajectories that pass through it; for a
symbol sigma without a transition out of s, the *candidate* s.sigma collects the suffixes that follow s.sigma. A
candidate is *large* once |D_{s.sigma}| reaches the largeness threshold of eq. (2),

    |D| >= 3 (1 + mu/4) / (mu/4)^2 * ln(2 / delta'),      delta' = delta mu / (2 (n |Sigma| + 2)),

(or, for text, a fixed minimum multiset size ``min_multiset``). The largest large candidate is then merged into the
safe state s' whose suffix distribution is closest to its own, if their L-infinity distance is at most mu/2 (eq. 3),
or else promoted to a new safe state (as long as there are fewer than n safe states). Merged or promoted suffixes
carry on through the graph "as if they had been observed" from their new state, so every trajectory is always
parsed through the current graph. The loop ends when no candidate is large; each remaining candidate is mapped to
its closest safe state (the paper's rule for leftover candidates; ties, frequent for candidates of a few suffixes, go
to the state with the smallest sum of differences over the candidate's prefixes), and a transition never seen in
training to the state that the same symbol most often leads to elsewhere (s0 if none).

The L-infinity distance between two multisets is taken over the *prefixes* of their suffixes,
max_u |D_A(u.)/|D_A| - D_B(u.)/|D_B||, where D(u.) counts the suffixes that start with u (Clark & Thollard's
prefix distance). Because every suffix ends with the terminator, a whole string d is the prefix "d#", so this
includes the paper's distance over whole trajectories; unlike that one it still separates states whose trajectories
are long and individually improbable (the Cheese maze). Only prefixes with frequency at least mu/4 in one of the two
multisets are expanded, which leaves every distance of mu/4 or more exact and every merge decision exact.

The sample-size guard. Eq. (2) asks for about 12,000 suffixes per candidate at mu = 0.2 and 50,000 at mu = 0.1
(delta = 0.05, n = 8): right for the paper's synthetic generators, but a book of 10^5 characters has a few hundred
candidates of that size, so the learner would stop at a handful of states. For text the default is therefore a
fixed minimum multiset size m0 (``min_multiset=3``): a candidate is decided once it holds 3 suffixes. With so few
suffixes a merge (distance <= mu/2) happens only when the candidate's suffixes match a state's distribution almost
exactly, so the automaton grows as a word trie whose equivalent endings are shared. ``min_multiset=None`` restores
the paper's threshold.

Text as trajectories. The learner needs i.i.d. trajectories that end with a terminator, while a corpus is one long
string. We cut it at a separator symbol (by default the most frequent training symbol: the space of any English
text): every trajectory is one word followed by the separator, which plays the role of the paper's terminator "#".
Words are natural, short (so suffix multisets stay small) and nearly independent, and the automaton learns the
within-word structure; the price is that it knows nothing across a word boundary. The alternative, fixed-length
windows of running text each ended by an artificial terminator, keeps cross-word context but makes the window
starts arbitrary points of the text (so s0 is not a real state) and multiplies the suffixes by the window length.

Scoring running text. The learned graph becomes a PDFA over the whole alphabet: the separator is the terminator,
and after it the automaton restarts at s0 (the paper's end-of-trajectory state is implicit). The next-symbol
probabilities come from the counts c(s, sigma) of the training text parsed through the final automaton, smoothed
towards the unigram distribution (a Dirichlet prior of strength beta):

    O(s, sigma) = (c(s, sigma) + beta u(sigma)) / (c(s) + beta),      u(sigma) = (c(sigma) + 1) / (N + V),

with u the add-one unigram of the training text, so that every symbol in every state (also never-seen symbols and
states reached only through mapped candidates) has a positive probability. This replaces the paper's eq. (4)
(a fixed mixture with the uniform distribution), which smooths well-observed states as much as rare ones. With
``smoothing=None``, beta is chosen on the validation text from a small grid (1.0 without validation).
"""

from __future__ import annotations

import heapq
import math
import operator
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import njit

from engine.peers.base import PeerFormatError, as_symbols, load_arrays, save_arrays

__all__ = ["PdfaLearner", "largeness_threshold", "word_trajectories"]

_COLUMN_CHUNK = 512
SMOOTHING_GRID = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0)
_DEFAULT_SMOOTHING = 1.0


def largeness_threshold(mu: float, delta: float, n_states: int, n_symbols: int) -> float:
    """The paper's largeness threshold, eq. (2): 3 (1 + mu/4) / (mu/4)^2 ln(2 / delta'), with
    delta' = delta mu / (2 (n |Sigma| + 2)); a candidate with at least this many suffixes is decided."""
    delta_prime = delta * mu / (2.0 * (n_states * n_symbols + 2))
    quarter = mu / 4.0
    return 3.0 * (1.0 + quarter) / quarter**2 * math.log(2.0 / delta_prime)


def _check_positive_int(value: object, what: str, minimum: int = 1) -> int:
    """``value`` as an int, or ValueError unless it is an integer (not a bool) of at least ``minimum``."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{what} must be an integer, got {value!r}") from None
    if number < minimum:
        raise ValueError(f"{what} must be at least {minimum}, got {number}")
    return int(number)


def _check_open_unit(value: object, what: str, upper: float = 1.0) -> float:
    """``value`` as a float in (0, upper), or ValueError."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not (0.0 < number < upper):
        raise ValueError(f"{what} must lie in (0, {upper:g}), got {value!r}")
    return number


# ------------------------------------------------------------------------------------------------ kernels
@njit(nogil=True, cache=True)
def _run_pdfa(x, trans, prob, separator, start):  # pragma: no cover - compiled
    """P(x_n | x_<n) along the automaton: emit with ``prob`` in the current state, move with ``trans``,
    restart at ``start`` after the separator."""
    out = np.empty(x.shape[0], dtype=np.float64)
    s = start
    for n in range(x.shape[0]):
        sym = x[n]
        out[n] = prob[s, sym]
        if sym == separator:
            s = start
        else:
            s = trans[s, sym]
    return out


@njit(nogil=True, cache=True)
def _count_pdfa(x, trans, separator, start, n_states, n_symbols):  # pragma: no cover - compiled
    """Counts c(s, sigma) of the symbols read in each state when ``x`` is parsed through the automaton."""
    counts = np.zeros((n_states, n_symbols), dtype=np.int64)
    s = start
    for n in range(x.shape[0]):
        sym = x[n]
        counts[s, sym] += 1
        if sym == separator:
            s = start
        else:
            s = trans[s, sym]
    return counts


# ------------------------------------------------------------------------------------------------ learning
def word_trajectories(x: np.ndarray, separator: int) -> tuple[np.ndarray, np.ndarray]:
    """(sequence, starts): ``x`` with the separator appended unless it already ends with one, and the start of every
    trajectory in it -- position 0 and each position after a separator (a trajectory is a word plus separator)."""
    seq = x if x.size and x[-1] == separator else np.concatenate([x, [separator]]).astype(np.int64)
    ends = np.flatnonzero(seq == separator)
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
    return seq, starts


@dataclass
class _Multiset:
    """Suffix start positions (chunks appended as they arrive) and their total number."""

    chunks: list[np.ndarray] = field(default_factory=list)
    size: int = 0

    def add(self, positions: np.ndarray) -> None:
        self.chunks.append(positions)
        self.size += positions.size

    def positions(self) -> np.ndarray:
        if len(self.chunks) > 1:
            self.chunks = [np.concatenate(self.chunks)]
        return self.chunks[0] if self.chunks else np.zeros(0, dtype=np.int64)


class _GraphLearner:
    """Table 1 of the paper on one terminated training sequence (see the module docstring)."""

    def __init__(
        self, seq: np.ndarray, n_symbols: int, separator: int, mu: float, n_max: int, threshold: float
    ) -> None:
        self.seq = seq
        self.v = n_symbols
        self.sep = separator
        self.mu = mu
        self.n_max = n_max
        self.threshold = threshold
        self.trans = np.full((n_max, n_symbols), -1, dtype=np.int64)
        self.next_counts = np.zeros((n_max, n_symbols), dtype=np.int64)
        self.safe: list[_Multiset] = []
        self.candidates: dict[tuple[int, int], _Multiset] = {}
        self.blocked: set[tuple[int, int]] = set()
        self.heap: list[tuple[int, int, int, int]] = []
        self.n_merges = 0
        self.n_promotions = 0

    # -------------------------------------------------------------------------------------------- parsing
    def _walk(self, states: np.ndarray, positions: np.ndarray) -> None:
        """Parse suffixes starting at ``positions`` in safe ``states`` through the graph: each visited safe state
        records the suffix, and a suffix that reaches a missing transition is handed to that candidate."""
        seq, v = self.seq, self.v
        while positions.size:
            syms = seq[positions]
            np.add.at(self.next_counts, (states, syms), 1)
            order = np.argsort(states, kind="stable")
            s_sorted = states[order]
            bounds = np.flatnonzero(np.diff(s_sorted)) + 1
            for chunk in np.split(order, bounds):
                self.safe[int(states[chunk[0]])].add(positions[chunk])
            go_on = syms != self.sep
            states, positions, syms = states[go_on], positions[go_on], syms[go_on]
            nxt = self.trans[states, syms]
            missing = nxt < 0
            if missing.any():
                keys = states[missing] * v + syms[missing]
                pos_missing = positions[missing] + 1
                order = np.argsort(keys, kind="stable")
                k_sorted = keys[order]
                bounds = np.flatnonzero(np.diff(k_sorted)) + 1
                for chunk in np.split(order, bounds):
                    key = int(keys[chunk[0]])
                    self._add_to_candidate((key // v, key % v), pos_missing[chunk])
            states, positions = nxt[~missing], positions[~missing] + 1

    def _add_to_candidate(self, key: tuple[int, int], positions: np.ndarray) -> None:
        """Append suffixes to candidate ``key`` = (safe state, symbol) and queue it once it is large."""
        multiset = self.candidates.setdefault(key, _Multiset())
        multiset.add(positions)
        if multiset.size >= self.threshold and key not in self.blocked:
            heapq.heappush(self.heap, (-multiset.size, key[0], key[1], multiset.size))

    def _new_safe_state(self) -> int:
        self.safe.append(_Multiset())
        return len(self.safe) - 1

    # -------------------------------------------------------------------------------------------- distances
    def prefix_linf(self, a: np.ndarray, b: np.ndarray, floor: float) -> float:
        """max over prefixes u of |freq_A(u) - freq_B(u)| (freq: share of the suffixes that start with u), expanding
        only prefixes whose frequency reaches ``floor`` in A or B: exact whenever the distance is at least floor."""
        seq, v, sep = self.seq, self.v, self.sep
        na, nb = a.size, b.size
        pos = np.concatenate([a, b])
        side = np.concatenate([np.zeros(na, dtype=bool), np.ones(nb, dtype=bool)])
        group = np.zeros(pos.size, dtype=np.int64)
        best = 0.0
        depth = 0
        while pos.size:
            syms = seq[pos + depth]
            uniq, inverse = np.unique(group * v + syms, return_inverse=True)
            count_a = np.bincount(inverse[~side], minlength=uniq.size) / na
            count_b = np.bincount(inverse[side], minlength=uniq.size) / nb
            best = max(best, float(np.max(np.abs(count_a - count_b))))
            heavy = (np.maximum(count_a, count_b) >= floor) & (uniq % v != sep)
            keep = heavy[inverse]
            pos, side, group = pos[keep], side[keep], inverse[keep]
            depth += 1
        return best

    def closest_safe(self, positions: np.ndarray, stop_below: float | None = None) -> tuple[int, float]:
        """(safe state, distance) minimising the prefix L-infinity distance to the suffixes at ``positions``.

        The next-symbol distance (depth 1 of the prefix distance) is a lower bound, so states are tried in its
        order and the search stops when the bound exceeds the best distance found; with ``stop_below`` it also
        skips every state whose bound exceeds that value (returning distance inf if none is left).
        """
        n_safe = len(self.safe)
        counts = self.next_counts[:n_safe].astype(np.float64)
        sizes = np.maximum(counts.sum(axis=1, keepdims=True), 1.0)
        own = np.bincount(self.seq[positions], minlength=self.v) / max(positions.size, 1)
        bound = np.max(np.abs(counts / sizes - own), axis=1)
        best_state, best = -1, math.inf
        for s in np.argsort(bound, kind="stable"):
            if bound[s] >= best or (stop_below is not None and bound[s] > stop_below):
                break
            d = self.prefix_linf(positions, self.safe[int(s)].positions(), self.mu / 4.0)
            if d < best:
                best_state, best = int(s), d
        return best_state, best

    # -------------------------------------------------------------------------------------------- Table 1
    def learn(self, starts: np.ndarray) -> None:
        """Run the merge / promote loop until no candidate is large."""
        s0 = self._new_safe_state()
        self._walk(np.full(starts.size, s0, dtype=np.int64), starts)
        while self.heap:
            _, s, sym, size = heapq.heappop(self.heap)
            key = (s, sym)
            cand = self.candidates.get(key)
            if cand is None or cand.size != size or key in self.blocked:
                continue  # stale entry: the candidate was resolved or has grown since
            positions = cand.positions()
            target, dist = self.closest_safe(positions, stop_below=self.mu / 2.0)
            if target >= 0 and dist <= self.mu / 2.0:
                self.n_merges += 1
            elif len(self.safe) < self.n_max:
                target = self._new_safe_state()
                self.n_promotions += 1
            else:
                self.blocked.add(key)  # distinguishable but no room: left for the final mapping
                continue
            del self.candidates[key]
            self.trans[s, sym] = target
            self._walk(np.full(positions.size, target, dtype=np.int64), positions)

    def profiles(
        self, multisets: list[np.ndarray], floor: float, n_reference: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Prefix frequencies of several multisets at once: (owner, prefix id, frequency) for every prefix whose
        parent prefix is *expanded* in its owner. Prefix ids are shared by all owners (the same string gets the same
        id), so profiles can be compared. A prefix is expanded where its frequency reaches ``floor``; in the first
        ``n_reference`` owners (the safe states) also where some later owner (a candidate) expands it, so that the
        safe states' frequencies of every prefix in a candidate's profile are exact. A prefix missing from a
        profile has frequency 0, or below ``floor`` with a parent below ``floor`` too."""
        seq, v, sep = self.seq, self.v, self.sep
        sizes = np.array([m.size for m in multisets], dtype=np.float64)
        pos = np.concatenate(multisets) if multisets else np.zeros(0, dtype=np.int64)
        owner = np.repeat(np.arange(len(multisets), dtype=np.int64), sizes.astype(np.int64))
        group = np.zeros(pos.size, dtype=np.int64)
        out_owner, out_pid, out_freq = [], [], []
        offset = 0
        depth = 0
        while pos.size:
            syms = seq[pos + depth]
            uniq, prefix = np.unique(group * v + syms, return_inverse=True)
            pairs, pair_of, count = np.unique(owner * uniq.size + prefix, return_inverse=True, return_counts=True)
            pair_owner, pair_prefix = pairs // uniq.size, pairs % uniq.size
            freq = count / sizes[pair_owner]
            out_owner.append(pair_owner)
            out_pid.append(pair_prefix + offset)
            out_freq.append(freq)
            expand = (freq >= floor) & (uniq[pair_prefix] % v != sep)
            wanted = np.unique(pair_prefix[expand & (pair_owner >= n_reference)])
            if wanted.size:
                slot = np.minimum(np.searchsorted(wanted, pair_prefix), wanted.size - 1)
                expand |= (pair_owner < n_reference) & (wanted[slot] == pair_prefix)
            keep = expand[pair_of]
            pos, owner, group = pos[keep], owner[keep], prefix[keep]
            offset += uniq.size
            depth += 1
        if not out_owner:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, np.zeros(0)
        return np.concatenate(out_owner), np.concatenate(out_pid), np.concatenate(out_freq)

    def map_leftovers(self) -> dict[tuple[int, int], int]:
        """Closest safe state of every leftover candidate by the prefix L-infinity distance, all candidates against
        all safe states at once. The distance is exact over the candidate's expanded prefixes (all of them for a
        candidate of fewer than 4/mu suffixes); prefixes seen only in the safe state count where their parent has
        frequency >= mu/4 there, so the distance is exact whenever it is mu/4 or more."""
        n_safe = len(self.safe)
        keys = list(self.candidates)
        if not keys:
            return {}
        multisets = [m.positions() for m in self.safe] + [self.candidates[k].positions() for k in keys]
        owner, pid, freq = self.profiles(multisets, self.mu / 4.0, n_safe)
        is_safe = owner < n_safe
        order = np.argsort(pid[is_safe], kind="stable")
        s_pid, s_owner, s_freq = pid[is_safe][order], owner[is_safe][order], freq[is_safe][order]
        # each safe state's most frequent prefixes, to find its largest frequency outside a candidate's prefixes
        by_state = np.lexsort((-freq[is_safe], owner[is_safe]))
        st_owner, st_pid, st_freq = owner[is_safe][by_state], pid[is_safe][by_state], freq[is_safe][by_state]
        first = np.searchsorted(st_owner, np.arange(n_safe))
        n_entries = np.diff(np.append(first, st_owner.size))
        cand_rows = np.flatnonzero(~is_safe)
        cand_rows = cand_rows[np.argsort(owner[cand_rows], kind="stable")]
        bounds = np.searchsorted(owner[cand_rows], np.arange(n_safe, n_safe + len(keys) + 1))
        width = int(min(max(int(np.diff(bounds).max()) + 1, 1), 256))
        rank = np.arange(width)
        take = first[:, None] + rank[None, :]
        valid = rank[None, :] < n_entries[:, None]
        top_pid = np.where(valid, st_pid[np.minimum(take, st_pid.size - 1)], -1)
        top_freq = np.where(valid, st_freq[np.minimum(take, st_freq.size - 1)], 0.0)
        result = {}
        for c, key in enumerate(keys):
            rows = cand_rows[bounds[c] : bounds[c + 1]]
            k_order = np.argsort(pid[rows])
            k_pid, k_freq = pid[rows][k_order], freq[rows][k_order]
            dist = np.zeros(n_safe)  # max |f_cand(u) - f_state(u)| over the candidate's prefixes u
            l1 = np.zeros(n_safe)  # sum of the same differences, to break ties
            for col in range(0, k_pid.size, _COLUMN_CHUNK):
                c_pid, c_freq = k_pid[col : col + _COLUMN_CHUNK], k_freq[col : col + _COLUMN_CHUNK]
                lo = np.searchsorted(s_pid, c_pid, side="left")
                lengths = np.searchsorted(s_pid, c_pid, side="right") - lo
                idx = np.repeat(lo - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
                shared = np.zeros((n_safe, c_pid.size))
                shared[s_owner[idx], np.repeat(np.arange(c_pid.size), lengths)] = s_freq[idx]
                diff = np.abs(shared - c_freq[None, :])
                dist = np.maximum(dist, diff.max(axis=1))
                l1 += diff.sum(axis=1)
            # the largest frequency of a prefix the state has and the candidate has not
            slot = np.minimum(np.searchsorted(k_pid, top_pid), k_pid.size - 1)
            in_k = (k_pid[slot] == top_pid) & (top_pid >= 0)
            outside = np.max(np.where(in_k, 0.0, top_freq), axis=1, initial=0.0)
            for s in np.flatnonzero(in_k.all(axis=1) & (n_entries > width)):  # top list exhausted: scan it all
                entries = slice(first[s], first[s] + n_entries[s])
                slot_s = np.minimum(np.searchsorted(k_pid, st_pid[entries]), k_pid.size - 1)
                mask = k_pid[slot_s] != st_pid[entries]
                outside[s] = float(np.max(st_freq[entries][mask], initial=0.0))
            total = np.maximum(dist, outside)
            best = np.flatnonzero(total <= total.min() + 1e-12)
            result[key] = int(best[np.argmin(l1[best])])
        return result

    def finish(self) -> np.ndarray:
        """The complete transition table: leftover candidates go to their closest safe state, transitions never
        seen in training to the state their symbol most often leads to (s0 if it leads nowhere yet)."""
        n_safe = len(self.safe)
        trans = self.trans[:n_safe].copy()
        for (s, sym), target in self.map_leftovers().items():
            trans[s, sym] = target
        weights = self.next_counts[:n_safe]
        for sym in range(self.v):
            missing = trans[:, sym] < 0
            if sym == self.sep or not missing.any():
                continue
            defined = ~missing
            if defined.any():
                votes = np.bincount(trans[defined, sym], weights=weights[defined, sym], minlength=n_safe)
                target = int(np.argmax(votes))
            else:
                target = 0
            trans[missing, sym] = target
        trans[:, self.sep] = 0
        return trans


# ------------------------------------------------------------------------------------------------ the learner
class PdfaLearner:
    """PAC PDFA learner (Gavaldà et al. 2006, Table 1) turned into a text model (kind "pdfa"; module docstring).

    ``mu``: distinguishability (merge if the prefix L-infinity distance is at most mu/2); ``n_max_states``: the
    paper's n, an upper bound on safe states (a large candidate that would be promoted when there is no room is
    left for the final mapping); ``delta``: confidence, used by the largeness threshold of eq. (2);
    ``min_multiset``: the sample-size guard m0 -- a candidate is decided once it holds m0 suffixes; None uses the
    paper's threshold eq. (2) instead (12,000 suffixes at mu = 0.2 and 50,000 at mu = 0.1 for n = 8, more than a
    book provides for most candidates, hence the fixed guard by default); ``separator``: the symbol that ends a
    trajectory (None: the most frequent training symbol); ``smoothing``: beta of the unigram smoothing (None: chosen
    on validation). The defaults suit character-level text of 10^4-10^6 symbols cut into words; trajectories (runs
    between separators) should be short, as learning walks each suffix to its end.

    Fitted attributes: ``transitions_`` (n_states x V, the separator column leads back to s0), ``counts_`` (the
    training counts c(s, sigma)), ``unigram_``, ``probabilities_`` (O(s, sigma)), ``separator_``, ``smoothing_``,
    ``threshold_`` (the largeness threshold used) and ``learning_stats_`` (merges, promotions, leftover and blocked
    candidates, validation BPS per beta).
    """

    kind = "pdfa"

    def __init__(
        self,
        mu: float = 0.05,
        n_max_states: int = 3000,
        delta: float = 0.05,
        min_multiset: int | None = 3,
        separator: int | None = None,
        smoothing: float | None = None,
    ) -> None:
        self.mu = _check_open_unit(mu, "mu")
        self.n_max_states = _check_positive_int(n_max_states, "n_max_states")
        self.delta = _check_open_unit(delta, "delta")
        self.min_multiset = None if min_multiset is None else _check_positive_int(min_multiset, "min_multiset")
        self.separator = None if separator is None else _check_positive_int(separator, "separator", 0)
        if smoothing is not None:
            try:
                ok = float(smoothing) > 0 and math.isfinite(float(smoothing)) and not isinstance(smoothing, bool)
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(f"smoothing must be a positive number, got {smoothing!r}")
            smoothing = float(smoothing)
        self.smoothing = smoothing
        self.n_symbols: int | None = None
        self.separator_: int | None = None
        self.smoothing_: float | None = None
        self.threshold_: float | None = None
        self.transitions_: np.ndarray | None = None
        self.counts_: np.ndarray | None = None
        self.unigram_: np.ndarray | None = None
        self.probabilities_: np.ndarray | None = None
        self.learning_stats_: dict[str, Any] = {}

    # ------------------------------------------------------------------------------------------------ fitting
    def fit(self, train: np.ndarray, n_symbols: int, validation: np.ndarray | None = None) -> PdfaLearner:
        """Learn the graph from the words of ``train`` (trajectories cut at the separator), parse ``train`` through
        it for the counts and smooth them (beta chosen on ``validation`` if not fixed). Returns self."""
        n_symbols = _check_positive_int(n_symbols, "n_symbols")
        x = as_symbols(train, n_symbols, "train")
        val = None
        if validation is not None:
            val = as_symbols(validation, n_symbols, "validation", allow_empty=True)
            if val.size == 0:
                val = None
        if self.separator is not None:
            if self.separator >= n_symbols:
                raise ValueError(f"separator {self.separator} is outside [0, {n_symbols})")
            separator = self.separator
        else:
            separator = int(np.argmax(np.bincount(x, minlength=n_symbols)))
        seq, starts = word_trajectories(x, separator)

        if self.min_multiset is None:
            threshold = largeness_threshold(self.mu, self.delta, self.n_max_states, n_symbols)
        else:
            threshold = float(self.min_multiset)
        graph = _GraphLearner(seq, n_symbols, separator, self.mu, self.n_max_states, threshold)
        graph.learn(starts)
        trans = graph.finish()

        self.n_symbols = n_symbols
        self.separator_ = separator
        self.threshold_ = threshold
        self.transitions_ = trans
        self.counts_ = _count_pdfa(x, trans, separator, 0, trans.shape[0], n_symbols)
        self.unigram_ = (np.bincount(x, minlength=n_symbols) + 1.0) / (x.size + n_symbols)
        self.learning_stats_ = {
            "n_trajectories": int(starts.size),
            "merges": graph.n_merges,
            "promotions": graph.n_promotions,
            "leftover_candidates": len(graph.candidates),
            "blocked_candidates": len(graph.blocked),
        }
        if self.smoothing is not None:
            self._set_smoothing(self.smoothing)
        elif val is not None:
            scores = []
            for beta in SMOOTHING_GRID:
                self._set_smoothing(beta)
                scores.append(float(-np.mean(np.log2(self.predictive(val)))))
            self._set_smoothing(SMOOTHING_GRID[int(np.argmin(scores))])
            self.learning_stats_["validation_bps"] = dict(zip(map(str, SMOOTHING_GRID), scores, strict=True))
        else:
            self._set_smoothing(_DEFAULT_SMOOTHING)
        return self

    def _set_smoothing(self, beta: float) -> None:
        """O(s, sigma) = (c(s, sigma) + beta u(sigma)) / (c(s) + beta) from the stored counts and unigram."""
        counts = self.counts_.astype(np.float64)
        self.smoothing_ = float(beta)
        self.probabilities_ = (counts + beta * self.unigram_) / (counts.sum(axis=1, keepdims=True) + beta)

    def _require_fitted(self) -> int:
        if self.n_symbols is None or self.probabilities_ is None:
            raise RuntimeError("the PDFA is not fitted")
        return self.n_symbols

    # ------------------------------------------------------------------------------------------------ scoring
    def predictive(self, x: np.ndarray) -> np.ndarray:
        """P(x_n | x_<n) by running the PDFA over ``x`` from the initial state (restarting after each separator)."""
        v = self._require_fitted()
        x = as_symbols(x, v, "sequence", allow_empty=True)
        return _run_pdfa(x, self.transitions_, self.probabilities_, self.separator_, 0)

    def string_probability(self, word: np.ndarray) -> float:
        """Probability that the PDFA generates ``word`` followed by the separator, starting at s0 (the paper's
        O(s0, sigma_0 ... sigma_k)); ``word`` must not contain the separator."""
        v = self._require_fitted()
        word = as_symbols(word, v, "word", allow_empty=True)
        if np.any(word == self.separator_):
            raise ValueError("word contains the separator")
        return float(np.prod(self.predictive(np.concatenate([word, [self.separator_]]).astype(np.int64))))

    @property
    def n_states(self) -> int:
        """Number of safe states of the learned automaton (the end-of-trajectory state is implicit)."""
        self._require_fitted()
        return int(self.transitions_.shape[0])

    @property
    def n_parameters(self) -> int:
        """States x alphabet: one stored transition (target and probability) per state and symbol."""
        v = self._require_fitted()
        return self.n_states * v

    # ------------------------------------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike[str], metadata: dict[str, Any] | None = None) -> None:
        """Write transitions, counts and unigram (probabilities are recomputed from them) as .npz + JSON header."""
        v = self._require_fitted()
        arrays = {"transitions": self.transitions_, "counts": self.counts_, "unigram": self.unigram_}
        header = {
            "n_symbols": v,
            "separator": self.separator_,
            "smoothing": self.smoothing_,
            "threshold": self.threshold_,
            "params": {
                "mu": self.mu,
                "n_max_states": self.n_max_states,
                "delta": self.delta,
                "min_multiset": self.min_multiset,
                "separator": self.separator,
                "smoothing": self.smoothing,
            },
            "learning_stats": self.learning_stats_,
            "n_states": self.n_states,
            "n_parameters": self.n_parameters,
            "metadata": metadata or {},
        }
        save_arrays(path, self.kind, arrays, header)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PdfaLearner:
        """Read a model written by :meth:`save`; PeerFormatError if the file is not one."""
        arrays, header = load_arrays(path, cls.kind)
        try:
            model = cls(**header["params"])
            v = int(header["n_symbols"])
            trans = np.asarray(arrays["transitions"], dtype=np.int64)
            counts = np.asarray(arrays["counts"], dtype=np.int64)
            unigram = np.asarray(arrays["unigram"], dtype=np.float64)
            separator = int(header["separator"])
            if (
                trans.ndim != 2
                or trans.shape[1] != v
                or counts.shape != trans.shape
                or unigram.shape != (v,)
                or trans.size == 0
                or trans.min() < 0
                or trans.max() >= trans.shape[0]
                or not 0 <= separator < v
            ):
                raise ValueError("inconsistent arrays")
            model.n_symbols = v
            model.separator_ = separator
            model.threshold_ = header.get("threshold")
            model.transitions_ = trans
            model.counts_ = counts
            model.unigram_ = unigram
            model.learning_stats_ = dict(header.get("learning_stats") or {})
            model._set_smoothing(float(header["smoothing"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise PeerFormatError(f"{path}: damaged PDFA model ({exc})") from exc
        return model
