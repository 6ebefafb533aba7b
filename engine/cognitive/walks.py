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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.cognitive import actions, restarts
from engine.corpora import text
from engine.errors import CHMMError
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
    hence 4 by default.

    ``max_restarts``: the most restarts in all. When every restart's map gives the held-out tail probability 0 (none
    found the room), another round of ``restarts`` runs, until one does or this many have run
    (:func:`engine.cognitive.restarts.run_restarts`); never fewer than ``restarts``. On the notebook's empty room at
    10,000 steps one start finds the room 6 times in 20, so four restarts miss it about once in four maps, twelve
    about once in seventy; the rounds after the first cost time only on the walks where the first missed. With
    ``restarts`` 1 no tail is held out and the recipe runs once.

    ``race``: the restarts race (:func:`engine.cognitive.restarts.race`, the default): batch EM in segments of
    ``race_every`` iterations, each restart scored after each segment by the held-out tail's bits per step under its
    EM model; one past ``race_grace`` iterations that cannot catch the leader is stopped: its score more than
    ``race_margin`` times the leader's above it, or, with a ``race_window``, above it by more than it fell over the
    last ``race_window`` iterations (off: on a 4 x 4 room with 10 clones per observation the tail's score rises and
    falls again, and that rule stopped the restarts that would have won). The others finish the recipe and the map
    kept is chosen among them; a stopped restart whose EM model already predicted the tail better than the best
    finished map then runs again to its end (:func:`engine.cognitive.restarts.revive`). The racers run in threads,
    two at a time on two cores. The rule and its numbers were chosen on the trajectories of every restart of the four
    rooms of bench/bench_rooms.py (bench/bench_race.py): the rule saving the most EM iterations of those that never
    stopped the restart the full run keeps.

    ``plateau_window``: batch EM also ends once it has settled, when its bits per step b improved by less than
    ``plateau_gain`` times b over the last ``plateau_window`` iterations (:func:`engine.cognitive.restarts.on_plateau`),
    then Viterbi EM starts; 0 (the default): only when worse. Off, because on the recorded trajectories at 50,000 steps
    every plateau that ends EM before it stops improving made the restarts that find the empty room miss it
    (bench/RESULTS.md)."""

    clones: int = 70
    iterations: int = 4000
    pseudocount: float = 2e-3
    viterbi_iterations: int = 100
    seed: int = 0
    merge: bool = True
    restarts: int = 4
    max_restarts: int = 12
    plateau_window: int = 0
    plateau_gain: float = 1e-3
    race: bool = True
    race_every: int = 25
    race_grace: int = 200
    race_margin: float = 1.0
    race_window: int = 0


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
            raise CHMMError(f"{name}: line {number} holds a cell that is not a whole number") from None
        if any(not actions.WALL <= value <= actions.MAX_OBSERVATION for value in row):
            raise CHMMError(f"{name}: line {number}: {actions.ROOM_VALUES}")
        rows.append(row)
    if not rows:
        raise CHMMError(f"{name}: the room file is empty")
    if len({len(row) for row in rows}) != 1:
        raise CHMMError(f"{name}: the room's rows have different lengths (a room must be rectangular)")
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


MAX_JSON_WALK_BYTES = 20_000_000
"""The largest JSON walk read (a JSON file is parsed whole into Python objects, up to 48 bytes a byte: a large walk is
read as CSV, which is streamed)."""

MAX_WALK_NAMES = actions.MAX_OBSERVATION + 1
"""The most distinct observations, and actions, a walk may name (a room's observations are 0 to
:data:`engine.cognitive.actions.MAX_OBSERVATION`)."""

_CHUNK_STEPS = 1 << 18


class _Column:
    """Whole numbers appended one at a time into int32 chunks of :data:`_CHUNK_STEPS` (4 bytes a step, where a list
    of Python ints took 36), joined once at the end."""

    def __init__(self) -> None:
        self.chunks: list[np.ndarray] = []
        self.filled = _CHUNK_STEPS

    def append(self, value: int) -> None:
        if self.filled == _CHUNK_STEPS:
            self.chunks.append(np.empty(_CHUNK_STEPS, dtype=np.int32))
            self.filled = 0
        self.chunks[-1][self.filled] = value
        self.filled += 1

    def take(self) -> np.ndarray:
        """The values as one int64 array (the chunks are given up as they are copied)."""
        total = (len(self.chunks) - 1) * _CHUNK_STEPS + self.filled if self.chunks else 0
        out = np.empty(total, dtype=np.int64)
        at = 0
        while self.chunks:
            chunk = self.chunks.pop(0)
            size = min(len(chunk), total - at)
            out[at : at + size] = chunk[:size]
            at += size
        return out


class _WalkBuilder:
    """A walk built step by step in bounded memory (a 200 MB walk was 5.4 GB of Python objects): the observations and
    actions as codes in first-seen order (at most :data:`MAX_WALK_NAMES` names of each), the documents as runs, the
    places as numbers; :meth:`finish` checks what needs the whole walk and gives the :class:`WalkFile`. Every problem is
    a ValueError in one sentence naming the file (``name``)."""

    def __init__(self, name: str, documents: bool, places: bool) -> None:
        self.name = name
        self.observations, self.actions = _Column(), _Column()
        self.symbol_codes: dict[str, int] = {}
        self.action_codes: dict[str, int] = {}
        self.documents = documents
        self.names: list[str] = []
        self.starts: list[int] = []
        self.seen: set[str] = set()
        self.places = places  # still collecting the places (every step so far has both)
        self.bad_place = False
        self.rows, self.columns = _Column(), _Column()
        self.steps = 0

    def _code(self, codes: dict[str, int], label: str, what: str) -> int:
        code = codes.get(label)
        if code is None:
            if len(codes) >= MAX_WALK_NAMES:
                raise CHMMError(f"{self.name}: the walk names more than {MAX_WALK_NAMES:,} different {what}")
            code = codes[label] = len(codes)
        return code

    def add(
        self, action: str, observation: str, document: str | None = None, place: tuple[Any, Any] = ("", "")
    ) -> None:
        """One step: its action and observation (stripped names), its document's name, its (row, column)."""
        if not observation:
            raise CHMMError(f"{self.name}: a step has an empty action or observation")
        self.observations.append(self._code(self.symbol_codes, observation, "observations"))
        self.actions.append(self._code(self.action_codes, action, "actions") if action else -1)
        if document is not None:
            self._document(document)
        if self.places:
            self._place(*place)
        self.steps += 1

    def _document(self, label: str) -> None:
        if not label:
            raise CHMMError(f"{self.name}: step {self.steps + 1} has an empty document name")
        if self.names and label == self.names[-1]:
            return
        if label in self.seen:
            raise CHMMError(f"{self.name}: the steps of document {label!r} are not consecutive rows")
        self.names.append(label)
        self.starts.append(self.steps)
        self.seen.add(label)

    def _place(self, row: Any, column: Any) -> None:
        if row in (None, "") or column in (None, ""):
            self.places = False  # a step without its place: the walk has none (not an error)
            self.rows, self.columns = _Column(), _Column()
            return
        if self.bad_place:
            return
        try:
            r, c = int(row), int(column)
        except (TypeError, ValueError):
            self.bad_place = True
            return
        if not (-(2**31) <= r < 2**31 and -(2**31) <= c < 2**31):
            self.bad_place = True
            return
        self.rows.append(r)
        self.columns.append(c)

    def finish(self) -> WalkFile:
        name, n = self.name, self.steps
        if n < 2:
            raise CHMMError(f"{name}: a walk needs at least 2 steps")
        documents, starts = (tuple(self.names), tuple(self.starts)) if self.documents else ((), (0,))
        bounds = [*starts, n]
        for d in range(len(documents)):
            if bounds[d + 1] - bounds[d] < 2:
                raise CHMMError(f"{name}: document {documents[d]!r} has fewer than 2 steps")
        last = np.array([lo - 1 for lo in starts[1:]] + [n - 1], dtype=np.int64)  # each walk's last step
        codes = self.actions.take()
        inner = np.ones(n, dtype=bool)
        inner[last] = False  # the last action of each walk is not used
        if np.any(codes[inner] < 0):
            raise CHMMError(f"{name}: a step has an empty action or observation")
        used = np.zeros(len(self.action_codes), dtype=bool)
        used[codes[inner]] = True
        del inner
        labels = list(self.action_codes)
        action_names = _ordered([labels[i] for i in np.flatnonzero(used)], actions.MOVES)
        position = {label: i for i, label in enumerate(action_names)}
        remap = np.array([position.get(label, 0) for label in labels] + [0], dtype=np.int64)  # [-1]: an empty one
        a = remap[codes]
        del codes
        labels = list(self.symbol_codes)
        symbols = _ordered(labels)
        position = {label: i for i, label in enumerate(symbols)}
        x = np.array([position[label] for label in labels], dtype=np.int64)[self.observations.take()]
        positions = None
        if self.places and self.bad_place:
            raise CHMMError(f"{name}: the row and column columns must hold whole numbers")
        if self.places:
            positions = np.stack([self.rows.take(), self.columns.take()], axis=1)
        return WalkFile(x, a, symbols, action_names, positions, documents, starts)


