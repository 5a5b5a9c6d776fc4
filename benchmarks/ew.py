"""Element-wise and reduction commands against NumPy, one thread, side by side in one process.

    python -m benchmarks.ew [--json] [--repeat R] [--sizes 64,4096,4194304]

For EWEXP, EWLOG, EWSQRT, SIGMOID and TANH, float32 and float64, at each size: ``nnc`` is
``Backend.exec`` of the default backend (CPU_OPT, the C loop) on preallocated tensors, and ``numpy``
the matching NumPy expression writing into a preallocated array (``np.exp(x, out=y)``; SIGMOID:
``1 / (1 + exp(-x))`` with two temporaries; TANH: ``np.tanh``). REDUCE_MEAN over H and W of an NHWC
batch (a global average pool) is compared with ``x.mean(axis=(1, 2), keepdims=True)``.

Both are timed in interleaved rounds (``_util.measure_interleaved``), each call repeated enough
times to take about a millisecond; the median per call is reported, with numpy / nnc (above 1:
nnc is faster). Inputs lie where the functions are smooth (|x| <= 3; log and sqrt on [0.1, 3]).
"""

import sys

import numpy as np

import nnc
from benchmarks import _util

UNARY = {
    "EWEXP": lambda x, y: np.exp(x, out=y),
    "EWLOG": lambda x, y: np.log(x, out=y),
    "EWSQRT": lambda x, y: np.sqrt(x, out=y),
    "SIGMOID": lambda x, y: np.divide(1, 1 + np.exp(-x), out=y),
    "TANH": lambda x, y: np.tanh(x, out=y),
}
SIZES = (64, 4096, 4 * 1024 * 1024)


def _pair(cmd, x, y, numpy_fn):
    backend = nnc.command_info(cmd.name).backends[0]
    tx, ty = nnc.Tensor(x), nnc.Tensor(y)
    return (lambda: backend.exec(cmd, [tx], [ty])), (lambda: numpy_fn(x, y)), backend.name


def _loop(fn, n):
    def run():
        for _ in range(n):
            fn()
    return run


def _time(nnc_fn, np_fn, elements, repeat):
    inner = max(1, 1_000_000 // max(elements, 1) // 4)   # about a millisecond per sample
    s = _util.measure_interleaved({"nnc": _loop(nnc_fn, inner), "numpy": _loop(np_fn, inner)},
                                  repeat)
    return {k: _util.median(v) / inner for k, v in s.items()}


def run(sizes, repeat, log=print):
    rows = []
    rng = np.random.default_rng(0)
    for name, numpy_fn in UNARY.items():
        for dtype in ("float32", "float64"):
            for n in sizes:
                lo = 0.1 if name in ("EWLOG", "EWSQRT") else -3.0
                x = rng.uniform(lo, 3.0, n).astype(dtype)
                y = np.empty_like(x)
                nnc_fn, np_fn, backend = _pair(nnc.Cmd(name), x, y, numpy_fn)
                t = _time(nnc_fn, np_fn, n, repeat)
                rows.append({"command": name, "dtype": dtype, "elements": n, "backend": backend,
                             "nnc_s": t["nnc"], "numpy_s": t["numpy"],
                             "ratio": t["numpy"] / t["nnc"]})
                log(f"{name} {dtype} {n}: nnc {t['nnc'] * 1e6:.1f} us, "
                    f"numpy {t['numpy'] * 1e6:.1f} us")
    for dtype in ("float32", "float64"):
        for shape in ((1, 8, 8, 2048), (1, 35, 35, 288)):
            x = rng.standard_normal(shape).astype(dtype)
            y = np.empty((shape[0], 1, 1, shape[3]), dtype)
            nnc_fn, np_fn, backend = _pair(
                nnc.Cmd("REDUCE_MEAN", axes=(1, 2)), x, y,
                lambda a, b: np.copyto(b, a.mean(axis=(1, 2), keepdims=True)))
            t = _time(nnc_fn, np_fn, x.size, repeat)
            rows.append({"command": "REDUCE_MEAN(1,2)", "dtype": dtype,
                         "elements": int(x.size), "shape": list(shape), "backend": backend,
                         "nnc_s": t["nnc"], "numpy_s": t["numpy"],
                         "ratio": t["numpy"] / t["nnc"]})
    return {"rows": rows, "repeat": repeat}


def render(report):
    return _util.table(
        ["command", "dtype", "elements", "nnc (us)", "numpy (us)", "numpy / nnc"],
        [[r["command"], r["dtype"], r["elements"], _util.fmt(r["nnc_s"] * 1e6),
          _util.fmt(r["numpy_s"] * 1e6), _util.fmt(r["ratio"])] for r in report["rows"]])


def main(argv=None):
    p = _util.parser("Element-wise and reduction commands against NumPy", repeat=9)
    p.add_argument("--sizes", default=",".join(map(str, SIZES)),
                   help="comma-separated element counts")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    report = run(sizes, args.repeat, log=(lambda *a: None) if args.json else print)
    _util.publish(report, "ew", render, args.json)


if __name__ == "__main__":
    sys.exit(main())
