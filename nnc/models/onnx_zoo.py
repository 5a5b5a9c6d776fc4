"""torchvision's ResNet-50, Inception-V3 and MobileNet-V2 as ONNX models, with random weights.

Each builder writes the graph ``torch.onnx.export`` emits for the torchvision model in eval mode
at batch 1, opset 17 (Conv with explicit pads, BatchNormalization, Relu, Clip(0, 6) with min/max
inputs, Add, MaxPool, AveragePool, GlobalAveragePool, Flatten, Gemm with transB=1, Concat; no
Dropout), built with ``onnx.helper`` so neither torch nor a download is needed. Inception-V3 is
``aux_logits=False, transform_input=False``.

Weights are drawn from ``np.random.default_rng(seed)`` in a fixed order: convolutions He-scaled
(std = sqrt(2 / fan_in)) so activations keep their magnitude through 50 layers, batch norm with a
random positive variance and non-trivial mean, scale and shift. ``fold_bn=False`` (the default)
keeps every BatchNormalization node (convolutions have no bias, as in torchvision);
``fold_bn=True`` folds them into the convolutions' weights and biases at build time, as the
exporter's constant folding does. Needs the ``onnx`` package (``pip install "nnc-graph[onnx]"``).

    model = resnet50()                  # an onnx.ModelProto, input "input" [1, 3, 224, 224]
    n = trainable_parameters(model)     # 25_557_032, torchvision's count
"""

from __future__ import annotations

import math

import numpy as np

OPSET = 17


def _onnx():
    from nnc.onnx import _import_onnx

    return _import_onnx()


class _Net:
    """Accumulates nodes and initializers; names follow torchvision's module paths."""

    def __init__(self, seed, fold_bn):
        self.onnx = _onnx()
        self.rng = np.random.default_rng(seed)
        self.fold_bn = fold_bn
        self.nodes = []
        self.inits = []
        self.n = 0

    def _name(self, base):
        self.n += 1
        return f"/{base}_{self.n}"

    def init(self, name, array):
        self.inits.append(self.onnx.numpy_helper.from_array(np.array(array, order="C"), name))
        return name

    def node(self, op, inputs, name, **attrs):
        out = f"{name}_output_0"
        self.nodes.append(self.onnx.helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def conv_bn(self, name, x, cin, cout, k, stride=1, pad=0, groups=1, eps=1e-5, act="relu",
                gamma_range=(0.5, 1.5)):
        """Conv (no bias) + BatchNormalization (+ Relu or Clip(0, 6)); returns the output name."""
        kh, kw = (k, k) if isinstance(k, int) else k
        ph, pw = (pad, pad) if isinstance(pad, int) else pad
        sh, sw = (stride, stride) if isinstance(stride, int) else stride
        fan_in = cin // groups * kh * kw
        w = (self.rng.standard_normal((cout, cin // groups, kh, kw))
             * math.sqrt(2.0 / fan_in)).astype(np.float32)
        gamma = self.rng.uniform(*gamma_range, cout).astype(np.float32)
        beta = self.rng.normal(0.0, 0.1, cout).astype(np.float32)
        mean = self.rng.normal(0.0, 0.1, cout).astype(np.float32)
        var = self.rng.uniform(0.5, 1.5, cout).astype(np.float32)
        attrs = dict(dilations=[1, 1], group=groups, kernel_shape=[kh, kw],
                     pads=[ph, pw, ph, pw], strides=[sh, sw])
        if self.fold_bn:
            s = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
            wf = (w * s[:, None, None, None]).astype(np.float32)
            bf = (beta - mean * s).astype(np.float32)
            y = self.node("Conv", [x, self.init(f"{name}.weight", wf),
                                   self.init(f"{name}.bias", bf)], f"/{name}/Conv", **attrs)
        else:
            y = self.node("Conv", [x, self.init(f"{name}.weight", w)], f"/{name}/Conv", **attrs)
            y = self.node("BatchNormalization",
                          [y, self.init(f"{name}.bn.weight", gamma),
                           self.init(f"{name}.bn.bias", beta),
                           self.init(f"{name}.bn.running_mean", mean),
                           self.init(f"{name}.bn.running_var", var)],
                          f"/{name}/BatchNormalization", epsilon=eps, momentum=0.9)
        if act == "relu":
            y = self.node("Relu", [y], f"/{name}/Relu")
        elif act == "relu6":
            y = self.clip6(y, f"/{name}/Clip")
        return y

    def clip6(self, x, name):
        lo = self.init(f"{name}.min", np.array(0.0, np.float32))
        hi = self.init(f"{name}.max", np.array(6.0, np.float32))
        return self.node("Clip", [x, lo, hi], name)

    def head(self, x, cin, classes=1000):
        x = self.node("GlobalAveragePool", [x], "/avgpool/GlobalAveragePool")
        x = self.node("Flatten", [x], "/Flatten", axis=1)
        bound = 1.0 / math.sqrt(cin)
        w = self.rng.uniform(-bound, bound, (classes, cin)).astype(np.float32)
        b = self.rng.uniform(-bound, bound, classes).astype(np.float32)
        return self.node("Gemm", [x, self.init("fc.weight", w), self.init("fc.bias", b)],
                         "/fc/Gemm", alpha=1.0, beta=1.0, transB=1)

    def model(self, name, x_name, size, y):
        h = self.onnx.helper
        tp = self.onnx.TensorProto
        self.nodes[-1].output[0] = "output"
        graph = h.make_graph(
            self.nodes, name, [h.make_tensor_value_info(x_name, tp.FLOAT, [1, 3, size, size])],
            [h.make_tensor_value_info("output", tp.FLOAT, [1, 1000])], self.inits)
        model = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)],
                             producer_name="nnc.models.onnx_zoo")
        model.ir_version = 8
        return model


