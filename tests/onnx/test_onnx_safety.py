"""nnc.onnx on models a hostile or careless author wrote: ONNX's own Flatten and Reshape node
tests, Reshape element counts and ``allowzero``, external data that points outside the model's
folder (or is read at all for a model given as bytes), and malformed attributes, shapes and
dtypes, each of which must end in a correct result or an ``nnc.onnx.OnnxError`` naming the node.
"""

import os

import numpy as np
import pytest

import nnc

onnx = pytest.importorskip("onnx", reason="nnc.onnx tests need onnx (pip install -e '.[test]')")
ort = pytest.importorskip("onnxruntime", reason="the ONNX tests compare with onnxruntime")
from test_onnx import check, close, model, nnc_run, ort_run  # noqa: E402

import nnc.onnx  # noqa: E402

h = onnx.helper
TP = onnx.TensorProto
RNG = np.random.default_rng(30)


@pytest.fixture(scope="module")
def node_cases():
    """ONNX's node tests (onnx.backend.test, the models and data of the test_* folders its
    package generates): {op type: [(name, model, inputs, outputs)]}. Collected once: each
    operator's cases are made as its module is first imported."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    cases = {}
    with warnings.catch_warnings():
        # Making ONNX's Cast cases overflows float casts on purpose (their expected data).
        warnings.simplefilter("ignore", RuntimeWarning)
        collected = collect_testcases()
    for c in collected:
        cases.setdefault(c.model.graph.node[0].op_type, []).append(
            (c.name, c.model, c.data_sets[0][0], c.data_sets[0][1]))
    return cases


@pytest.fixture
def flatten_cases(node_cases):
    return node_cases["Flatten"]


@pytest.fixture
def reshape_cases(node_cases):
    return node_cases["Reshape"]


# -- Flatten -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_onnx_flatten_node_tests(flatten_cases):
    names = [name for name, *_ in flatten_cases]
    assert {f"test_flatten_negative_axis{k}" for k in range(1, 5)} <= set(names)
    for name, m, xs, want in flatten_cases:
        loaded = nnc.onnx.load(m)
        got = nnc_run(loaded, dict(zip(loaded.input_names, xs)))
        assert got[0].shape == want[0].shape, name
        np.testing.assert_array_equal(got[0], want[0], err_msg=name)


@pytest.mark.parametrize("axis,shape", [(-1, (24, 5)), (-2, (4, 30)), (-3, (1, 120)),
                                        (-4, (1, 120)), (0, (1, 120)), (4, (120, 1))])
def test_flatten_negative_axis_counts_from_the_rank(axis, shape):
    m = model([h.make_node("Flatten", ["x"], ["y"], axis=axis)], {"x": [1, 4, 6, 5]},
              {"y": None})
    assert check(m).outputs[0].shape == shape


@pytest.mark.parametrize("axis,shape", [(2, (6, 1)), (0, (1, 6)), (-1, (2, 3)), (-2, (1, 6))])
def test_flatten_of_a_constant_folds_to_onnx_shape(axis, shape):
    c = np.arange(6, dtype=np.float32).reshape(2, 3)
    m = model([h.make_node("Flatten", ["c"], ["f"], axis=axis),
               h.make_node("Add", ["f", "x"], ["y"])], {"x": list(shape)}, {"y": None}, {"c": c})
    assert check(m).outputs[0].shape == shape


@pytest.mark.parametrize("axis", [5, -5, 9])
@pytest.mark.parametrize("const", [False, True])
def test_flatten_axis_out_of_range_names_node_and_attribute(axis, const):
    x = RNG.standard_normal((1, 4, 6, 5)).astype(np.float32)
    node = h.make_node("Flatten", ["c" if const else "x"], ["y"], axis=axis, name="flat")
    m = model([node], {} if const else {"x": [1, 4, 6, 5]}, {"y": None},
              {"c": x} if const else None)
    # onnx's shape inference already refuses some of these; either way the node is named.
    with pytest.raises(nnc.onnx.OnnxError, match=r"flat|axis"):
        nnc.onnx.load(m)


# -- Reshape -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_onnx_reshape_node_tests_with_the_shape_as_a_constant(reshape_cases):
    assert any("allowzero" in name for name, *_ in reshape_cases)
    for name, m, xs, want in reshape_cases:
        m = onnx.ModelProto()
        m.CopyFrom(dict((n, mm) for n, mm, *_ in reshape_cases)[name])
        # nnc needs the shape as a constant: the test's second input becomes an initializer.
        shape_name = m.graph.node[0].input[1]
        keep = [v for v in m.graph.input if v.name != shape_name]
        del m.graph.input[:]
        m.graph.input.extend(keep)
        m.graph.initializer.append(onnx.numpy_helper.from_array(xs[1], shape_name))
        loaded = nnc.onnx.load(m)
        got = nnc_run(loaded, {loaded.input_names[0]: xs[0]})
        assert got[0].shape == want[0].shape, name
        np.testing.assert_array_equal(got[0], want[0], err_msg=name)


def reshape_model(x_shape, shape, allowzero=None, const=False):
    kw = {} if allowzero is None else {"allowzero": allowzero}
    node = h.make_node("Reshape", ["c" if const else "x", "s"], ["y"], name="rs", **kw)
    inits = {"s": np.array(shape, np.int64)}
    if const:
        inits["c"] = np.zeros(x_shape, np.float32)
    return model([node], {} if const else {"x": list(x_shape)}, {"y": None}, inits,
                 opset=14 if allowzero is not None else 17)


@pytest.mark.parametrize("const", [False, True])
@pytest.mark.parametrize("x_shape,shape", [((4,), [3]), ((2, 3), [7]), ((2, 3), [1, 2, 2, 2])])
def test_reshape_to_another_element_count_is_refused(x_shape, shape, const):
    with pytest.raises(nnc.onnx.OnnxError, match="'rs'") as info:
        nnc.onnx.load(reshape_model(x_shape, shape, const=const))
    assert f"{int(np.prod(x_shape))} elements" in str(info.value)


@pytest.mark.parametrize("x_shape,shape", [((2, 3), [4, -1]), ((2, 3), [-1, -1]),
                                           ((2, 3), [0, 0, 0]), ((2, 3), [-2, -3])])
def test_reshape_to_an_invalid_shape_is_refused(x_shape, shape):
    # onnx's shape inference refuses these before nnc looks: the node is named either way.
    with pytest.raises(nnc.onnx.OnnxError, match="rs"):
        nnc.onnx.load(reshape_model(x_shape, shape, const=True))


def test_reshape_allowzero():
    # allowzero=0: a 0 copies the input's dimension; allowzero=1: it is a real 0.
    assert check(reshape_model((2, 3), [0, 3], allowzero=0)).outputs[0].shape == (2, 3)
    m = reshape_model((0, 3), [3, 0], allowzero=1)
    feeds = {"x": np.zeros((0, 3), np.float32)}
    assert nnc_run(nnc.onnx.load(m), feeds)[0].shape == ort_run(m, feeds)[0].shape == (3, 0)
    with pytest.raises(nnc.onnx.OnnxError, match="rs"):  # (2, 3) has 6 elements, (0, 3) none
        nnc.onnx.load(reshape_model((2, 3), [0, 3], allowzero=1))
    with pytest.raises(nnc.onnx.OnnxError, match="rs"):  # -1 beside a real 0
        nnc.onnx.load(reshape_model((0, 3), [0, -1], allowzero=1))


# -- external data -----------------------------------------------------------------------------

SECRET = np.arange(4, dtype=np.float32) + 1000  # what an escaping model would read back


def external_model(location, offset=None, length=None):
    """y = x + w, with w's 4 floats stored at ``location`` (external data)."""
    m = model([h.make_node("Add", ["x", "w"], ["y"])], {"x": [4]}, {"y": None},
              {"w": np.zeros(4, np.float32)})
    w = m.graph.initializer[0]
    w.ClearField("raw_data")
    w.data_location = TP.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            w.external_data.add(key=key, value=str(value))
    return m


