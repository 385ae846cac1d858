"""``toolwatch.build_revision``: which build of toolwatch a process runs, for
``toolwatch_build_info{revision}`` and ``--version``. ``__version__`` has said ``0.1.0`` at
every commit, so during a rollout old and new pods looked the same; the revision is the
build's own word (the image's ``TOOLWATCH_REVISION``, a Docker build argument)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from toolwatch import __version__
from toolwatch.build_revision import UNKNOWN, RevisionError, revision
from toolwatch.sinks.prometheus import PrometheusMetrics


def test_an_unset_or_empty_revision_is_unknown() -> None:
    assert revision({}) == UNKNOWN == "unknown"
    assert revision({"TOOLWATCH_REVISION": ""}) == "unknown"


@pytest.mark.parametrize("value", ["7aa4f47", "v0.2.0-12-g374c81e-dirty", "1.4.0+build.7"])
def test_a_commit_or_a_described_tag_is_the_revision(value: str) -> None:
    assert revision({"TOOLWATCH_REVISION": value}) == value


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("a b", "letters, digits and . _ + - only"),
        ('x"}', "letters, digits and . _ + - only"),
        ("a" * 65, "at most 64 characters"),
    ],
)
def test_a_revision_that_is_no_label_value_is_refused_naming_the_variable(
    value: str, reason: str
) -> None:
    with pytest.raises(RevisionError) as raised:
        revision({"TOOLWATCH_REVISION": value})
    assert str(raised.value) == f"TOOLWATCH_REVISION: {value!r} is not a revision: {reason}"


def test_build_info_names_the_revision() -> None:
    """Was: ``toolwatch_build_info{version="0.1.0",decoder,hot_path}`` on every build: a
    dashboard's ``count by (version)`` showed one version while half the pods ran the old
    image. Now: ``revision`` beside ``version``, ``unknown`` unless the build says."""
    registry = CollectorRegistry()
    PrometheusMetrics(registry, decoder="reference", hot_path="python", revision="374c81e")
    labels = {
        "version": __version__,
        "revision": "374c81e",
        "decoder": "reference",
        "hot_path": "python",
    }
    assert registry.get_sample_value("toolwatch_build_info", labels) == 1.0
