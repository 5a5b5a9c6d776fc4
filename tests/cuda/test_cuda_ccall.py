"""nnc/cuda/_ccall.pyx: the driver calls every node makes (launch, record, wait) go through C
function pointers. The fake driver offers its own entry points, so this path runs without a GPU;
on a GPU (skipped elsewhere) the same run goes through libcuda's."""

import gc

import numpy as np
import pytest
from fakes.cuda_driver import install, real

import nnc
from nnc import cuda
from nnc.cuda import _ccall, memory
from nnc.cuda import capture as cgraph
from nnc.cuda import driver as drv
from nnc.cuda.gpu_stream import device_half, signal_half

pytestmark = pytest.mark.skipif(real is None, reason="cuda-bindings is not installed (the fake "
                                "driver borrows its enums and handle types)")


def _diamond():
    """a -> (b, c) -> d on GPU tensors: y = 2x + (x + x)."""
    g = nnc.Graph()
    x = memory.from_numpy(np.arange(6, dtype=np.float32), "gpu")
    t1, t2, t3, y = (nnc.Tensor.empty((6,), device="gpu") for _ in range(4))
    a = g.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [x], [t1])
    b = g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [t1], [t2])
    c = g.exec(nnc.Cmd("EWSUM"), [t1, t1], [t3])
    d = g.exec(nnc.Cmd("EWSUM"), [t2, t3], [y])
    for p, q in ((a, b), (a, c), (b, d), (c, d)):
        g.concat(p, q)
    nnc.static_schedule(g, stream_type="gpu")
    return g, y


def _run_twice_and_replay(f):
    """(driver calls of a second scheduled run and of a capture + replay, outputs)."""
    g, y = _diamond()
    s = nnc.Stream("gpu")
    g.run(stream=s)                     # first run: compiles, loads, creates streams/events
    s.wait()
    del f.calls[:]
    g.run(stream=s)
    s.wait()
    run_calls = [c for c in f.calls if c != "cuCtxSetCurrent"]
    out = [y.numpy().copy()]
    cg = cgraph.capture(g, s)
    memory.fill_zero(y)
    del f.calls[:]
    cg.replay(s)
    s.wait()
    replay_calls = [c for c in f.calls if c != "cuCtxSetCurrent"]
    out.append(y.numpy().copy())
    return run_calls, replay_calls, out


@pytest.mark.parametrize("env", ["1", "0"])
def test_c_and_python_paths_make_the_same_calls(monkeypatch, env):
    monkeypatch.setenv("NNC_CUDA_C_CALLS", env)
    f = install(monkeypatch)
    run_calls, replay_calls, out = _run_twice_and_replay(f)
    c = drv.device(0).ccalls
    assert isinstance(c, _ccall.CCalls) == (env == "1")
    assert run_calls.count("cuLaunchKernel") == 4 and "cuEventRecord" in run_calls
    assert "cuStreamWaitEvent" in run_calls and replay_calls == ["cuGraphLaunch",
                                                                 "cuStreamSynchronize"]
    for o in out:
        np.testing.assert_array_equal(o, 4 * np.arange(6))
    assert f.c_errors == []
    gc.collect()


def test_both_paths_agree_call_for_call(monkeypatch):
    seqs = []
    for env in ("1", "0"):
        with monkeypatch.context() as m:
            m.setenv("NNC_CUDA_C_CALLS", env)
            f = install(m)
            seqs.append(_run_twice_and_replay(f)[0])
            gc.collect()
    assert seqs[0] == seqs[1]


@pytest.mark.parametrize("name, code", [
    ("cuLaunchKernel", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
    ("cuEventRecord", "CUDA_ERROR_INVALID_HANDLE"),
    ("cuStreamWaitEvent", "CUDA_ERROR_INVALID_HANDLE"),
])
def test_a_failed_c_call_raises_and_the_stream_recovers(monkeypatch, name, code):
    f = install(monkeypatch)
    g, y = _diamond()
    s = nnc.Stream("gpu")
    g.run(stream=s)
    s.wait()
    good = getattr(f, name)
    setattr(f, name, lambda *a: (getattr(real.CUresult, code),))
    with pytest.raises(nnc.CUDAError, match=f"{name} failed: {code}"):
        g.run(stream=s)
    setattr(f, name, good)
    s.wait(timeout=10)
    memory.fill_zero(y)
    g.run(stream=s)
    s.wait()
    np.testing.assert_array_equal(y.numpy(), 4 * np.arange(6))
    assert f.c_errors == []
    gc.collect()


def test_a_closed_cuda_stream_is_an_error_not_a_crash(monkeypatch):
    f = install(monkeypatch)
    g, _ = _diamond()
    s = nnc.Stream()
    gs = nnc.Stream("gpu")
    g.run(stream=gs)
    gs.wait()
    device_half(gs).cuda.close()
    with pytest.raises(nnc.CUDAError, match="closed"):
        g.run(stream=gs)
    assert f.c_errors == [] and s.query()
    gc.collect()


def test_a_closed_cuda_event_is_an_error_not_a_crash(monkeypatch):
    f = install(monkeypatch)
    g, _ = _diamond()
    s = nnc.Stream("gpu")
    g.run(stream=s)
    s.wait()
    sig = nnc.Signal("gpu")
    signal_half(sig).event.close()
    with pytest.raises(nnc.CUDAError, match="closed"):
        s.emit(sig)
    with pytest.raises(nnc.CUDAError, match="closed"):
        s.wait_signal(sig)
    g.run(stream=s)
    s.wait()
    assert f.c_errors == []
    gc.collect()


def test_on_a_real_gpu_the_calls_come_from_libcuda():
    if not cuda.available():
        pytest.skip(f"no GPU: {cuda.unavailable_reason()}")
    g, y = _diamond()
    s = nnc.Stream("gpu")
    for _ in range(3):
        memory.fill_zero(y)
        g.run(stream=s)
        s.wait()
        np.testing.assert_array_equal(y.numpy(), 4 * np.arange(6))
    c = drv.device(0).ccalls
    assert isinstance(c, _ccall.CCalls) or not _ccall.enabled()
