"""Commands and backends: data movement, element-wise commands, SOFTMAX, bad calls, the registry
and autotune (NNC: ccv_nnc_cmd.c, cmd/*). GEMM, CONVOLUTION and pooling are in test_cmd_nn.py.

Every backend of every command is compared with a float64 NumPy reference written here, and
every CPU_OPT result with CPU_REF, within the tolerances of docs/commands.md.
"""

import uuid

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnc
from nnc.cmd import command as cmd_module

EW = ["EWSUM", "EWPROD", "EWDIV", "EWEXP", "EWLOG", "SCALAR_MUL", "RELU", "SOFTMAX"]
ALLOW = EW + ["SET", "DATA_TRANSFER"]
BUILTIN = ["NOOP", "CUSTOM", "SET", "DATA_TRANSFER", *EW, "GEMM", "CONVOLUTION", "MAX_POOL",
           "AVG_POOL"]
# (rtol, atol) for element-wise commands and SOFTMAX with |inputs| <= 3 (docs/commands.md).
TOL = {"float64": (1e-12, 1e-12), "float32": (1e-6, 1e-6), "float16": (2e-3, 4e-3)}


def backends_for(name, dtype, strided=False):
    """Backend objects of ``name`` that take ``dtype`` (and strided views when asked)."""
    return [b for b in nnc.command_info(name).backends
            if dtype in b.datatype_names and not (strided and b.contiguous_only)
            and b.device == "cpu"]


def strided(arr, fill=-7.0):
    """A non-contiguous view (every other element of a larger buffer) holding arr's values;
    returns (view, buffer). The gaps hold ``fill`` so stray writes show."""
    buf = np.full(arr.size * 2 + 3, fill, arr.dtype)
    strides = [2] * arr.ndim
    for i in range(arr.ndim - 2, -1, -1):
        strides[i] = strides[i + 1] * arr.shape[i + 1]
    view = nnc.Tensor(buf).view(arr.shape, 3, tuple(strides))
    view.numpy()[...] = arr
    assert not view.is_contiguous
    return view, buf


def ew_case(name, dtype, rng, shape=(3, 5)):
    """(Cmd params, inputs, expected output in float64) for an element-wise command."""
    def u(lo=-2.0, hi=2.0):
        return rng.uniform(lo, hi, shape).astype(dtype)

    def f(x):
        return None if x is None else x.astype(np.float64)

    params = {}
    if name == "EWSUM":
        xs = [u(), u(), u()]
        want = f(xs[0]) + f(xs[1]) + f(xs[2])
    elif name == "EWPROD":
        xs = [u(), u(), u()]
        want = f(xs[0]) * f(xs[1]) * f(xs[2])
    elif name == "EWDIV":
        xs = [u(), u(0.5, 2.0) * np.where(rng.random(shape) < 0.5, -1, 1).astype(dtype)]
        want = f(xs[0]) / f(xs[1])
    elif name == "EWEXP":
        xs = [u()]
        want = np.exp(f(xs[0]))
    elif name == "EWLOG":
        xs = [u(0.1, 3.0)]
        want = np.log(f(xs[0]))
    elif name == "SCALAR_MUL":
        params = {"a": 0.5}
        xs = [u()]
        want = 0.5 * f(xs[0])
    elif name == "RELU":
        xs = [u()]
        want = np.where(f(xs[0]) < 0, 0.0, f(xs[0]))
    elif name == "SOFTMAX":
        xs = [u(-3.0, 3.0)]
        x = f(xs[0])
        # NNC's rows: each entry of the first axis (all the others together); a vector is one.
        want = np.empty_like(x)
        for idx in np.ndindex(*x.shape[:1]) if x.ndim >= 2 and x.size else ():
            row = np.exp(x[idx] - x[idx].max())
            want[idx] = row / row.sum()
        if x.ndim == 1:
            want = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    else:
        raise AssertionError(name)
    return params, xs, want


def close(got, want, dtype):
    rtol, atol = TOL[str(dtype)]
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


def test_every_builtin_has_a_reference_backend():
    assert set(BUILTIN) <= set(nnc.commands())
    for name in BUILTIN:
        assert "CPU_REF" in nnc.backends(name), name
    for name in BUILTIN[2:]:
        assert nnc.backends(name)[0] == "CPU_OPT", name  # the fast one is the default


