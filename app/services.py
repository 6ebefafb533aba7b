"""Plain functions behind the pages' callbacks: each takes a session folder and the callback's inputs and returns
what the page shows, raising :class:`UserError` (or an engine error) with a one-sentence message on bad input.
The callbacks only unpack inputs, call these and format the result, so the tests call these directly.

Everything that computes goes through :mod:`engine.workflows` and :mod:`engine.text`.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import networkx as nx

from app import config, sessions
from engine import communities as communities_mod
from engine import errors, graph, scramble, text, workflows
from engine import export as export_mod
from engine.files import atomic_write_bytes
from engine.model import CHMM, ModelFormatError

PREVIEW_CHARS = 600
MAX_SAMPLE_LENGTH = 20_000
MAX_SCORE_CHARS = 1_000_000
MAX_SURPRISAL_CHARS = 2_000
"""The Generate page shades at most this many characters of scored text by their surprisal."""
MAX_DECODE_CHARS = 5_000
PRUNE_THRESHOLDS = [1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1]
PRUNE_VALIDATION_SHARE = 0.1
EXPORT_FORMATS = export_mod.FORMATS
EXPORT_DESCRIPTIONS = {
    "graphml": "GraphML (Gephi, Cytoscape, yEd, igraph)",
    "gexf": "GEXF (Gephi)",
    "cyjs": "Cytoscape JSON (.cyjs)",
    "pajek": "Pajek .net (Infomap, Pajek)",
    "clu": "Infomap .clu (top modules)",
    "tree": "Infomap .tree",
    "ftree": "Infomap .ftree (Network Navigator)",
    "npz": "NumPy arrays (.npz)",
}
EXPORTS = "exports"  # folder in the session folder for the export files
COMMUNITIES = sessions.COMMUNITIES  # the last community run of the session (summary and modules)
MAX_TRIALS = 100
MAX_GRAPH_ELEMENTS = 2_000
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363",
)  # fmt: skip
VISIBLE = {" ": "\u2423", "\n": "\u23ce", "\t": "\u21e5", "\r": "\u240d"}


class UserError(ValueError):
    """A problem with what the user supplied or asked for (the message is shown in the page as is)."""


def visible(symbol: str) -> str:
    """A symbol as shown in the page: whitespace as a visible glyph."""
    return VISIBLE.get(symbol, symbol)


describe_error = errors.sentence
"""The one-line message shown for an error raised by a service or the engine (see :func:`engine.errors.sentence`)."""


def plural(count: int, noun: str) -> str:
    """``count`` and the noun, plural unless the count is 1: "1 symbol", "2,000 symbols"."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def format_bytes(n: float) -> str:
    """Bytes in the largest unit that keeps the figure >= 1 (decimal units, as the size limits are stated)."""
    for unit in ("bytes", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")  # pragma: no cover




def decode_upload(contents: str | None, filename: str | None, max_bytes: int) -> bytes:
    """The bytes of a ``dcc.Upload`` ``contents`` data URI (``data:<type>;base64,<payload>``); UserError when
    nothing arrived, the payload is damaged, or the file is larger than ``max_bytes`` (checked before decoding)."""
    name = filename or "the file"
    if not contents:
        raise UserError("No file arrived; choose or drop a file.")
    header, sep, payload = contents.partition(",")
    if not sep or not header.startswith("data:") or ";base64" not in header:
        raise UserError(f"{name} arrived damaged (not a base64 data URI); try again.")
    estimated = len(payload) * 3 // 4
    if estimated > max_bytes + 2:
        limit = format_bytes(max_bytes)
        raise UserError(f"{name} is too large: about {format_bytes(estimated)}, the limit is {limit}.")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise UserError(f"{name} arrived damaged (invalid base64); try again.") from None
    if len(data) > max_bytes:
        raise UserError(f"{name} is too large: {format_bytes(len(data))}, the limit is {format_bytes(max_bytes)}.")
    return data


# ------------------------------------------------------------------------------------------ corpus
@dataclass
class CorpusInfo:
    """The session's corpus file: its name, size in bytes and characters."""

    name: str
    bytes: int
    characters: int


def store_corpus(folder: Path, contents: str | None, filename: str | None) -> CorpusInfo:
    """Validate an uploaded corpus (empty, binary, invalid UTF-8, too large: :class:`engine.text.CorpusError`
    with a clear message) and keep it as the session's corpus; a rejected upload keeps the previous corpus."""
    name = filename or "upload.txt"
    limit = config.max_upload_bytes()
    data = decode_upload(contents, name, limit)
    corpus_text = text.decode_bytes(data, name=name, max_bytes=limit)
    return _keep_corpus(folder, corpus_text, name, len(data))


def use_sample_corpus(folder: Path) -> CorpusInfo:
    """Make the bundled sample corpus (``sample_models/carroll-alice.txt``) the session's corpus."""
    if not config.SAMPLE_CORPUS.is_file():
        raise UserError("The bundled sample corpus is missing from this installation.")
    corpus_text = text.read_text(config.SAMPLE_CORPUS)
    return _keep_corpus(folder, corpus_text, config.SAMPLE_CORPUS.name, config.SAMPLE_CORPUS.stat().st_size)


def _keep_corpus(folder: Path, corpus_text: str, name: str, size: int) -> CorpusInfo:
    info = CorpusInfo(name=name, bytes=size, characters=len(corpus_text))
    atomic_write_bytes(folder / sessions.CORPUS, corpus_text.encode("utf-8"))
    atomic_write_bytes(folder / sessions.CORPUS_INFO, json.dumps(asdict(info)).encode("utf-8"))
    return info


def corpus_info(folder: Path) -> CorpusInfo | None:
    """The session's corpus, or None before one is uploaded."""
    try:
        info = json.loads((folder / sessions.CORPUS_INFO).read_text(encoding="utf-8"))
        if not (folder / sessions.CORPUS).is_file():
            return None
        return CorpusInfo(**info)
    except (OSError, ValueError, TypeError):
        return None


def read_corpus(folder: Path) -> tuple[str, CorpusInfo]:
    """The session corpus's text and info; UserError when there is none yet."""
    info = corpus_info(folder)
    if info is None:
        raise UserError("No corpus yet: upload a .txt file or use the sample corpus first.")
    return (folder / sessions.CORPUS).read_text(encoding="utf-8"), info


def corpus_preview(folder: Path, normalisation: str = "paper", validation: float = 0.1) -> dict[str, Any]:
    """Size, alphabet, split sizes and the start of the normalised training text of the session's corpus, as
    ``engine.text.prepare_corpus`` prepares it for training (CorpusError when it cannot be trained on)."""
    corpus_text, info = read_corpus(folder)
    corpus = text.prepare_corpus(corpus_text, normalisation=normalisation, validation=validation, name=info.name)
    return {
        "name": info.name,
        "bytes": info.bytes,
        "characters": info.characters,
        "normalisation": normalisation,
        "alphabet_size": corpus.n_symbols,
        "alphabet": "".join(visible(s) for s in corpus.symbols),
        "vocabulary": len(corpus.vocabulary) if corpus.vocabulary is not None else None,
        "train": len(corpus.train),
        "validation": len(corpus.validation),
        "test": len(corpus.test),
        "preview": corpus.train_text[:PREVIEW_CHARS],
    }


# ------------------------------------------------------------------------------------------ the current model
def load_current(folder: Path) -> CHMM:
    """The session's current model; UserError when it has none (no start model and nothing trained/loaded)."""
    path = sessions.current_model_path(folder)
    if not path.is_file():
        raise UserError("This session has no model yet: train one or load a saved .npz model.")
    return workflows.load_model(path)


def model_summary(folder: Path) -> dict[str, Any] | None:
    """What the Model page shows of the current model (None when the session has none)."""
    path = sessions.current_model_path(folder)
    if not path.is_file():
        return None
    model = workflows.load_model(path)
    meta = model.metadata
    settings = meta.get("settings") or {}
    return {
        "states": model.n_states,
        "alphabet_size": model.n_symbols,
        "symbols": [visible(s) for s in model.symbols],
        "clones": [int(c) for c in model.n_clones],
        "stored_entries": int(model.layout.size),
        "nonzeros": model.n_nonzero(),
        "file_bytes": path.stat().st_size,
        "corpus": meta.get("corpus"),
        "normalisation": meta.get("normalisation"),
        "algorithm": settings.get("algorithm"),
        "allocation": meta.get("allocation"),
        "seed": meta.get("seed"),
        "created": meta.get("created"),
        "stopped": meta.get("stopped"),
        "best_iteration": meta.get("best_iteration"),
        "refit_iterations": meta.get("refit_iterations"),
        "train_bps": meta.get("train_bps"),
        "validation_bps": meta.get("validation_bps"),
        "test_bps": meta.get("test_bps"),
        "sizes": meta.get("sizes"),
        "history": meta.get("history") or [],
        "pruned": meta.get("pruned"),
        "has_previous": sessions.previous_model_path(folder).is_file(),
    }


def load_model_upload(folder: Path, contents: str | None, filename: str | None) -> str:
    """Make an uploaded ``.npz`` model current (the old one becomes the previous model). A file that is not a
    model raises UserError and leaves the current model as it was."""
    name = filename or "the file"
    data = decode_upload(contents, name, config.max_model_upload_bytes())
    jobs_dir = folder / sessions.JOBS
    jobs_dir.mkdir(exist_ok=True)
    candidate = jobs_dir / f"upload-{uuid.uuid4().hex}.npz"
    candidate.write_bytes(data)
    try:
        model = workflows.load_model(candidate)
    except ModelFormatError as exc:
        candidate.unlink(missing_ok=True)
        reason = str(exc).replace(f"{candidate}: ", "").replace(str(candidate), name)
        raise UserError(f"{name} cannot be loaded: {reason}; the current model is unchanged.") from None
    except BaseException:
        candidate.unlink(missing_ok=True)
        raise
    sessions.install_model(folder, candidate)
    return f"Loaded {name}: {model.n_states:,} states over {model.n_symbols} symbols. It is now the current model."


def undo_model(folder: Path) -> str:
    """Swap the current model with the previous one (undo; again to redo)."""
    if not sessions.swap_previous(folder):
        raise UserError("There is no previous model to go back to.")
    return "Restored the previous model (the one it replaced is kept: undo again to switch back)."


def model_download(folder: Path) -> tuple[Path, str]:
    """The current model's file and the name the browser saves it under."""
    path = sessions.current_model_path(folder)
    if not path.is_file():
        raise UserError("This session has no model to download yet.")
    return path, "chmm-model.npz"


# ------------------------------------------------------------------------------------------ generate and score
def _whole_number(value: Any, what: str, low: int, high: int) -> int:
    if value is None or value == "":
        raise UserError(f"Enter {what}, a whole number from {low:,} to {high:,}.")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{what[:1].upper() + what[1:]} must be a whole number, got {value!r}.") from None
    if not number.is_integer() or not low <= number <= high:
        raise UserError(f"{what[:1].upper() + what[1:]} must be a whole number from {low:,} to {high:,}.")
    return int(number)


def sample(folder: Path, length: Any, seed: Any = 0, prefix: str | None = None) -> str:
    """``length`` characters sampled from the current model, continuing ``prefix`` when given."""
    n = _whole_number(length, "the length", 1, MAX_SAMPLE_LENGTH)
    s = _whole_number(seed if seed not in (None, "") else 0, "the seed", 0, 2**32 - 1)
    model = load_current(folder)
    try:
        return workflows.sample_text(model, n, seed=s, prefix=prefix or None)
    except ValueError as exc:  # CorpusError is a ValueError: a prefix empty after normalisation or off-alphabet
        raise UserError(f"The prefix cannot be used: {describe_error(exc)}") from None


def as_model_reads(folder: Path, raw_text: str) -> str:
    """``raw_text`` normalised like the current model's corpus (what sampling continues and scoring scores)."""
    model = load_current(folder)
    try:
        return model.decode_symbols(workflows.encode_for_model(model, raw_text))
    except ValueError as exc:
        raise UserError(f"The text cannot be read by the model: {describe_error(exc)}") from None


def score(folder: Path, raw_text: str | None) -> dict[str, Any]:
    """Bits per symbol of pasted text under the current model, and ``surprisal``: (character, bits) for each of
    the first :data:`MAX_SURPRISAL_CHARS` characters after normalisation."""
    if not raw_text or not raw_text.strip():
        raise UserError("Paste some text to score.")
    if len(raw_text) > MAX_SCORE_CHARS:
        raise UserError(
            f"The text is too long to score here: {len(raw_text):,} characters, at most {MAX_SCORE_CHARS:,}."
        )
    model = load_current(folder)
    try:
        result = workflows.score_text(model, raw_text)
        shown = raw_text[: MAX_SURPRISAL_CHARS * 2]  # normalisation never lengthens text by more than this
        normalised, bits = workflows.surprisal_text(model, shown)
    except ValueError as exc:
        raise UserError(f"The text cannot be scored: {describe_error(exc)}") from None
    characters = [(char, round(float(b), 3)) for char, b in zip(normalised, bits, strict=True)]
    return {
        "bps": result.bps,
        "symbols": result.symbols,
        "zero_probability_events": result.zero_probability_events,
        "surprisal": characters[:MAX_SURPRISAL_CHARS],
    }


# ------------------------------------------------------------------------------------------ decode scrambled text
def _decode_input(raw_text: str | None) -> str:
    if not raw_text or not raw_text.strip():
        raise UserError("Type or paste a sentence first.")
    if len(raw_text) > MAX_DECODE_CHARS:
        raise UserError(
            f"The text is too long to decode here: {len(raw_text):,} characters, at most {MAX_DECODE_CHARS:,}."
        )
    return raw_text


def scramble_sentence(folder: Path, raw_text: str | None, seed: Any = 0) -> str:
    """The sentence normalised like the current model's corpus, with every word's interior letters permuted."""
    return scramble_with_original(folder, raw_text, seed)["scrambled"]


def scramble_with_original(
    folder: Path, raw_text: str | None, seed: Any = 0, previous: dict[str, Any] | None = None
) -> dict[str, str]:
    """The scrambled sentence (see :func:`scramble_sentence`) and the sentence before scrambling, normalised the
    same way (``original``), which :func:`decode` can score the decoding against. Scrambling again the text a
    ``previous`` call returned keeps that call's original (the sentence before any scrambling)."""
    sentence = _decode_input(raw_text)
    s = _whole_number(seed if seed not in (None, "") else 0, "the seed", 0, 2**32 - 1)
    model = load_current(folder)
    try:
        original = workflows.normalise_for_decoding(model, sentence)
        scrambled = workflows.scramble_for_model(model, sentence, seed=s)
    except ValueError as exc:
        raise UserError(f"The text cannot be scrambled: {describe_error(exc)}") from None
    earlier = previous.get("original") if isinstance(previous, dict) else None
    if isinstance(earlier, str) and previous.get("scrambled") == original:  # type: ignore[union-attr]
        original = earlier
    return {"scrambled": scrambled, "original": original}


def decode(
    folder: Path, raw_text: str | None, constrained: bool = False, scrambled_from: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Decode a scrambled sentence under the current model: the decoded text, the input after normalisation,
    the changed runs (``spans``, and ``segments``: (text, changed) pieces of the decoded text in order), the
    number of changed characters, the decoding's log-probability and the time it took. When ``scrambled_from``
    (what :func:`scramble_with_original` returned) is the scrambling of this input, ``restored`` holds the word and
    character accuracy against the sentence before scrambling (else None)."""
    sentence = _decode_input(raw_text)
    model = load_current(folder)
    started = time.perf_counter()
    try:
        result = workflows.decode_text(model, sentence, constrained=bool(constrained))
    except ValueError as exc:
        raise UserError(f"The text cannot be decoded: {describe_error(exc)}") from None
    seconds = time.perf_counter() - started
    spans = scramble.change_spans(result.scrambled, result.decoded)
    segments: list[tuple[str, bool]] = []
    previous = 0
    for start, stop in spans:
        if start > previous:
            segments.append((result.decoded[previous:start], False))
        segments.append((result.decoded[start:stop], True))
        previous = stop
    if previous < len(result.decoded):
        segments.append((result.decoded[previous:], False))
    original = None
    if isinstance(scrambled_from, dict) and scrambled_from.get("scrambled") == result.scrambled:
        candidate = scrambled_from.get("original")
        if isinstance(candidate, str) and len(candidate) == len(result.decoded):
            original = candidate
    return {
        "decoded": result.decoded,
        "scrambled": result.scrambled,
        "spans": spans,
        "segments": segments,
        "changed": len(result.changed),
        "log_probability": result.log_probability,
        "relaxed_words": result.relaxed_words,
        "unresolved_words": result.unresolved_words,
        "constrained": bool(constrained),
        "seconds": seconds,
        "original": original,
        "restored": scramble.restoration(original, result.decoded)._asdict() if original is not None else None,
    }


# ------------------------------------------------------------------------------------------ prune
PRUNE_LOWEST, PRUNE_HIGHEST = 1e-5, 1e-1
"""The Prune page's range of thresholds (the slider's ends)."""


def threshold_from_slider(value: Any) -> float:
    """The pruning threshold for the slider's value (its base-10 logarithm, -5 to -1)."""
    try:
        exponent = float(value)
    except (TypeError, ValueError):
        raise UserError(f"The threshold slider gave {value!r}, not a number.") from None
    if not -5.0 <= exponent <= -1.0:
        raise UserError("The threshold must lie between 1e-5 and 1e-1.")
    return 10.0**exponent


def prune_threshold(value: Any) -> float:
    """A pruning threshold typed on the Prune page: a probability from 1e-5 to 0.1 (the slider's range)."""
    threshold = parse_threshold(value)
    if not PRUNE_LOWEST <= threshold <= PRUNE_HIGHEST * (1 + 1e-9):
        raise UserError(f"The threshold must lie between {PRUNE_LOWEST:g} and {PRUNE_HIGHEST:g}, got {value!r}.")
    return threshold


def prune_validation_text(folder: Path, model: CHMM | None = None) -> tuple[str, str]:
    """The text the sweep scores and where it comes from: the split the model's training held out (validation, or
    test after a refit) when the session's corpus (or the bundled sample corpus) is the text the model was trained
    on, else the last 10% of that corpus."""
    info = corpus_info(folder)
    if info is not None:
        corpus_text, name = (folder / sessions.CORPUS).read_text(encoding="utf-8"), info.name
    elif config.SAMPLE_CORPUS.is_file():
        corpus_text, name = text.read_text(config.SAMPLE_CORPUS), config.SAMPLE_CORPUS.name
    else:
        raise UserError("There is no text to score: upload a corpus on the Train page first.")
    model = load_current(folder) if model is None else model
    held_out = workflows.held_out_split_text(model, corpus_text)
    if held_out:
        split, part = held_out
        note = "" if part == "validation" else "; its validation part was trained on in the refit"
        return split, f"the model's held-out {part} split of {name} ({len(split):,} characters{note})"
    tail = corpus_text[int(len(corpus_text) * (1 - PRUNE_VALIDATION_SHARE)) :]
    if not tail.strip():
        raise UserError(f"The last {PRUNE_VALIDATION_SHARE:.0%} of {name} is empty; upload a longer corpus.")
    sizes = model.metadata.get("sizes") or {}
    why = "not the model's corpus"
    if sizes.get("validation") == 0:
        why = "the model was trained without a validation split"
    return tail, f"the last {PRUNE_VALIDATION_SHARE:.0%} of {name} ({len(tail):,} characters; {why})"


def prune_sweep(folder: Path, thresholds: list[float] | None = None) -> dict[str, Any]:
    """Kept share of the non-zeros and BPS of the validation text for each threshold (the paper's Fig 3(d))."""
    model = load_current(folder)
    validation, source = prune_validation_text(folder, model)
    try:
        points = workflows.prune_sweep_text(model, list(thresholds or PRUNE_THRESHOLDS), validation)
        unpruned = workflows.score_text(model, validation)
    except ValueError as exc:
        raise UserError(f"The sweep cannot score {source}: {describe_error(exc)}") from None
    return {
        "points": [point._asdict() for point in points],
        "bps_unpruned": unpruned.bps,
        "nonzeros": model.n_nonzero(),
        "source": source,
    }


def apply_prune(folder: Path, log10_threshold: Any = None, typed: Any = None) -> str:
    """Prune the current model at the slider's threshold (its base-10 logarithm) or at a ``typed`` one, and make the
    result current (the old model is kept for undo)."""
    threshold = prune_threshold(typed) if typed is not None else threshold_from_slider(log10_threshold)
    model = load_current(folder)
    validation, source = prune_validation_text(folder, model)
    try:
        outcome = workflows.prune_model(model, threshold=threshold, validation_text=validation)
    except ValueError as exc:
        raise UserError(f"The model cannot be pruned: {describe_error(exc)}") from None
    outcome.model.metadata["pruned"]["scored_on"] = source
    jobs_dir = folder / sessions.JOBS
    jobs_dir.mkdir(exist_ok=True)
    candidate = jobs_dir / f"prune-{uuid.uuid4().hex}.npz"
    try:
        workflows.save_model(outcome.model, candidate)
        sessions.install_model(folder, candidate)
    finally:
        candidate.unlink(missing_ok=True)
    s = outcome.summary
    return (
        f"Pruned at {threshold:.2g}: kept {s['nonzeros_after']:,} of {s['nonzeros_before']:,} non-zero transitions "
        f"({s['kept_fraction']:.1%}); BPS on {source}: {s['bps_before']:.4f} before, {s['bps_after']:.4f} after. "
        "It is now the current model (undo on the Model page goes back)."
    )


# ------------------------------------------------------------------------------------------ export
def parse_threshold(value: Any) -> float:
    """A pruning threshold typed by the user: a number strictly between 0 and 1 (e.g. ``1e-3``); the check is the
    engine's (:func:`engine.graph.check_threshold`), its message shown in the page."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise UserError("Enter a pruning threshold between 0 and 1, e.g. 1e-3.")
    try:
        return graph.check_threshold(value)
    except ValueError as exc:
        message = str(exc)
        raise UserError(message[0].upper() + message[1:] + ".") from None


def _reference_corpus(folder: Path, model: CHMM) -> str | None:
    """The raw text the generalized words are checked against (seen/novel): the session's corpus, or the bundled
    sample corpus when the model was trained on it; None when neither applies."""
    info = corpus_info(folder)
    if info is not None:
        return (folder / sessions.CORPUS).read_text(encoding="utf-8")
    if model.metadata.get("corpus") == config.SAMPLE_CORPUS.name and config.SAMPLE_CORPUS.is_file():
        return text.read_text(config.SAMPLE_CORPUS)
    return None


def _saved_community_options(folder: Path, threshold: float) -> communities_mod.CommunityOptions | None:
    """The Infomap settings of the session's last community run when it was made for the current model at this
    threshold (so an export's module ids match the Communities page), else None (the defaults)."""
    saved = read_communities(folder)
    if saved is None or abs(saved["threshold"] - threshold) > 1e-12 * threshold:
        return None
    return communities_mod.CommunityOptions(**saved["options"])


def export_graph(folder: Path, fmt: Any, threshold: Any = 1e-3, module: Any = None) -> tuple[Path, str, str]:
    """Export the current model's clone graph (pruned at ``threshold``), or one module's subgraph, in ``fmt``
    (:data:`EXPORT_FORMATS`) into the session's ``exports`` folder. Returns the file, the name the browser saves
    it under and a one-line description. Module ids are those of the Communities page's last run at the same
    threshold (Infomap's default settings when there is none)."""
    if fmt not in EXPORT_FORMATS:
        raise UserError(f"Choose an export format: one of {', '.join(EXPORT_FORMATS)}.")
    cut = parse_threshold(threshold)
    module_id = str(module).strip() if module is not None and str(module).strip() else None
    model = load_current(folder)
    stem = "clones" if module_id is None else f"module-{module_id.replace(':', '-')}"
    name = f"{stem}{export_mod.EXTENSIONS[fmt]}"
    out = folder / EXPORTS
    out.mkdir(exist_ok=True)
    try:
        figures = workflows.export_model_graph(
            model,
            out / name,
            fmt,
            module=module_id,
            threshold=cut,
            options=_saved_community_options(folder, cut),
            corpus_text=_reference_corpus(folder, model),
        )
    except communities_mod.ModuleNotFoundInResult as exc:
        raise UserError(f"{describe_error(exc)}.") from None
    what = "the whole clone graph" if module_id is None else f"module {module_id}"
    note = (
        f"Exported {what} as {EXPORT_DESCRIPTIONS[fmt]}: {figures['nodes']:,} clones, {figures['edges']:,} edges "
        f"(pruned at {cut:.2g}; {figures['modules']} top modules), {format_bytes((out / name).stat().st_size)}."
    )
    return out / name, name, note


# ------------------------------------------------------------------------------------------ communities
def _option_number(value: Any, what: str, low: int, high: int, default: int) -> int:
    return _whole_number(default if value in (None, "") else value, what, low, high)


def run_communities(
    folder: Path, trials: Any = 10, two_level: Any = False, seed: Any = 0, threshold: Any = None
) -> dict[str, Any]:
    """Run Infomap on the current model's clone graph (pruned at ``threshold``, default 1e-3) and save the result
    (run figures, settings, every module of the tree with its parent, children, words and clones) as
    ``communities.json`` in the session folder. Returns what was saved."""
    options = communities_mod.CommunityOptions(
        two_level=bool(two_level),
        trials=_option_number(trials, "the number of trials", 1, MAX_TRIALS, 10),
        seed=_option_number(seed, "the seed", 0, 2**31 - 1, 0),
    )
    threshold = workflows.DEFAULT_PRUNE_THRESHOLD if threshold in (None, "") else parse_threshold(threshold)
    model = load_current(folder)
    corpus_text = _reference_corpus(folder, model)
    result = workflows.model_communities(model, threshold, options, corpus_text)
    saved = {
        "model": sessions.model_stamp(folder),
        "threshold": threshold,
        "options": asdict(options),
        "reference": corpus_text is not None,
        "summary": result.summary(),
        "modules": [m.summary() | {"nodes": m.nodes.tolist()} for m in result.modules.values()],
    }
    atomic_write_bytes(folder / COMMUNITIES, json.dumps(saved, ensure_ascii=False).encode("utf-8"))
    return saved


def read_communities(folder: Path) -> dict[str, Any] | None:
    """The session's last community run, or None when there is none or it was made for another model."""
    try:
        saved = json.loads((folder / COMMUNITIES).read_text(encoding="utf-8"))
        if saved.get("model") != sessions.model_stamp(folder):
            return None
        return saved
    except (OSError, ValueError, TypeError):
        return None


def module_rows(saved: dict[str, Any], query: str | None = None, parent: str = "") -> list[dict[str, Any]]:
    """Table rows of the submodules of ``parent`` ("" for the top modules), most flow first, keeping those whose
    generalized words contain ``query`` (case-insensitive) or, for a single character, whose clones emit it."""
    wanted = (query or "").strip().lower()
    rows = []
    for module in sorted(saved["modules"], key=lambda m: -m["flow"]):
        if module.get("parent", "") != parent:
            continue
        words = [w["text"] for w in module["words"]]
        if wanted:
            in_chars = len(wanted) == 1 and (wanted in module["chars"].lower() or visible(wanted) in module["chars"])
            if not in_chars and not any(wanted in w.lower() for w in words):
                continue
        rows.append(
            {
                "id": module["id"],
                "name": module["name"],
                "size": module["size"],
                "flow": round(float(module["flow"]), 6),
                "chars": module["chars"],
                "words": " ".join(words[:5]),
                "submodules": len(module.get("children", [])),
            }
        )
    return rows


def module_trail(saved: dict[str, Any], module_id: str) -> list[tuple[str, str]]:
    """The breadcrumb of a module of a multilevel result: (id, label) from the top level ("", "All modules") down
    to ``module_id`` itself; an id that is not in the result gives just the top level."""
    by_id = {m["id"]: m for m in saved["modules"]}
    trail = [("", "All modules")]
    if module_id not in by_id:
        return trail
    parts = module_id.split(":")
    for depth in range(1, len(parts) + 1):
        key = ":".join(parts[:depth])
        trail.append((key, f"{key} {by_id[key]['name']}".strip()))
    return trail


def _colour(char: str) -> str:
    return PALETTE[sum(ord(c) for c in char) % len(PALETTE)]


KAMADA_KAWAI_NODES = 150
"""Subgraphs up to this many clones are laid out by Kamada-Kawai (slower, but weakly linked clones do not fly off)."""


def graph_positions(graph: nx.DiGraph, seed: int = 0) -> dict[Any, tuple[float, float]]:
    """2-D positions in [-1, 1] for drawing a module's subgraph, edge directions and weights ignored (a rare
    transition still places its clone next to its neighbour). Up to :data:`KAMADA_KAWAI_NODES` clones:
    Kamada-Kawai on hop distances, with clones in different connected pieces one hop further apart than the
    farthest connected pair (at the library's default of 10^6 they barely repel, and the pieces interleave);
    larger subgraphs: a spring layout (``seed``)."""
    if len(graph) == 0:
        return {}
    undirected = nx.Graph(graph)
    undirected.remove_edges_from(nx.selfloop_edges(undirected))
    if len(undirected) > KAMADA_KAWAI_NODES:
        positions = nx.spring_layout(undirected, seed=seed, weight=None)
    else:
        hops = dict(nx.shortest_path_length(undirected))
        far = max((d for row in hops.values() for d in row.values()), default=0) + 1
        distance = {u: {v: hops[u].get(v, far) for v in undirected} for u in undirected}
        positions = nx.kamada_kawai_layout(undirected, dist=distance, weight=None)
    return {node: (float(x), float(y)) for node, (x, y) in positions.items()}


def module_detail(folder: Path, module_id: Any, seed: int = 0) -> dict[str, Any]:
    """A top module of the last community run: its generalized words (with seen/novel when a reference text was
    available) and its subgraph as dash-cytoscape elements with preset positions (:func:`graph_positions`, ``seed``
    for large subgraphs), at most :data:`MAX_GRAPH_ELEMENTS` elements: the clones with the most flow and then the
    most probable edges are kept, with a note saying so."""
    saved = read_communities(folder)
    if saved is None:
        raise UserError("Run Infomap first (the current model has no community result yet).")
    key = str(module_id).strip() if module_id is not None else ""
    module = next((m for m in saved["modules"] if m["id"] == key), None)
    if module is None:
        top = sum(1 for m in saved["modules"] if not m.get("parent"))
        raise UserError(f"Module {key!r} does not exist: the result has top modules 1..{top} (submodules 1:1, ...).")
    graph = workflows.model_graph(load_current(folder), saved["threshold"])
    flows = {node: float(graph.flow[node]) for node in module["nodes"]}
    nodes = sorted(module["nodes"], key=lambda n: -flows[n])[:MAX_GRAPH_ELEMENTS]
    G = export_mod.to_networkx(graph, nodes=nodes)
    edges = sorted(G.edges(data=True), key=lambda e: -e[2]["weight"])[: max(0, MAX_GRAPH_ELEMENTS - len(nodes))]
    kept = nx.DiGraph(**G.graph)
    kept.add_nodes_from(G.nodes(data=True))
    kept.add_edges_from(edges)
    total = module["size"] + G.number_of_edges()
    positions = graph_positions(kept, seed)
    elements = export_mod.cytoscape_elements(kept)
    for element in elements:
        data = element["data"]
        if "source" in data:
            data["width"] = round(0.5 + 5.0 * float(data["weight"]), 3)
        else:
            x, y = positions[data["id"]]
            element["position"] = {"x": round(float(x) * 300, 2), "y": round(float(y) * 300, 2)}
            data["char"] = visible(data["char"])
            data["colour"] = _colour(data["char"])
    note = None
    if len(elements) < total:
        note = (
            f"Showing {len(elements):,} of {total:,} elements (the {kept.number_of_nodes():,} clones with the most "
            f"flow and the {kept.number_of_edges():,} most probable edges among them)."
        )
    return {
        "id": module["id"],
        "name": module["name"],
        "size": module["size"],
        "flow": module["flow"],
        "chars": module["chars"],
        "words": module["words"],
        "reference": saved["reference"],
        "elements": elements,
        "note": note,
    }
