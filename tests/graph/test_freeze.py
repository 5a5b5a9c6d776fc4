"""Graph.freeze and Graph.memory (nnc/graph/freeze.pyx): a graph's weights made constant, every
documented way of changing them between runs refused or detached, results unchanged."""

import gc
import threading

import numpy as np
import pytest

import nnc
from nnc.base.isa import set_cpu_isa, supported_isas
from nnc.tensor import constant


def _conv_gemm_graph(backend, rng):
    """x -> CONVOLUTION(w, b) -> y -> GEMM(fc_w, fc_b) -> z, plus the tensors."""
    x = nnc.Tensor(rng.standard_normal((1, 6, 6, 4)).astype(np.float32))
    w = nnc.Tensor(rng.standard_normal((5, 3, 3, 4)).astype(np.float32))
    b = nnc.Tensor(rng.standard_normal(5).astype(np.float32))
    y = nnc.Tensor.zeros((1, 6, 6, 5))
    fc_w = nnc.Tensor(rng.standard_normal((3, 180)).astype(np.float32))
    fc_b = nnc.Tensor(rng.standard_normal(3).astype(np.float32))
    z = nnc.Tensor.zeros((1, 3))
    g = nnc.Graph()
    conv = g.exec(nnc.Cmd("CONVOLUTION", padding=1, backend=backend), [x, w, b], [y])
    gemm = g.exec(nnc.Cmd("GEMM", transpose_b=True, backend=backend),
                  [y.view((1, 180)), fc_w, fc_b], [z])
    g.concat(conv, gemm)
    return g, dict(x=x, w=w, b=b, y=y, fc_w=fc_w, fc_b=fc_b, z=z)


@pytest.mark.parametrize("backend", ["CPU_REF", "CPU_OPT"])
@pytest.mark.parametrize("isa", supported_isas())
def test_frozen_graph_gives_the_same_results(backend, isa):
    set_cpu_isa(isa)
    try:
        g, t = _conv_gemm_graph(backend, np.random.default_rng(5))
        g.run()
        want = t["z"].numpy().copy()
        old = {k: t[k].numpy() for k in ("w", "b", "fc_w", "fc_b")}
        frozen = g.freeze()
        assert {id(x) for x in frozen} == {id(t[k]) for k in ("w", "b", "fc_w", "fc_b")}
        assert not t["x"].frozen and not t["y"].frozen
        for a in old.values():          # the detached arrays: no longer the weights
            a[...] = 1e6
        t["y"].numpy()[...] = np.nan
        t["z"].numpy()[...] = np.nan
        g.run()
        np.testing.assert_allclose(t["z"].numpy(), want, rtol=1e-6)
        assert g.freeze() == []         # nothing left to freeze
    finally:
        set_cpu_isa(None)


def test_freeze_skips_written_and_loop_moved_tensors_and_explicit_ones_raise():
    rng = np.random.default_rng(1)
    x = nnc.Tensor(rng.standard_normal((1, 4, 4, 2)).astype(np.float32))
    w = nnc.Tensor(rng.standard_normal((2, 1, 1, 2)).astype(np.float32))
    y = nnc.Tensor.zeros((1, 4, 4, 2))
    g = nnc.Graph()
    g.exec(nnc.Cmd("CONVOLUTION"), [x, w, None], [y])
    # A node writing (part of) w: w's contents change during a run, so it is not constant.
    g.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [y.view((2,))], [w.view((2,), offset=2)])
    assert g.freeze() == [] and not w.frozen
    with pytest.raises(nnc.GraphError, match="writes it"):
        g.freeze([w])
    with pytest.raises(nnc.GraphError, match="writes it"):
        g.freeze(y)
    with pytest.raises(nnc.GraphError, match="nnc.Tensors"):
        g.freeze([np.ones(2)])
    mv = nnc.MultiView([nnc.Tensor.zeros(2), nnc.Tensor.zeros(2)], anchor=nnc.Graph())
    with pytest.raises(nnc.GraphError, match="loop may re-point"):
        g.freeze([mv])
    assert not w.frozen and not y.frozen


