"""Engine.record(): a region of pushed ops becomes a Graph with transitively reduced edges;
static_schedule + run(stream=) replays it with the engine's results (docs/engine.md)."""

import json
import random

import numpy as np
import pytest
from _engine_lib import engine_lib
from test_engine import T, rand_workloads, read_vars, serial_sum

import nnc
from nnc.engine.region_graph import direct_deps, reduce_edges


def test_edges_are_the_var_conflicts_transitively_reduced():
    """A writes v; B reads v, writes w; C reads v and w: C's edge from A is implied by
    A -> B -> C and left out. D only mutates v after the readers B, C: edges from both."""
    e = nnc.Engine()
    v, w, x = e.new_var(), e.new_var(), e.new_var()
    with e.record() as g:
        e.push(lambda: None, mutate=[v], name="A")
        e.push(lambda: None, read=[v], mutate=[w], name="B")
        e.push(lambda: None, read=[v, w], mutate=[x], name="C")
        e.push(lambda: None, mutate=[v], name="D")
    assert e.wait_all(timeout=T)
    a, b, c, d = g.execs
    assert [n.name for n in (a, b, c, d)] == ["A", "B", "C", "D"]
    assert a.outgoings == [b]
    assert b.outgoings == [c]
    assert c.outgoings == [d] and d.outgoings == []


def test_reduce_edges_matches_brute_force():
    r = random.Random(3)
    for _ in range(30):
        n = r.randint(1, 25)
        deps = [{j for j in range(i) if r.random() < 0.3} for i in range(n)]
        reach = [set() for _ in range(n)]
        for i in range(n):
            for j in deps[i]:
                reach[i] |= reach[j] | {j}
        want = sorted((j, i) for i in range(n) for j in deps[i]
                      if not any(j in reach[k] for k in deps[i] if k != j))
        assert sorted(reduce_edges(deps)) == want


def test_direct_deps_follow_the_engine_rule():
    a, b = object(), object()
    entries = [("py", None, None, (), (a,)), ("py", None, None, (a,), ()),
               ("py", None, None, (a,), (b,)), ("py", None, None, (), (a,)),
               ("py", None, None, (b,), ())]
    assert direct_deps(entries) == [set(), {0}, {0}, {0, 1, 2}, {2}]


def test_record_replay_rand_sum_python_equals_engine_run():
    """RandSumExpr (1,000 workloads) recorded once; the scheduled replay from the same start
    reproduces the engine's values bit for bit."""
    work = rand_workloads(21, count=1000)
    vals = [1.0] * 100
    e = nnc.Engine()
    vs = [e.new_var() for _ in range(100)]

    def op(target, reads):
        def run():
            s = 0.0
            for i in reads:
                s += vals[i]
            vals[target] = s / (len(reads) + 1)
        return run

    with e.record() as g:
        for target, reads in work:
            e.push(op(target, reads), read=read_vars(vs, target, reads), mutate=[vs[target]])
    assert e.wait_all(timeout=T)
    engine_vals = list(vals)
    assert engine_vals == serial_sum(work) and len(g) == len(work)
    vals[:] = [1.0] * 100
    nnc.static_schedule(g)
    s = nnc.Stream()
    g.run(stream=s)
    assert s.wait(timeout=T)
    assert vals == engine_vals


def test_record_replay_c_functions_and_commands(tmp_path):
    """C fn ops (replayed as ENGINE_CALL nodes, from C without the GIL) and push_cmd ops
    (replayed as the same commands)."""
    lib = engine_lib()
    if lib is None:
        pytest.skip("no C compiler (sysconfig CC or cc) found")
    work = rand_workloads(5, count=500)
    rows = np.zeros((len(work), 22), np.int32)
    for k, (target, reads) in enumerate(work):
        rows[k, 0], rows[k, 1] = target, len(reads)
        rows[k, 2:2 + len(reads)] = reads
    vals = np.ones(100)
    lib.rs_vals(vals.ctypes.data)
    x = nnc.Tensor(np.arange(6, dtype=np.float32))
    y = nnc.Tensor(np.zeros(6, np.float32))
    z = nnc.Tensor(np.zeros(6, np.float32))
    e = nnc.Engine()
    vs = [e.new_var() for _ in range(100)]
    with e.record() as g:
        for k, (target, reads) in enumerate(work):
            e.push(lib.rs, read=read_vars(vs, target, reads), mutate=[vs[target]],
                   arg=rows.ctypes.data + 88 * k)
        e.push_cmd(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [y])
        e.push_cmd(nnc.Cmd("EWSUM"), [x, y], [z])
        e.push_cmd(nnc.Cmd("SCALAR_MUL", a=0.5), [z], [x])
    assert e.wait_all(timeout=T)
    engine_vals, engine_x = vals.tolist(), x.numpy().tolist()
    assert engine_vals == serial_sum(work) and engine_x == [1.5 * i for i in range(6)]
    vals[:] = 1.0
    x.numpy()[:] = np.arange(6)
    nnc.static_schedule(g)
    s = nnc.Stream()
    g.run(stream=s)
    assert s.wait(timeout=T)
    assert vals.tolist() == engine_vals and x.numpy().tolist() == engine_x
    assert {n.cmd.name for n in g.execs[:len(work)]} == {"ENGINE_CALL"}
    path = tmp_path / "t.json"          # C tasks: the worker never takes the GIL for them
    with nnc.trace(path):
        g.run(stream=s)
        assert s.wait(timeout=T)
    calls = {n.index for n in g.execs if n.cmd.name == "ENGINE_CALL"}
    kinds = {ev["args"]["task"] for ev in json.loads(path.read_text())["traceEvents"]
             if ev["ph"] == "X" and ev.get("cat") == "cmd" and ev["args"].get("node") in calls}
    assert kinds == {"C"}


def test_a_recorded_c_failure_is_reported_and_engine_call_takes_only_its_own_calls():
    lib = engine_lib()
    if lib is None:
        pytest.skip("no C compiler (sysconfig CC or cc) found")
    e = nnc.Engine()
    v = e.new_var()
    status = np.array([7], np.int32)            # eng_status returns *arg: 7, a failure
    with e.record() as g:
        e.push(lib.status, mutate=[v], arg=status.ctypes.data, name="fails")
    with pytest.raises(nnc.EngineError, match="fails"):
        e.wait_all(timeout=T)
    s = nnc.Stream()
    g.run(stream=s)
    with pytest.raises(nnc.StreamError):
        s.wait(timeout=T)
    status[0] = 0
    g.run(stream=s)
    assert s.wait(timeout=T)                    # the stream stays usable
    forged = nnc.Tensor(np.array([1, 0], np.int64))
    h = nnc.Graph()
    with pytest.raises(nnc.CommandError, match="only call tensors made by"):
        h.exec(nnc.Cmd("ENGINE_CALL"), [forged], [])
    with pytest.raises(nnc.CommandError, match="one input"):
        h.exec(nnc.Cmd("ENGINE_CALL"), [], [])


def test_record_rules():
    e = nnc.Engine(naive=True)
    v = e.new_var()
    with e.record() as g:
        with pytest.raises(nnc.EngineError, match="already recording"):
            e.record().__enter__()
        e.push(lambda: None, mutate=[v])
        e.delete_var(v)
    assert len(g) == 2 and g.execs[0].outgoings == [g.execs[1]]
    with pytest.raises(ValueError), e.record() as g2:
        e.push(lambda: None, mutate=[e.new_var()])
        raise ValueError("region failed")
    assert len(g2) == 0                 # an aborted region records nothing
    with e.record() as g3:
        pass
    assert len(g3) == 0
