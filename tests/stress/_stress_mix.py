"""The stress mix: random DAGs x schedules x injected errors x objects dropped mid-run
x concurrent waiters x while / case..of, each run checked against a sequential run.

A *case* is plain JSON (``random_case``), so a failing one can be replayed exactly. This file is
both a module (tests/stress/test_stress.py imports ``random_case``) and the script that runs cases
in a child process, so that a crash or a hang fails the caller instead of killing it:

    python tests/stress/_stress_mix.py --seed 7 --cases 20   # cases drawn from random.Random(7)
    python tests/stress/_stress_mix.py --spec '[{...}, ...]'  # replay exact cases
    python tests/stress/_stress_mix.py --all-combinations --seed 7  # each mode x drop x control

It prints one JSON line per case and a summary line, and exits 0 when every case either matched
the sequential result or raised a clear error naming an injected failure, 1 when a case went
wrong (a wrong result, a vague or missing error, a leak or broken invariant with NNC_DEBUG=1),
and 1 with "Timeout" and every thread's stack on stderr (faulthandler) when a case hung.

With NNC_DEBUG=1 the child also checks nnc.base.debug's invariants while work is still queued,
and at the end that the live-object counters are back where they were before the first case.
"""

import argparse
import faulthandler
import gc
import itertools
import json
import random
import sys
import threading

import numpy as np

import nnc
import nnc.base.debug

SIDE = 4                                # every tensor is SIDE x SIDE float32
SOURCES = 3                             # constant input tensors; inputs -1..-SOURCES name them
OPS = ("EWSUM", "EWPROD", "EWEXP", "GEMM", "CUSTOM")
ARITY = {"EWSUM": 2, "EWPROD": 2, "EWEXP": 1, "GEMM": 2, "CUSTOM": 1}
# "sequential": g.run(); "stream": g.run(stream=s) without a schedule; "schedK":
# nnc.static_schedule(g, max_streams=K) first (0: as many streams as the schedule wants).
MODES = ("sequential", "stream", "sched0", "sched1", "sched2", "sched3")
# What loses its last reference while the run is queued (behind a gate on the caller's stream).
DROPS = ("none", "graph", "stream", "both")
CONTROLS = ("none", "while", "case")
TIMEOUT = 20.0                          # seconds any one wait may take before it is a hang


class InjectedError(Exception):
    """Raised on purpose by a node, op or stage chosen to fail."""


class UnprintableError(Exception):
    """Raised on purpose; its repr and str raise too (the engine and pipeline mixes)."""

    def __repr__(self):
        raise RuntimeError("repr of UnprintableError")

    def __str__(self):
        raise RuntimeError("str of UnprintableError")


def random_case(rnd, mode=None, drop=None, control=None):
    """One case as JSON-able data, drawn from ``rnd`` (a random.Random or Hypothesis's)."""
    n = rnd.randint(1, 10)
    nodes = []
    for i in range(n):
        op = rnd.choice(OPS)
        nodes.append({"op": op, "in": [rnd.randrange(-SOURCES, i) for _ in range(ARITY[op])]})
    edges = []
    if n > 2:
        for _ in range(rnd.randint(0, 3)):
            a, b = sorted(rnd.sample(range(n), 2))
            edges.append([a, b])
    control = control or rnd.choice(CONTROLS)
    failable = [f"n{i}" for i, node in enumerate(nodes) if node["op"] == "CUSTOM"]
    if control == "while":
        failable.append("body_fx")
    elif control == "case":
        failable.append("case_fx")
    fail = sorted(rnd.sample(failable, rnd.randint(0, len(failable)))) if failable and \
        rnd.random() < 0.5 else []
    return {
        "nodes": nodes,
        "edges": edges,
        "control": control,
        "control_on": rnd.randrange(-SOURCES, n),   # the tensor the loop or branch reads
        "iterations": rnd.randint(1, 4),
        "fail": fail,
        "mode": mode or rnd.choice(MODES),
        "drop": drop or rnd.choice(DROPS),
        "waiters": rnd.randint(0, 3),
        "data_seed": rnd.randrange(2 ** 31),
    }


def all_combinations(rnd):
    """Every mode x drop x control once (72 cases), with random DAGs and failures."""
    return [random_case(rnd, mode, drop, control)
            for mode, drop, control in itertools.product(MODES, DROPS, CONTROLS)]


def _custom(name, state):
    def fx(inputs, outputs):
        if state["fail"] and name in state["failing"]:
            raise InjectedError(f"injected failure in {name}")
        np.tanh(inputs[0], out=outputs[0])
    return nnc.Cmd.custom(fx)


