"""Node costs under hostile use (docs/schedule.md, "Costs"): a costs function that changes the
graph it costs, costs no double holds, and costs whose sums leave the doubles. Each policy and
the simulator check the costs on one path and mark the graph busy while user code runs; what
once crashed or allocated without bound runs in a child process with a timeout and a cap on
its address space.
"""

import fractions
import math
import sys

import numpy as np
import pytest
from test_schedule import _run_isolated

import nnc
from nnc.schedule.schedule import POLICIES

DBL_MAX = sys.float_info.max
COST_POLICIES = [name for name in POLICIES if name != "rank"]   # "rank" reads no costs

# A child's preamble: a cap on the address space, so an allocation without bound fails fast
# (MemoryError) instead of taking the shared machine's memory; and a diamond of NOOPs.
CHILD = """
import resource, sys
import numpy as np
import nnc
vm = [int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmSize")]
limit = vm[0] * 1024 + (1 << 30)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

def diamond():
    g = nnc.Graph()
    ex = [g.exec(nnc.Cmd("NOOP"), name=f"n{i}") for i in range(4)]
    for u, v in [(0, 1), (0, 2), (1, 3), (2, 3)]:
        g.concat(ex[u], ex[v])
    return g, ex
"""


def run_child(code, timeout=60):
    return _run_isolated(CHILD + code, timeout=timeout)


def diamond():
    g = nnc.Graph()
    ex = [g.exec(nnc.Cmd("NOOP"), name=f"n{i}") for i in range(4)]
    for u, v in [(0, 1), (0, 2), (1, 3), (2, 3)]:
        g.concat(ex[u], ex[v])
    return g, ex


# -- the graph is busy while user code runs ----------------------------------------------------

# Every way to change or run the graph, tried from inside the costs function; each must raise
# GraphError naming the scheduling (these crashed "list", "nimble" and "asap" and gave "ios"
# and "wavefront" a schedule for the old node count).
MUTATE = """
x = nnc.Tensor(np.ones(1, np.float32))

def mutations(g, ex):
    return {
        "exec": lambda: g.exec(nnc.Cmd("NOOP")),
        "concat": lambda: g.concat(ex[1], ex[2]),
        "disjoin": lambda: g.disjoin(ex[0], ex[1]),
        "sources": lambda: setattr(g, "sources", [ex[1]]),
        "destinations": lambda: setattr(g, "destinations", [ex[1]]),
        "set_io": lambda: ex[1].set_io([x], [x]),
        "backend": lambda: setattr(ex[1], "backend", ex[1].backend),
        "run": lambda: g.run(),
        "simplify": lambda: g.simplify(),
        "while_": lambda: g.while_(nnc.Graph()),
        "case_of": lambda: g.case_of([x], [x]),
    }

def try_all(g, ex, seen):
    for name, fn in mutations(g, ex).items():
        try:
            fn()
        except nnc.GraphError as err:
            seen.setdefault(name, str(err))
        else:
            seen.setdefault(name, "ACCEPTED")

def refused(g, seen, n):
    assert len(g) == n and set(seen) == set(mutations(g, [None] * 3)), (len(g), seen)
    for name, msg in seen.items():
        assert "being scheduled" in msg or "being simulated" in msg, (name, msg)
"""


@pytest.mark.parametrize("policy", COST_POLICIES)
def test_a_costs_function_cannot_change_the_graph_it_schedules(policy):
    out = run_child(MUTATE + f"""
g, ex = diamond()
seen = {{}}

def cost(e):
    try_all(g, ex, seen)
    return 1.0

sched = nnc.static_schedule(g, policy={policy!r}, costs=cost)
refused(g, seen, 4)
sched.verify()
assert len(sched.order) == 4 and not sched.stale
# Released afterwards: the graph changes again, and a rebuild (g.schedule) calls the costs
# function under the same guard.
g.concat(ex[1], ex[2])
seen.clear()
assert g.schedule.policy == {policy!r} and len(seen) == len(mutations(g, ex))
refused(g, seen, 4)
g.schedule.verify()
print("ok", seen["exec"])
""")
    assert "ok cannot add a node while the graph is being scheduled" in out


