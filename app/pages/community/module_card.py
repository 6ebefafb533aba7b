"""The Communities page's module card: one module's clone and edge tables, its subgraph clone by clone, what the
pointer is on, and its columns mapped onto the subgraph's colours and sizes, with a searched word's path marked."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from dash import Input, Output, State, callback, ctx, dcc, html, no_update

from app import ids, jobs, sessions, ui
from app.pages.community.look import (
    BOUNDARY_COLOURS,
    GRAPH_LAYOUTS,
    HIGHLIGHT,
    HIGHLIGHT_EDGE,
    MAP_STYLESHEET,
    MAPPED_COLUMNS,
    NODE_COLOURS,
    NODE_SIZES,
    STYLESHEET,
    boundary_side,
    word_mark,
)
from app.services import graphs as graph_service
from app.services import overviews as overview_service
from app.services import tables as table_service
from app.services import whole_graph as whole_service
from engine import api


@callback(
    Output(ids.COMMUNITIES_GRAPH, "layout", allow_duplicate=True),
    Input(ids.COMMUNITIES_GRAPH_LAYOUT, "value"),
    State(ids.COMMUNITIES_GRAPH, "elements"),
    prevent_initial_call=True,
)
def lay_out_graph(name: str | None, elements: list[dict[str, Any]] | None) -> Any:
    """The subgraph in the chosen layout (a hierarchy rooted at the clone with the most flow)."""
    if name not in GRAPH_LAYOUTS or name == "preset":
        return {"name": "preset", "fit": True, "padding": 20}
    layout: dict[str, Any] = {"name": name, "fit": True, "padding": 20, "animate": False}
    if name == "breadthfirst":
        nodes = [e["data"] for e in elements or [] if "source" not in e["data"]]
        if nodes:
            layout |= {"directed": True, "roots": f'[id = "{max(nodes, key=lambda d: d.get("flow", 0))["id"]}"]'}
    return layout


@callback(
    Output(ids.COMMUNITIES_CLONE_TABLE, "selectedRows", allow_duplicate=True),
    Input(ids.COMMUNITIES_GRAPH, "tapNodeData"),
    prevent_initial_call=True,
)
def select_tapped_clone(tapped: dict[str, Any] | None) -> Any:
    """A clone clicked in the subgraph is selected in the clone table (its rows are named by the clone's label)."""
    if not tapped or not tapped.get("label"):
        return no_update
    return {"ids": [str(tapped["label"])]}


@callback(
    Output(ids.COMMUNITIES_DETAIL, "children"),
    Output(ids.COMMUNITIES_GRAPH, "elements"),
    Output(ids.COMMUNITIES_GRAPH_NOTE, "children"),
    Output(ids.COMMUNITIES_DRILL, "disabled"),
    Output(ids.COMMUNITIES_INSPECT, "children", allow_duplicate=True),
    Input(ids.COMMUNITIES_SELECTED, "data"),
    Input(ids.COMMUNITIES_RUN_SHOWN, "value"),
    State(ids.SESSION, "data"),
    prevent_initial_call="initial_duplicate",
)
def show_module(selected: str | None, run: str | None, session_id: str | None) -> tuple[Any, Any, Any, Any, Any]:
    """The Module card of the open module of the run shown: its facts, generalized words and subgraph."""
    if not selected:
        try:  # the sample model comes with its communities: there is nothing to run first
            ran = bool(graph_service.read_run(sessions.session_folder(session_id), run or graph_service.CURRENT_RUN))
        except ui.EXPECTED_ERRORS:
            ran = False
        hint = "Click a module on the map or select one in the table." if ran else (
            "Run Infomap, then click a module on the map or select one in the table."
        )  # fmt: skip
        return ui.message(hint), [], None, True, None
    try:
        detail = graph_service.module_detail(
            sessions.session_folder(session_id), selected, run=run or graph_service.CURRENT_RUN
        )
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc), [], None, True, None
    words = [
        html.Li([html.Code(word["text"]), f"  {word['probability']:.3f} ", word_mark(word)]) for word in detail["words"]
    ]
    characters = detail.get("unit", "characters") == "characters"
    heading = "Generalized words" if characters else "Generalized phrases"
    summary = ui.facts(
        [
            ("Module", f"{detail['id']}: {detail['name']}"),
            ("Clones", f"{detail['size']:,}"),
            ("Flow", f"{detail['flow']:.4f}"),
            *module_flow_facts(detail),
            ("Submodules", f"{detail['submodules']:,}" if detail["submodules"] else "none"),
            ("Characters" if characters else "Symbols", detail["chars"]),
        ]
    )
    reference = "" if detail["reference"] else " (no reference corpus: seen/novel not checked)"
    fragments = any(word.get("kind") == "fragment" for word in detail["words"])
    if not characters:
        said = (
            f"The phrases of {detail.get('unit', 'words')} the module generates from where flow enters it to where it "
            "leaves; seen = a phrase of the training text, novel = one the text never has."
        )
    elif fragments:
        said = (
            "Fragments: this module completes no whole word (it holds the middle or the end of words), so these are "
            "the strings it generates from where flow enters it to where it leaves."
        )
    else:
        said = (
            "Whole words the module generates from a word start to a space; seen = a word of the training text, "
            "novel = a word the text never has (the paper's rattle)."
        )
    explain = html.Div(said, className="hint")
    export = dcc.Link(
        f"Export module {detail['id']}'s subgraph",
        href=f"/export?{urlencode({'module': detail['id']})}",
        id=ids.COMMUNITIES_EXPORT_LINK,
        className="button",
    )
    inspect = html.Div("Hover or click a clone, or click an arrow, to inspect it here.", className="hint")
    return (
        html.Div([summary, html.H4(heading + reference), explain, html.Ol(words), export]),
        detail["elements"],
        detail["note"],
        not detail["submodules"],
        inspect,
    )


