"""Concrete graphs (NNC: test/unit/nnc/graph.tests.c, parallel.tests.c without a schedule)."""

import gc
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnc


def scalar(v):
    return nnc.Tensor(np.array([v], np.float32))


def test_run_simple_graph_network_equals_direct_execution():
    """NNC "run simple graph network": each output of a graph run equals running its command
    directly. NNC's chain is conv -> softmax -> custom loss -> conv backward; we have no
    backward commands, so the tail is a GEMM over the loss instead."""
    a = np.array([(i - 651) / ((1302 - 1) * 1302) for i in range(31 * 21 * 2)], np.float32)
    a = a.reshape(31, 21, 2)
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((4, 5, 3, 2)) * np.sqrt(2) / np.sqrt(1302 + 2604)).astype(np.float32)
    bias = np.zeros(4, np.float32)
    b = nnc.Tensor.empty((31, 21, 4))
    m = nnc.Tensor.empty((31, 21, 4))
    g_ = nnc.Tensor.empty((31, 21, 4))
    fc = rng.standard_normal((3, 4)).astype(np.float32)
    h = nnc.Tensor.empty((31, 21, 3))

    def loss(inputs, outputs):
        outputs[0][...] = inputs[0]
        outputs[0].reshape(-1)[24] -= 1

    conv = nnc.Cmd("CONVOLUTION", padding=(2, 1))
    softmax = nnc.Cmd("SOFTMAX")
    custom = nnc.Cmd.custom(loss)
    gemm = nnc.Cmd("GEMM", transpose_b=True)
    graph = nnc.Graph()
    e1 = graph.exec(conv, [a, w, bias], [b])
    e2 = graph.exec(softmax, [b], [m])
    e3 = graph.exec(custom, [m], [g_])
    flat = g_.view((31 * 21, 4))
    e4 = graph.exec(gemm, [flat, fc], [h.view((31 * 21, 3))])
    graph.concat(e1, e2)
    graph.concat(e2, e3)
    graph.concat(e3, e4)
    assert graph.sources == [e1] and graph.destinations == [e4]
    graph.run()

    direct = {k: nnc.Tensor.empty(t.shape) for k, t in (("b", b), ("m", m), ("g", g_), ("h", h))}
    nnc.cmd_exec(conv, [a, w, bias], [direct["b"]])
    nnc.cmd_exec(softmax, [direct["b"]], [direct["m"]])
    nnc.cmd_exec(custom, [direct["m"]], [direct["g"]])
    nnc.cmd_exec(gemm, [direct["g"].view((31 * 21, 4)), fc], [direct["h"].view((31 * 21, 3))])
    for key, t in (("b", b), ("m", m), ("g", g_), ("h", h)):
        np.testing.assert_allclose(t.numpy(), direct[key].numpy(), rtol=1e-6, atol=1e-7)
    # NNC's SOFTMAX of a [31, 21, 4] tensor: each of the 31 entries (21 x 4 values) is one row.
    assert abs(m.numpy().reshape(31, -1).sum(axis=-1) - 1).max() < 1e-5


def parallel_graph():
    """NNC parallel.tests.c: z = x*y, c = a+b, d = z/c, d0 = log d, d1 = exp d, d2 = d0 + d1."""
    t = {k: scalar(v) for k, v in dict(x=2, y=0.21, a=2.2, b=3.2).items()}
    for k in ("z", "c", "d", "d0", "d1", "d2"):
        t[k] = scalar(0)
    g = nnc.Graph()
    mul = g.exec(nnc.Cmd("EWPROD"), [t["x"], t["y"]], [t["z"]], name="mul")
    add = g.exec(nnc.Cmd("EWSUM"), [t["a"], t["b"]], [t["c"]], name="sum")
    div = g.exec(nnc.Cmd("EWDIV"), [t["z"], t["c"]], [t["d"]], name="div")
    log = g.exec(nnc.Cmd("EWLOG"), [t["d"]], [t["d0"]], name="log")
    exp = g.exec(nnc.Cmd("EWEXP"), [t["d"]], [t["d1"]], name="exp")
    add1 = g.exec(nnc.Cmd("EWSUM"), [t["d0"], t["d1"]], [t["d2"]], name="sum1")
    for u, v in ((mul, div), (add, div), (div, log), (div, exp), (log, add1), (exp, add1)):
        g.concat(u, v)
    return g, t, (mul, add, div, log, exp, add1)


def test_parallel_graph_sequential():
    g, t, nodes = parallel_graph()
    g.run()
    assert t["d2"].numpy()[0] == pytest.approx(-1.473017, abs=1e-5)
    assert set(g.sources) == {nodes[0], nodes[1]}
    assert g.destinations == [nodes[5]]
    order = g.topsort()
    assert len(order) == 6
    pos = {e: i for i, e in enumerate(order)}
    for u in order:
        for v in u.outgoings:
            assert pos[u] < pos[v]


