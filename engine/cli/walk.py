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
    walk.add_argument(
        "--noise", type=float, default=0.0, help="write a sensor's readings, each wrong with this chance (0 to 0.5)"
    )
    walk.add_argument("-o", "--output", required=True, help="CSV file to write: action, observation, row, column")
    walk.set_defaults(run=run)
    return walk


def run(args: argparse.Namespace) -> int:
    """Write the walk's CSV."""
    check_output(args.output, [args.room])
    room = api.maps.read_room(args.room)
    walk = api.maps.generate_walk(room, args.length, seed=args.seed)
    read = ""
    if args.noise:
        readings = api.maps.noisy_readings(walk.observations, int(room.max()) + 1, args.noise, seed=args.seed)
        read = f", as a sensor read it ({(readings.symbols != walk.observations).mean():.1%} of the steps wrong)"
        walk = api.maps.Walk(readings.symbols, walk.actions, walk.positions)
    api.maps.write_walk(walk, args.output)
    print(f"wrote a walk of {len(walk):,} steps in a {room.shape[0]} x {room.shape[1]} room{read} to {args.output}")
    return 0
