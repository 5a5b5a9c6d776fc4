"""Inception-V3's convolution shapes at one thread: nnc's CPU_OPT against a plain BLAS GEMM;
MobileNet-V2's, EfficientNet-B0's or ConvNeXt-T's depthwise layers against ONNX Runtime.

    python -m benchmarks.conv [--json] [--repeat R] [--size S] [--limit N] [--no-limits]
    python -m benchmarks.conv --depthwise [--net mobilenet_v2|efficientnet|convnext] [--json]
                              [--repeat R] [--limit N] [--no-limits]
    python -m benchmarks.conv --epilogue [--json] [--repeat R]
    python -m benchmarks.conv --few-pixel [--size S] [--threads T] [--json] [--repeat R]

For every distinct CONVOLUTION shape of nnc's Inception-V3 graph (``nnc.models.inception`` at
``--size``, default 299, batch 1, float32, NHWC), on preallocated contiguous tensors:

- ``conv``: the node's command pinned to CPU_OPT (the real backend, bias included) in a
  one-node graph whose weights are frozen (``Graph.freeze``), as ``nnc.models`` and
  ``nnc.onnx.load`` build networks: the packed copy of the weights is made on the first run and
  kept; with ``nnc.set_intra_op_threads(1)``;
- ``conv_unfrozen``: the same on weights that are not frozen, which CPU_OPT packs on every call;
- ``gemm``: ``nnc.base.openblas.gemm`` (the same single-threaded OpenBLAS the backend calls)
  on M x K by (N x K)^T, where M = output pixels, N = output channels, K = kh*kw*C/groups:
  the matrix product a convolution lowers to, without the lowering;
- ``winograd``: when a backend named ``CPU_OPT_WINOGRAD`` is registered, that backend on the
  3x3 stride-1 shapes (its GFLOP/s use the direct convolution's operation count, so they
  compare with the others as time does); its output is checked against CPU_OPT.

GFLOP/s = 2*M*N*K / time; time = the median of R interleaved rounds (``measure_interleaved``).
``conv / gemm`` is the lowering's cost against a plain GEMM: at least 80 % on every shape is
the target. A summary weights each shape by how often the network uses it. The report names
the kernel ISA CPU_OPT dispatched (``nnc.base.isa``).

Against the machine: before the shapes, ``benchmarks._limits.measure_limits`` measures in this
process the single-thread FMA peak (``nnc.base.isa.fma_gflops``), OpenBLAS's SGEMM peak (a large
square GEMM) and the memory bandwidth; each shape's ``of peak`` is its GFLOP/s over the FMA peak,
and so is the whole network's, which is also given over the SGEMM peak (``--no-limits`` skips
the measurement and the fractions).

``--depthwise``: MobileNet-V2's depthwise layers instead (224x224 input, batch 1, 3x3 windows,
padding 1, groups = C = O, bias), which move more bytes than they compute; with ``--net
efficientnet``, EfficientNet-B0's (3x3 and 5x5 windows, padding 1 and 2), with ``--net
convnext``, ConvNeXt-T's (7x7, padding 3). For each, at one
thread and in interleaved rounds: ``nnc``, the command pinned to CPU_OPT in a one-node graph
(as a network runs it: ``cmd_exec`` would add its Python checks, as long as the smallest layers
take), at the kernel ISA nnc dispatched, which the report names; ``ort``, ONNX Runtime when
installed: a one-node Conv with ``group`` = C on the same data in NCHW (its own layout), one
intra-op thread. The weights are frozen, as ``nnc.onnx.load`` and ``nnc.models`` freeze
them (their tap-by-tap copy is made once). Each is reported as GFLOP/s (2*k*k per output
element) and as effective GB/s:
the bytes a pass must move (input + output + weights + bias) over its time, against the
measured copy bandwidth (read + write, the same way of counting). One timed sample is as many
calls as take about a millisecond, so each runtime's per-call overhead is included but the
timer's resolution is not.

``--few-pixel``: Inception-V3's few-pixel layers in the network itself (``--size``, default 75:
the convolutions whose maps are 3x3 or 1x1, 66 of 94, which hold 83 of its 95 MB of weights and
compute little per weight), which stream their weights from memory as a run meets them. Each
round runs ``Graph.profile(1)`` (the nodes in a run's order, each timed, helpers spinning as in
a run) once at each thread count (1 and ``--threads``, default 2), interleaved; a node's time is
the median over the rounds. A layer's bytes are the packed weights its kernel must read (taps
that meet the image for at least one output pixel: a 3x3 over a 1x1 map reads its centre tap
only) plus the bias; GB/s = the layers' bytes over their summed time, against the read
bandwidth T threads reach at once (``_limits.read_bandwidth_gbs``), measured first in this
process. Target: at least 80 % of that bandwidth.
"""

