"""Control flow on streams, driven by coroutines (NNC: schedule.tests.c, the while and case..of
cases). Sub-graph schedules, deferral of nodes behind a suspended
loop, one scheduler thread, failures and reserved signals."""

import threading
import time

import numpy as np
import pytest
from test_graph import scalar

import nnc

TIMEOUT = 10


def row(*v):
    return nnc.Tensor(np.array([v], np.float32))


def gemm(g, a, w, bias, out, name):
    return g.exec(nnc.Cmd("GEMM", transpose_b=True), [a, w, bias], [out], name=name)


def nnc_loop(g, a):
    """schedule.tests.c's while loop ("while 1..5": a leading NOOP breakpoint, count < 5,
    mul1: b1 = a . w1^T, carry-over b1 -> a) as NNC's compiler builds it, probed at c6ce5b1:

    - mul1 reads ``xin`` = K1N [a, K0N [mc, mb]] and writes ``xout`` = K0N [mb, mc], both
      anchored to the body; mb is b1's memory, mc a scratch buffer; the parent's b1 is a
      tensor synchronised to xout, and the body carries xout into xin;
    - nnc has no multiview of multiviews, so xin is flattened to K1N [a, mb, mc] (count 1
      picks the inner K0N's version 1, mb; count 2 its version 0, mc; and so on).

    Each version is its own tensor header, as in NNC (two headers on mb, two on mc). mul1
    writes mb at counts 0, 2, 4 and mc at 1, 3; b1 must end on mb, which only holds if xout
    is selected when mul1 runs: the final check (count 5) runs only the NOOP."""
    w1 = nnc.Tensor(np.array([[1.1, 2.2], [1, 2]], np.float32))
    bias1 = nnc.Tensor(np.zeros(2, np.float32))
    mb, mc = np.zeros((1, 2), np.float32), np.zeros((1, 2), np.float32)
    body = nnc.Graph()
    xin = nnc.MultiView([a, nnc.Tensor(mb), nnc.Tensor(mc)], anchor=body, kind="K1N")
    xout = nnc.MultiView([nnc.Tensor(mb), nnc.Tensor(mc)], anchor=body, kind="K0N")
    b1 = nnc.Tensor(mb)
    xout.synchronize(b1)
    noop = body.exec(nnc.Cmd("NOOP"), name="noop")
    mul1 = gemm(body, xin, w1, bias1, xout, "mul1")
    body.concat(noop, mul1)
    body.set_while_expr(lambda count: count < 5, [], [noop])
    body.add_carry_over(xout, xin)
    body.sources, body.destinations = [noop], [mul1]
    return g.while_(body, name="while"), body, b1


def schedule_while_graph():
    """schedule.tests.c "with while loop": mul2 reads a (beside the loop), mul3 the loop's
    b1; c = b2 . b3^T + 0.5 = 161.39248."""
    a = row(1.4, 0.2)
    g = nnc.Graph()
    noop = g.exec(nnc.Cmd("NOOP"), name="noop")
    loop, body, b1 = nnc_loop(g, a)
    b2, b3, c = row(0), row(0), row(0)
    mul2 = gemm(g, a, row(0.6, 3), nnc.Tensor(np.array([0.4], np.float32)), b2, "mul2")
    mul3 = gemm(g, b1, row(0.2, 0.3), nnc.Tensor(np.array([1.0], np.float32)), b3, "mul3")
    mulc = gemm(g, b2, b3, nnc.Tensor(np.array([0.5], np.float32)), c, "mulc")
    g.concat(noop, loop)
    g.concat(noop, mul2)
    g.concat(loop, mul3)
    g.concat(mul2, mulc)
    g.concat(mul3, mulc)
    return g, body, dict(a=a, b1=b1, b2=b2, c=c, loop=loop, mul2=mul2, mul3=mul3)


def check_while_graph(t, body):
    np.testing.assert_allclose(t["b1"].numpy()[0], [182.857, 166.234], rtol=1e-4)
    np.testing.assert_allclose(t["a"].numpy()[0], [1.4, 0.2], rtol=1e-6)
    assert t["b2"].numpy()[0, 0] == pytest.approx(1.84, abs=1e-5)
    assert t["c"].numpy()[0, 0] == pytest.approx(161.39248, abs=1e-2)
    assert body.while_count == 5


