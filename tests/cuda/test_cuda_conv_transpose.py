"""CONVOLUTION_TRANSPOSE's GPU_REF (nnc/cmd/convolution/gpu/ref.py, conv.cu's conv_transpose)
against CPU_REF: geometry (stride, padding, output padding, groups, dilation, bias, odd and 3-d
shapes), pixel-strided views, float16, prepared launches on a GPU stream, and what its
``accept`` refuses.

The "fake" variants run on tests/fakes/cuda_driver.py, whose NumPy emulation of the kernel
gathers from the raw parameter array (so a mis-packed geometry or a wrong gather rule differs
from CPU_REF, which scatters); the "gpu" variants run the kernel itself where there is a GPU and
are skipped elsewhere.
"""

import ctypes
import gc

import numpy as np
import pytest
from fakes.cuda_driver import install, real
from fakes.env import fake_or_gpu
from test_cuda_runtime import _nhwc_strides

import nnc
from nnc.cmd.convolution.conv_transpose import conv_transpose_shape
from nnc.cuda import memory, runner

pytestmark = pytest.mark.skipif(real is None, reason="cuda-bindings is not installed (the fake "
                                "driver borrows its enums and handle types)")

NAME = "CONVOLUTION_TRANSPOSE"


@pytest.fixture
def fake(monkeypatch):
    yield install(monkeypatch)
    gc.collect()        # free fake buffers while the fake driver is still installed


@pytest.fixture(params=["fake", "gpu"])
def env(request):
    """The fake driver, then (where one exists) the real GPU."""
    return fake_or_gpu(request)


def gpu(a):
    return memory.from_numpy(np.asarray(a), "gpu:0")


# (x shape, w shape, parameters, bias): every parameter of the command, and shapes that are
# neither square nor powers of two.
CASES = {
    "stride1": ((2, 5, 6, 3), (3, 3, 3, 4), dict(), True),
    "stride2_pad_outpad_groups": ((1, 4, 5, 4), (4, 3, 3, 2),
                                  dict(stride=2, padding=1, output_padding=1, groups=2), True),
    "uneven_dilated_3d": ((7, 5, 3), (3, 2, 3, 5),
                          dict(stride=(2, 3), padding=(1, 0, 2, 1), dilation=(2, 1),
                               output_padding=(1, 2)), True),
    "depthwise_no_bias": ((1, 6, 7, 6), (6, 3, 3, 1), dict(stride=2, padding=1, groups=6), False),
    # Stride 3 with a 1x1 kernel leaves rows and columns no tap reaches: the bias alone.
    "holes": ((1, 3, 3, 2), (2, 1, 1, 3), dict(stride=3, output_padding=2), True),
    "dilation_beyond_stride": ((2, 3, 4, 2), (2, 2, 2, 2),
                               dict(stride=1, dilation=3, output_padding=(2, 1)), True),
}


def _case(name, dtype, seed=5):
    x_shape, w_shape, params, with_bias = CASES[name]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    shape = conv_transpose_shape(nnc.Cmd(NAME, **params), x_shape, w_shape)
    bias = rng.standard_normal(shape[-1]).astype(dtype) if with_bias else None
    return x, w, bias, params, shape


def _cpu_ref(x, w, bias, params, shape):
    want = np.zeros(shape)
    ins = [x.astype(np.float64), w.astype(np.float64)]
    ins += [] if bias is None else [bias.astype(np.float64)]
    nnc.cmd_exec(nnc.Cmd(NAME, backend="CPU_REF", **params), ins, [want])
    return want


