"""Graph.autotune inside while bodies and case..of branches (NNC: ccv_nnc_graph_autotune, which
recurses into every sub-graph of a while or case..of node), timed as a synchronous run."""

import time
import uuid

import numpy as np
import pytest

import nnc
from nnc.base.parallel import _runs_in_progress


@pytest.fixture
def slow_by_default():
    """A command whose default backend (SLOW, priority 30) sleeps and whose FAST one (priority
    5) does not: both compute y = 2 x. Each records the synchronous runs in progress while it
    runs (nnc.base.parallel's count, which lets pool threads take parts)."""
    name = f"TEST_TUNE_{uuid.uuid4().hex[:8]}"
    seen = []

    def make(delay):
        def fn(cmd, inputs, outputs):
            seen.append(_runs_in_progress())
            if delay:
                time.sleep(delay)
            outputs[0][...] = 2 * inputs[0]
        return fn

    nnc.register_command(name, inplace="allow")
    nnc.register_backend(name, "SLOW", make(0.02), priority=30)
    nnc.register_backend(name, "FAST", make(0.0), priority=5)
    return name, seen


def loop_graph(name):
    """while (count < 3) { x = 2 x } around a node of ``name``; a node of ``name`` outside too."""
    x, y = nnc.Tensor(np.ones(4, np.float32)), nnc.Tensor.zeros(4)
    g, body = nnc.Graph(), nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    inner = body.exec(nnc.Cmd(name), [x], [x], name="inner")
    body.concat(noop, inner)
    body.set_while_expr(lambda count: count < 3, [], [noop])
    loop = g.while_(body)
    outer = g.exec(nnc.Cmd(name), [x], [y], name="outer")
    g.concat(loop, outer)
    return g, body, inner, outer, x, y


def test_autotune_reaches_into_a_loop_body(slow_by_default):
    name, seen = slow_by_default
    g, body, inner, outer, x, y = loop_graph(name)
    assert inner.backend == outer.backend == "SLOW"
    threads = nnc.get_intra_op_threads()
    nnc.set_intra_op_threads(2)
    try:
        assert g.autotune(trials=2) == 2
    finally:
        nnc.set_intra_op_threads(threads)
    assert inner.backend == "FAST" and outer.backend == "FAST"
    # Timed with a run counted, as a synchronous run times its commands.
    assert seen and min(seen) >= 1
    np.testing.assert_array_equal(x.numpy(), np.ones(4))   # scratch copies only
    g.run()
    np.testing.assert_array_equal(x.numpy(), np.full(4, 8.0))
    np.testing.assert_array_equal(y.numpy(), np.full(4, 16.0))
    assert g.autotune() == 0                                # nothing left to change


def test_autotune_reaches_into_every_branch_and_nested_loops(slow_by_default):
    name, _ = slow_by_default
    x = nnc.Tensor(np.ones(2, np.float32))
    g = nnc.Graph()
    c = g.case_of([x], [x])
    g.set_case_of_expr(c, lambda v: 0 if v[0] < 10 else 1, 0)
    branches, nodes = [], []
    for _ in range(2):
        b = nnc.Graph()
        nodes.append(b.exec(nnc.Cmd(name), [x], [x]))
        branches.append(b)
    # Branch 1 (never taken on these data) holds a loop whose body holds a node too.
    body = nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    deep = body.exec(nnc.Cmd(name), [x], [x])
    body.concat(noop, deep)
    body.set_while_expr(lambda count: count < 1, [], [noop])
    branches[1].while_(body)
    for k, b in enumerate(branches):
        g.set_case_of(c, b, k)
    pinned = branches[0].exec(nnc.Cmd(name, backend="SLOW"), [x], [x])
    assert g.autotune(trials=1) == 3
    assert [e.backend for e in (*nodes, deep, pinned)] == ["FAST", "FAST", "FAST", "SLOW"]


def test_autotune_refuses_a_sub_graph_running_on_its_own(slow_by_default):
    name, _ = slow_by_default
    g, body, inner, outer, x, y = loop_graph(name)
    gate = body.exec(nnc.Cmd.custom(lambda i, o: time.sleep(0.2)))
    s = nnc.Stream("cpu")
    body.run(stream=s)                  # the body on its own, still running
    try:
        with pytest.raises(nnc.GraphError, match="runs on its own"):
            g.autotune(trials=1)
    finally:
        s.wait()
    assert inner.backend == "SLOW" and gate.index == 2
