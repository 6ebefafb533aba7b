"""Files by routes of their own (app/transfers.py), through the WSGI app: a callback's body capped at a few megabytes
before it is read, uploads streamed into the session in bounded memory under their kind's limit, and downloads
streamed from disk by a signed link. Every test works in its own ``CHMM_DATA_DIR``."""

from __future__ import annotations

import io
import urllib.parse
from pathlib import Path

import pytest
from support import SHORT_TEXT
from werkzeug.test import EnvironBuilder

from app import config, sessions, transfers
from app.services import corpus as corpus_service
from app.services import models as model_service


@pytest.fixture(autouse=True)
def _isolated(data_dir: Path) -> Path:
    return data_dir


@pytest.fixture
def server():  # noqa: ANN201
    from app import main

    return main.server


class _Unread(io.BytesIO):
    """A request body that fails the test if the server reads any of it."""

    def read(self, *_args: object) -> bytes:
        raise AssertionError("the server read a body it should have refused unread")

    readline = read  # type: ignore[assignment]


class _Counted(io.BytesIO):
    """A request body that records the largest piece the server asked for at once."""

    largest = 0

    def read(self, size: int | None = -1) -> bytes:
        self.largest = max(self.largest, size if size is not None and size >= 0 else len(self.getvalue()))
        return super().read(size)


def _status(server, path: str, length: int, headers: dict[str, str] | None = None) -> str:  # noqa: ANN001
    environ = EnvironBuilder(path=path, method="POST", headers=headers or {}, data=b"{}").get_environ()
    environ["wsgi.input"], environ["CONTENT_LENGTH"] = _Unread(), str(length)
    statuses: list[str] = []
    b"".join(server.wsgi_app(environ, lambda status, *_: statuses.append(status)))
    return statuses[0]


def upload(server, kind: str, data: bytes, session_id: str, name: str = "a.txt", body=None):  # noqa: ANN001, ANN201
    headers = {"X-CHMM-Session": session_id, "X-CHMM-File-Name": urllib.parse.quote(name)}
    environ = EnvironBuilder(path=f"/upload/{kind}", method="POST", headers=headers, data=data).get_environ()
    if body is not None:
        environ["wsgi.input"] = body
    return server.test_client().open(environ)


def test_a_callback_body_is_capped_at_a_few_megabytes_before_it_is_read(server) -> None:  # noqa: ANN001
    """Every callback read a body of up to 667.7 MB before any check (eight 600 MB posts took a worker to 4.6 GB):
    now any request but an upload is refused past :func:`config.max_callback_bytes` with HTTP 413, unread."""
    cap = config.max_callback_bytes()
    assert cap <= 16 * config.MEGABYTE
    assert _status(server, "/_dash-update-component", cap + 1, {"Content-Type": "application/json"}).startswith("413")
    assert _status(server, "/upload/corpus", config.max_upload_bytes() + 1).startswith("413")
    assert _status(server, "/upload/model", config.max_model_upload_bytes() + 1).startswith("413")
    fits = server.test_client().post(
        "/_dash-update-component", data=b"{}", headers={"Content-Type": "application/json"}
    )
    assert fits.status_code != 413


def test_an_upload_streams_into_the_session_and_its_reference_reads_it(server) -> None:  # noqa: ANN001
    """A corpus sent to the upload route is read in pieces of at most one chunk, kept in the session's uploads,
    and the widget's reference then makes it the corpus as the data URI did."""
    sid = sessions.new_session_id()
    data = (SHORT_TEXT * 40).encode("utf-8")
    body = _Counted(data)
    response = upload(server, "corpus", data, sid, "story.txt", body)
    assert response.status_code == 200, response.get_json()
    said = response.get_json()
    assert said["name"] == "story.txt" and said["size"] == len(data) and body.largest <= transfers.CHUNK
    folder = sessions.session_folder(sid)
    info = corpus_service.store_corpus(folder, said["reference"], said["name"])
    assert info.bytes == len(data) and (folder / sessions.CORPUS).read_text(encoding="utf-8") == SHORT_TEXT * 40

    model = config.SAMPLE_MODEL.read_bytes()
    response = upload(server, "model", model, sid, "mine.npz")
    reference = response.get_json()["reference"]
    assert model_service.load_model_upload(folder, reference, "mine.npz").startswith("Loaded mine.npz")
    assert sessions.current_model_path(folder).read_bytes() == model
    assert sessions.upload_path(folder, "data:text/plain;base64,aGk=") is None  # a data URI is not a reference
    with pytest.raises(sessions.SessionError, match="no longer on the server"):  # moved, not copied
        sessions.upload_path(folder, reference)
    other = sessions.session_folder(sessions.new_session_id())  # another session cannot read this one's upload
    with pytest.raises(sessions.SessionError, match="no longer on the server"):
        corpus_service.store_corpus(other, said["reference"], "story.txt")


def test_uploads_are_refused_in_one_sentence(server, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    sid = sessions.new_session_id()
    forged = upload(server, "corpus", b"hello", sid.split(".")[0] + ".0")
    assert forged.status_code == 400 and "not one this server issued" in forged.get_json()["message"]
    assert upload(server, "nothing", b"hello", sid).status_code == 404
    monkeypatch.setenv("CHMM_MAX_SESSION_MB", "0.001")
    full = upload(server, "corpus", b"x" * 5000, sid, "big.txt")
    assert full.status_code == 400 and "a session may keep" in full.get_json()["message"]
    assert not list((sessions.session_folder(sid) / sessions.UPLOADS).glob("*"))


def test_a_download_link_streams_a_session_file_and_cannot_be_forged(server) -> None:  # noqa: ANN001
    folder = sessions.session_folder(sessions.new_session_id())
    path = sessions.current_model_path(folder)
    link = sessions.download_link(folder, path, "chmm-model.npz")
    assert folder.name not in link  # the session id never appears in a URL
    response = server.test_client().get(link)
    assert response.status_code == 200 and response.data == path.read_bytes()
    assert "chmm-model.npz" in response.headers["Content-Disposition"]
    assert server.test_client().get(link[:-3] + "abc").status_code == 404
    outside = sessions._download_signer().dumps({"session": folder.name, "file": "../.secret", "name": "s"})
    assert server.test_client().get(f"/download/{outside}").status_code == 404


def test_a_large_callback_body_is_charged_to_the_memory_budget(server, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """Twelve callback bodies of the largest size at once took about 290 MB that nothing counted: a body over 1 MB
    is charged to the server's memory budget before it is read (three times its size), refused unread with HTTP 503
    and the budget's sentence without room, and given back when its request ends."""
    from app import memory

    length = 4 * config.MEGABYTE
    monkeypatch.setenv("CHMM_SERVER_MEMORY_MB", str(2 * length / config.MEGABYTE))  # less than 3 x the body
    assert _status(server, "/_dash-update-component", length, {"Content-Type": "application/json"}).startswith("503")
    monkeypatch.setenv("CHMM_SERVER_MEMORY_MB", str(4 * length / config.MEGABYTE))
    charges: list[int] = []
    real = memory.reserve
    monkeypatch.setattr(memory, "reserve", lambda n, what, wait=None: charges.append(n) or real(n, what, wait))
    body = b'{"output": "x"}'.ljust(length)
    held = memory.held_here()  # (what earlier tests' kept values hold in this process)
    response = server.test_client().post("/_dash-update-component", data=body,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
    assert response.status_code != 503 and charges == [transfers.BODY_BYTES_FACTOR * length]
    assert memory.held_here() == held  # given back with the request
