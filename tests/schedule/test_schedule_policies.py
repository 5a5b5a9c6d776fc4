"""Scheduling policies: the registry behind ``nnc.static_schedule(policy=...)``, node
costs, the builder's checks of a policy's answer, and the "list" policy (docs/schedule.md,
"Policies"). Every schedule is verified and, on random DAGs, run bit-identical to a sequential run.
"""

import math
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_case_of import piecewise_branches, piecewise_expr
from test_graph import scalar
from test_run import random_sum_graph
from test_schedule import build, check, dags, random_graph

import nnc
from nnc.schedule.schedule import POLICIES, _register_python_policy, _unregister_policy
from nnc.stream.stream import Stream

DIAMOND = [(0, 1), (0, 2), (1, 3), (2, 3)]


def noop_graph(n, edges):
    g = nnc.Graph()
    ex = [g.exec(nnc.Cmd("NOOP"), name=f"n{i}") for i in range(n)]
    for u, v in edges:
        g.concat(ex[u], ex[v])
    return g, ex


@pytest.fixture
def python_policy():
    """Register Python policies for one test; they are removed afterwards."""
    names = []

    def register(name, fn):
        _register_python_policy(name, fn)
        names.append(name)

    yield register
    for name in names:
        _unregister_policy(name)


# -- the registry ------------------------------------------------------------------------------

def test_registry_lists_the_policies():
    assert POLICIES["rank"] is None
    assert [p.name for p in list(POLICIES.values())[1:]] == ["ios", "list", "nimble",
                                                               "wavefront", "asap"]
    g, _ = noop_graph(4, DIAMOND)
    for name in POLICIES:
        sched = nnc.static_schedule(g, policy=name)
        assert sched.policy == name
        sched.verify()


@pytest.mark.parametrize("bad", ["IOS", "", None, 3, "RANK"])
def test_unknown_policy_lists_the_registered_ones(bad):
    g, _ = noop_graph(2, [(0, 1)])
    with pytest.raises(nnc.ScheduleError,
                       match=r"unknown scheduling policy.*'rank', 'ios', 'list'"):
        nnc.static_schedule(g, policy=bad)


def test_a_registered_name_cannot_be_taken_twice(python_policy):
    with pytest.raises(nnc.ScheduleError, match="already registered"):
        python_policy("list", lambda succ, cap: ([0] * len(succ), []))
    with pytest.raises(nnc.ScheduleError, match="needs a callable"):
        python_policy("x", 3)
    with pytest.raises(nnc.ScheduleError, match="not a policy registered from Python"):
        _unregister_policy("list")


def test_a_python_policy_runs_through_the_builder(python_policy):
    """Two streams by parity of position; the builder places the signals and waits."""
    seen = []

    def parity(succ, cap):
        seen.append((succ, cap))
        return [k % 2 for k in range(len(succ))], []

    python_policy("parity", parity)
    g, ex = noop_graph(4, DIAMOND)
    sched = nnc.static_schedule(g, policy="parity", max_streams=3)
    check(sched)
    assert seen == [([[1, 2], [3], [3], []], 3)]
    assert [sched.stream_of(e.index) for e in ex] == [0, 1, 0, 1]
    assert sched.stream_count == 2 and sched.policy == "parity"


def test_extra_edges_are_enforced(python_policy):
    """Two independent nodes on two streams; an extra edge 0 -> 1 makes 1 wait on 0."""
    python_policy("split", lambda succ, cap: ([0, 1], [(0, 1)]))
    python_policy("apart", lambda succ, cap: ([0, 1], []))
    g, ex = noop_graph(2, [])
    assert nnc.static_schedule(g, policy="apart")[ex[1]].waits == ()
    sched = nnc.static_schedule(g, policy="split")
    check(sched)
    assert sched[ex[1]].waits == sched[ex[0]].signals and sched.entry_streams == ()


