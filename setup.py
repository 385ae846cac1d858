"""The compiled parts of toolwatch; everything else is in pyproject.toml.

- ``toolwatch.ingest._wire``: the OTLP scanner, written in C.
- The hot path (``toolwatch.compiled.MODULES``: recognizers, decoding, assembly, timeline,
  evaluators, metrics), compiled from its own Python source by mypyc.

Both are optional. Without a C compiler, or with ``TOOLWATCH_PURE_PYTHON=1`` when
installing, the package installs and runs as Python, at about half the speed (README,
Performance).
"""

import os
import runpy
import sys

from setuptools import Extension, setup

try:
    from mypyc.build import mypycify
except ImportError:  # mypy is a build requirement: missing only without build isolation
    mypycify = None

MODULES = runpy.run_path("src/toolwatch/compiled.py")["MODULES"]

# The compiled modules must type-check, but the strict check is `make typecheck`'s: here
# only what mypyc needs, without the pydantic plugin or stubs the build does not install, and
# with a cache of its own, so that a build never sees types `make typecheck` cached with the
# dependencies installed (every build then compiles the same code, a fresh clone's included).
_MYPYC_ARGS = [
    "--config-file=",
    "--ignore-missing-imports",
    "--follow-imports=silent",
    "--cache-dir=build/mypyc-cache",
]


def _hot_path() -> list[Extension]:
    if os.environ.get("TOOLWATCH_PURE_PYTHON") == "1":
        return []
    if mypycify is None:
        print("toolwatch: mypy is not installed; the hot path runs as Python", file=sys.stderr)
        return []
    extensions = mypycify(
        [*_MYPYC_ARGS, *(f"src/toolwatch/{module}" for module in MODULES)],
        group_name="toolwatch_native",
    )
    for extension in extensions:
        extension.optional = True
    return extensions


setup(
    ext_modules=[
        Extension(
            "toolwatch.ingest._wire",
            sources=["src/toolwatch/ingest/_wire.c"],
            optional=True,
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
        ),
        *_hot_path(),
    ]
)
