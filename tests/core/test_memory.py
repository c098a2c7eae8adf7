"""reuse_freed_memory: a big array freed and made again costs no fresh pages (in a child process,
so this one's allocator is left as it is)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHILD = """
import json, resource, sys
import numpy as np
from core.memory import reuse_freed_memory
applied = reuse_freed_memory() if sys.argv[1] == "reuse" else None
faults = []
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = np.ones(8_000_000)  # 64 MB, past glibc's largest mmap threshold
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    del a
import threading
in_thread = []
def grow():  # 32 MB: what a thread's own arena (64 MB heaps) would serve from pages of its own
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    b = np.ones(4_000_000)
    in_thread.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    del b
worker = threading.Thread(target=grow)
worker.start()
worker.join()
print(json.dumps({"applied": applied, "faults": faults, "in_thread": in_thread}))
"""


def child(mode: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc is Linux's")
def test_a_freed_big_array_is_reused_without_new_page_faults() -> None:
    fresh, reused = child("fresh"), child("reuse")
    assert reused["applied"] is True
    # Without it every 64 MB array is a new mapping: hundreds of faults (one per 4 KiB or 2 MiB page).
    assert all(int(f) > 10 for f in fresh["faults"])  # type: ignore[attr-defined]
    # With it the first array grows the heap; the next ones reuse the freed block, in another thread too.
    assert reused["faults"][1:] == [0, 0]  # type: ignore[index]
    # A thread's 32 MB block from the one heap: a fault or so (its first call), not one per page (660
    # measured with a thread arena of its own).
    assert int(reused["in_thread"][0]) < 10  # type: ignore[index]
    assert int(fresh["in_thread"][0]) > 10  # type: ignore[index]


FREEZE_CHILD = """
import gc, json
from core.memory import keep_long_lived
import pandas  # a module's worth of long-lived objects
before = len(gc.get_objects())
first, again = keep_long_lived(), keep_long_lived()
print(json.dumps({"first": first, "again": again, "before": before, "walked": len(gc.get_objects()),
                  "frozen": gc.get_freeze_count()}))
"""


def test_long_lived_objects_are_left_out_of_later_collections_once() -> None:
    out = subprocess.run([sys.executable, "-c", FREEZE_CHILD], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["first"] is True and got["again"] is False  # once per process
    # What a full collection walks afterwards: what came since, not pandas' objects.
    assert got["before"] > 10_000 and got["walked"] < got["before"] // 10
    assert got["frozen"] >= got["before"] // 2
