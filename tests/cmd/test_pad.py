"""PAD (nnc/cmd/pad/): every backend against np.pad at every kernel ISA level, and calls it
refuses."""

import numpy as np
import pytest

import nnc


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("shape, begin, end", [
    ((2, 5, 6, 3), (0, 1, 2, 0), (0, 2, 1, 0)),
    ((4, 7), (3, 0), (1, 6)),
    ((5,), (2,), (4,)),
    ((2, 3, 4), (1, 2, 3), (1, 2, 3)),
    ((3, 1, 4, 2, 2), (0, 0, 1, 1, 0), (2, 0, 0, 1, 1)),
])
def test_pad_every_backend_matches_numpy(kernel_isa, dtype, mode, shape, begin, end):
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(dtype)
    if mode == "reflect" and any(max(b, e) >= n for n, b, e in zip(shape, begin, end)):
        pytest.skip("reflect needs pads < the axis' size")
    kwargs = {"constant_values": 2.5} if mode == "constant" else {}
    want = np.pad(x, list(zip(begin, end)), mode=mode, **kwargs)
    params = {"value": 2.5} if mode == "constant" else {}
    for b in nnc.backends("PAD", device="cpu"):
        out = np.full(want.shape, np.nan, dtype)
        nnc.cmd_exec(nnc.Cmd("PAD", begin=begin, end=end, mode=mode, backend=b, **params), [x],
                     [out])
        np.testing.assert_array_equal(out, want, err_msg=b)


def test_pad_cpu_opt_runs_in_parts_and_constant_fills_empty_axes():
    x = np.random.default_rng(2).standard_normal((2, 64, 64, 32)).astype(np.float32)
    for mode in ("constant", "reflect", "edge"):
        outs = []
        for b in ("CPU_REF", "CPU_OPT"):
            out = np.zeros((2, 67, 70, 32), np.float32)
            nnc.cmd_exec(nnc.Cmd("PAD", begin=(0, 1, 3, 0), end=(0, 2, 3, 0), mode=mode,
                                 backend=b), [x], [out])
            outs.append(out)
        np.testing.assert_array_equal(outs[1], outs[0])
    out = np.zeros((3, 4), np.float32)
    nnc.cmd_exec(nnc.Cmd("PAD", begin=(1, 2), end=(2, 2), value=-1.0, backend="CPU_OPT"),
                 [np.zeros((0, 0), np.float32)], [out])
    np.testing.assert_array_equal(out, np.full((3, 4), -1.0))
    ints = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = np.zeros((2, 5), np.int32)
    nnc.cmd_exec(nnc.Cmd("PAD", begin=(0, 1), end=(0, 1), mode="edge"), [ints], [out])
    np.testing.assert_array_equal(out, np.pad(ints, [(0, 0), (1, 1)], mode="edge"))


@pytest.mark.parametrize("params, shapes, fragment", [
    ({}, None, "PAD needs begin="),
    ({"begin": (1,), "end": (1, 1)}, None, "one value per axis"),
    ({"begin": (-1,), "end": (1,)}, None, "ints >= 0"),
    ({"begin": (1,), "end": (1,), "mode": "wrap"}, None, "mode must be one of"),
    ({"begin": (1,), "end": (1,), "mode": "edge", "value": 1.0}, None, "needs mode='constant'"),
    ({"begin": (1,), "end": (1,)}, [(2, 2), (4, 4)], "give 1 axes, the input (2, 2) has 2"),
    ({"begin": (1, 1), "end": (1, 1)}, [(2, 2), (4, 5)], "should have shape (4, 4)"),
    ({"begin": (2,), "end": (0,), "mode": "reflect"}, [(2,), (4,)], "can reflect at most 1"),
    ({"begin": (1,), "end": (0,), "mode": "edge"}, [(0,), (1,)], "no edge to repeat"),
])
def test_pad_bad_calls(params, shapes, fragment):
    with pytest.raises(nnc.CommandError) as info:
        cmd = nnc.Cmd("PAD", **params)
        arrays = [np.zeros(s, np.float32) for s in shapes]
        nnc.cmd_exec(cmd, arrays[:1], arrays[1:])
    assert fragment in str(info.value)
