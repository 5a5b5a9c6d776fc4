"""nnc.Engine: MXNet's mutation-aware dependency engine (docs/engine.md).

The lecture's examples, MXNet's RandSumExpr (threaded_engine_test.cc) bit-identical to a
serial run for the threaded and the naive engine, VarVersion, readers overlapping while
writers serialise (timestamps), the error rule, push_cmd on views and overlapping buffers, bad
input, pushes from several threads, close() and NNC_ENGINE=naive. Every wait is bounded.
"""

import ctypes
import random
import threading
import time

import numpy as np
import pytest
from _engine_lib import engine_lib

import nnc
from nnc.engine.engine import CFUNC

T = 60                                  # seconds: the bound on every wait


@pytest.fixture(params=["threaded", "naive"])
def engine(request):
    e = nnc.Engine(naive=request.param == "naive")
    yield e
    e.wait_all(timeout=T)


@pytest.fixture(scope="module")
def lib():
    got = engine_lib()
    if got is None:
        pytest.skip("no C compiler (sysconfig CC or cc) found")
    return got


def overlap(a, b):
    """Do the intervals (t0, t1) and (u0, u1) intersect?"""
    return a[0] < b[1] and b[0] < a[1]


def timed(log, key, seconds, fn=None):
    def run():
        t0 = time.perf_counter()
        if fn is not None:
            fn()
        time.sleep(seconds)
        log[key] = (t0, time.perf_counter())
    return run


# -- the lecture's examples ------------------------------------------------------------------

def _abcd_once():
    e = nnc.Engine()
    a, b, c, d = (e.new_var() for _ in range(4))
    val, log = {}, {}
    e.push(lambda: val.__setitem__("A", 2), mutate=[a])
    e.push(timed(log, "B", 0.2, lambda: val.__setitem__("B", val["A"] + 1)),
           read=[a], mutate=[b])
    e.push(timed(log, "C", 0.2, lambda: val.__setitem__("C", val["A"] + 2)),
           read=[a], mutate=[c])
    e.push(lambda: val.__setitem__("D", val["B"] * val["C"]), read=[b, c], mutate=[d])
    assert e.wait_for_var(d, timeout=T)
    assert val == {"A": 2, "B": 3, "C": 4, "D": 12}
    assert (a.version, b.version, c.version, d.version) == (1, 1, 1, 1)
    return log


def test_lecture_abcd_with_b_and_c_overlapping():
    """A = 2; B = A + 1; C = A + 2; D = B * C: D = 12, and B and C (both read A only) run at
    the same time (each sleeps, releasing the GIL). Retried: a loaded machine may delay one."""
    for _attempt in range(3):
        log = _abcd_once()
        if overlap(log["B"], log["C"]):
            return
    pytest.fail(f"B and C never overlapped: {log}")


def test_write_after_read_waits_for_the_readers(engine):
    """Readers of A pushed before ``A = 3`` see 2; the write runs after all of them."""
    a = engine.new_var()
    box, seen, log = {"A": 2}, [], {}
    engine.push(lambda: box.__setitem__("A", 2), mutate=[a])
    for i in range(4):
        engine.push(timed(log, i, 0.02, lambda: seen.append(box["A"])), read=[a])
    engine.push(timed(log, "w", 0, lambda: box.__setitem__("A", 3)), mutate=[a])
    assert engine.wait_for_var(a, timeout=T)
    assert seen == [2, 2, 2, 2] and box["A"] == 3
    assert all(log[i][1] <= log["w"][0] for i in range(4))
    assert a.version == 2


def test_memory_recycling_with_delete_var(engine):
    """delete_var is a write after every earlier reader: on_delete recycles the buffer only
    once they are done; any later use of the var is refused."""
    pool, seen, log = [], [], {}
    buf = np.arange(4.0)
    v = engine.new_var()
    for i in range(3):
        engine.push(timed(log, i, 0.02, lambda: seen.append(buf.sum())), read=[v])

    def recycle():
        log["free"] = time.perf_counter()
        pool.append(buf)

    engine.delete_var(v, on_delete=recycle)
    assert v.deleted
    assert engine.wait_all(timeout=T)
    assert pool == [buf] and seen == [6.0] * 3
    assert all(log[i][1] <= log["free"] for i in range(3))
    for call in (lambda: engine.push(lambda: None, read=[v]),
                 lambda: engine.push(lambda: None, mutate=[v]),
                 lambda: engine.wait_for_var(v), lambda: engine.delete_var(v)):
        with pytest.raises(nnc.EngineError, match="deleted"):
            call()


