"""The shared command line of the per-framework capture modules.

Each capture module is run in its own process (``python -m tools.capture.<module> ...``)
because instrumentors patch process-wide state (the OpenAI Agents SDK's trace processors,
the ``openai`` client classes) and cannot be cleanly stacked or undone between captures.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

from tools.capture.fake_model import FakeModelServer
from tools.capture.otlp import Capture, summarize

__all__ = ["FIXTURES", "CaptureRun", "main"]

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "otlp"

#: Runs one scenario against the fake server: (capture, server, scenario name) -> awaitable.
CaptureRun = Callable[[Capture, FakeModelServer, str], Coroutine[Any, Any, None]]


def main(
    framework: str,
    instrumentations: dict[str, Callable[[Capture], CaptureRun]],
    scenarios: Sequence[str],
    argv: Sequence[str] | None = None,
    only: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """Parse ``INSTRUMENTATION [SCENARIO...]`` and capture each scenario to its fixture.

    ``instrumentations`` maps a name to a setup function that instruments the process once
    (against the capture's tracer provider) and returns the per-scenario runner.
    """
    parser = argparse.ArgumentParser(description=f"capture {framework} spans")
    parser.add_argument("instrumentation", choices=sorted(instrumentations))
    parser.add_argument("scenario", nargs="*", help=f"default: all of {', '.join(scenarios)}")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args(argv)
    limited = only or {}  # scenario -> the instrumentations it is captured under

    def captured(scenario: str) -> bool:
        return args.instrumentation in limited.get(scenario, (args.instrumentation,))

    chosen = args.scenario or [scenario for scenario in scenarios if captured(scenario)]
    unknown = set(chosen) - set(scenarios)
    if unknown:
        parser.error(f"unknown scenarios: {sorted(unknown)}")
    elsewhere = sorted(scenario for scenario in chosen if not captured(scenario))
    if elsewhere:
        parser.error(f"{elsewhere} are captured only under {[limited[s] for s in elsewhere]}")
    args.out.mkdir(parents=True, exist_ok=True)
    capture = Capture(f"capture-{framework}")
    run = instrumentations[args.instrumentation](capture)
    for scenario in chosen:
        capture.exporter.clear()
        with FakeModelServer() as server:
            asyncio.run(run(capture, server, scenario))
        path = args.out / f"{framework}__{args.instrumentation}__{scenario}.json"
        capture.write(path)
        print(summarize(path), flush=True)