def test_schedule_while_loop_sequentially():
    g, body, t = schedule_while_graph()
    for _ in range(2):
        g.run()
        check_while_graph(t, body)


@pytest.mark.parametrize("max_streams", [0, 1, 2])
def test_schedule_while_loop(max_streams):
    g, body, t = schedule_while_graph()
    sched = nnc.static_schedule(g, max_streams=max_streams)
    sched.verify()
    assert len(sched[t["loop"]].streams) == 1
    assert body.schedule is not None and body.schedule.stream_count == 1
    body.schedule.verify()
    s = nnc.Stream("cpu")
    for _ in range(2):
        g.run(stream=s)
        s.wait()
        check_while_graph(t, body)
    if max_streams != 1:
        # NNC's table: mul2 beside the loop (it reads a, which the loop never re-points).
        assert sched.stream_count == 2 and sched[t["mul2"]].streams != sched[t["loop"]].streams


def schedule_while_case_of_graph():
    """schedule.tests.c "with both while loop and case..of", as NNC compiles it: the loop as
    above feeds mul4; a case..of on a, with outputs (b2, b20) where b2 is a PHI [a, b20] (the
    symbolic graph's a -> b2 pass-through) read through a tensor synchronised to it; branch 0
    (always taken) is mul2: b20 = a . w2^T + bias2; mul3 reads b2; c = b3 . b4^T + 0.5."""
    a = row(1.4, 0.2)
    g, branch = nnc.Graph(), nnc.Graph()
    noop = g.exec(nnc.Cmd("NOOP"), name="noop")
    loop, body, b1 = nnc_loop(g, a)
    b20, b3, b4, c = row(0, 0), row(0), row(0), row(0)
    phi = nnc.MultiView([a, b20], kind="PHI")
    b2 = row(0, 0)
    phi.synchronize(b2)
    w2 = nnc.Tensor(np.array([[0.1, 0.2], [1.2, 1.1]], np.float32))
    gemm(branch, a, w2, nnc.Tensor(np.array([1, 0], np.float32)), b20, "mul2")
    case = g.case_of([a], [phi, b20], name="case..of")
    g.set_case_of_expr(case, lambda x: 0)
    g.set_case_of(case, branch, 0)
    mul3 = gemm(g, b2, row(0.6, 3), nnc.Tensor(np.array([0.4], np.float32)), b3, "mul3")
    mul4 = gemm(g, b1, row(0.2, 0.3), nnc.Tensor(np.array([1.0], np.float32)), b4, "mul4")
    mulc = gemm(g, b3, b4, nnc.Tensor(np.array([0.5], np.float32)), c, "mulc")
    g.concat(noop, loop)
    g.concat(noop, case)
    g.concat(loop, mul4)
    g.concat(case, mul3)
    g.concat(mul3, mulc)
    g.concat(mul4, mulc)
    return g, body, branch, dict(b2=b2, b4=b4, c=c, loop=loop, case=case, mul3=mul3, mul4=mul4)


def check_while_case_of_graph(t, body):
    np.testing.assert_allclose(t["b2"].numpy()[0], [1.18, 1.9], rtol=1e-5)
    assert t["b4"].numpy()[0, 0] == pytest.approx(87.441574, rel=1e-4)
    assert t["c"].numpy()[0, 0] == pytest.approx(595.80218, abs=1e-2)
    assert body.while_count == 5


@pytest.mark.parametrize("max_streams", [0, 1, 2])
def test_schedule_while_and_case_of(max_streams):
    g, body, branch, t = schedule_while_case_of_graph()
    sched = nnc.static_schedule(g, max_streams=max_streams)
    sched.verify()
    for sub in (body, branch):
        assert sub.schedule is not None and sub.schedule.stream_count == 1
        sub.schedule.verify()
    if max_streams != 1:
        # NNC's table: the loop and mul4 on one stream, case..of and mul3 on another.
        assert sched.stream_count == 2
        assert sched[t["loop"]].streams == sched[t["mul4"]].streams
        assert sched[t["case"]].streams == sched[t["mul3"]].streams
        assert sched[t["case"]].streams != sched[t["loop"]].streams
    s = nnc.Stream("cpu")
    for _ in range(2):
        g.run(stream=s)
        s.wait()
        check_while_case_of_graph(t, body)
    g2, body2, _, t2 = schedule_while_case_of_graph()
    for _ in range(2):
        g2.run()                        # sequentially, the same numbers
        check_while_case_of_graph(t2, body2)


