"""The project's structure measured from its imports: the engine's rooms (each top-level module or subpackage of
``engine/`` is one room, its wing) and modules, the arrows between them, their floors (the longest chain of arrows
below a room, plus one), circles and arrows up (an arrow to a room not strictly below, which only a circle makes),
what the front ends import from the engine, which modules import the numeric kernels, and modules and functions over
the size limits. ``tests/test_structure.py`` asserts the rules on these figures; run ``python tests/structure.py``
(optionally ``--root DIR`` for another checkout) to print them."""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterable
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRONT_ENDS = ("app",)
"""Front-end packages outside the engine; the command line is the engine's own ``engine/cli`` wing."""
MODULE_LINES = 700
FUNCTION_LINES = 80
LAYOUT_FUNCTIONS = {"layout", "add_parser"}
"""Functions exempt from the function limit: a Dash page's layout table and a command's argument table."""


def module_name(root: Path, path: Path) -> str:
    """The dotted name of the module at ``path`` (a package's ``__init__`` is named by its package)."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(root: Path, path: Path, known: Iterable[str]) -> set[str]:
    """The modules of ``known`` that the source at ``path`` imports anywhere (function level included; ``from
    engine import text`` counts as importing ``engine.corpora.text``; relative imports resolved)."""
    known = set(known)
    name = module_name(root, path)
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
            names = {f"{base}.{alias.name}" for alias in node.names}
            targets |= names if names <= known else names | {base}  # "from package import module" is the module
    found = set()
    for target in targets:
        # "engine.a.b.name" imports the deepest known module it names
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def engine_modules(root: Path) -> dict[str, Path]:
    """Every module of the engine by dotted name."""
    return {module_name(root, p): p for p in sorted((root / "engine").rglob("*.py"))}


def module_graph(root: Path) -> dict[str, set[str]]:
    """The engine's modules and the engine modules each imports (a package's ``__init__`` only where the code names
    the package itself, as ``from engine import api`` does: importing a submodule runs its package's ``__init__``,
    which is not an arrow of the code's own)."""
    modules = engine_modules(root)
    return {name: imports_of(root, path, modules) for name, path in modules.items()}


def room_of(module: str) -> str:
    """The room of an engine module: ``engine.x`` for a top-level module, ``engine.x`` for anything in the
    subpackage ``engine/x/``."""
    return ".".join(module.split(".")[:2])


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded into rooms (arrows inside one room dropped)."""
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module == "engine":
            continue
        room = room_of(module)
        rooms.setdefault(room, set())
        rooms[room] |= {room_of(t) for t in targets if room_of(t) != room and t != "engine"}
    return rooms


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (each as the nodes around it), found by depth-first search."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                found.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each node's floor: 1 for a node that imports nothing of the graph, else one above its highest target (an
    arrow that closes a circle is not followed)."""
    on_path: set[str] = set()

    @cache
    def floor(node: str) -> int:
        on_path.add(node)
        below = [floor(t) for t in graph.get(node, ()) if t in graph and t not in on_path]
        on_path.discard(node)
        return 1 + max(below, default=0)

    return {node: floor(node) for node in graph}


