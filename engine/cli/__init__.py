"""The ``chmm`` command line: one module per command, each with ``add_parser`` (its arguments) and ``run`` (what it
does, through the engine's door :mod:`engine.api`); here the parser that gathers them (:func:`build_parser`, its
reference in docs/cli.md) and ``main``.

Every command exits 0 on success; on bad input it prints one line on stderr and exits non-zero without writing
partial output. With ``--json`` the last line on stdout is one JSON object with the command's figures.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from engine.cli import communities, decode, export, maps, plan, prune, sample, schema, score, train, walk, world
from engine.errors import CHMMError, error_message

COMMANDS = (train, score, sample, decode, prune, communities, export, world, walk, maps, plan, schema)
"""The commands, in the order ``chmm --help`` lists them: each module's ``add_parser`` adds its subparser (whose
``run`` default is the module's ``run``)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"chmm: error: {message}\n")


COMMAND_PLUGINS = "chmm.commands"
"""Entry-point group of further ``chmm`` commands: each entry is a function that adds its subparser. The web app
registers ``chmm app`` there (``app.cli:register``), so the engine never imports the app."""


def _add_plugin_commands(commands: Any) -> None:
    for entry in sorted(importlib.metadata.entry_points(group=COMMAND_PLUGINS), key=lambda e: e.name):
        entry.load()(commands)


def build_parser() -> argparse.ArgumentParser:
    """The ``chmm`` parser: every command of :data:`COMMANDS`, then the plugins' (``chmm app``)."""
    parser = _Parser(prog="chmm", description="Learn and explore cloned HMMs (CHMMs) of text.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        command.add_parser(commands)
    _add_plugin_commands(commands)
    return parser


REFERENCE_WIDTH = 100
"""Columns of the help texts in the generated reference (docs/cli.md), fixed so that it does not depend on the
terminal it is made in."""


def reference_markdown() -> str:
    """The command line's reference, docs/cli.md: the program's and each command's help as ``chmm COMMAND --help``
    prints it, at :data:`REFERENCE_WIDTH` columns (``python docs/make_cli.py`` writes it; a test fails when the file
    differs from what the parser says)."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))

    def help_of(command: argparse.ArgumentParser) -> str:
        command.formatter_class = functools.partial(argparse.HelpFormatter, width=REFERENCE_WIDTH)
        return command.format_help().rstrip()

    out = [
        "# The `chmm` command line",
        "",
        "Every command and option, as `chmm COMMAND --help` prints them; generated from the argument parser by",
        "`python docs/make_cli.py` (`tests/test_cli.py` fails when this file is stale). What the options do together:",
        "[guide.md](guide.md).",
        "",
        "```",
        help_of(parser),
        "```",
    ]
    for name, command in commands.choices.items():
        out += ["", f"## chmm {name}", "", "```", help_of(command), "```"]
    return "\n".join(out) + "\n"


OUT_OF_MEMORY_ADVICE = {
    None: "try fewer states or a shorter corpus",
    "map": "try fewer clones or a shorter walk",
    "walk": "try a shorter walk",
}
"""What ``chmm`` advises when a command runs out of memory, by command (the maps' commands read walks, not corpora)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``chmm`` console script."""
    args = build_parser().parse_args(argv)
    previous = _stop_on_sigterm()
    try:
        return int(args.run(args))
    except (CHMMError, OSError) as exc:  # the engine's refusals (BackendError among them) and the system's
        print(f"chmm: error: {error_message(exc)}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"chmm: error: out of memory; {OUT_OF_MEMORY_ADVICE.get(args.command, OUT_OF_MEMORY_ADVICE[None])}",
              file=sys.stderr)  # fmt: skip
        return 1
    except KeyboardInterrupt:  # training handles Ctrl-C itself; elsewhere (Infomap, a long decode) it ends here
        print("chmm: interrupted", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _stop_on_sigterm() -> Any:
    """SIGTERM ends a command as Ctrl-C does (a file being written is removed, not left half-written under a
    temporary name); returns the handler it replaced (None off the main thread, where signals cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _interrupt)
