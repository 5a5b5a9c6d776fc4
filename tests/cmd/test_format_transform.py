"""Tensor formats in commands: FORMAT_TRANSFORM (NNC's transform.tests.c format cases, ported as
upstream builds them), CONVOLUTION and the pools on NCHW tensors (CPU_REF reads them; the C
backends take NHWC only; Graph.simplify moves them to NHWC between transforms), and
hint_auto / hint_tensor_auto."""

import numpy as np
import pytest

import nnc
from nnc.cmd.command import cmd_backends_for

TRANSFORM = "FORMAT_TRANSFORM"


# -- transform.tests.c ------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["CPU_REF", "CPU_OPT"])
def test_nnc_format_transform_between_nhwc_and_nchw_tensors(backend):
    """"format transform between NHWC and NCHW tensors"."""
    a = nnc.Tensor.empty((4, 3, 2), "float32", format="NHWC")
    b = nnc.Tensor.empty((2, 4, 3), "float32", format="NCHW")
    cmd = nnc.Cmd(TRANSFORM, backend=backend)
    a.numpy().reshape(-1)[:] = np.arange(2 * 3 * 4)
    nnc.cmd_exec(cmd, [a], [b])
    c = nnc.Tensor(np.array([0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22,
                             1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23],
                            np.float32).reshape(2, 4, 3), format="NCHW")
    assert nnc.tensor_eq(b, c), "3x4x2 tensor should be exactly the same."
    d = nnc.Tensor.empty((4, 3, 2), "float32", format="NHWC")
    nnc.cmd_exec(cmd, [c], [d])
    assert nnc.tensor_eq(d, a), "2x3x4 tensor should be exactly the same."


def test_nnc_format_transform_between_nhwc_and_nchw_tensor_views():
    """"format transform between NHWC and NCHW tensor views": strided views on both sides."""
    a = nnc.Tensor.zeros((7, 6, 5), "float32", format="NHWC")
    # ccv_nnc_tensor_view(a, NHWC(4, 3, 2), ofs (3, 2, 1), stride (6 * 5, 5, 1))
    a_view = a.view((4, 3, 2), offset=3 * 6 * 5 + 2 * 5 + 1, strides=(6 * 5, 5, 1))
    b = nnc.Tensor.zeros((8, 10, 8), "float32", format="NCHW")
    b_view = b.view((2, 4, 3), offset=0, strides=(10 * 8, 8, 1))
    cmd = nnc.Cmd(TRANSFORM)
    af = a.numpy().reshape(-1)
    for i in range(4):
        for j in range(3):
            for k in range(2):
                af[(i + 3) * 5 * 6 + (j + 2) * 5 + (k + 1)] = k + j * 2 + i * 3 * 2
    nnc.cmd_exec(cmd, [a_view], [b_view])
    c = nnc.Tensor.zeros((8, 10, 8), "float32", format="NCHW")
    cf = c.numpy().reshape(-1)
    for index, value in ((0, 0), (1, 2), (2, 4), (8, 6), (9, 8), (10, 10), (16, 12), (17, 14),
                         (18, 16), (24, 18), (25, 20), (26, 22), (80, 1), (81, 3), (82, 5),
                         (88, 7), (89, 9), (90, 11), (96, 13), (97, 15), (98, 17), (104, 19),
                         (105, 21), (106, 23)):
        cf[index] = value
    assert nnc.tensor_eq(b, c), "3x4x2 tensor view should be exactly the same."
    c_view = c.view((2, 4, 3), offset=0, strides=(10 * 8, 8, 1))
    d = nnc.Tensor.zeros((7, 6, 5), "float32", format="NHWC")
    d_view = d.view((4, 3, 2), offset=3 * 6 * 5 + 2 * 5 + 1, strides=(6 * 5, 5, 1))
    nnc.cmd_exec(cmd, [c_view], [d_view])
    assert nnc.tensor_eq(d, a), "2x3x4 tensor should be exactly the same."


