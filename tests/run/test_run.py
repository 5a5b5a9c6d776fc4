"""Asynchronous graph runs on CPU streams, with and without a static schedule
(NNC: parallel.tests.c, schedule.tests.c re-run on CPU streams; MXNet's RandSumExpr)."""

import json
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_graph import parallel_graph, scalar

import nnc
from nnc.stream.stream import Stream

TIMEOUT = 10


def gated_graph():
    """A graph whose first node blocks until the test sets the returned event."""
    go = threading.Event()
    x = nnc.Tensor(np.ones(4, np.float32))
    g = nnc.Graph()
    gate = g.exec(nnc.Cmd.custom(lambda i, o: go.wait(TIMEOUT)), name="gate")
    mul = g.exec(nnc.Cmd("SCALAR_MUL", a=2), [x], [x])
    g.concat(gate, mul)
    return g, x, go


def test_run_on_a_stream_returns_at_once_and_wait_joins():
    g, x, go = gated_graph()
    s = Stream()
    g.run(stream=s)
    assert not s.query() and (x.numpy() == 1).all()
    go.set()
    s.wait()
    assert (x.numpy() == 2).all()


def test_a_running_graph_cannot_change():
    g, x, go = gated_graph()
    s = Stream()
    g.run(stream=s)
    try:
        with pytest.raises(nnc.GraphError, match="wait for that stream"):
            g.exec(nnc.Cmd("NOOP"))
        with pytest.raises(nnc.GraphError, match="wait for that stream"):
            g.run()
        with pytest.raises(nnc.GraphError, match="already running"):
            g.run(stream=Stream())
    finally:
        go.set()
    s.wait()
    g.exec(nnc.Cmd("NOOP"))  # idle again after the stream finished


def test_runs_on_one_stream_complete_in_submission_order():
    g, t, _ = parallel_graph()
    nnc.static_schedule(g)
    s = Stream()
    log = []
    for k in range(5):
        g.run(stream=s)
        s.add_callback(lambda k=k: log.append((k, float(t["d2"].numpy()[0]))))
    s.wait()
    assert [k for k, _ in log] == list(range(5))
    assert all(v == pytest.approx(-1.473017, abs=1e-5) for _, v in log)


def test_independent_graphs_on_two_streams_overlap():
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    graphs = []
    for _ in range(2):
        g = nnc.Graph()
        g.exec(nnc.Cmd.custom(lambda i, o: barrier.wait()))
        graphs.append(g)
    a, b = Stream(), Stream()
    graphs[0].run(stream=a)
    graphs[1].run(stream=b)
    a.wait()  # BrokenBarrierError would surface here as StreamError
    b.wait()


def test_parallel_graph_scheduled_on_streams():
    """NNC parallel.tests.c: d2 = log(0.0777778) + exp(0.0777778) = -1.473017."""
    g, t, _ = parallel_graph()
    sched = nnc.static_schedule(g)
    assert g.schedule is sched and sched.stream_count == 2
    sched.verify()
    s = Stream()
    g.run(stream=s)
    s.wait()
    assert t["d2"].numpy()[0] == pytest.approx(-1.473017, abs=1e-5)
    assert "stream" in g.dot(long=True)