def test_two_pushes_on_one_rng_var_serialise(engine):
    """Two ops mutating the RNG var never overlap, and they draw in push order."""
    rng_var, out = engine.new_var(), engine.new_var()
    rng = np.random.default_rng(7)
    draws, log = [], {}
    for i in range(2):
        engine.push(timed(log, i, 0.05, lambda: draws.append(rng.random())),
                    mutate=[rng_var], name=f"draw{i}")
    engine.push(lambda: None, read=[rng_var], mutate=[out])
    assert engine.wait_for_var(out, timeout=T)
    expect = np.random.default_rng(7)
    assert draws == [expect.random(), expect.random()]
    assert log[0][1] <= log[1][0]


# -- MXNet's RandSumExpr ---------------------------------------------------------------------

def rand_workloads(seed, count=10_000, nvars=100):
    """MXNet's workloads: a target uniform in 0..nvars-1 and 2..19 reads that may repeat and
    may include the target."""
    r = random.Random(seed)
    out = []
    for _ in range(count):
        target = r.randrange(nvars)
        reads = [r.randrange(nvars) for _ in range(r.randint(2, 19))]
        out.append((target, reads))
    return out


def serial_sum(workloads, nvars=100):
    vals = [1.0] * nvars
    for target, reads in workloads:
        s = 0.0
        for i in reads:
            s += vals[i]
        vals[target] = s / (len(reads) + 1)
    return vals


def read_vars(vs, target, reads):
    """The reads minus the target itself, each var once (MXNet's test pushes them so)."""
    return [vs[i] for i in dict.fromkeys(reads) if i != target]


@pytest.mark.parametrize("naive", [False, True], ids=["threaded", "naive"])
def test_rand_sum_expr_c_functions_bit_identical(lib, naive):
    """10,000 workloads x 5 seeds of C functions (no GIL) equal the serial run exactly."""
    e = nnc.Engine(naive=naive)
    for seed in range(5):
        work = rand_workloads(seed)
        vals = np.ones(100)
        lib.rs_vals(vals.ctypes.data)
        rows = np.zeros((len(work), 22), np.int32)
        for k, (target, reads) in enumerate(work):
            rows[k, 0], rows[k, 1] = target, len(reads)
            rows[k, 2:2 + len(reads)] = reads
        vs = [e.new_var() for _ in range(100)]
        base = rows.ctypes.data
        for k, (target, reads) in enumerate(work):
            e.push(lib.rs, read=read_vars(vs, target, reads), mutate=[vs[target]],
                   arg=base + 88 * k)
        assert e.wait_all(timeout=T)
        assert vals.tolist() == serial_sum(work), f"seed {seed}"
        assert sum(v.version for v in vs) == len(work)


@pytest.mark.parametrize("naive", [False, True], ids=["threaded", "naive"])
def test_rand_sum_expr_python_functions_bit_identical(naive):
    """The same with Python fns (2,000 workloads x 2 seeds: each takes the GIL)."""
    e = nnc.Engine(naive=naive)
    for seed in (11, 12):
        work = rand_workloads(seed, count=2000)
        vals = [1.0] * 100
        vs = [e.new_var() for _ in range(100)]

        def op(target, reads, vals=vals):
            def run():
                s = 0.0
                for i in reads:
                    s += vals[i]
                vals[target] = s / (len(reads) + 1)
            return run

        for target, reads in work:
            e.push(op(target, reads), read=read_vars(vs, target, reads), mutate=[vs[target]])
        assert e.wait_all(timeout=T)
        assert vals == serial_sum(work)


# -- versions, overlap, errors ---------------------------------------------------------------

def test_var_version(engine):
    """MXNet's VarVersion: 10 read-only ops leave the version at 0, 10 writes make it 10."""
    v = engine.new_var()
    for _ in range(10):
        engine.push(lambda: None, read=[v])
    assert engine.wait_all(timeout=T) and v.version == 0
    for _ in range(10):
        engine.push(lambda: None, mutate=[v])
    assert engine.wait_for_var(v, timeout=T) and v.version == 10
    assert engine.wait_for_var(engine.new_var(), timeout=0)    # never written: at once