def test_nnc_compare_permute_with_transpose():
    """"compare permute with transpose": FORMAT_TRANSFORM between two NCHW tensors is a copy,
    which reads a permuting view as TRANSPOSE(1, 2) permutes."""
    a = nnc.Tensor.empty((6, 5, 4, 3), "float32", format="NCHW")
    a.numpy()[...] = np.random.default_rng(0).uniform(0, 1, (6, 5, 4, 3)).astype(np.float32)
    av = a.view((6, 4, 5, 3), strides=(5 * 4 * 3, 3, 4 * 3, 1))
    b = nnc.Tensor.empty((6, 4, 5, 3), "float32", format="NCHW")
    c = nnc.Tensor.empty((6, 4, 5, 3), "float32", format="NCHW")
    nnc.cmd_exec(nnc.Cmd(TRANSFORM), [av], [b])
    nnc.cmd_exec(nnc.Cmd("TRANSPOSE", axes=(1, 2)), [a], [c])
    assert nnc.tensor_eq(b, c), "transposed and permuted should be exactly the same."


def _accepting(cmd, inputs, outputs):
    """Every CPU backend of cmd that takes these tensors (CPU_REF always does)."""
    names = [b.name for b in cmd_backends_for(cmd, inputs, outputs) if b.name.startswith("CPU")]
    assert "CPU_REF" in names
    return names


def _view(t, shape, ofs, strides):
    """ccv_nnc_tensor_view(t, shape, ofs, strides): ofs counts along each axis of strides."""
    return t.view(shape, offset=sum(o * s for o, s in zip(ofs, strides)), strides=strides)


def test_nnc_data_transfer_between_different_tensor_views(kernel_isa):
    """"data transfer between different tensor views", on every CPU backend of DATA_TRANSFER
    (the C backend copies strided views too)."""
    a = nnc.Tensor.empty((56, 56, 128), "float32")
    a.numpy().reshape(-1)[:] = np.arange(128 * 56 * 56)
    a_view = _view(a, (2, 3, 4), (4, 3, 2), (56 * 128, 128, 1))
    b = nnc.Tensor.empty((24, 32, 64), "float32")
    b_view = _view(b, (2, 3, 4), (0, 0, 0), (32 * 64, 64, 1))
    c = nnc.Tensor.zeros((24, 32, 64), "float32")
    cf = c.numpy().reshape(-1)
    for y in range(2):
        for x in range(3):
            for k in range(4):
                cf[64 * 32 * y + 64 * x + k] = 128 * 56 * (4 + y) + 128 * (3 + x) + 2 + k
    for backend in _accepting(nnc.Cmd("DATA_TRANSFER"), [a_view], [b_view]):
        b.numpy()[...] = 0
        nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER", backend=backend), [a_view], [b_view])
        assert nnc.tensor_eq(b, c), f"64x32x24 tensor should be exactly the same ({backend})"


@pytest.mark.parametrize("rank", [4, 3])
def test_nnc_transpose_two_tensor_views(kernel_isa, rank):
    """"transpose two 4d tensor views" (TRANSPOSE(1, 3)) and "transpose two 3d tensor views"
    (TRANSPOSE(0, 2)): strided views there and back. CPU_OPT takes contiguous tensors only, so
    CPU_REF runs them."""
    if rank == 4:
        a_shape, a_view_shape, ofs = (7, 6, 5, 4), (4, 3, 2, 2), (3, 2, 1, 0)
        b_shape, b_view_shape, axes = (8, 7, 6, 5), (4, 2, 2, 3), (1, 3)
    else:
        a_shape, a_view_shape, ofs = (6, 5, 4), (3, 2, 2), (2, 1, 0)
        b_shape, b_view_shape, axes = (7, 6, 5), (2, 2, 3), (0, 2)
    a_strides = tuple(int(np.prod(a_shape[i + 1:])) for i in range(rank))
    b_strides = tuple(int(np.prod(b_shape[i + 1:])) for i in range(rank))
    a = nnc.Tensor.zeros(a_shape, "float32")
    a_view = _view(a, a_view_shape, ofs, a_strides)
    c = nnc.Tensor.zeros(b_shape, "float32")
    for index in np.ndindex(*a_view_shape):
        value = np.ravel_multi_index(index, a_view_shape)
        a.numpy()[tuple(i + o for i, o in zip(index, ofs))] = value
        swapped = list(index)
        swapped[axes[0]], swapped[axes[1]] = swapped[axes[1]], swapped[axes[0]]
        c.numpy()[tuple(i + o for i, o in zip(swapped, ofs))] = value
    b = nnc.Tensor.zeros(b_shape, "float32")
    b_view = _view(b, b_view_shape, ofs, b_strides)
    cmd = nnc.Cmd("TRANSPOSE", axes=axes)
    for backend in _accepting(cmd, [a_view], [b_view]):
        b.numpy()[...] = 0
        nnc.cmd_exec(nnc.Cmd("TRANSPOSE", axes=axes, backend=backend), [a_view], [b_view])
        assert nnc.tensor_eq(b, c), f"the transposed view should be exactly the same ({backend})"
    c_view = _view(c, b_view_shape, ofs, b_strides)
    for backend in _accepting(cmd, [c_view], [a_view]):
        d = nnc.Tensor.zeros(a_shape, "float32")
        d_view = _view(d, a_view_shape, ofs, a_strides)
        nnc.cmd_exec(nnc.Cmd("TRANSPOSE", axes=axes, backend=backend), [c_view], [d_view])
        assert nnc.tensor_eq(d, a), f"transposed back should be exactly the same ({backend})"