def module_flow_facts(detail: dict[str, Any]) -> list[tuple[str, str]]:
    """The module card's rows of how flow and links cross the module's boundary: the flow entering and leaving it
    (Infomap's) and its degree in the clone graph (edges in, out, within)."""
    rows = []
    if detail.get("enter_flow") is not None:
        rows.append(("Flow in / out", f"{detail['enter_flow']:.4f} enters, {detail['exit_flow']:.4f} leaves"))
    links = detail.get("links")
    if links:
        rows.append(
            (
                "Degree",
                f"{links['in'] + links['out']:,} edges cross its boundary ({links['in']:,} in, {links['out']:,} out), "
                f"{links['within']:,} within",
            )
        )
    return rows


@callback(
    Output(ids.COMMUNITIES_INSPECT, "children"),
    Input(ids.COMMUNITIES_GRAPH, "mouseoverNodeData"),
    Input(ids.COMMUNITIES_GRAPH, "tapNodeData"),
    Input(ids.COMMUNITIES_GRAPH, "tapEdgeData"),
    prevent_initial_call=True,
)
def inspect(hovered: dict[str, Any] | None, tapped: dict[str, Any] | None, edge: dict[str, Any] | None) -> Any:
    """What the inspector shows of the clone hovered or clicked, or of the transition clicked (no server work: the
    figures travel with the subgraph's elements)."""
    trigger = ctx.triggered[0]["prop_id"] if ctx.triggered else ""
    if trigger.endswith("tapEdgeData") and edge:
        rows = [
            ("Transition", f"{edge.get('source_label', edge['source'])} → {edge.get('target_label', edge['target'])}"),
            ("Probability (T)", f"{edge['weight']:.4f}"),
            ("Flow", f"{edge['flow']:.3g}"),
        ]
        if "count" in edge:
            rows.append(("Expected count", f"{edge['count']:.1f}"))
        return html.Div([html.H4("Transition"), ui.facts(rows)])
    node = tapped if trigger.endswith("tapNodeData") else hovered
    if not node:
        return no_update

    def listing(rows: list[list[Any]]) -> Any:
        if not rows:
            return "none"
        return html.Ul([html.Li(f"{label}  {p:.3f}" + (f"  (module {m})" if m else "")) for label, p, m in rows])

    return html.Div(
        [
            html.H4(f"Clone {node['label']}"),
            ui.facts(
                [
                    ("Character", node["char"]),
                    (
                        "Clone",
                        f"number {node['clone']} of its character's clones, from 0 as in its label (state "
                        f"{node['state']})",
                    ),
                    ("Flow", f"{node['flow']:.4g}"),
                    ("Module", node.get("module") or "-"),
                ]
            ),
            html.Div([html.Strong("Most probable next clones"), listing(node.get("out", []))]),
            html.Div(
                [html.Strong("Where its flow comes from (share of its incoming flow)"), listing(node.get("in", []))]
            ),
        ]
    )


