"""GPU stages in nnc.pipeline's local executor (docs/pipeline.md, "GPU stages"): a stage whose
graph is on gpu:N runs there, on a GPU stream of its own, and the pipeline copies what crosses
between the CPU and a GPU (or two GPUs) through host hand-overs. On the fake driver with two
GPUs (tests/fakes/cuda_driver.py), then on real GPUs where there are (gpu:1 is gpu:0 on a
machine with one). Every wait is bounded."""


import numpy as np
import pytest
from fakes.cuda_driver import real
from fakes.env import fake_or_gpu, second_gpu, two_gpu_fake

import nnc
from nnc import pipeline
from nnc.cuda import memory
from nnc.pipeline import PipelineError
from nnc.pipeline.graph_pack import graph_pack

T = 10.0        # seconds: the bound on every wait
SHAPE = (4, 8)


@pytest.fixture
def fake(monkeypatch):
    yield from two_gpu_fake(monkeypatch)


@pytest.fixture(params=["fake", "gpu"])
def env(request):
    return fake_or_gpu(request)


def empty(device):
    return nnc.Tensor.zeros(SHAPE, device=device)


def stages(dev_b="gpu:0", dev_c=None):
    """Four stages: a (CPU graph) y = 2x; b (a graph on dev_b) z = relu(y - 1) (a GPU
    schedule); c (a graph on dev_c) w = 3z + y (y straight from a); d (a CPU function)
    out = w / 2. All on the CPU with dev_b = dev_c = "cpu": the reference."""
    dev_c = dev_c or second_gpu()
    x, y = empty("cpu"), empty("cpu")
    ga = nnc.Graph()
    ga.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [y])
    a = pipeline.Module(ga, inputs={"x": x}, outputs=[y], name="a")

    yb, ones, d, z = empty(dev_b), empty(dev_b), empty(dev_b), empty(dev_b)
    gb = nnc.Graph()
    one = gb.exec(nnc.Cmd("SET", value=-1.0), [], [ones])
    add = gb.exec(nnc.Cmd("EWSUM"), [yb, ones], [d])
    relu = gb.exec(nnc.Cmd("RELU"), [d], [z])
    gb.concat(one, add)
    gb.concat(add, relu)
    if dev_b != "cpu":
        nnc.static_schedule(gb, stream_type="gpu")
    b = pipeline.Module(gb, inputs={"y": yb}, outputs=[z], name="b")

    zc, yc, z3, w = empty(dev_c), empty(dev_c), empty(dev_c), empty(dev_c)
    gc_ = nnc.Graph()
    mul = gc_.exec(nnc.Cmd("SCALAR_MUL", a=3.0), [zc], [z3])
    gc_.concat(mul, gc_.exec(nnc.Cmd("EWSUM"), [z3, yc], [w]))
    c = pipeline.Module(gc_, inputs={"z": zc, "y": yc}, outputs=[w], name="c")

    spec = (np.float32, SHAPE)
    dm = pipeline.Module.function(lambda w: w / 2, inputs={"w": spec}, outputs=[spec], name="d")
    cfg = pipeline.PipelineConfig()
    cfg.inputs["x"] = (a, "x")
    cfg.connect(a, 0, b, "y")
    cfg.connect(a, 0, c, "y")
    cfg.connect(b, 0, c, "z")
    cfg.connect(c, 0, dm, "w")
    cfg.outputs.append((dm, 0))
    return cfg, (a, b, c, dm)


def reference(x):
    y = 2 * x
    return (3 * np.maximum(y - 1, 0) + y) / 2


def test_cpu_gpu_gpu_cpu_stages_give_the_single_graphs_outputs(env):
    cfg, (_, b, c, _) = stages()
    assert b.device == "gpu:0" and c.device == second_gpu()
    cpu_cfg, cpu_mods = stages("cpu", "cpu")
    assert all(m.device == "cpu" for m in cpu_mods)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(6)]
    with pipeline.build(cfg, depth=4) as pm, pipeline.build(cpu_cfg, depth=4) as ref:
        for x in xs:
            for p in (pm, ref):
                p.set_input("x", x)
                p.run(timeout=T)
        for x in xs:
            got, want = pm.get_output(timeout=T), ref.get_output(timeout=T)
            assert got is not None and want is not None
            np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
            np.testing.assert_allclose(got[0], reference(x), rtol=1e-6)
    # A GPU stage's reference run: synchronous, the same copies.
    x = xs[0]
    np.testing.assert_allclose(b.run({"y": 2 * x})[0], np.maximum(2 * x - 1, 0), rtol=1e-6)


def test_a_gpu_stage_runs_on_its_gpu(fake):
    cfg, (_, b, c, _) = stages("gpu:1", "gpu:0")
    with pipeline.build(cfg, depth=2) as pm:
        fake.launched_on.clear()
        pm.set_input("x", np.ones(SHAPE, np.float32))
        pm.run(timeout=T)
        got = pm.get_output(timeout=T)
    np.testing.assert_allclose(got[0], reference(np.ones(SHAPE, np.float32)), rtol=1e-6)
    ctx = {int(nnc.cuda.driver.device(i).context): f"gpu:{i}" for i in (0, 1)}
    ran = {(name, ctx[c_]) for name, _s, c_ in fake.launched_on}
    assert ("nnc_relu_f32", "gpu:1") in ran and ("nnc_scalar_mul_f32", "gpu:0") in ran
    assert {dev for name, dev in ran if name in ("nnc_relu_f32", "nnc_set_f32")} == {"gpu:1"}
    assert not fake.faults