def _bound(x, w, bias, params, eps):
    """docs/commands.md's dot-product bound, K = the products one output sums at most."""
    k = (x.shape[-1] // params.get("groups", 1)) * w.shape[1] * w.shape[2]
    atol = k * eps * np.abs(x).max() * np.abs(w).max()
    if bias is not None:
        atol += eps * np.abs(bias).max()
    return dict(rtol=4 * eps, atol=atol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(CASES))
def test_gpu_ref_matches_cpu_ref(env, name, dtype):
    x, w, bias, params, shape = _case(name, dtype)
    want = _cpu_ref(x, w, bias, params, shape)
    out = nnc.Tensor.empty(shape, dtype, device="gpu")
    ins = [gpu(x), gpu(w)] + ([] if bias is None else [gpu(bias)])
    # Default selection: GPU_REF is the command's only GPU backend.
    nnc.cmd_exec(nnc.Cmd(NAME, **params), ins, [out])
    got = out.numpy()
    np.testing.assert_allclose(got, want, **_bound(x, w, bias, params,
                                                   float(np.finfo(dtype).eps)))
    if env is not None:
        suffix = "f32" if dtype == "float32" else "f64"
        assert env.launches == [f"nnc_conv_transpose_{suffix}"]
    # The same kernel again gives the same bits (one thread per output, no atomics).
    nnc.cmd_exec(nnc.Cmd(NAME, backend="GPU_REF", **params), ins, [out])
    np.testing.assert_array_equal(out.numpy(), got)


def test_bias_none_is_no_bias(env):
    x, w, bias, params, shape = _case("stride2_pad_outpad_groups", np.float32)
    want = _cpu_ref(x, w, None, params, shape)
    out = nnc.Tensor.empty(shape, device="gpu")
    nnc.cmd_exec(nnc.Cmd(NAME, **params), [gpu(x), gpu(w), None], [out])
    np.testing.assert_allclose(out.numpy(), want, **_bound(x, w, None, params, 2.0 ** -23))


def test_pixel_strided_input_and_output_slice(env):
    """x a channel slice of a wider image, out a channel slice of a concat buffer: the kernel
    reads and writes by pixel stride and leaves the rest of the buffer alone."""
    x, w, bias, params, shape = _case("stride2_pad_outpad_groups", np.float32)
    want = _cpu_ref(x, w, bias, params, shape)
    wide = np.zeros(x.shape[:-1] + (x.shape[-1] + 3,), np.float32)
    wide[..., 2:2 + x.shape[-1]] = x
    xg = gpu(wide).view(x.shape, offset=2, strides=_nhwc_strides(x.shape, wide.shape[-1]))
    buf = nnc.Tensor.zeros(shape[:-1] + (shape[-1] + 5,), device="gpu")
    out = buf.view(shape, offset=1, strides=_nhwc_strides(shape, shape[-1] + 5))
    assert runner.pixel_stride(xg) == wide.shape[-1] and runner.pixel_stride(out) == shape[-1] + 5
    nnc.cmd_exec(nnc.Cmd(NAME, backend="GPU_REF", **params), [xg, gpu(w), gpu(bias)], [out])
    np.testing.assert_allclose(out.numpy(), want, **_bound(x, w, bias, params, 2.0 ** -23))
    full = buf.numpy()
    assert (full[..., 0] == 0).all() and (full[..., 1 + shape[-1]:] == 0).all()


def test_float16_is_computed_in_float32(env):
    x, w, bias, params, shape = _case("uneven_dilated_3d", np.float16)
    want = _cpu_ref(x, w, bias, params, shape)
    out = nnc.Tensor.empty(shape, "float16", device="gpu")
    nnc.cmd_exec(nnc.Cmd(NAME, **params), [gpu(x), gpu(w), gpu(bias)], [out])
    # docs/gpu.md: float16 storage (eps 2^-10) rounds inputs and the output once each; the
    # float32 sum of K products adds K float32 roundings.
    f16 = float(np.finfo(np.float16).eps)
    k = x.shape[-1] * w.shape[1] * w.shape[2]
    np.testing.assert_allclose(out.numpy().astype(np.float64), want,
                               rtol=2 * f16, atol=2 * f16 * max(1.0, np.abs(want).max()) * k)
    if env is not None:
        assert env.launches == ["nnc_conv_transpose_f16"]


def test_graph_on_a_gpu_stream_runs_prepared_launches(env):
    """A graph node runs GPU_REF through the prepared path (parameters packed once), run after
    run, and a sequential run the same way."""
    x, w, bias, params, shape = _case("dilation_beyond_stride", np.float32)
    want = _cpu_ref(x, w, bias, params, shape)
    g = nnc.Graph()
    xg = gpu(x)
    out = nnc.Tensor.empty(shape, device="gpu")
    g.exec(nnc.Cmd(NAME, **params), [xg, gpu(w), gpu(bias)], [out])
    s = nnc.Stream("gpu")
    bound = _bound(x, w, bias, params, 2.0 ** -23)
    for _ in range(2):
        memory.fill_zero(out)
        g.run(stream=s)
        s.wait()
        np.testing.assert_allclose(out.numpy(), want, **bound)
    assert [e.backend for e in g.execs] == ["GPU_REF"]
    # The prepared launch reads x's memory at each run.
    nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [2 * x], [xg])
    g.run(stream=s)
    s.wait()
    np.testing.assert_allclose(out.numpy(), _cpu_ref(2 * x, w, bias, params, shape),
                               **_bound(2 * x, w, bias, params, 2.0 ** -23))
    memory.fill_zero(out)
    g.run()
    assert np.abs(out.numpy()).max() > 0


