"""Is the module map readable at its fit zoom? For a model, run Infomap (as the Communities page does), draw the top
level's map and measure, from the layout the page gets: how many modules are labelled, the labels' size on screen at
the fit zoom of the page's canvas, and how many of the labels overlap another label or a circle (the goal: none).
Also the clone table of the whole graph: its rows, and the time a sort of them takes (Python's, as a floor).

    python bench/bench_map.py [--model sample_models/alice-600.npz] [--markov-time 1]
    python bench/bench_map.py --corpus ../shared/corpora/carroll-alice.txt --states 3000   # trains one first
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe_machine  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "sample_models" / "alice-600.npz")
    parser.add_argument("--corpus", type=Path, default=None, help="train a model on this corpus instead")
    parser.add_argument("--states", type=int, default=3000)
    parser.add_argument("--markov-time", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chmm-map-") as folder:
        os.environ["CHMM_DATA_DIR"] = folder
        from app import sessions
        from app.services import graphs, tables
        from engine import training
        from engine.backends import model_files
        from engine.corpora import text

        session = sessions.session_folder(sessions.new_session_id())
        if args.corpus is not None:
            options = training.TrainOptions(
                states=args.states, pseudocount=1e-4, algorithm="online", restarts=1, refit=False
            )
            started = time.perf_counter()
            outcome = training.train_text(text.read_text(args.corpus), options, name=args.corpus.name)
            print(f"trained {args.states:,} states on {args.corpus.name} in {time.perf_counter() - started:.0f} s")
            model_path = Path(folder) / "model.npz"
            model_files.save_model(outcome.model, model_path)
        else:
            model_path = args.model
        if model_path.resolve() != (ROOT / "sample_models" / "alice-600.npz").resolve():  # the session's start
            import shutil

            (session / sessions.CURRENT).unlink()
            shutil.copyfile(model_path, session / sessions.CURRENT)
        saved = graphs.run_communities(session, trials=2, markov_time=args.markov_time)
        drawn = graphs.module_map(session)
        nodes = [e for e in drawn["elements"] if "source" not in e["data"]]
        xy = np.array([[e["position"]["x"], e["position"]["y"]] for e in nodes])
        sizes = np.array([e["data"]["size"] for e in nodes])
        font = nodes[0]["data"]["font"] if nodes else 0.0
        labelled = [e for e in nodes if e["data"]["label"]]
        on_screen = font * graphs.fit_zoom(xy, sizes)
        _, clashes = graphs.place_labels(
            xy[: len(labelled)], sizes[: len(labelled)], [e["data"]["label"] for e in labelled], font
        )
        made = tables.graph_tables(session)
        started = time.perf_counter()
        for key in ("flow", "betweenness", "clone"):  # the order a grid's sort asks of the server
            made["clones"].order([{"colId": key, "sort": "asc"}])
        sort_seconds = (time.perf_counter() - started) / 3
    print(describe_machine())
    print(f"model: {model_path.name if args.corpus is None else args.corpus.name}, Markov time {args.markov_time:g}")
    print("| modules | labelled | label size on screen at fit (px) | labels overlapping | clone rows | sort s |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {saved['summary']['modules']} | {len(labelled)} | {on_screen:.1f} | {clashes} | "
        f"{made['clone_count']:,} | {sort_seconds:.3f} |"
    )


if __name__ == "__main__":
    main()
