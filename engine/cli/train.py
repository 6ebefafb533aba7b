"""``chmm train``: train a CHMM (or a peer learner) on a corpus and save it."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from typing import Any

from engine import api
from engine.cli.common import TRAIN_DEFAULTS, check_output, json_line, number_or_auto, progress_printer, read_corpus
from engine.errors import CHMMError


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """``chmm train``: its arguments, each default the engine's (:data:`TRAIN_DEFAULTS`)."""
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
        choices=list(api.LEARNERS),
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
        help=f"total number of clones (default '{api.CHOICES.AUTO}': chosen on validation from "
        f"{', '.join(map(str, api.CHOICES.STATES_GRID))}); hidden states of hmm/densehmm (default 100), the "
        "PDFA's bound",
    )
    train.add_argument(
        "--allocation",
        choices=api.CHOICES.ALLOCATION_METHODS,
        default=None,
        help=f"default {TRAIN_DEFAULTS.allocation}",
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
        choices=api.CHOICES.NORMALISATIONS,
        default=None,
        help=f"default {TRAIN_DEFAULTS.normalisation}",
    )
    train.add_argument(
        "--unit",
        choices=api.CHOICES.UNITS,
        default=None,
        help=f"what one symbol is (default {TRAIN_DEFAULTS.unit}): characters; words (lowercase, numbers written out); "
        "tokens as given, separated by whitespace",
    )
    train.add_argument(
        "--min-count",
        type=int,
        default=None,
        help="words and tokens seen fewer times in training become one rare symbol "
        f"(default {TRAIN_DEFAULTS.min_count})",
    )
    train.add_argument(
        "--format",
        choices=api.CHOICES.CORPUS_FORMATS,
        default=api.CHOICES.CORPUS_FORMATS[0],
        help="text: each file one sequence (default); lines: one sequence per line; csv: an event log, one sequence "
        "per case (--sequence-column, --token-column, --order-column); lines and csv keep the last tenth of the "
        "sequences for the test",
    )
    train.add_argument("--sequence-column", default=None, help="the CSV column naming each row's sequence (case)")
    train.add_argument("--token-column", default=None, help="the CSV column of each row's token (activity)")
    train.add_argument("--order-column", default=None, help="the CSV column that orders a case's rows (a time)")
    train.add_argument(
        "--algorithm",
        choices=api.CHOICES.ALGORITHMS,
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
        help=f"online EM batch length (default: {api.DEFAULTS.ONLINE_BATCH_SIZE} symbols, or "
        f"{api.DEFAULTS.BATCH_PER_BLOCK} "
        "per stored symbol-pair block when that is more)",
    )
    train.add_argument(
        "--restarts",
        type=int,
        default=None,
        help=f"train from this many random starts and keep the best on validation (default "
        f"{api.DEFAULTS.ONLINE_RESTARTS} for online EM, 1 otherwise); they alternate between the two kinds of --start, "
        f"and online EM's 3rd and 4th of every four use lambda {api.DEFAULTS.RESTART_MEMORY}",
    )
    train.add_argument(
        "--start",
        choices=api.CHOICES.STARTS,
        default=None,
        help=f"T's random start (default {TRAIN_DEFAULTS.start}): aligned puts "
        f"{round(api.DEFAULTS.ALIGNED_SHARE * 100)}%% of each clone's row on clone c of each next symbol for clone c, "
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
        help=f"added to every stored count in the M-step (default '{api.CHOICES.AUTO}': chosen on validation from "
        f"{', '.join(f'{v:g}' for v in api.CHOICES.PSEUDOCOUNT_GRID)})",
    )
    train.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="MINUTES",
        help=f"wall-clock minutes the choice of states and pseudocount on validation may take (default "
        f"{TRAIN_DEFAULTS.budget:g}), a deadline: candidates predicted at the machine's current pace to pass it are "
        "left out, and whatever runs at its end stops there; the refit comes after, only if it ends within the time "
        "stated at the start",
    )
    train.add_argument(
        "--support-bound",
        type=float,
        default=None,
        metavar="BITS",
        help=f"after online EM, batch EM runs on the transitions that carry mass: the model pruned at the largest "
        f"threshold that costs at most this many bits of validation BPS (default {TRAIN_DEFAULTS.support_bound:g}; "
        "0: every stored entry)",
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
    train.add_argument("--backend", choices=api.backend_choices(), default=TRAIN_DEFAULTS.backend)
    train.add_argument(
        "--dtype", choices=list(api.CHOICES.DTYPES), default=None, help=f"default {TRAIN_DEFAULTS.dtype}"
    )
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
        f"(dense models; by default the GPU chooses chunks of at least {api.DEFAULTS.LOCKSTEP_STEPS} steps for "
        f"documents of "
        f"{api.DEFAULTS.LOCKSTEP_MIN_SYMBOLS:,} symbols or more); {api.DEFAULTS.EXACT}: exact passes, no chunks",
    )
    train.add_argument(
        "--burn-in",
        type=int,
        default=None,
        help=f"symbols before and after a chunk whose steps are not counted (default "
        f"{api.DEFAULTS.DEFAULT_BURN_IN:,} on a "
        f"cluster, {api.DEFAULTS.LOCKSTEP_BURN_IN} in lockstep on the GPU)",
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
    train.add_argument(
        "--prune-bound",
        type=float,
        default=api.DEFAULTS.PRUNE_BOUND,
        metavar="BITS",
        help=f"save T pruned at the largest of {', '.join(f'{t:g}' for t in api.CHOICES.PRUNE_THRESHOLDS)} whose "
        f"validation "
        f"BPS cost is at most this many bits per symbol (default {api.DEFAULTS.PRUNE_BOUND:g}; 0 saves T dense)",
    )
    train.add_argument(
        "--keep-statistics",
        action="store_true",
        help="also save the expected transition counts (float64, twice T's size): needed only for `chmm communities "
        "--flow counts` and the export's count column; scoring keeps their sums per symbol pair either way",
    )
    train.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    train.add_argument("--json", action="store_true")
    train.set_defaults(run=run)
    return train


def run(args: argparse.Namespace) -> int:
    """Train a CHMM (or a peer learner) and save it; 130 when cancelled, 1 when training failed."""
    if args.learner != "chmm":
        return _train_peer(args)
    if args.learner_option:
        raise CHMMError("--learner-option applies to peer learners (--learner densehmm, hmm, pdfa or ngram)")
    if args.init and args.normalisation is not None:  # a flag typed, not a value: the default is a normalisation
        raise CHMMError("--init continues a model with its own normalisation: leave out --normalisation")
    check_output(args.output, [*args.corpus, *([args.init] if args.init else [])])
    api.check_prune_bound(args.prune_bound)
    options = train_options(args)
    options.validate(cluster=bool(args.cluster or args.workers))
    if args.workers is not None:
        api.check_workers(args.workers)
    corpus_text, name = read_corpus(args.corpus, **corpus_format(args))
    cancel = api.CancelToken()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.cancel())
    previous_term = signal.signal(signal.SIGTERM, lambda *_: cancel.cancel())  # training stops as on Ctrl-C
    try:
        with contextlib.ExitStack() as stack:
            cluster = None
            if args.cluster or args.workers:
                cluster = stack.enter_context(api.open_cluster(args.cluster, args.workers))
            outcome = api.train_text(
                corpus_text,
                options,
                callback=None if args.quiet else progress_printer(sys.stderr),
                cancel=cancel,
                name=name,
                log=None if args.quiet else (lambda line: print(line, file=sys.stderr)),
                cluster=cluster,
            )
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)
    if outcome.result.stopped == "cancelled":
        print("chmm: training cancelled; no model written", file=sys.stderr)
        return 130
    if outcome.result.stopped == "failed":
        print(f"chmm: error: training failed ({outcome.result.error}); no model written", file=sys.stderr)
        return 1
    summary = outcome.summary
    ngram = api.learners.ngram_beside(corpus_text, options, outcome.model.codec.normalisation, name)
    summary["unit"] = outcome.model.codec.unit
    model, saved = api.model_to_save(outcome, args.prune_bound, args.keep_statistics)
    summary["saved"] = saved
    summary["ngram"] = model.metadata["ngram"] = ngram
    api.save_model(model, args.output)
    what = f"{summary['states']} states, {summary['iterations']} iterations ({summary['stopped']})"
    if summary.get("search"):
        what += (
            f", pseudocount {summary['pseudocount']:g}, chosen on validation among {len(summary['search'])} "
            "candidate settings"
        )
    _report_training(args, summary, what)
    if not args.json:
        if summary.get("chosen"):
            print(f"chose {summary['states']:,} states and pseudocount {summary['pseudocount']:g}: "
                  f"{summary['chosen']['reason']}")  # fmt: skip
        print(_saved_sentence(saved))
        print(_beside_ngram(summary, ngram))
    return 0