def test_readers_overlap_writers_serialise(lib):
    """C ops spinning 30 ms without the GIL: readers of one var run at once (at least two of
    them overlap: the pool has get_num_threads() threads), writers strictly one by one."""
    e = nnc.Engine()
    v = e.new_var()
    stamps = np.zeros((8, 3))
    stamps[:, 0] = 0.03
    ptr = stamps.ctypes.data
    for _attempt in range(3):
        for i in range(4):
            e.push(lib.stamp, read=[v], arg=ptr + 24 * i)
        for i in range(4, 8):
            e.push(lib.stamp, mutate=[v], arg=ptr + 24 * i)
        assert e.wait_all(timeout=T)
        readers = [tuple(stamps[i, 1:]) for i in range(4)]
        writers = [tuple(stamps[i, 1:]) for i in range(4, 8)]
        for a, b in zip(writers, writers[1:]):
            assert a[1] <= b[0]                 # writers: never at once, in push order
        assert max(r[1] for r in readers) <= writers[0][0]
        if nnc.get_num_threads() < 2 or any(
                overlap(readers[i], readers[j]) for i in range(4) for j in range(i)):
            return
    pytest.fail(f"no two readers overlapped: {readers}")


def test_error_rule_python(engine):
    """A failing op stores an EngineError (naming it, cause chained) on the vars it mutates; an
    op reading such a var is skipped and carries the error on; an op that only mutates it runs
    and clears it; wait_all raises the first error since the last wait_all, once."""
    a, b, c = engine.new_var(), engine.new_var(), engine.new_var()
    ran = []
    engine.push(lambda: 1 / 0, mutate=[a, c], name="divide")
    engine.push(lambda: ran.append("reader"), read=[a], mutate=[b])
    for v in (a, b, c):
        with pytest.raises(nnc.EngineError, match="'divide' failed") as info:
            engine.wait_for_var(v, timeout=T)
        assert isinstance(info.value.__cause__, ZeroDivisionError)
    # where it failed is kept as text (the frames are dropped: see docs/engine.md, "Errors")
    assert "engine op traceback" in info.value.__cause__.__notes__[0]
    assert info.value.__cause__.__traceback__ is None
    with pytest.raises(nnc.EngineError, match="'divide'"):   # raised again: still carried
        engine.wait_for_var(a, timeout=T)
    assert ran == [] and a.version == 1 and b.version == 1
    engine.push(lambda: ran.append("fresh"), mutate=[a])      # only mutates a: runs, clears
    assert engine.wait_for_var(a, timeout=T) and ran == ["fresh"]
    engine.push(lambda: ran.append("again"), read=[a], mutate=[b])
    assert engine.wait_for_var(b, timeout=T) and ran == ["fresh", "again"]
    with pytest.raises(nnc.EngineError, match="'divide'"):
        engine.wait_for_var(c, timeout=T)                     # c was not rewritten
    with pytest.raises(nnc.EngineError, match="'divide'"):
        engine.wait_all(timeout=T)
    assert engine.wait_all(timeout=T)                         # reported once
    engine.push(lambda: ran.append("after"), mutate=[c])      # still usable
    assert engine.wait_all(timeout=T) and ran[-1] == "after"


def test_error_rule_c_functions(engine, lib):
    """A C fn returning nonzero fails the same way (no cause: C has no exception)."""
    status = ctypes.c_int(-3)
    a, b = engine.new_var(), engine.new_var()
    engine.push(lib.status, mutate=[a], arg=ctypes.pointer(status), name="c-op")
    engine.push(lib.noop, read=[a], mutate=[b])
    with pytest.raises(nnc.EngineError, match=r"'c-op' failed: C function returned -3"):
        engine.wait_for_var(b, timeout=T)
    with pytest.raises(nnc.EngineError, match="'c-op'"):
        engine.wait_all(timeout=T)
    ok = ctypes.c_int(0)
    engine.push(lib.status, mutate=[a], arg=ctypes.addressof(ok))
    engine.push(lib.status, mutate=[b], arg=None)
    assert engine.wait_all(timeout=T) and a.version == 2 and b.version == 2


def test_errors_never_hang_and_unnamed_ops_are_described(engine):
    def explode():
        raise KeyError("k")

    v = engine.new_var()
    for _ in range(50):
        engine.push(explode, mutate=[v])
    with pytest.raises(nnc.EngineError, match="explode") as info:
        engine.wait_all(timeout=T)
    assert isinstance(info.value.__cause__, KeyError)
    assert v.version == 50


