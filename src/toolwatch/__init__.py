"""toolwatch: online tool-call regression detection for AI agents."""

import importlib.util
import os

from toolwatch import compiled

__all__ = ["__version__"]

__version__ = "0.1.0"

# Run the source of the compiled modules when asked to, or when their shared library is
# missing (a build that compiled only part of them): never a half-compiled import error.
if (
    os.environ.get(compiled.PURE_PYTHON_ENV) == "1"
    or importlib.util.find_spec(compiled.RUNTIME_LIBRARY) is None
):
    compiled.prefer_source()
