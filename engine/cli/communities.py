"""``chmm communities``: Infomap modules of the clone graph and their generalized words."""

from __future__ import annotations

import argparse
from typing import Any

from engine import api
from engine.cli.common import (
    COMMUNITY_DEFAULTS,
    add_community_arguments,
    check_output,
    check_threshold_argument,
    community_options,
    json_line,
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """``chmm communities``: its arguments."""
    communities = commands.add_parser("communities", help="Infomap communities and generalized words")
    communities.add_argument("model")
    communities.add_argument("-o", "--output", required=True, help="result folder to write")
    add_community_arguments(communities)
    communities.add_argument(
        "--words",
        type=int,
        default=COMMUNITY_DEFAULTS.words,
        help=f"generalized words per module (default {COMMUNITY_DEFAULTS.words})",
    )
    communities.add_argument("--json", action="store_true")
    communities.set_defaults(run=run)
    return communities


def run(args: argparse.Namespace) -> int:
    """Run Infomap on the pruned clone graph and write the result folder."""
    check_threshold_argument(args.threshold)
    options = community_options(args)
    options.validate()
    check_output(args.output, [args.model, *([args.corpus] if args.corpus else [])])
    model = api.load_model(args.model)
    corpus = api.corpora.read_text(args.corpus) if args.corpus else None
    result = api.model_communities(model, args.threshold, options, corpus)
    api.graph.write_communities(result, args.output)
    figures = result.summary()
    if args.json:
        print(json_line(figures))
    else:
        print(
            f"wrote {args.output}: {figures['modules']} modules over {figures['nodes']} clones and "
            f"{figures['edges']} transitions, codelength {figures['codelength']:.4f} bits ({figures['seconds']:.1f} s)"
        )
        for module in sorted(result.top_modules, key=lambda m: -m.flow)[:10]:
            print(f"  {module.id:>5}  flow {module.flow:.4f}  {module.size:4d} clones  {module.name}")
    return 0
