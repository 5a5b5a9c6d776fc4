"""nnc.pipeline's config: every illegal binding raises at connect time naming both ends (the
RFC's list, peers.md section 6), plan() describes the stages, str(cfg) summarises them."""

import numpy as np
import pytest
from _pipeline_rfc import mod1, mod2, mod3, rfc_config

import nnc
from nnc import pipeline
from nnc.pipeline import PipelineError, Sink, Source


def fn(name, inputs=("x",), outputs=1, spec=("float32", (3, 3))):
    return pipeline.Module.function(lambda **kw: next(iter(kw.values())),
                                    inputs={k: spec for k in inputs},
                                    outputs=[spec] * outputs, name=name)


def raises(match, *ends):
    """pytest.raises(PipelineError) whose message also names every end."""
    return _Raises(match, ends)


class _Raises:
    def __init__(self, match, ends):
        self.ctx = pytest.raises(PipelineError, match=match)
        self.ends = ends

    def __enter__(self):
        self.info = self.ctx.__enter__()
        return self.info

    def __exit__(self, *exc):
        out = self.ctx.__exit__(*exc)
        for end in self.ends:
            assert end in str(self.info.value), (end, str(self.info.value))
        return out


def test_pipeline_error_is_an_nnc_error():
    assert issubclass(PipelineError, nnc.NNCError)
    assert nnc.pipeline.PipelineConfig is pipeline.PipelineConfig


def test_rfc_summary():
    cfg, _ = rfc_config()
    assert str(cfg) == "\n".join([
        "Inputs",
        "  |data_a: mod1:data_0",
        "  |data_b: mod2:data_1",
        "Outputs",
        "  |output(0): mod3.output(0)",
        "  |output(1): mod1.output(2)",
        "Connections",
        "  |mod1.output(0) -> mod2:data_0",
        "  |mod1.output(1) -> mod3:data_1",
        "  |mod2.output(0) -> mod3:data_0",
    ])
    assert "3 module(s)" in repr(cfg)


def test_rfc_plan():
    cfg, (m1, m2, m3) = rfc_config()
    plan = cfg.plan()
    assert [st.module for st in plan.stages] == [m1, m2, m3]
    assert plan.inputs == ("data_a", "data_b")
    assert plan.outputs == ((2, 0), (0, 2))
    s1, s2, s3 = plan.stages
    assert s1.inputs == (("data_0", Source(-1, -1, "data_a")),)
    assert s2.inputs == (("data_0", Source(0, 0, "")), ("data_1", Source(-1, -1, "data_b")))
    assert s3.inputs == (("data_0", Source(1, 0, "")), ("data_1", Source(0, 1, "")))
    assert s1.consumers == ((Sink(1, "data_0", -1),), (Sink(2, "data_1", -1),),
                            (Sink(-1, "", 1),))
    assert s3.consumers == ((Sink(-1, "", 0),),)
    assert (s1.producers, s2.producers, s3.producers) == ((), (0,), (0, 1))


def test_plan_is_topological_whatever_the_binding_order():
    a, b, c = fn("a"), fn("b"), fn("c")
    cfg = pipeline.PipelineConfig()
    cfg.outputs.append((c, 0))          # c is seen first, a last
    cfg.connect(b, 0, c, "x")
    cfg.connect(a, 0, b, "x")
    cfg.inputs["in"] = (a, "x")
    assert [st.module.name for st in cfg.plan().stages] == ["a", "b", "c"]


