"""``chmm world``: a world of several rooms joined by doors, written as a room file (a grid of observations) for
``chmm walk`` and ``chmm map --room``. See :mod:`engine.cognitive.worlds`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from engine import api
from engine.cli.common import check_output
from engine.files import atomic_write_bytes


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """``chmm world``: its arguments."""
    world = commands.add_parser(
        "world", help="generate a world of several rooms joined by doors (a room file for chmm walk and chmm map)"
    )
    world.add_argument(
        "rooms", help='the rooms, "HxW" each: "," between the rooms of a row, "/" between rows (e.g. "5x5,5x5,5x5")'
    )
    world.add_argument("--observations", type=int, default=4, help="observations the cells draw from (aliasing)")
    world.add_argument("--doors", type=int, default=1, help="doors in every wall between two rooms side by side")
    world.add_argument("--seed", type=int, default=0)
    world.add_argument("-o", "--output", required=True, help="room file to write (CSV, -1 for a wall cell)")
    world.add_argument("--json", action="store_true")
    world.set_defaults(run=run)
    return world


def run(args: argparse.Namespace) -> int:
    """Write the world's room file and say what it holds."""
    check_output(args.output)
    world = api.maps.make_world(args.rooms, args.observations, args.doors, args.seed)
    atomic_write_bytes(args.output, api.maps.room_text(world.grid).encode("utf-8"))
    figures = {
        "rooms": world.n_rooms,
        "doors": len(world.doors),
        "open_cells": int((world.grid >= 0).sum()),
        "rows": int(world.grid.shape[0]),
        "columns": int(world.grid.shape[1]),
    }
    if args.json:
        print(json.dumps(figures))
    else:
        print(
            f"wrote a world of {figures['rooms']} rooms joined by {figures['doors']} doors ({figures['open_cells']} "
            f"open cells in a {figures['rows']} x {figures['columns']} grid) to {args.output}"
        )
    return 0
