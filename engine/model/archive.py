"""Reading the project's ``.npz`` files (dense and sparse CHMMs, peer learners) as untrusted input, in bounded memory.

An ``.npz`` is a zip archive of ``.npy`` members. ``numpy.load`` inflates whatever member is asked for, so a small
file can ask for gigabytes (a member of zeros deflates about 1000:1), and nothing stops a file from carrying
members no loader uses. :class:`ModelArchive` reads such a file the other way round:

- the JSON header (member ``header_json``) is read first, at most :data:`MAX_HEADER_BYTES`;
- the header's manifest (its ``arrays`` list) names every other member; a member it does not name, a name listed
  twice or a member that is not an ``.npy`` is refused before anything else is read;
- an array is read only when a loader asks for it, with the shape the loader derives from what it has read already
  (the block layout fixes T, pi and the CSR arrays exactly): its ``.npy`` header (shape, dtype, at most
  :data:`MAX_NPY_HEADER_BYTES`) is parsed, object dtypes are refused, the zip entry's declared uncompressed size
  must equal the ``.npy`` header plus the array's bytes, and all arrays of one file together must stay within the
  reader's ``max_bytes``, all before a byte of the array is inflated;
- the bytes are then read into the array in chunks, so a member that inflates past its declared size is cut off by
  ``zipfile`` (and fails its CRC check) rather than growing memory.

Errors are :class:`ArchiveError` sentences without the path; each loader prefixes its own file name and kind.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Collection
from typing import Any

import numpy as np

from engine.errors import CHMMError

PEER_FORMAT = "chmm-explorer-peer"
"""The ``format`` of a peer learner's model file header (:mod:`engine.peers.base` writes and reads such files; a
CHMM reader refuses them by it)."""

MAX_HEADER_BYTES = 16 << 20
"""The largest JSON header read (alphabet, vocabulary, metadata and training history of a model; a model of War and
Peace with its search and restarts has under 1 MB)."""

HEADER_OBJECT_FACTOR = 51
"""The memory reading a JSON header takes at most, as a multiple of its bytes, counted against a reader's
``max_bytes`` before the header is parsed: its Python objects take up to 48 times its bytes (measured, CPython 3.11:
nested one-item lists 47.8, ``[{}, {}, ...]`` 24.9, one-key objects 23.9, short strings 12.6, numbers 6-8) and
the bytes read, their copy and the decoded text 3 more. It was 16 (10 to 15 for a header of short strings), which a
header of ``{}`` passed threefold (issue 51: +812 MB for a 3.2 MB file, charged 268 MB)."""

MAX_NPY_HEADER_BYTES = 10_000
"""The largest ``.npy`` header parsed (numpy's own default limit)."""

MAX_MODEL_BYTES = 16 << 30
"""The default bound on the bytes of all arrays read from one file (the app passes its own, smaller one)."""

HEADER_MEMBER = "header_json"
_CHUNK = 1 << 22


class ArchiveError(CHMMError):
    """Why an ``.npz`` file cannot be read (a sentence without the file's path)."""


def _size(value: int) -> str:
    return f"{value / 2**20:,.1f} MiB" if value >= 2**20 else f"{value:,} bytes"


class ModelArchive:
    """An ``.npz`` model file opened for bounded reading (see the module docstring); use as a context manager.

    ``known``: the member names a file of this kind may hold (None: whatever its manifest lists);
    ``max_bytes``: the bound on the bytes of all arrays read through this reader."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        known: Collection[str] | None = None,
        max_bytes: int = MAX_MODEL_BYTES,
        check_manifest: bool = True,
    ) -> None:
        self.max_bytes = int(max_bytes)
        self.used = 0
        try:
            self._zip = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            raise ArchiveError(f"not an .npz archive ({exc})") from None
        try:
            self._members = self._index(known)
            self.header = self._read_header()
            if check_manifest:
                self._check_manifest(known)
        except BaseException:
            self._zip.close()
            raise

    def __enter__(self) -> ModelArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()

    @property
    def names(self) -> set[str]:
        """The array names of the file (its manifest), without the header."""
        return set(self._members) - {HEADER_MEMBER}

    def _index(self, known: Collection[str] | None) -> dict[str, zipfile.ZipInfo]:
        members: dict[str, zipfile.ZipInfo] = {}
        for info in self._zip.infolist():
            name = info.filename
            if not name.endswith(".npy") or "/" in name:
                raise ArchiveError(f"it holds a member {name[:80]!r} that is not an array of this file")
            stem = name[: -len(".npy")]
            if stem in members:
                raise ArchiveError(f"it holds the member {stem[:80]!r} twice")
            members[stem] = info
        if HEADER_MEMBER not in members:
            exported = "edge_flow" in members and "metadata_json" in members
            what = "an exported clone graph, not a model" if exported else "arrays of another kind, missing header_json"
            raise ArchiveError(what)
        unknown = sorted(set(members) - {HEADER_MEMBER} - set(known)) if known is not None else []
        if unknown:
            raise ArchiveError(f"it holds a member {unknown[0][:80]!r} that no file of this kind has")
        return members

    def charge(self, nbytes: int, what: str) -> None:
        """Count ``nbytes`` that a loader is about to allocate beyond the arrays (``what``, for the sentence) against
        ``max_bytes``, before it allocates them: :class:`ArchiveError` when they would pass it."""
        if self.used + nbytes > self.max_bytes:
            raise ArchiveError(f"{what} would take {_size(nbytes)}, more than a model may take in memory here")
        self.used += nbytes

    def _read_header(self) -> dict[str, Any]:
        raw = self._read(HEADER_MEMBER, limit=MAX_HEADER_BYTES, count=False)
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ArchiveError("its header is not a byte string")
        self.charge(raw.nbytes * HEADER_OBJECT_FACTOR, "its JSON header, parsed,")
        try:
            header = json.loads(raw.tobytes().decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ArchiveError(f"its header is not JSON ({exc})") from None
        except RecursionError:  # nested deeper than the parser goes (a hostile file; was an HTTP 500)
            raise ArchiveError("its header is nested too deeply to be a model's") from None
        if not isinstance(header, dict):
            raise ArchiveError("its header is not a JSON object")
        return header

    def _check_manifest(self, known: Collection[str] | None) -> None:
        listed = self.header.get("arrays")
        if listed is None:  # files written before the manifest: the members are checked against ``known`` only
            if known is None:
                raise ArchiveError("its header lists no arrays")
            return
        if not isinstance(listed, list) or not all(isinstance(name, str) for name in listed):
            raise ArchiveError("its list of arrays is not a list of names")
        extra = sorted(self.names - set(listed))
        if extra:
            raise ArchiveError(f"it holds a member {extra[0][:80]!r} that its header does not list")
        missing = sorted(set(listed) - self.names)
        if missing:
            raise ArchiveError(f"array(s) {', '.join(missing)} missing")

    def array(
        self, name: str, shape: tuple[int, ...] | None = None, ndim: int | None = None, kind: str | None = None
    ) -> np.ndarray:
        """Array ``name``, checked before it is inflated: exactly ``shape`` when given (else ``ndim`` dimensions when
        given), of a dtype whose kind is in ``kind`` ("f" floating, "i" signed, "iu" any integer) when given, and
        within the reader's remaining byte budget."""
        if name not in self._members or name == HEADER_MEMBER:
            raise ArchiveError(f"array {name} missing")
        return self._read(name, shape=shape, ndim=ndim, kind=kind)

    def _read(
        self,
        name: str,
        shape: tuple[int, ...] | None = None,
        ndim: int | None = None,
        kind: str | None = None,
        limit: int | None = None,
        count: bool = True,
    ) -> np.ndarray:
        info = self._members[name]
        try:
            with self._zip.open(info) as stream:
                version = np.lib.format.read_magic(stream)
                if version == (1, 0):
                    found, fortran, dtype = np.lib.format.read_array_header_1_0(stream, MAX_NPY_HEADER_BYTES)
                elif version in ((2, 0), (3, 0)):
                    found, fortran, dtype = np.lib.format.read_array_header_2_0(stream, MAX_NPY_HEADER_BYTES)
                else:
                    raise ArchiveError(f"array {name} has an unknown .npy version {version}")
                if dtype.hasobject:
                    raise ArchiveError(f"array {name} holds Python objects, which are never loaded")
                if kind is not None and dtype.kind not in kind:
                    wanted = "floating point" if kind == "f" else "integers"
                    raise ArchiveError(f"array {name} holds {dtype} values, not {wanted}")
                if shape is not None and tuple(found) != tuple(shape):
                    raise ArchiveError(f"array {name} has shape {tuple(found)}, its layout needs {tuple(shape)}")
                if ndim is not None and len(found) != ndim:
                    raise ArchiveError(f"array {name} has {len(found)} dimensions, not {ndim}")
                nbytes = dtype.itemsize
                for extent in found:
                    nbytes *= int(extent)  # Python integers: no overflow
                header_bytes = stream.tell()
                if info.file_size != header_bytes + nbytes:
                    raise ArchiveError(
                        f"array {name} declares {_size(info.file_size - header_bytes)} for an array of {_size(nbytes)}"
                    )
                if limit is not None and nbytes > limit:
                    raise ArchiveError(f"array {name} takes {_size(nbytes)}, more than the {_size(limit)} allowed")
                if count and self.used + nbytes > self.max_bytes:
                    raise ArchiveError(
                        f"its arrays take more than the {_size(self.max_bytes)} a model may take in memory here "
                        f"(array {name} alone is {_size(nbytes)})"
                    )
                values = np.empty(found, dtype=dtype, order="F" if fortran else "C")
                target = memoryview(values.T if fortran else values).cast("B") if nbytes else memoryview(b"")
                filled = 0
                while filled < nbytes:
                    got = stream.readinto(target[filled : filled + _CHUNK])
                    if not got:
                        raise ArchiveError(f"array {name} is cut short")
                    filled += got
                if count:
                    self.used += nbytes
                return values
        except ArchiveError:
            raise
        except MemoryError:  # the machine's or a job's memory, not the file: never said as "not a readable model"
            raise
        except Exception as exc:  # zlib and zip errors, an unsupported compression method, bad .npy headers
            raise ArchiveError(f"array {name} cannot be read ({type(exc).__name__}: {exc})") from None


def read_header(path: str | os.PathLike[str], max_bytes: int = MAX_MODEL_BYTES) -> dict[str, Any] | None:
    """The JSON header of an ``.npz`` file of this project, or None if it is not one or its header, parsed, would
    take more than ``max_bytes`` (read in bounded memory)."""
    try:
        with ModelArchive(path, check_manifest=False, max_bytes=max_bytes) as archive:
            return archive.header
    except ArchiveError:
        return None


MAX_CLONE_TABLE_BYTES = 64 << 20
"""The largest ``n_clones`` member :func:`stored_states` reads (8 million symbols)."""


def stored_states(path: str | os.PathLike[str]) -> int | None:
    """The states (clones) of the model file ``path``: the sum of its ``n_clones`` array, read alone, without the
    header (whose symbols a file of 300,000 of them takes 155 MiB and seconds to parse); None when the file has no
    such readable member of at most :data:`MAX_CLONE_TABLE_BYTES`."""
    try:
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo("n_clones.npy")
            if info.file_size > MAX_CLONE_TABLE_BYTES:
                return None
            with archive.open(info) as member:
                clones = np.load(io.BytesIO(member.read(MAX_CLONE_TABLE_BYTES + 1)), allow_pickle=False)
    except (KeyError, zipfile.BadZipFile, OSError, EOFError, ValueError):
        return None
    if clones.ndim != 1 or clones.dtype.kind not in "iu":
        return None
    return int(clones.astype(np.int64).sum())


LOAD_CHECK_SHARE = 0.25
"""What a loader's checks of an array take beside it, as a share of its bytes: one boolean per float32 value
(finite, non-negative), one temporary at a time."""

LOAD_OVERHEAD = 16 << 20
"""What a load takes beside its arrays, header and checks: the zip and inflate buffers, the model's objects."""


def load_bytes(path: str | os.PathLike[str]) -> int:
    """The most memory that reading the ``.npz`` file ``path`` takes, from its zip directory alone (nothing is
    inflated; 0 for a file that is not a zip archive): every member at its declared size, the header parsed
    (:data:`HEADER_OBJECT_FACTOR`), the block tables a layout builds from ``n_clones`` and ``block_pairs`` (twice
    their bytes), the checks of the largest array (:data:`LOAD_CHECK_SHARE`) and :data:`LOAD_OVERHEAD`. Against the
    resident memory a load adds at its peak (``bench/bench_concurrency.py --loads``): 1.02x for a dense model of
    576 MB of T, 1.24x for a 5,000-state one with its expected counts, 1.32x for a sparse 30,000-state one, 2.6x for
    a 16 MiB header of ``{}`` (the factor is the worst header's)."""
    try:
        with zipfile.ZipFile(path) as archive:
            sizes = {info.filename.removesuffix(".npy"): info.file_size for info in archive.infolist()}
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        return 0
    header = sizes.pop(HEADER_MEMBER, 0)
    arrays = sum(sizes.values())
    tables = 2 * (sizes.get("n_clones", 0) + sizes.get("block_pairs", 0))
    largest = max(sizes.values(), default=0)
    return int(arrays + tables + largest * LOAD_CHECK_SHARE + header * HEADER_OBJECT_FACTOR + LOAD_OVERHEAD)
