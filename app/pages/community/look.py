"""What the Communities page looks like: the tables' columns, the module map's and the subgraph's stylesheets and
layouts, the colours and sizes of mapped columns, and the builders of its tables and views."""

from __future__ import annotations

from typing import Any

import dash_cytoscape as cyto
from dash import html

from app import grids, ids

TOOLTIPS = {
    "flow": "Flow: the share of time a random walk on the text (following T) spends in the module's clones; the "
    "top modules' flows sum to 1.",
    "size": "Clones: hidden states, each emitting one symbol (a character, word or token); a symbol's clones tell its "
    "contexts apart.",
    "name": "The module's most probable generalized word(s); -ell- marks a fragment (the module holds no word start).",
    "submodules": "Modules nested in this one (Infomap's multilevel result); 0 for a leaf module.",
}
COLUMNS = [
    grids.column(
        "id",
        "Module",
        cellStyle={"function": "({borderLeft: '6px solid ' + (params.data ? params.data.colour : '#ccc')})"},
        maxWidth=120,
    ),
    grids.column("name", "Name (top generalized words)", tooltip=TOOLTIPS["name"], minWidth=200),
    grids.column("size", "Clones", ",", tooltip=TOOLTIPS["size"]),
    grids.column("flow", "Flow", ".4f", tooltip=TOOLTIPS["flow"]),
    grids.column("chars", "Characters"),
    grids.column("words", "Words", minWidth=200),
    grids.column("submodules", "Submodules", "number", tooltip=TOOLTIPS["submodules"]),
]
"""The module table's columns (the module's colour on the map as the left border of its id)."""
MIN_LABEL_PX = 7
"""Labels on the module map and the subgraph are left out while they would read smaller than this on screen (at
the fit's zoom of a crowded graph they would cover the nodes); zooming in brings them back."""
MAP_STYLESHEET = [
    {
        "selector": "node",
        "style": {
            "label": "data(label)",
            "width": "data(size)",
            "height": "data(size)",
            "background-color": "data(colour)",
            "font-size": "data(font)",
            "text-valign": "bottom",
            "text-halign": "center",
            "color": "#1f2d3d",
            "text-outline-color": "#fff",
            "text-outline-width": 2,
            "min-zoomed-font-size": MIN_LABEL_PX,
        },
    },
    {
        "selector": "edge",
        "style": {
            "width": "data(width)",
            "curve-style": "bezier",
            "target-arrow-shape": "triangle",
            "arrow-scale": 0.7,
            "line-color": "#b8c4d0",
            "target-arrow-color": "#b8c4d0",
            "opacity": 0.7,
        },
    },
    {"selector": "node:selected", "style": {"border-width": 4, "border-color": "#1f2d3d"}},
    {"selector": "node[?label]", "style": {"z-index": 5}},  # labelled modules and their labels above the small ones
    {"selector": ".label-above", "style": {"text-valign": "top", "text-halign": "center"}},
    {"selector": ".label-right", "style": {"text-valign": "center", "text-halign": "right"}},
    {"selector": ".label-left", "style": {"text-valign": "center", "text-halign": "left"}},
]
HIGHLIGHT = {"border-width": 5, "border-color": "#d62728", "z-index": 10}
HIGHLIGHT_EDGE = {"line-color": "#d62728", "target-arrow-color": "#d62728", "opacity": 1, "z-index": 10}
STYLESHEET = [
    {
        "selector": "node",
        "style": {
            "label": "data(char)",
            "background-color": "data(colour)",
            "color": "#fff",
            "text-valign": "center",
            "text-halign": "center",
            "font-size": 12,
            "width": 22,
            "height": 22,
            "min-zoomed-font-size": MIN_LABEL_PX,
            "text-wrap": "ellipsis",
            "text-max-width": "60px",
        },
    },
    {  # a word or a token: under the clone in dark letters, as wide as a few clones (clipped inside it before)
        "selector": "node[?long]",
        "style": {"text-valign": "bottom", "color": "#1f2d3d", "text-outline-color": "#fff", "text-outline-width": 2,
                  "text-max-width": "90px", "font-size": 11},
    },  # fmt: skip
    {"selector": "node:selected", "style": {"border-width": 4, "border-color": "#1f2d3d"}},
    {
        "selector": "edge",
        "style": {
            "width": "data(width)",
            "curve-style": "bezier",
            "target-arrow-shape": "triangle",
            "arrow-scale": 0.6,
            "line-color": "#9fb3c8",
            "target-arrow-color": "#9fb3c8",
            "opacity": 0.8,
        },
    },
]


GRAPH_LAYOUTS = {
    "preset": "force-directed (the server's)",
    "breadthfirst": "hierarchical, from the clone with the most flow",
    "concentric": "concentric, by degree",
    "circle": "circular, by (sub)module",
}
"""The subgraph's layouts (Cytoscape's, but the first: positions computed on the server)."""


