"""A Python without zstd: CPython 3.14 built without libzstd has no ``compression.zstd``
(``_zstd`` is an optional extension, like ``_lzma`` and ``_bz2``), and pyproject installs
``backports.zstd`` only below 3.14, so nothing can provide it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_WITHOUT_ZSTD = textwrap.dedent(
    """
    import gzip, sys
    # What an interpreter built without libzstd gives: ImportError for the module.
    sys.modules["compression.zstd"] = None
    sys.modules["backports.zstd"] = None
    import toolwatch.app  # the server, its receivers
    from toolwatch.ingest.http_answers import RejectError
    from toolwatch.ingest.http_bodies import decompress
    assert decompress(gzip.compress(b"spans"), "gzip", 100) == b"spans"
    try:
        decompress(b"\\x28\\xb5\\x2f\\xfd", "zstd", 100)
    except RejectError as error:
        print(error.status, error)
    """
)


def test_without_a_zstd_module_toolwatch_still_serves_and_answers_zstd_415() -> None:
    """Wrong: ``http_bodies`` imports zstd unconditionally, so on a Python whose
    ``compression.zstd`` is absent ``import toolwatch.app`` fails with ImportError:
    ``toolwatch serve`` cannot start at all, gzip included, for want of a coding the
    Collector does not default to; nor does check-config or the docs say so. Should: start,
    read gzip/deflate/zlib as before, and answer zstd 415 (its Accept-Encoding leaving zstd
    out), or at least fail at start-up with a message naming what is missing."""
    run = subprocess.run(
        [sys.executable, "-c", _WITHOUT_ZSTD],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr[-600:]
    assert run.stdout.startswith("415 ")