import statistics
import sys
import time
from collections import OrderedDict

import numpy as np

import nnc
from benchmarks import _limits, _util
from nnc.base import isa
from nnc.base import openblas as cpu_blas

TARGET = 0.8
WINOGRAD = "CPU_OPT_WINOGRAD"
TOL_WINOGRAD = 1e-3   # max|winograd - CPU_OPT| / max|CPU_OPT|
TOL_ORT = 1e-4        # max|ort - nnc| / max|nnc| on the depthwise layers

# Depthwise layers at 224x224: (input size, channels, window, stride, how many).
DEPTHWISE = {
    "mobilenet_v2": [
        (112, 32, 3, 1, 1), (112, 96, 3, 2, 1), (56, 144, 3, 1, 1), (56, 144, 3, 2, 1),
        (28, 192, 3, 1, 2), (28, 192, 3, 2, 1), (14, 384, 3, 1, 4), (14, 576, 3, 1, 2),
        (14, 576, 3, 2, 1), (7, 960, 3, 1, 3)],
    "efficientnet": [
        (112, 32, 3, 1, 1), (112, 96, 3, 2, 1), (56, 144, 3, 1, 1), (56, 144, 5, 2, 1),
        (28, 240, 5, 1, 1), (28, 240, 3, 2, 1), (14, 480, 3, 1, 2), (14, 480, 5, 1, 1),
        (14, 672, 5, 1, 2), (14, 672, 5, 2, 1), (7, 1152, 5, 1, 3), (7, 1152, 3, 1, 1)],
    "convnext": [(56, 96, 7, 1, 3), (28, 192, 7, 1, 3), (14, 384, 7, 1, 9), (7, 768, 7, 1, 3)],
}
DEPTHWISE_NAMES = {"mobilenet_v2": "MobileNet-V2", "efficientnet": "EfficientNet-B0",
                   "convnext": "ConvNeXt-T"}


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
    # One-node graphs (cmd_exec would add its Python checks to every call): frozen weights as
    # networks have them, and a copy of them that is not frozen.
    g = nnc.Graph()
    g.exec(conv, [x, w, bias], [y])
    w_plain = nnc.Tensor(w.numpy().copy())
    y_plain = nnc.Tensor.zeros(s["out"], dtype="float32")
    g_plain = nnc.Graph()
    g_plain.exec(conv, [x, w_plain, bias], [y_plain])
    g.freeze([w])
    fns = {
        "conv": g.run,
        "conv_unfrozen": g_plain.run,
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
        "isa": isa.get_cpu_isa(),
        "network_gflops": {k: weighted(k) for k in ("conv", "conv_unfrozen", "gemm")},
        "limits": limits,
        "peak_gflops": peak,
        "sgemm_peak_gflops": _limits.peak_gflops(limits, 1, "sgemm"),
        "network_of_peak": {k: weighted(k) / peak for k in ("conv", "conv_unfrozen", "gemm")}
        if peak else None,
        "target": {"conv >= 80 % of gemm on every shape": not below, "below": below},
        "winograd_tolerance": TOL_WINOGRAD,
        "winograd_errors_ok": not bad_wino,
        "winograd_errors_bad": bad_wino,
    }


