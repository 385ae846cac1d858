"""Review: what toolwatch's sender log (``toolwatch.senders``) writes, through real servers."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.certificates import client_certificate
from tests.integration.test_security import (  # noqa: F401 - pki is a fixture
    NAMED_CN,
    Pki,
    Start,
    answers_to,
    client_names,
    pki,
    tls,
)


def test_a_client_certificate_name_cannot_forge_a_log_line(
    start_server: Start,
    pki: Pki,  # noqa: F811 - the imported fixture
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The sender log escapes the example (``_one_line``: "one line whatever a client's data
    put in it"; docs/metrics.md: "quoted on one line") but writes a client certificate's names
    raw (``Sender.__str__``). A certificate the shared client CA signed for another service,
    refused for its names, with a common name holding a line break writes a second line that
    a log pipeline reads as a record of its own (the very thing the reload commit of this
    branch fixes for ConfigError). The names should be escaped as the example is."""
    server = start_server(**tls(pki, mutual=True, **client_names(NAMED_CN)))
    forged = "evil\nERROR toolwatch.app: forged record"
    cert, key = client_certificate(pki.clients, [forged])
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        answers_to(server, pki, tmp_path, cert, key)
    told = [r.getMessage() for r in caplog.records if r.name == "toolwatch.senders"]
    assert told, "the refusal was not logged"
    assert all("\n" not in line for line in told), told
