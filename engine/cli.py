"""The ``chmm`` command line (argument parsing only; the work is in :mod:`engine.training` and :mod:`engine.use`).

Every command exits 0 on success; on bad input it prints one line on stderr and exits non-zero without writing
partial output. With ``--json`` the last line on stdout is one JSON object with the command's figures.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.metadata
import json
import math
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from engine import distributed, documents, engines, learners, learning, model_files, text, training, use
from engine.allocation import ALLOCATION_METHODS
from engine.backend import BackendError
from engine.chunks import DEFAULT_BURN_IN, LOCKSTEP_BURN_IN
from engine.communities import FLOW_SOURCES, CommunityOptions
from engine.errors import error_message
from engine.export import FORMATS as EXPORT_FORMATS
from engine.learning import ALGORITHMS
from engine.model import ModelFormatError
from engine.text import NORMALISATIONS


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
        # a pruned (grown) start gives some training transitions probability 0: its E-step BPS is infinite
        train = f"{record.train_bps:.4f}" if math.isfinite(record.train_bps) else "     -"
        stream.write(f"iteration {record.iteration:4d}  train {train}{validation}  ({record.seconds:.2f} s)\n")
        stream.flush()

    return report


def _read_corpus(paths: list[str]) -> tuple[str | list[documents.Document], str]:
    """The corpus of ``chmm train``: one file's text (exactly as before), or the documents of several files, folders
    and zip archives (see :mod:`engine.documents`); and the name the model records."""
    read = documents.read_documents(paths)
    name = documents.corpus_name(paths, read)
    return (read[0].text if len(read) == 1 else read), name


def _cmd_train(args: argparse.Namespace) -> int:
    if args.learner != "chmm":
        return _cmd_train_peer(args)
    if args.learner_option:
        raise ValueError("--learner-option applies to peer learners (--learner densehmm, hmm, pdfa or ngram)")
    if args.init and (args.states is not None or args.normalisation is not None):
        raise ValueError("--init continues a model with its own states and normalisation: leave out those options")
    given = {
        name: getattr(args, name) for name in (*CHMM_ONLY_OPTIONS, "normalisation") if getattr(args, name) is not None
    }
    options = training.TrainOptions(
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
    options.validate()
    if args.burn_in is not None and args.chunk is None:
        raise ValueError("--burn-in belongs to --chunk: give the chunk length too")
    if args.chunk is not None and not (args.cluster or args.workers) and not engines.supports(args.backend, "lockstep"):
        raise ValueError(
            "--chunk cuts documents into chunks for a cluster (--workers or --cluster) or for lockstep passes on the "
            "GPU (--backend gpu)"
        )
    if (args.cluster or args.workers) and options.algorithm == "viterbi":
        raise ValueError("training on a cluster (--cluster, --workers) runs batch or online EM, not Viterbi EM")
    if args.workers is not None and not 1 <= args.workers <= 1024:
        raise ValueError(f"--workers must be a number of processes from 1 to 1,024, got {args.workers}")
    corpus_text, name = _read_corpus(args.corpus)
    cancel = learning.CancelToken()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.cancel())
    try:
        with contextlib.ExitStack() as stack:
            cluster = None
            if args.cluster or args.workers:
                cluster = stack.enter_context(distributed.open_cluster(args.cluster, args.workers))
            outcome = training.train_text(
                corpus_text,
                options,
                callback=None if args.quiet else _progress_printer(sys.stderr),
                cancel=cancel,
                name=name,
                log=None if args.quiet else (lambda line: print(line, file=sys.stderr)),
                cluster=cluster,
            )
    finally:
        signal.signal(signal.SIGINT, previous)
    if outcome.result.stopped == "cancelled":
        print("chmm: training cancelled; no model written", file=sys.stderr)
        return 130
    if outcome.result.stopped == "failed":
        print(f"chmm: error: training failed ({outcome.result.error}); no model written", file=sys.stderr)
        return 1
    model_files.save_model(outcome.model, args.output)
    summary = outcome.summary
    what = f"{summary['states']} states, {summary['iterations']} iterations ({summary['stopped']})"
    if summary.get("search"):
        what += (
            f", pseudocount {summary['pseudocount']:g}, chosen on validation among {len(summary['search'])} "
            "candidate settings"
        )
    _report_training(args, summary, what)
    return 0


def _report_training(args: argparse.Namespace, summary: dict, what: str) -> None:
    """The training summary as one JSON line (--json), or a sentence: the file, ``what`` was trained, the time
    and the BPS figures the run has."""
    if args.json:
        print(_json_line(summary))
        return
    validation, test_bps = summary["validation_bps"], summary["test_bps"]
    print(
        f"saved {args.output}: {what}, {summary['seconds']:.1f} s; BPS train {summary['train_bps']:.4f}"
        + (f", validation {validation:.4f}" if validation is not None else "")
        + (f", test {test_bps:.4f}" if test_bps is not None else "")
    )


def _cmd_score(args: argparse.Namespace) -> int:
    model = learners.load_any(args.model)  # a CHMM or a peer learner, told apart by the file's header
    result = learners.score_any(model, text.read_text(args.corpus), backend=args.backend)
    figures = {
        "bps": result.bps,
        "symbols": result.symbols,
        "zero_probability_events": result.zero_probability_events,
    }
    if learners.is_peer(model):
        figures["learner"] = model.kind
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


CHMM_ONLY_OPTIONS = (
    "search_minutes",
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
COMMUNITY_DEFAULTS = CommunityOptions()
DEFAULT_PRUNE_THRESHOLD = use.DEFAULT_PRUNE_THRESHOLD
TRAIN_DEFAULTS = training.TrainOptions()
"""The training defaults the help texts quote: the engine's own (``training.TrainOptions``)."""
CHMM_DEFAULT_STATES = TRAIN_DEFAULTS.states
CHMM_DEFAULT_ITERATIONS = TRAIN_DEFAULTS.iterations


