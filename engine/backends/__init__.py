"""The engines: the :class:`~engine.backends.engines.Engine` protocol and its registry, and the implementations on
each backend (``cpu/``: dense and sparse blocks with their numba kernels; ``gpu/``: dense blocks on a CUDA device or
on the NumPy twins of its kernels). Each implementation registers itself when its module is imported; importing
this package imports them, in the order "auto" and the choice lists follow (CPU first). :data:`__all__` holds what the
rest of the engine takes from this wing (the registry's choices, the passes of the float64 reference, reading text with
a model, model files); the rest is the wing's own."""

from __future__ import annotations

from engine.backends.cpu import implementation as _cpu  # noqa: F401 (registers "dense" and "sparse")
from engine.backends.gpu import implementation as _gpu  # noqa: F401 (registers "gpu" and "gpu-sim")

# isort: split
from engine.backends.chunks import (
    DEFAULT_BURN_IN,
    EXACT,
    LOCKSTEP_BURN_IN,
    LOCKSTEP_MIN_SYMBOLS,
    LOCKSTEP_STEPS,
    Chunk,
    chunk,
)
from engine.backends.cpu.inference import (
    ONE_THREAD_ENV,
    EStepResult,
    Evidence,
    ScoreResult,
    forward,
    model_backoff,
    path_counts,
    posteriors,
    score,
    viterbi,
)
from engine.backends.cpu.sparse import SparseCHMM, as_sparse, from_dense, normalise
from engine.backends.engines import (
    Engine,
    Model,
    as_sequences,
    backend_choices,
    backend_status,
    e_step_sequences,
    engine_for,
    implementation_for,
    in_form_for,
    on_host,
    resolve_backend,
    score_sequences,
    supports,
)
from engine.backends.model_files import load_bytes, load_model, save_model
from engine.backends.reading import (
    MAX_PREFIX_CHARACTERS,
    RareWords,
    check_prefix,
    decode_text,
    decoding_text,
    dense_for_tools,
    encode_for_model,
    rare_words,
    sample_text,
    score_text,
    scramble_for_model,
    surprisal_text,
)
from engine.backends.scramble import change_spans, restoration

__all__ = [  # fmt: skip
    "as_sequences", "as_sparse", "backend_choices", "backend_status", "change_spans", "check_prefix", "Chunk", "chunk",
    "decode_text", "decoding_text", "DEFAULT_BURN_IN", "dense_for_tools", "e_step_sequences", "encode_for_model",
    "Engine", "engine_for", "EStepResult", "Evidence", "EXACT", "forward", "from_dense", "implementation_for",
    "in_form_for", "load_bytes", "load_model", "LOCKSTEP_BURN_IN", "LOCKSTEP_MIN_SYMBOLS", "LOCKSTEP_STEPS",
    "MAX_PREFIX_CHARACTERS", "Model", "model_backoff", "normalise", "on_host", "ONE_THREAD_ENV", "path_counts",
    "posteriors", "rare_words", "RareWords", "resolve_backend", "restoration", "sample_text", "save_model", "score",
    "score_sequences", "score_text", "ScoreResult", "scramble_for_model", "SparseCHMM", "supports", "surprisal_text",
    "viterbi"
]