def column_shares(
    key: str, table: list[dict[str, Any]] | None, elements: list[dict[str, Any]] | None
) -> dict[str, float]:
    """Each subgraph clone's value of the clone table's column ``key`` as a share of the subgraph's range (0 for the
    lowest, 1 for the highest; 0.5 for all when they are equal), keyed by node id; flow is read from the nodes
    themselves when the table has no rows."""
    nodes = {str(e["data"]["id"]): e["data"] for e in elements or [] if "source" not in e["data"]}
    if table:
        values = {
            str(row["state"]): float(row[key])
            for row in table
            if str(row.get("state")) in nodes and row.get(key) is not None  # betweenness: None on large modules
        }
    elif key == "flow":
        values = {node: float(data.get("flow", 0.0)) for node, data in nodes.items()}
    else:
        values = {}
    if not values:
        return {}
    low, high = min(values.values()), max(values.values())
    return {node: (v - low) / (high - low) if high > low else 0.5 for node, v in values.items()}


def clone_filters(degree_min: Any, flow_min: Any) -> list[dict[str, Any]]:
    """The rules that hide the subgraph's clones of degree (edges in and out in the clone graph) below
    ``degree_min`` or of flow below ``flow_min`` (Cytoscape hides their transitions with them); none for an empty,
    zero or unreadable minimum."""
    rules = []
    for key, value in (("degree", degree_min), ("flow", flow_min)):
        low = _number(value)
        if low > 0:
            rules.append({"selector": f"node[{key} < {low!r}]", "style": {"display": "none"}})
    return rules


def _blend(share: float) -> str:
    low, high = NODE_COLOURS
    return "#" + "".join(f"{round(a + (b - a) * share):02x}" for a, b in zip(low, high, strict=True))


