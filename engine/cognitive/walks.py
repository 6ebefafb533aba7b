"""Files of cognitive maps: rooms, walks, and the recipe that learns a map from a walk
(:mod:`engine.cognitive.actions`).

A room is a CSV (or whitespace-separated) table of whole numbers, one row per line: each cell's observation (0 to
:data:`engine.cognitive.actions.MAX_OBSERVATION`), -1 for a wall cell. A walk is a CSV file with a header naming at
least the columns ``action`` and ``observation`` (any names), one row per step: the observation seen there and the
action taken there (the last row's action is not used); a generated walk adds the columns ``row`` and ``column`` (the
true place). JSON walks are an object with the lists ``actions`` and ``observations``.

A file may hold several walks (documents, as a text corpus does: each starts afresh, no step runs from one into the
next): the CSV column ``document`` (or the JSON list ``documents``, one entry per step) names each step's walk; a
walk's steps are consecutive rows, each walk has at least 2 steps, and the last action of each is not used. A file
without it is one walk.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.cognitive import actions, restarts
from engine.corpora import text
from engine.files import atomic_write
from engine.training.options import MAX_RESTARTS

MAX_WALK_BYTES = 200_000_000
"""The largest walk or room file read (as for a text corpus)."""


@dataclass(frozen=True)
class MapOptions:
    """The recipe of the paper's public notebook for a map: batch EM with a small pseudocount, stopped when the
    likelihood stops improving, then Viterbi EM without pseudocount (which keeps only the clones the walk's MAP
    path uses); then, unless ``merge`` is off, the clones with the same future merged
    (:func:`engine.cognitive.maps.merge_equivalent_clones`: a place split between clones becomes one clone). The
    notebook caps EM at 1,000 iterations; on its empty room every run reached that cap and 2 of 5 were not recovered,
    while with 4,000 the runs stopped by themselves after 1,050-2,025 iterations (bench/RESULTS.md), hence 4,000.

    ``restarts``: the recipe from this many random starts (seeds ``seed``, ``seed + 1``, ...), each on the walk
    without its last :data:`MAP_HELD_OUT_SHARE` of steps, keeping the start whose map predicts that held-out tail best,
    refitted on the whole walk (:mod:`engine.cognitive.restarts`); 1 runs the recipe once on the whole walk. One
    start finds a room with aliased observations and walls on some seeds only (the 5 x 7 room of issue 50: 1 of 2),
    hence 4 by default."""

    clones: int = 70
    iterations: int = 4000
    pseudocount: float = 2e-3
    viterbi_iterations: int = 100
    seed: int = 0
    merge: bool = True
    restarts: int = 4


MAP_DEFAULTS = MapOptions()
MAP_HELD_OUT_SHARE = 0.1
"""The share of a walk's steps (its tail) that restarts do not learn from and are chosen by (at least 2 steps)."""


@dataclass(frozen=True)
class WalkFile:
    """A walk read from a file: indices into ``symbols`` and ``actions`` (names as in the file), and the true
    places when the file has them; with several documents, the steps of all of them one after the other, document
    d from step ``starts[d]`` on and named ``documents[d]`` (``documents`` is empty for a file without them)."""

    observations: np.ndarray
    actions: np.ndarray
    symbols: list[str]
    action_names: list[str]
    positions: np.ndarray | None = None
    documents: tuple[str, ...] = ()
    starts: tuple[int, ...] = (0,)

    def walks(self) -> tuple[actions.Walks, actions.Walks]:
        """(observations, actions) as the functions of :mod:`engine.cognitive.actions` take them: the two arrays for a
        file of one walk, a list of each document's for a file of documents."""
        if not self.documents:
            return self.observations, self.actions
        bounds = [*self.starts, len(self.observations)]
        pieces = list(zip(bounds[:-1], bounds[1:], strict=True))
        return [self.observations[lo:hi] for lo, hi in pieces], [self.actions[lo:hi] for lo, hi in pieces]