def _number_or_auto(kind: type) -> Callable[[str], Any]:
    """An argparse type: a number of ``kind``, or :data:`engine.training.AUTO` (chosen on validation)."""

    def parse(value: str) -> Any:
        if value.strip().lower() == training.AUTO:
            return training.AUTO
        try:
            return kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number or {training.AUTO!r}, got {value!r}") from None

    parse.__name__ = kind.__name__
    return parse


def _parse_learner_option(item: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--learner-option`` as (key, value): the value read as JSON (numbers, true, false, null)
    when it parses, else kept as a string."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--learner-option expects KEY=VALUE, got {item!r}")
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
        raise ValueError("--init works only with --learner chmm")
    if args.grow_from is not None:
        raise ValueError("--grow-from works only with --learner chmm")
    if args.workers is not None or args.cluster or args.chunk is not None or args.burn_in is not None:
        raise ValueError("--workers, --cluster, --chunk and --burn-in train CHMMs only (--learner chmm)")
    if not engines.on_host(args.backend):
        raise ValueError(f"the {kind} learner trains on the CPU only; leave out --backend {args.backend}")
    chmm_only = [name for name in (*CHMM_ONLY_OPTIONS, "grow_iterations") if getattr(args, name) is not None]
    if chmm_only:
        flags = ", ".join("--" + name.replace("_", "-") for name in chmm_only)
        raise ValueError(f"{flags} applies to CHMMs only; give the {kind} learner its options with --learner-option")
    options = dict(_parse_learner_option(item) for item in args.learner_option or [])
    if args.states is not None:
        if args.states == training.AUTO:
            raise ValueError(f"--states {training.AUTO} chooses a CHMM's clones; give the {kind} learner a number")
        if kind not in learners.STATES_OPTION:
            raise ValueError(f"--states does not apply to the {kind} learner; use --learner-option")
        options.setdefault(learners.STATES_OPTION[kind], args.states)
    if args.iterations is not None:
        if kind not in learners.ITERATIONS_OPTION:
            raise ValueError(f"--iterations does not apply to the {kind} learner; use --learner-option")
        options.setdefault(learners.ITERATIONS_OPTION[kind], args.iterations)
    if kind in learners.SEED_OPTION:
        options.setdefault(learners.SEED_OPTION[kind], args.seed)
    return options


def _cmd_train_peer(args: argparse.Namespace) -> int:
    """``chmm train --learner KIND`` for a peer learner: the CHMM's corpus protocol, an atomic save, the figures."""
    options = _peer_options(args)
    learners.make_learner(args.learner, **options)  # bad options fail before the corpus is read
    corpus_text, name = _read_corpus(args.corpus)
    try:
        learner, summary = learners.train_peer_text(
            corpus_text,
            args.learner,
            options,
            normalisation=args.normalisation or "paper",
            validation=args.validation,
            max_train=args.max_train,
            refit=not args.no_refit,
            name=name,
            log=None if args.quiet else (lambda line: print(line, file=sys.stderr)),
        )
    except KeyboardInterrupt:
        print("chmm: training cancelled; no model written", file=sys.stderr)
        return 130
    learners.save_learner(learner, args.output)
    _report_training(args, summary, f"{summary['learner']} learner, {summary['parameters']:,} parameters")
    return 0


def _cmd_sample(args: argparse.Namespace) -> int:
    if args.length < 1:
        raise ValueError("--length must be at least 1")
    model = model_files.load_model(args.model)
    print(use.sample_text(model, args.length, args.seed, args.prefix))
    return 0


def _cmd_decode(args: argparse.Namespace) -> int:
    model = model_files.load_model(args.model)
    scrambled = text.read_text(args.scrambled)
    started = time.perf_counter()
    result = use.decode_text(model, scrambled, constrained=args.constrained)
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