def test_case_of_always_branch_zero_on_streams():
    """schedule.tests.c "with case..of": branch 0 computes b = a . w^T + bias -> [5.0, 1.8]."""
    a, b = row(1.4, 0.2), row(0, 0)
    w = nnc.Tensor(np.array([[2, 11], [1, 2]], np.float32))
    bias = nnc.Tensor(np.zeros(2, np.float32))
    g, branch = nnc.Graph(), nnc.Graph()
    gemm(branch, a, w, bias, b, "mul")
    c = g.case_of([a], [b])
    g.set_case_of_expr(c, lambda x: 0)
    g.set_case_of(c, branch, 0)
    nnc.static_schedule(g).verify()
    assert branch.schedule is not None
    s = nnc.Stream("cpu")
    g.run(stream=s)
    s.wait()
    np.testing.assert_allclose(b.numpy()[0], [5.0, 1.8], rtol=1e-6)


def parallel_body_loop(n_iter):
    """A body with two independent chains (so its schedule has 2 streams) joined at the end."""
    x, y, z = scalar(1), scalar(1), scalar(0)
    g, body = nnc.Graph(), nnc.Graph()
    head = body.exec(nnc.Cmd("NOOP"), name="head")
    ax = body.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [x], name="ax")
    ay = body.exec(nnc.Cmd("SCALAR_MUL", a=3.0), [y], [y], name="ay")
    join = body.exec(nnc.Cmd("EWSUM"), [x, y], [z], name="join")
    body.concat(head, ax)
    body.concat(head, ay)
    body.concat(ax, join)
    body.concat(ay, join)
    body.set_while_expr(lambda count: count < n_iter, [], [head])
    g.while_(body)
    return g, body, (x, y, z)


def test_loop_body_runs_on_its_own_streams():
    g, body, (x, y, z) = parallel_body_loop(6)
    nnc.static_schedule(g)
    bs = body.schedule
    assert bs.stream_count == 2 and bs.split == 1
    bs.verify()
    s = nnc.Stream("cpu")
    g.run(stream=s)
    s.wait()
    assert (x.numpy()[0], y.numpy()[0], z.numpy()[0]) == (64, 729, 793)


def test_unblocked_nodes_are_enqueued_while_a_loop_waits():
    """A loop waits on a slow, GIL-releasing node; a chain on another stream that does not
    depend on it finishes before the loop does, and run() returned long before both."""
    stamps = {}

    def slow(inputs, outputs):
        time.sleep(0.2)
        stamps.setdefault("slow", time.perf_counter())

    def mark(name):
        def fn(inputs, outputs):
            stamps[name] = time.perf_counter()
        return fn

    g, body = nnc.Graph(), nnc.Graph()
    first = g.exec(nnc.Cmd.custom(slow), name="slow")
    head = body.exec(nnc.Cmd("NOOP"))
    body.exec(nnc.Cmd.custom(mark("body")))
    body.concat(head, body.execs[1])
    body.set_while_expr(lambda count: count < 3, [], [head])
    loop = g.while_(body)
    g.concat(first, loop)
    other = g.exec(nnc.Cmd.custom(mark("other")), name="other")
    after = g.exec(nnc.Cmd.custom(mark("after")), name="after")
    g.concat(other, after)
    g.concat(loop, after)
    nnc.static_schedule(g, max_streams=2).verify()
    s = nnc.Stream("cpu")
    t0 = time.perf_counter()
    g.run(stream=s)
    returned = time.perf_counter() - t0
    s.wait()
    assert returned < 0.05, returned
    assert stamps["other"] < stamps["slow"] < stamps["body"] < stamps["after"]
    assert body.while_count == 3