def test_global_input_feeds_several_inputs():
    a, b = fn("a"), fn("b")
    cfg = pipeline.PipelineConfig()
    cfg.inputs["in"] = [(a, "x"), (b, "x")]
    cfg.outputs.append((a, 0))
    cfg.outputs.append((b, 0))
    assert cfg.inputs["in"] == [(a, "x"), (b, "x")]
    assert "  |in: a:x\n  |in: b:x" in str(cfg)
    plan = cfg.plan()
    assert [st.inputs[0][1] for st in plan.stages] == [Source(-1, -1, "in")] * 2
    # The same binding through connect(cfg, name, ...); setting again replaces.
    cfg.inputs["in"] = (a, "x")
    with raises("bound to nothing", "b"):
        cfg.plan()
    cfg.connect(cfg, "in", b, "x")
    assert cfg.inputs["in"] == [(a, "x"), (b, "x")]
    del cfg.inputs["in"]
    assert len(cfg.inputs) == 0
    cfg.inputs["again"] = [(a, "x"), (b, "x")]      # unbound by the del: free to bind


def test_cycle_between_two_modules():
    cfg, (m1, m2, m3) = rfc_config()
    before = str(cfg)
    with raises("cycle", "mod2.output(0)", "mod1.data_0"):
        cfg.connect(m2, 0, m1, "data_0")
    with raises("cycle", "mod3.output(0)", "mod2.data_0"):
        cfg.connect(m3, 0, m2, "data_0")
    assert str(cfg) == before           # nothing was added by the failures


def test_longer_cycle():
    cfg = pipeline.PipelineConfig()
    a, b, c = fn("a"), fn("b"), fn("c")
    cfg.connect(a, 0, b, "x")
    cfg.connect(b, 0, c, "x")
    with raises("cycle", "c.output(0)", "a.x"):
        cfg.connect(c, 0, a, "x")


def test_self_binding():
    cfg = pipeline.PipelineConfig()
    m = fn("m", inputs=("x", "y"))
    with raises("cannot feed itself", "m.output(0)", "m.y"):
        cfg.connect(m, 0, m, "y")


def test_input_to_input():
    cfg, (m1, m2, m3) = rfc_config()
    m4 = fn("m4")
    with raises("module input .* cannot be a source", "mod1.data_0", "m4.x"):
        cfg.connect(m1, "data_0", m4, "x")


def test_output_to_global_input():
    cfg, (m1, _, _) = rfc_config()
    with raises("fed only by the caller", "mod1.output(0)", "global input 'data_a'"):
        cfg.connect(m1, 0, cfg, "data_a")


def test_global_input_to_module_output():
    cfg, (m1, m2, _) = rfc_config()
    with raises("only module inputs", "global input 'data_a'", "mod2.output(0)"):
        cfg.connect(cfg, "data_a", m2, 0)
    with raises("only module inputs", "global input 'x'", "mod1.output(1)"):
        cfg.inputs["x"] = (m1, 1)
    assert "x" not in cfg.inputs


def test_global_output_as_source():
    cfg, (_, _, m3) = rfc_config()
    m4 = fn("m4")
    with raises("global output cannot be a source", "global output 0", "m4.x"):
        cfg.connect(cfg, 0, m4, "x")


def test_global_input_to_global_output_or_input():
    cfg, _ = rfc_config()
    with raises("only module inputs", "global input 'data_a'", "global output 2"):
        cfg.outputs.append((cfg, "data_a"))
    with raises("only module inputs", "global input 'data_a'", "global input 'data_b'"):
        cfg.connect(cfg, "data_a", cfg, "data_b")


def test_output_to_output():
    cfg, (m1, m2, _) = rfc_config()
    with raises("cannot feed another module's output", "mod1.output(0)", "mod2.output(0)"):
        cfg.connect(m1, 0, m2, 0)