def render(r):
    head = ["shape (HxWxC kxk/stride -> out)", "x", "M", "N", "K", "conv GF/s", "unfrozen",
            "gemm GF/s", "conv/gemm"]
    if r["winograd"]:
        head += ["wino GF/s", "wino/conv"]
    if r["peak_gflops"]:
        head += ["conv/peak", "gemm/peak"]
    body = []
    for x in r["rows"]:
        g = x["gflops"]
        line = [x["shape"], x["count"], x["M"], x["N"], x["K"], _util.fmt(g["conv"]),
                _util.fmt(g["conv_unfrozen"]), _util.fmt(g["gemm"]),
                f"{100 * x['conv_vs_gemm']:.0f} %"]
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
           f"median of {r['repeat']}; nnc kernel ISA {r['isa']}; OpenBLAS (gemm column): "
           f"{r['machine']['nnc_blas']}",
           _limits.describe(r["limits"]) if r["limits"] else "limits: not measured (--no-limits)",
           _util.table(head, body),
           f"whole network (each shape x its count): conv {_util.fmt(net['conv'])} GFLOP/s "
           f"(unfrozen {_util.fmt(net['conv_unfrozen'])}), gemm {_util.fmt(net['gemm'])} GFLOP/s"
           + (f"; conv {100 * of['conv']:.0f} %, unfrozen {100 * of['conv_unfrozen']:.0f} %, "
              f"gemm {100 * of['gemm']:.0f} % of the 1-thread FMA peak; conv "
              f"{100 * r['network_gflops']['conv'] / r['sgemm_peak_gflops']:.0f} % of "
              f"OpenBLAS's SGEMM peak" if of else ""),
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


