"""PyTorch eager on the same ONNX model, for benchmarks/streams.py (optional: torch is not in
the ``bench`` extra; ``pip install torch`` to add this column).

There is no ONNX importer in PyTorch itself, so this walks the model's nodes once and turns
each into a call of ``torch.nn.functional`` with the model's own weights; a run is then a
Python loop of eager calls under ``torch.inference_mode``, which is what a user running the
network in PyTorch eager mode gets. Activations and convolution weights are kept in
``channels_last`` (NHWC in memory), PyTorch's faster CPU layout for convolutions.

On a GPU (``device="cuda"``, for benchmarks/gpu.py) the weights and inputs are copied to the
device once; a call runs the same eager loop there and waits for the device
(``torch.cuda.synchronize``) but leaves the outputs on the device: ``fetch_outputs()`` copies
them to the host. ``step()`` is the loop alone, which benchmarks/_gpu_peers.py captures into a
CUDA graph; ``body()`` is that loop without ``torch.inference_mode``, which it hands to
``torch.compile``, and ``static`` lists every tensor the loop reads that is not computed by it
(weights as prepared, inputs), which torch's CUDA-graph modes must be told never move. On the
CPU a call also converts the outputs to NumPy, as it always did. ``dtype="float16"`` runs the
network in half precision (as ``model.half()`` would): every floating-point constant and input
is converted once, on the way to the device; integer constants (Reshape's shape) stay as they
are.

Only the operators nnc's exports and ``nnc/models/onnx_zoo.py`` use are mapped; any other
raises ``NotImplementedError`` naming it, and the benchmark reports the column as unsupported.
"""


def torch_version():
    """torch's version string, or None when ``import torch`` fails (not installed, or installed
    broken: a missing shared library raises OSError, not ImportError)."""
    try:
        import torch
    except Exception:  # noqa: BLE001 - any failure to import means the column is left out
        return None
    return str(torch.__version__)


def _attrs(node):
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


