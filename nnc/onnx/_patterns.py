"""Runs of ONNX nodes that are one nnc command: GELU spelled out in elementary operators, and a
MatMul whose product a constant bias row is added to.

PyTorch's exporters (and Hugging Face's models) write nn.GELU() as x * 0.5 * (1 + erf(x / sqrt 2)):
five nodes (Div or Mul, Erf, Add, two Muls), each a pass over the activation, where nnc has one
GELU command (erf form, computed as x / 2 * erfc(-x / sqrt 2) without the cancellation of
1 + erf for negative x: docs/commands.md). ConvNeXt, Swin and ViT spend 6-8 % of their time in
those passes. The loader (nnc.onnx._load, _activation_products) asks :func:`gelu_of` for every
Mul node and, on a match, emits GELU of x at that Mul and skips the rest of the run.

A linear layer on a batch of rows ([B, S, K] times [K, N]: transformers' every projection)
exports as MatMul then Add of the bias: :func:`biased_matmul` finds them, and the loader emits
one GEMM with the bias at the Add (its epilogue adds the bias while the tile is in registers,
where the Add was a second pass over the product).
"""

import math

import numpy as np

_SQRT2 = math.sqrt(2.0)


def _scalar(consts, name, value, rel=0.0):
    """Whether ``name`` is a constant of one element equal to ``value`` (within ``rel`` of it:
    float32 rounds sqrt 2 and its reciprocal)."""
    v = consts.get(name)
    if v is None or np.size(v) != 1:
        return False
    f = float(np.asarray(v, np.float64).reshape(-1)[0])
    return abs(f - value) <= rel * abs(value)


def gelu_of(k, nodes, skip, consts, producer, single):
    """(x, covered) when node k (a Mul) ends x * 0.5 * (1 + erf(x / sqrt 2)), grouped as
    (x * (1 + erf(..))) * 0.5 or (x * 0.5) * (1 + erf(..)), operands of each Add and Mul in
    either order and x / sqrt 2 as a Div or a Mul by 1 / sqrt 2; ``covered``: the other nodes
    of the run, each of whose outputs ``single(name)`` says is read by the run alone. Else
    None. ``producer``: output name -> node index."""

    def node(name, *ops):
        j = producer.get(name)
        if j is None or j in skip or not single(name):
            return None, None
        m = nodes[j]
        arity = 1 if m.op_type == "Erf" else 2
        if m.op_type not in ops or m.domain not in ("", "ai.onnx") or len(m.input) != arity:
            return None, None
        return j, m

    def pairs(m):
        a, b = m.input[0], m.input[1]
        return ((a, b), (b, a))

    def erf_half(a_name):
        """x and the nodes of 1 + erf(x / sqrt 2) ending at output a_name, or None."""
        ja, add = node(a_name, "Add")
        if add is None:
            return None
        for e_name, one in pairs(add):
            if not _scalar(consts, one, 1.0):
                continue
            je, erf = node(e_name, "Erf")
            if erf is None:
                continue
            jd, div = node(erf.input[0], "Div", "Mul")
            if div is None:
                continue
            if div.op_type == "Div":
                x, c = div.input[0], div.input[1]
                if x not in consts and _scalar(consts, c, _SQRT2, 1e-6):
                    return x, [ja, je, jd]
            else:
                for x, c in pairs(div):
                    if x not in consts and _scalar(consts, c, 1 / _SQRT2, 1e-6):
                        return x, [ja, je, jd]
        return None

    n = nodes[k]
    if n.op_type != "Mul" or n.domain not in ("", "ai.onnx") or len(n.input) != 2:
        return None
    for p_name, q_name in pairs(n):
        if _scalar(consts, q_name, 0.5):
            # (x * (1 + erf(x / sqrt 2))) * 0.5
            jp, inner = node(p_name, "Mul")
            if inner is None:
                continue
            for x, a_name in pairs(inner):
                found = erf_half(a_name)
                if found is not None and found[0] == x:
                    return x, [jp] + found[1]
        else:
            # (x * 0.5) * (1 + erf(x / sqrt 2))
            jh, half = node(p_name, "Mul")
            if half is None:
                continue
            for x, c in pairs(half):
                if x in consts or not _scalar(consts, c, 0.5):
                    continue
                found = erf_half(q_name)
                if found is not None and found[0] == x:
                    return x, [jh] + found[1]
    return None


def biased_matmul(k, nodes, skip, consts, producer, single, shapes):
    """(j, bias) when node k is Add(MatMul_j(x, w), bias) with w a constant matrix, bias a
    constant of N = w's columns elements broadcast along the last axis alone (shape (N,) or
    (1, ..., 1, N), no more axes than the product) and the product read by the Add alone, in
    either operand order; else None."""
    n = nodes[k]
    if n.op_type != "Add" or n.domain not in ("", "ai.onnx") or len(n.input) != 2:
        return None
    for s_name, b_name in ((n.input[0], n.input[1]), (n.input[1], n.input[0])):
        j = producer.get(s_name)
        if j is None or j in skip or b_name not in consts or not single(s_name):
            continue
        mm = nodes[j]
        if mm.op_type != "MatMul" or mm.domain not in ("", "ai.onnx") or len(mm.input) != 2:
            continue
        w = consts.get(mm.input[1])
        out = shapes.get(s_name)
        if w is None or np.ndim(w) != 2 or mm.input[0] in consts or out is None:
            continue
        b = np.asarray(consts[b_name])
        if (b.ndim < 1 or b.ndim > len(out) or b.shape[-1] != np.shape(w)[1]
                or any(d != 1 for d in b.shape[:-1]) or b.dtype.kind != "f"):
            continue
        return j, b_name
    return None
