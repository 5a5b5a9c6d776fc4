"""Timed cuDNN plans (nnc/cmd/convolution/gpu/cudnn.py): every candidate timed on first use, the
fastest kept and cached on disk, the record implementation() returns. Against the fake driver of
tests/fakes/cuda_driver.py and the fake frontend of tests/fakes/cudnn_frontend.py, whose candidates
have known costs and whose clock advances by exactly those costs, so every choice here is
deterministic. The disk cache always lives in the test's tmp_path."""

import gc
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import numpy as np
import pytest
from fakes.cuda_driver import install, real
from fakes.cudnn_frontend import Candidate, knob_type
from fakes.cudnn_frontend import install as install_cudnn
from test_cuda_cudnn import _case, _gpu, _nhwc_strides, _ref, _run_conv, _tol

import nnc
from nnc.cmd.convolution.gpu import cudnn as cudnn_conv
from nnc.cuda import driver as drv
from nnc.cuda import memory

pytestmark = pytest.mark.skipif(real is None, reason="cuda-bindings is not installed (the fake "
                                "driver borrows its enums and handle types)")

PARAMS = dict(padding=1, activation="relu")
X, W, B = (2, 7, 6, 4), (6, 3, 3, 4), None


@pytest.fixture
def dnn(monkeypatch, tmp_path):
    fake_drv = install(monkeypatch, count=1)
    yield install_cudnn(monkeypatch, fake_drv, tmp_path)
    gc.collect()        # free fake buffers while the fake driver is installed


def _forget(monkeypatch):
    """Drop every in-memory plan, as a new process starts: only the disk cache remains."""
    monkeypatch.setattr(cudnn_conv, "_devices", weakref.WeakKeyDictionary())


def _node(params=PARAMS, seed=3):
    x, w, b = _case(X, W, seed=seed)
    ins = [_gpu(x), _gpu(w), _gpu(b)]
    cmd = nnc.Cmd("CONVOLUTION", **params)
    out = nnc.Tensor.empty((2, 7, 6, 6), device="gpu")
    return cmd, ins, out, (x, w, b)


def _run_checked(params=PARAMS, seed=3):
    """Run one convolution through the default backend; it must match CPU_REF and GPU_REF."""
    x, w, b = _case(X, W, seed=seed)
    got = _run_conv(params, x, w, b).numpy()
    np.testing.assert_allclose(got, _ref(params, x, w, b), **_tol(x, w, b))
    np.testing.assert_allclose(got, _run_conv(params, x, w, b, backend="GPU_REF").numpy(),
                               **_tol(x, w, b))
    cmd, ins, out, _ = _node(params, seed)
    return cudnn_conv.implementation(cmd, ins, [out])


def _selected_engine(dnn, params=PARAMS):
    cmd, ins, out, _ = _node(params)
    p = cudnn_conv.plan(drv.device(0), cmd, ins, [out])
    return p.graph.plans[p.graph.selected].engine


def _rows():
    with sqlite3.connect(cudnn_conv.cache_path()) as con:
        return con.execute("SELECT engine, knobs, name, us, candidates FROM plans").fetchall()


def test_the_fastest_candidate_wins_and_is_cached(dnn):
    rec = _run_checked()
    # Engine 11 is the fastest but uses TF32 (barred for float32); engine 7 is the heuristics'
    # first; engine 3 (10 us) is the fastest float32 plan.
    assert rec == {"impl": "cudnn fused", "plan": "fake_eng3[SWIZZLE=1,STAGES=3]",
                   "choice": "timed", "us": pytest.approx(10.0), "candidates": 3, "note": None}
    assert _selected_engine(dnn) == 3
    assert {e for _, e in dnn.timed} == {7, 3, 5}
    # Each candidate: one eager run, then _REPEAT executes captured and replayed.
    assert len(dnn.timed) == 3 * (1 + cudnn_conv._REPEAT)
    cmd, ins, out, _ = _node()
    p = cudnn_conv.plan(drv.device(0), cmd, ins, [out])
    assert p.workspace == 8192                                      # engine 3's
    assert [(i, n) for i, n, _ in p.choice.timings] == [
        (0, "fake_eng7[TILE_SIZE=2]"), (1, "fake_eng3[SWIZZLE=1,STAGES=3]"), (3, "fake_eng5[]")]
    assert [us for *_, us in p.choice.timings] == pytest.approx([30.0, 10.0, 20.0])
    ((engine, knobs, name, us, candidates),) = _rows()
    assert (engine, name, candidates) == (3, rec["plan"], 3) and us == pytest.approx(10.0)
    assert cudnn_conv._knobs_of(dnn, knobs) == {knob_type.SWIZZLE: 1, knob_type.STAGES: 3}
    # The node's own executions ran on its stream's handle, not the timing handle.
    timing = {h for h, _ in dnn.timed}
    assert not timing & {e[0] for e in dnn.executions}
    assert all(h.backend_handle is None for h in timing)


