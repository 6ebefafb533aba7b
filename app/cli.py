"""``chmm app``: the web app's command, registered with the ``chmm`` command line through the entry-point group
``chmm.commands`` (pyproject.toml), so that the engine's command line never imports the app or Dash."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any

from engine import api
from engine.errors import CHMMError

DEFAULT_PORT = 8050
DEFAULT_HOST = "127.0.0.1"


def run_app(args: argparse.Namespace) -> int:
    """Start the web app (Dash's development server) on ``args.host``:``args.port``."""
    if not 1 <= args.port <= 65535:
        raise CHMMError(f"--port must lie between 1 and 65535, got {args.port}")
    if args.model:
        api.load_model(args.model)  # refuse a file that is not a model before starting anything
        os.environ["CHMM_START_MODEL"] = os.path.abspath(args.model)
    if args.corpus:
        if not os.path.isfile(args.corpus) or not os.access(args.corpus, os.R_OK):
            raise CHMMError(f"--corpus {args.corpus}: no readable file there")
        os.environ["CHMM_START_CORPUS"] = os.path.abspath(args.corpus)
    try:  # a clear message for an address that cannot be used, before Dash prints its own
        with socket.create_server((args.host, args.port)):
            pass
    except (OSError, OverflowError) as exc:
        raise OSError(f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc})") from None
    try:  # Ctrl-C while the app is loading (a few seconds) or serving ends it without a traceback
        from app.main import app as dash_app

        print(f"CHMM Explorer on http://{args.host}:{args.port}/ (Ctrl-C to stop)", file=sys.stderr)
        dash_app.run(host=args.host, port=args.port, debug=args.debug)
    except KeyboardInterrupt:
        print("CHMM Explorer stopped.", file=sys.stderr)
    return 0


def register(commands: Any) -> None:
    """Add the ``app`` command to the ``chmm`` subcommands (an ``argparse`` subparsers action)."""
    web = commands.add_parser("app", help="start the web app (Dash) on the sample model or --model")
    web.add_argument("--model", default=None, help="model new sessions start with (default: the bundled sample)")
    web.add_argument(
        "--corpus",
        default=None,
        help="the text --model was trained on: its generalized words marked seen or novel, Generate's prefix",
    )
    web.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    web.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    web.add_argument("--debug", action="store_true", help="Dash debug mode (reloader, error pop-ups)")
    web.set_defaults(run=run_app)
