"""Walk files read in bounded memory (issue 51, item 4): `chmm map` read a 200 MB walk whole into Python objects
(5.4 GB); a CSV walk is now streamed step by step into arrays, and what a walk cannot hold is refused in one sentence
(never a traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine import cli
from engine.cognitive import walks

ROOT = Path(__file__).resolve().parents[1]


def write_walk(path: Path, steps: int, seed: int = 0) -> None:
    """A CSV walk of ``steps`` random steps with places (about 11 bytes a step)."""
    rng = np.random.default_rng(seed)
    moves = np.array(["left", "right", "up", "down"])
    a, o = moves[rng.integers(0, 4, steps)], rng.integers(0, 30, steps)
    r, c = rng.integers(0, 6, steps), rng.integers(0, 8, steps)
    with open(path, "w", encoding="utf-8") as out:
        out.write("action,observation,row,column\n")
        out.write("".join(f"{a[i]},{o[i]},{r[i]},{c[i]}\n" for i in range(steps)))


def test_a_long_walk_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """A 3.4 MB walk took 37 times its size read whole (csv.DictReader's rows, lists of tuples of strings): read now
    into arrays, within 15 times its size (4 times for a 17 MB walk; 640 MB before)."""
    path = tmp_path / "walk.csv"
    write_walk(path, 300_000)
    size = path.stat().st_size
    code = (
        "import resource, sys\n"
        "from engine.cognitive import walks\n"
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "walk = walks.read_walk(sys.argv[1])\n"
        "print(len(walk.observations), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    steps, added_kb = (int(v) for v in done.stdout.split())
    assert steps == 300_000
    assert added_kb * 1024 < 15 * size, (added_kb, size)


def test_a_streamed_walk_is_the_walk_read_whole(tmp_path: Path) -> None:
    """The file streamed (over 64 kB) and its text parsed give the same walk: codes, names, places, documents."""
    path = tmp_path / "walk.csv"
    write_walk(path, 20_000)
    streamed, whole = walks.read_walk(path), walks.parse_walk(path.read_text(encoding="utf-8"))
    assert path.stat().st_size > 1 << 16
    for got in (streamed, whole):
        assert got.symbols == [str(v) for v in range(30)] and got.action_names == ["left", "right", "up", "down"]
        assert got.positions is not None and got.positions.dtype == np.int64 and got.positions.shape == (20_000, 2)
    assert np.array_equal(streamed.observations, whole.observations)
    assert np.array_equal(streamed.actions, whole.actions) and np.array_equal(streamed.positions, whole.positions)
    rows = path.read_text(encoding="utf-8").splitlines()
    first = rows[1].split(",")
    assert streamed.symbols[streamed.observations[0]] == first[1]
    assert streamed.action_names[streamed.actions[0]] == first[0]
    assert list(streamed.positions[0]) == [int(first[2]), int(first[3])]


def test_documents_last_actions_and_places_as_before() -> None:
    """Each walk's last action is unused (empty, or a name used nowhere else, which names no action); a step without
    its place leaves the walk without places; a JSON walk reads the same."""
    content = (
        "document,action,observation,row\n"
        "a,up,x,1\n"
        "a,jump,y,2\n"  # "jump": the last action of walk a, used nowhere else
        "b,left,y,\n"  # a step without its place
        "b,,x,4\n"
    )
    walk = walks.parse_walk(content, "w.csv")
    assert walk.documents == ("a", "b") and walk.starts == (0, 2)
    assert walk.action_names == ["left", "up"] and list(walk.actions) == [1, 0, 0, 0]
    assert walk.symbols == ["x", "y"] and list(walk.observations) == [0, 1, 1, 0]
    assert walk.positions is None  # no "column" either
    json_walk = walks.parse_walk(
        '{"actions": ["up", "jump", "left", ""], "observations": ["x", "y", "y", "x"], '
        '"documents": ["a", "a", "b", "b"]}'
    )
    assert json_walk.action_names == walk.action_names and list(json_walk.actions) == list(walk.actions)
    assert json_walk.documents == walk.documents and list(json_walk.observations) == list(walk.observations)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("action,observation,row,column\nup,1,1,99999999999999999999999\ndown,2,1,1\n", "must hold whole numbers"),
        ("action,observation\nup," + "x" * 200_000 + "\ndown,2\n", "cannot be read as CSV (field larger than"),
        ("action,observation\n" + "".join(f"up,{i}\n" for i in range(walks.MAX_WALK_NAMES + 1)), "different obs"),
        ("action,observation\nup,1\n,2\ndown,3\n", "empty action or observation"),
        ("action,observation\nup\ndown,2\n", "line 2 has fewer cells than the header"),
    ],
)
def test_what_a_walk_cannot_hold_is_one_sentence_from_chmm_map(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, said: str
) -> None:
    """A place past int64 raised OverflowError, a cell past csv's field limit csv's own error: tracebacks from
    `chmm map`. Each is now one sentence, and so are too many names and an empty action inside a walk."""
    path = tmp_path / "walk.csv"
    path.write_text(content, encoding="utf-8")
    assert cli.main(["map", str(path), "-o", str(tmp_path / "map.npz")]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("chmm: error: ") and said in error and "Traceback" not in error
    assert len(error.splitlines()) == 1