def test_one_scheduler_thread_for_many_loops():
    """Four independent slow loops on four streams: the scheduler never has two threads."""
    def nap(inputs, outputs):
        time.sleep(0.01)

    g = nnc.Graph()
    bodies = []
    for _ in range(4):
        body = nnc.Graph()
        head = body.exec(nnc.Cmd("NOOP"))
        body.concat(head, body.exec(nnc.Cmd.custom(nap)))
        body.set_while_expr(lambda count: count < 5, [], [head])
        g.while_(body)
        bodies.append(body)
    sched = nnc.static_schedule(g)
    assert sched.stream_count == 4
    s = nnc.Stream("cpu")
    seen = []
    g.run(stream=s)
    while s.scheduler.active:
        seen.append(sum(t.name.startswith("nnc-coro") for t in threading.enumerate()))
        time.sleep(0.002)
    s.wait()
    assert max(seen, default=0) <= 1
    assert [b.while_count for b in bodies] == [5] * 4


def test_runs_submitted_back_to_back_complete_in_order():
    g, body, (x, y, z) = parallel_body_loop(2)
    nnc.static_schedule(g)
    s = nnc.Stream("cpu")
    seen = []
    for _ in range(3):
        g.run(stream=s)
        s.add_callback(lambda: seen.append(float(z.numpy()[0])))
    s.wait()
    # The tail runs at counts 0 and 1: x doubles and y triples twice per run.
    assert seen == [4 + 9, 16 + 81, 64 + 729]


def test_failures_on_streams_stop_the_loop_and_leave_the_stream_usable():
    def boom(inputs, outputs):
        raise ValueError("bad body")

    g, body = nnc.Graph(), nnc.Graph()
    head = body.exec(nnc.Cmd("NOOP"))
    body.concat(head, body.exec(nnc.Cmd.custom(boom)))
    body.set_while_expr(lambda count: True, [], [head])     # would never end on its own
    g.while_(body)
    s = nnc.Stream("cpu")
    g.run(stream=s)
    with pytest.raises(nnc.StreamError, match="bad body"):
        s.wait()
    assert body.while_count <= 2
    g2 = nnc.Graph()
    b2 = nnc.Graph()
    b2.set_while_expr(lambda count: count < 3, [], [b2.exec(nnc.Cmd("NOOP"))])
    g2.while_(b2)
    g2.run(stream=s)
    s.wait()
    assert b2.while_count == 3


def test_a_missing_branch_on_a_stream_is_a_stream_error():
    a = scalar(1)
    g = nnc.Graph()
    c = g.case_of([a], [a])
    g.set_case_of_expr(c, lambda x: 3)
    g.set_case_of(c, nnc.Graph(), 0)
    nnc.static_schedule(g)
    s = nnc.Stream("cpu")
    g.run(stream=s)
    with pytest.raises(nnc.StreamError) as info:
        s.wait()
    assert isinstance(info.value.__cause__, nnc.GraphError)
    assert "never set" in str(info.value.__cause__)
    g.set_case_of_expr(c, lambda x: -1)
    g.run(stream=s)
    s.wait()


def test_errors_found_before_enqueueing_raise_at_run():
    g, body = nnc.Graph(), nnc.Graph()
    body.exec(nnc.Cmd("NOOP"))
    g.while_(body)
    with pytest.raises(nnc.GraphError, match="no expression"):
        g.run(stream=nnc.Stream("cpu"))
    g2 = nnc.Graph()
    c = g2.case_of([scalar(1)], [scalar(1)])
    with pytest.raises(nnc.GraphError, match="no expression"):
        g2.run(stream=nnc.Stream("cpu"))
    assert c is not None


def test_static_schedule_recurses_into_nested_sub_graphs():
    g, outer, inner = nnc.Graph(), nnc.Graph(), nnc.Graph()
    x = scalar(1)
    ih = inner.exec(nnc.Cmd("NOOP"))
    inner.concat(ih, inner.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [x]))
    inner.set_while_expr(lambda count: count < 3, [], [ih])
    oh = outer.exec(nnc.Cmd("NOOP"))
    outer.concat(oh, outer.while_(inner))
    outer.set_while_expr(lambda count: count < 2, [], [oh])
    g.while_(outer)
    nnc.static_schedule(g, max_streams=3)
    assert outer.schedule is not None and inner.schedule is not None
    assert inner.schedule.max_streams == 3
    s = nnc.Stream("cpu")
    g.run(stream=s)
    s.wait()
    assert x.numpy()[0] == 2 ** 6


