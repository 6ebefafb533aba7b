"""Every learner by name: build a peer learner with defaults for text, train it on a corpus exactly as a CHMM is
trained (same normalisation, same splits), save it with what scoring needs, load any model file, score raw text.

``LEARNERS`` lists the learners the command line (``chmm train --learner``), the app's Compare page and the
benchmarks offer: "chmm" (trained by :func:`engine.training.train_text`) and the peers of :mod:`engine.peers`.

The text protocol (:func:`train_peer_text`) is the CHMM's (:func:`engine.training.train_text`): the corpus is
normalised and split by :func:`engine.corpora.text.prepare_corpus` with the same arguments (first 90% train with its
last ``validation`` share held out, last 10% test); the learner is fitted on the training part with the validation part
(early stopping for the HMMs, the order for the n-gram, the smoothing for the PDFA, the deep discount for the
sequence memoizer: each learner's registered ``refit``); with ``refit`` (on by default,
like the CHMM's refit) it is then fitted again on training + validation text with the hyper-parameters the
validation chose. ``validation_bps`` is always the held-out figure of the selection run. The saved file's metadata
holds the normalisation, vocabulary and alphabet, so :func:`score_peer_text` treats new text as training did.

Default sizes (:data:`DEFAULT_OPTIONS`) and their cost on ``carroll-alice.txt`` (106,910 training symbols, 2 CPU
cores shared), measured with the refit: the n-gram 0.4 s (test BPS 1.505), the PDFA 4 s (1.688), the HMM with 100
states 50 s (2.232; about 0.5 s per EM iteration, 50 at most, plus the refit) and the DenseHMM with 100 states and
l = 16 49 s (2.373), the sequence memoizer 2.7 s (1.517) and the recurrent network (2 layers of 256 GRU units,
stopped on validation, no refit) about 150 s (1.567); a CHMM of 1,000 clones by online EM takes 10 s (1.618).
Larger settings are in ``bench/bench_peers.py``.
"""

from __future__ import annotations

import importlib
import inspect
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine import training
from engine.backends import engines, model_files, reading
from engine.backends.cpu import inference
from engine.corpora import text
from engine.errors import CHMMError
from engine.model.codec import TextCodec
from engine.peers import registry
from engine.peers.base import PeerFormatError, PeerLearner, bits_per_symbol, read_header
from engine.training import learning

__all__ = [
    "DEFAULT_OPTIONS",
    "LEARNERS",
    "PEER_LEARNERS",
    "PEER_MODULES",
    "TEXT_LEARNERS",
    "TextLearner",
    "TrainingStopped",
    "chmm_parameters",
    "encode_for_learner",
    "is_peer",
    "learner_class",
    "learner_kind",
    "load_any",
    "make_learner",
    "save_learner",
    "score_any",
    "score_peer_text",
    "train_learner_text",
    "text_learner_of",
    "train_peer_text",
]

PEER_MODULES = (
    "engine.peers.densehmm",
    "engine.peers.hmm",
    "engine.peers.pdfa",
    "engine.peers.ngram",
    "engine.peers.seqm",
    "engine.peers.rnn",
)
"""The peer learners' modules, in the order the front ends list them; each registers itself on import
(:func:`engine.peers.registry.register`)."""

registry.register(
    registry.Learner(
        "chmm",
        "CHMM (online EM)",
        "CHMM",
        "#1f77b4",
        compare_options={
            "states": 1000,
            "algorithm": "online",
            "batch_size": 2000,
            "iterations": 30,
            "pseudocount": 1e-3,
        },  # fmt: skip
        settings=(
            registry.Setting("states", "clones", 1000, 2, 10_000, cost_power=2),
            registry.Setting("iterations", "iterations", 30, 1, 500),
        ),
        seconds_per_symbol=10 / 106_910,
        on_device=True,
    )
)
for _module in PEER_MODULES:
    importlib.import_module(_module)

