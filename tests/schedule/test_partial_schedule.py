"""Partial static schedules and runs with one (NNC: ccv_nnc_graph_static_schedule_new and
ccv_nnc_graph_run_with_schedule; the partial cases of test/int/nnc/schedule.tests.c, ported with
their graphs built as upstream builds them, on CPU streams where upstream uses two GPUs)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nnc


def t(*values):
    return nnc.Tensor(np.array(values, np.float32))


def gemm():
    """CMD_GEMM_FORWARD(NO_TRANSPOSE, TRANSPOSE(0, 1))."""
    return nnc.Cmd("GEMM", transpose_b=True)


def two_chains(join=False):
    """schedule.tests.c "partial schedule work, one for device 0 and one for device 1" (and,
    with ``join``, "... on both device 0 and then join device 1"): two chains mul -> scale ->
    scale, the edges autogen gives them; ``join`` makes the second chain's destination end in
    scale11 and adds a NOOP reading b0 and d1, mul0 being the first chain's destination."""
    g = nnc.Graph()
    x = {}
    x["a0"], x["w0"], x["bias0"] = t(0.4, 1.2).view((1, 2)), t(3, 2).view((1, 2)), t(-1)
    x["b0"] = nnc.Tensor.zeros((1, 1))
    src0 = g.exec(gemm(), [x["a0"], x["w0"], x["bias0"]], [x["b0"]], name="mul0")
    dest0 = src0
    if not join:
        x["c0"], x["d0"] = nnc.Tensor.zeros((1, 1)), nnc.Tensor.zeros((1, 1))
        scale00 = g.exec(nnc.Cmd("SCALAR_MUL", a=1.1), [x["b0"]], [x["c0"]], name="scale00")
        dest0 = g.exec(nnc.Cmd("SCALAR_MUL", a=0.9), [x["c0"]], [x["d0"]], name="scale01")
        g.concat(src0, scale00)
        g.concat(scale00, dest0)
    x["a1"], x["w1"], x["bias1"] = t(1.3, 0.5).view((1, 2)), t(-3, 5).view((1, 2)), t(0.2)
    x["b1"], x["c1"], x["d1"] = (nnc.Tensor.zeros((1, 1)) for _ in range(3))
    src1 = g.exec(gemm(), [x["a1"], x["w1"], x["bias1"]], [x["b1"]], name="mul1")
    scale10 = g.exec(nnc.Cmd("SCALAR_MUL", a=1.2), [x["b1"]], [x["c1"]], name="scale10")
    dest1 = g.exec(nnc.Cmd("SCALAR_MUL", a=0.8), [x["c1"]], [x["d1"]], name="scale11")
    g.concat(src1, scale10)
    g.concat(scale10, dest1)
    if join:
        noop = g.exec(nnc.Cmd("NOOP"), [x["b0"], x["d1"]], [], name="noop")
        g.concat(src0, noop)
        g.concat(dest1, noop)
    return g, x, (src0, dest0, src1, dest1)


D0 = (0.4 * 3 + 1.2 * 2 - 1) * 1.1 * 0.9
D1 = (-1.3 * 3 + 0.5 * 5 + 0.2) * 1.2 * 0.8


def value(x):
    return float(x.numpy().reshape(-1)[0])