def write(path, data=SECRET):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(np.asarray(data).tobytes())


def test_bytes_or_proto_load_refuses_external_data_relative_to_cwd(tmp_path, monkeypatch):
    write(tmp_path / "secret.bin")
    monkeypatch.chdir(tmp_path)
    m = external_model("secret.bin")
    for given in (m.SerializeToString(), m):
        with pytest.raises(nnc.onnx.OnnxError, match="external data") as info:
            nnc.onnx.load(given)
        assert "'w'" in str(info.value) and "base_dir" in str(info.value)
    # An explicit base directory is the caller's decision to trust it.
    loaded = nnc.onnx.load(m.SerializeToString(), base_dir=tmp_path)
    np.testing.assert_array_equal(nnc_run(loaded, {"x": np.ones(4, np.float32)})[0],
                                  SECRET + 1)
    assert m.graph.initializer[0].data_location == TP.EXTERNAL  # the caller's proto is kept


def save_model(m, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(m.SerializeToString())
    return path


def test_path_load_reads_external_data_next_to_the_model(tmp_path):
    write(tmp_path / "m" / "weights.bin", np.concatenate([np.zeros(2, np.float32), SECRET]))
    p = save_model(external_model("weights.bin", offset=8, length=16), tmp_path / "m" / "a.onnx")
    for given in (p, str(p)):
        got = nnc_run(nnc.onnx.load(given), {"x": np.ones(4, np.float32)})[0]
        np.testing.assert_array_equal(got, SECRET + 1)
    write(tmp_path / "m" / "sub" / "w.bin")
    p = save_model(external_model("sub/w.bin"), tmp_path / "m" / "b.onnx")
    np.testing.assert_array_equal(nnc_run(nnc.onnx.load(p), {"x": np.zeros(4, np.float32)})[0],
                                  SECRET)


@pytest.mark.parametrize("where", ["parent", "absolute", "symlinked dir", "symlinked file",
                                   "dot dot inside"])
def test_path_load_refuses_external_data_outside_the_model_folder(tmp_path, where):
    write(tmp_path / "outside" / "secret.bin")
    folder = tmp_path / "m"
    folder.mkdir()
    location = {"parent": "../outside/secret.bin",
                "absolute": str(tmp_path / "outside" / "secret.bin"),
                "symlinked dir": "link/secret.bin",
                "symlinked file": "secret.bin",
                "dot dot inside": "sub/../../outside/secret.bin"}[where]
    if where == "symlinked dir":
        os.symlink(tmp_path / "outside", folder / "link")
    if where == "symlinked file":
        os.symlink(tmp_path / "outside" / "secret.bin", folder / "secret.bin")
    (folder / "sub").mkdir()
    p = save_model(external_model(location), folder / "model.onnx")
    with pytest.raises(nnc.onnx.OnnxError, match="external data") as info:
        nnc.onnx.load(p)
    assert "'w'" in str(info.value)
    with pytest.raises(nnc.onnx.OnnxError, match="external data"):
        nnc.onnx.load(p.read_bytes(), base_dir=folder)


@pytest.mark.parametrize("location,offset,length,why", [
    ("w.bin", 0, 1 << 62, "length"),
    ("w.bin", 1 << 40, 16, "offset"),
    ("w.bin", 8, 16, "past the end"),
    ("w.bin", -1, 16, "offset"),
    ("w.bin", 0, 8, "4 elements"),
    ("missing.bin", 0, 16, "missing.bin"),
    (".", 0, 16, "regular file"),
    ("", 0, 16, "location"),
])
def test_external_data_bounds_are_checked_before_reading(tmp_path, location, offset, length, why):
    write(tmp_path / "w.bin")
    m = external_model(location, offset, length)
    with pytest.raises(nnc.onnx.OnnxError, match="external data") as info:
        nnc.onnx.load(m, base_dir=tmp_path)
    assert why in str(info.value)


def test_external_data_may_not_be_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "fifo")  # reading it would block forever
    with pytest.raises(nnc.onnx.OnnxError, match="regular file"):
        nnc.onnx.load(external_model("fifo"), base_dir=tmp_path)


