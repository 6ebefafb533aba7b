"""Peer learners compared with CHMMs on the same text (issue: DenseHMM, the PAC PDFA learner, Kneser-Ney n-grams).

Every learner follows :class:`engine.peers.base.PeerLearner`: ``fit`` on symbol indices, ``predictive`` probabilities
per position (so BPS is computed one way for all), ``n_parameters``, and ``save`` / ``load`` as ``.npz`` + JSON
without pickle (:func:`engine.peers.base.save_arrays`).
"""
