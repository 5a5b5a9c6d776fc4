"""``pipeline.build(cfg, executor="ray")``: stages on Ray actors give the local executor's
results (docs/pipeline.md, "Stages on Ray"). One local Ray cluster for the whole file."""

import sys

import numpy as np
import pytest
from _pipeline_rfc import closed_form, rfc_config, run_sequential

import nnc
from nnc import pipeline
from nnc.models import build_inception_v3_model
from nnc.pipeline import PipelineError
from nnc.pipeline.graph_pack import graph_pack, graph_unpack

# One local Ray cluster for the whole module: seconds to start (docs/dev.md, "The quick loop").
pytestmark = pytest.mark.slow


def test_without_ray_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)        # import ray -> ImportError
    spec = ("float32", (2,))
    m = pipeline.Module.function(lambda x: x, inputs={"x": spec}, outputs=[spec])
    cfg = pipeline.PipelineConfig()
    cfg.inputs["x"] = (m, "x")
    cfg.outputs.append((m, 0))
    with pytest.raises(PipelineError, match=r"nnc-graph\[ray\]"):
        pipeline.build(cfg, executor="ray")


def test_graph_pack_round_trip_keeps_views():
    """Packed and rebuilt, a graph whose nodes write views of one buffer computes the same,
    and the views still alias one buffer in the copy."""
    g = nnc.Graph()
    x = nnc.Tensor(np.arange(4, dtype=np.float32))
    buf = nnc.Tensor.zeros((8,), "float32")
    left, right = buf.view((4,), offset=0), buf.view((4,), offset=4)
    y = nnc.Tensor.zeros((8,), "float32")
    a = g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [left], name="a")
    b = g.exec(nnc.Cmd("EWSUM"), [x, x], [right], name="b")
    c = g.exec(nnc.Cmd("SCALAR_MUL", a=3.0), [buf], [y], name="c")
    g.concat(a, b)
    g.concat(b, c)
    pack = graph_pack(g, {"x": x}, [y])
    g2, ins, outs = graph_unpack(pack)
    assert [e.name for e in g2.execs] == ["a", "b", "c"]
    ins["x"].numpy()[...] = [1, 2, 3, 4]
    g2.run()
    np.testing.assert_array_equal(outs[0].numpy(), [6, 12, 18, 24, 6, 12, 18, 24])
    assert x.numpy().tolist() == [0, 1, 2, 3]            # the original is untouched


