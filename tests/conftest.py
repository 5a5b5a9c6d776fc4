"""Debug-mode teardown (docs/dev.md, "Debug mode"): with NNC_DEBUG=1, after each test module the
live-object counters must be back where they were before it, and the invariants of the live C
state must hold. uvloop's debug build checks its handle counters the same way."""

import os

import pytest

from nnc import debug

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
