"""The door's clone graph (:mod:`engine.network`) beyond the everyday :func:`engine.api.model_graph` and
:func:`engine.api.model_communities`: how many edges a pruning keeps, filters and ego networks, Infomap's result
read (module links, flows, code length by level) and restored, a word's clone path and senses, and the exports (the
result folder, graph files, Cytoscape elements). Reached as ``api.graph``."""

from __future__ import annotations

from engine.api.use import clone_path, export_model_graph, graph_edges, word_senses, write_communities
from engine.network.communities import (
    ModuleNotFoundInResult,
    codelength_terms,
    module_links,
    node_flows,
    restore_communities,
)
from engine.network.export import cytoscape_elements
from engine.network.filters import CloneFilter, filter_clones

__all__ = [  # fmt: skip
    "graph_edges", "CloneFilter", "filter_clones", "module_links", "node_flows", "codelength_terms",
    "ModuleNotFoundInResult", "restore_communities", "clone_path", "word_senses", "write_communities",
    "export_model_graph", "cytoscape_elements",
]
"""What a front end may use of the clone graph."""
