"""The door's surface (:mod:`engine.api`): at most :data:`MAX_DOOR_NAMES` names in its ``__all__``; every name of it,
every field of its groups (``CHOICES``, ``DEFAULTS``) and every name of its sub-doors' ``__all__`` used by a front end
(the command line, the app, the ``chmm`` package when there is one, or the README's Python examples); and no front end
using a name of the door that is not on that surface. Each check finds a planted violation."""

from __future__ import annotations

import ast
import dataclasses
import re
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine import api

ROOT = Path(__file__).resolve().parents[1]
MAX_DOOR_NAMES = 60
"""The most names the door's ``__all__`` may hold (it held 188 before the families became sub-doors)."""
FRONT_END_PACKAGES = ("engine/cli", "app", "chmm")
"""The front ends whose use keeps a name on the door (``chmm`` counts once it exists)."""
DOCUMENTED = ("README.md",)
"""Documents whose Python examples (``engine.api.NAME``) count as a use: the door's Python callers."""

Chain = tuple[str, ...]


def front_end_files(root: Path) -> list[Path]:
    """The Python files of the front ends under ``root``."""
    return [p for package in FRONT_END_PACKAGES for p in sorted((root / package).rglob("*.py"))]


def _aliases(tree: ast.AST) -> dict[str, Chain]:
    """The local names a module binds to the door or to something in it, each with its path from the door: ``from
    engine import api`` binds ``api`` to (), ``from engine.api import maps`` binds ``maps`` to ("maps",), ``from
    engine.api.maps import learn_map`` binds ``learn_map`` to ("maps", "learn_map")."""
    found: dict[str, Chain] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            for alias in node.names:
                local = alias.asname or alias.name
                if node.module == "engine" and alias.name == "api":
                    found[local] = ()
                elif parts[:2] == ["engine", "api"]:
                    found[local] = (*parts[2:], alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "engine.api" and alias.asname:
                    found[alias.asname] = ()
    return found


def door_uses(source: str) -> set[Chain]:
    """The paths from the door that ``source`` uses: each name imported from it and each attribute chain read from a
    name bound to it (``api.maps.learn_map`` gives ("maps", "learn_map")), also through ``engine.api.``."""
    tree = ast.parse(source)
    aliases = _aliases(tree)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    uses = {chain for chain in aliases.values() if chain}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name):
            continue
        chain: list[str] = []
        current: ast.AST = node
        while isinstance(parents.get(current), ast.Attribute):
            current = parents[current]
            chain.append(current.attr)  # type: ignore[attr-defined]
        if node.id in aliases:
            uses.add((*aliases[node.id], *chain))
        elif node.id == "engine" and chain[:1] == ["api"]:
            uses.add(tuple(chain[1:]))
    return {use for use in uses if use}


def documented_uses(text: str) -> set[Chain]:
    """The paths from the door a document's Python examples use (``engine.api.train_tokens(...)``)."""
    return {tuple(m.split(".")) for m in re.findall(r"\bengine\.api\.([A-Za-z_][\w.]*[\w])", text)}


def surface(door: Any) -> dict[str, set[str] | None]:
    """The door's names, each with the names reached through it when it is a group (a frozen dataclass instance:
    its fields) or a sub-door (a module: its ``__all__``), else None."""
    found: dict[str, set[str] | None] = {}
    for name in door.__all__:
        value = getattr(door, name)
        if isinstance(value, types.ModuleType):
            found[name] = set(value.__all__)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            found[name] = {f.name for f in dataclasses.fields(value)}
        else:
            found[name] = None
    return found


def unused_names(names: dict[str, set[str] | None], uses: Iterable[Chain]) -> list[str]:
    """The door's names, and names of its groups and sub-doors, that no use reaches."""
    used = {use[:2] for use in uses} | {use[:1] for use in uses}
    unused = [name for name in names if (name,) not in used]
    for name, members in names.items():
        unused += [f"{name}.{m}" for m in sorted(members or ()) if (name, m) not in used]
    return unused


def unknown_uses(names: dict[str, set[str] | None], uses: Iterable[Chain]) -> list[str]:
    """The uses that reach past the door's surface: a name not in its ``__all__``, or not in its group's fields or
    its sub-door's ``__all__``."""
    unknown = set()
    for use in uses:
        if use[0] not in names:
            unknown.add(use[0])
        elif names[use[0]] is not None and len(use) > 1 and use[1] not in names[use[0]]:  # type: ignore[operator]
            unknown.add(".".join(use[:2]))
    return sorted(unknown)