def _json_walk(content: str, name: str) -> WalkFile:
    """A JSON walk (at most :data:`MAX_JSON_WALK_BYTES` of text)."""
    if len(content) > MAX_JSON_WALK_BYTES:
        raise CHMMError(
            f"{name}: a JSON walk may take at most {MAX_JSON_WALK_BYTES:,} characters; write a longer walk as CSV"
        )
    try:
        value = json.loads(content)
    except ValueError:
        raise CHMMError(f"{name}: not valid JSON") from None
    except RecursionError:  # nested deeper than the parser goes (a hostile file; was an HTTP 500)
        raise CHMMError(f"{name}: nested too deeply to be a walk") from None
    if not isinstance(value, dict) or not isinstance(value.get("actions"), list):
        raise CHMMError(f'{name}: a JSON walk must be an object with the lists "actions" and "observations"')
    moves, seen = value.get("actions") or [], value.get("observations") or []
    if not isinstance(seen, list) or len(moves) != len(seen):
        raise CHMMError(f"{name}: a walk needs one action per observation")
    labels = value.get("documents")
    if labels is not None and (
        not isinstance(labels, list)
        or len(labels) != len(seen)
        or not all(isinstance(v, str | int) and not isinstance(v, bool) for v in labels)
    ):
        raise CHMMError(f'{name}: "documents" must be a list of one name (a string or a whole number) per step')
    builder = _WalkBuilder(name, labels is not None, places=False)
    for step, (move, observation) in enumerate(zip(moves, seen, strict=True)):
        builder.add(str(move).strip(), str(observation).strip(), None if labels is None else str(labels[step]).strip())
    return builder.finish()


