"""``chmm prune``: a smaller model, its small transitions zeroed."""

from __future__ import annotations

import argparse
from typing import Any

from engine import api
from engine.cli.common import DEFAULT_PRUNE_THRESHOLD, check_output, check_threshold_argument, json_line


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """``chmm prune``: its arguments."""
    prune = commands.add_parser("prune", help="zero small transitions (a smaller model)")
    prune.add_argument("model")
    prune.add_argument("-o", "--output", required=True, help="pruned model file to write (.npz)")
    prune.add_argument(
        "--threshold", type=float, default=None, help=f"zero T below this (default {DEFAULT_PRUNE_THRESHOLD:g})"
    )
    prune.add_argument("--top-mass", type=float, default=None, help="per row, keep the largest entries up to this mass")
    prune.add_argument("--viterbi", default=None, help="keep only the clones the Viterbi path of this text uses")
    prune.add_argument("--validation", default=None, help="text to score before and after pruning")
    prune.add_argument("--json", action="store_true")
    prune.set_defaults(run=run)
    return prune


def run(args: argparse.Namespace) -> int:
    """Prune the model and save it."""
    threshold = args.threshold
    if threshold is None and args.top_mass is None and args.viterbi is None:
        threshold = api.DEFAULTS.DEFAULT_PRUNE_THRESHOLD
    check_threshold_argument(threshold)
    check_output(args.output, [args.model])
    model = api.load_model(args.model)
    outcome = api.prune_model(
        model,
        threshold=threshold,
        top_mass=args.top_mass,
        viterbi_text=api.corpora.read_text(args.viterbi) if args.viterbi else None,
        validation_text=api.corpora.read_text(args.validation) if args.validation else None,
    )
    api.save_model(outcome.model, args.output)
    summary = outcome.summary
    if args.json:
        print(json_line(summary))
    else:
        line = (
            f"saved {args.output}: kept {summary['nonzeros_after']:,} of {summary['nonzeros_before']:,} transitions "
            f"({100 * summary['kept_fraction']:.2f}%)"
        )
        if summary["bps_before"] is not None:
            line += f"; validation BPS {summary['bps_before']:.4f} -> {summary['bps_after']:.4f}"
        print(line)
    return 0