def test_unknown_names_and_indices():
    cfg, (m1, m2, m3) = rfc_config()
    m4 = fn("m4")
    with raises("has no input 'nope'", "mod1.output(0)", "m4.nope"):
        cfg.connect(m1, 0, m4, "nope")
    with raises("has no output 3", "mod1.output(3)", "m4.x"):
        cfg.connect(m1, 3, m4, "x")
    with raises("has no output -1", "mod1.output(-1)", "m4.x"):
        cfg.connect(m1, -1, m4, "x")
    with raises("has no output 1", "mod3.output(1)", "global output 2"):
        cfg.outputs.append((m3, 1))
    with raises("has no input 'data_9'", "global input 'z'", "mod1.data_9"):
        cfg.inputs["z"] = (m1, "data_9")
    with raises("port is an input name", "mod1"):
        cfg.connect(m1, 0.5, m4, "x")
    with raises("neither a pipeline.Module", "m4.x"):
        cfg.connect(object(), 0, m4, "x")
    with raises("another config", "m4.x"):
        cfg.connect(pipeline.PipelineConfig(), "a", m4, "x")
    with pytest.raises(PipelineError, match="expected"):
        cfg.inputs["w"] = m4
    with pytest.raises(PipelineError, match="expected"):
        cfg.outputs.append(m4)
    with pytest.raises(PipelineError, match="non-empty str"):
        cfg.inputs[""] = (m4, "x")
    with pytest.raises(PipelineError, match="empty list"):
        cfg.inputs["v"] = []


def test_input_bound_twice():
    cfg, (m1, m2, m3) = rfc_config()
    with raises("already bound to mod1.output\\(0\\)", "mod1.output(1)", "mod2.data_0"):
        cfg.connect(m1, 1, m2, "data_0")
    with raises("already bound to global input 'data_b'", "global input 'data_c'",
                "mod2.data_1"):
        cfg.inputs["data_c"] = (m2, "data_1")
    with raises("already bound to mod1.output\\(0\\)", "global input 'data_a'",
                "mod2.data_0"):
        cfg.inputs["data_a"] = [(m1, "data_0"), (m2, "data_0")]
    # The failed assignment left data_a as it was.
    assert cfg.inputs["data_a"] == [(m1, "data_0")]
    cfg.plan()


def test_dtype_and_shape_mismatch():
    cfg, (m1, m2, m3) = rfc_config()
    ints = pipeline.Module.function(lambda x: x, inputs={"x": ("int32", (3, 3))},
                                    outputs=[("int32", (3, 3))], name="ints")
    big = pipeline.Module.function(lambda x: x, inputs={"x": ("float32", (4, 3))},
                                   outputs=[("float32", None)], name="big")
    with raises("dtype float32 != int32", "mod1.output(0)", "ints.x"):
        cfg.connect(m1, 0, ints, "x")
    with raises("shape \\(3, 3\\) != \\(4, 3\\)", "mod1.output(0)", "big.x"):
        cfg.connect(m1, 0, big, "x")
    with raises("shape", "mod1.output(2)", "big.x"):
        cfg.connect(m1, 2, big, "x")
    with raises("dtype int32 != float32", "ints.output(0)", "mod3.data_0"):
        c2 = pipeline.PipelineConfig()
        c2.connect(ints, 0, mod3(), "data_0")
    # A global input feeding two inputs must fit both.
    with raises("dtype float32 != int32", "global input 'data_a'", "ints.x", "mod1.data_0"):
        cfg.inputs["data_a"] = [(m1, "data_0"), (ints, "x")]


def test_unknown_specs_are_not_checked_at_connect():
    cfg, (m1, _, _) = rfc_config()
    anything = pipeline.Module.function(lambda x: x, inputs={"x": None}, outputs=[None],
                                        name="anything")
    partial = pipeline.Module.function(lambda x: x, inputs={"x": ("float32", (None, 3))},
                                       outputs=[(None, (3, None))], name="partial")
    cfg.connect(m1, 0, anything, "x")
    cfg.connect(m1, 1, partial, "x")
    cfg.connect(partial, 0, mod3("m3b"), "data_0")
    wrong_rank = pipeline.Module.function(lambda x: x, inputs={"x": (None, (3,))},
                                          outputs=[None], name="rank1")
    with raises("shape", "partial.output(0)", "rank1.x"):
        cfg.connect(partial, 0, wrong_rank, "x")


