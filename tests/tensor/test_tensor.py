"""Tensors: zero-copy wrapping, allocation, views, bad input (NNC: tensor.tests.c)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nnc

DTYPES = ["float32", "float64", "float16", "int32", "int64", "uint8"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_wrap_is_zero_copy_both_ways(dtype):
    a = np.arange(24).astype(dtype).reshape(2, 3, 4)
    t = nnc.Tensor(a)
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.size == 24
    assert t.dtype == np.dtype(dtype) and t.nbytes == a.nbytes and t.device == "cpu"
    assert t.numpy() is a
    assert np.asarray(t) is a
    assert t.data_ptr == a.ctypes.data
    a[1, 2, 3] = 7
    assert t.numpy()[1, 2, 3] == 7
    nnc.cmd_exec(nnc.Cmd("SET", value=5), [], [t])
    assert (a == 5).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_and_zeros_are_aligned(dtype):
    t = nnc.Tensor.zeros((3, 5), dtype=dtype)
    assert t.data_ptr % 64 == 0
    assert t.shape == (3, 5) and (t.numpy() == 0).all()
    e = nnc.Tensor.empty(7, dtype=dtype)
    assert e.shape == (7,) and e.data_ptr % 64 == 0


def test_twelve_dimensions_and_more():
    t = nnc.Tensor.zeros((1,) * 12)
    assert t.ndim == nnc.MAX_DIM == 12
    with pytest.raises(nnc.TensorError, match="13 dimensions"):
        nnc.Tensor.zeros((1,) * 13)
    with pytest.raises(nnc.TensorError, match="13 dimensions"):
        nnc.Tensor(np.zeros((1,) * 13, np.float32))


def test_bad_arrays_are_refused():
    with pytest.raises(nnc.TensorError, match="not C-contiguous"):
        nnc.Tensor(np.zeros((4, 4), np.float32)[:, ::2])
    with pytest.raises(nnc.TensorError, match="not C-contiguous"):
        nnc.Tensor(np.zeros((4, 3), np.float32).T)
    with pytest.raises(nnc.TensorError, match="unsupported dtype"):
        nnc.Tensor(np.zeros(3, np.complex64))
    with pytest.raises(nnc.TensorError, match="unsupported dtype"):
        nnc.Tensor(np.zeros(3, ">f4"))
    with pytest.raises(nnc.TensorError, match="ndarray"):
        nnc.Tensor([1.0, 2.0])
    with pytest.raises(nnc.TensorError, match="unsupported dtype"):
        nnc.Tensor.empty((2,), dtype="complex128")
    with pytest.raises(nnc.TensorError, match="negative"):
        nnc.Tensor.empty((2, -1))
    # GPU device strings: tests/cuda/test_cuda.py.
    with pytest.raises(nnc.TensorError, match="unknown device"):
        nnc.Tensor.empty((2,), device="tpu")
    with pytest.raises(nnc.TensorError, match="more than memory can hold"):
        nnc.Tensor.empty((2**40, 2**40))
    with pytest.raises(nnc.TensorError, match="64 bits"):
        nnc.Tensor.empty((0, 2**64))
    assert issubclass(nnc.TensorError, nnc.NNCError)


def test_read_only_array_is_an_input_only():
    a = np.ones(4, np.float32)
    a.flags.writeable = False
    t = nnc.Tensor(a)
    assert t.readonly
    out = nnc.Tensor.zeros(4)
    nnc.cmd_exec(nnc.Cmd("SCALAR_MUL", a=3.0), [t], [out])
    assert (out.numpy() == 3).all()
    with pytest.raises(nnc.CommandError, match="read-only"):
        nnc.cmd_exec(nnc.Cmd("SCALAR_MUL", a=3.0), [out], [t])
    # Graph nodes too, when built and when their tensors are replaced; views keep the flag.
    g = nnc.Graph()
    with pytest.raises(nnc.CommandError, match="read-only"):
        g.exec(nnc.Cmd("SCALAR_MUL", a=3.0), [out], [t])
    node = g.exec(nnc.Cmd("SCALAR_MUL", a=3.0), [t], [out])
    with pytest.raises(nnc.CommandError, match="read-only"):
        node.set_io([out.view((2,))], [t.view((2,))])
    assert t.view((2,)).readonly and not t.view((2,)).numpy().flags.writeable


def test_contiguous_view_aliases_part():
    t = nnc.Tensor(np.arange(12, dtype=np.float32))
    v = t.view((2, 3), offset=6)
    assert v.is_contiguous and v.shape == (2, 3)
    np.testing.assert_array_equal(v.numpy(), [[6, 7, 8], [9, 10, 11]])
    v.numpy()[0, 0] = -1
    assert t.numpy()[6] == -1
    assert v.data_ptr == t.data_ptr + 6 * 4


def test_strided_view_is_a_channel_slice():
    # The NNC way to concatenate along channels: each branch writes a strided view.
    buf = nnc.Tensor.zeros((2, 3, 5))
    v = buf.view((2, 3, 2), offset=3, strides=(15, 5, 1))
    assert not v.is_contiguous and v.strides == (15, 5, 1)
    v.numpy()[...] = 1
    expect = np.zeros((2, 3, 5), np.float32)
    expect[..., 3:5] = 1
    np.testing.assert_array_equal(buf.numpy(), expect)
    # A view of a view keeps aliasing the root memory.
    w = v.view((2,), offset=1, strides=(15,))
    w.numpy()[...] = 9
    assert buf.numpy()[0, 0, 4] == 9 and buf.numpy()[1, 0, 4] == 9


def test_views_cannot_escape_their_memory():
    t = nnc.Tensor.zeros(10)
    with pytest.raises(nnc.TensorError, match="outside"):
        t.view((4,), offset=7)
    with pytest.raises(nnc.TensorError, match="outside"):
        t.view((3,), offset=-1)
    with pytest.raises(nnc.TensorError, match="outside"):
        t.view((4,), offset=0, strides=(4,))
    with pytest.raises(nnc.TensorError, match="do not match"):
        t.view((2, 2), strides=(1,))
    # A view of a view is checked against the root, not the parent's extent.
    v = t.view((2,), offset=8)
    with pytest.raises(nnc.TensorError, match="outside"):
        v.view((3,), offset=0)


# Views whose extent overflows 64-bit arithmetic; each would pass a wrapping bounds check.
HUGE_VIEWS = [
    ((3,), (2**61,), 0),                # (3 - 1) * 2**61 * 4 bytes wraps to 0
    ((5,), (2**62,), 0),                # (5 - 1) * 2**62 elements wraps to 0
    ((3,), (-2**61,), 0),
    ((2, 2), (2**62, 1), 0),
    ((2,), (1,), 2**62),                # offset * itemsize wraps to 0
    ((2,), (1,), -2**62),
    ((3,), (2**62,), -2**62),           # the offset pulls a huge extent back to the start
    ((2**32, 2**32), None, 0),          # 2**64 elements: the count itself wraps to 0
    ((2**31, 2**31, 4), None, 0),
    ((3,), (2**63,), 0),                # not a 64-bit stride at all
    ((2,), None, 2**64),                # not a 64-bit offset at all
]


def test_huge_strides_and_offsets_cannot_escape_the_memory():
    """Each case must raise TensorError; a view that slipped through is written, which
    crashed the process before the bounds check used overflow-free arithmetic."""
    code = textwrap.dedent(f"""
        import nnc
        t = nnc.Tensor.zeros(4)
        for shape, strides, offset in {HUGE_VIEWS!r}:
            try:
                v = t.view(shape, offset=offset, strides=strides)
            except nnc.TensorError as e:
                assert str(shape) in str(e) and str(offset) in str(e), e
                continue
            nnc.cmd_exec(nnc.Cmd("SET", value=1.0), [], [v])
            raise SystemExit(f"view {{shape}} {{strides}} at {{offset}} was accepted")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_edge_views_stay_allowed():
    t = nnc.Tensor(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(t.view((4,), offset=3, strides=(-1,)).numpy(), [3, 2, 1, 0])
    np.testing.assert_array_equal(t.view((2, 3), strides=(0, 1)).numpy(), [[0, 1, 2]] * 2)
    assert t.view((0,), offset=4).shape == (0,)           # empty, one past the end
    assert t.view((1,), offset=3, strides=(2**62,)).numpy()[0] == 3   # size-1: stride unused
    with pytest.raises(nnc.TensorError, match="outside"):
        t.view((0,), offset=5)


def test_tensor_keeps_memory_alive():
    t = nnc.Tensor.zeros(1000)
    v = t.view((10,), offset=990)
    del t
    import gc

    gc.collect()
    v.numpy()[...] = 2
    assert v.numpy().sum() == 20


def test_array_protocol_dtype_and_copy():
    t = nnc.Tensor(np.ones(3, np.float32))
    c = np.array(t, copy=True)
    c[0] = 5
    assert t.numpy()[0] == 1
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
