"""The door's drawing of the clone graph (:mod:`engine.network.drawing` and :mod:`engine.network.packing`):
positions laid out by force, by group or packed by module tree, how well a layout keeps modules apart, and a
module's colour. Reached as ``api.drawing``."""

from __future__ import annotations

from engine.network.drawing import force_layout, grouped_layout, layout_quality, module_colour
from engine.network.packing import packed_layout

__all__ = ["force_layout", "grouped_layout", "layout_quality", "module_colour", "packed_layout"]
"""What a front end may use of the drawing."""
