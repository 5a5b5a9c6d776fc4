"""while and case..of captured into CUDA conditional nodes (nnc/cuda/capture.py, nnc/run/flow.pyx
flow_capture_run) against the fake driver (tests/fakes/cuda_driver.py), which runs nnc's condition
kernel from its raw parameters and replays WHILE / IF / SWITCH nodes. Results are compared with
the same graph run sequentially on the CPU."""

import gc

import numpy as np
import pytest
from fakes import cublas as fake_cublas
from fakes.cuda_driver import install, real

import nnc
from nnc.cuda import capture as cgraph
from nnc.cuda import memory

pytestmark = pytest.mark.skipif(real is None, reason="cuda-bindings is not installed (the fake "
                                "driver borrows its enums and handle types)")

N = 8
_rng = np.random.default_rng(0)
# Orthogonal: power steps keep the norm, so 100 of them stay O(1) in float32.
A = np.linalg.qr(_rng.standard_normal((N, N)))[0].astype(np.float32)
X0 = _rng.standard_normal((N, 1)).astype(np.float32)


@pytest.fixture
def fake(monkeypatch):
    yield install(monkeypatch)
    gc.collect()        # free fake buffers while the fake driver is still installed


def _t(a, gpu):
    return memory.from_numpy(np.array(a)) if gpu else nnc.Tensor(np.array(a))


def power_loop(gpu, iters=100, streams=1):
    """x = A x, ``iters`` times: a NOOP breakpoint, then the step (with ``streams`` == 2, two
    independent halves of the step and a sum joining them, on two streams)."""
    a, x = _t(A, gpu), _t(X0, gpu)
    y, z = _t(np.zeros((N, 1), np.float32), gpu), _t(np.zeros((N, 1), np.float32), gpu)
    g, body = nnc.Graph(), nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    mv = body.exec(nnc.Cmd("GEMM"), [a, x], [y])
    body.concat(noop, mv)
    if streams == 1:
        body.concat(mv, body.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [y], [x]))
    else:
        h1 = body.exec(nnc.Cmd("SCALAR_MUL", a=0.25), [y], [z])
        h2 = body.exec(nnc.Cmd("SCALAR_MUL", a=0.75), [y], [x])
        add = body.exec(nnc.Cmd("EWSUM"), [x, z], [x])
        for h in (h1, h2):
            body.concat(mv, h)
            body.concat(h, add)
    g.while_(body)
    body.set_while_expr(nnc.Compare("count", "<", iters), [], [noop])
    return g, body, x


def halving_loop(gpu, head_empty):
    """s /= 2 while s > 1, from 1000: a data-dependent trip count. ``head_empty``: a NOOP
    breakpoint first (the expression tests s before each halving); else the halving is the
    breakpoint (a do-while: it tests after)."""
    s = _t(np.array([1000.0], np.float32), gpu)
    g, body = nnc.Graph(), nnc.Graph()
    half = body.exec(nnc.Cmd("SCALAR_MUL", a=0.5), [s], [s])
    bp = half
    if head_empty:
        bp = body.exec(nnc.Cmd("NOOP"))
        body.concat(bp, half)
    g.while_(body)
    body.set_while_expr(nnc.Compare(0, ">", 1), [s], [bp])
    return g, body, s


def capture(g):
    nnc.static_schedule(g, stream_type="gpu")
    s = nnc.Stream("gpu")
    return cgraph.capture(g, s), s


def test_captured_loop_of_100_iterations_replays_with_one_host_call(fake):
    cpu, cbody, cx = power_loop(False)
    cpu.run()
    g, body, x = power_loop(True)
    cg, s = capture(g)
    assert fake.conditional_nodes == [("CU_GRAPH_COND_TYPE_WHILE", 1)]
    for _ in range(2):                  # a second replay starts its count at 0 again
        nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [X0.copy()], [x])
        del fake.calls[:]
        fake.launches.clear()
        cg.replay(s)
        assert fake.calls == ["cuGraphLaunch"]          # the whole loop: one host call
        s.wait()
        # 100 iterations of GEMM + SCALAR_MUL + the condition, and the one before the node.
        assert len(fake.launches) == 1 + 3 * 100
        assert fake.launches.count("nnc_cond_set") == 101
        np.testing.assert_allclose(x.numpy(), cx.numpy(), rtol=1e-5, atol=1e-6)
        assert cg.while_count(body) == cbody.while_count == 100