def test_a_new_process_replays_the_cached_winner_without_timing(dnn, monkeypatch):
    _run_checked()
    _forget(monkeypatch)
    dnn.timed.clear()
    dnn.plan_builds.clear()
    rec = _run_checked(seed=4)
    assert rec["choice"] == "cached" and rec["plan"] == "fake_eng3[SWIZZLE=1,STAGES=3]"
    assert rec["us"] == pytest.approx(10.0) and rec["candidates"] == 3
    assert not dnn.timed and dnn.plan_builds == [3]     # exactly the cached plan, built once
    assert _selected_engine(dnn) == 3


def test_the_cache_key_names_versions_device_and_geometry(dnn, monkeypatch):
    _run_checked()
    _forget(monkeypatch)
    dnn.timed.clear()
    monkeypatch.setattr(type(dnn), "__version__", "1.33.0+fake")    # another frontend
    assert _run_checked()["choice"] == "timed" and dnn.timed
    _forget(monkeypatch)
    dnn.timed.clear()
    monkeypatch.setattr(dnn, "backend_version", lambda: 92100)      # another cuDNN
    assert _run_checked()["choice"] == "timed" and dnn.timed
    _forget(monkeypatch)
    dnn.timed.clear()
    dnn.driver.arch = (10, 0)                                       # another device
    monkeypatch.setattr(drv, "_devices", {})
    assert _run_checked()["choice"] == "timed" and dnn.timed
    assert len(_rows()) == 4


def test_a_stale_entry_is_timed_again_and_overwritten(dnn, monkeypatch):
    _run_checked()
    _forget(monkeypatch)
    dnn.declined = {3}          # this cuDNN no longer builds the cached engine
    rec = _run_checked()
    assert rec["choice"] == "timed" and rec["plan"] == "fake_eng5[]"
    assert rec["note"] == "the cached plan no longer builds: timed again"
    assert rec["candidates"] == 2 and rec["us"] == pytest.approx(20.0)
    assert [r[0] for r in _rows()] == [5]                           # overwritten
    # A cached configuration the frontend does not know (an unknown engine, a knob name it
    # lacks) is stale too.
    with sqlite3.connect(cudnn_conv.cache_path()) as con:
        con.execute("UPDATE plans SET engine = 99, knobs = '[[\"NO_SUCH_KNOB\", 77, 1]]'")
    _forget(monkeypatch)
    dnn.timed.clear()
    rec = _run_checked()
    assert rec["choice"] == "timed" and dnn.timed and [r[0] for r in _rows()] == [5]


def test_a_corrupt_cache_file_costs_only_the_cache(dnn, monkeypatch):
    path = cudnn_conv.cache_path()
    with open(path, "wb") as f:
        f.write(b"this is not a database" * 100)
    with pytest.warns(RuntimeWarning, match="plan cache .* cannot be used"):
        rec = _run_checked()
    assert rec["choice"] == "timed" and rec["plan"] == "fake_eng3[SWIZZLE=1,STAGES=3]"
    with open(path, "rb") as f:
        assert f.read().startswith(b"this is not")                  # left for the user