def test_a_failure_on_the_device_fails_that_input_only(fake):
    cfg, _ = stages()
    sync = fake.cuStreamSynchronize
    calls = []

    def fail_once(s):
        calls.append(s)
        if len(calls) == 1:
            return (real.CUresult.CUDA_ERROR_LAUNCH_FAILED,)
        return sync(s)

    with pipeline.build(cfg, depth=2) as pm:
        fake.cuStreamSynchronize = fail_once
        x = np.ones(SHAPE, np.float32)
        pm.set_input("x", x)
        pm.run(timeout=T)
        with pytest.raises(PipelineError, match="stage b failed on input #0") as info:
            pm.get_output(timeout=T)
        assert isinstance(info.value.__cause__, nnc.StreamError)
        assert "CUDA_ERROR_LAUNCH_FAILED" in str(info.value.__cause__)
        pm.run(timeout=T)                       # the next input runs normally
        np.testing.assert_allclose(pm.get_output(timeout=T)[0], reference(x), rtol=1e-6)
        # A failure reported while the stage waits for its graph's run (its GPU stream).
        query = fake.cuStreamQuery
        fake.cuStreamQuery = lambda s: (real.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,)
        pm.run(timeout=T)
        with pytest.raises(PipelineError, match="stage b failed on input #2") as info:
            pm.get_output(timeout=T)
        assert "CUDA_ERROR_ILLEGAL_ADDRESS" in str(info.value.__cause__)
        fake.cuStreamQuery = query
        pm.run(timeout=T)
        np.testing.assert_allclose(pm.get_output(timeout=T)[0], reference(x), rtol=1e-6)


def test_an_enqueue_failure_in_a_gpu_stage_is_reported(fake):
    # A node of gpu:1 in a stage without a schedule runs on the stage's gpu:0 stream: refused
    # when launched, reported as the stage's failure of that input (with its cause).
    xb, yb = empty("gpu:0"), empty("gpu:0")
    y1, z1 = empty("gpu:1"), empty("gpu:1")
    g = nnc.Graph()
    copy = g.exec(nnc.Cmd("DATA_TRANSFER"), [yb], [y1])
    g.concat(g.exec(nnc.Cmd("RELU"), [xb], [yb]), copy)
    g.concat(copy, g.exec(nnc.Cmd("RELU"), [y1], [z1]))
    m = pipeline.Module(g, inputs={"x": xb}, outputs=[z1], name="mixed")
    assert m.device == "gpu:0"
    cfg = pipeline.PipelineConfig()
    cfg.inputs["x"] = (m, "x")
    cfg.outputs.append((m, 0))
    with pipeline.build(cfg, depth=2) as pm:
        pm.set_input("x", np.ones(SHAPE, np.float32))
        pm.run(timeout=T)
        with pytest.raises(PipelineError, match="stage mixed failed on input #0") as info:
            pm.get_output(timeout=T)
        assert isinstance(info.value.__cause__, nnc.CommandError)
        assert "on gpu:1 but the stream is on gpu:0" in str(info.value.__cause__)
        # Scheduled, each node runs on its own GPU: the same pipeline then works.
        nnc.static_schedule(g, stream_type="gpu")
        pm.run(timeout=T)
        np.testing.assert_array_equal(pm.get_output(timeout=T)[0], np.ones(SHAPE))


def test_gpu_stage_tensors_are_checked(fake):
    buf = empty("gpu:0")
    col = buf.view((4, 4), strides=(8, 1))          # a strided GPU view
    out = empty("gpu:0")
    g = nnc.Graph()
    g.exec(nnc.Cmd("RELU"), [buf], [out])
    with pytest.raises(PipelineError, match="must be contiguous"):
        pipeline.Module(g, inputs={"x": col}, outputs=[out])
    with pytest.raises(PipelineError, match="is not an input of any node"):
        pipeline.Module(g, inputs={"x": empty("gpu:0")}, outputs=[out])
    with pytest.raises(PipelineError, match="is not an output of any node"):
        pipeline.Module(g, inputs={"x": buf}, outputs=[empty("gpu:1")])
    m = pipeline.Module(g, inputs={"x": buf.view(SHAPE)}, outputs=[out])   # its own memory
    assert m.device == "gpu:0"
    # Another process cannot take a GPU stage (pipeline.split and the Ray executor pack it).
    with pytest.raises(PipelineError, match="is on gpu:0; pipeline.split and the Ray"):
        graph_pack(g, {"x": buf}, [out])


def test_gpu_outputs_are_host_copies(fake):
    x = memory.from_numpy(np.ones(SHAPE, np.float32), "gpu:0")
    y = empty("gpu:0")
    g = nnc.Graph()
    g.exec(nnc.Cmd("SCALAR_MUL", a=5.0), [x], [y])
    m = pipeline.Module(g, inputs={"x": x}, outputs=[y])
    first = m.run({"x": np.ones(SHAPE, np.float32)})[0]
    second = m.run({"x": np.full(SHAPE, 2, np.float32)})[0]
    assert isinstance(first, np.ndarray) and first is not second
    np.testing.assert_array_equal(first, np.full(SHAPE, 5))     # not changed by the next run
    np.testing.assert_array_equal(second, np.full(SHAPE, 10))
