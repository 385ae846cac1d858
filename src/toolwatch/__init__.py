"""toolwatch: online tool-call regression detection for AI agents."""

# Nothing but ``compiled``, which imports ``__future__``, ``os``, ``sys`` and
# ``importlib.machinery`` only: the ``toolwatch`` command imports this package (after its
# console script's own imports: ``sys``, ``re`` in older pips' scripts) before the first
# line of its own (``toolwatch.cli``), which catches SIGHUP, and a SIGHUP until then ends
# the process.
from toolwatch import compiled

__all__ = ["__version__"]

__version__ = "0.1.0"

# The source of the compiled modules when asked for (TOOLWATCH_PURE_PYTHON=1), or when their
# shared library is missing (a build that compiled only part of them): never a
# half-compiled import error. Decided at the first import of one of them.
compiled.source_first()
