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

import math
import operator
import os
from typing import Any

import numpy as np
from numba import njit

from engine.errors import CHMMError
from engine.peers import registry
from engine.peers.base import PeerFormatError, as_symbols, load_arrays, save_arrays
from engine.peers.pdfa_graph import GraphLearner, word_trajectories

__all__ = ["PdfaLearner", "largeness_threshold", "word_trajectories"]

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
        raise CHMMError(f"{what} must be an integer, got {value!r}")
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise CHMMError(f"{what} must be an integer, got {value!r}") from None
    if number < minimum:
        raise CHMMError(f"{what} must be at least {minimum}, got {number}")
    return int(number)


def _check_open_unit(value: object, what: str, upper: float = 1.0) -> float:
    """``value`` as a float in (0, upper), or ValueError."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise CHMMError(f"{what} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not (0.0 < number < upper):
        raise CHMMError(f"{what} must lie in (0, {upper:g}), got {value!r}")
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
                raise CHMMError(f"smoothing must be a positive number, got {smoothing!r}")
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
                raise CHMMError(f"separator {self.separator} is outside [0, {n_symbols})")
            separator = self.separator
        else:
            separator = int(np.argmax(np.bincount(x, minlength=n_symbols)))
        seq, starts = word_trajectories(x, separator)

        if self.min_multiset is None:
            threshold = largeness_threshold(self.mu, self.delta, self.n_max_states, n_symbols)
        else:
            threshold = float(self.min_multiset)
        graph = GraphLearner(seq, n_symbols, separator, self.mu, self.n_max_states, threshold)
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
            raise CHMMError("word contains the separator")
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
                raise CHMMError("inconsistent arrays")
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


registry.register(
    registry.Learner(
        "pdfa",
        "PAC PDFA (Gavaldà et al.)",
        "PAC PDFA",
        "#2ca02c",
        factory="engine.peers.pdfa:PdfaLearner",
        seconds_per_symbol=4 / 106_910,
        states_option="n_max_states",
        refit=lambda learner, options: options | {"smoothing": float(learner.smoothing_)},
    )
)
