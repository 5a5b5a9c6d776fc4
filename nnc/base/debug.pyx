"""Debug mode: live-object counters and invariant checks (docs/dev.md, "Debug mode").

Not an NNC port: NNC leans on LeakSanitizer (test/unit/nnc/known-leaks.txt); nnc follows uvloop
(a debug build whose counters the test teardown checks). ``NNC_DEBUG=1`` in the environment when
nnc is first imported turns debug mode on for the whole process (nnc.base.core.DEBUG).

State: ``debug_counts`` (nnc/base/debug.pxd), one C long per kind of object, changed by
``debug_count`` next to each allocation and free in the modules that own the objects (tasks and
signal records in stream.pyx; streams, tasks run and pool threads serving streams in worker.pyx;
graphs in graph/graph.pyx, tensors in tensor.pyx), with atomic adds because pool threads count
without the GIL.
With debug mode off the counters stay zero and counting costs one untaken branch.

``check()`` runs the invariant checks that higher modules register here (nnc/check/invariants.pyx
registers those of streams, graphs and tensors), so this module imports nothing above _core.
"""

import gc
import threading
import time

from nnc.base.core import DEBUG, NNCError, timeout_seconds

debug_on = DEBUG

NAMES = ("streams", "workers", "tasks", "records", "graphs", "tensors")

_checks = []                            # callables run by check(), each returns a list of str


class DebugError(NNCError, AssertionError):
    """An invariant of nnc's C state does not hold, or live objects did not balance."""


def counters():
    """Live objects by kind: ``{"streams": n, "workers": n, "tasks": n, "records": n,
    "graphs": n, "tensors": n}``. All zero unless debug mode is on (``enabled()``)."""
    cdef int i
    return {NAMES[i]: __atomic_load_n(&debug_counts[i], __ATOMIC_RELAXED)
            for i in range(<int>DEBUG_COUNTER_COUNT)}


def enabled():
    """True if NNC_DEBUG was set when nnc was imported."""
    return debug_on


def register_check(fn):
    """Make ``check()`` call ``fn()``, which returns a list of broken invariants (strings)."""
    _checks.append(fn)
    return fn


def problems():
    """Every broken invariant of the live C state, as strings (an empty list if all hold).

    Safe to call while streams run: each check takes the lock that guards what it reads.
    """
    out = []
    for fn in _checks:
        out.extend(fn())
    return out


def check():
    """Raise DebugError naming every broken invariant of the live C state (streams, their queued
    tasks and signal records, graphs, tensors); return None if all hold. Works with debug mode
    off too (the checks need no counters); it walks every live object, so it is not cheap."""
    found = problems()
    if found:
        raise DebugError("nnc invariants broken:\n  " + "\n  ".join(found))


def _coro_threads():
    # Coroutine scheduler threads (nnc.coro.Scheduler names them nnc-coro...) exit when nothing
    # is ready or blocked. Process-wide helpers (the CUDA host-function watcher) live on.
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("nnc-coro"))


def leaks(baseline, timeout=10.0):
    """Compare the counters with ``baseline`` (an earlier ``counters()``) once things settle.

    Collects garbage and waits, up to ``timeout`` seconds (None or +inf: no limit), for queued
    work to finish (dropped streams' included) and nnc's coroutine scheduler threads to end.
    Returns
    ``{name: (before, now)}`` for every counter that still differs from ``baseline``, plus
    ``"threads": (0, [names])`` if coroutine scheduler threads still run; ``{}`` if all balance.
    """
    cdef double limit = timeout_seconds(timeout)
    deadline = None if limit < 0 else time.monotonic() + limit
    while True:
        gc.collect()
        now = counters()
        diff = {k: (baseline[k], v) for k, v in now.items() if v != baseline.get(k, 0)}
        threads = _coro_threads()
        if threads:
            diff["threads"] = (0, threads)
        if not diff or (deadline is not None and time.monotonic() >= deadline):
            return diff
        time.sleep(0.01)