def test_while_count_before_a_replay_and_host_count_untouched(fake):
    g, body, x = power_loop(True, iters=7)
    cg, s = capture(g)
    assert body.while_count == 7                         # the warm-up run, host-driven
    assert cg.while_count(body) == -1                    # no replay yet
    cg.replay(s)
    s.wait()
    assert cg.while_count(body) == 7
    other = nnc.Graph()
    with pytest.raises(nnc.GraphError, match="not the body of a while node captured"):
        cg.while_count(other)


@pytest.mark.parametrize("head_empty", [True, False])
def test_data_dependent_loop_matches_cpu(fake, head_empty):
    cpu, cbody, cs = halving_loop(False, head_empty)
    cpu.run()
    g, body, s_t = halving_loop(True, head_empty)
    cg, s = capture(g)
    for _ in range(2):
        nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [np.array([1000.0], np.float32)], [s_t])
        cg.replay(s)
        s.wait()
        np.testing.assert_array_equal(s_t.numpy(), cs.numpy())
        assert cg.while_count(body) == cbody.while_count
    # The do-while halves once more than it tests true: the two forms differ, as on the CPU.
    assert cbody.while_count == (10 if head_empty else 9)
    assert body.while_count == cbody.while_count         # the host-driven warm-up agrees


def test_body_on_two_streams(fake):
    cpu, cbody, cx = power_loop(False, iters=20, streams=2)
    cpu.run()
    g, body, x = power_loop(True, iters=20, streams=2)
    nnc.static_schedule(g, stream_type="gpu")
    assert body.schedule.stream_count == 2
    s = nnc.Stream("gpu")
    cg = cgraph.capture(g, s)
    nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [X0.copy()], [x])
    cg.replay(s)
    s.wait()
    np.testing.assert_allclose(x.numpy(), cx.numpy(), rtol=1e-5, atol=1e-6)
    assert cg.while_count(body) == 20


def _nested(gpu):
    """An outer loop of 3 around an inner loop of 4 doubling v: v * 2**12."""
    v = _t(np.ones(2, np.float32), gpu)
    g, outer, inner = nnc.Graph(), nnc.Graph(), nnc.Graph()
    n1 = inner.exec(nnc.Cmd("NOOP"))
    inner.concat(n1, inner.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [v], [v]))
    inner.set_while_expr(nnc.Compare("count", "<", 4), [], [n1])
    n0 = outer.exec(nnc.Cmd("NOOP"))
    outer.concat(n0, outer.while_(inner))
    outer.set_while_expr(nnc.Compare("count", "<", 3), [], [n0])
    g.while_(outer)
    return g, outer, inner, v


def test_nested_loops(fake):
    g, outer, inner, v = _nested(True)
    cg, s = capture(g)
    nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [np.ones(2, np.float32)], [v])
    cg.replay(s)
    s.wait()
    np.testing.assert_array_equal(v.numpy(), [4096, 4096])
    assert (cg.while_count(outer), cg.while_count(inner)) == (3, 4)
    assert [k for k, _ in fake.conditional_nodes] == ["CU_GRAPH_COND_TYPE_WHILE"] * 2


def _case_graph(gpu, offset, branches):
    x = _t(np.array([-3.0], np.float32), gpu)
    y = _t(np.zeros(1, np.float32), gpu)
    g = nnc.Graph()
    c = g.case_of([x], [])
    g.set_case_of_expr(c, nnc.Compare(0, "<", 0.0), offset)
    for i, a in branches.items():
        b = nnc.Graph()
        b.exec(nnc.Cmd("SCALAR_MUL", a=a), [x], [y])
        g.set_case_of(c, b, i)
    return g, x, y


