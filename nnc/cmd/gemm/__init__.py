"""Layer 2 command, the GEMM family: this module (the definition, CPU_REF and CPU_NUMPY),
cpu_opt.pyx (CPU_OPT: OpenBLAS GEMM); gpu/ (layer 3, never imported from here): GPU_REF and
GPU_OPT through cuBLAS, registered by nnc.cuda.builtins.

GEMM: out = op(a) @ op(w) + bias (NNC: cmd/blas/ccv_nnc_gemm_cpu_ref.c, ccv_nnc_gemm_cpu_opt.c).

``op`` swaps the last two axes of its argument when ``transpose_a`` / ``transpose_b`` is set. NNC's
fully connected layer ``a . w^T + bias`` is ``transpose_b=True``. Inputs ``(a, w)`` or
``(a, w, bias)`` (bias may be None); shapes, with B an optional batch:

- a: [K] (a vector; the output is then [N] or [B, N]), [M, K] or [B, M, K] ([K, M] / [B, K, M]
  with transpose_a),
- w: [K, N] or [B, K, N] ([N, K] / [B, N, K] with transpose_b); a 2-D w is shared by every batch,
- bias: [N], added to every row,
- out: [B?, M?, N].

Floats only, one dtype, and the output may not overlap an input.

Backends: CPU_OPT is C (cpu_opt.pyx: single-threaded BLAS GEMMs split into parts on the
pool, no GIL) for float32/64 operands whose matrices have a unit stride along one axis (any
batch stride; transposed views are free) and an output with a unit stride along N; CPU_NUMPY
(np.matmul, priority 15) takes the views it refuses; CPU_REF defines the semantics.
"""

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command


def _flag(value, name):
    if value in (True, False, 0, 1) and not isinstance(value, float):
        return bool(value)
    raise CommandError(f"GEMM: {name} must be True or False, not {value!r}")


def _gemm_normalize(params):
    _check.only("GEMM", params, ("transpose_a", "transpose_b"))
    return {
        "transpose_a": _flag(params.get("transpose_a", False), "transpose_a"),
        "transpose_b": _flag(params.get("transpose_b", False), "transpose_b"),
    }


def gemm_shape(cmd, a_shape, w_shape):
    """The output shape of GEMM for these operand shapes, or CommandError saying why not."""
    ta, tb = cmd.params["transpose_a"], cmd.params["transpose_b"]
    if len(a_shape) not in (1, 2, 3):
        raise CommandError(f"GEMM: a must be [K], [M, K] or [B, M, K], got shape {a_shape}")
    if len(w_shape) not in (2, 3):
        raise CommandError(f"GEMM: w must be [K, N] or [B, K, N], got shape {w_shape}")
    if ta and len(a_shape) == 1:
        raise CommandError(f"GEMM: transpose_a needs a matrix a, got the vector shape {a_shape}")
    if len(a_shape) == 1:
        rows, k = (), a_shape[0]
    else:
        m, k = a_shape[-2:][::-1] if ta else a_shape[-2:]
        rows = (m,)
    wk, n = w_shape[-2:][::-1] if tb else w_shape[-2:]
    if k != wk:
        a_op = "a^T" if ta else "a"
        w_op = "w^T" if tb else "w"
        raise CommandError(
            f"GEMM: inner dimensions differ: {a_op} has K={k} (a {a_shape}) but {w_op} has "
            f"K={wk} (w {w_shape}, transpose_b={tb})"
        )
    batch_a = a_shape[:-2] if len(a_shape) == 3 else ()
    batch_w = w_shape[:-2]
    if batch_a and batch_w and batch_a != batch_w:
        raise CommandError(f"GEMM: batch sizes differ: a {a_shape} and w {w_shape}")
    return tuple(batch_a or batch_w) + rows + (n,)


def _gemm_check(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, (2, 3), 1)
    _check.present(cmd, inputs, "input", 0, 1)
    _check.present(cmd, outputs, "output", 0)
    _check.same_dtype(cmd, inputs + outputs)
    _check.floating(cmd, inputs + outputs)
    a, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    shape = gemm_shape(cmd, tuple(a.shape), tuple(w.shape))
    if bias is not None:
        _check.expect_shape(cmd, bias, shape[-1:], "bias")
    _check.expect_shape(cmd, outputs[0], shape, "output 0")


def _op(x, transpose):
    return np.swapaxes(x, -1, -2) if transpose else x


def _gemm_ref(cmd, inputs, outputs):
    """The definition: a float64 einsum, then one rounding to the output dtype."""
    a = _op(inputs[0].astype(np.float64), cmd.params["transpose_a"])
    w = _op(inputs[1].astype(np.float64), cmd.params["transpose_b"])
    bias = inputs[2] if len(inputs) > 2 else None
    spec = "...k,...kn->...n" if a.ndim == 1 else "...mk,...kn->...mn"
    acc = np.einsum(spec, a, w)
    if bias is not None:
        acc += bias.astype(np.float64)
    outputs[0][...] = acc


def _gemm_numpy(cmd, inputs, outputs):
    """BLAS through np.matmul writing straight into the output (any strides), then bias in place."""
    a = _op(inputs[0], cmd.params["transpose_a"])
    w = _op(inputs[1], cmd.params["transpose_b"])
    bias = inputs[2] if len(inputs) > 2 else None
    out = outputs[0]
    np.matmul(a, w, out=out)
    if bias is not None:
        out += bias


def register():
    register_command("GEMM", inplace="none", check=_gemm_check, normalize=_gemm_normalize)
    register_backend("GEMM", "CPU_REF", _gemm_ref)
    register_backend("GEMM", "CPU_NUMPY", _gemm_numpy, datatypes=("float32", "float64"))