def _csv_walk(lines: Any, name: str) -> WalkFile:
    """A CSV walk from its lines (an iterable of strings: a file read line by line, never whole)."""
    reader = csv.reader(lines)
    try:
        header = next(reader, None)
        fields = [f.strip().lower() for f in header or []]
        if "action" not in fields or "observation" not in fields:
            raise CHMMError(f'{name}: a walk file needs a header with the columns "action" and "observation"')

        def column(field: str) -> int | None:  # the last column of that name, as a dict of the row would read it
            return len(fields) - 1 - fields[::-1].index(field) if field in fields else None

        at_action, at_observation, at_document = column("action"), column("observation"), column("document")
        at_row, at_column = column("row"), column("column")
        builder = _WalkBuilder(name, at_document is not None, places=at_row is not None and at_column is not None)
        width = len(fields)
        for row in reader:
            if not row:
                continue  # a blank line
            if len(row) < width:
                raise CHMMError(f"{name}: line {reader.line_num} has fewer cells than the header")
            document = row[at_document].strip() if at_document is not None else None
            place = (row[at_row], row[at_column]) if at_row is not None and at_column is not None else ("", "")
            builder.add(row[at_action].strip(), row[at_observation].strip(), document, place)
    except csv.Error as exc:  # a NUL byte, an unterminated quote at the end of the file, a field past csv's limit
        raise CHMMError(f"{name}: line {reader.line_num} cannot be read as CSV ({exc})") from None
    except UnicodeDecodeError:
        raise CHMMError(f"{name}: after line {reader.line_num} it is not UTF-8 text; save the walk as UTF-8") from None
    return builder.finish()


