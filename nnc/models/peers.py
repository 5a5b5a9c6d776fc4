"""The same network in onnxruntime, for side-by-side timings with nnc.

``python -m nnc demo --streams`` and ``benchmarks/streams.py`` compare nnc with what a user
would run instead. To make the comparison about the runtimes and nothing else:

- the network is the same file and the same weights (``nnc.onnx.save`` of nnc's own graph, or
  the ONNX model nnc loaded);
- the session gets its thread counts explicitly (intra-op and inter-op), never its defaults,
  which depend on the machine;
- inputs and outputs are bound once to preallocated NumPy arrays (IOBinding), so a timed call
  is the inference alone: no feed dictionary, no output allocation, no copy.

onnxruntime is optional (the ``bench`` extra); ``ort_version()`` says whether it is importable.
"""

from __future__ import annotations

import numpy as np


def ort_version():
    """onnxruntime's version string, or None when it cannot be imported."""
    try:
        import onnxruntime
    except ImportError:
        return None
    return str(onnxruntime.__version__)


class OrtRun:
    """One onnxruntime CPU session bound to preallocated inputs and outputs.

    ``model`` is an ONNX ``ModelProto`` or its serialized bytes; ``feeds`` maps each input
    name to the array to bind (kept by reference: write new data into it between calls).
    ``intra_op`` and ``inter_op`` are the session's thread counts; ``parallel`` selects
    ``ORT_PARALLEL`` execution mode (branches on the inter-op pool) instead of sequential;
    ``optimize`` False turns graph optimisations off (``ORT_DISABLE_ALL``; default
    ``ORT_ENABLE_ALL``). Calling the object runs one inference into ``outputs``.
    """

    def __init__(self, model, feeds, *, intra_op, inter_op=1, parallel=False, optimize=True):
        import onnxruntime as ort

        for name, n in (("intra_op", intra_op), ("inter_op", inter_op)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"OrtRun: {name} must be an int >= 1, not {n!r}")
        data = model if isinstance(model, bytes) else model.SerializeToString()
        so = ort.SessionOptions()
        so.intra_op_num_threads = intra_op
        so.inter_op_num_threads = inter_op
        so.execution_mode = (ort.ExecutionMode.ORT_PARALLEL if parallel
                             else ort.ExecutionMode.ORT_SEQUENTIAL)
        so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                       else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        self.session = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        names = [i.name for i in self.session.get_inputs()]
        if sorted(names) != sorted(feeds):
            raise ValueError(f"OrtRun: the model's inputs are {names}, feeds give {list(feeds)}")
        self.feeds = {k: np.ascontiguousarray(v) for k, v in feeds.items()}
        # One plain run learns the output shapes and dtypes; then every output gets its own
        # array, bound by pointer, which each later call overwrites.
        first = self.session.run(None, self.feeds)
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.outputs = [np.empty_like(a) for a in first]
        self.binding = self.session.io_binding()
        for name, a in self.feeds.items():
            self.binding.bind_cpu_input(name, a)
        for name, a in zip(self.output_names, self.outputs):
            self.binding.bind_output(name, "cpu", 0, a.dtype, list(a.shape), a.ctypes.data)
        self.version = str(ort.__version__)
        self.intra_op = intra_op
        self.inter_op = inter_op
        self.parallel = parallel
        self.optimize = optimize

    def __call__(self):
        self.session.run_with_iobinding(self.binding)

    def describe(self):
        """A short description of the configuration, for reports."""
        mode = (f"parallel mode, inter-op {self.inter_op}" if self.parallel
                else f"sequential, intra-op {self.intra_op}")
        level = "ENABLE_ALL" if self.optimize else "DISABLE_ALL"
        return f"onnxruntime {level}, {mode}"
