"""nnc.trace: every kind of run leaves the right slices (docs/trace.md).

Checks names, counts, tracks and nesting; never durations.
"""

import json
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import nnc
from nnc.trace import HOST_TID

TIMEOUT = 10


def record(tmp_path, fn):
    """Run fn under nnc.trace; return the parsed trace events."""
    path = tmp_path / "t.json"
    with nnc.trace(path):
        fn()
    return json.loads(path.read_text())["traceEvents"]


def slices(events, **match):
    return [e for e in events if e["ph"] == "X" and all(e.get(k) == v for k, v in match.items())]


def track_names(events):
    return {e["tid"]: e["args"]["name"] for e in events
            if e["ph"] == "M" and e["name"] == "thread_name"}


def inside(child, parent):
    return (child["tid"] == parent["tid"] and parent["ts"] <= child["ts"]
            and child["ts"] + child["dur"] <= parent["ts"] + parent["dur"] + 1e-3)


def assert_monotonic_per_track(events):
    last = {}
    for e in events:
        if e["ph"] == "X":
            assert e["ts"] >= last.get(e["tid"], float("-inf")), e
            last[e["tid"]] = e["ts"]


def chain(n=3):
    g = nnc.Graph()
    x = nnc.Tensor(np.ones(4, np.float32))
    ts = [x] + [nnc.Tensor.zeros((4,), dtype="float32") for _ in range(n)]
    nodes = [g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [ts[i]], [ts[i + 1]], name=f"m{i}")
             for i in range(n)]
    for a, b in zip(nodes, nodes[1:]):
        g.concat(a, b)
    return g, ts


