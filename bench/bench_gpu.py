"""Benchmark: the GPU engine at the paper's scale, against the CPU engine on the same machine.

For each number of states (n-gram allocation of order 5, paper preprocessing; layouts from the first 750,000
training symbols of melville-moby_dick.txt, and from milton-paradise.txt for its own forward pass) it prints:
seconds for one forward pass over 42,297 symbols (milton and moby), the bytes that pass must read and the fraction
of the device's measured copy bandwidth it reaches, seconds per batch-EM iteration on 750,000 symbols, and the
device memory peak; the CPU engine's forward pass on the same machine (and its EM iteration on 75,000 symbols,
scaled x10: EM work is linear in the sequence length) gives the ratios.

    python bench/bench_gpu.py --states 3000 10000 30000 [--cpu] [--json OUT.json]
    python bench/bench_gpu.py --crossover 3000 10000 --symbols 200000 750000 --chunks 512 1024 2048 4096
    python bench/bench_gpu.py --table4 30000 [--corpora-names carroll-alice milton-paradise]
    python bench/bench_gpu.py --lockstep 30000 --rows 64 128 256      (float32 against float16 lockstep kernels)
    python bench/bench_gpu.py --lockstep 30000 --rows 64 --rows-in-flight 1 2 --dynamic 0 1 --precisions float16
    python bench/bench_gpu.py --precision-bps 3000 --corpora-names carroll-alice milton-paradise melville-moby_dick

``--table4`` trains like the paper (online EM, then batch EM, early stopping on validation) on the GPU and prints
test BPS beside the paper's Table 4. Corpora come from $CHMM_CORPORA (default ../shared/corpora).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe_machine  # noqa: E402

from engine.backends.chunks import EXACT  # noqa: E402
from engine.backends.cpu import inference  # noqa: E402
from engine.corpora import (
    allocation,  # noqa: E402
    text,  # noqa: E402
)
from engine.model.blocks import BlockLayout, normalise_rows, pairs_in_sequence  # noqa: E402
from engine.model.dense import CHMM  # noqa: E402
from engine.training import learning  # noqa: E402

CORPORA = Path(os.environ.get("CHMM_CORPORA", ROOT.parent / "shared" / "corpora"))
FORWARD_SYMBOLS = 42_297
LOCKSTEP_FORWARD = ((256, 100), (1024, 50), (4096, 50))
"""(chunks, burn-in) of the lockstep forward passes timed beside the sequential one (milton)."""
LOCKSTEP_EM = ((2048, 50), (4096, 50), (4096, 100))
"""(chunks, burn-in) of the lockstep batch-EM iterations timed beside the sequential one (moby)."""
EM_SYMBOLS = 750_000
PAPER_TABLE4 = {"carroll-alice": 1.54, "milton-paradise": 1.73, "melville-moby_dick": 1.72}


def _corpus(name: str) -> text.Corpus:
    return text.prepare_corpus(text.read_text(CORPORA / f"{name}.txt"), name=name)


def _random_model(corpus: text.Corpus, x: np.ndarray, states: int, seed: int = 0) -> CHMM:
    n_clones = allocation.allocate_clones(x, corpus.n_symbols, states, "ngram", 5)
    layout = BlockLayout.build(n_clones, pairs_in_sequence(x, corpus.n_symbols))
    rng = np.random.default_rng(seed)
    T = normalise_rows(layout, rng.random(layout.size, dtype=np.float32), 0.0, np.float32)
    pi = np.full(layout.n_states, 1.0 / layout.n_states, dtype=np.float32)
    return CHMM(list(corpus.symbols), layout, T, pi, None, {})


def _block_bytes(layout: BlockLayout, x: np.ndarray) -> int:
    k = layout.find_blocks(x[:-1], x[1:])
    sizes = np.diff(layout.block_offset)
    return int(4 * sizes[k[k >= 0]].sum())


def _copy_bandwidth(cp) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second), median of 10."""
    a = cp.empty(2**29, dtype=cp.float32)
    a.fill(1.0)
    b = cp.empty_like(a)
    times = []
    for _ in range(12):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        cp.copyto(b, a)
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    del a, b
    return 2 * 4 * 2**29 / float(np.median(times[2:]))


def _timed(cp, fn, repeats: int) -> float:
    fn()  # warm-up (compilation, pool growth)
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        cp.cuda.Device().synchronize()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _em_iterations(cp, engine, state, x: np.ndarray, plan, iterations: int = 2) -> tuple[float, float]:
    """Seconds per batch-EM iteration (pseudocount 1e-6) over ``x`` with ``plan``, and the log-likelihood of the
    last E-step."""
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(iterations):
        e = engine.e_step(state, x, plan=plan)
        state, log_likelihood = engine.m_step(state, e.counts, 1e-6), e.log_likelihood
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - t0) / iterations, log_likelihood