def test_an_unwritable_cache_directory_costs_only_the_cache(dnn, monkeypatch, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("NNC_CACHE_DIR", str(blocker / "nnc"))      # cannot be created
    with pytest.warns(RuntimeWarning, match="plan cache"):
        rec = _run_checked()
    assert rec["choice"] == "timed"
    _forget(monkeypatch)
    assert _run_checked(seed=5)["choice"] == "timed"                 # nothing was cached


def test_an_empty_cache_dir_turns_the_disk_cache_off(dnn, monkeypatch, tmp_path):
    monkeypatch.setenv("NNC_CACHE_DIR", "")
    assert cudnn_conv.cache_path() is None
    assert _run_checked()["choice"] == "timed"
    assert not list(tmp_path.iterdir())


def test_default_cache_location(monkeypatch, tmp_path):
    monkeypatch.delenv("NNC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cudnn_conv.cache_path() == str(tmp_path / "xdg" / "nnc" / "cudnn_plans.sqlite3")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cudnn_conv.cache_path() == str(tmp_path / "home" / ".cache" / "nnc" /
                                          "cudnn_plans.sqlite3")


@pytest.mark.parametrize("how", ["env", "module"])
def test_tuning_off_keeps_the_heuristic_plan(dnn, monkeypatch, how):
    if how == "env":
        monkeypatch.setenv("NNC_CUDNN_TUNE", "0")
    else:
        monkeypatch.setenv("NNC_CUDNN_TUNE", "1")
        monkeypatch.setattr(cudnn_conv, "TUNE", False)              # overrides the variable
    rec = _run_checked()
    assert rec == {"impl": "cudnn fused", "plan": "fake_eng7[TILE_SIZE=2]",
                   "choice": "heuristic", "us": None, "candidates": 0,
                   "note": "timing is off"}
    assert not dnn.timed and dnn.plan_builds == [7]
    assert not os.path.exists(cudnn_conv.cache_path())


def test_tune_true_overrides_the_variable(dnn, monkeypatch):
    monkeypatch.setenv("NNC_CUDNN_TUNE", "off")
    monkeypatch.setattr(cudnn_conv, "TUNE", True)
    assert _run_checked()["choice"] == "timed"


def test_ties_go_to_the_heuristics_order(dnn):
    dnn.candidates = [Candidate(8, 10.0), Candidate(9, 10.0), Candidate(6, 10.0)]
    rec = _run_checked()
    assert rec["plan"] == "fake_eng8[]" and rec["candidates"] == 3


def test_barred_and_declined_candidates_are_skipped(dnn):
    dnn.declined = {3, 5}
    rec = _run_checked()
    assert rec["plan"] == "fake_eng7[TILE_SIZE=2]" and rec["candidates"] == 1
    assert {e for _, e in dnn.timed} == {7}


def test_no_candidate_builds_falls_back_as_before(dnn, monkeypatch):
    # No fused plan builds (engine 4 builds only the bare convolution): the bare convolution's
    # timed plan, then nnc's epilogue.
    dnn.declined = {7, 3, 5}
    dnn.candidates = [*dnn.candidates, Candidate(4, 40.0)]
    real_build = dnn.pygraph.build_plan_at_index

    def build(g, i):
        if g.relu_on and g.plans[i].engine == 4:
            raise dnn.cudnnGraphNotSupportedError("no fused engine")
        return real_build(g, i)

    monkeypatch.setattr(dnn.pygraph, "build_plan_at_index", build)
    rec = _run_checked()
    assert rec["impl"] == "cudnn + epilogue" and rec["plan"] == "fake_eng4[]"
    assert rec["choice"] == "timed" and rec["candidates"] == 1
    assert "nnc_bias_act_f32" in dnn.driver.launches


def test_a_candidate_that_cannot_be_timed_is_skipped(dnn, monkeypatch):
    real_time = cudnn_conv._time_plan

    def time_plan(dev, g, i, *args):
        if g.plans[i].engine == 3:
            raise RuntimeError("illegal instruction")
        return real_time(dev, g, i, *args)

    monkeypatch.setattr(cudnn_conv, "_time_plan", time_plan)
    rec = _run_checked()
    assert rec["plan"] == "fake_eng5[]" and rec["candidates"] == 2


def test_no_candidate_timed_runs_the_first_that_builds_untimed(dnn, monkeypatch):
    def fail(*args):
        raise RuntimeError("no timing today")

    monkeypatch.setattr(cudnn_conv, "_time_plan", fail)
    rec = _run_checked()
    assert rec["choice"] == "heuristic" and rec["plan"] == "fake_eng7[TILE_SIZE=2]"
    assert "no candidate could be timed" in rec["note"] and "no timing today" in rec["note"]
    assert not os.path.exists(cudnn_conv.cache_path())           # nothing timed: uncached


def test_first_use_while_capturing_is_untimed(dnn):
    cmd, ins, out, (x, w, b) = _node()
    s = drv.CudaStream(0)
    found = []
    captured = drv.CudaGraph.capture(
        s, lambda: found.append(cudnn_conv.plan(drv.device(0), cmd, ins, [out])))
    captured.close()
    assert dnn.driver.capture_invalidated is None       # nothing illegal ran in the capture
    (p,) = found
    assert p.choice.how == "heuristic" and "capturing a CUDA graph" in p.choice.note
    assert not dnn.timed
    assert not os.path.exists(cudnn_conv.cache_path())
    nnc.cmd_exec(cmd, ins, [out])                       # and it runs correctly
    np.testing.assert_allclose(out.numpy(), _ref(PARAMS, x, w, b), **_tol(x, w, b))


def test_threads_asking_at_once_time_once(dnn, monkeypatch):
    # Slow builds, so that every thread arrives while the first is still building.
    real_build = dnn.pygraph.build_plan_at_index

    def build(g, i):
        time.sleep(0.01)
        return real_build(g, i)

    monkeypatch.setattr(dnn.pygraph, "build_plan_at_index", build)
    errors = []

    def go():
        try:
            _run_checked()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and not errors, errors
    assert len(dnn.builds) == 1
    assert len(dnn.timed) == 3 * (1 + cudnn_conv._REPEAT)


def test_implementation_records(dnn, monkeypatch):
    # Declined fused: the bare plan and nnc's epilogue, the bare plan's record.
    dnn.refuse = lambda d: "no fused engine" if d["relu"] else None
    rec = _run_checked()
    assert rec["impl"] == "cudnn + epilogue" and rec["choice"] == "timed"
    assert rec["plan"] == "fake_eng3[SWIZZLE=1,STAGES=3]"
    # Declined altogether: GPU_REF.
    dnn.refuse = lambda d: "no" if d["groups"] > 1 else None
    x, w, b = _case((1, 9, 8, 4), (4, 3, 2, 2))
    params = dict(stride=(2, 1), padding=(1, 0, 0, 1), groups=2)
    out = _run_conv(params, x, w, b)
    rec = cudnn_conv.implementation(nnc.Cmd("CONVOLUTION", **params),
                                    [_gpu(x), _gpu(w), _gpu(b)], [out])
    assert rec["impl"] == "GPU_REF" and rec["plan"] is None and rec["choice"] is None
    # Zero-size output: nothing runs.
    x, w, b = _case((0, 5, 5, 3), (4, 3, 3, 3))
    out = nnc.Tensor.empty((0, 5, 5, 4), device="gpu")
    rec = cudnn_conv.implementation(nnc.Cmd("CONVOLUTION", padding=1),
                                    [_gpu(x), _gpu(w), _gpu(b)], [out])
    assert rec["impl"] == "none"
    # Zero input channels, and a misaligned concat slice: GPU_REF's kernel.
    x, w, b = _case((2, 4, 4, 0), (5, 3, 3, 0))
    out = nnc.Tensor.empty((2, 4, 4, 5), device="gpu")
    rec = cudnn_conv.implementation(nnc.Cmd("CONVOLUTION", padding=1),
                                    [_gpu(x), _gpu(w), _gpu(b)], [out])
    assert rec["impl"] == "GPU_REF"
    x, w, b = _case((2, 7, 6, 4), (6, 3, 3, 4))
    buf = nnc.Tensor.zeros((2, 7, 6, 9), device="gpu")
    out = buf.view((2, 7, 6, 6), offset=1, strides=_nhwc_strides((2, 7, 6, 6), 9))
    rec = cudnn_conv.implementation(nnc.Cmd("CONVOLUTION", padding=1),
                                    [_gpu(x), _gpu(w), _gpu(b)], [out])
    assert rec["impl"] == "GPU_REF" and rec["note"]


def test_implementation_without_cudnn(dnn, monkeypatch):
    monkeypatch.setattr(cudnn_conv, "_status", (None, "cuDNN is not here"))
    cmd, ins, out, _ = _node()
    rec = cudnn_conv.implementation(cmd, ins, [out])
    assert rec["impl"] == "GPU_REF" and rec["note"] == "cuDNN is not here"


def test_autotune_compares_gpu_ref_with_the_timed_plan(dnn):
    x, w, b = _case(X, W)
    g = nnc.Graph()
    out = nnc.Tensor.empty((2, 7, 6, 6), device="gpu")
    node = g.exec(nnc.Cmd("CONVOLUTION", **PARAMS), [_gpu(x), _gpu(w), _gpu(b)], [out])
    assert node.backend == "GPU_OPT"
    assert cudnn_conv.implementation(node.cmd, node.inputs, node.outputs)["choice"] == "timed"
    timed = len(dnn.timed)
    assert g.autotune() in (0, 1)
    assert g.execs[0].backend in ("GPU_OPT", "GPU_REF")
    assert len(dnn.timed) == timed          # autotune ran the timed plan: nothing re-timed
    s = nnc.Stream("gpu")
    memory.fill_zero(out)
    g.run(stream=s)
    s.wait()
    np.testing.assert_allclose(out.numpy(), _ref(PARAMS, x, w, b), **_tol(x, w, b))


@pytest.mark.slow
def test_concurrent_writers_in_two_processes(tmp_path):
    # Two processes writing the same cache file at once: every entry lands, none fails.
    script = textwrap.dedent("""
        import sys, warnings
        warnings.simplefilter("error")
        from nnc.cmd.convolution.gpu import cudnn as c
        who = sys.argv[1]
        for k in range(60):
            choice = c._Choice("timed", f"plan{who}{k}", 1.0 + k, 3, engine=k, knobs="[]")
            c._cache_put((92000, "1.32", "gpu", 90, f"{who}-{k}"), choice)
            c._cache_put((92000, "1.32", "gpu", 90, "shared"), choice)
    """)
    env = {**os.environ, "NNC_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", script, who], env=env,
                              stderr=subprocess.PIPE) for who in "ab"]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    with sqlite3.connect(tmp_path / cudnn_conv.CACHE_FILE) as con:
        geoms = {r[0] for r in con.execute("SELECT geometry FROM plans")}
    assert geoms == {f"{w}-{k}" for w in "ab" for k in range(60)} | {"shared"}