LEARNERS = ("chmm",) + tuple(
    name for module in PEER_MODULES for name, entry in registry.registered().items()
    if entry.factory.partition(":")[0] == module
)  # fmt: skip
"""Every learner's name: the CHMM, then the peers of :data:`PEER_MODULES`."""
PEER_LEARNERS = LEARNERS[1:]
DEFAULT_OPTIONS: dict[str, dict[str, Any]] = {kind: dict(registry.entry(kind).defaults) for kind in PEER_LEARNERS}
"""Options :func:`make_learner` starts from (the learners' own defaults fill the rest)."""

STATES_OPTION = {k: registry.entry(k).states_option for k in PEER_LEARNERS if registry.entry(k).states_option}
"""The option that ``chmm train --states`` sets for each peer (the n-gram has no states)."""
ITERATIONS_OPTION = {
    k: registry.entry(k).iterations_option for k in PEER_LEARNERS if registry.entry(k).iterations_option
}
SEED_OPTION = {k: registry.entry(k).seed_option for k in PEER_LEARNERS if registry.entry(k).seed_option}


class TrainingStopped(RuntimeError):
    """A CHMM training run that was cancelled or failed (its message says which, and why)."""


@dataclass(frozen=True)
class TextLearner:
    """One learner as every front end uses it (hmmlearn's one estimator interface, on text): ``train`` (corpus text,
    options, the text protocol's settings as keywords; returns the model and its summary), ``score`` (a loaded model,
    raw text, backend; a :class:`~engine.backends.cpu.inference.ScoreResult`) and ``owns`` (whether a loaded model
    is this learner's). The CHMM is one of them (:data:`TEXT_LEARNERS`), so nothing here asks which learner it has."""

    name: str
    train: Callable[..., tuple[Any, dict[str, Any]]]
    score: Callable[[Any, str, str], inference.ScoreResult]
    owns: Callable[[Any], bool]


# ------------------------------------------------------------------------------------------ building learners
def _check_kind(kind: object, peers_only: bool = False) -> str:
    """``kind`` if it names a learner (a peer learner with ``peers_only``), else ValueError listing the choices."""
    choices = PEER_LEARNERS if peers_only else LEARNERS
    if kind not in choices:
        if peers_only and kind == "chmm":
            raise CHMMError("CHMMs are trained by engine.training.train_text, not as peer learners")
        raise CHMMError(f"unknown learner {kind!r}; choose one of {', '.join(choices)}")
    return str(kind)


def learner_class(kind: str) -> type:
    """The class of peer learner ``kind`` (its module is imported on first use)."""
    module, _, name = registry.entry(_check_kind(kind, peers_only=True)).factory.partition(":")
    return getattr(importlib.import_module(module), name)


def make_learner(kind: str, **options: Any) -> PeerLearner:
    """A new, untrained peer learner ``kind`` with :data:`DEFAULT_OPTIONS` overridden by ``options``; an option the
    learner does not have raises ValueError naming the ones it has."""
    cls = learner_class(kind)
    missing = registry.available(kind)
    if missing:
        raise CHMMError(missing)
    parameters = {name: p for name, p in inspect.signature(cls.__init__).parameters.items() if name != "self"}
    unknown = sorted(set(options) - set(parameters))
    if unknown:
        raise CHMMError(f"the {kind} learner has no option {', '.join(unknown)}; its options: {', '.join(parameters)}")
    for name, value in options.items():
        _check_option_type(kind, name, value, str(parameters[name].annotation))
    try:
        return cls(**(DEFAULT_OPTIONS[kind] | options))
    except TypeError as exc:  # a value of a type the learner's checks did not foresee
        raise CHMMError(f"the {kind} learner cannot use these options: {exc}") from None


def _check_option_type(kind: str, name: str, value: Any, annotation: str) -> None:
    """ValueError unless ``value`` fits the option's annotation (int, float, str, bool, optionally "| None")."""
    allowed = {part.strip() for part in annotation.split("|")}
    if value is None and "None" in allowed:
        return
    is_int = isinstance(value, int) and not isinstance(value, bool)
    fits = (
        ("int" in allowed and is_int)
        or ("float" in allowed and (is_int or isinstance(value, float)))
        or ("str" in allowed and isinstance(value, str))
        or ("bool" in allowed and isinstance(value, bool))
        or not allowed & {"int", "float", "str", "bool"}  # an annotation this check does not know: the learner's
    )
    if not fits:
        wanted = " or ".join(sorted(allowed))
        raise CHMMError(f"the {kind} learner's option {name} must be {wanted}, got {value!r}")