def test_reserved_signal_holds_waiters_until_emitted():
    sig = nnc.Signal("cpu")
    sig._reserve()
    a, b = nnc.Stream("cpu"), nnc.Stream("cpu")
    order = []
    b.wait_signal(sig)
    b.add_callback(lambda: order.append("b"))
    time.sleep(0.02)
    assert order == [] and not sig.query()
    a.add_callback(lambda: order.append("a"))
    a.emit(sig)
    b.wait()
    assert order == ["a", "b"] and sig.query()
    sig._reserve()
    b.wait_signal(sig)
    sig._set()          # the fallback: release the waiters without an emit
    b.wait()


def happens_before(sched, u, v):
    """Does node u finish before node v starts, through stream order and signal waits?"""
    emitter = {sig: e for e in sched.order for sig in sched[e].signals}
    prev, last = {}, {}
    for e in sched.order:
        s = sched[e].streams[0]
        prev[e], last[s] = last.get(s), e
    seen, todo = set(), [v]
    while todo:
        x = todo.pop()
        for p in ([prev[x]] if prev[x] is not None else []) + [emitter[w] for w in sched[x].waits]:
            if p == u:
                return True
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return False


def run_bounded(g, s, timeout=30):
    """g.run(stream=s) and s.wait() in a thread: a hang fails the test instead of hanging it."""
    errors = []

    def go():
        try:
            g.run(stream=s)
            s.wait()
        except BaseException as e:      # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the run did not finish"
    if errors:
        raise errors[0]


def carry_race_graph(reader_input=None):
    """start -> loop, start -> wait (10 ms) -> read: the loop carries b1 into a for 40
    iterations of about 1 ms each; read reads a (or ``reader_input(a)``) on another stream."""
    a, b1, one, zero, r = scalar(1), scalar(0), scalar(1), scalar(0), scalar(-1)
    g, body = nnc.Graph(), nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"), name="noop")
    add = body.exec(nnc.Cmd("EWSUM"), [a, one], [b1], name="add")
    nap = body.exec(nnc.Cmd.custom(lambda i, o: time.sleep(0.001)), [b1], [], name="nap")
    body.concat(noop, add)
    body.concat(add, nap)
    body.add_carry_over(b1, a)
    body.set_while_expr(lambda count: count < 40, [], [noop])
    start = g.exec(nnc.Cmd("NOOP"), name="start")
    loop = g.while_(body, name="loop")
    wait = g.exec(nnc.Cmd.custom(lambda i, o: time.sleep(0.01)), [], [], name="wait")
    read = g.exec(nnc.Cmd("EWSUM"), [a if reader_input is None else reader_input(a), zero], [r],
                  name="read")
    g.concat(start, loop)
    g.concat(start, wait)
    g.concat(wait, read)
    return g, dict(a=a, b1=b1, r=r, loop=loop, read=read)


def test_a_carried_tensor_is_never_read_while_the_loop_moves_it():
    """A carry-over re-points a's header during the loop. A reader of a
    on another stream, unordered with the loop, used to see b1's memory mid-loop (every time
    here: it runs 10 ms in, the loop takes about 40 ms). The schedule now orders the reader
    and the loop as the sequential run does, so it reads a's own value, 1."""
    g, t = carry_race_graph()
    sched = nnc.static_schedule(g)
    sched.verify()
    assert sched.stream_count == 2
    s = nnc.Stream("cpu")
    for _ in range(5):
        t["r"].numpy()[0] = -1
        run_bounded(g, s)
        assert t["r"].numpy()[0] == 1
        assert t["b1"].numpy()[0] == 41 and t["a"].numpy()[0] == 1
    assert happens_before(sched, t["loop"], t["read"]) or happens_before(sched, t["read"],
                                                                          t["loop"])
    g2, t2 = carry_race_graph()
    g2.run()                            # sequentially: the same numbers
    assert t2["r"].numpy()[0] == 1 and t2["b1"].numpy()[0] == 41


