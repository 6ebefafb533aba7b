"""``chmm score``: bits per symbol of a text under a model (a CHMM or a peer learner)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from engine import api
from engine.cli.common import TRAIN_DEFAULTS, json_line


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """``chmm score``: its arguments."""
    score = commands.add_parser("score", help="bits per symbol of a text under a model")
    score.add_argument("model")
    score.add_argument("corpus")
    score.add_argument("--backend", choices=api.backend_choices(), default=TRAIN_DEFAULTS.backend)
    score.add_argument("--json", action="store_true")
    score.set_defaults(run=run)
    return score


def run(args: argparse.Namespace) -> int:
    """Print the text's BPS under the model."""
    model = api.load_any(args.model)  # a CHMM or a peer learner, told apart by the file's header
    result = api.learners.score_any(model, api.corpora.read_text(args.corpus), backend=args.backend)
    figures = {
        "bps": result.bps,
        "symbols": result.symbols,
        "zero_probability_events": result.zero_probability_events,
    }
    if api.learners.is_peer(model):
        figures["learner"] = model.kind
    if args.json:
        print(json_line(figures))
    else:
        codec = getattr(model, "codec", None)
        unit = "symbol" if codec is None or codec.characters else codec.unit.rstrip("s")
        print(f"{result.bps:.4f} bits per {unit} over {result.symbols} {unit}s")
        if result.zero_probability_events:
            print(
                f"{result.zero_probability_events} zero-probability transition(s) were scored by the back-off",
                file=sys.stderr,
            )
    return 0
