"""Review of ``toolwatch tail``: a finding its standard output's encoding cannot hold ends
tail with a Python traceback, exit 1.

``_Printer`` writes each line with ``out.write`` in the output's encoding, strict. Every
text line holds " — " (U+2014) between the labels and the explanation, and names come from
what agents sent (any character). Where standard output is not UTF-8 (a Latin-1 locale such
as ``LANG=de_DE.ISO-8859-1``, whose encoding has no U+2014, so no finding prints at all;
Windows, where output redirected to a file is in the ANSI code page, cp1252, and an agent
named in Chinese cannot be written) the first such finding raises ``UnicodeEncodeError``
out of ``run_tail``: a traceback, exit 1 (README: "could not reach its server, or lost the
connection"), also with ``--reconnect`` (which "ends only on Ctrl-C, 130, or a usage
error"). With ``--cursor-file`` the next run resumes before the same finding and dies on it
again: a supervisor restarts it into the same crash, and every finding after it is held
back. tail escapes control characters because names are a sender's text (STYLE: never
crash on input); a character the output cannot encode is the same kind of input.

Correct: write what the encoding cannot hold escaped (``errors="backslashreplace"``, as
Python's own ``sys.stderr`` does), and keep following. ``PYTHONIOENCODING`` stands in for
the locale here (Python takes it over the locale's encoding).
"""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from tests.integration.test_cli import clean_env, toolwatch_script
from tests.integration.test_stream import make_finding, make_trace, serve


@pytest.mark.parametrize(
    ("encoding", "agent"),
    [("latin-1", "refund-bot"), ("cp1252", "客服-bot")],
    ids=["latin-1-locale", "windows-redirect"],
)
def test_a_finding_the_output_cannot_encode_is_printed_escaped(encoding: str, agent: str) -> None:
    async def scenario() -> tuple[int | None, list[str], str]:
        async with serve() as h:
            tail = subprocess.Popen(
                [toolwatch_script(), "tail", "--target", h.target],
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
            lines = out.decode(encoding).splitlines()
            return tail.returncode, [line[-2:] for line in lines], err.decode(encoding)

    code, printed, err = asyncio.run(scenario())
    assert "Traceback" not in err, err
    assert (code, printed) == (0, ["f1", "f2"])
