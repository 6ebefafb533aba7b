"""What the explorer shows, without the server: plotly figures of the module map, a module's subgraph, the whole
graph and the training curves, and networkx graphs, for a fitted model in a notebook.

Each view is the app's own: an :class:`Explorer` keeps the model in a private folder laid out as an app session's,
runs Infomap there through the app's service, and draws what the app's services compute for their pages (the same
nodes, positions, sizes and colours); only the drawing, Cytoscape's in the app, is plotly's here. Positions are
the app's, y downwards as on screen (the figures reverse their y axis)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import plotly.graph_objects as go

from app import figures, sessions
from app.services import graphs, overviews, whole_graph
from engine import api
from engine.errors import CHMMError

__all__ = ["Explorer", "clone_graph", "module_map", "module_subgraph", "training_curves", "whole_graph_figure"]


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """The app's refusals (its own ValueError, one sentence for a person) as the engine's error base."""
    try:
        yield
    except CHMMError:
        raise
    except ValueError as exc:
        raise CHMMError(str(exc)) from None


def engine_model(model: Any) -> Any:
    """The engine's model of ``model``: a fitted estimator's ``model_``, a model itself, or a model file's path."""
    if isinstance(model, (str, Path)):
        return api.load_model(model)
    fitted = getattr(model, "model_", None)
    if fitted is not None:
        return fitted
    if hasattr(model, "layout") and hasattr(model, "T"):
        return model
    raise CHMMError("give a fitted CHMM, an engine model or the path of a model file")


class Explorer:
    """One model and the app's views of it: a folder laid out as an app session's holding the model (deleted with
    the explorer), Infomap run there on the first view that needs modules (:meth:`communities` runs it again with
    other settings)."""

    def __init__(self, model: Any) -> None:
        self.model = engine_model(model)
        self.folder = Path(tempfile.mkdtemp(prefix="chmm-explorer-"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.folder), True)
        api.save_model(self.model, self.folder / "model.npz")
        sessions.install_model(self.folder, self.folder / "model.npz")
        self._run: dict[str, Any] | None = None

    @classmethod
    def of(cls, model: Any) -> Explorer:
        """The explorer kept with a fitted estimator (made on first use), or a new one for anything else."""
        if isinstance(model, Explorer):
            return model
        if getattr(model, "model_", None) is not None:
            kept = model.__dict__.get("_explorer")
            if kept is None or kept.model is not model.model_:
                kept = model.__dict__["_explorer"] = cls(model)
            return kept
        return cls(model)

    def communities(
        self, trials: int = 10, two_level: bool = False, seed: int = 0, threshold: float | None = None
    ) -> list[dict[str, Any]]:
        """Run Infomap on the clone graph (pruned at ``threshold``, default the app's) as the Communities page does
        and keep the run for the views; returns its modules (id, parent, name, flow, size, words, ...)."""
        with _refusals():
            self._run = graphs.run_communities(self.folder, trials, two_level, seed, threshold)
        return [{k: v for k, v in m.items() if k != "nodes"} for m in self._run["modules"]]

    def _saved(self) -> dict[str, Any]:
        if self._run is None:
            self.communities()
        assert self._run is not None
        return self._run

    def module_map(self, parent: str = "", limit: int = overviews.MAP_LIMIT) -> go.Figure:
        """The module map of one level (``parent`` "" for the top modules): the app's circles sized by flow, in
        the modules' colours, linked by the flow between them, at the app's positions."""
        saved = self._saved()
        if parent and not any(m["id"] == parent for m in saved["modules"]):
            raise CHMMError(f"module {parent!r} does not exist; the top modules are 1..{_tops(saved)}")
        with _refusals():
            drawn = overviews.drawn_module_map(self.folder, parent, limit)
        title = f"Module map ({drawn['shown']} of {drawn['modules']} modules{' in ' + parent if parent else ''})"
        return elements_figure(drawn["elements"], title, hover="full_label")

    def module_subgraph(self, module: str) -> go.Figure:
        """A module's subgraph as the app's module card draws it: its clones (coloured by symbol) and transitions
        at the app's positions."""
        self._saved()
        with _refusals():
            detail = graphs.computed_module_detail(self.folder, module)
        return elements_figure(detail["elements"], f"Module {detail['id']} {detail['name']}", hover="char")

    def whole_graph(
        self, max_edges: int = whole_graph.DEFAULT_EDGES, layout: str = whole_graph.DEFAULT_LAYOUT
    ) -> go.Figure:
        """Every clone at the app's position for the whole graph, coloured by its top module (by symbol before
        any Infomap run), with the ``max_edges`` transitions of most flow."""
        if max_edges not in whole_graph.EDGE_CHOICES or layout not in whole_graph.LAYOUTS:
            raise CHMMError(
                f"max_edges is one of {', '.join(map(str, whole_graph.EDGE_CHOICES))} and layout one of "
                f"{', '.join(whole_graph.LAYOUTS)}"
            )
        with _refusals():
            drawn = whole_graph.whole_graph(self.folder, max_edges, layout)
        return whole_figure(drawn)

    def training_curves(self) -> go.Figure:
        """Train and validation bits per symbol per iteration, as the Model page draws them."""
        return figures.history_figure(self.model.metadata.get("history") or [])

    def clone_graph(self, threshold: float | None = None) -> nx.DiGraph:
        """The clone graph (pruned at ``threshold``, default the app's) as a networkx DiGraph, each clone with its
        symbol, flow and, after an Infomap run, its module and path (the export's attributes)."""
        saved = self._run
        chosen = threshold if threshold is not None else (saved["threshold"] if saved else None)
        with _refusals():
            graph = api.model_graph(self.model) if chosen is None else api.model_graph(self.model, chosen)
        drawn = api.to_networkx(graph, ids="state")
        if saved is not None and saved["threshold"] == (chosen if chosen is not None else saved["threshold"]):
            for node, path in saved.get("node_path", {}).items():
                if drawn.has_node(node):
                    drawn.nodes[node]["path"] = path
                    drawn.nodes[node]["module"] = path.split(":")[0]
        return drawn


