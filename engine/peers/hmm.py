"""The standard discrete HMM peer learner: Baum-Welch (EM) with learned transitions A, emissions B and start pi.

Notation follows Sicking et al. (2020), section 3: ``a_ij = P(X_t = s_j | X_{t-1} = s_i)``, ``b_ik = P(Y_t = o_k |
X_t = s_i)``, ``pi_i = P(X_1 = s_i)``, n hidden states and m observation symbols. The E-step computes the posteriors
``gamma_t(s_i) = P(X_t = s_i | o)`` and ``gamma_t(s_i, s_j) = P(X_{t-1} = s_i, X_t = s_j | o)`` (section 3.1) by the
scaled forward-backward recursions of Rabiner (1989), and the M-step maximises the Lagrangian of appendix A in closed
form (normalised expected counts). The E-step and the forward pass are module-level functions so that the DenseHMM
(:mod:`engine.peers.densehmm`), whose E-step is unchanged, reuses them.

Scaling: the forward messages are normalised at every step, ``alpha_t = P(X_t | o_1..o_t)``, and the normaliser of step
t is ``c_t = P(o_t | o_1..o_{t-1})``, the one-step predictive probability, so ``log P(o) = sum_t log c_t`` is summed in
float64 logs and nothing underflows however long the sequence. The backward messages are scaled by the same ``c_t``.

The per-step recursions run in Numba. The expected transition counts, sum over t of the outer products
``alpha_{t-1} (b_{o_t} * beta_t / c_t)^T``, are accumulated in the backward loop itself, in the same sweep over the rows
of A that computes beta_{t-1}. (One BLAS product per block of steps does the same arithmetic and is about as fast on one
thread, but OpenBLAS's threads made it three to five times slower whenever other processes shared the two cores.)
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, NamedTuple

import numpy as np
from numba import njit

from engine.errors import CHMMError
from engine.peers import registry
from engine.peers.base import PeerFormatError, as_symbols, load_arrays, save_arrays

__all__ = [
    "DiscreteHmm",
    "ExpectedCounts",
    "as_symbols",
    "check_count",
    "expected_counts",
    "forward",
    "log_likelihood",
    "sample_sequence",
    "stationary_distribution",
]

# --------------------------------------------------------------------------- input checks


def check_count(value: Any, what: str, minimum: int = 1) -> int:
    """``value`` as an int of at least ``minimum`` (bools and non-integers raise ValueError)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or int(value) < minimum:
        raise CHMMError(f"{what} must be an integer of at least {minimum}, got {value!r}")
    return int(value)


