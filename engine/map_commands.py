"""The command line of cognitive maps: ``chmm walk`` (a random walk in a room) and ``chmm map`` (learn a map, a
CHMM with actions, from a walk). See :mod:`engine.walks` for the file formats and the recipe."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from engine import actions, maps, walks
from engine.commands import check_output


def add_map_commands(commands: Any) -> None:
    """Add ``walk`` and ``map`` to the ``chmm`` subcommands."""
    defaults = walks.MAP_DEFAULTS
    walk = commands.add_parser("walk", help="generate a random walk in a grid room (a corpus for a cognitive map)")
    walk.add_argument("room", help="CSV table of the room's observations (whole numbers), -1 for a wall cell")
    walk.add_argument("--length", type=int, default=10_000, help="steps of the walk")
    walk.add_argument("--seed", type=int, default=0)
    walk.add_argument("-o", "--output", required=True, help="CSV file to write: action, observation, row, column")
    walk.set_defaults(run=run_walk)

    learn = commands.add_parser("map", help="learn a cognitive map (a CHMM whose transitions depend on actions)")
    learn.add_argument("walk", help="CSV walk with the columns action and observation (or JSON)")
    learn.add_argument("-o", "--output", required=True, help="model file to write (.npz)")
    learn.add_argument("--clones", type=int, default=defaults.clones, help="clones per observation")
    learn.add_argument("--iterations", type=int, default=defaults.iterations, help="most batch-EM iterations")
    learn.add_argument("--pseudocount", type=float, default=defaults.pseudocount, help="batch EM's pseudocount")
    learn.add_argument("--viterbi-iterations", type=int, default=defaults.viterbi_iterations)
    learn.add_argument("--seed", type=int, default=defaults.seed)
    learn.add_argument(
        "--no-merge", dest="merge", action="store_false", help="keep clones with the same future apart (no merging)"
    )
    learn.add_argument("--room", default=None, help="the room the walk was in: say whether the map recovers it")
    learn.add_argument("--json", action="store_true")
    learn.set_defaults(run=run_map)


def run_walk(args: argparse.Namespace) -> int:
    check_output(args.output, [args.room])
    room = walks.read_room(args.room)
    walk = actions.generate_walk(room, args.length, seed=args.seed)
    walks.write_walk(walk, args.output)
    print(f"wrote a walk of {len(walk):,} steps in a {room.shape[0]} x {room.shape[1]} room to {args.output}")
    return 0


def run_map(args: argparse.Namespace) -> int:
    check_output(args.output, [args.walk] + ([args.room] if args.room else []))
    for name, value, lowest in (
        ("--clones", args.clones, 1),
        ("--iterations", args.iterations, 0),
        ("--viterbi-iterations", args.viterbi_iterations, 0),
    ):
        if value < lowest:
            raise ValueError(f"{name} must be at least {lowest}, got {value}")
    if not args.pseudocount >= 0:
        raise ValueError(f"--pseudocount must be 0 or more, got {args.pseudocount}")
    room = walks.read_room(args.room) if args.room else None
    walk = walks.read_walk(args.walk)
    options = walks.MapOptions(
        args.clones, args.iterations, args.pseudocount, args.viterbi_iterations, args.seed, args.merge
    )

    def progress(stage: str, iteration: int, bits: float) -> None:
        if not args.json and (iteration % 25 == 0):
            print(f"{stage:8s} iteration {iteration + 1:4d}  {bits:.4f} bits per step", file=sys.stderr, flush=True)

    model, summary = walks.learn_map(walk, options, progress)
    if room is not None:
        summary["recovers_room"] = maps.recovers_room(model, *walk.walks(), room)
    model.save(args.output)
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"{summary['bits_per_step']:.4f} bits per step after {summary['em_iterations']} EM and "
            f"{summary['viterbi_iterations']} Viterbi iterations; the walk uses {summary['clones_used']} of "
            f"{summary['clones']} clones; saved to {args.output}"
        )
        if room is not None:
            cells = int((room >= 0).sum())
            verdict = "recovers" if summary["recovers_room"] else "does not recover"
            print(f"the map {verdict} the room's grid of {cells} cells (self-loops aside)")
    return 0
