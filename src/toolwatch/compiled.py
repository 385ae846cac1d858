"""Which modules run compiled: the hot path, built from its Python source by mypyc.

The modules in ``MODULES`` are the per-span work: recognizers, decoding, assembly, the
timeline, the evaluators, the metrics and the findings log. ``setup.py`` compiles them with
mypyc when it can (a C compiler, and not ``TOOLWATCH_PURE_PYTHON=1`` at install); the source
stays the only code there is, and the package runs the same, slower, without the build.

At run time:

- ``TOOLWATCH_PURE_PYTHON=1`` makes toolwatch import the source of these modules even where
  they are compiled: for a debugger, coverage, a line profiler or the coverage-guided fuzzer,
  none of which see inside compiled code; so does a build that compiled only part of them
  (their runtime library missing): never a half-compiled import error;
- ``toolwatch.compiled_state`` says what is running.

The package imports this module before anything else of its own, and the ``toolwatch``
command catches SIGHUP only after it (``toolwatch.cli``): until then a SIGHUP ends the
process. So it imports ``os``, ``sys`` and ``importlib.machinery`` (a millisecond); what the
switch needs to decide and to find a source (``importlib.util``) waits for the first import
of a listed module, and what runs is told by ``toolwatch.compiled_state``. Importing
``importlib.abc``, ``dataclasses`` and ``pathlib`` here took 50 ms, twice the interpreter's
own start.

``python src/toolwatch/compiled.py`` prints the source paths (for the Makefile).
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import ModuleSpec

__all__ = [
    "MODULES",
    "PACKAGE",
    "PURE_PYTHON_ENV",
    "RUNTIME_LIBRARY",
    "module_name",
    "runs_source",
    "source_first",
]

PURE_PYTHON_ENV = "TOOLWATCH_PURE_PYTHON"
#: The shared library mypyc builds beside the package (setup.py's ``group_name``).
RUNTIME_LIBRARY = "toolwatch_native__mypyc"

#: Compiled by mypyc, relative to the package. Modules defining pydantic models are not.
MODULES = (
    "model.py",
    "model_evaluation.py",
    "model_traces.py",
    "names.py",
    "jsontext.py",
    "engine.py",
    "assembly/anchoring.py",
    "assembly/buffer.py",
    "assembly/by_id.py",
    "assembly/by_name.py",
    "assembly/calls.py",
    "assembly/checks.py",
    "assembly/clocks.py",
    "assembly/completed.py",
    "assembly/delegations.py",
    "assembly/drafts.py",
    "assembly/dropped.py",
    "assembly/handoffs.py",
    "assembly/held_traces.py",
    "assembly/keys.py",
    "assembly/limited.py",
    "assembly/limits.py",
    "assembly/missing.py",
    "assembly/ordering.py",
    "assembly/outputs.py",
    "assembly/overlaps.py",
    "assembly/placing.py",
    "assembly/records.py",
    "assembly/refusals.py",
    "assembly/remembered.py",
    "assembly/requested.py",
    "assembly/runs.py",
    "assembly/timeline.py",
    "assembly/tree.py",
    "assembly/victims.py",
    "conventions/__init__.py",
    "conventions/attrs.py",
    "conventions/crewai.py",
    "conventions/events.py",
    "conventions/fields.py",
    "conventions/frameworks.py",
    "conventions/genai.py",
    "conventions/google_adk.py",
    "conventions/guardrails_ai.py",
    "conventions/history.py",
    "conventions/langsmith.py",
    "conventions/logfire.py",
    "conventions/openinference.py",
    "conventions/openllmetry.py",
    "conventions/pydantic_ai.py",
    "conventions/vercel_ai.py",
    "evaluation/arguments.py",
    "evaluation/attempts.py",
    "evaluation/base.py",
    "evaluation/blocks.py",
    "evaluation/composite.py",
    "evaluation/concurrency.py",
    "evaluation/entities.py",
    "evaluation/invariant_checks.py",
    "evaluation/invariants.py",
    "evaluation/lcs.py",
    "evaluation/lineup.py",
    "evaluation/loops.py",
    "evaluation/matching.py",
    "evaluation/order.py",
    "evaluation/pipeline.py",
    "evaluation/rows.py",
    "evaluation/safety.py",
    "evaluation/safety_bindings.py",
    "evaluation/safety_drift.py",
    "evaluation/safety_ledger.py",
    "evaluation/selection.py",
    "evaluation/severity.py",
    "evaluation/similarity.py",
    "evaluation/staircase.py",
    "evaluation/structure.py",
    "ingest/decode.py",
    "ingest/decode_requests.py",
    "ingest/decode_types.py",
    "ingest/scan.py",
    "sinks/findings.py",
    "sinks/label_limits.py",
    "sinks/prometheus.py",
    "sinks/prometheus_families.py",
    "sinks/tally.py",
)

#: The package's directory, where the listed modules' source is.
PACKAGE = os.path.dirname(os.path.realpath(__file__))


def module_name(relative: str) -> str:
    """The module ``relative`` (a path in ``MODULES``) is imported as."""
    parts = relative.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["toolwatch", *parts])


_NAMES = {module_name(relative): relative for relative in MODULES}


def runs_source() -> bool:
    """Whether the listed modules are to be imported from their source: asked for
    (``PURE_PYTHON_ENV``), or their runtime library is missing (a partial build)."""
    import importlib.util  # noqa: PLC0415  (not at the package's import: module docstring)

    return (
        os.environ.get(PURE_PYTHON_ENV) == "1" or importlib.util.find_spec(RUNTIME_LIBRARY) is None
    )


class _SourceFinder:
    """Finds the ``.py`` of a compiled module ahead of its extension when ``runs_source``
    says so, which it asks at the first import of a listed module. A ``sys.meta_path``
    finder: ``importlib.abc.MetaPathFinder``'s protocol, not its class (importing
    ``importlib.abc`` took longer than the interpreter's own start)."""

    def __init__(self) -> None:
        self._source: bool | None = None  # ``runs_source()``, once asked

    def find_spec(self, fullname: str, path: object, target: object = None) -> ModuleSpec | None:
        relative = _NAMES.get(fullname)
        if relative is None:
            return None
        if self._source is None:
            self._source = runs_source()
        if not self._source:
            return None  # the extension, found by the finders after this one
        import importlib.util  # noqa: PLC0415  (not at the package's import: module docstring)

        source = os.path.join(PACKAGE, relative)
        locations = [os.path.dirname(source)] if relative.endswith("__init__.py") else None
        return importlib.util.spec_from_file_location(
            fullname, source, submodule_search_locations=locations
        )


def source_first() -> None:
    """Import the source of the compiled modules from now on when ``runs_source`` says so
    (the package's ``__init__``, before any of them is imported)."""
    if not any(isinstance(finder, _SourceFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())


if __name__ == "__main__":
    print(" ".join(f"src/toolwatch/{relative}" for relative in MODULES))
