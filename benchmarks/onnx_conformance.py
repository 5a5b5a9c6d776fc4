"""ONNX's operator conformance (node) tests, run through ``nnc.onnx.load``.

    python -m benchmarks.onnx_conformance [--json] [--filter OP[,OP...]] [--isa ISA]
                                          [--timeout S] [--write-docs]

The cases are generated from the installed ``onnx`` package's own test-case definitions
(``onnx.backend.test.case.node.collect_testcases``: the reference models and data its
``data/node`` folders are made from), with no download, and cached under ``build/`` (keyed by the
onnx version). Every case is loaded with its inputs' shapes and dtype, run once, and compared with
its expected outputs at the case's own tolerances (onnx's runner: ``rtol=1e-3, atol=1e-7``;
same shape, NaN where NaN). Each case ends as one of

- ``pass``: every output matches;
- ``refused``: ``nnc.onnx.UnsupportedError`` or ``OnnxError`` raised by nnc's own checks (the
  message, shortened, is the reason);
- ``WRONG``: it ran and an output differs (shape or values);
- ``ERROR``: any other exception (its type is kept), including an ``OnnxError`` that only wraps
  one ("cannot build ...", chained to a non-nnc exception: a bug in nnc), a crash of the process
  or a case that runs past ``--timeout``.

Cases run in a child process (``--worker``) that reports each result as one JSON line; when it
dies or hangs, the case it was running is an ``ERROR`` and a new child takes the next one, so
one crash costs one case, not the run. ``--write-docs`` rewrites the per-operator table of
docs/onnx.md between its marker comments. tests/onnx/test_conformance.py runs the operators nnc
claims.
"""

import argparse
import json
import os
import pickle
import re
import select
import subprocess
import sys
import time
import warnings

import numpy as np

from benchmarks import _util

ROOT = _util.ROOT
CACHE_DIR = os.path.join(ROOT, "build", "onnx_conformance")
DOCS = os.path.join(ROOT, "docs", "onnx.md")
TABLE_START = "<!-- conformance table start -->"
TABLE_END = "<!-- conformance table end -->"
# A refusal reason in the table is cut to this many characters.
REASON_CHARS = 90
STATUSES = ("pass", "refused", "WRONG", "ERROR")


# -- the cases ----------------------------------------------------------------------------------

def _case_op(model, base_ops, name):
    """The operator a case tests: for an ``*_expanded`` case (the operator's function body
    inlined) the operator of the case it expands, else its graph's one op type other than
    Constant (the last node's when there are several)."""
    base = re.sub(r"_expanded(_ver\d+)?$", "", name)
    if base != name and base in base_ops:
        return base_ops[base]
    nodes = [n for n in model.graph.node if n.op_type != "Constant"] or list(model.graph.node)
    n = nodes[-1]
    return f"{n.domain}.{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type


def _collect():
    import onnx
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        # Making ONNX's Cast cases overflows float casts on purpose (their expected data).
        warnings.simplefilter("ignore")
        collected = collect_testcases()
    base_ops = {}
    cases = []
    for c in sorted(collected, key=lambda c: ("_expanded" in c.name, c.name)):
        op = _case_op(c.model, base_ops, c.name)
        base_ops.setdefault(c.name, op)
        inputs, outputs = c.data_sets[0]
        cases.append({"name": c.name, "op": op, "model": c.model.SerializeToString(),
                      "inputs": list(inputs), "outputs": list(outputs),
                      "rtol": min(float(c.rtol), 1e-3), "atol": min(float(c.atol), 1e-7)})
    cases.sort(key=lambda c: c["name"])
    return onnx.__version__, cases