def parse_room(content: str, name: str = "room") -> np.ndarray:
    """A room from the text of its file (see the module docstring); ValueError in one sentence on bad input."""
    rows = []
    for number, line in enumerate(content.splitlines(), start=1):
        cells = [cell for cell in line.replace(",", " ").split() if cell]
        if not cells:
            continue
        try:
            row = [int(cell) for cell in cells]
        except ValueError:
            raise ValueError(f"{name}: line {number} holds a cell that is not a whole number") from None
        if any(not actions.WALL <= value <= actions.MAX_OBSERVATION for value in row):
            raise ValueError(f"{name}: line {number}: {actions.ROOM_VALUES}")
        rows.append(row)
    if not rows:
        raise ValueError(f"{name}: the room file is empty")
    if len({len(row) for row in rows}) != 1:
        raise ValueError(f"{name}: the room's rows have different lengths (a room must be rectangular)")
    return actions.check_room(np.array(rows, dtype=np.int64))


def read_room(path: str | os.PathLike[str]) -> np.ndarray:
    return parse_room(text.read_text(path, max_bytes=MAX_WALK_BYTES), name=os.fspath(path))


def _ordered(values: list[str], preferred: tuple[str, ...] = ()) -> list[str]:
    """Distinct names in a stable order: ``preferred``'s order when they all belong to it, numeric order when all
    are whole numbers, else sorted."""
    distinct = set(values)
    if distinct <= set(preferred):
        return [v for v in preferred if v in distinct]
    try:
        return sorted(distinct, key=int)
    except ValueError:
        return sorted(distinct)


