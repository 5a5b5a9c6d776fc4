"""Pickling and copying (docs/design.md, "Pickling and copying"): Cmd and CPU Tensors pickle
meaningfully; everything holding live state raises a TypeError that says why."""

import copy
import pickle

import numpy as np
import pytest

import nnc

PROTOCOLS = range(2, pickle.HIGHEST_PROTOCOL + 1)


def _round_trip(obj, protocol):
    return pickle.loads(pickle.dumps(obj, protocol=protocol))


def _module_level_fn(inputs, outputs):
    outputs[0][...] = inputs[0] + 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("shape,dtype", [((2, 3), "float32"), ((), "float64"), ((0, 4), "int64"),
                                         ((4,), "uint8"), ((1,) * 12, "float16"),
                                         ((3, 2), "int32")])
def test_tensor_pickles_as_a_copy_of_its_elements(protocol, shape, dtype):
    a = (np.arange(int(np.prod(shape))) % 5).astype(dtype).reshape(shape)
    t = nnc.Tensor(a)
    u = _round_trip(t, protocol)
    assert isinstance(u, nnc.Tensor)
    assert u.shape == shape and u.dtype == np.dtype(dtype) and u.device == "cpu"
    np.testing.assert_array_equal(u.numpy(), a)
    if a.size:
        assert not np.shares_memory(u.numpy(), a)
    assert u.is_contiguous and not u.readonly
    assert u.data_ptr % 64 == 0 or a.size == 0     # nnc's 64-byte alignment


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_view_and_read_only_tensor_pickle_as_plain_copies(protocol):
    base = nnc.Tensor(np.arange(24, dtype=np.float32).reshape(4, 6))
    v = base.view((2, 3), offset=1, strides=(6, 2))
    u = _round_trip(v, protocol)
    np.testing.assert_array_equal(u.numpy(), v.numpy())
    assert u.is_contiguous and u.strides == (3, 1)
    ro = np.arange(3.0)
    ro.flags.writeable = False
    r = _round_trip(nnc.Tensor(ro), protocol)
    assert not r.readonly and (r.numpy() == ro).all()


def test_tensor_copy_and_deepcopy_copy_the_elements_like_numpy():
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    t = nnc.Tensor(a)
    for c in (copy.copy(t), copy.deepcopy(t)):
        assert isinstance(c, nnc.Tensor) and c is not t
        np.testing.assert_array_equal(c.numpy(), a)
        c.numpy()[0, 0] = 99.0
        assert a[0, 0] == 0.0
    v = t.view((3,), offset=3)
    c = copy.copy(v)
    assert c.shape == (3,) and (c.numpy() == [3.0, 4.0, 5.0]).all()


def test_multiview_refuses():
    g = nnc.Graph()
    x = nnc.Tensor.zeros(2)
    z = nnc.Tensor.zeros(2)
    mv = nnc.MultiView([x, z], anchor=g, kind="K0N")
    for fn in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match="MultiView cannot be copied or pickled"):
            fn(mv)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name,params", [
    ("NOOP", {}), ("EWSUM", {}), ("SCALAR_MUL", {"a": 0.5}), ("SET", {"value": 3.0}),
    ("GEMM", {"transpose_b": True}),
    ("CONVOLUTION", {"stride": 2, "padding": (1, 0, 1, 0), "groups": 1}),
    ("MAX_POOL", {"size": 3, "stride": 2}),
    ("AVG_POOL", {"size": (2, 2), "count_include_pad": True}),
])
def test_cmd_pickles_by_name_and_parameters(protocol, name, params):
    cmd = nnc.Cmd(name, **params)
    u = _round_trip(cmd, protocol)
    assert isinstance(u, nnc.Cmd) and u.name == name and u.params == cmd.params
    assert u.backend is None and not u.pinned


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_pinned_backend_and_custom_function_survive(protocol):
    cmd = nnc.Cmd("SCALAR_MUL", backend="CPU_REF", a=2.0)
    u = _round_trip(cmd, protocol)
    assert u.pinned and u.backend == "CPU_REF" and u.params == {"a": 2.0}
    x = np.arange(3, dtype=np.float32)
    y = np.zeros(3, np.float32)
    nnc.cmd_exec(u, [x], [y])
    np.testing.assert_array_equal(y, 2 * x)
    c = _round_trip(nnc.Cmd.custom(_module_level_fn), protocol)
    assert c.fn is _module_level_fn
    nnc.cmd_exec(c, [x], [y])
    np.testing.assert_array_equal(y, x + 1)


