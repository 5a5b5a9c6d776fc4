"""The pipeline RFC's 3-module float network (TVM tests/python/relay/test_pipeline_executor.py,
in nnc commands; peers.md section 6): add, subtract, concat, split and multiply with the
constants 1, 2 and 3 on 3x3 inputs.

    mod1(data_0):          a = data_0 + 1, b = data_0 - 2, cat = concat(a, b) (6x3),
                           m = cat * 3, (o0, o1) = split(m)        -> outputs (o0, o1, a)
    mod2(data_0, data_1):  (data_0 + data_1) + 2                   -> output 0
    mod3(data_0, data_1):  data_0 * 3 - data_1                     -> output 0

Wiring: data_a -> mod1.data_0, data_b -> mod2.data_1, mod1.output(0) -> mod2.data_0,
mod1.output(1) -> mod3.data_1, mod2.output(0) -> mod3.data_0; global outputs mod3.output(0)
and mod1.output(2). Closed form: out0 = 6 a + 3 b + 21, out1 = a + 1.
"""

import numpy as np

import nnc
from nnc import pipeline


def _full(shape, value):
    return nnc.Tensor(np.full(shape, value, np.float32))


def _zeros(shape):
    return nnc.Tensor.zeros(shape, dtype="float32")


def mod1(name="mod1"):
    g = nnc.Graph()
    x = _zeros((3, 3))
    cat = _zeros((6, 3))
    a = cat.view((3, 3), offset=0)          # concat: both halves are written in place
    b = cat.view((3, 3), offset=9)
    m = _zeros((6, 3))
    o0, o1 = _zeros((3, 3)), _zeros((3, 3))
    add = g.exec(nnc.Cmd("ADD", p=1.0, q=1.0), [x, _full((3, 3), 1)], [a])
    sub = g.exec(nnc.Cmd("ADD", p=1.0, q=-1.0), [x, _full((3, 3), 2)], [b])
    mul = g.exec(nnc.Cmd("EWPROD"), [cat, _full((6, 3), 3)], [m])
    top = g.exec(nnc.Cmd("DATA_TRANSFER"), [m.view((3, 3), offset=0)], [o0])   # split
    bottom = g.exec(nnc.Cmd("DATA_TRANSFER"), [m.view((3, 3), offset=9)], [o1])
    for before, after in ((add, mul), (sub, mul), (mul, top), (mul, bottom)):
        g.concat(before, after)
    return pipeline.Module(g, inputs={"data_0": x}, outputs=[o0, o1, a], name=name)


def mod2(name="mod2"):
    g = nnc.Graph()
    x, y, s, out = _zeros((3, 3)), _zeros((3, 3)), _zeros((3, 3)), _zeros((3, 3))
    first = g.exec(nnc.Cmd("ADD", p=1.0, q=1.0), [x, y], [s])
    second = g.exec(nnc.Cmd("ADD", p=1.0, q=1.0), [s, _full((3, 3), 2)], [out])
    g.concat(first, second)
    return pipeline.Module(g, inputs={"data_0": x, "data_1": y}, outputs=[out], name=name)


def mod3(name="mod3"):
    g = nnc.Graph()
    x, y, p, out = _zeros((3, 3)), _zeros((3, 3)), _zeros((3, 3)), _zeros((3, 3))
    first = g.exec(nnc.Cmd("MUL", p=1.0), [x, _full((3, 3), 3)], [p])
    second = g.exec(nnc.Cmd("ADD", p=1.0, q=-1.0), [p, y], [out])
    g.concat(first, second)
    return pipeline.Module(g, inputs={"data_0": x, "data_1": y}, outputs=[out], name=name)


def rfc_config():
    """(cfg, (mod1, mod2, mod3)) wired as the RFC's test wires them."""
    m1, m2, m3 = mod1(), mod2(), mod3()
    cfg = pipeline.PipelineConfig()
    cfg.inputs["data_a"] = (m1, "data_0")
    cfg.inputs["data_b"] = (m2, "data_1")
    cfg.connect(m1, 0, m2, "data_0")
    cfg.connect(m1, 1, m3, "data_1")
    cfg.connect(m2, 0, m3, "data_0")
    cfg.outputs.append((m3, 0))
    cfg.outputs.append((m1, 2))
    return cfg, (m1, m2, m3)


def run_sequential(mods, data_a, data_b):
    """The reference: the three modules' graphs run one after another with g.run()."""
    m1, m2, m3 = mods

    def run(m, **arrays):
        for k, v in arrays.items():
            m.input_tensors[k].numpy()[...] = v
        m.graph.run()
        return [t.numpy().copy() for t in m.output_tensors]

    o1 = run(m1, data_0=data_a)
    o2 = run(m2, data_0=o1[0], data_1=data_b)
    o3 = run(m3, data_0=o2[0], data_1=o1[1])
    return [o3[0], o1[2]]


def closed_form(data_a, data_b):
    return [6 * data_a + 3 * data_b + 21, data_a + 1]
