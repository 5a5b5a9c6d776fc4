"""RAF's "wavefront" and "asap" stream assignments (nnc/schedule/policy_raf.pyx) on RAF's three test
graphs (awslabs/raf tests/python/pass/test_pass_stream_schedule_{wavefront,asap}.py), checked
against a plain-Python statement of each algorithm on random DAGs, and for the order they
promise."""

import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnc
from nnc.schedule.policy_raf import asap_streams, wavefront_streams

# RAF's graphs over positions in a topological order that runs each wave after the one before
# (so wave barriers are fully expressible). Names follow RAF's pictures; x is the input.
# (a) simple branches: x -> A0; x -> A1 -> A3; x -> A2 -> A4 -> A5; concat(A0, A3, A5).
A0, A1, A2, A3, A4, A5, CAT = range(7)
SIMPLE = [[CAT], [A3], [A4], [CAT], [A5], [CAT], []]
# (b) branch in branch: x -> A0; x -> A1 -> A3 -> {A4, A5} -> concat0; x -> A2 -> A6 -> A7;
# concat1(A0, concat0, A7).
B0, B1, B2, B3, B6, B7, B4, B5, C0, C1 = range(10)
BRANCH = [[C1], [B3], [B6], [B4, B5], [B7], [C1], [C0], [C0], [C1], []]
# (c) stacked blocks: {A0, A1, A2 -> A3} -> concat0 -> {A4, A5, A6 -> A7} -> concat1.
S0, S1, S2, S3, SC0, S4, S5, S6, S7, SC1 = range(10)
STACKED = [[SC0], [SC0], [S3], [SC0], [S4, S5, S6], [SC1], [SC1], [S7], [SC1], []]


def edges(succ):
    return [(u, v) for u, row in enumerate(succ) for v in row]


def reach(m, pairs):
    """Transitive closure as sets of descendants (small graphs only)."""
    out = [set() for _ in range(m)]
    for u, v in pairs:
        out[u].add(v)
    for u in range(m - 1, -1, -1):
        for v in list(out[u]):
            out[u] |= out[v]
    return out


def happens_before(succ, streams, extra):
    """What a schedule built from this assignment orders: the graph's edges, the extra edges and
    stream order (a stream runs its nodes in position order)."""
    m = len(succ)
    pairs = edges(succ) + list(extra)
    last = {}
    for k, s in enumerate(streams):
        if s in last:
            pairs.append((last[s], k))
        last[s] = k
    return reach(m, pairs)


def events_waits(light):
    return len({u for u, _ in light}), len(light)


# ---- RAF's graphs ----------------------------------------------------------------------------

def test_wavefront_simple_branches_is_one_wave_of_three_chains_then_concat():
    streams, info = wavefront_streams(SIMPLE)
    assert info["waves"] == [[[A0], [A1, A3], [A2, A4, A5]], [[CAT]]]   # one barrier
    assert streams == [0, 1, 2, 1, 2, 2, 0] and info["stream_count"] == 3
    # The barrier: concat (stream 0) follows the ends of the chains on streams 1 and 2.
    assert sorted(info["extra"]) == [(A3, CAT), (A5, CAT)]


def test_wavefront_branch_in_branch_is_three_waves():
    streams, info = wavefront_streams(BRANCH)
    assert info["waves"] == [[[B0], [B1, B3], [B2, B6, B7]], [[B4], [B5]], [[C0, C1]]]
    assert [streams[k] for k in (B4, B5, C0, C1)] == [0, 1, 0, 0]
    assert sorted(info["extra"]) == sorted([(B0, B5), (B3, B4), (B5, C0), (B7, B4), (B7, B5)])


def test_wavefront_stacked_blocks_is_four_waves():
    streams, info = wavefront_streams(STACKED)
    assert info["waves"] == [[[S0], [S1], [S2, S3]], [[SC0]], [[S4], [S5], [S6, S7]], [[SC1]]]
    assert streams == [0, 1, 2, 2, 0, 0, 1, 2, 2, 0]


@pytest.mark.parametrize("succ, counts", [(SIMPLE, (3, 2, 2)), (BRANCH, (4, 4, 4)),
                                          (STACKED, (3, 5, 6))])
def test_asap_streams_events_and_waits_match_raf(succ, counts):
    streams, info = asap_streams(succ)
    assert (info["stream_count"], *events_waits(info["light"])) == counts
    assert max(streams) + 1 == counts[0]


def test_asap_simple_branches_chains():
    streams, info = asap_streams(SIMPLE)
    # concat's heavy child is its first input (A0), so it joins the shortest branch, as in RAF.
    assert info["chains"] == [[A0, CAT], [A1, A3], [A2, A4, A5]]
    assert sorted(info["light"]) == [(A3, CAT), (A5, CAT)]


def test_asap_branch_in_branch_joins_concat1_to_the_shortest_branch():
    streams, info = asap_streams(BRANCH)
    assert [B0, C1] in info["chains"]
    assert streams[B0] == streams[C1]