def test_sequential_run_is_a_run_slice_holding_one_slice_per_node(tmp_path):
    g, ts = chain(3)
    noop = g.exec(nnc.Cmd("NOOP"))
    g.concat(g.execs[2], noop)
    events = record(tmp_path, lambda: (g.run(), g.run()))
    assert ts[-1].numpy()[0] == 8.0
    runs = slices(events, name="Graph.run")
    assert len(runs) == 2 and all(r["args"] == {"nodes": 4} for r in runs)
    nodes = slices(events, cat="cmd")
    assert [e["name"] for e in nodes] == ["#0 m0 (SCALAR_MUL)", "#1 m1 (SCALAR_MUL)",
                                          "#2 m2 (SCALAR_MUL)"] * 2   # NOOP: no slice
    assert [e["args"]["node"] for e in nodes] == [0, 1, 2] * 2
    for k, e in enumerate(nodes):
        assert inside(e, runs[k // 3])
    names = track_names(events)
    assert names[runs[0]["tid"]] == f"host: {threading.current_thread().name}"
    assert runs[0]["tid"] == HOST_TID
    assert_monotonic_per_track(events)


def test_runs_on_two_host_threads_get_two_tracks(tmp_path):
    g1, _ = chain(2)
    g2, _ = chain(2)

    def both():
        t = threading.Thread(target=g2.run, name="other")
        t.start()
        g1.run()
        t.join(TIMEOUT)

    events = record(tmp_path, both)
    runs = slices(events, name="Graph.run")
    names = track_names(events)
    assert sorted(names[r["tid"]] for r in runs) == sorted(
        ["host: other", f"host: {threading.current_thread().name}"])


def test_eager_cmd_exec_is_named_after_the_command(tmp_path):
    x = nnc.Tensor(np.ones(4, np.float32))
    y = nnc.Tensor.zeros((4,), dtype="float32")
    s = nnc.Stream()

    def run():
        nnc.cmd_exec(nnc.Cmd("EWSUM"), [x, x], [y])
        nnc.cmd_exec(nnc.Cmd("EWSUM"), [x, x], [y], stream=s)
        nnc.cmd_exec(nnc.Cmd.custom(lambda i, o: None), [x], [y], stream=s)
        s.wait()

    events = record(tmp_path, run)
    host = slices(events, name="EWSUM", tid=HOST_TID)
    assert len(host) == 1 and host[0]["cat"] == "cmd" and host[0]["args"]["backend"]
    on_stream = slices(events, tid=s.index)
    assert [(e["name"], e["cat"]) for e in on_stream] == [("EWSUM", "cmd"), ("CUSTOM", "call")]
    assert not slices(events, name="callback") and not slices(events, name="task")
    assert_monotonic_per_track(events)


def test_callbacks_are_named_after_their_qualname(tmp_path):
    s = nnc.Stream()

    def my_callback():
        pass

    class Job:
        def __call__(self):
            pass

    def run():
        s.add_callback(my_callback)
        s.add_callback(Job())
        s.wait()

    names = [e["name"] for e in slices(record(tmp_path, run), tid=s.index)]
    assert names == [my_callback.__qualname__, Job.__qualname__]


def test_failing_node_still_leaves_its_slice(tmp_path):
    g = nnc.Graph()
    x = nnc.Tensor(np.ones(1, np.float32))

    def boom(i, o):
        raise ValueError("boom")

    g.exec(nnc.Cmd.custom(boom), [x], [x], name="bad")

    def run():
        with pytest.raises(nnc.CommandError):
            g.run()

    events = record(tmp_path, run)
    assert [e["name"] for e in slices(events, cat="cmd")] == ["#0 bad (CUSTOM)"]
    assert len(slices(events, name="Graph.run")) == 1


def test_sequential_while_nests_iterations_and_body_nodes(tmp_path):
    g, body = nnc.Graph(), nnc.Graph()
    x = nnc.Tensor(np.ones(1, np.float32))
    noop = body.exec(nnc.Cmd("NOOP"))
    m = body.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [x], name="double")
    body.concat(noop, m)
    body.set_while_expr(lambda count: count < 3, [], [noop])
    g.while_(body, name="loop")
    events = record(tmp_path, g.run)
    assert x.numpy()[0] == 8.0
    (loop,) = slices(events, name="#0 loop (WHILE)")
    iters = slices(events, cat="loop")
    assert [e["name"] for e in iters] == [f"iteration {k}" for k in range(4)]
    assert iters[-1]["args"] == {"last": 1}          # the test that ended the loop
    doubles = slices(events, name="#1 double (SCALAR_MUL)")
    assert len(doubles) == 3
    for k, d in enumerate(doubles):
        assert inside(d, iters[k]) and not inside(d, iters[k + 1])
    assert all(inside(it, loop) for it in iters)
    assert_monotonic_per_track(events)


def test_sequential_case_of_nests_the_branch(tmp_path):
    g, b0, b1 = nnc.Graph(), nnc.Graph(), nnc.Graph()
    x = nnc.Tensor(np.array([1.0], np.float32))
    y = nnc.Tensor.zeros((1,), dtype="float32")
    b0.exec(nnc.Cmd("SCALAR_MUL", a=10.0), [x], [y], name="ten")
    b1.exec(nnc.Cmd("SCALAR_MUL", a=20.0), [x], [y], name="twenty")
    c = g.case_of([x], [y], name="pick")
    g.set_case_of_expr(c, lambda a: int(a[0]))
    g.set_case_of(c, b0, 0)
    g.set_case_of(c, b1, 1)
    events = record(tmp_path, g.run)
    assert y.numpy()[0] == 20.0
    (node,) = slices(events, name="#0 pick (CASE_OF)")
    (branch,) = slices(events, cat="branch")
    (twenty,) = slices(events, name="#0 twenty (SCALAR_MUL)")
    assert branch["name"] == "branch 1" and inside(branch, node) and inside(twenty, branch)
    assert not slices(events, name="#0 ten (SCALAR_MUL)")


def test_stream_run_of_a_scheduled_graph_stays_per_stream(tmp_path):
    g, ts = chain(4)
    nnc.static_schedule(g)
    s = nnc.Stream()

    def run():
        g.run(stream=s)
        s.wait()

    events = record(tmp_path, run)
    cmds = slices(events, cat="cmd")
    assert sorted(e["name"] for e in cmds) == sorted(f"#{i} m{i} (SCALAR_MUL)" for i in range(4))
    assert all(e["tid"] < HOST_TID for e in cmds)
    assert not slices(events, name="Graph.run")      # nothing ran on the host
    assert [e["name"] for e in slices(events, cat="call")] == ["_finish_scheduled"]
    assert_monotonic_per_track(events)


def test_stream_run_with_a_loop_names_its_bookkeeping(tmp_path):
    g, body = nnc.Graph(), nnc.Graph()
    x = nnc.Tensor(np.ones(1, np.float32))
    noop = body.exec(nnc.Cmd("NOOP"))
    m = body.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [x], name="double")
    body.concat(noop, m)
    body.set_while_expr(lambda count: count < 3, [], [noop])
    g.while_(body)
    s = nnc.Stream()

    def run():
        g.run(stream=s)
        s.wait()

    events = record(tmp_path, run)
    assert len(slices(events, name="#1 double (SCALAR_MUL)")) == 3
    assert len(slices(events, name="count")) == 4
    assert not slices(events, name="task")           # every Python task has a name


