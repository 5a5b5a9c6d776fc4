"""Debug-mode teardown (docs/dev.md, "Debug mode"): with NNC_DEBUG=1, after each test module the
live-object counters must be back where they were before it, and the invariants of the live C
state must hold. uvloop's debug build checks its handle counters the same way."""

import os

# Tests that check two streams really run at once (C backends overlapping on two threads, GIL
# hand-offs) need a pool of at least two threads; the pool defaults to the usable cores, which
# may be one on a CI runner. Set before nnc starts its pool, and inherited by child processes.
# (tests/test_pool.py checks the default and NNC_NUM_THREADS itself.)
os.environ.setdefault("NNC_NUM_THREADS", str(max(2, len(os.sched_getaffinity(0)))
                                             if hasattr(os, "sched_getaffinity") else 2))

import pytest  # noqa: E402

from nnc.base import debug  # noqa: E402

# Seconds to wait for dropped streams' workers to drain and exit and coroutine threads to end
# before calling what is left a leak.
SETTLE_TIMEOUT = float(os.environ.get("NNC_DEBUG_SETTLE", "20"))


@pytest.fixture(scope="module", autouse=True)
def nnc_objects_balance(request):
    if not debug.enabled():
        yield
        return
    baseline = debug.counters()
    yield
    leaked = debug.leaks(baseline, timeout=SETTLE_TIMEOUT)
    broken = debug.problems()
    lines = [f"{name}: {before} before the module, {now} after it"
             for name, (before, now) in leaked.items()]
    lines += broken
    if lines:
        pytest.fail(f"{request.module.__name__} left nnc state behind (NNC_DEBUG=1):\n  "
                    + "\n  ".join(lines), pytrace=False)
