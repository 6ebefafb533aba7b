"""CHMMs from a notebook: an estimator with hmmlearn's conventions (hyper-parameters in the constructor,
``fit(X, lengths=None)``, ``score``, ``predict``, ``predict_proba``, ``decode``, ``sample``, fitted attributes
ending in ``_``), training by the plain ``chmm train``'s protocol and reading by the engine's implementations.

``X`` is what a researcher has in memory: a string (text, read as characters), a sequence of tokens (strings or
integers), a list of such sequences (independent sequences of different lengths), or hmmlearn's form, an integer
array of shape (n, 1) or (n,) cut into sequences by ``lengths``. Methods that read sequences return one result per
symbol of all of them, in order, as hmmlearn's do.

A CHMM is a categorical HMM whose emission matrix is one-hot (each clone emits its symbol only): ``startprob_``,
``transmat_`` and ``emissionprob_`` are that HMM's (hmmlearn's names), so ``hmmlearn.hmm.CategoricalHMM`` given them
computes the same log-likelihood and Viterbi path. The dense matrices are made only for models of at most
:data:`DENSE_STATES` clones; ``transitions_`` (a sparse matrix) and ``clone_symbol_`` describe any model.

A fitted estimator pickles (the model travels as the project's pickle-free file format, in memory) and
:meth:`CHMM.save` / :meth:`CHMM.load` use that format on disk. :class:`Learner` puts the peer learners (n-gram,
sequence memoizer, HMM, ...) behind the same ``fit`` / ``score`` / ``bits_per_symbol``."""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse

from engine.backends import engines
from engine.backends.cpu import inference
from engine.backends.model_files import load_model, save_model
from engine.backends.reading import encode_for_model
from engine.corpora.documents import Document
from engine.corpora.sequences import sequences_from_tokens
from engine.corpora.text import UNITS
from engine.errors import CHMMError
from engine.peers.learners import LEARNERS, score_any, train_peer_text
from engine.training import TrainOptions, train_text
from engine.training.learning import IterationRecord
from engine.training.restarts import RESTART_PROCESSES_ENV

__all__ = ["CHMM", "DENSE_STATES", "ConvergenceMonitor", "Learner"]

DENSE_STATES = 5_000
"""The most clones for which the dense ``transmat_``, ``emissionprob_`` and ``predict_proba`` are made (a dense
transition matrix of 5,000 clones is 200 MB in float64)."""

_DEFAULTS = TrainOptions()
_TEXT, _INTEGERS, _TOKENS = "text", "integers", "tokens"
_TOKEN_UNIT = UNITS[2]  # the unit of token sequences


@dataclass(frozen=True)
class ConvergenceMonitor:
    """How training went (hmmlearn's ``monitor_``): the validation (else training) bits per symbol of each
    iteration in order, the iterations run and whether training stopped by itself (converged or stopped early on
    validation) rather than at its limit or budget."""

    history: tuple[float, ...]
    iter: int
    converged: bool
    stopped: str


def _is_integer(token: Any) -> bool:
    return isinstance(token, (int, np.integer)) and not isinstance(token, (bool, np.bool_))


def _scalar(token: Any) -> bool:
    return isinstance(token, (str, np.str_)) or _is_integer(token)