class TorchEager:
    """``model`` (an ONNX ModelProto) run op by op in PyTorch eager mode on ``device`` ("cpu",
    "cuda" or "cuda:N"), with ``threads`` intra-op threads (None: leave torch's setting), in
    the model's own dtypes (``dtype`` None) or in float16 (``dtype="float16"``).
    ``feeds`` maps input names to NumPy arrays (copied once, to the device). On the CPU
    ``outputs`` holds the last run's outputs as NumPy arrays; ``fetch_outputs()`` returns them
    on any device."""

    def __init__(self, model, feeds, threads, device="cpu", dtype=None):
        import numpy as np
        import onnx.numpy_helper
        import torch

        self.torch = torch
        self.device = torch.device(device)
        if threads is not None:
            torch.set_num_threads(threads)
        self.threads = threads
        if dtype not in (None, "float16"):
            raise ValueError(f"TorchEager: dtype must be None or 'float16', not {dtype!r}")
        self.dtype = dtype
        floats = torch.float16 if dtype == "float16" else None

        def place(a):
            t = torch.from_numpy(np.ascontiguousarray(a))
            return t.to(self.device, floats) if floats and t.is_floating_point() else \
                t.to(self.device)

        self.consts = {t.name: place(np.array(onnx.numpy_helper.to_array(t)))
                       for t in model.graph.initializer}
        self.inputs = {k: place(v) for k, v in feeds.items()}
        # Every tensor body() reads and does not compute: the constants, the copies _compile
        # prepares from them (channels_last weights, transposed Gemm weights) and the inputs.
        # Each is allocated once and never written, so a CUDA graph may use it in place.
        self.static = [*self.consts.values(), *self.inputs.values()]
        self.output_names = [o.name for o in model.graph.output]
        self.steps = [self._compile(n) for n in model.graph.node]
        self.outputs = []
        self.device_outputs = []

    def _compile(self, node):
        """(function of the value table, output names) for one ONNX node."""
        torch = self.torch
        F = torch.nn.functional
        op, a, ins = node.op_type, _attrs(node), list(node.input)
        if op == "Conv":
            w = self._prepared(self.consts[ins[1]].contiguous(memory_format=torch.channels_last))
            b = self.consts[ins[2]] if len(ins) > 2 and ins[2] else None
            t, left, bottom, right = a.get("pads", [0, 0, 0, 0])
            stride = tuple(a.get("strides", [1, 1]))
            dil = tuple(a.get("dilations", [1, 1]))
            groups = a.get("group", 1)
            if (t, left) == (bottom, right):
                def fn(v):
                    return F.conv2d(v[ins[0]], w, b, stride, (t, left), dil, groups)
            else:
                def fn(v):
                    x = F.pad(v[ins[0]], (left, right, t, bottom))
                    return F.conv2d(x, w, b, stride, 0, dil, groups)
        elif op == "Identity":
            def fn(v):
                return v[ins[0]]
        elif op == "Relu":
            def fn(v):
                return F.relu(v[ins[0]])
        elif op == "Clip":
            lo = float(self.consts[ins[1]]) if len(ins) > 1 and ins[1] else a.get("min")
            hi = float(self.consts[ins[2]]) if len(ins) > 2 and ins[2] else a.get("max")

            def fn(v):
                return torch.clamp(v[ins[0]], lo, hi)
        elif op in ("MaxPool", "AveragePool"):
            k = tuple(a["kernel_shape"])
            stride = tuple(a.get("strides", [1, 1]))
            t, left, bottom, right = a.get("pads", [0, 0, 0, 0])
            if (t, left) != (bottom, right) or t > k[0] // 2 or left > k[1] // 2:
                raise NotImplementedError(f"{op} with pads {a.get('pads')}")
            if op == "MaxPool":
                def fn(v):
                    return F.max_pool2d(v[ins[0]], k, stride, (t, left))
            else:
                include = bool(a.get("count_include_pad", 0))

                def fn(v):
                    return F.avg_pool2d(v[ins[0]], k, stride, (t, left),
                                        count_include_pad=include)
        elif op == "GlobalAveragePool":
            def fn(v):
                return F.adaptive_avg_pool2d(v[ins[0]], 1)
        elif op == "ReduceMean":
            axes = a.get("axes")
            if axes is None and len(ins) > 1:
                axes = [int(i) for i in self.consts[ins[1]].tolist()]
            keep = bool(a.get("keepdims", 1))

            def fn(v):
                return torch.mean(v[ins[0]], dim=tuple(axes), keepdim=keep)
        elif op == "Concat":
            axis = a["axis"]

            def fn(v):
                return torch.cat([v[i] for i in ins], dim=axis)
        elif op == "Flatten":
            axis = a.get("axis", 1)

            def fn(v):
                return torch.flatten(v[ins[0]], axis)
        elif op == "Gemm":
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
                raise NotImplementedError("Gemm with transA, alpha or beta")
            w = self.consts[ins[1]]
            w = w if a.get("transB", 0) else self._prepared(w.t().contiguous())
            b = self.consts[ins[2]] if len(ins) > 2 and ins[2] else None

            def fn(v):
                return F.linear(v[ins[0]], w, b)
        elif op == "Softmax":
            axis = a.get("axis", -1)

            def fn(v):
                return torch.softmax(v[ins[0]], dim=axis)
        elif op == "Add":
            def fn(v):
                return torch.add(v[ins[0]], v[ins[1]])
        elif op == "BatchNormalization":
            scale, bias, mean, var = (self.consts[i] for i in ins[1:5])
            eps = a.get("epsilon", 1e-5)

            def fn(v):
                return F.batch_norm(v[ins[0]], mean, var, scale, bias, False, 0.0, eps)
        elif op == "Transpose":
            perm = tuple(a["perm"])

            def fn(v):
                return v[ins[0]].permute(perm)
        elif op == "Reshape":
            shape = [int(i) for i in self.consts[ins[1]].tolist()]

            def fn(v):
                return torch.reshape(v[ins[0]], shape)
        else:
            raise NotImplementedError(f"ONNX operator {op} (node {node.name!r})")
        return fn, list(node.output)

    def _prepared(self, t):
        """``t``, a tensor _compile made from a constant, listed in ``static``."""
        if not any(t is s for s in self.static):
            self.static.append(t)
        return t

    def body(self):
        """One run's calls, without a grad mode of their own (the caller picks it: step()
        uses inference_mode; torch.compile traces this under no_grad); returns the output
        tensors."""
        torch = self.torch
        values = dict(self.consts)
        for name, x in self.inputs.items():
            values[name] = (x.contiguous(memory_format=torch.channels_last)
                            if x.dim() == 4 else x)
        for fn, outs in self.steps:
            values[outs[0]] = fn(values)
        return [values[n] for n in self.output_names]

    def step(self):
        """One run's eager calls, enqueued; returns the output tensors (on the device, not
        waited for)."""
        with self.torch.inference_mode():
            return self.body()

    def __call__(self):
        out = self.step()
        if self.device.type == "cpu":
            self.outputs = [t.contiguous().numpy() for t in out]
        else:
            self.torch.cuda.synchronize(self.device)
            self.device_outputs = out

    def fetch_outputs(self):
        """The last run's outputs as NumPy arrays (copied from the device off the CPU)."""
        if self.device.type != "cpu":
            self.outputs = [t.contiguous().cpu().numpy() for t in self.device_outputs]
        return self.outputs

    def describe(self):
        half = ", float16" if self.dtype == "float16" else ""
        if self.device.type == "cpu":
            threads = "torch's default" if self.threads is None else self.threads
            return f"PyTorch {torch_version()} eager{half}, channels_last, {threads} thread(s)"
        bench = "on" if self.torch.backends.cudnn.benchmark else "off"
        return (f"PyTorch {torch_version()} eager on {self.device}{half}, channels_last, "
                f"inference_mode, cudnn.benchmark {bench}")
