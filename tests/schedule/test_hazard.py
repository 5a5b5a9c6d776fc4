"""Data hazards: nodes with no path between them that touch overlapping
memory, one writing, race once scheduled; nnc.graph_hazards and Schedule.verify(hazards=True)
find every such pair, with views and separate Tensors over one NumPy buffer."""

import itertools
import os
import subprocess
import sys
import textwrap

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nnc

BUF = np.zeros(16, np.float32)
X = nnc.Tensor(np.ones(4, np.float32))


def views():
    """Tensors over BUF: the whole, overlapping and disjoint views, a second wrap of a slice."""
    whole = nnc.Tensor(BUF)
    return [whole, whole.view((4,), offset=0), whole.view((4,), offset=2),
            whole.view((4,), offset=8), nnc.Tensor(BUF[10:14]),
            nnc.Tensor(np.zeros(4, np.float32))]


def test_unordered_writer_and_reader_of_one_buffer_are_found_and_named():
    whole = nnc.Tensor(BUF)
    g = nnc.Graph()
    w = g.exec(nnc.Cmd("EWSUM"), [X, X], [whole.view((4,), offset=2)], name="writer")
    r = g.exec(nnc.Cmd("EWSUM"), [nnc.Tensor(BUF[4:8]), X], [nnc.Tensor.zeros((4,))],
               name="reader")
    sched = nnc.static_schedule(g)
    sched.verify()                                  # every edge is enforced: there is none
    (h,) = nnc.graph_hazards(g)
    assert (h.kind, h.first, h.second) == ("read-after-write", w, r)
    try:
        sched.verify(hazards=True)
        raise AssertionError("verify(hazards=True) passed a race")
    except nnc.ScheduleError as e:
        assert "writer" in str(e) and "reader" in str(e) and "read-after-write" in str(e)
    g.concat(w, r)
    assert nnc.graph_hazards(g) == []
    nnc.static_schedule(g).verify(hazards=True)


def test_kinds_and_what_is_not_a_hazard():
    v = views()
    g = nnc.Graph()
    g.exec(nnc.Cmd("EWSUM"), [v[5], X], [v[1]], name="a")     # reads v5, writes BUF[0:4]
    g.exec(nnc.Cmd("EWSUM"), [v[1], X], [v[5]], name="b")     # reads BUF[0:4], writes v5
    c = g.exec(nnc.Cmd("EWSUM"), [X, X], [v[3]], name="c")         # writes BUF[8:12]
    d = g.exec(nnc.Cmd("EWSUM"), [X, X], [v[4]], name="d")         # writes BUF[10:14]
    e = g.exec(nnc.Cmd("EWSUM"), [v[3], X], [nnc.Tensor.zeros((4,))], name="e")
    f = g.exec(nnc.Cmd("EWSUM"), [v[3], X], [nnc.Tensor.zeros((4,))], name="f")
    g.concat(c, e)
    g.concat(c, f)
    g.concat(d, e)
    g.concat(d, f)
    found = {(h.kind, h.first.name, h.second.name) for h in nnc.graph_hazards(g)}
    assert found == {("write-after-read", "a", "b"), ("read-after-write", "a", "b"),
                     ("write-after-write", "c", "d")}


def reference(g):
    """All hazards by brute force: every pair, extents, a transitive closure."""
    order = g.topsort()
    pos = {e: k for k, e in enumerate(order)}
    after = {e: set() for e in order}
    for e in reversed(order):
        for s in e.outgoings:
            if s in pos:
                after[e] |= {s} | after[s]

    def extent(t):
        lo = t.data_ptr
        span = sum((d - 1) * s for d, s in zip(t.shape, t.strides)) + 1
        return lo, lo + span * t.numpy().itemsize

    out = set()
    for u, v in itertools.combinations(order, 2):
        if v in after[u] or u in after[v]:
            continue
        for wu, tu in [(0, t) for t in u.inputs] + [(1, t) for t in u.outputs]:
            for wv, tv in [(0, t) for t in v.inputs] + [(1, t) for t in v.outputs]:
                (alo, ahi), (blo, bhi) = extent(tu), extent(tv)
                if (wu or wv) and alo < bhi and blo < ahi:
                    out.add((pos[u], pos[v], wu, wv))
    return out