# ---- element-wise commands and SOFTMAX


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("name", EW)
def test_elementwise_every_backend_matches_numpy(name, dtype):
    rng = np.random.default_rng(EW.index(name))
    params, xs, want = ew_case(name, dtype, rng)
    results = {}
    for b in backends_for(name, dtype):
        out = np.full(want.shape, np.nan, dtype)
        nnc.cmd_exec(nnc.Cmd(name, backend=b.name, **params), xs, [out])
        close(out, want, dtype)
        results[b.name] = out
    assert "CPU_REF" in results
    if dtype == "float16":
        assert set(results) == {"CPU_REF"}  # CPU_OPT is float32/float64 only
    else:
        assert "CPU_OPT" in results
        close(results["CPU_OPT"], results["CPU_REF"].astype(np.float64), dtype)


@pytest.mark.parametrize("name", EW)
def test_elementwise_strided_inputs_and_outputs(name):
    rng = np.random.default_rng(7)
    params, xs, want = ew_case(name, "float32", rng, shape=(4, 3, 5))
    for b in backends_for(name, "float32", strided=True):
        ins = [strided(x)[0] for x in xs]
        out, buf = strided(np.zeros(want.shape, np.float32))
        nnc.cmd_exec(nnc.Cmd(name, backend=b.name, **params), ins, [out])
        close(out.numpy(), want, "float32")
        assert (buf[:3] == -7).all() and (buf[4::2] == -7).all()  # gaps untouched
    # Default selection skips the contiguous-only C backend and still gets it right.
    out = strided(np.zeros(want.shape, np.float32))[0]
    cmd = nnc.Cmd(name, **params)
    nnc.cmd_exec(cmd, [strided(x)[0] for x in xs], [out])
    close(out.numpy(), want, "float32")


def test_ewdiv_without_numerator_is_reciprocal():
    b = np.array([0.5, -4.0, 2.0, 8.0], np.float32)
    for backend in nnc.backends("EWDIV", device="cpu"):
        out = np.zeros(4, np.float32)
        nnc.cmd_exec(nnc.Cmd("EWDIV", backend=backend), [None, b], [out])
        np.testing.assert_array_equal(out, [2.0, -0.25, 0.5, 0.125])


@pytest.mark.parametrize("backend", ["CPU_OPT", "CPU_REF"])
def test_softmax_is_stable_and_sums_to_one(backend):
    x = np.array([[1000.0, 1001.0, 1002.0], [-1e4, 0.0, -1e4]], np.float32)
    out = np.zeros_like(x)
    nnc.cmd_exec(nnc.Cmd("SOFTMAX", backend=backend), [x], [out])
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out.sum(-1), 1, rtol=1e-6)
    np.testing.assert_allclose(out[1], [0, 1, 0], atol=1e-7)
    x1 = np.array([3.0], np.float64)  # a 1-D tensor is one row
    out1 = np.zeros(1)
    nnc.cmd_exec(nnc.Cmd("SOFTMAX", backend=backend), [x1], [out1])
    assert out1[0] == 1.0


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4),
       name=st.sampled_from(EW), dtype=st.sampled_from(["float32", "float64"]))
def test_opt_equals_ref_on_random_shapes(shape, name, dtype):
    rng = np.random.default_rng(len(shape))
    params, xs, want = ew_case(name, dtype, rng, tuple(shape))
    got = {}
    for b in ("CPU_OPT", "CPU_REF"):
        got[b] = np.zeros(want.shape, dtype)
        nnc.cmd_exec(nnc.Cmd(name, backend=b, **params), xs, [got[b]])
    close(got["CPU_OPT"], got["CPU_REF"].astype(np.float64), dtype)
    close(got["CPU_OPT"], want, dtype)