def test_schedule_multiple_streams_gemm():
    """NNC schedule.tests.c "multiple streams" on CPU streams: d = (b1.b2 + 0.2).b3 + 0.3 = 21.9
    with b1 = 5.0, b2 = 2.84, b3 = 1.5 (three GEMMs of one input, then two dependent ones)."""
    a = nnc.Tensor(np.array([[1.4, 0.2]], np.float32))
    ws = [np.array([[2, 11]], np.float32), np.array([[1.6, 3]], np.float32),
          np.array([[0.5, 4]], np.float32)]
    b = [nnc.Tensor.zeros((1, 1)) for _ in range(3)]
    c, d = nnc.Tensor.zeros((1, 1)), nnc.Tensor.zeros((1, 1))
    g = nnc.Graph()
    gemm = nnc.Cmd("GEMM", transpose_b=True)
    src = g.exec(nnc.Cmd("NOOP"), name="noop")
    muls = [g.exec(gemm, [a, w], [bk], name=f"mul{k + 1}") for k, (w, bk) in enumerate(zip(ws, b))]
    mulc = g.exec(gemm, [b[0], b[1], np.array([0.2], np.float32)], [c], name="mulc")
    muld = g.exec(nnc.Cmd("GEMM"), [c, b[2], np.array([0.3], np.float32)], [d], name="muld")
    for m in muls:
        g.concat(src, m)
    g.concat(muls[0], mulc)
    g.concat(muls[1], mulc)
    g.concat(mulc, muld)
    g.concat(muls[2], muld)
    sched = nnc.static_schedule(g)
    sched.verify()
    assert sched.stream_count == 3
    s = Stream()
    g.run(stream=s)
    s.wait()
    np.testing.assert_allclose([bk.numpy()[0, 0] for bk in b], [5.0, 2.84, 1.5], rtol=1e-6)
    assert d.numpy()[0, 0] == pytest.approx(21.9, rel=1e-6)


def random_sum_graph(n, edges, seed):
    """Node i: y_i = c_i + sum of y_p over its predecessors p (64 float32 each)."""
    rng = np.random.default_rng(seed)
    ys = [nnc.Tensor.zeros(64) for _ in range(n)]
    cs = [nnc.Tensor(rng.standard_normal(64).astype(np.float32)) for _ in range(n)]
    preds = {i: sorted({u for u, v in edges if v == i}) for i in range(n)}
    g = nnc.Graph()
    cmds = ("EWSUM", "EWPROD")
    nodes = []
    for i in range(n):
        ins = [cs[i]] + [ys[p] for p in preds[i]]
        nodes.append(g.exec(nnc.Cmd(cmds[i % 2]), ins, [ys[i]], name=f"n{i}"))
    for u, v in edges:
        g.concat(nodes[u], nodes[v])
    return g, ys


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_dags_scheduled_equal_sequential_bit_for_bit(data):
    n = data.draw(st.integers(1, 40))
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                               max_size=3 * n))
    edges = sorted({(u, v) for u, v in pairs if u < v})
    max_streams = data.draw(st.sampled_from([0, 1, 2, 3]))
    g, ys = random_sum_graph(n, edges, seed=n)
    g.run()
    expected = [y.numpy().copy() for y in ys]
    for y in ys:
        y.numpy().fill(0)
    sched = nnc.static_schedule(g, max_streams=max_streams)
    sched.verify()
    s = Stream()
    g.run(stream=s)
    s.wait()
    for y, e in zip(ys, expected):
        assert np.array_equal(y.numpy(), e)


def test_rand_sum_expr_with_read_write_hazards():
    """MXNet threaded_engine_test RandSumExpr as graph nodes: 1000 ops over 100 variables,
    each var[w] = sum(var[r] for r in reads); edges only from read/write hazards (RAW, WAR,
    WAW). The scheduled run must equal a serial evaluation exactly (float64)."""
    rng = np.random.default_rng(7)
    nvar, nops = 100, 1000
    init = rng.standard_normal(nvar)
    tensors = [nnc.Tensor(np.array([v])) for v in init]
    serial = init.copy()
    g = nnc.Graph()
    last_writer = {}
    readers = {k: [] for k in range(nvar)}
    for _ in range(nops):
        reads = sorted(set(rng.integers(0, nvar, rng.integers(1, 5)).tolist()))
        w = int(rng.integers(0, nvar))
        serial[w] = sum(serial[r] for r in reads)
        e = g.exec(nnc.Cmd("EWSUM"), [tensors[r] for r in reads], [tensors[w]])
        deps = {last_writer[r] for r in reads if r in last_writer}
        if w in last_writer:
            deps.add(last_writer[w])
        deps.update(readers[w])
        deps.discard(e)
        for d in deps:
            g.concat(d, e)
        for r in reads:
            readers[r].append(e)
        readers[w] = []
        last_writer[w] = e
    sched = nnc.static_schedule(g)
    sched.verify()
    s = Stream()
    g.run(stream=s)
    s.wait()
    assert np.array_equal(np.array([t.numpy()[0] for t in tensors]), serial)


