"""One error base for the engine's refusals (:class:`engine.errors.CHMMError`, a ValueError): the wings' errors are
its subclasses, representative refusals (a bad corpus, a bad model file, impossible settings, an unknown choice)
raise it, and no engine module makes a bare ValueError."""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

import pytest

from engine import api
from engine.errors import BackendError, CHMMError

ROOT = Path(__file__).resolve().parents[1]
INTERNAL_RAISES = {"engine/backends/engines.py", "engine/peers/registry.py"}
"""Modules whose ValueError is a programming error, not a person's (a backend or a learner registered twice)."""


def engine_value_errors(source: str) -> list[int]:
    """The lines where ``source`` makes a bare ValueError (``raise ValueError(...)``, ``raise ValueError``, or one
    made to be raised elsewhere)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "ValueError":
            found.add(node.lineno)
        elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Name) and node.exc.id == "ValueError":
            found.add(node.lineno)
    return sorted(found)


def test_the_engine_s_errors_share_one_base() -> None:
    from engine.corpora.text import CorpusError
    from engine.model.archive import ArchiveError
    from engine.model.dense import ModelFormatError
    from engine.network.communities import ModuleNotFoundInResult
    from engine.peers.base import PeerFormatError

    for error in (CorpusError, ModelFormatError, ArchiveError, PeerFormatError, ModuleNotFoundInResult):
        assert issubclass(error, CHMMError) and issubclass(error, ValueError), error
    assert issubclass(BackendError, CHMMError) and issubclass(BackendError, RuntimeError)


def test_a_bad_corpus_is_refused_with_the_base(tmp_path: Path) -> None:
    with pytest.raises(CHMMError, match="empty"):
        api.corpora.prepare_corpus("")
    binary = tmp_path / "image.txt"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    with pytest.raises(CHMMError):
        api.corpora.read_text(binary)


def test_a_bad_model_file_is_refused_with_the_base(tmp_path: Path) -> None:
    path = tmp_path / "model.npz"
    path.write_bytes(b"not a model at all")
    with pytest.raises(CHMMError):
        api.load_model(path)
    archive = tmp_path / "other.npz"
    with zipfile.ZipFile(archive, "w") as members:
        members.writestr("readme.txt", "a zip, but not a model")
    with pytest.raises(CHMMError):
        api.load_model(archive)


def test_impossible_settings_and_unknown_choices_are_refused_with_the_base() -> None:
    with pytest.raises(CHMMError, match="number of states"):
        api.TrainOptions(states=1).validate()
    with pytest.raises(CHMMError, match="restarts"):
        api.TrainOptions(restarts=0).validate()
    with pytest.raises(CHMMError, match="threshold"):
        api.check_threshold(2.0)
    with pytest.raises(CHMMError, match="unknown learner"):
        api.make_learner("no-such-learner")
    with pytest.raises(CHMMError):
        api.maps.parse_walk("action,observation\nleft,\n", "the walk")


def test_no_engine_module_raises_a_bare_value_error() -> None:
    offenders = {}
    for path in sorted((ROOT / "engine").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative not in INTERNAL_RAISES and (lines := engine_value_errors(path.read_text(encoding="utf-8"))):
            offenders[relative] = lines
    assert offenders == {}


def test_the_raise_check_finds_a_planted_value_error() -> None:
    assert engine_value_errors("raise CHMMError('the walk is empty')\n") == []
    assert engine_value_errors("x = 1\nraise ValueError('the walk is empty')\n") == [2]
    assert engine_value_errors("def unreachable():\n    return ValueError('no way')\nraise ValueError\n") == [2, 3]
