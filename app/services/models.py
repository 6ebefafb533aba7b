"""The session's current model: its summary, loading a model file, downloading it, undo."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Any

from app import config, memory, sessions
from app.jobs import read_json
from app.services import UserError, file_name, kept, visible
from app.services.corpus import decode_upload
from engine import api
from engine.api import CHMM
from engine.errors import CHMMError
from engine.files import atomic_write_bytes, atomic_write_json


# ------------------------------------------------------------------------------------------ the current model
def load_current(folder: Path) -> CHMM:
    """The session's current model; UserError when it has none (no start model and nothing trained/loaded)."""
    path = sessions.current_model_path(folder)
    if not path.is_file():
        raise UserError("This session has no model yet: train one or load a saved .npz model.")
    return api.load_model(path, max_bytes=config.max_model_memory_bytes())


def view_model(folder: Path) -> CHMM:
    """The session's current model for reading (the views: graphs, words, samples, decoding), loaded once per
    version of its file and kept (:func:`kept_model`); shared, so never changed by its callers."""
    path = sessions.current_model_path(folder)
    if not path.is_file():
        return load_current(folder)  # says why there is none
    return kept_model(path)


def kept_model(path: Path) -> CHMM:
    """The model file ``path`` loaded once per version of the file in this process and kept
    (:mod:`app.services.kept`): requests that want it at once wait for one load, which reserves what it takes from
    the server's memory budget first (:func:`load_charge`; :class:`app.memory.ServerBusy` when there is no room)."""
    limit = config.max_model_memory_bytes()
    return kept.kept(
        ("model", limit),
        [path],
        lambda: api.load_model(path, max_bytes=limit),
        charge=lambda: load_charge(path),
        label="Loading this model",
    )


def load_charge(path: Path) -> int:
    """The most memory loading the model file ``path`` takes (:func:`engine.api.model_load_bytes`, from its zip
    directory; within the app's bound on a model's memory plus its parsed header)."""
    return api.model_load_bytes(path)


PRUNE_T_COPIES = 3.5
"""What pruning a model (the clone graph of a view, an Infomap run, a prune) takes beside it, in copies of its
transitions: 3.25 measured at its peak (a 576 MB T: +1,871 MB; :func:`engine.model.pruning.prune`), and
:data:`PRUNE_COUNT_COPIES` of its expected counts when it keeps them."""
PRUNE_COUNT_COPIES = 2


def transition_bytes(model: Any) -> int:
    """The bytes of a model's stored transitions: T for dense blocks, the values and column indices of sparse ones."""
    if hasattr(model, "indices"):  # CSR blocks
        return int(model.data.nbytes + model.indices.nbytes)
    return int(model.T.nbytes)


def prune_bytes(model: Any) -> int:
    """The most memory pruning ``model`` takes beside it (:data:`PRUNE_T_COPIES`)."""
    counts = getattr(model, "counts", None)
    extra = 0 if counts is None else PRUNE_COUNT_COPIES * int(counts.nbytes)
    return int(PRUNE_T_COPIES * transition_bytes(model)) + extra


GRAPH_EDGE_BYTES = 64
"""What the clone graph takes per edge beside the pruning that makes it (its CSR arrays, flows and attributes)."""
INFOMAP_EDGE_BYTES = 300
"""What an Infomap run takes per edge of the clone graph it partitions, the graph included, beside the pruning that
makes it: a model of 40 MB of T with 776,648 edges at 1e-3 took +157 MB to build its graph, +297 MB to run Infomap
(one trial), against 189 and 372 MB charged."""


INCOMING_EDGE_BYTES = 48
"""What computing the clone graph by columns (the inspector's incoming shares) takes per edge at its peak: the
flows as a CSR matrix, its CSC copy and the division's temporaries (776,648 edges: +20-24 MB beside the graph)."""
DETAIL_BYTES = 16_000_000
DETAIL_EDGE_BYTES = 32
"""What computing a module's card takes: :data:`DETAIL_BYTES` for its at most :data:`MAX_GRAPH_ELEMENTS` elements
as Python objects and their layout, and per edge of the clone graph its degree's edge lists (a module of every
clone of a graph of 776,648 edges: +31-37 MB beside the graph)."""


