"""Corpora of several documents: reading files, folders and zips (engine.corpora.documents), the per-document split
(engine.corpora.text.prepare_corpus), training on independent sequences, and one clear message for every bad input."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
from support import FIXED

from engine import cli, training
from engine.backends import engines
from engine.backends.cpu.implementation import DenseEngine
from engine.corpora.documents import Document, corpus_name, read_documents
from engine.corpora.text import CorpusError, prepare_corpus, read_text
from engine.model.dense import load, random_model
from engine.training import learning

DATA = Path(__file__).parent / "data"
ALICE = DATA / "carroll-alice.txt"


@pytest.fixture(scope="module")
def chapters(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """carroll-alice.txt cut into its first three chapters: a folder of them and a zip of the same files."""
    text = read_text(ALICE)
    marks = [text.index(f"CHAPTER {n}.") for n in ("I", "II", "III", "IV")]
    parts = [text[a:b] for a, b in zip(marks, marks[1:], strict=False)]
    folder = tmp_path_factory.mktemp("chapters")
    for k, part in enumerate(parts, 1):
        (folder / f"chapter-{k:02d}.txt").write_text(part, encoding="utf-8")
    (folder / ".hidden.txt").write_text("not a chapter", encoding="utf-8")
    (folder / "notes.md").write_text("not read", encoding="utf-8")
    archive = folder.parent / "chapters.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for k, part in enumerate(parts, 1):
            zf.writestr(f"alice/chapter-{k:02d}.txt", part)
        zf.writestr("__MACOSX/alice/._chapter-01.txt", b"\x00\x05\x16\x07")
    return folder, archive, parts


def test_one_file_is_one_document_as_today() -> None:
    documents = read_documents(ALICE)
    assert documents == [Document("carroll-alice.txt", read_text(ALICE))]
    one = prepare_corpus(documents, "paper")
    today = prepare_corpus(read_text(ALICE), "paper")
    for part in ("train", "validation", "test"):
        np.testing.assert_array_equal(getattr(one, part), getattr(today, part))
        assert len(getattr(today, f"{part}_parts")) == 1
        np.testing.assert_array_equal(getattr(today, f"{part}_parts")[0], getattr(today, part))
    np.testing.assert_array_equal(today.train_full_parts[0], today.train_full)
    assert corpus_name([str(ALICE)], documents) == ALICE.name  # never the folder it lay in


def test_a_folder_and_a_zip_of_chapters_read_the_same(chapters: tuple[Path, Path, list[str]]) -> None:
    folder, archive, parts = chapters
    from_folder = read_documents(folder)
    from_zip = read_documents(archive)
    assert [d.text for d in from_folder] == parts == [d.text for d in from_zip]
    assert [d.name for d in from_folder] == ["chapter-01.txt", "chapter-02.txt", "chapter-03.txt"]
    assert [d.name for d in from_zip] == ["alice/chapter-01.txt", "alice/chapter-02.txt", "alice/chapter-03.txt"]
    assert corpus_name([str(folder)], from_folder) == f"{folder.name} (3 documents)"
    # several paths in order: a file, then the folder
    both = read_documents([ALICE, folder])
    assert [d.name for d in both][:2] == ["carroll-alice.txt", "chapter-01.txt"] and len(both) == 4


def test_each_document_is_split_as_the_docs_say(chapters: tuple[Path, Path, list[str]]) -> None:
    """Raw normalisation (cuts at exact positions): the last 10% of every document is test text, the last 20% of
    every document's training part is validation text; the alphabet is the training parts' characters."""
    _, _, parts = chapters
    documents = [Document(f"d{k}", part) for k, part in enumerate(parts)]
    corpus = prepare_corpus(documents, "raw", test_fraction=0.1, validation=0.2)
    assert corpus.documents == ["d0", "d1", "d2"]
    expected = []
    for part in parts:
        train_part, test_part = part[: int(0.9 * len(part))], part[int(0.9 * len(part)) :]
        cut = int(0.8 * len(train_part))
        expected.append((train_part[:cut], train_part[cut:], test_part))
    assert corpus.symbols == sorted(set("".join(t + v for t, v, _ in expected)))
    known = set(corpus.symbols)
    for k, (train, valid, test) in enumerate(expected):
        assert corpus.decode(corpus.train_parts[k]) == train
        assert corpus.decode(corpus.validation_parts[k]) == valid
        assert corpus.decode(corpus.test_parts[k]) == "".join(c for c in test if c in known)
        assert corpus.decode(corpus.train_full_parts[k]) == train + valid
    assert len(corpus.train) == sum(len(t) for t, _, _ in expected)


def test_paper_vocabulary_comes_from_every_training_part() -> None:
    documents = [Document("a", "whale whale ship " * 20 + "kraken"), Document("b", "ship sea sea " * 20 + "octopus")]
    corpus = prepare_corpus(documents, "paper", test_fraction=0.0, validation=0.0)
    assert corpus.vocabulary == ["sea", "ship", "whale"]
    assert corpus.decode(corpus.train_parts[0]).endswith("rare")
    assert corpus.decode(corpus.train_parts[1]).startswith("ship sea")


def test_short_documents_go_wholly_into_training() -> None:
    documents = [Document("long", "abcab " * 200), Document("short", "ab")]
    corpus = prepare_corpus(documents, "raw", test_fraction=0.1, validation=0.1)
    assert corpus.decode(corpus.train_parts[1]) == "ab"
    assert len(corpus.validation_parts) == len(corpus.test_parts) == 1


def test_the_e_step_of_documents_is_the_sum_of_their_e_steps() -> None:
    rng = np.random.default_rng(3)
    pairs = np.array([(i, j) for i in range(3) for j in range(3)])
    model = random_model(list("abc"), np.array([2, 3, 2]), pairs, rng, dtype=np.float64)
    docs = [rng.integers(0, 3, size=n) for n in (40, 7, 65)]
    engine = engines.engine_for(model)
    together = engines.e_step_sequences(engine, model, docs)
    alone = [engine.e_step(model, x) for x in docs]
    np.testing.assert_allclose(together.counts, sum(e.counts for e in alone), rtol=1e-12)
    assert together.log_likelihood == pytest.approx(sum(e.log_likelihood for e in alone), rel=1e-12)
    joined = engine.e_step(model, np.concatenate(docs))
    assert not np.allclose(joined.counts, together.counts)  # joining creates transitions between documents


def test_training_on_documents_never_links_them(tmp_path: Path) -> None:
    """'z' ends one document and 'y' starts the next: the pair (z, y) occurs nowhere inside a document, so the
    model of the documents has no block for it, while the model of their concatenation would."""
    documents = [Document("one", "abab abba " * 30 + "z"), Document("two", "y" + " baab abab" * 30)]
    options = training.TrainOptions(
        algorithm="em",
        pseudocount=1e-6,
        states=12,
        allocation="uniform",
        normalisation="raw",
        iterations=3,
        validation=0.0,
        test_fraction=0.0,
    )
    model = training.train_text(documents, options, name="two").model
    z, y = model.symbols.index("z"), model.symbols.index("y")
    assert model.layout.find_blocks(z, y) < 0
    joined = training.train_text(documents[0].text + documents[1].text, options).model
    assert joined.layout.find_blocks(z, y) >= 0
    assert model.metadata["documents"] == 2


def test_chmm_train_takes_a_folder_a_zip_and_several_files(
    chapters: tuple[Path, Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, archive, _ = chapters
    files = sorted(folder.glob("chapter-*.txt"))
    results = []
    for given in ([folder], [archive], files):
        out = tmp_path / f"m{len(results)}.npz"
        code = cli.main(
            [
                "train",
                *map(str, given),
                "-o",
                str(out),
                "--states",
                "60",
                *FIXED,
                "--iterations",
                "2",
                "--quiet",
            ]
        )
        assert code == 0, capsys.readouterr().err
        results.append(load(out))
    assert all(m.metadata["documents"] == 3 for m in results)
    assert results[0].metadata["corpus"] == f"{folder.name} (3 documents)"
    assert results[1].metadata["corpus"] == "chapters.zip (3 documents)"
    # the same documents in the same order: the same model
    np.testing.assert_array_equal(results[0].T, results[1].T)
    np.testing.assert_array_equal(results[0].T, results[2].T)


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({"a.txt": b"hello there " * 10, "b.bin": bytes(range(256)) * 4}, "bad.zip: b.bin looks like a binary file"),
        ({"a.txt": "caf\u00e9 ".encode("latin-1") * 10}, "bad.zip: a.txt is not valid UTF-8 text"),
        ({"a.txt": b"hello there " * 10, "b.txt": b""}, "bad.zip: b.txt is empty"),
        ({"a.txt": "hi".encode("utf-16")}, "bad.zip: a.txt is UTF-16 text"),
        ({"folder/": b""}, "bad.zip holds no files"),
    ],
)
def test_bad_zip_members_are_named(
    tmp_path: Path, members: dict[str, bytes], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = _zip(tmp_path / "bad.zip", members)
    with pytest.raises(CorpusError, match=message):
        read_documents(archive)
    out = tmp_path / "m.npz"
    assert cli.main(["train", str(archive), "-o", str(out), "--quiet"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message.split(": ")[-1] in err
    assert not out.exists()


def test_a_zip_bomb_is_refused_before_it_is_read(tmp_path: Path) -> None:
    archive = _zip(tmp_path / "bomb.zip", {"a.txt": b"a " * 100, "zeros.txt": b"0" * 30_000_000})
    assert archive.stat().st_size < 200_000
    with pytest.raises(CorpusError, match="bomb.zip expands to 30,000,200 bytes, more than the corpus limit"):
        read_documents(archive, max_bytes=10_000_000)


def test_a_member_that_expands_past_its_declared_size_stops_at_the_limit(tmp_path: Path) -> None:
    """A member whose header claims less than it holds (a crafted archive) is read in bounded chunks and refused."""
    archive = _zip(tmp_path / "liar.zip", {"a.txt": b"ab " * 2_000_000})
    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo("a.txt")
    data = bytearray(archive.read_bytes())
    true_size = info.file_size.to_bytes(4, "little")
    assert data.count(true_size) == 2  # the local header and the central directory
    archive.write_bytes(bytes(data).replace(true_size, (1000).to_bytes(4, "little")))
    with pytest.raises(CorpusError, match="liar.zip: a.txt (expands past its declared size|cannot be read)"):
        read_documents(archive, max_bytes=10_000_000)


@pytest.mark.parametrize("case", ["no text files", "damaged zip", "missing", "too large in all"])
def test_bad_paths_give_one_message(tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    if case == "no text files":
        path = tmp_path / "empty"
        path.mkdir()
        (path / "x.md").write_text("markdown", encoding="utf-8")
        paths, message = [path], "empty holds no .txt files"
    elif case == "damaged zip":
        path = tmp_path / "broken.zip"
        path.write_bytes(b"PK\x03\x04 this is not an archive")
        paths, message = [path], "broken.zip is not a readable zip archive"
    elif case == "missing":
        paths, message = [tmp_path / "nothing.txt"], "nothing.txt was not found"
    else:
        for k in range(3):
            (tmp_path / f"d{k}.txt").write_text("words and more words " * 30, encoding="utf-8")
        paths, message = [tmp_path], "The corpus is too large: with .* it has more than 1,000 bytes"
    with pytest.raises(CorpusError, match=message):
        read_documents(paths, max_bytes=1_000 if case == "too large in all" else 10_000_000)
    if case != "too large in all":
        out = tmp_path / "m.npz"
        assert cli.main(["train", *map(str, paths), "-o", str(out), "--quiet"]) != 0
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
        assert not out.exists()


def test_fit_on_documents_matches_per_document_counts() -> None:
    """One EM iteration on two documents: T from the summed counts of both (the M-step of several sequences)."""
    rng = np.random.default_rng(5)
    pairs = np.array([(i, j) for i in range(2) for j in range(2)])
    model = random_model(list("ab"), np.array([2, 2]), pairs, rng, dtype=np.float64)
    docs = [rng.integers(0, 2, size=50), rng.integers(0, 2, size=30)]
    config = learning.TrainingConfig(iterations=1, tolerance=0.0, pseudocount=0.0)
    fitted = learning.fit(model, docs, None, config).model
    counts = sum(DenseEngine().e_step(model, x).counts for x in docs)
    expected = DenseEngine().m_step(model, counts, 0.0)
    np.testing.assert_allclose(fitted.T, expected.T, rtol=1e-12)
