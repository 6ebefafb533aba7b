"""The Maps page's detour (issue 50; George et al. 2021, Fig. 3): the route between two clones planned again with
clones closed, as a blocked door is, by the engine's planner (:func:`engine.cognitive.planning.block`,
:func:`~engine.cognitive.planning.plan_flat`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.services import UserError, maps
from engine import api
from engine.errors import CHMMError


def _clones(values: Any) -> list[Any]:
    return list(values) if isinstance(values, list | tuple) else [values]


def plan_detour(folder: Path, start: Any, goal: Any, closed: Any) -> dict[str, Any] | None:
    """The shortest route from ``start`` to ``goal`` on the session's map with every way into the ``closed`` clones
    blocked: its clones, its actions and a sentence that sets it against the open map's shortest route; None when
    no clone is closed. UserError in one sentence when a clone is not on the map, the start or goal is closed, or
    no way is left."""
    if not closed:
        return None
    view = maps.load_view(folder)
    if view is None:
        raise UserError("This session has no map yet: learn one first.")
    begin, end = maps._clone(start, view, "start"), maps._clone(goal, view, "goal")
    shut = sorted({maps._clone(clone, view, "closed") for clone in _clones(closed)})
    if begin in shut or end in shut:
        raise UserError("The start and the goal cannot be closed: close a clone on the way between them.")
    model, _ = maps._load(folder)
    names = ", ".join(str(c) for c in shut)
    closed_text = f"clone{'s' if len(shut) != 1 else ''} {names} closed"
    blocked = api.maps.block(model, sorted({way for c in shut for way in api.maps.ways_into(model, c)}))
    try:
        detour = api.maps.plan_flat(blocked, begin, end)
    except CHMMError:
        unreachable = f"With {closed_text}, clone {end} cannot be reached from clone {begin}: no way is left."
        raise UserError(unreachable) from None
    try:
        open_steps = f"the open map's shortest route takes {api.maps.plan_flat(model, begin, end).steps}"
    except CHMMError:
        open_steps = "the open map has no route the planner finds"
    moves = ", ".join(detour.moves) or "none"
    text = f"With {closed_text}: a detour of {detour.steps} steps ({open_steps}): {moves}."
    return {"route": [int(c) for c in detour.route], "moves": list(detour.moves), "closed": shut, "text": text}
