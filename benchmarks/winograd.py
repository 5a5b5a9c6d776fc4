"""CONVOLUTION's CPU_OPT (im2col + GEMM) against CPU_OPT_WINOGRAD on Inception-V3's 3x3 stride-1
shapes, side by side in one process.

    python -m benchmarks.winograd [--json] [--repeat R] [--threads T] [--dtype float32]

Each backend runs as the one node of its own graph (``g.run()``, so each keeps its workspace
from run to run, as in a model), pinned by name, on the same preallocated tensors, batch 1,
``nnc.set_intra_op_threads(T)`` (default 1). Timed in interleaved rounds
(``_util.measure_interleaved``); the median per run is reported, with GFLOP/s counted as a
direct convolution's 2 * Ho * Wo * O * 9 * C and im2col / winograd (above 1: Winograd is
faster). ``err`` is Winograd's largest error against a float64 CPU_REF, in units of the
tolerance docs/commands.md states for CPU_OPT (9 C eps |x|max |w|max): the extra factor
Winograd costs in accuracy on these shapes (normal random data).

Shapes: Inception-V3 at 299x299 (Conv2d_2a, Conv2d_2b, Conv2d_4a, the 35x35 branch3x3dbl
convolutions, Mixed_7b/7c's 8x8 branch3x3dbl_2) and Conv2d_4a at 75x75 input (17x17).
"""

import sys

import numpy as np

import nnc
from benchmarks import _util
from nnc.cmd.convolution import conv_shape

# (name, H, W, C, O, padding)
SHAPES = (
    ("Conv2d_2a 149x149x32->32 p0", 149, 149, 32, 32, 0),
    ("Conv2d_2b 147x147x32->64 p1", 147, 147, 32, 64, 1),
    ("Conv2d_4a 73x73x80->192 p0", 73, 73, 80, 192, 0),
    ("Mixed_5b 35x35x64->96 p1", 35, 35, 64, 96, 1),
    ("Mixed_5b 35x35x96->96 p1", 35, 35, 96, 96, 1),
    ("Conv2d_4a@75 17x17x80->192 p0", 17, 17, 80, 192, 0),
    ("Mixed_7b 8x8x448->384 p1", 8, 8, 448, 384, 1),
)
BACKENDS = ("CPU_OPT", "CPU_OPT_WINOGRAD")


def _graph(backend, padding, x, w, b, y):
    g = nnc.Graph()
    g.exec(nnc.Cmd("CONVOLUTION", padding=padding, backend=backend), [x, w, b], [y])
    return g


def _error(x, w, b, padding, got):
    """Largest |got - CPU_REF in float64| over 9 C eps |x|max |w|max."""
    want = np.zeros(got.shape)
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", padding=padding, backend="CPU_REF"),
                 [x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)], [want])
    scale = 9 * x.shape[-1] * float(np.finfo(got.dtype).eps) * np.abs(x).max() * np.abs(w).max()
    return float(np.abs(got - want).max() / scale)


def run(repeat, threads, dtype, log=print):
    rows = []
    rng = np.random.default_rng(0)
    nnc.set_intra_op_threads(threads)
    try:
        for name, h, wd, c, o, pad in SHAPES:
            x = rng.standard_normal((1, h, wd, c)).astype(dtype)
            w = (rng.standard_normal((o, 3, 3, c)) / np.sqrt(9 * c)).astype(dtype)
            b = rng.standard_normal(o).astype(dtype)
            shape = conv_shape(nnc.Cmd("CONVOLUTION", padding=pad), x.shape, w.shape)
            outs = {k: np.zeros(shape, dtype) for k in BACKENDS}
            graphs = {k: _graph(k, pad, x, w, b, outs[k]) for k in BACKENDS}
            samples = _util.measure_interleaved({k: g.run for k, g in graphs.items()}, repeat)
            t = {k: _util.median(v) for k, v in samples.items()}
            flops = 2.0 * shape[1] * shape[2] * o * 9 * c
            row = {"shape": name, "dtype": dtype, "threads": threads,
                   "im2col_s": t["CPU_OPT"], "winograd_s": t["CPU_OPT_WINOGRAD"],
                   "im2col_gflops": flops / t["CPU_OPT"] / 1e9,
                   "winograd_gflops": flops / t["CPU_OPT_WINOGRAD"] / 1e9,
                   "ratio": t["CPU_OPT"] / t["CPU_OPT_WINOGRAD"],
                   "err": _error(x, w, b, pad, outs["CPU_OPT_WINOGRAD"]),
                   "err_im2col": _error(x, w, b, pad, outs["CPU_OPT"])}
            rows.append(row)
            log(f"{name}: im2col {row['im2col_s'] * 1e3:.3f} ms, winograd "
                f"{row['winograd_s'] * 1e3:.3f} ms, ratio {row['ratio']:.2f}, "
                f"err {row['err']:.3f} (im2col {row['err_im2col']:.3f})")
    finally:
        nnc.set_intra_op_threads(None)
    return {"rows": rows, "repeat": repeat, "threads": threads, "dtype": dtype}


def render(report):
    return _util.table(
        ["shape", "im2col (ms)", "winograd (ms)", "im2col GFLOP/s", "winograd GFLOP/s",
         "im2col / winograd", "err winograd", "err im2col"],
        [[r["shape"], _util.fmt(r["im2col_s"] * 1e3), _util.fmt(r["winograd_s"] * 1e3),
          _util.fmt(r["im2col_gflops"]), _util.fmt(r["winograd_gflops"]), _util.fmt(r["ratio"]),
          _util.fmt(r["err"]), _util.fmt(r["err_im2col"])] for r in report["rows"]])


def main(argv=None):
    p = _util.parser("CONVOLUTION: im2col (CPU_OPT) against Winograd (CPU_OPT_WINOGRAD)",
                     repeat=9)
    p.add_argument("--threads", type=int, default=1, help="nnc.set_intra_op_threads")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    args = p.parse_args(argv)
    report = run(args.repeat, args.threads, args.dtype,
                 log=(lambda *a: None) if args.json else print)
    _util.publish(report, "winograd", render, args.json)


if __name__ == "__main__":
    sys.exit(main())
