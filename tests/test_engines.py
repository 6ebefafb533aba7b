"""One test matrix over every implementation of the engine protocol (engine.backends.engines.Engine): dense CPU, sparse
CPU, the GPU engine on NumPy twins of its kernels (gpu-sim, every CI run) and (with CuPy and a CUDA device) on the GPU
run the same operations on the same tiny models, checked against brute-force enumeration of clone paths and against
each other (the pattern hmmlearn uses for its two numerics)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine.backends import engines
from engine.backends.cpu import inference, sampling, sparse
from engine.backends.cpu.implementation import DenseEngine
from engine.model.dense import CHMM, random_model
from engine.training import learning

IMPLEMENTATIONS = ["dense", "sparse", "gpu-sim", pytest.param("gpu", marks=pytest.mark.gpu)]
FLOAT32 = {"gpu", "gpu-sim"}
"""Implementations that hold T and the messages in float32: compared to 1e-4 relative, the others to 1e-9."""
SEEDS = [0, 1, 2, 3]


# ----------------------------------------------------------------------------------------------- helpers
def tiny_model(seed: int) -> CHMM:
    """A float64 CHMM of 2-3 symbols with 1-3 clones each, one symbol pair without a block, a few zeros inside the
    blocks (so that sparse storage differs from dense), random non-uniform pi."""
    rng = np.random.default_rng(500 + seed)
    n_symbols = int(rng.integers(2, 4))
    n_clones = rng.integers(1, 4, size=n_symbols)
    pairs = np.array([(i, j) for i in range(n_symbols) for j in range(n_symbols)])
    pairs = np.delete(pairs, int(rng.integers(len(pairs))), axis=0)
    model = random_model([chr(97 + s) for s in range(n_symbols)], n_clones, pairs, rng, dtype=np.float64)
    T = model.T.copy()
    T[rng.random(T.size) < 0.15] = 0.0
    model = model.with_arrays(T=T)
    from engine.model.blocks import normalise_rows

    model = model.with_arrays(T=normalise_rows(model.layout, T, 0.0, np.float64))
    pi = rng.random(model.n_states) + 0.05
    counts = rng.random(model.layout.size) * (model.T > 0)
    return CHMM(model.symbols, model.layout, model.T, pi / pi.sum(), counts)


def sequences(model: CHMM, seed: int, lengths: tuple[int, ...] = (5, 4, 6)) -> list[np.ndarray]:
    """Symbol sequences the model can emit (sampled), one per length."""
    rng = np.random.default_rng(seed)
    out = []
    for length in lengths:
        while True:
            x = sampling.sample(model, length, rng)
            if len(x) == length:
                out.append(x)
                break
    return out


def brute_force(model: CHMM, x: np.ndarray) -> dict:
    """Enumerate every clone path of x: P(x), gamma(1), sum_n xi(n) (dense H x H), the MAP path and its probability."""
    T = model.dense_T()
    pi = model.pi.astype(np.float64)
    start = model.layout.clone_start
    h = model.n_states
    total, gamma_first, xi = 0.0, np.zeros(h), np.zeros((h, h))
    best_p, best = 0.0, None
    for z in itertools.product(*[range(start[s], start[s + 1]) for s in x]):
        p = pi[z[0]] * np.prod([T[a, b] for a, b in itertools.pairwise(z)])
        total += p
        gamma_first[z[0]] += p
        for a, b in itertools.pairwise(z):
            xi[a, b] += p
        if p > best_p:
            best_p, best = p, np.array(z)
    return {"p": total, "gamma_first": gamma_first / total, "xi": xi / total, "map": best, "map_p": best_p}


def dense_counts(model: CHMM, counts: np.ndarray) -> np.ndarray:
    """Counts in the flat block layout of ``model`` as a dense H x H matrix."""
    return model.with_arrays(T=np.asarray(counts, dtype=np.float64)).dense_T()


def sparse_counts_dense(model: sparse.SparseCHMM, counts: np.ndarray) -> np.ndarray:
    """Per-entry counts of a sparse model as a dense H x H matrix."""
    rows, cols = model.entry_rows_cols()
    out = np.zeros((model.n_states, model.n_states))
    np.add.at(out, (rows, cols), np.asarray(counts, dtype=np.float64))
    return out


class Harness:
    """One implementation of the protocol for a dense host model: the engine, the state, and how to read its
    counts and transition matrix back as dense H x H matrices (float64)."""

    def __init__(self, implementation: str, model: CHMM) -> None:
        self.implementation = implementation
        chosen = {i.name: i for i in engines.implementations()}[implementation]
        available, reason = chosen.available()
        if not available:
            pytest.skip(reason)
        self.host_model = sparse.from_dense(model) if implementation == "sparse" else model
        assert chosen.accepts(self.host_model)
        self.engine = chosen.create()
        assert engines.implementation_for(self.host_model, chosen.backend) is chosen
        self.state = self.engine.load(self.host_model)
        self.rtol = 1e-4 if implementation in FLOAT32 else 1e-9
        # a surprisal near 0 bits (P close to 1) is known to float32 only to a few ulps of P: 2^-23 / ln 2 bits each
        # (the dense CPU engine on a float32 copy of the model is as far from the float64 figure, see
        # test_float32_surprisal_is_float32_resolution), so float32 implementations compare surprisal in absolute bits
        self.bits_atol = 4 * float(np.finfo(np.float32).eps) / np.log(2) if implementation in FLOAT32 else 0.0

    def to_numpy(self, values: object) -> np.ndarray:
        return values.get() if hasattr(values, "get") else np.asarray(values)  # type: ignore[union-attr]

    def counts(self, counts: object) -> np.ndarray:
        values = self.to_numpy(counts)
        if self.implementation == "sparse":
            return sparse_counts_dense(self.host_model, values)
        return dense_counts(self.host_model, values)

    def dense_T(self, state: object) -> np.ndarray:
        host = self.engine.host(state)
        return host.to_dense().dense_T() if self.implementation == "sparse" else host.dense_T().astype(np.float64)


@pytest.fixture(params=IMPLEMENTATIONS)
def implementation(request: pytest.FixtureRequest) -> str:
    return request.param


# ----------------------------------------------------------------------------------------------- inference
@pytest.mark.parametrize("seed", SEEDS)
def test_forward_and_score_against_brute_force(implementation: str, seed: int) -> None:
    model = tiny_model(seed)
    run = Harness(implementation, model)
    for x in sequences(model, seed):
        exact = brute_force(model, x)
        forward = run.engine.forward(run.state, x)
        assert forward.zero_events == 0
        np.testing.assert_allclose(np.sum(np.log(forward.predictive)), np.log(exact["p"]), rtol=run.rtol)
        reference = inference.score(model, x)
        assert run.engine.score(run.state, x).bps == pytest.approx(reference.bps, rel=run.rtol)
        np.testing.assert_allclose(
            run.engine.surprisal(run.state, x), inference.surprisal(model, x), rtol=run.rtol, atol=run.bits_atol
        )
    # initial replaces pi
    x = sequences(model, seed)[0]
    initial = np.zeros(model.n_states)
    initial[model.layout.clone_start[x[0]]] = 1.0
    with_initial = model.with_arrays(pi=initial)
    expected = brute_force(with_initial, x)["p"]
    got = run.engine.forward(run.state, x, initial=initial.astype(model.T.dtype)).predictive
    assert np.prod(got) == pytest.approx(expected, rel=run.rtol)


def test_float32_surprisal_is_float32_resolution() -> None:
    """Where P(x_n | x_<n) is 1 in float64 (seed 3), a float32 forward pass gives 1 - O(2^-24): the dense CPU engine
    on a float32 copy of the model differs from the float64 surprisal by as much as the GPU engine does, and both
    stay within the few float32 ulps that :class:`Harness` allows in bits."""
    model = tiny_model(3)
    as_float32 = model.with_arrays(T=model.T.astype(np.float32), pi=model.pi.astype(np.float32))
    simulated = Harness("gpu-sim", model)
    ulp_bits = float(np.finfo(np.float32).eps) / np.log(2)
    worst_cpu = worst_gpu = 0.0
    for x in sequences(model, 3):
        exact = inference.surprisal(model, x)
        worst_cpu = max(worst_cpu, float(np.max(np.abs(inference.surprisal(as_float32, x) - exact))))
        worst_gpu = max(worst_gpu, float(np.max(np.abs(simulated.engine.surprisal(simulated.state, x) - exact))))
    assert 0.1 * ulp_bits < worst_cpu <= 4 * ulp_bits
    assert 0.1 * ulp_bits < worst_gpu <= 4 * ulp_bits


@pytest.mark.parametrize("seed", SEEDS)
def test_scores_of_documents_add_up(implementation: str, seed: int) -> None:
    model = tiny_model(seed)
    run = Harness(implementation, model)
    docs = sequences(model, seed)
    together = engines.score_sequences(run.engine, run.state, docs)
    bits = sum(-inference.score(model, x).log2_probability for x in docs)
    assert together.symbols == sum(len(x) for x in docs)
    assert together.bps == pytest.approx(bits / together.symbols, rel=run.rtol)


@pytest.mark.parametrize("seed", SEEDS)
def test_e_step_against_brute_force(implementation: str, seed: int) -> None:
    model = tiny_model(seed)
    run = Harness(implementation, model)
    docs = sequences(model, seed)
    for x in docs:
        exact = brute_force(model, x)
        e = run.engine.e_step(run.state, x)
        np.testing.assert_allclose(run.counts(e.counts), exact["xi"], rtol=run.rtol, atol=1e-12)
        np.testing.assert_allclose(e.gamma_first, exact["gamma_first"], rtol=run.rtol, atol=1e-12)
        assert e.log_likelihood == pytest.approx(np.log(exact["p"]), rel=run.rtol)
    # several documents: the sum of their E-steps, and of brute force
    together = engines.e_step_sequences(run.engine, run.state, docs)
    expected = sum(brute_force(model, x)["xi"] for x in docs)
    np.testing.assert_allclose(run.counts(together.counts), expected, rtol=run.rtol, atol=1e-12)
    assert together.log_likelihood == pytest.approx(sum(np.log(brute_force(model, x)["p"]) for x in docs), rel=run.rtol)


@pytest.mark.parametrize("seed", SEEDS)
def test_m_step_is_row_normalised_counts_plus_pseudocount(implementation: str, seed: int) -> None:
    model = tiny_model(seed)
    run = Harness(implementation, model)
    e = engines.e_step_sequences(run.engine, run.state, sequences(model, seed))
    pseudocount = 0.25
    new = run.engine.m_step(run.state, e.counts, pseudocount)
    counts = run.counts(e.counts)
    # the entries EM may update: every stored entry (dense), the stored non-zeros (sparse)
    stored = (dense_counts(model, np.ones(model.layout.size)) > 0) if implementation != "sparse" else None
    if stored is None:
        stored = model.dense_T() > 0
    raw = np.where(stored, counts + pseudocount, 0.0)
    sums = raw.sum(axis=1, keepdims=True)
    expected = np.divide(raw, sums, out=np.zeros_like(raw), where=sums > 0)
    np.testing.assert_allclose(run.dense_T(new), expected, rtol=run.rtol, atol=1e-7)


def test_fixed_zeros_stay_zero_on_every_implementation(implementation: str) -> None:
    model = tiny_model(1).with_arrays(fixed_zeros=True)
    run = Harness(implementation, model)
    zeros = model.dense_T() == 0
    e = engines.e_step_sequences(run.engine, run.state, sequences(model, 1))
    new = run.engine.m_step(run.state, e.counts, 0.5)
    assert np.all(run.dense_T(new)[zeros] == 0)


@pytest.mark.parametrize("seed", SEEDS)
def test_online_update(implementation: str, seed: int) -> None:
    model = tiny_model(seed)
    run = Harness(implementation, model)
    x = sequences(model, seed)[0]
    original = run.dense_T(run.state)
    working = run.engine.copy(run.state)
    statistic = run.engine.zero_counts(run.state)
    memory, pseudocount = 0.7, 0.1
    e1 = run.engine.e_step(working, x, counts_out=run.engine.zero_counts(run.state))
    first = run.counts(e1.counts)
    working = learning.online_update(run.engine, working, statistic, e1, memory, pseudocount, True)
    e2 = run.engine.e_step(working, x, counts_out=run.engine.zero_counts(run.state))
    second = run.counts(e2.counts)
    working = learning.online_update(run.engine, working, statistic, e2, memory, pseudocount, False)
    expected_statistic = memory * (1 - memory) * first + (1 - memory) * second
    np.testing.assert_allclose(run.counts(statistic), expected_statistic, rtol=run.rtol, atol=1e-9)
    stored = model.dense_T() > 0 if implementation == "sparse" else dense_counts(model, np.ones(model.layout.size)) > 0
    raw = np.where(stored, expected_statistic + pseudocount, 0.0)
    sums = raw.sum(axis=1, keepdims=True)
    expected_T = np.divide(raw, sums, out=np.zeros_like(raw), where=sums > 0)
    np.testing.assert_allclose(run.dense_T(working), expected_T, rtol=run.rtol, atol=1e-7)
    np.testing.assert_array_equal(run.dense_T(run.state), original)  # the copy changed, the original did not


# ----------------------------------------------------------------------------------------------- Viterbi, sampling
@pytest.mark.parametrize("seed", SEEDS)
def test_viterbi_and_hard_counts_against_brute_force(implementation: str, seed: int) -> None:
    model = tiny_model(seed)
    run = Harness(implementation, model)
    for x in sequences(model, seed):
        exact = brute_force(model, x)
        result = run.engine.viterbi(run.state, x)
        np.testing.assert_array_equal(result.clones, exact["map"])
        assert result.log_probability == pytest.approx(np.log(exact["map_p"]), rel=run.rtol)
        counts, log_likelihood = run.engine.hard_counts(run.state, x)
        expected = np.zeros((model.n_states, model.n_states))
        np.add.at(expected, (exact["map"][:-1], exact["map"][1:]), 1.0)
        np.testing.assert_allclose(run.counts(counts), expected)
        assert log_likelihood == pytest.approx(np.log(exact["p"]), rel=run.rtol)


def test_viterbi_with_soft_evidence_is_the_same_on_every_implementation(implementation: str) -> None:
    model = tiny_model(2)
    run = Harness(implementation, model)
    rng = np.random.default_rng(4)
    options = [
        {int(s): float(rng.random() + 0.1) for s in rng.choice(model.n_symbols, 2, replace=False)} for _ in range(6)
    ]
    evidence = inference.Evidence.from_lists(options)
    reference = inference.viterbi(model, evidence)
    result = run.engine.viterbi(run.state, evidence)
    np.testing.assert_array_equal(result.clones, reference.clones)
    assert result.log_probability == pytest.approx(reference.log_probability, rel=run.rtol)


@pytest.mark.parametrize("seed", SEEDS)
def test_sampling_is_the_same_on_every_implementation(implementation: str, seed: int) -> None:
    model = tiny_model(seed)
    run = Harness(implementation, model)
    reference = sampling.sample(model, 200, np.random.default_rng(seed))
    got = run.engine.sample(run.state, 200, np.random.default_rng(seed))
    np.testing.assert_array_equal(got, reference)
    prefix = sequences(model, seed)[0]
    reference = sampling.sample(model, 50, np.random.default_rng(seed + 10), prefix)
    np.testing.assert_array_equal(run.engine.sample(run.state, 50, np.random.default_rng(seed + 10), prefix), reference)


# ----------------------------------------------------------------------------------------------- pruning, graph
@pytest.mark.parametrize("threshold", [0.05, 0.2])
def test_pruning_is_the_same_on_every_implementation(implementation: str, threshold: float) -> None:
    model = tiny_model(3)
    run = Harness(implementation, model)
    # the pruning of the model the implementation holds (float32 values on a GPU: pruning the float64 model instead
    # gives a back-off weight 1.4e-6 away, the float32 rounding of T, not a difference of the implementations)
    held = run.engine.as_dense(run.state, "pruning")
    reference = DenseEngine().prune(held, threshold)
    pruned = run.engine.prune(run.state, threshold)
    np.testing.assert_allclose(run.dense_T(pruned), reference.dense_T(), rtol=run.rtol, atol=1e-12)
    host = run.engine.host(pruned)
    assert host.backoff_weight == pytest.approx(reference.backoff_weight, rel=1e-9)
    assert host.fixed_zeros and host.metadata["pruned"]["threshold"] == threshold
    rows, cols, values, counts = run.engine.transitions(pruned)
    dense = reference.dense_T()
    assert set(zip(rows.tolist(), cols.tolist(), strict=True)) == set(zip(*np.nonzero(dense), strict=True))
    np.testing.assert_allclose(values, dense[rows, cols], rtol=run.rtol)


def test_transitions_are_the_non_zero_entries(implementation: str) -> None:
    model = tiny_model(0)
    run = Harness(implementation, model)
    rows, cols, values, counts = run.engine.transitions(run.state)
    dense = model.dense_T()
    expected_rows, expected_cols = np.nonzero(dense)
    order = np.lexsort((cols, rows))
    np.testing.assert_array_equal(rows[order], expected_rows)
    np.testing.assert_array_equal(cols[order], expected_cols)
    np.testing.assert_allclose(values[order], dense[expected_rows, expected_cols], rtol=run.rtol)
    if implementation not in FLOAT32:
        np.testing.assert_allclose(counts[order], dense_counts(model, model.counts)[expected_rows, expected_cols])


# ----------------------------------------------------------------------------------------------- the training loop
@pytest.mark.parametrize("algorithm", ["em", "online", "viterbi"])
def test_fit_on_documents_is_the_same_on_dense_and_sparse(algorithm: str) -> None:
    """The one training loop on both CPU implementations: the same BPS history on a corpus of three documents
    (the model has no zeros, so dense and sparse store the same entries)."""
    rng = np.random.default_rng(9)
    pairs = np.array([(i, j) for i in range(3) for j in range(3)])
    model = random_model(list("abc"), np.array([2, 3, 2]), pairs, rng, dtype=np.float64)
    docs = [rng.integers(0, 3, size=n) for n in (300, 120, 250)]
    validation = [rng.integers(0, 3, size=80)]
    config = learning.TrainingConfig(algorithm=algorithm, iterations=4, tolerance=0.0, batch_size=100)
    dense_run = learning.fit(model, docs, validation, config)
    sparse_run = learning.fit(sparse.from_dense(model), docs, validation, config)
    dense_history = np.array([[r.train_bps, r.validation_bps] for r in dense_run.history])
    sparse_history = np.array([[r.train_bps, r.validation_bps] for r in sparse_run.history])
    np.testing.assert_allclose(sparse_history, dense_history, rtol=1e-8)
    np.testing.assert_allclose(sparse_run.model.to_dense().T, dense_run.model.T, rtol=1e-7, atol=1e-12)


def test_fit_with_one_sequence_repeats_em_iterations() -> None:
    rng = np.random.default_rng(11)
    pairs = np.array([(i, j) for i in range(2) for j in range(2)])
    model = random_model(list("ab"), np.array([2, 3]), pairs, rng, dtype=np.float64)
    x = rng.integers(0, 2, size=400)
    config = learning.TrainingConfig(iterations=3, tolerance=0.0)
    fitted = learning.fit(model, x, None, config)
    replay = model
    for record in fitted.history:
        replay, ll = learning.em_iteration(replay, x, config)
        assert record.train_bps == pytest.approx(-ll / (len(x) * np.log(2)), rel=1e-12)
    np.testing.assert_allclose(fitted.model.T, replay.T, rtol=1e-12)


# ----------------------------------------------------------------------------------------------- the registry
class ToyEngine:
    """A test-only implementation, as a new backend (say a JAX engine) would be added: one class (here every
    protocol operation is the dense CPU engine's, counted) and one registration."""

    def __init__(self, options: engines.NoOptions) -> None:
        self.inner = DenseEngine()
        self.name = "toy"
        self.calls: dict[str, int] = {}

    def __getattr__(self, operation: str):  # every protocol operation, delegated and counted
        method = getattr(self.inner, operation)

        def counted(*args, **kwargs):
            self.calls[operation] = self.calls.get(operation, 0) + 1
            return method(*args, **kwargs)

        return counted


@pytest.fixture
def toy_backend():
    made: list[ToyEngine] = []

    def factory(options: engines.NoOptions) -> ToyEngine:
        made.append(ToyEngine(options))
        return made[-1]

    toy = engines.register(
        engines.Implementation("toy", "toy", factory, lambda model: model.form == "dense", in_app=False)
    )
    try:
        yield toy, made
    finally:
        engines.unregister("toy")


def test_a_new_backend_is_one_class_and_one_registration(toy_backend) -> None:
    from engine import api, cli
    from engine.backends import model_files

    toy, made = toy_backend
    assert "toy" in engines.backend_choices() and "toy" not in engines.backend_choices(in_app=True)
    train = cli.build_parser()._subparsers._group_actions[0].choices["train"]  # noqa: SLF001
    assert "toy" in next(a for a in train._actions if a.dest == "backend").choices  # noqa: SLF001
    assert engines.implementation_for(tiny_model(0), "toy") is toy
    assert engines.implementation_for(sparse.from_dense(tiny_model(0)), "toy").name == "sparse"  # not accepted
    assert not engines.supports("toy", "restart_processes") and not engines.supports("toy", "grows")
    with pytest.raises(ValueError, match="already registered"):
        engines.register(toy)
    rng = np.random.default_rng(9)
    model = random_model(list("abc"), np.array([2, 3, 2]), np.array([(i, j) for i in range(3) for j in range(3)]), rng)
    docs = [rng.integers(0, 3, size=n) for n in (300, 120)]
    for algorithm in learning.ALGORITHMS:
        config = learning.TrainingConfig(algorithm=algorithm, iterations=3, tolerance=0.0, batch_size=100)
        on_toy = learning.fit(model, docs, docs[1], config, backend="toy")
        on_cpu = learning.fit(model, docs, docs[1], config, backend="cpu")
        assert [r.train_bps for r in on_toy.history] == [r.train_bps for r in on_cpu.history]
        np.testing.assert_array_equal(on_toy.model.T, on_cpu.model.T)
    assert made and made[-1].calls.get("e_step", 0) + made[-1].calls.get("hard_counts", 0) > 0
    sample = api.score_text(model_files.load_model("sample_models/alice-600.npz"), "alice was", backend="toy")
    assert made[-1].calls.get("score", 0) >= 1 and sample.symbols == len("alice was")


def test_an_unknown_or_unavailable_backend_is_refused_with_the_reason() -> None:
    from engine.errors import BackendError

    with pytest.raises(BackendError, match="unknown backend 'tpu'"):
        engines.engine_for(tiny_model(0), "tpu")
    available, reason = engines.backend_status("gpu")
    if not available:
        with pytest.raises(BackendError, match="GPU backend is not available"):
            engines.engine_for(tiny_model(0), "gpu")
        assert engines.resolve_backend("auto") == "cpu"


def test_a_sparse_model_runs_on_the_cpu_whatever_the_backend() -> None:
    """No backend but the CPU accepts sparse models: every choice falls back to the sparse implementation, without
    asking whether the chosen backend could run here (no CUDA initialised for CPU work)."""
    model = sparse.from_dense(tiny_model(0))
    for backend in engines.backend_choices():
        assert engines.implementation_for(model, backend).name == "sparse"


@pytest.mark.parametrize("implementation", ["dense", "sparse", "gpu-sim"])
def test_online_em_written_once_is_the_fused_kernel(implementation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Online EM through the update written once (engine.training.learning.online_update) follows the dense engine's
    fused kernel epoch by epoch, on every implementation, over batches that touch different blocks (the E-step reuses
    one counts buffer and writes only the blocks of its batch: a stale block of an earlier batch would be counted
    again)."""
    rng = np.random.default_rng(21)
    pairs = np.array([(i, j) for i in range(4) for j in range(4)])
    model = random_model(list("abcd"), np.array([2, 3, 2, 3]), pairs, rng, dtype=np.float64)
    # batches of 50 symbols from alternating halves of the alphabet: each batch touches other blocks than the last
    halves = [rng.integers(0, 2, size=50) if k % 2 else rng.integers(2, 4, size=50) for k in range(8)]
    docs = [np.concatenate(halves)]
    config = learning.TrainingConfig(algorithm="online", iterations=3, tolerance=0.0, batch_size=50)
    fused = learning.fit(model, docs, None, config)
    host = sparse.from_dense(model) if implementation == "sparse" else model
    monkeypatch.setattr(DenseEngine, "online_session", None)
    written_once = learning.fit(host, docs, None, config, backend="cpu" if implementation != "gpu-sim" else "gpu-sim")
    rtol = 1e-4 if implementation in FLOAT32 else 1e-9
    np.testing.assert_allclose(
        [r.train_bps for r in written_once.history], [r.train_bps for r in fused.history], rtol=rtol
    )
    T = written_once.model.to_dense().T if implementation == "sparse" else written_once.model.T
    np.testing.assert_allclose(T, fused.model.T, rtol=10 * rtol, atol=1e-6 if implementation in FLOAT32 else 1e-12)
