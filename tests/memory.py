"""What a piece of work leaves allocated: for tests of memory bounds.

Import as ``from tests.memory import retained`` (as ``tests.factories``)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable

__all__ = ["retained"]


def retained(work: Callable[[], object]) -> int:
    """Bytes still allocated by Python's allocators once ``work`` has run and what it made
    that nothing keeps was collected (``tracemalloc``: every thread's allocations, none of a
    C library's own)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
