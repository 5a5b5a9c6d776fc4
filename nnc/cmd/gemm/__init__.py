"""Layer 2 command, the GEMM family: this module (the definition, CPU_REF and CPU_NUMPY),
cpu_opt.pyx (CPU_OPT: OpenBLAS GEMM); gpu/ (layer 3, never imported from here): GPU_REF and
GPU_OPT through cuBLAS, registered by nnc.cuda.builtins.

GEMM: out = op(a) @ op(w) + bias (NNC: cmd/blas/ccv_nnc_gemm_cpu_ref.c, ccv_nnc_gemm_cpu_opt.c).

``op`` swaps the last two axes of its argument when ``transpose_a`` / ``transpose_b`` is set. NNC's
fully connected layer ``a . w^T + bias`` is ``transpose_b=True``. Inputs ``(a, w)`` or
``(a, w, bias)`` (bias may be None); shapes, with ``...`` batch dimensions (any number, none
included):

- a: [K] (a vector; the output then has no M axis) or [..., M, K] ([..., K, M] with transpose_a),
- w: [K, N] or [..., K, N] ([..., N, K] with transpose_b),
- out: [batch..., M?, N], where batch is a's and w's batch dimensions broadcast as NumPy's matmul
  does (NNC's GEMM, and ONNX's MatMul): aligned from the right, each pair equal or one of them 1
  (or missing), which then repeats; a 2-D w is shared by every batch entry,
- bias: [N], or any shape that broadcasts to out's with N last (NNC's per-batch bias [B, 1, N],
  a per-row [M, N]), added to every product.

Floats only, one dtype, and the output may not overlap an input.

Backends: CPU_OPT is C (cpu_opt.pyx: single-threaded BLAS GEMMs split into parts on the
pool, no GIL) for float32/64 operands whose matrices have a unit stride along one axis (any
batch strides; transposed views are free) and an output with a unit stride along N; CPU_NUMPY
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


def _broadcast_batch(a_shape, w_shape, batch_a, batch_w):
    """batch_a and batch_w broadcast from the right (NumPy's rule), or CommandError."""
    out = []
    for i in range(1, max(len(batch_a), len(batch_w)) + 1):
        da = batch_a[-i] if i <= len(batch_a) else 1
        dw = batch_w[-i] if i <= len(batch_w) else 1
        if da != dw and da != 1 and dw != 1:
            raise CommandError(
                f"GEMM: batch sizes differ: a {a_shape} and w {w_shape} (batch dimensions "
                f"{batch_a} and {batch_w} broadcast from the right: each pair equal or one 1)"
            )
        out.append(max(da, dw) if da and dw else 0)
    return tuple(reversed(out))


def gemm_shape(cmd, a_shape, w_shape):
    """The output shape of GEMM for these operand shapes, or CommandError saying why not."""
    ta, tb = cmd.params["transpose_a"], cmd.params["transpose_b"]
    if len(a_shape) < 1:
        raise CommandError(f"GEMM: a must be [K] or [..., M, K], got shape {a_shape}")
    if len(w_shape) < 2:
        raise CommandError(f"GEMM: w must be [K, N] or [..., K, N], got shape {w_shape}")
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
    batch = _broadcast_batch(a_shape, w_shape, tuple(a_shape[:-2]), tuple(w_shape[:-2]))
    return batch + rows + (n,)


def bias_fits(bias_shape, shape):
    """bias broadcasts to the output shape with N (its last axis) given in full."""
    bias_shape, shape = tuple(bias_shape), tuple(shape)
    if not bias_shape or len(bias_shape) > len(shape) or bias_shape[-1] != shape[-1]:
        return False
    return all(b in (1, o) for b, o in zip(bias_shape[::-1], shape[::-1]))


def one_batch(a_shape, w_shape, bias_shape):
    """The shapes of GEMM with at most one batch dimension, not broadcast (a and w of rank <= 3,
    equal batch sizes where both have one) and a bias of [N] or none: all that a backend which
    predates broadcast batches (the GPU ones) computes."""
    if len(a_shape) > 3 or len(w_shape) > 3 or (bias_shape is not None and len(bias_shape) != 1):
        return False
    return not (len(a_shape) == 3 and len(w_shape) == 3 and a_shape[0] != w_shape[0])


def _gemm_check(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, (2, 3), 1)
    _check.present(cmd, inputs, "input", 0, 1)
    _check.present(cmd, outputs, "output", 0)
    _check.same_dtype(cmd, inputs + outputs)
    _check.floating(cmd, inputs + outputs)
    a, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    shape = gemm_shape(cmd, tuple(a.shape), tuple(w.shape))
    if bias is not None and not bias_fits(bias.shape, shape):
        raise CommandError(
            f"GEMM: bias should have shape {shape[-1:]} or one that broadcasts to the output's "
            f"{shape} with N last, got {tuple(bias.shape)}"
        )
    _check.expect_shape(cmd, outputs[0], shape, "output 0")


def _op(x, transpose):
    return np.swapaxes(x, -1, -2) if transpose else x


def _gemm_ref(cmd, inputs, outputs):
    """The definition: a float64 einsum, then one rounding to the output dtype."""
    a = _op(inputs[0].astype(np.float64), cmd.params["transpose_a"])
    w = _op(inputs[1].astype(np.float64), cmd.params["transpose_b"])
    bias = inputs[2] if len(inputs) > 2 else None
    # matmul's broadcasting of the batch dimensions, in float64 (a vector a: no M axis).
    acc = np.matmul(a, w)
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