def _saved_sentence(saved: dict[str, Any]) -> str:
    """One sentence: how T was saved (pruned at which threshold, at what validation cost, or dense and why) and
    whether the expected counts were."""
    bound = saved["prune_bound"]
    statistics = "with" if saved["statistics"] else "without"
    tail = f"; saved {statistics} the expected counts" + ("" if saved["statistics"] else " (--keep-statistics)")
    if saved["threshold"] is not None:
        return (
            f"T pruned at {saved['threshold']:g}: {saved['nonzeros']:,} transitions kept "
            f"({100 * saved['kept_fraction']:.2f}%), validation BPS {saved['validation_bps_dense']:.4f} -> "
            f"{saved['validation_bps_dense'] + saved['validation_cost']:.4f} ({saved['validation_cost']:+.4f}, "
            f"bound {bound:g})" + tail
        )
    if bound == 0:
        return "T saved dense (--prune-bound 0)" + tail
    return f"T saved dense: {saved.get('reason', 'no threshold within the bound')}" + tail


def _beside_ngram(summary: dict[str, Any], ngram: dict[str, Any]) -> str:
    """One sentence: the CHMM's validation (and test) BPS beside our Kneser-Ney n-gram's on the same split."""
    parts = []
    for key, label in (("validation_bps", "validation"), ("test_bps", "test")):
        if summary.get(key) is not None and ngram.get(key) is not None:
            gap = summary[key] - ngram[key]
            side = "CHMM lower by" if gap < 0 else "CHMM higher by"
            parts.append(f"{label} {ngram[key]:.4f} ({side} {abs(gap):.4f})")
    if not parts:
        return "our Kneser-Ney n-gram on the same split: no held-out text to compare on"
    return "our Kneser-Ney n-gram on the same split: BPS " + ", ".join(parts)


