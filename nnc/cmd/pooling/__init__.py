"""Layer 2 command, the pooling family: this module (the definitions, CPU_REF and CPU_NUMPY),
cpu_opt.pyx (CPU_OPT); gpu/ (layer 3, never imported from here): GPU_REF, registered by
nnc.cuda.builtins.

MAX_POOL and AVG_POOL, NHWC (NNC: cmd/pool/ccv_nnc_max_pool_cpu_ref.c, _avg_pool_cpu_ref.c).

One input x [N, H, W, C] or [H, W, C], one output [N, Ho, Wo, C] (or [Ho, Wo, C]) with
Ho = (H + top + bottom - kh) // sh + 1, likewise Wo. Parameters ``size`` (required; int or
(kh, kw)), ``stride`` (default: ``size``) and ``padding`` (int, (ph, pw) or (top, left, bottom,
right)); each padding must be smaller than the window, so every window holds a real element.
``ceil_mode=True`` (ONNX's and PyTorch's): Ho = ceil((H + top + bottom - kh) / sh) + 1, less one
when that last window would start in the bottom padding; so a last window may run past the
bottom (right) padding, and still holds a real element. Only a True ceil_mode is kept in
``params`` (a command without it compares equal to the one it always was).

Padding never wins a max (it acts as -inf). AVG_POOL divides by the number of real (non-padding)
elements under the window, as NNC does; ``count_include_pad=True`` divides by the window's
elements inside the padded input: kh * kw, except for a ceil_mode window that runs past the
bottom or right padding, whose part out there is not counted (ONNX's and PyTorch's divisor).
Floats only, one dtype, and the output may not overlap the input.

Backends: CPU_OPT is C (cpu_opt.pyx, no GIL, split into parts on the pool; float32 through the
hand-written pool_kernel.h, one variant per ISA level) for float32/64 tensors whose channel axis
is contiguous (any pixel strides: channel slices of a concat buffer); CPU_NUMPY (below, priority
15) takes the views it refuses; CPU_REF defines the semantics.
"""

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command


def _pool_normalize(name, params, extra=()):
    _check.only(name, params, ("size", "stride", "padding", "ceil_mode") + extra)
    if params.get("size") is None:
        raise CommandError(f"{name} needs size=k or size=(kh, kw), the pooling window")
    size = _check.pair(name, params["size"], "size", 1)
    stride = params.get("stride")
    stride = size if stride is None else _check.pair(name, stride, "stride", 1)
    pad = _check.padding(name, params.get("padding", 0))
    if max(pad[0], pad[2]) >= size[0] or max(pad[1], pad[3]) >= size[1]:
        raise CommandError(
            f"{name}: padding {pad} must be smaller than the window {size} on each side, "
            "or a window could hold padding only"
        )
    out = {"size": size, "stride": stride, "padding": pad}
    ceil = params.get("ceil_mode", False)
    if ceil not in (True, False, 0, 1) or isinstance(ceil, float):
        raise CommandError(f"{name}: ceil_mode must be True or False, not {ceil!r}")
    if ceil:
        out["ceil_mode"] = True
    return out


def _max_normalize(params):
    return _pool_normalize("MAX_POOL", params)


def _avg_normalize(params):
    out = _pool_normalize("AVG_POOL", params, ("count_include_pad",))
    flag = params.get("count_include_pad", False)
    if flag not in (True, False, 0, 1) or isinstance(flag, float):
        raise CommandError(f"AVG_POOL: count_include_pad must be True or False, not {flag!r}")
    out["count_include_pad"] = bool(flag)
    return out


def pool_shape(cmd, x_shape):
    """The output shape of a pooling command on ``x_shape``."""
    ho, wo = _check.window_output(
        cmd, x_shape[-3:-1], cmd.params["size"], cmd.params["stride"], cmd.params["padding"],
        cmd.params.get("ceil_mode", False),
    )
    return tuple(x_shape[:-3]) + (ho, wo, x_shape[-1])


def _pool_check(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, 1, 1)
    _check.present(cmd, inputs, "input", 0)
    _check.present(cmd, outputs, "output", 0)
    _check.same_dtype(cmd, inputs + outputs)
    _check.floating(cmd, inputs + outputs)
    shape = _check.nhwc(cmd, inputs[0], "input 0")
    _check.same_format(cmd, inputs[0], {"output 0": outputs[0]})
    _check.expect_image_shape(cmd, outputs[0], pool_shape(cmd, shape), "output 0")


