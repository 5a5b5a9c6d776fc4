"""Schedule.simulate (nnc/schedule/simulate.pyx): hand-computed makespans, an independent reference
simulator on random DAGs, bounds, bad costs, the trace file, and one comparison with a real run."""

import json
import math
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nnc


def chain_graph(names, edges):
    g = nnc.Graph()
    ex = {n: g.exec(nnc.Cmd("NOOP"), name=n) for n in names}
    for a, b in edges:
        g.concat(ex[a], ex[b])
    return g, ex


def diamond():
    # N1 -> (N2, N3) -> N4: the rank schedule puts N1, N2, N4 on stream 0 and N3 on stream 1
    # (docs/schedule.md, worked example); N3 waits on N1's signal, N4 on N3's.
    return chain_graph(["N1", "N2", "N3", "N4"],
                       [("N1", "N2"), ("N1", "N3"), ("N2", "N4"), ("N3", "N4")])


def test_a_chain_on_one_stream_takes_the_sum_of_its_costs():
    g, ex = chain_graph("abc", [("a", "b"), ("b", "c")])
    sched = nnc.static_schedule(g)
    assert sched.stream_count == 1
    r = sched.simulate({ex["a"]: 1.0, ex["b"]: 2.0, ex["c"]: 0.5})
    assert r.makespan == 3.5 and r.critical_path == 3.5 and r.work == 3.5
    assert list(r.start) == [0.0, 1.0, 3.0] and list(r.finish) == [1.0, 3.0, 3.5]
    assert r.stream_busy == (3.5,)


def test_a_diamond_on_two_streams_with_signals():
    g, ex = diamond()
    sched = nnc.static_schedule(g)
    assert sched.stream_count == 2 and sched[ex["N3"]].streams == (1,)
    costs = {ex["N1"]: 1.0, ex["N2"]: 2.0, ex["N3"]: 3.0, ex["N4"]: 1.0}
    r = sched.simulate(costs)
    # N2 [1, 3] on stream 0 and N3 [1, 4] on stream 1 overlap; N4 waits for N3's signal.
    assert r.makespan == 5.0 and r.critical_path == 5.0 and r.work == 7.0
    assert r.start[ex["N3"].index] == 1.0 and r.start[ex["N4"].index] == 4.0
    assert r.stream_busy == (4.0, 3.0)
    # One core: N2 and N3 take turns (N2 first: ready at the same time, enqueued first).
    one = sched.simulate(costs, cores=1)
    assert one.makespan == 7.0
    assert (one.start[ex["N2"].index], one.start[ex["N3"].index]) == (1.0, 3.0)
    assert sched.simulate(costs, cores=2).makespan == 5.0
    assert sched.simulate(costs, streams_overlap=False).makespan == 7.0
    # By index, as a sequence, as a function: the same answer.
    assert sched.simulate({e.index: c for e, c in costs.items()}).makespan == 5.0
    assert sched.simulate([1.0, 2.0, 3.0, 1.0]).makespan == 5.0
    assert sched.simulate(np.array([1.0, 2.0, 3.0, 1.0])).makespan == 5.0
    assert sched.simulate(lambda e: costs[e]).makespan == 5.0


def test_host_costs_delay_the_enqueue():
    g, ex = diamond()
    sched = nnc.static_schedule(g)
    # Enqueue ends: N1 0.5, N2 1.0, N3 (one wait) 1.75, N4 (one wait) 2.5.
    r = sched.simulate(lambda e: 1.0, launch_cost=0.5, signal_cost=0.25)
    assert list(r.start) == [0.5, 1.5, 1.75, 2.75] and r.makespan == 3.75
    # A slow host alone bounds the run: 4 launches of 10 s each, then the cheap nodes.
    assert sched.simulate(lambda e: 0.0, launch_cost=10.0).makespan == 40.0