def load_cases():
    """Every node case of the installed onnx: a list of dicts (name, op, model bytes, inputs,
    outputs, rtol, atol), from the cache under build/ or generated (and cached) on first use."""
    import onnx

    path = os.path.join(CACHE_DIR, f"cases-onnx-{onnx.__version__}.pkl")
    if os.path.exists(path):
        # The cache is written by this module only, from the installed onnx package.
        with open(path, "rb") as f:
            return pickle.load(f)
    _, cases = _collect()
    os.makedirs(CACHE_DIR, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(cases, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)      # atomic: a concurrent run reads the old cache or the whole new one
    return cases


# -- one case -----------------------------------------------------------------------------------

def _short(msg, n=REASON_CHARS):
    msg = " ".join(str(msg).split())
    return msg if len(msg) <= n else msg[:n - 1] + "…"


def _reason(e):
    """An UnsupportedError's first problem (op: reason), else the message's first line."""
    problems = getattr(e, "problems", None)
    if problems:
        op, (_, _, why) = sorted(problems.items())[0]
        return f"{op}: {why}"
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _compare(got, want, rtol, atol):
    """None when ``got`` matches ``want`` (onnx's runner: same shape, allclose, NaN == NaN),
    else what differs."""
    if isinstance(want, (list, tuple, dict)):
        return f"expected a {type(want).__name__} output (a sequence or map), got a tensor"
    want = np.asarray(want)
    if want.dtype == object or want.dtype.kind in "USO":
        return f"expected a {want.dtype} output, which nnc has no dtype for"
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    bad = ~np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    i = np.unravel_index(int(np.argmax(bad)), bad.shape)
    err = float(np.nanmax(np.where(bad, np.abs(g - w), 0.0)))
    return (f"{int(bad.sum())}/{bad.size} differ, max |diff| {err:.3g}; "
            f"at {tuple(int(k) for k in i)}: {g[i]!r} vs {w[i]!r}")


def _attempt(model, names, inputs, dtype, rtol, atol, outputs):
    """Load ``model`` with the shapes of ``inputs`` (fed to the graph inputs ``names``), run it
    once and compare with ``outputs``: ``(status, detail)``."""
    import nnc
    import nnc.onnx

    try:
        loaded = nnc.onnx.load(model, dtype=dtype,
                               input_shapes={n: list(x.shape) for n, x in zip(names, inputs)
                                             if isinstance(x, np.ndarray)})
        feeds = dict(zip(names, inputs))
        for name, t in zip(loaded.input_names, loaded.inputs):
            t.numpy()[...] = feeds[name]
        loaded.graph.run()
        got = [t.numpy().copy() for t in loaded.outputs]
    except nnc.onnx.OnnxError as e:
        cause = e.__cause__
        if str(e).startswith("cannot build") and cause is not None \
                and not isinstance(cause, nnc.NNCError):
            return "ERROR", _short(f"{type(cause).__name__}: {cause}")
        return "refused", _short(_reason(e))
    except Exception as e:
        return "ERROR", _short(f"{type(e).__name__}: {e}")
    if len(got) != len(outputs):
        return "WRONG", f"{len(got)} outputs, expected {len(outputs)}"
    for k, (g, w) in enumerate(zip(got, outputs)):
        diff = _compare(g, w, rtol, atol)
        if diff is not None:
            return "WRONG", _short(f"output {k}: {diff}", 200)
    return "pass", ""


def run_case(case):
    """Load, run and check one case: ``(status, detail)``.

    The case runs as written first. ONNX's node tests give weights, shapes and axes as graph
    inputs, where models have initializers, and nnc needs many of them constant (a convolution's
    weights, Reshape's shape): a case refused as written runs again with its inputs after the
    first as initializers, and its result is that run's (a pass then says so in its detail)."""
    import onnx

    model = onnx.load_model_from_string(case["model"])
    # A few cases (CastLike's exotic types) hold a TensorProto where the others hold an array.
    raw = case["inputs"]
    # Sequence and map inputs (lists, dicts) stay as they are: no nnc tensor holds one.
    inputs = [onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto)
              else x if isinstance(x, (list, tuple, dict)) else np.asarray(x) for x in raw]
    outputs = [onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x
               for x in case["outputs"]]
    names = [v.name for v in model.graph.input
             if v.name not in {t.name for t in model.graph.initializer}]
    floats = [x.dtype for x in inputs if isinstance(x, np.ndarray) and x.dtype.kind == "f"]
    dtype = "float64" if floats and all(d == np.float64 for d in floats) else "float32"
    check = (dtype, case["rtol"], case["atol"], outputs)
    status, detail = _attempt(model, names, inputs, *check)
    if (status != "refused" or len(inputs) < 2 or len(names) != len(inputs)
            or not all(isinstance(x, np.ndarray) for x in inputs[1:])):
        return status, detail
    const = onnx.ModelProto()
    const.CopyFrom(model)
    if const.ir_version >= 4:      # before IR 4 an initializer must also be a graph input
        keep = [v for v in const.graph.input if v.name not in names[1:]]
        del const.graph.input[:]
        const.graph.input.extend(keep)
    for n, x in zip(names[1:], raw[1:]):
        if isinstance(x, onnx.TensorProto):
            t = onnx.TensorProto()
            t.CopyFrom(x)
            t.name = n
        else:
            t = onnx.numpy_helper.from_array(np.asarray(x), n)
        const.graph.initializer.append(t)
    status, detail = _attempt(const, names[:1], inputs[:1], *check)
    return status, ("inputs after the first as initializers" if status == "pass" else detail)


