"""The "ios" policy (nnc/schedule/policy_ios.pyx; docs/schedule.md "Policy "ios""): IOS's dynamic
program over stages. Verification and bit-identical runs on random graphs are in
tests/schedule/test_schedule_policies.py (POLICY_NAMES); here: the DP's own answers."""

import itertools
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_schedule import random_graph

import nnc
from nnc.schedule.policy_ios import ios_stages, set_ios_options

# IOS's README sample: input -> four 3x3 convs -> concat. Costs (ours): the convs are two cheap
# (1) and two costly (3), the input and concat 1, a stage costs 0.5 more, two streams. One stage
# of all four must merge them into two groups (cheapest first: 1+1, then 2+3 | 3, 5.5); two
# stages pair like with like: (1 | 1) + 0.5 then (3 | 3) + 0.5 = 5.
SAMPLE = [[1, 2, 3, 4], [5], [5], [5], [5], []]
SAMPLE_COSTS = [1, 1, 1, 3, 3, 1]


def test_readme_sample_finds_two_stages_of_two_groups():
    streams, info = ios_stages(SAMPLE, SAMPLE_COSTS, max_streams=2, stage_overhead=0.5)
    assert info["stages"] == [[[0]], [[1], [2]], [[3], [4]], [[5]]]
    assert info["latency"] == pytest.approx(1.5 + 1.5 + 3.5 + 1.5)
    # Each group continues the stream of its predecessor that finishes last (a tie: the
    # lower stream), so the chain 0 -> 1 -> 3 -> 5 needs no signal.
    assert streams == [0, 0, 1, 0, 1, 0]
    assert info["order"] == [0, 1, 2, 3, 4, 5] and info["extra"] == []
    assert info["blocks"] == [(0, 6)]
    # IOS's own runtime: a barrier from each group to the next stage's groups on other streams.
    _, info = ios_stages(SAMPLE, SAMPLE_COSTS, max_streams=2, stage_overhead=0.5, barriers=True)
    assert sorted(info["extra"]) == [(0, 2), (1, 4), (2, 3), (4, 5)]


def test_sample_without_a_cap_runs_the_four_convs_in_one_stage():
    """With a core per group; on 2 cores the four would be two groups (the model's spread)."""
    _, info = ios_stages(SAMPLE, SAMPLE_COSTS, stage_overhead=0.5, cores=8)
    assert info["stages"] == [[[0]], [[1], [2], [3], [4]], [[5]]]
    assert info["latency"] == pytest.approx(1.5 + 3.5 + 1.5)
    _, info = ios_stages(SAMPLE, SAMPLE_COSTS, stage_overhead=0.5, cores=2)
    assert info["stages"] == [[[0]], [[1], [2]], [[3], [4]], [[5]]]


def test_more_groups_than_cores_spread_longest_first():
    """Four groups on 2 cores cost LPT's 4 (3+1 | 3+1), not the largest group's 3: one stage of
    four (4 + 0.5) beats two stages of two (1 + 3 + 2 x 0.5)."""
    _, info = ios_stages(SAMPLE, SAMPLE_COSTS, stage_overhead=0.5, cores=2, max_num_groups=4)
    assert info["stages"] == [[[0]], [[1], [2], [3], [4]], [[5]]]
    assert info["latency"] == pytest.approx(1.5 + 4.5 + 1.5)


def test_cheap_followers_join_their_unit():
    """A node at most 1 % of the chain it alone follows is scheduled with it (a fused ReLU's
    NOOP): the unit counts once against max_stage_ops and is never split across stages."""
    succ = [[1, 3], [2], [5], [4], [5], []]
    costs = [1.0, 5.0, 0.01, 5.0, 0.04, 1.0]
    _, info = ios_stages(succ, costs, max_streams=2, cores=2, max_stage_ops=2)
    assert info["stages"] == [[[0]], [[1, 2], [3, 4]], [[5]]]


