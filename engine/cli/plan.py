"""``chmm plan``: plan a route between two places on a learned map, flat and over the map's Infomap modules, and again
with passages blocked (George et al. 2021, Figs. 3 and 7). See :mod:`engine.cognitive.planning`."""

from __future__ import annotations

import argparse
import itertools
import json
from typing import Any

from engine import api
from engine.errors import CHMMError


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """``chmm plan``: its arguments."""
    plan = commands.add_parser(
        "plan", help="plan a route on a learned map, flat and across its modules (the rooms it found), around blocks"
    )
    plan.add_argument("map", help="the map (.npz, from chmm map)")
    plan.add_argument("walk", help="a walk with its true places (columns row and column), to find each place's clone")
    plan.add_argument("--start", required=True, type=place, help="the place to start from: ROW,COLUMN")
    plan.add_argument("--goal", required=True, type=place, help="the place to reach: ROW,COLUMN")
    plan.add_argument(
        "--block", action="append", type=place, default=[], help="a place to close (a door): ROW,COLUMN; repeatable"
    )
    plan.add_argument("--room", default=None, help="the room (or world) of the walk: the modules against its rooms")
    plan.add_argument("--json", action="store_true")
    plan.set_defaults(run=run)
    return plan


def place(text: str) -> tuple[int, int]:
    """An argparse type: a place written ROW,COLUMN (whole numbers from 0)."""
    try:
        row, column = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a place is ROW,COLUMN (two whole numbers), not {text!r}") from None
    if row < 0 or column < 0:
        raise argparse.ArgumentTypeError(f"a place's row and column are 0 or more, not {text!r}")
    return row, column


def rooms_found(model: api.maps.ActionCHMM, walk: api.maps.WalkFile, room: Any, communities: Any = None) -> dict:
    """The map's Infomap modules against the rooms of ``room`` (:func:`engine.api.maps.match_rooms`) as figures, or {}
    when the room has fewer than 2 rooms or the walk has no true places."""
    rooms, _ = api.maps.world_rooms(room)
    if rooms.max() < 1 or walk.positions is None:
        return {}
    return api.maps.match_rooms(model, *walk.walks(), walk.positions, room, communities).summary()


def rooms_sentence(found: dict) -> str:
    """The figures of :func:`rooms_found` in one line."""
    return (
        f"{_modules_found(found['modules'])}; against the world's {found['rooms']} rooms: NMI "
        f"{found['nmi']:.3f} over the {found['clones_in_rooms']} clones placed in a room"
    )


def _modules_found(count: int) -> str:
    return f"Infomap finds {count} module{'s' if count != 1 else ''} on the map"


def _moves(moves: list[str]) -> str:
    return ", ".join(f"{len(list(group))} {move}" for move, group in itertools.groupby(moves)) or "none"


def _line(name: str, plan: api.maps.Plan, flat: api.maps.Plan | None = None) -> str:
    figures = plan.summary()
    text = f"{name}: {plan.steps} steps"
    if plan.modules:
        text += " across modules " + " -> ".join(str(m) for m in plan.modules)
    text += f"; messages held {figures['updates']:,} (dense {figures['dense_updates']:,})"
    text += f", {plan.reached} clones reached"
    if flat is not None:
        flat_figures = flat.summary()
        text += (
            f": {figures['updates'] / flat_figures['updates']:.2f} of flat's messages "
            f"(dense {figures['dense_updates'] / flat_figures['dense_updates']:.2f})"
        )
    return text + f"\n  moves: {_moves(plan.moves)}"


def run(args: argparse.Namespace) -> int:
    """Plan flat and hierarchically between the two places, then again with the blocked places closed."""
    model = api.maps.load_map(args.map)
    walk = api.maps.read_walk(args.walk)
    if walk.positions is None:
        raise CHMMError(f"{args.walk} has no row and column columns: the places of the map's clones are unknown")
    room = api.maps.read_room(args.room) if args.room else None
    x, a = walk.walks()
    clone_of = api.maps.place_clones(model, x, a, walk.positions)
    places = api.maps.clone_places(model, x, a, walk.positions)
    for name, cell in (("start", args.start), ("goal", args.goal), *(("blocked place", c) for c in args.block)):
        if cell not in clone_of:
            raise CHMMError(f"the walk never visits the {name} {cell[0]},{cell[1]}: no clone of the map stands for it")
    communities = api.maps.map_communities(model)
    modules = api.maps.clone_modules(communities)
    out: dict[str, Any] = {"modules": len(communities.top_modules)}
    if room is not None and (found := rooms_found(model, walk, room, communities)):
        out["rooms"] = found
    start, goal = clone_of[args.start], clone_of[args.goal]
    fields = {"fields": api.maps.door_fields(model, modules)}  # made once for the map and its modules
    plans = {"flat": api.maps.plan_flat(model, start, goal), "hierarchical": None}
    plans["hierarchical"] = api.maps.plan_hierarchical(model, modules, start, goal, fields=fields["fields"])
    if args.block:
        closed = {clone_of[c] for c in args.block} | {
            clone for clone, cell in enumerate(places.tolist()) if tuple(cell) in set(args.block)
        }  # the clones placed there, and the clone most often there
        if start in closed or goal in closed:
            raise CHMMError("the start and the goal cannot be blocked places")
        blocked = api.maps.block(model, sorted({way for c in closed for way in api.maps.ways_into(model, c)}))
        fields["blocked fields"] = api.maps.door_fields(blocked, modules)
        plans["blocked flat"] = api.maps.plan_flat(blocked, start, goal)
        plans["blocked hierarchical"] = api.maps.plan_hierarchical(
            blocked, modules, start, goal, fields=fields["blocked fields"]
        )
    out |= {name.replace(" ", "_"): plan.summary() for name, plan in plans.items()}
    out |= {name.replace(" ", "_"): _field_figures(made) for name, made in fields.items()}
    if args.json:
        print(json.dumps(out))
        return 0
    print(rooms_sentence(out["rooms"]) if "rooms" in out else _modules_found(out["modules"]))
    print(f"from {args.start[0]},{args.start[1]} (clone {start}) to {args.goal[0]},{args.goal[1]} (clone {goal})")
    print(_line("flat", plans["flat"]))
    print(_line("hierarchical", plans["hierarchical"], plans["flat"]))
    print(_fields_line(fields["fields"]))
    if args.block:
        print("with " + ", ".join(f"{r},{c}" for r, c in args.block) + " blocked:")
        print(_line("flat", plans["blocked flat"]))
        print(_line("hierarchical", plans["blocked hierarchical"], plans["blocked flat"]))
        print(_fields_line(fields["blocked fields"]))
    return 0


def _field_figures(fields: api.maps.DoorFields) -> dict[str, int]:
    return {
        "exits": len(fields.exits.clones),
        "entries": len(fields.entries.clones),
        "updates": fields.updates,
        "dense_updates": fields.dense_updates,
    }


def _fields_line(fields: api.maps.DoorFields) -> str:
    """The messages of the map's door fields, made once and shared by every hierarchical plan on it."""
    return (
        f"  (the map's door fields, made once for its modules and shared by every hierarchical plan: "
        f"{len(fields.exits.clones)} exits and {len(fields.entries.clones)} entries, messages held "
        f"{fields.updates:,} (dense {fields.dense_updates:,}))"
    )
