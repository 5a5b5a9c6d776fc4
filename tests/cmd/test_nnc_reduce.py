"""NNC's test/unit/nnc/reduce.tests.c forward cases not already in test_nnc_semantics.py (which
has REDUCE_SUM, REDUCE_MEAN and REDUCE_MAX), ported as upstream builds them: REDUCE_MIN,
REDUCE_NORM2, ARGMAX and ARGMIN on [[1, 2, 3], [4, 5, 6]] or [[1, 2, 7], [5, 6, 4]], outputs
lined up with the input from the right as NNC writes them, compared as ``REQUIRE_TENSOR_EQ``
does, on each CPU backend at every kernel ISA level. "isnan" is out of scope: nnc has no
REDUCE_ISNAN (docs/porting.md, "NNC's test cases")."""

import math

import numpy as np
import pytest

import nnc

X = np.float32([[1, 2, 3], [4, 5, 6]])
Y = np.float32([[1, 2, 7], [5, 6, 4]])


def _cpu_backends(name):
    return [b for b in nnc.backends(name) if b.startswith("CPU")]


_CASES = [
    # (upstream name, command, its parameter, input, output shape and dtype, expected)
    ("reduce min for [[1, 2, 3], [4, 5, 6]] on axis 1", "REDUCE_MIN", {"axes": 1}, X,
     (2, 1), np.float32, [1, 4]),
    ("reduce min for [[1, 2, 3], [4, 5, 6]] on axis 0", "REDUCE_MIN", {"axes": 0}, X,
     (3,), np.float32, [1, 2, 3]),
    ("argmax for [[1, 2, 7], [5, 6, 4]] on axis 0", "ARGMAX", {"axis": 0}, Y,
     (3,), np.int32, [1, 1, 0]),
    ("argmin for [[1, 2, 7], [5, 6, 4]] on axis 0", "ARGMIN", {"axis": 0}, Y,
     (3,), np.int32, [0, 0, 1]),
    ("argmax for [[1, 2, 7], [5, 6, 4]] on axis 1", "ARGMAX", {"axis": 1}, Y,
     (2, 1), np.int32, [2, 1]),
    ("reduce norm2 for [[1, 2, 3], [4, 5, 6]] on axis 1", "REDUCE_NORM2", {"axes": 1}, X,
     (2, 1), np.float32, [math.sqrt(1 + 2 * 2 + 3 * 3), math.sqrt(4 * 4 + 5 * 5 + 6 * 6)]),
    ("reduce norm2 for [[1, 2, 3], [4, 5, 6]] on axis 0", "REDUCE_NORM2", {"axes": 0}, X,
     (3,), np.float32, [math.sqrt(1 + 4 * 4), math.sqrt(2 * 2 + 5 * 5), math.sqrt(3 * 3 + 6 * 6)]),
]


@pytest.mark.parametrize("case", _CASES, ids=[c[0] for c in _CASES])
def test_reduce_cases_exactly(kernel_isa, case):
    _, name, params, x, shape, dtype, expected = case
    want = np.asarray(expected, dtype).reshape(shape)
    for backend in _cpu_backends(name):
        b = np.zeros(shape, dtype)
        nnc.cmd_exec(nnc.Cmd(name, backend=backend, **params), [x], [b])
        assert nnc.tensor_eq(b, want), backend
