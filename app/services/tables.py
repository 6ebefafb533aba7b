"""The Communities page's tables (as Gephi's data laboratory): the clones and the transitions of a module of a
community run, or of the whole clone graph, computed once per version of the run's and the model's files, kept in
columns, charged to the server's memory budget before they are computed (:mod:`app.memory`), and served to the
grids a block at a time, sorted and filtered here (:mod:`app.services.grid_rows`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from app import sessions
from app.services import UserError, format_bytes, grid_rows, visible
from app.services.graphs import CURRENT_RUN, EXPORTS, deepest_modules, kept_of_run, read_run, session_graph
from engine.files import atomic_write

EXACT_BETWEENNESS_NODES = 500
"""Up to this many clones betweenness centrality is exact; above, estimated from this many sampled sources."""

MAX_BETWEENNESS_NODES = 2_000
"""Above this many clones the tables leave betweenness out (None): estimated from 500 sources it took 24 s for the
5,000 clones of a user's model (networkx, on 2 cores), while a module's own subgraph takes milliseconds."""


TABLE_ROW_BYTES = 200
TABLE_EDGE_BYTES = 100
"""What the tables take: :data:`TABLE_ROW_BYTES` a clone (its columns, its label among the categories) and
:data:`TABLE_EDGE_BYTES` an edge of the clone graph (its sources, targets, masks and flow sums while they are made,
then a transition's five columns: the tables stay numpy arrays, served a block at a time: :mod:`.grid_rows`)."""
BETWEENNESS_EDGE_BYTES = 600
"""What betweenness centrality takes an edge within the module: its subgraph as networkx objects."""


def graph_tables(folder: Path, module_id: Any = None, run: str = CURRENT_RUN) -> dict[str, Any]:
    """:func:`computed_graph_tables`, computed once per version of the run's and the model's files and kept."""
    key = "" if module_id in (None, "") else str(module_id).strip()
    return kept_of_run(
        folder, run, ("tables", key), lambda: computed_graph_tables(folder, key, run),
        charge=lambda: tables_bytes(folder, key, run), label="Making these tables",
    )  # fmt: skip


def tables_bytes(folder: Path, module_id: str = "", run: str = CURRENT_RUN) -> int:
    """The most memory :func:`computed_graph_tables` takes: :data:`TABLE_ROW_BYTES` a row sent,
    :data:`TABLE_EDGE_BYTES` an edge of the clone graph and, where betweenness is measured,
    :data:`BETWEENNESS_EDGE_BYTES` an edge within the module (a UserError when the module does not exist)."""
    saved = read_run(folder, run)
    graph = session_graph(folder, saved["threshold"])
    members = _members(saved, graph, module_id)
    within = len(graph.edges_among(np.sort(members))) if 2 < len(members) <= MAX_BETWEENNESS_NODES else 0
    return TABLE_ROW_BYTES * graph.n_states + TABLE_EDGE_BYTES * graph.n_edges + BETWEENNESS_EDGE_BYTES * within


def _members(saved: dict[str, Any], graph: Any, key: str) -> np.ndarray:
    """The clones of module ``key`` of a saved run ("": every clone with an edge); a UserError when it does not
    exist."""
    if not key:
        return np.flatnonzero(graph.active())
    module = next((m for m in saved["modules"] if m["id"] == key), None)
    if module is None:
        raise UserError(f"Module {key!r} does not exist in the community run shown.")
    return np.asarray(module["nodes"], dtype=np.int64)


def computed_graph_tables(folder: Path, module_id: Any = None, run: str = CURRENT_RUN) -> dict[str, Any]:
    """The clone and transition tables of a community run (``run``; as Gephi's data laboratory), for the module
    ``module_id`` (its clones and the transitions among them) or, without one, the whole graph: per clone its
    label, character, deepest module, flow, in/out flow, the flow it sends out of the module (``exit_flow``: its
    part of the module's boundary), degree and betweenness centrality (on the module's subgraph, unweighted); per
    transition its clones, T and flow, and whether it crosses the module's boundary. Every row, in columns
    (:class:`app.services.grid_rows.Table`), the most flow first; ``clone_count`` and ``transition_count`` say how
    many there are."""
    saved = read_run(folder, run)
    graph = session_graph(folder, saved["threshold"])
    deepest = deepest_modules(folder, saved, run)
    key = "" if module_id in (None, "") else str(module_id).strip()
    members = _members(saved, graph, key)
    inside = np.zeros(graph.n_states, dtype=bool)
    inside[members] = True
    clone_count = len(members)
    members = members[np.argsort(-graph.flow[members], kind="stable")]
    sources, targets = graph.edges()
    flows = graph.edge_flow
    out_flow = np.bincount(sources, weights=flows, minlength=graph.n_states)
    in_flow = np.bincount(targets, weights=flows, minlength=graph.n_states)
    crossing = inside[sources] & ~inside[targets]
    exit_flow = np.bincount(sources[crossing], weights=flows[crossing], minlength=graph.n_states)
    entering = ~inside[sources] & inside[targets]
    enter_flow = np.bincount(targets[entering], weights=flows[entering], minlength=graph.n_states)
    measured = 2 < clone_count <= MAX_BETWEENNESS_NODES
    betweenness = np.full(graph.n_states, np.nan if not measured and clone_count > 2 else 0.0)
    if measured:
        within = inside[sources] & inside[targets]
        subgraph = nx.DiGraph()
        subgraph.add_nodes_from(int(n) for n in members)
        subgraph.add_edges_from(zip(sources[within].tolist(), targets[within].tolist(), strict=True))
        sample = None if clone_count <= EXACT_BETWEENNESS_NODES else EXACT_BETWEENNESS_NODES
        for node, value in nx.betweenness_centrality(subgraph, k=sample, seed=0).items():
            betweenness[node] = value
    degree = np.bincount(sources, minlength=graph.n_states) + np.bincount(targets, minlength=graph.n_states)
    labels = [graph.label(v) for v in range(graph.n_states)]
    clones = grid_rows.Table(
        {
            "clone": grid_rows.Text.indexed(labels, members),
            "state": members.astype(np.int64),
            "character": grid_rows.Text.of([visible(graph.char(int(n))) for n in members]),
            "module": grid_rows.Text.of([deepest.get(int(n), "") for n in members]),
            "flow": np.round(graph.flow[members].astype(np.float64), 8),
            "in_flow": np.round(in_flow[members], 8),
            "out_flow": np.round(out_flow[members], 8),
            "exit_flow": np.round(exit_flow[members], 8),
            "enter_flow": np.round(enter_flow[members], 8),
            "degree": degree[members].astype(np.int64),
            "betweenness": np.round(betweenness[members], 6),
        },
        clone_count,
    )
    touching = np.flatnonzero(inside[sources] | inside[targets])
    touching = touching[np.argsort(-flows[touching], kind="stable")]
    side = np.where(inside[sources[touching]] & ~inside[targets[touching]], 2, 0)
    side = np.where(inside[targets[touching]] & ~inside[sources[touching]], 1, side)
    transitions = grid_rows.Table(
        {
            "from": grid_rows.Text.indexed(labels, sources[touching]),
            "to": grid_rows.Text.indexed(labels, targets[touching]),
            "probability": np.round(graph.weight.data[touching].astype(np.float64), 6),
            "flow": np.round(flows[touching].astype(np.float64), 8),
            "boundary": grid_rows.Text(side.astype(np.int64), ["", "in", "out"]),
        },
        len(touching),
    )
    return {
        "module": key, "clones": clones, "transitions": transitions, "clone_count": clone_count,
        "transition_count": len(touching),
    }  # fmt: skip


TABLES = ("clones", "transitions")
"""The Tables card's two server-side tables."""


def _table(folder: Path, module_id: Any, run: str, which: str) -> grid_rows.Table:
    if which not in TABLES:
        raise UserError(f"There is no table {str(which)[:30]!r}.")
    return graph_tables(folder, module_id, run)[which]


def table_order(
    folder: Path, module_id: Any, run: str, which: str, sort_model: Any = None, filter_model: Any = None
) -> np.ndarray:
    """The rows of the table ``which`` (of module ``module_id``, or the whole graph) that the grid shows under its
    sort and filter models, in order; kept per run, model and models (a grid asks block after block)."""
    table = _table(folder, module_id, run, which)
    key = "" if module_id in (None, "") else str(module_id).strip()
    models = grid_rows.model_key(sort_model, filter_model)
    return kept_of_run(folder, run, ("table order", key, which, models), lambda: table.order(sort_model, filter_model))


def table_block(folder: Path, module_id: Any, run: str, which: str, request: Any) -> dict[str, Any]:
    """The block of rows a grid's request asks for (``startRow`` to ``endRow`` under its ``sortModel`` and
    ``filterModel``) and how many rows the filter keeps, as ag-grid's infinite row model reads them."""
    request = request if isinstance(request, dict) else {}
    order = table_order(folder, module_id, run, which, request.get("sortModel"), request.get("filterModel"))
    start, end = grid_rows.block(request)
    rows = _table(folder, module_id, run, which).rows_of(order[start:end])
    return {"rowData": rows, "rowCount": len(order)} if len(order) else {"rowData": rows}  # no count of 0: see
    # app.pages.community.tables.EMPTY


def clone_rows(folder: Path, module_id: Any, run: str, states: list[int]) -> list[dict[str, Any]]:
    """The clone table's rows of these clones (those of the table among them), for the subgraph's colours and
    sizes by a column."""
    table = _table(folder, module_id, run, "clones")
    wanted = np.isin(table.columns["state"], np.asarray(states, dtype=np.int64))  # type: ignore[arg-type]
    return table.rows_of(np.flatnonzero(wanted))


def table_csv(
    folder: Path, module_id: Any, run: str, which: str, request: Any, headers: list[tuple[str, str]]
) -> tuple[Path, str, str]:
    """The rows the grid shows (every one its filter keeps, in its sort: ``request``, the grid's last block
    request) as CSV in the session's ``exports`` folder; the file, the name it downloads as, and a sentence."""
    request = request if isinstance(request, dict) else {}
    order = table_order(folder, module_id, run, which, request.get("sortModel"), request.get("filterModel"))
    out = folder / EXPORTS
    out.mkdir(exist_ok=True)
    path = out / f"{which}.csv"
    sessions.check_space(folder, 100 * len(order), "The table's CSV")
    table = _table(folder, module_id, run, which)
    atomic_write(path, lambda tmp: grid_rows.write_csv(table, order, headers, Path(tmp)))
    key = "" if module_id in (None, "") else str(module_id).strip()
    name = f"{which}-module-{key.replace(':', '-')}.csv" if key else f"{which}-whole-graph.csv"
    return path, name, f"{len(order):,} rows, {format_bytes(path.stat().st_size)}, saved as {name}."
