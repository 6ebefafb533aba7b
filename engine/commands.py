"""What each ``chmm`` command does once its arguments are parsed (:mod:`engine.cli` parses them): read the input,
call the engine's services (:mod:`engine.training`, :mod:`engine.use`, :mod:`engine.learners`), print or write the
result; each returns the exit status. The defaults the parser states are defined here, once."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine import chunks, distributed, documents, engines, learners, learning, model_files, text, training, use
from engine.communities import CommunityOptions


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


def check_output(path: str | os.PathLike[str], inputs: Sequence[str | os.PathLike[str]] = ()) -> None:
    """Refuse, before any work, an output file that cannot be written as asked (ValueError, one sentence): a
    folder, a file in a folder that does not exist (it is not created), or one of the ``inputs`` (a corpus or a
    model the command reads, which it would overwrite)."""
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{target} is a folder; give a file name, such as {target / 'model.npz'}")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise ValueError(f"the folder {folder} does not exist; create it first, or write the file elsewhere")
    for given in inputs:
        if Path(given).exists() and target.exists() and target.resolve() == Path(given).resolve():
            raise ValueError(f"{target} is also an input of this command; write the output to another file")


def _read_corpus(paths: list[str]) -> tuple[str | list[documents.Document], str]:
    """The corpus of ``chmm train``: one file's text (exactly as before), or the documents of several files, folders
    and zip archives (see :mod:`engine.documents`); and the name the model records."""
    read = documents.read_documents(paths)
    name = documents.corpus_name(paths, read)
    return (read[0].text if len(read) == 1 else read), name


def run_train(args: argparse.Namespace) -> int:
    if args.learner != "chmm":
        return _cmd_train_peer(args)
    if args.learner_option:
        raise ValueError("--learner-option applies to peer learners (--learner densehmm, hmm, pdfa or ngram)")
    if args.init and (args.states is not None or args.normalisation is not None):
        raise ValueError("--init continues a model with its own states and normalisation: leave out those options")
    check_output(args.output, [*args.corpus, *([args.init] if args.init else [])])
    options = train_options(args)
    options.validate()
    if args.budget is not None and not options.searches:
        raise ValueError(
            "--budget bounds the choice of states and pseudocount on validation, and there is none: both are given, "
            "or --init continues a model with its own"
        )
    lockstep = engines.supports(args.backend, "lockstep")
    if args.burn_in is not None and (args.chunk == chunks.EXACT or (args.chunk is None and not lockstep)):
        raise ValueError("--burn-in belongs to chunks: give the chunk length too (--chunk)")
    if args.chunk and not (args.cluster or args.workers) and not lockstep:
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
    previous_term = signal.signal(signal.SIGTERM, lambda *_: cancel.cancel())  # training stops as on Ctrl-C
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
        signal.signal(signal.SIGTERM, previous_term)
    if outcome.result.stopped == "cancelled":
        print("chmm: training cancelled; no model written", file=sys.stderr)
        return 130
    if outcome.result.stopped == "failed":
        print(f"chmm: error: training failed ({outcome.result.error}); no model written", file=sys.stderr)
        return 1
    summary = outcome.summary
    ngram = learners.ngram_beside(corpus_text, options, outcome.model.codec.normalisation, name)
    summary["ngram"] = outcome.model.metadata["ngram"] = ngram
    model_files.save_model(outcome.model, args.output)
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
        print(_beside_ngram(summary, ngram))
    return 0


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


def train_options(args: argparse.Namespace) -> training.TrainOptions:
    """The CHMM training options of ``chmm train``'s arguments: each option given, else the engine's default
    (``training.TrainOptions``: the same object the app's form and the Python API read)."""
    given = {
        name: getattr(args, name) for name in (*CHMM_ONLY_OPTIONS, "normalisation") if getattr(args, name) is not None
    }
    return training.TrainOptions(
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


def run_score(args: argparse.Namespace) -> int:
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
    "budget",
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


def number_or_auto(kind: type) -> Callable[[str], Any]:
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
    check_output(args.output, args.corpus)
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


def run_sample(args: argparse.Namespace) -> int:
    if args.length < 1:
        raise ValueError("--length must be at least 1")
    model = model_files.load_model(args.model)
    print(use.sample_text(model, args.length, args.seed, args.prefix))
    return 0


def run_decode(args: argparse.Namespace) -> int:
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


def run_prune(args: argparse.Namespace) -> int:
    threshold = args.threshold
    if threshold is None and args.top_mass is None and args.viterbi is None:
        threshold = use.DEFAULT_PRUNE_THRESHOLD
    _check_threshold_arg(threshold)
    check_output(args.output, [args.model])
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


def run_communities(args: argparse.Namespace) -> int:
    _check_threshold_arg(args.threshold)
    options = _community_options(args)
    options.validate()
    check_output(args.output, [args.model, *([args.corpus] if args.corpus else [])])
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


def run_export(args: argparse.Namespace) -> int:
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