def test_asap_stacked_blocks_reuses_the_first_blocks_streams():
    streams, info = asap_streams(STACKED)
    # Five chains on three streams: concat0 continues A0's chain into A6 -> A7 (the deepest),
    # and the second block's side chains take the streams of A1 and A2 -> A3, which ended
    # before concat0.
    assert info["chains"] == [[S0, SC0, S6, S7], [S1], [S2, S3], [S4, SC1], [S5]]
    assert info["stream_count"] == 3
    assert {streams[S4], streams[S5]} == {streams[S1], streams[S3]}


def test_max_streams_one_puts_everything_on_stream_zero():
    for policy in (wavefront_streams, asap_streams):
        streams, info = policy(BRANCH, 1)
        assert streams == [0] * 10 and info["stream_count"] == 1
    assert wavefront_streams(BRANCH, 1)[1]["extra"] == []


def test_empty_and_single_node_graphs():
    for policy in (wavefront_streams, asap_streams):
        assert policy([])[0] == [] and policy([])[1]["stream_count"] == 0
        assert policy([[]])[0] == [0]


@pytest.mark.parametrize("succ", [[[0]], [[2], []], [[1], [0]], [[-1], []], [["1"], []],
                                  [[1.0], []], [[True], []], "ab", [5], None])
def test_bad_successor_lists_raise_graph_error(succ):
    for policy in (wavefront_streams, asap_streams):
        with pytest.raises(nnc.ScheduleError):
            policy(succ)


@pytest.mark.parametrize("cap", [-1, True, 1.5, "2", 2 ** 40])
def test_bad_max_streams_raises_graph_error(cap):
    for policy in (wavefront_streams, asap_streams):
        with pytest.raises(nnc.ScheduleError, match="max_streams"):
            policy(SIMPLE, cap)


# ---- the algorithms in plain Python ---------------------------------------------------------

def ref_waves(succ):
    m = len(succ)
    rem = [0] * m
    for _u, v in edges(succ):
        rem[v] += 1
    free = [k for k in range(m) if rem[k] == 0]
    waves = []
    while free:
        wave = []
        for h in sorted(free):
            chain = [h]
            while len(succ[chain[-1]]) == 1 and rem[succ[chain[-1]][0]] == 1:
                chain.append(succ[chain[-1]][0])
            wave.append(chain)
        free = []
        for chain in wave:
            for v in succ[chain[-1]]:
                rem[v] -= 1
                if rem[v] == 0:
                    free.append(v)
        waves.append(wave)
    return waves


def ref_asap(succ):
    m = len(succ)
    pred = [[] for _ in range(m)]
    for u, v in edges(succ):
        pred[v].append(u)
    depth = [1] * m
    for k in range(m - 1, -1, -1):
        depth[k] = 1 + max((depth[v] for v in succ[k]), default=0)
    hparent, hchild = {}, {}
    for k in sorted(range(m), key=lambda k: (-depth[k], k)):
        for u in sorted(pred[k]):
            if u not in hparent:
                hparent[u], hchild[k] = k, u
                break
    desc = reach(m, edges(succ))
    stream, free_end = [0] * m, {}      # stream -> its ended chain's last node
    count = 0
    for k in range(m):
        if k in hchild:
            stream[k] = stream[hchild[k]]
        else:
            ok = sorted(s for s, e in free_end.items() if k in desc[e])
            if ok:
                stream[k] = ok[0]
                del free_end[ok[0]]
            else:
                stream[k], count = count, count + 1
        if k not in hparent:
            free_end[stream[k]] = k
    light = sorted((u, v) for u, v in edges(succ) if hparent.get(u) != v)
    return stream, light


@st.composite
def dags(draw, max_nodes=40):
    m = draw(st.integers(1, max_nodes))
    p = draw(st.floats(0.02, 0.6))
    rnd = random.Random(draw(st.integers(0, 2 ** 32)))
    return [[v for v in range(u + 1, m) if rnd.random() < p] for u in range(m)]


def dense(streams):
    return sorted(set(streams)) == list(range(len(set(streams))))


@settings(max_examples=200, deadline=None)
@given(dags(), st.integers(0, 4))
def test_wavefront_on_random_dags(succ, cap):
    m = len(succ)
    streams, info = wavefront_streams(succ, cap)
    waves = info["waves"]
    assert waves == ref_waves(succ)
    assert sorted(k for w in waves for c in w for k in c) == list(range(m))
    assert dense(streams) and (cap == 0 or max(streams) < cap)
    assert info["stream_count"] == len(set(streams))
    wave_of = {k: i for i, w in enumerate(waves) for c in w for k in c}
    for w in waves:
        for j, chain in enumerate(w):
            assert {streams[k] for k in chain} == {j % cap if cap else j}
            assert all(b in succ[a] for a, b in zip(chain, chain[1:]))
    assert all(u < v and wave_of[v] == wave_of[u] + 1 for u, v in info["extra"])
    # Every node of a wave follows every node of the wave before it that comes earlier in the
    # run order (a later one it cannot follow: a stream runs in position order).
    hb = happens_before(succ, streams, info["extra"])
    for u in range(m):
        for v in range(u + 1, m):
            if wave_of[v] == wave_of[u] + 1:
                assert v in hb[u], (u, v)


