"""Peer learners compared with CHMMs on the same text (issue: DenseHMM, the PAC PDFA learner, Kneser-Ney n-grams).

Every learner follows :class:`engine.peers.base.PeerLearner`: ``fit`` on symbol indices, ``predictive`` probabilities
per position (so BPS is computed one way for all), ``n_parameters``, and ``save`` / ``load`` as ``.npz`` + JSON
without pickle (:func:`engine.peers.base.save_arrays`). :data:`__all__` holds what the rest of the engine takes from
this wing (every learner by name, :mod:`~engine.peers.learners`, and the registry); the rest is the wing's own.
"""

from __future__ import annotations

from engine.peers.base import bits_per_symbol
from engine.peers.learners import (
    ITERATIONS_OPTION,
    LEARNERS,
    SEED_OPTION,
    STATES_OPTION,
    TrainingStopped,
    is_peer,
    load_any,
    make_learner,
    ngram_beside,
    save_learner,
    score_any,
    train_learner_text,
    train_peer_text,
)
from engine.peers.registry import Setting, available, registered

__all__ = [  # fmt: skip
    "available", "bits_per_symbol", "is_peer", "ITERATIONS_OPTION", "LEARNERS", "load_any", "make_learner",
    "ngram_beside", "registered", "save_learner", "score_any", "SEED_OPTION", "Setting", "STATES_OPTION",
    "train_learner_text", "train_peer_text", "TrainingStopped"
]