@pytest.mark.parametrize("name", EW)
def test_large_and_empty_tensors(name):
    """Large outputs take the C backends' GIL-free path; empty ones must not divide by zero."""
    rng = np.random.default_rng(11)
    params, xs, want = ew_case(name, "float64", rng, shape=(160, 128))
    for b in nnc.backends(name, device="cpu"):
        out = np.zeros(want.shape)
        nnc.cmd_exec(nnc.Cmd(name, backend=b, **params), xs, [out])
        close(out, want, "float64")
    for shape in ((3, 0), (0, 4)):
        params, xs, want = ew_case(name, "float32", rng, shape=shape)
        for b in nnc.backends(name, device="cpu"):
            nnc.cmd_exec(nnc.Cmd(name, backend=b, **params), xs, [np.zeros(shape, np.float32)])


@pytest.mark.parametrize("name", ALLOW)
def test_in_place_output_is_the_input(name):
    rng = np.random.default_rng(3)
    for b in backends_for(name, "float32"):
        if name == "SET":
            params, xs, want = {"value": 1.5}, [rng.standard_normal(6).astype(np.float32)], None
            want = np.full(6, 1.5)
        elif name == "DATA_TRANSFER":
            params, xs = {}, [rng.standard_normal(6).astype(np.float32)]
            want = xs[0].astype(np.float64)
        else:
            params, xs, want = ew_case(name, "float32", rng)
        # Output k aliases each input in turn (the C fold has a path for a later alias).
        for k in range(len(xs)):
            ins = [x.copy() for x in xs]
            t = nnc.Tensor(ins[k])
            ins[k] = t
            nnc.cmd_exec(nnc.Cmd(name, backend=b.name, **params), ins, [t])
            close(t.numpy(), want, "float32")


@pytest.mark.parametrize("name", ALLOW)
def test_partial_overlap_is_refused(name):
    buf = nnc.Tensor(np.ones(13, np.float32))
    x, y = buf.view((12,), 0), buf.view((12,), 1)
    ins = [x] * (2 if name in ("EWSUM", "EWPROD", "EWDIV") else 1)
    with pytest.raises(nnc.CommandError, match="only an exact alias"):
        nnc.cmd_exec(nnc.Cmd(name), ins, [y])


# ---- SET, DATA_TRANSFER, NOOP, CUSTOM


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "int64", "uint8"])
def test_set_and_data_transfer_every_backend(dtype):
    src = (np.arange(12) % 7).astype(dtype).reshape(3, 4)
    for b in backends_for("SET", dtype):
        out = np.zeros((3, 4), dtype)
        nnc.cmd_exec(nnc.Cmd("SET", value=3, backend=b.name), [], [out])
        assert (out == 3).all() and out.dtype == dtype
    for b in backends_for("DATA_TRANSFER", dtype):
        outs = [np.zeros((3, 4), dtype), np.zeros(5, dtype)]
        src2 = np.arange(5).astype(dtype)
        nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER", backend=b.name), [src, src2], outs)
        np.testing.assert_array_equal(outs[0], src)
        np.testing.assert_array_equal(outs[1], src2)
    # DATA_TRANSFER CPU_OPT is a byte copy: every dtype, not only floats.
    assert "CPU_OPT" in [b.name for b in backends_for("DATA_TRANSFER", dtype)]


def test_set_several_outputs_and_strided():
    a, b = np.zeros(3, np.float32), np.zeros((2, 2), np.float64)
    for backend in nnc.backends("SET", device="cpu"):
        nnc.cmd_exec(nnc.Cmd("SET", value=-2.5, backend=backend), [], [a, b])
        assert (a == -2.5).all() and (b == -2.5).all()
    view, buf = strided(np.zeros((2, 3), np.float32))
    nnc.cmd_exec(nnc.Cmd("SET", value=4), [], [view])
    assert (view.numpy() == 4).all() and (buf == 4).sum() == 6


def test_noop_and_custom():
    x = np.arange(4.0)
    y = np.zeros(4)
    nnc.cmd_exec(nnc.Cmd("NOOP"), [x], [y])
    assert (y == 0).all()
    seen = []

    def double(inputs, outputs):
        seen.append([type(v).__name__ for v in inputs + outputs])
        outputs[0][...] = 2 * inputs[0]

    nnc.cmd_exec(nnc.Cmd.custom(double), [x, None], [y])
    np.testing.assert_array_equal(y, 2 * x)
    assert seen == [["ndarray", "NoneType", "ndarray"]]
    with pytest.raises(nnc.CommandError, match="callable"):
        nnc.Cmd.custom(42)


