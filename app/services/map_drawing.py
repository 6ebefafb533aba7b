"""How the Maps page draws a learned map (issue 37): the observations' and modules' colours, and the map's clone graph
and a planned route as Cytoscape elements, laid out like the room. Pure functions of the map's view
(:func:`app.services.maps.load_view`); re-exported by :mod:`app.services.maps`."""

from __future__ import annotations

from typing import Any

import numpy as np

WALL_COLOUR = "#2b2b2b"
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#aec7e8",
    "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5", "#7f7f7f", "#393b79",
)  # fmt: skip
"""Observation colours (an observation ``o`` of a room is ``PALETTE[o % len]``; walls :data:`WALL_COLOUR`)."""
MODULE_PALETTE = ("#66c2a5", "#fc8d62", "#8da0cb", "#e78ac3", "#a6d854", "#ffd92f", "#e5c494", "#b3b3b3")


def observation_colour(symbol: str, symbols: list[str]) -> str:
    """The colour of an observation: by its value when it is a whole number (as the room preview colours it), else
    by its place among the walk's observations."""
    try:
        index = int(symbol)
    except ValueError:
        index = symbols.index(symbol) if symbol in symbols else 0
    return WALL_COLOUR if index < 0 else PALETTE[index % len(PALETTE)]


CELL = 90.0
"""Pixels between two cells of the room on the map (node places are in cells)."""


def map_elements(view: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The map as Cytoscape elements: a node per clone (placed by its mean place in the room, clones on the same
    place spread around it) with its observation and module colours; an edge per pair of clones the walk steps
    between (either way; steps into a wall, which stay on the clone, are left out)."""
    if not view:
        return []
    symbols = view["symbols"]
    taken: dict[tuple[int, int], int] = {}
    elements: list[dict[str, Any]] = []
    for node in view["nodes"]:
        spot = (round(node["row"] * 4), round(node["column"] * 4))
        rank = taken.get(spot, 0)
        taken[spot] = rank + 1
        angle = rank * 2.4
        shift = 0.0 if rank == 0 else 18.0 + 4.0 * rank
        elements.append(
            {
                "data": {
                    "id": f"c{node['clone']}",
                    "clone": node["clone"],
                    "label": str(node["clone"]),
                    "symbol": node["symbol"],
                    "module": node["module"],
                    "obs_colour": observation_colour(node["symbol"], symbols),
                    "module_colour": MODULE_PALETTE[node["module"] % len(MODULE_PALETTE)],
                },
                "position": {
                    "x": node["column"] * CELL + shift * float(np.cos(angle)),
                    "y": node["row"] * CELL + shift * float(np.sin(angle)),
                },
            }
        )
    pairs: dict[tuple[int, int], dict[str, Any]] = {}
    for edge in view["edges"]:
        u, v = edge["source"], edge["target"]
        if u == v:
            continue
        key = (min(u, v), max(u, v))
        entry = pairs.setdefault(key, {"count": 0, "actions": []})
        entry["count"] += edge["count"]
        entry["actions"] += [f"{u}→{v} {name}" for name in edge["actions"]]
    for (u, v), entry in sorted(pairs.items()):
        elements.append(
            {
                "data": {
                    "id": edge_id(u, v),
                    "source": f"c{u}",
                    "target": f"c{v}",
                    "count": entry["count"],
                    "actions": "; ".join(entry["actions"]),
                }
            }
        )
    return elements


def edge_id(u: int, v: int) -> str:
    """The Cytoscape id of the map's edge between clones ``u`` and ``v`` (either way)."""
    return f"e{min(u, v)}_{max(u, v)}"


def route_elements(route: list[int] | None) -> tuple[list[str], list[str]]:
    """The node and edge ids of a route, for highlighting it on the map."""
    if not route:
        return [], []
    nodes = [f"c{c}" for c in route]
    edges = [edge_id(u, v) for u, v in zip(route[:-1], route[1:], strict=True) if u != v]
    return nodes, edges


# ------------------------------------------------------------------------------------------ exports and cancel