def test_explicit_freeze_of_a_read_tensor_and_of_views_shares_one_block():
    base = nnc.Tensor(np.arange(12, dtype=np.float32))
    a, b = base.view((4,)), base.view((4,), offset=8)
    out1, out2 = nnc.Tensor.zeros(4), nnc.Tensor.zeros(4)
    g = nnc.Graph()
    g.exec(nnc.Cmd("ADD"), [a, b], [out1])
    g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [b], [out2])
    assert g.freeze() == []                             # no CONVOLUTION or GEMM: no default
    assert len(g.freeze([a, b])) == 2
    assert a.frozen and b.frozen and not base.frozen
    assert b.data_ptr - a.data_ptr == 32                # still views of one block
    assert g.memory() == {"frozen_bytes": 48, "packed_bytes": 0, "frozen_blocks": 1}
    base.numpy()[...] = 0                               # the old memory: detached
    g.run()
    np.testing.assert_array_equal(out1.numpy(), [8, 10, 12, 14])
    np.testing.assert_array_equal(out2.numpy(), [16, 18, 20, 22])


def test_freeze_reaches_sub_graphs_and_skips_a_loops_tensors():
    rng = np.random.default_rng(2)
    x = nnc.Tensor(rng.standard_normal((2, 3)).astype(np.float32))
    w = nnc.Tensor(rng.standard_normal((3, 3)).astype(np.float32))
    v1, v2 = (nnc.Tensor(rng.standard_normal((3, 3)).astype(np.float32)) for _ in range(2))
    h, h2 = nnc.Tensor.zeros((2, 3)), nnc.Tensor.zeros((2, 3))
    body = nnc.Graph()
    wv = nnc.MultiView([v1, v2], anchor=body)           # the loop count picks the weight
    e1 = body.exec(nnc.Cmd("GEMM", transpose_b=True), [x, w], [h])
    e2 = body.exec(nnc.Cmd("GEMM", transpose_b=True), [x, wv], [h2])
    body.concat(e1, e2)
    body.set_while_expr(lambda count: count < 3, [], [e2])
    g = nnc.Graph()
    g.while_(body)
    g.run()
    want, want2 = h.numpy().copy(), h2.numpy().copy()
    assert [id(t) for t in g.freeze()] == [id(w)]       # the multiview and its versions: kept
    assert w.frozen and not (wv.frozen or v1.frozen or v2.frozen)
    h.numpy()[...] = 0
    h2.numpy()[...] = 0
    g.run()
    np.testing.assert_array_equal(h.numpy(), want)
    np.testing.assert_array_equal(h2.numpy(), want2)
    assert g.memory()["frozen_blocks"] == 1


def test_freeze_is_refused_while_the_graph_runs():
    started, release = threading.Event(), threading.Event()
    errors = []

    def hold(inputs, outputs):
        started.set()
        release.wait(10)

    g, t = _conv_gemm_graph(None, np.random.default_rng(3))
    g.exec(nnc.Cmd.custom(hold))
    runner = threading.Thread(target=lambda: g.run())
    runner.start()
    try:
        assert started.wait(10)
        try:
            g.freeze()
        except nnc.GraphError as e:
            errors.append(e)
    finally:
        release.set()
        runner.join(10)
    assert not runner.is_alive()
    assert len(errors) == 1 and "freeze it" in str(errors[0])
    assert not t["w"].frozen


def test_memory_counts_frozen_blocks_once_and_is_freed_with_the_graph():
    gc.collect()
    before = constant.frozen_count()
    g, t = _conv_gemm_graph(None, np.random.default_rng(4))
    assert g.memory() == {"frozen_bytes": 0, "packed_bytes": 0, "frozen_blocks": 0}
    g.freeze()
    nbytes = sum(t[k].nbytes for k in ("w", "b", "fc_w", "fc_b"))
    assert g.memory() == {"frozen_bytes": nbytes, "packed_bytes": 0, "frozen_blocks": 4}
    assert constant.frozen_count() == before + 4
    del g, t
    gc.collect()
    assert constant.frozen_count() == before