def test_a_chain_is_one_group_and_a_costly_overhead_merges_stages():
    _, info = ios_stages([[1], [2], [3], []])
    assert info["stages"] == [[[0, 1, 2, 3]]]
    _, info = ios_stages([[1, 2], [3], [3], []], stage_overhead=10.0)
    assert info["stages"] == [[[0, 1, 2, 3]]]                      # one group beats 3 stages


def test_group_size_and_stage_ops_prune_endings():
    _, info = ios_stages([[1], [2], [3], []], max_group_size=2)
    assert info["stages"] == [[[0, 1]], [[2, 3]]]
    _, info = ios_stages([[1], [2], [3], []], max_stage_ops=3)
    assert [sum(map(len, s)) for s in info["stages"]] == [1, 3]


def _spread(loads, cores):
    """The model's stage time: the largest group with a core each, else longest-first."""
    if len(loads) <= cores:
        return max(loads)
    cores_load = [0.0] * cores
    for x in sorted(loads, reverse=True):
        cores_load[cores_load.index(min(cores_load))] += x
    return max(cores_load)


def _greedy_latency(succ, costs, groups, ops, overhead, cores):
    """IOS's greedy baseline: each stage takes the ready nodes (at most min(groups, ops), lowest
    positions first), one per group; latency = the model's spread + overhead per stage."""
    n = len(succ)
    preds = [0] * n
    for row in succ:
        for v in row:
            preds[v] += 1
    done, total = set(), 0.0
    while len(done) < n:
        ready = [k for k in range(n) if k not in done and preds[k] == 0][:min(groups, ops)]
        total += _spread([costs[k] for k in ready], cores) + overhead
        for k in ready:
            done.add(k)
            for v in succ[k]:
                preds[v] -= 1
    return total


def _random_dag(rng, n, p):
    return [sorted(v for v in range(k + 1, n) if rng.random() < p) for k in range(n)]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 11), st.floats(0.0, 0.6), st.integers(0, 10_000), st.sampled_from([0, 2, 3]),
       st.sampled_from([1, 2, 8]))
def test_never_worse_than_the_greedy_stage_schedule(n, p, seed, cap, cores):
    rng = random.Random(seed)
    succ = _random_dag(rng, n, p)
    costs = [float(1 + (k * 7919 + seed) % 5) for k in range(n)]      # deterministic model
    _, info = ios_stages(succ, costs, max_streams=cap, stage_overhead=0.25, max_states=4096,
                         cores=cores, max_num_groups=cap or 5)
    groups = cap or 5
    greedy = _greedy_latency(succ, costs, groups, 10, 0.25, cores)
    assert info["latency"] <= greedy + 1e-9
    # The stages partition the nodes and respect every edge (a node after its predecessors).
    stage_of = {k: s for s, stage in enumerate(info["stages"]) for g in stage for k in g}
    assert sorted(stage_of) == list(range(n))
    assert all(stage_of[u] <= stage_of[v] for u in range(n) for v in succ[u])
    assert all(len(stage) <= groups for stage in info["stages"])


def test_dp_is_optimal_over_all_stage_sequences_on_a_small_dag():
    """Brute force: every sequence of endings of a 6-node DAG, the same latency model (two
    groups on two cores: the largest group)."""
    succ = [[2, 3], [3], [4, 5], [5], [], []]
    costs = [2.0, 1.0, 3.0, 1.0, 2.0, 1.0]
    _, info = ios_stages(succ, costs, max_streams=2, stage_overhead=0.5, cores=2)
    n = len(succ)

    def lat(E):                     # connected parts, merged smallest first down to 2
        parts = []
        for k in sorted(E):
            touching = [g for g in parts if any(v in g for v in succ[k]) or
                        any(k in succ[u] for u in g)]
            merged = {k}.union(*touching)
            parts = [g for g in parts if g not in touching] + [merged]
        parts.sort(key=min)
        while len(parts) > 2:
            a, b = sorted(parts, key=lambda g: (sum(costs[k] for k in g), min(g)))[:2]
            parts = sorted([g for g in parts if g is not a and g is not b] + [a | b], key=min)
        return max(sum(costs[k] for k in g) for g in parts) + 0.5

    best = {frozenset(): 0.0}

    def cost(S):
        if S not in best:
            options = []
            for r in range(1, min(len(S), 10) + 1):
                for E in itertools.combinations(sorted(S), r):
                    if all(v in E or v not in S for k in E for v in succ[k]):
                        options.append(cost(S - set(E)) + lat(set(E)))
            best[S] = min(options)
        return best[S]

    assert info["latency"] == pytest.approx(cost(frozenset(range(n))))


