"""The graph of safe states that the PAC PDFA learner grows (Gavaldà et al. 2006, Table 1): suffix multisets,
candidates, merges and promotions, and the final mapping of leftover candidates. The learner, its text model and
the algorithm in words are :mod:`engine.peers.pdfa`."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

_COLUMN_CHUNK = 512


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


class GraphLearner:
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