def test_errors_propagate_from_a_scheduled_run_and_streams_recover():
    x = scalar(1)
    g = nnc.Graph()
    a = g.exec(nnc.Cmd.custom(lambda i, o: 1 / 0), name="divide_by_zero")
    b = g.exec(nnc.Cmd("SCALAR_MUL", a=3), [x], [x])
    c = g.exec(nnc.Cmd("SCALAR_MUL", a=5), [x], [x])
    g.concat(a, c)
    g.concat(b, c)
    nnc.static_schedule(g)
    s = Stream()
    g.run(stream=s)
    with pytest.raises(nnc.StreamError, match="divide_by_zero") as info:
        s.wait()
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert x.numpy()[0] == 15  # the rest of the graph still ran
    g.run(stream=s)
    with pytest.raises(nnc.StreamError):
        s.wait()
    assert x.numpy()[0] == 225


def test_run_without_schedule_uses_the_callers_stream_only():
    g, t, _ = parallel_graph()
    s = Stream()
    threads = set()
    g.exec(nnc.Cmd.custom(lambda i, o: threads.add(threading.get_ident())))
    g.run(stream=s)
    s.add_callback(lambda: threads.add(threading.get_ident()))
    s.wait()
    assert len(threads) == 1 and g.schedule is None
    assert t["d2"].numpy()[0] == pytest.approx(-1.473017, abs=1e-5)


def test_schedule_is_rebuilt_after_the_graph_changes():
    g, t, (mul, *_rest) = parallel_graph()
    old = nnc.static_schedule(g, max_streams=1)
    extra = g.exec(nnc.Cmd("NOOP"))
    g.concat(extra, mul)
    new = g.schedule
    assert new is not old and new.stream_count == 1
    s = Stream()
    g.run(stream=s)
    s.wait()
    assert t["d2"].numpy()[0] == pytest.approx(-1.473017, abs=1e-5)


def test_run_on_a_bad_stream():
    g, _, _ = parallel_graph()
    with pytest.raises(nnc.GraphError, match="nnc.Stream"):
        g.run(stream="cpu")


def test_trace_writes_a_timeline(tmp_path):
    g, t, (mul, add, *_rest) = parallel_graph()
    go = threading.Event()
    gate = g.exec(nnc.Cmd.custom(lambda i, o: go.wait(TIMEOUT)), name="gate")
    g.concat(gate, mul)
    g.concat(gate, add)
    nnc.static_schedule(g)
    s = Stream()
    path = tmp_path / "run.json"
    with nnc.trace(path):
        g.run(stream=s)  # every wait is enqueued before the gate opens: all of them block
        go.set()
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    names = {e["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "cmd"}
    assert {"#0 mul (EWPROD)", "#5 sum1 (EWSUM)"} <= names
    tracks = {e["tid"] for e in events if e.get("ph") == "X" and e.get("cat") == "cmd"}
    assert len(tracks) == 2  # one track per schedule stream that ran commands
    starts = {e["id"] for e in events if e.get("ph") == "s"}
    finishes = {e["id"] for e in events if e.get("ph") == "f"}
    assert finishes and finishes <= starts  # flow arrows from emits to the waits they released
    with pytest.raises(nnc.NNCError, match="nest"):
        with nnc.trace(tmp_path / "a.json"):
            with nnc.trace(tmp_path / "b.json"):
                pass
