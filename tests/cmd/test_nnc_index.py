"""NNC's test/unit/nnc/index.tests.c and pad.tests.c forward cases, ported as upstream builds
them (INDEX_SELECT of rows, with float indices, of a 1-d tensor and between tensor views; PAD
zero and replicate), compared as ``REQUIRE_TENSOR_EQ`` does, on each CPU backend at every kernel
ISA level."""

import numpy as np
import pytest

import nnc


def _cpu_backends(name):
    return [b for b in nnc.backends(name) if b.startswith("CPU")]


def _select(a, indices, out):
    for backend in _cpu_backends("INDEX_SELECT"):
        out_t = out if isinstance(out, nnc.Tensor) else nnc.Tensor(out)
        nnc.cmd_exec(nnc.Cmd("INDEX_SELECT", backend=backend), [a, indices], [out_t])
        yield backend


def test_index_select_a_tensor():
    a = np.float32([[1, 2], [2, 3], [3, 4]])
    b = np.zeros((2, 2), np.float32)
    for backend in _select(a, np.int32([1, 1]), b):
        assert nnc.tensor_eq(b, np.float32([[2, 3], [2, 3]])), backend


def test_index_select_a_tensor_with_float():
    """Float indices interpolate between the two rows around each (NNC's CPU_REF)."""
    a = np.float32([[1, 2], [2, 3], [3, 4]])
    b = np.zeros((2, 2), np.float32)
    for backend in _select(a, np.float32([1.5, 0.4]), b):
        np.testing.assert_allclose(b.reshape(-1), [2.5, 3.5, 1.4, 2.4], rtol=0, atol=1e-5,
                                   err_msg=backend)


def test_index_select_a_1d_tensor():
    a = np.float32([1, 2, 3, 4, 5])
    b = np.zeros(3, np.float32)
    for backend in _select(a, np.int32([3, 2, 4]), b):
        assert nnc.tensor_eq(b, np.float32([4, 3, 5])), backend


def test_index_select_a_tensor_view():
    """Columns 1..2 of a [3, 4] table into columns 1..2 of a zeroed [2, 4] output."""
    a = nnc.Tensor(np.float32([[1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6]]))
    av = a.view((3, 2), 1, (4, 1))
    for backend in _cpu_backends("INDEX_SELECT"):
        b = nnc.Tensor(np.zeros((2, 4), np.float32))
        bv = b.view((2, 2), 1, (4, 1))
        nnc.cmd_exec(nnc.Cmd("INDEX_SELECT", backend=backend), [av, np.int32([1, 1])], [bv])
        assert nnc.tensor_eq(b, np.float32([[0, 3, 4, 0], [0, 3, 4, 0]])), backend


_PAD = [
    # (upstream name, NNC's CCV_NNC_PAD_ZERO / _REPLICATE, begin, end, expected)
    ("implement pad zero", "constant", (2, 1), (1, 0),
     [[0, 0, 0, 0], [0, 0, 0, 0], [0, 1, 2, 3], [0, 4, 5, 6], [0, 0, 0, 0]]),
    ("implement pad replicate", "edge", (2, 1), (1, 1),
     [[1, 1, 2, 3, 3], [1, 1, 2, 3, 3], [1, 1, 2, 3, 3], [4, 4, 5, 6, 6], [4, 4, 5, 6, 6]]),
]


@pytest.mark.parametrize("case", _PAD, ids=[c[0] for c in _PAD])
def test_pad(kernel_isa, case):
    _, mode, begin, end, expected = case
    a = np.float32([[1, 2, 3], [4, 5, 6]])
    want = np.float32(expected)
    for backend in _cpu_backends("PAD"):
        b = np.full(want.shape, np.nan, np.float32)
        nnc.cmd_exec(nnc.Cmd("PAD", mode=mode, begin=begin, end=end, backend=backend), [a], [b])
        assert nnc.tensor_eq(b, want), backend
