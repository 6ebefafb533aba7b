"""The architecture's rules, checked on the source (the figures are :mod:`structure`'s; ``python tests/structure.py``
prints them): the engine is a house of wings (each subpackage of ``engine/`` one room) whose rooms and modules import
each other without a circle (imports inside functions included), on at most :data:`MAX_FLOORS` floors; the front ends
(the app and the engine's own command line) import only the door :mod:`engine.api`, :mod:`engine.errors` and
:mod:`engine.files` (an allow-list); only the engine implementations import the numeric kernels; the engine imports
nothing from the front ends; no module outside the implementations compares a backend name or tests what kind of
model it holds (the registry of :mod:`engine.backends.engines` decides); and no module or function is above its size
limit."""

from __future__ import annotations

import ast
import importlib
import sys
import types
from pathlib import Path

import pytest

from engine import api, cli
from engine.backends import engines

sys.path.insert(0, str(Path(__file__).resolve().parent))
import structure  # noqa: E402 (tests/structure.py, beside this file)

ROOT = structure.ROOT
IMPLEMENTATIONS = {
    "engine/backends/engines.py", "engine/backends/cpu/implementation.py", "engine/backends/cpu/sparse.py",
    "engine/backends/gpu/device_blocks.py", "engine/backends/gpu/implementation.py", "engine/backends/gpu/lockstep.py",
    "engine/backends/gpu/devices.py", "engine/model/dense.py",
}  # fmt: skip
"""The modules that define the implementations and the registry: the only ones that may tell forms apart."""
MODEL_CLASSES = {"CHMM", "SparseCHMM", "DeviceModel"}
KIND_ATTRIBUTES = {"form", "indptr"}
"""Attributes whose value tells the kind of a model (its ``form``; only sparse models have ``indptr``)."""
SUB_DOORS = {f"engine.api.{name}" for name in api.__all__ if isinstance(getattr(api, name), types.ModuleType)}
"""The door's sub-doors (``engine.api.maps`` and the like), which a front end may import by name."""
DOOR = {"engine.api", "engine.errors", "engine.files"} | SUB_DOORS
"""What a front end may import of the engine."""
FRONT_END_FILES = sorted((ROOT / "engine" / "cli").rglob("*.py")) + sorted((ROOT / "app").rglob("*.py"))
"""The front ends the allow-list covers: the command line and the app."""
MAX_FLOORS = 10
"""Floors of the engine's rooms at most (the flat engine had 17)."""
IMPLEMENTATION_PACKAGE = "engine.backends"
"""The only package whose modules may import the numeric kernels."""


def backend_names() -> set[str]:
    """Every backend and implementation name the registry knows, "auto", and the host models' forms."""
    names = {engines.AUTO_BACKEND, "dense", "sparse"}
    for implementation in engines.implementations():
        names |= {implementation.name, implementation.backend}
    return names


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _class_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def kind_tests(source: str, names: set[str]) -> list[str]:
    """Where ``source`` compares a string in ``names`` (a backend or a form) or a model's ``form``, tests an object
    against a model class (``isinstance``, ``type(...) is``) or asks for a sparse-only attribute: one line each."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for operand in operands:
                values = operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set) else [operand]
                if any(isinstance(v, ast.Constant) and v.value in names for v in values):
                    found.append(f"line {node.lineno}: compares a backend or form name")
                if isinstance(operand, ast.Attribute) and operand.attr in KIND_ATTRIBUTES:
                    found.append(f"line {node.lineno}: compares a model's {operand.attr}")
                if isinstance(operand, ast.Call) and _class_name(operand.func) == "type":
                    if any(_class_name(o) in MODEL_CLASSES for o in operands):
                        found.append(f"line {node.lineno}: tests the type of a model")
        elif isinstance(node, ast.Call) and _class_name(node.func) in {"isinstance", "issubclass"} and node.args:
            classes = node.args[-1]
            values = classes.elts if isinstance(classes, ast.Tuple) else [classes]
            if any(_class_name(v) in MODEL_CLASSES for v in values):
                found.append(f"line {node.lineno}: isinstance against a model class")
        elif isinstance(node, ast.Call) and _class_name(node.func) in {"getattr", "hasattr"} and len(node.args) > 1:
            attribute = node.args[1]
            if isinstance(attribute, ast.Constant) and attribute.value in KIND_ATTRIBUTES:
                found.append(f"line {node.lineno}: asks a model for {attribute.value!r}")
    return found



def door_violations(root: Path, files: list[Path]) -> dict[str, set[str]]:
    """For each front-end file, the engine modules it imports outside :data:`DOOR`."""
    modules = structure.engine_modules(root)
    found = {}
    for path in files:
        outside = structure.imports_of(root, path, modules) - DOOR - {"engine"}
        outside = {m for m in outside if not m.startswith("engine.cli")}  # the command line's own modules
        if outside:
            found[str(path.relative_to(root))] = outside
    return found


def kernel_violations(root: Path) -> dict[str, set[str]]:
    """Modules outside :data:`IMPLEMENTATION_PACKAGE` that import a kernel module of the engine (``kernels`` or
    ``twins`` in its name), or CuPy."""
    found = {}
    for module, names in structure.kernel_importers(root).items():
        if module.startswith(IMPLEMENTATION_PACKAGE + "."):
            continue
        kernels = {n for n in names if n.startswith("engine.") or n.split(".")[0] == "cupy"}
        if kernels:
            found[module] = kernels
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "engine").rglob("*.py")), ids=lambda p: p.name)
def test_the_engine_imports_no_front_end(path: Path) -> None:
    front = {m for m in imported_modules(path) if m.split(".")[0] in {"app", "dash", "dash_cytoscape", "flask"}}
    assert not front, f"{path.relative_to(ROOT)} imports {sorted(front)}"


def test_the_front_ends_import_only_the_door() -> None:
    assert door_violations(ROOT, FRONT_END_FILES) == {}


def test_the_door_check_finds_a_planted_import(tmp_path: Path) -> None:
    """A front end may import the door, a sub-door by name, the errors and the files; not a wing's module, nor the
    door's own workings (``engine.api.use``)."""
    (tmp_path / "engine" / "cli").mkdir(parents=True)
    (tmp_path / "engine" / "api").mkdir()
    (tmp_path / "engine" / "model").mkdir()
    for name in ("engine/__init__.py", "engine/api/__init__.py", "engine/api/maps.py", "engine/api/use.py",
                 "engine/errors.py", "engine/cli/__init__.py", "engine/model/__init__.py", "engine/model/dense.py"):
        (tmp_path / name).write_text("")  # fmt: skip
    front = tmp_path / "engine" / "cli" / "commands.py"
    front.write_text("from engine import api, errors\nfrom engine.api import maps\nfrom engine.cli import commands\n")
    assert door_violations(tmp_path, [front]) == {}
    front.write_text("from engine import api\ndef f():\n    from engine.model.dense import CHMM\n")
    assert door_violations(tmp_path, [front]) == {"engine/cli/commands.py": {"engine.model.dense"}}
    front.write_text("from engine.api.use import prune_model\n")
    assert door_violations(tmp_path, [front]) == {"engine/cli/commands.py": {"engine.api.use"}}