def test_a_policy_may_give_its_own_run_order(python_policy):
    """Independent nodes 1 and 2 of a diamond run in the policy's order (2 before 1, on one
    stream); streams and extra edges are by the builder's positions."""
    python_policy("swap", lambda succ, cap: ([0, 1, 0, 0], [], [0, 2, 1, 3]))
    g, ex = noop_graph(4, DIAMOND)
    sched = nnc.static_schedule(g, policy="swap")
    check(sched)
    assert [e.index for e in sched.order] == [0, 2, 1, 3]
    assert [e.name for e in sched.nodes_on(0)] == ["n0", "n2", "n3"]
    assert [sched.stream_of(e.index) for e in ex] == [0, 1, 0, 0]
    assert sched[ex[2]].waits == () and sched[ex[1]].waits == sched[ex[0]].signals
    assert sched[ex[3]].waits == sched[ex[1]].signals
    # An extra edge 1 -> 2 (old positions) cannot be kept by the order 2 before 1.
    python_policy("against", lambda succ, cap: ([0, 1, 1, 0], [(1, 2)], [0, 2, 1, 3]))
    with pytest.raises(nnc.ScheduleError, match=r"'against'.*position 2 before 1, against "
                                                r"the extra edge 1 -> 2"):
        nnc.static_schedule(g, policy="against")


def test_every_policy_order_holds_each_run_node_once():
    """Every policy's order (its own, for "ios" and "wavefront") on random graphs verifies and
    holds each node that runs exactly once (bit-identical runs: the hypothesis test above)."""
    for seed in range(3):
        for policy in POLICIES:
            g = random_graph(60, window=8, seed=seed)
            sched = nnc.static_schedule(g, policy=policy, max_streams=2)
            sched.verify()
            assert sorted(e.index for e in sched.order) == sorted(e.index for e in g.execs)


BAD_ORDERS = [
    ([0, 1, 2], "run order of 3 positions for 4 nodes"),
    ([0, 1, 1, 3], r"not a permutation of the positions 0 .. 3 \(entry 2: 1\)"),
    ([0, 1, 2, 4], r"not a permutation.*entry 3: 4"),
    ([3, 1, 2, 0], "ordered position 1 before its predecessor 0"),
    ([0, 3, 1, 2], "ordered position 3 before its predecessor 1"),
]


@pytest.mark.parametrize("order, message", BAD_ORDERS)
def test_a_bad_run_order_raises_naming_the_policy(python_policy, order, message):
    python_policy("bad_order", lambda succ, cap: ([0, 0, 0, 0], [], order))
    g, _ = noop_graph(4, DIAMOND)
    with pytest.raises(nnc.ScheduleError, match=rf"policy 'bad_order'.*{message}"):
        nnc.static_schedule(g, policy="bad_order")
    assert g.schedule is None


BAD_ANSWERS = [
    (lambda succ, cap: ([0, 0, 3, 0], []), 0, "left stream 1 of 4 unused"),
    (lambda succ, cap: ([0, -1, 0, 0], []), 0, "position 1 the stream -1, outside 0 .. 0"),
    (lambda succ, cap: ([0, 2, 2, 0], []), 0, "left stream 1 of 3 unused"),
    (lambda succ, cap: ([0, 1, 2, 0], []), 2, r"3 streams for 4 nodes \(max_streams=2\)"),
    (lambda succ, cap: ([0, 1, 2, 3, 4], []), 0, "assigned 5 streams for 4 nodes"),
    (lambda succ, cap: ([0, 0, 0], []), 0, "assigned 3 streams for 4 nodes"),
    (lambda succ, cap: ([0, 0, "a", 0], []), 0, "not an int"),
    (lambda succ, cap: ([0, 2**40, 0, 0], []), 0, "not an int"),
    (lambda succ, cap: ([0, 1.0, 0, 0], []), 0, "not an int"),
    (lambda succ, cap: ([0, 0, 0, 0], [(2, 1)]), 0, r"extra edge \(2, 1\)"),
    (lambda succ, cap: ([0, 0, 0, 0], [(0, 4)]), 0, r"extra edge \(0, 4\)"),
    (lambda succ, cap: ([0, 0, 0, 0], [(1, 1)]), 0, r"extra edge \(1, 1\)"),
    (lambda succ, cap: ([0, 0, 0, 0], [(-1, 1)]), 0, r"extra edge \(-1, 1\)"),
    (lambda succ, cap: ([0, 0, 0, 0], [(0, 1, 2)]), 0, "not a pair"),
    (lambda succ, cap: ([0, 0, 0, 0], [3]), 0, "not a pair"),
    (lambda succ, cap: ([0, 0, 0, 0], [(0.5, 2)]), 0, "not a pair"),
    (lambda succ, cap: 1 / 0, 0, "failed: ZeroDivisionError"),
]


