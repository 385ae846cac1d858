"""Capture the Vercel AI SDK (TypeScript) against the fake model server.

``python -m tools.capture.capture_vercel_ai INTEGRATION [SCENARIO...] [--out DIR]`` with
INTEGRATION one of:

* ``otel`` -- AI SDK 7's ``OpenTelemetry`` integration (``@ai-sdk/otel``): GenAI semantic
  conventions, ``invoke_agent`` / ``chat`` / ``execute_tool`` spans;
* ``legacy`` -- its ``LegacyOpenTelemetry``: the ``ai.*`` attributes every AI SDK from 3.3 to
  6 emits (``ai.generateText``, ``ai.generateText.doGenerate``, ``ai.toolCall``).

The agent is ``vercel_ai/capture.mjs``, run by Node.js (20+) with the exact packages of
``vercel_ai/package-lock.json``, installed on first use with ``npm ci``. The SDK serializes
its own spans (``JsonTraceSerializer``), so the fixture is what its OTLP/HTTP JSON exporter
would have sent. No agent-as-tool scenario: the AI SDK has no agents that call agents.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

from tools.capture import scripts
from tools.capture.cli import FIXTURES
from tools.capture.fake_model import FakeModelServer
from tools.capture.otlp import summarize

__all__ = ["SCENARIOS", "main"]

SCENARIOS = ("refund", "refund_stream", "parallel", "tool_error", "refusal")
INTEGRATIONS = ("otel", "legacy")
AGENT_DIR = Path(__file__).resolve().parent / "vercel_ai"
_AGENTS = {"parallel": "weather_agent"}  # the scripted agent names (expectations.py)


def _install() -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise SystemExit("capture_vercel_ai needs Node.js 20+ and npm on PATH")
    if not (AGENT_DIR / "node_modules").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=AGENT_DIR, check=True)


def capture(integration: str, scenario: str, out: Path) -> Path:
    """Run one scenario; the fixture written."""
    path = out / f"vercel_ai__{integration}__{scenario}.json"
    agent = _AGENTS.get(scenario, "support_agent")
    with FakeModelServer() as server:
        command = ["node", "capture.mjs", integration, server.base_url, agent]
        stream = ["stream"] if scenario.endswith("_stream") else []
        subprocess.run(
            [*command, scripts.prompt_for(scenario), str(path), *stream],
            cwd=AGENT_DIR,
            check=True,
            timeout=120,
        )
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="capture Vercel AI SDK spans")
    parser.add_argument("integration", choices=INTEGRATIONS)
    parser.add_argument("scenario", nargs="*", help=f"default: all of {', '.join(SCENARIOS)}")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args(argv)
    unknown = set(args.scenario) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios: {sorted(unknown)}")
    _install()
    args.out.mkdir(parents=True, exist_ok=True)
    for scenario in args.scenario or SCENARIOS:
        print(summarize(capture(args.integration, scenario, args.out)), flush=True)


if __name__ == "__main__":
    main()
