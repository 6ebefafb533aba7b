"""Schemas (engine.cognitive.schemas): a walk in a room of a known layout with new observations is matched to the
stored map of that layout; the held-out score against the engine's own; the library read as untrusted files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.cognitive import actions, maps, schemas

SQUARE = np.array([[0, 1, 2, 0], [1, 2, 0, 1], [2, 0, 1, 2]])
"""3 x 4 cells, 3 observations."""
CORRIDOR = np.array([[0, 1, 2, 0, 1, 2], [2, 0, 1, 2, 0, 1]])
"""2 x 6 cells, 3 observations: as many cells as SQUARE, another layout."""
RING = np.array([[0, 1, 2, 0], [1, -1, -1, 1], [2, 0, 1, 2]])
"""3 x 4 with a wall block in the middle: 10 cells around it."""


def test_map_of_a_room_recovers_the_room():
    """The true map (one clone per cell, moves as the room allows) has the room's grid as its clone graph on a
    walk, and the walk's probability under it is 1 / cells: in a deterministic room a walk that localises has one
    start cell consistent with all of it, so the whole walk carries log2(cells) bits."""
    for room in (SQUARE, CORRIDOR, RING):
        model = schemas.map_of_room(room)
        walk = actions.generate_walk(room, 2_000, seed=1)
        assert model.n_states == int((room >= 0).sum())
        assert maps.recovers_room(model, walk.observations, walk.actions, room)
        bits = actions.bits_per_step(model, walk.observations, walk.actions)
        assert bits * len(walk) == pytest.approx(np.log2((room >= 0).sum()), abs=1e-6)


def test_emission_bits_with_the_maps_own_emissions_is_the_engines_score():
    """With each clone emitting its own symbol, :func:`emission_bits` is the engine's bits per step of the walk
    (one implementation against another), on a learned map with stochastic T too."""
    model = schemas.map_of_room(RING)
    walk = actions.generate_walk(RING, 1_500, seed=2)
    own = np.eye(model.n_symbols)[model.clone_symbol()]
    assert schemas.emission_bits(model, own, walk.observations, walk.actions) == pytest.approx(
        actions.bits_per_step(model, walk.observations, walk.actions), rel=1e-9
    )
    rng = np.random.default_rng(3)
    noisy = model.transition(0)[None].repeat(4, axis=0) * 0 + np.stack([model.transition(k) for k in range(4)])
    noisy = noisy * 0.9 + 0.1 * rng.random(noisy.shape) * (noisy.sum(axis=2, keepdims=True) > 0)
    noisy /= noisy.sum(axis=2, keepdims=True)
    stochastic = actions.from_dense(noisy, model.n_clones, actions=model.actions)
    assert schemas.emission_bits(stochastic, own, walk.observations, walk.actions) == pytest.approx(
        actions.bits_per_step(stochastic, walk.observations, walk.actions), rel=1e-9
    )


@pytest.mark.parametrize("room, layout", [(SQUARE, "square"), (CORRIDOR, "corridor"), (RING, "ring")])
def test_a_walk_in_a_known_layout_with_new_observations_finds_its_schema(room, layout):
    """Three stored maps (12, 12 and 10 cells); a walk in a room of one of their layouts whose cells show new
    observations (4 symbols in a new pattern, not a relabelling): the stored map of that layout fits the held-out
    steps best, by a margin."""
    library = {name: schemas.map_of_room(r) for name, r in (("square", SQUARE), ("corridor", CORRIDOR), ("ring", RING))}
    rng = np.random.default_rng(4)
    repainted = np.where(room >= 0, rng.integers(4, size=room.shape), -1)
    walk = actions.generate_walk(repainted, 3_000, seed=5)
    fits = schemas.match_schemas(library, walk.observations, walk.actions, 4, iterations=40)
    assert [f.name for f in fits][0] == layout
    assert fits[1].held_out_bits - fits[0].held_out_bits > 0.05
    assert fits[0].emissions.shape == (library[layout].n_states, 4)


def test_the_library_is_read_from_files_and_folders(tmp_path):
    """Maps saved in a folder and as a file come back by name; a missing path, an empty folder, a foreign file and
    a short walk are refused in one sentence."""
    folder = tmp_path / "maps"
    folder.mkdir()
    schemas.map_of_room(SQUARE).save(folder / "square.npz")
    schemas.map_of_room(RING).save(tmp_path / "ring.npz")
    library = schemas.read_library([folder, tmp_path / "ring.npz"])
    assert sorted(library) == ["ring", "square"]
    assert library["square"].n_states == 12
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.npz").write_bytes(b"not a model")
    for paths, message in (
        ([tmp_path / "nowhere"], "neither a map file"),
        ([tmp_path / "empty"], "holds no maps"),
        ([tmp_path / "bad.npz"], "not a readable CHMM Explorer model"),
    ):
        with pytest.raises(ValueError, match=message) as caught:
            schemas.read_library(paths)
        assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="too short"):
        schemas.match_schemas(library, [0, 1, 2], [0, 1, 0], 3)
    with pytest.raises(ValueError, match="holds no maps"):
        schemas.match_schemas({}, [0, 1, 2], [0, 1, 0], 3)


def test_chmm_schema_names_the_layout_of_a_walk(tmp_path, capsys):
    """``chmm schema WALK --library FOLDER``: a walk made by ``chmm walk`` in a repainted ring is matched to the
    ring's map among three, in JSON and in words, and a map stored with its actions in another order fits as before
    (actions matched by name); a walk with an action the maps lack is refused in one line."""
    from engine.cli import main

    folder = tmp_path / "library"
    folder.mkdir()
    for name, room in (("square", SQUARE), ("corridor", CORRIDOR), ("ring", RING)):
        schemas.map_of_room(room).save(folder / f"{name}.npz")
    repainted = tmp_path / "repainted.csv"
    repainted.write_text("\n".join(",".join(str(v) for v in row) for row in np.where(RING >= 0, (RING + 1) % 3, -1)))
    walk = tmp_path / "walk.csv"
    assert main(["walk", str(repainted), "--length", "2500", "--seed", "3", "-o", str(walk)]) == 0
    capsys.readouterr()
    assert main(["schema", str(walk), "--library", str(folder), "--iterations", "30", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["best"] == "ring" and [m["map"] for m in result["maps"]][0] == "ring"
    fitted = {m["map"]: m["held_out_bits_per_step"] for m in result["maps"]}
    assert main(["schema", str(walk), "--library", str(folder), "--iterations", "30"]) == 0
    assert "the walk follows 'ring'" in capsys.readouterr().out
    reordered = schemas.map_of_room(SQUARE)  # the same room with its actions stored in another order
    order = [2, 0, 3, 1]
    reordered = actions.from_dense(
        np.stack([reordered.transition(k) for k in order]), reordered.n_clones, reordered.pi,
        symbols=reordered.symbols, actions=[reordered.actions[k] for k in order],
    )  # fmt: skip
    reordered.save(folder / "square.npz")
    assert main(["schema", str(walk), "--library", str(folder), "--iterations", "30", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["best"] == "ring" and {m["map"]: m["held_out_bits_per_step"] for m in result["maps"]} == fitted
    strange = tmp_path / "strange.csv"
    strange.write_text("action,observation\njump,0\nleft,1\nleft,0\n")
    assert main(["schema", str(strange), "--library", str(folder)]) != 0
    error = capsys.readouterr().err.strip()
    assert "actions the maps do not have: jump" in error and "\n" not in error


def test_emission_only_em_never_loses_likelihood():
    """EM on the emissions with T fixed (maps.learn_emissions) on a stochastic map: the bits per step each iteration
    starts from never rise (EM's monotone likelihood), from a random start to the end."""
    model = schemas.map_of_room(RING)
    rng = np.random.default_rng(6)
    noisy = np.stack([model.transition(k) for k in range(4)]) * 0.8 + 0.2 * rng.random((4, 10, 10))
    noisy /= noisy.sum(axis=2, keepdims=True)
    stochastic = actions.from_dense(noisy, model.n_clones, actions=model.actions)
    walk = actions.generate_walk(np.where(RING >= 0, (RING * 7) % 4, -1), 1_500, seed=7)
    _, history = maps.learn_emissions(stochastic, walk.observations, walk.actions, 4, iterations=40, seed=8)
    assert len(history) > 5
    assert np.all(np.diff(history) <= 1e-12)
    assert history[-1] < history[0] - 0.1


def test_maps_match_the_walks_actions_by_name_and_report_their_progress():
    """With the walk's action names, a map whose actions come in another order (the same T, its actions permuted) is
    matched by name and scores exactly as the original; a map without one of the walk's actions is refused by name
    in one sentence; the progress callback sees every map's iterations, and an exception it raises stops the match."""
    model = schemas.map_of_room(RING)
    order = [2, 0, 3, 1]
    permuted = actions.from_dense(
        np.stack([model.transition(k) for k in order]), model.n_clones, actions=[model.actions[k] for k in order]
    )
    walk = actions.generate_walk(np.where(RING >= 0, (RING + 1) % 3, -1), 600, seed=9)
    names = list(actions.MOVES)
    seen: list[tuple[int, int]] = []
    fits = schemas.match_schemas(
        {"ring": model, "shuffled": permuted}, walk.observations, walk.actions, 3, iterations=15,
        action_names=names, progress=lambda m, i, bits: seen.append((m, i)),
    )  # fmt: skip
    assert fits[0].held_out_bits == pytest.approx(fits[1].held_out_bits, rel=1e-9)
    assert {m for m, _ in seen} == {0, 1} and (0, 0) in seen and (1, 0) in seen
    assert len(seen) == sum(f.iterations for f in fits)
    without_up = actions.from_dense(
        np.stack([model.transition(k) for k in range(3)]), model.n_clones, actions=list(model.actions[:3])
    )
    with pytest.raises(ValueError, match=f"the map 'three' has the actions .*, not the walk's {model.actions[3]}"):
        schemas.match_schemas({"three": without_up}, walk.observations, walk.actions, 3, action_names=names)

    def stop(m: int, i: int, bits: float) -> None:
        if i == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        schemas.match_schemas({"ring": model}, walk.observations, walk.actions, 3, action_names=names, progress=stop)