def test_user_code_during_a_schedule_or_a_simulation_leaves_the_graph_idle_on_any_exit():
    """The busy mark goes on every exit: a return, an exception, a BaseException, an
    exception whose repr raises, a bad cost."""
    out = run_child(MUTATE + """
class Unprintable(Exception):
    def __repr__(self):
        raise RuntimeError("no repr")
    __str__ = __repr__

raised = [KeyboardInterrupt(), SystemExit(3), GeneratorExit(), Unprintable(), ValueError("v")]
for policy in ("list", "ios"):
    for exc in raised:
        g, ex = diamond()

        def cost(e):
            raise exc

        try:
            nnc.static_schedule(g, policy=policy, costs=cost)
        except BaseException as got:
            assert got is exc or isinstance(got, nnc.ScheduleError), repr(got)
            assert isinstance(got, (KeyboardInterrupt, SystemExit, GeneratorExit,
                                    nnc.ScheduleError)), type(got)
        g.exec(nnc.Cmd("NOOP"))                 # idle again
        sched = nnc.static_schedule(g, policy=policy)
        g.exec(nnc.Cmd("NOOP"))
        for bad in (exc, "fast"):

            def sim_cost(e, bad=bad):
                if isinstance(bad, BaseException):
                    raise bad
                return bad

            try:
                nnc.static_schedule(g).simulate(sim_cost)
            except BaseException as got:
                assert got is bad or isinstance(got, nnc.ScheduleError), repr(got)
            else:
                raise AssertionError("simulate accepted a failing cost")
            g.exec(nnc.Cmd("NOOP"))             # idle again
print("ok")
""")
    assert out.split() == ["ok"]


def test_a_simulation_keeps_the_graph_from_changing_under_its_costs():
    out = run_child(MUTATE + """
g, ex = diamond()
sched = nnc.static_schedule(g)
seen = {}

def cost(e):
    try_all(g, ex, seen)
    return 1.0

r = sched.simulate(cost)
refused(g, seen, 4)
assert r.makespan == 3.0 and not sched.stale

class Costs(dict):                      # a mapping whose reads change the graph
    def items(self):
        try_all(g, ex, seen)
        return super().items()

seen.clear()
assert sched.simulate(Costs({e: 1.0 for e in ex})).makespan == 3.0
refused(g, seen, 4)
print("ok", seen["exec"])
""")
    assert "ok cannot add a node while the graph is being simulated" in out


def test_a_loop_bodys_costs_cannot_change_the_loop_or_its_parent():
    out = run_child(MUTATE + """
g, body = nnc.Graph(), nnc.Graph()
b = [body.exec(nnc.Cmd("NOOP"), name=f"b{i}") for i in range(3)]
body.concat(b[0], b[1])
body.set_while_expr(lambda count: count < 2, [], [b[0]])
w = g.while_(body)
after = g.exec(nnc.Cmd("NOOP"))
g.concat(w, after)
seen_g, seen_body = {}, {}

def cost(e):
    try_all(g, [w, after, after], seen_g)
    try_all(body, b, seen_body)
    return 1.0

nnc.static_schedule(g, policy="list", costs=cost)
assert len(g) == 2 and len(body) == 3, (len(g), len(body))
for seen in (seen_g, seen_body):
    for name, msg in seen.items():
        assert "being scheduled" in msg, (name, msg)
body.schedule.verify()
g.run()
print("ok")
""")
    assert out.split() == ["ok"]


def test_a_python_policy_cannot_change_the_graph_it_schedules():
    from nnc.schedule.schedule import _register_python_policy, _unregister_policy

    g, ex = diamond()
    seen = []

    def policy(succ, cap):
        try:
            g.exec(nnc.Cmd("NOOP"))
        except nnc.GraphError as err:
            seen.append(str(err))
        return [0] * len(succ), []

    _register_python_policy("meddler", policy)
    try:
        nnc.static_schedule(g, policy="meddler").verify()
    finally:
        _unregister_policy("meddler")
    assert len(g) == 4 and len(seen) == 1 and "being scheduled" in seen[0]


# -- one check of every cost -------------------------------------------------------------------

class BadFloat(float):
    def __float__(self):
        raise RuntimeError("no float")


class BadRepr(float):
    def __repr__(self):
        raise RuntimeError("no repr")


