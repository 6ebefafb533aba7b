"""Model files as untrusted input (engine/model/archive.py): members no loader uses, sizes that lie and zip bombs are
refused before they are inflated, for dense and sparse CHMMs and peer learners, in bounded memory (peak RSS measured in
a subprocess against loading the plain model)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from engine.backends import model_files
from engine.backends.cpu import inference, sparse
from engine.model.archive import ArchiveError, ModelArchive
from engine.model.dense import ModelFormatError, load, random_model
from engine.peers import learners
from engine.peers.base import PeerFormatError

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_models" / "alice-600.npz"
BOMB_BYTES = 1 << 30
"""A gigabyte of zeros: about a megabyte deflated."""


def npy_header(shape: tuple[int, ...], dtype: str = "<f4") -> bytes:
    """The ``.npy`` header of an array of ``shape`` (what numpy writes before the data)."""
    import io

    stream = io.BytesIO()
    np.lib.format.write_array_header_1_0(stream, {"descr": dtype, "fortran_order": False, "shape": shape})
    return stream.getvalue()


def copy_with(source: Path, target: Path, replace: dict[str, tuple[bytes, int]] | None = None, add: dict | None = None):
    """Copy the zip ``source`` to ``target``, member by member; ``replace`` / ``add`` map a member name to (header
    bytes, number of zero bytes after them), streamed deflated so the file stays small."""
    replace, add = replace or {}, add or {}
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as new:
        for item in old.infolist():
            stem = item.filename.removesuffix(".npy")
            if stem in replace:
                write_zeros(new, item.filename, *replace[stem])
            else:
                new.writestr(item.filename, old.read(item.filename))
        for stem, (head, zeros) in add.items():
            write_zeros(new, f"{stem}.npy", head, zeros)


def write_zeros(archive: zipfile.ZipFile, name: str, head: bytes, zeros: int) -> None:
    chunk = bytes(1 << 22)
    with archive.open(name, "w", force_zip64=True) as member:
        member.write(head)
        left = zeros
        while left:
            member.write(chunk[: min(left, len(chunk))])
            left -= min(left, len(chunk))


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sample model with: an extra gigabyte member; pi replaced by a gigabyte array; pi's .npy header saying 600
    floats while its zip entry declares a gigabyte; T replaced by an array of the right length and wrong dtype."""
    folder = tmp_path_factory.mktemp("bombs")
    model = load(SAMPLE)
    files = {
        "extra": ({}, {"bomb": (npy_header((BOMB_BYTES // 4,)), BOMB_BYTES)}),
        "shape": ({"pi": (npy_header((BOMB_BYTES // 4,)), BOMB_BYTES)}, {}),
        "declared": ({"pi": (npy_header((model.n_states,)), BOMB_BYTES)}, {}),
        "dtype": ({"T": (npy_header((model.layout.size,), "<c16"), 16 * model.layout.size)}, {}),
    }
    paths = {}
    for name, (replace, add) in files.items():
        paths[name] = folder / f"{name}.npz"
        copy_with(SAMPLE, paths[name], replace, add)
        assert paths[name].stat().st_size < 8 << 20  # small files that ask for a gigabyte
    return paths


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("extra", "holds a member 'bomb' that no file of this kind has"),
        ("shape", r"array pi has shape \(268435456,\), its layout needs \(600,\)"),
        ("declared", "array pi declares 1,024.0 MiB for an array of 2,400 bytes"),
        ("dtype", "array T holds complex128 values, not floating point"),
    ],
)
@pytest.mark.slow
def test_bombs_are_refused_with_a_reason(bombs: dict[str, Path], name: str, message: str) -> None:
    with pytest.raises(ModelFormatError, match=message) as caught:
        model_files.load_model(bombs[name])
    assert str(caught.value).count("\n") == 0


def peak_rss_mb(code: str) -> float:
    """Peak resident memory (MB) of a fresh Python process that runs ``code``."""
    script = f"import resource\n{code}\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True, timeout=300
    )
    return float(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_bombs_are_refused_in_bounded_memory(bombs: dict[str, Path]) -> None:
    """Refusing all four files takes no more memory than loading the plain model (a gigabyte would show)."""
    plain = peak_rss_mb(f"from engine.backends import model_files\nmodel_files.load_model({str(SAMPLE)!r})")
    refused = peak_rss_mb(
        "from engine.backends import model_files\n"
        "from engine.model.dense import ModelFormatError\n"
        f"for path in {[str(path) for path in bombs.values()]!r}:\n"
        "    try:\n"
        "        model_files.load_model(path)\n"
        "    except ModelFormatError:\n"
        "        pass\n"
        "    else:\n"
        "        raise SystemExit('a bomb was loaded')\n"
    )
    assert refused < plain + 64, (plain, refused)


def test_the_bytes_allowed_bound_every_array(tmp_path: Path) -> None:
    from engine.model.archive import HEADER_OBJECT_FACTOR

    model = load(SAMPLE)
    needed = model.T.nbytes + model.pi.nbytes + model.layout.n_clones.nbytes + model.layout.block_pairs.nbytes
    if model.counts is not None:
        needed += model.counts.nbytes
    with zipfile.ZipFile(SAMPLE) as archive:  # the parsed header and the block index count too
        needed += (archive.getinfo("header_json.npy").file_size - 128) * HEADER_OBJECT_FACTOR
    layout = model.layout
    needed += layout.clone_start.nbytes + layout.block_lookup.nbytes + layout.block_offset.nbytes
    assert model_files.load_model(SAMPLE, max_bytes=needed).n_states == model.n_states
    with pytest.raises(ModelFormatError, match="more than the .* a model may take in memory here"):
        model_files.load_model(SAMPLE, max_bytes=needed - 1)


def test_a_clone_count_past_the_limit_is_named(tmp_path: Path) -> None:
    """A clone count whose total overflows int64 says how many clones it asks for, not a negative layout size."""
    model = load(SAMPLE)
    huge = np.full(model.n_symbols, 2**62 // model.n_symbols * 3, dtype=np.int64)
    path = tmp_path / "huge.npz"
    with zipfile.ZipFile(SAMPLE) as source, zipfile.ZipFile(path, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "n_clones.npy":
                stream = __import__("io").BytesIO()
                np.save(stream, huge)
                data = stream.getvalue()
            target.writestr(item.filename, data)
    with pytest.raises(ModelFormatError, match=r"clones, more than the 100,000,000 a model file may have"):
        model_files.load_model(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'<?xml version="1.0"?><graphml></graphml>', "not an .npz archive"),
        (bytes(range(256)) * 40, "not an .npz archive"),
    ],
)
def test_foreign_bytes_are_not_called_pickles(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "model.npz"
    path.write_bytes(content)
    with pytest.raises(ModelFormatError, match=message) as caught:
        model_files.load_model(path)
    assert "pickle" not in str(caught.value)


def test_object_arrays_are_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "objects.npz"
    header = np.frombuffer(json.dumps({"arrays": ["stuff"]}).encode(), np.uint8)
    with open(path, "wb") as handle:
        np.savez(handle, header_json=header, stuff=np.array([{"a": 1}], dtype=object))
    with ModelArchive(path) as archive, pytest.raises(ArchiveError, match="holds Python objects"):
        archive.array("stuff")


def test_sparse_files_are_checked_against_their_layout(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    pairs = np.array([[0, 1], [1, 0], [1, 1]])
    dense = random_model(["a", "b"], np.array([3, 4]), pairs, rng, np.float32)
    model = sparse.from_dense(dense)
    good = tmp_path / "good.npz"
    model.save(good)
    assert model_files.load_model(good).n_states == 7
    entries = int(model.indptr[-1])
    cases = {
        "extra": ({}, {"bomb": (npy_header((1 << 26,)), 1 << 28)}),
        "indices": ({"indices": (npy_header((1 << 26,), "<i4"), 1 << 28)}, {}),
        "indptr": ({"indptr": (npy_header((1 << 26,), "<i8"), 1 << 29)}, {}),
    }
    messages = {
        "extra": "member 'bomb' that no file of this kind has",
        "indices": rf"array indices has shape \(67108864,\), its layout needs \({entries},\)",
        "indptr": r"array indptr has shape \(67108864,\), its layout needs \(12,\)",  # 3 + 4 + 4 rows
    }
    for name, (replace, add) in cases.items():
        path = tmp_path / f"{name}.npz"
        copy_with(good, path, replace, add)
        with pytest.raises(ModelFormatError, match=messages[name]):
            model_files.load_model(path)


def test_peer_files_refuse_members_their_header_does_not_list(tmp_path: Path) -> None:
    learner = learners.learner_class("ngram")(order=3)
    learner.fit(np.array([0, 1, 2, 0, 1, 2, 1, 0] * 20), n_symbols=3)
    good = tmp_path / "ngram.npz"
    learner.save(good, metadata={})
    assert learners.load_any(good).kind == "ngram"
    bomb = tmp_path / "bomb.npz"
    copy_with(good, bomb, add={"bomb": (npy_header((1 << 26,)), 1 << 28)})
    with pytest.raises(PeerFormatError, match="member 'bomb' that its header does not list"):
        learners.load_any(bomb)


def test_a_header_past_its_limit_or_the_budget_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """Issue 36: a 3.3 MB file whose JSON header expanded to 60 MB was accepted (the limit was 64 MB) and every later
    action paid gigabytes for it; the header is now at most 16 MB, and its parsed size counts against the budget."""
    from engine.model.archive import HEADER_OBJECT_FACTOR, MAX_HEADER_BYTES

    big = tmp_path / "big-header.npz"
    copy_with(SAMPLE, big, {"header_json": (npy_header((MAX_HEADER_BYTES + 1,), "|u1"), MAX_HEADER_BYTES + 1)})
    assert big.stat().st_size < SAMPLE.stat().st_size + (1 << 20)  # a small file
    with pytest.raises(ModelFormatError, match="header_json takes 16.0 MiB, more than the 16.0 MiB allowed"):
        model_files.load_model(big)
    with zipfile.ZipFile(SAMPLE) as archive:
        header_bytes = archive.getinfo("header_json.npy").file_size
    with pytest.raises(ModelFormatError, match="its JSON header, parsed, would take"):
        load(SAMPLE, max_bytes=header_bytes * HEADER_OBJECT_FACTOR // 2)


def test_the_block_tables_of_a_huge_alphabet_are_sized_by_its_pairs(tmp_path: Path) -> None:
    """Issue 36: a model of 20,000 symbols with one clone each (87 KB) cost 3 GB in its n_symbols^2 block index
    (300,000 symbols: an uncaught MemoryError); the pair -> block lookup is now sized by the stored pairs, so such a
    model loads within a small budget and scores, every pair without a block counted as a zero-probability step."""
    from engine.model.dense import FORMAT_NAME, FORMAT_VERSION, typed_header, write_npz_atomic

    n = 300_000
    small = random_model(["a", "b"], np.array([1, 1]), np.array([[0, 1]]), np.random.default_rng(0))
    header = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION} | typed_header(small)
    header["symbols"] = [chr(0x4E00 + i) for i in range(n)]
    arrays = {
        "n_clones": np.ones(n, dtype=np.int64),
        "block_pairs": np.array([[0, 1], [1, 0]], dtype=np.int64),
        "T": np.array([1.0, 1.0], dtype=np.float32),
        "pi": np.full(n, 1.0 / n, dtype=np.float32),
    }
    path = tmp_path / "alphabet.npz"
    write_npz_atomic(path, arrays, header)
    assert path.stat().st_size < 2_000_000
    model = model_files.load_model(path, max_bytes=256 << 20)  # the square index alone would take 655 GiB
    layout = model.layout
    assert layout.clone_start.nbytes + layout.block_lookup.nbytes + layout.block_offset.nbytes < 6 * 8 * (n + 2)
    assert layout.find_block(0, 1) == 0 and layout.find_block(1, 0) == 1
    assert layout.find_block(0, 0) == -1 and layout.find_block(n - 1, 0) == -1
    x = np.array([0, 1, 0, 1, 5, 0], dtype=np.int64)
    predictive = inference.forward(model, x).predictive
    np.testing.assert_allclose(predictive[1:4], 1.0)  # 0 -> 1 -> 0 -> 1 with certainty
    assert predictive[4] == 0.0  # 1 -> 5 has no block: a zero-probability step, not a wrong block


def test_a_header_nested_too_deeply_is_refused_in_a_sentence(tmp_path: Path) -> None:
    """Issue 51: a model whose JSON header nests 200,000 lists (400 KB) broke the parser's recursion: an HTTP 500 in
    the app. It is refused as a damaged model in one sentence; a walk file nested as deeply is refused the same."""
    from engine import api

    with np.load(SAMPLE, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    deep = b'{"format": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    arrays["header_json"] = np.frombuffer(deep, dtype=np.uint8)
    path = tmp_path / "deep.npz"
    np.savez(path, **arrays)
    with pytest.raises(ModelFormatError, match="its header is nested too deeply to be a model's"):
        model_files.load_model(path)
    walk = tmp_path / "deep.json"
    walk.write_text('{"actions": ' + "[" * 200_000 + "]" * 200_000 + "}", encoding="utf-8")
    with pytest.raises(ValueError, match="nested too deeply to be a walk"):
        api.maps.read_walk(walk)


def test_a_memory_limit_while_reading_is_not_a_damaged_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 51: a job past its memory limit while it loaded a model said the model was "not a readable model". Every
    MemoryError now passes through as memory, never as a damaged model: the job's limit (raised by its memory watch,
    its own kind and sentence kept) and a plain one (an allocation that failed: the archive sizes every array
    against its byte budget before it inflates it, so a file cannot ask for more than that budget)."""
    import engine.model.archive as archive_module

    class JobLimit(MemoryError):
        pass

    for raised, expected in ((JobLimit("past the job's limit"), JobLimit), (MemoryError(), MemoryError)):

        def fail(*args, raised=raised, **kwargs):
            raise raised

        monkeypatch.setattr(archive_module.np, "empty", fail)
        with pytest.raises(expected) as caught:
            model_files.load_model(SAMPLE)
        assert not isinstance(caught.value, ModelFormatError) and type(caught.value) is type(raised)
        monkeypatch.undo()
