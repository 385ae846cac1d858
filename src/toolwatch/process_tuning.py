"""Process-wide settings the server makes its own: prometheus_client's ``_created`` series
kept (``keep_created_series``, as the App is built), the open-file limit raised to hold every
listener's ``ingest.max_connections`` (``raise_open_files``, before any listener is bound;
``open_files_warning`` says, for ``check-config`` too, when it cannot) and the cyclic
garbage collector tuned for serving (``tune_gc``, once every listener is bound).
"""

from __future__ import annotations

import gc
import logging
import os
import resource

from prometheus_client import enable_created_metrics

__all__ = [
    "OPEN_FILES_RESERVE",
    "keep_created_series",
    "open_files_needed",
    "open_files_warning",
    "raise_open_files",
    "tune_gc",
]

log = logging.getLogger("toolwatch")

#: Cyclic-GC thresholds for serving: a full collection only after 20,000 net new objects
#: (not 700), and older generations rarely. The pipeline's objects are acyclic and die by
#: reference counting; what the collector did was walk live ones, on the event loop.
_GC_THRESHOLDS = (20_000, 20, 20)


def keep_created_series() -> None:
    """Export counters' ``_created`` series whatever ``PROMETHEUS_DISABLE_CREATED_SERIES``
    says: the page alerts read ``toolwatch_regressions_created`` to fire on a regression's
    first finding, which ``increase()`` cannot see (deploy/prometheus/toolwatch-rules.yaml)."""
    if os.environ.get(_DISABLE_CREATED, "").lower() in ("true", "1", "t"):
        log.warning(
            "%s is ignored: the alert rules need toolwatch_regressions_created to page on a"
            " regression's first finding",
            _DISABLE_CREATED,
        )
    enable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client has no annotation here


#: prometheus_client's switch (read when it is imported) that drops ``_created`` series.
_DISABLE_CREATED = "PROMETHEUS_DISABLE_CREATED_SERIES"


def tune_gc() -> None:
    """Move everything alive after start-up (modules, configuration, the gRPC and Prometheus
    machinery) out of the collector's reach, and collect less often. Measured in a benchmark
    run (``make bench``): collections took 1.6 s of CPU and paused the event loop up to 56 ms
    (the tail of the detection latency); afterwards 0.04 s, at most 15 ms."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)


#: Descriptors kept beyond the listeners' connections. Measured: a ``serve`` at rest holds 19
#: (stdio, the four listening sockets, asyncio's and gRPC's epoll, eventfds and wake-up
#: pipe, the findings log). The rest is room for what opens while serving: a rotated output
#: opened again, the security files read at a reload, the sinks' outgoing connections and
#: what gRPC opens under load. A shortfall here is what the bound exists to prevent (EMFILE
#: in the other listeners and the outputs), so the reserve errs large.
OPEN_FILES_RESERVE = 64

#: The listeners ``ingest.max_connections`` bounds, each on its own (``config.LISTENERS``).
_LISTENERS = 4


def open_files_needed(max_connections: int) -> int:
    """The open-file limit under which no listener's flood takes another's descriptors:
    ``max_connections`` on each of the four listeners, and ``OPEN_FILES_RESERVE``."""
    return _LISTENERS * max_connections + OPEN_FILES_RESERVE


def open_files_warning(max_connections: int) -> str | None:
    """What to say when the process's hard open-file limit (``RLIMIT_NOFILE``), the most
    ``raise_open_files`` can raise the soft one to, holds fewer than ``open_files_needed``;
    ``None`` when it holds them (``check-config`` prints it, ``serve`` logs it)."""
    needed = open_files_needed(max_connections)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard >= needed:
        return None
    return (
        f"the open-file limit (ulimit -n, hard) is {hard}, under the {needed} that"
        f" ingest.max_connections ({max_connections}) on the four listeners and a reserve of"
        f" {OPEN_FILES_RESERVE} need: a flood of one listener can take the descriptors of"
        f" the others and of the outputs (EMFILE); raise the hard limit (LimitNOFILE=,"
        f" ulimit -Hn, docker --ulimit nofile) or lower ingest.max_connections to"
        f" {max(1, (hard - OPEN_FILES_RESERVE) // _LISTENERS)} or less"
    )


def raise_open_files(max_connections: int) -> None:
    """Raise the soft open-file limit to ``open_files_needed`` (the hard limit if lower):
    systemd and most shells start a process at 1,024, under the default bound's 2,112. Never
    lowers it. Logs ``open_files_warning`` when the hard limit is short."""
    needed = open_files_needed(max_connections)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    if (warning := open_files_warning(max_connections)) is not None:
        log.warning("%s", warning)