# ---- bad calls


@pytest.mark.parametrize("make, inputs, outputs, fragment", [
    (lambda: nnc.Cmd("NO_SUCH_COMMAND"), None, None, "unknown command 'NO_SUCH_COMMAND'"),
    (lambda: nnc.Cmd("GEMM", transpose_c=True), None, None, "unknown parameters"),
    (lambda: nnc.Cmd("SCALAR_MUL", a="x"), None, None, "a must be a number"),
    (lambda: nnc.Cmd("EWEXP"), [np.ones(3), np.ones(3)], [np.ones(3)], "takes 1 inputs, got 2"),
    (lambda: nnc.Cmd("EWSUM"), [np.ones(3)], [], "takes 1 outputs, got 0"),
    (lambda: nnc.Cmd("EWSUM"), [np.ones(3), np.ones(4)], [np.ones(3)], "has shape (4,)"),
    (lambda: nnc.Cmd("EWSUM"), [np.ones(3), np.ones(3, np.float32)], [np.ones(3)],
     "mixed dtypes"),
    (lambda: nnc.Cmd("EWEXP"), [np.ones(3, np.int32)], [np.ones(3, np.int32)], "floating-point"),
    (lambda: nnc.Cmd("SOFTMAX"), [np.ones(3, np.int64)], [np.ones(3, np.int64)],
     "floating-point"),
    (lambda: nnc.Cmd("SOFTMAX"), [np.array(1.0)], [np.array(1.0)], "at least 1 dimension"),
    (lambda: nnc.Cmd("EWDIV"), [np.ones(3), None], [np.ones(3)], "input 1 is required"),
    (lambda: nnc.Cmd("DATA_TRANSFER"), [np.ones(3), np.ones(3)], [np.ones(3)],
     "copies input k to output k"),
])
def test_bad_calls_raise_command_error(make, inputs, outputs, fragment):
    with pytest.raises(nnc.CommandError) as info:
        nnc.cmd_exec(make(), inputs, outputs)
    assert fragment in str(info.value)


def test_read_only_output_is_refused():
    y = np.zeros(3)
    y.flags.writeable = False
    with pytest.raises(nnc.CommandError, match="read-only"):
        nnc.cmd_exec(nnc.Cmd("EWEXP"), [np.ones(3)], [y])
    # A read-only input is fine.
    x = np.ones(3)
    x.flags.writeable = False
    out = np.zeros(3)
    nnc.cmd_exec(nnc.Cmd("EWEXP"), [x], [out])
    np.testing.assert_allclose(out, np.e)


def test_pinned_backend_that_does_not_accept():
    x = np.ones(3, np.float16)
    with pytest.raises(nnc.CommandError, match="CPU_OPT of EWEXP does not accept float16"):
        nnc.cmd_exec(nnc.Cmd("EWEXP", backend="CPU_OPT"), [x], [np.zeros(3, np.float16)])
    v = strided(np.ones(3, np.float32))[0]
    with pytest.raises(nnc.CommandError, match="strided"):
        nnc.cmd_exec(nnc.Cmd("RELU", backend="CPU_OPT"), [v], [np.zeros(3, np.float32)])
    with pytest.raises(nnc.CommandError, match="has no backend 'GPU_CUDNN'"):
        nnc.Cmd("RELU", backend="GPU_CUDNN")


def _c_backends():
    return [b for name in nnc.commands() for b in nnc.command_info(name).backends if b.is_c]