def learner_options(learner: PeerLearner) -> dict[str, Any]:
    """The constructor options of a built learner (the attributes named like its ``__init__`` parameters)."""
    names = [p for p in inspect.signature(type(learner).__init__).parameters if p != "self"]
    return {name: getattr(learner, name) for name in names if hasattr(learner, name)}


# ------------------------------------------------------------------------------------------ training on text
def _bps_or_none(learner: PeerLearner, x: np.ndarray) -> float | None:
    """BPS of ``x`` under the learner, None for an empty split."""
    return bits_per_symbol(learner, x) if len(x) else None


def _training_bps(learner: Any, x: np.ndarray) -> float:
    """BPS of the text the learner was last fitted on: the figure it kept while training where it keeps one
    (``train_bps_``: a recurrent network scores one symbol after another, so a second pass over its training text
    would cost as much as an epoch), else scored again."""
    kept = getattr(learner, "train_bps_", None)
    return float(kept) if kept is not None else bits_per_symbol(learner, x)


def _refit_learner(learner: Any, kind: str, options: dict[str, Any]) -> Any | None:
    """A new learner of ``kind`` whose hyper-parameters are fixed to what the validation run chose (its registered
    ``refit``: the n-gram's order, the PDFA's smoothing, the HMMs' best iteration), to be fitted on training +
    validation text; None when validation chose nothing."""
    refit = registry.entry(kind).refit
    fixed = refit(learner, options) if refit is not None else None
    return None if fixed is None else make_learner(kind, **fixed)


def train_peer_text(
    corpus_text: str,
    kind: str,
    options: dict[str, Any] | None = None,
    *,
    normalisation: str = "paper",
    validation: float = 0.1,
    test_fraction: float = 0.1,
    max_train: int | None = None,
    refit: bool = True,
    name: str = "corpus",
    log: Callable[[str], None] | None = None,
    unit: str = text.UNITS[0],
    min_count: int = text.MIN_COUNT,
    by_sequence: bool = False,
    cancel: learning.CancelToken | None = None,
) -> tuple[PeerLearner, dict[str, Any]]:
    """Train peer learner ``kind`` (options over :data:`DEFAULT_OPTIONS`) on ``corpus_text`` by the CHMM's text
    protocol (module docstring) and return it with its figures: learner, train_bps (on the text it was last fitted
    on), validation_bps (selection run), test_bps, seconds (preparation, fitting and scoring), parameters, symbols
    (training symbols) and alphabet. The learner's ``metadata`` (saved by :func:`save_learner`) records the
    corpus, normalisation, vocabulary, alphabet, settings, split sizes and figures."""
    kind = _check_kind(kind, peers_only=True)
    options = dict(options or {})
    started = time.perf_counter()
    shares = {"test_fraction": test_fraction, "validation": validation, "max_train": max_train}
    reading = {"normalisation": normalisation, "unit": unit, "min_count": min_count, "by_sequence": by_sequence}
    corpus = text.prepare_corpus(corpus_text, name=name, **shares, **reading)
    learner: Any = make_learner(kind, **options)
    if log:
        log(
            f"{name}: {len(corpus.train):,} training, {len(corpus.validation):,} validation, {len(corpus.test):,} "
            f"test symbols over {corpus.n_symbols} symbols; {kind} learner"
        )
    has_validation = len(corpus.validation) > 0
    _follow(learner, log, cancel)
    learner.fit(corpus.train, corpus.n_symbols, corpus.validation if has_validation else None)
    if getattr(learner, "cancelled_", False):
        raise TrainingStopped(f"{kind} training cancelled")
    validation_bps = _bps_or_none(learner, corpus.validation)
    refitted = False
    if refit and has_validation:
        again = _refit_learner(learner, kind, options)
        if again is not None:
            if log:
                log("refitting on training + validation text with the settings validation chose")
            learner = again.fit(corpus.train_full, corpus.n_symbols, None)
            refitted = True
    train_symbols = corpus.train_full if refitted else corpus.train
    figures = {
        "train_bps": _training_bps(learner, train_symbols),
        "validation_bps": validation_bps,
        "test_bps": _bps_or_none(learner, corpus.test),
    }
    seconds = time.perf_counter() - started
    summary = _peer_summary(learner, kind, figures, seconds, refitted, len(train_symbols), corpus.n_symbols)
    learner.metadata = {
        "engine_version": training.ENGINE_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "corpus": name,
        "learner": kind,
        "normalisation": corpus.normalisation,
        "vocabulary": corpus.vocabulary,
        **({"unit": corpus.unit} if corpus.unit != text.UNITS[0] else {}),
        "symbols": list(corpus.symbols),
        "settings": {
            "normalisation": normalisation,
            "validation": validation,
            "test_fraction": test_fraction,
            "max_train": max_train,
            "refit": refit,
            "requested_options": _plain(options),
            "options": _plain(learner_options(learner)),
        },
        "sizes": {"train": len(corpus.train), "validation": len(corpus.validation), "test": len(corpus.test)},
        **figures,
        "seconds": seconds,
        "parameters": int(learner.n_parameters),
    }
    return learner, summary


