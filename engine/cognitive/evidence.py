"""Cognitive maps from noisy observations: walks whose observations are soft evidence (issue 50, item 4).

A noisy sensor reads the observation of its cell wrongly now and then. What the learner gets at step n is then not
a symbol but a likelihood vector L_n(i) = P(reading_n | x_n = i) over the E observation symbols (the soft evidence
of Raju et al. 2024; the text side's decoding takes the same kind of vector). A clone u still emits one symbol
s(u), so the forward message of a walk with actions is

    alpha(1)(u) = pi(u) L_1(s(u)),   alpha(n+1)(v) = sum_u alpha(n)(u) T[a_n](u, v) L_{n+1}(s(v)),

normalised each step (the normalisers' logs sum to log P(readings | actions)), and the backward message and the
expected counts follow as in the paper's E-step with L in place of the indicator of the observed symbol:

    xi_n(u, v) = alpha(n)(u) T[a_n](u, v) L_{n+1}(s(v)) beta(n+1)(v) / c(n+1).

Any clone may then follow any clone, so T[a] is held dense (H x H per action; maps have hundreds of clones, not
thousands). A long walk is cut into pieces of :data:`PIECE_STEPS` steps that advance together, each piece starting
from pi: one matrix product per action and step over the pieces that take that action (the CPU's BLAS instead of a
loop over single steps), and the counts of each action as one product over all its steps,
counts[a] = T[a] o (A_a^T B_a) with the rows of A_a the normalised alpha(n) and of B_a the terms
L_{n+1}(s(.)) beta(n+1) / c(n+1) (the block form of the paper's E-step). The cut forgets the message at about one step
in :data:`PIECE_STEPS`: the pieces are the walk as several walks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.cognitive.actions import ActionCHMM, check_walk, from_dense
from engine.errors import CHMMError

PIECE_STEPS = 100
"""Steps of a piece of a walk that advances in lockstep with the other pieces (each piece starts from pi): a pass
costs PIECE_STEPS rounds of one matrix product per action, whatever the walk's length."""
MAX_NOISE = 0.5
"""The largest sensor noise :func:`noisy_readings` takes (beyond it a reading says more about other symbols than
about its own)."""

SOFT_TOLERANCE = 1e-5
"""Batch EM on soft evidence stops once an iteration gains less than this many bits per step: with the clean
recipe's stop when worse alone, the Maps page's test job (a 4,000-step walk in a 12-cell room, noise 0.1) ran 1,744
iterations in 42 s; with this bound it takes 2 s and still recovers the room."""

Progress = Callable[[int, float], None]
RestartProgress = Callable[[int, int, float], None]
"""A restart's progress: the restart (from 0), the iteration (from 0) and the bits per step."""


@dataclass(frozen=True)
class Readings:
    """A noisy sensor's readings of a walk's observations: the symbol it read at each step and the soft evidence
    ``likelihood[n, i]`` = P(reading_n | x_n = i), shape (N, E)."""

    symbols: np.ndarray
    likelihood: np.ndarray


def noisy_readings(observations: Any, n_symbols: int, noise: float, seed: int = 0) -> Readings:
    """A symmetric noisy sensor: each observation is read as itself with probability 1 - ``noise``, else as one of
    the other E - 1 symbols uniformly at random; the soft evidence of a reading y is
    L(i) = 1 - noise for i = y and noise / (E - 1) otherwise (with noise 0, the indicator of the observation)."""
    x, _ = check_walk(observations, np.zeros(len(np.asarray(observations)), dtype=np.int64), n_symbols)
    if not isinstance(noise, int | float | np.floating) or not 0.0 <= float(noise) <= MAX_NOISE:
        raise CHMMError(f"the sensor noise must be a probability from 0 to {MAX_NOISE}, got {noise!r}")
    if n_symbols < 2 and noise > 0:
        raise CHMMError("a noisy sensor needs at least 2 observation symbols to confuse")
    rng = np.random.default_rng(seed)
    wrong = rng.random(len(x)) < noise
    shift = rng.integers(1, max(n_symbols, 2), size=len(x))
    read = np.where(wrong, (x + shift) % n_symbols, x).astype(np.int64)
    return Readings(read, reading_evidence(read, n_symbols, noise))