@pytest.mark.parametrize("fn, cap, message", BAD_ANSWERS)
def test_a_bad_policy_answer_raises_naming_the_policy(python_policy, fn, cap, message):
    python_policy("bad", fn)
    g, _ = noop_graph(4, DIAMOND)
    with pytest.raises(nnc.ScheduleError, match=rf"policy 'bad'.*{message}"):
        nnc.static_schedule(g, policy="bad", max_streams=cap)
    assert g.schedule is None           # nothing half-built was kept
    nnc.static_schedule(g, policy="list").verify()


# -- costs -------------------------------------------------------------------------------------

def test_cost_forms_reach_the_policy(python_policy):
    """A dict by GraphExec or index, a callable and "profile" all give the same per-node order
    of magnitude; the "list" policy keeps the costly branch on the entry stream."""
    g, ex = noop_graph(6, [(0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 5)])
    heavy = {0: 1, 1: 1, 2: 9, 3: 1, 4: 9, 5: 1}
    for costs in (heavy, {ex[i]: c for i, c in heavy.items()}, lambda e: heavy[e.index]):
        sched = nnc.static_schedule(g, policy="list", costs=costs)
        check(sched)
        # 0 -> 2 -> 4 -> 5 is the critical path: one stream, no wait on it.
        assert len({sched.stream_of(i) for i in (0, 2, 4, 5)}) == 1
        assert sched.stream_of(1) == sched.stream_of(3) != sched.stream_of(0)
    profiled = nnc.static_schedule(g, policy="list", costs="profile")
    check(profiled)
    assert profiled.stream_count == 2


@pytest.mark.parametrize("costs, message", [
    ({0: -1.0}, r"cost of <GraphExec #0 n0.*>= 0"),
    ({1: math.nan}, r"cost of <GraphExec #1 n1.*finite"),
    ({2: "fast"}, r"cost of <GraphExec #2 n2.*number"),
    ({3: True}, r"cost of <GraphExec #3 n3.*number"),
    ({7: 1.0}, "neither a GraphExec nor a node index"),
    ({"n0": 1.0}, "neither a GraphExec nor a node index"),
    ({0: 1.0, 1: 1.0}, r"but not <GraphExec #2 n2"),
    (lambda e: -e.index, r"cost of <GraphExec #1 n1"),
    (lambda e: {}[e], r"costs function failed on <GraphExec #0 n0"),
    ("slow", "costs must be None"),
    (3.0, "costs must be None"),
])
def test_bad_costs_raise_naming_the_node(costs, message):
    g, _ = noop_graph(4, DIAMOND)
    with pytest.raises(nnc.ScheduleError, match=message):
        nnc.static_schedule(g, policy="list", costs=costs)


def test_costs_survive_a_rebuild_and_a_dict_must_cover_new_nodes():
    g, ex = noop_graph(3, [(0, 1), (0, 2)])
    calls = []

    def cost(e):
        calls.append(e.index)
        return 1.0

    nnc.static_schedule(g, policy="list", costs=cost)
    tail = g.exec(nnc.Cmd("NOOP"))
    g.concat(ex[1], tail)
    calls.clear()
    sched = g.schedule
    assert sched.policy == "list" and sorted(calls) == [0, 1, 2, 3]
    sched.verify()
    nnc.static_schedule(g, policy="list", costs={e: 1.0 for e in g.execs})
    g.concat(ex[2], g.exec(nnc.Cmd("NOOP")))
    with pytest.raises(nnc.ScheduleError, match="but not <GraphExec #4"):
        _ = g.schedule


# -- the "list" policy -------------------------------------------------------------------------

def test_list_fills_the_cap_and_starts_each_node_as_early_as_it_can():
    """A fan of 6 equal nodes after a source on 3 streams: each stream gets two of them."""
    g, ex = noop_graph(7, [(0, i) for i in range(1, 7)])
    sched = nnc.static_schedule(g, policy="list", max_streams=3)
    check(sched)
    streams = [sched.stream_of(i) for i in range(7)]
    assert streams == [0, 0, 1, 2, 0, 1, 2]
    unlimited = nnc.static_schedule(g, policy="list")
    assert unlimited.stream_count == 6


