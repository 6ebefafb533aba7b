"""Write docs/api.md, the reference of the ``chmm`` package (what a notebook imports), from its docstrings:
``python docs/make_api.py``. tests/test_notebook.py checks the file is current."""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import chmm  # noqa: E402


def _signature(obj: object) -> str:
    try:
        return str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""


def _doc(obj: object) -> str:
    """The docstring as Markdown: reStructuredText's roles (``:meth:`x` ``) and literals as code."""
    text = inspect.cleandoc(obj.__doc__ or "(no docstring)")
    text = re.sub(r":(?:meth|func|class|data|mod|attr):`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _members(cls: type) -> list[str]:
    lines = []
    for name, member in cls.__dict__.items():
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(member, property):
            lines += [f"#### `{cls.__name__}.{name}` (fitted attribute)", "", _doc(member), ""]
        elif isinstance(member, classmethod):
            function = member.__func__
            lines += [f"#### `{cls.__name__}.{name}{_signature(function)}`", "", _doc(function), ""]
        elif inspect.isfunction(member) and name != "__init__":
            lines += [f"#### `{cls.__name__}.{name}{_signature(member)}`", "", _doc(member), ""]
    return lines


def reference_markdown() -> str:
    """The reference: the package's docstring, then each public name's signature and docstring (a class's public
    methods and fitted attributes after it)."""
    lines = ["# The `chmm` package", "", "Generated from the docstrings by `python docs/make_api.py`.", "",
             inspect.cleandoc(chmm.__doc__ or ""), ""]  # fmt: skip
    for name in sorted(chmm.__all__, key=str.lower):
        obj = getattr(chmm, name)
        if inspect.isclass(obj):
            lines += [f"## `chmm.{name}{_signature(obj)}`", "", _doc(obj), ""]
            lines += _members(obj)
        elif callable(obj):
            lines += [f"## `chmm.{name}{_signature(obj)}`", "", _doc(obj), ""]
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    (ROOT / "docs" / "api.md").write_text(reference_markdown(), encoding="utf-8")
