"""``nnc.pipeline.split`` and ``partition`` (docs/pipeline.md, "Splitting a graph")."""

import itertools

import numpy as np
import pytest

import nnc
from nnc import pipeline
from nnc.models import build_inception_v3_model
from nnc.pipeline import PipelineError, partition


def _brute(costs, k):
    """The smallest largest run over every way to cut costs into k non-empty runs."""
    n = len(costs)
    best = None
    for cuts in itertools.combinations(range(1, n), k - 1):
        b = [0, *cuts, n]
        worst = max(sum(costs[x:y]) for x, y in zip(b, b[1:]))
        best = worst if best is None else min(best, worst)
    return best


def _largest(costs, cuts):
    b = [0, *cuts, len(costs)]
    return max(sum(costs[x:y]) for x, y in zip(b, b[1:]))


def test_partition_known_answers():
    assert partition([1, 2, 3, 4, 5], 2) == [3]          # 6 | 9
    assert partition([5, 1, 1, 1, 1, 1], 2) == [1]       # 5 | 5
    assert partition([1] * 10, 3) == [3, 6]              # 3 | 3 | 4
    assert partition([7], 1) == []
    assert partition([0, 0, 0], 3) == [1, 2]


def test_partition_is_optimal():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 9))
        k = int(rng.integers(1, n + 1))
        costs = [float(c) for c in rng.integers(0, 20, n)]
        cuts = partition(costs, k)
        assert len(cuts) == k - 1 and cuts == sorted(set(cuts)) and all(0 < c < n for c in cuts)
        assert _largest(costs, cuts) == _brute(costs, k)


@pytest.mark.parametrize("k", [0, -1, 4, True, 1.5, "2"])
def test_partition_bad_stages(k):
    with pytest.raises(PipelineError, match="stages"):
        partition([1, 2, 3], k)


@pytest.fixture(scope="module")
def inception():
    m = build_inception_v3_model(size=75)
    costs = {e: t for e, t in m.graph.profile()}
    return m, costs


def _reference(m, x):
    m.input.numpy()[...] = x
    m.graph.run()
    return m.output.numpy().copy()


def _real_nodes(module):
    return [e for e in module.graph.execs if e.name not in ("split.in", "split.out")]


@pytest.mark.parametrize("k", [2, 3])
def test_split_inception_matches_run(inception, k):
    """The pipeline's output equals g.run()'s for several inputs in flight together."""
    m, costs = inception
    cfg = pipeline.split(m.graph, stages=k, costs=costs, inputs={"data": m.input},
                         outputs=[m.output])
    plan = cfg.plan()
    assert [st.module.name for st in plan.stages] == [f"stage{i}" for i in range(k)]
    rng = np.random.default_rng(k)
    xs = [rng.standard_normal(m.input.shape).astype(np.float32) for _ in range(5)]
    want = [_reference(m, x) for x in xs]
    with pipeline.build(cfg, depth=3) as pm:
        got = []
        for x in xs:
            pm.set_input("data", x)
            pm.run(timeout=60)
        for _ in xs:
            out = pm.get_output(timeout=60)
            assert out is not None
            got.append(out[0])
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    # the graph itself still runs on its own memory and gives the same answer
    np.testing.assert_array_equal(_reference(m, xs[0]), want[0])


def test_split_balance_is_the_partitions(inception):
    """Each stage holds the nodes of one run of partition() over the topological order, so
    the largest stage cost is the best any cut of that order achieves."""
    m, costs = inception
    order = m.graph.topsort()
    seq = [costs[e] for e in order]
    for k in (2, 3, 4):
        cuts = partition(seq, k)
        cfg = pipeline.split(m.graph, stages=k, costs=costs, inputs={"data": m.input},
                             outputs=[m.output])
        sizes = [len(_real_nodes(st.module)) for st in cfg.plan().stages]
        b = [0, *cuts, len(order)]
        assert sizes == [y - x for x, y in zip(b, b[1:])]
        stage_costs = [sum(seq[x:y]) for x, y in zip(b, b[1:])]
        # no single move of a cut lowers the largest stage
        for i in range(k - 1):
            for d in (-1, 1):
                moved = list(cuts)
                moved[i] += d
                if moved == sorted(set(moved)) and 0 < moved[0] and moved[-1] < len(seq):
                    assert _largest(seq, moved) >= max(stage_costs)


