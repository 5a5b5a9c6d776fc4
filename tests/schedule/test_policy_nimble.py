"""The "nimble" policy (nnc/schedule/policy_nimble.pyx): Nimble's claims checked on hand graphs and
random DAGs against brute force (transitive reduction, maximum matching, chain-order width)."""

import itertools
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnc
from nnc.schedule.policy_nimble import nimble_streams


def closure(succ):
    """reach[u]: every position reachable from u by a path of one edge or more."""
    reach = [set() for _ in succ]
    for u in range(len(succ) - 1, -1, -1):
        for v in succ[u]:
            reach[u] |= {v} | reach[v]
    return reach


def reduction(succ):
    """Brute-force transitive reduction: u -> v stays unless another child of u reaches v."""
    reach = closure(succ)
    return sorted({(u, v) for u, vs in enumerate(succ) for v in vs
                   if not any(v in reach[w] for w in vs if w != v)})


def max_matching(edges):
    """Brute-force maximum matching size (small edge sets)."""
    for size in range(len(edges), 0, -1):
        for pick in itertools.combinations(edges, size):
            if len({u for u, _ in pick}) == size and len({v for _, v in pick}) == size:
                return size
    return 0


def width(items, before):
    """Largest antichain (Dilworth: the minimum chain cover) by brute force."""
    for size in range(len(items), 0, -1):
        for pick in itertools.combinations(items, size):
            if not any(before(a, b) or before(b, a) for a, b in itertools.combinations(pick, 2)):
                return size
    return 0


@st.composite
def dags(draw, max_nodes=9):
    n = draw(st.integers(1, max_nodes))
    succ = [sorted(draw(st.sets(st.integers(u + 1, n - 1), max_size=3))) if u + 1 < n else []
            for u in range(n)]
    return succ


def check(succ, streams, info):
    n = len(succ)
    reach = closure(succ)
    assert sorted(set(streams)) == list(range(len(set(streams))))     # dense from 0
    # Chains partition the positions, and consecutive chain nodes are matched MEG edges.
    assert sorted(k for c in info["chains"] for k in c) == list(range(n))
    links = {(c[i], c[i + 1]) for c in info["chains"] for i in range(len(c) - 1)}
    assert links == set(info["matching"])
    assert set(info["matching"]) <= set(info["meg_edges"])
    assert len(info["chains"]) == n - len(info["matching"])
    chain_of = {k: i for i, c in enumerate(info["chains"]) for k in c}
    # The paper's synchronisation count: exactly the MEG edges between different chains.
    crossing = [(u, v) for u, v in info["meg_edges"] if chain_of[u] != chain_of[v]]
    assert info["waits_bound"] == len(crossing)
    assert info["waits_bound"] == len(info["meg_edges"]) - len(info["matching"])
    # A stream merges chains, so it only removes crossings.
    assert sum(streams[u] != streams[v] for u, v in info["meg_edges"]) <= info["waits_bound"]
    return reach, chain_of


@settings(max_examples=300, deadline=None)
@given(dags())
def test_random_dags_meet_nimbles_claims(succ):
    streams, info = nimble_streams(succ)
    reach, chain_of = check(succ, streams, info)
    n = len(succ)
    assert info["meg_edges"] == reduction(succ)
    assert len(info["matching"]) == max_matching(info["meg_edges"])
    # Maximum logical concurrency: incomparable nodes never share a stream.
    for u, v in itertools.combinations(range(n), 2):
        if v not in reach[u]:
            assert streams[u] != streams[v], (u, v)
    # The stream count is the width of the chain order (i before j: i's tail reaches j's head).
    chains = info["chains"]
    order_width = width(range(len(chains)), lambda i, j: chains[j][0] in reach[chains[i][-1]])
    assert len(set(streams)) == order_width
    assert order_width >= width(range(n), lambda a, b: b in reach[a])
    # Each stream is one sequence of whole chains.
    for c in chains:
        assert len({streams[k] for k in c}) == 1


@settings(max_examples=200, deadline=None)
@given(dags(), st.integers(1, 4))
def test_capped_streams_are_folded_deterministically(succ, cap):
    free, _ = nimble_streams(succ)
    streams, info = nimble_streams(succ, max_streams=cap)
    check(succ, streams, info)
    assert len(set(streams)) == min(cap, len(set(free)))
    assert max(streams) < cap
    assert nimble_streams(succ, max_streams=cap) == (streams, info)
    # Folding only joins whole uncapped streams.
    for a, b in itertools.combinations(range(len(succ)), 2):
        if free[a] == free[b]:
            assert streams[a] == streams[b]