def train_options(args: argparse.Namespace) -> api.TrainOptions:
    """The CHMM training options of ``chmm train``'s arguments: each option given, else the engine's default
    (``api.TrainOptions``: the same object the app's form and the Python API read)."""
    given = {
        name: getattr(args, name)
        for name in (*CHMM_ONLY_OPTIONS, "normalisation", "unit", "min_count")
        if getattr(args, name) is not None
    }
    if args.format != api.CHOICES.CORPUS_FORMATS[0]:
        given |= {"by_sequence": True, "unit": _format_unit(args)}
    return api.TrainOptions(
        states=CHMM_DEFAULT_STATES if args.states is None else args.states,
        iterations=CHMM_DEFAULT_ITERATIONS if args.iterations is None else args.iterations,
        validation=args.validation,
        seed=args.seed,
        backend=args.backend,
        init=args.init,
        max_train=args.max_train,
        refit=not args.no_refit,
        grow_from=args.grow_from,
        grow_iterations=args.grow_iterations,
        chunk=args.chunk,
        **({"burn_in": args.burn_in} if args.burn_in is not None else {}),
        **given,
    )


def _format_unit(args: argparse.Namespace) -> str:
    """The unit of a corpus of sequences: as given, tokens for a CSV (its cells are tokens); ValueError for a CSV
    read as characters."""
    if args.format == "csv" and args.unit not in (None, "tokens"):
        raise CHMMError("a CSV event log holds one token per row: leave out --unit or give --unit tokens")
    return args.unit or ("tokens" if args.format == "csv" else TRAIN_DEFAULTS.unit)


def corpus_format(args: argparse.Namespace) -> dict[str, Any]:
    """How ``chmm train`` reads its corpus files (:func:`engine.cli.common.read_corpus`'s keywords); ValueError for a
    CSV without its two columns, or columns given for another format."""
    columns = {"sequence_column": args.sequence_column, "token_column": args.token_column}
    if args.format == "csv" and not all(columns.values()):
        raise CHMMError("--format csv needs the CSV's --sequence-column and --token-column")
    if args.format != "csv" and any([*columns.values(), args.order_column]):
        raise CHMMError("--sequence-column, --token-column and --order-column belong to --format csv")
    return {"fmt": args.format, "order_column": args.order_column, **columns}


def _report_training(args: argparse.Namespace, summary: dict, what: str) -> None:
    """The training summary as one JSON line (--json), or a sentence: the file, ``what`` was trained, the time
    and the BPS figures the run has."""
    if args.json:
        print(json_line(summary))
        return
    validation, test_bps = summary["validation_bps"], summary["test_bps"]
    print(
        f"saved {args.output}: {what}, {summary['seconds']:.1f} s; BPS train {summary['train_bps']:.4f}"
        + (f", validation {validation:.4f}" if validation is not None else "")
        + (f", test {test_bps:.4f}" if test_bps is not None else "")
    )