def _ort_depthwise(x, w, bias, stride):
    """An OrtRun of one Conv node with group = C on x (NHWC, as nnc holds it) made NCHW, or the
    reason there is none."""
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper

        from nnc.models.peers import OrtRun
    except ImportError as e:
        return None, f"not installed ({e.name})"
    c = x.shape[-1]
    x_nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    w_oihw = np.ascontiguousarray(w.transpose(0, 3, 1, 2))        # [C, 1, k, k]
    k = w.shape[1]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, kernel_shape=[k, k],
                            pads=[k // 2] * 4, strides=[stride, stride])
    graph = helper.make_graph(
        [node], "depthwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_nchw.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w_oihw, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = min(model.ir_version, onnx.IR_VERSION)
    return OrtRun(model, {"x": x_nchw}, intra_op=1), None


def _calls_per_sample(fn, seconds=1e-3):
    """How many calls of fn take about ``seconds`` (at least 1)."""
    fn()
    t0 = time.perf_counter()
    fn()
    return max(1, int(seconds / max(time.perf_counter() - t0, 1e-9)))


def measure_depthwise(size, c, k, stride, count, repeat, rng):
    ho = (size + 2 * (k // 2) - k) // stride + 1
    flop = 2.0 * ho * ho * c * k * k
    nbytes = 4 * (size * size * c + ho * ho * c + k * k * c + c)
    xa = rng.standard_normal((1, size, size, c)).astype(np.float32)
    wa = (rng.standard_normal((c, k, k, 1)) / k).astype(np.float32)
    ba = rng.standard_normal(c).astype(np.float32)
    x, w, bias = nnc.Tensor(xa), nnc.Tensor(wa), nnc.Tensor(ba)
    y = nnc.Tensor.zeros((1, ho, ho, c), dtype="float32")
    # A one-node graph, as a network runs the layer: cmd_exec would add its Python checks
    # (tens of microseconds, as much as the smallest layers take).
    g = nnc.Graph()
    g.exec(nnc.Cmd("CONVOLUTION", backend="CPU_OPT", stride=stride, padding=k // 2, groups=c),
           [x, w, bias], [y])
    g.freeze()
    one = {"nnc": g.run}
    ort, why = _ort_depthwise(xa, wa, ba, stride)
    err = None
    if ort is not None:
        one["ort"] = ort
        one["nnc"]()
        ort()
        want = y.numpy()
        got = ort.outputs[0].transpose(0, 2, 3, 1)
        err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
    calls = {k: _calls_per_sample(f) for k, f in one.items()}

    def batch(f, n):
        def run():
            for _ in range(n):
                f()
        return run

    samples = _util.measure_interleaved({k: batch(f, calls[k]) for k, f in one.items()},
                                        repeat)
    sec = {k: _util.median(v) / calls[k] for k, v in samples.items()}
    return {
        "shape": f"{size}x{size}x{c} {k}x{k}/{stride} p{k // 2} -> {ho}x{ho}x{c}",
        "count": count,
        "gflop": flop / 1e9, "mbytes": nbytes / 1e6,
        "ms": {k: v * 1e3 for k, v in sec.items()},
        "gflops": {k: flop / v / 1e9 for k, v in sec.items()},
        "gbs": {k: nbytes / v / 1e9 for k, v in sec.items()},
        "calls_per_sample": calls,
        "ort_rel_err": err, "ort": why or "ok",
    }


def run_depthwise(repeat, limit=None, seed=0, say=print, limits=True, net="mobilenet_v2"):
    """A network's depthwise layers (``net``: a key of DEPTHWISE; module docstring);
    ``limits`` as for ``run``."""

    layers = DEPTHWISE[net][:limit] if limit else DEPTHWISE[net]
    if limits is True:
        say("  measuring the machine's limits")
        limits = _limits.measure_limits(threads=(1,))
    limits = limits or None
    bandwidth = limits["bandwidth_gbs"]["copy"] if limits else None
    before = nnc.get_intra_op_threads()
    nnc.set_intra_op_threads(1)
    rng = np.random.default_rng(seed)
    rows = []
    try:
        for i, (size, c, k, stride, count) in enumerate(layers):
            rows.append(measure_depthwise(size, c, k, stride, count, repeat, rng))
            rows[-1]["of_bandwidth"] = {k: v / bandwidth for k, v in rows[-1]["gbs"].items()} \
                if bandwidth else None
            say(f"  {i + 1}/{len(layers)} {rows[-1]['shape']}")
    finally:
        nnc.set_intra_op_threads(before)

    def total(key):
        ms = [r["ms"].get(key) for r in rows]
        return None if None in ms else sum(m * r["count"] for m, r in zip(ms, rows))

    bad = [r["shape"] for r in rows if r["ort_rel_err"] is not None
           and not r["ort_rel_err"] <= TOL_ORT]
    return {
        "mode": "depthwise", "net": net, "repeat": repeat, "shapes": len(rows),
        "isa": isa.get_cpu_isa(),
        "rows": rows, "limits": limits, "bandwidth_gbs": bandwidth,
        "total_ms": {"nnc": total("nnc"), "ort": total("ort")},
        "ort_tolerance": TOL_ORT, "ort_errors_ok": not bad, "ort_errors_bad": bad,
    }


def render_depthwise(r):
    ort = any("ort" in x["ms"] for x in r["rows"])
    head = ["layer (HxWxC kxk/stride)", "x", "nnc ms", "nnc GF/s", "nnc GB/s"]
    if ort:
        head += ["ort ms", "ort GF/s", "ort GB/s", "nnc/ort"]
    if r["bandwidth_gbs"]:
        head += ["nnc/bw"] + (["ort/bw"] if ort else [])
    body = []
    for x in r["rows"]:
        line = [x["shape"], x["count"], _util.fmt(x["ms"]["nnc"]),
                _util.fmt(x["gflops"]["nnc"]), _util.fmt(x["gbs"]["nnc"])]
        if ort:
            o = "ort" in x["ms"]
            line += [_util.fmt(x["ms"].get("ort")), _util.fmt(x["gflops"].get("ort")),
                     _util.fmt(x["gbs"].get("ort")),
                     f"{x['ms']['nnc'] / x['ms']['ort']:.2f}" if o else "—"]
        if r["bandwidth_gbs"]:
            line += [f"{100 * x['of_bandwidth']['nnc']:.0f} %"]
            if ort:
                line += [f"{100 * x['of_bandwidth']['ort']:.0f} %" if "ort" in x["gbs"]
                         else "—"]
        body.append(line)
    t = r["total_ms"]
    why = r["rows"][0]["ort"] if r["rows"] else "ok"
    name = DEPTHWISE_NAMES[r.get("net", "mobilenet_v2")]
    out = [f"{name} 224 depthwise layers, 1 thread, float32, bias, frozen weights, median of "
           f"{r['repeat']} interleaved rounds; nnc kernel ISA {r['isa']}; nnc NHWC, "
           f"onnxruntime NCHW" + ("" if ort else f" (onnxruntime {why})"),
           _limits.describe(r["limits"]) if r["limits"] else "limits: not measured (--no-limits)",
           _util.table(head, body),
           f"all depthwise layers (each x its count): nnc {_util.fmt(t['nnc'])} ms"
           + (f", onnxruntime {_util.fmt(t['ort'])} ms, nnc/ort {t['nnc'] / t['ort']:.2f}"
              if t["ort"] else "")]
    if ort:
        out.append(f"onnxruntime within {TOL_ORT:g} of nnc: " + (
            "pass" if r["ort_errors_ok"] else "FAIL on " + "; ".join(r["ort_errors_bad"])))
    return "\n".join(out)


# MobileNet-V3 (large, 224) layers whose output goes through HardSwish: (H, C in, C out, kernel,
# groups); the 1x1 expansions and the depthwise 3x3 after them.
MOBILENET_V3_HSWISH = [(28, 40, 240, 1, 1), (14, 80, 200, 1, 1), (14, 200, 200, 3, 200),
                       (14, 112, 672, 1, 1), (7, 160, 960, 1, 1), (7, 960, 960, 3, 960)]


def run_epilogue(repeat, seed=0, say=print):
    """Each MOBILENET_V3_HSWISH layer (with bias, frozen weights, 1 thread) as one fused node
    (activation="hard_swish" / "swish", what Graph.simplify makes) against the convolution then
    the in-place HARD_SWISH / SWISH node, interleaved; the fused output must equal the unfused
    bit for bit (the epilogue runs the element-wise command's function)."""
    before = nnc.get_intra_op_threads()
    nnc.set_intra_op_threads(1)
    rng = np.random.default_rng(seed)
    rows = []
    try:
        for hw, c, o, k, groups in MOBILENET_V3_HSWISH:
            x = nnc.Tensor(rng.standard_normal((1, hw, hw, c)).astype(np.float32))
            w = nnc.Tensor((rng.standard_normal((o, k, k, c // groups))
                            / np.sqrt(k * k * c / groups)).astype(np.float32))
            b = nnc.Tensor(rng.standard_normal(o).astype(np.float32))
            runs, outs = {}, {}
            for act, name in (("hard_swish", "HARD_SWISH"), ("swish", "SWISH")):
                for fused in (True, False):
                    y = nnc.Tensor.zeros((1, hw, hw, o), dtype="float32")
                    g = nnc.Graph()
                    conv = g.exec(nnc.Cmd("CONVOLUTION", padding=k // 2, groups=groups,
                                          activation=act if fused else None), [x, w, b], [y])
                    if not fused:
                        g.concat(conv, g.exec(nnc.Cmd(name), [y], [y]))
                    g.freeze()
                    key = f"{act} {'fused' if fused else 'unfused'}"
                    runs[key], outs[key] = g.run, y
            for f in runs.values():
                f()
            same = all(np.array_equal(outs[f"{a} fused"].numpy(), outs[f"{a} unfused"].numpy())
                       for a in ("hard_swish", "swish"))
            calls = {k_: _calls_per_sample(f) for k_, f in runs.items()}

            def batch(f, n):
                def run():
                    for _ in range(n):
                        f()
                return run

            samples = _util.measure_interleaved(
                {k_: batch(f, calls[k_]) for k_, f in runs.items()}, repeat)
            rows.append({"shape": f"{hw}x{hw}x{c} {k}x{k} g{groups} -> {o}", "same_bits": same,
                         "ms": {k_: _util.median(v) / calls[k_] * 1e3
                                for k_, v in samples.items()}})
            say(f"  {rows[-1]['shape']}")
    finally:
        nnc.set_intra_op_threads(before)
    return {"mode": "epilogue", "repeat": repeat, "isa": isa.get_cpu_isa(), "rows": rows,
            "same_bits": all(r["same_bits"] for r in rows)}


def render_epilogue(r):
    head = ["MobileNet-V3 layer", "hswish fused ms", "unfused ms", "fused/unfused",
            "swish fused ms", "unfused ms", "fused/unfused", "same bits"]
    body = []
    for x in r["rows"]:
        m = x["ms"]
        line = [x["shape"]]
        for a in ("hard_swish", "swish"):
            line += [_util.fmt(m[f"{a} fused"]), _util.fmt(m[f"{a} unfused"]),
                     f"{m[f'{a} fused'] / m[f'{a} unfused']:.2f}"]
        body.append(line + ["yes" if x["same_bits"] else "NO"])
    return "\n".join([f"Fused HardSwish / SiLU epilogues, 1 thread, float32, frozen weights, "
                      f"median of {r['repeat']} interleaved rounds; nnc kernel ISA {r['isa']}",
                      _util.table(head, body)])


FEW_PIXELS = 9          # a few-pixel layer's output pixels at most (3x3 maps and smaller)
FEW_TARGET = 0.8        # of the read bandwidth at the same thread count


def _taps_read(x_shape, w_shape, out_shape, stride, pad):
    """How many of a convolution's kh*kw taps meet the image for at least one output pixel
    (the taps its kernel reads weights for: the others only ever see the padding)."""
    _, h, wd, _ = x_shape
    _, kh, kw, _ = w_shape
    _, ho, wo, _ = out_shape

    def hits(k, size, n_out, s, p):
        return sum(any(0 <= o * s - p + i < size for o in range(n_out)) for i in range(k))

    return hits(kh, h, ho, stride[0], pad[0]) * hits(kw, wd, wo, stride[1], pad[1])


def run_few_pixel(size, repeat, threads=2, seed=0, say=print):
    """Inception-V3's few-pixel layers at ``size`` (module docstring); ``threads``: the second
    thread count (the first is 1)."""
    from nnc.models.inception import build_inception_v3_model

    counts = [1] if threads <= 1 else [1, int(threads)]
    say("  measuring the read bandwidth at " + " and ".join(map(str, counts)) + " threads")
    bandwidth = {t: _limits.read_bandwidth_gbs(t) for t in counts}
    m = build_inception_v3_model(size=size, seed=seed)
    g = m.graph
    before = nnc.get_intra_op_threads()
    times = {t: {} for t in counts}
    try:
        for t in counts:
            nnc.set_intra_op_threads(t)
            g.run()
            g.run()
        for r in range(repeat):
            for t in counts:
                nnc.set_intra_op_threads(t)
                for e, sec in g.profile(1):
                    times[t].setdefault(e.index, []).append(sec)
            say(f"  round {r + 1}/{repeat}")
    finally:
        nnc.set_intra_op_threads(before)
    layers = []
    for e in g.topsort():
        if e.cmd.name != "CONVOLUTION":
            continue
        x, w, out = e.inputs[0], e.inputs[1], e.outputs[0]
        n, ho, wo, o = out.shape
        if ho * wo > FEW_PIXELS:
            continue
        p = e.cmd.params
        taps = _taps_read(x.shape, w.shape, out.shape, p["stride"], p["padding"])
        o, kh, kw, cg = w.shape
        layers.append({
            "name": e.name, "pixels": n * ho * wo, "taps": taps, "window": kh * kw,
            "weight_bytes": o * kh * kw * cg * 4, "read_bytes": (o * taps * cg + o) * 4,
            "us": {str(t): statistics.median(times[t][e.index]) * 1e6 for t in counts},
        })
    network = {str(t): sum(statistics.median(v) for v in times[t].values()) * 1e3
               for t in counts}
    total = {}
    for t in counts:
        sec = sum(x["us"][str(t)] for x in layers) / 1e6
        read = sum(x["read_bytes"] for x in layers)
        gbs = read / sec / 1e9 if sec else None
        total[str(t)] = {"ms": sec * 1e3, "gbs": gbs, "bandwidth_gbs": bandwidth[t],
                         "of_bandwidth": gbs / bandwidth[t] if gbs else None}
    return {
        "mode": "few_pixel", "size": size, "repeat": repeat, "threads": counts,
        "isa": isa.get_cpu_isa(), "few_pixels": FEW_PIXELS, "target": FEW_TARGET,
        "layers": layers, "network_ms": network, "total": total,
        "weight_bytes": sum(x["weight_bytes"] for x in layers),
        "read_bytes": sum(x["read_bytes"] for x in layers),
        "met": all(v["of_bandwidth"] is not None and v["of_bandwidth"] >= FEW_TARGET
                   for k, v in total.items() if k != "1" or len(counts) == 1),
    }


def render_few_pixel(r):
    counts = r["threads"]
    blocks = OrderedDict()
    for x in r["layers"]:
        b = blocks.setdefault(x["name"].split("/")[0], {"n": 0, "read": 0, "us": {}})
        b["n"] += 1
        b["read"] += x["read_bytes"]
        for t in counts:
            b["us"][t] = b["us"].get(t, 0.0) + x["us"][str(t)]
    head = ["block", "layers", "MB read"]
    for t in counts:
        head += [f"{t}T us", f"{t}T GB/s"]
    body = []
    for name, b in blocks.items():
        line = [name, b["n"], f"{b['read'] / 1e6:.2f}"]
        for t in counts:
            line += [f"{b['us'][t]:.0f}", f"{b['read'] / b['us'][t] / 1e3:.1f}"]
        body.append(line)
    out = [f"Inception-V3 {r['size']}x{r['size']}: its {len(r['layers'])} convolutions of at most "
           f"{r['few_pixels']} output pixels in the network's run (Graph.profile, medians of "
           f"{r['repeat']} interleaved rounds); nnc kernel ISA {r['isa']}; weights "
           f"{r['weight_bytes'] / 1e6:.1f} MB, of which the kernels read "
           f"{r['read_bytes'] / 1e6:.1f} MB (taps that meet the image)",
           _util.table(head, body)]
    for t in counts:
        v = r["total"][str(t)]
        out.append(f"{t} thread{'s' if t > 1 else ''}: {v['ms']:.2f} ms, "
                   f"{_util.fmt(v['gbs'])} GB/s = {100 * v['of_bandwidth']:.0f} % of the "
                   f"{_util.fmt(v['bandwidth_gbs'])} GB/s {t} thread{'s' if t > 1 else ''} read "
                   f"(whole network's nodes {r['network_ms'][str(t)]:.2f} ms)")
    out.append(f"target: >= {100 * r['target']:.0f} % of the read bandwidth at "
               f"{counts[-1]} threads: {'met' if r['met'] else 'MISSED'}")
    return "\n".join(out)


def main(argv=None):
    p = _util.parser("Inception-V3 convolution shapes: CPU_OPT vs plain GEMM", repeat=7)
    p.add_argument("--size", type=int, default=None,
                   help="Inception-V3 input size (>= 75; default 299, 75 with --few-pixel)")
    p.add_argument("--limit", type=int, default=None, help="only the first N shapes")
    p.add_argument("--no-limits", action="store_true",
                   help="skip measuring the machine's peaks and bandwidth (a few seconds)")
    p.add_argument("--depthwise", action="store_true",
                   help="a network's depthwise layers against ONNX Runtime instead")
    p.add_argument("--net", choices=sorted(DEPTHWISE), default="mobilenet_v2",
                   help="whose depthwise layers (with --depthwise; default mobilenet_v2)")
    p.add_argument("--epilogue", action="store_true",
                   help="MobileNet-V3 layers: fused HardSwish / SiLU against a separate node")
    p.add_argument("--few-pixel", action="store_true",
                   help="Inception-V3's 3x3 and 1x1 maps in the network: weights streamed "
                        "against the read bandwidth (--size defaults to 75)")
    p.add_argument("--threads", type=int, default=2,
                   help="with --few-pixel: the thread count beside 1 (default 2)")
    a = p.parse_args(argv)
    if a.size is None:
        a.size = 75 if a.few_pixel else 299
    if a.few_pixel:
        if a.size < 75 or a.repeat < 1 or a.threads < 1:
            p.error("--size must be at least 75, --repeat and --threads at least 1")
        say = (lambda *x: print(*x, file=sys.stderr)) if a.json else print
        report = run_few_pixel(a.size, a.repeat, a.threads, say=say)
        _util.publish(report, "conv", render_few_pixel, a.json)
        return 0
    if a.size < 75 or a.repeat < 1 or (a.limit is not None and a.limit < 1):
        p.error("--size must be at least 75, --repeat and --limit at least 1")
    say = (lambda *x: print(*x, file=sys.stderr)) if a.json else print
    if a.epilogue:
        report = run_epilogue(a.repeat, say=say)
        _util.publish(report, "conv", render_epilogue, a.json)
        return 0 if report["same_bits"] else 1
    if a.depthwise:
        report = run_depthwise(a.repeat, a.limit, say=say, limits=not a.no_limits, net=a.net)
        _util.publish(report, "conv", render_depthwise, a.json,
                      packages=("numpy", "onnxruntime"))
        return 0 if report["ort_errors_ok"] else 1
    report = run(a.size, a.repeat, a.limit, say=say, limits=not a.no_limits)
    _util.publish(report, "conv", render, a.json)
    return 0 if report["winograd_errors_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
