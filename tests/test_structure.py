"""The architecture's rules, checked on the source: the engine imports nothing from the front ends, the app has no
numeric kernels, no module outside the engine implementations compares a backend name or tests what kind of model
it holds (the registry of :mod:`engine.engines` decides), and the engine's modules import each other without a
circle (imports inside functions included)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engine import cli, engines

ROOT = Path(__file__).resolve().parents[1]
IMPLEMENTATIONS = {
    "engine/engines.py", "engine/cpu_engines.py", "engine/sparse.py", "engine/gpu.py", "engine/gpu_engine.py",
    "engine/gpu_lockstep.py",
    "engine/devices.py", "engine/model.py",
}  # fmt: skip
"""The modules that define the implementations and the registry: the only ones that may tell forms apart."""
MODEL_CLASSES = {"CHMM", "SparseCHMM", "DeviceModel"}
KIND_ATTRIBUTES = {"form", "indptr"}
"""Attributes whose value tells the kind of a model (its ``form``; only sparse models have ``indptr``)."""


def backend_names() -> set[str]:
    """Every backend and implementation name the registry knows, "auto", and the host models' forms."""
    names = {engines.AUTO, "dense", "sparse"}
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


def engine_imports(root: Path) -> dict[str, set[str]]:
    """The engine's modules (dotted names) and the engine modules each imports anywhere in its source (function
    level included; ``from engine import gpu`` counts as importing ``engine.gpu``)."""
    modules = {}
    for path in sorted((root / "engine").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets.add(base)
                targets |= {f"{base}.{alias.name}" for alias in node.names}
        graph[name] = {t for t in targets if t in modules and t != name and modules[t].name != "__init__.py"}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (each as the modules around it), found by depth-first search."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                found.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "engine").rglob("*.py")), ids=lambda p: p.name)
def test_the_engine_imports_no_front_end(path: Path) -> None:
    front = {m for m in imported_modules(path) if m.split(".")[0] in {"app", "dash", "dash_cytoscape", "flask"}}
    assert not front, f"{path.relative_to(ROOT)} imports {sorted(front)}"


ENGINE_INTERNALS = {
    "engine.inference", "engine.sparse", "engine.gpu", "engine.gpu_engine", "engine.gpu_lockstep", "engine.devices",
    "engine.cpu_engines",
    "engine.chunks", "engine.archive", "engine.codec",
    "engine.synthetic", "engine.backend", "engine.cli", "engine.commands", "engine.peers",
}  # fmt: skip
"""Engine modules the app never imports: the implementations and their numerics, file internals, the command line and
the peer learners themselves (the app reaches them through :mod:`engine.learners`, :mod:`engine.use`,
:mod:`engine.training` and :mod:`engine.model_files`), and the training package's submodules (its ``__init__`` is its
interface)."""


@pytest.mark.parametrize("path", sorted((ROOT / "app").rglob("*.py")), ids=lambda p: p.name)
def test_the_app_imports_only_the_engine_s_public_modules(path: Path) -> None:
    internal = internal_engine_imports(path.read_text(encoding="utf-8"))
    assert not internal, f"{path.relative_to(ROOT)} imports {sorted(internal)}"


TRAINING_SUBMODULES = tuple(
    f"engine.training.{p.stem}" for p in (ROOT / "engine" / "training").glob("*.py") if p.stem != "__init__"
)


def internal_engine_imports(source: str) -> set[str]:
    """The modules of :data:`ENGINE_INTERNALS` (or the training package's submodules, or kernels) that ``source``
    imports, ``from engine import inference`` included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {
        m for m in names
        if any(m == i or m.startswith(i + ".") for i in ENGINE_INTERNALS)
        or m.startswith(TRAINING_SUBMODULES + ("engine.kernels",))
    }  # fmt: skip


def test_the_public_module_check_finds_a_planted_import() -> None:
    assert internal_engine_imports("from engine import text, use") == set()
    assert internal_engine_imports("from engine import text, inference") == {"engine.inference"}
    assert internal_engine_imports("from engine.training.search import search_settings") != set()
    assert internal_engine_imports("import engine.kernels.cpu") == {"engine.kernels.cpu"}


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
    source = (ROOT / "engine" / "use.py").read_text(encoding="utf-8")
    assert kind_tests(source, backend_names()) == []
    assert kind_tests(source + "\n\n" + planted + "\n", backend_names()) != []


def test_the_engine_has_no_import_circle() -> None:
    assert circles(engine_imports(ROOT)) == []


def test_the_circle_check_finds_a_planted_circle(tmp_path: Path) -> None:
    """A function-level import that closes a circle (as engines <-> gpu once did) is found."""
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "__init__.py").write_text("")
    (tmp_path / "engine" / "engines.py").write_text("from engine import gpu\n")
    (tmp_path / "engine" / "gpu.py").write_text("def f():\n    from engine.engines import DenseEngine\n")
    (tmp_path / "engine" / "model.py").write_text("import numpy\n")
    assert circles(engine_imports(tmp_path)) == [["engine.engines", "engine.gpu", "engine.engines"]]
    assert circles(engine_imports(ROOT)) == []


def test_the_choices_come_from_the_registry() -> None:
    train = cli.build_parser()._subparsers._group_actions[0].choices["train"]  # noqa: SLF001
    backend = next(a for a in train._actions if a.dest == "backend")  # noqa: SLF001
    assert tuple(backend.choices) == engines.backend_choices()
    assert {"cpu", "gpu", "gpu-sim", engines.AUTO} <= set(backend.choices)
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
