"""Output shapes and window hints from a command's parameters and its input shapes.

NNC: ccv_nnc_hint_auto and ccv_nnc_hint_tensor_auto (ccv_nnc_cmd.c, each command's
``tensor_auto``). NNC keeps a convolution's and a pool's stride and border in a separate hint;
nnc's Cmd holds them as ``stride=`` and ``padding=``, so :func:`hint_auto` returns them as Cmd
parameters and :func:`hint_tensor_auto` reads them from the Cmd. Both take shapes, not tensors
(what NNC's ``ccv_nnc_tensor_param_t`` is), in ``format`` ("NHWC" or "NCHW") for the image
commands, and raise CommandError where the parameters give no valid shape, where NNC asserts or
returns a zero shape.
"""

import numbers

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import Cmd
from nnc.cmd.convolution import conv_shape
from nnc.cmd.convolution.conv_transpose import conv_transpose_shape
from nnc.cmd.gemm import gemm_shape
from nnc.cmd.pooling import pool_shape
from nnc.cmd.transpose import permutation

_IMAGE_FORMATS = ("NHWC", "NCHW")
_POOLS = ("MAX_POOL", "AVG_POOL")


def _shape(value, what):
    """``value`` as a tuple of ints >= 0."""
    try:
        shape = tuple(value)
    except TypeError:
        raise CommandError(f"{what} must be a sequence of ints, not {value!r}") from None
    if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0
               for d in shape):
        raise CommandError(f"{what} must be ints >= 0, got {value!r}")
    return tuple(int(d) for d in shape)


def _image(cmd, shape, format, what):
    """An image ``shape`` (3-d or 4-d) of ``format`` in NHWC order."""
    if format not in _IMAGE_FORMATS:
        raise CommandError(f"{cmd.name}: format must be 'NHWC' or 'NCHW', not {format!r}")
    if len(shape) not in (3, 4):
        raise CommandError(f"{cmd.name}: {what} must be a 3-d or 4-d {format} shape, got "
                           f"{shape}")
    return _nhwc_of(shape, format)


def _nhwc_of(shape, format):
    """A 3-d or 4-d ``format`` shape in NHWC order."""
    if format == "NCHW":
        return tuple(shape[:-3]) + tuple(shape[-2:]) + tuple(shape[-3:-2])
    return tuple(shape)


def _inputs(cmd, input_shapes, lo, hi):
    try:
        shapes = list(input_shapes)
    except TypeError:
        raise CommandError(f"{cmd.name}: input_shapes must be a sequence of shapes, not "
                           f"{input_shapes!r}") from None
    if not lo <= len(shapes) <= hi:
        want = str(lo) if lo == hi else f"{lo}..{hi}"
        raise CommandError(f"{cmd.name} takes {want} input shapes, got {len(shapes)}")
    return [None if s is None else _shape(s, f"{cmd.name}: input shape {k}")
            for k, s in enumerate(shapes)]


def _window(cmd, shapes, format):
    """(kh, kw): a pool's size, a convolution's kernel from its weights (shapes[1])."""
    if cmd.name in _POOLS:
        return tuple(cmd.params["size"])
    if cmd.name == "CONVOLUTION":
        if len(shapes) < 2 or shapes[1] is None or len(shapes[1]) != 4:
            raise CommandError("CONVOLUTION: hint_auto needs the weights' shape (input 1, "
                               "4-d) for the kernel size")
        return _nhwc_of(shapes[1], format)[1:3]
    raise CommandError(f"hint_auto computes the stride and padding of CONVOLUTION, MAX_POOL "
                       f"and AVG_POOL, not {cmd.name}")


