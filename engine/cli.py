"""The ``chmm`` command line: the argument parser (:func:`build_parser`, its reference in docs/cli.md) and ``main``;
what each command does is in :mod:`engine.commands`, which calls :mod:`engine.training` and :mod:`engine.use`.

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

from engine import engines, learners, learning, text, training
from engine.allocation import ALLOCATION_METHODS
from engine.backend import BackendError
from engine.chunks import DEFAULT_BURN_IN, EXACT, LOCKSTEP_BURN_IN, LOCKSTEP_MIN_SYMBOLS, LOCKSTEP_STEPS
from engine.commands import (
    COMMUNITY_DEFAULTS,
    DEFAULT_PRUNE_THRESHOLD,
    TRAIN_DEFAULTS,
    number_or_auto,
    run_communities,
    run_decode,
    run_export,
    run_prune,
    run_sample,
    run_score,
    run_train,
)
from engine.communities import FLOW_SOURCES
from engine.errors import error_message
from engine.export import FORMATS as EXPORT_FORMATS
from engine.learning import ALGORITHMS
from engine.map_commands import add_map_commands
from engine.model import ModelFormatError
from engine.text import NORMALISATIONS


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
    parser = _Parser(prog="chmm", description="Learn and explore cloned HMMs (CHMMs) of text.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = commands.add_parser("train", help="train a CHMM (or a peer learner) on a text corpus")
    train.add_argument(
        "corpus",
        nargs="+",
        help="plain-text corpus (UTF-8): a file, or several files, folders of .txt files and .zip archives of them "
        "(each file one document: an independent sequence)",
    )
    train.add_argument("-o", "--output", required=True, help="model file to write (.npz)")
    train.add_argument(
        "--learner",
        choices=list(learners.LEARNERS),
        default="chmm",
        help="what to train (default chmm); the peers use the same normalisation, splits and refit, and only "
        "--normalisation, --validation, --max-train, --no-refit, --states, --iterations, --seed and --learner-option",
    )
    train.add_argument(
        "--learner-option",
        action="append",
        metavar="KEY=VALUE",
        help="an option of a peer learner (repeatable), e.g. dim=16 for densehmm, order=6 for ngram, mu=0.05 for pdfa",
    )
    train.add_argument(
        "--states",
        type=number_or_auto(int),
        default=None,
        help=f"total number of clones (default '{training.AUTO}': chosen on validation from "
        f"{', '.join(map(str, training.STATES_GRID))}); hidden states of hmm/densehmm (default 100), the PDFA's bound",
    )
    train.add_argument(
        "--allocation", choices=ALLOCATION_METHODS, default=None, help=f"default {TRAIN_DEFAULTS.allocation}"
    )
    train.add_argument(
        "--ngram-order",
        type=int,
        default=None,
        help=f"n of the n-gram allocation rule (default {TRAIN_DEFAULTS.ngram_order})",
    )
    train.add_argument(
        "--no-refit",
        action="store_true",
        help="keep the model trained without the validation text (default: retrain on training + validation "
        "for the iterations that validation chose, as the paper does)",
    )
    train.add_argument(
        "--normalisation",
        "--normalise",
        dest="normalisation",
        choices=NORMALISATIONS,
        default=None,
        help=f"default {TRAIN_DEFAULTS.normalisation}",
    )
    train.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default=None,
        help=f"default {TRAIN_DEFAULTS.algorithm} (online EM, then batch EM from its best epoch)",
    )
    train.add_argument(
        "--iterations",
        type=int,
        default=None,
        help=f"at most this many (default {TRAIN_DEFAULTS.iterations}; hmm/densehmm 50)",
    )
    train.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help=f"online EM batch length (default: {learning.ONLINE_BATCH_SIZE} symbols, or {learning.BATCH_PER_BLOCK} "
        "per stored symbol-pair block when that is more)",
    )
    train.add_argument(
        "--restarts",
        type=int,
        default=None,
        help=f"train from this many random starts and keep the best on validation (default "
        f"{training.ONLINE_RESTARTS} for online EM, 1 otherwise); they alternate between the two kinds of --start, "
        f"and online EM's 3rd and 4th of every four use lambda {training.RESTART_MEMORY}",
    )
    train.add_argument(
        "--start",
        choices=training.STARTS,
        default=None,
        help=f"T's random start (default {TRAIN_DEFAULTS.start}): aligned puts "
        f"{round(training.ALIGNED_SHARE * 100)}%% of each clone's row on clone c of each next symbol for clone c, "
        "so a context can ride a chain of clones; uniform is the paper's random T",
    )
    train.add_argument("--memory", type=float, default=None, help=f"online EM lambda (default {TRAIN_DEFAULTS.memory})")
    train.add_argument(
        "--validation", type=float, default=TRAIN_DEFAULTS.validation, help="share of the training part held out"
    )
    train.add_argument(
        "--pseudocount",
        type=number_or_auto(float),
        default=None,
        help=f"added to every stored count in the M-step (default '{training.AUTO}': chosen on validation from "
        f"{', '.join(f'{v:g}' for v in training.PSEUDOCOUNT_GRID)})",
    )
    train.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="MINUTES",
        help=f"wall-clock minutes the choice of states and pseudocount on validation may take (default "
        f"{TRAIN_DEFAULTS.budget:g}): candidates and restarts predicted to pass it are left out; the refit comes after",
    )
    train.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help=f"relative likelihood gain to stop at ({TRAIN_DEFAULTS.tolerance:g})",
    )
    train.add_argument(
        "--patience",
        type=int,
        default=None,
        help=f"iterations without a better validation BPS ({TRAIN_DEFAULTS.patience})",
    )
    train.add_argument("--max-train", type=int, default=None, help="cap the training part (symbols)")
    train.add_argument("--seed", type=int, default=TRAIN_DEFAULTS.seed)
    train.add_argument("--backend", choices=engines.backend_choices(), default=TRAIN_DEFAULTS.backend)
    train.add_argument("--dtype", choices=list(training.DTYPES), default=None, help=f"default {TRAIN_DEFAULTS.dtype}")
    train.add_argument("--init", default=None, help="continue training from this model")
    train.add_argument(
        "--workers",
        type=int,
        default=None,
        help="batch EM's E-step on a local Dask cluster of this many processes (pip install 'chmm-explorer[cluster]')",
    )
    train.add_argument(
        "--cluster", default=None, metavar="ADDRESS", help="batch EM's E-step on the Dask scheduler at ADDRESS"
    )
    train.add_argument(
        "--chunk",
        type=int,
        default=None,
        help="batch EM cuts documents longer than this many symbols into chunks, each with a burn-in: on a cluster "
        "(--workers/--cluster), one chunk per task; on the GPU (--backend gpu), passes over all chunks in lockstep "
        f"(dense models; by default the GPU chooses chunks of at least {LOCKSTEP_STEPS} steps for documents of "
        f"{LOCKSTEP_MIN_SYMBOLS:,} symbols or more); {EXACT}: exact passes, no chunks",
    )
    train.add_argument(
        "--burn-in",
        type=int,
        default=None,
        help=f"symbols before and after a chunk whose steps are not counted (default {DEFAULT_BURN_IN:,} on a "
        f"cluster, {LOCKSTEP_BURN_IN} in lockstep on the GPU)",
    )
    train.add_argument(
        "--grow-from",
        type=int,
        default=None,
        help="train a dense model of this many states, prune it and split its clones up to --states, then sparse "
        "EM (default on the CPU above 10,000 states: states/10; 0 turns it off)",
    )
    train.add_argument(
        "--grow-threshold",
        type=float,
        default=None,
        help=f"pruning threshold before the split ({TRAIN_DEFAULTS.grow_threshold:g})",
    )
    train.add_argument("--grow-iterations", type=int, default=None, help="sparse EM iterations after the split")
    train.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    train.add_argument("--json", action="store_true")
    train.set_defaults(run=run_train)

    score = commands.add_parser("score", help="bits per symbol of a text under a model")
    score.add_argument("model")
    score.add_argument("corpus")
    score.add_argument("--backend", choices=engines.backend_choices(), default=TRAIN_DEFAULTS.backend)
    score.add_argument("--json", action="store_true")
    score.set_defaults(run=run_score)

    sample = commands.add_parser("sample", help="sample text from a model")
    sample.add_argument("model")
    sample.add_argument("--length", type=int, default=500)
    sample.add_argument("--prefix", default=None, help="text to continue")
    sample.add_argument("--seed", type=int, default=0)
    sample.set_defaults(run=run_sample)

    decode = commands.add_parser("decode", help="decode scrambled text (word interiors permuted) by MAP inference")
    decode.add_argument("model")
    decode.add_argument("scrambled", help="text file with the scrambled text (UTF-8)")
    decode.add_argument(
        "--constrained",
        action="store_true",
        help="decode each word's interior as a permutation of its scrambled letters (default: the paper's "
        "unconstrained Viterbi)",
    )
    decode.add_argument("--json", action="store_true")
    decode.set_defaults(run=run_decode)

    def add_community_arguments(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--threshold",
            type=float,
            default=DEFAULT_PRUNE_THRESHOLD,
            help=f"prune transitions below this first (default {DEFAULT_PRUNE_THRESHOLD:g})",
        )
        sub.add_argument(
            "--trials",
            type=int,
            default=COMMUNITY_DEFAULTS.trials,
            help=f"Infomap trials (default {COMMUNITY_DEFAULTS.trials})",
        )
        sub.add_argument(
            "--seed", type=int, default=COMMUNITY_DEFAULTS.seed, help="random seed (Infomap gets seed + 1)"
        )
        sub.add_argument("--two-level", action="store_true", help="two-level partition (default multilevel)")
        sub.add_argument(
            "--markov-time",
            type=float,
            default=COMMUNITY_DEFAULTS.markov_time,
            help=f"Infomap Markov time (default {COMMUNITY_DEFAULTS.markov_time:g})",
        )
        sub.add_argument(
            "--flow",
            choices=FLOW_SOURCES,
            default=COMMUNITY_DEFAULTS.flow,
            help="link flow given to Infomap: node flow x T (rawdir, default), expected counts (rawdir), or T "
            "with Infomap's directed model",
        )
        sub.add_argument("--corpus", default=None, help="training text: marks generalized words seen / novel")

    prune = commands.add_parser("prune", help="zero small transitions (a smaller model)")
    prune.add_argument("model")
    prune.add_argument("-o", "--output", required=True, help="pruned model file to write (.npz)")
    prune.add_argument(
        "--threshold", type=float, default=None, help=f"zero T below this (default {DEFAULT_PRUNE_THRESHOLD:g})"
    )
    prune.add_argument("--top-mass", type=float, default=None, help="per row, keep the largest entries up to this mass")
    prune.add_argument("--viterbi", default=None, help="keep only the clones the Viterbi path of this text uses")
    prune.add_argument("--validation", default=None, help="text to score before and after pruning")
    prune.add_argument("--json", action="store_true")
    prune.set_defaults(run=run_prune)

    communities = commands.add_parser("communities", help="Infomap communities and generalized words")
    communities.add_argument("model")
    communities.add_argument("-o", "--output", required=True, help="result folder to write")
    add_community_arguments(communities)
    communities.add_argument(
        "--words",
        type=int,
        default=COMMUNITY_DEFAULTS.words,
        help=f"generalized words per module (default {COMMUNITY_DEFAULTS.words})",
    )
    communities.add_argument("--json", action="store_true")
    communities.set_defaults(run=run_communities)

    export = commands.add_parser("export", help="export the clone graph or one module's subgraph")
    export.add_argument("model")
    export.add_argument("--format", required=True, choices=EXPORT_FORMATS)
    export.add_argument("-o", "--output", required=True, help="file to write")
    export.add_argument("--module", default=None, help="export only this module (id as in the module table: 3 or 3:2)")
    add_community_arguments(export)
    export.add_argument("--json", action="store_true")
    export.set_defaults(run=run_export)
    add_map_commands(commands)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``chmm`` console script."""
    args = build_parser().parse_args(argv)
    previous = _stop_on_sigterm()
    try:
        return int(args.run(args))
    except (text.CorpusError, ModelFormatError, BackendError, ValueError, OSError) as exc:
        print(f"chmm: error: {error_message(exc)}", file=sys.stderr)
        return 1
    except MemoryError:
        print("chmm: error: out of memory; try fewer states or a shorter corpus", file=sys.stderr)
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


if __name__ == "__main__":
    sys.exit(main())
