"""The clone graph (:mod:`~engine.network.graph`), Infomap's communities (:mod:`~engine.network.communities`),
generalized words and senses, filters, exports (:mod:`~engine.network.export`) and drawing (layouts and colours).
:data:`__all__` holds what the rest of the engine takes from this wing; the rest is the wing's own."""

from __future__ import annotations

from engine.network.communities import (
    FLOW_SOURCES,
    Communities,
    CommunityOptions,
    ModuleNotFoundInResult,
    codelength_terms,
    find_communities,
    module_links,
    node_flows,
    normalised_mutual_information,
    restore_communities,
    write_result,
)
from engine.network.drawing import force_layout, grouped_layout, layout_quality, module_colour
from engine.network.export import (
    EXTENSIONS,
    FORMATS,
    cytoscape_elements,
    export_file_name,
    export_graph,
    partition_texts,
    to_networkx,
)
from engine.network.filters import MAX_STEPS, CloneFilter, filter_clones
from engine.network.graph import CloneGraph, SweepPoint, clone_graph, prune_sweep, transition_graph, viterbi_clones
from engine.network.packing import packed_layout
from engine.network.senses import Senses, symbol_senses

__all__ = [  # fmt: skip
    "clone_graph", "CloneFilter", "CloneGraph", "codelength_terms", "Communities", "CommunityOptions",
    "cytoscape_elements", "export_file_name", "export_graph", "EXTENSIONS", "filter_clones", "find_communities",
    "FLOW_SOURCES", "force_layout", "FORMATS", "grouped_layout", "layout_quality", "MAX_STEPS", "module_colour",
    "module_links", "ModuleNotFoundInResult", "node_flows", "normalised_mutual_information", "packed_layout",
    "partition_texts", "prune_sweep", "restore_communities", "Senses", "SweepPoint", "symbol_senses", "to_networkx",
    "transition_graph", "viterbi_clones", "write_result"
]