def as_sequences(X: Any, lengths: Any = None) -> tuple[list[Any], str]:
    """``X`` (and ``lengths``) as a list of sequences and their kind: text (a string, or a list of strings with
    whitespace inside: documents, read as characters), integers or tokens. A list of one-symbol lists reads as
    hmmlearn's (n, 1) X. CHMMError in one sentence for anything else."""
    if isinstance(X, str):
        if lengths is not None:
            raise CHMMError("lengths cut token sequences; text is given as one string or a list of strings")
        return [X], _TEXT
    if isinstance(X, np.ndarray) or (isinstance(X, (list, tuple)) and X and all(
            isinstance(s, (list, tuple)) and len(s) == 1 for s in X) and lengths is not None):  # fmt: skip
        array = np.asarray(X, dtype=object)
        if array.ndim == 2 and array.shape[1] != 1 or array.ndim > 2:
            raise CHMMError(f"X must have shape (n, 1) or (n,) as hmmlearn's categorical X, got {array.shape}")
        X = list(array.ravel())
    if lengths is not None:
        flat = list(X)
        sizes = [int(n) for n in np.asarray(lengths).ravel()]
        if any(n < 1 for n in sizes) or sum(sizes) != len(flat):
            raise CHMMError(f"the lengths must be positive and add up to the {len(flat):,} symbols of X")
        bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        sequences = [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    else:
        items = list(X)
        if items and all(isinstance(t, str) for t in items) and any(len(t.split()) > 1 for t in items):
            return items, _TEXT  # documents of text
        if all(isinstance(t, (list, tuple)) and len(t) == 1 for t in items) and items:
            items = [t[0] for t in items]  # hmmlearn's X of shape (n, 1), as a list
        if all(_scalar(t) or isinstance(t, float) for t in items):
            sequences = [items]
        else:
            sequences = [list(np.asarray(t).ravel()) if isinstance(t, np.ndarray) else list(t)
                         if isinstance(t, (list, tuple)) else [t] for t in items]  # fmt: skip
    if not sequences or any(len(s) == 0 for s in sequences):
        raise CHMMError("every sequence of X needs at least one symbol")
    if not all(_scalar(t) for s in sequences for t in s):
        raise CHMMError("X's symbols must be integers or strings (tokens), or X a string of text")
    return sequences, _INTEGERS if all(_is_integer(t) for s in sequences for t in s) else _TOKENS


def _corpus(sequences: list[Any], kind: str) -> tuple[Any, str, bool]:
    """What training reads for these sequences: the text (one) or its documents, or the token sequences as
    documents (several split by sequence, one within), with the unit and whether it is split by sequence."""
    if kind == _TEXT:
        documents = [Document(f"document {n}", s) for n, s in enumerate(sequences)]
        return (sequences[0] if len(sequences) == 1 else documents), UNITS[0], False
    documents = sequences_from_tokens(sequences)
    return (documents if len(documents) > 1 else documents[0].text), _TOKEN_UNIT, len(documents) > 1


def _texts(X: Any, lengths: Any, fitted_kind: str) -> list[str]:
    """Each sequence of X as raw text of the fitted model's kind (tokens joined by spaces); CHMMError when X holds
    text and the model reads tokens, or the other way."""
    sequences, kind = as_sequences(X, lengths)
    if (kind == _TEXT) != (fitted_kind == _TEXT):
        raise CHMMError(f"this model reads {'text' if fitted_kind == _TEXT else 'tokens'}; X holds {kind}")
    return sequences if kind == _TEXT else [" ".join(str(t) for t in s) for s in sequences]


@contextlib.contextmanager
def _restart_processes(jobs: int | None) -> Iterator[None]:
    """Restarts run at most ``jobs`` at once for the duration (None: the command's rule, one per core)."""
    if jobs is None:
        yield
        return
    before = os.environ.get(RESTART_PROCESSES_ENV)
    os.environ[RESTART_PROCESSES_ENV] = str(max(1, int(jobs)))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(RESTART_PROCESSES_ENV, None)
        else:
            os.environ[RESTART_PROCESSES_ENV] = before


class CHMM:
    """A cloned HMM estimator (Dedieu et al. 2019) with hmmlearn's interface.

    **X** (for ``fit`` and every method that reads sequences): a string (text, read as characters and normalised
    the paper's way: lowercase letters and spaces, numbers written out, and, when scoring, words the training text
    never had as "rare"); a list of tokens (strings or integers); a list of such lists (independent sequences of
    different lengths); or hmmlearn's form, an integer array of shape (n, 1) or (n,), or such a list, cut into
    sequences by ``lengths``. A list of strings with spaces inside is a list of text documents. Results per symbol
    come for all sequences in order, as hmmlearn's do.

    **Hyper-parameters** are the plain ``chmm train``'s, with its defaults: ``states`` and ``pseudocount``
    (``"auto"``: chosen on a held-out tenth of X within ``budget`` minutes, default 10, then refitted on all of X);
    ``algorithm`` (online, batch or viterbi EM); ``iterations`` (the most EM iterations of each run: of each restart
    on 90% of X and of the refit on all of it, so not hmmlearn's ``n_iter`` of one run); ``restarts`` (None: the
    command's; ``restarts=1`` with ``states`` and ``pseudocount`` given is the nearest to hmmlearn's one run);
    ``min_count`` (tokens seen fewer times become one rare symbol); ``seed``; ``backend`` ("cpu" or "gpu");
    ``dtype`` of T ("float32", or "float64" where a comparison needs every digit); ``jobs`` restarts at once in
    worker processes (None: one per core; in a script call :meth:`fit` under ``if __name__ == "__main__":``, as for
    any library that starts processes, or give 1); ``verbose`` prints a line per iteration. hmmlearn's
    ``n_components`` and ``random_state`` are ``states`` and ``seed``.

    **Fitted attributes**: ``model_`` (the engine's model), ``symbols_``, ``n_states_``, ``n_features_``,
    ``clone_symbol_``, ``startprob_``, ``transitions_`` (sparse T), ``transmat_`` and ``emissionprob_`` (dense, for
    models of at most 5,000 clones), ``history_`` (each EM iteration), ``monitor_`` (bits per symbol by iteration:
    lower is better), ``summary_`` (what ``chmm train --json`` prints).
    """

    def __init__(
        self,
        states: int | str = _DEFAULTS.states,
        pseudocount: float | str = _DEFAULTS.pseudocount,
        algorithm: str = _DEFAULTS.algorithm,
        iterations: int = _DEFAULTS.iterations,
        budget: float | None = _DEFAULTS.budget,
        restarts: int | None = _DEFAULTS.restarts,
        min_count: int = _DEFAULTS.min_count,
        seed: int = _DEFAULTS.seed,
        backend: str = _DEFAULTS.backend,
        dtype: str = _DEFAULTS.dtype,
        jobs: int | None = None,
        verbose: bool = False,
    ) -> None:
        self.states = states
        self.pseudocount = pseudocount
        self.algorithm = algorithm
        self.iterations = iterations
        self.budget = budget
        self.restarts = restarts
        self.min_count = min_count
        self.seed = seed
        self.backend = backend
        self.dtype = dtype
        self.jobs = jobs
        self.verbose = verbose

    # ------------------------------------------------------------------ parameters (scikit-learn's protocol)
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's hyper-parameters and their values."""
        names = inspect.signature(type(self).__init__).parameters
        return {name: getattr(self, name) for name in names if name != "self"}

    def set_params(self, **params: Any) -> CHMM:
        """Set hyper-parameters by name (an unknown name is refused); returns the estimator."""
        unknown = sorted(set(params) - set(self.get_params()))
        if unknown:
            raise CHMMError(f"CHMM has no hyper-parameter {', '.join(unknown)}; it has {', '.join(self.get_params())}")
        for name, value in params.items():
            setattr(self, name, value)
        self._engine = None  # read again on the backend now named
        return self

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.get_params().items() if v != CHMM().get_params()[k]}
        return f"CHMM({', '.join(f'{k}={v!r}' for k, v in changed.items())})"

    def _options(self, unit: str, by_sequence: bool = False) -> TrainOptions:
        options = replace(
            _DEFAULTS,
            states=self.states,
            pseudocount=self.pseudocount,
            algorithm=self.algorithm,
            iterations=self.iterations,
            budget=self.budget,
            restarts=self.restarts,
            min_count=self.min_count,
            seed=self.seed,
            backend=self.backend,
            dtype=self.dtype,
            unit=unit,
            by_sequence=by_sequence,
            test_fraction=0.0,  # every symbol of X is trained on: the held-out tenth only chooses, then the refit
        )
        options.validate()
        return options

    # ------------------------------------------------------------------ fitting
    def fit(self, X: Any, lengths: Any = None) -> CHMM:
        """Train on ``X`` (see the module docstring) by the plain command's protocol: the states and pseudocount
        chosen on the last tenth (of the symbols, or of the sequences when there are several), then refitted on all
        of ``X``. Returns the estimator, fitted."""
        sequences, kind = as_sequences(X, lengths)
        callback = _print_record if self.verbose else None
        corpus, unit, by_sequence = _corpus(sequences, kind)
        with _restart_processes(self.jobs):
            outcome = train_text(corpus, self._options(unit, by_sequence), callback=callback)
        self._fitted(outcome.model, kind, outcome.summary, list(outcome.result.history), outcome.result.stopped)
        return self

    def _fitted(self, model: Any, kind: str, summary: dict[str, Any], history: list[Any], stopped: str) -> None:
        self.model_ = model
        self.kind_ = kind
        self.summary_ = summary
        self.history_ = history
        values = tuple(r.validation_bps if math.isfinite(r.validation_bps) else r.train_bps for r in history)
        self.monitor_ = ConvergenceMonitor(values, len(history), stopped in ("converged", "early_stopping"), stopped)
        self._engine: Any = None

    def _check_fitted(self) -> Any:
        if getattr(self, "model_", None) is None:
            raise CHMMError("this CHMM is not fitted yet: call fit(X) or CHMM.load(path) first")
        return self.model_

    # ------------------------------------------------------------------ fitted attributes
    def _order(self) -> np.ndarray:
        """The model's symbol indices in the order of ``symbols_``: integers by value, the rare symbol last."""
        model = self._check_fitted()
        if self.kind_ != _INTEGERS:
            return np.arange(model.n_symbols)
        numeric = [(0, int(s)) if s.lstrip("-").isdigit() else (1, 0) for s in model.symbols]
        return np.array(sorted(range(model.n_symbols), key=lambda k: numeric[k]), dtype=np.int64)

    @property
    def symbols_(self) -> list[Any]:
        """The alphabet, symbol k emitted by the clones with ``clone_symbol_ == k`` (column k of
        ``emissionprob_``): integers as given and in their order, so that where X holds 0..K-1 symbol k is k; the
        rare symbol (tokens seen fewer than ``min_count`` times, and unseen ones) last."""
        model = self._check_fitted()
        names = [model.symbols[k] for k in self._order()]
        if self.kind_ != _INTEGERS:
            return names
        return [int(s) if s.lstrip("-").isdigit() else s for s in names]

    @property
    def n_states_(self) -> int:
        """The number of clones (hidden states; hmmlearn's ``n_components``)."""
        return int(self._check_fitted().n_states)

    @property
    def n_features_(self) -> int:
        """The number of symbols."""
        return int(self._check_fitted().n_symbols)

    @property
    def clone_symbol_(self) -> np.ndarray:
        """The symbol each clone emits (its index in ``symbols_``), shape (n_states_,)."""
        position = np.empty(self.n_features_, dtype=np.int64)
        position[self._order()] = np.arange(self.n_features_)
        return position[np.asarray(self._check_fitted().layout.clone_symbol(), dtype=np.int64)]

    @property
    def startprob_(self) -> np.ndarray:
        """pi, the first clone's distribution, float64, shape (n_states_,)."""
        return np.asarray(self._check_fitted().pi, dtype=np.float64)

    @property
    def transitions_(self) -> scipy.sparse.csr_matrix:
        """T as a sparse (n_states_ x n_states_) float64 matrix: its stored non-zero transitions."""
        model = self._check_fitted()
        rows, cols, values, _ = model.transitions()
        return scipy.sparse.csr_matrix((values, (rows, cols)), shape=(model.n_states, model.n_states))

    def _dense_check(self, what: str) -> None:
        if self.n_states_ > DENSE_STATES:
            raise CHMMError(
                f"{what} is made dense for models of at most {DENSE_STATES:,} clones and this one has "
                f"{self.n_states_:,}; predict and decode give the MAP clones, transitions_ and clone_symbol_ the model"
            )

    @property
    def transmat_(self) -> np.ndarray:
        """T as a dense float64 array (hmmlearn's ``transmat_``), for models of at most :data:`DENSE_STATES`. A
        clone that no transition leaves (its symbol was never followed in training, as the rare symbol's) has a row
        of zeros, which hmmlearn refuses: any row there leaves the probability of sequences without it unchanged."""
        self._dense_check("transmat_")
        return self.transitions_.toarray()

    @property
    def emissionprob_(self) -> np.ndarray:
        """The one-hot emission matrix, shape (n_states_, n_features_) (column k: ``symbols_[k]``), for models of at
        most :data:`DENSE_STATES` clones."""
        self._dense_check("emissionprob_")
        out = np.zeros((self.n_states_, self.n_features_))
        out[np.arange(self.n_states_), self.clone_symbol_] = 1.0
        return out

    # ------------------------------------------------------------------ reading sequences
    def encode(self, X: Any, lengths: Any = None) -> list[np.ndarray]:
        """``X`` as the model's symbol indices, one array per sequence: text normalised as in training, tokens
        outside the vocabulary read as its rare symbol (CHMMError where it has none)."""
        model = self._check_fitted()
        texts = _texts(X, lengths, self.kind_)
        return [encode_for_model(model, t) for t in texts]

    def _state(self) -> tuple[Any, Any]:
        if getattr(self, "_engine", None) is None:
            engine = engines.engine_for(self._check_fitted(), self.backend)
            self._engine = (engine, engine.load(self.model_))
        return self._engine

    def score(self, X: Any, lengths: Any = None) -> float:
        """log P(X) in nats, summed over the sequences (hmmlearn's ``score``): the exact forward pass of the CHMM
        (eq. 1 of the paper), without the back-off :meth:`bits_per_symbol` adds; -inf when X is impossible."""
        engine, state = self._state()
        total = 0.0
        for x in self.encode(X, lengths):
            run = engine.forward(state, x)
            total += -math.inf if run.zero_events else float(np.sum(np.log(run.predictive)))
        return total

    def bits_per_symbol(self, X: Any, lengths: Any = None) -> float:
        """Bits per symbol of X with the model's back-off (a pair never seen in training given its due), as
        ``chmm score`` reads a text; each sequence of X from its own start (``chmm score`` reads a file as one)."""
        engine, state = self._state()
        return float(engines.score_sequences(engine, state, self.encode(X, lengths)).bps)

    def predict(self, X: Any, lengths: Any = None) -> np.ndarray:
        """The Viterbi clone path of each sequence, concatenated (-1s for an impossible sequence)."""
        return self.decode(X, lengths)[1]

    def decode(
        self, X: Any = None, lengths: Any = None, evidence: list[dict[Any, float]] | None = None
    ) -> tuple[float, np.ndarray]:
        """The MAP clone path and its log-probability (nats), summed over the sequences (hmmlearn's ``decode``).
        With ``evidence`` instead of X: soft evidence, one {symbol: likelihood} per position (a symbol as in
        ``symbols_``); the path then maximises P(z) times the evidence of each position's symbol."""
        engine, state = self._state()
        if evidence is not None:
            if X is not None:
                raise CHMMError("give X or evidence, not both")
            index = dict(zip(self.symbols_, self._order().tolist(), strict=True))
            unknown = sorted({str(s) for position in evidence for s in position if s not in index})
            if unknown:
                raise CHMMError(f"the evidence names symbols outside the model's alphabet: {', '.join(unknown[:10])}")
            found = engine.viterbi(state, inference.Evidence.from_lists([{index[s]: w for s, w in p.items()}
                                                                         for p in evidence]))  # fmt: skip
            return float(found.log_probability), np.asarray(found.clones)
        if X is None:
            raise CHMMError("give X (or evidence) to decode")
        paths, total = [], 0.0
        for x in self.encode(X, lengths):
            found = engine.viterbi(state, x)
            paths.append(np.asarray(found.clones))
            total += float(found.log_probability)
        return total, np.concatenate(paths)

    def predict_proba(self, X: Any, lengths: Any = None) -> np.ndarray:
        """Each position's posterior over the clones, P(z_n | the whole sequence) (forward-backward, the paper's
        gamma), shape (symbols, n_states_), for models of at most :data:`DENSE_STATES` clones."""
        return self.score_samples(X, lengths)[1]

    def score_samples(self, X: Any, lengths: Any = None) -> tuple[float, np.ndarray]:
        """hmmlearn's ``score_samples``: :meth:`score` and :meth:`predict_proba` in one pass."""
        self._dense_check("predict_proba")
        engine, state = self._state()
        dense = engine.as_dense(state, "posteriors")
        parts, total = [], 0.0
        for x in self.encode(X, lengths):
            found = inference.posteriors(dense, x)
            parts.append(found.dense(dense.layout, x))
            total += found.log_likelihood
        return total, np.concatenate(parts)

    def sample(
        self, n_samples: int = 1, random_state: int | np.random.Generator | None = None
    ) -> tuple[Any, np.ndarray]:
        """``n_samples`` symbols drawn from the model and the clones that emitted them (hmmlearn's ``sample``): the
        symbols by following T from pi, the clones drawn from their posterior given those symbols (backward
        sampling from the forward messages), which together is a draw of (symbols, clones) from the CHMM. Symbols
        come as X came: an (n, 1) integer array, a list of tokens, or a string. Fewer come back where the walk
        reaches a clone that no transition leaves."""
        if not _is_integer(n_samples) or n_samples < 1:
            raise CHMMError(f"n_samples must be a whole number at least 1, got {n_samples!r}")
        engine, state = self._state()
        rng = random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)
        x = np.asarray(engine.sample(state, int(n_samples), rng), dtype=np.int64)
        clones = _clones_given_symbols(engine.as_dense(state, "sampling clones"), x, rng)
        if self.kind_ == _TEXT:
            return self.model_.decode_symbols(x), clones
        if self.kind_ == _INTEGERS:
            names = self.model_.symbols
            return np.array([int(names[s]) if names[s].lstrip("-").isdigit() else -1 for s in x])[:, None], clones
        return [self.model_.symbols[s] for s in x], clones

    def n_parameters(self) -> int:
        """The free parameters: each clone's non-zero transitions less one (its row sums to 1); pi and the one-hot
        emissions are fixed."""
        rows = np.asarray(self.transitions_.getnnz(axis=1))
        return int(np.sum(np.maximum(rows - 1, 0)))

    def aic(self, X: Any, lengths: Any = None) -> float:
        """Akaike's information criterion, -2 log P(X) + 2 p (p: :meth:`n_parameters`)."""
        return -2 * self.score(X, lengths) + 2 * self.n_parameters()

    def bic(self, X: Any, lengths: Any = None) -> float:
        """The Bayesian information criterion, -2 log P(X) + p log N (N symbols)."""
        n = sum(len(x) for x in self.encode(X, lengths))
        return -2 * self.score(X, lengths) + self.n_parameters() * math.log(n)

    # ------------------------------------------------------------------ files and pickling
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the fitted model to ``path`` in the project's format (``.npz`` and JSON, no pickle), with the
        estimator's hyper-parameters and what X held in its metadata; ``chmm`` and the app read it too."""
        model = self._check_fitted()
        params = {k: v for k, v in self.get_params().items() if k != "verbose"}
        metadata = dict(model.metadata) | {"estimator": {"params": params, "kind": self.kind_}}
        save_model(model.with_arrays(metadata=metadata), path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CHMM:
        """A fitted estimator from a model file (any CHMM file: one written by ``chmm train`` reads as text or
        tokens by its unit)."""
        model = load_model(path)
        saved = model.metadata.get("estimator") if isinstance(model.metadata.get("estimator"), dict) else {}
        known = set(inspect.signature(cls.__init__).parameters) - {"self"}
        params = saved.get("params") if isinstance(saved.get("params"), dict) else {}
        estimator = cls(**{k: v for k, v in params.items() if k in known})
        kind = saved.get("kind") if saved.get("kind") in (_TEXT, _INTEGERS, _TOKENS) else None
        kind = kind or (_TEXT if model.codec.unit == UNITS[0] else _TOKENS)
        records = model.metadata.get("history") if isinstance(model.metadata.get("history"), list) else []
        history = [_record(r) for r in records if isinstance(r, dict)]
        estimator._fitted(model, kind, {}, [r for r in history if r is not None], str(model.metadata.get("stopped")))
        return estimator

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k not in ("model_", "_engine")}
        if getattr(self, "model_", None) is not None:
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "model.npz"
                save_model(self.model_, path)
                state["model_file"] = path.read_bytes()
            state["history_"] = [tuple(r) for r in self.history_]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        data = state.pop("model_file", None)
        self.__dict__.update(state)
        self._engine = None
        if data is not None:
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "model.npz"
                path.write_bytes(data)
                self.model_ = load_model(path)
            self.history_ = [IterationRecord(*r) for r in self.history_]


