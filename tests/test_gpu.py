"""The GPU engine against the CPU engine on the same models, on two devices: the simulated one (NumPy twins of the
CUDA kernels, every CI run) and a CUDA GPU (skipped without CuPy and a device). The last tests check each CUDA
kernel against its twin on the same inputs.

Tolerances (issue): log-likelihood to 1e-5 relative, counts and one EM step to 1e-4, identical Viterbi paths on
non-degenerate models. Models are random (fresh seeds per case) with several layouts, including steps with no block
(zero-probability events), a pruned model and soft evidence.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from support import FIXED

from engine.backends import chunks, engines
from engine.backends.cpu import inference
from engine.backends.cpu import kernels as cpu
from engine.backends.gpu import backend, device_blocks, devices, implementation
from engine.cognitive import actions
from engine.model.blocks import normalise_rows, pairs_in_sequence
from engine.model.dense import CHMM, random_model
from engine.training import learning

available, reason = backend.gpu_status()
needs_a_gpu = [pytest.mark.gpu, pytest.mark.skipif(not available, reason=reason)]


@pytest.fixture(params=["gpu-sim", pytest.param("gpu", marks=needs_a_gpu)])
def name(request: pytest.FixtureRequest) -> str:
    """The backend: the GPU engine on the simulated device, or on a CUDA GPU."""
    return request.param


def device_of(name: str) -> devices.Device:
    return devices.SimulatedDevice() if name == "gpu-sim" else devices.cuda_device()


def blocks_for(name: str, model: CHMM, pass_precision: str = "float32") -> device_blocks.DeviceBlocks:
    return device_blocks.DeviceBlocks(model.layout, device_of(name), pass_precision)


def host(name: str, values) -> np.ndarray:
    return device_of(name).host(values)


def _model_and_sequence(seed: int, n_symbols: int, states: int, length: int, drop_pairs: int = 0):
    """A random model on the pairs of a random sequence (optionally missing some pairs) and the sequence."""
    rng = np.random.default_rng(seed)
    # a Markov chain over symbols with a few strong transitions, so the sequence has structure
    P = rng.dirichlet(np.full(n_symbols, 0.3), size=n_symbols)
    x = np.empty(length, dtype=np.int64)
    x[0] = 0
    for n in range(1, length):
        x[n] = rng.choice(n_symbols, p=P[x[n - 1]])
    n_clones = 1 + rng.multinomial(states - n_symbols, np.full(n_symbols, 1.0 / n_symbols))
    pairs = pairs_in_sequence(x, n_symbols)
    if drop_pairs:
        keep = np.ones(len(pairs), dtype=bool)
        keep[rng.choice(len(pairs), size=drop_pairs, replace=False)] = False
        pairs = pairs[keep]
    symbols = [chr(ord("a") + s) for s in range(n_symbols)]
    model = random_model(symbols, n_clones, pairs, rng)
    # sharpen T so that messages are far from uniform (uniform(0,1) rows are nearly flat)
    T = normalise_rows(model.layout, model.T.astype(np.float64) ** 4, 0.0, np.float32)
    return CHMM(model.symbols, model.layout, T, model.pi, None, {}), x, rng


CASES = [(1, 3, 12, 400), (2, 8, 200, 3000), (3, 27, 1500, 20000), (4, 5, 2600, 4000)]


@pytest.mark.parametrize("seed,n_symbols,states,length", CASES)
def test_forward_log_likelihood_matches_cpu(name, seed, n_symbols, states, length):
    model, x, _ = _model_and_sequence(seed, n_symbols, states, length)
    engine = blocks_for(name, model)
    device_model = engine.upload(model)
    predictive, zero_events = engine.forward(device_model, x)
    reference = inference.forward(model, x)
    assert zero_events == reference.zero_events == 0
    np.testing.assert_allclose(predictive, reference.predictive, rtol=1e-5)
    ll_gpu = engine.log_likelihood(device_model, x)
    ll_cpu = inference.log_likelihood(model, x)
    assert abs(ll_gpu - ll_cpu) <= 1e-5 * abs(ll_cpu)


def test_zero_probability_steps_restart_like_the_cpu(name):
    model, x, _ = _model_and_sequence(5, 6, 60, 3000, drop_pairs=3)
    engine = blocks_for(name, model)
    device_model = engine.upload(model)
    predictive, zero_events = engine.forward(device_model, x)
    reference = inference.forward(model, x)
    assert zero_events == reference.zero_events > 0
    np.testing.assert_allclose(predictive, reference.predictive, rtol=1e-5, atol=1e-12)
    assert engine.log_likelihood(device_model, x) == -np.inf
    adapter = engines.engine_for(model, name)
    bps_gpu = adapter.score(adapter.load(model), x).bps
    bps_cpu = inference.score(model, x).bps
    assert abs(bps_gpu - bps_cpu) <= 1e-5 * bps_cpu


@pytest.mark.parametrize("seed,n_symbols,states,length", CASES)
def test_e_step_counts_and_one_em_step_match_cpu(name, seed, n_symbols, states, length):
    model, x, _ = _model_and_sequence(seed + 10, n_symbols, states, length)
    engine = blocks_for(name, model)
    device_model = engine.upload(model)
    e_gpu = engine.e_step(device_model, x).result
    e_cpu = inference.e_step(model, x)
    counts = host(name, e_gpu.counts)
    scale = np.abs(e_cpu.counts).max()
    assert np.max(np.abs(counts - e_cpu.counts)) <= 1e-4 * scale
    assert abs(counts.sum() - (len(x) - 1)) <= 1e-4 * len(x)
    assert abs(e_gpu.log_likelihood - e_cpu.log_likelihood) <= 1e-5 * abs(e_cpu.log_likelihood)
    np.testing.assert_allclose(e_gpu.gamma_first, e_cpu.gamma_first, atol=1e-5)
    np.testing.assert_allclose(e_gpu.last_alpha, e_cpu.last_alpha, atol=1e-5)
    T_gpu, TT_gpu = engine.normalise(e_gpu.counts, 1e-3, None)
    T_cpu = normalise_rows(model.layout, e_cpu.counts, 1e-3, np.float32)
    assert np.max(np.abs(host(name, T_gpu) - T_cpu)) <= 1e-4
    transposed = cpu.transpose_blocks(
        host(name, T_gpu), model.layout.block_pairs, model.layout.block_offset, model.layout.n_clones
    )
    np.testing.assert_array_equal(host(name, TT_gpu), transposed)


@pytest.mark.parametrize("accumulate", [False, True])
def test_pair_counts_in_one_launch_are_a_product_per_pair(name, accumulate):
    """The counts of an E-step from ``pair_counts`` (every occurring pair in one launch: an online batch) equal those
    of one product per pair (batch EM over a whole text), written or added to what the buffer holds."""
    model, x, _ = _model_and_sequence(21, 6, 700, 900)
    blocks = blocks_for(name, model)
    state = blocks.upload(model)
    pl = inference.pair_sorted_offsets(model.layout, x)
    assert pl.pair_count.max() > 20 and blocks.layout.n_clones.max() ** 2 > 1024  # sums and several tiles per block
    found = []
    for most in (0, int(pl.pair_count.max())):
        blocks.pair_counts_max_occurrences = most
        held = blocks.xp.asarray(np.random.default_rng(0).random(model.layout.size).astype(np.float32))
        e = blocks.e_step(state, x, counts_out=held, accumulate=accumulate).result
        found.append(host(name, e.counts))
    scale = np.abs(found[0]).max()
    assert np.max(np.abs(found[1] - found[0])) <= 1e-5 * scale


def test_pruned_support_keeps_zeros(name):
    model, x, _ = _model_and_sequence(21, 8, 300, 4000)
    T = model.T.copy()
    T[T < np.quantile(T, 0.7)] = 0
    T = normalise_rows(model.layout, T.astype(np.float64), 0.0, np.float32)
    pruned = CHMM(model.symbols, model.layout, T, model.pi, None, fixed_zeros=True)
    assert np.any(T == 0) and np.any(T > 0)
    result = learning.fit(pruned, x, config=learning.TrainingConfig(iterations=2, pseudocount=1e-2), backend=name)
    assert result.model.fixed_zeros
    assert np.all(result.model.T[T == 0] == 0) and np.all(result.model.T[T > 0] > 0)
    reference = learning.fit(pruned, x, config=learning.TrainingConfig(iterations=2, pseudocount=1e-2))
    assert np.max(np.abs(result.model.T - reference.model.T)) <= 1e-4


@pytest.mark.parametrize("algorithm", ["em", "online", "viterbi"])
def test_fit_on_gpu_follows_cpu(name, algorithm):
    model, x, _ = _model_and_sequence(31, 10, 400, 12000)
    cut = 10000
    config = learning.TrainingConfig(algorithm=algorithm, iterations=3, batch_size=2500, pseudocount=1e-3)
    on_gpu = learning.fit(model, x[:cut], x[cut:], config, backend=name)
    on_cpu = learning.fit(model, x[:cut], x[cut:], config)
    assert len(on_gpu.history) == len(on_cpu.history) == 3
    for a, b in zip(on_gpu.history, on_cpu.history, strict=True):
        assert abs(a.train_bps - b.train_bps) <= 1e-4
        assert abs(a.validation_bps - b.validation_bps) <= 1e-4
    assert isinstance(on_gpu.model.T, np.ndarray)
    assert np.max(np.abs(on_gpu.model.T - on_cpu.model.T)) <= 1e-3


@pytest.mark.parametrize("seed,n_symbols,states,length", CASES)
def test_viterbi_paths_identical(name, seed, n_symbols, states, length):
    model, x, _ = _model_and_sequence(seed + 40, n_symbols, states, min(length, 3000))
    engine = blocks_for(name, model)
    device_model = engine.upload(model)
    on_gpu = engine.viterbi(device_model, x)
    on_cpu = inference.viterbi(model, x)
    np.testing.assert_array_equal(on_gpu.clones, on_cpu.clones)
    assert abs(on_gpu.log_probability - on_cpu.log_probability) <= 1e-9 * abs(on_cpu.log_probability)


def test_viterbi_soft_evidence_identical(name):
    model, x, rng = _model_and_sequence(50, 12, 600, 800)
    options = []
    for s in x:
        option = {int(s): 1.0}
        for other in rng.choice(12, size=3, replace=False):
            option.setdefault(int(other), float(rng.uniform(0.05, 0.5)))
        options.append(option)
    evidence = inference.Evidence.from_lists(options)
    adapter = engines.engine_for(model, name)
    on_gpu = adapter.viterbi(adapter.load(model), evidence)
    on_cpu = inference.viterbi(model, evidence)
    np.testing.assert_array_equal(on_gpu.clones, on_cpu.clones)
    assert abs(on_gpu.log_probability - on_cpu.log_probability) <= 1e-9 * abs(on_cpu.log_probability)


def test_sampling_follows_the_cpu_kernel(name):
    model, x, rng = _model_and_sequence(60, 9, 500, 5000)
    engine = blocks_for(name, model)
    device_model = engine.upload(model)
    layout = model.layout
    uniforms = rng.random(2000)
    first = int(layout.clone_start[x[0]])
    symbols = engine.sample_path(device_model, first, uniforms)
    out = np.empty(len(uniforms), dtype=np.int64)
    row_block_start = np.searchsorted(layout.block_pairs[:, 0], np.arange(layout.n_symbols + 1))
    written = cpu.sample_path(
        model.T,
        layout.n_clones,
        layout.clone_start,
        layout.clone_symbol(),
        row_block_start,
        layout.block_pairs,
        layout.block_offset,
        first,
        uniforms,
        out,
    )
    np.testing.assert_array_equal(symbols, out[:written])


def test_memory_estimate_refuses_a_run_that_does_not_fit(name, monkeypatch):
    model, x, _ = _model_and_sequence(70, 5, 100, 2000)
    monkeypatch.setattr(device_blocks.DeviceBlocks, "free_bytes", lambda self: 1000)
    with pytest.raises(devices.DeviceMemoryError, match="GiB of GPU memory"):
        learning.fit(model, x, config=learning.TrainingConfig(iterations=1), backend=name)


def test_float16_pass_copy_stays_close_to_float32(name):
    model, x, _ = _model_and_sequence(80, 27, 1500, 20000)
    exact = blocks_for(name, model)
    half = blocks_for(name, model, "float16")
    predictive32, _ = exact.forward(exact.upload(model), x)
    device_model = half.upload(model)
    predictive16, zero_events = half.forward(device_model, x)
    assert zero_events == 0
    np.testing.assert_allclose(predictive16, predictive32, rtol=5e-3)
    bps32 = -np.log2(predictive32).mean()
    bps16 = -np.log2(predictive16).mean()
    assert abs(bps16 - bps32) < 1e-3
    counts16 = host(name, half.e_step(device_model, x).result.counts)
    counts32 = host(name, exact.e_step(exact.upload(model), x).result.counts)
    assert np.max(np.abs(counts16 - counts32)) <= 1e-2 * np.abs(counts32).max()


@pytest.mark.parametrize("segment", [7, 450, 2999])
@pytest.mark.parametrize("drop_pairs", [0, 2])
def test_segmented_e_step_is_the_whole_sequence_e_step(name, segment, drop_pairs):
    model, x, _ = _model_and_sequence(90 + segment, 7, 300, 3000, drop_pairs=drop_pairs)
    engine = blocks_for(name, model)
    device_model = engine.upload(model)
    whole = engine.e_step(device_model, x).result
    parts = engine.e_step_segmented(device_model, x, segment).result
    reference = host(name, whole.counts)
    assert np.max(np.abs(host(name, parts.counts) - reference)) <= 1e-5 * np.abs(reference).max()
    assert parts.zero_events == whole.zero_events
    if whole.zero_events == 0:
        assert abs(parts.log_likelihood - whole.log_likelihood) <= 1e-6 * abs(whole.log_likelihood)
    np.testing.assert_allclose(parts.gamma_first, whole.gamma_first, atol=1e-6)
    np.testing.assert_allclose(parts.last_alpha, whole.last_alpha, atol=1e-6)
    np.testing.assert_array_equal(parts.touched, whole.touched)


def test_fit_in_segments_matches_fit_without(name):
    model, x, _ = _model_and_sequence(95, 6, 200, 5000)
    config = learning.TrainingConfig(iterations=2, pseudocount=1e-3)
    whole = learning.fit(model, x, config=config, backend=name)
    segmented = learning.fit(model, x, config=config, backend=name, options=implementation.GpuOptions(segment=600))
    assert np.max(np.abs(whole.model.T - segmented.model.T)) <= 1e-5


def test_fit_in_lockstep_chunks_keeps_the_bps_and_the_cpu_refuses_them(name):
    """``TrainingConfig(chunk=...)`` without a cluster: batch EM on the GPU engine runs lockstep E-steps over chunks
    with the lockstep burn-in (the model within 1e-6 BPS of the exact run's); the CPU implementations refuse."""
    model, x, _ = _model_and_sequence(96, 6, 200, 5000)
    config = learning.TrainingConfig(iterations=4, pseudocount=1e-3)
    whole = learning.fit(model, x, config=config, backend=name)
    together = learning.fit(model, x, config=replace(config, chunk=400), backend=name)
    bits = [
        -np.sum(np.log(inference.forward(m, x).predictive)) / len(x) / np.log(2) for m in (whole.model, together.model)
    ]
    assert bits[1] == pytest.approx(bits[0], abs=1e-6)
    with pytest.raises(ValueError, match="no lockstep passes"):
        learning.fit(model, x, config=replace(config, chunk=400), backend="cpu")


def test_cli_trains_in_lockstep_chunks_on_the_gpu_only(name, tmp_path, capsys):
    """``chmm train --chunk N`` without a cluster trains in lockstep chunks on the GPU engines (the setting is kept
    in the model, and the model is the exact run's within 1e-4 BPS: the lockstep E-steps read float16 blocks by
    default); on the CPU it is refused in one sentence."""
    import json

    from engine import cli
    from engine.backends.model_files import load_model

    base = [
        "train",
        "tests/data/blake-poems.txt",
        "--states",
        "300",
        *FIXED,
        "--iterations",
        "4",
        "--quiet",
        "--json",
    ]
    bits = {}
    for extra in ([], ["--chunk", "500"]):
        path = tmp_path / f"m{len(extra)}.npz"
        assert cli.main([*base, "-o", str(path), "--backend", name, *extra]) == 0
        bits[len(extra)] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["train_bps"]
    assert load_model(tmp_path / "m2.npz").metadata["settings"]["chunk"] == 500
    assert bits[2] == pytest.approx(bits[0], abs=1e-4)
    assert cli.main([*base, "-o", str(tmp_path / "cpu.npz"), "--chunk", "500"]) == 1
    assert "lockstep passes on the GPU" in capsys.readouterr().err
    assert cli.main([*base, "-o", str(tmp_path / "cpu.npz"), "--burn-in", "20"]) == 1  # no chunks on the CPU
    assert "--burn-in belongs to chunks" in capsys.readouterr().err
    assert cli.main([*base, "-o", str(tmp_path / "cpu.npz"), "--chunk", "0"]) == 0  # exact passes, as without
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["train_bps"] == pytest.approx(bits[0], 1e-5)
    assert cli.main([*base, "-o", str(tmp_path / "b.npz"), "--backend", name, "--burn-in", "20"]) == 0


def test_cli_score_on_the_gpu_matches_the_cpu(name, tmp_path, capsys):
    import json

    from engine import cli

    corpus = "tests/data/blake-poems.txt"
    model_path = tmp_path / "m.npz"
    assert (
        cli.main(
            [
                "train",
                corpus,
                "-o",
                str(model_path),
                "--states",
                "300",
                "--iterations",
                "3",
                "--quiet",
                "--backend",
                name,
                "--json",
                "--keep-statistics",  # the GPU's back-off reads the counts (see the test below)
            ]
        )
        == 0
    )
    trained = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert cli.main(["score", str(model_path), corpus, "--json"]) == 0
    on_cpu = json.loads(capsys.readouterr().out)
    assert cli.main(["score", str(model_path), corpus, "--json", "--backend", name]) == 0
    on_gpu = json.loads(capsys.readouterr().out)
    assert abs(on_cpu["bps"] - on_gpu["bps"]) <= 1e-5 * on_cpu["bps"]
    assert trained["test_bps"] > 0


def test_the_gpu_scores_a_model_saved_without_counts_as_the_cpu(name, tmp_path):
    """A pruned model saved without its counts backs off with the bigram of its per-block sums (pair_counts) on the
    GPU engines as on the CPU: the same BPS."""
    from pathlib import Path

    from engine import api
    from engine.backends import engines
    from engine.model import pruning
    from engine.training.stages import sequences_bps

    text = Path("tests/data/blake-poems.txt").read_text(encoding="utf-8")
    options = api.TrainOptions(states=120, algorithm="em", pseudocount=1e-6, iterations=3)
    model = api.train_text(text, options).model
    small = pruning.prune(model, threshold=1e-2).without_statistics()  # a back-off weight far above 1e-6
    x = small.encode(small.codec.normalise(text))[:5000]
    on_cpu = sequences_bps(small, [x], "cpu")
    assert engines.implementation_for(small, name).backend == name
    assert sequences_bps(small, [x], name) == pytest.approx(on_cpu, rel=1e-5)


# ----------------------------------------------------------------------------------------------- kernels and twins
def test_every_cuda_kernel_has_a_twin():
    """The kernel table is complete on both sides: every kernel the CUDA source defines has a twin, and the
    adapter launches nothing else."""
    import re

    from engine.backends.gpu import kernels as cuda_kernels
    from engine.backends.gpu.twins import TWINS

    kernel_name = r'extern "C" __global__ void(?: __launch_bounds__\([^)]*\))?\s+(\w+)\('
    defined = set(re.findall(kernel_name, cuda_kernels.SOURCE))
    assert defined == set(TWINS) == set(cuda_kernels.KERNELS)
    # the _rows2 kernels read two rows of a float16 block an even number of rows (the warps) apart, which start alike
    assert cuda_kernels.THREADS % 64 == 0
    for constant in ("LOCKSTEP_TILE_MAX", "LOCKSTEP_LOADS"):  # the host cuts work and picks kernels as they expect
        defined_as = re.search(rf"#define {constant} (\d+)", cuda_kernels.SOURCE).group(1)
        assert defined_as == str(getattr(cuda_kernels, constant))
    source = open(device_blocks.__file__, encoding="utf-8").read()
    launched = set(re.findall(r'device\.kernel\("(\w+)"\)', source))
    launched |= set(re.findall(r'"((?:chain_sum|lockstep_chain)_f\d+)"', source))
    assert launched == defined


# ----------------------------------------------------------------------------------------------- lockstep passes
@pytest.mark.parametrize("drop_pairs", [0, 3])
def test_lockstep_forward_is_each_sequence_forward(name, drop_pairs):
    """Whole documents in lockstep (no burn-in): each one's predictive probabilities are those of its own forward
    pass to float32 rounding, zero-probability events included (they restart the message uniform in both)."""
    model, x, _ = _model_and_sequence(110 + drop_pairs, 6, 150, 3000, drop_pairs=drop_pairs)
    adapter = engines.engine_for(model, name)
    state = adapter.load(model)
    documents = [x[:1200], x[1200:1201], x[1201:1900], x[1900:]]
    together = adapter.lockstep_forward(state, documents)
    assert any((p <= 0).any() for p in together) == (drop_pairs > 0)
    for document, predictive in zip(documents, together, strict=True):
        alone = adapter.forward(state, document).predictive
        reference = inference.forward(model, document).predictive
        assert len(predictive) == len(document)
        np.testing.assert_array_equal(predictive <= 0, reference <= 0)
        np.testing.assert_allclose(predictive, alone, rtol=1e-5, atol=1e-30)
        np.testing.assert_allclose(predictive, reference, rtol=1e-5, atol=1e-30)


def test_lockstep_chunks_with_a_burn_in_stay_within_the_bound(name):
    """One long document cut into chunks with a burn-in of 50 (the cluster's chunking), advanced in lockstep: the
    log-likelihood of the counted steps is the exact one within 1e-6 bits per symbol (measured: about 1e-9)."""
    from engine.backends.chunks import as_chunks, chunk, counted_log_likelihood

    model, x, _ = _model_and_sequence(120, 8, 300, 6000)
    adapter = engines.engine_for(model, name)
    state = adapter.load(model)
    pieces = as_chunks(chunk([x], 400, 50))
    assert len(pieces) == 15 and sum(len(p) for p in pieces) == len(x) - 1
    log_likelihood = counted_log_likelihood(pieces, adapter.lockstep_forward(state, pieces))
    exact = float(np.sum(np.log(inference.forward(model, x).predictive)))
    assert abs(log_likelihood - exact) / len(x) / np.log(2) < 1e-6


def _float64(model: CHMM) -> CHMM:
    return model.with_arrays(T=model.T.astype(np.float64), pi=model.pi.astype(np.float64))


@pytest.mark.parametrize("drop_pairs", [0, 3])
def test_lockstep_e_step_of_whole_documents_is_the_sum_of_their_own(name, drop_pairs):
    """Whole documents as the chunks of a lockstep E-step (no burn-in): the counts are the sum of each document's
    own E-step (the float64 CPU reference) to float32 rounding, and so are the log-likelihood, the zero-probability
    events and (their mean) gamma at the start."""
    from engine.backends.chunks import LockstepPlan

    model, x, _ = _model_and_sequence(140 + drop_pairs, 6, 150, 3000, drop_pairs=drop_pairs)
    documents = [x[:1200], x[1200:1202], x[1202:1900], x[1900:]]
    blocks = blocks_for(name, model)
    state = blocks.upload(model)
    together = blocks.lockstep_e_step(state, LockstepPlan.build(model.layout, documents))
    alone = [inference.e_step(_float64(model), d) for d in documents]
    counts = sum(e.counts for e in alone)
    np.testing.assert_allclose(host(name, together.counts), counts, rtol=2e-4, atol=2e-4 * counts.max())
    assert together.zero_events == sum(e.zero_events for e in alone) and (together.zero_events > 0) == (drop_pairs > 0)
    exact = sum(e.log_likelihood for e in alone)
    if drop_pairs:
        assert together.log_likelihood == exact == -np.inf
    else:
        assert together.log_likelihood == pytest.approx(exact, rel=1e-6)
    np.testing.assert_allclose(together.gamma_first, np.mean([e.gamma_first for e in alone], axis=0), atol=1e-5)
    np.testing.assert_array_equal(together.touched, np.any([e.touched for e in alone], axis=0))
    np.testing.assert_allclose(together.last_alpha, alone[-1].last_alpha, rtol=1e-4, atol=1e-6)


def test_lockstep_e_step_with_a_burn_in_stays_within_the_bound(name):
    """One long document cut into 15 chunks with a burn-in of 50: the lockstep E-step's counts are the exact ones
    to within 1e-4 of their total (the message error at the seams; measured: about 1e-6), and its log-likelihood
    within 1e-6 bits per symbol."""
    from engine.backends.chunks import LockstepPlan, chunk

    model, x, _ = _model_and_sequence(150, 8, 300, 6000)
    blocks = blocks_for(name, model)
    state = blocks.upload(model)
    plan = LockstepPlan.build(model.layout, chunk([x], 400, 50))
    assert plan.n_chunks == 15
    together = blocks.lockstep_e_step(state, plan)
    exact = inference.e_step(_float64(model), x)
    difference = np.abs(host(name, together.counts) - exact.counts).sum()
    assert difference / exact.counts.sum() < 1e-4
    assert abs(together.log_likelihood - exact.log_likelihood) / len(x) / np.log(2) < 1e-6
    np.testing.assert_allclose(together.gamma_first, exact.gamma_first, atol=1e-5)


def test_lockstep_loads_in_flight_give_the_same_pass(name):
    """The float32 lockstep kernels with 1, 4 and 8 loads of a row in flight per lane, and with 4 loads of each of
    two rows per warp (rows of 150 to 600 entries, so the batched loop, its remainder and both run; 40 rows per item,
    so a warp's last turn holds one row in some items), their work items taken in turn or as thread blocks come free,
    give the same predictive probabilities to float32 rounding; any other number, and two rows with other than 4
    loads, is refused in one sentence."""
    model, x, _ = _model_and_sequence(172, 5, 1500, 2000)
    blocks = blocks_for(name, model)
    state = blocks.upload(model)
    schedule = chunks.LockstepSchedule.build(model.layout, [x[:700], x[700:1300], x[1300:]])
    passes = {}
    settings = [(1, 1, 128, False), (4, 1, 128, False), (8, 1, 128, False), (4, 2, 128, False), (4, 2, 40, False)]
    settings += [(4, 1, 40, True), (4, 2, 40, True), (1, 1, 128, True)]  # work items taken as thread blocks come free
    for loads, in_flight, rows, dynamic in settings:
        blocks.lockstep_loads, blocks.lockstep_rows_in_flight, blocks.lockstep_rows = loads, in_flight, rows
        blocks.lockstep_dynamic = dynamic
        passes[loads, in_flight, rows, dynamic] = blocks.lockstep_forward(state, schedule)
    for key in settings[1:]:
        for these, single in zip(passes[key], passes[settings[0]], strict=True):
            np.testing.assert_allclose(these, single, rtol=1e-6)
    blocks.lockstep_loads, blocks.lockstep_rows_in_flight = 3, 1
    with pytest.raises(ValueError, match="lockstep_loads is one of"):
        blocks.lockstep_forward(state, schedule)
    for loads, in_flight in ((4, 3), (8, 2)):
        blocks.lockstep_loads, blocks.lockstep_rows_in_flight = loads, in_flight
        with pytest.raises(ValueError, match="lockstep_rows_in_flight is one of"):
            blocks.lockstep_forward(state, schedule)


@pytest.mark.parametrize(
    "rows, loads, in_flight, dynamic", [(64, 4, 1, False), (32, 1, 1, False), (160, 8, 1, True), (40, 4, 2, True)]
)
def test_float16_lockstep_passes_are_the_sequential_float16_passes(name, rows, loads, in_flight, dynamic):
    """On the float16 copy of the blocks (odd and even block widths, so rows start on and off a pair of entries),
    whole documents in lockstep: each one's predictive probabilities are those of its own sequential float16 pass
    to float32 rounding (the blocks' scale taken out), and the E-step's counts, log-likelihood and zero events are
    the sum of each document's float16 E-step; any number of output rows per work item, of loads in flight per lane
    and of rows per warp, the items taken in turn or as thread blocks come free, gives the same."""
    from engine.backends.chunks import LockstepPlan

    model, x, _ = _model_and_sequence(170, 6, 151, 3000, drop_pairs=2)
    assert len(set(model.layout.n_clones % 2)) == 2
    half = blocks_for(name, model, "float16")
    half.lockstep_rows = rows
    half.lockstep_loads = loads
    half.lockstep_rows_in_flight = in_flight
    half.lockstep_dynamic = dynamic
    state = half.upload(model)
    documents = [x[:1200], x[1200:1202], x[1202:1900], x[1900:]]
    together = half.lockstep_forward(state, chunks.LockstepSchedule.build(model.layout, documents))
    for document, predictive in zip(documents, together, strict=True):
        alone, _ = half.forward(state, document)
        np.testing.assert_array_equal(predictive <= 0, alone <= 0)
        np.testing.assert_allclose(predictive, alone, rtol=1e-5, atol=1e-30)
    e_together = half.lockstep_e_step(state, LockstepPlan.build(model.layout, documents))
    alone = [half.e_step(state, d).result for d in documents]
    counts = sum(host(name, e.counts).astype(np.float64) for e in alone)
    np.testing.assert_allclose(host(name, e_together.counts), counts, rtol=2e-4, atol=2e-4 * counts.max())
    assert e_together.zero_events == sum(e.zero_events for e in alone) > 0
    reference = blocks_for(name, model).lockstep_forward(
        blocks_for(name, model).upload(model), chunks.LockstepSchedule.build(model.layout, documents)
    )
    for predictive16, predictive32 in zip(together, reference, strict=True):  # and float16 is close to float32
        np.testing.assert_allclose(predictive16, predictive32, rtol=5e-3)


def test_float16_lockstep_e_step_with_a_burn_in_keeps_the_float32_bps(name):
    """One long document in 15 lockstep chunks with a burn-in of 50 on the float16 blocks: the log-likelihood is the
    float32 lockstep E-step's within 1e-3 bits per symbol and the counts within 1% of their largest."""
    from engine.backends.chunks import LockstepPlan, chunk

    model, x, _ = _model_and_sequence(175, 8, 300, 6000)
    plan = LockstepPlan.build(model.layout, chunk([x], 400, 50))
    results = {}
    for precision in ("float32", "float16"):
        blocks = blocks_for(name, model, precision)
        results[precision] = blocks.lockstep_e_step(blocks.upload(model), plan)
    bits = {p: -r.log_likelihood / len(x) / np.log(2) for p, r in results.items()}
    assert abs(bits["float16"] - bits["float32"]) < 1e-3
    counts16, counts32 = (host(name, results[p].counts) for p in ("float16", "float32"))
    assert np.max(np.abs(counts16 - counts32)) <= 1e-2 * np.abs(counts32).max()


@pytest.mark.parametrize("precision, bound", [("float32", 1e-6), ("float16", 1e-4)])
def test_batch_em_in_lockstep_chunks_keeps_the_bps(name, precision, bound):
    """Ten batch-EM iterations with the E-step in 12 lockstep chunks (burn-in 50, the plan's ``chunk``) reach the
    training BPS of the exact float32 passes within 1e-6 bits per symbol on float32 blocks, within 1e-4 on float16
    blocks (the default; measured on 3 corpora at 10,000 states after 20 iterations: within 1e-5); the plan is built
    once and reused."""
    model, x, _ = _model_and_sequence(160, 7, 280, 5000)
    bits = {}
    options = implementation.GpuOptions(lockstep_precision=precision)
    for lockstep in (None, 12):
        adapter = engines.engine_for(model, name, options)
        state = adapter.load(model)
        chunk = chunks.EXACT if lockstep is None else -(-(len(x) - 1) // lockstep)
        plan = adapter.plan(state, x, "em", len(x), chunk=chunk, burn_in=50)
        assert (plan.lockstep is not None) == (lockstep is not None)
        assert lockstep is None or plan.lockstep.plan.n_chunks == lockstep
        for _ in range(10):
            e = adapter.e_step(state, x, plan=plan)
            state = adapter.m_step(state, e.counts, 1e-6, e.gamma_first)
        bits[lockstep] = -adapter.e_step(state, x).log_likelihood / len(x) / np.log(2)
    assert bits[12] == pytest.approx(bits[None], abs=bound)


def test_the_engine_chooses_lockstep_chunks_that_fill_the_device_with_at_least_the_fewest_steps():
    """:func:`chunks.lockstep_length`: exact passes below the shortest sequence, chunks of the fewest steps until
    there are as many as fill the device, then longer chunks."""
    assert chunks.lockstep_length(chunks.LOCKSTEP_MIN_SYMBOLS - 1) is None
    assert chunks.lockstep_length(chunks.LOCKSTEP_MIN_SYMBOLS) == chunks.LOCKSTEP_STEPS
    most = chunks.LOCKSTEP_CHUNKS * chunks.LOCKSTEP_STEPS
    assert chunks.lockstep_length(most + 1) == chunks.LOCKSTEP_STEPS
    assert chunks.lockstep_length(10 * most + 1) == 10 * chunks.LOCKSTEP_STEPS
    for n in (most + 2, 3 * most + 7, 10_000_000):
        length = chunks.lockstep_length(n)
        assert -(-(n - 1) // length) <= chunks.LOCKSTEP_CHUNKS < -(-(n - 1) // (length - 1))


def test_batch_em_on_the_gpu_runs_long_sequences_in_lockstep_chunks_by_default(name, monkeypatch):
    """Without ``chunk`` the GPU engine's batch EM runs a sequence of at least
    :data:`chunks.LOCKSTEP_MIN_SYMBOLS` in the lockstep chunks :func:`chunks.lockstep_length` chooses (burn-in
    :data:`chunks.LOCKSTEP_BURN_IN`), within 1e-6 BPS of exact passes after 5 iterations; ``chunk``
    :data:`chunks.EXACT` asks for exact passes; where the chunks' messages do not fit in device memory it falls back
    to exact passes (in segments) rather than refusing."""
    model, x, _ = _model_and_sequence(161, 7, 150, chunks.LOCKSTEP_MIN_SYMBOLS + 1000)
    adapter = engines.engine_for(model, name)
    state = adapter.load(model)
    plan = adapter.plan(state, x, "em", len(x))
    steps = chunks.lockstep_length(len(x))
    assert plan.lockstep is not None and plan.lockstep.plan.n_chunks == -(-(len(x) - 1) // steps)
    assert plan.lockstep.plan.pieces[1].lo == chunks.LOCKSTEP_BURN_IN  # the second chunk's burn-in before it
    assert adapter.plan(state, x, "em", len(x), chunk=chunks.EXACT).lockstep is None
    assert adapter.plan(state, x[: chunks.LOCKSTEP_MIN_SYMBOLS - 1], "em", len(x)).lockstep is None
    config = learning.TrainingConfig(iterations=5, pseudocount=1e-3, tolerance=0.0)
    exact = learning.fit(model, x, config=replace(config, chunk=chunks.EXACT), backend=name)
    together = learning.fit(model, x, config=config, backend=name)
    bits = [
        -np.sum(np.log(inference.forward(m, x).predictive)) / len(x) / np.log(2) for m in (exact.model, together.model)
    ]
    assert bits[1] == pytest.approx(bits[0], abs=1e-6) and bits[1] != bits[0]

    whole = adapter.plan(state, x, "em", len(x), chunk=chunks.EXACT).pair_layout
    assert whole is not None
    mean = float(model.layout.n_clones[x].mean())  # room for 1.2 times the sequence's messages: its chunks need 1.5
    model_bytes = devices.estimate_device_bytes(model.layout, [], mean)
    room = int(model_bytes + 1.2 * len(x) * (8 * mean + 64))
    monkeypatch.setattr(type(state.blocks), "free_bytes", lambda self: room)
    fallback = adapter.plan(state, x, "em", len(x))
    assert fallback.lockstep is None and fallback.segment is not None and fallback.segment < len(x)


def test_the_lockstep_schedule_visits_every_step_of_every_chunk_once():
    from engine.backends.chunks import LockstepSchedule, chunk

    model, x, _ = _model_and_sequence(130, 5, 40, 500, drop_pairs=2)
    layout = model.layout
    schedule = LockstepSchedule.build(layout, chunk([x, x[:30], x[:1]], 60, 7))
    seen = set()
    for step in range(schedule.n_steps):
        groups = range(schedule.step_group_start[step], schedule.step_group_start[step + 1])
        rows = 0
        for g in groups:
            block = schedule.group_block[g]
            members = schedule.chunk_ids[schedule.group_chunk_start[g] : schedule.group_chunk_start[g + 1]]
            assert len(members) > 0 and schedule.group_row_base[g] == rows
            for c in members:
                piece = schedule.pieces[c]
                i, j = piece.x[step], piece.x[step + 1]
                assert layout.find_block(i, j) == block
                assert schedule.group_in[g] == layout.n_clones[i] or block < 0
                assert schedule.group_out[g] == layout.n_clones[j]
                seen.add((int(c), step))
            rows += schedule.group_out[g] if block >= 0 else 0
        assert rows == schedule.step_rows[step]
    expected = {(c, t) for c, piece in enumerate(schedule.pieces) for t in range(len(piece.x) - 1)}
    assert seen == expected


def test_the_cuda_source_compiles(tmp_path):
    """Without a device, nvcc (where installed) still compiles the CUDA source to PTX for the H100/H200
    architecture, with every kernel of the table as an entry point: a syntax error reaches CI, not the device run."""
    import re
    import shutil
    import subprocess

    from engine.backends.gpu import kernels as cuda_kernels

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    source = tmp_path / "kernels.cu"
    source.write_text(cuda_kernels.SOURCE, encoding="utf-8")
    ptx = tmp_path / "kernels.ptx"
    result = subprocess.run(
        [nvcc, "--ptx", "-arch=sm_90", "-std=c++17", str(source), "-o", str(ptx)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    entries = set(re.findall(r"\.entry\s+(\w+)\(", ptx.read_text(encoding="utf-8")))
    assert entries == set(cuda_kernels.KERNELS)


@pytest.mark.gpu
@pytest.mark.skipif(not available, reason=reason)
@pytest.mark.parametrize("seed,n_symbols,states,length", CASES[:3])
def test_each_cuda_kernel_matches_its_twin(seed, n_symbols, states, length):
    """Every launch of one E-step, one M-step, one Viterbi pass, one sample and one lockstep pass (float32, and
    float16 with 32 rows per item, and with 40 rows per item read two rows per warp at once, the items taken as
    thread blocks come free) on the GPU,
    repeated on the simulated device from the same inputs: each output agrees with its twin's."""
    from engine.backends.chunks import LockstepSchedule

    model, x, rng = _model_and_sequence(seed + 100, n_symbols, states, min(length, 4000))
    outputs = {}
    for which in ("gpu", "gpu-sim"):
        blocks = blocks_for(which, model)
        state = blocks.upload(model)
        e = blocks.e_step(state, x).result
        batch = blocks.e_step(state, x[:300]).result.counts  # an online batch: its counts in one pair_counts launch
        T, TT = blocks.normalise(e.counts, 1e-3, None)
        path = blocks.viterbi(state, x)
        first = int(model.layout.clone_start[x[0]])
        sampled = blocks.sample_path(state, first, np.random.default_rng(seed).random(500))
        lockstep = np.concatenate(blocks.lockstep_forward(state, LockstepSchedule.build(model.layout, [x[:900], x])))
        half = blocks_for(which, model, "float16")
        half.lockstep_rows = 32
        schedule = LockstepSchedule.build(model.layout, [x[:900], x])
        lockstep16 = np.concatenate(half.lockstep_forward(half.upload(model), schedule))
        half.lockstep_rows, half.lockstep_rows_in_flight, half.lockstep_dynamic = 40, 2, True
        lockstep16_rows2 = np.concatenate(half.lockstep_forward(half.upload(model), schedule))
        outputs[which] = (
            host(which, e.counts),
            host(which, T),
            host(which, TT),
            path,
            sampled,
            e.log_likelihood,
            lockstep,
            lockstep16,
            host(which, batch),
            lockstep16_rows2,
        )
    cuda, twin = outputs["gpu"], outputs["gpu-sim"]
    scale = np.abs(twin[0]).max()
    assert np.max(np.abs(cuda[0] - twin[0])) <= 1e-5 * scale
    assert np.max(np.abs(cuda[8] - twin[8])) <= 1e-5 * np.abs(twin[8]).max()
    np.testing.assert_allclose(cuda[1], twin[1], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(cuda[2], twin[2], rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(cuda[3].clones, twin[3].clones)
    np.testing.assert_array_equal(cuda[4], twin[4])
    assert abs(cuda[5] - twin[5]) <= 1e-6 * abs(twin[5])
    np.testing.assert_allclose(cuda[6], twin[6], rtol=1e-5, atol=1e-30)
    np.testing.assert_allclose(cuda[7], twin[7], rtol=1e-5, atol=1e-30)
    np.testing.assert_allclose(cuda[9], twin[9], rtol=1e-5, atol=1e-30)


# ----------------------------------------------------------------------------------------------- walks with actions
ROOM = np.array([[0, 1, 2, 0], [2, 3, 1, 3], [1, 0, 3, 2]])
"""A 3 x 4 room whose every observation is seen in three places (as in tests/test_actions.py)."""


def _action_case(seed: int, length: int = 1200) -> tuple[actions.ActionCHMM, np.ndarray, np.ndarray]:
    """A random model with actions (unequal clone counts) on the triples of a walk in :data:`ROOM`, and the walk."""
    walk = actions.generate_walk(ROOM, length, seed=seed)
    n_clones = np.array([2, 3, 4, 5])[np.random.default_rng(seed).permutation(4)]
    model = actions.random_action_model(n_clones, walk.observations, walk.actions, seed=seed)
    return model, walk.observations, walk.actions


def _gpu_viterbi(name: str, model: actions.ActionCHMM, evidence, row_shift) -> inference.ViterbiResult:
    """Viterbi of a model with actions through the engine protocol on ``name``."""
    view = model.engine_view()
    adapter = engines.engine_for(view, name)
    return adapter.viterbi(adapter.load(view), evidence, row_shift=row_shift)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_action_viterbi_matches_the_cpu(name, seed):
    """The GPU Viterbi of a walk with actions (row shifts a_n * E) is the CPU's: the same clone path and log
    probability; without the shifts (every step read from action 0's blocks) it is another answer."""
    model, x, a = _action_case(seed)
    on_gpu = _gpu_viterbi(name, model, x, a * model.n_symbols)
    clones, log_probability = actions.viterbi(model, x, a)
    assert np.all(clones >= 0) and np.isfinite(log_probability)
    np.testing.assert_array_equal(on_gpu.clones, clones)
    np.testing.assert_array_equal(on_gpu.symbols, x)
    assert abs(on_gpu.log_probability - log_probability) <= 1e-9 * abs(log_probability)
    ignoring_actions = _gpu_viterbi(name, model, x, None)
    assert ignoring_actions.log_probability != on_gpu.log_probability


def test_action_viterbi_of_an_impossible_walk_is_impossible_on_the_gpu_too(name):
    """A walk that takes, at one step in the middle, an action whose block the model does not store has no path:
    all -1 and -inf, as on the CPU; the unused last action may be anything (here an action the model lacks)."""
    model, x, a = _action_case(3, length=400)
    E, layout = model.n_symbols, model.layout
    impossible = None
    for n in range(len(x) // 2, len(x) - 1):
        for b in range(model.n_actions):
            if layout.find_blocks(np.array([b * E + x[n]]), x[n + 1 : n + 2])[0] < 0:
                impossible = a.copy()
                impossible[n] = b
                break
        if impossible is not None:
            break
    assert impossible is not None
    impossible[-1] = model.n_actions + 5
    clones, log_probability = actions.viterbi(model, x, impossible)
    assert np.all(clones == -1) and log_probability == -np.inf
    on_gpu = _gpu_viterbi(name, model, x, impossible * E)
    np.testing.assert_array_equal(on_gpu.clones, np.full(len(x), -1))
    np.testing.assert_array_equal(on_gpu.symbols, np.full(len(x), -1))
    assert on_gpu.log_probability == -np.inf
    possible = a.copy()
    possible[-1] = model.n_actions + 5  # the last action names no step: never read, never refused
    np.testing.assert_array_equal(_gpu_viterbi(name, model, x, possible * E).clones, actions.viterbi(model, x, a)[0])


def test_action_viterbi_with_soft_evidence_matches_the_cpu(name):
    """Soft evidence over the observations with the walk's row shifts: every candidate symbol of a position reads
    the block of its action, on the GPU as on the CPU."""
    model, x, a = _action_case(4, length=600)
    rng = np.random.default_rng(4)
    options = []
    for s in x:
        option = {int(s): 1.0}
        for other in rng.choice(model.n_symbols, size=2, replace=False):
            option.setdefault(int(other), float(rng.uniform(0.05, 0.5)))
        options.append(option)
    evidence = inference.Evidence.from_lists(options)
    row_shift = a * model.n_symbols
    on_cpu = inference.viterbi(model.engine_view(), evidence, row_shift=row_shift)
    on_gpu = _gpu_viterbi(name, model, evidence, row_shift)
    assert np.isfinite(on_cpu.log_probability)
    np.testing.assert_array_equal(on_gpu.clones, on_cpu.clones)
    assert abs(on_gpu.log_probability - on_cpu.log_probability) <= 1e-9 * abs(on_cpu.log_probability)


def test_zero_row_shifts_are_the_text_viterbi_to_the_bit(name):
    """A text with row shifts of zeros is the text: the same path and the same log probability, bit for bit."""
    model, x, _ = _model_and_sequence(70, 6, 120, 1500, drop_pairs=0)
    adapter = engines.engine_for(model, name)
    state = adapter.load(model)
    text = adapter.viterbi(state, x)
    shifted = adapter.viterbi(state, x, row_shift=np.zeros(len(x), dtype=np.int64))
    np.testing.assert_array_equal(shifted.clones, text.clones)
    assert shifted.log_probability == text.log_probability
    np.testing.assert_array_equal(text.clones, inference.viterbi(model, x).clones)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("short", "one row shift per position"),
        ("outside", "row symbols 0.."),
        ("negative", "row symbols 0.."),
        ("clones", "clone count differs"),
    ],
)
def test_row_shifts_outside_the_layout_are_refused(name, change, message):
    """Row shifts that would make the kernel read outside the layout's tables (a missing entry, a row symbol
    beyond the actions, a negative one, a row with another clone count) raise ValueError in one sentence."""
    model, x, a = _action_case(5, length=200)
    E, n = model.n_symbols, len(x) // 2
    shift = a * E
    if change == "short":
        shift = shift[:-1]
    elif change == "outside":
        shift[n] = model.n_actions * E
    elif change == "negative":
        shift[n] = -E
    else:  # the next symbol's row of the same action: the clone counts of the model differ per symbol
        shift[n] += 1 if x[n] + 1 < E else -1
        assert model.n_clones[x[n]] != model.n_clones[x[n] + (1 if x[n] + 1 < E else -1)]
    with pytest.raises(ValueError, match=message):
        _gpu_viterbi(name, model, x, shift)


def test_the_dense_cpu_engine_takes_row_shifts():
    """The protocol's row_shift on the dense CPU engine (the GPU's reference): the walk's path, not the text's."""
    model, x, a = _action_case(6, length=300)
    view = model.engine_view()
    dense = engines.engine_for(view, "cpu")
    state = dense.load(view)
    result = dense.viterbi(state, x, row_shift=a * model.n_symbols)
    clones, log_probability = actions.viterbi(model, x, a)
    np.testing.assert_array_equal(result.clones, clones)
    assert result.log_probability == log_probability
    assert dense.viterbi(state, x).log_probability != log_probability
