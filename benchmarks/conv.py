"""Inception-V3's convolution shapes at one thread: nnc's CPU_OPT against a plain BLAS GEMM.

    python -m benchmarks.conv [--json] [--repeat R] [--size S] [--limit N] [--no-limits]

For every distinct CONVOLUTION shape of nnc's Inception-V3 graph (``nnc.models.inception`` at
``--size``, default 299, batch 1, float32, NHWC), on preallocated contiguous tensors:

- ``conv``: ``nnc.cmd_exec`` of the node's command pinned to CPU_OPT (the real backend, bias
  included, as the graph runs it), with ``nnc.set_intra_op_threads(1)``;
- ``gemm``: ``nnc.base.openblas.gemm`` (the same single-threaded OpenBLAS the backend calls)
  on M x K by (N x K)^T, where M = output pixels, N = output channels, K = kh*kw*C/groups:
  the matrix product a convolution lowers to, without the lowering;
- ``winograd``: when a backend named ``CPU_OPT_WINOGRAD`` is registered, that backend on the
  3x3 stride-1 shapes (its GFLOP/s use the direct convolution's operation count, so they
  compare with the others as time does); its output is checked against CPU_OPT.

GFLOP/s = 2*M*N*K / time; time = the median of R interleaved rounds (``measure_interleaved``).
``conv / gemm`` is the issue-14 target: at least 80 % on every shape. A summary weights each
shape by how often the network uses it.

Against the machine: before the shapes, ``benchmarks._limits.measure_limits`` measures in this
process the single-thread SGEMM peak (a large square GEMM through the same OpenBLAS) and the
memory bandwidth; each shape's ``of peak`` is its GFLOP/s over that peak, and so is the whole
network's (``--no-limits`` skips the measurement and the fractions).
"""

import sys
from collections import OrderedDict

import numpy as np

import nnc
from benchmarks import _limits, _util
from nnc.base import openblas as cpu_blas

TARGET = 0.8
WINOGRAD = "CPU_OPT_WINOGRAD"
TOL_WINOGRAD = 1e-3   # max|winograd - CPU_OPT| / max|CPU_OPT|


def conv_shapes(size):
    """Distinct convolution shapes of Inception-V3 at ``size``, in graph order, with counts."""
    from nnc.models.inception import build_inception_v3_model

    m = build_inception_v3_model(size=size)
    shapes = OrderedDict()
    for e in m.graph.topsort():
        if e.cmd.name != "CONVOLUTION":
            continue
        x, w = e.inputs[0], e.inputs[1]
        p = e.cmd.params
        key = (tuple(x.shape), tuple(w.shape), tuple(p["stride"]), tuple(p["padding"]),
               p["groups"], tuple(e.outputs[0].shape))
        if key in shapes:
            shapes[key]["count"] += 1
        else:
            shapes[key] = {"first": e.name, "count": 1}
    return [dict(x=k[0], w=k[1], stride=k[2], padding=k[3], groups=k[4], out=k[5], **v)
            for k, v in shapes.items()]


def _describe(s):
    n, h, w, c = s["x"]
    o, kh, kw, _ = s["w"]
    sh, sw = s["stride"]
    t, left, b, r = s["padding"]
    pad = "" if not any(s["padding"]) else f" p{t},{left},{b},{r}"
    return f"{h}x{w}x{c} {kh}x{kw}/{sh}{pad} -> {s['out'][1]}x{s['out'][2]}x{o}"


def measure_shape(s, repeat, rng):
    n, ho, wo, o = s["out"]
    _, kh, kw, cg = s["w"]
    m, k = n * ho * wo, kh * kw * cg
    flop = 2.0 * m * o * k
    x = nnc.Tensor(rng.standard_normal(s["x"]).astype(np.float32))
    w = nnc.Tensor((rng.standard_normal(s["w"]) / np.sqrt(k)).astype(np.float32))
    bias = nnc.Tensor(rng.standard_normal(o).astype(np.float32))
    y = nnc.Tensor.zeros(s["out"], dtype="float32")
    params = dict(stride=s["stride"], padding=s["padding"], groups=s["groups"])
    conv = nnc.Cmd("CONVOLUTION", backend="CPU_OPT", **params)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((o, k)).astype(np.float32)
    c = np.zeros((m, o), np.float32)
    fns = {
        "conv": lambda: nnc.cmd_exec(conv, [x, w, bias], [y]),
        "gemm": lambda: cpu_blas.gemm(a, b, c, trans_b=True),
    }
    wino_err = None
    if WINOGRAD in nnc.backends("CONVOLUTION") and s["w"][1:3] == (3, 3) \
            and s["stride"] == (1, 1) and s["groups"] == 1:
        wcmd = nnc.Cmd("CONVOLUTION", backend=WINOGRAD, **params)
        yw = nnc.Tensor.zeros(s["out"], dtype="float32")
        nnc.cmd_exec(conv, [x, w, bias], [y])
        nnc.cmd_exec(wcmd, [x, w, bias], [yw])
        want = y.numpy()
        wino_err = float(np.abs(yw.numpy() - want).max() / max(np.abs(want).max(), 1e-30))
        fns["winograd"] = lambda: nnc.cmd_exec(wcmd, [x, w, bias], [yw])
    samples = _util.measure_interleaved(fns, repeat)
    sec = {k: _util.median(v) for k, v in samples.items()}
    gflops = {k: flop / v / 1e9 for k, v in sec.items()}
    return {
        "shape": _describe(s), "first": s["first"], "count": s["count"],
        "M": m, "N": o, "K": k, "gflop": flop / 1e9,
        "ms": {k: v * 1e3 for k, v in sec.items()},
        "gflops": gflops,
        "conv_vs_gemm": gflops["conv"] / gflops["gemm"],
        "winograd_vs_conv": gflops["winograd"] / gflops["conv"] if "winograd" in gflops
        else None,
        "winograd_rel_err": wino_err,
    }


