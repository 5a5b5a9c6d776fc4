"""What every test module shares:

- tests/ on sys.path, so a test in any folder imports the fakes as ``from fakes.cuda_driver
  import install`` (a test's own folder is on sys.path too: its helpers beside it import by name);
- the ``slow`` mark on whole folders of slow tests (the benchmarks' smoke runs and the stress
  mixes), so ``pytest -m "not slow"`` is the quick loop (docs/dev.md, "The quick loop");
- debug-mode teardown (docs/dev.md, "Debug mode"): with NNC_DEBUG=1, after each test module the
  live-object counters must be back where they were before it, and the invariants of the live C
  state must hold. uvloop's debug build checks its handle counters the same way."""

import os
import pathlib
import sys

TESTS = pathlib.Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

# Tests that check two streams really run at once (C backends overlapping on two threads, GIL
# hand-offs) need a pool of at least two threads; the pool defaults to the usable cores, which
# may be one on a CI runner. Set before nnc starts its pool, and inherited by child processes.
# (tests/stream/test_pool.py checks the default and NNC_NUM_THREADS itself.)
os.environ.setdefault("NNC_NUM_THREADS", str(max(2, len(os.sched_getaffinity(0)))
                                             if hasattr(os, "sched_getaffinity") else 2))

import pytest  # noqa: E402

from nnc.base import debug  # noqa: E402

# Folders of tests/ whose every test is slow: the benchmarks' smoke runs and the stress mixes.
# Slow tests elsewhere carry @pytest.mark.slow themselves.
SLOW_FOLDERS = {"benchmarks", "stress"}

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


def pytest_collection_modifyitems(config, items):
    for item in items:
        try:
            folder = item.path.resolve().relative_to(TESTS).parts[0]
        except ValueError:      # a test outside tests/ (a tmp_path copy run by a test)
            continue
        if folder in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)