def test_custom_with_a_lambda_says_why():
    cmd = nnc.Cmd.custom(lambda i, o: None)
    with pytest.raises(TypeError, match="cannot be pickled: its function .* module level"):
        pickle.dumps(cmd)

    def closure(i, o):
        pass

    with pytest.raises(TypeError, match="not a lambda or a closure"):
        pickle.dumps(nnc.Cmd.custom(closure))
    # Copies need no pickling: a Cmd is immutable, so copy returns it.
    assert copy.copy(cmd) is cmd and copy.deepcopy(cmd) is cmd


def test_unpickling_an_unregistered_command_says_so():
    name = "TEST_PICKLE_GONE"
    nnc.register_command(name)
    nnc.register_backend(name, "CPU_REF", lambda c, i, o: None)
    data = pickle.dumps(nnc.Cmd(name))
    from nnc.cmd import command as cmd_module

    # Simulate a process where the command is not registered: the lookup names it.
    blob = data.replace(name.encode(), b"TEST_PICKLE_NONE")
    with pytest.raises(nnc.CommandError, match="unknown command 'TEST_PICKLE_NONE'"):
        pickle.loads(blob)
    assert cmd_module.command_info(name).name == name


def test_live_objects_refuse_with_a_reason():
    g = nnc.Graph()
    a = g.exec(nnc.Cmd("NOOP"))
    sched = nnc.static_schedule(g)
    s = nnc.Stream("cpu")
    sig = nnc.Signal("cpu")
    cases = [(g, "Graph cannot be copied or pickled: a concrete graph holds live tensors"),
             (a, "GraphExec cannot be copied or pickled"),
             (sched, "Schedule cannot be copied or pickled"),
             (s, "Stream cannot be copied or pickled"),
             (sig, "Signal cannot be copied or pickled"),
             (nnc.command_info("GEMM"), "CommandInfo cannot be copied or pickled"),
             (nnc.command_info("GEMM").backends[0], "Backend cannot be copied or pickled")]
    for obj, why in cases:
        for protocol in PROTOCOLS:
            with pytest.raises(TypeError, match=why):
                pickle.dumps(obj, protocol=protocol)
        for fn in (copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match=why):
                fn(obj)
    s.wait()



def test_compare_pickled_under_its_old_module_loads():
    """nnc.Compare pickles by module path; one made when it lived in nnc.graph.control (since
    split into while_node, case_of, subgraph and compare) still loads."""
    # pickle.dumps(nnc.Compare(0, ">=", 2.5), protocol=2) from before the split:
    old = (b"\x80\x02cnnc.graph.control\nCompare\nq\x00K\x00X\x02\x00\x00\x00>=q\x01"
           b"G@\x04\x00\x00\x00\x00\x00\x00\x87q\x02Rq\x03.")
    c = pickle.loads(old)
    assert isinstance(c, nnc.Compare) and (c.lhs, c.op, c.value) == (0, ">=", 2.5)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        again = pickle.loads(pickle.dumps(c, protocol=protocol))
        assert (again.lhs, again.op, again.value) == (0, ">=", 2.5)

@pytest.fixture
def fake_gpu(monkeypatch):
    import gc

    from fakes.cuda_driver import install, real

    if real is None:
        pytest.skip("cuda-bindings is not installed (the fake driver borrows its types)")
    from nnc.cuda import memory

    yield install(monkeypatch)
    memory._staging.clear()
    gc.collect()        # free fake buffers while the fake driver is still installed


def test_gpu_tensor_refuses_pickle_and_copies_on_the_device(fake_gpu):
    t = nnc.Tensor.zeros((2,), device="gpu:0")
    with pytest.raises(TypeError, match="gpu:0 tensor cannot be pickled"):
        pickle.dumps(t)
    c = copy.copy(t)                    # a device copy
    assert c.device == "gpu:0" and c.data_ptr != t.data_ptr
    np.testing.assert_array_equal(c.numpy(), [0.0, 0.0])
