"""The door's peer learners (:mod:`engine.peers`), trained and scored beside a CHMM on the same text: the registry
(which learners there are, whether each can run here, their settings and the option names of their states,
iterations and seed), training one on text, saving it and scoring any model file, the Kneser-Ney n-gram beside a
CHMM. Reached as ``api.learners``; :func:`engine.api.make_learner`, :func:`engine.api.load_any` and
:data:`engine.api.LEARNERS` stay at the door's top."""

from __future__ import annotations

from engine.peers.learners import (
    ITERATIONS_OPTION,
    SEED_OPTION,
    STATES_OPTION,
    TrainingStopped,
    is_peer,
    ngram_beside,
    save_learner,
    score_any,
    train_learner_text,
    train_peer_text,
)
from engine.peers.registry import Setting as LearnerSetting
from engine.peers.registry import available as learner_available
from engine.peers.registry import registered as registered_learners

__all__ = [  # fmt: skip
    "registered_learners", "learner_available", "LearnerSetting", "ITERATIONS_OPTION", "SEED_OPTION",
    "STATES_OPTION", "train_learner_text", "train_peer_text", "TrainingStopped", "save_learner", "score_any",
    "is_peer", "ngram_beside",
]
"""What a front end may use of the peer learners."""