def _community_options(args: argparse.Namespace) -> CommunityOptions:
    return CommunityOptions(
        two_level=args.two_level,
        trials=args.trials,
        markov_time=args.markov_time,
        seed=args.seed,
        flow=args.flow,
        words=getattr(args, "words", COMMUNITY_DEFAULTS.words),
    )


def _check_threshold_arg(value: float | None) -> None:
    from engine.graph import check_threshold

    if value is not None:
        check_threshold(value)


def _cmd_prune(args: argparse.Namespace) -> int:
    threshold = args.threshold
    if threshold is None and args.top_mass is None and args.viterbi is None:
        threshold = use.DEFAULT_PRUNE_THRESHOLD
    _check_threshold_arg(threshold)
    model = model_files.load_model(args.model)
    outcome = use.prune_model(
        model,
        threshold=threshold,
        top_mass=args.top_mass,
        viterbi_text=text.read_text(args.viterbi) if args.viterbi else None,
        validation_text=text.read_text(args.validation) if args.validation else None,
    )
    model_files.save_model(outcome.model, args.output)
    summary = outcome.summary
    if args.json:
        print(_json_line(summary))
    else:
        line = (
            f"saved {args.output}: kept {summary['nonzeros_after']:,} of {summary['nonzeros_before']:,} transitions "
            f"({100 * summary['kept_fraction']:.2f}%)"
        )
        if summary["bps_before"] is not None:
            line += f"; validation BPS {summary['bps_before']:.4f} -> {summary['bps_after']:.4f}"
        print(line)
    return 0


def _cmd_communities(args: argparse.Namespace) -> int:
    _check_threshold_arg(args.threshold)
    options = _community_options(args)
    options.validate()
    model = model_files.load_model(args.model)
    corpus = text.read_text(args.corpus) if args.corpus else None
    result = use.model_communities(model, args.threshold, options, corpus)
    use.write_communities(result, args.output)
    figures = result.summary()
    if args.json:
        print(_json_line(figures))
    else:
        print(
            f"wrote {args.output}: {figures['modules']} modules over {figures['nodes']} clones and "
            f"{figures['edges']} transitions, codelength {figures['codelength']:.4f} bits ({figures['seconds']:.1f} s)"
        )
        for module in sorted(result.top_modules, key=lambda m: -m.flow)[:10]:
            print(f"  {module.id:>5}  flow {module.flow:.4f}  {module.size:4d} clones  {module.name}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    _check_threshold_arg(args.threshold)
    options = _community_options(args)
    options.validate()
    model = model_files.load_model(args.model)
    corpus = text.read_text(args.corpus) if args.corpus else None
    figures = use.export_model_graph(
        model,
        args.output,
        args.format,
        module=args.module,
        threshold=args.threshold,
        options=options,
        corpus_text=corpus,
    )
    if args.json:
        print(_json_line(figures))
    else:
        print(f"wrote {args.output}: {figures['nodes']} nodes, {figures['edges']} edges ({args.format})")
    return 0


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
        type=_number_or_auto(int),
        default=None,
        help=f"total number of clones (default 3000; '{training.AUTO}': chosen on validation from "
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
    train.add_argument("--algorithm", choices=ALGORITHMS, default=None, help=f"default {TRAIN_DEFAULTS.algorithm}")
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
        type=_number_or_auto(float),
        default=None,
        help=f"default {TRAIN_DEFAULTS.pseudocount:g}; '{training.AUTO}': chosen on validation from "
        f"{', '.join(f'{v:g}' for v in training.PSEUDOCOUNT_GRID)}",
    )
    train.add_argument(
        "--search-minutes",
        type=float,
        default=None,
        help=f"with '{training.AUTO}': leave out candidates whose predicted time would pass this wall-clock budget "
        "of the search (default none); the chosen setting's restarts and refit come after it",
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
        "(dense models)",
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
    train.set_defaults(run=_cmd_train)

    score = commands.add_parser("score", help="bits per symbol of a text under a model")
    score.add_argument("model")
    score.add_argument("corpus")
    score.add_argument("--backend", choices=engines.backend_choices(), default=TRAIN_DEFAULTS.backend)
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
    prune.set_defaults(run=_cmd_prune)

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
    communities.set_defaults(run=_cmd_communities)

    export = commands.add_parser("export", help="export the clone graph or one module's subgraph")
    export.add_argument("model")
    export.add_argument("--format", required=True, choices=EXPORT_FORMATS)
    export.add_argument("-o", "--output", required=True, help="file to write")
    export.add_argument("--module", default=None, help="export only this module (id as in the module table: 3 or 3:2)")
    add_community_arguments(export)
    export.add_argument("--json", action="store_true")
    export.set_defaults(run=_cmd_export)
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


if __name__ == "__main__":
    sys.exit(main())