def test_real_gpu_times_then_replays_from_the_cache(monkeypatch, tmp_path):
    from nnc import cuda

    if not cuda.available():
        pytest.skip(f"no GPU: {cuda.unavailable_reason()}")
    if not cudnn_conv.available():
        pytest.skip(f"no cuDNN: {cudnn_conv.unavailable_reason()}")
    monkeypatch.setenv("NNC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("NNC_CUDNN_TUNE", raising=False)
    monkeypatch.setattr(cudnn_conv, "TUNE", None)
    _forget(monkeypatch)
    x, w, b = _case((1, 35, 35, 48), (64, 5, 5, 48), seed=11)
    params = dict(padding=2, activation="relu")
    recs = []
    for _ in range(2):
        got = _run_conv(params, x, w, b).numpy()
        np.testing.assert_allclose(got, _ref(params, x, w, b), **_tol(x, w, b))
        out = nnc.Tensor.empty(got.shape, device="gpu")
        recs.append(cudnn_conv.implementation(nnc.Cmd("CONVOLUTION", **params),
                                              [_gpu(x), _gpu(w), _gpu(b)], [out]))
        _forget(monkeypatch)            # the second round is a new process: the cache only
    first, second = recs
    assert first["impl"] in ("cudnn fused", "cudnn + epilogue"), first
    assert first["choice"] == "timed" and first["candidates"] >= 1 and first["us"] > 0, first
    assert second["choice"] == "cached" and second["plan"] == first["plan"], (first, second)
