"""The ``chmm`` command line (argument parsing only; the work is in :mod:`engine.workflows`).

Every command exits 0 on success; on bad input it prints one line on stderr and exits non-zero without writing
partial output. With ``--json`` the last line on stdout is one JSON object with the command's figures.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from engine import learning, text, workflows
from engine.backend import BackendError
from engine.model import ModelFormatError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"chmm: error: {message}\n")


def _json_line(figures: dict[str, Any]) -> str:
    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return value

    return json.dumps({k: clean(v) for k, v in figures.items()})


def _progress_printer(stream: Any) -> learning.ProgressCallback:
    def report(record: learning.IterationRecord) -> None:
        validation = "" if math.isnan(record.validation_bps) else f"  validation {record.validation_bps:.4f}"
        stream.write(
            f"iteration {record.iteration:4d}  train {record.train_bps:.4f}{validation}  ({record.seconds:.2f} s)\n"
        )
        stream.flush()

    return report


def _cmd_train(args: argparse.Namespace) -> int:
    options = workflows.TrainOptions(
        states=args.states,
        allocation=args.allocation,
        normalise=args.normalise,
        algorithm=args.algorithm,
        iterations=args.iterations,
        batch_size=args.batch_size,
        validation=args.validation,
        pseudocount=args.pseudocount,
        seed=args.seed,
        backend=args.backend,
        init=args.init,
        dtype=args.dtype,
        memory=args.memory,
        patience=args.patience,
        tolerance=args.tolerance,
        max_train=args.max_train,
        ngram_order=args.ngram_order,
        refit=not args.no_refit,
    )
    options.validate()
    corpus_text = text.read_text(args.corpus)
    cancel = learning.CancelToken()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.cancel())
    try:
        outcome = workflows.train_text(
            corpus_text,
            options,
            callback=None if args.quiet else _progress_printer(sys.stderr),
            cancel=cancel,
            name=args.corpus,
            log=None if args.quiet else (lambda line: print(line, file=sys.stderr)),
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    if outcome.result.stopped == "cancelled":
        print("chmm: training cancelled; no model written", file=sys.stderr)
        return 130
    if outcome.result.stopped == "failed":
        print(f"chmm: error: training failed ({outcome.result.error}); no model written", file=sys.stderr)
        return 1
    workflows.save_model(outcome.model, args.output)
    summary = outcome.summary
    if args.json:
        print(_json_line(summary))
    else:
        validation = summary["validation_bps"]
        test_bps = summary["test_bps"]
        print(
            f"saved {args.output}: {summary['states']} states, {summary['iterations']} iterations "
            f"({summary['stopped']}), {summary['seconds']:.1f} s; BPS train {summary['train_bps']:.4f}"
            + (f", validation {validation:.4f}" if validation is not None else "")
            + (f", test {test_bps:.4f}" if test_bps is not None else "")
        )
    return 0


def _cmd_score(args: argparse.Namespace) -> int:
    model = workflows.load_model(args.model)
    result = workflows.score_text(model, text.read_text(args.corpus))
    figures = {
        "bps": result.bps,
        "symbols": result.symbols,
        "zero_probability_events": result.zero_probability_events,
    }
    if args.json:
        print(_json_line(figures))
    else:
        print(f"{result.bps:.4f} bits per symbol over {result.symbols} symbols")
        if result.zero_probability_events:
            print(
                f"{result.zero_probability_events} zero-probability transition(s) were scored by the bigram back-off",
                file=sys.stderr,
            )
    return 0


def _cmd_sample(args: argparse.Namespace) -> int:
    if args.length < 1:
        raise ValueError("--length must be at least 1")
    model = workflows.load_model(args.model)
    print(workflows.sample_text(model, args.length, args.seed, args.prefix))
    return 0


def _cmd_decode(args: argparse.Namespace) -> int:
    model = workflows.load_model(args.model)
    scrambled = text.read_text(args.scrambled)
    started = time.perf_counter()
    result = workflows.decode_text(model, scrambled, constrained=args.constrained)
    seconds = time.perf_counter() - started
    if args.json:
        figures = {
            "decoded": result.decoded,
            "changed": result.changed,
            "log_probability": result.log_probability,
            "seconds": seconds,
        }
        print(_json_line(figures))
    else:
        print(result.decoded)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="chmm", description="Learn and explore cloned HMMs (CHMMs) of text.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = commands.add_parser("train", help="train a CHMM on a text corpus")
    train.add_argument("corpus", help="plain-text corpus (UTF-8)")
    train.add_argument("-o", "--output", required=True, help="model file to write (.npz)")
    train.add_argument("--states", type=int, default=3000, help="total number of clones (default 3000)")
    train.add_argument("--allocation", choices=["ngram", "frequency", "uniform"], default="ngram")
    train.add_argument("--ngram-order", type=int, default=5, help="n of the n-gram allocation rule (default 5)")
    train.add_argument(
        "--no-refit",
        action="store_true",
        help="keep the model trained without the validation text (default: retrain on training + validation "
        "for the iterations that validation chose, as the paper does)",
    )
    train.add_argument("--normalise", choices=["paper", "raw"], default="paper")
    train.add_argument("--algorithm", choices=["em", "online", "viterbi"], default="em")
    train.add_argument("--iterations", type=int, default=100)
    train.add_argument("--batch-size", type=int, default=10_000, help="online EM batch length (symbols)")
    train.add_argument("--memory", type=float, default=0.9, help="online EM lambda (default 0.9)")
    train.add_argument("--validation", type=float, default=0.1, help="share of the training part held out")
    train.add_argument("--pseudocount", type=float, default=1e-6)
    train.add_argument("--tolerance", type=float, default=1e-6, help="relative likelihood gain to stop at")
    train.add_argument("--patience", type=int, default=5, help="iterations without a better validation BPS")
    train.add_argument("--max-train", type=int, default=None, help="cap the training part (symbols)")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--backend", choices=["cpu", "gpu", "auto"], default="cpu")
    train.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    train.add_argument("--init", default=None, help="continue training from this model")
    train.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    train.add_argument("--json", action="store_true")
    train.set_defaults(run=_cmd_train)

    score = commands.add_parser("score", help="bits per symbol of a text under a model")
    score.add_argument("model")
    score.add_argument("corpus")
    score.add_argument("--json", action="store_true")
    score.set_defaults(run=_cmd_score)

    sample = commands.add_parser("sample", help="sample text from a model")
    sample.add_argument("model")
    sample.add_argument("--length", type=int, default=500)
    sample.add_argument("--prefix", default=None, help="text to continue")
    sample.add_argument("--seed", type=int, default=0)
    sample.set_defaults(run=_cmd_sample)

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
    decode.set_defaults(run=_cmd_decode)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``chmm`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (text.CorpusError, ModelFormatError, BackendError, ValueError, OSError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"chmm: error: {message}", file=sys.stderr)
        return 1
    except MemoryError:
        print("chmm: error: out of memory; try fewer states or a shorter corpus", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
