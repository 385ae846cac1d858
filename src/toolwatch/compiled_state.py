"""What runs of the compiled hot path (``toolwatch.compiled``): ``state()``, for the start-up
log and the benchmark report. It names compiled modules older than their source (an editable
install not rebuilt since an edit: ``make`` rebuilds it), since what runs then is not what
the source says.

Not in ``toolwatch.compiled``, which the package imports before the ``toolwatch`` command
catches SIGHUP: what this module imports would lengthen that window.
"""

from __future__ import annotations

import importlib
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from toolwatch.compiled import MODULES, PACKAGE, PURE_PYTHON_ENV, module_name

__all__ = ["BUILD_IT", "CompiledState", "built_in_place", "is_stale", "state"]

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
    package = Path(PACKAGE)
    check = built_in_place(package)
    for relative in MODULES:
        name = module_name(relative)
        spec = importlib.import_module(name).__spec__
        origin = spec.origin if spec is not None else None
        if origin is None:
            continue
        if origin.endswith(".py"):
            source.append(name)
            continue
        compiled.append(name)
        if check and is_stale(package / relative, Path(origin)):
            stale.append(name)
    switched = os.environ.get(PURE_PYTHON_ENV) == "1"
    return CompiledState(tuple(compiled), tuple(source), tuple(stale), switched)