@pytest.mark.parametrize("how", ["view", "alias", "synchronised", "multiview", "branch"])
def test_every_toucher_of_a_moved_header_is_ordered_with_the_loop(how):
    """Readers of a carry-over destination's memory (a view, another tensor on its ndarray),
    of a tensor synchronised to a multiview the loop selects, of that multiview itself, or of
    the carried tensor inside a case..of branch are ordered with the loop; a reader of a
    tensor the loop only reads (a K1N multiview's version 0) is not."""
    g, body = nnc.Graph(), nnc.Graph()
    a, b1, c, free, out = scalar(1), scalar(0), scalar(0), scalar(2), scalar(0)
    mv = nnc.MultiView([b1, c], anchor=body, kind="K0N")
    follower = scalar(0)
    mv.synchronize(follower)
    xx = nnc.MultiView([free, b1], anchor=body, kind="K1N")
    noop = body.exec(nnc.Cmd("NOOP"))
    body.concat(noop, body.exec(nnc.Cmd("EWSUM"), [a, xx], [mv]))
    body.add_carry_over(b1, a)
    body.set_while_expr(lambda count: count < 3, [], [noop])
    start = g.exec(nnc.Cmd("NOOP"))
    loop = g.while_(body)
    read_a = {"view": lambda: a.view((1,)), "alias": lambda: nnc.Tensor(a.numpy()),
              "synchronised": lambda: follower, "multiview": lambda: mv}.get(how)
    if how == "branch":
        branch = nnc.Graph()
        branch.exec(nnc.Cmd("EWSUM"), [a, free], [out])
        read = g.case_of([free], [])
        g.set_case_of_expr(read, lambda f: 0)
        g.set_case_of(read, branch, 0)
    else:
        read = g.exec(nnc.Cmd("EWSUM"), [read_a(), free], [out])
    other = g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [free], [scalar(0)])
    g.concat(start, loop)
    g.concat(start, read)
    g.concat(start, other)
    sched = nnc.static_schedule(g)
    sched.verify()
    assert happens_before(sched, loop, read) or happens_before(sched, read, loop)
    assert not happens_before(sched, loop, other) and not happens_before(sched, other, loop)
    s = nnc.Stream("cpu")
    run_bounded(g, s)


# -- a BaseException in user code: reported, never swallowed -------------------------------------

class CustomBase(BaseException):
    """A BaseException of the user's own."""


class Unprintable(Exception):
    """An exception whose repr and str raise."""

    def __repr__(self):
        raise RuntimeError("repr of Unprintable")

    __str__ = __repr__


class UnprintableBase(BaseException):
    def __repr__(self):
        raise RuntimeError("repr of UnprintableBase")

    __str__ = __repr__


RAISED = [KeyboardInterrupt, SystemExit, GeneratorExit, CustomBase, Unprintable, UnprintableBase]