def graph_controls(
    edge_min: Any,
    node_size: str | None,
    clone: str | None,
    elements: list[dict[str, Any]] | None,
    node_colour: str | None = "character",
    table: list[dict[str, Any]] | None = None,
    degree_min: Any = None,
    flow_min: Any = None,
    steps: Any = None,
) -> list[dict[str, Any]]:
    """The stylesheet rules of the subgraph's controls: transitions with T below ``edge_min`` hidden, clones of
    degree below ``degree_min`` or flow below ``flow_min`` hidden (with their transitions); clones sized
    and coloured by any numeric column of the clone table (:data:`MAPPED_COLUMNS`, scaled to the subgraph's own
    range: :func:`column_shares`), coloured by their deepest module or by the module's boundary (flow enters or
    leaves the module there: :data:`BOUNDARY_COLOURS`); the clone whose label is ``clone`` marked, and with
    ``steps`` > 0 only the clones within that many steps of it shown (its ego network in the subgraph:
    :func:`app.services.overviews.neighbourhood`)."""
    rules: list[dict[str, Any]] = []
    if node_colour == "module":
        rules.append({"selector": "node", "style": {"background-color": "data(module_colour)"}})
    elif node_colour == "boundary":
        for row in table or []:
            colour = BOUNDARY_COLOURS[boundary_side(row)]
            rules.append({"selector": f'node[id = "{row["state"]}"]', "style": {"background-color": colour}})
    elif node_colour in MAPPED_COLUMNS:
        shares = column_shares(node_colour, table, elements)
        rules += [
            {"selector": f'node[id = "{n}"]', "style": {"background-color": _blend(v)}} for n, v in shares.items()
        ]
    low = _number(edge_min)
    if low > 0:
        rules.append({"selector": f"edge[weight < {low!r}]", "style": {"display": "none"}})
    if node_size in MAPPED_COLUMNS:
        small, large = NODE_SIZES
        for node, share in column_shares(node_size, table, elements).items():
            size = round(small + (large - small) * share, 1)
            rules.append({"selector": f'node[id = "{node}"]', "style": {"width": size, "height": size}})
    label = found_label(elements, clone)
    if label:
        rules.append({"selector": f'node[label = "{label.replace(chr(34), "")}"]', "style": HIGHLIGHT})
        reach = int(steps) if isinstance(steps, int | float) and 0 < steps <= api.DEFAULTS.MAX_EGO_STEPS else 0
        found = [e["data"]["id"] for e in elements or [] if e.get("data", {}).get("label") == label]
        if reach and found:
            rules += overview_service.only_nodes(overview_service.neighbourhood(elements or [], str(found[0]), reach))
    return rules + clone_filters(degree_min, flow_min)  # last: the ego network's own rules show no clone they hide


def found_label(elements: list[dict[str, Any]] | None, clone: str | None) -> str:
    """The label of the subgraph's clone that "Find a clone" names: the label typed (``h:3``), or for a bare symbol
    (``h``, ``the``) its clone of most flow among those drawn; the text typed when none matches."""
    label = (clone or "").strip()
    nodes = [e["data"] for e in elements or [] if "source" not in e.get("data", {})]
    if not label or ":" in label or any(n.get("label") == label for n in nodes):
        return label
    same = [n for n in nodes if str(n.get("label", "")).rsplit(":", 1)[0] == label]
    return str(max(same, key=lambda n: float(n.get("flow", 0.0)))["label"]) if same else label


def shown_subgraph(
    elements: list[dict[str, Any]] | None,
    edge_min: Any = None,
    degree_min: Any = None,
    flow_min: Any = None,
    clone: str | None = None,
    steps: Any = None,
) -> tuple[list[int], float, str]:
    """What the subgraph shows under its controls (the rules of :func:`graph_controls`): its clones of degree and
    flow at least the minimums and, with a clone found and ``steps`` > 0, within that many steps of it; the least
    T of the transitions shown; and the filter in words (for the file it is exported to)."""
    every = [e["data"] for e in elements or [] if "source" not in e.get("data", {})]
    nodes, said = every, []
    for key, value in (("degree", degree_min), ("flow", flow_min)):
        low = _number(value)
        if low > 0:
            nodes = [n for n in nodes if float(n.get(key, 0.0)) >= low]
            said.append(f"{key} at least {low:g}")
    label = found_label(elements, clone)
    reach = int(steps) if isinstance(steps, int | float) and 0 < steps <= api.DEFAULTS.MAX_EGO_STEPS else 0
    found = [str(n["id"]) for n in every if n.get("label") == label] if label else []
    if reach and found:
        near = overview_service.neighbourhood(elements or [], found[0], reach)
        nodes = [n for n in nodes if str(n["id"]) in near]
        said.append(f"within {reach} step{'s' if reach > 1 else ''} of clone {label}")
    least = _number(edge_min)
    if least > 0:
        said.append(f"transitions of T at least {least:g}")
    return sorted(int(n["id"]) for n in nodes), least, ", ".join(said) or "every clone drawn"


def _number(value: Any) -> float:
    """A control's number (0 when empty or unreadable: no filter)."""
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


