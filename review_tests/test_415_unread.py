"""docs/configuration.md, "Compressed requests": "Any other coding is answered 415, the
message and the Accept-Encoding header (RFC 7694) listing those above, before the body is
read." Only a request that says ``Expect: 100-continue`` is; any other is read whole first
(taking a request slot, and the read timeout if its body is slow)."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from tests.integration.conftest import RunningServer

StartServer = Callable[..., RunningServer]
PROTOBUF = "application/x-protobuf"


def _status_line_before_the_body(server: RunningServer, encoding: str) -> bytes:
    """The first line the server answers to a POST whose head is sent and whose body
    (1 MiB, as the head says) is not: a client that sends its head, then its body slowly."""
    host, _, port = server.address("http").rpartition(":")
    head = (
        f"POST /v1/traces HTTP/1.1\r\nHost: {host}\r\nContent-Type: {PROTOBUF}\r\n"
        f"Content-Encoding: {encoding}\r\nContent-Length: {2**20}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=5) as client:
        client.sendall(head + b"\0" * 1024)  # the first KiB of the body, the rest never
        try:
            return client.recv(4096).split(b"\r\n", 1)[0]
        except TimeoutError:
            return b"(no answer within 5 s)"


@pytest.mark.parametrize("encoding", ["snappy", "lz4"])
def test_an_unaccepted_coding_is_415_before_the_body_is_read(
    start_server: StartServer, encoding: str
) -> None:
    """Wrong: without ``Expect: 100-continue`` the handler reads the whole body before
    ``decompress`` finds the coding unsupported (``_handle`` checks the content type
    before reading, not the coding): a Collector left at ``compression: snappy`` uploads
    every batch (up to 20 MiB) to be told 415, each holding a request slot and a decoding
    turn; a slow body is answered 503 at the read timeout, not 415. Should: 415 with
    ``Accept-Encoding`` as soon as the head is read, as the docs say (as an unsupported
    content type already is)."""
    server = start_server(ingest__read_timeout_seconds=20)

    status = _status_line_before_the_body(server, encoding)

    assert status == b"HTTP/1.1 415 Unsupported Media Type"
