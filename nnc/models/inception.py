"""Inception-V3 (torchvision layout, no auxiliary head) as one nnc concrete graph.

The layer table below is torchvision's Inception-V3 at 299×299. Tensors are NHWC. Every convolution
is a ``CONVOLUTION`` node with a bias (batch norm folded into it) followed by an in-place ``RELU``
node on the convolution's output. Weights are random, He-scaled, drawn from
``np.random.default_rng(seed)`` in a fixed order, so two builds with one seed hold the same
numbers whatever backends they use.

Branch concatenation is zero-copy, as NNC does it: each block allocates its output
``[N, H, W, C_total]`` once, and the last node of every branch (a convolution, or a max pool in the
reduction blocks) writes straight into a strided view of its channel slice; that branch's RELU then
runs in place on the view. No node copies data for a concat. The edges say which node reads what
another node writes: producer -> consumer, and every consumer of a block's output depends on the
last node of every branch.

    g, x, y = build_inception_v3(size=299)
    x.numpy()[...] = image           # [1, 299, 299, 3], already filled with random numbers
    g.run()
    probs = y.numpy()                # [1, 1000], a softmax

``backend="CPU_REF"`` pins every node to that backend: the reference to check other backends
against (``reference_forward`` does just that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from nnc.cmd.command import Cmd
from nnc.graph.graph import Graph
from nnc.tensor.constant import frozen_copy
from nnc.tensor.tensor import Tensor

MIN_SIZE = 75  # the smallest input whose Mixed_7a output is still at least 1x1 (as torchvision)
NUM_CLASSES = 1000


@dataclass
class _Act:
    """An activation: the tensor and the nodes whose completion makes it readable."""

    tensor: Tensor
    deps: list


@dataclass
class InceptionV3:
    """A built Inception-V3 graph and the tensors a caller or a test wants to reach."""

    graph: Graph
    input: Tensor  # [N, size, size, 3]
    output: Tensor  # [N, 1000], softmax probabilities
    logits: Tensor  # [N, 1000], the fc output the softmax reads
    size: int
    batch: int
    dtype: str
    backend: str | None
    params: int = 0  # weights and biases
    macs: int = 0  # multiply-accumulates of the convolutions and the fc layer
    # block name -> (concat buffer, [(branch name, view of the buffer it writes), ...])
    concats: dict = field(default_factory=dict)


def _out_hw(h, w, kh, kw, stride, pad):
    top, left, bottom, right = pad
    return (h + top + bottom - kh) // stride[0] + 1, (w + left + right - kw) // stride[1] + 1


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _pad4(p):
    if isinstance(p, int):
        return (p, p, p, p)
    if len(p) == 2:
        return (p[0], p[1], p[0], p[1])
    return tuple(p)


class _Builder:
    def __init__(self, graph, batch, seed, dtype, backend, freeze):
        self.g = graph
        self.freeze = freeze
        self.n = batch
        self.rng = np.random.default_rng(seed)
        self.dtype = np.dtype(dtype)
        self.backend = backend
        self.params = 0
        self.macs = 0
        self.concats = {}

    # -- plumbing -----------------------------------------------------------------------------
    def cmd(self, name, **params):
        return Cmd(name, backend=self.backend, **params)

    def node(self, cmd, inputs, outputs, name, deps):
        e = self.g.exec(cmd, inputs, outputs, name=name)
        for d in deps:
            self.g.concat(d, e)
        return e

    def random(self, shape, scale):
        a = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
        if self.freeze:             # made in frozen memory with the one copy: constant weights
            return Tensor(frozen_copy(a, self.dtype))
        return Tensor(np.ascontiguousarray(a, dtype=self.dtype))

    def empty(self, shape):
        return Tensor.empty(shape, dtype=self.dtype)

    def block_output(self, name, h, w, channels):
        """The block's concat buffer and a function handing out channel-slice views of it."""
        buf = self.empty((self.n, h, w, channels))
        slots = []
        self.concats[name] = (buf, slots)
        cursor = [0]

        def slot(branch, c):
            c0 = cursor[0]
            cursor[0] += c
            if cursor[0] > channels:
                raise ValueError(f"{name}: branches need more than {channels} channels")
            v = buf.view((self.n, h, w, c), offset=c0,
                         strides=(h * w * channels, w * channels, channels, 1))
            slots.append((f"{name}/{branch}", v))
            return v

        return buf, slot

    # -- layers -------------------------------------------------------------------------------
    def conv(self, name, x, out_c, k, stride=1, pad=0, out=None):
        """CONVOLUTION (bias = folded batch norm) then an in-place RELU; returns the RELU'd act."""
        n, h, w, c = x.tensor.shape
        kh, kw = _pair(k)
        stride, pad = _pair(stride), _pad4(pad)
        ho, wo = _out_hw(h, w, kh, kw, stride, pad)
        weight = self.random((out_c, kh, kw, c), math.sqrt(2.0 / (kh * kw * c)))
        bias = self.random((out_c,), 0.05)
        self.params += out_c * kh * kw * c + out_c
        self.macs += n * ho * wo * out_c * kh * kw * c
        y = self.empty((n, ho, wo, out_c)) if out is None else out
        if y.shape != (n, ho, wo, out_c):
            raise ValueError(f"{name}: output view {y.shape} != {(n, ho, wo, out_c)}")
        e = self.node(self.cmd("CONVOLUTION", stride=stride, padding=pad),
                      [x.tensor, weight, bias], [y], name, x.deps)
        r = self.node(self.cmd("RELU"), [y], [y], f"{name}/relu", [e])
        return _Act(y, [r])

    def pool(self, name, kind, x, size, stride, pad=0, out=None):
        n, h, w, c = x.tensor.shape
        kh, kw = _pair(size)
        stride, pad = _pair(stride), _pad4(pad)
        ho, wo = _out_hw(h, w, kh, kw, stride, pad)
        y = self.empty((n, ho, wo, c)) if out is None else out
        if kind == "MAX_POOL":
            cmd = self.cmd("MAX_POOL", size=(kh, kw), stride=stride, padding=pad)
        else:
            # torchvision's F.avg_pool2d(x, 3, stride=1, padding=1) counts the padding.
            cmd = self.cmd("AVG_POOL", size=(kh, kw), stride=stride, padding=pad,
                           count_include_pad=True)
        e = self.node(cmd, [x.tensor], [y], name, x.deps)
        return _Act(y, [e])

    # -- blocks (torchvision's channel order in every concat) ---------------------------------
    def inception_a(self, name, x, pool_features):
        n, h, w, _ = x.tensor.shape
        buf, slot = self.block_output(name, h, w, 224 + pool_features)
        b1 = self.conv(f"{name}/branch1x1", x, 64, 1, out=slot("branch1x1", 64))
        b5 = self.conv(f"{name}/branch5x5_1", x, 48, 1)
        b5 = self.conv(f"{name}/branch5x5_2", b5, 64, 5, pad=2, out=slot("branch5x5", 64))
        b3 = self.conv(f"{name}/branch3x3dbl_1", x, 64, 1)
        b3 = self.conv(f"{name}/branch3x3dbl_2", b3, 96, 3, pad=1)
        b3 = self.conv(f"{name}/branch3x3dbl_3", b3, 96, 3, pad=1,
                       out=slot("branch3x3dbl", 96))
        bp = self.pool(f"{name}/branch_pool/avg_pool", "AVG_POOL", x, 3, 1, 1)
        bp = self.conv(f"{name}/branch_pool", bp, pool_features, 1,
                       out=slot("branch_pool", pool_features))
        return _Act(buf, b1.deps + b5.deps + b3.deps + bp.deps)

    def inception_b(self, name, x):
        n, h, w, c = x.tensor.shape
        ho, wo = _out_hw(h, w, 3, 3, (2, 2), (0, 0, 0, 0))
        buf, slot = self.block_output(name, ho, wo, 384 + 96 + c)
        b3 = self.conv(f"{name}/branch3x3", x, 384, 3, stride=2, out=slot("branch3x3", 384))
        bd = self.conv(f"{name}/branch3x3dbl_1", x, 64, 1)
        bd = self.conv(f"{name}/branch3x3dbl_2", bd, 96, 3, pad=1)
        bd = self.conv(f"{name}/branch3x3dbl_3", bd, 96, 3, stride=2,
                       out=slot("branch3x3dbl", 96))
        bp = self.pool(f"{name}/branch_pool", "MAX_POOL", x, 3, 2, out=slot("branch_pool", c))
        return _Act(buf, b3.deps + bd.deps + bp.deps)

    def inception_c(self, name, x, c7):
        n, h, w, _ = x.tensor.shape
        buf, slot = self.block_output(name, h, w, 4 * 192)
        b1 = self.conv(f"{name}/branch1x1", x, 192, 1, out=slot("branch1x1", 192))
        b7 = self.conv(f"{name}/branch7x7_1", x, c7, 1)
        b7 = self.conv(f"{name}/branch7x7_2", b7, c7, (1, 7), pad=(0, 3))
        b7 = self.conv(f"{name}/branch7x7_3", b7, 192, (7, 1), pad=(3, 0),
                       out=slot("branch7x7", 192))
        bd = self.conv(f"{name}/branch7x7dbl_1", x, c7, 1)
        bd = self.conv(f"{name}/branch7x7dbl_2", bd, c7, (7, 1), pad=(3, 0))
        bd = self.conv(f"{name}/branch7x7dbl_3", bd, c7, (1, 7), pad=(0, 3))
        bd = self.conv(f"{name}/branch7x7dbl_4", bd, c7, (7, 1), pad=(3, 0))
        bd = self.conv(f"{name}/branch7x7dbl_5", bd, 192, (1, 7), pad=(0, 3),
                       out=slot("branch7x7dbl", 192))
        bp = self.pool(f"{name}/branch_pool/avg_pool", "AVG_POOL", x, 3, 1, 1)
        bp = self.conv(f"{name}/branch_pool", bp, 192, 1, out=slot("branch_pool", 192))
        return _Act(buf, b1.deps + b7.deps + bd.deps + bp.deps)

    def inception_d(self, name, x):
        n, h, w, c = x.tensor.shape
        ho, wo = _out_hw(h, w, 3, 3, (2, 2), (0, 0, 0, 0))
        buf, slot = self.block_output(name, ho, wo, 320 + 192 + c)
        b3 = self.conv(f"{name}/branch3x3_1", x, 192, 1)
        b3 = self.conv(f"{name}/branch3x3_2", b3, 320, 3, stride=2, out=slot("branch3x3", 320))
        b7 = self.conv(f"{name}/branch7x7x3_1", x, 192, 1)
        b7 = self.conv(f"{name}/branch7x7x3_2", b7, 192, (1, 7), pad=(0, 3))
        b7 = self.conv(f"{name}/branch7x7x3_3", b7, 192, (7, 1), pad=(3, 0))
        b7 = self.conv(f"{name}/branch7x7x3_4", b7, 192, 3, stride=2,
                       out=slot("branch7x7x3", 192))
        bp = self.pool(f"{name}/branch_pool", "MAX_POOL", x, 3, 2, out=slot("branch_pool", c))
        return _Act(buf, b3.deps + b7.deps + bp.deps)

    def inception_e(self, name, x):
        n, h, w, _ = x.tensor.shape
        buf, slot = self.block_output(name, h, w, 320 + 768 + 768 + 192)
        b1 = self.conv(f"{name}/branch1x1", x, 320, 1, out=slot("branch1x1", 320))
        # The split branches write two adjacent slices: 1x3 then 3x1, as torch.cat orders them.
        b3 = self.conv(f"{name}/branch3x3_1", x, 384, 1)
        b3a = self.conv(f"{name}/branch3x3_2a", b3, 384, (1, 3), pad=(0, 1),
                        out=slot("branch3x3_2a", 384))
        b3b = self.conv(f"{name}/branch3x3_2b", b3, 384, (3, 1), pad=(1, 0),
                        out=slot("branch3x3_2b", 384))
        bd = self.conv(f"{name}/branch3x3dbl_1", x, 448, 1)
        bd = self.conv(f"{name}/branch3x3dbl_2", bd, 384, 3, pad=1)
        bda = self.conv(f"{name}/branch3x3dbl_3a", bd, 384, (1, 3), pad=(0, 1),
                        out=slot("branch3x3dbl_3a", 384))
        bdb = self.conv(f"{name}/branch3x3dbl_3b", bd, 384, (3, 1), pad=(1, 0),
                        out=slot("branch3x3dbl_3b", 384))
        bp = self.pool(f"{name}/branch_pool/avg_pool", "AVG_POOL", x, 3, 1, 1)
        bp = self.conv(f"{name}/branch_pool", bp, 192, 1, out=slot("branch_pool", 192))
        return _Act(buf, b1.deps + b3a.deps + b3b.deps + bda.deps + bdb.deps + bp.deps)

    def head(self, x):
        n, h, w, c = x.tensor.shape
        pooled = self.empty((n, 1, 1, c))
        e = self.node(self.cmd("AVG_POOL", size=(h, w), stride=(h, w), padding=0),
                      [x.tensor], [pooled], "avgpool", x.deps)
        flat = pooled.view((n, c))
        fc_w = self.random((NUM_CLASSES, c), math.sqrt(1.0 / c))
        fc_b = self.random((NUM_CLASSES,), 0.05)
        self.params += NUM_CLASSES * c + NUM_CLASSES
        self.macs += n * NUM_CLASSES * c
        logits = self.empty((n, NUM_CLASSES))
        fc = self.node(self.cmd("GEMM", transpose_b=True), [flat, fc_w, fc_b], [logits],
                       "fc", [e])
        probs = self.empty((n, NUM_CLASSES))
        self.node(self.cmd("SOFTMAX"), [logits], [probs], "softmax", [fc])
        return logits, probs