@pytest.mark.parametrize("max_streams", [0, 1])
def test_partial_schedule_one_for_device_0_and_one_for_device_1(max_streams):
    """schedule.tests.c: the default schedule, then a schedule per chain, then one of both;
    each run writes exactly its part (what a part does not cover stays zero)."""
    g, x, (src0, dest0, src1, dest1) = two_chains()
    default = nnc.static_schedule(g, max_streams=max_streams)
    stream = nnc.Stream("cpu")
    g.run_with_schedule(default, stream=stream)
    stream.wait()
    assert value(x["d0"]) == pytest.approx(D0, abs=1e-5)
    assert value(x["d1"]) == pytest.approx(D1, abs=1e-5)
    x["d0"].numpy()[...] = 0
    x["d1"].numpy()[...] = 0
    schedule0 = nnc.static_schedule(g, max_streams=max_streams, sources=[src0],
                                    destinations=[dest0])
    g.run_with_schedule(schedule0, stream=stream)
    stream.wait()
    assert value(x["d0"]) == pytest.approx(D0, abs=1e-5)
    assert value(x["d1"]) == 0                              # not in schedule0's part
    schedule1 = nnc.static_schedule(g, max_streams=max_streams, sources=[src1],
                                    destinations=[dest1])
    g.run_with_schedule(schedule1, stream=stream)
    stream.wait()
    assert value(x["d1"]) == pytest.approx(D1, abs=1e-5)
    x["d0"].numpy()[...] = 0
    x["d1"].numpy()[...] = 0
    schedule01 = nnc.static_schedule(g, max_streams=max_streams, sources=[src0, src1],
                                     destinations=[dest0, dest1])
    g.run_with_schedule(schedule01, stream=stream)
    stream.wait()
    assert value(x["d0"]) == pytest.approx(D0, abs=1e-5)
    assert value(x["d1"]) == pytest.approx(D1, abs=1e-5)
    # Three schedules side by side; the default one is still the graph's.
    assert g.schedule is default and not default.partial
    assert [s.partial for s in (schedule0, schedule1, schedule01)] == [True] * 3
    for s in (schedule0, schedule1, schedule01):
        s.verify()
    assert [e.name for e in schedule0.order] == ["mul0", "scale00", "scale01"]
    assert schedule01.sources == (src0, src1) and schedule01.destinations == (dest0, dest1)


def test_partial_schedule_on_both_then_join_device_1():
    """schedule.tests.c: a schedule of both chains (mul0 alone is the first: source and
    destination), run on stream0; stream1 joins it through a signal and copies d1 out while
    stream0 copies b0; the NOOP after both is outside the part."""
    g, x, (src0, dest0, src1, dest1) = two_chains(join=True)
    nnc.static_schedule(g)
    stream0, stream1 = nnc.Stream("cpu"), nnc.Stream("cpu")
    signal0 = nnc.Signal("cpu")
    schedule01 = nnc.static_schedule(g, sources=[src0, src1], destinations=[dest0, dest1])
    assert {e.name for e in schedule01.order} == {"mul0", "mul1", "scale10", "scale11"}
    g.run_with_schedule(schedule01, stream=stream0)
    stream0.emit(signal0)
    stream1.wait_signal(signal0)
    hd1, hb0 = nnc.Tensor.zeros((1, 1)), nnc.Tensor.zeros((1, 1))
    nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [x["d1"]], [hd1], stream=stream1)
    nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [x["b0"]], [hb0], stream=stream0)
    stream1.wait()
    stream0.wait()
    assert value(hb0) == pytest.approx(0.4 * 3 + 1.2 * 2 - 1, abs=1e-5)
    assert value(hd1) == pytest.approx(D1, abs=1e-5)


# -- a part runs exactly its nodes, as a sequential run of the same part does ------------------


def counting_graph(ran):
    """A diamond a -> (b, c) -> d, then d -> e, beside f -> g: each node records its name in
    ``ran`` and adds its inputs' sum plus its number into its output."""
    g = nnc.Graph()
    v = {k: nnc.Tensor.zeros((1,), "float64") for k in "abcdefg"}
    seed = nnc.Tensor(np.ones(1))
    ins = {"a": [seed], "b": [v["a"]], "c": [v["a"]], "d": [v["b"], v["c"]], "e": [v["d"]],
           "f": [seed], "g": [v["f"]]}
    nodes = {}
    for k, name in enumerate("abcdefg"):
        def fn(inputs, outputs, name=name, k=k):
            ran.append(name)
            outputs[0][...] = sum(x for x in inputs) + k
        nodes[name] = g.exec(nnc.Cmd.custom(fn), ins[name], [v[name]], name=name)
    for a, b in ("ab", "ac", "bd", "cd", "de", "fg"):
        g.concat(nodes[a], nodes[b])
    return g, nodes, v


PARTS = [("a", "d", "abcd"), ("b", "e", "bde"), ("ab", "d", "abcd"), ("a", "bc", "abc"),
         ("af", "eg", "abcdefg"), ("c", "c", "c"), ("f", "g", "fg")]