def test_split_defaults_and_cost_forms(inception):
    m, costs = inception
    cfg = pipeline.split(m.graph, stages=2, costs=lambda e: costs[e])
    plan = cfg.plan()
    assert plan.inputs == ("input",)            # the first conv's data, not a weight
    (stage, index), = plan.outputs
    assert plan.stages[stage].module.output_tensors[index].shape == m.output.shape
    by_index = {e.index: t for e, t in costs.items()}
    cfg2 = pipeline.split(m.graph, stages=2, costs=by_index, inputs={"data": m.input},
                          outputs=[m.output])
    assert len(cfg2.plan().stages) == 2


def _concat_graph():
    """x -> a (x*2 into the left half of B), b (x+x into the right half), c (B*3 into y)."""
    g = nnc.Graph()
    x = nnc.Tensor(np.zeros(4, np.float32))
    buf = nnc.Tensor.zeros((8,), "float32")
    left, right = buf.view((4,), offset=0), buf.view((4,), offset=4)
    y = nnc.Tensor.zeros((8,), "float32")
    a = g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [left])
    b = g.exec(nnc.Cmd("EWSUM"), [x, x], [right])
    c = g.exec(nnc.Cmd("SCALAR_MUL", a=3.0), [buf], [y])
    g.concat(a, b)
    g.concat(b, c)
    return g, x, y, (a, b, c)


@pytest.mark.parametrize("k", [2, 3])
def test_split_between_views_of_one_buffer(k):
    """A cut between the two writers of a concat buffer's halves: the later stage gets the
    whole buffer (the half written before it included) and the result is exact."""
    g, x, y, nodes = _concat_graph()
    cfg = pipeline.split(g, stages=k, costs={e: 1.0 for e in nodes}, inputs={"x": x},
                         outputs=[y])
    v = np.arange(4, dtype=np.float32)
    with pipeline.build(cfg) as pm:
        for r in range(3):
            pm.set_input("x", v + r)
            pm.run(timeout=30)
        outs = [pm.get_output(timeout=30) for _ in range(3)]
    for r, out in enumerate(outs):
        assert out is not None
        np.testing.assert_array_equal(out[0], 3 * np.concatenate([2 * (v + r), 2 * (v + r)]))


def test_split_bad_arguments(inception):
    m, costs = inception
    g = m.graph
    n = len(g.topsort())
    for k in (0, n + 1, -2, True, 2.0):
        with pytest.raises(PipelineError, match="stages"):
            pipeline.split(g, stages=k, costs=costs)
    with pytest.raises(PipelineError, match="nnc.Graph"):
        pipeline.split("graph")                          # type: ignore[arg-type]
    bad = dict(costs)
    bad[next(iter(bad))] = -1.0
    with pytest.raises(PipelineError, match="finite and >= 0"):
        pipeline.split(g, stages=2, costs=bad)
    with pytest.raises(PipelineError, match="no cost"):
        pipeline.split(g, stages=2, costs={})
    with pytest.raises(PipelineError, match="costs function failed"):
        pipeline.split(g, stages=2, costs=lambda e: 1 / 0)
    with pytest.raises(PipelineError, match="costs must be"):
        pipeline.split(g, stages=2, costs=[1.0])         # type: ignore[arg-type]
    with pytest.raises(PipelineError, match="written by a node"):
        pipeline.split(g, stages=2, costs=costs, inputs={"out": m.output})
    stray = nnc.Tensor.zeros((3,), "float32")
    with pytest.raises(PipelineError, match="not read by any node"):
        pipeline.split(g, stages=2, costs=costs, inputs={"x": stray})
    with pytest.raises(PipelineError, match="not a tensor written"):
        pipeline.split(g, stages=2, costs=costs, inputs={"data": m.input}, outputs=[stray])