@pytest.fixture(scope="module")
def cluster():
    """A local 2-CPU Ray cluster for the tests that take it; they skip without Ray."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (the ray extra: "
                              "pip install \"nnc-graph[ray]\")")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    yield
    if started:
        ray.shutdown()


def _feed(pm, feeds):
    """Run every input (at most depth in flight) and return the outputs in input order."""
    outs = []
    for feed in feeds:
        if pm.num_executing() >= pm.depth:
            outs.append(pm.get_output(timeout=60))
        for name, v in feed.items():
            pm.set_input(name, v)
        pm.run(timeout=60)
    while len(outs) < len(feeds):
        outs.append(pm.get_output(timeout=60))
    return outs


@pytest.mark.usefixtures("cluster")
def test_rfc_graph_matches_local_and_sequential():
    """The RFC network, 5 rounds: Ray's outputs equal the local executor's and running the
    three modules one after another."""
    rng = np.random.default_rng(0)
    feeds = [{"data_a": rng.standard_normal((3, 3)).astype(np.float32),
              "data_b": rng.standard_normal((3, 3)).astype(np.float32)} for _ in range(5)]
    cfg, mods = rfc_config()
    with pipeline.build(cfg, executor="ray", depth=2) as pm:
        got = _feed(pm, feeds)
        assert pm.num_executing() == 0 and not pm.has_next_output()
    with pipeline.build(cfg) as pm:
        want = _feed(pm, feeds)
    for f, ray_out, local_out in zip(feeds, got, want):
        seq = run_sequential(mods, f["data_a"], f["data_b"])
        for x, y, z, c in zip(ray_out, local_out, seq, closed_form(f["data_a"], f["data_b"])):
            np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(x, z)
            np.testing.assert_allclose(x, c, rtol=1e-5)
            assert x.flags.writeable


@pytest.mark.usefixtures("cluster")
def test_split_inception_matches_local():
    m = build_inception_v3_model(size=75)
    costs = {e: 1.0 for e in m.graph.topsort()}     # no profile run: the test stays short
    cfg = pipeline.split(m.graph, stages=2, costs=costs, inputs={"data": m.input},
                         outputs=[m.output])
    rng = np.random.default_rng(1)
    feeds = [{"data": rng.standard_normal(m.input.shape).astype(np.float32)}
             for _ in range(4)]
    with pipeline.build(cfg, executor="ray") as pm:
        got = _feed(pm, feeds)
    with pipeline.build(cfg) as pm:
        want = _feed(pm, feeds)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a[0], b[0])


def _flaky_config():
    spec = ("float32", (3,))

    def check(x):
        if x[0] < 0:
            raise ValueError("negative input")
        return x * 2

    m1 = pipeline.Module.function(check, inputs={"x": spec}, outputs=[spec], name="check")
    m2 = pipeline.Module.function(lambda y: y + 1, inputs={"y": spec}, outputs=[spec],
                                  name="inc")
    cfg = pipeline.PipelineConfig()
    cfg.inputs["x"] = (m1, "x")
    cfg.connect(m1, 0, m2, "y")
    cfg.outputs.append((m2, 0))
    return cfg


@pytest.mark.usefixtures("cluster")
def test_a_stage_error_is_that_inputs_only():
    with pipeline.build(_flaky_config(), executor="ray") as pm:
        for v in (1.0, -1.0, 2.0):
            pm.set_input("x", np.full(3, v, np.float32))
            pm.run(timeout=60)
        first = pm.get_output(timeout=60)
        assert first is not None
        np.testing.assert_array_equal(first[0], [3, 3, 3])
        with pytest.raises(PipelineError, match="stage check failed on input #1") as info:
            pm.get_output(timeout=60)
        assert isinstance(info.value.__cause__, ValueError)
        third = pm.get_output(timeout=60)
        assert third is not None
        np.testing.assert_array_equal(third[0], [5, 5, 5])
        assert pm.get_output(block=False) is None


@pytest.mark.usefixtures("cluster")
def test_a_stage_raising_any_base_exception_fails_that_input_only():
    """As with the local executor: what a stage raises is that input's failure, as its
    __cause__. Ray itself would turn a KeyboardInterrupt into a cancelled task, let a
    SystemExit kill the actor (every later input failed) and replace an exception whose
    repr() raises by that repr's error."""
    class Unprintable(Exception):       # local: Ray pickles it by value, not by module
        def __repr__(self):
            raise RuntimeError("no repr")

        __str__ = __repr__

    raised = [None, KeyboardInterrupt, SystemExit, GeneratorExit, Unprintable, None]

    def stage(x):
        if raised[int(x[0])] is not None:
            raise raised[int(x[0])]()
        return x + 10

    m = pipeline.Module.function(stage, inputs={"x": None}, outputs=[None], name="f")
    cfg = pipeline.PipelineConfig()
    cfg.inputs["x"] = (m, "x")
    cfg.outputs.append((m, 0))
    with pipeline.build(cfg, executor="ray", depth=len(raised)) as pm:
        for k in range(len(raised)):
            pm.set_input("x", np.array([k]))
            pm.run(timeout=60)
        for k, exc in enumerate(raised):
            if exc is None:
                assert pm.get_output(timeout=60)[0][0] == k + 10
                continue
            with pytest.raises(PipelineError, match=f"stage f failed on input #{k}") as info:
                pm.get_output(timeout=60)
            assert type(info.value.__cause__).__name__ == exc.__name__, info.value


@pytest.mark.usefixtures("cluster")
def test_function_output_checked_against_its_declaration():
    spec = ("float32", (3,))
    m = pipeline.Module.function(lambda x: x.astype(np.float64), inputs={"x": spec},
                                 outputs=[spec], name="widen")
    cfg = pipeline.PipelineConfig()
    cfg.inputs["x"] = (m, "x")
    cfg.outputs.append((m, 0))
    with pipeline.build(cfg, executor="ray") as pm:
        pm.set_input("x", np.zeros(3, np.float32))
        pm.run(timeout=60)
        with pytest.raises(PipelineError, match="dtype"):
            pm.get_output(timeout=60)