# -- malformed or unusual nodes ------------------------------------------------------------------

@pytest.mark.parametrize("a_shape,b_shape", [((4,), (4,)), ((2, 3, 4), (4,))])
def test_matmul_shapes_gemm_does_not_take_are_unsupported(a_shape, b_shape):
    m = model([h.make_node("MatMul", ["a", "b"], ["y"], name="mm")], {"a": list(a_shape)},
              {"y": None}, {"b": RNG.standard_normal(b_shape).astype(np.float32)})
    with pytest.raises(nnc.onnx.UnsupportedError, match="mm") as info:
        nnc.onnx.load(m)
    assert "MatMul" in info.value.problems


@pytest.mark.parametrize("opset,lo,hi", [(17, 3.0, 1.0), (17, 0.5, 0.5), (6, 2.0, -1.0)])
def test_clip_with_min_above_max_gives_max(opset, lo, hi):
    if opset >= 11:
        node = h.make_node("Clip", ["x", "lo", "hi"], ["y"])
        inits = {"lo": np.float32(lo), "hi": np.float32(hi)}
    else:
        node, inits = h.make_node("Clip", ["x"], ["y"], min=lo, max=hi), None
    m = model([node], {"x": [2, 5]}, {"y": None}, inits, opset=opset)
    # onnxruntime gives max from opset 11 on (and refuses the attribute form of Clip-6).
    loaded = check(m) if opset >= 11 else nnc.onnx.load(m)
    got = nnc_run(loaded, {"x": RNG.standard_normal((2, 5)).astype(np.float32)})[0]
    np.testing.assert_array_equal(got, np.full((2, 5), hi, np.float32))


@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_max_over_no_elements_is_minus_infinity(keepdims):
    m = model([h.make_node("ReduceMax", ["x", "ax"], ["y"], keepdims=keepdims)],
              {"x": [2, 0, 3]}, {"y": None}, {"ax": np.array([1], np.int64)}, opset=18)
    loaded = nnc.onnx.load(m)
    feeds = {"x": np.zeros((2, 0, 3), np.float32)}
    got, want = nnc_run(loaded, feeds)[0], ort_run(m, feeds)[0]
    assert got.shape == want.shape and np.all(got == -np.inf) and np.all(want == -np.inf)


