"""One error base for the engine's refusals (:class:`engine.errors.CHMMError`, a ValueError): the wings' errors are
its subclasses, representative refusals (a bad corpus, a bad model file, impossible settings, an unknown choice)
raise it, no engine module raises a bare ValueError, and the front ends catch it by name: an ``except`` that takes
a ValueError is kept only for their own parsing (its ``try`` reads with int, float, json and the like and calls
nothing of the engine) or says whose ValueError it is in a comment on its line."""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

import pytest

from engine import api
from engine.errors import BackendError, CHMMError

ROOT = Path(__file__).resolve().parents[1]
FRONT_END_FILES = sorted((ROOT / "engine" / "cli").rglob("*.py")) + sorted((ROOT / "app").rglob("*.py"))
PARSERS = {
    "int", "float", "complex", "loads", "load", "UUID", "b64decode", "fromisoformat", "literal_eval", "Decimal",
    "Fraction", "strptime",
}  # fmt: skip
"""Calls that read a value from text or bytes: a ``try`` that makes one of them, and otherwise only calls of
:data:`READS`, is a parse and may take its ValueError."""
READS = {
    "get", "read_text", "read_bytes", "strip", "split", "lower", "str", "max", "min", "len", "round", "abs", "bool",
    "isinstance",
}  # fmt: skip
"""Calls a parse may make around its parser: reading the text and bounding the value read."""
DOOR_NAMES = {"api", "engine"}
"""Names through which a front end calls the engine."""
INTERNAL_RAISES = {"engine/backends/engines.py", "engine/peers/registry.py"}
"""Modules whose ValueError is a programming error, not a person's (a backend or a learner registered twice)."""


def _called(node: ast.AST) -> tuple[set[str], bool]:
    """The names of the functions ``node`` calls (the last part of a dotted name), and whether it calls the engine
    (a call through ``api.`` or ``engine.``)."""
    names, engine = set(), False
    for call in [n for n in ast.walk(node) if isinstance(n, ast.Call)]:
        func = call.func
        names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
        while isinstance(func, ast.Attribute):
            func = func.value
        engine |= isinstance(func, ast.Name) and func.id in DOOR_NAMES
    return names, engine


def _catches_value_error(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(k, ast.Name) and k.id == "ValueError" for k in kinds)


def bare_value_errors(source: str) -> list[int]:
    """The lines of ``except`` clauses in ``source`` that take a ValueError without a reason: the ``try`` calls the
    engine, or it is not a parse (a parser of :data:`PARSERS` and nothing but :data:`READS` around it) and the
    clause's line has no comment saying whose ValueError it is."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Try):
            continue
        names, engine = _called(ast.Module(body=node.body, type_ignores=[]))
        for handler in node.handlers:
            if handler.type is None or not _catches_value_error(handler):
                continue
            commented = "#" in lines[handler.lineno - 1].split("except", 1)[1]
            parse = bool(names & PARSERS) and names <= PARSERS | READS
            if engine or not (parse or commented):
                found.append(handler.lineno)
    return found


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


def test_the_front_ends_catch_the_engine_s_refusals_by_name() -> None:
    offenders = {}
    for path in FRONT_END_FILES:
        if lines := bare_value_errors(path.read_text(encoding="utf-8")):
            offenders[path.relative_to(ROOT).as_posix()] = lines
    assert offenders == {}


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("try:\n    n = int(text)\nexcept ValueError:\n    n = 0\n", []),
        ("try:\n    low = float(spec.get('x'))\nexcept (TypeError, ValueError):\n    low = 0\n", []),
        ("try:\n    walk = read(path)\nexcept ValueError:  # the csv module's, on a bad dialect\n    pass\n", []),
        ("try:\n    model = api.load_model(path)\nexcept CHMMError:\n    pass\n", []),
        ("try:\n    model = api.load_model(path)\nexcept ValueError:\n    pass\n", [3]),
        ("try:\n    n = int(api.maps.read_room(path))\nexcept (ValueError, OSError):  # parse\n    pass\n", [3]),
        ("try:\n    walk = read(path)\nexcept ValueError as exc:\n    raise UserError(str(exc))\n", [3]),
        ("try:\n    return int(args.run(args))\nexcept (OSError, ValueError):\n    return 1\n", [3]),
    ],
)
def test_the_except_check_finds_a_planted_bare_value_error(source: str, found: list[int]) -> None:
    assert bare_value_errors(source) == found


def test_the_raise_check_finds_a_planted_value_error() -> None:
    assert engine_value_errors("raise CHMMError('the walk is empty')\n") == []
    assert engine_value_errors("x = 1\nraise ValueError('the walk is empty')\n") == [2]
    assert engine_value_errors("def unreachable():\n    return ValueError('no way')\nraise ValueError\n") == [2, 3]
