"""DenseHMM (Sicking et al., 2020): an HMM whose A, B and pi are softmax kernels of learned dense representations.

Every hidden state s_i has three vectors of length l: u_i (incoming along the hidden chain), z_i (outgoing) and w_i
(outgoing towards the observations); every observation symbol o_k has one vector v_k, and a start vector z_start
(``z0`` here) gives pi (eqs. 2a-2c):

    a_ij = exp(u_j . z_i) / sum_k exp(u_k . z_i),   b_ik = exp(v_k . w_i) / sum_k' exp(v_k' . w_i),
    pi_i = exp(u_i . z_start) / sum_k exp(u_k . z_start).

Two ways of training, as in the paper:

* ``mode="em"`` (section 3.1, appendix A): the modified Baum-Welch. The E-step is unchanged (the expected counts of
  :func:`engine.peers.hmm.expected_counts`); the M-step takes Adam steps of gradient ascent on the expected
  complete-data log-likelihood L^dense = L_1^dense + L_2^dense + L_3^dense of appendix A with respect to U, Z, W, V and
  z_start (no constraints: the softmax normalises).
* ``mode="cooc"`` (section 3.2, eq. 3): direct optimisation of co-occurrences. The model's co-occurrence matrix of
  consecutive observations is Omega = B^T Theta B with Theta_kl = pi_k a_kl and pi the stationary distribution of A
  (not parametrised: z_start is not used and not counted); Adam minimises ||Omega_gt - Omega||_F^2 over U, Z, W, V, with
  Omega_gt the relative frequencies of consecutive symbol pairs in the training sequence. The gradient passes through
  the stationary distribution by the fundamental matrix (see :func:`cooc_gradient`). The trained model predicts with
  the stationary distribution as pi.

The gradients are written out analytically in NumPy (:func:`em_gradient`, :func:`cooc_gradient`, checked against
finite differences by the tests) rather than taken by automatic differentiation: neither torch nor jax (nor
tensorflow, which the authors used) is a dependency of this project, and the expressions are short matrix products.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, NamedTuple

import numpy as np

from engine.errors import CHMMError
from engine.peers import registry
from engine.peers.base import PeerFormatError, load_arrays, save_arrays
from engine.peers.hmm import (
    ExpectedCounts,
    as_symbols,
    check_count,
    expected_counts,
    forward,
    log_likelihood,
    sample_sequence,
    stationary_distribution,
)

__all__ = [
    "MODES",
    "DenseHmm",
    "Representations",
    "cooc_gradient",
    "cooc_loss",
    "cooccurrence_matrix",
    "dense_parameters",
    "em_gradient",
    "em_objective",
    "model_cooccurrence",
]

MODES: tuple[str, ...] = ("em", "cooc")
_DEFAULT_ITERATIONS = {"em": 100, "cooc": 3000}
_LOG2 = math.log(2.0)


class Representations(NamedTuple):
    """The DenseHMM's parameters: U, Z, W (n x l, hidden states), V (m x l, observations) and z0 (l, z_start)."""

    U: np.ndarray
    Z: np.ndarray
    W: np.ndarray
    V: np.ndarray
    z0: np.ndarray

    @classmethod
    def random(cls, n: int, m: int, dim: int, rng: np.random.Generator, scale: float = 1.0) -> Representations:
        """Standard isotropic Gaussian entries times ``scale`` (the paper's initialisation for scale 1)."""
        return cls(*(scale * rng.standard_normal(shape) for shape in ((n, dim), (n, dim), (n, dim), (m, dim), (dim,))))

    def flat(self) -> np.ndarray:
        """All entries as one vector (U, Z, W, V, z0 in that order)."""
        return np.concatenate([p.ravel() for p in self])

    def unflat(self, vector: np.ndarray) -> Representations:
        """Representations of this one's shapes filled from ``vector`` (the inverse of :meth:`flat`)."""
        parts, start = [], 0
        for p in self:
            parts.append(vector[start : start + p.size].reshape(p.shape))
            start += p.size
        return Representations(*parts)


