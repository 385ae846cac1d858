"""An output path that names one of the process's descriptors holding a socket:
``output.findings: /dev/stderr`` where standard error is systemd's journal stream socket (or a
supervisor's). Was: start-up failed, "cannot open /dev/stderr (output.findings): No such device
or address": Linux refuses ``open(2)`` of ``/proc/self/fd/N`` (which ``/dev/stderr`` and
``/dev/fd/N`` lead to) when N is a socket (ENXIO), so only ``-`` wrote to such a socket, and
only standard output's. Now: a copy of the descriptor is written (``output_files._copied``),
each line whole; the output's thread, looking at its path, finds the socket it writes there
and goes on without a word; a descriptor that is not open is named in the error.

Real socket pairs (``socket.socketpair``: Unix stream sockets, as the journal's); the lines
are read from the other end.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from toolwatch.output_files import OutputError, open_there
from toolwatch.outputs import _FINDINGS_LOG, _Look, _Why, open_text
from toolwatch.sinks.linefile import LineFile

_WAIT = 10.0  # seconds: a bound on each read, never reached when it works


@pytest.fixture
def journal() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A Unix stream socket pair: the process's end (the journal's stream on standard
    error), and the reader's."""
    ours, reader = socket.socketpair()
    reader.settimeout(_WAIT)
    with ours, reader:
        yield ours, reader


def _paths(fd: int, tmp_path: Path) -> dict[str, str]:
    """The names of descriptor ``fd`` a setting may give: through ``/proc``, ``/dev/fd``, and
    a link of the user's to ``/dev/fd/N`` (a chain of three links: this one, ``/dev/fd``,
    ``/proc/self``)."""
    link = tmp_path / "journal"
    link.symlink_to(f"/dev/fd/{fd}")
    return {
        "proc self": f"/proc/self/fd/{fd}",
        "dev fd": f"/dev/fd/{fd}",
        "proc pid": f"/proc/{os.getpid()}/fd/{fd}",
        "link": str(link),
    }


def _read(reader: socket.socket, size: int) -> bytes:
    """``size`` bytes from ``reader`` (or fewer, once ``_WAIT`` passes with none coming)."""
    data = b""
    while len(data) < size:
        chunk = reader.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


OPENERS: dict[str, Callable[[str], LineFile]] = {
    "open_text": lambda path: open_text("output.findings", path),
    "open_text private": lambda path: open_text("output.dump_tooltraces", path, private=True),
    "open_there": lambda path: open_there("output.findings", path, False),
}


@pytest.mark.parametrize("opener", OPENERS)
@pytest.mark.parametrize("name", ["proc self", "dev fd", "proc pid", "link"])
def test_a_path_naming_a_socket_descriptor_writes_the_socket(
    journal: tuple[socket.socket, socket.socket], tmp_path: Path, name: str, opener: str
) -> None:
    ours, reader = journal
    path = _paths(ours.fileno(), tmp_path)[name]
    stream = OPENERS[opener](path)
    try:
        lines = ['{"finding": 1}\n', '{"finding": 2}\n']
        for line in lines:
            stream.write(line)
        copy = stream.fileno()
        inherited = os.get_inheritable(copy)  # by a child serve starts: it would hold it open
    finally:
        stream.close()
    expected = "".join(lines).encode()
    assert (_read(reader, len(expected)), stream.name) == (expected, path)
    assert (copy != ours.fileno(), inherited) == (True, False)
    ours.send(b"still open\n")  # closing the output closed its copy, not the socket
    assert _read(reader, 11) == b"still open\n"


def test_a_line_longer_than_the_socket_takes_at_once_arrives_whole(
    journal: tuple[socket.socket, socket.socket],
) -> None:
    """The journal's socket left non-blocking (the copy shares it): a line of 4 MiB goes in
    parts, each as the reader makes room; nothing else between them, nothing lost."""
    ours, reader = journal
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    ours.setblocking(False)
    line = ("x" * (4 << 20)) + "\n"
    read: list[bytes] = []
    reading = threading.Thread(target=lambda: read.append(_read(reader, len(line) + 6)))
    reading.start()
    stream = open_text("output.findings", f"/dev/fd/{ours.fileno()}")
    try:
        stream.write(line)
        stream.write("after\n")
    finally:
        stream.close()
        reading.join(_WAIT)
    assert read == [line.encode() + b"after\n"]


