"""Big arrays reuse freed memory instead of fresh pages from the kernel (glibc's malloc).

glibc serves a block over its mmap threshold (128 KiB, adapting up to 32 MiB) with a mapping of
its own and unmaps it when it is freed, and it gives the free top of its heap back to the kernel
past a trim threshold. The next array of that size is then fresh pages, which the kernel zeroes
on first touch, one fault per page. Scoring makes and frees dozens of arrays of tens of megabytes
per round (10,000 GPUs x 30 days is 7.1 M hour rows: 57 MB per float64 column): on these machines
that was 57,000 page faults and half the CPU time of building the features. With blocks kept in
the heap and its top kept, a freed block is reused by the next array and the faults stay at zero.

Every thread allocates from the one heap (`M_ARENA_MAX` 1), so what one thread frees the next array
of any thread reuses.

The cost: the process keeps the memory it freed, so its resident size stays at its peak instead
of shrinking between rounds (a scorer reaches that peak every round anyway).

`keep_long_lived` does for Python's cyclic collector what this does for malloc: a long-running
process's modules, model and store (a quarter of a million objects once pandas, scikit-learn and
SQLAlchemy are in) are walked by every full collection, two or three of which a scoring round's
allocations set off: 0.3-0.5 s of a 5 s round at 10,000 GPUs (decision 0090, run 8).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_MAX = -4
M_ARENA_MAX = -8
"""mallopt's parameters (glibc's malloc.h)."""
KEEP_FREE_TOP = 2**31 - 1
"""Free memory at the heap's top kept before any is given back (bytes; mallopt takes an int)."""
TOP_PAD = 64 << 20
"""How much more the heap grows by than asked for, so growing it is one call per 64 MiB."""


def reuse_freed_memory() -> bool:
    """Have glibc's malloc serve big blocks from its heap and keep what is freed, for this process.

    Returns whether it applied: False off Linux or without glibc's mallopt (musl's does nothing),
    where allocation stays as it was.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # One arena for every thread: a thread's own arena keeps what it frees apart from the others', so
    # with the feature families in two threads (`FeatureContext.run_all`) a scoring round's resident
    # peak grew by 860 MB at 10,000 GPUs (decision 0091). Big blocks are few; their lock costs nothing.
    settings = ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, KEEP_FREE_TOP), (M_TOP_PAD, TOP_PAD), (M_ARENA_MAX, 1))
    return all([mallopt(param, value) == 1 for param, value in settings])


_KEPT = False


def keep_long_lived() -> bool:
    """Collect what is garbage now, then leave every object alive now out of the cyclic collector's later
    passes (`gc.freeze`): what a long-running process has once it is up (modules, the model, the store)
    stays, and a full collection walks only what came since. Once per process (the service's scoring loop
    calls it after its first round); returns whether this call did it. What is frozen is still freed by
    its reference count; only a cycle among it would stay, so it is done once, not every round."""
    global _KEPT
    if _KEPT:
        return False
    gc.collect()
    gc.freeze()
    _KEPT = True
    return True
