"""Tests of engine/model/dense.py: the block layout, dense <-> block conversion, the M-step normalisation, and the
save/load file format (bit-exact round trip, clear errors on damaged or foreign files)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from engine.backends.cpu import inference, sampling
from engine.model import synthetic
from engine.model.blocks import BlockLayout, blocks_to_dense, dense_to_blocks, normalise_rows, pairs_in_sequence
from engine.model.dense import CHMM, FORMAT_NAME, FORMAT_VERSION, ModelFormatError, load, random_model, save
from engine.training import learning


def sample_model(dtype: type = np.float32, with_counts: bool = True) -> CHMM:
    rng = np.random.default_rng(0)
    symbols = ["a", "é", " ", "\n", "Z"]
    pairs = np.array([[0, 1], [1, 0], [1, 2], [2, 3], [3, 4], [4, 0], [4, 4], [2, 2]])
    model = random_model(symbols, np.array([2, 3, 1, 4, 2]), pairs, rng, dtype, {"note": "x"})
    counts = rng.random(model.layout.size) * 100 if with_counts else None
    metadata = {
        "preprocessing": {"lowercase": True, "map": {"’": "'"}},  # nested JSON round-trips
        "history": [{"iteration": 1, "train_bps": 2.5, "validation_bps": None}],
        "seed": 12345,
        "name": "ünïcode ✓",
    }
    return CHMM(model.symbols, model.layout, model.T, model.pi, counts, metadata)


def assert_same_model(a: CHMM, b: CHMM) -> None:
    assert a.symbols == b.symbols
    assert json.dumps(a.metadata) == json.dumps(b.metadata)  # (NaN != NaN, so compare the JSON text)
    for name in ("n_clones", "clone_start", "block_pairs", "block_offset", "block_lookup"):
        np.testing.assert_array_equal(getattr(a.layout, name), getattr(b.layout, name))
    assert a.T.dtype == b.T.dtype and a.pi.dtype == b.pi.dtype
    assert a.T.tobytes() == b.T.tobytes()
    assert a.pi.tobytes() == b.pi.tobytes()
    if a.counts is None:
        assert b.counts is None
    else:
        assert b.counts is not None and a.counts.dtype == b.counts.dtype
        assert a.counts.tobytes() == b.counts.tobytes()


# ------------------------------------------------------------------------------------------------ layout
def test_layout_tables() -> None:
    layout = BlockLayout.build(np.array([2, 1, 3]), np.array([[2, 0], [0, 1], [0, 0], [2, 2]]))
    np.testing.assert_array_equal(layout.clone_start, [0, 2, 3, 6])
    np.testing.assert_array_equal(layout.block_pairs, [[0, 0], [0, 1], [2, 0], [2, 2]])  # sorted
    np.testing.assert_array_equal(layout.block_offset, [0, 4, 6, 12, 21])
    assert layout.find_block(2, 0) == 2 and layout.find_block(1, 0) == -1
    assert (layout.n_symbols, layout.n_states, layout.n_blocks, layout.size) == (3, 6, 4, 21)
    np.testing.assert_array_equal(layout.clone_symbol(), [0, 0, 1, 2, 2, 2])
    with pytest.raises(ValueError, match="twice"):
        BlockLayout.build(np.array([1, 1]), np.array([[0, 1], [0, 1]]))
    with pytest.raises(ValueError, match="outside"):
        BlockLayout.build(np.array([1, 1]), np.array([[0, 2]]))


@pytest.mark.parametrize("seed", range(4))
def test_the_pair_lookup_agrees_with_a_dense_index(seed: int) -> None:
    """The pair -> block lookup (sized by the stored pairs) against the dense n_symbols^2 table it replaced, for
    every pair of random layouts (rows with no block, full rows, one symbol): vectorised, scalar and in a kernel."""
    from engine.backends.cpu.kernels import find_block

    rng = np.random.default_rng(seed)
    n = [1, 7, 23, 40][seed]
    mask = rng.random((n, n)) < [1.0, 0.3, 0.1, 0.6][seed]
    if n > 2:
        mask[1] = False  # a row without blocks
        mask[2] = True  # a full row
    pairs = np.argwhere(mask)
    layout = BlockLayout.build(rng.integers(1, 4, n), pairs[rng.permutation(len(pairs))])
    dense = np.full((n, n), -1)
    dense[layout.block_pairs[:, 0], layout.block_pairs[:, 1]] = np.arange(layout.n_blocks)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    np.testing.assert_array_equal(layout.find_blocks(i, j), dense)
    for a, b in zip(i.ravel(), j.ravel(), strict=True):
        assert layout.find_block(a, b) == find_block(layout.block_lookup, n, a, b) == dense[a, b]
    with pytest.raises(ValueError, match="positive"):
        BlockLayout.build(np.array([1, 0]), np.array([[0, 1]]))


def test_dense_block_round_trip_and_normalise() -> None:
    model = sample_model(np.float64)
    dense = model.dense_T()
    np.testing.assert_array_equal(dense_to_blocks(model.layout, dense), model.T)
    np.testing.assert_array_equal(blocks_to_dense(model.layout, model.T), dense)
    # block accessor agrees with the dense matrix
    s = model.layout.clone_start
    np.testing.assert_array_equal(model.block(1, 2), dense[s[1] : s[2], s[2] : s[3]])
    assert model.block(0, 0) is None
    # normalise_rows: rows of stored entries sum to 1; the pseudocount touches stored entries only
    counts = np.random.default_rng(1).random(model.layout.size)
    T = normalise_rows(model.layout, counts, 0.25, np.float64)
    expected = blocks_to_dense(model.layout, counts + 0.25)
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(blocks_to_dense(model.layout, T), expected, rtol=1e-14)
    # a row without mass stays zero
    zero = np.zeros(model.layout.size)
    np.testing.assert_array_equal(normalise_rows(model.layout, zero, 0.0, np.float64), zero)


def test_pairs_in_sequence() -> None:
    x = np.array([2, 0, 2, 0, 1, 1])
    np.testing.assert_array_equal(pairs_in_sequence(x, 3), [[0, 1], [0, 2], [1, 1], [2, 0]])
    assert pairs_in_sequence(np.array([1]), 3).shape == (0, 2)


# --------------------------------------------------------------------------------------------- save/load
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_counts", [True, False])
def test_save_load_round_trip_is_bit_exact(tmp_path: Path, dtype: type, with_counts: bool) -> None:
    model = sample_model(dtype, with_counts)
    path = tmp_path / "sub" / "model.npz"
    save(model, path)
    loaded = load(path)
    assert_same_model(model, loaded)
    # saving again over the same file works and gives the same model
    save(loaded, path)
    assert_same_model(model, load(path))
    assert [p.name for p in path.parent.iterdir()] == ["model.npz"]  # no temporary file left behind


def test_round_trip_of_trained_model(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    train = synthetic.toy_fsm_sequence(2, 3000, rng)
    test = synthetic.toy_fsm_sequence(2, 1000, rng)
    n = synthetic.toy_fsm_n_symbols(2)
    model = random_model([str(s) for s in range(n)], synthetic.toy_fsm_clones(2), pairs_in_sequence(train, n), rng)
    result = learning.fit(model, train, config=learning.TrainingConfig(iterations=10))
    trained = result.model
    # no validation: validation_bps is NaN, which the model file stores as null (strict JSON)
    trained.metadata["history"] = [
        {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r._asdict().items()}
        for r in result.history
    ]
    save(trained, tmp_path / "trained.npz")
    loaded = load(tmp_path / "trained.npz")
    assert_same_model(trained, loaded)
    assert inference.score(loaded, test) == inference.score(trained, test)
    np.testing.assert_array_equal(
        sampling.sample(loaded, 100, np.random.default_rng(1)),
        sampling.sample(trained, 100, np.random.default_rng(1)),
    )


# ----------------------------------------------------------------------------------------- damaged files
def write_npz(path: Path, **arrays: np.ndarray) -> None:
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)


def header_array(header: object) -> np.ndarray:
    return np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8)


def good_arrays(model: CHMM) -> dict[str, np.ndarray]:
    return {
        "n_clones": model.layout.n_clones,
        "block_pairs": model.layout.block_pairs,
        "T": model.T,
        "pi": model.pi,
    }


def good_header(model: CHMM) -> dict:
    return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "symbols": model.symbols, "metadata": {}}


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelFormatError, match="no such model file"):
        load(tmp_path / "nothing.npz")


@pytest.mark.parametrize("cut", [0, 1, 10, 100, 0.5, -1, -22])
def test_load_truncated_file(tmp_path: Path, cut: float) -> None:
    save(sample_model(), tmp_path / "m.npz")
    raw = (tmp_path / "m.npz").read_bytes()
    n = int(len(raw) * cut) if isinstance(cut, float) else (cut if cut >= 0 else len(raw) + cut)
    (tmp_path / "bad.npz").write_bytes(raw[:n])
    with pytest.raises(ModelFormatError, match="bad.npz"):
        load(tmp_path / "bad.npz")


def test_load_every_truncation(tmp_path: Path) -> None:
    save(sample_model(), tmp_path / "m.npz")
    raw = (tmp_path / "m.npz").read_bytes()
    bad = tmp_path / "bad.npz"
    for n in range(0, len(raw), 7):
        bad.write_bytes(raw[:n])
        with pytest.raises(ModelFormatError):
            load(bad)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_load_random_bytes(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "noise.npz"
    path.write_bytes(np.random.default_rng(seed).bytes(2000))
    with pytest.raises(ModelFormatError, match="not a readable CHMM Explorer model"):
        load(path)


def test_load_text_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.npz"
    path.write_text("this is not a model\n")
    with pytest.raises(ModelFormatError):
        load(path)


def test_load_npz_without_header(tmp_path: Path) -> None:
    model = sample_model()
    path = tmp_path / "foreign.npz"
    write_npz(path, **good_arrays(model))
    with pytest.raises(ModelFormatError, match="missing header_json"):
        load(path)
    write_npz(path, weights=np.zeros(3))
    with pytest.raises(ModelFormatError, match="not a readable CHMM Explorer model .arrays of another kind"):
        load(path)


@pytest.mark.parametrize("version", [0, 3, 99, "1", None])
def test_load_wrong_format_version(tmp_path: Path, version: object) -> None:
    model = sample_model()
    header = good_header(model)
    header["format_version"] = version
    path = tmp_path / "future.npz"
    write_npz(path, header_json=header_array(header), **good_arrays(model))
    with pytest.raises(ModelFormatError, match="format version .* is not supported"):
        load(path)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ({"format": "something-else", "format_version": 1, "symbols": []}, "wrong format marker"),
        (["not", "a", "dict"], "header is not a JSON object"),
        ({"format_version": 1}, "wrong format marker"),
    ],
)
def test_load_wrong_format_marker(tmp_path: Path, header: object, message: str) -> None:
    model = sample_model()
    path = tmp_path / "other.npz"
    write_npz(path, header_json=header_array(header), **good_arrays(model))
    with pytest.raises(ModelFormatError, match=message):
        load(path)


def test_load_header_not_json(tmp_path: Path) -> None:
    model = sample_model()
    path = tmp_path / "garbled.npz"
    for raw in (b"{not json", b"\xff\xfe\x00garbage"):
        write_npz(path, header_json=np.frombuffer(raw, dtype=np.uint8), **good_arrays(model))
        with pytest.raises(ModelFormatError, match="not a readable CHMM Explorer model"):
            load(path)


@pytest.mark.parametrize("damage", ["symbols", "T_shape", "pi_shape", "T_nan", "T_negative", "pairs", "counts"])
def test_load_inconsistent_arrays(tmp_path: Path, damage: str) -> None:
    model = sample_model(np.float64)
    header = good_header(model)
    arrays = good_arrays(model)
    if damage == "symbols":
        header["symbols"] = model.symbols[:-1]
    elif damage == "T_shape":
        arrays["T"] = model.T[:-1]
    elif damage == "pi_shape":
        arrays["pi"] = np.append(model.pi, 0.0)
    elif damage == "T_nan":
        arrays["T"] = model.T.copy()
        arrays["T"][3] = np.nan
    elif damage == "T_negative":
        arrays["T"] = model.T.copy()
        arrays["T"][0] = -0.5
    elif damage == "pairs":
        arrays["block_pairs"] = np.array([[0, 9]])
    elif damage == "counts":
        arrays["counts"] = np.zeros(3)
    path = tmp_path / "damaged.npz"
    write_npz(path, header_json=header_array(header), **arrays)
    with pytest.raises(ModelFormatError, match="damaged.npz"):
        load(path)


def test_load_negative_pi(tmp_path: Path) -> None:
    model = sample_model(np.float64)
    arrays = good_arrays(model)
    arrays["pi"] = model.pi.copy()
    arrays["pi"][0] = -0.25
    arrays["pi"][1] += 0.25 + model.pi[0]
    path = tmp_path / "negative-pi.npz"
    write_npz(path, header_json=header_array(good_header(model)), **arrays)
    with pytest.raises(ModelFormatError, match="negative"):
        load(path)


def test_load_plain_npy_file(tmp_path: Path) -> None:
    path = tmp_path / "array.npz"
    with open(path, "wb") as handle:
        np.save(handle, np.arange(5))
    with pytest.raises(ModelFormatError):
        load(path)


def test_load_every_single_byte_corruption(tmp_path: Path) -> None:
    model = sample_model()
    save(model, tmp_path / "m.npz")
    raw = (tmp_path / "m.npz").read_bytes()
    bad = tmp_path / "bad.npz"
    for n in range(len(raw)):
        bad.write_bytes(raw[:n] + bytes([raw[n] ^ 0x01]) + raw[n + 1 :])
        try:
            loaded = load(bad)
        except ModelFormatError:
            continue
        assert_same_model(model, loaded)  # a harmless byte (a timestamp) may change; the model may not


def test_load_corrupted_compressed_data(tmp_path: Path) -> None:
    """A CRC mismatch in a member is reported as ModelFormatError (the zip layer checks it)."""
    model = sample_model()
    save(model, tmp_path / "m.npz")
    with zipfile.ZipFile(tmp_path / "m.npz") as archive:
        info = archive.getinfo("T.npy")
        data = archive.read("T.npy")
    # rebuild the archive with T stored uncompressed and one payload byte changed after the CRC was taken
    path = tmp_path / "crc.npz"
    with zipfile.ZipFile(tmp_path / "m.npz") as src, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as dst:
        for item in src.infolist():
            dst.writestr(item.filename, src.read(item.filename), compress_type=zipfile.ZIP_STORED)
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        offset = archive.getinfo("T.npy").header_offset
    start = offset + 30 + len("T.npy")
    position = raw.index(data[-8:], start) + 3  # a byte of the last value of T
    raw[position] ^= 0x10
    path.write_bytes(bytes(raw))
    assert info.file_size == len(data)
    with pytest.raises(ModelFormatError):
        load(path)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda h, a: a.update(T=a["T"].astype(str)), "T holds <U.* values, not floating point"),
        (lambda h, a: a.update(T=a["T"] > 0), "T holds bool values"),
        (lambda h, a: a.update(pi=a["pi"].astype(str)), "pi holds <U.* values"),
        (lambda h, a: a.update(counts=np.full(a["T"].shape, "x")), "counts holds <U1 values"),
        (lambda h, a: a.update(T=a["T"] * 1e30), "a row of T sums to 1e\\+30, not 1"),
        (lambda h, a: a.update(T=np.zeros_like(a["T"])), "T has no transition mass"),
        (lambda h, a: a.update(pi=np.zeros_like(a["pi"])), "pi has no mass"),
        (lambda h, a: h.update(arrays=5), "list of arrays is not a list of names"),
        (lambda h, a: h.update(symbols=[[1]] * len(h["symbols"])), "symbols must be a list of non-empty strings"),
        (lambda h, a: h.update(symbols=list(range(len(h["symbols"])))), "symbols must be a list of non-empty"),
        (lambda h, a: h.update(symbols=["a"] * len(h["symbols"])), "symbols must be distinct"),
        (lambda h, a: h.update(metadata="x"), "the metadata must be an object"),
        (lambda h, a: h["metadata"].update(settings="x"), "metadata field 'settings' must be an object"),
        (lambda h, a: h["metadata"].update(sizes=[1, 2]), "metadata field 'sizes'"),
        (lambda h, a: h["metadata"].update(history="abc"), "metadata field 'history'"),
        (lambda h, a: h["metadata"].update(history=[{"x": 1}]), "metadata field 'history'"),
        (lambda h, a: h["metadata"].update(vocabulary=5), "metadata field 'vocabulary'"),
        (lambda h, a: h["metadata"].update(test_bps={}), "metadata field 'test_bps' must be a number"),
        (lambda h, a: h["metadata"].update(backoff_weight=2.0), "metadata field 'backoff_weight'"),
    ],
)
def test_load_refuses_content_the_tools_cannot_use(tmp_path: Path, damage: object, message: str) -> None:
    """Found by QA: such files used to load and then break sampling, scoring or the app's pages."""
    model = sample_model(np.float64)
    header, arrays = good_header(model), good_arrays(model)
    damage(header, arrays)
    path = tmp_path / "bad.npz"
    write_npz(path, header_json=header_array(header), **arrays)
    with pytest.raises(ModelFormatError, match=message):
        load(path)