def test_cores_take_the_earliest_ready_node_first():
    # Four independent branches after a root, on four streams, two cores.
    g, ex = chain_graph(["r", "a", "b", "c", "d"],
                        [("r", "a"), ("r", "b"), ("r", "c"), ("r", "d")])
    sched = nnc.static_schedule(g)
    assert sched.stream_count == 4
    costs = {ex["r"]: 1.0, ex["a"]: 3.0, ex["b"]: 1.0, ex["c"]: 1.0, ex["d"]: 1.0}
    assert sched.simulate(costs).makespan == 4.0
    two = sched.simulate(costs, cores=2)
    assert two.makespan == 4.0          # a [1, 4] on one core; b, c, d one after another
    assert sched.simulate(costs, cores=1).makespan == 7.0
    assert sched.simulate(costs, cores=3).makespan == 4.0


def test_a_loop_body_runs_its_tail_after_the_whole_head():
    x = nnc.Tensor(np.ones(1, np.float32))
    g, body = nnc.Graph(), nnc.Graph()
    h1 = body.exec(nnc.Cmd("NOOP"), name="h1")
    h2 = body.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [x], [x], name="h2")
    t = body.exec(nnc.Cmd("NOOP"), name="t")
    body.concat(h1, t)
    body.set_while_expr(lambda count: count < 2, [], [h1, h2])
    g.while_(body)
    nnc.static_schedule(g)
    bs = body.schedule
    assert bs is not None and bs.split == 2
    r = bs.simulate({h1: 1.0, h2: 5.0, t: 1.0})
    # The host evaluates the loop's expression once the head (h1 and h2) is done.
    assert r.start[t.index] == 5.0 and r.makespan == 6.0


def test_bad_costs_raise_naming_the_node():
    g, ex = diamond()
    sched = nnc.static_schedule(g)
    good = {ex["N1"]: 1.0, ex["N2"]: 1.0, ex["N3"]: 1.0, ex["N4"]: 1.0}
    with pytest.raises(nnc.ScheduleError, match="no cost for node.*N3"):
        sched.simulate({k: v for k, v in good.items() if k is not ex["N3"]})
    with pytest.raises(nnc.ScheduleError, match="N2.*-1.0.*finite and >= 0"):
        sched.simulate({**good, ex["N2"]: -1.0})
    with pytest.raises(nnc.ScheduleError, match="N4.*nan"):
        sched.simulate({**good, ex["N4"]: float("nan")})
    with pytest.raises(nnc.ScheduleError, match="N1.*inf"):
        sched.simulate([math.inf, 1, 1, 1])
    with pytest.raises(nnc.ScheduleError, match="N1.*number of seconds"):
        sched.simulate({**good, ex["N1"]: "1"})
    with pytest.raises(nnc.ScheduleError, match="N1.*number of seconds"):
        sched.simulate({**good, ex["N1"]: True})
    with pytest.raises(nnc.ScheduleError, match="given twice"):
        sched.simulate({**good, 0: 1.0})
    with pytest.raises(nnc.ScheduleError, match="out of range"):
        sched.simulate({**good, 9: 1.0})
    other, oex = diamond()
    with pytest.raises(nnc.ScheduleError, match="another graph"):
        sched.simulate({**good, oex["N1"]: 1.0})
    with pytest.raises(nnc.ScheduleError, match="one cost per node.*4.*not 3"):
        sched.simulate([1.0, 1.0, 1.0])

    def boom(e):
        raise ValueError("no table")

    with pytest.raises(nnc.ScheduleError, match="failed on node.*N1") as info:
        sched.simulate(boom)
    assert isinstance(info.value.__cause__, ValueError)
    for bad in ("fast", 3, None):
        with pytest.raises(nnc.ScheduleError, match="costs"):
            sched.simulate(bad)     # type: ignore[arg-type]
    for kw in ({"cores": 0}, {"cores": True}, {"cores": 1.5}, {"signal_cost": -1.0},
               {"launch_cost": math.nan}, {"streams_overlap": "no"}):
        with pytest.raises(nnc.ScheduleError):
            sched.simulate(good, **kw)  # type: ignore[arg-type]


def test_a_stale_schedule_is_refused():
    g, ex = diamond()
    sched = nnc.static_schedule(g)
    g.exec(nnc.Cmd("NOOP"))
    with pytest.raises(nnc.ScheduleError, match="stale"):
        sched.simulate(lambda e: 1.0)