# -- FORMAT_TRANSFORM beyond NNC's cases -------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "uint8", "int64"])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (3, 4, 5), (1, 1, 7, 1), (2, 0, 3, 4)])
def test_transform_matches_numpy_both_ways(dtype, shape):
    x = (np.arange(int(np.prod(shape))) % 251).astype(dtype).reshape(shape)
    nchw = nnc.Tensor.empty(shape[:-3] + (shape[-1],) + shape[-3:-1], dtype, format="NCHW")
    back = nnc.Tensor.empty(shape, dtype)
    for backend in nnc.backends(TRANSFORM):
        cmd = nnc.Cmd(TRANSFORM, backend=backend)
        if backend == "CPU_OPT" and dtype not in ("float32", "float64"):
            with pytest.raises(nnc.CommandError, match="NCHW|does not accept"):
                nnc.cmd_exec(cmd, [x], [nchw])
            continue
        nchw.numpy()[...] = 0
        nnc.cmd_exec(cmd, [x], [nchw])
        np.testing.assert_array_equal(nchw.numpy(), np.moveaxis(x, -1, -3))
        back.numpy()[...] = 0
        nnc.cmd_exec(cmd, [nchw], [back])
        np.testing.assert_array_equal(back.numpy(), x)


def test_transform_refuses_what_it_cannot_convert():
    cmd = nnc.Cmd(TRANSFORM)
    x = nnc.Tensor.zeros((2, 3, 4, 5))
    with pytest.raises(nnc.CommandError, match=r"output 0 should have shape \(2, 5, 3, 4\)"):
        nnc.cmd_exec(cmd, [x], [nnc.Tensor.zeros((2, 3, 4, 5), format="NCHW")])
    with pytest.raises(nnc.CommandError, match="CHWN"):
        nnc.cmd_exec(cmd, [x], [nnc.Tensor.zeros((5, 3, 4, 2), format="CHWN")])
    with pytest.raises(nnc.CommandError, match="3-d and 4-d"):
        nnc.cmd_exec(cmd, [nnc.Tensor.zeros((2, 3))], [nnc.Tensor.zeros((2, 3), format="NCHW")])
    with pytest.raises(nnc.CommandError, match="mixed dtypes"):
        nnc.cmd_exec(cmd, [x], [nnc.Tensor.zeros((2, 5, 3, 4), "float64", format="NCHW")])
    with pytest.raises(nnc.CommandError, match="in place"):
        nnc.cmd_exec(cmd, [x], [x])
    # The C backends called directly (no check) refuse rather than write out of bounds.
    for b in nnc.command_info(TRANSFORM).backends:
        with pytest.raises(nnc.CommandError, match="failed"):
            b.exec(cmd, [x], [nnc.Tensor.zeros((2, 5, 3, 3), format="NCHW")])


# -- CONVOLUTION and the pools on NCHW tensors -------------------------------------------------

def _nchw(a):
    """An NHWC array as an NCHW tensor (a copy)."""
    return nnc.Tensor(np.ascontiguousarray(np.moveaxis(a, -1, -3)), format="NCHW")