def build(case, state):
    """The case's graph and the tensors whose values are its result."""
    data = np.random.default_rng(case["data_seed"])
    sources = [nnc.Tensor(data.uniform(-1, 1, (SIDE, SIDE)).astype(np.float32))
               for _ in range(SOURCES)]
    g = nnc.Graph()
    outs, execs = [], []

    def tensor(ref):
        return sources[-1 - ref] if ref < 0 else outs[ref]

    for i, node in enumerate(case["nodes"]):
        out = nnc.Tensor.zeros((SIDE, SIDE))
        name = f"n{i}"
        cmd = _custom(name, state) if node["op"] == "CUSTOM" else nnc.Cmd(node["op"])
        execs.append(g.exec(cmd, [tensor(r) for r in node["in"]], [out], name=name))
        outs.append(out)
        for r in node["in"]:
            if r >= 0:
                g.concat(execs[r], execs[i])
    for a, b in case["edges"]:
        g.concat(execs[a], execs[b])
    x = tensor(case["control_on"])
    if case["control"] == "while":
        # acc = 1, then acc = tanh(acc * x) `iterations` times: every run starts from acc = 1,
        # so a rerun after a failed run computes what the reference computed.
        acc, tmp = nnc.Tensor.zeros((SIDE, SIDE)), nnc.Tensor.zeros((SIDE, SIDE))
        init = g.exec(nnc.Cmd("SET", value=1.0), [], [acc], name="acc_init")
        body = nnc.Graph()
        noop = body.exec(nnc.Cmd("NOOP"))
        prod = body.exec(nnc.Cmd("EWPROD"), [acc, x], [tmp])
        fx = body.exec(_custom("body_fx", state), [tmp], [acc], name="body_fx")
        body.concat(noop, prod)
        body.concat(prod, fx)
        iterations = case["iterations"]
        body.set_while_expr(lambda count: count < iterations, [], [noop])
        ctl = g.while_(body)
        g.concat(init, ctl)
        outs += [acc, tmp]
    elif case["control"] == "case":
        # out = x + x, tanh(x), or untouched, by the sign and size of x[0, 0].
        out = nnc.Tensor.zeros((SIDE, SIDE))
        ctl = g.case_of([x], [out])
        g.set_case_of_expr(ctl, lambda a: -1 if abs(a.flat[0]) > 50 else int(a.flat[0] > 0))
        b0, b1 = nnc.Graph(), nnc.Graph()
        b0.exec(nnc.Cmd("EWSUM"), [x, x], [out])
        b1.exec(_custom("case_fx", state), [x], [out], name="case_fx")
        g.set_case_of(ctl, b0, 0)
        g.set_case_of(ctl, b1, 1)
        outs.append(out)
    else:
        ctl = None
    if ctl is not None and case["control_on"] >= 0:
        g.concat(execs[case["control_on"]], ctl)
    return g, outs


def _values(tensors):
    return [t.numpy().copy() for t in tensors]


def _names_failure(exc, case):
    """A clear error: an NNCError naming one of the failing nodes, with InjectedError as cause
    (directly or further down the chain)."""
    if not isinstance(exc, nnc.NNCError):
        return False
    if not any(name in str(exc) for name in case["fail"]):
        return False
    cause = exc.__cause__
    while cause is not None and not isinstance(cause, InjectedError):
        cause = cause.__cause__
    return cause is not None


class CaseFailed(AssertionError):
    pass


def _join(threads):
    for t in threads:
        t.join(TIMEOUT)
        if t.is_alive():
            raise CaseFailed(f"waiter {t.name} still blocked in s.wait() after {TIMEOUT} s")


def run_case(case):
    """Run one case; return "ok" (matched) or "error" (a clear injected error); raise
    CaseFailed on anything else."""
    state = {"fail": False, "failing": set(case["fail"])}
    ref_graph, ref_outs = build(case, state)
    ref_graph.run()
    expect = _values(ref_outs)
    del ref_graph, ref_outs

    state["fail"] = bool(case["fail"])
    g, outs = build(case, state)
    errors = []
    mode = case["mode"]
    if mode == "sequential":
        try:
            g.run()
        except Exception as e:  # noqa: BLE001 - judged below
            errors.append(e)
        return _judge(case, state, errors, outs, expect, rerun=lambda: g.run())

    s = nnc.Stream("cpu")
    gate = threading.Event()
    blocker = nnc.Tensor.zeros(1)
    # Everything the run enqueues waits behind this gate, so drops happen with work queued.
    nnc.cmd_exec(nnc.Cmd.custom(lambda i, o: gate.wait(TIMEOUT)), [], [blocker], stream=s)
    if mode.startswith("sched"):
        nnc.static_schedule(g, max_streams=int(mode[5:]))
    g.run(stream=s)
    done = threading.Event()
    s.add_callback(done.set)
    if nnc.base.debug.enabled():
        broken = nnc.base.debug.problems()
        if broken:
            gate.set()
            raise CaseFailed("invariants broken with work queued: " + "; ".join(broken))
    if case["drop"] in ("graph", "both"):
        del g
        gc.collect()
    if case["drop"] in ("stream", "both"):
        del s
        gc.collect()
    gate.set()
    if case["drop"] in ("stream", "both"):
        # Nobody can wait on the stream (its errors are dropped with it); its work must still
        # run to the end.
        if not done.wait(TIMEOUT):
            raise CaseFailed(f"a dropped stream did not finish its work in {TIMEOUT} s")
        if case["fail"]:
            return "error"
        _compare(case, outs, expect)
        return "ok"

    def waiter():
        try:
            s.wait()
        except Exception as e:  # noqa: BLE001 - judged below
            errors.append(e)

    threads = [threading.Thread(target=waiter, name=f"waiter-{k}", daemon=True)
               for k in range(case["waiters"])]
    for t in threads:
        t.start()
    waiter()
    _join(threads)
    if not done.is_set():
        raise CaseFailed("s.wait() returned before the run's work had finished")
    if case["drop"] == "graph":
        return _judge(case, state, errors, outs, expect, rerun=None)

    def rerun():
        g.run(stream=s)
        s.wait()
    return _judge(case, state, errors, outs, expect, rerun=rerun)