def _worker(names, isa):
    import nnc
    from nnc.base.isa import set_cpu_isa

    nnc.set_num_threads(1)
    set_cpu_isa(isa)
    wanted = set(names)
    for case in load_cases():
        if case["name"] not in wanted:
            continue
        print(json.dumps({"start": case["name"]}), flush=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                status, detail = run_case(case)
            except Exception as e:
                # Outside nnc's load and run (reading the case, comparing): still one ERROR.
                status, detail = "ERROR", _short(f"harness: {type(e).__name__}: {e}")
        print(json.dumps({"name": case["name"], "status": status, "detail": detail}), flush=True)


# -- the guarded run ----------------------------------------------------------------------------

def run_guarded(names, timeout=60.0, isa=None):
    """Run the named cases in child processes: ``{name: (status, detail)}``. A child that dies
    or hangs (no result within ``timeout`` seconds) costs the case it ran, an ERROR; the next
    child starts after it. ``isa``: the CPU level the kernels run at (``nnc.base.isa``; None:
    the machine's best)."""
    results = {}
    todo = list(names)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    while todo:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.onnx_conformance", "--worker",
             *(["--isa", isa] if isa else [])],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True)
        proc.stdin.write("\n".join(todo))
        proc.stdin.close()
        current = None
        deadline = time.monotonic() + timeout + 30     # the first case also loads the cache
        hung = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                hung = True
                proc.kill()
                break
            ready, _, _ = select.select([proc.stdout], [], [], left)
            if not ready:
                continue
            line = proc.stdout.readline()
            if not line:
                break
            msg = json.loads(line)
            if "start" in msg:
                current = msg["start"]
                deadline = time.monotonic() + timeout
            else:
                results[msg["name"]] = (msg["status"], msg["detail"])
                current = None
        proc.wait()
        todo = [n for n in todo if n not in results]
        if not todo:
            break
        if current is None:
            # The child ended (or hung) between cases: nothing to blame; stop rather than loop.
            for n in todo:
                results[n] = ("ERROR", f"worker exited with {proc.returncode} before the case")
            break
        results[current] = ("ERROR", f"hang (no result in {timeout:g} s)" if hung
                            else f"crash (worker exit status {proc.returncode})")
        todo = [n for n in todo if n not in results]
    return results


# -- the report ---------------------------------------------------------------------------------

def summarize(cases, results):
    """Per operator: tests, the count of each status, the first refusal's reason."""
    ops = {}
    for c in cases:
        if c["name"] not in results:
            continue
        status, detail = results[c["name"]]
        row = ops.setdefault(c["op"], {"op": c["op"], "tests": 0, **dict.fromkeys(STATUSES, 0),
                                       "reason": ""})
        row["tests"] += 1
        row[status] += 1
        if status == "refused" and not row["reason"]:
            row["reason"] = detail
    return sorted(ops.values(), key=lambda r: r["op"].lower())