def arrows_up(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Arrows to a node on the same floor or above (there are none without a circle)."""
    level = floors(graph)
    return [(a, b) for a, targets in graph.items() for b in targets if b in level and level[b] >= level[a]]


def front_end_imports(root: Path) -> dict[str, set[str]]:
    """Each front-end module and the engine modules it imports."""
    modules = engine_modules(root)
    found = {}
    for package in FRONT_ENDS:
        for path in sorted((root / package).rglob("*.py")):
            found[module_name(root, path)] = imports_of(root, path, modules) - {"engine"}
    return found


NOT_WINGS = {"engine.api", "engine.cli"}
"""Subpackages of the engine that are not wings: the door and the command line."""


def wings(root: Path) -> list[str]:
    """The engine's wings: its subpackages but the door and the command line."""
    found = [f"engine.{p.parent.name}" for p in sorted((root / "engine").glob("*/__init__.py"))]
    return [w for w in found if w not in NOT_WINGS]


def declared(root: Path, wing: str) -> list[str]:
    """The names a wing declares public: its ``__init__``'s ``__all__`` (read from the source), [] without one."""
    tree = ast.parse((root / Path(*wing.split(".")) / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return [e.value for e in node.value.elts if isinstance(e, ast.Constant)]  # type: ignore[attr-defined]
    return []


def wing_uses(root: Path) -> dict[str, dict[str, set[str]]]:
    """For each wing, the names other engine modules (other wings, the door, the command line) take from it, each
    with the modules that take it: imported by name (``from engine.model.dense import CHMM``, also from the wing's
    package) or read from a module of the wing imported whole (``engines.engine_for`` after ``from engine.backends
    import engines``)."""
    modules = engine_modules(root)
    wing_names = wings(root)
    uses: dict[str, dict[str, set[str]]] = {w: {} for w in wing_names}

    def wing_of(module: str) -> str | None:
        return next((w for w in wing_names if module == w or module.startswith(w + ".")), None)

    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        whole: dict[str, str] = {}  # local name -> wing of a module imported whole
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "engine":
                for alias in node.names:  # a wing imported whole: "from engine import training"
                    if f"engine.{alias.name}" in wing_names and f"engine.{alias.name}" != wing_of(name):
                        whole[alias.asname or alias.name] = f"engine.{alias.name}"
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                wing = wing_of(node.module)
                if wing is None or wing == wing_of(name):
                    continue
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in modules:
                        whole[alias.asname or alias.name] = wing
                    else:
                        uses[wing].setdefault(alias.name, set()).add(name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    wing = wing_of(alias.name)
                    if wing is not None and wing != wing_of(name) and alias.asname:
                        whole[alias.asname] = wing
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in whole:
                uses[whole[node.value.id]].setdefault(node.attr, set()).add(name)
    return uses


def undeclared_uses(root: Path) -> dict[str, dict[str, set[str]]]:
    """For each wing, the names other engine modules take from it that its ``__all__`` does not declare."""
    found = {}
    for wing, names in wing_uses(root).items():
        public = set(declared(root, wing))
        missing = {name: users for name, users in names.items() if name not in public}
        if missing:
            found[wing] = missing
    return found


def kernel_importers(root: Path) -> dict[str, set[str]]:
    """The modules (engine and front ends) that import a numeric kernel module (``kernels`` in its name, numba or
    CuPy), and which."""
    found = {}
    for path in sorted((root / "engine").rglob("*.py")) + [p for f in FRONT_ENDS for p in (root / f).rglob("*.py")]:
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        kernels = {n for n in names if "kernels" in n.split(".") or n.split(".")[0] in {"numba", "cupy"}}
        if kernels:
            found[module_name(root, path)] = kernels
    return found


def long_modules(root: Path, limit: int = MODULE_LINES) -> dict[str, int]:
    """Python modules of the engine and the front ends above ``limit`` lines."""
    paths = [p for f in ("engine", *FRONT_ENDS) for p in sorted((root / f).rglob("*.py"))]
    sizes = {str(p.relative_to(root)): len(p.read_text(encoding="utf-8").splitlines()) for p in paths}
    return {p: n for p, n in sizes.items() if n > limit}


def long_functions(root: Path, limit: int = FUNCTION_LINES) -> dict[str, int]:
    """Functions of the engine and the front ends above ``limit`` lines, but for the layout and argument tables of
    :data:`LAYOUT_FUNCTIONS`."""
    found = {}
    for path in [p for f in ("engine", *FRONT_ENDS) for p in sorted((root / f).rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name not in LAYOUT_FUNCTIONS:
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found[f"{path.relative_to(root)}:{node.name}"] = lines
    return found


def report(root: Path) -> str:
    """The figures as a table, then the lists behind them."""
    modules = module_graph(root)
    rooms = room_graph(modules)
    fronts = front_end_imports(root)
    used = sorted(set().union(*fronts.values())) if fronts else []
    rows = [
        ("engine modules", len(modules)),
        ("engine rooms (top-level modules and subpackages)", len(rooms)),
        ("arrows between engine modules", sum(len(t) for t in modules.values())),
        ("arrows between engine rooms", sum(len(t) for t in rooms.values())),
        ("floors (modules)", max(floors(modules).values(), default=0)),
        ("floors (rooms)", max(floors(rooms).values(), default=0)),
        ("circles (modules)", len(circles(modules))),
        ("circles (rooms)", len(circles(rooms))),
        ("arrows up (rooms)", len(arrows_up(rooms))),
        ("engine modules the front ends import", len(used)),
        ("modules importing kernels, numba or CuPy", len(kernel_importers(root))),
        ("names the wings declare public (their __all__)", sum(len(declared(root, w)) for w in wings(root))),
        ("names taken from a wing that it does not declare", sum(len(n) for n in undeclared_uses(root).values())),
        (f"modules above {MODULE_LINES} lines", len(long_modules(root))),
        (f"functions above {FUNCTION_LINES} lines (layout and argument tables aside)", len(long_functions(root))),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"| {'figure':<{width}} | value |", f"|{'-' * (width + 2)}|------:|"]
    lines += [f"| {name:<{width}} | {value:>5} |" for name, value in rows]
    level = floors(rooms)
    lines.append("\nrooms by floor, top down:")
    for room in sorted(rooms, key=lambda r: (-level[r], r)):
        lines.append(f"  {level[room]:>2}  {room}  -> {', '.join(sorted(rooms[room])) or '-'}")
    lines.append("\nengine modules the front ends import: " + ", ".join(used))
    lines.append("modules importing kernels: " + ", ".join(sorted(kernel_importers(root))))
    lines.append("wings' public names: " + ", ".join(f"{w} {len(declared(root, w))}" for w in wings(root)))
    lines.append("long modules: " + ", ".join(f"{p} {n}" for p, n in long_modules(root).items()))
    lines.append("long functions: " + ", ".join(f"{p} {n}" for p, n in long_functions(root).items()))
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure (default: this one)")
    print(report(parser.parse_args().root.resolve()))
