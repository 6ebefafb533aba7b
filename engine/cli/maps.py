"""``chmm map``: learn a cognitive map (a CHMM whose transitions depend on actions) from a walk. See
:mod:`engine.cognitive.walks` for the file formats and the recipe."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any

import numpy as np

from engine import api
from engine.cli import plan
from engine.cli.common import check_output
from engine.errors import CHMMError


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """``chmm map``: its arguments."""
    defaults = api.maps.MAP_DEFAULTS
    learn = commands.add_parser("map", help="learn a cognitive map (a CHMM whose transitions depend on actions)")
    learn.add_argument("walk", help="CSV walk with the columns action and observation (or JSON)")
    learn.add_argument("-o", "--output", required=True, help="model file to write (.npz)")
    learn.add_argument("--clones", type=int, default=defaults.clones, help="clones per observation")
    learn.add_argument("--iterations", type=int, default=defaults.iterations, help="most batch-EM iterations")
    learn.add_argument("--pseudocount", type=float, default=defaults.pseudocount, help="batch EM's pseudocount")
    learn.add_argument("--viterbi-iterations", type=int, default=defaults.viterbi_iterations)
    learn.add_argument(
        "--seed", type=int, default=defaults.seed, help="the random start's seed (restart r: this seed plus r)"
    )
    learn.add_argument(
        "--restarts",
        type=int,
        default=defaults.restarts,
        help=f"learn from this many random starts (1 to {api.DEFAULTS.MAX_RESTARTS}) and keep the one whose map "
        f"predicts the "
        f"walk's held-out last {api.maps.MAP_HELD_OUT_SHARE * 100:g}%% of steps best, refitted on the whole walk; 1: "
        "one start on the whole walk",
    )
    learn.add_argument(
        "--max-restarts",
        type=int,
        default=defaults.max_restarts,
        help="the most restarts in all: while every restart's map gives the held-out steps probability 0 (none found "
        "the room), another round of --restarts runs, up to this many (1 to 64; never fewer than --restarts)",
    )
    learn.add_argument(
        "--no-merge", dest="merge", action="store_false", help="keep clones with the same future apart (no merging)"
    )
    learn.add_argument(
        "--no-race",
        dest="race",
        action="store_false",
        help="every restart learns to its end (in worker processes); by default they race: one that cannot catch the "
        "leader on the held-out steps is stopped early",
    )
    learn.add_argument(
        "--noise",
        type=float,
        default=0.0,
        help="the walk's observations are a sensor's readings, wrong with this probability (0 to 0.5): learn from "
        "their soft evidence (1 - noise on the reading, the rest spread over the other observations); T held dense",
    )
    learn.add_argument(
        "--evidence",
        default=None,
        metavar="FILE",
        help="the walk's observations come with a sensor's likelihoods: FILE has one row per step and one column per "
        "observation symbol, P(reading | observation) (.npy in the walk's symbol order, or text whose optional first "
        "line names the columns); learn from this soft evidence; T held dense",
    )
    learn.add_argument("--room", default=None, help="the room the walk was in: say whether the map recovers it")
    learn.add_argument("--json", action="store_true")
    learn.set_defaults(run=run)
    return learn


def run(args: argparse.Namespace) -> int:
    """Learn the map, save it, and say whether it recovers the room when one is given."""
    _check(args)
    room = api.maps.read_room(args.room) if args.room else None
    walk = api.maps.read_walk(args.walk)
    options = api.maps.MapOptions(
        args.clones, args.iterations, args.pseudocount, args.viterbi_iterations, args.seed, args.merge, args.restarts,
        args.max_restarts, race=args.race,
    )  # fmt: skip

    def progress(stage: str, iteration: int, bits: float, restart: int, restarts: int = args.restarts) -> None:
        if stage in ("race", "revive") and not args.json:
            said = "the race stopped it" if stage == "race" else "it runs again: its EM beat the best finished map"
            print(
                f"restart {restart + 1}: {said} (held-out {bits:.4f} bits per step; {iteration} stopped in all)",
                file=sys.stderr,
                flush=True,
            )
        elif not args.json and (iteration % 25 == 0):
            which = f"restart {restart + 1} of {restarts}  " if restarts > 1 else ""
            if restart >= restarts > 1:  # a further round: the restarts so far all missed the held-out steps
                which = f"restart {restart + 1} of at most {max(restarts, args.max_restarts)}  "
            print(
                f"{which}{stage:8s} iteration {iteration + 1:4d}  {bits:.4f} bits per step", file=sys.stderr, flush=True
            )

    if args.noise:
        x, a = walk.walks()
        if isinstance(x, list):
            raise CHMMError("--noise learns from one walk; the file holds several")
        model, summary = api.maps.learn_map_through_noise(
            x, a, walk.symbols, walk.action_names, args.noise, args.clones, args.iterations, args.pseudocount,
            args.viterbi_iterations, args.seed, args.merge,
            None if args.json else (lambda iteration, bits: progress("soft EM", iteration, bits, 0, 1)), args.restarts,
        )  # fmt: skip
    elif args.evidence:
        x, a = walk.walks()
        if isinstance(x, list):
            raise CHMMError("--evidence learns from one walk; the file holds several")
        likelihood = api.maps.read_evidence(args.evidence, len(x), walk.symbols)
        model, summary = api.maps.learn_map_from_evidence(
            likelihood, a, walk.symbols, walk.action_names, args.clones, args.iterations, args.pseudocount,
            args.viterbi_iterations, args.seed, args.merge,
            None if args.json else (lambda iteration, bits: progress("soft EM", iteration, bits, 0, 1)), args.restarts,
        )  # fmt: skip
        summary["evidence"] = os.path.basename(args.evidence)
    else:
        model, summary = api.maps.learn_map(walk, options, progress)
    if room is not None and (args.noise or args.evidence):  # judged on what the room shows at the walk's true places
        walk = _true_observations(walk, room)
    if room is not None:
        summary["recovers_room"] = api.maps.recovers_room(model, *walk.walks(), room)
        summary |= {"rooms": found} if (found := plan.rooms_found(model, walk, room)) else {}
    model.save(args.output)
    if args.json:
        print(json.dumps(summary))
    else:
        _say(summary, room, args.output)
    return 0


def _check(args: argparse.Namespace) -> None:
    """Refuse bad numbers and files of ``chmm map`` in one sentence, before anything is read."""
    check_output(args.output, [args.walk] + [path for path in (args.room, args.evidence) if path])
    if args.noise and args.evidence:
        raise CHMMError("--noise and --evidence both say what the sensor read; give one")
    for name, value, lowest in (
        ("--clones", args.clones, 1),
        ("--iterations", args.iterations, 0),
        ("--viterbi-iterations", args.viterbi_iterations, 0),
    ):
        if value < lowest:
            raise CHMMError(f"{name} must be at least {lowest}, got {value}")
    if not args.pseudocount >= 0:
        raise CHMMError(f"--pseudocount must be 0 or more, got {args.pseudocount}")
    for name, value in (("--restarts", args.restarts), ("--max-restarts", args.max_restarts)):
        if not 1 <= value <= api.DEFAULTS.MAX_RESTARTS:
            raise CHMMError(f"{name} must be from 1 to {api.DEFAULTS.MAX_RESTARTS}, got {value}")


def _say(summary: dict[str, Any], room: Any, output: str) -> None:
    """The map's summary in lines: each restart's held-out score and the one kept, the bits per step and clones, and
    whether it recovers ``room`` when one was given."""
    for line in summary.get("restarts", []):
        held = line["held_out_bits_per_step"]
        if line.get("stopped_by_race"):
            print(f"restart {line['restart'] + 1} (seed {line['seed']}): {line['stopped_by_race']}")
            continue
        print(
            f"restart {line['restart'] + 1} (seed {line['seed']}): "
            f"{'infinite' if held is None else f'{held:.5f}'} held-out bits per step, "
            f"{line['clones_used']} clones{'  <- kept' if line['restart'] == summary['kept_restart'] else ''}"
        )
    for note in ("race_note", "restarts_note"):
        if summary.get(note):
            print(summary[note])
    print(
        f"{summary['bits_per_step']:.4f} bits per step after {summary['em_iterations']} EM and "
        f"{summary['viterbi_iterations']} Viterbi iterations; the walk uses {summary['clones_used']} of "
        f"{summary['clones']} clones; saved to {output}"
    )
    if room is not None:
        cells = int((room >= 0).sum())
        verdict = "recovers" if summary["recovers_room"] else "does not recover"
        print(f"the map {verdict} the room's grid of {cells} cells (self-loops aside)")
        if "rooms" in summary:
            print(plan.rooms_sentence(summary["rooms"]))


def _true_observations(walk: api.maps.WalkFile, room: Any) -> api.maps.WalkFile:
    """``walk`` with the observations of its true places in ``room`` instead of a noisy sensor's readings."""
    if walk.positions is None:
        raise CHMMError("--room with --noise or --evidence needs the walk's true places (its row and column columns)")
    index = {name: i for i, name in enumerate(walk.symbols)}
    truth = [str(v) for v in room[walk.positions[:, 0], walk.positions[:, 1]].tolist()]
    unread = sorted(set(truth) - set(index), key=str)
    if unread:
        raise CHMMError(f"the sensor never read the room's observation {unread[0]}, so the map has no clone for it")
    return dataclasses.replace(walk, observations=np.array([index[v] for v in truth], dtype=np.int64))
