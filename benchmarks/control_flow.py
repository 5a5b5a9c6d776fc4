"""Control flow: per-iteration overhead of while loops, and how fast run(stream=...) returns.

    python -m benchmarks.control_flow [--json] [--repeat R] [--iterations N]

Measured, in one process:

- ``seq noop``: ``g.run()`` of a graph whose one node is a while loop of N iterations with a NOOP
  breakpoint body (the expression is ``count < N``): time / N is the loop machinery alone
  (count, expression call, node loop over the body).
- ``seq mul``: the same with a 1-element SCALAR_MUL after the breakpoint.
- ``stream noop`` / ``stream mul``: ``g.run(stream=s); s.wait()`` of the same graphs. Each
  iteration enqueues the head (count store, body nodes, a wake-up) and the scheduler thread
  sleeps until the worker posts the wake-up, then evaluates the expression: two thread
  hand-offs per iteration, all in C (no GIL taken on the worker).
- ``2 hand-offs (C)``: ``nnc.stream.inbox.handoff_roundtrip``, a semaphore ping-pong between
  two plain C threads: the floor for one iteration on a stream, timed in the same rounds, because
  this VM's wake-up cost varies several-fold (4–60 µs) with load from other tenants.
- ``return``: time from calling ``g.run(stream=s)`` until it returns, for a graph whose first
  node is a loop whose body sleeps 20 ms per iteration (5 iterations): the caller must not wait
  for the loop. ``s.wait()`` then checks the loop ran fully.

Targets (issue "while and case..of"): sequential ≤ 2 µs per iteration; on a stream ≤ 30 µs per
iteration; run(stream=s) returns in ≤ 1 ms when a loop blocks.
"""

import time

import numpy as np

import nnc
from benchmarks import _util
from nnc.stream.inbox import handoff_roundtrip

SEQ_TARGET_US = 2.0
STREAM_TARGET_US = 30.0
RETURN_TARGET_MS = 1.0
FLOOR = "2 hand-offs (C)"


def loop_graph(n, mul):
    g, body = nnc.Graph(), nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    x = nnc.Tensor(np.ones(1, np.float32))
    if mul:
        m = body.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [x], [x])
        body.concat(noop, m)
    body.set_while_expr(lambda count: count < n, [], [noop])
    g.while_(body)
    return g, body


def blocked_graph():
    def nap(inputs, outputs):
        time.sleep(0.02)

    g, body = nnc.Graph(), nnc.Graph()
    b = body.exec(nnc.Cmd.custom(nap))
    body.set_while_expr(lambda count: count < 5, [], [b])
    loop = g.while_(body)
    after = g.exec(nnc.Cmd("NOOP"))
    g.concat(loop, after)
    return g, body


def run(n, repeat):
    s = nnc.Stream("cpu")
    graphs = {k: loop_graph(n, k.endswith("mul")) for k in ("noop", "mul")}

    def on_stream(g):
        def go():
            g.run(stream=s)
            s.wait()
        return go

    fns = {f"seq {k}": g.run for k, (g, _) in graphs.items()}
    fns.update({f"stream {k}": on_stream(g) for k, (g, _) in graphs.items()})
    fns[FLOOR] = lambda: handoff_roundtrip(n)
    samples = _util.measure_interleaved(fns, repeat)
    for k, (_, body) in graphs.items():
        assert body.while_count == n, (k, body.while_count)
    per_iter = {k: [t / n * 1e6 for t in v] for k, v in samples.items()}

    g, body = blocked_graph()
    returns, totals = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        g.run(stream=s)
        returns.append((time.perf_counter() - t0) * 1e3)
        s.wait()
        totals.append((time.perf_counter() - t0) * 1e3)
        assert body.while_count == 5
    us = {k: _util.median(v) for k, v in per_iter.items()}
    # Per round, an iteration on a stream over the floor measured right beside it.
    over_floor = {
        k: _util.median([a / b for a, b in zip(per_iter[k], per_iter[FLOOR])])
        for k in ("stream noop", "stream mul")
    }
    ret = _util.median(returns)
    return {
        "iterations": n,
        "us_per_iteration": us,
        "stream_over_handoff_floor": over_floor,
        "samples_us_per_iteration": per_iter,
        "return_ms": ret,
        "return_samples_ms": returns,
        "blocked_total_ms": _util.median(totals),
        "targets": {
            f"sequential <= {SEQ_TARGET_US} us/iteration": max(us["seq noop"], us["seq mul"])
            <= SEQ_TARGET_US,
            f"stream <= {STREAM_TARGET_US} us/iteration": max(us["stream noop"],
                                                               us["stream mul"])
            <= STREAM_TARGET_US,
            f"run(stream) returns in <= {RETURN_TARGET_MS} ms": ret <= RETURN_TARGET_MS,
        },
    }


def render(r):
    rows = [[k, _util.fmt(v)] for k, v in r["us_per_iteration"].items()]
    lines = [
        f"while loop, {r['iterations']} iterations per run: µs per iteration (median)",
        _util.table(["config", "µs / iteration"], rows),
        "on a stream, per round, over the 2-hand-off floor: "
        + ", ".join(f"{k} {v:.2f}x" for k, v in r["stream_over_handoff_floor"].items()),
        f"run(stream=s) with a blocked loop first: returns in {_util.fmt(r['return_ms'])} ms "
        f"(the whole run takes {_util.fmt(r['blocked_total_ms'])} ms)",
        "targets:",
    ]
    lines += [f"  [{'met' if ok else 'MISSED'}] {k}" for k, ok in r["targets"].items()]
    return "\n".join(lines)


def main(argv=None):
    p = _util.parser(__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=100_000)
    args = p.parse_args(argv)
    if args.iterations < 1 or args.repeat < 1:
        p.error("--iterations and --repeat must be at least 1")
    report = run(args.iterations, args.repeat)
    _util.publish(report, "control_flow", render, args.json)


if __name__ == "__main__":
    main()