@pytest.mark.parametrize("srcs, dsts, expect", PARTS)
@pytest.mark.parametrize("max_streams", [0, 1, 2])
def test_a_part_runs_its_nodes_once_and_matches_a_sequential_run(srcs, dsts, expect,
                                                                 max_streams):
    ran = []
    g, nodes, v = counting_graph(ran)
    sched = nnc.static_schedule(g, max_streams=max_streams, sources=[nodes[k] for k in srcs],
                                destinations=[nodes[k] for k in dsts])
    sched.verify()
    s = nnc.Stream("cpu")
    g.run(stream=s, schedule=sched)
    s.wait()
    assert sorted(ran) == sorted(expect)                # each node of the part once, no other
    got = {k: float(x.numpy()[0]) for k, x in v.items()}
    # The same part run sequentially (NNC: ccv_nnc_graph_run with sources and destinations).
    ran2 = []
    g2, nodes2, v2 = counting_graph(ran2)
    g2.sources = [nodes2[k] for k in srcs]
    g2.destinations = [nodes2[k] for k in dsts]
    g2.run()
    assert sorted(ran2) == sorted(expect)
    assert got == {k: float(x.numpy()[0]) for k, x in v2.items()}
    assert g.schedule is None                           # a partial schedule is not attached


def test_two_partial_schedules_alternate_and_the_default_stays():
    ran = []
    g, nodes, v = counting_graph(ran)
    default = nnc.static_schedule(g, max_streams=2)
    left = nnc.static_schedule(g, sources=[nodes["a"]], destinations=[nodes["e"]])
    right = nnc.static_schedule(g, max_streams=1, sources=nodes["f"], destinations=nodes["g"])
    s = nnc.Stream("cpu")
    for _ in range(3):                  # queued back to back: runs on one stream keep order
        g.run(stream=s, schedule=left)
        g.run_with_schedule(right, stream=s)
    s.wait()
    # In submission order: each run of left (its five nodes), then right's two.
    assert len(ran) == 21
    for k in range(0, 21, 7):
        assert sorted(ran[k:k + 5]) == list("abcde") and ran[k + 5:k + 7] == list("fg")
        assert ran[k] == "a" and ran[k + 3:k + 5] == list("de")
    ran.clear()
    g.run(stream=s)                                     # the default schedule: every node
    s.wait()
    assert sorted(ran) == sorted("abcdefg") and g.schedule is default


def test_a_part_with_a_while_loop_runs_the_loop_and_nothing_else():
    """A part holding a while node runs its loop (on the node's stream, as the default run
    does); a part beside it leaves the loop alone."""
    z, y, w = nnc.Tensor(np.ones(1)), nnc.Tensor(np.full(1, 1.5)), nnc.Tensor(np.zeros(1))
    ran = []
    g, body = nnc.Graph(), nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    prod = body.exec(nnc.Cmd("EWPROD"), [y, z], [z])
    body.concat(noop, prod)
    body.set_while_expr(lambda count: count < 3, [], [noop])
    loop = g.while_(body)
    after = g.exec(nnc.Cmd.custom(lambda i, o: (ran.append("after"), o[0].fill(i[0][0] + 1))),
                   [z], [w], name="after")
    g.concat(loop, after)
    beside = g.exec(nnc.Cmd.custom(lambda i, o: ran.append("beside")), name="beside")
    whole = nnc.static_schedule(g, sources=[loop], destinations=[after])
    s = nnc.Stream("cpu")
    g.run(stream=s, schedule=whole)
    s.wait()
    assert float(z.numpy()[0]) == pytest.approx(1.5 ** 3) and body.while_count == 3
    assert float(w.numpy()[0]) == pytest.approx(1.5 ** 3 + 1) and ran == ["after"]
    part = nnc.static_schedule(g, sources=beside, destinations=beside)
    g.run(stream=s, schedule=part)
    s.wait()
    assert ran == ["after", "beside"] and float(z.numpy()[0]) == pytest.approx(1.5 ** 3)
    with pytest.raises(nnc.ScheduleError, match="loop body or branch"):
        nnc.static_schedule(body, sources=[noop], destinations=[prod])


# -- misuse --------------------------------------------------------------------------------------