def test_plan_requires_a_complete_config():
    cfg = pipeline.PipelineConfig()
    a = fn("a", inputs=("x", "y"))
    cfg.inputs["in"] = (a, "x")
    with raises("no global output"):
        cfg.plan()
    cfg.outputs.append((a, 0))
    with raises("input\\(s\\) y bound to nothing", "module a"):
        cfg.plan()
    with pytest.raises(PipelineError, match="bound to nothing"):
        pipeline.build(cfg)
    cfg.connect(cfg, "in2", a, "y")
    assert cfg.plan().inputs == ("in", "in2")


def test_global_outputs_list():
    cfg, (m1, m2, m3) = rfc_config()
    cfg.outputs[1] = (m2, 0)
    assert list(cfg.outputs) == [(m3, 0), (m2, 0)]
    cfg.connect(m1, 1, cfg, 2)          # appends
    cfg.connect(m1, 0, cfg, 0)          # replaces
    assert cfg.outputs[0] == (m1, 0) and len(cfg.outputs) == 3
    with raises("gap", "mod1.output(0)", "global output 7"):
        cfg.connect(m1, 0, cfg, 7)
    del cfg.outputs[0]
    assert cfg.plan().outputs == ((1, 0), (0, 1))
    with pytest.raises(IndexError):
        cfg.outputs[5] = (m1, 0)


def test_module_construction_errors():
    g = nnc.Graph()
    x = nnc.Tensor(np.zeros(3, np.float32))
    y = nnc.Tensor(np.zeros(3, np.float32))
    other = nnc.Tensor(np.zeros(3, np.float32))
    g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [y])
    with pytest.raises(PipelineError, match="needs an nnc.Graph"):
        pipeline.Module(lambda: 0, inputs={}, outputs=[])
    with pytest.raises(PipelineError, match="not an input of any node"):
        pipeline.Module(g, inputs={"x": other}, outputs=[y])
    with pytest.raises(PipelineError, match="not an output of any node"):
        pipeline.Module(g, inputs={"x": x}, outputs=[x])
    with pytest.raises(PipelineError, match="not an nnc.Tensor"):
        pipeline.Module(g, inputs={"x": np.zeros(3)}, outputs=[y])
    with pytest.raises(PipelineError, match="must be a dict"):
        pipeline.Module(g, inputs=[x], outputs=[y])
    with pytest.raises(PipelineError, match="non-empty str"):
        pipeline.Module(g, inputs={"x": x}, outputs=[y], name="")
    with pytest.raises(PipelineError, match="needs a callable"):
        pipeline.Module.function(3, inputs={}, outputs=[])
    with pytest.raises(PipelineError, match="is not a dtype"):
        pipeline.Module.function(abs, inputs={"x": ("nope", None)}, outputs=[])
    with pytest.raises(PipelineError, match="dimension"):
        pipeline.Module.function(abs, inputs={"x": (None, (3, -1))}, outputs=[])
    with pytest.raises(PipelineError, match="outputs must be a list"):
        pipeline.Module(g, inputs={"x": x}, outputs=None)
    with pytest.raises(PipelineError, match="outputs must be a list"):
        pipeline.Module.function(abs, inputs={}, outputs=None)
    with pytest.raises(PipelineError, match="inputs must be a dict"):
        pipeline.Module.function(abs, inputs=["x"], outputs=[])
    with pytest.raises(PipelineError, match="expected \\(dtype, shape\\)"):
        pipeline.Module.function(abs, inputs={}, outputs=["float32"])
    # A tensor whose view a node reads (or the view of one it reads) is fine.
    base = nnc.Tensor(np.zeros(6, np.float32))
    g2 = nnc.Graph()
    out = nnc.Tensor(np.zeros(3, np.float32))
    g2.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [base.view((3,), offset=3)], [out])
    assert pipeline.Module(g2, inputs={"x": base}, outputs=[out]).input_specs["x"][1] == (6,)
    m = pipeline.Module(g, inputs={"x": x}, outputs=[y], name="scale")
    assert m.input_specs == {"x": (np.dtype("float32"), (3,))}
    assert m.output_specs == [(np.dtype("float32"), (3,))]
    assert "scale" in repr(m) and "graph" in repr(m)


