"""``toolwatch tail`` on an output whose encoding cannot hold a character of a finding: the
finding is printed, that character escaped, and tail keeps following.

Every text line holds " — " (U+2014) between the labels and the explanation, and names come
from what agents sent (any character). Where standard output is not UTF-8 (a Latin-1 locale
such as ``LANG=de_DE.ISO-8859-1``, whose encoding has no U+2014; Windows, where output
redirected to a file is in the ANSI code page, cp1252, which has no Chinese), tail writes
what the encoding cannot hold as an escape, as Python's own ``sys.stderr`` does, and with
``--json`` escapes every non-ASCII character as JSON does (``ensure_ascii``), so each line is
still JSON. ``PYTHONIOENCODING`` stands in for the locale here (Python takes it over the
locale's encoding).
"""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from tests.integration.cli_support import clean_env, toolwatch_script
from tests.integration.stream_support import make_finding, make_trace, serve


def tail_output(encoding: str, agent: str, *flags: str) -> tuple[int | None, list[str], str]:
    """Runs ``toolwatch tail FLAGS`` with standard output in ``encoding`` while a finding on
    ``agent``'s run (f1) and one on refund-bot's (f2) are published and the server shuts
    down: the exit code, the lines printed (decoded strictly) and what tail said."""

    async def scenario() -> tuple[int | None, list[str], str]:
        async with serve() as h:
            tail = subprocess.Popen(
                [toolwatch_script(), "tail", "--target", h.target, *flags],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=clean_env(PYTHONIOENCODING=encoding),
            )
            try:
                await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=60)
                h.broker.publish(make_trace(agent=agent), [make_finding(explanation="f1")])
                h.broker.publish(make_trace(), [make_finding(explanation="f2")])
                h.broker.close()
                out, err = await asyncio.to_thread(tail.communicate, timeout=60)
            finally:
                tail.kill()
            return tail.returncode, out.decode(encoding).splitlines(), err.decode(encoding)

    return asyncio.run(scenario())


@pytest.mark.parametrize(
    ("encoding", "agent", "shown"),
    [
        ("latin-1", "refund-bot", "agent=refund-bot"),
        ("cp1252", "客服-bot", "agent=\\u5ba2\\u670d-bot"),
        ("latin-1", "r\U0001f916-bot", "agent=r\\U0001f916-bot"),
    ],
    ids=["latin-1-locale", "windows-redirect", "beyond-the-bmp"],
)
def test_a_finding_the_output_cannot_encode_is_printed_escaped(
    encoding: str, agent: str, shown: str
) -> None:
    """Was: the first such finding raised ``UnicodeEncodeError`` out of ``run_tail``: a
    traceback, exit 1 (also with ``--reconnect``; and with ``--cursor-file`` the next run
    resumed before the same finding and died on it again).
    Now: both findings printed, what the encoding cannot hold escaped; exit 0."""
    code, lines, err = tail_output(encoding, agent)
    assert "Traceback" not in err, err
    assert (code, [line[-2:] for line in lines]) == (0, ["f1", "f2"])
    assert shown in lines[0].split()
    dash = "—" if encoding == "cp1252" else "\\u2014"  # cp1252 has the em dash
    assert f" {dash} f1" in lines[0]


def test_json_on_an_output_that_cannot_hold_a_name_stays_json() -> None:
    """``--json`` on a Latin-1 output: an agent named in Chinese and beyond the BMP comes as
    JSON escapes (a surrogate pair beyond it), which read back as the name sent.
    Was: a traceback, exit 1, as for text.
    Now: each line is JSON, ASCII only."""
    agent = "客服-\U0001f916"
    code, lines, err = tail_output("latin-1", agent, "--json")
    assert "Traceback" not in err, err
    assert code == 0
    assert [json.loads(line)["agent"] for line in lines] == [agent, "refund-bot"]
    assert [json.loads(line)["explanation"] for line in lines] == ["f1", "f2"]
    assert lines[0].isascii()
    assert '"agent": "\\u5ba2\\u670d-\\ud83e\\udd16"' in lines[0]
