"""LAYER_NORM, GROUP_NORM and RMSNORM (nnc/cmd/norm/): every backend against a NumPy definition
written from NNC's forward references (lib/nnc/cmd/norm/*_cpu_ref.c) and at every kernel ISA
level, the saved_mean / saved_inv_std outputs, numerically hard rows, the layouts CPU_OPT leaves
to CPU_REF, and the calls they refuse."""

import numpy as np
import pytest

import nnc


def layer_norm_numpy(x, axes, eps, scale=None, bias=None, rms=False):
    """NNC's LAYER_NORM (RMSNORM with rms): population variance, epsilon inside the sqrt."""
    x = x.astype(np.float64)
    mean = 0.0 if rms else x.mean(axis=axes, keepdims=True)
    inv_std = 1 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    y = (x - mean) * inv_std
    if scale is not None:
        y = y * scale.astype(np.float64)
    if bias is not None:
        y = y + bias.astype(np.float64)
    return y, mean, inv_std


def group_norm_numpy(x, groups, reduce_axes, eps, scale, bias):
    """GROUP_NORM of channels-last x: each (index of the unreduced axes, group) normalised,
    written as loops over the groups."""
    x = x.astype(np.float64)
    y = np.empty_like(x)
    cg = x.shape[-1] // groups
    means, stds = [], []
    for g in range(groups):
        part = x[..., g * cg:(g + 1) * cg]
        axes = tuple(reduce_axes) + (x.ndim - 1,)
        mean = part.mean(axis=axes, keepdims=True)
        inv_std = 1 / np.sqrt(((part - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
        y[..., g * cg:(g + 1) * cg] = (part - mean) * inv_std
        means.append(mean)
        stds.append(inv_std)
    return (y * scale + bias, np.concatenate(means, axis=-1),
            np.concatenate(stds, axis=-1))


def run(name, params, inputs, shape, saved=None, backend=None):
    dtype = inputs[0].dtype
    outs = [np.full(shape, np.nan, dtype)] + [np.full(s, np.nan, dtype) for s in saved or ()]
    nnc.cmd_exec(nnc.Cmd(name, backend=backend, **params), inputs, outs)
    return outs


TOL = {"float32": 2e-6, "float64": 1e-12}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, axis", [((2, 3, 8), (-1,)), ((4, 5, 6), (1, 2)), ((7,), (0,)),
                                         ((3, 1000), (-1,)), ((2, 3, 4, 5), (-3, -2, -1))])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_every_backend_matches_the_definition(kernel_isa, dtype, shape, axis, affine):
    rng = np.random.default_rng(len(shape) + abs(sum(axis)))
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    inner = tuple(shape[a % len(shape)] for a in sorted(a % len(shape) for a in axis))
    scale = rng.standard_normal(inner).astype(dtype)
    bias = rng.standard_normal(inner).astype(dtype)
    ins = [x, scale, bias] if affine else [x]
    want, mean, inv_std = layer_norm_numpy(x, tuple(a % len(shape) for a in axis), 1e-5,
                                           *(ins[1:] if affine else ()))
    assert nnc.backends("LAYER_NORM", device="cpu") == ["CPU_OPT", "CPU_REF"]
    for b in ("CPU_OPT", "CPU_REF"):
        y, m, s = run("LAYER_NORM", {"axis": axis, "elementwise_affine": affine}, ins, shape,
                      [mean.shape, mean.shape], b)
        tol = TOL[dtype]
        np.testing.assert_allclose(y, want, rtol=tol, atol=tol, err_msg=b)
        np.testing.assert_allclose(m, mean, rtol=tol, atol=tol, err_msg=b)
        np.testing.assert_allclose(s, inv_std, rtol=tol, atol=tol, err_msg=b)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, groups", [((2, 3, 4, 8), 4), ((1, 5, 5, 64), 32),
                                           ((2, 3, 4, 6), 6), ((2, 2, 3, 130), 130),
                                           ((3, 7, 4), 2), ((2, 9), 3)])
def test_group_norm_every_backend_matches_the_definition(kernel_isa, dtype, shape, groups):
    rng = np.random.default_rng(groups)
    x = (rng.standard_normal(shape) * 2 - 1).astype(dtype)
    scale = rng.standard_normal(shape[-1]).astype(dtype)
    bias = rng.standard_normal(shape[-1]).astype(dtype)
    red = tuple(range(1, len(shape) - 1))
    want, mean, inv_std = group_norm_numpy(x, groups, red, 1e-3, scale, bias)
    for b in ("CPU_OPT", "CPU_REF"):
        y, m, s = run("GROUP_NORM", {"groups": groups, "reduce_axis": red, "epsilon": 1e-3},
                      [x, scale, bias], shape, [mean.shape, mean.shape], b)
        tol = TOL[dtype]
        np.testing.assert_allclose(y, want, rtol=tol, atol=tol, err_msg=b)
        np.testing.assert_allclose(m, mean, rtol=tol, atol=tol, err_msg=b)
        np.testing.assert_allclose(s, inv_std, rtol=tol, atol=tol, err_msg=b)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("affine", [True, False])
