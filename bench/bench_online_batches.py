"""Online EM's batch size against its seconds and what it leaves batch EM: one ``chmm train`` per batch size.

The plain command's first stage is online EM in batches of 2 symbols per stored block (``automatic_batch_size``:
1,076 symbols on War and Peace). On a GPU an online epoch costs about 20 batch-EM iterations there (51.7 s against
2.64 s at 10,000 states, bench/RESULTS.md "War and Peace on a GPU"), since it runs thousands of short E-steps one
after another; larger batches run fewer and longer ones. This bench measures, for each batch size (a multiple of
the automatic one), the seconds per online epoch, the validation BPS online EM hands over and the validation BPS
after ``--iterations`` batch-EM iterations from there, with batch EM alone (``--algorithm em``) as the control.
Each run: ``chmm train CORPUS --states S --pseudocount P --restarts 1 --no-refit --iterations K --backend B
[--batch-size N]``, its progress lines parsed (one per epoch or iteration).

Usage: python bench/bench_online_batches.py CORPUS [--states 10000] [--scales 1 4 16] [--iterations 6]
[--backend gpu] [--json FILE]. On a 2-core CPU use a small corpus and few states (a smoke run).
``--profile N``: instead, where an online epoch's seconds go: the first N batches of one epoch (automatic batch, a
random model, ``learning.online_epoch``) under cProfile, the functions with the most own time, and the seconds per
batch (the GPU is synchronised by the engine's own reads of each batch's results).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from machine import describe_machine  # noqa: E402

from engine.training.learning import automatic_batch_size  # noqa: E402

ITERATION = re.compile(r"^iteration\s+(\d+)\s+train (\S+)(?:\s+validation (\S+))?\s+\((\S+) s\)")
BLOCKS = re.compile(r"(\d[\d,]*) blocks \(")


def run(corpus: Path, args: argparse.Namespace, batch_size: int | None, algorithm: str) -> dict:
    """One ``chmm train`` run; returns its progress (iteration, train BPS, validation BPS, seconds), its stored
    blocks, the online epochs it ran and its wall-clock seconds."""
    command = [sys.executable, "-m", "engine.cli", "train", str(corpus), "-o", str(Path(args.scratch) / "m.npz")]
    command += ["--states", str(args.states), "--pseudocount", str(args.pseudocount), "--restarts", "1"]
    command += ["--no-refit", "--iterations", str(args.iterations), "--algorithm", algorithm, "--json"]
    command += ["--backend", args.backend] if args.backend else []
    command += ["--batch-size", str(batch_size)] if batch_size is not None else []
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return {"error": tail[0], "seconds": seconds}
    progress = [
        (int(m[1]), float(m[2]), float(m[3]) if m[3] else None, float(m[4]))
        for m in (ITERATION.match(line) for line in done.stderr.splitlines())
        if m
    ]
    blocks = BLOCKS.search(done.stderr)
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "progress": progress,
        "blocks": int(blocks[1].replace(",", "")) if blocks else None,
        "online_epochs": int(summary.get("online_iterations") or 0),
        "validation_bps": summary.get("validation_bps"),
        "seconds": seconds,
    }


def row(label: str, result: dict) -> str:
    """A table line: the batch, online epochs and seconds each, the validation BPS online EM handed over (its best
    epoch), the best validation BPS at the end, and the run's seconds."""
    if "error" in result:
        return f"| {label} | failed: {result['error']} | | | | |"
    epochs = result["online_epochs"]
    online = result["progress"][:epochs]
    epoch_seconds = sum(p[3] for p in online) / epochs if epochs else 0.0
    handed = min((p[2] for p in online if p[2] is not None), default=None)
    handed_text = "" if handed is None else f"{handed:.4f}"
    batch = len(result["progress"]) - epochs
    return (
        f"| {label} | {epochs} | {epoch_seconds:.2f} | {handed_text} | {batch} | {result['validation_bps']:.4f} "
        f"| {result['seconds']:.0f} |"
    )