def resnet50(seed=0, fold_bn=False, size=224):
    """torchvision.models.resnet50() (v1.5: stride in the 3x3 convolution)."""
    net = _Net(seed, fold_bn)
    x = net.conv_bn("conv1", "input", 3, 64, 7, 2, 3)
    x = net.node("MaxPool", [x], "/maxpool/MaxPool", ceil_mode=0, dilations=[1, 1],
                 kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
    cin = 64
    for li, (blocks, width, stride) in enumerate(((3, 64, 1), (4, 128, 2), (6, 256, 2),
                                                  (3, 512, 2)), start=1):
        for bi in range(blocks):
            s = stride if bi == 0 else 1
            p = f"layer{li}.{bi}"
            y = net.conv_bn(f"{p}.conv1", x, cin, width, 1)
            y = net.conv_bn(f"{p}.conv2", y, width, width, 3, s, 1)
            # A small scale on the residual branch's last BN keeps the sum's variance from
            # doubling in each of the 16 blocks (torchvision's zero_init_residual, softened).
            y = net.conv_bn(f"{p}.conv3", y, width, width * 4, 1, act=None,
                            gamma_range=(0.1, 0.4))
            if bi == 0:
                x = net.conv_bn(f"{p}.downsample", x, cin, width * 4, 1, s, act=None)
            y = net.node("Add", [y, x], f"/{p}/Add")
            x = net.node("Relu", [y], f"/{p}/Relu")
            cin = width * 4
    return net.model("resnet50", "input", size, net.head(x, 2048))


def mobilenet_v2(seed=0, fold_bn=False, size=224):
    """torchvision.models.mobilenet_v2() (width 1.0)."""
    net = _Net(seed, fold_bn)
    x = net.conv_bn("features.0", "input", 3, 32, 3, 2, 1, act="relu6")
    cin, idx = 32, 1
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            p = f"features.{idx}.conv"
            hidden = cin * t
            y = x
            if t != 1:
                y = net.conv_bn(f"{p}.0", y, cin, hidden, 1, act="relu6")
            y = net.conv_bn(f"{p}.1", y, hidden, hidden, 3, stride, 1, groups=hidden,
                            act="relu6")
            y = net.conv_bn(f"{p}.2", y, hidden, c, 1, act=None)
            x = net.node("Add", [x, y], f"/features.{idx}/Add") if stride == 1 and cin == c else y
            cin, idx = c, idx + 1
    x = net.conv_bn(f"features.{idx}", x, cin, 1280, 1, act="relu6")
    return net.model("mobilenet_v2", "input", size, net.head(x, 1280))


def inception_v3(seed=0, fold_bn=False, size=299):
    """torchvision.models.inception_v3(aux_logits=False, transform_input=False)."""
    net = _Net(seed, fold_bn)

    def conv(name, x, cin, cout, k, stride=1, pad=0):
        return net.conv_bn(name, x, cin, cout, k, stride, pad, eps=1e-3)

    def avg3(name, x):
        return net.node("AveragePool", [x], f"/{name}/AveragePool", ceil_mode=0,
                        count_include_pad=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                        strides=[1, 1])

    def max3(name, x):
        return net.node("MaxPool", [x], f"/{name}/MaxPool", ceil_mode=0, dilations=[1, 1],
                        kernel_shape=[3, 3], pads=[0, 0, 0, 0], strides=[2, 2])

    def cat(name, xs):
        return net.node("Concat", xs, f"/{name}/Concat", axis=1)

    def block_a(p, x, cin, pf):
        b1 = conv(f"{p}.branch1x1", x, cin, 64, 1)
        b5 = conv(f"{p}.branch5x5_1", x, cin, 48, 1)
        b5 = conv(f"{p}.branch5x5_2", b5, 48, 64, 5, pad=2)
        bd = conv(f"{p}.branch3x3dbl_1", x, cin, 64, 1)
        bd = conv(f"{p}.branch3x3dbl_2", bd, 64, 96, 3, pad=1)
        bd = conv(f"{p}.branch3x3dbl_3", bd, 96, 96, 3, pad=1)
        bp = conv(f"{p}.branch_pool", avg3(p, x), cin, pf, 1)
        return cat(p, [b1, b5, bd, bp]), 224 + pf

    def block_b(p, x, cin):
        b3 = conv(f"{p}.branch3x3", x, cin, 384, 3, 2)
        bd = conv(f"{p}.branch3x3dbl_1", x, cin, 64, 1)
        bd = conv(f"{p}.branch3x3dbl_2", bd, 64, 96, 3, pad=1)
        bd = conv(f"{p}.branch3x3dbl_3", bd, 96, 96, 3, 2)
        return cat(p, [b3, bd, max3(p, x)]), 480 + cin

    def block_c(p, x, c7):
        b1 = conv(f"{p}.branch1x1", x, 768, 192, 1)
        b7 = conv(f"{p}.branch7x7_1", x, 768, c7, 1)
        b7 = conv(f"{p}.branch7x7_2", b7, c7, c7, (1, 7), pad=(0, 3))
        b7 = conv(f"{p}.branch7x7_3", b7, c7, 192, (7, 1), pad=(3, 0))
        bd = conv(f"{p}.branch7x7dbl_1", x, 768, c7, 1)
        bd = conv(f"{p}.branch7x7dbl_2", bd, c7, c7, (7, 1), pad=(3, 0))
        bd = conv(f"{p}.branch7x7dbl_3", bd, c7, c7, (1, 7), pad=(0, 3))
        bd = conv(f"{p}.branch7x7dbl_4", bd, c7, c7, (7, 1), pad=(3, 0))
        bd = conv(f"{p}.branch7x7dbl_5", bd, c7, 192, (1, 7), pad=(0, 3))
        bp = conv(f"{p}.branch_pool", avg3(p, x), 768, 192, 1)
        return cat(p, [b1, b7, bd, bp]), 768

    def block_d(p, x, cin):
        b3 = conv(f"{p}.branch3x3_1", x, cin, 192, 1)
        b3 = conv(f"{p}.branch3x3_2", b3, 192, 320, 3, 2)
        b7 = conv(f"{p}.branch7x7x3_1", x, cin, 192, 1)
        b7 = conv(f"{p}.branch7x7x3_2", b7, 192, 192, (1, 7), pad=(0, 3))
        b7 = conv(f"{p}.branch7x7x3_3", b7, 192, 192, (7, 1), pad=(3, 0))
        b7 = conv(f"{p}.branch7x7x3_4", b7, 192, 192, 3, 2)
        return cat(p, [b3, b7, max3(p, x)]), 512 + cin

    def block_e(p, x, cin):
        b1 = conv(f"{p}.branch1x1", x, cin, 320, 1)
        b3 = conv(f"{p}.branch3x3_1", x, cin, 384, 1)
        b3 = cat(f"{p}/branch3x3", [conv(f"{p}.branch3x3_2a", b3, 384, 384, (1, 3), pad=(0, 1)),
                                    conv(f"{p}.branch3x3_2b", b3, 384, 384, (3, 1), pad=(1, 0))])
        bd = conv(f"{p}.branch3x3dbl_1", x, cin, 448, 1)
        bd = conv(f"{p}.branch3x3dbl_2", bd, 448, 384, 3, pad=1)
        bd = cat(f"{p}/branch3x3dbl",
                 [conv(f"{p}.branch3x3dbl_3a", bd, 384, 384, (1, 3), pad=(0, 1)),
                  conv(f"{p}.branch3x3dbl_3b", bd, 384, 384, (3, 1), pad=(1, 0))])
        bp = conv(f"{p}.branch_pool", avg3(p, x), cin, 192, 1)
        return cat(p, [b1, b3, bd, bp]), 2048

    x = conv("Conv2d_1a_3x3", "x", 3, 32, 3, 2)
    x = conv("Conv2d_2a_3x3", x, 32, 32, 3)
    x = conv("Conv2d_2b_3x3", x, 32, 64, 3, pad=1)
    x = max3("maxpool1", x)
    x = conv("Conv2d_3b_1x1", x, 64, 80, 1)
    x = conv("Conv2d_4a_3x3", x, 80, 192, 3)
    x = max3("maxpool2", x)
    x, c = block_a("Mixed_5b", x, 192, 32)
    x, c = block_a("Mixed_5c", x, c, 64)
    x, c = block_a("Mixed_5d", x, c, 64)
    x, c = block_b("Mixed_6a", x, c)
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        x, c = block_c(name, x, c7)
    x, c = block_d("Mixed_7a", x, c)
    x, c = block_e("Mixed_7b", x, c)
    x, c = block_e("Mixed_7c", x, c)
    return net.model("inception_v3", "x", size, net.head(x, 2048))


def trainable_parameters(model):
    """torchvision's parameter count: every initializer except batch-norm running statistics
    (buffers in torch) and the Clip bounds (constants the exporter adds)."""
    skip = (".running_mean", ".running_var", ".min", ".max")
    return sum(int(np.prod(t.dims)) for t in model.graph.initializer
               if not t.name.endswith(skip))