def test_split_refuses_control_nodes():
    """A while node cannot move into a stage graph (its body has one parent): refused whole,
    with the node named, rather than cut or copied wrongly."""
    x = nnc.Tensor(np.ones(2, np.float32))
    y = nnc.Tensor.zeros((2,), "float32")
    body = nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    body.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [x])
    body.set_while_expr(lambda count: count < 3, [], [noop])
    g = nnc.Graph()
    loop = g.while_(body)
    after = g.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [x], [y])
    g.concat(loop, after)
    with pytest.raises(PipelineError, match="WHILE node"):
        pipeline.split(g, stages=2, costs={loop: 1.0, after: 1.0})


@pytest.mark.parametrize("costs", [[1e308, 1e308, 1, 1], [1, 1, 1, 1e308], [1e308] * 4,
                                   [1e308, 1.0, 1e308, 0.0, 1e308]])
def test_partition_of_huge_costs_cuts_non_empty_runs(costs):
    """Costs near the float limit (their sums overflow to inf) still give k non-empty runs,
    the optimal ones: before, inf sums compared equal and runs came out empty."""
    for k in range(1, len(costs) + 1):
        cuts = partition(costs, k)
        assert len(cuts) == k - 1 and cuts == sorted(set(cuts)), (k, cuts)
        assert all(0 < c < len(costs) for c in cuts), (k, cuts)
        small = [c / 1e300 for c in costs]  # the same problem at a scale that does not overflow
        assert _largest(small, cuts) == _brute(small, k)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, "1", None])
def test_partition_refuses_bad_costs(bad):
    with pytest.raises(PipelineError, match="cost 1 must be"):
        partition([1.0, bad, 1.0], 2)


def _tensorless(log, tag):
    """A CUSTOM node's command that touches no tensor: it only notes that it ran."""
    return nnc.Cmd.custom(lambda inputs, outputs: log.append(tag))


def _stage_nodes(cfg):
    return [sorted(e.name for e in _real_nodes(st.module)) for st in cfg.plan().stages]


def test_split_keeps_a_node_that_touches_no_tensor():
    """A CUSTOM node touching no tensor is a stage's node like any other: split returns k
    stages, each node in exactly one, and every input runs it once. Before, its stage had no
    hand-over, so the config never held it: fewer stages, and the node never ran."""
    log = []
    g = nnc.Graph()
    x = nnc.Tensor(np.zeros(2, np.float32))
    y = nnc.Tensor.zeros((2,), "float32")
    a = g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [y], name="mul")
    b = g.exec(_tensorless(log, "note"), name="note")
    for k, want in ((2, [["mul"], ["note"]]), (1, [["mul", "note"]])):
        cfg = pipeline.split(g, stages=k, costs={a: 1.0, b: 1.0})
        assert _stage_nodes(cfg) == want
        log.clear()
        with pipeline.build(cfg, depth=2) as pm:
            for v in range(3):
                pm.set_input("input", np.full(2, v, np.float32))
                pm.run(timeout=30)
            for v in range(3):
                np.testing.assert_array_equal(pm.get_output(timeout=30)[0], [2 * v, 2 * v])
        assert log == ["note"] * 3