# Every policy besides "rank" (tests/schedule/test_schedule.py pins rank's own output).
POLICY_NAMES = ["list", "nimble", "wavefront", "asap", "ios"]


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICY_NAMES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(), st.booleans())
def test_policy_on_random_dags_verifies_within_the_cap(policy, case, weighted):
    n, edges, cmds, max_streams = case
    g = build(n, edges, cmds)
    costs = (lambda e: float(1 + (e.index * 7919) % 13)) if weighted else None
    sched = nnc.static_schedule(g, policy=policy, max_streams=max_streams, costs=costs)
    sched.verify()
    assert 1 <= sched.stream_count <= (max_streams or n)
    assert sorted({sched.stream_of(i) for i in range(n)}) == list(range(sched.stream_count))


@pytest.mark.parametrize("policy", POLICY_NAMES)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_policy_runs_equal_sequential_bit_for_bit(policy, data):
    n = data.draw(st.integers(1, 40))
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                               max_size=3 * n))
    edges = sorted({(u, v) for u, v in pairs if u < v})
    max_streams = data.draw(st.sampled_from([0, 1, 2, 3]))
    g, ys = random_sum_graph(n, edges, seed=n)
    g.run()
    expected = [y.numpy().copy() for y in ys]
    for y in ys:
        y.numpy().fill(0)
    sched = nnc.static_schedule(g, max_streams=max_streams, policy=policy,
                                costs=lambda e: float(e.index % 5))
    sched.verify()
    s = Stream()
    g.run(stream=s)
    s.wait()
    for y, e in zip(ys, expected):
        assert np.array_equal(y.numpy(), e)


def _run_scheduled(g):
    s = Stream("cpu")
    g.run(stream=s)
    s.wait()


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_policy_schedules_while_and_case_of_bodies(policy):
    """while (count < 4) { case..of piecewise on x } then z = 0.3 x, scheduled by each policy:
    the body and each branch get that policy's schedules too, and the run gives the documented
    values."""
    x, z = scalar(1.226), scalar(0)
    g, body = nnc.Graph(), nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    c = body.case_of([x], [x])
    body.set_case_of_expr(c, piecewise_expr, 0)
    branches = piecewise_branches(x)
    for k, b in enumerate(branches):
        body.set_case_of(c, b, k)
    body.concat(noop, c)
    body.set_while_expr(lambda count: count < 4, [], [noop])
    loop = g.while_(body)
    g.concat(loop, g.exec(nnc.Cmd("SCALAR_MUL", a=0.3), [x], [z]))
    nnc.static_schedule(g, policy=policy, max_streams=2, costs=lambda e: 1e-3)
    for sub in (g, body, *branches):
        assert sub.schedule.policy == policy
        sub.schedule.verify()
    _run_scheduled(g)
    assert x.numpy()[0] == pytest.approx(1.014125, abs=1e-5)
    assert z.numpy()[0] == pytest.approx(0.3042375, abs=1e-5)


def test_list_with_profiled_costs_runs_a_loop():
    """"profile" times the top graph; the loop body, timed only as a whole, gets unit costs."""
    x, y, z = scalar(0.34), scalar(1.11), scalar(1)
    g, body = nnc.Graph(), nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    prod = body.exec(nnc.Cmd("EWPROD"), [y, z], [z])
    body.concat(noop, prod)
    loop = g.while_(body)
    body.set_while_expr(lambda count: count < 5, [], [noop])
    g.concat(loop, g.exec(nnc.Cmd("EWPROD"), [x, z], [z]))
    nnc.static_schedule(g, policy="list", costs="profile")
    z.numpy()[0] = 1
    _run_scheduled(g)
    assert z.numpy()[0] == pytest.approx(0.5729198, abs=1e-6)
    assert body.schedule.policy == "list"


@pytest.mark.slow
def test_policies_on_a_100k_node_random_dag():
    """Timing printed, never asserted (docs/schedule.md quotes it)."""
    g = random_graph(100_000, window=64, seed=3)
    for policy in ["rank", *(p for p in POLICY_NAMES if p != "ios")]:   # ios: its own test
        t0 = time.perf_counter()
        sched = nnc.static_schedule(g, policy=policy)
        dt = time.perf_counter() - t0
        print(f"\n{policy}: 100k-node random DAG scheduled in {dt:.3f} s, "
              f"{sched.stream_count} streams, {sched.signal_count} signals")
    sched.verify()
