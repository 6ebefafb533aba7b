"""Views that are links across sessions and named views (app/services/shares.py): a share is the session's model
and run as they were, read-only hard links; another session opens it with its own model one undo away; shares
expire and are bounded; named views are kept per session, bounded, and checked."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from app import config, sessions
from app.services import UserError, shares
from app.services import graphs as graph_service
from app.services import models as model_service
from app.services import whole_graph as whole_service


@pytest.fixture(autouse=True)
def _isolated(data_dir: Path) -> Path:
    return data_dir


def new_session() -> Path:
    return sessions.session_folder(sessions.new_session_id())


def test_a_shared_model_and_run_open_in_another_session_with_its_own_one_undo_away() -> None:
    mine = new_session()
    graph_service.run_communities(mine, trials=1, seed=3, markov_time=0.7)  # a run of its own
    run = graph_service.read_communities(mine)
    whole_service.whole_graph(mine, 1_000, "transitions")  # its whole graph drawn by transitions: layout kept
    token = shares.share_view(mine)
    assert shares.TOKEN.fullmatch(token) and shares.share_view(mine) == token  # shared twice: one share
    share = shares.shared(token)
    assert share is not None and (share / sessions.CURRENT).samefile(sessions.current_model_path(mine))

    other = new_session()  # the start model with the bundled run: not this share
    assert not shares.holds_share(other, token)
    assert "another session shared" in shares.share_sentence(token) and "with its Infomap run" in shares.share_sentence(
        token
    )
    own = sessions.current_model_path(other).stat().st_ino
    assert "one undo away" in shares.open_share(other, token)
    assert shares.holds_share(other, token)
    assert sessions.current_model_path(other).samefile(share / sessions.CURRENT)
    assert sessions.previous_model_path(other).stat().st_ino == own  # its own model: one undo away
    opened = graph_service.read_communities(other)
    assert opened is not None and opened["finished"] == run["finished"] and opened["modules"] == run["modules"]
    assert (other / sessions.WHOLE_LAYOUT).samefile(mine / sessions.WHOLE_LAYOUT)  # the layout made once, shared

    graph_service.run_communities(mine, trials=1, seed=4, markov_time=0.9)  # the sharer moves on ...
    assert shares.share_view(mine) != token  # ... and its new view is a new share
    assert graph_service.read_communities(other)["finished"] == run["finished"]  # the share as it was
    model_service.undo_model(other)  # the visitor takes its own model back
    assert sessions.current_model_path(other).stat().st_ino == own


def test_a_fresh_session_already_holds_a_share_of_the_start_model() -> None:
    token = shares.share_view(new_session())  # the start model with its bundled run, as any session has it
    assert shares.holds_share(new_session(), token)


def test_a_share_is_gone_after_the_time_to_live_and_past_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    folder = new_session()
    token = shares.share_view(folder)
    for bad in ("", "../x", "0" * 19, None, 5, token.upper()):
        assert shares.shared(bad) is None
    info = shares.shared(token) / shares.INFO
    old = time.time() - config.session_ttl_seconds() - 10
    info.write_text(info.read_text().replace('"created":', f'"created": {old}, "was":'), encoding="utf-8")
    assert shares.shared(token) is None and info.is_file()  # expired: gone for its readers at once ...
    shares._expire()
    assert not info.exists()  # ... and from the disk at the next share's making
    with pytest.raises(UserError, match="no longer on the server"):
        shares.open_share(new_session(), token)
    monkeypatch.setattr(shares, "MAX_SHARES", 2)
    tokens = []
    for seed in range(3):
        graph_service.run_communities(folder, trials=1, seed=seed)
        tokens.append(shares.share_view(folder))
        time.sleep(0.01)
    assert [shares.shared(t) is not None for t in tokens] == [False, True, True]  # the oldest went first


def test_named_views_are_kept_checked_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    folder = new_session()
    assert shares.saved_views(folder) == {}
    assert shares.save_view(folder, " words ", "?module=3&layout=circle") == "Saved this view as 'words'."
    shares.save_view(folder, "top", "")
    shares.save_view(folder, "words", "?module=4")  # the same name: replaced
    assert shares.saved_views(folder) == {"words": "?module=4", "top": ""}
    for name, search, said in (
        ("", "", "Name the view"),
        ("<b>", "", "Name the view"),
        ("x" * 61, "", "Name the view"),
        ("ok", "module=3", "not one of this page's"),
        ("ok", "?" + "m" * 2_000, "not one of this page's"),
    ):
        with pytest.raises(UserError, match=said):
            shares.save_view(folder, name, search)
    monkeypatch.setattr(shares, "MAX_VIEWS", 2)
    with pytest.raises(UserError, match="at most 2 views"):
        shares.save_view(folder, "third", "")
    assert shares.delete_view(folder, "top") == "Deleted the view 'top'."
    with pytest.raises(UserError, match="Choose a saved view"):
        shares.delete_view(folder, "top")
    (folder / shares.VIEWS).write_text("[1, 2]", encoding="utf-8")  # not an object: no views, no error
    assert shares.saved_views(folder) == {}