def test_two_modules_one_graph_or_one_name():
    g = nnc.Graph()
    x = nnc.Tensor(np.zeros(3, np.float32))
    y = nnc.Tensor(np.zeros(3, np.float32))
    g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [y])
    a = pipeline.Module(g, inputs={"x": x}, outputs=[y], name="a")
    b = pipeline.Module(g, inputs={"x": x}, outputs=[y], name="b")
    cfg = pipeline.PipelineConfig()
    cfg.inputs["in"] = (a, "x")
    with raises("share one graph", "'a'", "'b'"):
        cfg.connect(a, 0, b, "x")
    g2 = nnc.Graph()
    z = nnc.Tensor(np.zeros(3, np.float32))
    g2.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [y], [z])
    c = pipeline.Module(g2, inputs={"y": y}, outputs=[z], name="c")
    with raises("share a tensor", "'a'", "'c'"):
        cfg.connect(a, 0, c, "y")
    twin = fn("a", spec=None)
    with raises("two different modules are named 'a'", "a.output(0)"):
        cfg.connect(a, 0, twin, "x")
    assert [m.name for m in cfg.modules] == ["a"]


def test_default_names_are_unique():
    a = pipeline.Module.function(abs, inputs={"x": None}, outputs=[None])
    b = pipeline.Module.function(lambda x: x, inputs={"x": None}, outputs=[None])
    assert a.name.startswith("abs#") and b.name.startswith("mod#") and a.name != b.name


def test_build_arguments():
    cfg, _ = rfc_config()
    with pytest.raises(PipelineError, match="unknown executor 'gpu'"):
        pipeline.build(cfg, executor="gpu")
    for depth in (0, -1, 1.5, True):
        with pytest.raises(PipelineError, match="depth"):
            pipeline.build(cfg, depth=depth)
    with pytest.raises(PipelineError, match="needs a pipeline.PipelineConfig"):
        pipeline.build(object())
    assert "local" in pipeline.EXECUTORS


def test_modules_of_the_helper_are_distinct():
    # mod1/mod2/mod3 build fresh graphs each call: two configs never share tensors.
    assert mod1().graph is not mod1().graph and mod2().name == "mod2"


def test_module_run_once():
    """Module.run: one synchronous run of a stage with the pipeline's checks (what an executor
    running a stage elsewhere reuses)."""
    m1 = mod1()
    a = np.arange(9, dtype=np.float32).reshape(3, 3)
    o0, o1, plus1 = m1.run({"data_0": a})
    np.testing.assert_array_equal(o0, 3 * (a + 1))
    np.testing.assert_array_equal(o1, 3 * (a - 2))
    np.testing.assert_array_equal(plus1, a + 1)
    o0[...] = 0                                  # fresh copies, not the tensors
    assert m1.output_tensors[0].numpy()[0, 0] == 3
    with pytest.raises(PipelineError, match="takes inputs \\['data_0'\\], got \\['x'\\]"):
        m1.run({"x": a})
    with pytest.raises(PipelineError, match="mod1.data_0 declared float32\\(3, 3\\)"):
        m1.run({"data_0": a.astype(np.float64)})
    with pytest.raises(PipelineError, match="not an ndarray"):
        m1.run({"data_0": [1, 2, 3]})
    f = pipeline.Module.function(lambda x, y: (x + y, x - y), inputs={"x": None, "y": None},
                                 outputs=[None, ("int64", None)], name="f")
    s, d = f.run({"x": np.array([3]), "y": np.array([1])})
    assert s.tolist() == [4] and d.tolist() == [2]
    with pytest.raises(PipelineError, match="f output 1 declared int64"):
        f.run({"x": np.array([3.0]), "y": np.array([1.0])})