def _softmax_rows(S: np.ndarray) -> np.ndarray:
    E = np.exp(S - S.max(axis=-1, keepdims=True))
    return E / E.sum(axis=-1, keepdims=True)


def _log_softmax_rows(S: np.ndarray) -> np.ndarray:
    top = S.max(axis=-1, keepdims=True)
    return S - top - np.log(np.exp(S - top).sum(axis=-1, keepdims=True))


def dense_parameters(rep: Representations) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A, B, pi) from the representations by the softmax kernels of eqs. 2a-2c."""
    return _softmax_rows(rep.Z @ rep.U.T), _softmax_rows(rep.W @ rep.V.T), _softmax_rows(rep.U @ rep.z0)


# --------------------------------------------------------------------------- the EM objective (section 3.1)


def em_objective(rep: Representations, counts: ExpectedCounts) -> float:
    """L^dense of appendix A: sum_ij xi_ij log a_ij + sum_ik e_ik log b_ik + sum_i gamma_1(i) log pi_i, with
    xi_ij = sum_t gamma_t(s_i, s_j), e_ik = sum_{t: o_t = k} gamma_t(s_i) the E-step's expected counts."""
    log_a = _log_softmax_rows(rep.Z @ rep.U.T)
    log_b = _log_softmax_rows(rep.W @ rep.V.T)
    log_pi = _log_softmax_rows(rep.U @ rep.z0)
    return float(np.sum(counts.transitions * log_a) + np.sum(counts.emissions * log_b) + np.dot(counts.initial, log_pi))


def em_gradient(rep: Representations, counts: ExpectedCounts) -> tuple[float, Representations]:
    """L^dense (appendix A) and its gradient with respect to U, Z, W, V, z0.

    With S = Z U^T (so a = softmax of the rows of S), dL/dS_ij = xi_ij - (sum_k xi_ik) a_ij, hence dL/dZ = G U and
    dL/dU = G^T Z for G = dL/dS; likewise for B with S' = W V^T and the emission counts (dL/dW = G' V,
    dL/dV = G'^T W), and for pi with s = U z_start: dL/ds = gamma_1 - (sum gamma_1) pi, dL/dU += (dL/ds) z_start^T,
    dL/dz_start = U^T dL/ds."""
    S_a = rep.Z @ rep.U.T
    S_b = rep.W @ rep.V.T
    s_pi = rep.U @ rep.z0
    log_a, log_b, log_pi = _log_softmax_rows(S_a), _log_softmax_rows(S_b), _log_softmax_rows(s_pi)
    xi, em, g1 = counts.transitions, counts.emissions, counts.initial
    value = float(np.sum(xi * log_a) + np.sum(em * log_b) + np.dot(g1, log_pi))
    G_a = xi - xi.sum(axis=1, keepdims=True) * np.exp(log_a)
    G_b = em - em.sum(axis=1, keepdims=True) * np.exp(log_b)
    g_pi = g1 - g1.sum() * np.exp(log_pi)
    grad = Representations(
        U=G_a.T @ rep.Z + np.outer(g_pi, rep.z0),
        Z=G_a @ rep.U,
        W=G_b @ rep.V,
        V=G_b.T @ rep.W,
        z0=rep.U.T @ g_pi,
    )
    return value, grad


# --------------------------------------------------------------------------- the co-occurrence objective (section 3.2)


def cooccurrence_matrix(x: np.ndarray, n_symbols: int) -> np.ndarray:
    """Omega_gt: relative frequencies of consecutive pairs (o_t, o_{t+1}) in ``x``, an m x m matrix summing to 1."""
    x = as_symbols(x, n_symbols)
    if x.size < 2:
        raise CHMMError("a co-occurrence matrix needs a sequence of at least two symbols")
    counts = np.bincount(x[:-1] * n_symbols + x[1:], minlength=n_symbols * n_symbols).astype(np.float64)
    return (counts / counts.sum()).reshape(n_symbols, n_symbols)