def run(size, repeat, limit=None, seed=0, say=print, limits=True):
    """``limits``: True to measure the machine's limits first, False for none, or a dict
    ``_limits.measure_limits`` returned (tests pass a quick one)."""
    shapes = conv_shapes(size)
    if limit:
        shapes = shapes[:limit]
    if limits is True:
        say("  measuring the machine's limits")
        limits = _limits.measure_limits(threads=(1,))
    limits = limits or None
    peak = _limits.peak_gflops(limits, 1)
    before = nnc.get_intra_op_threads()
    nnc.set_intra_op_threads(1)
    rng = np.random.default_rng(seed)
    rows = []
    try:
        for i, s in enumerate(shapes):
            rows.append(measure_shape(s, repeat, rng))
            rows[-1]["of_peak"] = {k: v / peak for k, v in rows[-1]["gflops"].items()} \
                if peak else None
            say(f"  {i + 1}/{len(shapes)} {rows[-1]['shape']}")
    finally:
        nnc.set_intra_op_threads(before)

    def weighted(key):
        # network-level GFLOP/s: total work over total time, each shape as often as it is used
        flop = sum(r["gflop"] * r["count"] for r in rows)
        ms = sum(r["ms"][key] * r["count"] for r in rows)
        return flop / ms * 1e3 if ms else None

    wino = [r for r in rows if r["winograd_vs_conv"] is not None]
    bad_wino = [r["shape"] for r in wino if r["winograd_rel_err"] > TOL_WINOGRAD]
    below = [r["shape"] for r in rows if r["conv_vs_gemm"] < TARGET]
    return {
        "size": size, "repeat": repeat, "shapes": len(rows),
        "winograd": WINOGRAD in nnc.backends("CONVOLUTION"),
        "rows": rows,
        "network_gflops": {"conv": weighted("conv"), "gemm": weighted("gemm")},
        "limits": limits,
        "peak_gflops": peak,
        "network_of_peak": {k: weighted(k) / peak for k in ("conv", "gemm")} if peak
        else None,
        "target": {"conv >= 80 % of gemm on every shape": not below, "below": below},
        "winograd_tolerance": TOL_WINOGRAD,
        "winograd_errors_ok": not bad_wino,
        "winograd_errors_bad": bad_wino,
    }


def render(r):
    head = ["shape (HxWxC kxk/stride -> out)", "x", "M", "N", "K", "conv GF/s", "gemm GF/s",
            "conv/gemm"]
    if r["winograd"]:
        head += ["wino GF/s", "wino/conv"]
    if r["peak_gflops"]:
        head += ["conv/peak", "gemm/peak"]
    body = []
    for x in r["rows"]:
        g = x["gflops"]
        line = [x["shape"], x["count"], x["M"], x["N"], x["K"], _util.fmt(g["conv"]),
                _util.fmt(g["gemm"]), f"{100 * x['conv_vs_gemm']:.0f} %"]
        if r["winograd"]:
            line += [_util.fmt(g.get("winograd")),
                     "—" if x["winograd_vs_conv"] is None else f"{x['winograd_vs_conv']:.2f}x"]
        if r["peak_gflops"]:
            line += [f"{100 * x['of_peak']['conv']:.0f} %", f"{100 * x['of_peak']['gemm']:.0f} %"]
        body.append(line)
    net = r["network_gflops"]
    t = r["target"]
    of = r["network_of_peak"]
    out = [f"Inception-V3 {r['size']}x{r['size']} convolutions, 1 thread, float32 NHWC, "
           f"median of {r['repeat']}; nnc BLAS: {r['machine']['nnc_blas']}",
           _limits.describe(r["limits"]) if r["limits"] else "limits: not measured (--no-limits)",
           _util.table(head, body),
           f"whole network (each shape x its count): conv {_util.fmt(net['conv'])} GFLOP/s, "
           f"gemm {_util.fmt(net['gemm'])} GFLOP/s"
           + (f"; {100 * of['conv']:.0f} % and {100 * of['gemm']:.0f} % of the 1-thread peak"
              if of else ""),
           f"target conv >= {100 * TARGET:.0f} % of gemm on every shape: "
           + ("pass" if t["conv >= 80 % of gemm on every shape"]
              else f"FAIL on {len(t['below'])}: " + "; ".join(t["below"]))]
    if r["winograd"]:
        out.append(f"{WINOGRAD} within {TOL_WINOGRAD:g} of CPU_OPT: "
                   + ("pass" if r["winograd_errors_ok"]
                      else "FAIL on " + "; ".join(r["winograd_errors_bad"])))
    else:
        out.append(f"{WINOGRAD}: not registered")
    return "\n".join(out)


def main(argv=None):
    p = _util.parser("Inception-V3 convolution shapes: CPU_OPT vs plain GEMM", repeat=7)
    p.add_argument("--size", type=int, default=299, help="Inception-V3 input size (>= 75)")
    p.add_argument("--limit", type=int, default=None, help="only the first N shapes")
    p.add_argument("--no-limits", action="store_true",
                   help="skip measuring the machine's SGEMM peak and bandwidth (a few seconds)")
    a = p.parse_args(argv)
    if a.size < 75 or a.repeat < 1 or (a.limit is not None and a.limit < 1):
        p.error("--size must be at least 75, --repeat and --limit at least 1")
    say = (lambda *x: print(*x, file=sys.stderr)) if a.json else print
    report = run(a.size, a.repeat, a.limit, say=say, limits=not a.no_limits)
    _util.publish(report, "conv", render, a.json)
    return 0 if report["winograd_errors_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