def _malformed(name):
    """Calls a C backend must refuse: (inputs, outputs) lists that skip nnc's checks."""
    f32, i32 = np.float32, np.int32

    def z(n, dt=f32):
        return np.zeros(n, dt)

    bad = [([z(3)], []), ([], [None]), ([z(3)], [strided(z(3))[0]])]
    if name == "SET":
        return bad + [([], [z(3, i32)]), ([], [z(3), None])]
    if name == "DATA_TRANSFER":
        # A strided view is copied into when its shape is the input's: not of another shape.
        return bad[:2] + [([z(3)], [z(4)]), ([z(3), z(2)], [z(3)]), ([None], [z(3)]),
                          ([z(3, np.int16).view(np.float16)], [z(2)]),
                          ([z((2, 3))], [strided(z((3, 2)))[0]])]
    if name == "FORMAT_TRANSFORM":
        # n inputs -> up to n outputs (NNC: fewer outputs than inputs is allowed, so no output
        # at all is no call to refuse), any dtype on CPU_REF: refused are more outputs than
        # inputs, an absent tensor, and pairs whose shapes or dtypes differ.
        return [([], [None]), ([z(3)], [z(4)]), ([z(3)], [z(3, np.float64)]), ([None], [z(3)]),
                ([z(3)], [z(3), z(3)]), ([z((2, 3))], [z((3, 2))])]
    ins = [z(3)] * (2 if name in ("EWSUM", "EWPROD", "EWDIV") else 1)
    return bad + [
        (ins[:-1] + [z(4)], [z(3)]),                 # sizes differ
        (ins, [z(4)]),
        ([z(3, i32) for _ in ins], [z(3, i32)]),     # datatype not taken
        (ins, [z(3, np.float64)]),                   # datatypes differ
        (ins[:-1] + [None], [z(3)]),                 # a required input is absent
        (ins + [z(3)] * (0 if name in ("EWSUM", "EWPROD") else 1), [z(3), z(3)]),  # arity
    ]


@pytest.mark.parametrize("backend", _c_backends(), ids=lambda b: f"{b.command}/{b.name}")
def test_c_backend_called_directly_refuses_bad_tensors(backend):
    # Commands with a required parameter get one that fits the malformed 1-D tensors.
    params = {"axes": (0,)} if "REDUCE" in backend.command else {}
    if backend.command.endswith("_POOL") or backend.command == "LRN":
        params = {"size": 1}
    if backend.command in ("LAYER_NORM", "RMSNORM"):
        params = {"axis": (0,)}
    if backend.command == "GROUP_NORM":
        params = {"groups": 1}
    if backend.command == "SCALED_DOT_PRODUCT_ATTENTION":
        params = {"scale": 1.0}
    if backend.command == "UPSAMPLE":
        params = {"type": "bilinear"}
    if backend.command == "PAD":
        params = {"begin": (0,), "end": (0,)}
    if backend.command == "TRANSPOSE":
        params = {"perm": (0,)}
    cmd = nnc.Cmd(backend.command, **params)
    for ins, outs in _malformed(backend.command):
        before = [None if o is None else np.array(o) for o in outs]
        with pytest.raises(nnc.CommandError, match="failed: INVALID"):
            backend.exec(cmd, ins, outs)
        for o, b in zip(outs, before):  # refused before writing anything
            if isinstance(o, np.ndarray):
                np.testing.assert_array_equal(o, b)
    if backend.command == "SOFTMAX":
        with pytest.raises(nnc.CommandError, match="INVALID"):
            backend.exec(cmd, [np.zeros((2, 3), np.float32)], [np.zeros((3, 2), np.float32)])


# ---- the registry, default selection and autotune