def model_cooccurrence(A: np.ndarray, B: np.ndarray, pi: np.ndarray | None = None) -> np.ndarray:
    """Omega = B^T Theta B with Theta_kl = pi_k a_kl (eq. 3): Omega_ij = P(Y_t = o_i, Y_{t+1} = o_j) for a hidden
    chain in its stationary distribution pi (computed from A when not given)."""
    if pi is None:
        pi = stationary_distribution(A)
    return B.T @ (pi[:, None] * A) @ B


def cooc_loss(rep: Representations, omega_gt: np.ndarray) -> float:
    """||Omega_gt - Omega^dense(U, V, W, Z)||_F^2 (section 3.2), pi the stationary distribution of A."""
    A, B, _ = dense_parameters(rep)
    return float(np.sum((model_cooccurrence(A, B) - omega_gt) ** 2))


def _softmax_backward(P: np.ndarray, grad_P: np.ndarray) -> np.ndarray:
    """Gradient with respect to the logits S of P = softmax_rows(S), given the gradient with respect to P."""
    return P * (grad_P - np.sum(grad_P * P, axis=-1, keepdims=True))


def cooc_gradient(rep: Representations, omega_gt: np.ndarray) -> tuple[float, Representations]:
    """The loss of :func:`cooc_loss` and its gradient with respect to U, Z, W, V (zero for z0, which is unused).

    With R = Omega - Omega_gt and G = 2R: dL/dB = Theta B G^T + Theta^T B G; with H = B G B^T, the direct part of
    dL/da_kl is pi_k H_kl and dL/dpi_k = sum_l H_kl a_kl. The stationary distribution moves with A as
    dpi^T = pi^T dA F, F = (I - A + 1 pi^T)^{-1} the fundamental matrix, so its part of dL/da_kl is pi_k y_l with
    y = F dL/dpi. The softmax kernels then carry dL/dA and dL/dB back to the representations as in
    :func:`em_gradient`."""
    A, B, _ = dense_parameters(rep)
    n = A.shape[0]
    pi = stationary_distribution(A)
    theta = pi[:, None] * A
    omega = B.T @ theta @ B
    R = omega - omega_gt
    value = float(np.sum(R * R))
    G = 2.0 * R
    grad_B = theta @ B @ G.T + theta.T @ B @ G
    H = B @ G @ B.T
    grad_pi = np.sum(H * A, axis=1)
    y = np.linalg.solve(np.eye(n) - A + np.outer(np.ones(n), pi), grad_pi)
    grad_A = pi[:, None] * (H + y[None, :])
    G_a = _softmax_backward(A, grad_A)
    G_b = _softmax_backward(B, grad_B)
    grad = Representations(
        U=G_a.T @ rep.Z,
        Z=G_a @ rep.U,
        W=G_b @ rep.V,
        V=G_b.T @ rep.W,
        z0=np.zeros_like(rep.z0),
    )
    return value, grad


# --------------------------------------------------------------------------- optimiser


class _Adam:
    """Adam (Kingma and Ba, 2015) on a flat parameter vector, for minimisation."""

    def __init__(self, size: int, learning_rate: float, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8):
        self.lr, self.beta1, self.beta2, self.eps = learning_rate, beta1, beta2, eps
        self.m = np.zeros(size)
        self.v = np.zeros(size)
        self.t = 0

    def step(self, params: np.ndarray, grad: np.ndarray) -> np.ndarray:
        self.t += 1
        self.m = self.beta1 * self.m + (1.0 - self.beta1) * grad
        self.v = self.beta2 * self.v + (1.0 - self.beta2) * grad * grad
        m_hat = self.m / (1.0 - self.beta1**self.t)
        v_hat = self.v / (1.0 - self.beta2**self.t)
        return params - self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


# --------------------------------------------------------------------------- the learner