def test_misuse_is_refused_with_a_clear_error():
    ran = []
    g, nodes, v = counting_graph(ran)
    other, onodes, _ = counting_graph([])
    s = nnc.Stream("cpu")
    with pytest.raises(nnc.ScheduleError, match="not a node of"):
        nnc.static_schedule(g, sources=[onodes["a"]], destinations=[nodes["d"]])
    with pytest.raises(nnc.ScheduleError, match="not a node of"):
        nnc.static_schedule(g, sources=[0], destinations=[nodes["d"]])
    with pytest.raises(nnc.ScheduleError, match="sequence of nodes"):
        nnc.static_schedule(g, sources=3, destinations=[nodes["d"]])
    with pytest.raises(nnc.ScheduleError, match="empty"):
        nnc.static_schedule(g, sources=[], destinations=[nodes["d"]])
    with pytest.raises(nnc.ScheduleError, match="no path.*#5 f"):
        nnc.static_schedule(g, sources=[nodes["f"]], destinations=[nodes["d"]])
    with pytest.raises(nnc.ScheduleError, match="no path.*#4 e"):
        nnc.static_schedule(g, sources=[nodes["e"]], destinations=[nodes["d"]])
    sched = nnc.static_schedule(g, sources=[nodes["a"]], destinations=[nodes["d"]])
    with pytest.raises(nnc.ScheduleError, match="needs a stream"):
        g.run(schedule=sched)
    with pytest.raises(nnc.ScheduleError, match="needs a stream"):
        g.run_with_schedule(sched)
    with pytest.raises(nnc.ScheduleError, match="not None"):
        g.run_with_schedule(None, stream=s)
    with pytest.raises(nnc.ScheduleError, match="must be an nnc.Schedule"):
        g.run(stream=s, schedule="partial")
    with pytest.raises(nnc.ScheduleError, match="is a schedule of"):
        other.run(stream=s, schedule=sched)
    g.concat(nodes["a"], nodes["f"])                    # the graph changes: sched is stale
    assert sched.stale
    with pytest.raises(nnc.ScheduleError, match="stale"):
        g.run(stream=s, schedule=sched)
    with pytest.raises(nnc.ScheduleError, match="stale"):
        sched.verify()
    s.wait()
    assert ran == []                                    # nothing ran
    fresh = nnc.static_schedule(g, sources=[nodes["a"]], destinations=[nodes["d"]])
    g.run(stream=s, schedule=fresh)
    s.wait()
    assert sorted(ran) == sorted("abcd")


def test_a_cyclic_graph_is_a_graph_error():
    g, nodes, _ = counting_graph([])
    g.concat(nodes["d"], nodes["a"])
    with pytest.raises(nnc.GraphError, match="cycle"):
        nnc.static_schedule(g, sources=[nodes["a"]], destinations=[nodes["d"]])


# -- threads ---------------------------------------------------------------------------------------


def _run_isolated(code, timeout=120):
    """Run code in a fresh interpreter (a crash or a hang fails the test, not the run)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_two_threads_running_disjoint_parts_are_serialised_or_refused():
    """Two threads, each running its own partial schedule of one graph on its own stream: a
    graph runs on one stream at a time (its streams and signals are shared by its schedules,
    as NNC's are), so a run while the other thread's is in flight is refused with a
    GraphError, never run on top of it. Each thread retries until it has run its part 30
    times, each time with new input, and checks every result."""
    out = _run_isolated("""
        import threading, time
        import numpy as np
        import nnc

        g = nnc.Graph()
        xs = [nnc.Tensor(np.zeros(1 << 17)) for _ in range(2)]
        ys = [nnc.Tensor(np.zeros(1 << 17)) for _ in range(2)]
        zs = [nnc.Tensor(np.zeros(1 << 17)) for _ in range(2)]
        ends = []
        for k in range(2):
            a = g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [xs[k]], [ys[k]])
            b = g.exec(nnc.Cmd("EWSUM"), [ys[k], xs[k]], [zs[k]])
            g.concat(a, b)
            ends.append((a, b))
        parts = [nnc.static_schedule(g, max_streams=2, sources=a, destinations=b)
                 for a, b in ends]
        refused, errors, done = [0, 0], [], [0, 0]

        def work(k):
            s = nnc.Stream("cpu")
            deadline = time.monotonic() + 60
            try:
                while done[k] < 30 and time.monotonic() < deadline:
                    xs[k].numpy()[...] = done[k] + k
                    try:
                        g.run(stream=s, schedule=parts[k])
                    except nnc.GraphError:
                        refused[k] += 1
                        time.sleep(0.0005)
                        continue
                    s.wait()
                    want = 3.0 * (done[k] + k)
                    if not (zs[k].numpy() == want).all():
                        errors.append((k, done[k], zs[k].numpy()[:4].tolist(), want))
                    done[k] += 1
            except BaseException as e:
                errors.append(repr(e))

        threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(90)
        assert not any(th.is_alive() for th in threads), "a thread hung"
        assert not errors, errors
        assert done == [30, 30], done
        print("refused", refused)
    """)
    assert out.startswith("refused")