def test_the_wings_declare_what_the_rest_of_the_engine_takes() -> None:
    """Each wing's ``__all__`` declares every name another room (another wing, the door, the command line) takes
    from it, by name or from one of its modules imported whole."""
    assert structure.undeclared_uses(ROOT) == {}


@pytest.mark.parametrize("wing", structure.wings(ROOT))
def test_a_wing_s_public_names_are_importable_from_it(wing: str) -> None:
    module = importlib.import_module(wing)
    names = structure.declared(ROOT, wing)
    assert names == module.__all__ and len(set(names)) == len(names)
    assert [name for name in names if not hasattr(module, name)] == []
    assert set(structure.wing_uses(ROOT)[wing]) <= set(names)


def test_the_wing_check_finds_a_planted_use(tmp_path: Path) -> None:
    """A name another wing takes from a wing without the wing declaring it is found (imported by name or read from
    a module imported whole); a use inside the wing is the wing's own."""
    for folder in ("engine/model", "engine/network"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "engine" / "__init__.py").write_text("")
    (tmp_path / "engine" / "model" / "__init__.py").write_text('__all__ = ["CHMM"]\n')
    (tmp_path / "engine" / "model" / "dense.py").write_text("class CHMM: ...\ndef load(): ...\n")
    (tmp_path / "engine" / "model" / "pruning.py").write_text("from engine.model.dense import load\ndef prune(): ...\n")
    (tmp_path / "engine" / "network" / "__init__.py").write_text("__all__ = []\n")
    graph = tmp_path / "engine" / "network" / "graph.py"
    graph.write_text("from engine.model.dense import CHMM\n")
    assert structure.wings(tmp_path) == ["engine.model", "engine.network"]
    assert structure.undeclared_uses(tmp_path) == {}
    graph.write_text("from engine.model.dense import CHMM, load\nfrom engine.model import pruning\npruning.prune()\n")
    assert structure.undeclared_uses(tmp_path) == {
        "engine.model": {"load": {"engine.network.graph"}, "prune": {"engine.network.graph"}}
    }
    graph.write_text("from engine import model\nmodel.CHMM()\nmodel.random_model()\n")
    assert structure.undeclared_uses(tmp_path) == {"engine.model": {"random_model": {"engine.network.graph"}}}


def test_only_the_implementations_import_kernels() -> None:
    assert kernel_violations(ROOT) == {}
    assert {"engine.backends.cpu.inference", "engine.backends.gpu.device_blocks"} <= set(
        structure.kernel_importers(ROOT)
    )


