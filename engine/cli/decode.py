"""``chmm decode``: scrambled text decoded by MAP inference (paper, section 4.2.2)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from engine import api
from engine.cli.common import json_line


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """``chmm decode``: its arguments."""
    decode = commands.add_parser("decode", help="decode scrambled text (word interiors permuted) by MAP inference")
    decode.add_argument("model")
    decode.add_argument("scrambled", help="text file with the scrambled text (UTF-8)")
    decode.add_argument(
        "--constrained",
        action="store_true",
        help="decode each word's interior as a permutation of its scrambled letters (default: the paper's "
        "unconstrained Viterbi)",
    )
    decode.add_argument("--json", action="store_true")
    decode.set_defaults(run=run)
    return decode


def run(args: argparse.Namespace) -> int:
    """Print the decoded text (or its figures with ``--json``)."""
    model = api.load_model(args.model)
    scrambled = api.corpora.read_text(args.scrambled)
    started = time.perf_counter()
    result = api.decode_text(model, scrambled, constrained=args.constrained)
    seconds = time.perf_counter() - started
    if args.json:
        figures = {
            "decoded": result.decoded,
            "changed": result.changed,
            "log_probability": result.log_probability,
            "seconds": seconds,
        }
        print(json_line(figures))
    else:
        print(result.decoded)
    return 0