def _check_parameters(A: np.ndarray, B: np.ndarray, pi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    A = np.ascontiguousarray(A, dtype=np.float64)
    B = np.ascontiguousarray(B, dtype=np.float64)
    pi = np.ascontiguousarray(pi, dtype=np.float64)
    n = pi.shape[0]
    if A.shape != (n, n) or B.ndim != 2 or B.shape[0] != n:
        raise CHMMError(f"inconsistent HMM shapes: A {A.shape}, B {B.shape}, pi {pi.shape}")
    return A, B, pi


# --------------------------------------------------------------------------- Numba recursions


@njit(cache=True, nogil=True, fastmath=True)
def _forward_kernel(A, BT, pi, x, alpha, store):  # pragma: no cover - compiled
    """Scaled forward recursion alpha_t(j) = sum_i alpha_{t-1}(i) a_ij b_j(o_t) / c_t (Rabiner eq. 19-20, normalised).

    Returns c with c[t] = P(o_t | o_<t); writes alpha_t into alpha[t] if ``store``. A step of probability zero gets
    c[t] = 0 and the message becomes the prediction (the evidence is skipped)."""
    n_steps = x.shape[0]
    n = A.shape[0]
    c = np.empty(n_steps)
    a = np.empty(n)
    pred = np.empty(n)
    row = BT[x[0]]
    s = 0.0
    for i in range(n):
        a[i] = pi[i] * row[i]
        s += a[i]
    if s > 0.0:
        for i in range(n):
            a[i] /= s
    else:
        for i in range(n):
            a[i] = pi[i]
    c[0] = s
    if store:
        alpha[0, :] = a
    for t in range(1, n_steps):
        for j in range(n):
            pred[j] = 0.0
        for i in range(n):
            ai = a[i]
            if ai != 0.0:
                Ai = A[i]
                for j in range(n):
                    pred[j] += ai * Ai[j]
        row = BT[x[t]]
        s = 0.0
        for j in range(n):
            v = pred[j] * row[j]
            a[j] = v
            s += v
        if s > 0.0:
            inv = 1.0 / s
            for j in range(n):
                a[j] *= inv
        else:
            for j in range(n):
                a[j] = pred[j]
        c[t] = s
        if store:
            alpha[t, :] = a
    return c


@njit(cache=True, nogil=True, fastmath=True)
def _backward_kernel(A, BT, x, c, alpha, emissions_t, transitions):  # pragma: no cover - compiled
    """Scaled backward recursion beta_{t-1}(i) = sum_j a_ij b_j(o_t) beta_t(j) / c_t (Rabiner eq. 23-24 with the
    forward scales), beta_T = 1, fused with the accumulation of the expected counts.

    For every t it adds gamma_t = alpha_t * beta_t to row o_t of ``emissions_t`` (m x n) and, for t >= 2, the outer
    product alpha_{t-1} w_t^T with w_t = b_{o_t} * beta_t / c_t to ``transitions`` (so that sum_t gamma_t(s_i, s_j) =
    a_ij transitions_ij, the caller multiplies by A). Returns beta_1."""
    n = A.shape[0]
    beta = np.ones(n)
    w = np.empty(n)
    for t in range(x.shape[0] - 1, -1, -1):
        o = x[t]
        at = alpha[t]
        em = emissions_t[o]
        for i in range(n):
            em[i] += at[i] * beta[i]
        if t == 0:
            break
        row = BT[o]
        inv = 1.0 / c[t]
        for j in range(n):
            w[j] = row[j] * beta[j] * inv
        previous = alpha[t - 1]
        for i in range(n):
            Ai = A[i]
            Ti = transitions[i]
            a = previous[i]
            s = 0.0
            for j in range(n):
                s += Ai[j] * w[j]
                Ti[j] += a * w[j]
            beta[i] = s
    return beta


@njit(cache=True)
def _sample_kernel(A_cum, B_cum, pi_cum, u_state, u_symbol):  # pragma: no cover - compiled
    """Ancestral sampling: X_1 ~ pi, X_t ~ a_{X_{t-1}, .}, Y_t ~ b_{X_t, .} by inverse-CDF lookups."""
    n_steps = u_state.shape[0]
    out = np.empty(n_steps, dtype=np.int64)
    state = min(np.searchsorted(pi_cum, u_state[0], side="right"), pi_cum.shape[0] - 1)
    for t in range(n_steps):
        if t > 0:
            cum = A_cum[state]
            state = min(np.searchsorted(cum, u_state[t], side="right"), cum.shape[0] - 1)
        cum = B_cum[state]
        out[t] = min(np.searchsorted(cum, u_symbol[t], side="right"), cum.shape[0] - 1)
    return out


# --------------------------------------------------------------------------- inference


def forward(
    A: np.ndarray, B: np.ndarray, pi: np.ndarray, x: np.ndarray, store: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """Scaled forward pass: (c, alpha) with c[t] = P(o_t | o_1..o_{t-1}) (c[0] = P(o_1)) and, if ``store``, the
    normalised messages alpha[t] = P(X_t | o_1..o_t) as a T x n array (else None). log P(o) = sum(log c)."""
    A, B, pi = _check_parameters(A, B, pi)
    x = as_symbols(x, B.shape[1])
    BT = np.ascontiguousarray(B.T)
    alpha = np.empty((x.shape[0], A.shape[0])) if store else np.empty((1, A.shape[0]))
    c = _forward_kernel(A, BT, pi, x, alpha, store)
    return c, (alpha if store else None)


def log_likelihood(A: np.ndarray, B: np.ndarray, pi: np.ndarray, x: np.ndarray) -> float:
    """log P(o_1..o_T | A, B, pi) in nats, summed from the forward normalisers (-inf if impossible)."""
    c, _ = forward(A, B, pi, x)
    with np.errstate(divide="ignore"):
        return float(np.sum(np.log(c)))


class ExpectedCounts(NamedTuple):
    """Sufficient statistics of the E-step (section 3.1): transitions[i, j] = sum_{t>=2} gamma_t(s_i, s_j),
    emissions[i, k] = sum_{t: o_t = k} gamma_t(s_i), initial[i] = gamma_1(s_i); log_likelihood = log P(o) (nats)."""

    transitions: np.ndarray
    emissions: np.ndarray
    initial: np.ndarray
    log_likelihood: float


def expected_counts(A: np.ndarray, B: np.ndarray, pi: np.ndarray, x: np.ndarray) -> ExpectedCounts:
    """E-step of Baum-Welch: the expected counts of transitions, emissions and start states under P(X | o; lambda)
    (the gamma_t of section 3.1), by the scaled forward-backward recursions. Memory: the T x n forward messages."""
    A, B, pi = _check_parameters(A, B, pi)
    n, m = B.shape
    x = as_symbols(x, m)
    BT = np.ascontiguousarray(B.T)
    n_steps = x.shape[0]
    alpha = np.empty((n_steps, n))
    c = _forward_kernel(A, BT, pi, x, alpha, True)
    if not np.all(c > 0):
        raise CHMMError("the sequence has probability zero under the model; the E-step is undefined")
    emissions_t = np.zeros((m, n))
    xi = np.zeros((n, n))
    beta_1 = _backward_kernel(A, BT, x, c, alpha, emissions_t, xi)
    initial = alpha[0] * beta_1
    xi *= A
    return ExpectedCounts(xi, np.ascontiguousarray(emissions_t.T), initial, float(np.sum(np.log(c))))


def stationary_distribution(A: np.ndarray) -> np.ndarray:
    """The stationary distribution pi = pi A, sum(pi) = 1 of an irreducible transition matrix, from the linear
    system pi^T (I - A + 1 1^T) = 1^T (section 3.2: pi as the eigenvector of A^T for eigenvalue 1)."""
    A = np.asarray(A, dtype=np.float64)
    n = A.shape[0]
    M = np.eye(n) - A + 1.0
    pi = np.linalg.solve(M.T, np.ones(n))
    pi = np.clip(pi, 0.0, None)
    return pi / pi.sum()


def sample_sequence(
    A: np.ndarray, B: np.ndarray, pi: np.ndarray, length: int, rng: np.random.Generator | int | None = None
) -> np.ndarray:
    """Draw ``length`` observations o_1..o_T from the HMM (A, B, pi) by ancestral sampling (int64 array)."""
    A, B, pi = _check_parameters(A, B, pi)
    length = check_count(length, "length", 0)
    rng = np.random.default_rng(rng)
    u_state = rng.random(length)
    u_symbol = rng.random(length)
    if length == 0:
        return np.zeros(0, dtype=np.int64)
    cum = [np.cumsum(p, axis=-1) for p in (A, B, pi)]
    cum = [q / q[..., -1:] for q in cum]
    return _sample_kernel(cum[0], cum[1], cum[2], u_state, u_symbol)


# --------------------------------------------------------------------------- the learner


def _normalise_rows(counts: np.ndarray) -> np.ndarray:
    totals = counts.sum(axis=-1, keepdims=True)
    shape = counts.shape[-1]
    return np.where(totals > 0, counts / np.where(totals > 0, totals, 1.0), 1.0 / shape)


class DiscreteHmm:
    """Standard HMM on symbol sequences, trained by Baum-Welch (the paper's H_stand baseline, section 5).

    ``n_states`` hidden states; at most ``iterations`` EM iterations, stopping when the relative gain of the training
    log-likelihood falls below ``tolerance`` or, with a validation sequence, when its BPS has not improved for
    ``patience`` iterations (the parameters with the best validation BPS are kept). ``pseudocount`` is added to every
    expected count in the M-step (MAP-EM with a Dirichlet(1 + pseudocount) prior), which keeps every probability
    positive so that any text in the alphabet has a finite code length; 0 gives plain maximum likelihood. The start
    parameters are drawn with ``seed``: rows of A and B from Dirichlet(1), pi uniform.
    """

    kind = "hmm"

    def __init__(
        self,
        n_states: int = 20,
        iterations: int = 100,
        tolerance: float = 1e-5,
        seed: int = 0,
        patience: int = 5,
        pseudocount: float = 1e-3,
    ) -> None:
        self.n_states = check_count(n_states, "n_states")
        self.iterations = check_count(iterations, "iterations", 0)
        self.patience = check_count(patience, "patience")
        self.seed = check_count(seed, "seed", 0)
        if not (math.isfinite(tolerance) and tolerance >= 0):
            raise CHMMError(f"tolerance must be a non-negative number, got {tolerance!r}")
        if not (math.isfinite(pseudocount) and pseudocount >= 0):
            raise CHMMError(f"pseudocount must be a non-negative number, got {pseudocount!r}")
        self.tolerance = float(tolerance)
        self.pseudocount = float(pseudocount)
        self.n_symbols: int | None = None
        self.A: np.ndarray | None = None
        self.B: np.ndarray | None = None
        self.pi: np.ndarray | None = None
        self.history: list[dict[str, float]] = []
        self.metadata: dict[str, Any] = {}

    # -- parameters

    def set_parameters(self, A: np.ndarray, B: np.ndarray, pi: np.ndarray) -> DiscreteHmm:
        """Use the given (row-stochastic) A (n x n), B (n x m) and pi (n) as the model; returns self."""
        A, B, pi = _check_parameters(A, B, pi)
        if A.shape[0] != self.n_states:
            raise CHMMError(f"expected {self.n_states} states, got A of shape {A.shape}")
        for name, p in (("A", A), ("B", B), ("pi", pi)):
            if not (np.all(p >= 0) and np.allclose(p.sum(axis=-1), 1.0, atol=1e-8)):
                raise CHMMError(f"{name} must be non-negative with rows summing to 1")
        self.A, self.B, self.pi, self.n_symbols = A, B, pi, B.shape[1]
        return self

    def _initial_parameters(self, n_symbols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        n = self.n_states
        A = rng.dirichlet(np.ones(n), size=n)
        B = rng.dirichlet(np.ones(n_symbols), size=n)
        pi = np.full(n, 1.0 / n)
        return A, B, pi

    def _m_step(self, counts: ExpectedCounts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Closed-form maximiser of the M-step Lagrangian (appendix A; Rabiner eq. 40a-c): a_ij proportional to
        sum_t gamma_t(s_i, s_j), b_ik to sum_{t: o_t = k} gamma_t(s_i), pi_i to gamma_1(s_i), each count plus
        ``pseudocount``."""
        k = self.pseudocount
        A = _normalise_rows(counts.transitions + k)
        B = _normalise_rows(counts.emissions + k)
        pi = _normalise_rows(counts.initial + k)
        return A, B, pi

    # -- training

    def fit(self, train: np.ndarray, n_symbols: int, validation: np.ndarray | None = None) -> DiscreteHmm:
        """Baum-Welch on ``train`` (symbol indices in [0, n_symbols)); see the class docstring. Returns self."""
        n_symbols = check_count(n_symbols, "n_symbols")
        train = as_symbols(train, n_symbols, "training sequence")
        valid = None if validation is None else as_symbols(validation, n_symbols, "validation sequence", True)
        if valid is not None and valid.size == 0:
            valid = None
        self.n_symbols = n_symbols
        params = self._initial_parameters(n_symbols)
        self.history = []
        best: tuple[float, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None
        stale = 0
        previous = -np.inf
        for iteration in range(self.iterations + 1):
            start = time.perf_counter()
            if iteration < self.iterations:
                counts = expected_counts(*params, train)
                ll = counts.log_likelihood
            else:  # the parameters of the last M-step: score them, no further update
                counts = None
                ll = log_likelihood(*params, train)
            record = {"iteration": float(iteration), "train_bps": -ll / (train.size * math.log(2.0))}
            if valid is not None:
                record["validation_bps"] = -log_likelihood(*params, valid) / (valid.size * math.log(2.0))
                if best is None or record["validation_bps"] < best[0]:
                    best = (record["validation_bps"], params)
                    stale = 0
                else:
                    stale += 1
            converged = np.isfinite(previous) and (ll - previous) <= self.tolerance * abs(previous)
            if counts is not None and not converged and stale < self.patience:
                params = self._m_step(counts)
            record["seconds"] = time.perf_counter() - start
            self.history.append(record)
            if counts is None or converged or stale >= self.patience:
                break
            previous = ll
        if best is not None:
            params = best[1]
        self.A, self.B, self.pi = params
        return self

    # -- scoring

    def _require_fitted(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.A is None or self.B is None or self.pi is None:
            raise RuntimeError(f"{self.kind}: the model is not trained yet (call fit or load)")
        return self.A, self.B, self.pi

    def predictive(self, x: np.ndarray) -> np.ndarray:
        """P(x_n | x_<n) for every position n, from the forward normalisers; ValueError at a zero-probability event
        (possible only with pseudocount = 0)."""
        A, B, pi = self._require_fitted()
        x = as_symbols(x, B.shape[1], allow_empty=True)
        if x.size == 0:
            return np.zeros(0)
        c, _ = forward(A, B, pi, x)
        if not np.all(c > 0):
            raise CHMMError(f"{self.kind}: the sequence has a zero-probability symbol at position {int(np.argmin(c))}")
        return c

    def log_likelihood(self, x: np.ndarray) -> float:
        """log P(x) under the model, in nats."""
        A, B, pi = self._require_fitted()
        return log_likelihood(A, B, pi, x)

    def sample(self, length: int, seed: int | None = None) -> np.ndarray:
        """A sequence of ``length`` symbols drawn from the model."""
        return sample_sequence(*self._require_fitted(), length, seed)

    @property
    def n_parameters(self) -> int:
        """Free parameters: n^2 + n m + n entries minus the 2n + 1 normalisation constraints (n rows of A, n rows of
        B, pi), i.e. n(n - 1) + n(m - 1) + (n - 1) = n^2 + n(m - 1) - 1 as in the paper's section 4."""
        if self.n_symbols is None:
            raise RuntimeError(f"{self.kind}: the number of symbols is not known before fit")
        n, m = self.n_states, self.n_symbols
        return n * n + n * m + n - (2 * n + 1)

    # -- files

    def _header(self) -> dict[str, Any]:
        return {
            "n_states": self.n_states,
            "n_symbols": self.n_symbols,
            "iterations": self.iterations,
            "tolerance": self.tolerance,
            "seed": self.seed,
            "patience": self.patience,
            "pseudocount": self.pseudocount,
            "n_parameters": self.n_parameters,
            "history": self.history,
        }

    def save(self, path: str | os.PathLike[str], metadata: dict[str, Any] | None = None) -> None:
        """Write the model as .npz (arrays A, B, pi) with a JSON header of options, history and ``metadata``."""
        A, B, pi = self._require_fitted()
        header = self._header()
        header["metadata"] = dict(metadata or {})
        save_arrays(path, self.kind, {"A": A, "B": B, "pi": pi}, header)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> DiscreteHmm:
        """Read a model written by :meth:`save`; PeerFormatError if the file is not one."""
        arrays, header = load_arrays(path, cls.kind)
        try:
            model = cls(
                n_states=int(header["n_states"]),
                iterations=int(header["iterations"]),
                tolerance=float(header["tolerance"]),
                seed=int(header["seed"]),
                patience=int(header["patience"]),
                pseudocount=float(header["pseudocount"]),
            )
            model.set_parameters(arrays["A"], arrays["B"], arrays["pi"])
        except (KeyError, TypeError, ValueError) as exc:
            raise PeerFormatError(f"{path}: damaged {cls.kind} model ({exc})") from exc
        model.history = list(header.get("history", []))
        model.metadata = dict(header.get("metadata", {}))
        return model


registry.register(
    registry.Learner(
        "hmm",
        "HMM (Baum-Welch)",
        "HMM",
        "#d62728",
        factory="engine.peers.hmm:DiscreteHmm",
        defaults={"n_states": 100, "iterations": 50},
        settings=(registry.Setting("n_states", "states", 100, 2, 1000, cost_power=2),),
        seconds_per_symbol=50 / 106_910,
        states_option="n_states",
        iterations_option="iterations",
        seed_option="seed",
        refit=registry.refit_by_history,
    )
)