@pytest.mark.usefixtures("cluster")
def test_build_errors():
    cfg = _flaky_config()
    with pytest.raises(PipelineError, match="no stage"):
        pipeline.build(cfg, executor="ray", resources={"nope": {"num_cpus": 1}})
    with pytest.raises(PipelineError, match="must be a dict"):
        pipeline.build(cfg, executor="ray", resources={"check": 1})
    with pytest.raises(PipelineError, match="NaN"):
        pipeline.build(cfg, executor="ray", start_timeout=float("nan"))
    with pytest.raises(PipelineError, match="did not start within"):
        pipeline.build(cfg, executor="ray", start_timeout=2,
                       resources={"check": {"resources": {"no_such_resource": 1}}})
    # a while node cannot travel to an actor: refused at build time, naming the stage
    x = nnc.Tensor(np.ones(2, np.float32))
    y = nnc.Tensor.zeros((2,), "float32")
    body = nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    body.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [x])
    body.set_while_expr(lambda count: count < 3, [], [noop])
    g = nnc.Graph()
    g.concat(g.while_(body), g.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [x], [y]))
    m = pipeline.Module(g, inputs={"x": x}, outputs=[y], name="loop")
    c = pipeline.PipelineConfig()
    c.inputs["x"] = (m, "x")
    c.outputs.append((m, 0))
    with pytest.raises(PipelineError, match="stage 'loop'.*WHILE"):
        pipeline.build(c, executor="ray")


@pytest.mark.usefixtures("cluster")
def test_closed_pipeline_refuses_calls():
    pm = pipeline.build(_flaky_config(), executor="ray")
    pm.close()
    pm.close()
    with pytest.raises(PipelineError, match="closed"):
        pm.set_input("x", np.zeros(3, np.float32))
    with pytest.raises(PipelineError, match="closed"):
        pm.run()


@pytest.mark.usefixtures("cluster")
def test_ray_shut_down_under_a_pipeline_fails_its_inputs():
    """ray.shutdown() while inputs are in flight: each fails with a PipelineError naming the
    shutdown; a later run() raises one too, without starting a cluster again or keeping its
    depth slot; close() without a timeout returns. (Before: a bare Exception from run(), a new
    local cluster started by Ray's auto-init, a slot lost for good and close() hung.)
    The last test of the file: nothing after it needs the cluster."""
    import threading

    import ray

    spec = ("float32", (2,))

    def slow(x):
        import time
        # Far longer than submitting three inputs takes on a loaded machine (or with
        # NNC_DEBUG=1), so every input is still in flight at the shutdown, which ends the
        # sleep: the test does not wait for it.
        time.sleep(10)
        return x

    first = pipeline.Module.function(slow, inputs={"x": spec}, outputs=[spec], name="slow")
    second = pipeline.Module.function(lambda x: x + 1, inputs={"x": spec}, outputs=[spec],
                                      name="add")
    cfg = pipeline.PipelineConfig()
    cfg.inputs["x"] = (first, "x")
    cfg.connect(first, 0, second, "x")
    cfg.outputs.append((second, 0))
    pm = pipeline.build(cfg, executor="ray", depth=3)
    pm.set_input("x", np.zeros(2, np.float32))
    for _ in range(3):
        pm.run(timeout=30)
    ray.shutdown()
    for k in range(3):
        with pytest.raises(PipelineError, match=f"input #{k}.*shut down"):
            pm.get_output(timeout=30)
    with pytest.raises(PipelineError, match="shut down"):
        pm.run(timeout=30)
    assert not ray.is_initialized()
    assert pm.num_executing() == 0 and not pm.has_next_output()
    closer = threading.Thread(target=pm.close, daemon=True)
    closer.start()
    closer.join(60)
    assert not closer.is_alive(), "close() did not return"
