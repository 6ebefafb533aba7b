"""``chmm walk``: a random walk in a grid room (a corpus for a cognitive map)."""

from __future__ import annotations

import argparse
from typing import Any

from engine import api
from engine.cli.common import check_output


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """``chmm walk``: its arguments."""
    walk = commands.add_parser("walk", help="generate a random walk in a grid room (a corpus for a cognitive map)")
    walk.add_argument("room", help="CSV table of the room's observations (whole numbers), -1 for a wall cell")
    walk.add_argument("--length", type=int, default=10_000, help="steps of the walk")
    walk.add_argument("--seed", type=int, default=0)
    walk.add_argument("-o", "--output", required=True, help="CSV file to write: action, observation, row, column")
    walk.set_defaults(run=run)
    return walk


def run(args: argparse.Namespace) -> int:
    """Write the walk's CSV."""
    check_output(args.output, [args.room])
    room = api.read_room(args.room)
    walk = api.generate_walk(room, args.length, seed=args.seed)
    api.write_walk(walk, args.output)
    print(f"wrote a walk of {len(walk):,} steps in a {room.shape[0]} x {room.shape[1]} room to {args.output}")
    return 0