# (cost of node n1, what the ScheduleError says about it)
BAD_COSTS = [
    (-1.0, r"n1.*-1\.0.*finite and >= 0"),
    (math.nan, r"n1.*nan.*finite and >= 0"),
    (math.inf, r"n1.*inf.*finite and >= 0"),
    (-math.inf, r"n1.*-inf.*finite and >= 0"),
    (10**400, r"n1.*100000.*too large for a double"),
    (-(10**400), r"n1.*too large for a double"),
    (fractions.Fraction(10**400, 3), r"n1.*too large for a double"),
    (np.longdouble("1e4000"), r"n1.*too large for a double"),
    ("1", r"n1.*number of seconds.*'1'"),
    (True, r"n1.*number of seconds.*True"),
    (np.bool_(True), r"n1.*number of seconds.*True"),
    (None, r"n1.*number of seconds.*None"),
    (1j, r"n1.*number of seconds"),
    (BadFloat(1.0), r"n1.*number of seconds"),
    (BadRepr(-1.0), r"n1.*BadRepr.*finite and >= 0"),
]


@pytest.mark.parametrize("bad, message", BAD_COSTS,
                         ids=[f"{i}-{type(b).__name__}" for i, (b, _) in enumerate(BAD_COSTS)])
@pytest.mark.parametrize("form", ["dict", "callable", "simulate dict", "simulate callable",
                                  "simulate sequence"])
def test_every_bad_cost_is_a_schedule_error_naming_the_node_and_value(bad, message, form):
    g, ex = diamond()
    table = {e: 1.0 for e in ex}
    table[ex[1]] = bad
    with np.errstate(over="ignore"), pytest.raises(nnc.ScheduleError, match=message):
        if form == "dict":
            nnc.static_schedule(g, policy="list", costs=table)
        elif form == "callable":
            nnc.static_schedule(g, policy="ios", costs=table.__getitem__)
        else:
            sched = nnc.static_schedule(g)
            if form == "simulate dict":
                sched.simulate(table)
            elif form == "simulate callable":
                sched.simulate(table.__getitem__)
            else:
                sched.simulate([table[e] for e in ex])


def test_ordinary_cost_types_are_accepted_everywhere():
    g, ex = diamond()
    for c in (1, 1.0, np.float32(1.0), np.int64(1), fractions.Fraction(1, 1), DBL_MAX / 8):
        costs = {e: c for e in ex}
        nnc.static_schedule(g, policy="list", costs=costs).verify()
        assert nnc.static_schedule(g).simulate(costs).makespan == 3.0 * float(c)


def test_costs_whose_sum_overflows_raise_naming_the_node():
    """In a child: "ios" once allocated without bound on such costs."""
    out = run_child(f"""
import re
from nnc.schedule.policy_ios import ios_stages
g, ex = diamond()
for policy in {COST_POLICIES!r}:
    for costs in ({{e: 1e308 for e in ex}}, lambda e: 1e308 if e.index < 3 else 1.0):
        try:
            nnc.static_schedule(g, policy=policy, costs=costs)
            raise AssertionError(policy + " accepted costs whose sum overflows")
        except nnc.ScheduleError as err:
            assert re.search(r"sum.*largest double.*n\\d.*1e\\+308", str(err)), str(err)
try:
    ios_stages([[1], []], [1e308, 1e308])
    raise AssertionError("ios_stages accepted costs whose sum overflows")
except nnc.ScheduleError as err:
    assert re.search(r"sum.*largest double.*node 1", str(err)), str(err)
print("ok")
""")
    assert out.split() == ["ok"]


def test_simulate_refuses_what_it_cannot_time():
    g, ex = diamond()
    sched = nnc.static_schedule(g)
    with pytest.raises(nnc.ScheduleError, match=r"sum.*largest double.*n\d.*1e\+308"):
        sched.simulate([1e308] * 4)
    # Each cost and the work fit, the host's clock does not.
    with pytest.raises(nnc.ScheduleError, match=r"overflows.*n\d"):
        sched.simulate([1.0] * 4, launch_cost=DBL_MAX / 2)
    # Two branches of 0.45 x DBL_MAX each fit as work (0.9); the run is one branch long.
    big = 0.45 * DBL_MAX
    r = sched.simulate([0.0, big, big, 0.0])
    assert r.makespan == big and r.work == 2 * big and math.isfinite(r.critical_path)


# -- "ios" with huge costs ---------------------------------------------------------------------