def build_inception_v3_model(graph=None, size=299, batch=1, seed=0, dtype="float32",
                             backend=None, freeze=True):
    """Build the forward graph and return an :class:`InceptionV3` record.

    ``graph``: an empty (or not) :class:`nnc.Graph` to add the nodes to; a new one by default.
    ``size``: input height and width, at least 75. ``backend``: pin every node to this backend
    (e.g. ``"CPU_REF"``); by default each node gets its command's default backend.
    ``freeze``: the weights are constant (made in frozen memory, read-only: see
    ``nnc.Tensor.freeze``); ``freeze=False`` leaves them writable. The input tensor is filled
    with standard-normal numbers drawn after the weights.
    """
    size, batch = int(size), int(batch)
    if size < MIN_SIZE:
        raise ValueError(f"Inception-V3 needs an input of at least {MIN_SIZE}x{MIN_SIZE}, "
                         f"got {size}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    g = Graph() if graph is None else graph
    b = _Builder(g, batch, seed, dtype, backend, freeze)
    x_t = b.empty((batch, size, size, 3))
    x = _Act(x_t, [])
    x = b.conv("Conv2d_1a_3x3", x, 32, 3, stride=2)
    x = b.conv("Conv2d_2a_3x3", x, 32, 3)
    x = b.conv("Conv2d_2b_3x3", x, 64, 3, pad=1)
    x = b.pool("MaxPool_3a_3x3", "MAX_POOL", x, 3, 2)
    x = b.conv("Conv2d_3b_1x1", x, 80, 1)
    x = b.conv("Conv2d_4a_3x3", x, 192, 3)
    x = b.pool("MaxPool_5a_3x3", "MAX_POOL", x, 3, 2)
    x = b.inception_a("Mixed_5b", x, 32)
    x = b.inception_a("Mixed_5c", x, 64)
    x = b.inception_a("Mixed_5d", x, 64)
    x = b.inception_b("Mixed_6a", x)
    x = b.inception_c("Mixed_6b", x, 128)
    x = b.inception_c("Mixed_6c", x, 160)
    x = b.inception_c("Mixed_6d", x, 160)
    x = b.inception_c("Mixed_6e", x, 192)
    x = b.inception_d("Mixed_7a", x)
    x = b.inception_e("Mixed_7b", x)
    x = b.inception_e("Mixed_7c", x)
    logits, probs = b.head(x)
    x_t.numpy()[...] = b.rng.standard_normal(x_t.shape, dtype=np.float32)
    return InceptionV3(graph=g, input=x_t, output=probs, logits=logits, size=size, batch=batch,
                       dtype=str(b.dtype), backend=backend, params=b.params, macs=b.macs,
                       concats=b.concats)


def build_inception_v3(graph=None, size=299, batch=1, seed=0, dtype="float32", backend=None,
                       freeze=True):
    """Build Inception-V3's forward graph; returns ``(graph, input_tensor, output_tensor)``.

    See :func:`build_inception_v3_model` for the arguments and for the other tensors.
    """
    m = build_inception_v3_model(graph, size, batch, seed, dtype, backend, freeze)
    return m.graph, m.input, m.output


def reference_forward(x=None, size=299, batch=1, seed=0, dtype="float32"):
    """Run the network with every node pinned to ``CPU_REF``; returns ``(probs, logits)`` copies.

    ``x``: the input ``[batch, size, size, 3]`` (default: the seeded random input that
    :func:`build_inception_v3` puts in its input tensor). Weights come from ``seed``, so the
    result is what a default-backend graph built with the same seed must reproduce.
    """
    m = build_inception_v3_model(size=size, batch=batch, seed=seed, dtype=dtype,
                                 backend="CPU_REF")
    if x is not None:
        m.input.numpy()[...] = x
    m.graph.run()
    return m.output.numpy().copy(), m.logits.numpy().copy()
