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
from collections import Counter
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
from engine.corpora.text import RARE_TOKEN, UNITS
from engine.errors import CHMMError
from engine.peers import base as peer_base
from engine.peers.learners import LEARNERS, make_learner
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


def as_sequences(X: Any, lengths: Any = None) -> tuple[list[Any], str]:
    """``X`` (and ``lengths``) as a list of sequences and their kind: text (strings read as characters), integers or
    tokens. CHMMError in one sentence for anything else."""
    if isinstance(X, str):
        if lengths is not None:
            raise CHMMError("lengths cut token sequences; text is given as one string or a list of strings")
        return [X], _TEXT
    if lengths is not None:
        flat = list(np.asarray(X).ravel()) if isinstance(X, np.ndarray) else list(X)
        sizes = [int(n) for n in np.asarray(lengths).ravel()]
        if any(n < 1 for n in sizes) or sum(sizes) != len(flat):
            raise CHMMError(f"the lengths must be positive and add up to the {len(flat):,} symbols of X")
        bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        sequences = [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    elif isinstance(X, np.ndarray):
        if X.ndim == 2 and X.shape[1] == 1 or X.ndim == 1:
            sequences = [list(X.ravel())]
        else:
            raise CHMMError(f"X must have shape (n, 1) or (n,) as hmmlearn's categorical X, got {X.shape}")
    else:
        items = list(X)
        if items and all(isinstance(s, str) for s in items) and any(len(s.split()) > 1 for s in items):
            return items, _TEXT  # documents of text
        scalar = all(isinstance(t, str) or _is_integer(t) for t in items)
        sequences = [items] if scalar else [list(np.asarray(s).ravel()) if isinstance(s, np.ndarray) else list(s)
                                            for s in items]  # fmt: skip
    if not sequences or any(len(s) == 0 for s in sequences):
        raise CHMMError("every sequence of X needs at least one symbol")
    integers = all(_is_integer(t) for s in sequences for t in s)
    if not integers and not all(isinstance(t, (str, np.str_)) or _is_integer(t) for s in sequences for t in s):
        raise CHMMError("X's symbols must be integers or strings")
    return sequences, _INTEGERS if integers else _TOKENS


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

    Hyper-parameters are the plain ``chmm train``'s, with its defaults: ``states`` and ``pseudocount``
    (``"auto"``: chosen on the held-out tenth within ``budget`` minutes, then refitted on all of ``X``),
    ``algorithm`` (online, batch or viterbi EM), ``iterations``, ``restarts`` (None: the command's), ``min_count``
    (tokens seen fewer times become one rare symbol), ``seed``, ``backend`` ("cpu" or "gpu"), ``dtype`` (of T:
    "float32", or "float64" where a comparison needs every digit); ``jobs`` restarts at
    once in worker processes (None: one per core; in a script, call :meth:`fit` under ``if __name__ ==
    "__main__":``, as for any library that starts processes, or give 1); ``verbose`` prints a line per iteration.
    hmmlearn's ``n_components``, ``n_iter`` and ``random_state`` are ``states``, ``iterations`` and ``seed``.
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
        with _restart_processes(self.jobs):
            if kind == _TEXT:
                corpus: Any = sequences[0] if len(sequences) == 1 else [Document(f"document {n}", s)
                                                                        for n, s in enumerate(sequences)]  # fmt: skip
                outcome = train_text(corpus, self._options(UNITS[0]), callback=callback)
            else:  # as the command reads a file of token sequences: several split by sequence, one within
                documents = sequences_from_tokens(sequences)
                corpus = documents if len(documents) > 1 else documents[0].text
                outcome = train_text(corpus, self._options(_TOKEN_UNIT, len(documents) > 1), callback=callback)
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
    @property
    def symbols_(self) -> list[Any]:
        """The alphabet: symbol k is emitted by the clones with ``clone_symbol_ == k`` (integers as given; the rare
        symbol, where there is one, as its name)."""
        model = self._check_fitted()
        if self.kind_ != _INTEGERS:
            return list(model.symbols)
        return [int(s) if s.lstrip("-").isdigit() else s for s in model.symbols]

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
        """The symbol each clone emits, shape (n_states_,)."""
        return np.asarray(self._check_fitted().layout.clone_symbol(), dtype=np.int64)

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
                f"{self.n_states_:,}; use transitions_ and clone_symbol_"
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
        sequences, kind = as_sequences(X, lengths)
        if (kind == _TEXT) != (self.kind_ == _TEXT):
            raise CHMMError(f"this CHMM reads {'text' if self.kind_ == _TEXT else 'tokens'}; X holds {kind}")
        texts = sequences if kind == _TEXT else [" ".join(str(t) for t in s) for s in sequences]
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
        """Bits per symbol of X as ``chmm score`` reads it: each sequence from its start, a pair never seen in
        training given its due by the model's back-off."""
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
            index = {s: k for k, s in enumerate(self.symbols_)}
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
        engine, state = self._state()
        rng = random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)
        x = np.asarray(engine.sample(state, int(n_samples), rng), dtype=np.int64)
        clones = _clones_given_symbols(engine.as_dense(state, "sampling clones"), x, rng)
        if self.kind_ == _TEXT:
            return self.model_.decode_symbols(x), clones
        symbols = self.symbols_
        if self.kind_ == _INTEGERS:
            return np.array([symbols[s] if _is_integer(symbols[s]) else -1 for s in x], dtype=np.int64)[:, None], clones
        return [symbols[s] for s in x], clones

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
        history = model.metadata.get("history") if isinstance(model.metadata.get("history"), list) else []
        estimator._fitted(model, kind, {}, [], str(model.metadata.get("stopped", "")))
        estimator.summary_ = {"history": history}
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


def _print_record(record: Any) -> None:
    stage = "refit" if record.refit else f"setting {record.candidate + 1}, restart {record.restart}"
    print(f"{stage}: iteration {record.iteration}, train {record.train_bps:.4f}, validation "
          f"{record.validation_bps:.4f} bits per symbol, {record.seconds:.1f} s", flush=True)  # fmt: skip


class Learner:
    """A peer learner (``kind``: one of the registered learners but the CHMM, e.g. "ngram", "seqm", "hmm") behind
    the estimator's interface: ``fit(X, lengths)`` on the same X as :class:`CHMM` (its own vocabulary of the
    training symbols seen at least ``min_count`` times, as the CHMM's, one rare symbol for the rest), :meth:`score`
    and :meth:`bits_per_symbol`. ``options`` are the learner's (as ``chmm train --learner KIND --option
    NAME=VALUE``)."""

    def __init__(self, kind: str = "ngram", min_count: int = _DEFAULTS.min_count, **options: Any) -> None:
        if kind not in LEARNERS or kind == LEARNERS[0]:
            raise CHMMError(f"unknown peer learner {kind!r}; choose one of {', '.join(LEARNERS[1:])}")
        self.kind = kind
        self.min_count = min_count
        self.options = options

    def fit(self, X: Any, lengths: Any = None) -> Learner:
        """Train on all of X (its sequences joined in order; the last tenth is the learner's validation text where
        it takes one)."""
        sequences, kind = as_sequences(X, lengths)
        symbols = [list(s) for s in sequences]  # a text's characters, or the tokens
        counts = Counter(str(t) for s in symbols for t in s)
        vocabulary = sorted(t for t, n in counts.items() if n >= self.min_count or kind == _TEXT)
        self.kind_ = kind
        self.symbols_ = vocabulary + [RARE_TOKEN]
        x = np.concatenate([self._codes(s) for s in symbols])
        cut = len(x) - max(1, len(x) // 10)
        learner = make_learner(self.kind, **self.options)
        self.learner_ = learner.fit(x[:cut], len(self.symbols_), validation=x[cut:]) if cut > 0 else learner.fit(
            x, len(self.symbols_)
        )
        return self

    def _codes(self, sequence: Any) -> np.ndarray:
        index = {s: k for k, s in enumerate(self.symbols_)}
        rare = len(self.symbols_) - 1
        return np.fromiter((index.get(str(t), rare) for t in sequence), dtype=np.int64, count=len(sequence))

    def _parts(self, X: Any, lengths: Any) -> list[np.ndarray]:
        if getattr(self, "learner_", None) is None:
            raise CHMMError(f"this {self.kind} learner is not fitted yet: call fit(X) first")
        sequences, _ = as_sequences(X, lengths)
        return [self._codes(list(s)) for s in sequences]

    def bits_per_symbol(self, X: Any, lengths: Any = None) -> float:
        """Bits per symbol of X, each sequence from its start."""
        parts = self._parts(X, lengths)
        bits = sum(peer_base.bits_per_symbol(self.learner_, x) * len(x) for x in parts)
        return float(bits / sum(len(x) for x in parts))

    def score(self, X: Any, lengths: Any = None) -> float:
        """log P(X) in nats, summed over the sequences."""
        parts = self._parts(X, lengths)
        return float(-sum(peer_base.bits_per_symbol(self.learner_, x) * len(x) for x in parts) * math.log(2))


