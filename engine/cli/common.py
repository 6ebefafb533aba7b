"""What the ``chmm`` commands share: the defaults their help texts quote (the engine's own, defined once there),
the ``--json`` line, the progress lines, the output check, the corpus reader and the Infomap arguments."""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine import api
from engine.errors import CHMMError


def json_line(figures: dict[str, Any]) -> str:
    """The figures as one JSON line (a command's ``--json`` output; NaN and infinities as null)."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return value

    return json.dumps({k: clean(v) for k, v in figures.items()})


def progress_printer(stream: Any) -> api.ProgressCallback:
    """A training callback that writes one line per iteration on ``stream``."""

    def report(record: api.IterationRecord) -> None:
        validation = "" if math.isnan(record.validation_bps) else f"  validation {record.validation_bps:.4f}"
        # a pruned (grown) start gives some training transitions probability 0: its E-step BPS is infinite
        train = f"{record.train_bps:.4f}" if math.isfinite(record.train_bps) else "     -"
        stream.write(f"iteration {record.iteration:4d}  train {train}{validation}  ({record.seconds:.2f} s)\n")
        stream.flush()

    return report


def check_output(path: str | os.PathLike[str], inputs: Sequence[str | os.PathLike[str]] = ()) -> None:
    """Refuse, before any work, an output file that cannot be written as asked (ValueError, one sentence): a
    folder, a file in a folder that does not exist (it is not created), or one of the ``inputs`` (a corpus or a
    model the command reads, which it would overwrite)."""
    target = Path(path)
    if target.is_dir():
        raise CHMMError(f"{target} is a folder; give a file name, such as {target / 'model.npz'}")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise CHMMError(f"the folder {folder} does not exist; create it first, or write the file elsewhere")
    for given in inputs:
        if Path(given).exists() and target.exists() and target.resolve() == Path(given).resolve():
            raise CHMMError(f"{target} is also an input of this command; write the output to another file")


def read_corpus(
    paths: list[str],
    fmt: str = "text",
    sequence_column: str | None = None,
    token_column: str | None = None,
    order_column: str | None = None,
) -> tuple[str | list[api.corpora.Document], str]:
    """The corpus of ``chmm train``: one file's text (exactly as before), or the documents of several files, folders
    and zip archives (see :mod:`engine.corpora.documents`); for ``fmt`` "lines" every line of them one sequence, for
    "csv" every case of their event logs (:mod:`engine.corpora.sequences`); and the name the model records."""
    read = api.corpora.read_documents(paths)
    name = api.corpora.corpus_name(paths, read)
    if fmt == "lines":
        return [line for document in read for line in api.corpora.read_lines(document.text, document.name)], name
    if fmt == "csv":
        assert sequence_column is not None and token_column is not None
        return [
            case
            for document in read
            for case in api.corpora.read_event_log(
                document.text, sequence_column, token_column, order_column, document.name
            )
        ], name
    return (read[0].text if len(read) == 1 else read), name


def number_or_auto(kind: type) -> Callable[[str], Any]:
    """An argparse type: a number of ``kind``, or :data:`engine.training.AUTO` (chosen on validation)."""

    def parse(value: str) -> Any:
        if value.strip().lower() == api.CHOICES.AUTO:
            return api.CHOICES.AUTO
        try:
            return kind(value)
        except ValueError:  # int() or float() of the flag's text
            raise argparse.ArgumentTypeError(f"expected a number or {api.CHOICES.AUTO!r}, got {value!r}") from None

    parse.__name__ = kind.__name__
    return parse


COMMUNITY_DEFAULTS = api.CommunityOptions()
"""The community options the help texts quote: the engine's own defaults."""

DEFAULT_PRUNE_THRESHOLD = api.DEFAULTS.DEFAULT_PRUNE_THRESHOLD
"""The pruning threshold of ``prune``, ``communities`` and ``export``."""


TRAIN_DEFAULTS = api.TrainOptions()
"""The training defaults the help texts quote: the engine's own (``api.TrainOptions``)."""


def add_community_arguments(sub: argparse.ArgumentParser) -> None:
    """The Infomap arguments that ``communities`` and ``export`` share."""
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
        choices=api.CHOICES.FLOW_SOURCES,
        default=COMMUNITY_DEFAULTS.flow,
        help="link flow given to Infomap: node flow x T (rawdir, default), expected counts (rawdir), or T "
        "with Infomap's directed model",
    )
    sub.add_argument("--corpus", default=None, help="training text: marks generalized words seen / novel")


def community_options(args: argparse.Namespace) -> api.CommunityOptions:
    """The Infomap settings of a ``communities`` or ``export`` command's arguments."""
    return api.CommunityOptions(
        two_level=args.two_level,
        trials=args.trials,
        markov_time=args.markov_time,
        seed=args.seed,
        flow=args.flow,
        words=getattr(args, "words", COMMUNITY_DEFAULTS.words),
    )


def check_threshold_argument(value: float | None) -> None:
    """A ``--threshold`` given must lie strictly between 0 and 1 (ValueError otherwise)."""
    if value is not None:
        api.check_threshold(value)