def parse_walk(content: str, name: str = "walk") -> WalkFile:
    """A walk from the text of its file (CSV with a header, or JSON; see the module docstring), of one walk or of
    several documents; ValueError in one sentence on bad input. Read step by step into arrays
    (:class:`_WalkBuilder`)."""
    if content.lstrip().startswith("{"):
        return _json_walk(content, name)
    return _csv_walk(io.StringIO(content, newline=""), name)


def _bounded_lines(handle: Any, limit: int, name: str) -> Any:
    """The lines of an open text file, at most ``limit`` characters in all (a file that grows while it is read)."""
    read = 0
    for line in handle:
        read += len(line)
        if read > limit:
            raise text.CorpusError(f"{os.path.basename(name)} is too large: over {limit:,} bytes, the limit.")
        yield line


def read_walk(path: str | os.PathLike[str]) -> WalkFile:
    """A walk from its file, at most :data:`MAX_WALK_BYTES`: a CSV walk streamed line by line into arrays (a 200 MB
    walk took 5.4 GB read whole into Python objects), a JSON walk read whole (at most :data:`MAX_JSON_WALK_BYTES`);
    ValueError (:class:`engine.corpora.text.CorpusError` for the file itself) in one sentence on bad input."""
    name = os.fspath(path)
    if not os.path.isfile(name) or os.stat(name).st_size <= _SMALL_WALK_BYTES:  # the text checks' own sentences
        return parse_walk(text.read_text(name, max_bytes=MAX_WALK_BYTES), name=name)
    with open(name, "rb") as probe:
        head = probe.read(_SMALL_WALK_BYTES)
    if head.lstrip()[:1] == b"{":
        return parse_walk(text.read_text(name, max_bytes=MAX_JSON_WALK_BYTES), name=name)
    text.decode_bytes(head[: head.rfind(b"\n") + 1] or head, name=os.path.basename(name), max_bytes=MAX_WALK_BYTES)
    size = os.stat(name).st_size
    if size > MAX_WALK_BYTES:
        base = os.path.basename(name)
        raise text.CorpusError(f"{base} is too large: {size:,} bytes, the limit is {MAX_WALK_BYTES:,} bytes.")
    with open(name, encoding="utf-8-sig", newline="") as handle:
        return _csv_walk(_bounded_lines(handle, MAX_WALK_BYTES, name), name)


_SMALL_WALK_BYTES = 1 << 16
"""A walk file up to this size is read whole (with the text checks); a larger CSV one is streamed, checked on its
first block."""


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


def check_restarts(restarts: Any, what: str = "the number of restarts") -> int:
    """``restarts`` (``what``, for the message) as a number of restarts of a map, a whole number from 1 to
    :data:`engine.training.options.MAX_RESTARTS`; ValueError in one sentence otherwise."""
    if isinstance(restarts, bool) or not isinstance(restarts, int | np.integer) or not 1 <= restarts <= MAX_RESTARTS:
        raise CHMMError(f"{what} must be a whole number from 1 to {MAX_RESTARTS}, got {restarts!r}")
    return int(restarts)


def restarts_sentence(tried: Sequence[restarts.MapRestart], asked: int) -> str | None:
    """What a map's summary says of its restarts beyond the ``asked`` first round (None when it ran alone): that
    more rounds ran because every map gave the held-out steps probability 0, or that none of them found a map that
    can make those steps (the room is then most likely not found)."""
    if any(np.isfinite(r.held_out_bits) for r in tried):
        if len(tried) <= asked:
            return None
        return (
            f"The first {asked} restarts' maps all gave the held-out steps probability 0 (none found the room), so "
            f"{len(tried) - asked} more ran."
        )
    return (
        f"All {len(tried)} restarts' maps gave the held-out steps probability 0: the room is most likely not found; "
        "try more restarts, more clones per observation or a longer walk."
    )


