"""One line for a person from an exception: what the command line prints after ``chmm: error:``, what a web page
shows, and what a job records; and the base of the engine's refusals, :class:`CHMMError`, which every layer raises
and the front ends catch by name. (The errors of one wing stay in it and subclass the base:
:class:`engine.corpora.reading.CorpusError`, :class:`engine.model.dense.ModelFormatError`,
:class:`engine.model.archive.ArchiveError`, :class:`engine.peers.base.PeerFormatError`,
:class:`engine.network.communities.ModuleNotFoundInResult`; :class:`BackendError` is here.)"""

from __future__ import annotations


class CHMMError(ValueError):
    """A request the engine refuses: bad input, a bad file, impossible settings; its message is one sentence for a
    person. The base of the engine's user errors (a ValueError, so code that caught those still does)."""


class BackendError(CHMMError, RuntimeError):
    """The requested backend cannot be used on this machine (a refusal, and a RuntimeError as it always was)."""


MAX_MESSAGE_CHARACTERS = 600
"""The longest line a person is shown or a job keeps (a refusal that quoted a forged file's names ran to 4.39 MB)."""


def bounded(message: str, limit: int = MAX_MESSAGE_CHARACTERS) -> str:
    """``message`` cut to ``limit`` characters, ending in an ellipsis when cut."""
    return message if len(message) <= limit else message[: limit - 1].rstrip() + "\u2026"


def error_message(exc: BaseException) -> str:
    """The first line of the exception's message (at most :data:`MAX_MESSAGE_CHARACTERS`), or the exception's type
    name when it has none."""
    text = str(exc).strip()
    return bounded(text.splitlines()[0]) if text else type(exc).__name__


def sentence(exc: BaseException) -> str:
    """:func:`error_message` with its first word capitalised, unless it is a name such as a file's ("x.txt is
    empty." stays as it is)."""
    message = error_message(exc)
    if not message.split(" ", 1)[0].isalpha():
        return message
    return message[:1].upper() + message[1:]
