"""The compiled OTLP scanner (``toolwatch.ingest.scan``); everything else is in pyproject.toml.

The extension is optional: without a C compiler the package installs and runs on the
reference scanner, which costs about a third more CPU per span (README, Performance).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "toolwatch.ingest._wire",
            sources=["src/toolwatch/ingest/_wire.c"],
            optional=True,
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
        )
    ]
)