def _document_runs(labels: list[str], name: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The documents of a walk file from each step's label: their names and first steps, each a run of consecutive
    steps of at least 2; ValueError in one sentence otherwise."""
    names: list[str] = []
    starts: list[int] = []
    seen: set[str] = set()
    for step, label in enumerate(labels):
        if not label:
            raise ValueError(f"{name}: step {step + 1} has an empty document name")
        if names and label == names[-1]:
            continue
        if label in seen:
            raise ValueError(f"{name}: the steps of document {label!r} are not consecutive rows")
        names.append(label)
        starts.append(step)
        seen.add(label)
    for d, lo in enumerate(starts):
        hi = starts[d + 1] if d + 1 < len(starts) else len(labels)
        if hi - lo < 2:
            raise ValueError(f"{name}: document {names[d]!r} has fewer than 2 steps")
    return tuple(names), tuple(starts)


def _json_steps(content: str, name: str) -> tuple[list[tuple[Any, Any]], list[str] | None]:
    """The (action, observation) steps of a JSON walk and each step's document label (None without them)."""
    try:
        value = json.loads(content)
    except ValueError:
        raise ValueError(f"{name}: not valid JSON") from None
    except RecursionError:  # nested deeper than the parser goes (a hostile file; was an HTTP 500)
        raise ValueError(f"{name}: nested too deeply to be a walk") from None
    if not isinstance(value, dict) or not isinstance(value.get("actions"), list):
        raise ValueError(f'{name}: a JSON walk must be an object with the lists "actions" and "observations"')
    moves, seen = value.get("actions") or [], value.get("observations") or []
    if len(moves) != len(seen):
        raise ValueError(f"{name}: a walk needs one action per observation")
    labels = value.get("documents")
    if labels is None:
        return list(zip(moves, seen, strict=True)), None
    if (
        not isinstance(labels, list)
        or len(labels) != len(seen)
        or not all(isinstance(v, str | int) and not isinstance(v, bool) for v in labels)
    ):
        raise ValueError(f'{name}: "documents" must be a list of one name (a string or a whole number) per step')
    return list(zip(moves, seen, strict=True)), [str(v).strip() for v in labels]


def parse_walk(content: str, name: str = "walk") -> WalkFile:
    """A walk from the text of its file (CSV with a header, or JSON; see the module docstring), of one walk or of
    several documents; ValueError in one sentence on bad input."""
    labels: list[str] | None = None
    places: list[tuple[Any, Any]] = []
    if content.lstrip().startswith("{"):
        steps, labels = _json_steps(content, name)
    else:
        reader = csv.DictReader(io.StringIO(content))
        fields = [f.strip().lower() for f in (reader.fieldnames or [])]
        if "action" not in fields or "observation" not in fields:
            raise ValueError(f'{name}: a walk file needs a header with the columns "action" and "observation"')
        reader.fieldnames = fields
        steps, labels = [], [] if "document" in fields else None
        for row in reader:
            if row.get("action") is None or row.get("observation") is None or None in row.values():
                raise ValueError(f"{name}: line {reader.line_num} has fewer cells than the header")
            steps.append((row["action"], row["observation"]))
            places.append((row.get("row"), row.get("column")))
            if labels is not None:
                labels.append(row["document"].strip())
    steps = [(str(a).strip(), str(o).strip()) for a, o in steps]
    if len(steps) < 2:
        raise ValueError(f"{name}: a walk needs at least 2 steps")
    documents, starts = _document_runs(labels, name) if labels is not None else ((), (0,))
    last = {lo - 1 for lo in starts[1:]} | {len(steps) - 1}  # the last step of each walk: its action is unused
    if any(not o for _, o in steps) or any(not a for n, (a, _) in enumerate(steps) if n not in last):
        raise ValueError(f"{name}: a step has an empty action or observation")
    symbols = _ordered([o for _, o in steps])
    action_names = _ordered([a for n, (a, _) in enumerate(steps) if n not in last], actions.MOVES)
    symbol_index = {s: i for i, s in enumerate(symbols)}
    action_index = {a: i for i, a in enumerate(action_names)}
    x = np.array([symbol_index[o] for _, o in steps], dtype=np.int64)
    a = np.array([action_index.get(act, 0) for act, _ in steps], dtype=np.int64)
    positions = None
    if places and all(r not in (None, "") and c not in (None, "") for r, c in places):
        try:
            positions = np.array([(int(r), int(c)) for r, c in places], dtype=np.int64)
        except ValueError:
            raise ValueError(f"{name}: the row and column columns must hold whole numbers") from None
    return WalkFile(x, a, symbols, action_names, positions, documents, starts)


def read_walk(path: str | os.PathLike[str]) -> WalkFile:
    return parse_walk(text.read_text(path, max_bytes=MAX_WALK_BYTES), name=os.fspath(path))


def format_walk(walk: actions.Walk) -> str:
    """A generated walk as CSV: action (a name of :data:`engine.cognitive.actions.MOVES`), observation, row, column."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["action", "observation", "row", "column"])
    for n in range(len(walk)):
        place = walk.positions[n] if walk.positions is not None else ("", "")
        writer.writerow([actions.MOVES[walk.actions[n]], int(walk.observations[n]), place[0], place[1]])
    return out.getvalue()


def format_walk_file(walk: WalkFile) -> str:
    """A walk read from a file as CSV again (:func:`parse_walk` gives it back): document (for a file of
    documents), action (empty at each walk's last step) and observation (the file's names), row and column (when
    the places are known)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    places = ["row", "column"] if walk.positions is not None else []
    writer.writerow((["document"] if walk.documents else []) + ["action", "observation"] + places)
    n_steps = len(walk.observations)
    document = np.searchsorted(np.asarray(walk.starts), np.arange(n_steps), side="right") - 1
    last = {lo - 1 for lo in walk.starts[1:]} | {n_steps - 1}  # each walk's last action is not used: left empty
    for n in range(n_steps):
        row = [walk.documents[document[n]]] if walk.documents else []
        row += ["" if n in last else walk.action_names[walk.actions[n]], walk.symbols[walk.observations[n]]]
        writer.writerow(row + ([int(v) for v in walk.positions[n]] if walk.positions is not None else []))
    return out.getvalue()


def write_walk(walk: actions.Walk, path: str | os.PathLike[str]) -> None:
    content = format_walk(walk)

    def write(temporary: str) -> None:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(content)

    atomic_write(path, write)


MapProgress = Callable[[str, int, float, int], None]
"""A map's progress: the stage ("em", "viterbi"; "refit" for the kept restart's Viterbi EM on the whole walk), the
iteration (from 0), the bits per step, and the restart (from 0)."""


def check_restarts(restarts: Any) -> int:
    """``restarts`` as the number of restarts of a map, a whole number from 1 to
    :data:`engine.training.options.MAX_RESTARTS`; ValueError in one sentence otherwise."""
    if isinstance(restarts, bool) or not isinstance(restarts, int | np.integer) or not 1 <= restarts <= MAX_RESTARTS:
        raise ValueError(f"the number of restarts must be a whole number from 1 to {MAX_RESTARTS}, got {restarts!r}")
    return int(restarts)


def learn_map(
    walk: WalkFile, options: MapOptions = MAP_DEFAULTS, progress: MapProgress | None = None
) -> tuple[actions.ActionCHMM, dict[str, Any]]:
    """Learn a map from a walk (or a file's several walks, which share the map) with the :class:`MapOptions`
    recipe (:func:`engine.cognitive.restarts.recipe`), from ``options.restarts`` random starts, the one whose map
    predicts the walk's held-out tail best kept (:mod:`engine.cognitive.restarts`); returns the model and a summary
    (iterations, bits per step, clones the MAP paths use; with restarts, a line per restart, the one kept and the
    held-out steps). ``progress`` sees every iteration (:data:`MapProgress`); a raise in it stops the learning and
    is raised again. ValueError in one sentence for bad options, or when the learned map cannot make the walk
    (:func:`check_map`)."""
    if not (isinstance(options.clones, int) and options.clones >= 1):
        raise ValueError(f"the clones per observation must be a positive whole number, got {options.clones!r}")
    check_restarts(options.restarts)
    x, a = walk.walks()
    n_clones = np.full(len(walk.symbols), options.clones, dtype=np.int64)
    extra: dict[str, Any] = {}
    if options.restarts == 1:
        start = actions.random_action_model(n_clones, x, a, options.seed, walk.symbols, walk.action_names)

        def stage(name: str) -> actions.Progress | None:
            return None if progress is None else (lambda i, bits: progress(name, i, bits, 0))

        run = restarts.recipe(start, x, a, options, stage)
    else:
        run, tried, kept, held_steps = restarts.best_of_restarts(
            x, a, n_clones, walk.symbols, walk.action_names, options, MAP_HELD_OUT_SHARE, progress
        )
        extra = {"restarts": [r.line() for r in tried], "kept_restart": kept.restart, "held_out_steps": held_steps}
    model = run.model
    path, _ = actions.viterbi(model, x, a)
    path = np.concatenate(path) if isinstance(path, list) else path
    summary = {
        "em_iterations": run.em_iterations,
        "viterbi_iterations": run.viterbi_iterations,
        "bits_per_step": actions.bits_per_step(model, x, a),
        "clones_used": int(len(np.unique(path[path >= 0]))),
        "clones_before_merging": run.clones_before_merging,
        "clones": int(n_clones.sum()),
        "steps": int(len(walk.observations)),
        "walks": max(len(walk.documents), 1),
    } | extra
    check_map(summary)
    model.metadata.update(summary | {"recipe": dataclasses.asdict(options)})
    return model, summary


def check_map(summary: dict[str, Any]) -> None:
    """Refuse a learned map that cannot make its walk (bits per step not finite, or a MAP path that uses no clone):
    ValueError in one sentence naming both, so that no caller keeps it as a finished map."""
    bits, used = float(summary["bits_per_step"]), int(summary["clones_used"])
    if not np.isfinite(bits) or used == 0:
        raise ValueError(
            f"the learned map cannot make its walk ({bits:g} bits per step, the walk uses {used} of "
            f"{summary['clones']} clones)"
        )
