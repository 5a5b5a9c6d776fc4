"""Layer 2 command, the reduce family: this module (the definitions and CPU_REF), cpu_opt.pyx
(CPU_OPT). No GPU backend.

REDUCE_SUM, REDUCE_MEAN, REDUCE_MAX, REDUCE_MIN, REDUCE_NORM2 and REDUCE_LOGSUMEXP over some axes
(NNC: cmd/reduce, CMD_REDUCE_SUM_FORWARD and friends, whose ``reduce.axis``/``count`` is ``axes``
here), and REDUCE_PROD (NNC has none; named in its style).

One input, one output of the same dtype: each axis in ``axes`` has size 1 in the output and every
other axis the input's size (NNC keeps the reduced dimensions). As in NNC, the output's shape
lines up with the input's from the right, so leading axes of size 1 may be left out (or added):
a [2, 3] input reduced over axis 0 writes a [1, 3] or a [3] output. ``axes`` may be
negative (counted from the end, as NumPy does) and is normalised against the input's ndim when
the command is checked. SUM, MEAN, PROD and NORM2 (the square root of the sum of squares) are
computed in float64 and rounded once, as is LOGSUMEXP, log(sum(exp(x))) as max + log(sum(exp(x -
max))) so no exp overflows (an infinite max is not subtracted: all -inf gives -inf, any +inf
+inf); MAX and MIN are exact and a NaN anywhere in a reduction makes their result NaN (np.max,
np.min; NNC's kernels skip NaN). Over no elements SUM and NORM2 give 0, PROD 1, MEAN NaN,
LOGSUMEXP -inf (log 0); MAX and MIN refuse. The C loops for contiguous float32/float64 tensors
are in cpu_opt.pyx (SUM, MEAN, MAX, MIN, PROD, NORM2; MAX's and MIN's float32 loops vectorised per
ISA level in reduce_kernel.h, with the same NaN rule).
"""

from numbers import Integral

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command

NAMES = ("REDUCE_SUM", "REDUCE_MEAN", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD",
         "REDUCE_NORM2", "REDUCE_LOGSUMEXP")


def _normalize(name):
    def normalize(params):
        _check.only(name, params, ("axes",))
        if "axes" not in params:
            raise CommandError(f"{name} needs axes=(axis, ...), the axes to reduce")
        axes = params["axes"]
        if isinstance(axes, Integral) and not isinstance(axes, bool):
            axes = (axes,)
        try:
            axes = tuple(axes)
        except TypeError:
            raise CommandError(f"{name}: axes must be an int or ints, not {axes!r}") from None
        if not axes or not all(isinstance(a, Integral) and not isinstance(a, bool)
                               for a in axes):
            raise CommandError(f"{name}: axes must be one or more ints, not {params['axes']!r}")
        return {"axes": tuple(int(a) for a in axes)}

    return normalize


def axes_of(cmd, ndim):
    """``cmd``'s axes as sorted non-negative ints for an input of ``ndim`` dimensions."""
    out = set()
    for a in cmd.params["axes"]:
        if not -ndim <= a < ndim:
            raise CommandError(
                f"{cmd.name}: axis {a} is out of range for an input of {ndim} dimensions"
            )
        a %= ndim
        if a in out:
            raise CommandError(f"{cmd.name}: axis {a} is given twice in {cmd.params['axes']}")
        out.add(a)
    return tuple(sorted(out))


def _strip(shape):
    """shape without its leading axes of size 1 (NNC's alignment from the right)."""
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def _check_reduce(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, 1, 1)
    _check.present(cmd, inputs, "input", 0)
    _check.present(cmd, outputs, "output", 0)
    _check.same_dtype(cmd, inputs + outputs)
    _check.floating(cmd, inputs + outputs)
    x = inputs[0]
    axes = axes_of(cmd, x.ndim)
    want = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
    if _strip(outputs[0].shape) != _strip(want):
        raise CommandError(
            f"{cmd.name}: output 0 (the input's shape, reduced axes 1) should have shape {want}, "
            f"got {tuple(outputs[0].shape)} (leading axes of size 1 may be left out or added)"
        )
    if cmd.name in ("REDUCE_MAX", "REDUCE_MIN") and any(x.shape[i] == 0 for i in axes):
        extreme = "maximum" if cmd.name == "REDUCE_MAX" else "minimum"
        raise CommandError(f"{cmd.name} of input shape {x.shape} over axes {axes}: the {extreme} "
                           "of no elements is undefined")


def _sum_ref(cmd, inputs, outputs):
    x = inputs[0]
    out = outputs[0]
    out[...] = np.sum(x, axis=axes_of(cmd, x.ndim), dtype=np.float64,
                      keepdims=True).reshape(out.shape)


def _mean_ref(cmd, inputs, outputs):
    x = inputs[0]
    axes = axes_of(cmd, x.ndim)
    total = np.sum(x, axis=axes, dtype=np.float64, keepdims=True)
    count = float(np.prod([x.shape[i] for i in axes]))
    with np.errstate(invalid="ignore"):  # 0 / 0 = NaN: the mean of nothing
        outputs[0][...] = (total / count).reshape(outputs[0].shape)


def _max_ref(cmd, inputs, outputs):
    x = inputs[0]
    out = outputs[0]
    out[...] = np.max(x, axis=axes_of(cmd, x.ndim), keepdims=True).reshape(out.shape)


def _min_ref(cmd, inputs, outputs):
    x = inputs[0]
    outputs[0][...] = np.min(x, axis=axes_of(cmd, x.ndim), keepdims=True)


def _prod_ref(cmd, inputs, outputs):
    x = inputs[0]
    outputs[0][...] = np.prod(x, axis=axes_of(cmd, x.ndim), dtype=np.float64, keepdims=True)


def _norm2_ref(cmd, inputs, outputs):
    x = inputs[0].astype(np.float64)
    outputs[0][...] = np.sqrt(np.sum(x * x, axis=axes_of(cmd, x.ndim), keepdims=True))


def _logsumexp_ref(cmd, inputs, outputs):
    x = inputs[0].astype(np.float64)
    axes = axes_of(cmd, x.ndim)
    if x.size == 0:
        outputs[0][...] = -np.inf   # the log of an empty sum
        return
    m = np.max(x, axis=axes, keepdims=True)
    shift = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        outputs[0][...] = shift + np.log(np.sum(np.exp(x - shift), axis=axes, keepdims=True))


def register():
    refs = (_sum_ref, _mean_ref, _max_ref, _min_ref, _prod_ref, _norm2_ref, _logsumexp_ref)
    for name, fn in zip(NAMES, refs):
        register_command(name, inplace="none", check=_check_reduce, normalize=_normalize(name))
        register_backend(name, "CPU_REF", fn)
