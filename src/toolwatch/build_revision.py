"""Which build of toolwatch a process runs: ``TOOLWATCH_REVISION``, which the image sets from
its build argument (``docker build --build-arg TOOLWATCH_REVISION=$(git describe --always)``;
the Dockerfile), else ``unknown``. ``__version__`` names a release and has not changed between
commits, so during a rollout it cannot tell an old pod from a new one; the revision can, in
``toolwatch_build_info{revision}`` and ``toolwatch --version`` (docs/deployment.md,
Upgrading toolwatch).

Read from the environment, not the configuration: it describes the build, which no reload
changes. Imports ``os`` and ``re`` only (``cli`` reads it for ``--version``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

__all__ = ["UNKNOWN", "VARIABLE", "RevisionError", "describe", "revision"]

VARIABLE = "TOOLWATCH_REVISION"
UNKNOWN = "unknown"

# A Prometheus label value may hold anything, but a revision is a commit, a tag or what
# `git describe` says; anything else is a mistake in the build (a quoted value, a sentence).
_MAX_LENGTH = 64
_REVISION = re.compile(r"[A-Za-z0-9._+-]+")


class RevisionError(ValueError):
    """``TOOLWATCH_REVISION`` is set to something that is no revision; the message names
    the variable, the value and why."""


def revision(environ: Mapping[str, str] = os.environ) -> str:
    """The build's revision, ``UNKNOWN`` when ``TOOLWATCH_REVISION`` is unset or empty.

    Raises ``RevisionError`` for a value longer than 64 characters or holding anything but
    letters, digits and ``. _ + -``: ``serve`` and ``check-config`` refuse to start on it."""
    value = environ.get(VARIABLE, "")
    if not value:
        return UNKNOWN
    if len(value) > _MAX_LENGTH:
        raise RevisionError(f"{VARIABLE}: {value!r} is not a revision: at most 64 characters")
    if not _REVISION.fullmatch(value):
        raise RevisionError(
            f"{VARIABLE}: {value!r} is not a revision: letters, digits and . _ + - only"
        )
    return value


def describe(version: str, environ: Mapping[str, str] = os.environ) -> str:
    """``toolwatch --version``'s line: ``toolwatch VERSION (revision REVISION)``; a value
    ``revision`` refuses reads as ``unknown`` here (``serve`` and ``check-config`` say why)."""
    try:
        built = revision(environ)
    except RevisionError:
        built = UNKNOWN
    return f"toolwatch {version} (revision {built})"
