"""Layer 2 command, the transpose family: this module (the definitions, TRANSPOSE's CPU_REF and
CPU_OPT's accept), cpu_opt.pyx (TRANSPOSE's CPU_OPT: a C backend and its tile loops;
FORMAT_TRANSFORM's C backends). No GPU backend.

TRANSPOSE (NNC: cmd/util's CMD_TRANSPOSE_FORWARD(axis_a, axis_b)).

``axes=(i, j)`` swaps two axes, as NNC does. As an nnc extension, ``perm=(...)`` gives a full
permutation instead (output axis k is input axis perm[k], NumPy's ``np.transpose``), so NCHW ->
NHWC is one node: ``perm=(0, 2, 3, 1)``. Exactly one of the two is given. Negative axes count
from the end. One input, one output whose shape is the permuted input shape; any dtype; never in
place. CPU_OPT (cpu_opt.pyx) runs contiguous float32/float64 tensors whose
permutation moves one block of adjacent axes past another (NCHW <-> NHWC, a matrix transpose);
the rest run CPU_REF (one NumPy copy of the transposed view).
"""

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command


def _ints(value, what):
    try:
        out = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise CommandError(f"TRANSPOSE: {what} must be a sequence of ints, not {value!r}") from None
    if any(isinstance(v, (bool, float)) for v in value):
        raise CommandError(f"TRANSPOSE: {what} must be ints, not {value!r}")
    return out


def _transpose_normalize(params):
    _check.only("TRANSPOSE", params, ("axes", "perm"))
    axes, perm = params.get("axes"), params.get("perm")
    if (axes is None) == (perm is None):
        raise CommandError("TRANSPOSE needs exactly one of axes=(i, j) (swap two axes, NNC) "
                           "or perm=(...) (a full permutation)")
    if axes is not None:
        axes = _ints(axes, "axes")
        if len(axes) != 2:
            raise CommandError(f"TRANSPOSE: axes swaps two axes, got {axes}")
        return {"axes": axes, "perm": None}
    return {"axes": None, "perm": _ints(perm, "perm")}


def permutation(cmd, ndim):
    """The full permutation this command applies to an ``ndim``-axis tensor."""
    axes, perm = cmd.params["axes"], cmd.params["perm"]
    if axes is not None:
        i, j = axes
        if not (-ndim <= i < ndim and -ndim <= j < ndim):
            raise CommandError(f"TRANSPOSE: axes {axes} out of range for {ndim} dimensions")
        p = list(range(ndim))
        p[i], p[j] = p[j], p[i]
        return tuple(p)
    if len(perm) != ndim or any(not -ndim <= v < ndim for v in perm) \
            or sorted(v % ndim for v in perm) != list(range(ndim)):
        raise CommandError(
            f"TRANSPOSE: perm {perm} is not a permutation of the {ndim} axes of the input"
        )
    return tuple(v % ndim for v in perm)


def _transpose_check(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, 1, 1)
    _check.present(cmd, inputs, "input", 0)
    _check.present(cmd, outputs, "output", 0)
    _check.same_dtype(cmd, inputs + outputs)
    x = inputs[0]
    p = permutation(cmd, x.ndim)
    _check.expect_shape(cmd, outputs[0], tuple(x.shape[k] for k in p), "output 0")


def _transpose_ref(cmd, inputs, outputs):
    x = inputs[0]
    np.copyto(outputs[0], np.transpose(x, permutation(cmd, x.ndim)))


def batched_2d(shape, perm):
    """(batch, rows, cols) when ``perm`` on ``shape`` is y[b, c, r] = x[b, r, c] (flattened), or
    None. Axes of size 1 are dropped first, then axes that stay adjacent and in order merged."""
    keep = [k for k in range(len(shape)) if shape[k] != 1]
    order = [k for k in perm if shape[k] != 1]
    # Group the output order into runs of consecutive input axes.
    runs = []
    for k in order:
        if runs and keep.index(k) == keep.index(runs[-1][-1]) + 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    size = [int(np.prod([shape[k] for k in run])) for run in runs]
    first = [keep.index(run[0]) for run in runs]
    if len(runs) == 1:
        return 1, 1, size[0]  # a pure reshape: one row copied
    if len(runs) == 2 and first[0] > first[1]:
        return 1, size[1], size[0]
    if len(runs) == 3 and first[0] < first[2] < first[1]:
        return size[0], size[2], size[1]
    return None


def _transpose_accept(cmd, inputs, outputs):
    x, y = inputs[0], outputs[0]
    if not (x.is_contiguous and y.is_contiguous) or str(x.dtype) not in ("float32", "float64"):
        return False
    return batched_2d(tuple(x.shape), permutation(cmd, x.ndim)) is not None


def _format_transform_check(cmd, inputs, outputs):
    """FORMAT_TRANSFORM (NNC: cmd/util's CMD_FORMAT_TRANSFORM_FORWARD()): output k is input k
    in output k's format. The same format is a copy (any rank, one shape); NHWC <-> NCHW moves
    the channels of a 3-d or 4-d tensor ([N, H, W, C] <-> [N, C, H, W]); CHWN is refused (NNC's
    backends assert). One dtype per pair; never in place."""
    if not outputs or len(outputs) > len(inputs):
        raise CommandError(f"FORMAT_TRANSFORM takes as many inputs as outputs (NNC: at least as "
                           f"many), got {len(inputs)} inputs and {len(outputs)} outputs")
    for k, (x, y) in enumerate(zip(inputs, outputs)):
        _check.present(cmd, inputs, "input", k)
        _check.present(cmd, outputs, "output", k)
        _check.same_dtype(cmd, [x, y])
        if x.format == y.format:
            _check.expect_shape(cmd, y, tuple(x.shape), f"output {k}")
            continue
        for t, what in ((x, f"input {k}"), (y, f"output {k}")):
            if t.format not in ("NHWC", "NCHW"):
                raise CommandError(f"FORMAT_TRANSFORM: {what} is {t.format}; nnc converts "
                                   "between NHWC and NCHW (NNC's backends assert on CHWN)")
            if t.ndim not in (3, 4):
                raise CommandError(f"FORMAT_TRANSFORM: {what} has shape {t.shape}; NHWC <-> "
                                   "NCHW converts 3-d and 4-d tensors")
        _check.expect_image_shape(cmd, y, _check.nhwc_shape(x), f"output {k}")


def register():
    register_command("TRANSPOSE", inplace="none", check=_transpose_check,
                     normalize=_transpose_normalize)
    register_backend("TRANSPOSE", "CPU_REF", _transpose_ref)
    from nnc.cmd.transpose import cpu_opt

    cpu_opt.register(_transpose_accept)
    # Not an image command: its C backends read both tensors' formats themselves.
    register_command("FORMAT_TRANSFORM", inplace="none", check=_format_transform_check)
    cpu_opt.register_format_transform()