@pytest.mark.parametrize("cost", ["1e300", "2e300", "1e305", "1e307"])
def test_ios_with_a_huge_cost_stays_bounded(cost):
    """One node of a diamond costing >= 1e300 made the DP keep no ending for a state, and the
    stage walk then looped, appending without bound (killed at 24 GiB)."""
    out = run_child(f"""
g, ex = diamond()
costs = {{ex[0]: 1.0, ex[1]: {cost}, ex[2]: 1.0, ex[3]: 1.0}}
sched = nnc.static_schedule(g, policy="ios", costs=costs)
sched.verify()
print(sorted(e.index for e in sched.order))
""")
    assert out.split("\n")[0] == "[0, 1, 2, 3]"


def test_ios_with_a_huge_stage_overhead_stays_bounded():
    """Every ending's cost past 1e300 (the DP's old "no ending yet" mark): the stage walk
    looped. The answer is the one stage that pays the overhead once."""
    out = run_child("""
from nnc.schedule.policy_ios import ios_stages
streams, info = ios_stages([[1, 2], [3], [3], []], [1.0, 2e299, 1.0, 1.0],
                           stage_overhead=9e299)
print(len(info["stages"]), sorted(info["order"]))
""")
    assert out.split("\n")[0] == "1 [0, 1, 2, 3]"


def test_ios_gives_a_valid_schedule_for_any_finite_costs():
    """Any costs whose sum is finite: every node is staged once, in a topological order (in
    a child: a regression allocates without bound)."""
    out = run_child(f"""
import random
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from nnc.schedule.policy_ios import ios_stages

@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.generate])   # no shrinking: a regression fails at once
@given(st.integers(2, 12), st.integers(0, 2**32 - 1),
       st.lists(st.floats(0, {DBL_MAX / 64!r}), min_size=12, max_size=12))
def check(n, seed, costs):
    rnd = random.Random(seed)
    succ = [sorted({{v for v in range(u + 1, n) if rnd.random() < 0.4}}) for u in range(n)]
    streams, info = ios_stages(succ, costs[:n])
    staged = sorted(k for stage in info["stages"] for group in stage for k in group)
    assert staged == list(range(n)) and sorted(info["order"]) == list(range(n))
    where = {{k: i for i, k in enumerate(info["order"])}}
    assert all(where[u] < where[v] for u in range(n) for v in succ[u])

check()
print("ok")
""", timeout=120)
    assert out.split() == ["ok"]


def test_ios_answers_the_same_for_costs_scaled_past_1e300():
    """Costs times 2**1000 (exact: a power of two) with no stage overhead are the same problem:
    the same stages, whatever the magnitude (in a child: a regression allocates without
    bound)."""
    out = run_child("""
import random
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from nnc.schedule.policy_ios import ios_stages

@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.generate])   # no shrinking: a regression fails at once
@given(st.integers(2, 14), st.integers(0, 2**32 - 1),
       st.lists(st.integers(0, 10), min_size=14, max_size=14))
def check(n, seed, units):
    rnd = random.Random(seed)
    succ = [sorted({v for v in range(u + 1, n) if rnd.random() < 0.3}) for u in range(n)]
    small = [float(c) for c in units[:n]]
    huge = [c * 2.0**1000 for c in small]
    a = ios_stages(succ, small, max_streams=2, stage_overhead=0.0)
    b = ios_stages(succ, huge, max_streams=2, stage_overhead=0.0)
    assert a[0] == b[0] and a[1]["stages"] == b[1]["stages"], (succ, small)

check()
print("ok")
""", timeout=120)
    assert out.split() == ["ok"]


def test_a_python_policy_whose_exception_cannot_be_printed_is_reported():
    from nnc.schedule.schedule import _register_python_policy, _unregister_policy

    class Unprintable(Exception):
        def __repr__(self):
            raise RuntimeError("no repr")

    def policy(succ, cap):
        raise Unprintable()

    g, _ = diamond()
    _register_python_policy("unprintable", policy)
    try:
        with pytest.raises(nnc.ScheduleError, match="'unprintable' failed: <Unprintable") as info:
            nnc.static_schedule(g, policy="unprintable")
    finally:
        _unregister_policy("unprintable")
    assert isinstance(info.value.__cause__, Unprintable)
    g.exec(nnc.Cmd("NOOP"))             # idle again
