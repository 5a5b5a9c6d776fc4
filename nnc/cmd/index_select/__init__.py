"""Layer 2 command, the index_select family: this module (the definition and CPU_REF). No C or GPU
backend (not on a model's hot path: a Gather of a few rows).

INDEX_SELECT gathers rows of a table (NNC: cmd/index_select, CCV_NNC_INDEX_SELECT_FORWARD, an
embedding lookup). Two inputs, the table a of shape [N, ...] (rank >= 1) and the indices, a 1-D
tensor of length k; one output of shape [k, ...] and a's dtype. With int32 or int64 indices (a
of any dtype):

    out[j, ...] = a[indices[j], ...]

and every index must be in [0, N) (NNC's rule; ONNX's negative indices are mapped by its
loader). With float32 indices (a of a float dtype) each row is interpolated between the two
rows around its index, as NNC's CPU_REF does: j0 = trunc(indices[j]), j1 = min(j0 + 1, N - 1),
w1 = indices[j] - j0 and w0 = 1 - w1 in float32, and

    out[j, ...] = a[j0, ...] * w0 + a[j1, ...] * w1

(in float32, float64 for a float64 table), so an index in [N - 1, N) reads the last row. Every
float index must be in [0, N): NNC asserts trunc(index) >= 0, which lets an index in (-1, 0)
through to extrapolate from rows 0 and 1; nnc refuses it as it refuses a negative integer, and
refuses NaN. An index outside the range is reported when the command runs (a CommandError
naming it), never read.
"""

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command

INDEX_DTYPES = ("int32", "int64")
# Indices that interpolate between rows (NNC's CCV_32F indices), and the tables they take.
FLOAT_INDEX_DTYPES = ("float32",)
FLOAT_TABLE_DTYPES = ("float16", "float32", "float64")


def _check_index_select(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, 2, 1)
    _check.present(cmd, inputs, "input", 0, 1)
    _check.present(cmd, outputs, "output", 0)
    a, idx, out = inputs[0], inputs[1], outputs[0]
    _check.same_dtype(cmd, [a, out])
    if str(idx.dtype) not in INDEX_DTYPES + FLOAT_INDEX_DTYPES or idx.ndim != 1:
        raise CommandError(f"INDEX_SELECT: the indices (input 1) must be a 1-D int32, int64 or "
                           f"float32 tensor, not {idx.dtype} of shape {tuple(idx.shape)}")
    if str(idx.dtype) in FLOAT_INDEX_DTYPES and str(a.dtype) not in FLOAT_TABLE_DTYPES:
        raise CommandError(f"INDEX_SELECT: float32 indices interpolate between rows, so the table "
                           f"(input 0) must be a float tensor, not {a.dtype}")
    if a.ndim < 1:
        raise CommandError("INDEX_SELECT needs a table of rank >= 1 (input 0), not a scalar")
    _check.expect_shape(cmd, out, (idx.shape[0],) + tuple(a.shape[1:]),
                        "output 0 ([len(indices)] + the table's row shape)")


def _index_select_ref(cmd, inputs, outputs):
    a, idx = inputs
    # ~(idx >= 0) rather than idx < 0: a NaN float index is outside too.
    bad = ~(idx >= 0) | (idx >= a.shape[0])
    if bad.any():
        j = int(np.argmax(bad))
        raise CommandError(f"INDEX_SELECT: index {idx[j].item()} (indices[{j}]) is outside the "
                           f"table's {a.shape[0]} rows")
    if idx.dtype.kind != "f":
        outputs[0][...] = a[idx]
        return
    # NNC's interpolation, in float32 (float64 for a float64 table): the index truncated, the
    # next row clamped to the last, the weights from the float32 index.
    j0 = idx.astype(np.intp)
    j1 = np.minimum(j0 + 1, a.shape[0] - 1)
    dt = np.result_type(a.dtype, np.float32)
    w1 = (idx - j0.astype(np.float32)).astype(dt)
    w0 = (np.float32(1) - w1).astype(dt)
    shape = (-1,) + (1,) * (a.ndim - 1)
    rows0 = a[j0].astype(dt, copy=False)
    rows1 = a[j1].astype(dt, copy=False)
    outputs[0][...] = rows0 * w0.reshape(shape) + rows1 * w1.reshape(shape)


def register():
    register_command("INDEX_SELECT", inplace="none", check=_check_index_select)
    register_backend("INDEX_SELECT", "CPU_REF", _index_select_ref)