@pytest.mark.parametrize("path", sorted((ROOT / "app").rglob("*.py")), ids=lambda p: p.name)
def test_the_app_has_no_numeric_kernels(path: Path) -> None:
    kernels = {m for m in imported_modules(path) if m.split(".")[0] in {"numba", "cupy"} or "kernels" in m}
    assert not kernels, f"{path.relative_to(ROOT)} imports {sorted(kernels)}"


def test_no_module_outside_the_implementations_tests_a_backend_or_a_kind_of_model() -> None:
    names = backend_names()
    offenders = []
    for path in sorted((ROOT / "engine").rglob("*.py")) + sorted((ROOT / "app").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative in IMPLEMENTATIONS:
            continue
        offenders += [f"{relative} {where}" for where in kind_tests(path.read_text(encoding="utf-8"), names)]
    assert offenders == []


@pytest.mark.parametrize(
    "planted",
    [
        'if backend == "gpu":\n    pass',
        'if options.backend != "cpu":\n    pass',
        'ok = backend in ("cpu", "auto")',
        'if model.form == "sparse":\n    pass',
        "if isinstance(model, sparse.SparseCHMM):\n    pass",
        "if type(model) is CHMM:\n    pass",
        'if getattr(model, "indptr", None) is not None:\n    pass',
    ],
)
def test_the_kind_check_finds_a_planted_test(planted: str) -> None:
    source = (ROOT / "engine" / "api" / "use.py").read_text(encoding="utf-8")
    assert kind_tests(source, backend_names()) == []
    assert kind_tests(source + "\n\n" + planted + "\n", backend_names()) != []



def test_the_engine_has_no_import_circle_between_modules_or_rooms() -> None:
    modules = structure.module_graph(ROOT)
    assert structure.circles(modules) == []
    rooms = structure.room_graph(modules)
    assert structure.circles(rooms) == []
    assert structure.arrows_up(rooms) == []


def test_the_engine_s_rooms_stand_on_at_most_ten_floors() -> None:
    rooms = structure.room_graph(structure.module_graph(ROOT))
    assert {"engine.api", "engine.model", "engine.backends", "engine.training", "engine.cli"} <= set(rooms)
    assert max(structure.floors(rooms).values()) <= MAX_FLOORS


def test_the_circle_check_finds_a_planted_circle(tmp_path: Path) -> None:
    """A function-level import that closes a circle (as engines <-> gpu once did) is found, between modules and
    between the rooms that hold them; the circle's arrows are the arrows up."""
    (tmp_path / "engine" / "backends").mkdir(parents=True)
    (tmp_path / "engine" / "__init__.py").write_text("")
    (tmp_path / "engine" / "backends" / "__init__.py").write_text("")
    (tmp_path / "engine" / "backends" / "engines.py").write_text("from engine import model\n")
    (tmp_path / "engine" / "model.py").write_text("def f():\n    from engine.backends.engines import Engine\n")
    modules = structure.module_graph(tmp_path)
    assert structure.circles(modules) == [["engine.backends.engines", "engine.model", "engine.backends.engines"]]
    rooms = structure.room_graph(modules)
    assert structure.circles(rooms) == [["engine.backends", "engine.model", "engine.backends"]]
    assert len(structure.arrows_up(rooms)) == 1
    assert structure.circles(structure.module_graph(ROOT)) == []


def test_no_module_or_function_is_above_its_limit() -> None:
    """No module of the engine or the app above 700 lines, no function above 80 (a page's layout and a command's
    argument table aside)."""
    assert structure.long_modules(ROOT) == {}
    assert structure.long_functions(ROOT) == {}


def test_the_choices_come_from_the_registry() -> None:
    train = cli.build_parser()._subparsers._group_actions[0].choices["train"]  # noqa: SLF001
    backend = next(a for a in train._actions if a.dest == "backend")  # noqa: SLF001
    assert tuple(backend.choices) == engines.backend_choices()
    assert {"cpu", "gpu", "gpu-sim", engines.AUTO_BACKEND} <= set(backend.choices)
    assert "gpu-sim" not in engines.backend_choices(in_app=True)


def test_chmm_app_is_registered_by_the_app() -> None:
    commands = cli.build_parser()._subparsers._group_actions[0].choices  # noqa: SLF001 - the parser's commands
    assert "app" in commands and "train" in commands
    assert commands["app"].get_default("run").__module__ == "app.cli"


def test_component_ids_are_assigned_once_and_distinct() -> None:
    """app/ids.py names every component once: a name bound twice, or two names for one id, would make Dash wire
    two components as one (a Train page radio once took the "Start training" button's id this way)."""
    tree = ast.parse((ROOT / "app" / "ids.py").read_text(encoding="utf-8"))
    bound = [
        (node.targets[0].id, node.value.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ]
    names = [name for name, _ in bound]
    values = [value for _, value in bound]
    assert len(bound) > 20
    assert sorted({n for n in names if names.count(n) > 1}) == []
    assert sorted({v for v in values if values.count(v) > 1}) == []