def _judge(case, state, errors, outs, expect, rerun):
    if not case["fail"]:
        if errors:
            raise CaseFailed(f"unexpected error: {errors[0]!r}") from errors[0]
        _compare(case, outs, expect)
        return "ok"
    # A failure was injected. Its node may not have run (a case..of took the other branch,
    # a dropped graph). Every wait() in progress when the failure is first raised raises it
    # (docs/threading.md, Errors), so concurrent waiters raise one and the same failure, clearly.
    if len({str(e) for e in errors}) > 1:
        raise CaseFailed(f"waiters raised different failures for one run: {errors!r}")
    for e in errors:
        if not _names_failure(e, case):
            raise CaseFailed(f"unclear error for failures at {case['fail']}: {e!r}") from e
    if rerun is not None:
        # The graph and the stream stay usable after a failure: a clean rerun matches.
        state["fail"] = False
        rerun()
        _compare(case, outs, expect)
    return "error" if errors else "ok"


def _compare(case, outs, expect):
    for k, (t, want) in enumerate(zip(outs, expect)):
        if not np.array_equal(t.numpy(), want, equal_nan=True):
            raise CaseFailed(f"result {k} differs from the sequential run:\n{t.numpy()}\n"
                             f"expected\n{want}")


def _rss_mib():
    """This process's resident set in MiB (Linux), or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def run_cases(cases, run_case, case_timeout):
    """Run ``cases`` with ``run_case`` (which returns "ok" or "error" and raises on anything
    else), print one JSON line per case and a summary line, and exit: 0 when every case was ok
    or a clear error, 1 when one failed or (NNC_DEBUG=1) nnc state leaked or broke. The stress
    mixes of tests/ share it (benchmarks/soak.py reads these lines)."""
    # A crash prints every thread's stack on stderr; so does a hang, which then exits.
    faulthandler.enable(all_threads=True)
    faulthandler.dump_traceback_later(case_timeout, exit=True)
    baseline = nnc.base.debug.counters()
    summary = {"runs": 0, "errors": 0, "failed": 0, "rss_mib": []}
    for k, case in enumerate(cases):
        try:
            outcome = run_case(case)
        except Exception as e:  # noqa: BLE001 - CaseFailed, or an error nobody expected
            why = str(e) if isinstance(e, CaseFailed) else f"raised {e!r}"
            print(json.dumps({"case": k, "outcome": "failed", "why": why, "spec": case}),
                  flush=True)
            summary["failed"] += 1
            continue
        finally:
            faulthandler.dump_traceback_later(case_timeout, exit=True)
        if k == 0:
            summary["rss_mib"].append(_rss_mib())  # after the first case: imports done
        summary["runs"] += 1
        summary["errors"] += outcome == "error"
        print(json.dumps({"case": k, "outcome": outcome,
                          **{key: case[key] for key in ("mode", "drop", "control")
                             if key in case}}), flush=True)
    faulthandler.cancel_dump_traceback_later()
    gc.collect()
    summary["rss_mib"].append(_rss_mib())
    if nnc.base.debug.enabled():
        summary["leaks"] = {k: list(v) for k, v in nnc.base.debug.leaks(baseline, TIMEOUT).items()}
        summary["problems"] = nnc.base.debug.problems()
        summary["counters"] = nnc.base.debug.counters()
    print(json.dumps(summary), flush=True)
    bad = summary["failed"] or summary.get("leaks") or summary.get("problems")
    # A normal exit: the interpreter's shutdown (atexit drains every stream) is part of the mix,
    # so a crash there is a crash of this process.
    sys.exit(1 if bad else 0)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", type=int, default=20)
    p.add_argument("--spec", help="a JSON list of cases (as random_case makes them)")
    p.add_argument("--all-combinations", action="store_true")
    args = p.parse_args(argv)
    if args.spec:
        cases = json.loads(args.spec)
    elif args.all_combinations:
        cases = all_combinations(random.Random(args.seed))
    else:
        rnd = random.Random(args.seed)
        cases = [random_case(rnd) for _ in range(args.cases)]
    run_cases(cases, run_case, TIMEOUT * 2 + 10)


if __name__ == "__main__":
    main()
