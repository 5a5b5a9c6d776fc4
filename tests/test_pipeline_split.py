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
