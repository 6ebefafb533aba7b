"""Benchmark of sameness: the same commands with the same seeds, run with this checkout and with another one (e.g. a
worktree of the commit before a redesign), must write the same model files: every array to the bit, and the JSON
header equal but for the time stamp (``created``) and the measured seconds. A walk file must be the same bytes.

    git worktree add ../before <commit> && python bench/bench_files.py --against ../before [--added KEY]

Prints one row per file member and exits 1 when anything differs. The commands cover the dense CPU engine (batch
and online EM with restarts), the GPU engine's code on its NumPy twins (gpu-sim), pruning, and cognitive maps (a
walk in a room and the map learned from it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ALICE = ROOT / "tests" / "data" / "carroll-alice.txt"
ROOM = "0,1,2,3,4\n5,-1,6,7,1\n2,3,4,0,5\n6,7,1,2,3\n"
"""A 4 x 5 room with one wall cell and repeated observations."""
TIMING_KEYS = {"created", "seconds"}


def commands(out: Path, room: Path) -> list[list[str]]:
    """The ``chmm`` commands (arguments after ``chmm``) each checkout runs, writing into ``out``."""
    text = ["--max-train", "30000", "--quiet", "--pseudocount", "1e-3"]
    return [
        ["train", str(ALICE), "-o", str(out / "em.npz"), "--states", "300", "--algorithm", "em", "--restarts", "1",
         "--iterations", "4", "--seed", "3", "--no-refit", *text],
        ["train", str(ALICE), "-o", str(out / "online.npz"), "--states", "300", "--algorithm", "online",
         "--restarts", "2", "--iterations", "2", "--seed", "5", *text],
        ["train", str(ALICE), "-o", str(out / "gpu-sim.npz"), "--states", "200", "--algorithm", "em", "--restarts",
         "1", "--iterations", "3", "--seed", "1", "--backend", "gpu-sim", "--no-refit", *text],
        ["prune", str(out / "em.npz"), "-o", str(out / "pruned.npz"), "--threshold", "1e-2"],
        ["walk", str(room), "--length", "3000", "--seed", "2", "-o", str(out / "walk.csv")],
        ["map", str(out / "walk.csv"), "-o", str(out / "map.npz"), "--clones", "4", "--iterations", "30",
         "--viterbi-iterations", "5", "--seed", "0", "--room", str(room)],
    ]  # fmt: skip


def run_all(checkout: Path, out: Path, room: Path) -> None:
    """Run every command with the code of ``checkout`` (its folder first on the import path)."""
    out.mkdir(parents=True)
    for arguments in commands(out, room):
        subprocess.run(
            [sys.executable, "-m", "engine.cli", *arguments],
            cwd=checkout,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


def _header(archive: Any) -> dict[str, Any]:
    raw = archive["header_json"]
    text = raw.tobytes().decode() if raw.dtype == np.uint8 else str(raw.item() if raw.shape == () else raw)
    return json.loads(text)


def without_timings(value: Any) -> Any:
    """``value`` with every key of :data:`TIMING_KEYS` left out, at any depth."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def without_new(mine: Any, theirs: Any, added: frozenset[str], found: set[str]) -> Any:
    """``mine`` less the keys of ``added`` that ``theirs`` lacks at the same place, at any depth (noted in
    ``found``)."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        kept = {}
        for key, value in mine.items():
            if key in added and key not in theirs:
                found.add(key)
                continue
            kept[key] = without_new(value, theirs.get(key), added, found)
        return kept
    return mine


def compare(ours: Path, theirs: Path, added: frozenset[str] = frozenset()) -> list[tuple[str, str, bool]]:
    """(file, member, same) for every member of every file the two runs wrote; header keys in ``added`` (keys this
    checkout writes and the other does not know, e.g. ``corpus_sha256``) are left out of the header's comparison
    where only our header has them."""
    rows = []
    for mine in sorted(ours.iterdir()):
        other = theirs / mine.name
        if mine.suffix != ".npz":
            rows.append((mine.name, "whole file", mine.read_bytes() == other.read_bytes()))
            continue
        a, b = np.load(mine, allow_pickle=False), np.load(other, allow_pickle=False)
        for member in sorted(set(a.files) | set(b.files)):
            if member not in a.files or member not in b.files:
                rows.append((mine.name, member, False))
            elif member == "header_json":
                new: set[str] = set()
                mine_header = without_new(without_timings(_header(a)), without_timings(_header(b)), added, new)
                same = mine_header == without_timings(_header(b))
                what = "header (less timings" + (f"; new: {', '.join(sorted(new))})" if new else ")")
                rows.append((mine.name, what, same))
            else:
                x, y = a[member], b[member]
                same = x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
                rows.append((mine.name, member, same))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, required=True, help="the other checkout")
    parser.add_argument(
        "--added", action="append", default=[], metavar="KEY", help="a header key only this one writes (repeatable)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        room = Path(folder) / "room.csv"
        room.write_text(ROOM)
        ours, theirs = Path(folder) / "ours", Path(folder) / "theirs"
        run_all(ROOT, ours, room)
        run_all(args.against.resolve(), theirs, room)
        rows = compare(ours, theirs, frozenset(args.added))
    print(f"ours: {ROOT}  theirs: {args.against.resolve()}")
    print("| file | member | the same |\n|---|---|---|")
    for name, member, same in rows:
        print(f"| {name} | {member} | {'yes' if same else 'NO'} |")
    differing = sum(not same for *_, same in rows)
    print(f"{len(rows) - differing} of {len(rows)} members the same")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
