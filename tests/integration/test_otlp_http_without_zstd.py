"""``toolwatch serve`` on a Python that cannot read zstd: CPython 3.14 built without libzstd
has no ``compression.zstd`` (an optional extension, like ``lzma``), and ``backports.zstd`` is
installed only below 3.14. A real subprocess, its zstd modules made unimportable as such an
interpreter's are, and real OTLP/HTTP requests."""

from __future__ import annotations

import gzip
import re
import sys
import urllib.error
import urllib.request

from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tests.integration.cli_support import FREE_PORTS, LISTENING, Served, clean_env
from tests.integration.otlp_support import PROTOBUF, refund_request

#: ``toolwatch serve`` where importing zstd fails as it does on such a Python: ImportError.
_WITHOUT_ZSTD = (
    "import sys\n"
    "sys.modules['compression.zstd'] = sys.modules['backports.zstd'] = None\n"
    "from toolwatch.cli import main\n"
    "sys.exit(main())\n"
)


def post(address: str, body: bytes, encoding: str) -> tuple[int, str, bytes]:
    """The status, the Accept-Encoding header ("" without) and the body of the answer."""
    headers = {"Content-Type": PROTOBUF, "Content-Encoding": encoding}
    url = f"http://{address}/v1/traces"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers.get("Accept-Encoding", ""), answer.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers.get("Accept-Encoding", ""), error.read()


def test_without_zstd_serve_says_why_at_start_up_and_answers_zstd_415() -> None:
    """A Collector set to ``compression: zstd`` is told which codings to use; every other
    coding is read. Was: ``import toolwatch.app`` raised ImportError: serve could not start
    at all, gzip included. Now: serve logs at start-up, once, why zstd is answered 415; the
    415's message and ``Accept-Encoding`` leave zstd out; gzip is read as before."""
    command = [sys.executable, "-c", _WITHOUT_ZSTD, "serve"]
    served = Served(FREE_PORTS, clean_env(), command)
    try:
        http = served.wait_for(LISTENING)["http"]
        warning = served.wait_for(
            re.compile(" WARNING toolwatch: OTLP/HTTP refuses Content-Encoding zstd")
        )
        refused = post(http, b"\x28\xb5\x2f\xfd", "zstd")
        accepted = post(http, gzip.compress(refund_request().SerializeToString()), "gzip")
    finally:
        assert served.terminate() == 0

    assert warning.string.endswith(
        " WARNING toolwatch: OTLP/HTTP refuses Content-Encoding zstd (415): backports.zstd "
        "cannot be imported (import of backports.zstd halted; None in sys.modules): "
        "pip install backports.zstd"
    )
    assert sum("refuses Content-Encoding zstd" in line for line in served.seen) == 1
    status, accept_encoding, body = refused
    assert (status, accept_encoding) == (415, "gzip, deflate, zlib, identity")
    message = status_pb2.Status.FromString(body)
    assert (message.code, message.message) == (
        code_pb2.INVALID_ARGUMENT,
        "content encoding 'zstd' is not one of gzip, deflate, zlib, identity",
    )
    status, _, body = accepted
    assert status == 200
    assert not ExportTraceServiceResponse.FromString(body).HasField("partial_success")