def test_load_version_message_tells_the_types_apart(tmp_path: Path) -> None:
    model = sample_model()
    header = good_header(model) | {"format_version": "1"}
    path = tmp_path / "v.npz"
    write_npz(path, header_json=header_array(header), **good_arrays(model))
    with pytest.raises(ModelFormatError, match="version '1' is not supported \\(this program reads versions 1, 2\\)"):
        load(path)


def test_load_keeps_history_without_train_figures(tmp_path: Path) -> None:
    model = sample_model()
    model.metadata["history"] = [{"iteration": 1, "train_bps": None, "validation_bps": float("nan"), "seconds": 1}]
    save(model, tmp_path / "m.npz")
    assert load(tmp_path / "m.npz").metadata["history"][0]["train_bps"] is None


def test_a_version_1_file_loads_with_its_behaviour_in_typed_fields(tmp_path: Path) -> None:
    """The bundled sample model is a version-1 file (its codec in the metadata): loading converts it, the metadata
    keeps only what is shown to people, and saving writes version 2 that loads back to the same model and scores."""
    from engine.model.dense import BACKOFF_WEIGHT

    sample = Path(__file__).resolve().parents[1] / "sample_models" / "alice-600.npz"
    with np.load(sample, allow_pickle=False) as archive:
        header = json.loads(bytes(archive["header_json"]).decode("utf-8"))
    assert header["format_version"] == 1 and header["metadata"]["normalisation"] == "paper"
    model = load(sample)
    assert model.codec.normalisation == "paper"
    assert model.codec.vocabulary_list == header["metadata"]["vocabulary"]
    assert model.backoff_weight == BACKOFF_WEIGHT and not model.fixed_zeros
    assert not {"normalisation", "vocabulary", "backoff_weight"} & set(model.metadata)
    assert model.metadata["corpus"] == "carroll-alice.txt"
    save(model, tmp_path / "v2.npz")
    with np.load(tmp_path / "v2.npz", allow_pickle=False) as archive:
        saved = json.loads(bytes(archive["header_json"]).decode("utf-8"))
    assert saved["format_version"] == 2 and saved["codec"]["normalisation"] == "paper"
    again = load(tmp_path / "v2.npz")
    assert again.codec == model.codec and again.metadata == model.metadata
    x = model.encode(model.codec.normalise("Alice was beginning to get very tired of sitting by her sister")[:60])
    assert inference.score(again, x).bps == inference.score(model, x).bps


def test_a_version_1_pruned_file_keeps_its_zeros_and_back_off(tmp_path: Path) -> None:
    """A version-1 pruned model (metadata "pruned" and "backoff_weight") loads with fixed_zeros and its weight."""
    model = sample_model()
    header = good_header(model) | {"format_version": 1}
    header["metadata"] = {"pruned": {"threshold": 0.01}, "backoff_weight": 0.02, "normalisation": "raw"}
    path = tmp_path / "v1.npz"
    write_npz(path, header_json=header_array(header), **good_arrays(model))
    loaded = load(path)
    assert loaded.fixed_zeros and loaded.backoff_weight == 0.02 and loaded.codec.normalisation == "raw"
    assert loaded.metadata == {"pruned": {"threshold": 0.01}}