def graph_bytes(model: Any, threshold: float) -> int:
    """The most memory building ``model``'s clone graph at ``threshold`` takes beside the model: the pruning
    (:func:`app.services.models.prune_bytes`) and :data:`GRAPH_EDGE_BYTES` per edge."""
    return prune_bytes(model) + GRAPH_EDGE_BYTES * api.graph.graph_edges(model, threshold)


def infomap_bytes(model: Any, threshold: float) -> int:
    """The most memory an Infomap run on ``model``'s clone graph at ``threshold`` takes beside the model: the pruning
    and :data:`INFOMAP_EDGE_BYTES` per edge."""
    return prune_bytes(model) + INFOMAP_EDGE_BYTES * api.graph.graph_edges(model, threshold)


WRITER_EDGE_BYTES = {"gexf": 2_000, "cyjs": 500}
"""What an export's writer holds per edge beyond the clone graph and its Infomap run, by format (networkx's GEXF
writer builds the whole document as an element tree: 859 MB at 310,979 edges against 325 MB for Pajek; Cytoscape JSON
449 MB; GraphML streams: 321 MB); the formats not named hold nothing more."""


def export_bytes(model: Any, threshold: float, fmt: str, infomap: bool) -> int:
    """The most memory exporting ``model``'s clone graph at ``threshold`` in ``fmt`` takes beside the model: the
    graph and, with ``infomap``, an Infomap run made for the export (:func:`infomap_bytes`, else :func:`graph_bytes`),
    and the writer's own (:data:`WRITER_EDGE_BYTES`)."""
    base = infomap_bytes(model, threshold) if infomap else graph_bytes(model, threshold)
    return base + WRITER_EDGE_BYTES.get(fmt, 0) * api.graph.graph_edges(model, threshold)


SUMMARY = sessions.SUMMARY
"""The current model's summary, kept beside it with the file identity it was made for (read by every page load:
the navigation bar's badge and the Model page), so the model itself is read once per version, not per page."""


def model_summary(folder: Path) -> dict[str, Any] | None:
    """What the Model page shows of the current model (None when the session has none); read from the session's
    summary file when it was made for this very file (device, inode, size, modification time), else computed by
    loading the model and saved."""
    path = sessions.current_model_path(folder)
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    identity = [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns]
    # a file shared by sessions (the start model, hard-linked into each new one) is summarised once for all of them:
    # 8 newcomers at once each loaded a 152 MB start model in the web worker (15-21 s, +1.6 GB; issue 51)
    places = [folder / SUMMARY]
    if stat.st_nlink > 1:
        places.append(config.data_dir() / sessions.START / f"summary-{'-'.join(map(str, identity))}.json")
    summary, missing = None, []
    for place in places:
        saved = read_json(place) or {}
        if saved.get("identity") == identity and isinstance(saved.get("summary"), dict):
            summary = saved["summary"] if summary is None else summary
        else:
            missing.append(place)
    if summary is None:
        summary = _summarise(path)
    for place in missing:
        with contextlib.suppress(OSError):  # a full disk only costs the next page a model load
            place.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(place, {"identity": identity, "summary": summary})
    return summary | {"has_previous": sessions.previous_model_path(folder).is_file()}


NOISE_FLOOR = 1e-5
"""Transitions below this are counted apart on the Model page: on trained models almost all the stored entries
are the pseudocount's trace (98.5% of 1.25 M on a 1,200-state model), so "non-zero" says little."""


