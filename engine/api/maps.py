"""The door's cognitive maps (:mod:`engine.cognitive`): rooms, worlds and walks, learning a map from a walk (or a
sensor's evidence, or noisy readings), reading it (place fields, the room it recovers, Infomap's rooms), planning
routes over it, and matching a walk to a library of maps (schemas); with the maps' defaults and limits. Reached as
``api.maps``."""

from __future__ import annotations

from engine.cognitive.actions import MAX_OBSERVATION, ActionCHMM, Walk, generate_walk
from engine.cognitive.actions import load as load_map
from engine.cognitive.actions import viterbi as decode_walk
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
from engine.cognitive.maps import clone_graph as map_clone_graph
from engine.cognitive.maps import place_field, plan_route, recovers_room
from engine.cognitive.planning import DoorFields, Plan, block, door_fields, plan_flat, plan_hierarchical, ways_into
from engine.cognitive.schemas import HELD_OUT as SCHEMA_HELD_OUT
from engine.cognitive.schemas import match_schemas, read_library
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
    # walks in rooms and worlds, and their files
    "Walk", "WalkFile", "generate_walk", "format_walk", "format_walk_file", "parse_walk", "read_walk", "write_walk",
    "parse_room", "read_room", "make_world", "room_text", "world_rooms", "noisy_readings", "read_evidence",
    "evidence_reading",
    # learning and reading a map
    "ActionCHMM", "MapOptions", "learn_map", "learn_map_from_evidence", "learn_map_through_noise", "load_map",
    "decode_walk", "map_clone_graph", "place_field", "recovers_room",
    # the rooms a map finds, and planning over them
    "map_communities", "clone_modules", "clone_places", "place_clones", "match_rooms", "Plan", "plan_route",
    "plan_flat", "plan_hierarchical", "block", "ways_into", "DoorFields", "door_fields",
    # schemas: a walk in a new room matched to stored maps
    "match_schemas", "read_library",
    # defaults and limits
    "MAP_DEFAULTS", "MAP_HELD_OUT_SHARE", "MAX_NOISE", "MAX_OBSERVATION", "MAX_SOFT_CLONES", "SCHEMA_HELD_OUT",
]
"""What a front end may use of the maps."""
