"""How the lockstep forward pass shares out its work, on the CPU (no GPU needed): for the pass `bench_gpu.py
--lockstep` times (30,000 states, n-gram allocation of order 5, the first 42,297 symbols of milton-paradise), each
setting's steps, work items a step, bytes of blocks read, and how evenly the kernel's round robin (thread block b
takes items b, b + G, ... of every step) spreads a step's bytes over the G thread blocks, against the dynamic share
of ``DeviceBlocks.lockstep_dynamic`` (the next free thread block takes the next item, in the same order). A step
ends at the grid barrier, so a step's time follows its busiest thread block where the memory system is not the
limit.

An item's bytes: its rows of the block (rows x the pair's first symbol's clones, 2 bytes an entry on float16 blocks)
plus its staged messages (chunks x clones x 4 bytes). The cut into items is the engine's own
(:func:`engine.backends.gpu.lockstep.work_items`).

    python bench/bench_lockstep_items.py [--settings 32:100:64 64:100:64 ...] [--grid 264]

G = 264: two thread blocks of 512 threads on each of the 132 multiprocessors of an H100 or H200.
"""

from __future__ import annotations

import argparse
import heapq
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_gpu import FORWARD_SYMBOLS, _corpus  # noqa: E402

from engine.backends.chunks import LockstepSchedule, chunk  # noqa: E402
from engine.backends.gpu import kernels  # noqa: E402
from engine.backends.gpu.lockstep import LOCKSTEP_SHARED, work_items  # noqa: E402
from engine.corpora import allocation  # noqa: E402
from engine.model.blocks import BlockLayout, pairs_in_sequence  # noqa: E402

SETTINGS = ("32:100:64", "32:100:32", "64:100:64", "64:100:128", "128:100:64", "1024:50:64", "1024:50:128")
"""(chunks, burn-in, rows per item) of the settings measured on an H200 (bench/RESULTS.md, "Loads in flight")."""


def item_bytes(
    schedule: LockstepSchedule, tile: int, rows: int, entry_bytes: int
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Each step's items' bytes, in the kernel's item order (group by group; within a group, tile by tile and run
    of rows by run of rows); and every item's staged messages and bytes of block rows, end to end."""
    items, _, step_items = work_items(schedule, tile, rows)
    out_rows = np.where(schedule.group_block >= 0, schedule.group_out, 0).astype(np.int64)
    chunks = np.diff(schedule.group_chunk_start).astype(np.int64)
    runs = -(-out_rows // rows)
    group = np.repeat(np.arange(len(items)), items)
    within = np.arange(len(group)) - np.repeat(np.cumsum(items) - items, items)
    part, run = within // np.maximum(runs[group], 1), within % np.maximum(runs[group], 1)
    staged = np.minimum(tile, chunks[group] - part * tile)
    row_count = np.minimum(rows, out_rows[group] - run * rows)
    m_in = schedule.group_in[group].astype(np.int64)
    block_bytes = (row_count * m_in * entry_bytes).astype(np.float64)
    cost = block_bytes + staged * m_in * 4
    return np.split(cost, np.cumsum(step_items)[:-1]), staged, block_bytes


def shares(costs: list[np.ndarray], grid: int) -> tuple[float, float]:
    """The sum over steps of the busiest thread block's bytes, over the sum of the mean's: under the kernel's round
    robin, and under its dynamic share (each item, in order, to the thread block that is free first)."""
    mean = robin = dynamic = 0.0
    for step in costs:
        if not len(step):
            continue
        mean += step.sum() / grid
        robin += np.bincount(np.arange(len(step)) % grid, weights=step, minlength=grid).max()
        free = [0.0] * grid
        for c in step:
            heapq.heappush(free, heapq.heappop(free) + c)
        dynamic += max(free)
    return robin / mean, dynamic / mean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS), help="CHUNKS:BURN_IN:ROWS")
    parser.add_argument("--grid", type=int, default=264, help="thread blocks of the persistent kernel")
    parser.add_argument("--states", type=int, default=30000)
    args = parser.parse_args()
    corpus = _corpus("milton-paradise")
    n_clones = allocation.allocate_clones(corpus.train_full, corpus.n_symbols, args.states, "ngram", 5)
    layout = BlockLayout.build(n_clones, pairs_in_sequence(corpus.train_full, corpus.n_symbols))
    x = corpus.train_full[:FORWARD_SYMBOLS]
    width = int(layout.n_clones.max())
    tile = min(kernels.LOCKSTEP_TILE_MAX, LOCKSTEP_SHARED // (4 * width))
    print(f"{args.states:,} states, widest symbol {width:,} clones, {tile} chunks a tile, grid {args.grid}")
    print("| chunks | burn-in | rows per item | steps | items a step | GB of blocks read (float16) | messages a row "
          "read serves | round robin: busiest / mean | dynamic: busiest / mean |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for setting in args.settings:
        chunks, burn_in, rows = (int(v) for v in setting.split(":"))
        size = -(-(len(x) - 1) // chunks)
        schedule = LockstepSchedule.build(layout, chunk([x], size, burn_in))
        costs, staged, block_bytes = item_bytes(schedule, tile, rows, 2)
        serves = float((staged * block_bytes).sum() / block_bytes.sum())  # the mean over the bytes read
        blocks = schedule.group_block[schedule.group_block >= 0]
        read = 2 * float(np.diff(layout.block_offset)[blocks].sum())
        robin, dynamic = shares(costs, args.grid)
        items = np.mean([len(c) for c in costs])
        print(f"| {chunks:,} | {burn_in} | {rows} | {schedule.n_steps:,} | {items:,.0f} | {read / 1e9:.0f} | "
              f"{serves:.2f} | {robin:.2f} | {dynamic:.2f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
