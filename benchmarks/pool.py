"""Inception-V3's pools at one thread: nnc's MAX_POOL / AVG_POOL against ONNX Runtime's.

    python -m benchmarks.pool [--json] [--repeat R] [--size S] [--limit N] [--isa ISA]
                              [--no-limits]

For every distinct MAX_POOL / AVG_POOL shape of nnc's Inception-V3 graph (``nnc.models.inception``
at ``--size``, default 299, batch 1, float32), on the same random input:

- ``nnc``: ``Backend.exec`` of CPU_OPT (pool_kernel.h for float32, at the ISA ``--isa`` names,
  default the detected one) on 64-byte aligned NHWC tensors, as the graph allocates them, with
  ``nnc.set_intra_op_threads(1)``; each sample calls it enough times to take ~1 ms;
- ``ort_nchwc``: ONNX Runtime's pool kernel as its Inception-V3 runs it: a one-node NCHW model
  at the default optimisation level, which puts the pool in ORT's blocked NCHWc layout between
  two reorders; only the pool node's time counts (ORT's profiler, per run, in microseconds);
- ``ort_nchw``: the same node at ``ORT_ENABLE_EXTENDED`` (no layout change): ORT's plain NCHW
  pool, timed the same way.

ORT runs with one intra-op and one inter-op thread. The three are timed in interleaved rounds
(``_util.measure_interleaved``), ORT called as many times a sample as nnc; each result is
the median per call. GB/s = (input bytes read +
output bytes written) / time, each byte once: what a pool at memory speed moves. Against the
machine: ``_limits.bandwidth_gbs`` measures one thread's copy bandwidth (read + written) in this
process first; ``of memory`` is each GB/s over it (above 1: the data came from the caches, as it
does when one layer is run again and again). Outputs are checked: nnc's max equals ORT's exactly,
its average within 1e-5.
"""

import json
import os
import sys
import tempfile
from collections import OrderedDict

import numpy as np

import nnc
from benchmarks import _limits, _util
from nnc.base import isa as cpu_isa

TOL_AVG = 1e-5
# Each sample calls a backend this long (calls counted from nnc's first time): long enough
# that one descheduling on a shared machine, or a cold first call, is a small part of it.
SAMPLE_SECONDS = 2e-3


def pool_shapes(size):
    """Distinct pool shapes of Inception-V3 at ``size``, in graph order, with counts."""
    from nnc.models.inception import build_inception_v3_model

    m = build_inception_v3_model(size=size)
    shapes = OrderedDict()
    for e in m.graph.topsort():
        if e.cmd.name not in ("MAX_POOL", "AVG_POOL"):
            continue
        p = e.cmd.params
        key = (e.cmd.name, tuple(e.inputs[0].shape), tuple(p["size"]), tuple(p["stride"]),
               tuple(p["padding"]), bool(p.get("count_include_pad", False)),
               tuple(e.outputs[0].shape))
        if key in shapes:
            shapes[key]["count"] += 1
        else:
            shapes[key] = {"first": e.name, "count": 1}
    return [dict(kind=k[0], x=k[1], size=k[2], stride=k[3], padding=k[4], include_pad=k[5],
                 out=k[6], **v) for k, v in shapes.items()]


def _describe(s):
    _, h, w, c = s["x"]
    kh, kw = s["size"]
    t, left, b, r = s["padding"]
    pad = f" p{t},{left},{b},{r}" if any(s["padding"]) else ""
    name = "max" if s["kind"] == "MAX_POOL" else "avg"
    return (f"{name} {h}x{w}x{c} {kh}x{kw}/{s['stride'][0]}{pad} -> "
            f"{s['out'][1]}x{s['out'][2]}")


