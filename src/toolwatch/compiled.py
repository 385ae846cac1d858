"""Which modules run compiled: the hot path, built from its Python source by mypyc.

The modules in ``MODULES`` are the per-span work: recognizers, decoding, assembly, the
timeline, the evaluators, the metrics and the findings log. ``setup.py`` compiles them with
mypyc when it can (a C compiler, and not ``TOOLWATCH_PURE_PYTHON=1`` at install); the source
stays the only code there is, and the package runs the same, slower, without the build.

At run time:

- ``TOOLWATCH_PURE_PYTHON=1`` makes toolwatch import the source of these modules even where
  they are compiled: for a debugger, coverage, a line profiler or the coverage-guided fuzzer,
  none of which see inside compiled code;
- ``state()`` says what is running, for the start-up log and the benchmark report; it names
  compiled modules older than their source (an editable install not rebuilt since an edit:
  ``make`` rebuilds it), since what runs then is not what the source says.

``python src/toolwatch/compiled.py`` prints the source paths (for the Makefile).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

__all__ = [
    "MODULES",
    "PURE_PYTHON_ENV",
    "RUNTIME_LIBRARY",
    "CompiledState",
    "is_stale",
    "prefer_source",
    "state",
]

PURE_PYTHON_ENV = "TOOLWATCH_PURE_PYTHON"
#: The shared library mypyc builds beside the package (setup.py's ``group_name``).
RUNTIME_LIBRARY = "toolwatch_native__mypyc"

#: Compiled by mypyc, relative to the package. Modules defining pydantic models are not.
MODULES = (
    "model.py",
    "names.py",
    "jsontext.py",
    "engine.py",
    "assembly/buffer.py",
    "assembly/by_id.py",
    "assembly/by_name.py",
    "assembly/calls.py",
    "assembly/checks.py",
    "assembly/clocks.py",
    "assembly/delegations.py",
    "assembly/drafts.py",
    "assembly/handoffs.py",
    "assembly/keys.py",
    "assembly/ordering.py",
    "assembly/outputs.py",
    "assembly/overlaps.py",
    "assembly/placing.py",
    "assembly/records.py",
    "assembly/remembered.py",
    "assembly/requested.py",
    "assembly/runs.py",
    "assembly/timeline.py",
    "assembly/tree.py",
    "conventions/__init__.py",
    "conventions/attrs.py",
    "conventions/crewai.py",
    "conventions/events.py",
    "conventions/fields.py",
    "conventions/genai.py",
    "conventions/guardrails_ai.py",
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
    "evaluation/entities.py",
    "evaluation/invariants.py",
    "evaluation/lcs.py",
    "evaluation/lineup.py",
    "evaluation/loops.py",
    "evaluation/matching.py",
    "evaluation/order.py",
    "evaluation/pipeline.py",
    "evaluation/rows.py",
    "evaluation/safety.py",
    "evaluation/selection.py",
    "evaluation/severity.py",
    "evaluation/similarity.py",
    "evaluation/staircase.py",
    "evaluation/structure.py",
    "ingest/decode.py",
    "ingest/scan.py",
    "sinks/findings.py",
    "sinks/prometheus.py",
    "sinks/tally.py",
)

_PACKAGE = Path(__file__).resolve().parent


def _module_name(relative: str) -> str:
    parts = relative.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["toolwatch", *parts])


_NAMES = {_module_name(relative): relative for relative in MODULES}


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the ``.py`` of a compiled module ahead of its extension."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        relative = _NAMES.get(fullname)
        if relative is None:
            return None
        source = _PACKAGE / relative
        locations = [str(source.parent)] if source.name == "__init__.py" else None
        return importlib.util.spec_from_file_location(
            fullname, source, submodule_search_locations=locations
        )


def prefer_source() -> None:
    """Import the source of the compiled modules from now on (``TOOLWATCH_PURE_PYTHON``)."""
    if not any(isinstance(finder, _SourceFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())


#: How an install without the compiled modules gets them: the stamp ``make`` keeps says the
#: checkout is installed, so a compiler installed since does not rebuild it by itself.
BUILD_IT = (
    "reinstall with a C compiler and Python's headers, without TOOLWATCH_PURE_PYTHON=1:"
    " in a checkout, `make clean`, then `make serve`"
)


@dataclass(frozen=True, slots=True)
class CompiledState:
    """What runs: the compiled modules imported, the ones run from source, the stale ones;
    ``switched`` when ``TOOLWATCH_PURE_PYTHON=1`` asked for the source."""

    compiled: tuple[str, ...]
    source: tuple[str, ...]
    stale: tuple[str, ...]
    switched: bool = False

    @property
    def all_compiled(self) -> bool:
        """Whether every module of the hot path runs compiled (stale ones too)."""
        return not self.switched and not self.source and bool(self.compiled)

    def describe(self) -> str:
        if self.switched:
            return f"pure Python ({PURE_PYTHON_ENV}=1)"
        if not self.compiled:
            return f"pure Python (not compiled at install; {BUILD_IT})"
        text = f"compiled by mypyc ({len(self.compiled)} of {len(MODULES)} modules)"
        if self.stale:
            text += f"; older than their source, rebuild with `make`: {', '.join(self.stale)}"
        return text


def is_stale(source: Path, built: Path) -> bool:
    """Whether ``source`` changed after ``built`` was compiled from it."""
    return source.stat().st_mtime > built.stat().st_mtime


def built_in_place(package: Path) -> bool:
    """Whether ``package`` is a source tree built in place (an editable install), where an
    edit can leave a compiled module behind its source. An installed package's files come
    from one wheel, whatever their times say."""
    installed = {Path(sysconfig.get_path(name)).resolve() for name in ("purelib", "platlib")}
    return not any(package.resolve().is_relative_to(path) for path in installed)


def state() -> CompiledState:
    """The state of the compiled modules (imports them all)."""
    compiled, source, stale = [], [], []
    check = built_in_place(_PACKAGE)
    for name, relative in _NAMES.items():
        spec = importlib.import_module(name).__spec__
        origin = spec.origin if spec is not None else None
        if origin is None:
            continue
        if origin.endswith(".py"):
            source.append(name)
            continue
        compiled.append(name)
        if check and is_stale(_PACKAGE / relative, Path(origin)):
            stale.append(name)
    switched = os.environ.get(PURE_PYTHON_ENV) == "1"
    return CompiledState(tuple(compiled), tuple(source), tuple(stale), switched)


if __name__ == "__main__":
    print(" ".join(f"src/toolwatch/{relative}" for relative in MODULES))