def _tops(saved: dict[str, Any]) -> int:
    return sum(1 for m in saved["modules"] if not m.get("parent"))


def _node_text(data: dict[str, Any], hover: str) -> str:
    return str(data.get(hover) or data.get("label") or data.get("id"))


def elements_figure(elements: list[dict[str, Any]], title: str, hover: str = "label") -> go.Figure:
    """Cytoscape elements (nodes with ``position`` and ``colour``, edges with ``source`` and ``target``) as a plotly
    figure: edges as lines (grouped by width where they have one), nodes as markers with their colours, sizes and
    labels, y downwards."""
    nodes = [e for e in elements if "source" not in e["data"]]
    edges = [e["data"] for e in elements if "source" in e["data"]]
    where = {n["data"]["id"]: (n["position"]["x"], n["position"]["y"]) for n in nodes}
    figure = go.Figure()
    widths = sorted({round(float(e.get("width", 1.0))) for e in edges})
    for width in widths:
        xs: list[float | None] = []
        ys: list[float | None] = []
        for edge in edges:
            if round(float(edge.get("width", 1.0))) == width and edge["source"] in where and edge["target"] in where:
                (x0, y0), (x1, y1) = where[edge["source"]], where[edge["target"]]
                xs += [x0, x1, None]
                ys += [y0, y1, None]
        figure.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"width": max(width, 1), "color": "#b0b0b0"},
                                    hoverinfo="skip", showlegend=False))  # fmt: skip
    figure.add_trace(
        go.Scatter(
            x=[n["position"]["x"] for n in nodes],
            y=[n["position"]["y"] for n in nodes],
            mode="markers+text",
            text=[n["data"].get("label", "") for n in nodes],
            hovertext=[_node_text(n["data"], hover) for n in nodes],
            hoverinfo="text",
            textposition="bottom center",
            marker={
                "color": [n["data"].get("colour", "#888888") for n in nodes],
                "size": [float(n["data"].get("size", 14)) for n in nodes],
                "line": {"width": 1, "color": "#ffffff"},
            },
            customdata=[n["data"]["id"] for n in nodes],
            showlegend=False,
        )
    )
    return _graph_layout(figure, title)


def whole_figure(drawn: dict[str, Any]) -> go.Figure:
    """The whole graph the app's service laid out (:func:`app.services.whole_graph.whole_graph`) as a plotly figure:
    the drawn transitions as lines, then a trace per group (a leaf module, or a symbol) in its colour."""
    x, y = np.asarray(drawn["x"], dtype=float), np.asarray(drawn["y"], dtype=float)
    figure = go.Figure()
    sources, targets = np.asarray(drawn["edge_sources"]), np.asarray(drawn["edge_targets"])
    if len(sources):
        xs = np.column_stack([x[sources], x[targets], np.full(len(sources), np.nan)]).ravel()
        ys = np.column_stack([y[sources], y[targets], np.full(len(sources), np.nan)]).ravel()
        figure.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"width": 0.5, "color": "#c8c8c8"},
                                    hoverinfo="skip", showlegend=False))  # fmt: skip
    group = np.asarray(drawn["group"])
    labels = drawn["clone_labels"]
    for g, spec in enumerate(drawn["groups"]):
        members = np.flatnonzero(group == g)
        if not len(members):
            continue
        figure.add_trace(go.Scattergl(
            x=x[members], y=y[members], mode="markers", marker={"size": 5, "color": spec["colour"]},
            hovertext=[f"{labels[v]} ({spec['text']})" for v in members], hoverinfo="text", name=spec["text"],
            showlegend=False,
        ))  # fmt: skip
    return _graph_layout(figure, f"The whole graph: {drawn['clones']:,} clones, {drawn['drawn_edges']:,} of "
                                 f"{drawn['edges']:,} transitions drawn")  # fmt: skip


def _graph_layout(figure: go.Figure, title: str) -> go.Figure:
    hidden = {"visible": False, "showgrid": False, "zeroline": False}
    figure.update_layout(title=title, xaxis=hidden, yaxis=hidden | {"autorange": "reversed", "scaleanchor": "x"},
                         plot_bgcolor="white", margin={"l": 10, "r": 10, "t": 40, "b": 10}, height=600)  # fmt: skip
    return figure


def module_map(model: Any, parent: str = "", limit: int = overviews.MAP_LIMIT) -> go.Figure:
    """:meth:`Explorer.module_map` of ``model`` (a fitted estimator keeps its explorer and Infomap run)."""
    return Explorer.of(model).module_map(parent, limit)


def module_subgraph(model: Any, module: str) -> go.Figure:
    """:meth:`Explorer.module_subgraph` of ``model``."""
    return Explorer.of(model).module_subgraph(module)


def whole_graph_figure(model: Any, max_edges: int = whole_graph.DEFAULT_EDGES) -> go.Figure:
    """:meth:`Explorer.whole_graph` of ``model``."""
    return Explorer.of(model).whole_graph(max_edges)


def training_curves(model: Any) -> go.Figure:
    """:meth:`Explorer.training_curves` of ``model``."""
    return figures.history_figure(engine_model(model).metadata.get("history") or [])


def clone_graph(model: Any, threshold: float | None = None) -> nx.DiGraph:
    """:meth:`Explorer.clone_graph` of ``model``."""
    return Explorer.of(model).clone_graph(threshold)