def test_push_cmd_views_and_overlapping_buffers(engine):
    """push_cmd derives vars from buffers: a view and its base share one var, two arrays over
    overlapping memory are ordered too; results equal running the commands in order."""
    base = np.zeros(8, np.float32)
    x = nnc.Tensor(base)
    lo = x.view((4,), offset=0)
    hi = x.view((4,), offset=4)
    assert engine.var_of(lo) is engine.var_of(x) is engine.var_of(hi)
    over = nnc.Tensor(base[2:6])            # another ndarray over the same memory
    src = nnc.Tensor(np.arange(4, dtype=np.float32))
    y = nnc.Tensor(np.zeros(4, np.float32))
    engine.push_cmd(nnc.Cmd("SET", value=1.0), [], [x])
    engine.push_cmd(nnc.Cmd("SCALAR_MUL", a=3.0), [src], [lo])
    engine.push_cmd(nnc.Cmd("SCALAR_MUL", a=2.0), [over], [y])    # after both writes
    engine.push_cmd(nnc.Cmd("SET", value=7.0), [], [hi])           # after that read
    assert engine.wait_for_var(engine.var_of(x), timeout=T)
    assert engine.wait_for_var(engine.var_of(y), timeout=T)
    assert base.tolist() == [0, 3, 6, 9, 7, 7, 7, 7]
    assert y.numpy().tolist() == [12, 18, 2, 2]
    assert engine.var_of(over) is not engine.var_of(x)
    # the write to hi also writes over's var (their buffers overlap); the one before it did not
    # (over's buffer was not registered yet then: it got its var when first used)
    assert engine.var_of(x).version == 3 and engine.var_of(over).version == 1


def test_push_cmd_python_backend_and_failure(engine):
    out = nnc.Tensor(np.zeros(3, np.float32))
    engine.push_cmd(nnc.Cmd.custom(lambda ins, outs: outs[0].fill(5)), [], [out])
    assert engine.wait_for_var(engine.var_of(out), timeout=T)
    assert out.numpy().tolist() == [5, 5, 5]

    def broken(ins, outs):
        raise RuntimeError("bad backend")

    engine.push_cmd(nnc.Cmd.custom(broken), [], [out], name="broken-cmd")
    with pytest.raises(nnc.EngineError, match="broken-cmd") as info:
        engine.wait_for_var(engine.var_of(out), timeout=T)
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(nnc.EngineError):
        engine.wait_all(timeout=T)
    with pytest.raises(nnc.CommandError):
        engine.push_cmd(nnc.Cmd("EWSUM"), [out], [nnc.Tensor(np.zeros(2, np.float32))])
    with pytest.raises(nnc.EngineError, match="nnc.Tensor"):
        engine.var_of(np.zeros(3))


def test_bad_input(engine, lib):
    a, b = engine.new_var(), engine.new_var()
    other = nnc.Engine(naive=True).new_var()
    cases = [
        (lambda: engine.push(lambda: None, read=[a, a]), "twice in read"),
        (lambda: engine.push(lambda: None, mutate=[b, b]), "twice in mutate"),
        (lambda: engine.push(lambda: None, read=[a], mutate=[a]), "both read and mutate"),
        (lambda: engine.push(lambda: None, read=[other]), "another engine"),
        (lambda: engine.push(lambda: None, read=[1]), "expected an EngineVar"),
        (lambda: engine.push(lambda: None, read=a), "not one EngineVar"),
        (lambda: engine.push(lambda: None, read=5), "list of EngineVars"),
        (lambda: engine.push(42, mutate=[a]), "callable"),
        (lambda: engine.push(ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 0)), "CFUNC"),
        (lambda: engine.push(lib.noop, arg="x"), "arg must be"),
        (lambda: engine.push(lib.noop, arg=-1), "not an address"),
        (lambda: engine.push(CFUNC()), "NULL"),
        (lambda: engine.push(lambda: None, arg=1), "arg= is for C"),
        (lambda: engine.push(lambda: None, name=3), "name must be"),
        (lambda: engine.push(lambda: None, priority="hi"), "priority"),
        (lambda: engine.push(lambda: None, stream="s"), "CPU nnc.Stream"),
        (lambda: engine.wait_for_var(other), "another engine"),
        (lambda: engine.delete_var(a, on_delete=3), "on_delete"),
    ]
    for call, match in cases:
        with pytest.raises(nnc.EngineError, match=match):
            call()
    with pytest.raises(TypeError):
        nnc.EngineVar()
    with pytest.raises(nnc.NNCError):
        engine.wait_all(timeout="soon")
    assert a.version == 0 and b.version == 0       # nothing was pushed
    assert engine.wait_all(timeout=T)