def test_blocks_end_at_cut_nodes_and_respect_the_size():
    chain = [[k + 1] for k in range(29)] + [[]]
    _, info = ios_stages(chain, block_size=8)
    assert info["blocks"] == [(0, 8), (8, 16), (16, 24), (24, 30)]
    # Two diamonds joined at node 3: the cut at 3 ends the first block although 6 would fit.
    succ = [[1, 2], [3], [3], [4, 5], [6], [6], []]
    _, info = ios_stages(succ, block_size=5)
    assert info["blocks"] == [(0, 4), (4, 7)]


def test_a_block_over_the_state_budget_is_split():
    succ = [[] for _ in range(12)]                  # 2^12 states
    _, info = ios_stages(succ, max_states=100, max_streams=4)
    stages = info["stages"]
    assert sorted(k for s in stages for g in s for k in g) == list(range(12))
    assert all(len(s) <= 4 for s in stages)


def test_options_are_checked_and_restored():
    old = set_ios_options(block_size=10)
    try:
        assert set_ios_options()["block_size"] == 10
        for bad in [{"block_size": 0}, {"block_size": 65}, {"max_stage_ops": True},
                    {"max_group_size": -1}, {"stage_overhead": float("nan")}, {"speed": 1},
                    {"cores": -1}, {"cores": 65}, {"barriers": 1}]:
            with pytest.raises(nnc.ScheduleError):
                set_ios_options(**bad)
        assert set_ios_options()["block_size"] == 10
        ios_stages([[1], []], max_states=1)
        assert set_ios_options()["max_states"] == old["max_states"]   # per call only
    finally:
        set_ios_options(**old)


@pytest.mark.parametrize("succ, costs, message", [
    ([[0]], None, "successors must be positions after"),
    ([[1]], None, "below 1"),
    ("x", None, "list of successor lists"),
    ([[1], []], [1.0], "list of 2 numbers"),
    ([[1], []], [1.0, -1.0], "cost of node 1"),
])
def test_bad_input_raises(succ, costs, message):
    with pytest.raises(nnc.ScheduleError, match=message):
        ios_stages(succ, costs)


def test_static_schedule_uses_the_options():
    g = nnc.Graph()
    ex = [g.exec(nnc.Cmd("NOOP"), name=f"n{i}") for i in range(6)]
    for u, row in enumerate(SAMPLE):
        for v in row:
            g.concat(ex[u], ex[v])
    costs = dict(zip(ex, [c * 1e-3 for c in SAMPLE_COSTS]))
    old = set_ios_options(stage_overhead=0.5e-3)
    try:
        sched = nnc.static_schedule(g, policy="ios", max_streams=2, costs=costs)
    finally:
        set_ios_options(**old)
    sched.verify()
    assert sched.policy == "ios" and sched.stream_count == 2
    assert [e.name for e in sched.nodes_on(1)] == ["n2", "n4"]


@pytest.mark.slow
def test_ios_on_a_100k_node_random_dag():
    """Timing printed, never asserted (docs/schedule.md quotes it)."""
    g = random_graph(100_000, window=64, seed=3)
    t0 = time.perf_counter()
    sched = nnc.static_schedule(g, policy="ios")
    dt = time.perf_counter() - t0
    print(f"\nios: 100k-node random DAG scheduled in {dt:.3f} s, {sched.stream_count} streams, "
          f"{sched.signal_count} signals")
    sched.verify()
