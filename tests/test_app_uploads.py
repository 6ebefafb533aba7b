"""The app's uploads, called directly (no browser): a corpus (one file, several, a zip of documents), a model, and
hostile or broken input, each with its sentence. Every test works in its own ``CHMM_DATA_DIR``.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from support import SHORT_TEXT, TINY_FORM, data_uri

from app import config, forms, jobs, services, sessions
from app.services import UserError, training_jobs
from app.services import corpus as corpus_service
from app.services import models as model_service
from engine.backends import model_files
from engine.corpora.text import CorpusError

TINY = TINY_FORM


@pytest.fixture(autouse=True)
def _isolated(data_dir: Path) -> Path:
    """Every test in its own data folder."""
    return data_dir


def current_bytes(folder: Path) -> bytes:
    return sessions.current_model_path(folder).read_bytes()


# ------------------------------------------------------------------------------------------ uploads
@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"", "is empty"),
        (b"   \n\t  ", "only whitespace"),
        (b"\x00\x01\x02\x03" * 100, "binary"),
        ("caf\u00e9 ".encode("latin-1") * 10, "not valid UTF-8"),
        ("alice was beginning".encode("utf-16"), "UTF-16 text; save it as UTF-8"),
        ("alice was beginning".encode("utf-16-le"), "UTF-16 text; save it as UTF-8"),
    ],
)
def test_corpus_upload_rejects_bad_files_with_a_clear_message(folder: Path, payload: bytes, expected: str) -> None:
    with pytest.raises(CorpusError, match=expected):
        corpus_service.store_corpus(folder, data_uri(payload), "bad.txt")
    assert corpus_service.corpus_info(folder) is None


def test_corpus_upload_size_limit_is_configurable(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHMM_MAX_UPLOAD_MB", "0.001")  # 1,000 bytes
    assert config.max_upload_bytes() == 1000
    with pytest.raises((UserError, CorpusError), match="too large"):
        corpus_service.store_corpus(folder, data_uri(b"abc " * 400), "big.txt")
    monkeypatch.delenv("CHMM_MAX_UPLOAD_MB")
    assert config.max_upload_bytes() == 20_000_000


def test_model_upload_limit_is_exact(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHMM_MAX_MODEL_MB", "0.001")  # 1,000 bytes
    before = current_bytes(folder)
    for size in (1001, 1002, 1003):  # base64 rounding must not let a few bytes over the limit through
        with pytest.raises(UserError, match="too large") as refused:
            model_service.load_model_upload(folder, data_uri(b"x" * size), "m.npz")
        # one sentence that says what to do (issue 48)
        message = str(refused.value)
        assert "chmm prune" in message and "CHMM_MAX_MODEL_MB" in message and message.count(". ") == 0
    assert current_bytes(folder) == before


def test_sizes_and_counts_read_well() -> None:
    """Found by a UX review: a huge memory estimate read "166,696,707.1 GB", one symbol "1 symbols"."""
    assert services.format_bytes(999) == "999 bytes" and services.format_bytes(20e6) == "20.0 MB"
    assert services.format_bytes(166_696_707.1e9) == "166.7 PB" and services.format_bytes(2.5e12) == "2.5 TB"
    assert services.plural(1, "symbol") == "1 symbol" and services.plural(2000, "symbol") == "2,000 symbols"


def test_error_messages_keep_file_names_as_they_are() -> None:
    assert services.describe_error(CorpusError("x.txt is empty.")) == "x.txt is empty."
    assert services.describe_error(ValueError("the seed must be whole\nmore")) == "The seed must be whole"
    assert services.describe_error(KeyError()) == "KeyError"


def test_damaged_upload_and_missing_upload(folder: Path) -> None:
    with pytest.raises(UserError, match="damaged"):
        corpus_service.store_corpus(folder, "not a data uri", "x.txt")
    with pytest.raises(UserError, match="damaged"):
        corpus_service.store_corpus(folder, "data:text/plain;base64,@@@@", "x.txt")
    with pytest.raises(UserError, match="No file"):
        corpus_service.store_corpus(folder, None, None)
    for forged in (12345, [12345], 3.5):  # contents as a number (issue 51: an HTTP 500)
        with pytest.raises(UserError, match="arrived damaged"):
            corpus_service.store_corpus(folder, forged, "x.txt")


def test_good_upload_is_kept_and_previewed(with_corpus: Path) -> None:
    info = corpus_service.corpus_info(with_corpus)
    assert info is not None and info.name == "alice-short.txt" and info.characters == len(SHORT_TEXT)
    preview = corpus_service.corpus_preview(with_corpus, "paper", 0.1)
    assert preview["alphabet_size"] == 27 and preview["alphabet"].startswith("\u2423abc")
    assert preview["preview"] and preview["preview"] == preview["preview"].lower()
    assert preview["train"] > preview["validation"] > 0 and preview["test"] > 0
    raw = corpus_service.corpus_preview(with_corpus, "raw", 0.1)
    assert raw["alphabet_size"] > 27 and raw["vocabulary"] is None
    # a rejected upload afterwards keeps the good corpus
    with pytest.raises(CorpusError):
        corpus_service.store_corpus(with_corpus, data_uri(b""), "empty.txt")
    assert corpus_service.corpus_info(with_corpus).name == "alice-short.txt"


def test_sample_corpus(folder: Path) -> None:
    info = corpus_service.use_sample_corpus(folder)
    assert info.name == "carroll-alice.txt" and info.characters > 100_000


# ------------------------------------------------------------------------------------------ corpora of documents
def _zip_bytes(members: dict[str, bytes]) -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def test_several_files_and_a_zip_become_a_corpus_of_documents(folder: Path) -> None:
    from support import SHORT_TEXT

    half = len(SHORT_TEXT) // 2
    one, two = SHORT_TEXT[:half].encode("utf-8"), SHORT_TEXT[half:].encode("utf-8")
    info = corpus_service.store_corpus(folder, [data_uri(one), data_uri(two)], ["one.txt", "two.txt"])
    assert info.documents == 2 and info.name == "one.txt, two.txt (2 documents)" and info.bytes == len(one + two)
    given, _ = corpus_service.read_corpus(folder)
    assert [d.name for d in given] == ["one.txt", "two.txt"] and given[1].text == SHORT_TEXT[half:]
    preview = corpus_service.corpus_preview(folder)
    assert preview["documents"] == 2
    zipped = _zip_bytes({"book/one.txt": one, "book/two.txt": two})
    info = corpus_service.store_corpus(folder, [data_uri(zipped, "application/zip")], ["book.zip"])
    assert info.documents == 2 and [d.name for d in corpus_service.read_corpus(folder)[0]] == [
        "book.zip: book/one.txt",
        "book.zip: book/two.txt",
    ]
    outcome = training_jobs.run_training_job(folder, forms.options_from_form(TINY))
    assert outcome.status == jobs.FINISHED, outcome.message
    model = model_files.load_model(sessions.current_model_path(folder))
    assert model.metadata["documents"] == 2 and model.metadata["corpus"] == "book.zip (2 documents)"
    # one file again: a single text, as before
    corpus_service.store_corpus(folder, [data_uri(one)], ["one.txt"])
    assert corpus_service.read_corpus(folder)[0] == SHORT_TEXT[:half]


@pytest.mark.parametrize(
    ("members", "expected"),
    [
        ({"a.txt": b"hello there " * 20, "b.bin": bytes(range(256)) * 4}, "^book.zip: b.bin looks like a binary"),
        ({"a.txt": "caf\u00e9 ".encode("latin-1") * 10}, "^book.zip: a.txt is not valid UTF-8"),
        ({"a.txt": b"hello there " * 20, "b.txt": b""}, "^book.zip: b.txt is empty"),
    ],
)
def test_a_bad_zip_upload_names_the_member_and_keeps_the_corpus(
    with_corpus: Path, members: dict[str, bytes], expected: str
) -> None:
    before = corpus_service.read_corpus(with_corpus)[0]
    with pytest.raises(CorpusError, match=expected):
        corpus_service.store_corpus(with_corpus, [data_uri(_zip_bytes(members))], ["book.zip"])
    assert corpus_service.read_corpus(with_corpus)[0] == before


def test_uploads_are_limited_per_file_and_in_all(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHMM_MAX_UPLOAD_MB", "0.001")  # 1,000 bytes
    small = data_uri(b"abc cab " * 80)  # 640 bytes each: two are over the limit together
    with pytest.raises(UserError, match="too large together"):
        corpus_service.store_corpus(folder, [small, small], ["a.txt", "b.txt"])
    bomb = _zip_bytes({"zeros.txt": b"0" * 100_000})
    with pytest.raises(CorpusError, match="^book.zip expands to 100,000 bytes, more than the corpus limit"):
        corpus_service.store_corpus(folder, [data_uri(bomb)], ["book.zip"])
    assert corpus_service.corpus_info(folder) is None


def test_hostile_uploads_get_a_sentence_not_a_server_error(folder: Path) -> None:
    """Issue 36, item 8: ``contents`` sent as a dict (HTTP 500 before), a zip member named ``../../x`` (dropped
    without a word before) and a one-character corpus (accepted at upload, refused only at Start before)."""
    with pytest.raises(UserError, match="arrived damaged"):
        corpus_service.store_corpus(folder, {"not": "a data URI"}, "x.txt")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="arrived damaged"):
        corpus_service.store_corpus(folder, [["nested"]], ["x.txt"])  # type: ignore[list-item]
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("good.txt", SHORT_TEXT)
        z.writestr("../../x.txt", SHORT_TEXT)
    with pytest.raises(CorpusError, match=r"path leaves the archive \(\.\./\.\./x\.txt\)"):
        corpus_service.store_corpus(folder, data_uri(archive.getvalue(), "application/zip"), "climb.zip")
    with pytest.raises(UserError, match="cannot be trained on; upload a longer text"):
        corpus_service.store_corpus(folder, data_uri(b"a"), "one.txt")
    assert corpus_service.corpus_info(folder) is None  # nothing was kept
    corpus_service.store_corpus(folder, data_uri(SHORT_TEXT[:3000].encode()), "short.txt")  # short but trainable


def test_a_model_finds_its_training_text_by_content(folder: Path, tmp_path: Path) -> None:
    """Issue 47: a model made by ``chmm train`` elsewhere never got seen/novel marks for its words, even after its
    training text was uploaded: the app matched the corpus by the name the model stored (a path). The model names
    its text by content now, so the same text uploaded under another name is found, and another text is not."""
    from engine import api

    text = SHORT_TEXT[:12_000]
    options = api.TrainOptions(states=40, pseudocount=1e-3, iterations=2, algorithm="em", validation=0.1)
    model = api.train_text(text, options, name="/somewhere/else/alice-part.txt").model
    assert model.metadata["corpus_sha256"] == api.corpora.corpus_fingerprint(text)
    model_path = tmp_path / "made-elsewhere.npz"
    api.save_model(model, model_path)
    model_service.load_model_upload(folder, data_uri(model_path.read_bytes(), "application/octet-stream"), "m.npz")
    corpus_service.store_corpus(folder, data_uri(text.encode("utf-8")), "renamed.txt")
    current = model_service.load_current(folder)
    assert corpus_service.reference_corpus(folder, current) == text
    corpus_service.store_corpus(folder, data_uri(SHORT_TEXT[12_000:24_000].encode("utf-8")), "alice-part.txt")
    assert corpus_service.reference_corpus(folder, current) is None  # the same name, another text


def test_a_start_model_given_its_text_marks_its_words_seen_or_novel(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model opened with ``chmm app --model`` showed no seen/novel words: the app had no text to check them
    against. ``chmm app --model M --corpus T`` gives it, matched by content (a model of another text is not
    given it); the command refuses a corpus file that is not there."""
    import argparse

    from app import cli, sessions
    from app.services import graphs as graph_service
    from engine import api

    text = SHORT_TEXT[:12_000]
    options = api.TrainOptions(states=40, pseudocount=1e-3, iterations=2, algorithm="em", validation=0.1)
    model_path, corpus_path = tmp_path / "start.npz", tmp_path / "elsewhere" / "start.txt"
    api.save_model(api.train_text(text, options, name=str(corpus_path)).model, model_path)
    corpus_path.parent.mkdir()
    corpus_path.write_text(text, encoding="utf-8")
    monkeypatch.setenv("CHMM_START_MODEL", str(model_path))
    folder = sessions.session_folder(sessions.new_session_id())
    current = model_service.load_current(folder)
    assert current.metadata["corpus"] == "start.txt"  # the file's name, never its folders
    assert corpus_service.reference_corpus(folder, current) is None  # no text given
    monkeypatch.setenv("CHMM_START_CORPUS", str(corpus_path))
    assert corpus_service.reference_corpus(folder, current) == text
    saved = graph_service.run_communities(folder, trials=1, two_level=True, seed=0)
    module = graph_service.module_detail(folder, saved["modules"][0]["id"])
    assert module["words"] and module["reference"] and all(word["seen"] is not None for word in module["words"])
    corpus_path.write_text(SHORT_TEXT[12_000:24_000], encoding="utf-8")  # the same name, another text
    assert corpus_service.reference_corpus(folder, current) is None
    bad = argparse.Namespace(model=str(model_path), corpus=str(tmp_path / "missing.txt"), port=8050, host="127.0.0.1")
    with pytest.raises(ValueError, match="no readable file there"):
        cli.run_app(bad)


def test_the_prune_sweep_never_scores_a_model_on_another_text(folder: Path, tmp_path: Path) -> None:
    """Issue 47: a model opened with ``--model`` had its prune sweep scored on the bundled sample corpus, which is
    not its text; with no corpus of its own in the session the sweep asks for it by name."""
    from app.services import pruning as prune_service
    from engine import api

    model = model_service.load_current(folder)
    model.metadata = dict(model.metadata) | {"corpus": "/tmp/xyz/chesterton-brown.txt"}
    path = tmp_path / "other.npz"
    api.save_model(model, path)
    model_service.load_model_upload(folder, data_uri(path.read_bytes(), "application/octet-stream"), "other.npz")
    with pytest.raises(UserError, match=r"upload its training text \(chesterton-brown.txt\)"):
        prune_service.prune_validation_text(folder)
    sample = model_service.load_current(folder)
    sample.metadata = dict(sample.metadata) | {"corpus": "carroll-alice.txt"}
    assert "carroll-alice.txt" in prune_service.prune_validation_text(folder, sample)[1]
