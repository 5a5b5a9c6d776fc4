"""nnc.pipeline's local executor: stages on nnc streams, several inputs in flight, outputs in
input order, failures reported per input, back-pressure and close (docs/pipeline.md).

Every wait here is bounded (timeouts of a few seconds) so a bug fails instead of hanging."""

import pathlib
import random
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from _pipeline_rfc import closed_form, rfc_config, run_sequential

import nnc
from nnc import pipeline
from nnc.pipeline import PipelineError

T = 10.0        # seconds: the bound on every wait
ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_py(code, timeout=60):
    """Run ``code`` in a fresh interpreter: a hang fails the test instead of the suite."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def chain(*fns, depth=4, spec=None):
    """A linear pipeline of function stages, global input "in" -> fns... -> output 0."""
    mods = [pipeline.Module.function(f, inputs={"x": spec}, outputs=[spec], name=f"s{i}")
            for i, f in enumerate(fns)]
    cfg = pipeline.PipelineConfig()
    cfg.inputs["in"] = (mods[0], "x")
    for a, b in zip(mods, mods[1:]):
        cfg.connect(a, 0, b, "x")
    cfg.outputs.append((mods[-1], 0))
    return pipeline.build(cfg, depth=depth)


def test_rfc_network_5_rounds_against_sequential():
    """The RFC's test: 5 rounds of set_input + run, each output polled at most 5 times 1 s
    apart, equal to running the three modules one after another."""
    cfg, _ = rfc_config()
    _, ref_mods = rfc_config()
    rng = np.random.default_rng(0)
    pm = pipeline.build(cfg)
    for _ in range(5):
        a = rng.standard_normal((3, 3)).astype(np.float32)
        b = rng.standard_normal((3, 3)).astype(np.float32)
        pm.set_input("data_a", a)
        pm.set_input("data_b", b)
        pm.run()
        assert pm.num_executing() in (0, 1)
        out = None
        for _ in range(5):
            out = pm.get_output(timeout=1.0)
            if out is not None:
                break
        assert out is not None
        want = run_sequential(ref_mods, a, b)
        for got, ref, closed in zip(out, want, closed_form(a, b)):
            np.testing.assert_allclose(got, ref, rtol=1e-6)
            np.testing.assert_allclose(got, closed, rtol=1e-5, atol=1e-5)
        assert pm.num_executing() == 0
    pm.close()


def test_rfc_network_many_in_flight():
    cfg, _ = rfc_config()
    pm = pipeline.build(cfg, depth=3)
    inputs = [(np.full((3, 3), k, np.float32), np.full((3, 3), -k, np.float32))
              for k in range(20)]
    outs = []
    for a, b in inputs:
        pm.set_input("data_a", a)
        pm.set_input("data_b", b)
        pm.run(timeout=T)
        assert 1 <= pm.num_executing() <= 3
        while pm.has_next_output():
            outs.append(pm.get_output(block=False))
    while len(outs) < len(inputs):
        outs.append(pm.get_output(timeout=T))
    for (a, b), out in zip(inputs, outs):
        for got, want in zip(out, closed_form(a, b)):
            np.testing.assert_allclose(got, want, rtol=1e-6)
    assert pm.get_output(block=False) is None and not pm.has_next_output()
    pm.close()


def test_num_executing_counts_inputs_in_flight():
    gate = threading.Event()
    pm = chain(lambda x: (gate.wait(T), x)[1], depth=4)
    for k in range(3):
        pm.set_input("in", np.array([k]))
        pm.run(block=False)
        assert pm.num_executing() == k + 1
    assert not pm.has_next_output() and pm.get_output(block=False) is None
    gate.set()
    assert [pm.get_output(timeout=T)[0][0] for _ in range(3)] == [0, 1, 2]
    assert pm.num_executing() == 0
    pm.close()


def test_outputs_in_input_order_under_random_delays():
    """A diamond of function stages sleeping at random: every output comes back, in order."""
    rng = random.Random(7)
    lock = threading.Lock()

    def delayed(f):
        def stage(**kw):
            with lock:
                pause = rng.uniform(0, 0.004)
            time.sleep(pause)
            return f(**kw)
        return stage

    spec = ("int64", (2,))
    top = pipeline.Module.function(delayed(lambda x: x * 2), inputs={"x": spec},
                                   outputs=[spec], name="top")
    left = pipeline.Module.function(delayed(lambda x: x + 1), inputs={"x": spec},
                                    outputs=[spec], name="left")
    right = pipeline.Module.function(delayed(lambda x: (x - 1, x * x)), inputs={"x": spec},
                                     outputs=[spec, spec], name="right")
    bottom = pipeline.Module.function(delayed(lambda x, y: x * 100 + y),
                                      inputs={"x": spec, "y": spec}, outputs=[spec],
                                      name="bottom")
    cfg = pipeline.PipelineConfig()
    cfg.inputs["in"] = (top, "x")
    cfg.connect(top, 0, left, "x")
    cfg.connect(top, 0, right, "x")
    cfg.connect(left, 0, bottom, "x")
    cfg.connect(right, 0, bottom, "y")
    cfg.outputs.append((bottom, 0))
    cfg.outputs.append((right, 1))
    pm = pipeline.build(cfg, depth=8)
    n = 60
    got = []
    for k in range(n):
        pm.set_input("in", np.array([k, -k]))
        pm.run(timeout=T)
        out = pm.get_output(block=False)
        if out is not None:
            got.append(out)
    while len(got) < n:
        got.append(pm.get_output(timeout=T))
    for k, (b, sq) in enumerate(got):
        x = np.array([2 * k, -2 * k])
        np.testing.assert_array_equal(b, (x + 1) * 100 + (x - 1))
        np.testing.assert_array_equal(sq, x * x)
    pm.close()


def test_error_in_a_middle_stage_fails_only_that_input():
    seen = []

    def middle(x):
        seen.append(int(x[0]))
        if x[0] == 3:
            raise ValueError("three is bad")
        return x * 10

    pm = chain(lambda x: x + 1, middle, lambda x: x - 1, depth=4)
    for k in range(8):
        pm.set_input("in", np.array([k - 1]))
        pm.run(timeout=T)
    results = []
    for _ in range(8):
        try:
            results.append(int(pm.get_output(timeout=T)[0][0]))
        except PipelineError as e:
            assert "stage s1 failed on input #3" in str(e)
            assert isinstance(e.__cause__, ValueError)
            results.append(None)
    assert results == [k * 10 - 1 if k != 3 else None for k in range(8)]
    # Still usable afterwards.
    pm.set_input("in", np.array([4]))
    pm.run()
    assert pm.get_output(timeout=T)[0][0] == 49
    pm.close()


def test_error_in_a_graph_stage_is_reported_for_its_input():
    """A failing command of a graph stage (a CUSTOM command raising) fails that input only;
    the next run of the graph works."""
    def body(inputs, outputs):
        if inputs[0][0] < 0:
            raise ArithmeticError("negative")
        outputs[0][...] = inputs[0] * 2

    g = nnc.Graph()
    x = nnc.Tensor(np.zeros(2, np.float32))
    y = nnc.Tensor(np.zeros(2, np.float32))
    g.exec(nnc.Cmd.custom(body), [x], [y])
    m = pipeline.Module(g, inputs={"x": x}, outputs=[y], name="doubler")
    after = pipeline.Module.function(lambda v: v + 1, inputs={"v": ("float32", (2,))},
                                     outputs=[("float32", (2,))], name="after")
    cfg = pipeline.PipelineConfig()
    cfg.inputs["in"] = (m, "x")
    cfg.connect(m, 0, after, "v")
    cfg.outputs.append((after, 0))
    pm = pipeline.build(cfg, depth=2)
    for v in (1.0, -1.0, 2.0):
        pm.set_input("in", np.full(2, v, np.float32))
        pm.run(timeout=T)
    np.testing.assert_array_equal(pm.get_output(timeout=T)[0], [3, 3])
    with pytest.raises(PipelineError, match="stage doubler failed on input #1") as info:
        pm.get_output(timeout=T)
    assert isinstance(info.value.__cause__, nnc.StreamError)
    assert isinstance(info.value.__cause__.__cause__, ArithmeticError)
    np.testing.assert_array_equal(pm.get_output(timeout=T)[0], [5, 5])
    pm.close()


def test_run_time_checks_of_undeclared_specs():
    """What a function returns is checked against its declaration at run time; an unknown
    spec is checked where it meets a declared one."""
    pm = chain(lambda x: x if x[0] else np.zeros(3, np.float32),
               lambda x: x, spec=("float32", None))
    calls = [np.ones(2, np.float32), np.zeros(2, np.float32), np.ones(2, np.int32)]
    for a in calls[:2]:
        pm.set_input("in", a)
        pm.run()
    np.testing.assert_array_equal(pm.get_output(timeout=T)[0], [1, 1])
    np.testing.assert_array_equal(pm.get_output(timeout=T)[0], [0, 0, 0])
    with pytest.raises(PipelineError, match="dtype"):
        pm.set_input("in", calls[2])          # declared float32: refused at set_input
    pm.close()

    loose = pipeline.Module.function(lambda x: [x, x], inputs={"x": None},
                                     outputs=[None], name="loose")
    strict = pipeline.Module.function(lambda x: x, inputs={"x": ("float32", (2,))},
                                      outputs=[None], name="strict")
    cfg = pipeline.PipelineConfig()
    cfg.inputs["in"] = (loose, "x")
    cfg.connect(loose, 0, strict, "x")
    cfg.outputs.append((strict, 0))
    pm = pipeline.build(cfg)
    pm.set_input("in", np.zeros(2, np.float32))
    pm.run()
    with pytest.raises(PipelineError, match="loose returned 2 value"):
        pm.get_output(timeout=T)
    pm.close()


def test_inputs_are_copied_and_stage_inputs_are_read_only():
    def scribble(x):
        x[0] = 99                       # a stage may not change what it was handed
        return x

    pm = chain(lambda x: x, depth=2)
    a = np.array([1, 2])
    pm.set_input("in", a)
    a[0] = 7                            # the caller reuses its array at once
    pm.run()
    pm.run()                            # the inputs stay set for later runs
    assert pm.get_output(timeout=T)[0].tolist() == [1, 2]
    assert pm.get_output(timeout=T)[0].tolist() == [1, 2]
    pm.close()
    pm = chain(scribble)
    pm.set_input("in", a)
    pm.run()
    with pytest.raises(PipelineError, match="read-only"):
        pm.get_output(timeout=T)
    pm.close()


def test_two_global_outputs_of_one_module_output_are_distinct_arrays():
    m = pipeline.Module.function(lambda x: x + 1, inputs={"x": None}, outputs=[None])
    cfg = pipeline.PipelineConfig()
    cfg.inputs["in"] = (m, "x")
    cfg.outputs.append((m, 0))
    cfg.outputs.append((m, 0))
    with pipeline.build(cfg) as pm:
        pm.set_input("in", np.zeros(2))
        pm.run()
        a, b = pm.get_output(timeout=T)
        assert a is not b and a.tolist() == b.tolist() == [1, 1]


def test_caller_errors():
    pm = chain(lambda x: x)
    with pytest.raises(PipelineError, match="not set"):
        pm.run()
    with pytest.raises(PipelineError, match="no global input 'out'"):
        pm.set_input("out", np.zeros(1))
    assert pm.get_output(block=False) is None
    with pytest.raises(PipelineError, match="no input in flight"):
        pm.get_output()
    assert pm.get_output(timeout=0.05) is None      # waited for another thread's run
    with pytest.raises(PipelineError, match="timeout"):
        pm.get_output(timeout="soon")
    cfg, _ = rfc_config()
    rfc = pipeline.build(cfg)
    with pytest.raises(PipelineError, match="feeds mod1.data_0, declared float32\\(3, 3\\)"):
        rfc.set_input("data_a", np.zeros((2, 3), np.float32))
    rfc.close()
    pm.close()


def test_back_pressure():
    gate = threading.Event()
    pm = chain(lambda x: (gate.wait(T), x)[1], depth=2)
    pm.set_input("in", np.array([0]))
    pm.run()
    pm.run(block=False)
    assert pm.num_executing() == 2
    with pytest.raises(PipelineError, match="full"):
        pm.run(block=False)
    t0 = time.monotonic()
    with pytest.raises(PipelineError, match="full: no slot freed within 0.2 s"):
        pm.run(timeout=0.2)
    assert time.monotonic() - t0 >= 0.15
    returned = threading.Event()

    def feeder():
        pm.run(timeout=T)               # blocks until a slot frees
        returned.set()

    t = threading.Thread(target=feeder)
    t.start()
    assert not returned.wait(0.3)       # still blocked: the pipeline is full
    gate.set()
    assert returned.wait(T)
    t.join(T)
    for _ in range(3):
        assert pm.get_output(timeout=T)[0][0] == 0
    pm.close()


def test_close_waits_then_refuses():
    gate = threading.Event()
    done = []
    pm = chain(lambda x: (gate.wait(T), done.append(1), x)[2], depth=3)
    pm.set_input("in", np.array([1]))
    pm.run()
    pm.run()
    threading.Timer(0.2, gate.set).start()
    pm.close(timeout=T)
    assert done == [1, 1] and pm.num_executing() == 0
    for call in (lambda: pm.set_input("in", np.zeros(1)), pm.run, pm.get_output,
                 pm.has_next_output):
        with pytest.raises(PipelineError, match="closed"):
            call()
    pm.close()                          # twice: fine
    assert "closed" in repr(pm)


def test_close_with_timeout_while_busy():
    gate = threading.Event()
    pm = chain(lambda x: (gate.wait(T), x)[1])
    pm.set_input("in", np.array([1]))
    pm.run()
    with pytest.raises(PipelineError, match="still in flight"):
        pm.close(timeout=0.1)
    with pytest.raises(PipelineError, match="closed"):
        pm.run()
    gate.set()
    pm.close(timeout=T)


def test_close_wakes_a_blocked_get_output():
    gate = threading.Event()
    pm = chain(lambda x: (gate.wait(T), x)[1])
    pm.set_input("in", np.array([1]))
    pm.run()
    errors = []

    def consumer():
        try:
            pm.get_output(timeout=T)
        except PipelineError as e:
            errors.append(e)

    t = threading.Thread(target=consumer)
    t.start()
    time.sleep(0.1)
    threading.Timer(0.2, gate.set).start()
    pm.close(timeout=T)
    t.join(T)
    assert not t.is_alive() and len(errors) == 1 and "closed" in str(errors[0])


def test_blocking_calls_inside_a_stage_are_refused():
    holder = {}

    def stage(x):
        holder["pm"].close()            # would wait for this very stage
        return x

    pm = chain(stage)
    holder["pm"] = pm
    pm.set_input("in", np.array([1]))
    pm.run()
    with pytest.raises(PipelineError, match="inside a pipeline stage") as info:
        pm.get_output(timeout=T)
    assert "stage s0 failed" in str(info.value)
    pm.close(timeout=T)


def test_statically_scheduled_graph_stage():
    """A graph stage with a default static schedule runs on the schedule's streams."""
    g = nnc.Graph()
    x = nnc.Tensor(np.zeros(4, np.float32))
    a, b, y = (nnc.Tensor(np.zeros(4, np.float32)) for _ in range(3))
    e1 = g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [a])
    e2 = g.exec(nnc.Cmd("SCALAR_MUL", a=3.0), [x], [b])
    e3 = g.exec(nnc.Cmd("EWSUM"), [a, b], [y])
    g.concat(e1, e3)
    g.concat(e2, e3)
    nnc.static_schedule(g)
    assert g.schedule is not None and g.schedule.stream_count == 2
    m = pipeline.Module(g, inputs={"x": x}, outputs=[y], name="sched")
    cfg = pipeline.PipelineConfig()
    cfg.inputs["in"] = (m, "x")
    cfg.outputs.append((m, 0))
    with pipeline.build(cfg, depth=4) as pm:
        for k in range(10):
            pm.set_input("in", np.full(4, k, np.float32))
            pm.run(timeout=T)
        for k in range(10):
            np.testing.assert_array_equal(pm.get_output(timeout=T)[0], np.full(4, 5 * k))