@callback(
    Output(ids.COMMUNITIES_GRAPH_DOWNLOAD, "data"),
    Output(ids.COMMUNITIES_GRAPH_EXPORT_NOTE, "children"),
    Input(ids.COMMUNITIES_GRAPH_EXPORT, "n_clicks"),
    State(ids.COMMUNITIES_SELECTED, "data"),
    State(ids.COMMUNITIES_GRAPH, "elements"),
    State(ids.COMMUNITIES_EDGE_MIN, "value"),
    State(ids.COMMUNITIES_DEGREE_MIN, "value"),
    State(ids.COMMUNITIES_FLOW_MIN, "value"),
    State(ids.COMMUNITIES_CLONE_SEARCH, "value"),
    State(ids.COMMUNITIES_CLONE_STEPS, "value"),
    State(ids.SESSION, "data"),
    background=True,
    running=[(Output(ids.COMMUNITIES_GRAPH_EXPORT, "disabled"), True, False)],
    prevent_initial_call=True,
)
@jobs.charged_from_fork  # its job's process charged to the memory budget from its fork
def export_subgraph_shown(
    clicks: int | None, module: str | None, elements: list[dict[str, Any]] | None, *controls: Any
) -> tuple[Any, Any]:
    """The subgraph's clones shown (:func:`shown_subgraph`: the page's own subgraph, bounded by its node limit),
    with the transitions among them of T at least the one asked, their modules and the filter in the file, as
    GraphML (a job process bounded in time and memory); the answer is a download link."""
    ui.require_click(clicks)
    *filters, session_id = controls
    nodes, least, said = shown_subgraph(elements, *filters)
    if not module or not nodes:
        return no_update, ui.message("Open a module first: its subgraph's clones shown are what is exported.")
    try:
        folder = sessions.session_folder(session_id)
        with ui.request_job(folder, "The export", "use the Export page."):
            path, name, note = whole_service.write_shown(
                folder, lambda: nodes, f"module {module}: {said}", f"module-{module.replace(':', '-')}-shown", least
            )
        link = sessions.download_link(folder, path, name)
    except ui.EXPECTED_ERRORS as exc:
        return no_update, ui.error_message(exc)
    return link, ui.message([f"{note} ", html.A("Download it again", href=link)], "ok")


ui.start_downloads(ids.COMMUNITIES_GRAPH_DOWNLOAD)


TABLE_MAPPINGS = {*MAPPED_COLUMNS, "boundary"}
"""The subgraph's colours and sizes that read the clone table's columns."""


def _subgraph_rows(
    source: dict[str, Any] | None, elements: list[dict[str, Any]] | None, session_id: str | None
) -> list[dict[str, Any]] | None:
    """The clone table's rows of the subgraph's clones (None without a table shown)."""
    states = [int(e["data"]["id"]) for e in elements or [] if "source" not in e.get("data", {})]
    if not source or not states:
        return None
    try:
        folder = sessions.session_folder(session_id)
        return table_service.clone_rows(folder, source.get("module"), source.get("run"), states)
    except ui.EXPECTED_ERRORS:
        return None


