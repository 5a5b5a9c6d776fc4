"""The GPU_REF kernels nnc launches, emulated in NumPy from their raw ``void**`` parameter arrays
(tests/fakes/cuda_driver.py runs them at a launch, or at a captured graph's replay): each reads
its arguments as its C signature in nnc/cuda/kernels/*.cu packs them (SIGNATURES), so a packing
nnc gets wrong gives wrong results here. ``cond_set`` is nnc's condition kernel, which sets a
conditional handle's value in the fake driver it is bound to.
"""

import ctypes

import numpy as np

from nnc.cmd.gemm.gpu.ref import GEMM_FIELDS
from nnc.cuda.runner import CONVT_T, WINDOW_T


def _arr(ptr, dtype, shape, strides):
    dt = np.dtype(dtype)
    iface = {"version": 3, "shape": tuple(shape), "typestr": dt.str, "data": (int(ptr), False),
             "strides": tuple(s * dt.itemsize for s in strides)}
    holder = type("H", (), {"__array_interface__": iface})()
    return np.asarray(holder)


def _contig(ptr, dtype, n):
    return _arr(ptr, dtype, (n,), (1,))


class _Fault(RuntimeError):
    """A kernel touched memory of another device (FakeDriver._check_access)."""


def cond_set(self, a):
    """nnc's condition kernel (nnc/cuda/capture.py COND_SOURCE), written again from its C: the
    count step, the comparison, the handle's new value."""
    handle, count, step = _ptr(a[0]), _ptr(a[1]), _scalar(a[2], ctypes.c_int)
    x, dtype, op = _ptr(a[3]), _scalar(a[4], ctypes.c_int), _scalar(a[5], ctypes.c_int)
    exact, vi, vf = _scalar(a[6], ctypes.c_int), _i64(a[7]), _scalar(a[8], ctypes.c_double)
    c = _i64(count) if count else 0
    c = 0 if step in (1, 3) else c + 1 if step == 2 else c
    v = 1
    if step != 3:
        xi, xf = c, float(c)
        if x:
            ctype = (ctypes.c_float, ctypes.c_double, ctypes.c_int32, ctypes.c_int64)[dtype]
            raw = ctype.from_address(x).value
            xi, xf = (0, float(raw)) if dtype < 2 else (int(raw), float(raw))
        a_, b_ = (xi, vi) if exact else (xf, vf)
        v = int((a_ < b_, a_ <= b_, a_ > b_, a_ >= b_, a_ == b_, a_ != b_)[op])
        if step == 4 and v:
            c += 1
    if count:
        ctypes.c_int64.from_address(count).value = c
    self.cond_values[handle] = v



def _scalar(addr, ctype):
    return ctype.from_address(addr).value


def _ptr(addr):
    return ctypes.c_uint64.from_address(addr).value


def _i64(addr):
    return ctypes.c_int64.from_address(addr).value


def _acc(dtype):
    """The type a kernel computes in (nnc_acc_t in common.cuh): float for float16."""
    return np.float64 if dtype == np.float64 else np.float32


def _ctype(dtype):
    return ctypes.c_double if dtype == np.float64 else ctypes.c_float


def _ew_reduce(prod):
    def run(a, dt, grid):
        ptrs = [ctypes.c_uint64.from_address(a[0] + 8 * i).value for i in range(8)]
        count, y, n = _scalar(a[1], ctypes.c_int), _ptr(a[2]), _i64(a[3])
        xs = [_contig(p, dt, n).copy() for p in ptrs[:count]]
        acc = xs[0]
        for x in xs[1:]:
            acc = acc * x if prod else acc + x
        _contig(y, dt, n)[:] = acc

    return run


def _ewdiv(a, dt, grid):
    pa, pb, y, n = _ptr(a[0]), _ptr(a[1]), _ptr(a[2]), _i64(a[3])
    num = 1 if pa == 0 else _contig(pa, dt, n)
    _contig(y, dt, n)[:] = num / _contig(pb, dt, n)