_CONV_CASES = [
    # x shape (NHWC), w shape (O, kh, kw, C/g), stride, padding, groups
    ((2, 7, 6, 4), (6, 3, 3, 4), 1, 1, 1),
    ((1, 9, 8, 6), (4, 3, 2, 3), (2, 1), (1, 0, 2, 1), 2),
    ((5, 6, 3), (3, 1, 1, 3), 1, 0, 1),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", _CONV_CASES)
def test_convolution_on_nchw_equals_nhwc(kernel_isa, dtype, case):
    xs, ws, stride, padding, groups = case
    rng = np.random.default_rng(len(xs) + ws[0])
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    bias = rng.standard_normal(ws[0]).astype(dtype)
    cmd = nnc.Cmd("CONVOLUTION", stride=stride, padding=padding, groups=groups)
    (shape,) = nnc.hint_tensor_auto(cmd, [xs, ws])
    ref = nnc.Tensor.zeros(shape, dtype)
    nnc.cmd_exec(cmd, [x, w, bias], [ref])
    residual = rng.standard_normal(shape).astype(dtype)
    ref_res = nnc.Tensor.zeros(shape, dtype)
    nnc.cmd_exec(cmd, [x, w, bias, residual], [ref_res])
    (nchw_shape,) = nnc.hint_tensor_auto(cmd, [np.moveaxis(x, -1, -3).shape,
                                               np.moveaxis(w, -1, -3).shape], format="NCHW")
    out = nnc.Tensor.zeros(nchw_shape, dtype, format="NCHW")
    assert [b.name for b in cmd_backends_for(cmd, [_nchw(x), _nchw(w)], [out])] == ["CPU_REF"]
    nnc.cmd_exec(cmd, [_nchw(x), _nchw(w), bias], [out])
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(np.moveaxis(out.numpy(), -3, -1), ref.numpy(), rtol=tol, atol=tol)
    nnc.cmd_exec(cmd, [_nchw(x), _nchw(w), bias, _nchw(residual)], [out])
    np.testing.assert_allclose(np.moveaxis(out.numpy(), -3, -1), ref_res.numpy(), rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("name", ["MAX_POOL", "AVG_POOL"])
@pytest.mark.parametrize("shape", [(2, 7, 6, 5), (9, 8, 3)])
def test_pools_on_nchw_equal_nhwc(kernel_isa, name, shape):
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    cmd = nnc.Cmd(name, size=3, stride=2, padding=1)
    (nhwc_shape,) = nnc.hint_tensor_auto(cmd, [shape])
    ref = nnc.Tensor.zeros(nhwc_shape)
    nnc.cmd_exec(cmd, [x], [ref])
    out = nnc.Tensor.zeros(nnc.hint_tensor_auto(cmd, [np.moveaxis(x, -1, -3).shape],
                                                format="NCHW")[0], format="NCHW")
    nnc.cmd_exec(cmd, [_nchw(x)], [out])
    np.testing.assert_allclose(np.moveaxis(out.numpy(), -3, -1), ref.numpy(), rtol=1e-6)


def test_image_commands_refuse_what_would_be_read_wrong():
    x = _nchw(np.ones((1, 5, 5, 3), np.float32))
    w = _nchw(np.ones((2, 3, 3, 3), np.float32))
    out = nnc.Tensor.zeros((1, 2, 3, 3), format="NCHW")
    # A C backend reads memory as NHWC: pinned on NCHW it is refused, naming the format.
    with pytest.raises(nnc.CommandError, match="CPU_OPT of CONVOLUTION does not accept "
                                               "float32 NCHW"):
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="CPU_OPT"), [x, w], [out])
    with pytest.raises(nnc.CommandError, match="w .input 1. is NHWC but the input is NCHW"):
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION"), [x, nnc.Tensor.zeros((2, 3, 3, 3))], [out])
    with pytest.raises(nnc.CommandError, match="output 0 is NHWC but the input is NCHW"):
        nnc.cmd_exec(nnc.Cmd("MAX_POOL", size=3), [x], [nnc.Tensor.zeros((1, 3, 3, 3))])
    with pytest.raises(nnc.CommandError, match="CHWN"):
        nnc.cmd_exec(nnc.Cmd("MAX_POOL", size=3),
                     [nnc.Tensor.zeros((3, 5, 5, 1), format="CHWN")],
                     [nnc.Tensor.zeros((3, 3, 3, 1), format="CHWN")])
    with pytest.raises(nnc.CommandError, match=r"should have shape \(1, 2, 3, 3\) \(NCHW\)"):
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION"), [x, w],
                     [nnc.Tensor.zeros((1, 3, 3, 2), format="NCHW")])
    g = nnc.Graph()
    with pytest.raises(nnc.CommandError, match="does not accept float32 NCHW"):
        g.exec(nnc.Cmd("MAX_POOL", size=3, backend="CPU_OPT"), [x],
               [nnc.Tensor.zeros((1, 3, 1, 1), format="NCHW")])