def profile(corpus: Path, states: int, batches: int, backend: str | None, pseudocount: float) -> None:
    """Print where the first ``batches`` batches of an online epoch spend their time (cProfile, own time)."""
    import cProfile
    import pstats

    import numpy as np

    from engine.backends import engines
    from engine.corpora import allocation, text
    from engine.model.blocks import BlockLayout, normalise_rows, pairs_in_sequence
    from engine.model.dense import CHMM
    from engine.training import learning

    prepared = text.prepare_corpus(text.read_text(corpus), name=corpus.stem)
    x = np.asarray(prepared.train, dtype=np.int64)
    n_clones = allocation.allocate_clones(x, prepared.n_symbols, states, "ngram", 5)
    layout = BlockLayout.build(n_clones, pairs_in_sequence(x, prepared.n_symbols))
    rng = np.random.default_rng(0)
    T = normalise_rows(layout, rng.random(layout.size, dtype=np.float32), 0.0, np.float32)
    pi = np.full(layout.n_states, 1.0 / layout.n_states, dtype=np.float32)
    model = CHMM(list(prepared.symbols), layout, T, pi, None, {})
    backend = engines.resolve_backend(backend or "cpu")
    engine = engines.engine_for(model, backend)
    state = engine.load(model)
    batch = learning.automatic_batch_size(layout.n_blocks)
    config = learning.TrainingConfig(batch_size=batch, pseudocount=pseudocount)
    sequence = x[: batch * batches + 1]
    learning.online_epoch(engine, state, [x[: 2 * batch + 1]], config, learning.OnlineState(), None)  # warm-up
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    learning.online_epoch(engine, state, [sequence], config, learning.OnlineState(), None)
    profiler.disable()
    seconds = time.perf_counter() - started
    print(f"{backend}: {states:,} states, {layout.n_blocks} blocks ({layout.size:,} entries), batch {batch:,} symbols")
    print(f"{batches} batches in {seconds:.2f} s: {1e3 * seconds / batches:.1f} ms a batch")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--states", type=int, default=10000)
    parser.add_argument("--pseudocount", type=float, default=1e-4)
    parser.add_argument("--scales", type=float, nargs="+", default=[1, 4, 16], help="multiples of the automatic batch")
    parser.add_argument("--iterations", type=int, default=6, help="batch-EM iterations after the online stage")
    parser.add_argument("--backend", default=None, help="chmm train's --backend (default: its own)")
    parser.add_argument("--scratch", default="/tmp", help="folder for the (discarded) model files")
    parser.add_argument("--json", type=Path, help="write every run's progress here")
    parser.add_argument("--profile", type=int, metavar="N", help="profile the first N batches of an online epoch")
    args = parser.parse_args()
    if args.profile:
        profile(args.corpus, args.states, args.profile, args.backend, args.pseudocount)
        return
    print(describe_machine())
    print(
        f"chmm train {args.corpus.name} --states {args.states} --pseudocount {args.pseudocount:g} --restarts 1 "
        f"--no-refit --iterations {args.iterations}" + (f" --backend {args.backend}" if args.backend else "")
    )
    results: dict[str, dict] = {}
    first = run(args.corpus, args, None, "online")
    results["online x1"] = first
    automatic = automatic_batch_size(first.get("blocks") or 0)
    for scale in args.scales:
        if scale != 1:
            results[f"online x{scale:g}"] = run(args.corpus, args, round(scale * automatic), "online")
    results["batch EM alone"] = run(args.corpus, args, None, "em")
    print()
    print(f"automatic batch: {automatic:,} symbols ({first.get('blocks')} stored blocks)")
    header = "| run | online epochs | s per online epoch | validation handed over | batch iterations | best validation"
    print(header + " BPS | s in all |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, result in results.items():
        print(row(label, result))
    if args.json:
        args.json.write_text(json.dumps({"automatic_batch": automatic, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