def all_uses(root: Path) -> set[Chain]:
    """Every front end's uses of the door under ``root``, and its documents'."""
    uses: set[Chain] = set()
    for path in front_end_files(root):
        uses |= door_uses(path.read_text(encoding="utf-8"))
    for name in DOCUMENTED:
        if (root / name).exists():
            uses |= documented_uses((root / name).read_text(encoding="utf-8"))
    return uses


def door_problems(door: Any) -> list[str]:
    """What is wrong with a door's ``__all__``: more than :data:`MAX_DOOR_NAMES` names, a name twice (there or in a
    sub-door's ``__all__``), a name it does not define."""
    problems = []
    if len(door.__all__) > MAX_DOOR_NAMES:
        problems.append(f"{len(door.__all__)} names, at most {MAX_DOOR_NAMES}")
    for name, names in [("__all__", door.__all__)] + [
        (n, getattr(door, n).__all__) for n in door.__all__ if isinstance(getattr(door, n, None), types.ModuleType)
    ]:
        problems += [f"{name} lists {n} twice" for n in sorted({n for n in names if names.count(n) > 1})]
    problems += [f"{name} is not defined" for name in door.__all__ if not hasattr(door, name)]
    return problems


def test_the_door_has_at_most_sixty_names_each_once() -> None:
    assert door_problems(api) == []


def test_the_cap_finds_a_planted_sixty_first_name() -> None:
    names = [f"name{i}" for i in range(MAX_DOOR_NAMES)]
    door = types.SimpleNamespace(**dict.fromkeys(names, 0), __all__=names)
    assert door_problems(door) == []
    door.__all__ = [*names, "name0", "missing"]
    assert door_problems(door) == [
        f"{MAX_DOOR_NAMES + 2} names, at most {MAX_DOOR_NAMES}",
        "__all__ lists name0 twice",
        "missing is not defined",
    ]


def test_the_groups_are_frozen_and_the_sub_doors_resolve() -> None:
    names = surface(api)
    assert {"CHOICES", "DEFAULTS", "maps", "graph", "learners"} <= {n for n, m in names.items() if m is not None}
    try:
        api.CHOICES.ALGORITHMS = ()  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("CHOICES is not frozen")
    assert "float32" in api.CHOICES.DTYPES and api.CHOICES.AUTO == "auto"
    for name, members in names.items():
        for member in members or ():
            assert hasattr(getattr(api, name), member), f"{name}.{member}"


def test_every_door_name_is_used_by_a_front_end() -> None:
    assert unused_names(surface(api), all_uses(ROOT)) == []


def test_the_front_ends_use_only_the_door_s_names() -> None:
    """A front end that needs more of the engine adds the name to the door (its ``__all__``, a group or a sub-door),
    and the door stays what the front ends use."""
    assert unknown_uses(surface(api), all_uses(ROOT)) == []


def test_the_surface_checks_find_planted_violations(tmp_path: Path) -> None:
    front = tmp_path / "app" / "page.py"
    front.parent.mkdir()
    front.write_text(
        "from engine import api\nfrom engine.api import CHOICES, maps\n"
        "api.train_text(api.maps.learn_map, CHOICES.UNITS, maps.read_walk)\n"
    )
    (tmp_path / "README.md").write_text("`engine.api.score_tokens(model, tokens)` scores them.\n")
    names = {"train_text": None, "score_tokens": None, "CHOICES": {"UNITS"}, "maps": {"learn_map", "read_walk"}}
    uses = all_uses(tmp_path)
    assert uses >= {("train_text",), ("maps", "learn_map"), ("CHOICES", "UNITS"), ("maps", "read_walk")}
    assert unused_names(names, uses) == [] and unknown_uses(names, uses) == []
    planted = names | {"prune_model": None, "maps": {"learn_map", "read_walk", "plan_route"}}
    assert unused_names(planted, uses) == ["prune_model", "maps.plan_route"]
    front.write_text(front.read_text() + "api.learn_map\nmaps.place_field\nfrom engine.api.graph import word_senses\n")
    assert unknown_uses(names, all_uses(tmp_path)) == ["graph", "learn_map", "maps.place_field"]
