"""Benchmark: laying out module maps and clone graphs on the server (engine/network/drawing.py) against networkx's
spring layout, and the Communities page's module map end to end on modules from real Infomap runs.

Part 1 (layout): random geometric graphs of n nodes (about the link density of a module map), our numba
Fruchterman-Reingold (:func:`engine.network.drawing.force_layout`, 120 steps) against ``networkx.spring_layout`` (50
steps, its default), interleaved, the best of ``--repeats``; the ratio is ours / networkx.

Part 2 (module map): the sample model's Infomap result at several Markov times (smaller times give more modules),
``app.services.graphs.module_map`` (read the saved result, lay out, build the elements) timed per call; then a saved
result of ``--synthetic-modules`` top modules with six random links each (the map draws four per module).

    python bench/bench_layout.py [--sizes 500 2000 4000] [--repeats 2] [--markov-times 1 0.3 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402

from bench.machine import describe_machine  # noqa: E402
from engine.network import drawing  # noqa: E402


def best_time(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def layout_rows(sizes: list[int], repeats: int) -> None:
    print("| nodes | links | ours s | networkx spring s | ours / networkx |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    drawing.force_layout(10, np.array([0]), np.array([1]))  # compile (cached on disk after the first run)
    for n in sizes:
        graph = nx.random_geometric_graph(n, 2.5 / np.sqrt(n), seed=1)
        edges = np.array(graph.edges(), dtype=np.int64).reshape(-1, 2)
        ours = best_time(lambda e=edges, n=n: drawing.force_layout(n, e[:, 0], e[:, 1]), repeats)
        theirs = best_time(lambda g=graph: nx.spring_layout(g, seed=0), repeats)
        print(f"| {n:,} | {len(edges):,} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.3f} |", flush=True)


def module_map_rows(markov_times: list[float], repeats: int, synthetic_modules: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-layout-"))
    os.environ["CHMM_DATA_DIR"] = str(root)
    try:
        from app import sessions
        from app.services import graphs

        print()
        print("| Markov time | top modules | links drawn | Infomap + saved result s | module map s |")
        print("| ---: | ---: | ---: | ---: | ---: |")
        for markov_time in markov_times:
            folder = sessions.session_folder(sessions.new_session_id())  # its current model: the sample model
            started = time.perf_counter()
            graphs.run_communities(folder, trials=2, markov_time=markov_time)
            infomap_s = time.perf_counter() - started
            drawn = graphs.module_map(folder)
            seconds = best_time(lambda f=folder: graphs.module_map(f), repeats)
            print(
                f"| {markov_time:g} | {drawn['modules']:,} | {drawn['links']:,} | {infomap_s:.2f} | {seconds:.2f} |",
                flush=True,
            )
        # a result of many modules (a 30,000-state model has a few thousand at small Markov times): the saved
        # result of the last run, its modules and links multiplied
        folder = sessions.session_folder(sessions.new_session_id())
        saved = graphs.run_communities(folder, trials=1, markov_time=1.0)
        rng = np.random.default_rng(0)
        modules = [
            {"id": str(i + 1), "parent": "", "name": f"m{i + 1}", "size": 5, "flow": float(f), "children": []}
            for i, f in enumerate(sorted(rng.dirichlet(np.ones(synthetic_modules)), reverse=True))
        ]
        pairs = rng.integers(1, synthetic_modules + 1, size=(6 * synthetic_modules, 2))
        flows = rng.exponential(size=len(pairs))
        links = [[str(a), str(b), float(f)] for (a, b), f in zip(pairs, flows, strict=True) if a != b]
        saved.update(modules=modules, links={"": links})
        (folder / sessions.COMMUNITIES).write_text(json.dumps(saved), encoding="utf-8")
        drawn = graphs.module_map(folder)
        seconds = best_time(lambda f=folder: graphs.module_map(f), repeats)
        print(f"| synthetic | {drawn['modules']:,} | {drawn['links']:,} | - | {seconds:.2f} |", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[500, 2000, 4000])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--markov-times", type=float, nargs="*", default=[1.0, 0.3, 0.1])
    parser.add_argument("--synthetic-modules", type=int, default=3000)
    args = parser.parse_args()
    print(describe_machine())
    layout_rows(args.sizes, args.repeats)
    module_map_rows(args.markov_times, args.repeats, args.synthetic_modules)


if __name__ == "__main__":
    main()
