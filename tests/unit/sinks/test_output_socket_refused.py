"""An output path that leads to a socket of serve's that no line could be written to whole
(review of stderrsock): a listening socket (socket activation's ``/dev/fd/3`` named by
mistake), one not connected, a datagram socket (``SOCK_DGRAM``, ``SOCK_SEQPACKET``: the
output's thread joins the lines it gathered in one write, one datagram).
Was: any socket a path led to was taken; ``serve`` started without a word, and then lost
every line ("Transport endpoint is not connected"), or sent several findings in one
datagram, or none past its size limit. Now: refused at start-up (``open_text``, which
``open_outputs`` calls), naming the setting, the path, the descriptor and why.

Real sockets, this process's own; the path is ``/dev/fd/N``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest

from toolwatch.config import OutputSettings
from toolwatch.output_files import OutputError, open_text
from toolwatch.outputs import _FINDINGS_LOG, open_outputs
from toolwatch.sinks.findings import Redaction

_LISTENING = "a listening socket, which takes connections, not lines"
_NOT_CONNECTED = "a socket that is not connected: its lines would reach no one"
_MESSAGES = (
    ": only stream sockets are written (a datagram would carry several lines, or exceed the"
    " size limit)"
)


@contextmanager
def _listening_tcp() -> Iterator[socket.socket]:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        yield listening


@contextmanager
def _listening_unix() -> Iterator[socket.socket]:
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind("")  # an abstract address the system picks
        listening.listen()
        yield listening


@contextmanager
def _one(family: int, kind: int) -> Iterator[socket.socket]:
    with socket.socket(family, kind) as alone:
        yield alone


@contextmanager
def _pair(kind: int) -> Iterator[socket.socket]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, kind)
    with ours, theirs:
        yield ours


SOCKETS: dict[str, tuple[Callable[[], AbstractContextManager[socket.socket]], str]] = {
    "listening tcp": (_listening_tcp, _LISTENING),
    "listening unix": (_listening_unix, _LISTENING),
    "unconnected stream": (lambda: _one(socket.AF_UNIX, socket.SOCK_STREAM), _NOT_CONNECTED),
    "unconnected tcp": (lambda: _one(socket.AF_INET, socket.SOCK_STREAM), _NOT_CONNECTED),
    "unconnected datagram": (
        lambda: _one(socket.AF_UNIX, socket.SOCK_DGRAM),
        "a datagram socket" + _MESSAGES,
    ),
    "connected datagram": (lambda: _pair(socket.SOCK_DGRAM), "a datagram socket" + _MESSAGES),
    "sequenced packets": (
        lambda: _pair(socket.SOCK_SEQPACKET),
        "a sequenced-packet socket" + _MESSAGES,
    ),
}


def _ignored(_label: str) -> None:
    """A failed write told: none is written here."""


def _descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("name", SOCKETS)
def test_a_socket_no_line_reaches_whole_is_refused_saying_why(name: str) -> None:
    """Was: opened, a copy of the descriptor written, every line then lost ("Transport
    endpoint is not connected") or several sent in one datagram, untold. Now: refused,
    naming the setting, the path, the descriptor and why; the socket object made to ask
    (on a copy of the descriptor) closed again, the descriptor itself left open."""
    make, why = SOCKETS[name]
    with make() as sock:
        fd = sock.fileno()
        path = f"/dev/fd/{fd}"
        before = _descriptors()
        with pytest.raises(OutputError) as refused:
            open_text(_FINDINGS_LOG.setting, path)
        after = _descriptors()
        os.fstat(fd)  # still open: raises EBADF otherwise
    assert str(refused.value) == f"cannot open {path} (output.findings): descriptor {fd} is {why}"
    assert after == before


def test_start_up_stops_at_a_datagram_socket_before_any_line_is_sent() -> None:
    """``open_outputs``, ``serve``'s start-up, with a connected datagram socket. Was: taken;
    the output's thread joined the lines it gathered in one write, so the reader got three
    findings in one datagram. Now: start-up is refused, "a datagram socket: only stream
    sockets are written"; the reader gets no datagram."""
    ours, reader = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    reader.setblocking(False)
    with ours, reader:
        settings = OutputSettings(findings=f"/dev/fd/{ours.fileno()}")
        with pytest.raises(OutputError, match=r"descriptor [0-9]+ is a datagram socket: "):
            open_outputs(settings, [], [], Redaction(), wall_clock=lambda: 0, failed=_ignored)
        with pytest.raises(BlockingIOError):
            reader.recv(65536)