def learn_map(
    walk: WalkFile, options: MapOptions = MAP_DEFAULTS, progress: MapProgress | None = None
) -> tuple[actions.ActionCHMM, dict[str, Any]]:
    """Learn a map from a walk (or a file's several walks, which share the map) with the :class:`MapOptions`
    recipe (:func:`engine.cognitive.restarts.recipe`), from ``options.restarts`` random starts, the one whose map
    predicts the walk's held-out tail best kept (:mod:`engine.cognitive.restarts`); returns the model and a summary
    (iterations, bits per step, clones the MAP paths use; with restarts, a line per restart, the one kept and the
    held-out steps; with the race, how many it stopped, ``restarts_stopped``, each line's ``stopped_by_race`` and,
    when any was stopped, ``race_note``: a sentence naming them and why). ``progress`` sees every iteration
    (:data:`MapProgress`); a raise in it stops the learning and is raised again. ValueError in one sentence for bad
    options, or when the learned map cannot make the walk (:func:`check_map`)."""
    if not (isinstance(options.clones, int) and options.clones >= 1):
        raise CHMMError(f"the clones per observation must be a positive whole number, got {options.clones!r}")
    check_restarts(options.restarts)
    check_restarts(options.max_restarts, "the most restarts")
    x, a = walk.walks()
    n_clones = np.full(len(walk.symbols), options.clones, dtype=np.int64)
    run, extra = _learn(x, a, n_clones, walk, options, progress)
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


def _learn(
    x: actions.Walks,
    a: actions.Walks,
    n_clones: np.ndarray,
    walk: WalkFile,
    options: MapOptions,
    progress: MapProgress | None,
) -> tuple[Any, dict[str, Any]]:
    """:func:`learn_map`'s learning: the recipe once (1 restart) or the restarts (:mod:`engine.cognitive.restarts`);
    returns the run kept and the summary's restart lines and sentences."""
    extra: dict[str, Any] = {}
    if options.restarts == 1:
        start = actions.random_action_model(n_clones, x, a, options.seed, walk.symbols, walk.action_names)

        def stage(name: str) -> actions.Progress | None:
            return None if progress is None else (lambda i, bits: progress(name, i, bits, 0))

        with restarts.one_blas_thread():  # as best_of_restarts holds it for the restarts
            run = restarts.recipe(start, x, a, options, stage)
    else:
        run, tried, kept, held_steps = restarts.best_of_restarts(
            x, a, n_clones, walk.symbols, walk.action_names, options, MAP_HELD_OUT_SHARE, progress
        )
        extra = {"restarts": [r.line() for r in tried], "kept_restart": kept.restart, "held_out_steps": held_steps}
        extra["restarts_stopped"] = sum(r.stopped is not None for r in tried)
        if options.race and not extra["restarts_stopped"]:
            extra["race_note"] = (
                f"The {len(tried)} restarts raced on the held-out steps; none fell far enough behind to be stopped."
            )
        elif extra["restarts_stopped"]:
            extra["race_note"] = (
                f"The race stopped {extra['restarts_stopped']} of the {len(tried)} restarts: "
                + "; ".join(f"restart {r.restart + 1} {r.stopped}" for r in tried if r.stopped is not None)
                + "."
            )
        if (said := restarts_sentence(tried, options.restarts)) is not None:
            extra["restarts_note"] = said
    return run, extra


def check_map(summary: dict[str, Any]) -> None:
    """Refuse a learned map that cannot make its walk (bits per step not finite, or a MAP path that uses no clone):
    ValueError in one sentence naming both, so that no caller keeps it as a finished map."""
    bits, used = float(summary["bits_per_step"]), int(summary["clones_used"])
    if not np.isfinite(bits) or used == 0:
        raise CHMMError(
            f"the learned map cannot make its walk ({bits:g} bits per step, the walk uses {used} of "
            f"{summary['clones']} clones)"
        )