@settings(max_examples=150, deadline=None)
@given(dags(), st.integers(0, 4))
def test_wavefront_waves_are_totally_ordered_in_a_wave_consistent_run_order(succ, cap):
    # Renumber the nodes wave by wave (a topological order too); then the barrier edges order
    # every node of a wave before every node of every later wave.
    order = [k for w in ref_waves(succ) for c in w for k in c]
    pos = {k: i for i, k in enumerate(order)}
    re = [[] for _ in succ]
    for u, v in edges(succ):
        re[pos[u]].append(pos[v])
    streams, info = wavefront_streams(re, cap)
    wave_of = {k: i for i, w in enumerate(info["waves"]) for c in w for k in c}
    hb = happens_before(re, streams, info["extra"])
    for u in range(len(re)):
        for v in range(len(re)):
            if wave_of[v] > wave_of[u]:
                assert v in hb[u], (u, v)
    # In this order each pair of chains of consecutive waves needs at most one edge.
    nchains = [len(w) for w in info["waves"]]
    assert len(info["extra"]) <= sum(x * y for x, y in zip(nchains, nchains[1:]))


@settings(max_examples=200, deadline=None)
@given(dags(), st.integers(0, 4))
def test_asap_on_random_dags(succ, cap):
    m = len(succ)
    streams, info = asap_streams(succ, cap)
    ref_stream, ref_light = ref_asap(succ)
    assert sorted(info["light"]) == ref_light
    assert streams == ([s % cap for s in ref_stream] if cap else ref_stream)
    chains = info["chains"]
    assert sorted(k for c in chains for k in c) == list(range(m))     # disjoint, covering
    heavy = {(a, b) for c in chains for a, b in zip(c, c[1:])}
    assert heavy | set(info["light"]) == set(edges(succ))
    assert not heavy & set(info["light"])
    assert all(len({streams[k] for k in c}) == 1 for c in chains)
    assert dense(streams) and (cap == 0 or max(streams) < cap)
    assert info["stream_count"] == len(set(streams))
    if cap == 0:    # chains share a stream only when the earlier one's end reaches the next head
        desc = reach(m, edges(succ))
        by_stream = {}
        for c in chains:
            by_stream.setdefault(streams[c[0]], []).append(c)
        for cs in by_stream.values():
            for x, y in zip(cs, cs[1:]):
                assert y[0] in desc[x[-1]]


# ---- size -------------------------------------------------------------------------------------

def random_dag(m, width, seed):
    """Connected: each node but the first has 1 to 3 inputs among the `width` before it."""
    rnd = random.Random(seed)
    succ = [set() for _ in range(m)]
    for v in range(1, m):
        for _ in range(rnd.randint(1, 3)):
            succ[max(0, v - rnd.randint(1, width))].add(v)
    return [sorted(s) for s in succ]


@pytest.mark.slow
def test_100k_node_dag_timing_is_printed():
    succ = random_dag(100_000, 50, 1)
    for policy in (wavefront_streams, asap_streams):
        t = time.perf_counter()
        streams, info = policy(succ)
        dt = time.perf_counter() - t
        print(f"{policy.__name__}: 100k nodes, {info['stream_count']} streams, {dt:.3f} s")
        assert len(streams) == 100_000 and dense(streams)


def test_static_schedule_issues_the_waves_in_order():
    """Through static_schedule, "wavefront" gives RAF's issue order (wave by wave) as the run
    order, and each wave happens after every chain end of the wave before it."""
    g = nnc.Graph()
    ex = [g.exec(nnc.Cmd("NOOP"), name=f"n{i}") for i in range(len(BRANCH))]
    for u, row in enumerate(BRANCH):
        for v in row:
            g.concat(ex[u], ex[v])
    sched = nnc.static_schedule(g, policy="wavefront")
    sched.verify()
    _, info = wavefront_streams(BRANCH)
    assert [e.index for e in sched.order] == [k for wave in info["waves"] for chain in wave
                                              for k in chain]
    # Happens-before of the schedule: stream order and signal waits, closed transitively.
    emitter = {s: e.index for e in sched.order for s in sched[e].signals}
    last, before = {}, {}
    for e in sched.order:
        direct = {emitter[s] for s in sched[e].waits}
        if sched.stream_of(e.index) in last:
            direct.add(last[sched.stream_of(e.index)])
        before[e.index] = set(direct).union(*(before[p] for p in direct))
        last[sched.stream_of(e.index)] = e.index
    for prev, wave in zip(info["waves"], info["waves"][1:]):
        for chain in wave:
            assert {c[-1] for c in prev} <= before[chain[0]]
