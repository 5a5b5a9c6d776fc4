"""Every ``timeout=`` of nnc goes through one check (``nnc.base.core.timeout_seconds``): None or
+inf waits forever, a negative timeout is 0 (as ``threading.Event.wait``), NaN and anything
but a real number raise the subsystem's NNCError (docs/threading.md, "Timeouts").

Each wait below has work that never finishes until the test lets it, so a NaN taken for
"forever" would hang: it runs in a subprocess with a timeout."""

import math
import pathlib
import subprocess
import sys
import textwrap

import pytest

import nnc
from nnc.base.core import timeout_seconds

ROOT = pathlib.Path(__file__).resolve().parents[2]

# name -> (setup code defining ``wait(timeout)``, ``release()`` and ``ERROR``, the value a
# wait that timed out returns, or "raises" when it raises PipelineError instead)
WAITS = {
    "Stream.wait": ("""
        s = nnc.Stream()
        s.add_callback(lambda: gate.wait(60))
        wait, ERROR = s.wait, nnc.StreamError
        """, False),
    "Signal.wait": ("""
        s, sig = nnc.Stream(), nnc.Signal()
        s.add_callback(lambda: gate.wait(60))
        s.emit(sig)
        wait, ERROR = sig.wait, nnc.StreamError
        """, False),
    "Engine.wait_all": ("""
        eng = nnc.Engine()
        eng.push(lambda: gate.wait(60), mutate=[eng.new_var()])
        wait, ERROR = eng.wait_all, nnc.EngineError
        """, False),
    "Engine.wait_for_var": ("""
        eng = nnc.Engine()
        v = eng.new_var()
        eng.push(lambda: gate.wait(60), mutate=[v])
        wait, ERROR = (lambda timeout: eng.wait_for_var(v, timeout)), nnc.EngineError
        """, False),
    "Scheduler.join": ("""
        from nnc.coro import Scheduler, WaitFor

        class Gate:
            def coro_arm(self, wake):
                threading.Thread(target=lambda: (gate.wait(60), wake())).start()
                return True

        def task():
            yield WaitFor(Gate())

        sched = Scheduler()
        sched.spawn(task())
        wait, ERROR = sched.join, nnc.StreamError
        """, False),
    "PipelineModule.get_output": ("""
        pm = chain()
        pm.run()
        wait, ERROR = (lambda timeout: pm.get_output(timeout=timeout)), PipelineError
        """, None),
    "PipelineModule.run": ("""
        pm = chain()
        pm.run()                        # depth 1: the next run waits for a slot
        wait, ERROR = (lambda timeout: pm.run(timeout=timeout)), PipelineError
        """, "raises"),
    "PipelineModule.close": ("""
        pm = chain()
        pm.run()
        wait, ERROR = (lambda timeout: pm.close(timeout=timeout)), PipelineError
        """, "raises"),
    "debug.leaks": ("""
        import nnc.base.debug
        before = nnc.base.debug.counters()
        kept = nnc.Stream()             # a live stream: the counters never balance
        # Timed out: the kept stream still counted as a leak (with NNC_DEBUG=1; without it
        # nothing is counted and leaks() has nothing to report).
        counting = nnc.base.debug.enabled()
        wait = lambda timeout: bool(nnc.base.debug.leaks(before, timeout)) == counting
        ERROR = nnc.StreamError
        """, True),
}

PRELUDE = """
    import math, threading
    import numpy as np
    import nnc
    from nnc import pipeline
    from nnc.pipeline import PipelineError

    gate = threading.Event()

    def chain():
        m = pipeline.Module.function(lambda x: (gate.wait(60), x)[1], inputs={"x": None},
                                     outputs=[None], name="gated")
        cfg = pipeline.PipelineConfig()
        cfg.inputs["in"] = (m, "x")
        cfg.outputs.append((m, 0))
        pm = pipeline.build(cfg, depth=1)
        pm.set_input("in", np.zeros(1))
        return pm
"""

CHECKS = """
    def outcome(timeout):
        try:
            return wait(timeout)
        except PipelineError as exc:
            assert "in flight" in str(exc) or "full" in str(exc), str(exc)
            return "raises"

    try:
        for bad, why in ((math.nan, "NaN"), (float("-nan"), "NaN"), ("1", "str"),
                         (True, "bool"), ([1], "list")):
            try:
                wait(bad)
            except ERROR as exc:
                assert isinstance(exc, nnc.NNCError) and why in str(exc), repr(exc)
            else:
                raise AssertionError(f"timeout={bad!r} accepted")
        assert outcome(0) == TIMED_OUT, outcome(0)
        for negative in (-1, -0.5, -math.inf):     # as 0: return at once
            assert outcome(negative) == TIMED_OUT, negative
    finally:
        gate.set()                      # a failure above still lets the process end
    print("ok")
"""


@pytest.mark.parametrize("name", sorted(WAITS))
def test_nan_is_refused_and_a_negative_timeout_is_zero(name):
    setup, timed_out = WAITS[name]
    code = (textwrap.dedent(PRELUDE) + textwrap.dedent(setup)
            + f"TIMED_OUT = {timed_out!r}\n" + textwrap.dedent(CHECKS))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_infinity_waits_like_none():
    s = nnc.Stream()
    s.add_callback(lambda: None)
    assert s.wait(timeout=math.inf) is True
    assert timeout_seconds(math.inf) == timeout_seconds(None) == -1
    assert timeout_seconds(10 ** 400) == -1 and timeout_seconds(-10 ** 400) == 0


@pytest.mark.parametrize("value, seconds", [(0, 0.0), (2, 2.0), (0.25, 0.25), (-3, 0.0),
                                            (-math.inf, 0.0)])
def test_timeout_seconds(value, seconds):
    assert timeout_seconds(value) == seconds


def test_timeout_seconds_accepts_numpy_numbers_and_names_the_error_class():
    np = pytest.importorskip("numpy")
    assert timeout_seconds(np.float32(0.5)) == 0.5 and timeout_seconds(np.int64(3)) == 3.0
    with pytest.raises(nnc.StreamError, match="NaN"):
        timeout_seconds(np.float64("nan"))
    with pytest.raises(nnc.EngineError, match="not str"):
        timeout_seconds("1", nnc.EngineError)
