"""while sub-graphs, multiviews and carry-overs (NNC: while.tests.c and the while cases of
schedule.tests.c). Every case runs sequentially, on a CPU stream, and statically scheduled on
streams, each time from freshly built tensors."""

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from test_graph import scalar

import nnc

MODES = ("sequential", "stream", "scheduled")


def run(g, mode):
    if mode == "sequential":
        g.run()
        return
    if mode == "scheduled":
        nnc.static_schedule(g, max_streams=2).verify()
    s = nnc.Stream("cpu")
    g.run(stream=s)
    s.wait()


def count_loop(x, y, z):
    """while (count < 5) { z = y * z } then z = x * z, the loop's breakpoint a leading NOOP."""
    g, body = nnc.Graph(), nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    prod = body.exec(nnc.Cmd("EWPROD"), [y, z], [z])
    body.concat(noop, prod)
    loop = g.while_(body)
    body.set_while_expr(lambda count: count < 5, [], [noop])
    prod1 = g.exec(nnc.Cmd("EWPROD"), [x, z], [z])
    g.concat(loop, prod1)
    return g, body


@pytest.mark.parametrize("mode", MODES)
def test_while_count_based(mode):
    """0.34 * 1.11 ^ 5 = 0.5729198; while_count is 5, also on a second run."""
    x, y, z = scalar(0.34), scalar(1.11), scalar(1)
    g, body = count_loop(x, y, z)
    run(g, mode)
    assert z.numpy()[0] == pytest.approx(0.5729198, abs=1e-6)
    assert body.while_count == 5
    z.numpy()[0] = 1
    run(g, mode)
    assert z.numpy()[0] == pytest.approx(0.5729198, abs=1e-6)


