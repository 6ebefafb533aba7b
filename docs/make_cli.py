"""Write docs/cli.md, the command line's reference, from the argument parser (``python docs/make_cli.py``)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.cli import reference_markdown  # noqa: E402

(ROOT / "docs" / "cli.md").write_text(reference_markdown(), encoding="utf-8")