def _follow(learner: Any, log: Callable[[str], None] | None, cancel: learning.CancelToken | None) -> None:
    """Hand a learner that trains in epochs (one with ``progress`` and ``cancel`` attributes) the log, which gets a
    line per epoch, and the cancel token it checks as it goes."""
    if hasattr(learner, "cancel"):
        learner.cancel = cancel
    if log is not None and hasattr(learner, "progress"):

        def progress(record: dict[str, Any]) -> None:
            validation = record.get("validation_bps")
            shown = "" if validation is None else f", validation BPS {validation:.4f}"
            seconds = record["seconds"]
            log(f"epoch {record['iteration']}: training BPS {record['train_bps']:.4f}{shown}, {seconds:.0f} s")

        learner.progress = progress


def ngram_beside(
    corpus_text: str | Any, options: training.TrainOptions, normalisation: str, name: str = "corpus"
) -> dict[str, Any]:
    """Our Kneser-Ney n-gram trained by the same protocol on the same split as a CHMM trained with ``options``
    (``normalisation``: the CHMM's), so people see where the CHMM stands; it costs seconds. Returns its
    validation_bps (the selection run, as the CHMM's), test_bps and seconds."""
    _, summary = train_peer_text(
        corpus_text,
        "ngram",
        normalisation=normalisation,
        validation=options.validation,
        test_fraction=options.test_fraction,
        max_train=options.max_train,
        refit=options.refit,
        name=name,
        unit=options.unit,
        min_count=options.min_count,
        by_sequence=options.by_sequence,
    )
    return {key: summary[key] for key in ("validation_bps", "test_bps", "seconds")}


def _peer_summary(
    learner: Any, kind: str, figures: dict[str, Any], seconds: float, refitted: bool, symbols: int, alphabet: int
) -> dict[str, Any]:
    """A trained peer's summary (the CLI's ``--json`` object): its figures, seconds, parameters, whether it was
    refitted, training symbols, alphabet, and its iterations and states (or the n-gram's order)."""
    summary: dict[str, Any] = {
        "learner": kind,
        **figures,
        "seconds": seconds,
        "parameters": int(learner.n_parameters),
        "refit": refitted,
        "symbols": int(symbols),
        "alphabet": alphabet,
    }
    history = getattr(learner, "history", None)
    if history:  # record k holds the parameters after k updates (record 0: the start), as a CHMM counts them
        summary["iterations"] = int(history[-1]["iteration"])
    if getattr(learner, "order_", None) is not None:  # the n-gram's chosen order
        summary["order"] = int(learner.order_)
    elif hasattr(learner, "n_states"):  # hidden states of the HMMs, learned states of the PDFA
        summary["states"] = int(learner.n_states)
    return summary