def _name(prefix):
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def test_register_user_command_and_backends():
    name = _name("TEST_SQUARE")
    calls = []

    def check(cmd, inputs, outputs):
        if len(inputs) != 1 or len(outputs) != 1:
            raise nnc.CommandError(f"{cmd.name} takes 1 input and 1 output")

    def make(tag):
        def fn(cmd, inputs, outputs):
            calls.append(tag)
            outputs[0][...] = inputs[0] ** 2
        return fn

    nnc.register_command(name, inplace="allow", check=check)
    nnc.register_backend(name, "CPU_REF", make("ref"))
    nnc.register_backend(name, "LOW", make("low"), priority=5)
    nnc.register_backend(name, "MID", make("mid"))             # a user backend: priority 15
    nnc.register_backend(name, "HIGH", make("high"), priority=30, datatypes=["float64"])
    nnc.register_backend(name, "MID2", make("mid2"), priority=15)
    assert nnc.backends(name) == ["HIGH", "MID", "MID2", "CPU_REF", "LOW"]  # ties: earlier first
    x = np.arange(3.0)
    y = np.zeros(3)
    nnc.cmd_exec(nnc.Cmd(name), [x], [y])
    assert calls[-1] == "high" and (y == x ** 2).all()
    nnc.cmd_exec(nnc.Cmd(name), [x.astype(np.float32)], [np.zeros(3, np.float32)])
    assert calls[-1] == "mid"  # HIGH takes float64 only
    nnc.cmd_exec(nnc.Cmd(name, backend="LOW"), [x], [y])
    assert calls[-1] == "low"
    # Re-registering a name with replace=True replaces it (one entry, new priority and
    # function); without it, a different registration raises (tests/cmd/test_register.py).
    nnc.register_backend(name, "LOW", make("low2"), priority=40, replace=True)
    assert nnc.backends(name) == ["LOW", "HIGH", "MID", "MID2", "CPU_REF"]
    nnc.cmd_exec(nnc.Cmd(name), [x], [y])
    assert calls[-1] == "low2"
    # accept= narrows a backend further.
    nnc.register_backend(name, "LOW", make("low3"), priority=40, accept=lambda c, i, o: False,
                         replace=True)
    nnc.cmd_exec(nnc.Cmd(name), [x], [y])
    assert calls[-1] == "high"
    with pytest.raises(nnc.CommandError, match="takes 1 input"):
        nnc.cmd_exec(nnc.Cmd(name), [x, x], [y])
    with pytest.raises(nnc.CommandError, match="already registered with another inplace"):
        nnc.register_command(name, inplace="none")
    with pytest.raises(nnc.CommandError, match="unknown command"):
        nnc.register_backend(_name("TEST_NONE"), "CPU_REF", make("x"))


def test_params_are_frozen_so_backends_and_nodes_cannot_disagree():
    """CPU_OPT reads the parameters copied into C when the Cmd was made, CPU_REF reads
    cmd.params: mutating the mapping after a node was built made the two backends compute
    different results from one command. cmd.params is now read-only."""
    cmd = nnc.Cmd("SCALAR_MUL", a=2.0)
    x = nnc.Tensor(np.ones(4, np.float32))
    outs = {b: nnc.Tensor.zeros(4) for b in ("CPU_REF", "CPU_OPT")}
    g = nnc.Graph()
    nodes = [g.exec(cmd, [x], [outs[b]]) for b in outs]
    for node, b in zip(nodes, outs):
        node.backend = b
    for mutate in (lambda p: p.__setitem__("a", 3.0), lambda p: p.__delitem__("a"),
                   lambda p: p.update(a=3.0), lambda p: p.pop("a"), lambda p: p.clear(),
                   lambda p: p.setdefault("b", 1), lambda p: p.popitem()):
        with pytest.raises(nnc.CommandError, match="new Cmd"):
            mutate(cmd.params)
    with pytest.raises(nnc.CommandError, match="new Cmd"):
        cmd.params |= {"a": 3.0}
    with pytest.raises(AttributeError):
        cmd.params = {"a": 3.0}
    g.run()
    for b in outs:
        assert (outs[b].numpy() == 2).all(), b
    # Nodes hold the command by value (NNC's ccv_nnc_graph_exec_new): same parameters.
    assert all(n.cmd.params == {"a": 2.0} and n.cmd.a == 2.0 for n in nodes)
    # Reading works as for a dict; a changed command is a new Cmd.
    p = cmd.params
    assert dict(p) == {"a": 2.0} and p["a"] == 2.0 and p.get("b") is None and list(p) == ["a"]
    assert len(p) == 1 and "a" in p and p == {"a": 2.0} and repr(p) == "{'a': 2.0}"
    assert nnc.Cmd("SCALAR_MUL", **{**cmd.params, "a": 3.0}).params["a"] == 3.0


def test_user_params_are_frozen_deeply():
    """Containers a normalize returns are frozen too (lists to tuples): mutating one in place
    would change what Python backends see but not what C saw."""
    name = _name("TEST_FROZEN")
    seen = []
    nnc.register_command(name, normalize=lambda p: {"size": list(p.get("size", [1, 1])),
                                                    "opts": {"k": [1]}})
    nnc.register_backend(name, "CPU_REF", lambda cmd, i, o: seen.append(cmd.params["size"]))
    given = [3, 4]
    cmd = nnc.Cmd(name, size=given)
    given[0] = 99
    assert cmd.params["size"] == (3, 4) and cmd.params["opts"]["k"] == (1,)
    with pytest.raises(nnc.CommandError, match="new Cmd"):
        cmd.params["opts"]["k"] = 2
    nnc.cmd_exec(cmd, [], [])
    assert seen == [(3, 4)]