def _nchw_graph(x, w, bias):
    """CONVOLUTION -> in-place RELU -> MAX_POOL on NCHW tensors."""
    g = nnc.Graph()
    conv_out = nnc.Tensor.zeros((x.shape[0], w.shape[0], x.shape[2] - 2, x.shape[3] - 2),
                                format="NCHW")
    pooled = nnc.Tensor.zeros(nnc.hint_tensor_auto(nnc.Cmd("MAX_POOL", size=2, stride=2),
                                                   [conv_out.shape], format="NCHW")[0],
                              format="NCHW")
    a = g.exec(nnc.Cmd("CONVOLUTION"), [x, w, bias], [conv_out])
    r = g.exec(nnc.Cmd("RELU"), [conv_out], [conv_out])
    p = g.exec(nnc.Cmd("MAX_POOL", size=2, stride=2), [conv_out], [pooled])
    g.concat(a, r)
    g.concat(r, p)
    return g, pooled


def _run_modes(g):
    """Run g sequentially, on one stream, then under a static schedule: yield after each."""
    g.run()
    yield "sequential"
    s = nnc.Stream("cpu")
    g.run(stream=s)
    s.wait()
    yield "stream"
    nnc.static_schedule(g, max_streams=2)
    g.run(stream=s)
    s.wait()
    yield "scheduled"


def test_simplify_moves_nchw_nodes_to_nhwc_between_transforms(kernel_isa):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 9, 10, 4)).astype(np.float32)
    w = rng.standard_normal((6, 3, 3, 4)).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    ref_g, ref_out = _nchw_graph(_nchw(x), _nchw(w), nnc.Tensor(bias))
    ref_g.run()
    want = ref_out.numpy().copy()
    g, out = _nchw_graph(_nchw(x), _nchw(w), nnc.Tensor(bias))
    assert [e.backend for e in g.execs][0] == "CPU_REF"
    assert g.simplify() == 3                    # RELU folded; CONVOLUTION and MAX_POOL moved
    names = [(nnc_cmd.name, nnc_cmd.backend) for nnc_cmd in (e.cmd for e in g.execs)]
    assert names[0] == ("CONVOLUTION", "CPU_OPT") and names[2] == ("MAX_POOL", "CPU_OPT")
    assert sum(n == TRANSFORM for n, _ in names) == 5   # x, w, conv out; pool in, pool out
    for mode in _run_modes(g):
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5, err_msg=mode)
        out.numpy()[...] = np.nan


def test_simplify_leaves_nchw_nodes_it_cannot_speed_up():
    x = _nchw(np.ones((1, 5, 5, 2), np.float32))
    w = _nchw(np.ones((2, 3, 3, 2), np.float32))
    out = nnc.Tensor.zeros((1, 2, 3, 3), format="NCHW")
    g = nnc.Graph()
    g.exec(nnc.Cmd("CONVOLUTION", backend="CPU_REF"), [x, w], [out])   # pinned
    assert g.simplify() == 0 and len(g) == 1
    g2 = nnc.Graph()
    e = g2.exec(nnc.Cmd("CONVOLUTION"), [x, w], [out])
    g2.destinations = [e]                     # the new nodes would be outside them
    assert g2.simplify() == 0 and len(g2) == 1


# -- hint_auto, hint_tensor_auto ---------------------------------------------------------------

def test_hint_auto_as_nnc_computes_it():
    """forward.tests.c's "convolutional network of 11x11 on 225x185 with uniform weights": NNC
    takes the hint from a [225, 185, 3] input and a [55, 45, 96] output: stride 4, border 1."""
    cmd = nnc.Cmd("CONVOLUTION")
    hint = nnc.hint_auto(cmd, [(225, 185, 3), (96, 11, 11, 3)], (55, 45, 96))
    assert hint == {"stride": (4, 4), "padding": (1, 1, 1, 1)}
    conv = nnc.Cmd("CONVOLUTION", **hint)
    assert nnc.hint_tensor_auto(conv, [(225, 185, 3), (96, 11, 11, 3)]) == ((55, 45, 96),)
    # The same in NCHW; a pool's window is its size; an odd border puts the larger half first.
    assert nnc.hint_auto(cmd, [(1, 3, 225, 185), (96, 3, 11, 11)], (1, 96, 55, 45),
                         format="NCHW") == hint
    pool = nnc.Cmd("MAX_POOL", size=3)
    assert nnc.hint_auto(pool, [(55, 55, 3)], (27, 27, 3)) == {"stride": (2, 2),
                                                                "padding": (0, 0, 0, 0)}
    assert nnc.hint_auto(pool, [(6, 6, 1)], (6, 6, 1))["padding"] == (1, 1, 1, 1)
    assert nnc.hint_auto(nnc.Cmd("MAX_POOL", size=2), [(6, 6, 1)], (6, 6, 1))["padding"] \
        == (1, 1, 0, 0)