def test_rmsnorm_every_backend_matches_the_definition(kernel_isa, dtype, affine):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4, 33)).astype(dtype)
    scale = rng.standard_normal(33).astype(dtype)
    ins = [x, scale] if affine else [x]
    want, _, inv_std = layer_norm_numpy(x, (2,), 1e-6, *ins[1:], rms=True)
    for b in ("CPU_OPT", "CPU_REF"):
        y, s = run("RMSNORM", {"axis": (-1,), "epsilon": 1e-6, "elementwise_affine": affine},
                   ins, x.shape, [(3, 4, 1)], b)
        np.testing.assert_allclose(y, want, rtol=TOL[dtype], atol=TOL[dtype], err_msg=b)
        np.testing.assert_allclose(s, inv_std, rtol=TOL[dtype], err_msg=b)


def test_constant_rows_large_offsets_and_epsilon():
    """A constant row has variance exactly 0 (y = bias, inv_std = 1 / sqrt(eps)); an offset of
    1e4 over unit noise keeps float32's answer (two passes in double, no E[x^2] - E[x]^2)."""
    rng = np.random.default_rng(1)
    x = np.full((3, 16), 7.25, np.float32)
    x[1] = 1e4 + rng.standard_normal(16).astype(np.float32)
    x[2] = rng.standard_normal(16).astype(np.float32) * 1e-3
    scale, bias = np.ones(16, np.float32), np.full(16, 0.5, np.float32)
    want, _, inv_std = layer_norm_numpy(x, (1,), 1e-2, scale, bias)
    for b in ("CPU_OPT", "CPU_REF"):
        y, m, s = run("LAYER_NORM", {"axis": (1,), "epsilon": 1e-2}, [x, scale, bias], x.shape,
                      [(3, 1), (3, 1)], b)
        assert np.all(y[0] == 0.5) and s[0, 0] == np.float32(10.0), b
        np.testing.assert_allclose(y, want, rtol=2e-6, atol=2e-6, err_msg=b)
        np.testing.assert_allclose(s, inv_std, rtol=2e-6, err_msg=b)
    # Image groups: the same rows as channels of one pixel each.
    img = np.ascontiguousarray(np.broadcast_to(x.T[None, :, None, :], (1, 16, 1, 3)))
    for b in ("CPU_OPT", "CPU_REF"):
        y, = run("GROUP_NORM", {"groups": 3, "reduce_axis": (1, 2), "epsilon": 1e-2},
                 [img, np.ones(3, np.float32), np.full(3, 0.5, np.float32)], img.shape, (), b)
        np.testing.assert_allclose(y[0, :, 0, :], want.T, rtol=2e-6, atol=2e-6, err_msg=b)


@pytest.mark.parametrize("m", [96, 37])
def test_one_pass_statistics_keep_offsets_outliers_and_constant_rows(kernel_isa, m):
    """float32 rows take their statistics in one pass over x - x[0]: an offset of 1e6 over unit
    noise, a first element far from the rest (the shift itself an outlier), a row of tiny noise
    and a constant row (variance exactly 0, y = bias), with widths that leave a tail past the
    vector lanes, at every ISA level, against the float64 definition."""
    rng = np.random.default_rng(m)
    x = rng.standard_normal((5, m)).astype(np.float32)
    x[0] += np.float32(1e6)
    x[1, 0] = 3e3
    x[2] *= np.float32(1e-3)
    x[3] = -2.5
    x[4] = x[4] * np.float32(1e-2) - np.float32(123.0)
    scale = rng.standard_normal(m).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    want, mean, inv_std = layer_norm_numpy(x, (1,), 1e-9, scale, bias)
    y, got_mean, got_inv_std = run("LAYER_NORM", {"axis": (1,), "epsilon": 1e-9},
                                   [x, scale, bias], x.shape, [(5, 1), (5, 1)], "CPU_OPT")
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=2e-6, err_msg=kernel_isa)
    np.testing.assert_allclose(got_mean, mean, rtol=2e-7, err_msg=kernel_isa)
    np.testing.assert_allclose(got_inv_std, inv_std, rtol=2e-6, err_msg=kernel_isa)
    assert np.all(y[3] == bias) and got_inv_std[3, 0] == np.float32(1 / np.sqrt(1e-9))