def test_edge_cases_empty_graphs_idle_nodes_and_hand_made_schedules():
    empty = nnc.Graph()
    r = nnc.static_schedule(empty).simulate([], cores=2)
    assert (r.makespan, r.critical_path, r.work, len(r.start)) == (0.0, 0.0, 0.0, 0)
    # A node on no source-to-destination path does not run: NaN, and it needs no cost.
    g, ex = chain_graph("abx", [("a", "b")])
    g.sources, g.destinations = [ex["a"]], [ex["b"]]
    r = nnc.static_schedule(g).simulate({ex["a"]: 1.0, ex["b"]: 1.0})
    assert r.makespan == 2.0 and math.isnan(r.start[ex["x"].index])
    # from_tables: a node left without a stream is refused, with or without overlap.
    g, ex = diamond()
    sched = nnc.Schedule.from_tables(g, {ex["N1"]: 0, ex["N2"]: 0, ex["N4"]: 0})
    for overlap in (True, False):
        with pytest.raises(nnc.ScheduleError, match="N3.*stream -1"):
            sched.simulate(lambda e: 1.0, streams_overlap=overlap)
    # A wait on a signal nobody emits earlier is a no-op (CUDA event semantics): N3 waits on
    # N4's signal, which comes later, so it starts at once.
    sched = nnc.Schedule.from_tables(g, {ex["N1"]: 0, ex["N2"]: 0, ex["N3"]: 1, ex["N4"]: 0},
                                     signals={ex["N4"]: 0}, waits={ex["N3"]: [0]})
    r = sched.simulate(lambda e: 1.0)
    assert r.start[ex["N3"].index] == 0.0
    # A freed graph: its schedule cannot name nodes any more.
    g, ex = diamond()
    sched = nnc.static_schedule(g)
    del g, ex
    import gc

    gc.collect()
    with pytest.raises(nnc.ScheduleError, match="freed"):
        sched.simulate(lambda e: 1.0)


def test_profile_costs_and_the_trace_file(tmp_path):
    a = nnc.Tensor(np.ones((64, 64), np.float32))
    b, c, d = (nnc.Tensor.empty((64, 64)) for _ in range(3))
    g = nnc.Graph()
    gemm = g.exec(nnc.Cmd("GEMM"), [a, a], [b])
    half = g.exec(nnc.Cmd("SCALAR_MUL", a=0.5), [b], [c])
    relu = g.exec(nnc.Cmd("RELU"), [b], [d])
    g.concat(gemm, half)
    g.concat(gemm, relu)
    sched = nnc.static_schedule(g)
    r = sched.simulate("profile")
    assert 0 < r.critical_path <= r.makespan <= r.work + 1e-12
    path = tmp_path / "sim.json"
    r.trace(path)
    doc = json.loads(path.read_text())
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert sorted(e["args"]["node"] for e in slices) == [0, 1, 2]
    assert {e["tid"] for e in slices} == {0, 1}
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"stream #0", "stream #1"}
    flows = [e for e in doc["traceEvents"] if e["ph"] in "sf"]
    assert len(flows) == 2 and flows[0]["ts"] <= flows[1]["ts"]   # relu waits on gemm


# -- an independent reference on random DAGs -------------------------------------------------


def reference(sched, cost, cores):
    """The model, written plainly: repeatedly start the ready node that became ready first."""
    order = [e.index for e in sched.order]
    stream = {i: sched.stream_of(i) for i in order}
    emitter = {}
    for i in order:
        for s in sched[sched.order[order.index(i)]].signals:
            emitter.setdefault(s, i)
    pos = {i: k for k, i in enumerate(order)}
    deps = {}
    for k, i in enumerate(order):
        prev = [j for j in order[:k] if stream[j] == stream[i]]
        d = prev[-1:]
        for s in sched[sched.order[k]].waits:
            if s in emitter and pos[emitter[s]] < k:
                d.append(emitter[s])
        deps[i] = d
    finish, start = {}, {}
    free = [0.0] * cores if cores else None
    while len(finish) < len(order):
        ready = [(max([0.0] + [finish[j] for j in deps[i]]), pos[i], i) for i in order
                 if i not in finish and all(j in finish for j in deps[i])]
        t, _, i = min(ready)
        if free is not None:
            free.sort()
            t = max(t, free.pop(0))
            free.append(t + cost[i])
        start[i], finish[i] = t, t + cost[i]
    return start, finish