def hint_auto(cmd, input_shapes, output_shape, format="NHWC"):
    """The stride and padding that take ``input_shapes[0]`` to ``output_shape`` through
    ``cmd``'s window (a pool's ``size``, a convolution's kernel from ``input_shapes[1]``), as
    ``{"stride": (sh, sw), "padding": (top, left, bottom, right)}`` for ``Cmd(name, **hint)``.

    NNC: ccv_nnc_hint_auto: the stride is the rounded ratio of the sizes and the border what
    the window then needs, the larger half before (cuDNN's rule). Raises CommandError where no
    stride and padding >= 0 give exactly that output (NNC would return a negative border)."""
    if not isinstance(cmd, Cmd):
        raise CommandError(f"hint_auto needs an nnc.Cmd, not {type(cmd).__name__}")
    shapes = _inputs(cmd, input_shapes, 1, 4)
    if shapes[0] is None:
        raise CommandError(f"{cmd.name}: hint_auto needs input 0's shape")
    a = _image(cmd, shapes[0], format, "input 0")
    b = _image(cmd, _shape(output_shape, f"{cmd.name}: output shape"), format, "the output")
    if len(a) != len(b):
        raise CommandError(f"{cmd.name}: input {shapes[0]} and output {tuple(output_shape)} "
                           "have different ranks")
    size = _window(cmd, shapes, format)
    stride, pad_begin, pad_end = [], [], []
    for axis, n, m, k in zip(("height", "width"), a[-3:-1], b[-3:-1], size):
        if n < 1 or m < 1:
            raise CommandError(f"{cmd.name}: hint_auto needs a {axis} >= 1 on both sides, got "
                               f"{n} -> {m}")
        s = (n + m // 2) // m
        border = (m - 1) * s - n + k
        if s < 1 or border < 0:
            raise CommandError(f"{cmd.name}: no stride and padding take a {axis} of {n} to {m} "
                               f"with a window of {k}")
        stride.append(s)
        pad_begin.append((border + 1) // 2)
        pad_end.append(border - (border + 1) // 2)
    return {"stride": tuple(stride), "padding": tuple(pad_begin) + tuple(pad_end)}


def hint_tensor_auto(cmd, input_shapes, format="NHWC", output_format=None):
    """The output shapes (a tuple of shapes, one per output) ``cmd`` gives for inputs of
    ``input_shapes`` (None where an input is absent), in ``format`` for the image commands.

    NNC: ccv_nnc_hint_tensor_auto. Known here: CONVOLUTION (x, w[, bias[, residual]]),
    CONVOLUTION_TRANSPOSE (x, w[, bias]), MAX_POOL and AVG_POOL (x), GEMM (a, w[, bias]),
    TRANSPOSE (x) and FORMAT_TRANSFORM (x; ``output_format`` is the output's format, the input's
    by default). Another command, or parameters that give no valid output (a window larger than
    the padded input, channels the groups do not divide), raise CommandError."""
    if not isinstance(cmd, Cmd):
        raise CommandError(f"hint_tensor_auto needs an nnc.Cmd, not {type(cmd).__name__}")
    name = cmd.name
    if name in ("CONVOLUTION", "CONVOLUTION_TRANSPOSE"):
        shapes = _inputs(cmd, input_shapes, 2, 4 if name == "CONVOLUTION" else 3)
        if shapes[0] is None or shapes[1] is None:
            raise CommandError(f"{name}: x and w (inputs 0 and 1) are required")
        x = _image(cmd, shapes[0], format, "x (input 0)")
        if len(shapes[1]) != 4:
            raise CommandError(f"{name}: w must be 4-d, got shape {shapes[1]}")
        w = _nhwc_of(shapes[1], format)
        out = (conv_shape if name == "CONVOLUTION" else conv_transpose_shape)(cmd, x, w)
        return (_check.from_nhwc(out, format),)
    if name in _POOLS:
        (x,) = _inputs(cmd, input_shapes, 1, 1)
        if x is None:
            raise CommandError(f"{name}: input 0 is required")
        return (_check.from_nhwc(pool_shape(cmd, _image(cmd, x, format, "input 0")), format),)
    if name == "GEMM":
        shapes = _inputs(cmd, input_shapes, 2, 3)
        if shapes[0] is None or shapes[1] is None:
            raise CommandError("GEMM: a and w (inputs 0 and 1) are required")
        return (gemm_shape(cmd, shapes[0], shapes[1]),)
    if name == "TRANSPOSE":
        (x,) = _inputs(cmd, input_shapes, 1, 1)
        if x is None:
            raise CommandError("TRANSPOSE: input 0 is required")
        return (tuple(x[k] for k in permutation(cmd, len(x))),)
    if name == "FORMAT_TRANSFORM":
        shapes = _inputs(cmd, input_shapes, 1, 64)
        target = format if output_format is None else output_format
        out = []
        for k, x in enumerate(shapes):
            if x is None:
                raise CommandError(f"FORMAT_TRANSFORM: input {k} is required")
            if target == format:
                out.append(x)
                continue
            if target not in _IMAGE_FORMATS:
                raise CommandError(f"FORMAT_TRANSFORM: output_format must be 'NHWC' or 'NCHW', "
                                   f"not {target!r}")
            out.append(_check.from_nhwc(_image(cmd, x, format, f"input {k}"), target))
        return tuple(out)
    raise CommandError(f"hint_tensor_auto knows the output shapes of CONVOLUTION, "
                       f"CONVOLUTION_TRANSPOSE, MAX_POOL, AVG_POOL, GEMM, TRANSPOSE and "
                       f"FORMAT_TRANSFORM, not {name}")