class DenseHmm:
    """DenseHMM peer learner (kind "densehmm"): see the module docstring.

    ``n_states`` hidden states, representations of length ``dim`` (the paper's l), trained by ``mode`` "em" or
    "cooc". ``iterations``: EM iterations (each an E-step and ``m_steps`` Adam steps) for "em", Adam steps for "cooc"
    (default 100 and 3,000). ``learning_rate`` is Adam's step size; representations start as standard Gaussians times
    ``init_scale`` drawn with ``seed``. With a validation sequence the parameters with the best validation BPS are kept
    (checked every EM iteration, or every ``eval_every`` steps for "cooc") and "em" stops after ``patience`` checks
    without improvement; "em" also stops when the training log-likelihood changes by less than ``tolerance``
    (relative) from one iteration to the next.
    """

    kind = "densehmm"

    def __init__(
        self,
        n_states: int = 20,
        dim: int = 8,
        mode: str = "em",
        iterations: int | None = None,
        learning_rate: float = 0.05,
        seed: int = 0,
        m_steps: int = 20,
        init_scale: float = 1.0,
        tolerance: float = 1e-6,
        patience: int = 5,
        eval_every: int = 100,
    ) -> None:
        self.n_states = check_count(n_states, "n_states")
        self.dim = check_count(dim, "dim")
        if mode not in MODES:
            raise CHMMError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        self.mode = mode
        self.iterations = _DEFAULT_ITERATIONS[mode] if iterations is None else check_count(iterations, "iterations", 0)
        self.seed = check_count(seed, "seed", 0)
        self.m_steps = check_count(m_steps, "m_steps")
        self.patience = check_count(patience, "patience")
        self.eval_every = check_count(eval_every, "eval_every")
        for name, value in (("learning_rate", learning_rate), ("init_scale", init_scale)):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise CHMMError(f"{name} must be a positive number, got {value!r}")
        if not (isinstance(tolerance, int | float) and math.isfinite(tolerance) and tolerance >= 0):
            raise CHMMError(f"tolerance must be a non-negative number, got {tolerance!r}")
        self.learning_rate = float(learning_rate)
        self.init_scale = float(init_scale)
        self.tolerance = float(tolerance)
        self.n_symbols: int | None = None
        self.rep: Representations | None = None
        self.history: list[dict[str, float]] = []
        self.metadata: dict[str, Any] = {}

    # -- parameters

    def parameters(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(A, B, pi) of the trained model: eqs. 2a-2c, with pi the stationary distribution of A for "cooc"."""
        if self.rep is None:
            raise RuntimeError(f"{self.kind}: the model is not trained yet (call fit or load)")
        return self._parameters(self.rep)

    def _parameters(self, rep: Representations) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        A, B, pi = dense_parameters(rep)
        if self.mode == "cooc":
            pi = stationary_distribution(A)
        return A, B, pi

    def _validation_bps(self, rep: Representations, valid: np.ndarray) -> float:
        return -log_likelihood(*self._parameters(rep), valid) / (valid.size * _LOG2)

    # -- training

    def fit(self, train: np.ndarray, n_symbols: int, validation: np.ndarray | None = None) -> DenseHmm:
        """Learn the representations from ``train`` (symbol indices in [0, n_symbols)) by the chosen mode."""
        n_symbols = check_count(n_symbols, "n_symbols")
        train = as_symbols(train, n_symbols, "training sequence")
        valid = None if validation is None else as_symbols(validation, n_symbols, "validation sequence", True)
        if valid is not None and valid.size == 0:
            valid = None
        if self.mode == "cooc" and train.size < 2:
            raise CHMMError("mode 'cooc' needs a training sequence of at least two symbols")
        self.n_symbols = n_symbols
        rng = np.random.default_rng(self.seed)
        rep = Representations.random(self.n_states, n_symbols, self.dim, rng, self.init_scale)
        self.history = []
        if self.mode == "em":
            rep = self._fit_em(rep, train, valid)
        else:
            rep = self._fit_cooc(rep, train, valid)
        self.rep = rep
        return self

    def _fit_em(self, rep: Representations, train: np.ndarray, valid: np.ndarray | None) -> Representations:
        """Modified Baum-Welch (section 3.1): E-step of the standard HMM, M-step by Adam on L^dense / T."""
        adam = _Adam(rep.flat().size, self.learning_rate)
        best: tuple[float, Representations] | None = None
        stale = 0
        previous = -np.inf
        scale = 1.0 / train.size
        for iteration in range(self.iterations + 1):
            start = time.perf_counter()
            A, B, pi = self._parameters(rep)
            last = iteration == self.iterations
            counts = None if last else expected_counts(A, B, pi, train)
            ll = log_likelihood(A, B, pi, train) if counts is None else counts.log_likelihood
            record = {"iteration": float(iteration), "train_bps": -ll / (train.size * _LOG2)}
            if valid is not None:
                record["validation_bps"] = self._validation_bps(rep, valid)
                if best is None or record["validation_bps"] < best[0]:
                    best, stale = (record["validation_bps"], rep), 0
                else:
                    stale += 1
            # A gradient M-step need not increase the likelihood (generalised EM), so only a small change in either
            # direction counts as convergence; a steady decrease is caught by the validation patience.
            converged = np.isfinite(previous) and abs(ll - previous) <= self.tolerance * abs(previous)
            stop = counts is None or converged or stale >= self.patience
            if not stop:
                counts = ExpectedCounts(
                    counts.transitions * scale, counts.emissions * scale, counts.initial * scale, counts.log_likelihood
                )
                flat = rep.flat()
                for _ in range(self.m_steps):
                    value, grad = em_gradient(rep, counts)
                    flat = adam.step(flat, -grad.flat())
                    rep = rep.unflat(flat)
                record["m_objective"] = value
            record["seconds"] = time.perf_counter() - start
            self.history.append(record)
            if stop:
                break
            previous = ll
        return rep if best is None else best[1]

    def _fit_cooc(self, rep: Representations, train: np.ndarray, valid: np.ndarray | None) -> Representations:
        """Direct co-occurrence optimisation (section 3.2): Adam on ||Omega_gt - Omega^dense||_F^2."""
        omega_gt = cooccurrence_matrix(train, self.n_symbols)
        adam = _Adam(rep.flat().size, self.learning_rate)
        best: tuple[float, Representations] | None = None
        flat = rep.flat()
        start = time.perf_counter()
        for step in range(self.iterations + 1):
            value, grad = cooc_gradient(rep, omega_gt)
            if step % self.eval_every == 0 or step == self.iterations:
                record = {"iteration": float(step), "loss": value}
                if valid is not None:
                    record["validation_bps"] = self._validation_bps(rep, valid)
                    if best is None or record["validation_bps"] < best[0]:
                        best = (record["validation_bps"], rep)
                record["seconds"] = time.perf_counter() - start
                self.history.append(record)
                start = time.perf_counter()
            if step == self.iterations:
                break
            flat = adam.step(flat, grad.flat())
            rep = rep.unflat(flat)
        return rep if best is None else best[1]

    # -- scoring

    def predictive(self, x: np.ndarray) -> np.ndarray:
        """P(x_n | x_<n) for every position n, from the scaled forward pass of the HMM (A, B, pi) (all positive:
        softmax kernels never give zero, barring float64 underflow of extreme logits)."""
        A, B, pi = self.parameters()
        x = as_symbols(x, B.shape[1], allow_empty=True)
        if x.size == 0:
            return np.zeros(0)
        c, _ = forward(A, B, pi, x)
        if not np.all(c > 0):
            raise CHMMError(f"{self.kind}: the sequence has a zero-probability symbol at position {int(np.argmin(c))}")
        return c

    def log_likelihood(self, x: np.ndarray) -> float:
        """log P(x) under the model, in nats."""
        return log_likelihood(*self.parameters(), x)

    def sample(self, length: int, seed: int | None = None) -> np.ndarray:
        """A sequence of ``length`` symbols drawn from the model."""
        return sample_sequence(*self.parameters(), length, seed)

    @property
    def n_parameters(self) -> int:
        """Representation entries: l (3n + m + 1) for "em" (U, Z, W, V and z_start; the paper's DOFs, section 4),
        l (3n + m) for "cooc" (pi is the stationary distribution, z_start is not part of that model)."""
        if self.n_symbols is None:
            raise RuntimeError(f"{self.kind}: the number of symbols is not known before fit")
        extra = 1 if self.mode == "em" else 0
        return self.dim * (3 * self.n_states + self.n_symbols + extra)

    # -- files

    def save(self, path: str | os.PathLike[str], metadata: dict[str, Any] | None = None) -> None:
        """Write the representations as .npz (U, Z, W, V, z0) with a JSON header of options, history, metadata."""
        if self.rep is None:
            raise RuntimeError(f"{self.kind}: the model is not trained yet (call fit or load)")
        header = {
            "n_states": self.n_states,
            "dim": self.dim,
            "mode": self.mode,
            "n_symbols": self.n_symbols,
            "iterations": self.iterations,
            "learning_rate": self.learning_rate,
            "seed": self.seed,
            "m_steps": self.m_steps,
            "init_scale": self.init_scale,
            "tolerance": self.tolerance,
            "patience": self.patience,
            "eval_every": self.eval_every,
            "n_parameters": self.n_parameters,
            "history": self.history,
            "metadata": dict(metadata or {}),
        }
        save_arrays(path, self.kind, dict(self.rep._asdict()), header)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> DenseHmm:
        """Read a model written by :meth:`save`; PeerFormatError if the file is not one."""
        arrays, header = load_arrays(path, cls.kind)
        try:
            model = cls(
                n_states=int(header["n_states"]),
                dim=int(header["dim"]),
                mode=str(header["mode"]),
                iterations=int(header["iterations"]),
                learning_rate=float(header["learning_rate"]),
                seed=int(header["seed"]),
                m_steps=int(header["m_steps"]),
                init_scale=float(header["init_scale"]),
                tolerance=float(header["tolerance"]),
                patience=int(header["patience"]),
                eval_every=int(header["eval_every"]),
            )
            n, m, dim = model.n_states, int(header["n_symbols"]), model.dim
            rep = Representations(*(np.asarray(arrays[k], dtype=np.float64) for k in Representations._fields))
            expected = {"U": (n, dim), "Z": (n, dim), "W": (n, dim), "V": (m, dim), "z0": (dim,)}
            for name, shape in expected.items():
                if getattr(rep, name).shape != shape:
                    raise CHMMError(f"array {name} has shape {getattr(rep, name).shape}, expected {shape}")
                if not np.all(np.isfinite(getattr(rep, name))):
                    raise CHMMError(f"array {name} holds non-finite values")
        except (KeyError, TypeError, ValueError) as exc:
            raise PeerFormatError(f"{path}: damaged {cls.kind} model ({exc})") from exc
        model.n_symbols = m
        model.rep = rep
        model.history = list(header.get("history", []))
        model.metadata = dict(header.get("metadata", {}))
        return model


def _refit_options(learner: DenseHmm, options: dict[str, Any]) -> dict[str, Any] | None:
    """The EM iterations (or Adam steps) with the best validation BPS; "cooc" has no tolerance to clear."""
    fixed = registry.refit_by_history(learner, options)
    if fixed is not None and learner.mode == "cooc":
        fixed.pop("tolerance")
    return fixed


registry.register(
    registry.Learner(
        "densehmm",
        "DenseHMM (Sicking et al.)",
        "DenseHMM",
        "#9467bd",
        factory="engine.peers.densehmm:DenseHmm",
        defaults={"n_states": 100, "dim": 16, "mode": "em", "iterations": 50},
        settings=(
            registry.Setting("n_states", "states", 100, 2, 1000, cost_power=2),
            registry.Setting("dim", "l (embedding size)", 16, 1, 256),
        ),
        seconds_per_symbol=49 / 106_910,
        states_option="n_states",
        iterations_option="iterations",
        seed_option="seed",
        refit=_refit_options,
    )
)
