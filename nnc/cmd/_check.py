"""Shared shape, arity and dtype checks for built-in commands. Each raises CommandError naming
the command and the offending tensor, so a malformed node fails when it is built, not when run."""

import math
from numbers import Integral

from nnc.base.core import CommandError

FLOATS = ("float16", "float32", "float64")


def arity(cmd, inputs, outputs, n_in, n_out):
    """Check the number of inputs and outputs. ``n_in``/``n_out``: an int or (lo, hi), hi may be
    None for "no upper bound"."""
    for what, items, n in (("inputs", inputs, n_in), ("outputs", outputs, n_out)):
        lo, hi = (n, n) if isinstance(n, int) else n
        if len(items) < lo or (hi is not None and len(items) > hi):
            want = str(lo) if lo == hi else f"{lo}..{'' if hi is None else hi}"
            raise CommandError(f"{cmd.name} takes {want} {what}, got {len(items)}")


def present(cmd, items, what, *idx):
    """Require the tensors at ``idx`` to be given (not None)."""
    for i in idx:
        if items[i] is None:
            raise CommandError(f"{cmd.name}: {what} {i} is required, got None")


def same_shape(cmd, tensors, names=None):
    """All non-None tensors have one shape."""
    ref = None
    for k, t in enumerate(tensors):
        if t is None:
            continue
        if ref is None:
            ref = (k, t.shape)
        elif t.shape != ref[1]:
            a = names[ref[0]] if names else f"tensor {ref[0]}"
            b = names[k] if names else f"tensor {k}"
            raise CommandError(f"{cmd.name}: {b} has shape {t.shape} but {a} has {ref[1]}")


def same_dtype(cmd, tensors):
    """All non-None tensors have one dtype."""
    dtypes = {str(t.dtype) for t in tensors if t is not None}
    if len(dtypes) > 1:
        raise CommandError(f"{cmd.name}: mixed dtypes {sorted(dtypes)}; convert first")


def floating(cmd, tensors):
    """All non-None tensors are floating point."""
    for t in tensors:
        if t is not None and str(t.dtype) not in FLOATS:
            raise CommandError(f"{cmd.name} needs floating-point tensors, got {t.dtype}")


def elementwise(n_in, *, floats=False, optional_first=False):
    """The check of an element-wise command: ``n_in`` inputs (an int or (lo, hi), as ``arity``)
    and one output, all present (input 0 may be None with ``optional_first``), of one shape and
    one dtype, a floating one with ``floats``."""

    def check(cmd, inputs, outputs):
        arity(cmd, inputs, outputs, n_in, 1)
        first = 1 if optional_first else 0
        present(cmd, inputs, "input", *range(first, len(inputs)))
        present(cmd, outputs, "output", 0)
        names = [f"input {k}" for k in range(len(inputs))] + ["output 0"]
        same_shape(cmd, inputs + outputs, names)
        same_dtype(cmd, inputs + outputs)
        if floats:
            floating(cmd, inputs + outputs)

    return check


def expect_shape(cmd, t, shape, what):
    if tuple(t.shape) != tuple(shape):
        raise CommandError(f"{cmd.name}: {what} should have shape {tuple(shape)}, got {t.shape}")


def pair(cmd, value, name, minimum):
    """Normalise an int or a pair of ints to a tuple of two, each >= minimum."""
    if isinstance(value, Integral):
        value = (value, value)
    try:
        a, b = (int(v) for v in value)
    except (TypeError, ValueError):
        raise CommandError(
            f"{cmd}: {name} must be an int or a pair of ints, not {value!r}"
        ) from None
    if a < minimum or b < minimum:
        raise CommandError(f"{cmd}: {name} must be >= {minimum}, got {(a, b)}")
    return a, b


def padding(cmd, value):
    """Normalise padding to (top, left, bottom, right): an int, (ph, pw), or a 4-tuple."""
    if isinstance(value, Integral):
        value = (value, value)
    try:
        vals = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise CommandError(f"{cmd}: padding must be ints, not {value!r}") from None
    if len(vals) == 2:
        vals = (vals[0], vals[1], vals[0], vals[1])
    if len(vals) != 4 or min(vals) < 0:
        raise CommandError(
            f"{cmd}: padding must be p, (ph, pw) or (top, left, bottom, right) with p >= 0, "
            f"got {value!r}"
        )
    return vals


