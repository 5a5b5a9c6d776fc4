"""ONNX GlobalAveragePool as nnc runs it: REDUCE_MEAN over H, W against AVG_POOL with the whole
image as its window (the loader's mapping before), one thread, side by side in one process.

    python -m benchmarks.global_pool [--json] [--repeat R]

Shapes: the last feature maps of ResNet-50 and MobileNet-V2 at 224 ([1, 7, 7, 2048],
[1, 7, 7, 1280]), Inception-V3 at 299 ([1, 8, 8, 2048]) and MobileNet-V2 at 96 ([1, 3, 3, 1280]),
float32 NHWC. Each is ``Backend.exec`` of the command's default backend on preallocated tensors,
timed in interleaved rounds (``_util.measure_interleaved``), each call repeated to take about a
millisecond; the median per call is reported with avg_pool / reduce_mean (above 1: REDUCE_MEAN is
faster) and the largest difference between the two results.
"""

import sys

import numpy as np

import nnc
from benchmarks import _util

SHAPES = ((1, 7, 7, 2048), (1, 8, 8, 2048), (1, 7, 7, 1280), (1, 3, 3, 1280))


def _call(cmd, x, y):
    backend = nnc.command_info(cmd.name).backends[0]
    return (lambda: backend.exec(cmd, [x], [y])), backend.name


def _loop(fn, n):
    def run():
        for _ in range(n):
            fn()
    return run


def run(repeat, log=print):
    rows = []
    rng = np.random.default_rng(0)
    for shape in SHAPES:
        x = nnc.Tensor(rng.standard_normal(shape).astype(np.float32))
        out = (shape[0], 1, 1, shape[3])
        y_pool, y_mean = (nnc.Tensor.empty(out, dtype="float32") for _ in range(2))
        pool, pool_backend = _call(nnc.Cmd("AVG_POOL", size=shape[1:3], stride=1), x, y_pool)
        mean, mean_backend = _call(nnc.Cmd("REDUCE_MEAN", axes=(1, 2)), x, y_mean)
        inner = max(1, 250_000 // x.size)
        s = _util.measure_interleaved({"avg_pool": _loop(pool, inner),
                                       "reduce_mean": _loop(mean, inner)}, repeat)
        t = {k: _util.median(v) / inner for k, v in s.items()}
        diff = float(np.abs(y_pool.numpy() - y_mean.numpy()).max())
        rows.append({"shape": list(shape), "avg_pool_s": t["avg_pool"],
                     "reduce_mean_s": t["reduce_mean"], "ratio": t["avg_pool"] / t["reduce_mean"],
                     "max_diff": diff, "backends": [pool_backend, mean_backend]})
        log(f"{shape}: AVG_POOL {t['avg_pool'] * 1e6:.1f} us, "
            f"REDUCE_MEAN {t['reduce_mean'] * 1e6:.1f} us")
    return {"rows": rows, "repeat": repeat}


def render(report):
    return _util.table(
        ["shape (NHWC)", "AVG_POOL (us)", "REDUCE_MEAN (us)", "avg_pool / reduce_mean",
         "max|diff|"],
        [["x".join(map(str, r["shape"])), _util.fmt(r["avg_pool_s"] * 1e6),
          _util.fmt(r["reduce_mean_s"] * 1e6), _util.fmt(r["ratio"]), _util.fmt(r["max_diff"])]
         for r in report["rows"]])


def main(argv=None):
    p = _util.parser("GlobalAveragePool: REDUCE_MEAN against a whole-image AVG_POOL", repeat=9)
    args = p.parse_args(argv)
    report = run(args.repeat, log=(lambda *a: None) if args.json else print)
    _util.publish(report, "global_pool", render, args.json)


if __name__ == "__main__":
    sys.exit(main())