def _summarise(path: Path) -> dict[str, Any]:
    model = kept_model(path)  # the pages that follow read it too
    meta = model.metadata
    settings = meta.get("settings") or {}
    return {
        "states": model.n_states,
        "alphabet_size": model.n_symbols,
        "symbols": [visible(s) for s in model.symbols],
        "clones": [int(c) for c in model.n_clones],
        "stored_entries": int(model.layout.size),
        "nonzeros": model.n_nonzero(),
        "above_floor": api.graph.graph_edges(model, NOISE_FLOOR),
        "file_bytes": path.stat().st_size,
        "corpus": file_name(meta.get("corpus")) or None,
        "normalisation": model.codec.normalisation,
        "unit": model.codec.unit,
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
    }


def transitions_text(summary: dict[str, Any]) -> str:
    """Stored entries, and how many are real transitions (at least the noise floor) rather than the pseudocount's
    trace; the exact zeros of a pruned model are counted apart."""
    stored, nonzero = summary["stored_entries"], summary["nonzeros"]
    above = summary.get("above_floor")
    text = f"{stored:,} stored"
    if nonzero < stored:
        text += f", {nonzero:,} non-zero ({stored - nonzero:,} set to zero)"
    if above is not None:
        below = nonzero - above
        text += f"; {above:,} of at least {NOISE_FLOOR:g}"
        if nonzero and below:
            text += f" ({below / nonzero:.1%} of the non-zero are smaller: pseudocount noise)"
    return text


MODEL_TOO_LARGE = (
    "; `chmm prune MODEL -o SMALLER.npz` writes a smaller copy (a model trained by `chmm train` with its default "
    "--prune-bound and without --keep-statistics is small already), or the server's CHMM_MAX_MODEL_MB raises the limit"
)
"""What the refusal of a model over the upload limit tells people to do (the end of its one sentence)."""


def load_model_upload(folder: Path, contents: str | None, filename: str | None) -> str:
    """Make an uploaded ``.npz`` model current (the old one becomes the previous model). A file that is not a
    model raises UserError and leaves the current model as it was."""
    name = filename or "the file"
    jobs_dir = folder / sessions.JOBS
    jobs_dir.mkdir(exist_ok=True)
    candidate = jobs_dir / f"upload-{uuid.uuid4().hex}.npz"
    sent, limit = sessions.upload_path(folder, contents), config.max_model_upload_bytes()
    if sent is not None and sent.stat().st_size <= limit:  # arrived through the upload route: moved, not read
        os.replace(sent, candidate)
    else:
        data = decode_upload(contents, name, limit, MODEL_TOO_LARGE, folder=folder)
        sessions.check_space(folder, len(data), "This model")
        atomic_write_bytes(candidate, data)  # a full disk leaves no partial file
    try:
        with memory.reserved(load_charge(candidate), "Checking this model"):
            model = api.load_model(candidate, max_bytes=config.max_model_memory_bytes())
            states, symbols = model.n_states, model.n_symbols
            del model
    except CHMMError as exc:
        candidate.unlink(missing_ok=True)
        reason = str(exc).replace(f"{candidate}: ", "").replace(str(candidate), name)
        raise UserError(f"{name} cannot be loaded: {reason}; the current model is unchanged.") from None
    except MemoryError:  # the server's memory, not the file: the file may be fine
        candidate.unlink(missing_ok=True)
        raise UserError(
            f"{name} could not be checked: the server ran out of memory; the current model is unchanged, try again "
            "in a moment."
        ) from None
    except BaseException:
        candidate.unlink(missing_ok=True)
        raise
    sessions.install_model(folder, candidate)
    return f"Loaded {name}: {states:,} states over {symbols} symbols. It is now the current model."


def undo_model(folder: Path) -> str:
    """Swap the current model with the previous one (undo; again to redo)."""
    if not sessions.swap_previous(folder):
        raise UserError("There is no previous model to go back to.")
    return "Restored the previous model (the one it replaced is kept: undo again to switch back)."