CLONE_COLUMNS = [
    ("clone", "clone"),
    ("character", "symbol"),
    ("module", "module"),
    ("flow", "flow"),
    ("in_flow", "in flow"),
    ("out_flow", "out flow"),
    ("exit_flow", "flow out of the module"),
    ("enter_flow", "flow into the module"),
    ("degree", "degree"),
    ("betweenness", "betweenness"),
]
MAPPED_COLUMNS = ("flow", "in_flow", "out_flow", "exit_flow", "enter_flow", "degree", "betweenness")
"""The clone table's numeric columns that the subgraph's clone size and colour can show."""
MAPPED_OPTIONS = [{"label": f"by {header}", "value": key} for key, header in CLONE_COLUMNS if key in MAPPED_COLUMNS]
NODE_SIZES = (10.0, 56.0)
"""Smallest and largest clone diameter (px) when the size shows a column."""
NODE_COLOURS = ((0xC6, 0xDB, 0xEF), (0x08, 0x30, 0x6B))
"""Colours of the lowest and the highest value when the colour shows a column (light to dark blue)."""
BOUNDARY_COLOURS = {"enters": "#e6550d", "leaves": "#756bb1", "both": "#e7298a", "inside": "#bdbdbd"}
"""Clone colours "by the boundary": flow enters the module at the clone, leaves it there, both, or neither (at least
:data:`BOUNDARY_SHARE` of the clone's flow)."""
BOUNDARY_SHARE = 0.1
"""The share of a clone's flow that must enter (leave) the module there for the clone to be drawn on the boundary: on
the sample model every clone of a module passes some flow across it."""


def boundary_side(row: dict[str, Any]) -> str:
    """Where a clone of the clone table stands on its module's boundary: "enters", "leaves", "both" or "inside"."""
    share = BOUNDARY_SHARE * float(row.get("flow", 0.0))
    enters, leaves = float(row.get("enter_flow", 0.0)) >= share > 0, float(row.get("exit_flow", 0.0)) >= share > 0
    return {(True, False): "enters", (False, True): "leaves", (True, True): "both"}.get((enters, leaves), "inside")


EDGE_COLUMNS = [
    ("from", "from"),
    ("to", "to"),
    ("probability", "T"),
    ("flow", "flow"),
    ("boundary", "crosses the module's boundary"),
]


NUMBER_FORMATS = {"probability": ".4f", "flow": ".3~g", "in_flow": ".3~g", "out_flow": ".3~g", "exit_flow": ".3~g",
                  "enter_flow": ".3~g", "degree": ",", "betweenness": ".4~f"}  # fmt: skip
"""How the Tables card's numeric columns show their values (sorting and filtering work on the numbers)."""


def data_table(
    component: str, columns: list[tuple[str, str]], csv_button: str, file_name: str, **more: Any
) -> html.Div:
    """A sortable grid of the Tables card with a filter under every header and a CSV export, ``columns`` as (key,
    header) pairs (:func:`app.grids.grid`)."""
    specs = [grids.column(key, name, NUMBER_FORMATS.get(key, "text")) for key, name in columns]
    return grids.grid(component, specs, csv_button=csv_button, file_name=file_name, **more)


WORD_MARKS = {
    ("word", True): ("seen", "word-seen"),
    ("word", False): ("novel", "word-novel"),
    ("fragment", True): ("fragment, seen", "word-seen"),
    ("fragment", False): ("fragment, novel", "word-seen"),
    ("fragment", None): ("fragment", "word-seen"),
    ("placeholder", True): ("placeholder for rare words", "word-seen"),
    ("placeholder", None): ("placeholder for rare words", "word-seen"),
}


def word_mark(word: dict[str, Any]) -> Any:
    """The label after a generalized word: seen / novel (in the training vocabulary or not), fragment, or the
    rare-word placeholder, as an html.Span; nothing for a plain word without a reference."""
    key = (word.get("kind", "word"), word.get("seen"))
    if key not in WORD_MARKS:
        return ""
    label, css = WORD_MARKS[key]
    return html.Span(label, className=css)


def view_buttons(view: str) -> html.Div:
    """Zoom, fit and image download buttons of a network view ("map" or "graph")."""

    def button(action: str, label: str, title: str) -> html.Button:
        return html.Button(
            label,
            id={"type": ids.COMMUNITIES_VIEW_BUTTON, "view": view, "action": action},
            className="button small",
            title=title,
        )

    return html.Div(
        [
            button("in", "+", "Zoom in (or scroll)"),
            button("out", "−", "Zoom out"),
            button("fit", "Fit", "Fit the whole view"),
            button("png", "PNG", "Download the view as a PNG image"),
            button("svg", "SVG", "Download the view as an SVG image"),
        ],
        className="buttons view-buttons",
    )


def network_view(view: str, component: str, stylesheet: list[Any], height: int, legend: str) -> list[Any]:
    """A network view (the module map or a module's subgraph): its buttons, the Cytoscape canvas with preset
    positions (laid out on the server) and its legend."""
    return [
        view_buttons(view),
        cyto.Cytoscape(
            id=component,
            elements=[],
            layout={"name": "preset", "fit": True, "padding": 20},
            stylesheet=stylesheet,
            style={"width": "100%", "height": f"{height}px"},
            minZoom=0.05,
            maxZoom=8,
        ),
        html.Div(legend, className="hint legend"),
    ]