@pytest.mark.parametrize("why", list(_Why))
def test_the_outputs_look_at_its_path_finds_the_socket_written_and_goes_on(
    journal: tuple[socket.socket, socket.socket],
    tmp_path: Path,
    why: _Why,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``_Look``: the path's ``stat`` (the socket the descriptor holds) and the copy's
    ``fstat`` are one socket: nothing is opened again, nothing logged, at a SIGHUP or at the
    thread's look every second."""
    ours, reader = journal
    paths = _paths(ours.fileno(), tmp_path)
    caplog.set_level(logging.DEBUG, logger="toolwatch")
    found = {}
    for name, path in paths.items():
        stream = open_text("output.findings", path)
        try:
            look = _Look(_FINDINGS_LOG, path)
            found[name] = [look(stream, why) for _ in range(3)]
            stream.write(f"{name}\n")
        finally:
            stream.close()
    assert found == {name: [None, None, None] for name in paths}
    assert [record.getMessage() for record in caplog.records] == []
    written = "".join(f"{name}\n" for name in paths).encode()
    assert _read(reader, len(written)) == written


def test_a_descriptor_not_open_is_named_in_the_error() -> None:
    closed = os.dup(0)
    os.close(closed)
    with pytest.raises(OutputError) as refused:
        open_text("output.findings", f"/dev/fd/{closed}")
    assert str(refused.value) == (
        f"cannot open /dev/fd/{closed} (output.findings): descriptor {closed} is not open"
    )


def test_a_link_through_dotdot_after_a_linked_directory_reaches_the_socket(
    journal: tuple[socket.socket, socket.socket], tmp_path: Path
) -> None:
    """A link ``out -> up/../fd/N``, ``up`` a link to ``/proc/self/fd``: the system goes up
    from where ``up`` leads, to ``/proc/PID/fd/N``, the socket.
    Was: the descriptor was found by reading the path's text, ``..`` dropped before the
    link it follows was followed: ``<dir>/fd/N``, nothing there, so start-up failed "No such
    device or address" (review of stderrsock). Now: the socket ``os.stat`` finds at the
    path is matched with the descriptor whose ``fstat`` it is, and written."""
    ours, reader = journal
    (tmp_path / "up").symlink_to("/proc/self/fd")
    out = tmp_path / "out"
    out.symlink_to(f"up/../fd/{ours.fileno()}")
    stream = open_text("output.findings", str(out))
    try:
        stream.write('{"finding": 1}\n')
    finally:
        stream.close()
    assert _read(reader, 15) == b'{"finding": 1}\n'


def test_a_unix_sockets_own_file_is_refused_as_the_system_refuses_it(tmp_path: Path) -> None:
    """A Unix socket bound on a file system (the journal's ``/run/systemd/journal/socket``),
    this process listening on it and connected to it: none of its descriptors holds the
    file's socket (each holds a socket of its own). Was (before the branch, and on it): refused
    as Linux refuses it. Now: the same, "No such device or address"; nothing is written to
    the client's connection."""
    path = str(tmp_path / "journal.socket")
    with socket.socket(socket.AF_UNIX) as listening, socket.socket(socket.AF_UNIX) as client:
        listening.bind(path)
        listening.listen()
        client.connect(path)
        with pytest.raises(OutputError) as refused:
            open_text("output.findings", path)
        accepted, _ = listening.accept()
        with accepted:
            accepted.setblocking(False)
            with pytest.raises(BlockingIOError):
                accepted.recv(1)
    assert str(refused.value) == f"cannot open {path} (output.findings): No such device or address"


def test_a_link_to_the_socket_pointed_at_a_file_is_logged_as_such(
    journal: tuple[socket.socket, socket.socket],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A link to ``/dev/fd/N`` (the socket) written, then pointed at a regular file; a
    SIGHUP. Was: "opened again (the socket there was renamed away; a regular file is there
    now)": no socket is renamed, a copy of a descriptor has no name to lose. Now: "the path
    names a regular file now, not the socket written", and the file is written."""
    ours, _reader = journal
    link, file = tmp_path / "journal", tmp_path / "findings.jsonl"
    link.symlink_to(f"/dev/fd/{ours.fileno()}")
    file.touch()
    stream = open_text("output.findings", str(link))
    caplog.set_level(logging.INFO, logger="toolwatch")
    try:
        link.unlink()
        link.symlink_to(file)
        opened = _Look(_FINDINGS_LOG, str(link))(stream, _Why.SIGHUP)
    finally:
        stream.close()
    assert isinstance(opened, LineFile)
    try:
        opened.write("after\n")
    finally:
        opened.close()
    assert [record.getMessage() for record in caplog.records] == [
        f"output.findings: {link} opened again (the path names a regular file now, not the"
        " socket written)"
    ]
    assert file.read_text() == "after\n"


def test_a_link_to_the_socket_pointed_at_a_fifo_without_reader_goes_on_with_the_socket(
    journal: tuple[socket.socket, socket.socket],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A link to ``/dev/fd/N`` (the socket) pointed at a FIFO no reader has opened; a
    SIGHUP. Was: "still writing to the socket it was, which was renamed away". Now: "still
    writing to the socket it was", and the socket is written."""
    ours, reader = journal
    link, fifo = tmp_path / "journal", tmp_path / "fifo"
    link.symlink_to(f"/dev/fd/{ours.fileno()}")
    os.mkfifo(fifo)
    stream = open_text("output.findings", str(link))
    caplog.set_level(logging.INFO, logger="toolwatch")
    try:
        link.unlink()
        link.symlink_to(fifo)
        found = _Look(_FINDINGS_LOG, str(link))(stream, _Why.SIGHUP)
        stream.write("still\n")
    finally:
        stream.close()
    assert found is None
    assert [record.getMessage() for record in caplog.records] == [
        f"cannot open {link} (output.findings): a FIFO no reader has opened yet; still"
        " writing to the socket it was"
    ]
    assert _read(reader, 6) == b"still\n"
