"""The architecture's rules, checked on the source: the engine imports nothing from the front ends, the app has no
numeric kernels, and no caller outside the engine implementations tests what kind of model it holds."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engine import cli

ROOT = Path(__file__).resolve().parents[1]
IMPLEMENTATIONS = {"engines.py", "sparse.py", "gpu.py"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted((ROOT / "engine").rglob("*.py")), ids=lambda p: p.name)
def test_the_engine_imports_no_front_end(path: Path) -> None:
    front = {m for m in imported_modules(path) if m.split(".")[0] in {"app", "dash", "dash_cytoscape", "flask"}}
    assert not front, f"{path.relative_to(ROOT)} imports {sorted(front)}"


@pytest.mark.parametrize("path", sorted((ROOT / "app").rglob("*.py")), ids=lambda p: p.name)
def test_the_app_has_no_numeric_kernels(path: Path) -> None:
    kernels = {m for m in imported_modules(path) if m.split(".")[0] in {"numba", "cupy"} or "kernels" in m}
    assert not kernels, f"{path.relative_to(ROOT)} imports {sorted(kernels)}"


def test_no_caller_outside_the_implementations_tests_the_kind_of_model() -> None:
    offenders = []
    for path in sorted((ROOT / "engine").rglob("*.py")) + sorted((ROOT / "app").rglob("*.py")):
        if path.parent.name == "engine" and path.name in IMPLEMENTATIONS:
            continue
        source = path.read_text(encoding="utf-8")
        for needle in ("isinstance(model, sparse", "SparseCHMM)", '"indptr", None', "GpuDenseEngine("):
            if needle in source:
                offenders.append(f"{path.relative_to(ROOT)}: {needle}")
    assert not offenders


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