def _pool_ref(cmd, inputs, outputs):
    """The definition: one window at a time, clipped to the real pixels, reduced in float64."""
    x, out = inputs[0], outputs[0]
    kh, kw = cmd.params["size"]
    sh, sw = cmd.params["stride"]
    pt, pl, pb, pr = cmd.params["padding"]
    is_max = cmd.name == "MAX_POOL"
    h, w = x.shape[-3], x.shape[-2]
    for oh in range(out.shape[-3]):
        r0 = oh * sh - pt
        rows = slice(max(r0, 0), min(r0 + kh, h))
        for ow in range(out.shape[-2]):
            c0 = ow * sw - pl
            cols = slice(max(c0, 0), min(c0 + kw, w))
            win = x[..., rows, cols, :].astype(np.float64)
            if is_max:
                out[..., oh, ow, :] = win.max(axis=(-3, -2))
            else:
                real = (rows.stop - rows.start) * (cols.stop - cols.start)
                # The window inside the padded input (kh * kw unless ceil_mode ran it past).
                padded = (min(r0 + kh, h + pb) - r0) * (min(c0 + kw, w + pr) - c0)
                div = padded if cmd.params["count_include_pad"] else real
                out[..., oh, ow, :] = win.sum(axis=(-3, -2)) / div


def _taps(n_out, n_in, k, s, p):
    """For each window tap t: (lo, hi, first) where outputs lo..hi-1 read real input rows
    first, first + s, ... (output o reads input o * s + t - p; padding rows are skipped)."""
    taps = []
    for t in range(k):
        lo = max(0, -((t - p) // s))
        hi = min(n_out, (n_in - 1 + p - t) // s + 1)
        if hi > lo:
            taps.append((lo, hi, lo * s + t - p))
    return taps


def _pool_numpy(cmd, inputs, outputs):
    """Vectorised: one whole-image np.maximum / np.add per window tap (kh * kw NumPy calls)."""
    x, out = inputs[0], outputs[0]
    kh, kw = cmd.params["size"]
    sh, sw = cmd.params["stride"]
    pt, pl, pb, pr = cmd.params["padding"]
    ho, wo = out.shape[-3], out.shape[-2]
    row_taps = _taps(ho, x.shape[-3], kh, sh, pt)
    col_taps = _taps(wo, x.shape[-2], kw, sw, pl)
    is_max = cmd.name == "MAX_POOL"
    out[...] = -np.inf if is_max else 0
    combine = np.maximum if is_max else np.add
    for r_lo, r_hi, r0 in row_taps:
        rows = slice(r0, r0 + (r_hi - r_lo - 1) * sh + 1, sh)
        for c_lo, c_hi, c0 in col_taps:
            cols = slice(c0, c0 + (c_hi - c_lo - 1) * sw + 1, sw)
            dst = out[..., r_lo:r_hi, c_lo:c_hi, :]
            combine(dst, x[..., rows, cols, :], out=dst)
    if is_max:
        return
    if cmd.params["count_include_pad"]:
        # Taps inside the padded input: all kh (kw), but for a ceil_mode window past it.
        rows_in = np.minimum(np.arange(ho) * sh - pt + kh, x.shape[-3] + pb) - (
            np.arange(ho) * sh - pt)
        cols_in = np.minimum(np.arange(wo) * sw - pl + kw, x.shape[-2] + pr) - (
            np.arange(wo) * sw - pl)
        out /= np.multiply.outer(rows_in, cols_in)[:, :, None].astype(out.dtype)
        return
    # Real elements under window (oh, ow) = real rows(oh) * real columns(ow).
    count_h = np.zeros(ho)
    count_w = np.zeros(wo)
    for lo, hi, _ in row_taps:
        count_h[lo:hi] += 1
    for lo, hi, _ in col_taps:
        count_w[lo:hi] += 1
    out /= np.multiply.outer(count_h, count_w)[:, :, None].astype(out.dtype)


def register():
    for name, normalize in (("MAX_POOL", _max_normalize), ("AVG_POOL", _avg_normalize)):
        register_command(name, inplace="none", check=_pool_check, normalize=normalize,
                         image=True)
        register_backend(name, "CPU_REF", _pool_ref)
        register_backend(name, "CPU_NUMPY", _pool_numpy, datatypes=("float32", "float64"))
