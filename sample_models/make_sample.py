"""Rebuild the bundled sample model ``sample_models/alice-600.npz`` (the model every web-app session starts on).

Usage (from the repository root, in the project's virtual environment)::

    python sample_models/make_sample.py [--output sample_models/alice-600.npz] [--communities-only]

600 clones trained by online EM on ``carroll-alice.txt`` (Lewis Carroll, *Alice's Adventures in Wonderland*, public
domain, the copy bundled next to this script) with the paper's normalisation: small enough to ship (about 3 MB,
expected counts included) and to explore in the browser, good enough to sample readable pseudo-English. Takes about
10 s on two cores; the seed is fixed, so a rebuild gives the same model on the same machine. Also writes the model's
Infomap communities (multilevel, 10 trials, pruned at 1e-3) as ``alice-600.communities.json``, which every new web
session starts with (``--communities-only``: just that file, for the existing model).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from engine import training  # noqa: E402
from engine.backends import model_files  # noqa: E402
from engine.corpora import text  # noqa: E402

CORPUS = HERE / "carroll-alice.txt"
OPTIONS = training.TrainOptions(states=600, algorithm="online", batch_size=2000, pseudocount=1e-3, iterations=30)


def main() -> int:
    """Train the sample model and save it (atomically) to ``--output``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(HERE / "alice-600.npz"), help="model file to write")
    parser.add_argument("--communities-only", action="store_true", help="only (re)write the communities file")
    args = parser.parse_args()
    if args.communities_only:
        return write_communities(Path(args.output))
    outcome = training.train_text(
        text.read_text(CORPUS),
        OPTIONS,
        name=CORPUS.name,
        log=lambda line: print(line, file=sys.stderr),
        callback=lambda r: print(f"iteration {r.iteration}: train {r.train_bps:.4f} bps", file=sys.stderr),
    )
    if outcome.result.stopped in training.STOPPED_BAD:
        print(f"training {outcome.result.stopped}: {outcome.result.error}", file=sys.stderr)
        return 1
    model_files.save_model(outcome.model, args.output)
    summary = outcome.summary
    print(
        f"saved {args.output}: {summary['states']} states, {summary['iterations']} iterations, "
        f"BPS train {summary['train_bps']:.4f}, validation {summary['validation_bps']:.4f}, "
        f"test {summary['test_bps']:.4f}"
    )
    return write_communities(Path(args.output))


def write_communities(model_path: Path) -> int:
    """Run the Communities page's Infomap on the model (in a throw-away session folder) and store the result beside
    it as ``<stem>.communities.json`` (its model stamp is replaced when a session adopts it)."""
    import json
    import os
    import tempfile

    os.environ["CHMM_START_MODEL"] = str(model_path)
    with tempfile.TemporaryDirectory() as root:
        os.environ["CHMM_DATA_DIR"] = root
        from app import sessions
        from app.services import graphs

        folder = sessions.session_folder(sessions.new_session_id())
        saved = graphs.run_communities(folder, trials=10, two_level=False, seed=0)
    saved["model"] = None
    target = model_path.with_name(model_path.stem + ".communities.json")
    target.write_text(json.dumps(saved, ensure_ascii=False), encoding="utf-8")
    print(f"saved {target}: {saved['summary']['modules']} top modules", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