def test_several_threads_at_once():
    """Feeding and collecting from several threads: nothing is lost, duplicated or mixed
    up (each set_input + run pair under the feeders' own lock, as docs/pipeline.md says)."""
    pm = chain(lambda x: x * 2, lambda x: x + 1, depth=3)
    feed = threading.Lock()
    got, errors = [], []
    n = 40

    def feeder(base):
        try:
            for k in range(n):
                with feed:
                    pm.set_input("in", np.array([base + k]))
                    pm.run(timeout=T)
        except Exception as e:          # pragma: no cover - reported below
            errors.append(e)

    def consumer():
        try:
            for _ in range(2 * n):
                out = None
                while out is None:
                    out = pm.get_output(timeout=T)
                got.append(int(out[0][0]))
        except Exception as e:          # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=feeder, args=(b,)) for b in (0, 1000)]
    threads.append(threading.Thread(target=consumer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(3 * T)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert sorted(got) == sorted(2 * v + 1 for b in (0, 1000) for v in range(b, b + n))
    # Each feeder's inputs come back in the order it ran them.
    for b in (0, 1000):
        mine = [v for v in got if (v - 1) // 2 - b in range(n)]
        assert mine == sorted(mine)
    pm.close()


def test_stages_cost_no_threads():
    before = threading.active_count()
    pm = chain(*[lambda x: x + 1] * 30, depth=4)
    for k in range(10):
        pm.set_input("in", np.array([k]))
        pm.run(timeout=T)
    assert [pm.get_output(timeout=T)[0][0] for _ in range(10)] == [k + 30 for k in range(10)]
    assert threading.active_count() <= max(before, nnc.get_num_threads() + 1)
    pm.close()


def test_stream_take_errors():
    """The stream hook graph stages use: failures recorded so far, taken without waiting."""
    s = nnc.Stream()
    s.add_callback(lambda: 1 / 0)
    s._drain()
    (where, exc), = s._take_errors()
    assert isinstance(exc, ZeroDivisionError)
    assert s._take_errors() == []
    assert s.wait(timeout=T)            # taken: wait() has nothing left to raise


def test_a_run_that_cannot_be_enqueued():
    """If enqueueing a stage fails half way (here: its graph refuses to run), run() raises,
    the stages already enqueued finish, and the pipeline stays usable."""
    cfg, _ = rfc_config()
    pm = pipeline.build(cfg, depth=2)
    pm.set_input("data_a", np.ones((3, 3), np.float32))
    pm.set_input("data_b", np.ones((3, 3), np.float32))

    class Refusing:
        def run(self, stream=None):
            raise nnc.GraphError("refused")

    load, graph, store = pm._tasks[1]
    pm._tasks[1] = (load, Refusing(), store)
    with pytest.raises(PipelineError, match="enqueueing input #0 on stage mod2") as info:
        pm.run(timeout=T)
    assert isinstance(info.value.__cause__, nnc.GraphError)
    deadline = time.monotonic() + T
    while pm.num_executing() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pm.num_executing() == 0 and not pm.has_next_output()
    pm._tasks[1] = (load, graph, store)
    pm.run(timeout=T)
    out = pm.get_output(timeout=T)
    np.testing.assert_allclose(out[0], closed_form(np.ones((3, 3)), np.ones((3, 3)))[0])
    pm.close()


def test_ctrl_c_interrupts_a_blocked_run():
    import signal

    gate = threading.Event()
    pm = chain(lambda x: (gate.wait(T), x)[1], depth=1)
    pm.set_input("in", np.array([1]))
    pm.run()
    main = threading.main_thread().ident
    if threading.get_ident() != main:   # pragma: no cover - signals reach the main thread only
        pytest.skip("not on the main thread")
    timer = threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        pm.run(timeout=T)               # full: blocks until Ctrl-C
    assert time.monotonic() - t0 < T / 2
    timer.join(T)
    gate.set()
    assert pm.get_output(timeout=T)[0][0] == 1
    assert pm.num_executing() == 0      # the interrupted run enqueued nothing
    pm.close(timeout=T)


def test_closing_an_idle_pipeline_inside_a_stage():
    other = chain(lambda x: x)
    other.set_input("in", np.array([5]))
    other.run()
    assert other.get_output(timeout=T)[0][0] == 5

    def stage(x):
        other.close()                   # idle: nothing to wait for, allowed on a pool thread
        return x

    with chain(stage) as pm:
        pm.set_input("in", np.array([1]))
        pm.run()
        assert pm.get_output(timeout=T)[0][0] == 1
    with pytest.raises(PipelineError, match="closed"):
        other.run()


@pytest.mark.parametrize("raised", ["KeyboardInterrupt", "SystemExit", "GeneratorExit",
                                    "Unprintable"])
def test_a_stage_raising_any_base_exception_fails_that_input_only(raised):
    """A BaseException that is no Exception, or one whose repr() raises, fails its input like
    any error (the original as __cause__); later inputs flow and close() returns. Before, the
    input never completed: get_output() found nothing and close() blocked forever."""
    r = run_py(f"""
        import numpy as np
        from nnc import pipeline
        from nnc.pipeline import PipelineError

        class Unprintable(Exception):
            def __repr__(self):
                raise RuntimeError("no repr")
            __str__ = __repr__

        def stage(x):
            if x[0] == 1:
                raise {raised}()
            return x + 10

        m = pipeline.Module.function(stage, inputs={{"x": None}}, outputs=[None], name="f")
        cfg = pipeline.PipelineConfig()
        cfg.inputs["in"] = (m, "x")
        cfg.outputs.append((m, 0))
        with pipeline.build(cfg, depth=2) as pm:
            for k in range(3):
                pm.set_input("in", np.array([k]))
                pm.run(timeout={T})
            assert pm.get_output(timeout={T})[0][0] == 10
            try:
                pm.get_output(timeout={T})
            except PipelineError as e:
                assert "stage f failed on input #1" in str(e), str(e)
                assert type(e.__cause__).__name__ == "{raised}", repr(e.__cause__)
            else:
                raise AssertionError("input #1 did not fail")
            assert pm.get_output(timeout={T})[0][0] == 12
        print("closed")
        """)
    assert r.returncode == 0 and "closed" in r.stdout, r.stdout + r.stderr