CHMM_ONLY_OPTIONS = (
    "budget",
    "support_bound",
    "allocation",
    "ngram_order",
    "algorithm",
    "batch_size",
    "memory",
    "pseudocount",
    "tolerance",
    "patience",
    "dtype",
    "grow_threshold",
    "restarts",
    "start",
)
"""``chmm train`` options of the CHMM learner only (None when not given: TrainOptions' defaults apply)."""


CHMM_DEFAULT_STATES = TRAIN_DEFAULTS.states


CHMM_DEFAULT_ITERATIONS = TRAIN_DEFAULTS.iterations


def _parse_learner_option(item: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--learner-option`` as (key, value): the value read as JSON (numbers, true, false, null)
    when it parses, else kept as a string."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise CHMMError(f"--learner-option expects KEY=VALUE, got {item!r}")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def _peer_options(args: argparse.Namespace) -> dict[str, Any]:
    """The peer learner's options from ``--learner-option`` and, where the learner has them, --states (hidden
    states; the PDFA's bound on states), --iterations and --seed; CHMM-only settings that were asked for refuse."""
    kind = args.learner
    if args.init:
        raise CHMMError("--init works only with --learner chmm")
    if args.keep_statistics or args.prune_bound != api.DEFAULTS.PRUNE_BOUND:
        raise CHMMError("--prune-bound and --keep-statistics apply to CHMMs only (--learner chmm)")
    if args.grow_from is not None:
        raise CHMMError("--grow-from works only with --learner chmm")
    if args.workers is not None or args.cluster or args.chunk is not None or args.burn_in is not None:
        raise CHMMError("--workers, --cluster, --chunk and --burn-in train CHMMs only (--learner chmm)")
    on_device = not api.on_host(args.backend)
    if on_device and not api.learners.registered_learners()[kind].on_device:
        raise CHMMError(f"the {kind} learner trains on the CPU only; leave out --backend {args.backend}")
    chmm_only = [name for name in (*CHMM_ONLY_OPTIONS, "grow_iterations") if getattr(args, name) is not None]
    if chmm_only:
        flags = ", ".join("--" + name.replace("_", "-") for name in chmm_only)
        raise CHMMError(f"{flags} applies to CHMMs only; give the {kind} learner its options with --learner-option")
    options = dict(_parse_learner_option(item) for item in args.learner_option or [])
    if args.states is not None:
        if args.states == api.CHOICES.AUTO:
            raise CHMMError(f"--states {api.CHOICES.AUTO} chooses a CHMM's clones; give the {kind} learner a number")
        if kind not in api.learners.STATES_OPTION:
            raise CHMMError(f"--states does not apply to the {kind} learner; use --learner-option")
        options.setdefault(api.learners.STATES_OPTION[kind], args.states)
    if args.iterations is not None:
        if kind not in api.learners.ITERATIONS_OPTION:
            raise CHMMError(f"--iterations does not apply to the {kind} learner; use --learner-option")
        options.setdefault(api.learners.ITERATIONS_OPTION[kind], args.iterations)
    if kind in api.learners.SEED_OPTION:
        options.setdefault(api.learners.SEED_OPTION[kind], args.seed)
    if on_device:
        options.setdefault("device", "cuda")
    return options


def _train_peer(args: argparse.Namespace) -> int:
    """``chmm train --learner KIND`` for a peer learner: the CHMM's corpus protocol, an atomic save, the figures."""
    check_output(args.output, args.corpus)
    options = _peer_options(args)
    api.make_learner(args.learner, **options)  # bad options fail before the corpus is read
    corpus_text, name = read_corpus(args.corpus, **corpus_format(args))
    try:
        learner, summary = api.learners.train_peer_text(
            corpus_text,
            args.learner,
            options,
            normalisation=args.normalisation or "paper",
            unit=_format_unit(args)
            if args.format != api.CHOICES.CORPUS_FORMATS[0]
            else args.unit or TRAIN_DEFAULTS.unit,
            min_count=TRAIN_DEFAULTS.min_count if args.min_count is None else args.min_count,
            by_sequence=args.format != api.CHOICES.CORPUS_FORMATS[0],
            validation=args.validation,
            max_train=args.max_train,
            refit=not args.no_refit,
            name=name,
            log=None if args.quiet else (lambda line: print(line, file=sys.stderr)),
        )
    except KeyboardInterrupt:
        print("chmm: training cancelled; no model written", file=sys.stderr)
        return 130
    api.learners.save_learner(learner, args.output)
    _report_training(args, summary, f"{summary['learner']} learner, {summary['parameters']:,} parameters")
    return 0
