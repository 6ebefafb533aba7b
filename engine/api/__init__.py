"""The engine's one door: everything the front ends (the ``chmm`` command line of :mod:`engine.cli`, the Dash app,
Python callers) use, by one name each (:data:`__all__`). At the top, the everyday names: training, model files,
reading text with a model (score, surprisal, sample, decode), pruning, the clone graph and its communities, the
training run's helpers (backends, memory, time, the cluster); then two frozen groups, :data:`CHOICES` (the lists
every form and flag offers) and :data:`DEFAULTS` (their defaults and limits), and the sub-doors of the families,
each a module with its own ``__all__``: :mod:`~engine.api.corpora` (reading corpora), :mod:`~engine.api.graph` (the
clone graph's filters, results and exports), :mod:`~engine.api.drawing` (layouts and colours),
:mod:`~engine.api.learners` (the peer learners) and :mod:`~engine.api.maps` (cognitive maps). The functions that
only combine the wings for a front end are written in :mod:`engine.api.use`; the rest is named from the wing that
owns it. ``tests/test_structure.py`` keeps the front ends to this package, :mod:`engine.errors` and
:mod:`engine.files`; ``tests/test_door.py`` keeps :data:`__all__` to what they use, at most 60 names."""

from __future__ import annotations

from engine.api import corpora, drawing, graph, learners, maps
from engine.api.groups import CHOICES, DEFAULTS
from engine.api.use import held_out_split_text, model_communities, model_graph, prune_model, prune_sweep_text
from engine.api.use import score_tokens as score_tokens  # for Python callers; no front end's
from engine.api.use import train_tokens as train_tokens  # for Python callers; no front end's
from engine.backends.engines import backend_choices, backend_status, on_host
from engine.backends.model_files import load_bytes as model_load_bytes
from engine.backends.model_files import load_model, save_model
from engine.backends.reading import (
    check_prefix,
    decode_text,
    decoding_text,
    encode_for_model,
    sample_text,
    score_text,
    scramble_for_model,
    surprisal_text,
)
from engine.backends.reading import dense_for_tools as dense_for_tools  # for Python callers; no front end's
from engine.backends.scramble import change_spans, restoration
from engine.model.archive import stored_states as model_file_states
from engine.model.dense import CHMM
from engine.model.pruning import check_threshold
from engine.network.communities import CommunityOptions
from engine.network.export import to_networkx
from engine.peers.learners import LEARNERS, load_any, make_learner
from engine.training import (
    TrainOptions,
    check_prune_bound,
    estimate_training_memory,
    expected_minutes,
    expected_sentence,
    model_to_save,
    restart_processes,
    train_text,
)
from engine.training.distributed import check_workers, open_cluster
from engine.training.learning import CancelToken, IterationRecord, ProgressCallback

__all__ = [  # fmt: skip
    # training, model files, reading text with a model
    "TrainOptions", "train_text", "CancelToken", "IterationRecord", "ProgressCallback", "CHMM", "load_model",
    "save_model", "model_load_bytes", "model_file_states", "score_text", "surprisal_text", "sample_text",
    "check_prefix", "encode_for_model", "decode_text", "decoding_text", "scramble_for_model", "change_spans",
    "restoration",
    # pruning, the clone graph and its communities
    "prune_model", "prune_sweep_text", "held_out_split_text", "check_threshold", "model_graph", "model_communities",
    "CommunityOptions", "to_networkx",
    # a training run's helpers: backends, memory and time, restarts, the cluster, what is saved
    "backend_choices", "backend_status", "on_host", "estimate_training_memory", "expected_minutes",
    "expected_sentence", "restart_processes", "check_workers", "open_cluster", "check_prune_bound", "model_to_save",
    # learners by name (the CHMM among them)
    "LEARNERS", "make_learner", "load_any",
    # the choices and defaults, and the families' sub-doors
    "CHOICES", "DEFAULTS", "corpora", "graph", "drawing", "learners", "maps",
]
"""What the front ends may use: these names, the fields of :data:`CHOICES` and :data:`DEFAULTS`, the ``__all__`` of
each sub-door, and nothing else of the engine. (:func:`dense_for_tools`, :func:`train_tokens` and
:func:`score_tokens` are importable here for Python callers, outside the front ends' surface.)"""