def test_set_while_expr_may_come_first_and_count_tensor_aliases_the_count():
    y, z = scalar(1.11), scalar(1)
    g, body = nnc.Graph(), nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    prod = body.exec(nnc.Cmd("EWPROD"), [y, z], [z])
    body.concat(noop, prod)
    body.set_while_expr(lambda count, c: c[0] < 3 and count == c[0], [], [noop])
    # The expression's inputs may include the body's own count tensor.
    body.set_while_expr(lambda count, c: c[0] < 3 and count == c[0], [body.count_tensor], [noop])
    g.while_(body)
    g.run()
    assert body.while_count == 3 and body.count_tensor.numpy()[0] == 3
    assert body.count_tensor.dtype == np.int64 and body.count_tensor.shape == (1,)
    assert z.numpy()[0] == pytest.approx(1.11 ** 3, rel=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_while_reusing_allocations_as_nnc_builds_it(mode):
    """while.tests.c "reuse tensor allocations for 0.32 * 2.8 ^ 5", built exactly as upstream:
    a leading NOOP breakpoint, count < 5, xx = mv[x, z] and zz = mv[z, x] (K0N), zbb synchronised
    to zz. The product runs at counts 0..4 and last writes z (count 4 selects zz's version 0);
    the final check (count 5) runs only the NOOP, which uses no multiview, so zz and zbb stay on
    z (NNC re-points a multiview when a node that uses it runs, not when an iteration begins)."""
    x, y, z = scalar(0.32), scalar(2.8), scalar(0)
    zbb = scalar(0)
    g, body = nnc.Graph(), nnc.Graph()
    loop = g.while_(body)
    noop = body.exec(nnc.Cmd("NOOP"))
    xx = nnc.MultiView([x, z], anchor=body, kind="K0N")
    zz = nnc.MultiView([z, x], anchor=body, kind="K0N")
    zz.synchronize(zbb)
    prod = body.exec(nnc.Cmd("EWPROD"), [xx, y], [zz])
    body.sources = [noop]
    body.destinations = [prod]
    body.set_while_expr(lambda count: count < 5, [], [noop])
    body.concat(noop, prod)
    g.sources, g.destinations = [loop], [loop]
    run(g, mode)
    assert z.numpy()[0] == pytest.approx(55.073178, abs=1e-4)
    assert zbb.data_ptr == z.data_ptr and zbb.numpy()[0] == z.numpy()[0]
    assert zz.data_ptr == z.data_ptr and xx.data_ptr == x.data_ptr
    assert body.while_count == 5


@pytest.mark.parametrize("mode", MODES)
def test_while_with_multiviews(mode):
    """0.32 * 2.8 ^ 5 = 55.073178: xx = mv[x, z], zz = mv[z, x] (K0N); the breakpoint is the
    product itself with count < 4, so it runs 5 times; zbb follows zz and ends on z."""
    x, y, z = scalar(0.32), scalar(2.8), scalar(0)
    zbb = scalar(0)
    g, body = nnc.Graph(), nnc.Graph()
    xx = nnc.MultiView([x, z], anchor=body, kind="K0N")
    zz = nnc.MultiView([z, x], anchor=body, kind="K0N")
    zz.synchronize(zbb)
    prod = body.exec(nnc.Cmd("EWPROD"), [xx, y], [zz])
    body.set_while_expr(lambda count: count < 4, [], [prod])
    g.while_(body)
    run(g, mode)
    assert z.numpy()[0] == pytest.approx(55.073178, abs=1e-4)
    assert zbb.data_ptr == z.data_ptr and zbb.numpy()[0] == z.numpy()[0]
    assert body.while_count == 4


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("as_nnc", [True, False])
def test_while_io_replaced_twice(mode, as_nnc):
    """0.47 * 5.5 ^ 5 = 2365.4366: the product's IO is set to (x, y -> z), then to
    (zz, y -> xx) with multiviews before the loop runs. as_nnc: upstream's structure (a leading
    NOOP breakpoint, count < 5); else the product is the breakpoint with count < 4."""
    x, y, z = scalar(0.32), scalar(5.5), scalar(0.47)
    g, body = nnc.Graph(), nnc.Graph()
    g.while_(body)
    xx = nnc.MultiView([x, z], anchor=body, kind="K0N")
    zz = nnc.MultiView([z, x], anchor=body, kind="K0N")
    prod = body.exec(nnc.Cmd("EWPROD"), [x, y], [z])
    if as_nnc:
        noop = body.exec(nnc.Cmd("NOOP"))
        body.set_while_expr(lambda count: count < 5, [], [noop])
        body.concat(noop, prod)
    else:
        body.set_while_expr(lambda count: count < 4, [], [prod])
    prod.set_io([x, y], [z])
    prod.set_io([zz, y], [xx])
    run(g, mode)
    assert x.numpy()[0] == pytest.approx(2365.4366, abs=1e-2)
    assert xx.data_ptr == x.data_ptr and zz.data_ptr == z.data_ptr


def nested(x, y, z):
    """outer: while (count < 3) { inner: while (inner <= outer) { z *= y }; z += x }."""
    g, outer, inner = nnc.Graph(), nnc.Graph(), nnc.Graph()
    inoop = inner.exec(nnc.Cmd("NOOP"))
    mul = inner.exec(nnc.Cmd("EWPROD"), [z, y], [z])
    inner.concat(inoop, mul)
    onoop = outer.exec(nnc.Cmd("NOOP"))
    loop = outer.while_(inner)
    add = outer.exec(nnc.Cmd("EWSUM"), [z, x], [z])
    outer.concat(onoop, loop)
    outer.concat(loop, add)
    inner.set_while_expr(lambda count, i, o: i[0] <= o[0],
                         [inner.count_tensor, outer.count_tensor], [inoop])
    outer.set_while_expr(lambda count: count < 3, [], [onoop])
    g.while_(outer)
    return g, outer, inner


@pytest.mark.parametrize("mode", MODES)
def test_nested_while_105(mode):
    x, y, z = scalar(1), scalar(2), scalar(1)
    g, outer, inner = nested(x, y, z)
    run(g, mode)
    assert z.numpy()[0] == 105
    assert outer.while_count == 3 and inner.while_count == 3


def test_nested_three_deep():
    """count3 iterations of (count2 iterations of (count1 iterations of z += 1))."""
    z, one = scalar(0), scalar(1)
    g = nnc.Graph()
    levels = [nnc.Graph() for _ in range(3)]
    innermost = levels[2]
    b = innermost.exec(nnc.Cmd("NOOP"))
    add = innermost.exec(nnc.Cmd("EWSUM"), [z, one], [z])
    innermost.concat(b, add)
    innermost.set_while_expr(lambda c: c < 4, [], [b])
    for depth in (1, 0):
        body = levels[depth]
        b = body.exec(nnc.Cmd("NOOP"))
        w = body.while_(levels[depth + 1])
        body.concat(b, w)
        body.set_while_expr(lambda c, n=(3 if depth == 0 else 2): c < n, [], [b])
    g.while_(levels[0])
    g.run()
    assert z.numpy()[0] == 3 * 2 * 4
    s = nnc.Stream("cpu")
    z.numpy()[0] = 0
    g.run(stream=s)
    s.wait()
    assert z.numpy()[0] == 24


@pytest.mark.parametrize("mode", MODES)
def test_carry_over(mode):
    """z1 = z0 * x, z1 carried to z0, 5 times; z2 = z1 * y = 2.1090609. With z0 = 1.2 and
    z3 = z2 + z0: 3.730873 (after the loop z0 holds its own memory again)."""
    for z0v, expect_z2, expect_z3 in ((1.0, 2.1090609, None), (1.2, None, 3.730873)):
        x, y, z0, z1 = scalar(0.92), scalar(3.2), scalar(z0v), scalar(0)
        z2, z3 = scalar(0), scalar(0)
        g, body = nnc.Graph(), nnc.Graph()
        prod = body.exec(nnc.Cmd("EWPROD"), [z0, x], [z1])
        body.set_while_expr(lambda count: count < 4, [], [prod])
        body.add_carry_over(z1, z0)
        loop = g.while_(body)
        p2 = g.exec(nnc.Cmd("EWPROD"), [z1, y], [z2])
        s3 = g.exec(nnc.Cmd("EWSUM"), [z2, z0], [z3])
        g.concat(loop, p2)
        g.concat(p2, s3)
        z0_ptr = z0.data_ptr
        run(g, mode)
        assert z0.data_ptr == z0_ptr and z0.numpy()[0] == np.float32(z0v)
        if expect_z2 is not None:
            assert z2.numpy()[0] == pytest.approx(expect_z2, abs=1e-6)
        if expect_z3 is not None:
            assert z3.numpy()[0] == pytest.approx(expect_z3, abs=1e-5)


def test_k1n_selects_the_first_version_once():
    a, b, c = scalar(1), scalar(2), scalar(3)
    body = nnc.Graph()
    mv = nnc.MultiView([a, b, c], anchor=body, kind="K1N")
    seen = []
    body.set_while_expr(lambda count, v: seen.append(float(v[0])) or count < 6, [mv],
                        [body.exec(nnc.Cmd("NOOP"))])
    g = nnc.Graph()
    g.while_(body)
    g.run()
    assert seen == [1, 2, 3, 2, 3, 2, 3]
    assert mv.repeat == 2 and mv.kind_name == "K1N"


def test_python_backends_follow_multiviews():
    """A CPU_REF (Python) node on multiviews sees the current version every iteration."""
    x, y, z = scalar(0.32), scalar(2.8), scalar(0)
    g, body = nnc.Graph(), nnc.Graph()
    xx = nnc.MultiView([x, z], anchor=body, kind="K0N")
    zz = nnc.MultiView([z, x], anchor=body, kind="K0N")
    prod = body.exec(nnc.Cmd("EWPROD", backend="CPU_REF"), [xx, y], [zz])
    body.set_while_expr(lambda count: count < 4, [], [prod])
    g.while_(body)
    g.run()
    assert z.numpy()[0] == pytest.approx(55.073178, abs=1e-4)


def test_a_loop_of_100000_iterations():
    g, body = nnc.Graph(), nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    body.set_while_expr(lambda count: count < 100_000, [], [noop])
    g.while_(body)
    g.run()
    assert body.while_count == 100_000


def test_run_on_a_stream_returns_before_a_slow_loop_ends():
    """The loop body sleeps (releasing the GIL): run(stream=s) returns long before it ends."""
    slept = []

    def slow(inputs, outputs):
        time.sleep(0.05)
        slept.append(threading.current_thread().name)

    z, y = scalar(1), scalar(2)
    g, body = nnc.Graph(), nnc.Graph()
    nap = body.exec(nnc.Cmd.custom(slow))
    mul = body.exec(nnc.Cmd("EWPROD"), [z, y], [z])
    body.concat(nap, mul)
    body.set_while_expr(lambda count: count < 4, [], [nap])
    g.while_(body)
    s = nnc.Stream("cpu")
    t0 = time.perf_counter()
    g.run(stream=s)
    returned = time.perf_counter() - t0
    s.wait()
    total = time.perf_counter() - t0
    assert z.numpy()[0] == 16 and len(slept) == 5
    assert returned < total / 5, (returned, total)
    assert "MainThread" not in slept


def test_bad_loops():
    g, body = nnc.Graph(), nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    with pytest.raises(nnc.GraphError, match="callable"):
        body.set_while_expr(42, [], [noop])
    with pytest.raises(nnc.GraphError, match="breakpoint"):
        body.set_while_expr(lambda c: c < 1, [], [])
    other = nnc.Graph()
    with pytest.raises(nnc.GraphError, match="not a node of the loop body"):
        body.set_while_expr(lambda c: c < 1, [], [other.exec(nnc.Cmd("NOOP"))])
    g.while_(body)
    with pytest.raises(nnc.GraphError, match="no expression"):
        g.run()
    with pytest.raises(nnc.GraphError, match="already"):
        nnc.Graph().while_(body)
    with pytest.raises(nnc.GraphError, match="own"):
        g.while_(g)
    with pytest.raises(nnc.GraphError, match="encloses"):
        body.while_(g)
    with pytest.raises(nnc.GraphError, match="while_"):
        g.exec(nnc.Cmd("WHILE", fn=print))
    with pytest.raises(nnc.CommandError, match="while_"):
        nnc.Cmd("WHILE")
    body.set_while_expr(lambda c: 1 / 0, [], [noop])
    with pytest.raises(nnc.CommandError) as info:
        g.run()
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    s = nnc.Stream("cpu")
    g.run(stream=s)
    with pytest.raises(nnc.StreamError) as info:
        s.wait()
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    body.set_while_expr(lambda c: c < 2, [], [noop])
    g.run(stream=s)
    s.wait()
    assert body.while_count == 2


def test_bad_multiviews_and_carry_overs():
    body = nnc.Graph()
    a, b = scalar(1), scalar(2)
    with pytest.raises(nnc.TensorError, match="anchor"):
        nnc.MultiView([a, b])
    with pytest.raises(nnc.TensorError, match="kind"):
        nnc.MultiView([a, b], anchor=body, kind="K2N")
    with pytest.raises(nnc.TensorError, match="differ"):
        nnc.MultiView([a, nnc.Tensor(np.zeros(2, np.float32))], anchor=body)
    with pytest.raises(nnc.TensorError, match="at least 2"):
        nnc.MultiView([a], anchor=body, kind="K1N")
    with pytest.raises(nnc.TensorError, match="exactly 2"):
        nnc.MultiView([a, b, a], kind="PHI")
    mv = nnc.MultiView([a, b], anchor=body)
    with pytest.raises(nnc.TensorError, match="multiviews"):
        nnc.MultiView([mv, a], anchor=body)
    with pytest.raises(nnc.TensorError, match="synchronise"):
        mv.synchronize(nnc.Tensor(np.zeros(3, np.float32)))
    with pytest.raises(nnc.TensorError, match="view"):
        mv.view((1,))
    with pytest.raises(nnc.GraphError, match="shape"):
        body.add_carry_over(a, nnc.Tensor(np.zeros(2, np.float32)))
    with pytest.raises(nnc.GraphError, match="itself"):
        body.add_carry_over(a, a)


def test_multiviews_added_to_a_nested_body_later_are_found():
    """An outer-anchored multiview first used by an inner body after a run still follows the
    outer count (the outer body's own version does not change)."""
    a, b = scalar(10), scalar(20)
    g, outer, inner = nnc.Graph(), nnc.Graph(), nnc.Graph()
    ob = outer.exec(nnc.Cmd("NOOP"))
    loop = outer.while_(inner)
    outer.concat(ob, loop)
    outer.set_while_expr(lambda c: c < 2, [], [ob])
    ib = inner.exec(nnc.Cmd("NOOP"))
    inner.set_while_expr(lambda c: c < 1, [], [ib])
    g.while_(outer)
    g.run()
    mv = nnc.MultiView([a, b], anchor=outer)
    seen = []
    add = inner.exec(nnc.Cmd.custom(lambda ins, outs: seen.append(float(ins[0][0]))), [mv], [])
    inner.concat(ib, add)
    g.run()
    assert seen == [10, 20]


# -- read-only memory: the flag travels with the memory a loop re-points a tensor at ------------

def read_only(v):
    a = np.full(1, v, np.float32)
    a.flags.writeable = False
    return a


def refused(g, mode):
    """The run raises (now, or from the stream's wait) naming read-only memory."""
    with pytest.raises(nnc.NNCError) as info:
        run(g, mode)
    assert "read-only" in f"{info.value} {info.value.__cause__}", info.value


def writer(body, out):
    """A body node writing ``out`` (1 + 1), the loop's breakpoint; two iterations."""
    one = scalar(1)
    node = body.exec(nnc.Cmd("EWSUM"), [one, one], [out])
    body.set_while_expr(lambda count: count < 2, [], [node])
    return node


@pytest.mark.parametrize("mode", MODES)
def test_carry_over_from_read_only_memory_is_refused(mode):
    """From the second iteration on z aliases the memory src held: a node writing z would
    write the read-only array."""
    ro = read_only(5)
    z = scalar(0)
    g, body = nnc.Graph(), nnc.Graph()
    writer(body, z)
    body.add_carry_over(nnc.Tensor(ro), z)
    g.while_(body)
    refused(g, mode)
    assert ro[0] == 5 and z.numpy().flags.writeable


def test_carry_over_never_writes_a_read_only_memmap(tmp_path):
    """A read-only memmap is mapped PROT_READ: writing it was a segfault."""
    path = tmp_path / "ro.f32"
    np.full(1, 5, np.float32).tofile(path)
    code = textwrap.dedent(f"""
        import numpy as np
        import nnc
        ro = np.memmap({str(path)!r}, np.float32, mode="r", shape=(1,))
        z, one = nnc.Tensor(np.zeros(1, np.float32)), nnc.Tensor(np.ones(1, np.float32))
        g, body = nnc.Graph(), nnc.Graph()
        node = body.exec(nnc.Cmd("EWSUM"), [one, one], [z])
        body.set_while_expr(lambda count: count < 2, [], [node])
        body.add_carry_over(nnc.Tensor(ro), z)
        g.while_(body)
        try:
            g.run()
        except nnc.NNCError as e:
            print("refused:", e)
        assert ro[0] == 5
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "refused:" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("mode", MODES)
def test_synchronize_to_a_read_only_version_is_refused(mode):
    """t follows mv, whose version 0 is read-only: a node writing t is refused whether it
    was built before the synchronisation (at run time) or after (at build time)."""
    ro = read_only(5)
    t = scalar(0)
    g, body = nnc.Graph(), nnc.Graph()
    mv = nnc.MultiView([nnc.Tensor(ro), scalar(1)], anchor=body, kind="K0N")
    writer(body, t)
    mv.synchronize(t)
    g.while_(body)
    refused(g, mode)
    assert ro[0] == 5
    # t points at the read-only version now: its flag and its ndarray say so.
    assert t.readonly and not t.numpy().flags.writeable
    with pytest.raises(nnc.CommandError, match="read-only"):
        nnc.cmd_exec(nnc.Cmd("SET", value=1.0), [], [t])
    with pytest.raises(nnc.CommandError, match="read-only"):
        body.exec(nnc.Cmd("SET", value=1.0), [], [t])
    with pytest.raises(nnc.CommandError, match="read-only"):
        body.exec(nnc.Cmd("SET", value=1.0), [], [mv])
    assert ro[0] == 5


@pytest.mark.parametrize("mode", MODES)
def test_read_only_memory_reached_through_a_chain_is_refused(mode):
    """z takes src's memory by a carry-over, and src (synchronised after the carry-over was
    added) follows a multiview with a read-only version: z may be read-only memory too."""
    ro = read_only(5)
    z, src = scalar(0), scalar(0)
    g, body = nnc.Graph(), nnc.Graph()
    writer(body, z)
    body.add_carry_over(src, z)
    g.while_(body)
    run(g, mode)                        # all memory writable so far
    assert z.numpy()[0] == 2
    mv = nnc.MultiView([nnc.Tensor(ro), scalar(1)], anchor=body, kind="K0N")
    mv.synchronize(src)
    refused(g, mode)
    assert ro[0] == 5


def test_a_read_only_tensor_may_follow_a_read_only_multiview():
    ro = read_only(5)
    t = nnc.Tensor(read_only(0))
    g, body = nnc.Graph(), nnc.Graph()
    mv = nnc.MultiView([nnc.Tensor(ro), scalar(7)], anchor=body, kind="K0N")
    mv.synchronize(t)
    seen = []
    node = body.exec(nnc.Cmd.custom(lambda ins, outs: seen.append(float(ins[0][0]))), [t, mv],
                     [])
    body.set_while_expr(lambda count: count < 2, [], [node])
    g.while_(body)
    g.run()
    assert seen == [5, 7, 5]


def test_compare_is_evaluated_on_the_host_as_the_condition_kernel_does():
    """nnc.Compare: the loop count or an input's one element against a constant; integers
    compare exactly with an int, everything else as float64 (the device kernel's rule)."""
    y = np.array([1.11], np.float32)
    z = np.array([0.34], np.float32)
    g, body = nnc.Graph(), nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    body.concat(noop, body.exec(nnc.Cmd("EWPROD"), [y, z], [z]))
    g.while_(body)
    body.set_while_expr(nnc.Compare("count", "<", 5), [], [noop])
    g.run()
    assert body.while_count == 5
    np.testing.assert_allclose(z, 0.34 * 1.11 ** 5, rtol=1e-6)
    big = nnc.Tensor(np.array([2 ** 53 + 1], np.int64))
    assert nnc.Compare(0, ">", 2 ** 53).holds(0, [big])                 # exact int64
    assert not nnc.Compare(0, ">", float(2 ** 53)).holds(0, [big])      # as float64
    nan = nnc.Tensor(np.array([np.nan], np.float32))
    assert [nnc.Compare(0, op, 0.0).holds(0, [nan]) for op in nnc.graph.compare.COMPARE_OPS] \
        == [False] * 5 + [True]
    with pytest.raises(nnc.GraphError, match="exactly one element"):
        body.set_while_expr(nnc.Compare(0, "<", 1), [np.zeros(2, np.float32)], [noop])
    with pytest.raises(nnc.GraphError, match="operator must be one of"):
        nnc.Compare("count", "=<", 1)
    with pytest.raises(nnc.GraphError, match="left side"):
        nnc.Compare(-1, "<", 1)
    with pytest.raises(nnc.GraphError, match="int or a float"):
        nnc.Compare("count", "<", True)
    c = g.case_of([z], [])
    with pytest.raises(nnc.GraphError, match="has no loop count"):
        g.set_case_of_expr(c, nnc.Compare("count", "<", 1))
    b0, b1 = nnc.Graph(), nnc.Graph()
    out = np.zeros(1, np.float32)
    b0.exec(nnc.Cmd("SET", value=1.0), [], [out])
    b1.exec(nnc.Cmd("SET", value=2.0), [], [out])
    g.set_case_of_expr(c, nnc.Compare(0, ">", 1.0), 0)
    g.set_case_of(c, b0, 0)
    g.set_case_of(c, b1, 1)
    z[0] = 0.5
    g.run()                             # the loop leaves z at 0.5 * 1.11 ** 5 < 1: branch 0
    assert out[0] == 1.0
