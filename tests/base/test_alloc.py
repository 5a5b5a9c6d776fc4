"""Repeated runs allocate nothing: C backends take scratch memory from their
stream's or thread's workspace (nnc.base.parallel), signal records are recycled
(nnc.stream.worker), and the runners reuse their task arrays. Checked two ways: tracemalloc
(Python's allocations) and a malloc counter preloaded into a child process (every C allocation,
NumPy's included)."""

import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import pytest

import nnc
from nnc import embed
from nnc.models.inception import build_inception_v3

ROOT = Path(__file__).parent
CC = embed.compiler()


def _runs(g, s):
    if s is None:
        return g.run

    def run():
        g.run(stream=s)
        s.wait()
    return run


@pytest.mark.parametrize("mode", ["sequential", "stream", "scheduled"])
def test_repeated_runs_allocate_no_python_memory(mode):
    g, _, out = build_inception_v3(size=75)
    g.simplify()
    if mode == "scheduled":
        nnc.static_schedule(g, max_streams=2)
    s = None if mode == "sequential" else nnc.Stream()
    run = _runs(g, s)
    for _ in range(3):
        run()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(5):
            run()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(st.size_diff for st in after.compare_to(before, "filename") if st.size_diff > 0)
    # Snapshots themselves and the frames of this test may move a few hundred bytes.
    assert grown < 16 * 1024, after.compare_to(before, "lineno")[:5]


CHILD = textwrap.dedent("""
    import ctypes, sys
    import nnc
    from nnc.models.inception import build_inception_v3
    lib = ctypes.CDLL(None)
    calls, big = lib.nnc_test_malloc_calls, lib.nnc_test_malloc_big
    calls.restype = big.restype = ctypes.c_longlong
    g, x, out = build_inception_v3(size=75)
    g.simplify()
    gs, _, _ = build_inception_v3(size=75)
    gs.simplify()
    nnc.static_schedule(gs, max_streams=2)
    s = nnc.Stream()
    def seq():
        g.run()
    def sched():
        gs.run(stream=s)
        s.wait()
    for name, run in (("sequential", seq), ("scheduled", sched)):
        # Warm for 3 runs and then until ten runs in a row grow nothing: a pool thread's
        # workspace grows the first time it takes a part that needs more, and with many
        # threads (16 on a GPU machine), a sequential run's one spinning helper taking most
        # parts, or a loaded machine delaying a helper, some threads take their first parts
        # only after many runs (five quiet runs were seen not to be enough under load).
        quiet = 0
        for i in range(300):
            b = big()
            run()
            quiet = quiet + 1 if big() == b else 0
            if i >= 2 and quiet >= 10:
                break
        c0, b0 = calls(), big()
        for _ in range(10):
            run()
        print(name, calls() - c0, big() - b0)
""")


@pytest.mark.slow
@pytest.mark.skipif(CC is None, reason="no C compiler (sysconfig CC or cc) found")
@pytest.mark.skipif(sys.platform != "linux", reason="LD_PRELOAD malloc counter: Linux only")
def test_repeated_runs_make_no_heap_allocation(tmp_path):
    """Ten runs of Inception-V3 (75x75), sequential and statically scheduled on streams: no
    allocation of 4 KiB or more (scratch memory, NumPy temporaries) and hardly any at all."""
    shim = tmp_path / "libmalloc_count.so"
    subprocess.run([*CC, "-O1", "-shared", "-fPIC", "-o", str(shim),
                    str(ROOT / "c" / "malloc_count.c"), "-ldl"], check=True)
    env = dict(os.environ, LD_PRELOAD=str(shim))
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    for line in done.stdout.splitlines():
        name, n, n_big = line.split()
        assert int(n_big) == 0, f"{name}: {n_big} allocations of >= 4 KiB in 10 runs"
        # CPython may allocate a little (a frame object, a dict resize) now and then; nnc's
        # runners and backends allocate nothing, so the count must not grow with runs.
        assert int(n) <= 10, f"{name}: {n} heap allocations in 10 runs"
