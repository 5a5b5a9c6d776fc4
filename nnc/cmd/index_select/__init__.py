"""Layer 2 command, the index_select family: this module (the definition and CPU_REF). No C or GPU
backend (not on a model's hot path: a Gather of a few rows).

INDEX_SELECT gathers rows of a table (NNC: cmd/index_select, CCV_NNC_INDEX_SELECT_FORWARD, an
embedding lookup). Two inputs, the table a of shape [N, ...] (rank >= 1, any dtype) and the
indices, a 1-D int32 or int64 tensor of length k; one output of shape [k, ...] and a's dtype:

    out[j, ...] = a[indices[j], ...]

Every index must be in [0, N) (NNC's rule; ONNX's negative indices are mapped by its loader);
one that is not is reported when the command runs (a CommandError naming it), never read.
"""

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command

INDEX_DTYPES = ("int32", "int64")


def _check_index_select(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, 2, 1)
    _check.present(cmd, inputs, "input", 0, 1)
    _check.present(cmd, outputs, "output", 0)
    a, idx, out = inputs[0], inputs[1], outputs[0]
    _check.same_dtype(cmd, [a, out])
    if str(idx.dtype) not in INDEX_DTYPES or idx.ndim != 1:
        raise CommandError(f"INDEX_SELECT: the indices (input 1) must be a 1-D int32 or int64 "
                           f"tensor, not {idx.dtype} of shape {tuple(idx.shape)}")
    if a.ndim < 1:
        raise CommandError("INDEX_SELECT needs a table of rank >= 1 (input 0), not a scalar")
    _check.expect_shape(cmd, out, (idx.shape[0],) + tuple(a.shape[1:]),
                        "output 0 ([len(indices)] + the table's row shape)")


def _index_select_ref(cmd, inputs, outputs):
    a, idx = inputs
    bad = (idx < 0) | (idx >= a.shape[0])
    if bad.any():
        j = int(np.argmax(bad))
        raise CommandError(f"INDEX_SELECT: index {int(idx[j])} (indices[{j}]) is outside the "
                           f"table's {a.shape[0]} rows")
    outputs[0][...] = a[idx]


def register():
    register_command("INDEX_SELECT", inplace="none", check=_check_index_select)
    register_backend("INDEX_SELECT", "CPU_REF", _index_select_ref)