def test_pushes_from_several_threads():
    """Four threads push at once: each bumps its own counter and a shared one; the shared
    var serialises the shared bumps, so no increment is lost."""
    e = nnc.Engine()
    shared, counts = e.new_var(), {"shared": 0}
    mine = [e.new_var() for _ in range(4)]
    errors = []

    def pusher(k):
        try:
            counts[k] = 0
            for _ in range(300):
                e.push(lambda: counts.__setitem__("shared", counts["shared"] + 1),
                       mutate=[shared])
                e.push(lambda: counts.__setitem__(k, counts[k] + 1), read=[shared],
                       mutate=[mine[k]])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=pusher, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(T)
    assert not errors and e.wait_all(timeout=T)
    assert counts == {"shared": 1200, 0: 300, 1: 300, 2: 300, 3: 300}
    assert shared.version == 1200 and [v.version for v in mine] == [300] * 4


def test_close_waits_then_refuses(engine):
    v, done = engine.new_var(), []
    engine.push(timed({}, 0, 0.05, lambda: done.append(1)), mutate=[v])
    engine.close()
    assert done == [1] and engine.closed
    with pytest.raises(nnc.EngineError, match="closed"):
        engine.push(lambda: None, mutate=[v])
    assert engine.wait_all(timeout=T)


def test_naive_through_the_environment(monkeypatch):
    monkeypatch.setenv("NNC_ENGINE", "naive")
    e = nnc.Engine()
    assert e.naive and "naive" in repr(e)
    v, order = e.new_var(), []
    e.push(lambda: order.append(threading.get_ident()), mutate=[v])
    assert order == [threading.get_ident()]      # ran inside push, on this thread
    monkeypatch.setenv("NNC_ENGINE", "turbo")
    with pytest.raises(nnc.EngineError, match="NNC_ENGINE"):
        nnc.Engine()
    monkeypatch.setenv("NNC_ENGINE", "threaded")
    assert not nnc.Engine().naive


def test_ops_on_a_callers_stream(engine):
    """stream=: the op runs on that stream, in its order, after its dependencies."""
    s = nnc.Stream()
    v, w = engine.new_var(), engine.new_var()
    order = []
    engine.push(timed({}, 0, 0.05, lambda: order.append("dep")), mutate=[v])
    s.add_callback(lambda: order.append("stream-before"))
    engine.push(lambda: order.append("op"), read=[v], mutate=[w], stream=s)
    s.add_callback(lambda: order.append("stream-after"))
    assert s.wait(timeout=T) and engine.wait_all(timeout=T)
    assert order.index("dep") < order.index("op")
    assert order.index("stream-before") < order.index("op") < order.index("stream-after")


def test_wait_timeouts_and_worker_refusal(lib):
    e = nnc.Engine()
    v = e.new_var()
    stamp = np.array([0.3, 0, 0])
    e.push(lib.stamp, mutate=[v], arg=stamp.ctypes.data)
    assert e.wait_for_var(v, timeout=0) is False
    assert e.wait_all(timeout=0.01) is False
    assert e.wait_for_var(v, timeout=T) and e.wait_all(timeout=T)
    seen = []

    def waits_inside():
        try:
            e.wait_all(timeout=1)
        except nnc.StreamError as exc:
            seen.append(exc)

    e.push(waits_inside, mutate=[v])
    assert e.wait_all(timeout=T) and len(seen) == 1


def test_dropping_an_engine_with_work_in_flight(lib):
    """The engine's C state outlives the Engine while ops run; nothing leaks or crashes."""
    stamp = np.array([0.05, 0, 0])
    e = nnc.Engine()
    v = e.new_var()
    e.push(lib.stamp, mutate=[v], arg=stamp.ctypes.data)
    e.push(lambda: None, read=[v])
    del e, v
    deadline = time.monotonic() + T
    while stamp[2] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stamp[2] > 0


# -- completion-time dispatch (docs/engine.md, "Design") ---------------------------------------

