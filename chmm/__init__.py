"""CHMM Explorer from Python: cloned hidden Markov models (Dedieu et al. 2019) with hmmlearn's conventions, the
explorer's views as plotly figures and networkx graphs, and the explorer itself inline in Jupyter.

    import chmm
    model = chmm.CHMM(states=2000).fit(sequences)      # or a string of text, or X and lengths as hmmlearn takes them
    model.bits_per_symbol(test), model.predict(test)   # score, predict_proba, decode, sample, save, CHMM.load
    chmm.module_map(model)                             # the Communities page's map, as a plotly figure
    chmm.explore(model)                                # the whole app in the notebook

The package is named ``chmm``, as the command line is: what a researcher types, not taken on the Python package
index, and not a generic word such as ``engine`` that other projects' packages use. Everything here comes from the
engine's estimator (:mod:`engine.estimator`) and the app's views (:mod:`chmm.views`)."""

from __future__ import annotations

from chmm.explore import explore
from chmm.views import Explorer, clone_graph, module_map, module_subgraph, training_curves, whole_graph_figure
from engine.errors import CHMMError
from engine.estimator import CHMM, ConvergenceMonitor, Learner

__all__ = [
    "CHMM",
    "CHMMError",
    "ConvergenceMonitor",
    "Explorer",
    "Learner",
    "clone_graph",
    "explore",
    "load",
    "module_map",
    "module_subgraph",
    "training_curves",
    "whole_graph_figure",
]

load = CHMM.load
"""A fitted :class:`CHMM` from a model file (``chmm.load("model.npz")``)."""