def _plain(value: Any) -> Any:
    """``value`` with NumPy scalars turned into Python numbers and non-finite floats into None (JSON-safe)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def chmm_parameters(model: Any) -> int:
    """The parameter count reported for a CHMM: its non-zero transition probabilities (the emission matrix is
    fixed by the clone structure and has no free parameters)."""
    return int(model.n_nonzero())


def _train_chmm_text(
    corpus_text: str,
    options: dict[str, Any] | None = None,
    *,
    normalisation: str = "paper",
    validation: float = 0.1,
    max_train: int | None = None,
    refit: bool = True,
    name: str = "corpus",
    callback: learning.ProgressCallback | None = None,
    cancel: learning.CancelToken | None = None,
    log: Callable[[str], None] | None = None,
    unit: str = text.UNITS[0],
) -> tuple[Any, dict[str, Any]]:
    """The CHMM as a text learner: ``options`` are :class:`engine.training.TrainOptions` fields over the protocol's
    settings, trained by :func:`engine.training.train_text` (``callback`` and ``cancel`` reach its loop); a cancelled
    or failed run raises :class:`TrainingStopped`."""
    fields = {"normalisation": normalisation, "validation": validation, "max_train": max_train, "refit": refit}
    fields["unit"] = unit
    train_options = training.TrainOptions(**(fields | dict(options or {})))
    outcome = training.train_text(corpus_text, train_options, callback=callback, cancel=cancel, name=name, log=log)
    if outcome.result.stopped in training.STOPPED_BAD:
        reason = f" ({outcome.result.error})" if outcome.result.error else ""
        raise TrainingStopped(f"CHMM training {outcome.result.stopped}{reason}")
    summary = {"learner": "chmm", **outcome.summary, "parameters": chmm_parameters(outcome.model)}
    return outcome.model, summary


def _peer_text_learner(kind: str) -> TextLearner:
    """Peer learner ``kind`` as a text learner: :func:`train_peer_text` (``callback`` is the CHMM loop's and does not
    apply; ``cancel`` reaches a learner that trains in epochs), scored on the CPU only."""

    def train(corpus_text: str, options: dict[str, Any] | None = None, **settings: Any) -> tuple[Any, dict[str, Any]]:
        settings.pop("callback", None)
        return train_peer_text(corpus_text, kind, options, **settings)

    def score(model: Any, raw_text: str, backend: str = "cpu") -> inference.ScoreResult:
        if not engines.on_host(backend):
            raise CHMMError(f"the {kind} learner scores on the CPU only; leave out --backend {backend}")
        return score_peer_text(model, raw_text)

    return TextLearner(kind, train, score, lambda model: getattr(model, "kind", None) == kind)


def _is_chmm(model: Any) -> bool:
    return not any(getattr(model, "kind", None) == kind for kind in PEER_LEARNERS)


TEXT_LEARNERS: dict[str, TextLearner] = {
    "chmm": TextLearner("chmm", _train_chmm_text, reading.score_text, _is_chmm),
    **{kind: _peer_text_learner(kind) for kind in PEER_LEARNERS},
}
"""Every learner of :data:`LEARNERS` behind the one interface, by name."""


def text_learner_of(model: Any) -> TextLearner:
    """The learner a loaded model belongs to."""
    return next(learner for learner in TEXT_LEARNERS.values() if learner.owns(model))


def train_learner_text(
    corpus_text: str,
    kind: str,
    options: dict[str, Any] | None = None,
    *,
    normalisation: str = "paper",
    validation: float = 0.1,
    max_train: int | None = None,
    refit: bool = True,
    name: str = "corpus",
    callback: learning.ProgressCallback | None = None,
    cancel: learning.CancelToken | None = None,
    log: Callable[[str], None] | None = None,
    unit: str = text.UNITS[0],
) -> tuple[Any, dict[str, Any]]:
    """Train any learner of :data:`LEARNERS` on ``corpus_text`` by the same protocol and return the model and figures
    with the same keys (learner, train_bps, validation_bps, test_bps, seconds, parameters, ...): ``options`` are the
    learner's (:class:`engine.training.TrainOptions` fields for "chmm", a peer's constructor options otherwise);
    ``unit``: what one symbol is (characters, words or tokens), for every learner alike."""
    return TEXT_LEARNERS[_check_kind(kind)].train(
        corpus_text,
        options,
        normalisation=normalisation,
        validation=validation,
        max_train=max_train,
        refit=refit,
        name=name,
        callback=callback,
        cancel=cancel,
        log=log,
        unit=unit,
    )


# ------------------------------------------------------------------------------------------ files
def save_learner(learner: PeerLearner, path: str | Path) -> None:
    """Save a trained peer learner with its ``metadata`` (normalisation, vocabulary, alphabet, settings, figures),
    atomically: a failure leaves an existing file untouched."""
    learner.save(path, metadata=_plain(getattr(learner, "metadata", {}) or {}))


def load_any(path: str | Path) -> Any:
    """The model in ``path``: a peer learner when the file's header names one (its ``metadata`` attribute set from
    the file), else a dense or sparse CHMM through :func:`engine.backends.model_files.load_model` (which raises a clear
    ModelFormatError for a missing, damaged or foreign file). A peer file of an unknown kind or damaged raises
    PeerFormatError."""
    header = read_header(path)
    if header is None:
        return model_files.load_model(path)
    kind = header.get("kind")
    if kind not in PEER_LEARNERS:
        raise PeerFormatError(f"{path}: a peer-learner model of unknown kind {kind!r}")
    learner = learner_class(kind).load(path)
    metadata = header.get("metadata")
    learner.metadata = dict(metadata) if isinstance(metadata, dict) else {}
    return learner


def learner_kind(model: Any) -> str:
    """The learner name of a loaded model (the learner of :data:`TEXT_LEARNERS` that owns it)."""
    return text_learner_of(model).name


def is_peer(model: Any) -> bool:
    """Whether ``model`` is a peer learner's (a CHMM's is not)."""
    return learner_kind(model) in PEER_LEARNERS


# ------------------------------------------------------------------------------------------ scoring
def encode_for_learner(learner: PeerLearner, raw_text: str) -> np.ndarray:
    """Raw text normalised as the learner's training corpus was (normalisation and vocabulary in its metadata) and
    mapped to its alphabet's indices; characters outside the alphabet raise a clear CorpusError."""
    metadata = getattr(learner, "metadata", None) or {}
    symbols = metadata.get("symbols")
    if not symbols:
        raise CHMMError(f"this {learner.kind} model has no alphabet in its metadata (it was not saved by chmm train)")
    vocabulary = metadata.get("vocabulary")
    codec = TextCodec(
        metadata.get("normalisation", "raw"),
        None if vocabulary is None else tuple(vocabulary),
        metadata.get("unit", text.UNITS[0]),
    )
    normalised = codec.split(codec.normalise(raw_text))
    if not normalised:
        raise text.CorpusError("the text is empty after the model's normalisation")
    index = {symbol: i for i, symbol in enumerate(symbols)}
    unknown = sorted({c for c in normalised if c not in index})
    if unknown:
        shown = ", ".join(repr(c) for c in unknown[:10]) + (
            f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
        )
        raise text.CorpusError(f"the text has {len(unknown)} {codec.unit} outside the model's alphabet: {shown}")
    return np.fromiter((index[c] for c in normalised), dtype=np.int64, count=len(normalised))


def score_peer_text(learner: PeerLearner, raw_text: str) -> inference.ScoreResult:
    """Bits per symbol of raw text under a peer learner (normalised like its corpus), as a ScoreResult (peers
    smooth every probability, so there are no zero-probability events)."""
    x = encode_for_learner(learner, raw_text)
    bps = bits_per_symbol(learner, x)
    return inference.ScoreResult(bps, -bps * len(x), len(x), 0)


def score_any(model: Any, raw_text: str, backend: str = "cpu") -> inference.ScoreResult:
    """Bits per symbol of raw text under any loaded model, by its learner (:data:`TEXT_LEARNERS`): a peer on the CPU
    (a GPU request is refused), a CHMM by :func:`engine.backends.reading.score_text` on ``backend``."""
    return text_learner_of(model).score(model, raw_text, backend)