def test_wait_all_waits_for_what_was_pushed_before_it():
    """Ops another thread pushes while wait_all waits are not waited for (a steady pusher
    cannot keep wait_all from returning)."""
    e = nnc.Engine()
    v, w = e.new_var(), e.new_var()
    first_may_end, second_may_end = threading.Event(), threading.Event()
    e.push(lambda: first_may_end.wait(T), mutate=[v])

    def other_thread():
        e.push(lambda: second_may_end.wait(T), mutate=[w])
        first_may_end.set()

    pusher = threading.Timer(0.2, other_thread)
    pusher.start()
    try:
        assert e.wait_all(timeout=T)
        assert v.version == 1 and w.version == 0 and not second_may_end.is_set()
    finally:
        second_may_end.set()
        first_may_end.set()
        pusher.join(T)
    assert e.wait_all(timeout=T) and w.version == 1


def test_naive_push_waits_for_an_op_another_thread_is_running(lib):
    """A naive push whose op depends on one still running (pushed by another thread, which
    runs it inline without the GIL) returns only once its own op ran, after that one."""
    e = nnc.Engine(naive=True)
    v, w = e.new_var(), e.new_var()
    stamp = np.array([0.3, 0.0, 0.0])
    first = threading.Thread(target=e.push, args=(lib.stamp,),
                             kwargs={"mutate": [v], "arg": stamp.ctypes.data})
    first.start()
    deadline = time.monotonic() + T
    while stamp[1] == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert stamp[1] > 0
    seen = []
    e.push(lambda: seen.append(time.perf_counter()), read=[v], mutate=[w])
    assert len(seen) == 1 and seen[0] >= stamp[2] > 0 and w.version == 1
    first.join(T)
    assert not first.is_alive() and v.version == 1


def test_long_dependency_lists_and_wide_fans(lib):
    """One writer read by 300 ops, then one op writing it (waits on 300 readers), then a
    chain through a var read by everything: every op runs once, in a legal order."""
    e = nnc.Engine()
    src, sink = e.new_var(), e.new_var()
    outs = [e.new_var() for _ in range(300)]
    order = []
    e.push(lambda: order.append("src"), mutate=[src])
    for i, o in enumerate(outs):
        e.push(lambda i=i: order.append(i), read=[src], mutate=[o])
    e.push(lambda: order.append("rewrite"), mutate=[src])
    e.push(lambda: order.append("sink"), read=outs, mutate=[sink])
    assert e.wait_all(timeout=T)
    assert len(order) == 303 and order[0] == "src"
    pos = {x: k for k, x in enumerate(order)}
    assert all(pos[i] < pos["rewrite"] and pos[i] < pos["sink"] for i in range(300))
    assert src.version == 2 and sink.version == 1 and all(o.version == 1 for o in outs)


def test_a_late_reader_still_sees_a_recycled_writers_failure(lib):
    """Ops hold no reference on their deps; an op nothing names any more waits in the limbo
    until every op up to its mark ran (docs/engine.md, "Recycling"). Here the failing writer
    of ``a`` stops being named (``a`` is rewritten) and is reclaimed long before its reader,
    held back by a gate, runs, while 2,000 other ops go through the engine's free list: the
    reader must still see the failure (a recycled op would look like another, unfailed one)."""
    e = nnc.Engine()
    a, b, gate, x = e.new_var(), e.new_var(), e.new_var(), e.new_var()
    opened, failing = threading.Event(), threading.Event()
    ran = []

    def writer():
        failing.set()
        raise ZeroDivisionError("writer")

    e.push(writer, mutate=[a], name="writer")
    e.push(lambda: opened.wait(T), mutate=[gate], name="gate")
    e.push(lambda: ran.append("reader"), read=[gate, a], mutate=[b], name="reader")
    e.push(lambda: ran.append("rewrite"), mutate=[a])   # a no longer names the writer
    assert failing.wait(T)
    time.sleep(0.05)                   # the writer completes and is retired
    for _ in range(2000):              # churn: reclaimed every 16 pushes, recycled if free
        e.push(lib.noop, mutate=[x])
    assert e.wait_for_var(x, timeout=T)
    assert ran == [] and not opened.is_set()
    opened.set()
    with pytest.raises(nnc.EngineError, match="'writer' failed"):
        e.wait_for_var(b, timeout=T)
    with pytest.raises(nnc.EngineError, match="'writer'"):
        e.wait_all(timeout=T)
    assert ran == ["rewrite"] and b.version == 1 and a.version == 2
    # and an engine where nothing failed yet skips nothing (the failure count gates the check)
    f = nnc.Engine()
    u, w = f.new_var(), f.new_var()
    f.push(lib.noop, mutate=[u])
    f.push(lambda: ran.append("clean"), read=[u], mutate=[w])
    assert f.wait_all(timeout=T) and ran[-1] == "clean"