def test_a_chain_is_one_stream():
    streams, info = nimble_streams([[1], [2], [3], []])
    assert streams == [0, 0, 0, 0]
    assert info["chains"] == [[0, 1, 2, 3]] and info["waits_bound"] == 0


@pytest.mark.parametrize("k", [1, 2, 5, 17])
def test_a_fan_out_of_k_gets_k_streams(k):
    streams, info = nimble_streams([list(range(1, k + 1))] + [[] for _ in range(k)])
    assert len(set(streams[1:])) == k
    assert info["waits_bound"] == k - 1


def test_diamond_with_a_shortcut():
    # 0 -> 1 -> 3, 0 -> 2 -> 3, and 0 -> 3 (redundant): two streams, two waits.
    streams, info = nimble_streams([[1, 2, 3], [3], [3], []])
    assert info["meg_edges"] == [(0, 1), (0, 2), (1, 3), (2, 3)]
    assert info["matching"] == [(0, 1), (1, 3)]
    assert info["chains"] == [[0, 1, 3], [2]]
    assert streams == [0, 0, 1, 0]
    assert info["waits_bound"] == 2


def test_chains_ordered_by_reachability_share_a_stream():
    # 0 -> 2, 1 -> 2, 2 -> 3, 2 -> 4: the matching leaves chains [0, 2, 3], [1] and [4]; 1
    # reaches 4 (through 2), so [1] and [4] share a stream: 3 chains, 2 streams, 2 waits.
    succ = [[2], [2], [3, 4], [], []]
    streams, info = nimble_streams(succ)
    check(succ, streams, info)
    assert info["chains"] == [[0, 2, 3], [1], [4]]
    assert streams == [0, 1, 0, 0, 1]
    assert info["waits_bound"] == 2


def test_duplicate_edges_count_once():
    streams, info = nimble_streams([[1, 1], []])
    assert streams == [0, 0] and info["meg_edges"] == [(0, 1)] and info["waits_bound"] == 0


def test_empty_and_single():
    assert nimble_streams([]) == ([], {"meg_edges": [], "matching": [], "chains": [],
                                       "waits_bound": 0})
    assert nimble_streams([[]])[0] == [0]


@pytest.mark.parametrize("succ", [[[0]], [[1], [0]], [[2], []], [[-1]], [["1"], []], [[True], []]])
def test_bad_edges_raise(succ):
    with pytest.raises(nnc.ScheduleError):
        nimble_streams(succ)


@pytest.mark.parametrize("cap", [-1, 1.5, True, "2"])
def test_bad_cap_raises(cap):
    with pytest.raises(nnc.ScheduleError):
        nimble_streams([[1], []], max_streams=cap)


def random_dag(n, window, k=4, seed=0):
    """benchmarks/schedule.py's graphs: k predecessors per node among the previous window."""
    rng = np.random.default_rng(seed)
    i = np.repeat(np.arange(1, n, dtype=np.int64), k)
    lo = np.maximum(0, i - window) if window else np.zeros_like(i)
    p = lo + (rng.random(i.size) * (i - lo)).astype(np.int64)
    pairs = np.unique(p * n + i)
    succ = [[] for _ in range(n)]
    for a, b in zip((pairs // n).tolist(), (pairs % n).tolist()):
        succ[a].append(b)
    return succ


@pytest.mark.slow
@pytest.mark.parametrize("window", [64, 0])
def test_100k_node_dag_prints_its_time(window, capsys):
    succ = random_dag(100_000, window)
    start = time.perf_counter()
    streams, info = nimble_streams(succ)
    elapsed = time.perf_counter() - start
    assert len(streams) == 100_000 and min(streams) == 0
    assert info["waits_bound"] == len(info["meg_edges"]) - len(info["matching"])
    with capsys.disabled():
        print(f"\nnimble, 100k nodes, window {window or 'all'}: {elapsed:.2f} s with the Python "
              f"wrapper, {max(streams) + 1} streams, {len(info['chains'])} chains, "
              f"{info['waits_bound']} waits")