def reading_evidence(readings: np.ndarray, n_symbols: int, noise: float) -> np.ndarray:
    """The soft evidence of a symmetric noisy sensor's ``readings``: L_n(i) = 1 - noise for i = reading_n and
    noise / (E - 1) for each other symbol, shape (N, E)."""
    other = float(noise) / (n_symbols - 1) if n_symbols > 1 else 0.0
    likelihood = np.full((len(readings), n_symbols), other)
    likelihood[np.arange(len(readings)), readings] = 1.0 - float(noise)
    return likelihood


def check_evidence(likelihood: Any, a: Any, n_symbols: int, n_actions: int | None = None) -> tuple[np.ndarray, ...]:
    """Soft evidence (N x E, finite, non-negative, each step some mass) and the walk's actions as float64 and
    int64 arrays of one length; ValueError in one sentence otherwise."""
    try:
        evidence = np.asarray(likelihood, dtype=np.float64)
    except (TypeError, ValueError):
        raise CHMMError(
            "soft evidence must be a table of numbers, one row per step and one column per symbol"
        ) from None
    if evidence.ndim != 2 or evidence.shape[1] != n_symbols:
        raise CHMMError(f"soft evidence needs one column per observation symbol ({n_symbols}), got {evidence.shape}")
    if not np.all(np.isfinite(evidence)) or np.any(evidence < 0):
        raise CHMMError("soft evidence must be finite and non-negative")
    if np.any(evidence.sum(axis=1) <= 0):
        raise CHMMError("every step of soft evidence needs some likelihood for at least one symbol")
    _, actions = check_walk(np.zeros(len(evidence), dtype=np.int64), a, 1, n_actions)
    return evidence, actions


def dense_transitions(model: ActionCHMM) -> np.ndarray:
    """T[a] of every action as one (A, H, H) float64 array."""
    return np.stack([model.transition(k).astype(np.float64) for k in range(model.n_actions)])


