"""The interface every peer learner implements, the shared BPS scorer and the pickle-free file format."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from engine.errors import CHMMError
from engine.model import archive

PEER_FORMAT = archive.PEER_FORMAT
PEER_FORMAT_VERSION = 1


class PeerFormatError(CHMMError):
    """A file that is not a readable peer-learner model of the expected kind."""


class PeerLearner(Protocol):
    """What the CLI, the benchmarks and the app need from a learner.

    ``kind`` names the learner ("ngram", "pdfa", "densehmm", "hmm"); ``fit`` trains on int64 symbol indices in
    [0, n_symbols) (``validation`` may choose hyper-parameters such as the n-gram order) and returns self;
    ``predictive(x)[n]`` is P(x_n | x_<n) under the model, strictly positive (a learner smooths or backs off so
    that any text in the alphabet has a finite code length); ``n_parameters`` counts free parameters.
    """

    kind: str

    def fit(self, train: np.ndarray, n_symbols: int, validation: np.ndarray | None = None) -> PeerLearner: ...

    def predictive(self, x: np.ndarray) -> np.ndarray: ...

    @property
    def n_parameters(self) -> int: ...

    def save(self, path: str | os.PathLike[str], metadata: dict[str, Any] | None = None) -> None: ...


def as_symbols(x: Any, n_symbols: int, what: str = "sequence", allow_empty: bool = False) -> np.ndarray:
    """``x`` as a 1-D int64 array of symbol indices in [0, n_symbols), or ValueError saying what is wrong."""
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise CHMMError(f"{what} must be a 1-D array of symbol indices, got shape {arr.shape}")
    if arr.size == 0:
        if allow_empty:
            return np.zeros(0, dtype=np.int64)
        raise CHMMError(f"{what} is empty")
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise CHMMError(f"{what} must hold integer symbol indices, got dtype {arr.dtype}")
    out = np.ascontiguousarray(arr, dtype=np.int64)
    low, high = int(out.min()), int(out.max())
    if low < 0 or high >= n_symbols:
        bad = low if low < 0 else high
        raise CHMMError(f"{what} holds symbol {bad}, outside [0, {n_symbols})")
    return out


def bits_per_symbol(learner: PeerLearner, x: np.ndarray) -> float:
    """BPS = -(1/N) sum_n log2 P(x_n | x_<n), the paper's figure, from the learner's predictive probabilities."""
    x = np.asarray(x, dtype=np.int64)
    if x.size == 0:
        raise CHMMError("cannot score an empty sequence")
    p = np.asarray(learner.predictive(x), dtype=np.float64)
    if p.shape != x.shape or not np.all(p > 0) or not np.all(np.isfinite(p)):
        raise CHMMError(f"{learner.kind}: predictive probabilities must be finite and positive, one per symbol")
    return float(-np.mean(np.log2(p)))


def save_arrays(path: str | os.PathLike[str], kind: str, arrays: dict[str, np.ndarray], header: dict[str, Any]) -> None:
    """Write ``arrays`` and a JSON ``header`` (plain types only) as one ``.npz`` (no pickle), atomically: a temporary
    file in the same folder is renamed over ``path``, so a failure leaves an existing file intact."""
    from engine.model.dense import write_npz_atomic

    full = {"format": PEER_FORMAT, "format_version": PEER_FORMAT_VERSION, "kind": kind, **header}
    write_npz_atomic(path, arrays, full, compressed=True)


def read_header(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The JSON header of a peer-learner file, or None if ``path`` is not one (e.g. a CHMM model); read in bounded
    memory."""
    header = archive.read_header(path)
    if header is not None and header.get("format") == PEER_FORMAT:
        return header
    return None


def load_arrays(
    path: str | os.PathLike[str], kind: str, max_bytes: int = archive.MAX_MODEL_BYTES
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a file written by :func:`save_arrays` for learner ``kind``; anything else raises PeerFormatError.

    Read as untrusted input (:class:`engine.model.archive.ModelArchive`): only the members the header's manifest lists,
    each checked against its declared size and all of them against ``max_bytes`` before it is inflated (each
    learner checks its arrays' shapes against one another after)."""
    path = Path(path)
    if not path.is_file():
        raise PeerFormatError(f"{path}: no such model file")
    try:
        with archive.ModelArchive(path, max_bytes=max_bytes) as reader:
            header = reader.header
            if header.get("format") != PEER_FORMAT:
                raise PeerFormatError(f"{path}: not a peer-learner model")
            if header.get("kind") != kind:
                raise PeerFormatError(f"{path}: a {header.get('kind')!r} model, not {kind!r}")
            if header.get("format_version") != PEER_FORMAT_VERSION:
                raise PeerFormatError(f"{path}: format version {header.get('format_version')} is not supported")
            arrays = {name: reader.array(name) for name in sorted(reader.names)}
    except archive.ArchiveError as exc:
        raise PeerFormatError(f"{path}: not a readable peer-learner model ({exc})") from None
    for key, kind_of in (("metadata", dict), ("history", list)):
        if key in header and not isinstance(header[key], kind_of):
            raise PeerFormatError(f"{path}: damaged model (its {key} is not a JSON {kind_of.__name__})")
    for name, values in arrays.items():
        if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
            raise PeerFormatError(f"{path}: damaged model (array {name} holds non-finite values)")
    return arrays, header
