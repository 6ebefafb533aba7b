"""Cognitive maps: walks with actions and the CHMM whose transitions depend on them
(:mod:`~engine.cognitive.actions`), a learned map read as a room (:mod:`~engine.cognitive.maps`), rooms, walk files and
the map recipe (:mod:`~engine.cognitive.walks`), learning from a sensor's evidence (:mod:`~engine.cognitive.evidence`),
worlds of rooms (:mod:`~engine.cognitive.worlds`), the rooms a map finds (:mod:`~engine.cognitive.hierarchy`), routes
(:mod:`~engine.cognitive.planning`) and schemas (:mod:`~engine.cognitive.schemas`). :data:`__all__` holds what the rest
of the engine takes from this wing (the door's :mod:`engine.api.maps`); the rest is the wing's own."""

from __future__ import annotations

from engine.cognitive.actions import MAX_OBSERVATION, ActionCHMM, Walk, generate_walk, load, viterbi
from engine.cognitive.evidence import (
    MAX_NOISE,
    MAX_SOFT_CLONES,
    evidence_reading,
    learn_map_from_evidence,
    learn_map_through_noise,
    noisy_readings,
    read_evidence,
)
from engine.cognitive.hierarchy import clone_modules, clone_places, map_communities, match_rooms, place_clones
from engine.cognitive.maps import clone_graph, place_field, plan_route, recovers_room
from engine.cognitive.planning import DoorFields, Plan, block, door_fields, plan_flat, plan_hierarchical, ways_into
from engine.cognitive.schemas import HELD_OUT, match_schemas, read_library
from engine.cognitive.walks import (
    MAP_DEFAULTS,
    MAP_HELD_OUT_SHARE,
    MapOptions,
    WalkFile,
    format_walk,
    format_walk_file,
    learn_map,
    parse_room,
    parse_walk,
    read_room,
    read_walk,
    write_walk,
)
from engine.cognitive.worlds import make_world, room_text, world_rooms

__all__ = [  # fmt: skip
    "ActionCHMM", "block", "clone_graph", "clone_modules", "clone_places", "door_fields", "DoorFields",
    "evidence_reading", "format_walk", "format_walk_file", "generate_walk", "HELD_OUT", "learn_map",
    "learn_map_from_evidence", "learn_map_through_noise", "load", "make_world", "map_communities", "MAP_DEFAULTS",
    "MAP_HELD_OUT_SHARE", "MapOptions", "match_rooms", "match_schemas", "MAX_NOISE", "MAX_OBSERVATION",
    "MAX_SOFT_CLONES", "noisy_readings", "parse_room", "parse_walk", "place_clones", "place_field", "Plan", "plan_flat",
    "plan_hierarchical", "plan_route", "read_evidence", "read_library", "read_room", "read_walk", "recovers_room",
    "room_text", "viterbi", "Walk", "WalkFile", "ways_into", "world_rooms", "write_walk"
]
