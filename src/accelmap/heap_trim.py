"""Keep freed heap memory in the process instead of returning it to the kernel at every free.

The cost model's vectorized calls allocate and free hundreds of NumPy temporaries each (arrays of a few hundred
to a few thousand rows). glibc's ``malloc`` gives the top of its heap back to the kernel whenever more than
128 KiB lie free there, so the next call's arrays fault freshly zeroed pages in again: replaying the README
job's 660 vectorized calls of five ResNet-18 layers on eyeriss_like took 184,000-240,000 minor page faults and
0.76-0.82 s of system time beside 4.9-5.6 s of user time; with the top trimmed only past 64 MiB, 23,000 faults
and 0.12 s, the same values. A process that maps layers keeps at most that much more resident.

Only glibc has ``mallopt``; elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1          # glibc's malloc.h
TRIM_THRESHOLD_BYTES = 64 << 20

_done = False


def keep_freed_heap() -> None:
    """Raise glibc's trim threshold to 64 MiB, once per process (forked workers inherit it), unless the
    environment sets it (``MALLOC_TRIM_THRESHOLD_``)."""
    global _done
    if _done or not sys.platform.startswith("linux") or "MALLOC_TRIM_THRESHOLD_" in os.environ:   # the user's own
        return
    _done = True
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    except (OSError, AttributeError):      # not glibc (musl has no mallopt): the default stays
        pass
