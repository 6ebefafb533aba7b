"""``chmm sample``: text sampled from a model."""

from __future__ import annotations

import argparse
from typing import Any

from engine import api
from engine.errors import CHMMError


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """``chmm sample``: its arguments."""
    sample = commands.add_parser("sample", help="sample text from a model")
    sample.add_argument("model")
    sample.add_argument("--length", type=int, default=500)
    sample.add_argument(
        "--prefix", default=None, help=f"text to continue (at most {api.DEFAULTS.MAX_PREFIX_CHARACTERS:,} characters)"
    )
    sample.add_argument("--seed", type=int, default=0)
    sample.set_defaults(run=run)
    return sample


def run(args: argparse.Namespace) -> int:
    """Print ``--length`` sampled symbols."""
    if args.length < 1:
        raise CHMMError("--length must be at least 1")
    api.check_prefix(args.prefix)  # before the model is read: a prefix over the bound is refused at once
    model = api.load_model(args.model)
    print(api.sample_text(model, args.length, args.seed, args.prefix))
    return 0