def test_partial_runs_follow_sources_and_destinations():
    g, t, (mul, add, div, log, exp, add1) = parallel_graph()
    g.sources = [mul, add]
    g.destinations = [div]
    g.run()
    assert t["d"].numpy()[0] == pytest.approx(0.42 / 5.4, rel=1e-6)
    assert t["d2"].numpy()[0] == 0  # not on a path to the destination
    assert g.topsort() == [mul, add, div] or g.topsort() == [add, mul, div]
    g.sources = [div]
    g.destinations = [log]
    assert g.topsort() == [div, log]
    g.sources = None
    g.destinations = None
    assert len(g.topsort()) == 6


def test_repeated_runs_allocate_nothing():
    g, t, _ = parallel_graph()
    g.run()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(200):
        g.run()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename") if s.size_diff > 0)
    assert grown < 1024, f"{grown} bytes allocated over 200 runs"


def test_python_backend_runs_allocate_nothing_in_the_runner():
    x = nnc.Tensor(np.ones(8, np.float32))
    g = nnc.Graph()
    prev = None
    for _ in range(50):
        e = g.exec(nnc.Cmd("SCALAR_MUL", a=1.0, backend="CPU_REF"), [x], [x])
        if prev is not None:
            g.concat(prev, e)
        prev = e
    g.run()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(50):
        g.run()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    # NumPy temporaries inside the backend come and go; nothing may accumulate.
    grown = sum(s.size_diff for s in after.compare_to(before, "filename") if s.size_diff > 0)
    assert grown < 4096


def test_cycle_is_refused_with_its_nodes_named():
    x = scalar(1)
    g = nnc.Graph()
    a = g.exec(nnc.Cmd("NOOP"), name="a")
    b = g.exec(nnc.Cmd("SCALAR_MUL", a=2), [x], [x], name="b")
    c = g.exec(nnc.Cmd("NOOP"), name="c")
    g.concat(a, b)
    g.concat(b, c)
    g.concat(c, b)
    with pytest.raises(nnc.GraphError, match=r"cycle: .*#1 b.* -> .*#2 c.* -> .*#1 b"):
        g.run()
    with pytest.raises(nnc.GraphError, match="cycle"):
        g.topsort()
    g.disjoin(c, b)
    g.run()
    assert x.numpy()[0] == 2


def test_graph_with_only_a_cycle():
    g = nnc.Graph()
    a = g.exec(nnc.Cmd("NOOP"))
    b = g.exec(nnc.Cmd("NOOP"))
    g.concat(a, b)
    g.concat(b, a)
    with pytest.raises(nnc.GraphError, match="cycle"):
        g.run()


def test_bad_edges_and_ends():
    g = nnc.Graph()
    other = nnc.Graph()
    a = g.exec(nnc.Cmd("NOOP"))
    b = g.exec(nnc.Cmd("NOOP"))
    foreign = other.exec(nnc.Cmd("NOOP"))
    with pytest.raises(nnc.GraphError, match="another graph"):
        g.concat(a, foreign)
    with pytest.raises(nnc.GraphError, match="another graph"):
        g.sources = [foreign]
    with pytest.raises(nnc.GraphError, match="itself"):
        g.concat(a, a)
    with pytest.raises(nnc.GraphError, match="GraphExec"):
        g.concat(a, "b")
    with pytest.raises(nnc.GraphError, match="no edge"):
        g.disjoin(a, b)
    with pytest.raises(nnc.GraphError, match="at least one"):
        g.destinations = []
    assert g.concat(a, b) is True
    assert g.concat(a, b) is False  # already there (NNC returns -1)
    g.sources = [b]
    g.destinations = [a]
    with pytest.raises(nnc.GraphError, match=r"not reachable.*#0 NOOP"):
        g.run()


def test_bad_nodes_fail_when_built():
    g = nnc.Graph()
    x = nnc.Tensor.zeros((2, 3))
    y = nnc.Tensor.zeros((3, 2))
    with pytest.raises(nnc.CommandError, match="shape"):
        g.exec(nnc.Cmd("EWSUM"), [x], [y])
    with pytest.raises(nnc.CommandError, match="Cmd"):
        g.exec("EWSUM", [x], [x])
    with pytest.raises(nnc.CommandError, match="must be nnc.Tensor"):
        g.exec(nnc.Cmd("EWSUM"), [[1, 2]], [x])
    assert len(g) == 0
    g.run()  # an empty graph runs nothing


