"""The app's sessions, called directly (no browser): their folders, ids, limits and clean-up, and every write path
on a full disk. Every test works in its own ``CHMM_DATA_DIR``.
"""

from __future__ import annotations

import errno
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from support import TINY_FORM, data_uri

from app import config, forms, ids, jobs, services, sessions
from app.services import UserError, training_jobs
from app.services import corpus as corpus_service
from app.services import generate as generate_service
from app.services import graphs as graph_service
from app.services import models as model_service
from app.services import pruning as prune_service
from engine.model.dense import ModelFormatError

TINY = TINY_FORM


@pytest.fixture(autouse=True)
def _isolated(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test in its own data folder, room made for every newcomer past the count (not once an interval), so
    that the tests below follow eviction newcomer by newcomer."""
    monkeypatch.setattr(sessions, "ROOM_EVERY_S", 0.0)
    return data_dir


def current_bytes(folder: Path) -> bytes:
    return sessions.current_model_path(folder).read_bytes()


# ------------------------------------------------------------------------------------------ sessions
def test_sessions_are_isolated(data_dir: Path) -> None:
    first, second = sessions.new_session_id(), sessions.new_session_id()
    assert first != second
    a, b = sessions.session_folder(first), sessions.session_folder(second)
    assert a != b and a.parent == b.parent == data_dir
    assert a.name == first.split(".")[0] and b.name == second.split(".")[0]
    corpus_service.store_corpus(a, data_uri(b"hello world, hello there"), "a.txt")
    assert corpus_service.corpus_info(a) is not None and corpus_service.corpus_info(b) is None
    assert sessions.session_folder(first) == a  # the same id finds the same folder again


FORGED = "0b7c3a52-5d0e-4a43-9d4e-3c1f0f5b7a10"


@pytest.mark.parametrize(
    "bad",
    [None, "", "../../etc", "not-a-uuid", 42, ["a"], "x" * 100_000, "a\x00b", FORGED, f"{FORGED}.{'0' * 32}"],
)
def test_session_ids_are_checked(bad: object, data_dir: Path) -> None:
    with pytest.raises(sessions.SessionError):
        sessions.session_folder(bad)
    assert not sessions.session_folders(data_dir)


def test_session_ids_are_issued_by_the_server(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An id is a uuid signed with the server's secret: the uuid alone, another server's id or an id with its
    signature altered are refused, and no folder is made for them."""
    issued = sessions.new_session_id()
    sid, signature = issued.split(".")
    assert uuid.UUID(sid) and len(signature) == sessions.SIGNATURE_CHARACTERS
    assert sessions.session_folder(issued).name == sid
    assert (data_dir / sessions.SECRET).stat().st_mode & 0o077 == 0  # the secret is the server user's alone
    altered = f"{sid}.{('1' if signature[0] == '0' else '0')}{signature[1:]}"
    for forged in (sid, altered, f"{uuid.uuid4()}.{signature}"):
        with pytest.raises(sessions.SessionError, match="not one this server issued"):
            sessions.session_folder(forged)
    monkeypatch.setenv("CHMM_SECRET_KEY", "another server's key")
    with pytest.raises(sessions.SessionError, match="not one this server issued"):
        sessions.session_folder(issued)
    assert sessions.session_folder(sessions.new_session_id()).exists()
    assert len(sessions.session_folders(data_dir)) == 2


def test_a_flood_of_untouched_sessions_locks_out_nobody(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36: 520 page loads made 492 sessions and every later visitor read "the server already holds its limit"
    for a day. Sessions in which nothing was done make room, least recently seen first; working ones stay."""
    monkeypatch.setenv("CHMM_MAX_SESSIONS", "3")
    working = sessions.session_folder(sessions.new_session_id())
    (working / sessions.CORPUS).write_text("a corpus")
    flood_ids = [sessions.new_session_id() for _ in range(30)]  # a script fetching the page
    flood = [sessions.session_folder(sid) for sid in flood_ids]
    limit = sessions.OVERFLOW * 3  # fresh untouched sessions are kept a minute (a first upload may be on its way)
    assert working.exists() and [f.exists() for f in flood[-limit:]] == [False] + [True] * (limit - 1)
    assert sessions.session_folder(sessions.new_session_id()).exists()  # a new visitor is served
    assert working.exists() and (working / sessions.CORPUS).exists()
    assert sessions.session_folder(flood_ids[0]).exists()  # an evicted id comes back to a fresh session
    assert len(sessions.session_folders(data_dir)) == limit
    a_minute_ago = time.time() - 2 * sessions.FRESH_S  # once idle for a minute, the untouched ones make room
    for folder in sessions.session_folders(data_dir):
        for path in [folder, *folder.iterdir()]:
            os.utime(path, (a_minute_ago, a_minute_ago)) if path.stat().st_nlink == 1 or path.is_dir() else None
    assert sessions.session_folder(sessions.new_session_id()).exists()
    assert working.exists() and len(sessions.session_folders(data_dir)) == 3


def test_a_flood_past_the_count_makes_room_once_an_interval(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the count limit every newcomer walked over every session folder (twice: the expiry sweep and the room
    made): O(sessions) per newcomer in a flood. Room is made once an interval on the whole server; the newcomers in
    between are let in at once, and the next one after the interval makes room again."""
    monkeypatch.setattr(sessions, "ROOM_EVERY_S", 3600.0)
    monkeypatch.setenv("CHMM_MAX_SESSIONS", "3")
    made: list[int] = []
    real = sessions.make_room
    monkeypatch.setattr(sessions, "make_room", lambda root, limit: made.append(limit) or real(root, limit))
    for _ in range(3):
        sessions.session_folder(sessions.new_session_id())
    assert made == []  # under the count: nothing to make
    flood = [sessions.session_folder(sessions.new_session_id()) for _ in range(20)]
    assert made == [3] and all(f.exists() for f in flood)  # once, by the first newcomer past the count
    assert len(sessions.session_folders(data_dir)) == 23  # the newcomers of one interval pass the count
    a_minute_ago = time.time() - 2 * sessions.FRESH_S
    for folder in sessions.session_folders(data_dir):  # all untouched, idle past a minute: they may give way
        for path in [folder, *folder.iterdir()]:
            os.utime(path, (a_minute_ago, a_minute_ago)) if path.stat().st_nlink == 1 or path.is_dir() else None
    sessions.session_folder(sessions.new_session_id())
    assert made == [3] and len(sessions.session_folders(data_dir)) == 24  # still within the interval
    stamp = data_dir / sessions.ROOM_STAMP
    os.utime(stamp, (time.time() - 3601, time.time() - 3601))  # the interval has passed
    newcomer = sessions.session_folder(sessions.new_session_id())
    assert made == [3, 3] and newcomer.exists() and len(sessions.session_folders(data_dir)) == 3


def test_sessions_that_only_loaded_pages_make_room(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 51: every page load's badge writes the model's summary into the session folder, which made every
    fetched page a session with work: 520 minted ids locked out new visitors for a day. Eviction judges a session by
    what its visitor did (an upload, a model of its own), not by what page loads cached; working sessions stay, even
    when seen longer ago than the flood."""
    from app import main

    monkeypatch.setenv("CHMM_MAX_SESSIONS", "4")
    uploaded = sessions.session_folder(sessions.new_session_id())
    corpus_service.store_corpus(uploaded, data_uri(b"hello world, hello there"), "a.txt")
    loaded = sessions.session_folder(sessions.new_session_id())
    model_service.load_model_upload(loaded, data_uri(config.SAMPLE_MODEL.read_bytes()), "mine.npz")
    long_ago = time.time() - 1800  # seen before the flood: the least recently seen, yet not evicted
    for path in [uploaded, *uploaded.iterdir(), loaded, *loaded.iterdir()]:
        os.utime(path, (long_ago, long_ago))

    flood_ids = [sessions.new_session_id() for _ in range(12)]  # a script fetching the page with fresh ids
    for sid in flood_ids:
        assert main.show_model_badge(sid, None).startswith("current model:")  # each page load's badge
        folder = data_dir / sid.split(".")[0]
        assert (folder / sessions.SUMMARY).is_file() and sessions.untouched(folder)
    assert len(sessions.session_folders(data_dir)) == 2 + 12  # within four times the count, fresh ones stay a minute

    visitor = sessions.new_session_id()
    assert main.show_model_badge(visitor, None).startswith("current model:")  # a new visitor is served
    assert (data_dir / visitor.split(".")[0]).is_dir()
    assert (uploaded / sessions.CORPUS).is_file() and (loaded / sessions.PREVIOUS).is_file()
    assert not sessions.untouched(uploaded) and not sessions.untouched(loaded)
    for sid in [sessions.new_session_id() for _ in range(8)]:  # past four times the count: untouched ones go first
        main.show_model_badge(sid, None)
    assert len(sessions.session_folders(data_dir)) == sessions.OVERFLOW * 4
    assert (uploaded / sessions.CORPUS).is_file() and (loaded / sessions.PREVIOUS).is_file()


def test_idle_sessions_give_way_to_a_newcomer(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the count limit a newcomer is never refused: working sessions idle for over an hour give way, least
    recently used first; the ones used within the hour keep their files."""
    monkeypatch.setenv("CHMM_MAX_SESSIONS", "3")
    kept = [sessions.session_folder(sessions.new_session_id()) for _ in range(3)]
    for folder in kept:  # sessions that did something (an untouched one would make room)
        (folder / sessions.CORPUS).write_text("a corpus")
    for age, folder in ((3 * 3600, kept[0]), (2 * 3600, kept[1])):
        for path in [folder, folder / sessions.CORPUS, folder / sessions.LAST_USED]:  # not the shared start model
            os.utime(path, (time.time() - age, time.time() - age))

    def newcomer() -> Path:
        folder = sessions.session_folder(sessions.new_session_id())
        (folder / sessions.CORPUS).write_text("a corpus")  # each does something (else it would make room first)
        return folder

    assert newcomer().exists()  # the least recently used one made room
    assert not kept[0].exists() and kept[1].exists() and kept[2].exists()
    assert newcomer().exists()
    assert not kept[1].exists() and (kept[2] / sessions.CORPUS).exists()
    assert newcomer().exists()  # only recent ones left: past the count
    assert (kept[2] / sessions.CORPUS).exists() and len(sessions.session_folders(data_dir)) == 4


def test_a_flood_of_working_sessions_locks_out_nobody(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flood of minted sessions that each upload a small corpus filled the 500 places and every newcomer was told
    "the server already holds its limit of 500 sessions" for 24 hours. Now a newcomer is served at once, and a
    session used in the last hour keeps its model while there is room; past four times the count (or the disk
    budget) the least recently used go, the visitor's too, but never a session whose job runs."""
    monkeypatch.setenv("CHMM_MAX_SESSIONS", "3")
    visitor = sessions.session_folder(sessions.new_session_id())
    model_service.load_model_upload(visitor, data_uri(config.SAMPLE_MODEL.read_bytes()), "mine.npz")
    half_an_hour = time.time() - 1800
    for path in [visitor, *visitor.iterdir()]:
        os.utime(path, (half_an_hour, half_an_hour))
    flood = []
    for _ in range(10):  # each minted session uploads a corpus
        folder = sessions.session_folder(sessions.new_session_id())
        corpus_service.store_corpus(folder, data_uri(b"flood " * 100), "f.txt")
        flood.append(folder)
    newcomer = sessions.session_folder(sessions.new_session_id())
    assert newcomer.exists() and (visitor / sessions.PREVIOUS).is_file()  # served, and the visitor keeps its model
    corpus_service.store_corpus(newcomer, data_uri(b"a newcomer's corpus"), "n.txt")
    assert len(sessions.session_folders(data_dir)) == 12 == 4 * 3

    running = flood[0]  # the oldest of the flood, with a job beating its heartbeat
    (running / sessions.HEARTBEAT).touch()
    sessions.session_folder(sessions.new_session_id())  # four times the count: the least recently used go
    assert running.exists() and not visitor.exists() and flood[1].exists()
    monkeypatch.setenv("CHMM_MAX_SESSIONS_DISK_MB", "0.001")  # the disk budget reached: recent ones go
    sessions.session_folder(sessions.new_session_id())
    assert running.exists() and not any(f.exists() for f in flood[1:])


def test_sessions_share_the_start_model_until_they_change_it(data_dir: Path, with_corpus: Path) -> None:
    """The start model and its precomputed communities are one file on the server, however many sessions."""
    others = [sessions.session_folder(sessions.new_session_id()) for _ in range(3)]
    shared = sessions.shared_start_model(data_dir)
    assert shared is not None and shared.parent == data_dir / sessions.START
    for folder in [with_corpus, *others]:
        assert sessions.current_model_path(folder).samefile(shared)
        assert (folder / sessions.COMMUNITIES).samefile(shared.with_name(shared.stem + ".communities.json"))
        assert graph_service.read_communities(folder) is not None  # the shared run matches the session's model
    outcome = training_jobs.run_training_job(with_corpus, forms.options_from_form(TINY))
    assert outcome.status == jobs.FINISHED
    assert not sessions.current_model_path(with_corpus).samefile(shared)
    assert sessions.previous_model_path(with_corpus).samefile(shared)
    assert config.SAMPLE_MODEL.read_bytes() == shared.read_bytes()
    assert all(sessions.current_model_path(folder).samefile(shared) for folder in others)


def test_disk_per_session_is_capped(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    used = sessions.folder_bytes(folder)
    monkeypatch.setenv("CHMM_MAX_SESSION_MB", str((used + 1000) / 1e6))
    with pytest.raises(sessions.SessionError, match="more than the .* a session may keep"):
        corpus_service.store_corpus(folder, data_uri(b"hello world " * 200), "big.txt")
    assert corpus_service.corpus_info(folder) is None
    corpus_service.store_corpus(folder, data_uri(b"hello world " * 50), "small.txt")
    assert corpus_service.corpus_info(folder).name == "small.txt"


def test_new_session_starts_on_the_sample_model(folder: Path) -> None:
    assert config.SAMPLE_MODEL.is_file(), "sample_models/alice-600.npz is missing (python sample_models/make_sample.py)"
    assert current_bytes(folder) == config.SAMPLE_MODEL.read_bytes()
    summary = model_service.model_summary(folder)
    assert summary is not None and summary["states"] == 600 and summary["alphabet_size"] == 27
    assert sum(summary["clones"]) == 600 and summary["nonzeros"] > 0 and summary["history"]
    assert summary["test_bps"] is not None and not summary["has_previous"]


def test_start_model_can_be_chosen(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CHMM_START_MODEL", str(tmp_path / "missing.npz"))
    folder = sessions.session_folder(sessions.new_session_id())
    assert model_service.model_summary(folder) is None
    with pytest.raises(UserError, match="no model"):
        generate_service.sample(folder, 10)


def test_cleanup_removes_only_expired_session_folders(data_dir: Path) -> None:
    old, fresh = sessions.new_session_id(), sessions.new_session_id()
    old_folder, fresh_folder = sessions.session_folder(old), sessions.session_folder(fresh)
    (data_dir / "not-a-session").mkdir()
    long_ago = time.time() - 2 * 86400
    for path in [old_folder, *old_folder.iterdir()]:
        os.utime(path, (long_ago, long_ago))
    removed = sessions.cleanup_sessions(data_dir, ttl_s=86400)
    assert removed == [old.split(".")[0]]
    assert not old_folder.exists() and fresh_folder.exists() and (data_dir / "not-a-session").exists()


# ------------------------------------------------------------------------------------------ a full disk
@pytest.fixture
def disk_full(monkeypatch: pytest.MonkeyPatch) -> Callable[[bool], None]:
    """``disk_full(True)``: every file the app writes fails with ENOSPC once written (the project's one atomic
    writer, :func:`engine.files.atomic_write`, renames its temporary file into place: the rename fails);
    ``disk_full(False)``: space returns."""
    import types

    from engine import files

    real = files.os

    def no_space(*_args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def switch(full: bool) -> None:
        if full:
            monkeypatch.setattr(files, "os", types.SimpleNamespace(**{**vars(real), "replace": no_space}))
        else:
            monkeypatch.setattr(files, "os", real)

    return switch


def leftovers(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.name.startswith(".tmp-") or path.name.startswith("upload-")]


def test_a_full_disk_gives_a_message_and_no_partial_file_on_every_write_path(
    with_corpus: Path, disk_full: Callable[[bool], None], data_dir: Path
) -> None:
    folder = with_corpus
    before = current_bytes(folder)
    corpus_before = corpus_service.corpus_info(folder)
    full = services.DISK_FULL
    disk_full(True)
    actions: dict[str, Callable[[], object]] = {
        "corpus upload": lambda: corpus_service.store_corpus(folder, data_uri(b"other text " * 50), "other.txt"),
        "sample corpus": lambda: corpus_service.use_sample_corpus(folder),
        "model upload": lambda: model_service.load_model_upload(
            folder, data_uri(config.SAMPLE_MODEL.read_bytes(), "application/octet-stream"), "m.npz"
        ),
        "pruning": lambda: prune_service.apply_prune(folder, -2),
        "export": lambda: graph_service.export_graph(folder, "graphml", 1e-2),
        "communities": lambda: graph_service.run_communities(folder, trials=1),
    }
    for name, action in actions.items():
        try:
            action()
        except OSError as exc:
            assert services.describe_error(exc) == full, name
        else:
            raise AssertionError(f"{name} wrote on a full disk")
        assert not leftovers(folder) and not leftovers(data_dir), name
    outcome = training_jobs.run_training_job(folder, forms.options_from_form(TINY))
    assert outcome.status == jobs.REFUSED and outcome.message == full
    assert not (folder / sessions.JOB).exists() and not leftovers(folder)
    assert current_bytes(folder) == before and corpus_service.corpus_info(folder) == corpus_before
    assert not any((folder / graph_service.EXPORTS).glob("*")) if (folder / graph_service.EXPORTS).exists() else True
    # a new session needs no space: its model is a hard link to the server's copy of the start model
    assert sessions.current_model_path(sessions.session_folder(sessions.new_session_id())).samefile(
        sessions.shared_start_model(data_dir)
    )
    # space returns: every path works again
    disk_full(False)
    for name in ("corpus upload", "export", "pruning"):
        actions[name]()
    assert training_jobs.run_training_job(folder, forms.options_from_form(TINY)).status == jobs.FINISHED


def test_messages_name_files_as_the_user_knows_them(folder: Path) -> None:
    """A damaged current model was reported with the absolute server path and the session's id."""
    path = sessions.current_model_path(folder)
    path.unlink()
    path.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ModelFormatError) as caught:
        model_service.model_summary(folder)
    message = services.describe_error(caught.value)
    assert message.startswith("The current model: not a readable CHMM Explorer model"), message
    assert str(folder.parent) not in message and folder.name not in message and "/" not in message


def test_a_session_whose_start_failed_gets_its_model_later(data_dir: Path) -> None:
    """A session created while its start model could not be placed (a full disk) used to stay without a model."""
    issued = sessions.new_session_id()
    (data_dir / issued.split(".")[0]).mkdir(parents=True)  # the folder exists, the link was never made
    assert sessions.current_model_path(sessions.session_folder(issued)).is_file()


def _through_javascript(value: object) -> object:
    """What a value comes back as after a round trip through a browser store: every number a float64."""
    if isinstance(value, list):
        return [_through_javascript(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return int(float(value))
    return value


def test_the_model_stamp_survives_the_browser(data_dir: Path) -> None:
    """Issue 47: the stamp held ``st_mtime_ns`` (above 2^53), which the browser rounded, so the model watch took
    every poll for a new model and the open page reloaded every 2 s. The stamp comes back from the browser equal,
    and the watch sees no change until the model file is replaced."""
    from app import main

    sid = sessions.new_session_id()
    folder = sessions.session_folder(sid)
    os.utime(sessions.current_model_path(folder), ns=(time.time_ns(), 1_795_000_000_123_456_789))  # not a float64
    stamp = sessions.model_stamp(folder)
    seen, _ = main.watch_model(1, sid, None)
    assert seen == stamp
    returned = _through_javascript(stamp)
    assert main.watch_model(2, sid, returned) == (main.no_update, main.no_update)
    os.utime(sessions.current_model_path(folder), ns=(time.time_ns(), 1_795_000_000_123_456_790))  # 1 ns later
    changed, version = main.watch_model(3, sid, returned)
    assert changed != stamp and isinstance(version, float)


def test_an_idle_tab_asks_one_question_answered_by_one_stat(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every idle page asked the server four questions every 2 s (the model stamp, the badge, the notice, the job
    badge: 500 idle tabs were 1,000 requests a second). Now the shell has one interval callback, and while the
    session's folder is unchanged it answers from one stat, reading no model stamp, notice or job record."""
    import dash

    from app import main

    registered = {**dash._callback.GLOBAL_CALLBACK_MAP, **main.app.callback_map}  # (moved there once the app serves)
    on_tick = [k for k, v in registered.items() if any(i["id"] == ids.MODEL_WATCH for i in v["inputs"])]
    assert len(on_tick) == 1
    sid = sessions.new_session_id()
    folder = sessions.session_folder(sid)
    first = main.watch_session(1, sid, None, None, None)
    stamp, _, _, _, badge, seen = first
    assert stamp == sessions.model_stamp(folder) and badge is None and seen
    read: list[str] = []
    monkeypatch.setattr(main.sessions, "model_stamp", lambda f: read.append("stamp") or sessions.file_stamp(
        sessions.current_model_path(f).stat()))  # fmt: skip
    assert main.watch_session(2, sid, stamp, None, seen) == (main.no_update,) * 6 and read == []
    prune_service.apply_prune(folder, -2)  # a new current model
    changed = main.watch_session(3, sid, stamp, None, seen)
    assert read == ["stamp"] and changed[0] != stamp and isinstance(changed[1], float) and changed[5] != seen


def test_a_session_cleared_during_its_request_is_told_so(data_dir: Path) -> None:
    """A visitor whose session was removed to make room while its own request ran read "[Errno 2] No such file or
    directory"; now a sentence that says what happened and what to do."""
    folder = sessions.session_folder(sessions.new_session_id())
    shutil.rmtree(folder)  # removed by another visitor's request, while this one runs
    with pytest.raises(OSError) as caught:  # a write into it, as an upload's temporary file
        (folder / "upload-1234.npz").write_bytes(b"a model")
    said = services.describe_error(caught.value)
    assert said == services.SESSION_GONE and "Errno" not in said
    assert services.describe_error(FileNotFoundError(2, "No such file", str(data_dir / "x.npz"))) != said


def test_every_message_is_bounded() -> None:
    """A refusal that quotes what it refuses (a forged file's 4.39 MB list) is cut to a bounded sentence."""
    said = services.describe_error(services.UserError("The map's actions are " + ", ".join(["a"] * 2_000_000)))
    assert len(said) <= services.MAX_MESSAGE_CHARACTERS and said.endswith("\u2026")
    assert services.describe_error(services.UserError("Short and whole.")) == "Short and whole."
