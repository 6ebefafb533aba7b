"""``chmm schema``: which stored map's layout a walk in a new room follows (the maps' emissions fitted to the walk,
their T kept; :mod:`engine.cognitive.schemas`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from engine import api
from engine.errors import CHMMError


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """``chmm schema``: its arguments."""
    schema = commands.add_parser(
        "schema", help="match a walk in a new room to a library of learned maps (which layout it follows)"
    )
    schema.add_argument("walk", help="CSV walk with the columns action and observation (or JSON)")
    schema.add_argument(
        "--library", nargs="+", required=True, help="map files (.npz, from chmm map) or folders of them"
    )
    schema.add_argument("--iterations", type=int, default=50, help="most EM iterations fitting each map's emissions")
    schema.add_argument(
        "--held-out", type=float, default=api.maps.SCHEMA_HELD_OUT, help="share of the walk's steps, at its end, scored"
    )
    schema.add_argument("--seed", type=int, default=0, help="seed of the emissions' random start")
    schema.add_argument("--json", action="store_true")
    schema.set_defaults(run=run)
    return schema


def run(args: argparse.Namespace) -> int:
    """Fit every map of the library to the walk and print them, best first."""
    if args.iterations < 1:
        raise CHMMError(f"--iterations must be at least 1, got {args.iterations}")
    library = api.maps.read_library(args.library)
    walk = api.maps.read_walk(args.walk)
    x, a = walk.walks()
    if isinstance(x, list):
        raise CHMMError("chmm schema matches one walk; the file holds several (give one walk)")
    known = set().union(*(model.actions for model in library.values()))
    unknown = sorted({walk.action_names[k] for k in np.unique(a[:-1])} - known) if len(a) > 1 else []
    if unknown:
        raise CHMMError(f"the walk takes actions the maps do not have: {', '.join(unknown)}")
    fits = api.maps.match_schemas(  # each map's actions matched to the walk's by name, in whatever order it has them
        library, x, a, len(walk.symbols), args.iterations, args.held_out, args.seed, action_names=walk.action_names
    )
    rows = [
        {"map": f.name, "held_out_bits_per_step": f.held_out_bits, "fitted_bits_per_step": f.fitted_bits,
         "iterations": f.iterations, "clones": int(library[f.name].n_states)}
        for f in fits
    ]  # fmt: skip
    if args.json:
        print(json.dumps({"best": fits[0].name, "maps": rows}))
        return 0
    print(f"{'map':24s} {'held-out bits/step':>18s} {'fitted bits/step':>16s} {'clones':>7s}")
    for row in rows:
        print(
            f"{row['map'][:24]:24s} {row['held_out_bits_per_step']:18.4f} {row['fitted_bits_per_step']:16.4f} "
            f"{row['clones']:7d}"
        )
    margin = ""
    if len(fits) > 1:
        margin = f" ({fits[1].held_out_bits - fits[0].held_out_bits:.4f} bits per step below the next)"
    print(f"the walk follows {fits[0].name!r}{margin}")
    return 0