def test_not_tracing_records_nothing(tmp_path):
    from nnc.base import trace_switch

    g, _ = chain(2)
    g.run()
    assert trace_switch.tracer() is None
    with nnc.trace(tmp_path / "t.json") as tr:
        assert trace_switch.tracer() is tr
    assert trace_switch.tracer() is None and tr.host == []
    g.run()
    assert tr.host == []


def test_a_scheduled_inception_run_takes_no_gil_on_workers(tmp_path):
    """On streams, every compute node of Inception-V3 (convolutions with their fused
    ReLU, pools, GEMM, SOFTMAX) is a C task, which runs without the GIL; the trace says so."""
    from nnc.models.inception import build_inception_v3

    g, _, _ = build_inception_v3(size=75)
    g.simplify()
    nnc.static_schedule(g, max_streams=2)
    s = nnc.Stream()

    def run():
        g.run(stream=s)
        s.wait()

    run()
    events = record(tmp_path, run)
    names = {e.index: e.cmd.name for e in g.topsort()}
    tasks = {}
    for e in slices(events, cat="cmd"):
        node = e["args"].get("node")
        if node is not None and names.get(node) not in (None, "NOOP"):
            tasks.setdefault(names[node], set()).add(e["args"]["task"])
    assert set(tasks) >= {"CONVOLUTION", "MAX_POOL", "AVG_POOL", "GEMM", "SOFTMAX"}
    assert all(kinds == {"C"} for kinds in tasks.values()), tasks


def test_leaving_the_block_while_another_thread_floods_the_stream(tmp_path):
    """Leaving the block waits for what was enqueued before, not for what other threads keep
    enqueueing meanwhile. The stream is busy when the block ends, then a thread floods it
    faster than it runs: a wait that looked again at what had been enqueued every 100 ms never
    caught up, so the block never ended (a subprocess, so such a hang fails the test)."""
    path = str(tmp_path / "t.json")
    code = f"""
        import json, threading, time, nnc
        s = nnc.Stream()
        stop, go = threading.Event(), threading.Event()
        def slow():
            if not stop.is_set():
                time.sleep(0.0001)
        def flood():
            go.wait()
            while not stop.is_set():
                for _ in range(50):
                    s.add_callback(slow)
                time.sleep(0.001)
        def starter():              # still running when the block ends; starts the flood
            go.set()
            time.sleep(0.15)
        for _ in range(3):
            stop.clear()
            go.clear()
            t = threading.Thread(target=flood)
            t.start()
            with nnc.trace({path!r}):
                s.add_callback(starter)
            stop.set()
            t.join()
            s.wait()
            names = [e["name"] for e in json.load(open({path!r}))["traceEvents"] if e["ph"] == "X"]
            assert names[0] == starter.__qualname__, names[:3]
        print("ok")
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr
