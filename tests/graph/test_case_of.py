"""case..of sub-graphs (NNC: case_of.tests.c and the case..of cases of schedule.tests.c),
sequentially, on a CPU stream and statically scheduled on streams."""

import numpy as np
import pytest
from test_graph import scalar
from test_while import MODES, run

import nnc


def piecewise_expr(x):
    """x < 0: 0; x < 1: -1 (skip); x < 2: 1; x > 1000: 3; otherwise 2."""
    v = x[0]
    if v < 0:
        return 0
    if v < 1:
        return -1
    if v < 2:
        return 1
    if v > 1000:
        return 3
    return 2


def piecewise_branches(x):
    """0: x = 0; 1: x = x * 0.5, then x = x + 0.5; 2: x = 1.5 (branch 3 is never set)."""
    b0 = nnc.Graph()
    b0.exec(nnc.Cmd("SET", value=0.0), [], [x])
    b1 = nnc.Graph()
    half = scalar(0.5)
    m = b1.exec(nnc.Cmd("SCALAR_MUL", a=0.5), [x], [x])
    a = b1.exec(nnc.Cmd("EWSUM"), [x, half], [x])
    b1.concat(m, a)
    b2 = nnc.Graph()
    b2.exec(nnc.Cmd("SET", value=1.5), [], [x])
    return b0, b1, b2


def piecewise_graph(x):
    g = nnc.Graph()
    c = g.case_of([x], [x])
    g.set_case_of_expr(c, piecewise_expr, 0)
    for k, b in enumerate(piecewise_branches(x)):
        g.set_case_of(c, b, k)
    return g, c


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("x0, expect", [(-1, 0), (0.76, 0.76), (1.226, 1.113), (2.1, 1.5)])
def test_piecewise_linear(mode, x0, expect):
    x = scalar(x0)
    g, c = piecewise_graph(x)
    run(g, mode)
    assert x.numpy()[0] == pytest.approx(expect, abs=1e-5)


def four_branches(x):
    """y = exp x, log x, 1/x or 1.1 x by the piecewise index; skipped: y is x (a PHI view)."""
    ybuf, one, out = scalar(0), scalar(1), scalar(0)
    y = nnc.MultiView([x, ybuf], kind="PHI")
    g = nnc.Graph()
    c = g.case_of([x], [y])
    g.set_case_of_expr(c, piecewise_expr, 0)
    cmds = [(nnc.Cmd("EWEXP"), [x]), (nnc.Cmd("EWLOG"), [x]), (nnc.Cmd("EWDIV"), [one, x]),
            (nnc.Cmd("SCALAR_MUL", a=1.1), [x])]
    for k, (cmd, ins) in enumerate(cmds):
        b = nnc.Graph()
        b.exec(cmd, ins, [ybuf])
        g.set_case_of(c, b, k)
    copy = g.exec(nnc.Cmd("DATA_TRANSFER"), [y], [out])
    g.concat(c, copy)
    return g, y, out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("x0, expect", [(-2.2, 0.1108032), (1.1, 0.0953102), (0.9, 0.9),
                                        (2.2, 0.4545455), (1001, 1101.1)])
def test_four_branches_with_pass_through(mode, x0, expect):
    x = scalar(x0)
    g, y, out = four_branches(x)
    run(g, mode)
    tol = 1e-2 if x0 > 1000 else 1e-5
    assert out.numpy()[0] == pytest.approx(expect, abs=tol)
    assert y.numpy()[0] == pytest.approx(expect, abs=tol)
    assert (y.data_ptr == x.data_ptr) == (x0 == 0.9)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("x0, expect_x, expect_z", [
    (1.226, 1.014125, 0.3042375), (0.8, 0.8, 0.24), (2.5, 1.0625, 0.31875), (-3, 0, 0),
    (5, 1.0625, 0.31875),
])
def test_case_of_inside_while(mode, x0, expect_x, expect_z):
    """while (count < 4) { case..of piecewise on x }, then z = 0.3 x."""
    x, z = scalar(x0), scalar(0)
    g, body = nnc.Graph(), nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    c = body.case_of([x], [x])
    body.set_case_of_expr(c, piecewise_expr, 0)
    for k, b in enumerate(piecewise_branches(x)):
        body.set_case_of(c, b, k)
    body.concat(noop, c)
    body.set_while_expr(lambda count: count < 4, [], [noop])
    loop = g.while_(body)
    scale = g.exec(nnc.Cmd("SCALAR_MUL", a=0.3), [x], [z])
    g.concat(loop, scale)
    run(g, mode)
    assert x.numpy()[0] == pytest.approx(expect_x, abs=1e-5)
    assert z.numpy()[0] == pytest.approx(expect_z, abs=1e-5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n, expect_x, expect_z", [(3, 0.88, 0.264), (4, 0.704, 0.2112)])
def test_case_of_inside_while_after_a_pre_scale(mode, n, expect_x, expect_z):
    """case_of.tests.c, "takes input by multiplying to 0.8": x = 0.8 x, then case..of on x,
    n times from x = 2.5 (2.0 -> 1.5, 1.2 -> 1.1, 0.88 skipped, 0.704 skipped); z = 0.3 x.
    n = 3 is the upstream assertion (1.1 * 0.8 * 0.3); n = 4 gives 0.2112 (0.704 * 0.3)."""
    x, z = scalar(2.5), scalar(0)
    g, body = nnc.Graph(), nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    prod = body.exec(nnc.Cmd("SCALAR_MUL", a=0.8), [x], [x])
    c = body.case_of([x], [x])
    body.set_case_of_expr(c, piecewise_expr, 0)
    for k, b in enumerate(piecewise_branches(x)):
        body.set_case_of(c, b, k)
    body.concat(noop, prod)
    body.concat(prod, c)
    body.set_while_expr(lambda count: count < n, [], [noop])
    loop = g.while_(body)
    scale = g.exec(nnc.Cmd("SCALAR_MUL", a=0.3), [x], [z])
    g.concat(loop, scale)
    run(g, mode)
    assert body.while_count == n
    assert x.numpy()[0] == pytest.approx(expect_x, abs=1e-5)
    assert z.numpy()[0] == pytest.approx(expect_z, abs=1e-6)


def test_offset_and_negative_index():
    x = scalar(5)
    g, c = piecewise_graph(x)
    g.set_case_of_expr(c, lambda v: 0, 2)   # 2 + 0: branch 2 sets 1.5
    g.run()
    assert x.numpy()[0] == 1.5
    g.set_case_of_expr(c, lambda v: 0, -1)  # -1: no branch
    x.numpy()[0] = 7
    g.run()
    assert x.numpy()[0] == 7


def test_bad_case_of():
    x = scalar(5000)
    g, c = piecewise_graph(x)
    with pytest.raises(nnc.GraphError, match="branch 3, which was never set"):
        g.run()
    s = nnc.Stream("cpu")
    g.run(stream=s)
    with pytest.raises(nnc.StreamError, match="branch 3"):
        s.wait()
    x.numpy()[0] = -1
    g.run(stream=s)
    s.wait()
    assert x.numpy()[0] == 0
    g.set_case_of_expr(c, lambda v: "two", 0)
    with pytest.raises(nnc.GraphError, match="not an int"):
        g.run()

    class NoIndex:                      # neither an int nor printable
        def __repr__(self):
            raise RuntimeError("repr of NoIndex")

    g.set_case_of_expr(c, lambda v: NoIndex(), 0)
    with pytest.raises(nnc.GraphError, match="NoIndex object: its repr raised.*not an int"):
        g.run()
    with pytest.raises(nnc.GraphError, match="callable"):
        g.set_case_of_expr(c, None, 0)
    with pytest.raises(nnc.GraphError, match=">= 0"):
        g.set_case_of(c, nnc.Graph(), -1)
    with pytest.raises(nnc.GraphError, match="must be an nnc.Graph"):
        g.set_case_of(c, "branch", 0)
    plain = g.exec(nnc.Cmd("NOOP"))
    with pytest.raises(nnc.GraphError, match="not a case..of node"):
        g.set_case_of_expr(plain, piecewise_expr, 0)
    with pytest.raises(nnc.GraphError, match="of this graph"):
        nnc.Graph().set_case_of_expr(c, piecewise_expr, 0)
    with pytest.raises(nnc.GraphError, match="fixed"):
        c.set_io([x], [x])
    with pytest.raises(nnc.GraphError, match="cannot be None"):
        nnc.Graph().case_of([None], [])
    with pytest.raises(nnc.CommandError, match="must be nnc.Tensor"):
        nnc.Graph().case_of(["x"], [])
    none = nnc.Graph()
    e = none.case_of([np.zeros(1, np.float32)], [])
    with pytest.raises(nnc.GraphError, match="no expression"):
        none.run()
    assert e.cmd.name == "CASE_OF"
