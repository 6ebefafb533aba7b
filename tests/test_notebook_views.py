"""The notebook's views (:mod:`chmm.views`) are the app's: the module map, a module's subgraph and the whole graph
drawn at the positions and in the colours the app's services compute for the same model in an app session; the
training curves are the Model page's figure; the networkx graph is the clone graph with the run's modules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import chmm
from app import config, figures, sessions
from app.services import graphs, overviews, whole_graph
from engine import api


@pytest.fixture(scope="module")
def explorer(tmp_path_factory) -> chmm.Explorer:
    return chmm.Explorer(config.SAMPLE_MODEL)


@pytest.fixture(scope="module")
def app_folder(tmp_path_factory, explorer: chmm.Explorer) -> Path:
    """An app session's folder holding the same model, with the Communities page's Infomap run."""
    folder = tmp_path_factory.mktemp("session")
    api.save_model(api.load_model(config.SAMPLE_MODEL), folder / "model.npz")
    sessions.install_model(folder, folder / "model.npz")
    graphs.run_communities(folder)
    return folder


def _nodes(elements: list[dict]) -> list[tuple]:
    return [
        (e["data"]["id"], e["position"]["x"], e["position"]["y"], e["data"]["colour"])
        for e in elements
        if "source" not in e["data"]
    ]


def _figure_nodes(figure) -> list[tuple]:
    markers = figure.data[-1]
    return list(zip(markers.customdata, markers.x, markers.y, markers.marker.color, strict=True))


def test_the_module_map_is_the_app_s(explorer: chmm.Explorer, app_folder: Path) -> None:
    figure = explorer.module_map()
    expected = overviews.drawn_module_map(app_folder)
    assert _figure_nodes(figure) == _nodes(expected["elements"])
    assert len(_figure_nodes(figure)) == expected["shown"] > 1
    links = sum(len(t.x) // 3 for t in figure.data[:-1])
    assert links == expected["links"]


def test_a_module_s_subgraph_is_the_app_s(explorer: chmm.Explorer, app_folder: Path) -> None:
    figure = explorer.module_subgraph("1")
    expected = graphs.computed_module_detail(app_folder, "1")
    assert _figure_nodes(figure) == _nodes(expected["elements"])
    assert len(_figure_nodes(figure)) > 1


def test_the_whole_graph_is_the_app_s(explorer: chmm.Explorer, app_folder: Path) -> None:
    figure = explorer.whole_graph()
    expected = whole_graph.whole_graph(app_folder)
    drawn = [t for t in figure.data if t.mode == "markers"]
    assert sum(len(t.x) for t in drawn) == expected["clones"]
    group = np.asarray(expected["group"])
    for trace in drawn:
        spec = next(i for i, g in enumerate(expected["groups"]) if g["text"] == trace.name)
        members = np.flatnonzero(group == spec)
        np.testing.assert_array_equal(trace.x, np.asarray(expected["x"])[members])
        np.testing.assert_array_equal(trace.y, np.asarray(expected["y"])[members])
        assert trace.marker.color == expected["groups"][spec]["colour"]


def test_training_curves_and_the_clone_graph(explorer: chmm.Explorer) -> None:
    model = api.load_model(config.SAMPLE_MODEL)
    ours = chmm.training_curves(config.SAMPLE_MODEL).to_plotly_json()
    assert ours == figures.history_figure(model.metadata.get("history") or []).to_plotly_json()
    assert len(ours["data"]) >= 1
    drawn = explorer.clone_graph()
    graph = api.model_graph(model)
    assert drawn.number_of_nodes() == graph.n_states and drawn.number_of_edges() == graph.n_edges
    paths = explorer._saved()["node_path"]
    some = next(iter(paths))
    assert drawn.nodes[some]["module"] == paths[some].split(":")[0]


def test_a_fitted_estimator_keeps_its_explorer() -> None:
    model = chmm.load(config.SAMPLE_MODEL)
    assert chmm.Explorer.of(model) is chmm.Explorer.of(model)
    with pytest.raises(chmm.CHMMError, match="fitted CHMM"):
        chmm.Explorer(object())