def test_registered_for_gpu_tensors_only(fake):
    assert nnc.backends(NAME, device="gpu") == ["GPU_REF"]
    assert "GPU_REF" not in nnc.backends(NAME, device="cpu")
    x, w, bias, params, shape = _case("stride1", np.float32)
    with pytest.raises(nnc.CommandError, match="GPU_REF of CONVOLUTION_TRANSPOSE does not "
                                               "accept float32 tensors"):
        nnc.cmd_exec(nnc.Cmd(NAME, backend="GPU_REF"), [x, w, bias], [np.zeros(shape, "f4")])


def test_what_the_kernel_cannot_take_is_refused(fake):
    x, w, bias, params, shape = _case("stride1", np.float32)
    out = nnc.Tensor.empty(shape, device="gpu")
    pinned = nnc.Cmd(NAME, backend="GPU_REF")
    reason = "evenly spaced pixels and unit channel stride"
    # x's channels not contiguous.
    wide = gpu(np.repeat(x, 2, axis=-1))
    xs = wide.view(x.shape, offset=0, strides=(x.shape[1] * x.shape[2] * 6, x.shape[2] * 6, 6, 2))
    with pytest.raises(nnc.CommandError, match=reason):
        nnc.cmd_exec(pinned, [xs, gpu(w), gpu(bias)], [out])
    with pytest.raises(nnc.CommandError, match="no backend of CONVOLUTION_TRANSPOSE accepts"):
        nnc.cmd_exec(nnc.Cmd(NAME), [xs, gpu(w), gpu(bias)], [out])
    # w not contiguous.
    w2 = gpu(np.repeat(w, 2, axis=-1))
    ws = w2.view(w.shape, offset=0, strides=(w.shape[1] * w.shape[2] * 8, w.shape[2] * 8, 8, 2))
    with pytest.raises(nnc.CommandError, match="w and bias contiguous"):
        nnc.cmd_exec(pinned, [gpu(x), ws, gpu(bias)], [out])
    # Mixed devices.
    with pytest.raises(nnc.CommandError, match="one GPU"):
        nnc.cmd_exec(pinned, [gpu(x), w, gpu(bias)], [out])
    # NCHW tensors: the kernel reads NHWC memory (a FORMAT_TRANSFORM must come first).
    nchw = [nnc.Tensor.empty(s, device="gpu", format="NCHW") for s in
            ((2, 3, 5, 6), (3, 4, 3, 3), (2, 4, 7, 8))]
    with pytest.raises(nnc.CommandError, match="NCHW"):
        nnc.cmd_exec(pinned, nchw[:2], nchw[2:])
    assert fake.launches == []


def test_sizes_beyond_the_kernels_int_fields_are_refused(fake):
    """Parameters are C ints already (Cmd refuses larger ones), but a 3-tap kernel dilated by
    2^30 reaches 2^31 rows, which padding crops back to a small output: the shapes exist, the
    kernel's int arithmetic could not hold the tap offsets."""
    x = gpu(np.ones((1, 2, 2, 1), np.float32))
    w = gpu(np.ones((1, 3, 1, 1), np.float32))
    for d, refused in ((2 ** 30, True), (2 ** 30 - 1, False)):
        params = dict(dilation=(d, 1), padding=(d, 0, d, 0))
        shape = conv_transpose_shape(nnc.Cmd(NAME, **params), x.shape, w.shape)
        assert shape == (1, 2, 2, 1)
        out = nnc.Tensor.zeros(shape, device="gpu")
        cmd = nnc.Cmd(NAME, backend="GPU_REF", **params)
        if refused:
            with pytest.raises(nnc.CommandError, match=r"below 2\^31"):
                nnc.cmd_exec(cmd, [x, w], [out])
        else:
            # Output row i takes tap 1 from input row i (the middle tap, d rows in).
            nnc.cmd_exec(cmd, [x, w], [out])
            np.testing.assert_array_equal(out.numpy(), np.ones(shape))
    assert fake.launches == ["nnc_conv_transpose_f32"]


def test_empty_output_launches_nothing(fake):
    x = gpu(np.ones((0, 2, 2, 3), np.float32))
    w = gpu(np.ones((3, 2, 2, 4), np.float32))
    out = nnc.Tensor.empty((0, 3, 3, 4), device="gpu")
    nnc.cmd_exec(nnc.Cmd(NAME), [x, w], [out])
    assert fake.launches == []


def test_struct_layout_matches_c():
    class Convt(ctypes.Structure):
        _fields_ = [("n", ctypes.c_longlong)] + [(k, ctypes.c_int) for k in (
            "h", "w", "c", "ho", "wo", "o", "kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl",
            "groups")] + [("x_ps", ctypes.c_longlong), ("o_ps", ctypes.c_longlong)]

    assert runner.CONVT_T.itemsize == ctypes.sizeof(Convt) == 88
    for name, _ in Convt._fields_:
        assert runner.CONVT_T.fields[name][1] == getattr(Convt, name).offset, name
