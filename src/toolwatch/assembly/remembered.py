"""The ids of the traces the buffer emitted, remembered so that a span of one that comes
later is dropped as ``late`` instead of starting a second, partial trace (DESIGN §4).

An id is kept for the late window in bounded, compact memory (``python -m
bench.remembered`` measures it):

* **Keys.** An id is kept as a 63-bit integer, ``hash(trace_id) >> 1``: Python's hash of
  the bytes (SipHash-1-3, keyed at random per process unless ``PYTHONHASHSEED`` is set), which
  the bytes object caches, and the buffer has already worked out by looking the id up in a
  dict. A keyed hash spreads every kind of id alike: sequential ids, ids with one half zero,
  or with both halves equal (``0x0101...``) collide no more often than random ones, where
  taking or folding halves of the id would collide for some of them (the xor of equal
  halves is 0 for all). Two ids share a key with probability 2^-63: with N ids remembered
  a new trace is taken for one of them with probability N / 2^63 (2,000,000 remembered and
  5,000 new traces a second: once in about 29 years).
* **Lookups.** The keys are in 256 open-addressing tables (linear probing, chosen by the
  key's low 8 bits), each doubled past two thirds full and shrunk once below an eighth: a
  lookup or an addition probes one small table, and no rehash moves more than about 1/256
  of the keys at once. Keys spread evenly, so the tables turn sparse at about the same
  total: each ``forget`` shrinks one of those queued, never more, and an ``add`` grows at
  most one. Measured compiled (a fill as ``python -m bench.remembered``'s, 5,000 a second,
  then traffic stopped): a shrink at 1,500,000 ids takes 0.4 ms, and no ``forget`` took
  longer than one of an ordinary bucket (13 ms at most on a loaded 2-core machine, 3.4 ms
  the median), where shrinking every sparse table at once took up to 76 ms.
* **Expiry.** Ids are kept in time buckets of ``bucket_ns`` (``window_ns / 256``: 1.17 s
  of a 300 s window), in the order they came. Once ``window_ns`` has passed since a bucket
  ended, its ids are forgotten together at the next ``forget``: an id emitted at ``t`` is
  remembered while ``now < t + window_ns + d``, where ``0 < d <= bucket_ns`` is the time
  from ``t`` to the end of its bucket: never shorter than the window, at most one bucket
  longer. About 257 buckets are held, whatever the rate.
* **The cap.** Past ``capacity`` ids the oldest are forgotten one by one; ``add`` returns
  how many of them were forgotten before their window passed, for the buffer to count. An
  id's bucket outlives its window by up to a bucket, so a cap of rate times window forgets ids
  just as their window ends: those are not counted. Which are is judged by the start of the
  id's bucket (its emission time is not kept), so an id forgotten less than a bucket early
  may go uncounted, and no id is counted that was not forgotten early.

Memory: 8 bytes per id in its bucket, and 12 to 24 in its table (a third to two thirds full
as ids come; emptier only once ids were forgotten: below an eighth it waits its turn to be
shrunk, and is then an eighth to a quarter full). A table never has more than three slots
per key it held at its fullest, so the whole takes at most about 33 bytes for each of the
most ids it held (``capacity``).

Not thread-safe: the buffer calls it from one event loop.
"""

from __future__ import annotations

from array import array
from collections import deque
from typing import Final

__all__ = ["RememberedTraces", "trace_key"]

_TABLES: Final = 256
_TABLE_BITS: Final = 8
_TABLE_MASK: Final = _TABLES - 1
_MIN_SLOTS: Final = 8
#: A bucket is this part of the window: how much longer than the window an id may be kept.
BUCKETS_PER_WINDOW: Final = 256
#: Keys the cap has forgotten from the front of a bucket before they are let go of (when
#: they are also half of it): a bucket that never ends (replay's window) does not grow.
_COMPACT_AFTER: Final = 4096
_EMPTY: Final = 0  # no key is 0 (``trace_key``)


def trace_key(trace_id: bytes) -> int:
    """The 63-bit key of ``trace_id`` (module docstring): never 0, which marks an empty slot.

    In mypyc's short-int range (-2^62 to 2^62 - 1), so compiled arithmetic on it stays in C.
    """
    key = hash(trace_id) >> 1
    return key if key != _EMPTY else 1


def _zeros(slots: int) -> array[int]:
    return array("q", bytes(8 * slots))