@pytest.mark.parametrize("offset, branches, kind", [
    (0, {0: 2.0, 1: 10.0}, "CU_GRAPH_COND_TYPE_SWITCH"),     # x >= 0: branch 0, else 1
    (-1, {0: 10.0}, "CU_GRAPH_COND_TYPE_IF"),                # x < 0: branch 0, else none
])
def test_case_of_as_if_and_switch(fake, offset, branches, kind):
    cg = s = None
    for xv in (-3.0, 4.0, -0.5):
        cpu, cx, cy = _case_graph(False, offset, branches)
        cx.numpy()[0] = xv
        cpu.run()
        if cg is None:
            g, x, y = _case_graph(True, offset, branches)
            cg, s = capture(g)
            assert [k for k, _ in fake.conditional_nodes] == [kind]
        nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [np.array([xv], np.float32)], [x])
        nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [np.zeros(1, np.float32)], [y])
        cg.replay(s)
        s.wait()
        np.testing.assert_array_equal(y.numpy(), cy.numpy())


def test_case_of_in_a_loop_body(fake):
    """A branch inside a loop: each iteration multiplies by 2 while x < 100, else by 1."""
    x = _t(np.array([1.0], np.float32), True)
    g, body = nnc.Graph(), nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    c = body.case_of([x], [])
    body.set_case_of_expr(c, nnc.Compare(0, ">=", 100.0), 0)
    for i, a in enumerate((2.0, 1.0)):
        b = nnc.Graph()
        b.exec(nnc.Cmd("SCALAR_MUL", a=a), [x], [x])
        body.set_case_of(c, b, i)
    body.concat(noop, c)
    body.set_while_expr(nnc.Compare("count", "<", 10), [], [noop])
    g.while_(body)
    cg, s = capture(g)
    nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [np.array([1.0], np.float32)], [x])
    cg.replay(s)
    s.wait()
    np.testing.assert_array_equal(x.numpy(), [128.0])   # 1, 2, ..., 128, then stays


def test_refusals_name_the_node_and_the_reason(fake):
    s = nnc.Stream("gpu")
    # A Python callable: only the host can evaluate it.
    g, body, x = power_loop(True, iters=3)
    body.set_while_expr(lambda count: count < 3, [], [body.execs[0]])
    nnc.static_schedule(g, stream_type="gpu")
    with pytest.raises(nnc.GraphError, match=r"node #0 WHILE: its expression is a Python callable"):
        cgraph.capture(g, s)
    # Head and tail both launch work.
    g, body, _ = halving_loop(True, head_empty=False)
    body.concat(body.execs[0], body.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [x], [x]))
    nnc.static_schedule(g, stream_type="gpu")
    with pytest.raises(nnc.GraphError, match="both its head"):
        cgraph.capture(g, s)
    # Host memory as the compared input.
    g, body, _ = halving_loop(True, head_empty=True)
    h = nnc.Tensor(np.ones(1, np.float32))
    body.set_while_expr(nnc.Compare(0, ">", 1), [h], [body.execs[1]])
    nnc.static_schedule(g, stream_type="gpu")
    with pytest.raises(nnc.GraphError, match="host memory"):
        cgraph.capture(g, s)
    # A case..of that can choose a branch never set.
    g, _, _ = _case_graph(True, 0, {0: 2.0})
    nnc.static_schedule(g, stream_type="gpu")
    with pytest.raises(nnc.GraphError, match="can choose branch 1, which was never set"):
        cgraph.capture(g, s)
    # Carry-overs re-point tensors.
    g, body, x = power_loop(True, iters=3)
    body.add_carry_over(body.execs[1].outputs[0], x)
    nnc.static_schedule(g, stream_type="gpu")
    with pytest.raises(nnc.GraphError, match="carry-overs"):
        cgraph.capture(g, s)
    assert fake.capture_stack == [] and fake.conditional_nodes == []    # nothing captured
    s.wait()