def _ort_session(s, level, profile_prefix):
    """A one-node ONNX model of shape s (NCHW) at optimisation ``level``, profiled into files
    named from ``profile_prefix`` (one per session: two sessions started within the same
    millisecond would otherwise write the same file)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    n, h, w, c = s["x"]
    attrs = dict(kernel_shape=list(s["size"]), strides=list(s["stride"]),
                 pads=list(s["padding"]))
    op = "MaxPool"
    if s["kind"] == "AVG_POOL":
        op = "AveragePool"
        attrs["count_include_pad"] = int(s["include_pad"])
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], **attrs)], "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (n, c, h, w))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = level
    so.enable_profiling = True
    so.profile_file_prefix = profile_prefix
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]), op


def _ort_node_seconds(sess, op, skip):
    """The pool node's time of each run after the first ``skip``, from ORT's profile."""
    path = sess.end_profiling()
    try:
        with open(path) as f:
            events = json.load(f)
    finally:
        os.remove(path)
    us = [e["dur"] for e in events if e.get("cat") == "Node"
          and e["name"].endswith("_kernel_time") and e["args"].get("op_name") == op]
    return [u * 1e-6 for u in us[skip:]]


def measure_shape(s, repeat, rng, ort_mod, profile_dir):
    x = nnc.Tensor.empty(s["x"], dtype="float32")          # 64-byte aligned, as in a graph
    x.numpy()[...] = rng.standard_normal(s["x"])
    y = nnc.Tensor.empty(s["out"], dtype="float32")
    params = dict(size=s["size"], stride=s["stride"], padding=s["padding"])
    if s["kind"] == "AVG_POOL":
        params["count_include_pad"] = s["include_pad"]
    cmd = nnc.Cmd(s["kind"], **params)
    backend = [b for b in nnc.command_info(s["kind"]).backends if b.name == "CPU_OPT"][0]
    nbytes = 4 * (int(np.prod(s["x"])) + int(np.prod(s["out"])))
    backend.exec(cmd, [x], [y])
    one = min(_util.measure(lambda: backend.exec(cmd, [x], [y]), 3))
    inner = max(1, min(1000, round(SAMPLE_SECONDS / max(one, 1e-7))))

    def loop(fn):
        def run():
            for _ in range(inner):
                fn()
        return run

    fns = {"nnc": loop(lambda: backend.exec(cmd, [x], [y]))}
    sessions = {}
    if ort_mod is not None:
        x_nchw = np.ascontiguousarray(x.numpy().transpose(0, 3, 1, 2))
        levels = {"ort_nchwc": ort_mod.GraphOptimizationLevel.ORT_ENABLE_ALL,
                  "ort_nchw": ort_mod.GraphOptimizationLevel.ORT_ENABLE_EXTENDED}
        for name, level in levels.items():
            sess, op = _ort_session(s, level, os.path.join(profile_dir, name))
            sessions[name] = (sess, op)
            fns[name] = loop(lambda sess=sess: sess.run(None, {"x": x_nchw}))
    samples = _util.measure_interleaved(fns, repeat)
    sec = {"nnc": _util.median(samples["nnc"]) / inner}
    check = None
    for name, (sess, op) in sessions.items():
        times = _ort_node_seconds(sess, op, inner)       # the warm-up's runs are left out
        sec[name] = _util.median(times) if times else None
        got = sess.run(None, {"x": x_nchw})[0].transpose(0, 2, 3, 1)
        err = float(np.abs(got - y.numpy()).max())
        ok = err == 0 if s["kind"] == "MAX_POOL" else err <= TOL_AVG
        check = ok if check is None else check and ok
    return {
        "shape": _describe(s), "first": s["first"], "count": s["count"], "bytes": nbytes,
        "us": {k: None if v is None else v * 1e6 for k, v in sec.items()},
        "gbs": {k: None if v is None else nbytes / v / 1e9 for k, v in sec.items()},
        "nnc_vs_ort": (sec["nnc"] / sec["ort_nchwc"]) if sec.get("ort_nchwc") else None,
        "outputs_agree": check,
    }


def run(size, repeat, isa=None, limit=None, seed=0, say=print, limits=True):
    """``limits``: measure one thread's memory bandwidth first (True), or not (False);
    ``limit``: only the first shapes."""
    try:
        import onnxruntime as ort_mod
    except ImportError:
        ort_mod = None
    shapes = pool_shapes(size)[:limit]
    bandwidth = None
    if limits:
        say("  measuring the memory bandwidth")
        bandwidth = _limits.bandwidth_gbs()["copy"]
    old_isa = cpu_isa.set_cpu_isa(isa)
    before = nnc.get_intra_op_threads()
    nnc.set_intra_op_threads(1)
    rng = np.random.default_rng(seed)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as profile_dir:
            for i, s in enumerate(shapes):
                rows.append(measure_shape(s, repeat, rng, ort_mod, profile_dir))
                rows[-1]["of_memory"] = ({k: None if v is None else v / bandwidth
                                          for k, v in rows[-1]["gbs"].items()}
                                         if bandwidth else None)
                say(f"  {i + 1}/{len(shapes)} {rows[-1]['shape']}")
        ran_isa = cpu_isa.get_cpu_isa()
    finally:
        nnc.set_intra_op_threads(before)
        cpu_isa.set_cpu_isa(old_isa)
    names = ["nnc"] + (["ort_nchwc", "ort_nchw"] if ort_mod is not None else [])
    total_us = {k: sum(r["us"][k] * r["count"] for r in rows) for k in names}
    return {
        "size": size, "repeat": repeat, "isa": ran_isa, "rows": rows,
        "total_us": total_us,
        "onnxruntime": ort_mod.__version__ if ort_mod is not None else None,
        "bandwidth_gbs": bandwidth,
        "outputs_agree": all(r["outputs_agree"] is not False for r in rows),
    }


def render(r):
    ort = r["onnxruntime"] is not None
    head = ["layer (HxWxC kxk/stride -> out)", "x", "nnc us", "nnc GB/s"]
    if ort:
        head += ["ORT NCHWc us", "ORT NCHWc GB/s", "ORT NCHW us", "nnc / ORT NCHWc"]
    if r["bandwidth_gbs"]:
        head += ["nnc of memory"]
    body = []
    for x in r["rows"]:
        line = [x["shape"], x["count"], _util.fmt(x["us"]["nnc"]), _util.fmt(x["gbs"]["nnc"])]
        if ort:
            line += [_util.fmt(x["us"]["ort_nchwc"]), _util.fmt(x["gbs"]["ort_nchwc"]),
                     _util.fmt(x["us"]["ort_nchw"]), _util.fmt(x["nnc_vs_ort"])]
        if r["bandwidth_gbs"]:
            line += [f"{100 * x['of_memory']['nnc']:.0f} %"]
        body.append(line)
    t = r["total_us"]
    total = f"whole network (each shape x its count): nnc {_util.fmt(t['nnc'] / 1e3)} ms"
    if ort:
        total += (f", ORT NCHWc {_util.fmt(t['ort_nchwc'] / 1e3)} ms, ORT NCHW "
                  f"{_util.fmt(t['ort_nchw'] / 1e3)} ms; nnc / ORT NCHWc "
                  f"{_util.fmt(t['nnc'] / t['ort_nchwc'])}")
    return "\n".join([
        f"Inception-V3 {r['size']}x{r['size']} pools, 1 thread, float32, median of "
        f"{r['repeat']}; nnc kernel ISA {r['isa']}; onnxruntime "
        + (r["onnxruntime"] or "not installed (pip install onnxruntime onnx)"),
        (f"memory (measured now): {_util.fmt(r['bandwidth_gbs'])} GB/s copy (read + written), "
         "1 thread" if r["bandwidth_gbs"] else "memory bandwidth: not measured (--no-limits)"),
        _util.table(head, body),
        total,
        "outputs agree with ORT's: " + ("yes" if r["outputs_agree"] else "NO"),
    ])


def main(argv=None):
    p = _util.parser("Inception-V3's pools: nnc against ONNX Runtime", repeat=15)
    p.add_argument("--size", type=int, default=299, help="Inception-V3 input size (>= 75)")
    p.add_argument("--limit", type=int, default=None, help="only the first N shapes")
    p.add_argument("--isa", choices=cpu_isa.supported_isas(), default=None,
                   help="the kernel ISA nnc runs (default: the detected one)")
    p.add_argument("--no-limits", action="store_true",
                   help="skip measuring the memory bandwidth (a few seconds)")
    a = p.parse_args(argv)
    if a.size < 75 or a.repeat < 1 or (a.limit is not None and a.limit < 1):
        p.error("--size must be at least 75, --repeat and --limit at least 1")
    say = (lambda *x: print(*x, file=sys.stderr)) if a.json else print
    report = run(a.size, a.repeat, a.isa, a.limit, say=say, limits=not a.no_limits)
    _util.publish(report, "pool", render, a.json, packages=("numpy", "onnx", "onnxruntime"))
    return 0 if report["outputs_agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