def _pieces(n: int, piece: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each piece of a walk of ``n`` steps starts and how long it is (the last may be shorter)."""
    starts = np.arange(0, n, piece)
    return starts, np.minimum(piece, n - starts)


@dataclass(frozen=True)
class SoftEStep:
    """Expected transition counts per action (A, H, H), log P(readings | actions) in nats, and the steps."""

    counts: np.ndarray
    log_likelihood: float
    steps: int


def soft_e_step(
    transitions: np.ndarray,
    clone_symbol: np.ndarray,
    pi: np.ndarray,
    likelihood: np.ndarray,
    actions: np.ndarray,
    piece: int = PIECE_STEPS,
) -> SoftEStep:
    """The E-step of one walk under soft evidence (the module's equations), its pieces of ``piece`` steps in
    lockstep: counts[a] = sum over steps n with a_n = a (within a piece) of xi_n, and the log-likelihood
    sum_n log c(n) (-inf when the readings are impossible under the model)."""
    A, H, _ = transitions.shape
    n = len(likelihood)
    starts, lengths = _pieces(n, piece)
    P, L = len(starts), int(lengths.max())
    steps = starts[:, None] + np.arange(L)[None, :]  # (P, L) global step of each piece's step
    active = np.arange(L)[None, :] < lengths[:, None]
    steps = np.where(active, steps, n - 1)
    emit = likelihood[:, clone_symbol]  # (N, H): L_n(s(u))
    alpha = np.zeros((L, P, H))
    norm = np.ones((L, P))
    first = pi[None, :] * emit[starts]
    norm[0] = first.sum(axis=1)
    if np.any(norm[0] <= 0):
        return SoftEStep(np.zeros_like(transitions), -np.inf, n)
    alpha[0] = first / norm[0][:, None]
    for t in range(1, L):
        live = np.flatnonzero(active[:, t])
        step_actions = actions[steps[live, t - 1]]
        for k in np.unique(step_actions):
            rows = live[step_actions == k]
            alpha[t, rows] = (alpha[t - 1, rows] @ transitions[k]) * emit[steps[rows, t]]
        totals = alpha[t, live].sum(axis=1)
        if np.any(totals <= 0):
            return SoftEStep(np.zeros_like(transitions), -np.inf, n)
        norm[t, live] = totals
        alpha[t, live] /= totals[:, None]
    beta = np.ones((L, P, H))
    for t in range(L - 2, -1, -1):
        live = np.flatnonzero(active[:, t + 1])
        step_actions = actions[steps[live, t]]
        after = emit[steps[live, t + 1]] * beta[t + 1, live] / norm[t + 1, live][:, None]
        for k in np.unique(step_actions):
            chosen = step_actions == k
            beta[t, live[chosen]] = after[chosen] @ transitions[k].T
    counts = np.zeros_like(transitions)
    pairs = active[:, 1:].T  # (L - 1, P): a step t -> t + 1 inside a piece
    t_index, p_index = np.nonzero(pairs)
    step_actions = actions[steps[p_index, t_index]]
    for k in np.unique(step_actions):
        chosen = step_actions == k
        t, p = t_index[chosen], p_index[chosen]
        before = alpha[t, p]
        after = emit[steps[p, t + 1]] * beta[t + 1, p] / norm[t + 1, p][:, None]
        counts[k] = transitions[k] * (before.T @ after)
    log_likelihood = float(np.log(norm[active.T]).sum())
    return SoftEStep(counts, log_likelihood, n)


def soft_viterbi_path(
    transitions: np.ndarray, clone_symbol: np.ndarray, pi: np.ndarray, likelihood: np.ndarray, actions: np.ndarray
) -> tuple[np.ndarray, float]:
    """The MAP clone path of one walk under soft evidence, argmax_z pi(z_1) L_1(s(z_1)) prod_n T[a_n](z_n, z_n+1)
    L_{n+1}(s(z_{n+1})), by max-product in log space, and its log-probability in nats (a path of -1 and -inf when
    no path is possible)."""
    with np.errstate(divide="ignore"):
        log_T = np.log(transitions)
        log_emit = np.log(likelihood[:, clone_symbol])
        score = np.log(pi) + log_emit[0]
    n, H = len(likelihood), len(pi)
    back = np.empty((n, H), dtype=np.int32)
    for t in range(1, n):
        candidates = score[:, None] + log_T[actions[t - 1]]
        back[t] = np.argmax(candidates, axis=0)
        score = candidates[back[t], np.arange(H)] + log_emit[t]
    best = float(score.max())
    if not np.isfinite(best):
        return np.full(n, -1, dtype=np.int64), -np.inf
    path = np.empty(n, dtype=np.int64)
    path[-1] = int(np.argmax(score))
    for t in range(n - 1, 0, -1):
        path[t - 1] = back[t, path[t]]
    return path, best


def _normalised(counts: np.ndarray, pseudocount: float) -> np.ndarray:
    """T[a] = row-normalise(counts[a] + pseudocount), a row with nothing a uniform row."""
    values = counts + pseudocount
    totals = values.sum(axis=2, keepdims=True)
    H = counts.shape[2]
    return np.where(totals > 0, values / np.where(totals > 0, totals, 1.0), 1.0 / H)


def learn_soft(
    model: ActionCHMM,
    likelihood: Any,
    a: Any,
    iterations: int = 100,
    pseudocount: float = 2e-3,
    viterbi_iterations: int = 0,
    piece: int = PIECE_STEPS,
    progress: Progress | None = None,
    tolerance: float = SOFT_TOLERANCE,
) -> tuple[ActionCHMM, list[float]]:
    """Learn a map's T[a] from soft evidence: batch EM (:func:`soft_e_step`, T[a] = row-normalise(counts[a] +
    ``pseudocount``)) for up to ``iterations``, stopping at the first that does not improve the bits per step (the
    model entering it kept, as :func:`engine.cognitive.actions.learn_em` does) or improves them by less than
    ``tolerance`` bits per step (that iteration's model kept), then up to ``viterbi_iterations`` of
    Viterbi EM on the soft evidence (:func:`soft_viterbi_path` counts, no pseudocount; stopped likewise by the
    path's probability), the paper's refinement. Returns the model, dense over every (action, symbol, symbol), and
    the bits per step -log2 P(readings | actions) / N each EM iteration started from (then -log2 of the MAP path's
    probability / N for the Viterbi iterations)."""
    evidence, actions = check_evidence(likelihood, a, model.n_symbols, model.n_actions)
    if not isinstance(iterations, int | np.integer) or iterations < 0:
        raise CHMMError(f"iterations must be a whole number of at least 0, got {iterations!r}")
    if not isinstance(piece, int | np.integer) or piece < 2:
        raise CHMMError(f"a piece of a walk needs at least 2 steps, got {piece!r}")
    if not np.isfinite(pseudocount) or pseudocount < 0:
        raise CHMMError(f"the pseudocount must be a non-negative number, got {pseudocount!r}")
    transitions = dense_transitions(model)
    clone_symbol = model.clone_symbol()
    pi = np.asarray(model.pi, dtype=np.float64)
    n = len(evidence)
    history: list[float] = []
    for iteration in range(int(iterations)):
        result = soft_e_step(transitions, clone_symbol, pi, evidence, actions, piece)
        bits = -result.log_likelihood / n / np.log(2.0)
        if history and not bits < history[-1]:
            break
        history.append(float(bits))
        if progress is not None:
            progress(iteration, float(bits))
        transitions = _normalised(result.counts, pseudocount)
        if len(history) > 1 and history[-2] - history[-1] < tolerance:
            break
    viterbi_history: list[float] = []
    for iteration in range(int(viterbi_iterations)):
        path, log_probability = soft_viterbi_path(transitions, clone_symbol, pi, evidence, actions)
        bits = -log_probability / n / np.log(2.0)
        if not np.isfinite(bits) or (viterbi_history and not bits < viterbi_history[-1]):
            break
        viterbi_history.append(float(bits))
        if progress is not None:
            progress(len(history) + iteration, float(bits))
        counts = np.zeros_like(transitions)
        np.add.at(counts, (actions[:-1], path[:-1], path[1:]), 1.0)
        transitions = _normalised(counts, 0.0)
    learned = from_dense(
        transitions.astype(model.T.dtype), model.n_clones, model.pi, symbols=model.symbols, actions=model.actions
    )
    learned.metadata.update(model.metadata)
    learned.metadata.update(em_iterations=len(history), viterbi_iterations=len(viterbi_history))
    return learned, history + viterbi_history


MAX_SOFT_CLONES = 2_000
"""The most clones a map learned from soft evidence may have (its T is held dense: A x H x H float64)."""


EVIDENCE_TEXT_CHARACTERS = 40
"""The most characters a number of a text evidence file may take on average (with its separator): the bound on such a
file's size, so that reading it holds memory in proportion to its walk."""


def read_evidence(path: Any, n_steps: int, symbols: list[str]) -> np.ndarray:
    """A file of soft evidence for a walk of ``n_steps`` steps whose observation symbols are ``symbols``: one row per
    step and one column per symbol, L_n(i) = P(reading_n | x_n = i), as a float64 (N, E) array. ``.npy``: a 2-D
    array of numbers in the order of ``symbols`` (read without pickle); otherwise text, numbers separated by commas
    or spaces, ``#`` comments, and an optional first line naming the columns by the walk's symbols (any order; a line
    of numbers is such a header only when it names every symbol and the file has one line more than the walk has
    steps). The file is untrusted: its size is bounded by its walk's before it is read; ValueError in one sentence
    when it is not such a table."""
    from pathlib import Path

    path, E = Path(path), len(symbols)
    try:
        size = path.stat().st_size
    except OSError as error:
        raise CHMMError(f"cannot read the evidence file {path.name}: {error.strerror or error}") from None
    if path.suffix.lower() == ".npy":
        if size > 8 * n_steps * E + 65_536:
            raise CHMMError(f"the evidence file {path.name} is larger than {n_steps:,} rows of {E} numbers can be")
        try:
            table = np.load(path, allow_pickle=False, mmap_mode="r")
        except (ValueError, OSError, EOFError):  # numpy's own reason runs to several sentences (pickled data, ...)
            raise CHMMError(f"the evidence file {path.name} is not a readable .npy array of numbers") from None
        if table.dtype.kind not in "biuf":
            raise CHMMError(f"the evidence file {path.name} holds {table.dtype} values, not numbers")
        table = np.array(table, dtype=np.float64)
    else:
        table = _evidence_text(path, size, n_steps, symbols)
    if table.ndim != 2 or table.shape != (n_steps, E):
        raise CHMMError(
            f"the evidence file {path.name} needs {n_steps:,} rows (one per step of the walk) of {E} numbers (one per "
            f"observation symbol), got {' x '.join(str(d) for d in table.shape) or 'one number'}"
        )
    evidence, _ = check_evidence(table, np.zeros(n_steps, dtype=np.int64), E)
    return evidence


def _evidence_text(path: Any, size: int, n_steps: int, symbols: list[str]) -> np.ndarray:
    """The numbers of a text evidence file (see :func:`read_evidence`), columns put in the order of ``symbols``
    when its first line names them."""
    if size > EVIDENCE_TEXT_CHARACTERS * n_steps * len(symbols) + 65_536:
        raise CHMMError(f"the evidence file {path.name} is larger than {n_steps:,} rows of numbers can be")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CHMMError(f"cannot read the evidence file {path.name} as text ({error})") from None
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        raise CHMMError(f"the evidence file {path.name} holds no numbers")
    order = None
    head = lines[0].replace(",", " ").split()
    try:
        [float(value) for value in head]
        named = len(lines) == n_steps + 1 and sorted(head) == sorted(symbols)  # symbols named by numbers
    except ValueError:
        named = True
    if named:  # a header naming the columns
        if sorted(head) != sorted(symbols) or len(set(head)) != len(head):
            raise CHMMError(
                f"the evidence file {path.name} names the columns {', '.join(head[:8])}, but the walk's observation "
                f"symbols are {', '.join(symbols[:8])}"
            ) from None
        order = [head.index(symbol) for symbol in symbols]
        lines = lines[1:]
    try:
        rows = [[float(value) for value in line.replace(",", " ").split()] for line in lines]
    except ValueError:
        raise CHMMError(f"the evidence file {path.name} holds something other than numbers") from None
    if len({len(row) for row in rows}) > 1:
        raise CHMMError(f"the rows of the evidence file {path.name} do not all have the same number of values")
    table = np.array(rows, dtype=np.float64).reshape(len(rows), -1)
    return table if order is None or table.shape[1] != len(symbols) else table[:, order]


def learn_map_through_noise(
    x: np.ndarray,
    a: np.ndarray,
    symbols: list[str],
    action_names: list[str],
    noise: float,
    clones: int,
    iterations: int,
    pseudocount: float,
    viterbi_iterations: int,
    seed: int = 0,
    merge: bool = True,
    progress: Progress | None = None,
    restarts: int = 1,
    restart_progress: RestartProgress | None = None,
) -> tuple[ActionCHMM, dict[str, Any]]:
    """``chmm map --noise``: a map of a walk whose observations ``x`` are a symmetric noisy sensor's readings (wrong
    with probability ``noise``): :func:`learn_soft` on their evidence (:func:`reading_evidence`) from a random dense
    start with ``clones`` per observation, then, with ``merge``, the clones with the same future merged
    (:func:`engine.cognitive.maps.merge_equivalent_clones`). With ``restarts`` > 1, each start (seeds ``seed``,
    ``seed + 1``, ...) learns from the walk without its last :data:`engine.cognitive.walks.MAP_HELD_OUT_SHARE` of
    steps, the start whose map gives that held-out tail's evidence the highest likelihood is kept and learned again
    on the whole walk (as ``chmm map``'s restarts choose, without the room). Returns the map and its summary (the bits
    per step of the readings under it, iterations, clones, each restart's held-out bits per step)."""
    if not 0.0 <= noise <= MAX_NOISE:
        raise CHMMError(f"the sensor noise must be a probability from 0 to {MAX_NOISE}, got {noise!r}")
    if len(symbols) < 2:
        raise CHMMError("a noisy sensor needs at least 2 observation symbols to confuse")
    likelihood = reading_evidence(np.asarray(x, dtype=np.int64), len(symbols), noise)
    model, summary = learn_map_from_evidence(
        likelihood, a, symbols, action_names, clones, iterations, pseudocount, viterbi_iterations, seed, merge,
        progress, restarts, restart_progress,
    )  # fmt: skip
    return model, summary | {"noise": float(noise)}


def learn_map_from_evidence(
    likelihood: np.ndarray,
    a: np.ndarray,
    symbols: list[str],
    action_names: list[str],
    clones: int,
    iterations: int,
    pseudocount: float,
    viterbi_iterations: int,
    seed: int = 0,
    merge: bool = True,
    progress: Progress | None = None,
    restarts: int = 1,
    restart_progress: RestartProgress | None = None,
) -> tuple[ActionCHMM, dict[str, Any]]:
    """``chmm map --evidence``: a map of a walk (actions ``a``) whose observations are soft evidence, ``likelihood``
    (N x E, L_n(i) = P(reading_n | x_n = i); a file of them: :func:`read_evidence`): :func:`learn_soft` from a random
    dense start with ``clones`` per observation, merged with ``merge``, with ``restarts`` chosen on the held-out tail
    as :func:`learn_map_through_noise` says (which calls this with a symmetric sensor's evidence); ``progress`` hears
    the iterations of the learning on the whole walk, ``restart_progress`` (restart, iteration, bits per step) those
    of each restart's on the walk without its tail (a callback that raises stops either). Returns the map and
    its summary (the bits per step of the evidence under it, iterations, clones, each restart's held-out bits per
    step, and with restarts the kept one and the held-out steps)."""
    from engine.cognitive.maps import merge_equivalent_clones, used_clones
    from engine.cognitive.walks import MAP_HELD_OUT_SHARE

    E = len(symbols)
    likelihood, a = check_evidence(likelihood, a, E, len(action_names))
    if clones * E > MAX_SOFT_CLONES:
        raise CHMMError(
            f"a map learned from soft evidence holds its transitions dense, at most {MAX_SOFT_CLONES:,} clones; "
            f"{clones} clones for each of {E} observations are {clones * E:,} (use fewer --clones)"
        )
    if not isinstance(restarts, int | np.integer) or restarts < 1:
        raise CHMMError(f"restarts must be a whole number of at least 1, got {restarts!r}")
    held_out: list[float] = []
    if restarts > 1:
        cut = len(likelihood) - max(2, int(round(MAP_HELD_OUT_SHARE * len(likelihood))))
        if cut < 2:
            raise CHMMError(f"a walk of {len(likelihood)} steps is too short to choose among restarts; use 1")
        for r in range(int(restarts)):
            start = random_dense_model(np.full(E, clones), len(action_names), seed + r, symbols, action_names)
            heard = None if restart_progress is None else functools.partial(restart_progress, r)
            trial, _ = learn_soft(
                start, likelihood[:cut], a[:cut], iterations, pseudocount, viterbi_iterations, progress=heard
            )
            tail = soft_e_step(
                dense_transitions(trial), trial.clone_symbol(), np.asarray(trial.pi, dtype=np.float64),
                likelihood[cut:], a[cut:],
            )  # fmt: skip
            held_out.append(-tail.log_likelihood / (len(likelihood) - cut) / np.log(2.0))
        seed = seed + int(np.argmin(held_out))
    start = random_dense_model(np.full(E, clones), len(action_names), seed, symbols, action_names)
    model, history = learn_soft(start, likelihood, a, iterations, pseudocount, viterbi_iterations, progress=progress)
    em_iterations, viterbi = model.metadata["em_iterations"], model.metadata["viterbi_iterations"]
    if merge:
        model, _ = merge_equivalent_clones(model)
    summary = {
        "bits_per_step": history[-1] if history else float("nan"), "em_iterations": em_iterations,
        "viterbi_iterations": viterbi, "clones": int(model.n_states), "clones_used": int(len(used_clones(model))),
        "steps": int(len(likelihood)), "seed": int(seed),
        "held_out_bits_per_step": [float(v) for v in held_out],
    }  # fmt: skip
    if held_out:  # which restart was kept, and on how many steps it was chosen
        summary |= {"kept_restart": int(np.argmin(held_out)), "held_out_steps": int(len(likelihood) - cut)}
    return model, summary


def evidence_reading(model: ActionCHMM, likelihood: Any, a: Any) -> np.ndarray:
    """The observations a map reads a walk of soft evidence as: the symbol of each step's clone on the MAP clone
    path under the evidence (:func:`soft_viterbi_path`), an int64 array of the walk's length; ValueError in one
    sentence when the evidence is not the map's or no clone path can explain it."""
    evidence, actions = check_evidence(likelihood, a, model.n_symbols, model.n_actions)
    clone_symbol = model.clone_symbol()
    path, log_probability = soft_viterbi_path(
        dense_transitions(model), clone_symbol, np.asarray(model.pi, dtype=np.float64), evidence, actions
    )
    if not np.isfinite(log_probability):
        raise CHMMError("no clone path of the map can explain this soft evidence")
    return clone_symbol[path].astype(np.int64)


def random_dense_model(
    n_clones: Any, n_actions: int, seed: int = 0, symbols: list[str] | None = None, actions: list[str] | None = None
) -> ActionCHMM:
    """A model with every (action, symbol, symbol) block, each row of T[a] uniform(0, 1) entries normalised over
    all H clones, pi uniform: the start of :func:`learn_soft`, where any clone may follow any clone."""
    n_clones = np.asarray(n_clones, dtype=np.int64)
    if n_clones.ndim != 1 or len(n_clones) == 0 or np.any(n_clones < 1):
        raise CHMMError("every observation symbol needs at least one clone")
    if not isinstance(n_actions, int | np.integer) or n_actions < 1:
        raise CHMMError(f"a map needs at least one action, got {n_actions!r}")
    H = int(n_clones.sum())
    values = np.random.default_rng(seed).random((int(n_actions), H, H))
    return from_dense(values / values.sum(axis=2, keepdims=True), n_clones, symbols=symbols, actions=actions)