def test_split_keeps_the_order_of_edges_that_carry_no_tensor():
    """An edge between nodes of different stages that no tensor carries (a node touching no
    tensor, ordered by concat) still orders the stages: the later stage waits for the
    earlier one on every input, and the nodes run in the graph's order."""
    log = []
    g = nnc.Graph()
    x = nnc.Tensor(np.zeros(2, np.float32))
    y = nnc.Tensor.zeros((2,), "float32")
    first = g.exec(_tensorless(log, "first"), name="first")
    mul = g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [y], name="mul")
    last = g.exec(_tensorless(log, "last"), name="last")
    g.concat(first, mul)
    g.concat(mul, last)
    cfg = pipeline.split(g, stages=3, costs={first: 1.0, mul: 1.0, last: 1.0},
                         inputs={"input": x})
    plan = cfg.plan()
    names = [st.module.name for st in plan.stages]
    assert dict(zip(names, _stage_nodes(cfg))) == {"stage0": ["first"], "stage1": ["mul"],
                                                   "stage2": ["last"]}
    waits = {st.module.name: [names[p] for p in st.producers] for st in plan.stages}
    assert waits == {"stage0": [], "stage1": ["stage0"], "stage2": ["stage1"]}
    with pipeline.build(cfg, depth=3) as pm:
        pm.set_input("input", np.ones(2, np.float32))
        for _ in range(4):
            pm.run(timeout=30)
        for _ in range(4):
            np.testing.assert_array_equal(pm.get_output(timeout=30)[0], [2, 2])
    assert sorted(log) == ["first"] * 4 + ["last"] * 4
    for n in range(len(log)):           # input i's "last" comes after its "first"
        assert log[:n + 1].count("first") >= log[:n + 1].count("last"), log


def test_split_orders_a_stage_after_one_it_shares_no_tensor_with():
    """A concat edge from stage 0 to stage 2, which share no tensor, makes stage 2 wait for
    stage 0 (and for nothing else)."""
    log = []
    g = nnc.Graph()
    x1, x2 = (nnc.Tensor(np.ones(2, np.float32)) for _ in range(2))
    y1, y2 = (nnc.Tensor.zeros((2,), "float32") for _ in range(2))
    mul1 = g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x1], [y1], name="mul1")
    mul2 = g.exec(nnc.Cmd("SCALAR_MUL", a=3.0), [x2], [y2], name="mul2")
    last = g.exec(_tensorless(log, "last"), name="last")
    g.concat(mul1, last)
    cfg = pipeline.split(g, stages=3, costs={mul1: 1.0, mul2: 1.0, last: 1.0},
                         inputs={"a": x1, "b": x2})
    plan = cfg.plan()
    names = [st.module.name for st in plan.stages]
    stage_nodes = dict(zip(names, _stage_nodes(cfg)))
    assert stage_nodes == {"stage0": ["mul1"], "stage1": ["mul2"], "stage2": ["last"]}
    waits = {st.module.name: [names[p] for p in st.producers] for st in plan.stages}
    assert waits == {"stage0": [], "stage1": [], "stage2": ["stage0"]}


def test_split_of_huge_costs_gives_k_stages():
    g = nnc.Graph()
    ts = [nnc.Tensor(np.ones(2, np.float32)) for _ in range(5)]
    nodes = [g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [ts[i]], [ts[i + 1]], name=f"n{i}")
             for i in range(4)]
    for costs in ([1e308, 1e308, 1, 1], [1, 1, 1e308, 1e308], [1e308] * 4):
        for k in (2, 3, 4):
            cfg = pipeline.split(g, stages=k, costs=dict(zip(nodes, costs)))
            stage_nodes = _stage_nodes(cfg)
            assert len(stage_nodes) == k and all(stage_nodes), (costs, k, stage_nodes)
            assert sum(stage_nodes, []) == [f"n{i}" for i in range(4)]


def test_split_of_a_graph_without_outputs_is_refused():
    """Nothing a pipeline could return: refused by split, naming the problem, rather than a
    config that fails later."""
    log = []
    g = nnc.Graph()
    g.exec(_tensorless(log, "a"), name="a")
    g.exec(_tensorless(log, "b"), name="b")
    with pytest.raises(PipelineError, match="no global output"):
        pipeline.split(g, stages=2, costs={0: 1.0, 1: 1.0})