def _md_table(rows):
    head = "| op | tests | pass | refused | wrong | error | first refusal |\n" \
           "|---|---:|---:|---:|---:|---:|---|\n"
    body = "".join(
        f"| {r['op']} | {r['tests']} | {r['pass']} | {r['refused']} | {r['WRONG']} | "
        f"{r['ERROR']} | {r['reason'].replace('|', '/')} |\n" for r in rows)
    return head + body


def render(report):
    t = report["totals"]
    lines = [_util.table(["op", "tests", "pass", "refused", "wrong", "error", "first refusal"],
                         [[r["op"], r["tests"], r["pass"], r["refused"], r["WRONG"], r["ERROR"],
                           r["reason"][:60]] for r in report["ops"]]), ""]
    for c in report["cases"]:
        if c["status"] in ("WRONG", "ERROR"):
            lines.append(f"{c['status']:7} {c['name']}: {c['detail']}")
    lines.append(f"\nonnx {report['onnx']}: {t['tests']} tests loaded, {t['pass']} passing, "
                 f"{t['refused']} refused, {t['WRONG']} wrong, {t['ERROR']} errors; "
                 f"{t['ops_passing']} of {t['ops']} operators with at least one passing test "
                 f"({t['ops_passing_direct']} not counting *_expanded tests)")
    return "\n".join(lines)


def write_docs(report, path=DOCS):
    """Replace the text between the table markers of docs/onnx.md with the report's table."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start, end = text.find(TABLE_START), text.find(TABLE_END)
    if start < 0 or end < start:
        raise SystemExit(f"{path} has no {TABLE_START} ... {TABLE_END} markers")
    t = report["totals"]
    body = (f"\n\nonnx {report['onnx']}, nnc {report['commit']}, {report['date'][:10]}: "
            f"**{t['tests']}** node tests, **{t['pass']}** pass, {t['refused']} refused, "
            f"{t['WRONG']} wrong, {t['ERROR']} errors; **{t['ops_passing']}** of {t['ops']} "
            f"operators have at least one passing test ({t['ops_passing_direct']} not counting "
            f"`*_expanded` tests).\n\n" + _md_table(report["ops"]) + "\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:start + len(TABLE_START)] + body + text[end:])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the report as JSON (last line)")
    p.add_argument("--filter", default="",
                   help="comma-separated operators (ONNX op types) to run; default all")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a case may run")
    p.add_argument("--write-docs", action="store_true",
                   help="rewrite docs/onnx.md's conformance table (a full run only)")
    p.add_argument("--isa", default=None,
                   help="the CPU level kernels run at (nnc.base.isa.supported_isas())")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        # The parent (run_guarded) writes the names of the cases to run, one a line.
        _worker(sys.stdin.read().split(), a.isa)
        return
    import onnx

    cases = load_cases()
    if a.filter:
        wanted = {s.strip().lower() for s in a.filter.split(",") if s.strip()}
        cases = [c for c in cases if c["op"].lower() in wanted]
        if a.write_docs:
            raise SystemExit("--write-docs publishes the whole set: drop --filter")
    results = run_guarded([c["name"] for c in cases], timeout=a.timeout, isa=a.isa)
    ops = summarize(cases, results)
    totals = {"tests": len(cases), **{s: sum(r[s] for r in ops) for s in STATUSES},
              "ops": len(ops), "ops_passing": sum(1 for r in ops if r["pass"]),
              "ops_passing_direct": len({c["op"] for c in cases if "_expanded" not in c["name"]
                                         and results[c["name"]][0] == "pass"})}
    report = {"onnx": onnx.__version__, "isa": a.isa or "best",
              "commit": _util.machine_info()["git"], "date": _util.now(), "totals": totals,
              "ops": ops,
              "cases": [{"name": c["name"], "op": c["op"], "status": results[c["name"]][0],
                         "detail": results[c["name"]][1]} for c in cases]}
    if a.write_docs:
        write_docs(report)
    _util.publish(report, "onnx_conformance", render, a.json)


if __name__ == "__main__":
    main()