def speed(states_list: list[int], with_cpu: bool, precisions: tuple[str, ...] = ("float32", "float16")) -> list[dict]:
    import cupy as cp

    from engine.backends.gpu import device_blocks, devices, implementation

    bandwidth = _copy_bandwidth(cp)
    milton, moby = _corpus("milton-paradise"), _corpus("melville-moby_dick")
    x_moby = moby.train_full[:EM_SYMBOLS]
    pool = cp.get_default_memory_pool()
    rows = []
    for states in states_list:
        pool.free_all_blocks()
        row: dict = {"states": states}
        for name, corpus, x_layout in (("milton", milton, milton.train_full), ("moby", moby, x_moby)):
            model = _random_model(corpus, x_layout, states)
            x = x_layout[:FORWARD_SYMBOLS]
            moved = _block_bytes(model.layout, x)
            row[f"forward_{name}_bytes"] = moved
            for precision in precisions:
                engine = device_blocks.DeviceBlocks(model.layout, devices.cuda_device(), precision)
                device_model = engine.upload(model)
                seconds = _timed(cp, lambda dm=device_model, e=engine, x=x: e.forward(dm, x), 5)
                bytes_read = moved if precision == "float32" else moved // 2
                row[f"forward_{name}_{precision}_s"] = seconds
                row[f"forward_{name}_{precision}_bandwidth_fraction"] = bytes_read / seconds / bandwidth
                del engine, device_model
                pool.free_all_blocks()
            if name == "milton":  # the lockstep forward pass (chunks with a burn-in, engine.backends.chunks) beside it
                from engine.backends.chunks import LockstepSchedule, as_chunks, chunk, counted_log_likelihood

                blocks = device_blocks.DeviceBlocks(model.layout, devices.cuda_device())
                device_model = blocks.upload(model)
                exact = float(np.sum(np.log(blocks.forward(device_model, x)[0])))
                for chunks, burn_in in LOCKSTEP_FORWARD:
                    size = -(-(len(x) - 1) // chunks)
                    schedule = LockstepSchedule.build(model.layout, chunk([x], size, burn_in))
                    pieces = as_chunks(schedule.pieces)
                    seconds = _timed(cp, lambda b=blocks, d=device_model, s=schedule: b.lockstep_forward(d, s), 3)
                    together = counted_log_likelihood(pieces, blocks.lockstep_forward(device_model, schedule))
                    row[f"lockstep_{chunks}_{burn_in}_s"] = seconds
                    row[f"lockstep_{chunks}_{burn_in}_bps_difference"] = (exact - together) / len(x) / np.log(2)
                    print(f"lockstep forward {chunks} chunks, burn-in {burn_in}: {seconds:.3f} s", flush=True)
                del blocks, device_model
                pool.free_all_blocks()
            if with_cpu:
                short = x[: FORWARD_SYMBOLS // 10]
                inference.forward(model, short[:100])
                t0 = time.perf_counter()
                inference.forward(model, short)
                row[f"cpu_forward_{name}_s_x10"] = 10 * (time.perf_counter() - t0)
            if name == "moby":
                for precision in precisions:
                    pool.free_all_blocks()
                    config = learning.TrainingConfig(iterations=1, pseudocount=1e-6)
                    options = implementation.GpuOptions(pass_precision=precision, lockstep_precision=precision)
                    engine = implementation.GpuDenseEngine(devices.cuda_device(), options)
                    current = engine.load(model)
                    # the exact (sequential) E-step: GPU batch EM runs lockstep chunks by default
                    plan = engine.plan(current, x_moby, "em", len(x_moby), chunk=EXACT)
                    row[f"em_iteration_{precision}_s"], ll = _em_iterations(cp, engine, current, x_moby, plan)
                    row[f"em_train_bps_{precision}"] = float(-ll / len(x_moby) / np.log(2))
                    row[f"device_peak_{precision}_gib"] = pool.total_bytes() / 2**30
                    print(f"sequential EM {precision}: {row[f'em_iteration_{precision}_s']:.2f} s", flush=True)
                    del engine, current, plan
                for chunks, burn_in in LOCKSTEP_EM:  # the same two iterations with lockstep E-steps
                    pool.free_all_blocks()
                    engine = implementation.GpuDenseEngine(devices.cuda_device())
                    current = engine.load(model)
                    t0 = time.perf_counter()
                    length = -(-(len(x_moby) - 1) // chunks)
                    plan = engine.plan(current, x_moby, "em", len(x_moby), chunk=length, burn_in=burn_in)
                    row[f"em_lockstep_{chunks}_{burn_in}_plan_s"] = time.perf_counter() - t0
                    row[f"em_lockstep_{chunks}_{burn_in}_s"], ll = _em_iterations(cp, engine, current, x_moby, plan)
                    row[f"em_lockstep_{chunks}_{burn_in}_bps_difference"] = float(
                        -ll / len(x_moby) / np.log(2) - row["em_train_bps_float32"]
                    )
                    row[f"em_lockstep_{chunks}_{burn_in}_peak_gib"] = pool.total_bytes() / 2**30
                    print(
                        f"lockstep EM {chunks} chunks, burn-in {burn_in}: "
                        f"{row[f'em_lockstep_{chunks}_{burn_in}_s']:.2f} s, BPS difference "
                        f"{row[f'em_lockstep_{chunks}_{burn_in}_bps_difference']:+.1e}",
                        flush=True,
                    )
                    del engine, current, plan
                if with_cpu and states <= 10000:
                    short = x_moby[: EM_SYMBOLS // 10]
                    t0 = time.perf_counter()
                    learning.em_iteration(model, short, config)
                    row["cpu_em_iteration_s_x10"] = 10 * (time.perf_counter() - t0)
            pool.free_all_blocks()
        rows.append(row)
        print(json.dumps(row), flush=True)
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"\ndevice: {device}; copy bandwidth {bandwidth / 1e12:.2f} TB/s; host: {describe_machine()}")
    print(
        "| states | GB read by forward | forward 42,297 milton s fp32 / fp16 | of bandwidth fp32 / fp16 | "
        "forward moby s fp32 / fp16 | CPU forward s (x10) | EM iter 750k s fp32 / fp16 | CPU EM iter s (x10) | "
        "device peak GiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    nan = float("nan")
    for r in rows:
        print(
            f"| {r['states']:,} | {r['forward_milton_bytes'] / 1e9:.1f} | {r['forward_milton_float32_s']:.3f} / "
            f"{r.get('forward_milton_float16_s', nan):.3f} | {r['forward_milton_float32_bandwidth_fraction']:.0%} / "
            f"{r.get('forward_milton_float16_bandwidth_fraction', nan):.0%} | {r['forward_moby_float32_s']:.3f} / "
            f"{r.get('forward_moby_float16_s', nan):.3f} | {r.get('cpu_forward_milton_s_x10', nan):.1f} | "
            f"{r['em_iteration_float32_s']:.2f} / {r.get('em_iteration_float16_s', nan):.2f} | "
            f"{r.get('cpu_em_iteration_s_x10', nan):.1f} | {r['device_peak_float32_gib']:.1f} |"
        )
    print("\nlockstep forward, milton (s; BPS difference from the sequential pass):")
    print("| states | sequential fp32 | " + " | ".join(f"{c} chunks, burn-in {b}" for c, b in LOCKSTEP_FORWARD) + " |")
    print("|---" * (2 + len(LOCKSTEP_FORWARD)) + "|")
    for r in rows:
        cells = [
            f"{r[f'lockstep_{c}_{b}_s']:.3f} s ({r[f'lockstep_{c}_{b}_bps_difference']:.1e})"
            for c, b in LOCKSTEP_FORWARD
        ]
        print(f"| {r['states']:,} | {r['forward_milton_float32_s']:.3f} s | " + " | ".join(cells) + " |")
    print(
        "\nbatch-EM iteration over 750,000 moby symbols, lockstep E-steps (s; training BPS minus the sequential "
        "one after the same 2 iterations; device peak GiB):"
    )
    print("| states | sequential fp32 | " + " | ".join(f"{c} chunks, burn-in {b}" for c, b in LOCKSTEP_EM) + " |")
    print("|---" * (2 + len(LOCKSTEP_EM)) + "|")
    for r in rows:
        cells = [
            f"{r[f'em_lockstep_{c}_{b}_s']:.2f} s ({r[f'em_lockstep_{c}_{b}_bps_difference']:+.1e}; "
            f"{r[f'em_lockstep_{c}_{b}_peak_gib']:.0f})"
            for c, b in LOCKSTEP_EM
        ]
        print(f"| {r['states']:,} | {r['em_iteration_float32_s']:.2f} s | " + " | ".join(cells) + " |")
    return rows


def crossover(states_list: list[int], symbol_counts: list[int], chunk_counts: list[int], burn_in: int) -> list[dict]:
    """Where lockstep E-steps pay: seconds per batch-EM iteration (2 iterations, pseudocount 1e-6) over the first
    ``n`` training symbols of melville-moby_dick for each number of states and of symbols, sequential and in
    lockstep chunks of ``ceil((n - 1) / C)`` steps for each chunk count C (burn-in ``burn_in``), with the training BPS
    difference from the sequential iterations."""
    import cupy as cp

    from engine.backends.gpu import devices, implementation

    moby = _corpus("melville-moby_dick")
    pool = cp.get_default_memory_pool()
    rows = []
    for states in states_list:
        model = _random_model(moby, moby.train_full[:EM_SYMBOLS], states)
        for n in symbol_counts:
            x = moby.train_full[:n]
            row: dict = {"states": states, "symbols": len(x), "burn_in": burn_in}
            for chunks in [0, *chunk_counts]:
                pool.free_all_blocks()
                engine = implementation.GpuDenseEngine(devices.cuda_device())
                current = engine.load(model)
                length = -(-(len(x) - 1) // chunks) if chunks else None
                plan = engine.plan(current, x, "em", len(x), chunk=length, burn_in=burn_in if chunks else None)
                seconds, ll = _em_iterations(cp, engine, current, x, plan)
                row[f"s_{chunks}"] = seconds
                row[f"bps_{chunks}"] = float(-ll / len(x) / np.log(2))
                row[f"peak_gib_{chunks}"] = pool.total_bytes() / 2**30
                del engine, current, plan
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\nbatch-EM iteration, moby, burn-in {burn_in} (s; sequential / lockstep; lockstep BPS minus sequential):")
    print("| states | symbols | sequential | " + " | ".join(f"{c:,} chunks" for c in chunk_counts) + " |")
    print("|---" * (3 + len(chunk_counts)) + "|")
    for r in rows:
        cells = [
            f"{r[f's_{c}']:.3f} ({r['s_0'] / r[f's_{c}']:.2f}x; {r[f'bps_{c}'] - r['bps_0']:+.0e})"
            for c in chunk_counts
        ]
        print(f"| {r['states']:,} | {r['symbols']:,} | {r['s_0']:.3f} | " + " | ".join(cells) + " |")
    return rows


def _settings(
    rows_list: list[int], loads_list: tuple[int, ...], in_flight_list: tuple[int, ...], dynamic_list: tuple[bool, ...]
) -> list[tuple[int, int, int, bool]]:
    """The (rows per item, loads in flight per lane, rows in flight per warp, items taken dynamically) the lockstep
    sweep times: every combination the CUDA source has kernels for (rows in flight above 1 with the default loads
    only)."""
    from engine.backends.gpu import kernels

    return [
        (rows, loads, in_flight, dynamic)
        for rows in rows_list
        for loads in loads_list
        for in_flight in in_flight_list
        for dynamic in dynamic_list
        if in_flight == 1 or loads == kernels.LOCKSTEP_LOADS
    ]


def _items(cell: dict) -> str:
    """How a lockstep sweep cell's thread blocks took their work items."""
    return "dynamic" if cell.get("dynamic") else "in turn"


def lockstep_sweep(
    states: int,
    rows_list: list[int],
    forward_chunks: list[tuple[int, int]],
    em_chunks: list[tuple[int, int]],
    loads_list: tuple[int, ...] = (4,),
    precisions: tuple[str, ...] = ("float32", "float16"),
    in_flight_list: tuple[int, ...] = (1,),
    dynamic_list: tuple[bool, ...] = (False,),
) -> dict:
    """The lockstep kernels on float32 and float16 blocks (``precisions``), by output rows per work item
    (``DeviceBlocks.lockstep_rows``), loads of a row in flight per lane (``lockstep_loads``) and rows in flight per
    warp (``lockstep_rows_in_flight``; above 1 with the default loads only) and whether thread blocks take the work
    items as they come free (``lockstep_dynamic``), timed in turn:
    seconds of the lockstep forward pass over the first 42,297 milton symbols (and its BPS difference from the
    sequential float32 pass), and of a batch-EM iteration over 750,000 moby symbols, split into the E-step's passes,
    its counts (``_counts``: pair weights, message scaling and one product per block) and the M-step, with the
    training BPS after 2 iterations minus the float32 lockstep run's with the same chunks. Also the bytes of blocks
    each lockstep forward pass reads (one read per group of chunks at a pair)."""
    import cupy as cp

    from engine.backends.chunks import LockstepSchedule, as_chunks, chunk, counted_log_likelihood
    from engine.backends.gpu import device_blocks, devices, implementation

    bandwidth = _copy_bandwidth(cp)
    pool = cp.get_default_memory_pool()
    out: dict = {"states": states, "bandwidth": bandwidth, "forward": [], "em": []}
    milton, moby = _corpus("milton-paradise"), _corpus("melville-moby_dick")
    model = _random_model(milton, milton.train_full, states)
    x = milton.train_full[:FORWARD_SYMBOLS]
    sizes = np.diff(model.layout.block_offset)
    for precision in ("float32", "float16"):
        if precision not in precisions and precision != "float32":
            continue
        blocks = device_blocks.DeviceBlocks(model.layout, devices.cuda_device(), precision)
        device_model = blocks.upload(model)
        seconds = _timed(cp, lambda b=blocks, d=device_model: b.forward(d, x), 3)
        log_likelihood = float(np.sum(np.log(blocks.forward(device_model, x)[0])))
        out[f"sequential_{precision}"] = {"s": seconds, "log_likelihood": log_likelihood}
        print(f"sequential forward {precision}: {seconds:.3f} s", flush=True)
        for chunks, burn_in in forward_chunks if precision in precisions else ():
            size = -(-(len(x) - 1) // chunks)
            schedule = LockstepSchedule.build(model.layout, chunk([x], size, burn_in))
            group_blocks = schedule.group_block[schedule.group_block >= 0]
            read = int(sizes[group_blocks].sum()) * (4 if precision == "float32" else 2)
            for rows, loads, in_flight, dynamic in _settings(rows_list, loads_list, in_flight_list, dynamic_list):
                blocks.lockstep_rows, blocks.lockstep_loads, blocks.lockstep_rows_in_flight = rows, loads, in_flight
                blocks.lockstep_dynamic = dynamic
                seconds = _timed(cp, lambda b=blocks, d=device_model, s=schedule: b.lockstep_forward(d, s), 3)
                together = counted_log_likelihood(
                    as_chunks(schedule.pieces), blocks.lockstep_forward(device_model, schedule)
                )
                exact = out["sequential_float32"]["log_likelihood"]
                cell = {
                    "precision": precision, "chunks": chunks, "burn_in": burn_in, "rows": rows, "loads": loads,
                    "rows_in_flight": in_flight, "dynamic": dynamic, "s": seconds,
                    "gb_read": read / 1e9, "bandwidth_fraction": read / seconds / bandwidth,
                    "bps_difference": (exact - together) / len(x) / np.log(2),
                }  # fmt: skip
                out["forward"].append(cell)
                print(json.dumps(cell), flush=True)
        del blocks, device_model
        pool.free_all_blocks()
    x_moby = moby.train_full[:EM_SYMBOLS]
    model = _random_model(moby, x_moby, states)
    for chunks, burn_in in em_chunks:
        reference = None
        for precision in precisions:
            for rows, loads, in_flight, dynamic in _settings(rows_list[:2], loads_list, in_flight_list, dynamic_list):
                pool.free_all_blocks()
                engine = implementation.GpuDenseEngine(
                    devices.cuda_device(),
                    implementation.GpuOptions(pass_precision=precision, lockstep_precision=precision),
                )
                current = engine.load(model)
                current.blocks.lockstep_rows, current.blocks.lockstep_loads = rows, loads
                current.blocks.lockstep_rows_in_flight, current.blocks.lockstep_dynamic = in_flight, dynamic
                length = -(-(len(x_moby) - 1) // chunks)
                plan = engine.plan(current, x_moby, "em", len(x_moby), chunk=length, burn_in=burn_in)
                counting = [0.0]
                original = current.blocks._counts

                def timed_counts(*args, original=original, counting=counting):
                    cp.cuda.Device().synchronize()
                    t0 = time.perf_counter()
                    result = original(*args)
                    cp.cuda.Device().synchronize()
                    counting[0] += time.perf_counter() - t0
                    return result

                current.blocks._counts = timed_counts
                e_seconds = m_seconds = 0.0
                for _ in range(2):
                    cp.cuda.Device().synchronize()
                    t0 = time.perf_counter()
                    e = engine.e_step(current, x_moby, plan=plan)
                    cp.cuda.Device().synchronize()
                    t1 = time.perf_counter()
                    current = engine.m_step(current, e.counts, 1e-6)
                    cp.cuda.Device().synchronize()
                    e_seconds += t1 - t0
                    m_seconds += time.perf_counter() - t1
                bps = float(-e.log_likelihood / len(x_moby) / np.log(2))
                reference = bps if reference is None else reference
                cell = {
                    "precision": precision, "chunks": chunks, "burn_in": burn_in, "rows": rows, "loads": loads,
                    "rows_in_flight": in_flight, "dynamic": dynamic, "e_step_s": e_seconds / 2,
                    "counts_s": counting[0] / 2, "m_step_s": m_seconds / 2,
                    "iteration_s": (e_seconds + m_seconds) / 2, "train_bps": bps,
                    "bps_difference": bps - reference, "peak_gib": pool.total_bytes() / 2**30,
                }  # fmt: skip
                out["em"].append(cell)
                print(json.dumps(cell), flush=True)
                current.blocks._counts = original
                del engine, current, plan
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(
        f"\ndevice: {device}; copy bandwidth {bandwidth / 1e12:.2f} TB/s; host: {describe_machine()}; {states:,} states"
    )
    print(
        f"sequential forward over {FORWARD_SYMBOLS:,} milton symbols: {out['sequential_float32']['s']:.3f} s fp32 / "
        f"{out['sequential_float16']['s']:.3f} s fp16"
    )
    print(
        "| precision | chunks | burn-in | rows per item | loads in flight | rows in flight | items | forward s "
        "| GB read | of copy bandwidth | BPS difference |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for c in out["forward"]:
        print(
            f"| {c['precision']} | {c['chunks']:,} | {c['burn_in']} | {c['rows']} | {c['loads']} | "
            f"{c['rows_in_flight']} | {_items(c)} | {c['s']:.3f} | "
            f"{c['gb_read']:.0f} | {c['bandwidth_fraction']:.0%} | {c['bps_difference']:+.1e} |"
        )
    print(f"\nbatch-EM iteration over {EM_SYMBOLS:,} moby symbols (s; training BPS minus float32 after 2 iterations):")
    print(
        "| precision | chunks | burn-in | rows per item | loads in flight | rows in flight | items | iteration "
        "| E-step | of which counts | M-step | BPS diff | peak GiB |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for c in out["em"]:
        print(
            f"| {c['precision']} | {c['chunks']:,} | {c['burn_in']} | {c['rows']} | {c['loads']} | "
            f"{c['rows_in_flight']} | {_items(c)} | {c['iteration_s']:.2f} | "
            f"{c['e_step_s']:.2f} | {c['counts_s']:.2f} | {c['m_step_s']:.2f} | {c['bps_difference']:+.1e} | "
            f"{c['peak_gib']:.0f} |"
        )
    return out


def precision_bps(states: int, corpora_names: list[str], iterations: int, burn_in: int = 50) -> list[dict]:
    """The training BPS after ``iterations`` batch-EM iterations in lockstep chunks (the engine's choice of length,
    burn-in ``burn_in``) on float32 and on float16 blocks, from the same random start (n-gram allocation), on each
    corpus's training text, and both final models scored with the exact float32 forward pass on it."""
    import cupy as cp

    from engine.backends import chunks as chunking
    from engine.backends.gpu import devices, implementation

    rows = []
    for name in corpora_names:
        corpus = _corpus(name)
        x = corpus.train_full
        model = _random_model(corpus, x, states)
        row: dict = {"corpus": name, "symbols": len(x), "states": states}
        for precision in ("float32", "float16"):
            engine = implementation.GpuDenseEngine(
                devices.cuda_device(), implementation.GpuOptions(pass_precision=precision, lockstep_precision=precision)
            )
            current = engine.load(model)
            plan = engine.plan(current, x, "em", len(x), chunk=chunking.lockstep_length(len(x)), burn_in=burn_in)
            t0 = time.perf_counter()
            for _ in range(iterations):
                e = engine.e_step(current, x, plan=plan)
                current = engine.m_step(current, e.counts, 1e-6, e.gamma_first)
            cp.cuda.Device().synchronize()
            row[f"s_{precision}"] = (time.perf_counter() - t0) / iterations
            exact = implementation.GpuDenseEngine(devices.cuda_device())
            trained = exact.load(engine.host(current))
            row[f"bps_{precision}"] = float(-exact.e_step(trained, x).log_likelihood / len(x) / np.log(2))
            del engine, current, plan, exact, trained
            cp.get_default_memory_pool().free_all_blocks()
        row["difference"] = row["bps_float16"] - row["bps_float32"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\ntraining BPS after {iterations} batch-EM iterations in lockstep chunks, {states:,} states:")
    print("| corpus | symbols | fp32 BPS | fp16 BPS | difference | s/iteration fp32 / fp16 |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['corpus']} | {r['symbols']:,} | {r['bps_float32']:.6f} | {r['bps_float16']:.6f} | "
            f"{r['difference']:+.1e} | {r['s_float32']:.3f} / {r['s_float16']:.3f} |"
        )
    return rows


def _stage(path: Path | None, label: str, run):
    """One stage of the Table-4 protocol: its model and figures from ``path`` (+ ``.json``) when an earlier call
    left them there, else ``run()`` (a TrainOutcome) saved there. Returns (model, summary)."""
    from engine.backends.model_files import load_model, save_model

    figures = path.with_suffix(".json") if path is not None else None
    if path is not None and path.is_file() and figures.is_file():
        print(f"{label}: resumed from {path}", flush=True)
        return load_model(path), json.loads(figures.read_text())
    outcome = run()
    if outcome.result.stopped in ("cancelled", "failed"):
        raise SystemExit(f"{label} stopped: {outcome.result.stopped} {outcome.result.error or ''}")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_model(outcome.model, path)
        figures.write_text(json.dumps(outcome.summary))
    return outcome.model, outcome.summary


def table4_corpus(
    name: str,
    states: int,
    online_epochs: int,
    em_iterations: int,
    pseudocount: float,
    refit: bool,
    backend: str,
    checkpoints: Path | None,
    deadline: float,
) -> dict | None:
    """The paper's protocol on one corpus: online EM, then batch EM from the online model with early stopping on
    validation, then (``refit``) batch EM from the same online model on training + validation text for the number
    of iterations validation chose. Each stage's model is saved under ``checkpoints`` and a later call resumes from
    the last finished stage; no stage starts after ``deadline`` (time.perf_counter() seconds): returns None then."""
    from engine.training import TrainOptions, train_text

    raw = text.read_text(CORPORA / f"{name}.txt")
    prefix = checkpoints / f"{name}-{states}" if checkpoints is not None else None

    def where(stage: str) -> Path | None:
        return prefix.with_name(f"{prefix.name}-{stage}.npz") if prefix is not None else None

    def options(**changes) -> TrainOptions:
        base = dict(states=states, algorithm="em", pseudocount=pseudocount, backend=backend, refit=False)
        return TrainOptions(**(base | changes))

    def printer(stage: str):
        return lambda record: print(name, stage, tuple(round(v, 4) for v in record), flush=True)

    def out_of_time(stage: str) -> bool:
        if time.perf_counter() < deadline:
            return False
        print(f"{name}: time budget spent before the {stage} stage; run the same command again to resume", flush=True)
        return True

    if out_of_time("online"):
        return None
    online, online_summary = _stage(
        where("online"),
        f"{name} online",
        lambda: train_text(
            raw,
            options(algorithm="online", iterations=online_epochs, batch_size=10_000),
            callback=printer("online"),
        ),
    )
    if out_of_time("selection"):
        return None
    selected, selected_summary = _stage(
        where("selected"),
        f"{name} selection",
        lambda: train_text(raw, options(iterations=em_iterations), callback=printer("em"), initial_model=online),
    )
    final, final_summary = selected, selected_summary
    best = int(selected_summary["best_iteration"])
    if refit and best > 0:
        if out_of_time("refit"):
            return None
        # validation share 0: training + validation text is the training text; the same start (the online model
        # extended with the same seed) as train_text's own refit, and no early stop
        final, final_summary = _stage(
            where("refit"),
            f"{name} refit",
            lambda: train_text(
                raw,
                options(iterations=best, validation=0.0, tolerance=0.0),
                callback=printer("refit"),
                initial_model=online,
            ),
        )
    row = {
        "corpus": name,
        "states": states,
        "test_bps": final_summary["test_bps"],
        "paper": PAPER_TABLE4.get(name, float("nan")),
        "online_test_bps": online_summary["test_bps"],
        "selection_validation_bps": selected_summary["validation_bps"],
        "seconds": online_summary["seconds"]
        + selected_summary["seconds"]
        + (final_summary["seconds"] if final is not selected else 0.0),
        "em_iterations": selected_summary["iterations"],
        "best_iteration": best,
        "refit_iterations": best if final is not selected else 0,
        "online_epochs": online_summary["iterations"],
        "backend": backend,
    }
    if backend == "gpu":
        from engine.backends.gpu import devices, implementation

        half = implementation.GpuDenseEngine(devices.cuda_device(), implementation.GpuOptions(pass_precision="float16"))
        corpus = text.prepare_corpus(
            raw,
            normalisation=final.codec.normalisation,
            name=name,
            fixed_alphabet=(final.symbols, final.codec.vocabulary_list),
        )
        row["test_bps_float16_pass"] = half.score(half.load(final), corpus.test).bps
    return row


def table4(
    states: int,
    names: list[str],
    online_epochs: int,
    em_iterations: int,
    pseudocount: float,
    refit: bool,
    backend: str = "gpu",
    checkpoints: Path | None = None,
    budget_seconds: float | None = None,
) -> list[dict]:
    """The paper's protocol (see :func:`table4_corpus`) on each corpus; prints test BPS beside the paper's Table 4.
    With ``budget_seconds``, no stage starts once that much time has passed (resume with the same command)."""
    deadline = time.perf_counter() + budget_seconds if budget_seconds else float("inf")
    rows = []
    for name in names:
        row = table4_corpus(
            name, states, online_epochs, em_iterations, pseudocount, refit, backend, checkpoints, deadline
        )
        if row is None:
            break
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(
        "| corpus | states | test BPS (ours) | paper Table 4 | after online EM | epochs + EM iterations (+ refit) | "
        "seconds |"
    )
    print("|---|---:|---:|---:|---:|---|---:|")
    for r in rows:
        print(
            f"| {r['corpus']} | {r['states']:,} | {r['test_bps']:.3f} | {r['paper']:.2f} | "
            f"{r['online_test_bps']:.3f} | {r['online_epochs']} + {r['em_iterations']} (+{r['refit_iterations']}) | "
            f"{r['seconds']:.0f} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, nargs="*", default=[3000, 10000, 30000])
    parser.add_argument("--cpu", action="store_true", help="also time the CPU engine on this machine")
    parser.add_argument("--float32-only", action="store_true", help="leave out the float16 passes (a shorter run)")
    parser.add_argument("--table4", type=int, default=0, help="run the Table 4 protocol at this many states")
    parser.add_argument("--corpora-names", nargs="*", default=list(PAPER_TABLE4))
    parser.add_argument("--online-epochs", type=int, default=5)
    parser.add_argument("--em-iterations", type=int, default=30)
    parser.add_argument("--pseudocount", type=float, default=1e-6)
    parser.add_argument("--refit", action="store_true", help="the paper's refit on training + validation text")
    parser.add_argument("--backend", default="gpu", help="--table4 only: gpu (default) or cpu (to check the protocol)")
    parser.add_argument(
        "--checkpoints", type=Path, help="--table4: save each stage's model here and resume from the last one saved"
    )
    parser.add_argument("--budget-seconds", type=float, help="--table4: start no stage after this many seconds")
    parser.add_argument(
        "--crossover", type=int, nargs="*", default=[], help="only time batch EM sequential and in lockstep chunks "
        "at these numbers of states (with --symbols, --chunks, --burn-in)"
    )  # fmt: skip
    parser.add_argument("--symbols", type=int, nargs="*", default=[EM_SYMBOLS], help="--crossover: training symbols")
    parser.add_argument("--chunks", type=int, nargs="*", default=[1024, 2048, 4096], help="--crossover: chunk counts")
    parser.add_argument("--burn-in", type=int, default=50, help="--crossover: burn-in of each chunk")
    parser.add_argument(
        "--lockstep", type=int, help="only the lockstep kernels at this many states, float32 against float16"
    )
    parser.add_argument("--rows", type=int, nargs="*", default=[64, 128, 256], help="--lockstep: rows per work item")
    parser.add_argument("--loads", type=int, nargs="*", default=[4], help="--lockstep: loads in flight per lane")
    parser.add_argument(
        "--rows-in-flight", type=int, nargs="*", default=[1], help="--lockstep: rows in flight per warp (1, 2)"
    )
    parser.add_argument(
        "--dynamic", type=int, nargs="*", default=[0], help="--lockstep: 0 items taken in turn, 1 as blocks come free"
    )
    parser.add_argument(
        "--precisions", nargs="*", default=["float32", "float16"], help="--lockstep: block precisions to time"
    )
    parser.add_argument(
        "--forward-chunks", nargs="*", default=["64:100", "256:100", "1024:50"], help="--lockstep: CHUNKS:BURN_IN"
    )
    parser.add_argument("--em-chunks", nargs="*", default=["2048:50", "4096:50"], help="--lockstep: CHUNKS:BURN_IN")
    parser.add_argument(
        "--precision-bps", type=int, help="only fp32 against fp16 lockstep training BPS at this many states"
    )
    parser.add_argument("--iterations", type=int, default=20, help="--precision-bps: batch-EM iterations")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict = {}
    if args.lockstep:

        def pairs(values: list[str]) -> list[tuple[int, int]]:
            return [(int(v.split(":")[0]), int(v.split(":")[1])) for v in values]

        results["lockstep"] = lockstep_sweep(
            args.lockstep, args.rows, pairs(args.forward_chunks), pairs(args.em_chunks), tuple(args.loads),
            tuple(args.precisions), tuple(args.rows_in_flight), tuple(bool(d) for d in args.dynamic),
        )  # fmt: skip
    if args.precision_bps:
        results["precision_bps"] = precision_bps(args.precision_bps, args.corpora_names, args.iterations)
    if args.crossover:
        results["crossover"] = crossover(args.crossover, args.symbols, args.chunks, args.burn_in)
    elif args.states and not (args.lockstep or args.precision_bps):
        results["speed"] = speed(args.states, args.cpu, ("float32",) if args.float32_only else ("float32", "float16"))
    if args.table4:
        results["table4"] = table4(
            args.table4,
            args.corpora_names,
            args.online_epochs,
            args.em_iterations,
            args.pseudocount,
            args.refit,
            args.backend,
            args.checkpoints,
            args.budget_seconds,
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
