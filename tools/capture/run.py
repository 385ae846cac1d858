"""Regenerate every OTLP fixture: run each capture in its own process, then check them.

``python -m tools.capture.run [--only FRAMEWORK[:INSTRUMENTATION]]... [--out DIR]``

Each (framework, instrumentation) pair runs in a fresh interpreter because instrumentors
patch process-wide state. The OTel-contrib instrumentations run with the overlay directory
``.venv-capture/overlay-otel-contrib`` first on ``PYTHONPATH`` (see README: the contrib
OpenAI Agents package installs into the same module path as OpenLLMetry's). After the
captures, every fixture is parsed back into protobuf, checked to hold exactly one trace, its
``.expected.json`` is (re)written from ``expectations.py``, and a one-line summary printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tools.capture.cli import FIXTURES
from tools.capture.expectations import expected_for
from tools.capture.otlp import read_fixture, summarize

__all__ = ["JOBS", "Job", "main"]

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / ".venv-capture" / "overlay-otel-contrib"
TIMEOUT_S = 300


@dataclass(frozen=True, slots=True)
class Job:
    """One capture process: ``python -m tools.capture.<module> <instrumentation>``."""

    framework: str
    module: str
    instrumentation: str
    overlay: bool = False
    venv: str | None = None  # a virtualenv of its own, ROOT/<venv> (packages that conflict)

    @property
    def key(self) -> str:
        return f"{self.framework}:{self.instrumentation}"


JOBS = (
    Job("openai_agents", "capture_openai_agents", "openinference"),
    Job("openai_agents", "capture_openai_agents", "openllmetry"),
    Job("openai_agents", "capture_openai_agents", "otel_contrib", overlay=True),
    Job("openai_agents", "capture_openai_agents", "logfire", venv=".venv-capture-logfire"),
    Job(
        "openai_agents",
        "capture_openai_agents",
        "openinference_mcp_v2",
        venv=".venv-capture-mcp-v2",
    ),
    Job(
        "openai_agents",
        "capture_openai_agents",
        "otel_contrib_mcp_v2",
        overlay=True,
        venv=".venv-capture-mcp-v2",
    ),
    Job("pydantic_ai", "capture_pydantic_ai", "native_v5"),
    Job("pydantic_ai", "capture_pydantic_ai", "native_v2"),
    Job("strands", "capture_strands", "native"),
    Job("strands", "capture_strands", "native_latest"),
    Job("openai_client", "capture_openai_client", "openinference"),
    Job("openai_client", "capture_openai_client", "openllmetry"),
    Job("openai_client", "capture_openai_client", "otel_contrib", overlay=True),
    Job("openai_client", "capture_openai_client", "logfire", venv=".venv-capture-logfire"),
    Job("langgraph", "capture_langgraph", "openinference"),
    Job("langgraph", "capture_langgraph", "openllmetry"),
    Job("langgraph", "capture_langgraph", "langsmith", venv=".venv-capture-langsmith"),
    Job("vercel_ai", "capture_vercel_ai", "otel"),
    Job("vercel_ai", "capture_vercel_ai", "legacy"),
    Job("google_genai", "capture_google_genai", "otel_contrib", venv=".venv-capture-google-genai"),
    Job(
        "google_genai",
        "capture_google_genai",
        "otel_contrib_v1_2",
        venv=".venv-capture-google-genai-v1_2",
    ),
    Job("google_adk", "capture_google_adk", "native", venv=".venv-capture-google-adk"),
    Job("google_adk", "capture_google_adk", "native_v1", venv=".venv-capture-google-adk"),
    Job("google_adk", "capture_google_adk", "openinference", venv=".venv-capture-google-adk"),
    Job("guardrails", "capture_guardrails", "native", venv=".venv-capture-guardrails"),
    Job(
        "guardrails",
        "capture_guardrails",
        "openinference",
        venv=".venv-capture-guardrails-openinference",
    ),
    Job("crewai", "capture_crewai", "openinference", venv=".venv-capture-crewai"),
    Job("crewai", "capture_crewai", "openllmetry", venv=".venv-capture-crewai"),
)


def _environment(job: Job) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(OVERLAY)] if job.overlay else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(ROOT)])
    # Dummy credentials: nothing may reach a real service (there is no network anyway).
    env["OPENAI_API_KEY"] = "sk-fake"
    env.pop("OPENAI_BASE_URL", None)
    env.pop("OTEL_SEMCONV_STABILITY_OPT_IN", None)
    env.pop("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", None)
    env.pop("ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN", None)
    env["TRACELOOP_METRICS_ENABLED"] = "false"
    return env


def _capture(job: Job, out: Path) -> None:
    python = str(ROOT / job.venv / "bin" / "python") if job.venv else sys.executable
    command = [
        python,
        "-m",
        f"tools.capture.{job.module}",
        job.instrumentation,
        "--out",
        str(out),
    ]
    print(f"== {job.key}", flush=True)
    subprocess.run(command, cwd=ROOT, env=_environment(job), check=True, timeout=TIMEOUT_S)


def _check(path: Path) -> None:
    """Parse ``path`` back, require one trace, and write its expected file."""
    requests = read_fixture(path)
    traces = {
        span.trace_id
        for request in requests
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    }
    if len(requests) != 1 or len(traces) != 1:
        raise SystemExit(f"{path.name}: {len(requests)} requests, {len(traces)} traces")
    framework, instrumentation, scenario = path.name.removesuffix(".json").split("__")
    expected = expected_for(framework, instrumentation, scenario)
    expected_path = path.with_name(path.name.removesuffix(".json") + ".expected.json")
    expected_path.write_text(json.dumps(expected, indent=2) + "\n", encoding="utf-8")
    print(summarize(path))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="FRAMEWORK or FRAMEWORK:INSTRUMENTATION (repeatable)",
    )
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument("--check-only", action="store_true", help="skip the captures")
    args = parser.parse_args(argv)
    chosen = [
        job
        for job in JOBS
        if not args.only or any(sel in (job.framework, job.key) for sel in args.only)
    ]
    if not chosen:
        parser.error(f"--only matched nothing; jobs are {[job.key for job in JOBS]}")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.check_only:
        for job in chosen:
            _capture(job, args.out)
    print("== fixtures")
    prefixes = tuple(f"{job.framework}__{job.instrumentation}__" for job in chosen)
    for path in sorted(args.out.glob("*.json")):
        if path.name.startswith(prefixes) and not path.name.endswith(".expected.json"):
            _check(path)


if __name__ == "__main__":
    main()