def _clones_given_symbols(model: Any, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A clone path drawn from P(z | x) by backward sampling: z_N from the last filtered message, then each z_n
    from alpha_n(z) T(z, z_{n+1}) (the forward messages of the paper's section 3)."""
    if len(x) == 0:
        return np.zeros(0, dtype=np.int64)
    run = inference.forward(model, x, store=True)
    layout = model.layout
    clones = np.empty(len(x), dtype=np.int64)
    offsets = run.offsets

    def draw(weights: np.ndarray, n: int) -> int:
        weights = np.asarray(weights, dtype=np.float64)
        total = weights.sum()
        p = weights / total if total > 0 else np.full(len(weights), 1 / len(weights))
        return int(layout.clone_start[x[n]] + rng.choice(len(weights), p=p))

    last = len(x) - 1
    clones[last] = draw(run.alpha[offsets[last] : offsets[last + 1]], last)
    for n in range(last - 1, -1, -1):
        block = model.block(int(x[n]), int(x[n + 1]))
        column = clones[n + 1] - layout.clone_start[x[n + 1]]
        clones[n] = draw(run.alpha[offsets[n] : offsets[n + 1]] * block[:, column], n)
    return clones


def _record(saved: dict[str, Any]) -> IterationRecord | None:
    """An iteration as a model file's history keeps it (a JSON object), or None when it does not read as one."""
    try:
        keys = ("train_bps", "validation_bps")
        numbers = {k: float(saved[k]) if saved.get(k) is not None else math.nan for k in keys}
        return IterationRecord(int(saved["iteration"]), numbers["train_bps"], numbers["validation_bps"],
                               float(saved.get("seconds", 0.0)), refit=bool(saved.get("refit", False)))  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None


def _print_record(record: Any) -> None:
    stage = "refit" if record.refit else f"setting {record.candidate + 1}, restart {record.restart}"
    print(f"{stage}: iteration {record.iteration}, train {record.train_bps:.4f}, validation "
          f"{record.validation_bps:.4f} bits per symbol, {record.seconds:.1f} s", flush=True)  # fmt: skip


class Learner:
    """A peer learner (``kind``: one of the registered learners but the CHMM, e.g. "ngram", "seqm", "hmm") behind
    the estimator's interface: ``fit(X, lengths)`` on the same X as :class:`CHMM`, read as the CHMM reads it (text
    normalised the paper's way, tokens seen fewer than ``min_count`` times as one rare symbol, several sequences split
    by sequence) and trained by the same protocol (``chmm train --learner KIND``) on all of X; :meth:`score` and
    :meth:`bits_per_symbol` as the CHMM's. ``options`` are the learner's (``--option NAME=VALUE``)."""

    def __init__(self, kind: str = "ngram", min_count: int = _DEFAULTS.min_count, **options: Any) -> None:
        if kind not in LEARNERS or kind == LEARNERS[0]:
            raise CHMMError(f"unknown peer learner {kind!r}; choose one of {', '.join(LEARNERS[1:])}")
        self.kind = kind
        self.min_count = min_count
        self.options = options

    def fit(self, X: Any, lengths: Any = None) -> Learner:
        """Train on all of X (its last tenth chooses what validation chooses, then the refit)."""
        sequences, kind = as_sequences(X, lengths)
        corpus, unit, by_sequence = _corpus(sequences, kind)
        self.learner_, self.summary_ = train_peer_text(
            corpus, self.kind, self.options, normalisation=_DEFAULTS.normalisation, test_fraction=0.0, unit=unit,
            min_count=self.min_count, by_sequence=by_sequence,
        )  # fmt: skip
        self.kind_ = kind
        return self

    def _scores(self, X: Any, lengths: Any) -> tuple[float, int]:
        if getattr(self, "learner_", None) is None:
            raise CHMMError(f"this {self.kind} learner is not fitted yet: call fit(X) first")
        found = [score_any(self.learner_, t) for t in _texts(X, lengths, self.kind_)]
        return float(sum(-r.log2_probability for r in found)), int(sum(r.symbols for r in found))

    def bits_per_symbol(self, X: Any, lengths: Any = None) -> float:
        """Bits per symbol of X, each sequence from its start."""
        bits, symbols = self._scores(X, lengths)
        return bits / max(symbols, 1)

    def score(self, X: Any, lengths: Any = None) -> float:
        """log P(X) in nats, summed over the sequences."""
        return -self._scores(X, lengths)[0] * math.log(2)