@st.composite
def dags(draw):
    n = draw(st.integers(1, 40))
    edges = set()
    for v in range(1, n):
        for _ in range(draw(st.integers(0, 3))):
            edges.add((draw(st.integers(max(0, v - draw(st.sampled_from([3, 10, 40]))), v - 1)),
                       v))
    costs = [draw(st.sampled_from([0.0, 1.0, 2.0, 3.0, 7.0])) for _ in range(n)]
    return n, sorted(edges), costs, draw(st.integers(1, 4)), draw(st.sampled_from([None, 1, 2,
                                                                                   3]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags())
def test_random_dags_match_the_reference_and_the_bounds(case):
    n, edges, costs, max_streams, cores = case
    g = nnc.Graph()
    ex = [g.exec(nnc.Cmd("NOOP"), name=f"n{i}") for i in range(n)]
    for a, b in edges:
        g.concat(ex[a], ex[b])
    sched = nnc.static_schedule(g, max_streams=max_streams)
    r = sched.simulate(costs, cores=cores)
    start, finish = reference(sched, costs, cores)
    assert [r.start[i] for i in range(n)] == [start[i] for i in range(n)]
    assert [r.finish[i] for i in range(n)] == [finish[i] for i in range(n)]
    assert r.makespan == max(finish.values())
    assert r.critical_path <= r.makespan <= sum(costs)
    assert r.work == sum(costs) == sum(r.stream_busy)
    assert sched.simulate(costs, streams_overlap=False).makespan == sum(costs)
    assert sched.simulate(costs, cores=1).makespan == sum(costs)
    # At most one node per stream runs at once: as many cores as streams never bind.
    assert (sched.simulate(costs, cores=sched.stream_count).makespan
            == sched.simulate(costs).makespan)


# -- against a measured run --------------------------------------------------------------------


def test_the_simulated_makespan_is_near_a_measured_run():
    """Nodes that sleep (releasing the GIL, so robust on a busy 2-core machine): a root, four
    30 ms branches, a join. Simulated with as many cores as the worker pool has threads."""
    def sleeper(seconds):
        def fn(inputs, outputs):
            time.sleep(seconds)
        return nnc.Cmd.custom(fn)

    g = nnc.Graph()
    root = g.exec(sleeper(0.01), name="root")
    join = g.exec(sleeper(0.01), name="join")
    for k in range(4):
        b = g.exec(sleeper(0.03), name=f"b{k}")
        g.concat(root, b)
        g.concat(b, join)
    sched = nnc.static_schedule(g)
    costs = {root: 0.01, join: 0.01, **{e: 0.03 for e in g.execs if e not in (root, join)}}
    sim = sched.simulate(costs, cores=nnc.get_num_threads())
    s = nnc.Stream("cpu")
    g.run(stream=s)
    s.wait()
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        g.run(stream=s)
        s.wait()
        best = min(best, time.perf_counter() - t0)
    ratio = sim.makespan / best
    print(f"simulated {sim.makespan * 1e3:.1f} ms, measured {best * 1e3:.1f} ms, "
          f"ratio {ratio:.2f}")
    assert 0.3 < ratio < 1.5        # sleeps overshoot, never undershoot; a loose sanity bound


@pytest.mark.slow
def test_the_benchmark_runs_end_to_end():
    """benchmarks/simulate.py on the small input, one round: every field there, no timing
    asserted."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "benchmarks.simulate", "--size", "75",
                        "--repeat", "1", "--profiles", "1", "--pause", "0", "--json"],
                       cwd=root, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    (res,) = report["results"]
    assert res["size"] == 75 and res["nodes"] == 204
    rows = {row["config"]: row for row in res["rows"]}
    assert set(rows) == {"seq", "rank_T", "rank"}
    for row in rows.values():
        assert row["critical_path_ms"] <= row["simulated_ms"] <= row["work_ms"] + 1e-9
        assert row["measured_ms"] > 0 and row["sim_over_measured"] > 0
    assert rows["seq"]["simulated_ms"] == pytest.approx(rows["seq"]["work_ms"])