class _Table:
    """One open-addressing table of keys: linear probing from the key's bits above the low
    eight (which chose the table), ``_EMPTY`` for a free slot. A key may be in it twice
    (added twice): ``remove`` takes one."""

    __slots__ = ("count", "due", "mask", "slots")

    def __init__(self, size: int) -> None:
        self.slots = _zeros(size)
        self.mask = size - 1
        self.count = 0
        self.due = False  # queued to be shrunk (``RememberedTraces._shrink_one``)

    def has(self, key: int) -> bool:
        slots, mask = self.slots, self.mask
        i = (key >> _TABLE_BITS) & mask
        while True:
            found = slots[i]
            if found == key:
                return True
            if found == _EMPTY:
                return False
            i = (i + 1) & mask

    def add(self, key: int) -> None:
        if 3 * (self.count + 1) > 2 * len(self.slots):
            self._resize(2 * len(self.slots))
        self._place(key)
        self.count += 1

    def remove(self, key: int) -> None:
        """Take one ``key`` out (it must be in): the keys after it in its run move back into
        the hole where their probe passes it (backward-shift deletion: no tombstones)."""
        slots, mask = self.slots, self.mask
        hole = (key >> _TABLE_BITS) & mask
        while slots[hole] != key:
            hole = (hole + 1) & mask
        i = hole
        while True:
            i = (i + 1) & mask
            moved = slots[i]
            if moved == _EMPTY:
                break
            # ``moved`` may fill the hole unless its home slot lies after the hole, up to i.
            if (i - (moved >> _TABLE_BITS)) & mask >= (i - hole) & mask:
                slots[hole] = moved
                hole = i
        slots[hole] = _EMPTY
        self.count -= 1

    def sparse(self) -> bool:
        """Less than an eighth full, and larger than the smallest table: to be shrunk."""
        return 8 * self.count < len(self.slots) and len(self.slots) > _MIN_SLOTS

    def shrink(self) -> None:
        """Halve the table as often as it is ``sparse``, in one rehash: it is then an eighth
        to a quarter full (or the smallest)."""
        size = len(self.slots)
        while 8 * self.count < size and size > _MIN_SLOTS:
            size //= 2
        self._resize(size)

    def _place(self, key: int) -> None:
        slots, mask = self.slots, self.mask
        i = (key >> _TABLE_BITS) & mask
        while slots[i] != _EMPTY:
            i = (i + 1) & mask
        slots[i] = key

    def _resize(self, size: int) -> None:
        old = self.slots
        self.slots = _zeros(size)
        self.mask = size - 1
        for key in old:
            if key != _EMPTY:
                self._place(key)


class _Bucket:
    """The keys added before ``end_ns`` (and after the previous bucket's end), in order;
    those before ``first`` are forgotten already (by the cap)."""

    __slots__ = ("end_ns", "first", "keys")

    def __init__(self, end_ns: int) -> None:
        self.end_ns = end_ns
        self.keys: array[int] = array("q")
        self.first = 0


class RememberedTraces:
    """Trace ids added at a time (the buffer's clock, ns), each remembered for at least
    ``window_ns`` after (at most ``bucket_ns`` more), unless more than ``capacity`` are.

    ``window_ns`` 0 or ``capacity`` 0 remember nothing; with ``capacity`` 0 every id added
    counts as forgotten early. Times must not go back (the buffer's clock is monotonic)."""

    __slots__ = ("_buckets", "_capacity", "_count", "_due", "_tables", "_window", "bucket_ns")

    def __init__(self, window_ns: int, capacity: int) -> None:
        self._window = window_ns
        self._capacity = capacity
        self.bucket_ns = max(1, window_ns // BUCKETS_PER_WINDOW)
        self._tables = [_Table(_MIN_SLOTS) for _ in range(_TABLES)]
        self._buckets: deque[_Bucket] = deque()
        self._count = 0
        self._due: deque[_Table] = deque()  # sparse tables, to be shrunk one per ``forget``

    def __len__(self) -> int:
        return self._count

    def __contains__(self, trace_id: bytes) -> bool:
        if not self._count:
            return False
        key = trace_key(trace_id)
        return self._tables[key & _TABLE_MASK].has(key)

    def add(self, trace_id: bytes, now: int) -> int:
        """Remember ``trace_id`` from ``now``; return how many ids the cap made it forget
        before their window passed (module docstring, "The cap"): 0 or 1 (at ``capacity``
        0, 1: this id itself)."""
        if self._window == 0:
            return 0
        if self._capacity == 0:
            return 1
        if not self._buckets or now >= self._buckets[-1].end_ns:
            self._buckets.append(_Bucket(now - now % self.bucket_ns + self.bucket_ns))
        key = trace_key(trace_id)
        self._buckets[-1].keys.append(key)
        self._tables[key & _TABLE_MASK].add(key)
        self._count += 1
        forgotten = 0
        while self._count > self._capacity:
            if self._forget_oldest(now):
                forgotten += 1
        return forgotten

    def forget(self, now: int) -> None:
        """Forget the ids of the buckets that ended ``window_ns`` or longer before ``now``, and
        shrink at most one table that was left sparse (module docstring, "Lookups")."""
        buckets = self._buckets
        while buckets and now - buckets[0].end_ns >= self._window:
            bucket = buckets.popleft()
            keys = bucket.keys
            for i in range(bucket.first, len(keys)):
                self._remove(keys[i])
            self._count -= len(keys) - bucket.first
        self._shrink_one()

    def _forget_oldest(self, now: int) -> bool:
        """Forget the oldest id; return whether its window had not passed at ``now``: its
        bucket began less than ``window_ns`` before (it was emitted then or later)."""
        bucket = self._buckets[0]
        early = now - (bucket.end_ns - self.bucket_ns) < self._window
        keys = bucket.keys
        self._remove(keys[bucket.first])
        bucket.first += 1
        self._count -= 1
        if bucket.first == len(keys):
            self._buckets.popleft()
        elif bucket.first >= _COMPACT_AFTER and 2 * bucket.first >= len(keys):
            del keys[: bucket.first]
            bucket.first = 0
        return early

    def _remove(self, key: int) -> None:
        table = self._tables[key & _TABLE_MASK]
        table.remove(key)
        if not table.due and table.sparse():
            table.due = True
            self._due.append(table)

    def _shrink_one(self) -> None:
        """Shrink the first table queued that is still sparse (ids added since may have
        filled it again). Keys spread evenly over the tables, so they all turn sparse at
        about the same total: shrinking each at once made one ``forget`` rehash dozens."""
        due = self._due
        while due:
            table = due.popleft()
            table.due = False
            if table.sparse():
                table.shrink()
                return
