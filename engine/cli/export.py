"""``chmm export``: the clone graph (or one module's subgraph) for network-analysis tools."""

from __future__ import annotations

import argparse
from typing import Any

from engine import api
from engine.cli.common import add_community_arguments, check_threshold_argument, community_options, json_line


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """``chmm export``: its arguments."""
    export = commands.add_parser("export", help="export the clone graph or one module's subgraph")
    export.add_argument("model")
    export.add_argument("--format", required=True, choices=api.CHOICES.EXPORT_FORMATS)
    export.add_argument("-o", "--output", required=True, help="file to write")
    export.add_argument("--module", default=None, help="export only this module (id as in the module table: 3 or 3:2)")
    add_community_arguments(export)
    export.add_argument("--json", action="store_true")
    export.set_defaults(run=run)
    return export


def run(args: argparse.Namespace) -> int:
    """Write the graph in the asked format."""
    check_threshold_argument(args.threshold)
    options = community_options(args)
    options.validate()
    model = api.load_model(args.model)
    corpus = api.corpora.read_text(args.corpus) if args.corpus else None
    figures = api.graph.export_model_graph(
        model,
        args.output,
        args.format,
        module=args.module,
        threshold=args.threshold,
        options=options,
        corpus_text=corpus,
    )
    if args.json:
        print(json_line(figures))
    else:
        print(f"wrote {args.output}: {figures['nodes']} nodes, {figures['edges']} edges ({args.format})")
    return 0