def _unary(fn):
    def run(a, dt, grid):
        x, xs, y, ys, n, cols = _ptr(a[0]), _i64(a[1]), _ptr(a[2]), _i64(a[3]), _i64(a[4]), \
            _i64(a[5])
        _arr(y, dt, (n // cols, cols), (ys, 1))[...] = fn(_arr(x, dt, (n // cols, cols), (xs, 1)))

    return run


def _scalar_mul(a, dt, grid):
    s, x, xs, y, ys, n, cols = _scalar(a[0], _ctype(dt)), _ptr(a[1]), _i64(a[2]), _ptr(a[3]), \
        _i64(a[4]), _i64(a[5]), _i64(a[6])
    x = _arr(x, dt, (n // cols, cols), (xs, 1)).astype(_acc(dt))
    _arr(y, dt, (n // cols, cols), (ys, 1))[...] = _acc(dt)(s) * x


def _set(a, dt, grid):
    v, y, ys, n, cols = _scalar(a[0], _ctype(dt)), _ptr(a[1]), _i64(a[2]), _i64(a[3]), \
        _i64(a[4])
    _arr(y, dt, (n // cols, cols), (ys, 1))[...] = v


def _bias_act(a, dt, grid):
    pb, relu, y, ys, n, cols = _ptr(a[0]), _scalar(a[1], ctypes.c_int), _ptr(a[2]), _i64(a[3]), \
        _i64(a[4]), _i64(a[5])
    v = _arr(y, dt, (n // cols, cols), (ys, 1))
    acc = v + _contig(pb, dt, cols) if pb else v.copy()
    v[...] = np.where(acc < 0, 0, acc) if relu else acc      # NaN stays NaN


def _softmax(a, dt, grid):
    x, y, rows, cols = _ptr(a[0]), _ptr(a[1]), _i64(a[2]), _i64(a[3])
    v = _arr(x, dt, (rows, cols), (cols, 1)).astype(np.float64)
    e = np.exp(v - v.max(axis=1, keepdims=True))
    _arr(y, dt, (rows, cols), (cols, 1))[:] = e / e.sum(axis=1, keepdims=True)


def _gemm(a, dt, grid):
    g = dict(zip(GEMM_FIELDS, np.frombuffer(ctypes.string_at(a[0], 88), np.int64).tolist()))
    pa, pw, pb, po = _ptr(a[1]), _ptr(a[2]), _ptr(a[3]), _ptr(a[4])
    batch = grid[2]
    av = _arr(pa, dt, (batch, g["m"], g["k"]), (g["a_bs"], g["a_ms"], g["a_ks"]))
    wv = _arr(pw, dt, (batch, g["k"], g["n"]), (g["w_bs"], g["w_ks"], g["w_ns"]))
    acc = np.matmul(av.astype(np.float64), wv.astype(np.float64))
    if pb:
        acc += _contig(pb, dt, g["n"])
    _arr(po, dt, (batch, g["m"], g["n"]), (g["o_bs"], g["o_ms"], 1))[...] = acc


def _window(addr):
    return np.frombuffer(ctypes.string_at(addr, WINDOW_T.itemsize), WINDOW_T)[0]


def _window_views(g, px, po, dt, out_c):
    n, h, w, c = int(g["n"]), int(g["h"]), int(g["w"]), int(g["c"])
    ho, wo = int(g["ho"]), int(g["wo"])
    xps, ops = int(g["x_ps"]), int(g["o_ps"])
    x = _arr(px, dt, (n, h, w, c), (h * w * xps, w * xps, xps, 1)).astype(np.float64)
    out = _arr(po, dt, (n, ho, wo, out_c), (ho * wo * ops, wo * ops, ops, 1))
    return x, out


def _taps(g, x):
    """Yield (tap window of x for every output pixel, validity mask) per kernel offset."""
    ho, wo = int(g["ho"]), int(g["wo"])
    for i in range(int(g["kh"])):
        for j in range(int(g["kw"])):
            ys = np.arange(ho) * int(g["sh"]) - int(g["pt"]) + i
            xs = np.arange(wo) * int(g["sw"]) - int(g["pl"]) + j
            my = (ys >= 0) & (ys < x.shape[1])
            mx = (xs >= 0) & (xs < x.shape[2])
            patch = x[:, np.clip(ys, 0, x.shape[1] - 1)][:, :, np.clip(xs, 0, x.shape[2] - 1)]
            yield i, j, patch, (my[:, None] & mx[None, :])[None, :, :, None]


def _conv(a, dt, grid):
    g = _window(a[0])
    px, pw, pb, po = _ptr(a[1]), _ptr(a[2]), _ptr(a[3]), _ptr(a[4])
    o, groups = int(g["o"]), int(g["groups"])
    kh, kw, cg = int(g["kh"]), int(g["kw"]), int(g["c"]) // groups
    x, out = _window_views(g, px, po, dt, o)
    wt = _contig(pw, dt, o * kh * kw * cg).reshape(o, kh, kw, cg).astype(np.float64)
    acc = np.zeros(out.shape)
    og = o // groups
    for i, j, patch, mask in _taps(g, x):
        for k in range(groups):
            ci, co = slice(k * cg, (k + 1) * cg), slice(k * og, (k + 1) * og)
            acc[..., co] += np.where(mask, patch[..., ci], 0) @ wt[co, i, j, :].T
    if pb:
        acc += _contig(pb, dt, o)
    if g["relu"]:
        acc = np.where(acc < 0, 0.0, acc)       # NaN stays NaN, as in conv.cu
    out[...] = acc


def _conv_transpose(a, dt, grid):
    """CONVOLUTION_TRANSPOSE as a gather over output pixels, the kernel's own formulation (CPU_REF
    scatters input pixels into an uncropped output instead): output row r takes tap i from input
    row (r + pt - i * dh) / sh where that divides exactly and lies inside x, likewise columns."""
    g = np.frombuffer(ctypes.string_at(a[0], CONVT_T.itemsize), CONVT_T)[0]
    px, pw, pb, po = _ptr(a[1]), _ptr(a[2]), _ptr(a[3]), _ptr(a[4])
    n, h, w, c = int(g["n"]), int(g["h"]), int(g["w"]), int(g["c"])
    ho, wo, o, groups = int(g["ho"]), int(g["wo"]), int(g["o"]), int(g["groups"])
    kh, kw = int(g["kh"]), int(g["kw"])
    xps, ops = int(g["x_ps"]), int(g["o_ps"])
    cg, og = c // groups, o // groups
    x = _arr(px, dt, (n, h, w, c), (h * w * xps, w * xps, xps, 1)).astype(np.float64)
    out = _arr(po, dt, (n, ho, wo, o), (ho * wo * ops, wo * ops, ops, 1))
    wt = _contig(pw, dt, c * kh * kw * og).reshape(c, kh, kw, og).astype(np.float64)

    def sources(size, stride, dilation, pad, tap, limit):
        t = np.arange(size) + pad - tap * dilation
        src = t // stride
        return np.clip(src, 0, limit - 1), (t >= 0) & (t % stride == 0) & (src < limit)

    acc = np.zeros((n, ho, wo, o))
    for i in range(kh):
        rows, row_ok = sources(ho, int(g["sh"]), int(g["dh"]), int(g["pt"]), i, h)
        for j in range(kw):
            cols, col_ok = sources(wo, int(g["sw"]), int(g["dw"]), int(g["pl"]), j, w)
            ok = (row_ok[:, None] & col_ok[None, :])[None, :, :, None]
            patch = np.where(ok, x[:, rows][:, :, cols], 0.0)
            for k in range(groups):
                ci, co = slice(k * cg, (k + 1) * cg), slice(k * og, (k + 1) * og)
                acc[..., co] += patch[..., ci] @ wt[ci, i, j, :]
    if pb:
        acc += _contig(pb, dt, o)
    out[...] = acc


def _pool(is_max):
    def run(a, dt, grid):
        g = _window(a[0])
        x, out = _window_views(g, _ptr(a[1]), _ptr(a[2]), dt, int(g["c"]))
        acc = np.full(out.shape, -np.inf if is_max else 0.0)
        count = np.zeros(out.shape[1:3])[None, :, :, None]
        for _, _, patch, mask in _taps(g, x):
            if is_max:
                acc = np.where(mask, np.maximum(acc, patch), acc)
            else:
                acc += np.where(mask, patch, 0)
            count = count + mask
        if not is_max:
            acc /= (int(g["kh"]) * int(g["kw"])) if g["count_include_pad"] else count
        out[...] = acc

    return run


# Bytes of each kernel parameter ("A": the size of the type the kernel computes in, nnc_acc_t),
# as declared in kernels/*.cu.
_P = 8
SIGNATURES = {
    "ewsum": (64, 4, _P, 8), "ewprod": (64, 4, _P, 8), "ewdiv": (_P, _P, _P, 8),
    "ewexp": (_P, 8, _P, 8, 8, 8), "ewlog": (_P, 8, _P, 8, 8, 8), "relu": (_P, 8, _P, 8, 8, 8),
    "scalar_mul": ("A", _P, 8, _P, 8, 8, 8), "set": ("A", _P, 8, 8, 8),
    "softmax": (_P, _P, 8, 8), "bias_act": (_P, 4, _P, 8, 8, 8),
    "gemm": (88, _P, _P, _P, _P), "conv": (88, _P, _P, _P, _P),
    "conv_transpose": (88, _P, _P, _P, _P), "max_pool": (88, _P, _P),
    "avg_pool": (88, _P, _P), "cond_set": (8, _P, 4, _P, 4, 4, 4, 8, 8),
}

EMULATE = {
    "ewsum": _ew_reduce(False), "ewprod": _ew_reduce(True), "ewdiv": _ewdiv,
    "ewexp": _unary(np.exp), "ewlog": _unary(np.log), "relu": _unary(lambda v: np.maximum(v, 0)),
    "scalar_mul": _scalar_mul, "set": _set, "softmax": _softmax, "bias_act": _bias_act,
    "gemm": _gemm, "conv": _conv, "conv_transpose": _conv_transpose, "max_pool": _pool(True),
    "avg_pool": _pool(False),
}