def finite(cmd, params, key, default):
    """Parameter ``key`` of ``params`` (``default`` when absent) as a finite float."""
    value = params.get(key, default)
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise CommandError(f"{cmd}: {key} must be a number, not {value!r}") from None
    if not math.isfinite(value):
        raise CommandError(f"{cmd}: {key} must be finite, not {value!r}")
    return value


def only(cmd, params, allowed):
    """Reject unknown parameter names."""
    extra = sorted(set(params) - set(allowed))
    if extra:
        raise CommandError(f"{cmd} got unknown parameters {extra}; it takes {sorted(allowed)}")


def nhwc(cmd, t, what):
    """Require an image batch [N, H, W, C] or a single image [H, W, C] (NHWC), or the NCHW
    [N, C, H, W] / [C, H, W] of a tensor whose format is NCHW; return the shape in NHWC order."""
    if t.format not in ("NHWC", "NCHW"):
        raise CommandError(f"{cmd.name}: {what} is a {t.format} tensor; image commands take "
                           "NHWC and NCHW tensors (convert with FORMAT_TRANSFORM)")
    if t.ndim not in (3, 4):
        layout = "[N, C, H, W] or [C, H, W]" if t.format == "NCHW" else "[N, H, W, C] or [H, W, C]"
        raise CommandError(
            f"{cmd.name}: {what} must be {t.format} {layout}, got shape {t.shape}"
        )
    return nhwc_shape(t)


def nhwc_shape(t):
    """t's shape in NHWC order: an NCHW 3-d or 4-d tensor's channels moved last (the view an
    image command's Python backends get, nnc.cmd.command._py_array); any other as it is."""
    shape = tuple(t.shape)
    if t.format == "NCHW" and len(shape) in (3, 4):
        return shape[:-3] + shape[-2:] + shape[-3:-2]
    return shape


def from_nhwc(shape, format):
    """An NHWC-ordered 3-d or 4-d ``shape`` in ``format``'s order (nhwc_shape's inverse)."""
    shape = tuple(shape)
    if format == "NCHW" and len(shape) in (3, 4):
        return shape[:-3] + shape[-1:] + shape[-3:-1]
    return shape


def same_format(cmd, first, tensors):
    """Every present tensor of ``tensors`` (name -> tensor) of 3 or more axes has the format of
    ``first`` (a tensor), as NNC asserts: an image read in one format and written in another
    would be a silent transpose; FORMAT_TRANSFORM converts."""
    for what, t in tensors.items():
        if t is not None and t.ndim >= 3 and t.format != first.format:
            raise CommandError(f"{cmd.name}: {what} is {t.format} but the input is "
                               f"{first.format}; one node reads and writes one format "
                               "(convert with FORMAT_TRANSFORM)")


def expect_image_shape(cmd, t, shape, what):
    """t's shape is the NHWC-ordered ``shape`` in t's own format."""
    want = from_nhwc(shape, t.format)
    if tuple(t.shape) != want:
        raise CommandError(f"{cmd.name}: {what} should have shape {want}"
                           f"{'' if t.format == 'NHWC' else f' ({t.format})'}, got {t.shape}")


def window_output(cmd, hw, size, stride, pad, ceil=False):
    """(Ho, Wo) of a ``size`` window moved by ``stride`` over ``hw`` padded by (t, l, b, r).

    Ho = (H + top + bottom - kh) // sh + 1; raises when the window does not fit even once.
    ``ceil`` (the pools' ``ceil_mode``, ONNX's and PyTorch's rule): the division rounds up, so
    a last window may run past the bottom padding, but it must start inside the input or its
    top padding (one that would start in the bottom padding is dropped).
    """
    out = []
    for n, k, s, lo, hi, axis in zip(hw, size, stride, pad[:2], pad[2:], ("height", "width")):
        if n + lo + hi < k:
            raise CommandError(
                f"{cmd.name}: the window ({k}) is larger than the padded {axis} "
                f"({n} + {lo} + {hi} = {n + lo + hi})"
            )
        o = (n + lo + hi - k) // s + 1
        if ceil:
            o = -(-(n + lo + hi - k) // s) + 1
            if (o - 1) * s >= n + lo:
                o -= 1
        out.append(o)
    return tuple(out)