def test_initializer_declaring_more_elements_than_its_bytes_is_refused():
    m = model([h.make_node("Add", ["x", "w"], ["y"])], {"x": [4]}, {"y": None},
              {"w": np.zeros(4, np.float32)})
    del m.graph.initializer[0].dims[:]
    m.graph.initializer[0].dims.extend([1 << 40, 1 << 40])
    with pytest.raises(nnc.onnx.OnnxError, match="'w'"):
        nnc.onnx.load(m.SerializeToString())


def test_flatten_reshape_still_match_onnxruntime_after_a_conv():
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Flatten", ["c"], ["f"], axis=-2),
             h.make_node("Reshape", ["f", "s"], ["y"], allowzero=0)]
    m = model(nodes, {"x": [2, 3, 5, 6]}, {"y": None},
              {"w": w, "s": np.array([0, -1, 2], np.int64)})
    loaded = check(m)
    feeds = {"x": RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)}
    close(nnc_run(loaded, feeds)[0], ort_run(m, feeds)[0])


def test_concat_with_a_constant_input():
    nodes = [h.make_node("Sigmoid", ["x"], ["s"]),
             h.make_node("Concat", ["s", "c"], ["y"], axis=1)]
    check(model(nodes, {"x": [3, 5]}, {"y": None},
                {"c": RNG.standard_normal((3, 2)).astype(np.float32)}))


@pytest.mark.parametrize("attrs,name", [({"group": 0}, "group"), ({"group": 2}, "group"),
                                        ({"auto_pad": "BOGUS"}, "auto_pad"),
                                        ({"kernel_shape": [2, 2]}, "kernel_shape")])
def test_conv_attributes_are_checked_where_read(attrs, name):
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    m = model([h.make_node("Conv", ["x", "w"], ["y"], name="cv", **attrs)], {"x": [1, 3, 8, 8]},
              {"y": None}, {"w": w})
    with pytest.raises(nnc.onnx.OnnxError, match=f"'cv' \\(Conv\\): attribute '{name}'"):
        nnc.onnx.load(m)


def test_external_data_of_a_constant_node_is_refused_too(tmp_path, monkeypatch):
    write(tmp_path / "secret.bin")
    monkeypatch.chdir(tmp_path)
    value = onnx.numpy_helper.from_array(np.zeros(4, np.float32), "v")
    value.ClearField("raw_data")
    value.data_location = TP.EXTERNAL
    value.external_data.add(key="location", value="secret.bin")
    nodes = [h.make_node("Constant", [], ["w"], value=value, name="const"),
             h.make_node("Add", ["x", "w"], ["y"])]
    m = model(nodes, {"x": [4]}, {"y": None})
    with pytest.raises(nnc.onnx.OnnxError, match="'const' \\(Constant\\) attribute 'value'"):
        nnc.onnx.load(m.SerializeToString())
    loaded = nnc.onnx.load(m.SerializeToString(), base_dir=".")
    np.testing.assert_array_equal(nnc_run(loaded, {"x": np.zeros(4, np.float32)})[0], SECRET)


def _relu_chain(n, width):
    """x -> Relu -> ... n times: n + 1 activations of ``width`` float32 each."""
    names = ["x"] + [f"r{i}" for i in range(n)]
    return model([h.make_node("Relu", [a], [b]) for a, b in zip(names, names[1:])],
                 {"x": [width]}, {names[-1]: [width]})


def test_declared_activations_past_max_bytes_are_refused_before_allocating():
    # 11 activations of 1,024 float32 (4 KiB each): 45,056 bytes in all.
    m = _relu_chain(10, 1024).SerializeToString()
    assert nnc.onnx.load(m, max_bytes=45_056).graph is not None
    with pytest.raises(nnc.onnx.OnnxError, match="activations to 45056 bytes, more than "
                                                 "max_bytes \\(45055"):
        nnc.onnx.load(m, max_bytes=45_055)
    # One input declaring 16 GiB (a dims mutation that once made a load touch all of it): the
    # default budget is the machine's memory, so a tight one refuses it at once.
    big = _relu_chain(1, 1 << 32).SerializeToString()
    with pytest.raises(nnc.onnx.OnnxError, match="'x'.*more than max_bytes"):
        nnc.onnx.load(big, max_bytes=1 << 20)
    with pytest.raises(nnc.onnx.OnnxError, match="more than max_bytes \\(0"):
        nnc.onnx.load(m, max_bytes=0)                   # 0 is a budget of nothing, not none


@pytest.mark.parametrize("bad", [-1, 1.5, "1", True])
def test_max_bytes_must_be_a_non_negative_int(bad):
    with pytest.raises(nnc.onnx.OnnxTypeError, match="max_bytes"):
        nnc.onnx.load(_relu_chain(1, 4).SerializeToString(), max_bytes=bad)