def test_compare_on_a_gpu_tensor_runs_host_driven(fake):
    """The same declarative loop, driven by the host on GPU streams (nnc.run.flow reads the
    compared element after waiting for the node's stream) and sequentially."""
    cpu, cbody, cs = halving_loop(False, True)
    cpu.run()
    g, body, s_t = halving_loop(True, True)
    nnc.static_schedule(g, stream_type="gpu")
    s = nnc.Stream("gpu")
    g.run(stream=s)
    s.wait()
    assert body.while_count == cbody.while_count
    np.testing.assert_array_equal(s_t.numpy(), cs.numpy())
    nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [np.array([1000.0], np.float32)], [s_t])
    g.run()
    np.testing.assert_array_equal(s_t.numpy(), cs.numpy())


def test_a_failure_inside_a_body_ends_the_capture(fake, monkeypatch):
    g, body, x = power_loop(True, iters=3)
    nnc.static_schedule(g, stream_type="gpu")
    s = nnc.Stream("gpu")
    g.run(stream=s)
    s.wait()
    real_add = fake.cuGraphAddNode
    monkeypatch.setattr(fake, "cuGraphAddNode",
                        lambda *a: (real.CUresult.CUDA_ERROR_NOT_SUPPORTED, None))
    with pytest.raises(nnc.GraphError, match="cuGraphAddNode failed"):
        cgraph.capture(g, s, warmup=False)
    assert fake.capture_stack == []                      # every capture ended
    monkeypatch.setattr(fake, "cuGraphAddNode", real_add)
    s.wait()
    cg = cgraph.capture(g, s)                            # the graph and stream still work
    cg.replay(s)
    s.wait()
    assert cg.while_count(body) == 3


def test_cublas_in_a_captured_body_makes_its_handles_on_the_body_streams(fake, monkeypatch):
    """A body is captured on streams of its own, which no warm-up ever used: the first GEMM
    there makes its cuBLAS handle mid-capture. The capture refused that allocation (on an
    H200: CUBLAS_STATUS_NOT_INITIALIZED, then a crash ending the capture); the handle is now
    made with the thread's capture mode relaxed, and the loop matches the CPU."""
    blas = fake_cublas.install(monkeypatch, fake)
    cpu, cbody, cx = power_loop(False, iters=10, streams=2)
    cpu.run()
    g, body, x = power_loop(True, iters=10, streams=2)
    nnc.static_schedule(g, stream_type="gpu")
    s = nnc.Stream("gpu")
    g.run(stream=s)                     # the warm-up's handles are on other streams
    s.wait()
    warm = set(blas.handles)
    del blas.calls[:]
    cg = cgraph.capture(g, s, warmup=False)
    assert fake.capture_invalidated is None
    made = set(blas.handles) - warm
    assert len(made) == 1               # one more handle: the body's GEMM stream's
    assert fake.calls.count("cuThreadExchangeStreamCaptureMode") >= 2   # relaxed, restored
    # The body's GEMM was captured once, through cuBLAS, with the new handle (replays rerun it).
    assert [h for _, h, _ in blas.calls] == list(made)
    nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [X0.copy()], [x])
    cg.replay(s)
    s.wait()
    np.testing.assert_allclose(x.numpy(), cx.numpy(), rtol=1e-5, atol=1e-6)
    assert cg.while_count(body) == 10


def test_cublas_in_a_captured_branch(fake, monkeypatch):
    fake_cublas.install(monkeypatch, fake)
    a = np.arange(4, dtype=np.float32).reshape(2, 2)
    outs = []
    for gpu in (False, True):
        x, w = _t(np.array([[-1.0, 2.0]], np.float32), gpu), _t(a, gpu)
        y = _t(np.zeros((1, 2), np.float32), gpu)
        flag = _t(np.array([-1.0], np.float32), gpu)
        g, b = nnc.Graph(), nnc.Graph()
        b.exec(nnc.Cmd("GEMM"), [x, w], [y])
        c = g.case_of([flag], [])
        g.set_case_of_expr(c, nnc.Compare(0, "<", 0.0), -1)
        g.set_case_of(c, b, 0)
        if gpu:
            cg, s = capture(g)
            cg.replay(s)
            s.wait()
        else:
            g.run()
        outs.append(y.numpy())
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6)
    np.testing.assert_allclose(outs[0], np.array([[-1.0, 2.0]]) @ a, rtol=1e-6)