def test_cpu_opt_takes_trailing_axes_and_leaves_the_rest_to_cpu_ref():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    s, b = np.ones((4, 1, 6), np.float32), np.zeros((4, 1, 6), np.float32)


    # Not trailing: axis 1 alone; CPU_OPT's accept says no, CPU_REF runs, the answer stands.
    want, _, _ = layer_norm_numpy(x, (1,), 1e-5, s, b)
    y = np.empty_like(x)
    nnc.cmd_exec(nnc.Cmd("LAYER_NORM", axis=(1,)), [x, s, b], [y])
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=2e-6)
    with pytest.raises(nnc.CommandError):
        nnc.cmd_exec(nnc.Cmd("LAYER_NORM", axis=(1,), backend="CPU_OPT"), [x, s, b], [y])
    # Groups on axis 1 of [N, C, L] (ONNX's order): CPU_REF only.
    x2 = rng.standard_normal((2, 6, 5)).astype(np.float32)
    sc = rng.standard_normal((6, 1)).astype(np.float32)
    bi = rng.standard_normal((6, 1)).astype(np.float32)
    ref = np.moveaxis(group_norm_numpy(np.moveaxis(x2, 1, -1), 3, (1,), 1e-5, sc[:, 0],
                                       bi[:, 0])[0], -1, 1)
    y2 = np.empty_like(x2)
    nnc.cmd_exec(nnc.Cmd("GROUP_NORM", group_axis=1, groups=3, reduce_axis=(2,)), [x2, sc, bi],
                 [y2])
    np.testing.assert_allclose(y2, ref, rtol=2e-6, atol=2e-6)


def test_cpu_opt_runs_in_parts_and_every_thread_count_gives_the_same_bits():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((512, 300)).astype(np.float32)
    s, b = rng.standard_normal(300).astype(np.float32), rng.standard_normal(300).astype(np.float32)
    img = rng.standard_normal((4, 20, 20, 256)).astype(np.float32)
    sc, bi = np.ones(256, np.float32), np.zeros(256, np.float32)
    results = []
    old = nnc.get_num_threads()
    try:
        for threads in (1, 2):
            nnc.set_num_threads(threads)
            results.append((run("LAYER_NORM", {"axis": (-1,)}, [x, s, b], x.shape)[0],
                            run("GROUP_NORM", {"groups": 128, "reduce_axis": (1, 2)},
                                [img, sc, bi], img.shape)[0]))
    finally:
        nnc.set_num_threads(old)
    for a, c in zip(*results):
        assert np.array_equal(a, c)
    want = group_norm_numpy(img, 128, (1, 2), 1e-5, sc, bi)[0]
    np.testing.assert_allclose(results[0][1], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name, params, shapes, fragment", [
    ("LAYER_NORM", {}, None, "needs axis"),
    ("LAYER_NORM", {"axis": ()}, None, "non-empty tuple"),
    ("LAYER_NORM", {"axis": (1, 1)}, None, "distinct"),
    ("LAYER_NORM", {"axis": 1, "epsilon": -1.0}, None, "epsilon"),
    ("LAYER_NORM", {"axis": 1, "elementwise_affine": 1}, None, "elementwise_affine"),
    ("LAYER_NORM", {"axis": 1, "size": 3}, None, "unknown parameters"),
    ("GROUP_NORM", {"groups": 0}, None, "groups"),
    ("GROUP_NORM", {"groups": 2, "group_axis": (1, 2)}, None, "one axis"),
    ("LAYER_NORM", {"axis": (3,), "elementwise_affine": False}, ([(2, 3)], [(2, 3)]),
     "out of range"),
    ("LAYER_NORM", {"axis": (-1,)}, ([(2, 3), (4,), (3,)], [(2, 3)]), "does not broadcast"),
    ("LAYER_NORM", {"axis": (-1,)}, ([(2, 3), (3,)], [(2, 3)]), "takes 3 inputs"),
    ("LAYER_NORM", {"axis": (-1,)}, ([(2, 3), (3,), (3,)], [(2, 4)]), "output 0"),
    ("LAYER_NORM", {"axis": (-1,)}, ([(2, 3), (3,), (3,)], [(2, 3), (2, 3)]), "output 1"),
    ("GROUP_NORM", {"groups": 4, "reduce_axis": (1,)}, ([(2, 3, 6), (6,), (6,)], [(2, 3, 6)]),
     "does not split"),
    ("GROUP_NORM", {"groups": 3, "reduce_axis": (2,)}, ([(2, 3, 6), (6,), (6,)], [(2, 3, 6)]),
     "also in reduce_axis"),
    ("RMSNORM", {"axis": -1}, ([(2, 3), (3,), (3,)], [(2, 3)]), "takes 2 inputs"),
    ("RMSNORM", {"axis": -1}, ([(2, 3), (3,)], [(2, 3), (2, 1), (2, 1)]), "takes 1..2 outputs"),
])
def test_bad_calls(name, params, shapes, fragment):
    with pytest.raises(nnc.CommandError, match=fragment):
        cmd = nnc.Cmd(name, **params)
        ins, outs = shapes
        nnc.cmd_exec(cmd, [np.zeros(s, np.float32) for s in ins],
                     [np.zeros(s, np.float32) for s in outs])


def test_integer_and_mixed_dtypes_are_refused():
    x = np.zeros((2, 3), np.int32)
    with pytest.raises(nnc.CommandError, match="floating"):
        nnc.cmd_exec(nnc.Cmd("RMSNORM", axis=-1, elementwise_affine=False), [x], [x.copy()])
    with pytest.raises(nnc.CommandError, match="mixed dtypes"):
        nnc.cmd_exec(nnc.Cmd("RMSNORM", axis=-1), [np.zeros((2, 3), np.float32),
                                                   np.ones(3, np.float64)],
                     [np.zeros((2, 3), np.float32)])
