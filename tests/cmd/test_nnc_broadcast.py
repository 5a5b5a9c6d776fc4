"""NNC's test/unit/nnc/broadcast.tests.c and compare.tests.c forward cases, ported as upstream
builds them (ADD(1, 1) and MUL(1) broadcasting, MIN and MAX of tensors and of tensor views),
compared as ``REQUIRE_TENSOR_EQ`` does (``nnc.tensor_eq``), on each CPU backend at every kernel
ISA level."""

import numpy as np
import pytest

import nnc


def _cpu_backends(name):
    return [b for b in nnc.backends(name) if b.startswith("CPU")]


_BROADCAST = [
    # (upstream name, command, a, b, expected c; inputs in upstream's order)
    ("broadcasting semantics for add [[1, 2, 3]] + [7]", nnc.Cmd("ADD", p=1, q=1),
     [1, 2, 3], [7], [8, 9, 10]),
    ("broadcasting semantics for add [[1, 2, 3], [4, 5, 6]] + [7, 8, 9]",
     nnc.Cmd("ADD", p=1, q=1), [[1, 2, 3], [4, 5, 6]], [7, 8, 9], [[8, 10, 12], [11, 13, 15]]),
    ("broadcasting semantics for add [[1], [2], [3], [4]] + [5, 6]", nnc.Cmd("ADD", p=1, q=1),
     [[1], [2], [3], [4]], [5, 6], [[6, 7], [7, 8], [8, 9], [9, 10]]),
    ("broadcasting semantics for mul [7] * [[1, 2, 3]]", nnc.Cmd("MUL", p=1),
     [7], [1, 2, 3], [7, 14, 21]),
    ("broadcasting semantics for mul [[1, 2, 3], [4, 5, 6]] * [7, 8, 9]", nnc.Cmd("MUL", p=1),
     [[1, 2, 3], [4, 5, 6]], [7, 8, 9], [[7, 16, 27], [28, 40, 54]]),
    ("broadcasting semantics for mul [[1], [2], [3], [4]] * [5, 6]", nnc.Cmd("MUL", p=1),
     [[1], [2], [3], [4]], [5, 6], [[5, 6], [10, 12], [15, 18], [20, 24]]),
]


@pytest.mark.parametrize("case", _BROADCAST, ids=[c[0] for c in _BROADCAST])
def test_broadcasting_semantics(kernel_isa, case):
    _, cmd, a, b, expected = case
    want = np.float32(expected)
    # CPU_OPT's C loop takes an operand of the whole shape and one broadcast (docs/commands.md,
    # ADD): [4, 1] with [2] is refused when pinned there, and the default picks CPU_REF.
    both_broadcast = np.ndim(a) == 2 and np.shape(a)[1] == 1
    backends = [None] + [b for b in _cpu_backends(cmd.name)
                         if not (both_broadcast and b == "CPU_OPT")]
    for backend in backends:
        c = np.full(want.shape, np.nan, np.float32)
        nnc.cmd_exec(nnc.Cmd(cmd.name, backend=backend, **cmd.params), [np.float32(a),
                                                                          np.float32(b)], [c])
        assert nnc.tensor_eq(c, want), backend


@pytest.mark.parametrize("name, delta", [("MIN", -1), ("MAX", 1)],
                         ids=["min of two tensors", "max of two tensors"])
def test_min_max_of_two_tensors(kernel_isa, name, delta):
    """a = i, b = i - 1 (MIN) or i + 1 (MAX): c is b."""
    a = np.arange(2 * 2 * 3, dtype=np.float32).reshape(2, 2, 3)
    b = a + np.float32(delta)
    for backend in _cpu_backends(name):
        c = np.full((2, 2, 3), np.nan, np.float32)
        nnc.cmd_exec(nnc.Cmd(name, backend=backend), [a, b], [c])
        assert nnc.tensor_eq(b, c), backend


@pytest.mark.parametrize("name, delta", [("MIN", -1), ("MAX", 1)],
                         ids=["min of two tensor views", "max of two tensor views"])
def test_min_max_of_two_tensor_views(kernel_isa, name, delta):
    """[2, 2, 3] views (strides 12, 3, 1) of [4, 4, 3] tensors; the expected is b's view made
    contiguous by DATATYPE_CONVERSION, as upstream does."""
    a = nnc.Tensor(np.arange(4 * 4 * 3, dtype=np.float32).reshape(4, 4, 3))
    b = nnc.Tensor(a.numpy() + np.float32(delta))
    av = a.view((2, 2, 3), 0, (4 * 3, 3, 1))
    bv = b.view((2, 2, 3), 0, (4 * 3, 3, 1))
    bvt = np.full((2, 2, 3), np.nan, np.float32)
    nnc.cmd_exec(nnc.Cmd("DATATYPE_CONVERSION"), [bv], [bvt])
    # CPU_OPT's C loop takes contiguous tensors only; the default selection picks CPU_REF.
    for backend in (None, "CPU_REF"):
        c = np.full((2, 2, 3), np.nan, np.float32)
        nnc.cmd_exec(nnc.Cmd(name, backend=backend), [av, bv], [c])
        assert nnc.tensor_eq(bvt, c), backend