@callback(
    Output(ids.COMMUNITIES_MAP, "stylesheet"),
    Output(ids.COMMUNITIES_GRAPH, "stylesheet"),
    Input(ids.COMMUNITIES_PATH, "data"),
    Input(ids.COMMUNITIES_LEVEL, "data"),
    Input(ids.COMMUNITIES_CLONE_TABLE, "selectedRows"),
    Input(ids.COMMUNITIES_EDGE_MIN, "value"),
    Input(ids.COMMUNITIES_NODE_SIZE, "value"),
    Input(ids.COMMUNITIES_NODE_COLOUR, "value"),
    Input(ids.COMMUNITIES_CLONE_SEARCH, "value"),
    State(ids.COMMUNITIES_TABLES_SOURCE, "data"),
    State(ids.COMMUNITIES_GRAPH, "elements"),
    Input(ids.COMMUNITIES_DEGREE_MIN, "value"),
    Input(ids.COMMUNITIES_FLOW_MIN, "value"),
    Input(ids.COMMUNITIES_MAP_RULES, "data"),
    Input(ids.COMMUNITIES_CLONE_STEPS, "value"),
    State(ids.SESSION, "data"),
)
def highlight_path(
    found: dict[str, Any] | None,
    level: str | None,
    rows: Any,
    edge_min: Any,
    node_size: str | None,
    node_colour: str | None,
    clone: str | None,
    source: dict[str, Any] | None,
    elements: list[dict[str, Any]] | None,
    degree_min: Any = None,
    flow_min: Any = None,
    map_rules: list[dict[str, Any]] | None = None,
    steps: Any = None,
    session_id: str | None = None,
) -> tuple[Any, Any]:
    """Mark the searched word's path (the modules of the map's level it passes through, its clones and transitions
    in the subgraph), the clone selected in the clone table or found by its label; hide the transitions below the
    chosen T and the clones below the chosen degree and flow; size and colour the clones by the column asked for;
    the module map coloured and sized as asked (``map_rules``, :func:`app.pages.community.module_map.map_style`).
    The clone table's rows of the subgraph's clones are read on the server (``source``: the tables shown) when a
    colour or size asks for a column."""
    base = MAP_STYLESHEET + (map_rules or [])
    table = _subgraph_rows(source, elements, session_id) if {node_size, node_colour} & TABLE_MAPPINGS else None
    selected = graph_controls(edge_min, node_size, clone, elements, node_colour, table, degree_min, flow_min, steps)
    if isinstance(rows, list) and rows and isinstance(rows[0], dict) and "state" in rows[0]:
        selected.append({"selector": f'node[id = "{int(rows[0]["state"])}"]', "style": HIGHLIGHT})
    if not found:
        return base, STYLESHEET + selected
    level = level or ""
    depth = len(level.split(":")) if level else 0
    on_map = []
    for step in found["steps"]:
        parts = (step["module"] or "").split(":")
        if step["module"] and ":".join(parts[:depth]) == level and len(parts) > depth:
            on_map.append(":".join(parts[: depth + 1]))
    map_sheet = base + [{"selector": f'node[id = "{m}"]', "style": HIGHLIGHT} for m in dict.fromkeys(on_map)]
    clones = found["clones"]
    graph_sheet = (
        STYLESHEET
        + [{"selector": f'node[id = "{c}"]', "style": HIGHLIGHT} for c in dict.fromkeys(clones)]
        + [
            {"selector": f'edge[id = "{a}-{b}"]', "style": HIGHLIGHT_EDGE}
            for a, b in zip(clones, clones[1:], strict=False)
        ]
        + selected
    )
    return map_sheet, graph_sheet


@callback(
    Output(ids.COMMUNITIES_CLONE_FOUND, "children"),
    Input(ids.COMMUNITIES_CLONE_SEARCH, "value"),
    Input(ids.COMMUNITIES_SELECTED, "data"),
    State(ids.COMMUNITIES_RUN_SHOWN, "value"),
    State(ids.SESSION, "data"),
    prevent_initial_call=True,
)
def find_clone(label: str | None, selected: str | None, run: str | None, session_id: str | None) -> Any:
    """A clone searched by its label that the open module does not hold (issue 47: the search marked only the open
    module's clones): which module holds it, and a button that opens that module."""
    if not label or not label.strip():
        return None
    try:
        found = graph_service.find_clone(sessions.session_folder(session_id), label, run or graph_service.CURRENT_RUN)
    except ui.EXPECTED_ERRORS as exc:
        return ui.error_message(exc)
    module = found["module"]
    if not module:
        return ui.message(f"Clone {found['label']} is in no module: pruning left it out of the clone graph.")
    if selected and (module == selected or module.startswith(f"{selected}:")):
        return None  # marked in the open module's subgraph
    return html.Div(
        [
            f"Clone {found['label']} is in module {module}, not in the open module: ",
            html.Button(
                f"open module {module}",
                id={"type": ids.COMMUNITIES_PATH_MODULE, "index": 10_000, "module": module},
                className="link-button path-module",
            ),
        ],
        className="hint",
    )
