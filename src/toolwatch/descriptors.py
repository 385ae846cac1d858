"""Which of this process's own descriptors a path names: ``/dev/stderr``, ``/dev/stdout``,
``/dev/fd/N``, ``/proc/self/fd/N``, ``/proc/PID/fd/N`` (this process's id), or a link whose
chain ends at one of them.

Linux opens such a path as the file its descriptor has open, but not every file: a socket
cannot be opened by name (``open(2)`` fails with ENXIO, "No such device or address"), and
standard error is one under systemd (the journal's stream socket) and under some
supervisors; a descriptor that is not open has no name there at all (ENOENT, "No such file
or directory", which says nothing of a closed descriptor). ``output_files`` writes a copy
of such a socket's descriptor instead, and ``check_outputs`` and ``output_files`` say which
descriptor is not open.

Threading: none; reads links and the process id, no state.
"""

from __future__ import annotations

import os
import re

__all__ = ["descriptor_name", "descriptor_named"]

#: Links followed at most, as Linux follows (``MAXSYMLINKS``) before ELOOP.
_LINKS_FOLLOWED = 40

#: A descriptor's name under ``/proc``, once the directories are resolved (``/dev/fd`` is
#: ``/proc/self/fd``, which is ``/proc/PID/fd``; ``/proc/thread-self/fd``,
#: ``/proc/PID/task/TID/fd``, is the process's too). No leading zero: ``/proc`` has no
#: ``02``, so such a name is no descriptor; nor one past ``os.fstat``'s C int.
_PROC_FD = re.compile(
    r"/proc/(?P<pid>[1-9][0-9]*)(?:/task/[1-9][0-9]*)?/fd/(?P<fd>0|[1-9][0-9]{0,8})"
)

_STANDARD = ("standard input", "standard output", "standard error")


def descriptor_named(path: str) -> int | None:
    """The descriptor of this process that ``path`` names, open or not; ``None`` for any
    other path. Links are followed one at a time, each from its directory resolved, until
    one names ``/proc/PID/fd/N``: ``os.path.realpath`` would follow that one too, to what
    the descriptor has open, which for a socket is no path (``/proc/PID/fd/socket:[INODE]``)."""
    for _ in range(_LINKS_FOLLOWED):
        folder, name = os.path.split(os.path.abspath(path))
        try:
            here = os.path.join(os.path.realpath(folder, strict=True), name)
        except OSError:  # a directory missing, a loop of links
            return None
        found = _PROC_FD.fullmatch(here)
        if found is not None:
            return int(found["fd"]) if int(found["pid"]) == os.getpid() else None
        try:
            path = os.path.join(os.path.dirname(here), os.readlink(here))
        except OSError:  # not a link (EINVAL), or nothing there
            return None
    return None


def descriptor_name(fd: int) -> str:
    """``fd`` for messages: ``descriptor 2 (standard error)``, ``descriptor 7``."""
    if fd < len(_STANDARD):
        return f"descriptor {fd} ({_STANDARD[fd]})"
    return f"descriptor {fd}"
