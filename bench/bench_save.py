"""How long saving a model file takes: the project's writer (``engine.model.dense.write_npz_atomic``, zlib level
``COMPRESS_LEVEL``) against numpy's ``savez_compressed`` (zlib's default level 6, the writer before), interleaved on
the same arrays, with the file sizes.

    python bench/bench_save.py [--model FILE.npz] [--states 10000] [--rounds 2]

Without ``--model``: a random dense model over alice (n-gram allocation of order 5) at ``--states`` and counts of
one E-step's size (float64), the arrays a trained model's file holds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe_machine  # noqa: E402

from engine.corpora import (
    allocation,  # noqa: E402
    text,  # noqa: E402
)
from engine.model import dense as model  # noqa: E402
from engine.model.blocks import pairs_in_sequence  # noqa: E402


def _arrays(path: Path | None, states: int) -> dict[str, np.ndarray]:
    if path is not None:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files if name != "header_json"}  # ours writes its own
    corpus = text.prepare_corpus(text.read_text(ROOT / "tests" / "data" / "carroll-alice.txt"), name="alice")
    x = corpus.train_full
    n_clones = allocation.allocate_clones(x, corpus.n_symbols, states, "ngram", 5)
    rng = np.random.default_rng(0)
    chmm = model.random_model(list(corpus.symbols), n_clones, pairs_in_sequence(x, corpus.n_symbols), rng)
    counts = (chmm.T.astype(np.float64) * rng.gamma(0.3, 40.0, size=chmm.T.shape)).astype(np.float64)
    return {"T": chmm.T, "pi": chmm.pi, "counts": counts, "n_clones": chmm.layout.n_clones}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--states", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    arrays = _arrays(args.model, args.states)
    megabytes = sum(a.nbytes for a in arrays.values()) / 1e6
    seconds: dict[str, list[float]] = {
        "numpy savez_compressed (level 6)": [],
        f"ours (level {model.COMPRESS_LEVEL})": [],
    }
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="chmm-save-") as folder:
        for _ in range(args.rounds):
            for label in seconds:
                path = Path(folder) / "m.npz"
                t0 = time.perf_counter()
                if label.startswith("numpy"):
                    with open(path, "wb") as handle:
                        np.savez_compressed(handle, **arrays)
                else:
                    model.write_npz_atomic(path, arrays, {})
                seconds[label].append(time.perf_counter() - t0)
                sizes[label] = path.stat().st_size
                with np.load(path, allow_pickle=False) as back:  # what was written reads back the same
                    assert all(np.array_equal(back[name], arrays[name]) for name in arrays)
    print(f"machine: {describe_machine()}")
    print(f"arrays: {megabytes:,.0f} MB ({', '.join(f'{k} {v.dtype}' for k, v in arrays.items())})\n")
    print("| writer | seconds (each round) | file MB |")
    print("|---|---|---:|")
    for label, times in seconds.items():
        print(f"| {label} | {' / '.join(f'{t:.1f}' for t in times)} | {sizes[label] / 1e6:,.0f} |")
    before, after = seconds
    ratios = [b / a for b, a in zip(seconds[before], seconds[after], strict=True)]
    print(f"\nours faster by {' / '.join(f'{r:.2f}x' for r in ratios)}")


if __name__ == "__main__":
    main()