def flow_graph(where, fail, slow_pre=True):
    """pre -> X -> after, X a loop or branch; ``fail()`` is called by the user code named by
    ``where`` (at the loop's second check, or in the branch's expression): a while or case..of
    expression, the same nested in the other construct, or a command of a loop's body.
    Returns (g, log): ``log`` records "after" when the node after X runs."""
    log = []
    g = nnc.Graph()
    # A slow pre gives X's stream work to wait for, so expressions run on the scheduler thread
    # after it; a NOOP leaves the stream idle, and a branch's expression runs inline, in the
    # caller's thread.
    pre = g.exec(nnc.Cmd.custom(lambda i, o: time.sleep(0.02)) if slow_pre else nnc.Cmd("NOOP"),
                 name="pre")

    def loop_of(body, expr_fail, cmd_fail=None):
        head = body.exec(nnc.Cmd("NOOP"))
        if cmd_fail is not None:
            body.concat(head, body.exec(nnc.Cmd.custom(lambda i, o: cmd_fail()), name="cmd"))
        body.set_while_expr(lambda count: count < 3 and (count < 1 or expr_fail()), [],
                            [head])

    def case_of_in(parent, expr_fail, branch):
        a = scalar(0)
        c = parent.case_of([a], [a], name="case")
        parent.set_case_of_expr(c, lambda x: expr_fail() or 0)
        parent.set_case_of(c, branch, 0)
        return c

    def ok():
        return True

    if where == "while":
        body = nnc.Graph()
        loop_of(body, fail)
        x = g.while_(body, name="while")
    elif where == "case_of":
        x = case_of_in(g, lambda: fail() or 0, nnc.Graph())
    elif where == "while_in_case_of":
        branch, body = nnc.Graph(), nnc.Graph()
        loop_of(body, fail)
        branch.while_(body, name="inner")
        x = case_of_in(g, lambda: 0, branch)
    elif where == "case_of_in_while":
        body = nnc.Graph()
        head = body.exec(nnc.Cmd("NOOP"))
        calls = []

        def inner():
            calls.append(1)
            if len(calls) == 2:         # the branch of the second iteration
                fail()
            return 0

        c = case_of_in(body, inner, nnc.Graph())
        body.concat(head, c)
        body.set_while_expr(lambda count: count < 3, [], [head])
        x = g.while_(body, name="while")
    else:                               # "body_command": a command of the loop's body
        body = nnc.Graph()
        calls = []

        def cmd():
            calls.append(1)
            if len(calls) == 2:
                fail()

        loop_of(body, ok, cmd)
        x = g.while_(body, name="while")
    after = g.exec(nnc.Cmd.custom(lambda i, o: log.append("after")), name="after")
    g.concat(pre, x)
    g.concat(x, after)
    return g, log


def failing_expression(kind):
    """(an expression raising a new ``kind`` while armed, else False; the raised ones; the
    arming switch)."""
    raised = []
    armed = [True]

    def fail():
        if armed[0]:
            raised.append(kind())
            raise raised[-1]
        return False

    return fail, raised, armed


def outcome(fn):
    """(result, None) or (None, the exception): a KeyboardInterrupt that escapes must fail the
    test, not end the test session."""
    try:
        return fn(), None
    except BaseException as e:
        return None, e


WHERE = ["while", "case_of", "while_in_case_of", "case_of_in_while", "body_command"]


@pytest.mark.parametrize("kind", RAISED, ids=lambda k: k.__name__)
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("slow_pre", [True, False], ids=["on_thread", "inline"])
def test_a_base_exception_in_control_flow_on_a_stream_surfaces_from_wait(where, kind, slow_pre):
    """wait() raises StreamError with the very exception as its __cause__, as for a failing
    command; the loop or branch's descendants are cancelled; the graph and stream are reusable.
    Before the fix wait() returned True and "after" silently never ran."""
    fail, raised, armed = failing_expression(kind)
    g, log = flow_graph(where, fail, slow_pre)
    s = nnc.Stream("cpu")
    _, err = outcome(lambda: g.run(stream=s))
    assert err is None, f"run(stream=) raised {type(err).__name__}"
    done, err = outcome(lambda: s.wait(timeout=TIMEOUT))
    assert done is not False, "the run did not finish"
    assert isinstance(err, nnc.StreamError), f"wait() gave {done!r}, {type(err).__name__}"
    assert len(raised) == 1 and err.__cause__ is raised[0]
    assert "(and" not in str(err)                       # reported once
    assert log == []                                    # the descendant was cancelled
    armed[0] = False
    done, err = outcome(lambda: (g.run(stream=s), s.wait(timeout=TIMEOUT))[1])
    assert err is None and done is True
    assert log == ["after"]


@pytest.mark.parametrize("kind", RAISED, ids=lambda k: k.__name__)
@pytest.mark.parametrize("where", WHERE)
def test_a_base_exception_in_control_flow_without_a_stream_propagates(where, kind):
    """g.run() raises what a command would: a BaseException as it is, an Exception as a
    CommandError whose __cause__ it is (even when its repr raises)."""
    fail, raised, armed = failing_expression(kind)
    g, log = flow_graph(where, fail)
    _, err = outcome(g.run)
    assert len(raised) == 1
    if issubclass(kind, Exception):
        assert isinstance(err, nnc.CommandError) and err.__cause__ is raised[0]
        str(err)
    else:
        assert err is raised[0]
    assert log == []
    armed[0] = False
    g.run()
    assert log == ["after"]
