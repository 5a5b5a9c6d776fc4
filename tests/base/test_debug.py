"""Debug mode (docs/dev.md, "Debug mode"): live-object counters, invariant checks, and the
pytest teardown that fails a test module leaving nnc objects behind. NNC_DEBUG is read when nnc
is imported, so what needs it on runs in a child process."""

import os
import pathlib
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import nnc
from nnc.base import debug

HERE = pathlib.Path(__file__).resolve().parent
TIMEOUT = 60


def run_child(code, debug_on=True, **kw):
    env = dict(os.environ, NNC_DEBUG="1" if debug_on else "0")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=TIMEOUT, env=env, **kw)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_counters_follow_each_kind_of_object():
    run_child("""
        import threading
        import numpy as np
        import nnc
        from nnc.base import debug
        assert debug.enabled() and nnc.base.core.DEBUG
        base = debug.counters()
        assert set(base) == {"streams", "workers", "tasks", "records", "graphs", "tensors"}

        def grew(**expect):
            now = debug.counters()
            for k, v in expect.items():
                assert now[k] - base[k] == v, (k, now, base)

        s, sig, gate = nnc.Stream("cpu"), nnc.Signal("cpu"), threading.Event()
        x = nnc.Tensor(np.ones(4, np.float32))
        g = nnc.Graph()
        g.exec(nnc.Cmd("EWSUM"), [x, x], [nnc.Tensor.zeros(4)])
        grew(streams=1, graphs=1, tensors=2, tasks=0, records=0)
        s.add_callback(lambda: gate.wait(30))
        s.emit(sig)
        g.run(stream=s)
        grew(records=1)
        assert debug.counters()["tasks"] - base["tasks"] >= 3  # callback, emit, the run's node
        assert debug.counters()["workers"] - base["workers"] <= 1
        debug.check()                     # invariants hold with work queued
        gate.set()
        s.wait()
        grew(tasks=0, records=1)          # the signal still holds its latest record
        del s, sig, g, x
        assert debug.leaks(base, timeout=30) == {}, debug.counters()
    """)


def test_counters_stay_zero_with_debug_mode_off():
    run_child("""
        import nnc
        from nnc.base import debug
        assert not debug.enabled()
        s = nnc.Stream("cpu")
        s.add_callback(lambda: None)
        keep = [nnc.Tensor.zeros(3), nnc.Graph(), nnc.Signal("cpu")]
        s.wait()
        assert set(debug.counters().values()) == {0}, debug.counters()
    """, debug_on=False)


def test_check_passes_on_busy_streams_graphs_and_tensors():
    gate = threading.Event()
    s = nnc.Stream("cpu")
    x = nnc.Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    v = x.view((2, 2), offset=1, strides=(4, 1))
    y = nnc.Tensor.zeros((3, 4))
    g = nnc.Graph()
    a = g.exec(nnc.Cmd("EWSUM"), [x, x], [y])
    b = g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [y], [y])
    g.concat(a, b)
    nnc.static_schedule(g, max_streams=2)
    nnc.cmd_exec(nnc.Cmd.custom(lambda i, o: gate.wait(TIMEOUT)), [], [v], stream=s)
    g.run(stream=s)
    try:
        assert debug.problems() == []
        debug.check()
    finally:
        gate.set()
        s.wait()
    debug.check()


def test_check_raises_naming_each_broken_invariant():
    fake = debug.register_check(lambda: ["<Graph at 0x1>: node #0 has flags 0x6, not one kind"])
    try:
        with pytest.raises(debug.DebugError, match="not one kind") as info:
            debug.check()
        assert isinstance(info.value, nnc.NNCError)
    finally:
        debug._checks.remove(fake)
    debug.check()


@pytest.mark.slow
def test_teardown_fails_a_module_that_leaks(tmp_path):
    """The conftest fixture, run on a module that keeps a stream and a graph alive."""
    (tmp_path / "conftest.py").write_text((HERE.parent / "conftest.py").read_text())
    (tmp_path / "test_leaky.py").write_text(textwrap.dedent("""
        import nnc
        KEEP = []

        def test_leak():
            KEEP.append(nnc.Stream("cpu"))
            KEEP.append(nnc.Graph())

        def test_clean():
            s = nnc.Stream("cpu")
            s.add_callback(lambda: None)
    """))
    env = dict(os.environ, NNC_DEBUG="1", NNC_DEBUG_SETTLE="0.5")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(tmp_path)], capture_output=True, text=True, timeout=TIMEOUT,
                         env=env, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "test_leaky left nnc state behind" in out.stdout, out.stdout
    assert "streams: 0 before the module, 1 after it" in out.stdout, out.stdout
    assert "graphs: 0 before the module, 1 after it" in out.stdout, out.stdout
    assert "2 passed, 1 error" in out.stdout, out.stdout


def test_check_passes_on_a_live_loop_with_carry_overs():
    # A carry-over keeps the memory its source held in a tensor of its own; that tensor was a
    # half-made header (memory but no dtype) until the loop's first save, and debug.check()
    # reported it as broken for as long as the graph lived.
    g, body = nnc.Graph(), nnc.Graph()
    x = nnc.Tensor(np.ones(2, np.float32))
    y = nnc.Tensor(np.zeros(2, np.float32))
    n = body.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [y])
    body.set_while_expr(lambda count: count < 3, [], [n])
    body.add_carry_over(y, x)
    g.while_(body)
    assert [p for p in debug.problems() if "Tensor" in p] == []
    g.run()
    assert body.while_count == 3
    assert [p for p in debug.problems() if "Tensor" in p] == []