def test_hint_auto_refuses_what_has_no_hint():
    with pytest.raises(nnc.CommandError, match="no stride and padding"):
        nnc.hint_auto(nnc.Cmd("MAX_POOL", size=1), [(4, 4, 1)], (9, 9, 1))
    with pytest.raises(nnc.CommandError, match="weights' shape"):
        nnc.hint_auto(nnc.Cmd("CONVOLUTION"), [(4, 4, 1)], (4, 4, 1))
    with pytest.raises(nnc.CommandError, match="not GEMM"):
        nnc.hint_auto(nnc.Cmd("GEMM"), [(4, 4, 1)], (4, 4, 1))
    with pytest.raises(nnc.CommandError, match="3-d or 4-d"):
        nnc.hint_auto(nnc.Cmd("MAX_POOL", size=2), [(4, 4)], (2, 2))
    with pytest.raises(nnc.CommandError, match="ints >= 0"):
        nnc.hint_auto(nnc.Cmd("MAX_POOL", size=2), [(4, -4, 1)], (2, 2, 1))


def test_hint_tensor_auto_gives_each_commands_output_shapes():
    conv = nnc.Cmd("CONVOLUTION", stride=2, padding=1, groups=2)
    assert nnc.hint_tensor_auto(conv, [(2, 9, 8, 4), (6, 3, 3, 2), (6,)]) == ((2, 5, 4, 6),)
    assert nnc.hint_tensor_auto(conv, [(2, 4, 9, 8), (6, 2, 3, 3)], format="NCHW") \
        == ((2, 6, 5, 4),)
    convt = nnc.Cmd("CONVOLUTION_TRANSPOSE", stride=2)
    assert nnc.hint_tensor_auto(convt, [(2, 2, 2), (2, 3, 3, 1)]) == ((5, 5, 1),)
    assert nnc.hint_tensor_auto(nnc.Cmd("AVG_POOL", size=2, stride=2), [(1, 3, 7, 7)],
                                format="NCHW") == ((1, 3, 3, 3),)
    assert nnc.hint_tensor_auto(nnc.Cmd("GEMM", transpose_b=True), [(3, 4), (5, 4)]) \
        == ((3, 5),)
    assert nnc.hint_tensor_auto(nnc.Cmd("TRANSPOSE", perm=(0, 2, 3, 1)), [(1, 2, 3, 4)]) \
        == ((1, 3, 4, 2),)
    assert nnc.hint_tensor_auto(nnc.Cmd(TRANSFORM), [(4, 3, 2), (1, 4, 3, 2)],
                                output_format="NCHW") == ((2, 4, 3), (1, 2, 4, 3))


def test_hint_tensor_auto_refuses_parameters_without_an_output():
    with pytest.raises(nnc.CommandError, match="larger than the padded height"):
        nnc.hint_tensor_auto(nnc.Cmd("MAX_POOL", size=5), [(3, 8, 1)])
    with pytest.raises(nnc.CommandError, match="groups=3 must divide"):
        nnc.hint_tensor_auto(nnc.Cmd("CONVOLUTION", groups=3), [(5, 5, 4), (6, 3, 3, 1)])
    with pytest.raises(nnc.CommandError, match="not EWSUM"):
        nnc.hint_tensor_auto(nnc.Cmd("EWSUM"), [(3,), (3,)])
    with pytest.raises(nnc.CommandError, match="takes 1 input shapes"):
        nnc.hint_tensor_auto(nnc.Cmd("MAX_POOL", size=1), [(3, 3, 1), (3, 3, 1)])
    with pytest.raises(nnc.CommandError, match="needs an nnc.Cmd"):
        nnc.hint_tensor_auto("CONVOLUTION", [(3, 3, 1)])