def test_no_backend_accepts():
    name = _name("TEST_F64")
    nnc.register_command(name)
    nnc.register_backend(name, "CPU_REF", lambda c, i, o: None, datatypes=["float64"])
    with pytest.raises(nnc.CommandError, match="no backend of .* accepts float32"):
        nnc.cmd_exec(nnc.Cmd(name), [np.zeros(2, np.float32)], [])


def test_autotune_keeps_c_backends_and_reads_frozen_inputs_in_place(monkeypatch):
    """With a C backend accepting, Python backends (GIL held; NumPy's BLAS threads) are not
    candidates even when they would time faster; frozen inputs are not copied for timing."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    wg = rng.standard_normal((16, 32)).astype(np.float32)
    out = np.zeros((64, 16), np.float32)
    gemm = nnc.Cmd("GEMM", transpose_b=True)
    assert {"CPU_OPT", "CPU_NUMPY", "CPU_REF"} <= set(nnc.backends("GEMM", device="cpu"))
    for _ in range(3):
        assert nnc.cmd_autotune(gemm, [a, wg], [out]).name == "CPU_OPT"
    # float16 has no C backend: the Python ones are timed as before.
    h = np.ones((4, 4), np.float16)
    assert nnc.cmd_autotune(gemm, [h, h], [np.zeros((4, 4), np.float16)]).name != "CPU_OPT"

    # Two C backends (CPU_OPT, CPU_OPT_WINOGRAD) are timed on scratch copies, but a frozen
    # weight is read as it is.
    x = rng.standard_normal((1, 10, 10, 8)).astype(np.float32)
    w = nnc.Tensor(rng.standard_normal((8, 3, 3, 8)).astype(np.float32)).freeze()
    y = np.zeros((1, 10, 10, 8), np.float32)
    seen = []
    real = cmd_module._scratch

    def spy(inputs, outputs):
        s_in, s_out = real(inputs, outputs)
        seen.append((s_in[0] is inputs[0], s_in[1] is inputs[1]))
        return s_in, s_out

    monkeypatch.setattr(cmd_module, "_scratch", spy)
    best = nnc.cmd_autotune(nnc.Cmd("CONVOLUTION", padding=1), [x, w], [y])
    assert best.name in ("CPU_OPT", "CPU_OPT_WINOGRAD")
    assert seen == [(False, True)]


def test_autotune_picks_an_accepting_backend_on_scratch_copies():
    x = np.arange(1.0, 7.0, dtype=np.float32)
    y = np.full(6, 2.0, np.float32)
    t = nnc.Tensor(x)
    cmd = nnc.Cmd("EWSUM")
    best = nnc.cmd_autotune(cmd, [t, y], [t])
    assert best.name in nnc.backends("EWSUM")
    np.testing.assert_array_equal(x, np.arange(1.0, 7.0))  # the real tensors are untouched
    np.testing.assert_array_equal(y, 2.0)
    h = np.ones(3, np.float16)
    assert nnc.cmd_autotune(cmd, [h, h], [np.zeros(3, np.float16)]).name == "CPU_REF"
    assert nnc.cmd_autotune(nnc.Cmd("EWSUM", backend="CPU_REF"), [x, y], [t]).name == "CPU_REF"

    # In-place aliasing is kept on the scratch copies, and the copies are not the real arrays.
    name = _name("TEST_ALIAS")
    seen = []

    def fn(cmd, inputs, outputs):
        seen.append((np.shares_memory(inputs[0], outputs[0]), np.shares_memory(inputs[0], x)))
        outputs[0] += 1

    nnc.register_command(name, inplace="allow")
    nnc.register_backend(name, "A", fn)
    nnc.register_backend(name, "B", fn)
    assert nnc.cmd_autotune(nnc.Cmd(name), [t], [t]).name in ("A", "B")
    assert seen and all(alias and not real for alias, real in seen)
    np.testing.assert_array_equal(x, np.arange(1.0, 7.0))


def test_cold_autotune_flushes_then_releases_and_leaves_the_tensors_alone(monkeypatch):
    """cmd_autotune(cold=True) times each run after a flush (its eviction buffer is twice the
    last-level cache) and reads the non-frozen inputs back in without changing them;
    cache_flush_release frees the buffer; cold=False never makes one."""
    from nnc.cmd import cpu_cache

    monkeypatch.setattr(cpu_cache, "last_level_cache_bytes", lambda: 1 << 20)
    cpu_cache.cache_flush_release()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 12, 12, 16)).astype(np.float32)
    w = rng.standard_normal((16, 3, 3, 16)).astype(np.float32)
    out = np.full((1, 12, 12, 16), 7.0, np.float32)
    conv = nnc.Cmd("CONVOLUTION", padding=1)
    x0, w0 = x.copy(), w.copy()
    assert nnc.cmd_autotune(conv, [x, w], [out]).name in nnc.backends("CONVOLUTION")
    assert cpu_cache._buffer is None
    best = nnc.cmd_autotune(conv, [x, w], [out], cold=True)
    assert best.name in ("CPU_OPT", "CPU_OPT_WINOGRAD")
    assert cpu_cache._buffer is not None and cpu_cache._buffer.nbytes == 2 << 20
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(w, w0)
    assert (out == 7.0).all()                           # scratch copies only
    cpu_cache.cache_flush_release()
    assert cpu_cache._buffer is None
    assert cpu_cache.last_level_cache_bytes() == 1 << 20
    monkeypatch.undo()
    assert cpu_cache.last_level_cache_bytes() >= 1 << 20  # sysfs, or 32 MiB if unreadable


def test_cache_flush_survives_a_release_from_another_thread(monkeypatch):
    """Two graphs autotuned at once: one releases the eviction buffer while the other is
    flushing; the flush keeps the buffer it took (or makes a new one), never fails."""
    import sys
    import threading

    from nnc.cmd import cpu_cache

    monkeypatch.setattr(cpu_cache, "last_level_cache_bytes", lambda: 1 << 16)
    t = nnc.Tensor(np.ones(64, np.float32))
    stop = threading.Event()
    errors = []

    def release():
        while not stop.is_set():
            cpu_cache.cache_flush_release()

    def flush():
        try:
            for _ in range(3000):
                cpu_cache.cache_flush([t, None])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=release), threading.Thread(target=flush)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)         # switch threads between the flush's steps
    try:
        for th in threads:
            th.start()
        threads[1].join(timeout=20)
        stop.set()
        threads[0].join(timeout=20)
    finally:
        sys.setswitchinterval(old)
    assert not any(th.is_alive() for th in threads) and errors == []
    cpu_cache.cache_flush_release()


@pytest.mark.parametrize("cache, cold", [(1, True), (1 << 40, False)])
def test_graph_autotune_times_cold_when_frozen_weights_outgrow_the_cache(monkeypatch, cache,
                                                                          cold):
    """Graph.autotune times nodes cold when the graph's frozen weights are larger than the
    last-level cache (in a run they come from memory), warm otherwise, and frees the eviction
    buffer when it is done."""
    from nnc.cmd import cpu_cache
    from nnc.run import tools

    seen = []
    real = tools.cmd_autotune

    def spy(cmd, inputs, outputs, trials=3, cold=False):
        seen.append(cold)
        return real(cmd, inputs, outputs, trials, cold)

    monkeypatch.setattr(tools, "last_level_cache_bytes", lambda: cache)
    monkeypatch.setattr(tools, "cmd_autotune", spy)
    rng = np.random.default_rng(2)
    x = nnc.Tensor(rng.standard_normal((1, 10, 10, 8)).astype(np.float32))
    w = nnc.Tensor(rng.standard_normal((8, 3, 3, 8)).astype(np.float32))
    y = nnc.Tensor.zeros((1, 10, 10, 8), dtype="float32")
    g = nnc.Graph()
    g.exec(nnc.Cmd("CONVOLUTION", padding=1), [x, w], [y])
    g.freeze()
    g.run()
    want = y.numpy().copy()
    g.autotune()
    assert seen == [cold]
    assert cpu_cache._buffer is None
    g.run()
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