def test_failing_python_command_names_the_node():
    def boom(inputs, outputs):
        raise ValueError("bad value")

    g = nnc.Graph()
    g.exec(nnc.Cmd.custom(boom), [], [], name="exploder")
    with pytest.raises(nnc.CommandError, match="exploder") as info:
        g.run()
    assert isinstance(info.value.__cause__, ValueError)


def test_backend_is_chosen_when_built_and_can_be_pinned():
    x = nnc.Tensor(np.full(4, 3, np.float32))
    y = nnc.Tensor.zeros(4)
    g = nnc.Graph()
    e = g.exec(nnc.Cmd("SCALAR_MUL", a=2), [x], [y])
    assert e.backend == "CPU_OPT" and e.cmd.backend == "CPU_OPT"
    e.backend = "CPU_REF"
    assert e.backend == "CPU_REF" and e.cmd.pinned
    g.run()
    np.testing.assert_array_equal(y.numpy(), 6)
    with pytest.raises(nnc.CommandError, match="no backend"):
        e.backend = "GPU_CUDNN"
    half = nnc.Tensor(np.ones(4, np.float16))
    with pytest.raises(nnc.CommandError, match="does not accept"):
        g.exec(nnc.Cmd("SCALAR_MUL", a=2, backend="CPU_OPT"), [half], [half])
    h = g.exec(nnc.Cmd("SCALAR_MUL", a=2), [half], [half])
    assert h.backend == "CPU_REF"


def test_autotune_keeps_results_and_pins():
    rng = np.random.default_rng(0)
    a = nnc.Tensor(rng.standard_normal((64, 32)).astype(np.float32))
    w = nnc.Tensor(rng.standard_normal((16, 32)).astype(np.float32))
    out = nnc.Tensor.zeros((64, 16))
    x = nnc.Tensor(np.ones(4, np.float32))
    g = nnc.Graph()
    e = g.exec(nnc.Cmd("GEMM", transpose_b=True), [a, w, None], [out])
    s = g.exec(nnc.Cmd("SCALAR_MUL", a=2, backend="CPU_REF"), [x], [x])
    g.concat(e, s)
    x_before = x.numpy().copy()
    g.autotune()
    assert e.backend in nnc.backends("GEMM")
    assert s.backend == "CPU_REF"  # pinned nodes keep their backend
    np.testing.assert_array_equal(x.numpy(), x_before)  # autotune works on scratch copies
    g.run()
    np.testing.assert_allclose(out.numpy(), a.numpy() @ w.numpy().T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3", None])
def test_profile_and_autotune_refuse_counts_that_are_not_positive_ints(bad):
    x = nnc.Tensor(np.ones(4, np.float32))
    g = nnc.Graph()
    e = g.exec(nnc.Cmd("SCALAR_MUL", a=2), [x], [x])
    with pytest.raises(nnc.GraphError, match="repeat must be an int >= 1"):
        g.profile(bad)
    with pytest.raises(nnc.GraphError, match="trials must be an int >= 1"):
        g.autotune(bad)
    np.testing.assert_array_equal(x.numpy(), 1)       # refused before anything ran
    [(node, seconds)] = g.profile(2)
    assert node == e and seconds >= 0 and g.autotune(1) == 0


def test_dot():
    g, _, (mul, *_rest) = parallel_graph()
    text = g.dot()
    assert text.startswith("digraph") and text.count("->") == 6
    assert "#0 mul (EWPROD)" in text
    assert "out: 1" in g.dot(long=True) and "out: 1" not in text
    with pytest.raises(TypeError):
        g.dot(short=True)


def test_numpy_arrays_are_wrapped_zero_copy():
    x = np.full(3, 2, np.float32)
    g = nnc.Graph()
    g.exec(nnc.Cmd("SCALAR_MUL", a=4), [x], [x])
    g.run()
    np.testing.assert_array_equal(x, 8)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_dags_run_in_dependency_order(data):
    """Every node runs once, after all of its predecessors, on random DAGs."""
    n = data.draw(st.integers(1, 30))
    edges = data.draw(
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n)
    )
    log = []
    g = nnc.Graph()
    nodes = []
    for i in range(n):
        nodes.append(g.exec(nnc.Cmd.custom(lambda ins, outs, i=i: log.append(i))))
    expected = set()
    for u, v in edges:
        if u < v:  # forward edges only, so the graph stays acyclic
            g.concat(nodes[u], nodes[v])
            expected.add((u, v))
    g.run()
    assert sorted(log) == list(range(n))
    pos = {v: k for k, v in enumerate(log)}
    for u, v in expected:
        assert pos[u] < pos[v]
    assert [e.index for e in g.topsort()] == log