@st.composite
def graphs(draw):
    v = views()
    n = draw(st.integers(1, 9))
    g = nnc.Graph()
    ex = []
    for i in range(n):
        src, dst = draw(st.sampled_from(v[1:])), draw(st.sampled_from(v[1:]))
        try:
            ex.append(g.exec(nnc.Cmd("EWSUM"), [src, X], [dst], name=f"n{i}"))
        except nnc.CommandError:    # a partial overlap of input and output is refused
            ex.append(g.exec(nnc.Cmd("EWSUM"), [X, X], [dst], name=f"n{i}"))
    for b in range(1, n):
        for _ in range(draw(st.integers(0, 2))):
            g.concat(ex[draw(st.integers(0, b - 1))], ex[b])
    return g


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_hazards_match_brute_force(g):
    order = {e: k for k, e in enumerate(g.topsort())}
    kinds = {(1, 0): "read-after-write", (0, 1): "write-after-read", (1, 1): "write-after-write"}
    want = {(u, v, kinds[(wu, wv)]) for u, v, wu, wv in reference(g)}
    got = {(order[h.first], order[h.second], h.kind) for h in nnc.graph_hazards(g)}
    assert got == want


def test_many_accesses_of_one_tensor():
    # Past 64 accesses of one range the check goes by last writer and readers since.
    t = nnc.Tensor(np.zeros(4, np.float32))
    g = nnc.Graph()
    ex = [g.exec(nnc.Cmd("EWSUM"), [t, X], [t]) for _ in range(300)]
    for a, b in zip(ex, ex[1:]):
        g.concat(a, b)
    assert nnc.graph_hazards(g) == []
    g.disjoin(ex[150], ex[151])
    found = nnc.graph_hazards(g)
    head = set(ex[:151])
    assert found and all((h.first in head) != (h.second in head) for h in found)


def test_debug_mode_static_schedule_warns_about_hazards():
    code = textwrap.dedent("""
        import warnings
        import numpy as np, nnc
        t = nnc.Tensor(np.zeros(4, np.float32))
        g = nnc.Graph()
        g.exec(nnc.Cmd("SET", value=1.0), outputs=[t], name="one")
        g.exec(nnc.Cmd("SET", value=2.0), outputs=[t], name="two")
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            nnc.static_schedule(g)
        assert len(seen) == 1 and seen[0].category is nnc.HazardWarning, seen
        text = str(seen[0].message)
        assert "write-after-write" in text and "one" in text and "two" in text, text
        assert g.schedule is not None
        # As an error (-W error::nnc.HazardWarning), no schedule is installed.
        g2 = nnc.Graph()
        g2.exec(nnc.Cmd("SET", value=1.0), outputs=[t], name="a")
        g2.exec(nnc.Cmd("SET", value=2.0), outputs=[t], name="b")
        with warnings.catch_warnings():
            warnings.simplefilter("error", nnc.HazardWarning)
            try:
                nnc.static_schedule(g2)
                raise SystemExit("the warning was not raised as an error")
            except nnc.HazardWarning:
                pass
        assert g2.schedule is None
        # Without a hazard there is no warning.
        g3 = nnc.Graph()
        u = nnc.Tensor(np.zeros(4, np.float32))
        a = g3.exec(nnc.Cmd("SET", value=1.0), outputs=[u])
        b = g3.exec(nnc.Cmd("SET", value=2.0), outputs=[u])
        g3.concat(a, b)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            nnc.static_schedule(g3)
    """)
    env = {**os.environ, "NNC_DEBUG": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
