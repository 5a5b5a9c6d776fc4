"""Every registered scheduling policy runs on GPU streams through the one runner:
each policy's schedule of a small branchy graph, run on a GPU stream through the fake driver
(tests/fakes/cuda_driver.py), gives what the CPU run of the same graph gives, and the runner makes
exactly the waits and records that policy's schedule asks for. GPU results need a GPU:
tests/test_cuda_gpu.py runs kernels on one."""

import gc

import numpy as np
import pytest
from fakes.cuda_driver import install, real

import nnc
from nnc.cuda import memory
from nnc.schedule.schedule import POLICIES

pytestmark = pytest.mark.skipif(real is None, reason="cuda-bindings is not installed (the fake "
                                "driver borrows its enums and handle types)")

N = 8


@pytest.fixture
def fake(monkeypatch):
    yield install(monkeypatch, count=1)
    gc.collect()        # free fake buffers while the fake driver is still installed


def _branchy(x, empty):
    """x -> a -> (b -> e, c, d) -> f(c, d) -> g(e, f): three branches of unequal length that
    join twice. ``empty()`` makes a tensor on the device. Returns graph, output, nodes."""
    g = nnc.Graph()
    ta, tb, tc, td, te, tf, y = (empty() for _ in range(7))
    a = g.exec(nnc.Cmd("SCALAR_MUL", a=1.5), [x], [ta], name="a")
    b = g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [ta], [tb], name="b")
    c = g.exec(nnc.Cmd("EWSUM"), [ta, ta], [tc], name="c")
    d = g.exec(nnc.Cmd("SCALAR_MUL", a=-3.0), [ta], [td], name="d")
    e = g.exec(nnc.Cmd("SCALAR_MUL", a=0.5), [tb], [te], name="e")
    f = g.exec(nnc.Cmd("EWSUM"), [tc, td], [tf], name="f")
    h = g.exec(nnc.Cmd("EWSUM"), [te, tf], [y], name="g")
    for u, v in ((a, b), (a, c), (a, d), (b, e), (c, f), (d, f), (e, h), (f, h)):
        g.concat(u, v)
    return g, y, (a, b, c, d, e, f, h)


def _costs(nodes):
    # unequal, so the cost-aware policies have something to decide
    return {n: (k % 3 + 1) * 1e-4 for k, n in enumerate(nodes)}


def _cpu_result():
    x = np.arange(N, dtype=np.float32) - 3
    g, y, nodes = _branchy(nnc.Tensor(x), lambda: nnc.Tensor.empty((N,)))
    g.run()
    return x, y.numpy().copy()


@pytest.mark.parametrize("max_streams", [0, 2])
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_runs_on_gpu_streams(fake, policy, max_streams):
    x_host, want = _cpu_result()
    x = memory.from_numpy(x_host, "gpu:0")
    g, y, nodes = _branchy(x, lambda: nnc.Tensor.empty((N,), device="gpu:0"))
    sched = nnc.static_schedule(g, stream_type="gpu", max_streams=max_streams, policy=policy,
                                costs=_costs(nodes))
    sched.verify()
    assert sched.policy == policy and sched.stream_type.startswith("gpu")
    if max_streams:
        assert sched.stream_count <= max_streams
    s = nnc.Stream("gpu")
    g.run(stream=s)                     # first run: compiles, loads, creates streams/events
    s.wait()
    np.testing.assert_array_equal(y.numpy(), want)
    # Second run: the same runner as on CPU streams, driven by this policy's schedule.
    memory.fill_zero(y)
    del fake.calls[:]
    g.run(stream=s)
    want_calls = ["cuEventRecord", "cuStreamWaitEvent"]
    want_calls += ["cuStreamWaitEvent"] * len(sched.entry_streams)
    for e in sched.order:
        es = sched[e]
        want_calls += ["cuStreamWaitEvent"] * len(es.waits) + ["cuLaunchKernel"]
        want_calls += ["cuEventRecord"] * len(es.signals)
    want_calls += ["cuStreamWaitEvent"] * len(sched.exit_waits)
    want_calls += ["cuLaunchHostFunc", "cuEventRecord", "cuStreamWaitEvent"]
    assert [c for c in fake.calls if c != "cuCtxSetCurrent"] == want_calls
    s.wait()
    np.testing.assert_array_equal(y.numpy(), want)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_runs_on_cpu_streams(policy):
    x_host, want = _cpu_result()
    g, y, nodes = _branchy(nnc.Tensor(x_host), lambda: nnc.Tensor.empty((N,)))
    for cap in (0, 1, 2):
        sched = nnc.static_schedule(g, max_streams=cap, policy=policy, costs=_costs(nodes))
        sched.verify()
        y.numpy()[...] = 0
        s = nnc.Stream("cpu")
        g.run(stream=s)
        s.wait()
        np.testing.assert_array_equal(y.numpy(), want)
