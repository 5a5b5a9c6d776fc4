"""CUDA-graph capture of a graph's run on a GPU stream, and copying a CPU graph to a GPU.

NNC has no counterpart; Nimble (ATC '21) does this. ``g.run(stream=s)`` on a GPU
``nnc.Stream`` goes through the same runner as on a CPU stream (nnc/run/run.pyx; the GPU
stream launches each node as it is enqueued, nnc/cuda/gpu_stream.pyx). :func:`capture` records
one such run into a :class:`~nnc.cuda.driver.CudaGraph`, so a replay costs one cuGraphLaunch
however many nodes the graph has.

While and case..of nodes whose expression is an :class:`nnc.Compare` are captured as CUDA
conditional nodes (CUDA 12.4+ for WHILE and IF, 12.8+ for SWITCH), the way PyTorch records its
own: during the capture, ``cuStreamGetCaptureInfo`` gives the graph being captured and the
node's dependencies; ``cuGraphConditionalHandleCreate`` makes the node's handle, a one-thread
condition kernel (:data:`COND_SOURCE`, compiled by NVRTC) sets it from the loop count or a
device scalar, ``cuGraphAddNode`` adds the conditional node after it and
``cuStreamUpdateCaptureDependencies`` makes it what the stream's next work depends on; the body
(each branch) is captured into the node's body graph with ``cuStreamBeginCaptureToGraph`` on a
stream of its own, its last work the condition kernel again (a WHILE re-evaluates after each
iteration). nnc.run.flow enqueues the bodies (``flow_capture_run``).
"""

import numpy as np

from nnc.base.core import GraphError, error_repr
from nnc.cuda.driver import CudaGraph

__all__ = ["COND_SOURCE", "CapturedGraph", "capture", "to_gpu"]

# What the condition kernel does with the loop count before (or after) it evaluates: codes of
# its ``step`` parameter. A loop whose head launches nothing (LOOP_HEAD_EMPTY in flow) is
# COUNT_RESET_EVAL before its WHILE node and COUNT_STEP_EVAL after each tail; one whose tail
# launches nothing (LOOP_TAIL_EMPTY) is COUNT_RESET_ENTER before and EVAL_COUNT_STEP after each
# head. Either way the count ends where nnc's host loop ends it (while_count), and every replay
# starts it from 0.
EVAL = 0                    # case..of: no count
COUNT_RESET_EVAL = 1        # count = 0, then evaluate
COUNT_STEP_EVAL = 2         # count += 1, then evaluate
COUNT_RESET_ENTER = 3       # count = 0, and enter the loop (its head evaluates)
EVAL_COUNT_STEP = 4         # evaluate; if true, count += 1

COND_KERNEL = "nnc_cond_set"
# The condition kernel, one thread. cudaGraphSetConditional is a CUDA runtime builtin that the
# driver resolves when it loads the module: declared here, NVRTC needs no runtime headers.
COND_SOURCE = r"""
typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);

template <typename T> __device__ unsigned nnc_compare(T a, T b, int op) {
    switch (op) {
    case 0: return a < b;
    case 1: return a <= b;
    case 2: return a > b;
    case 3: return a >= b;
    case 4: return a == b;
    default: return a != b;
    }
}

// x: the compared element (its dtype: 0 float32, 1 float64, 2 int32, 3 int64), or NULL for
// the count. exact: compare as int64 with vi, else as double with vf (nnc.Compare.holds).
extern "C" __global__ void nnc_cond_set(cudaGraphConditionalHandle handle, long long* count,
                                        int step, const void* x, int dtype, int op, int exact,
                                        long long vi, double vf) {
    long long c = count ? *count : 0;
    if (step == 1 || step == 3) c = 0;
    else if (step == 2) c += 1;
    unsigned v = 1;
    if (step != 3) {
        long long xi = c;
        double xf = (double)c;
        if (x) {
            switch (dtype) {
            case 0: xf = (double)*(const float*)x; break;
            case 1: xf = *(const double*)x; break;
            case 2: xi = *(const int*)x; xf = (double)xi; break;
            default: xi = *(const long long*)x; xf = (double)xi; break;
            }
        }
        v = exact ? nnc_compare(xi, vi, op) : nnc_compare(xf, vf, op);
        if (step == 4 && v) c += 1;
    }
    if (count) *count = c;
    cudaGraphSetConditional(handle, v);
}
"""

_CONTROL = ("WHILE", "CASE_OF")


def _refuse_control(graph, what):
    for e in graph.execs:
        if e.cmd.name in _CONTROL:
            raise GraphError(f"{e!r} is a {e.cmd.name} node: {what}")


def _has_control(graph):
    return any(e.cmd.name in _CONTROL for e in graph.execs)


def _refuse_devices(graph, kind):
    """GraphError unless every GPU tensor of the graph's nodes is on GPU ``kind`` ("gpu:N").

    A multi-GPU schedule runs (docs/gpu.md, "Several GPUs"), but one CUDA graph is not made
    of it: a captured graph is instantiated and launched in one context, and whether stream
    capture may fork onto another device's stream through an event (with the condition
    kernels of loops) has not been checked on a machine with two GPUs. Loop bodies and
    branches are checked as the capture prepares their conditional nodes."""
    for e in graph.execs:
        for t in list(e.inputs) + list(e.outputs):
            where = "cpu" if t is None else getattr(t, "device", "cpu")
            if where != "cpu" and where != kind:
                raise GraphError(f"{graph!r} cannot be captured on {kind}: node {e!r} uses "
                                 f"{t!r} on {where}, and one CUDA graph captures the work of "
                                 "one GPU (capture one graph per GPU)")


def _cond_function(dev):
    """The condition kernel's CUfunction on ``dev``, compiled and loaded on first use (never
    while capturing: loading a module is refused there)."""
    from nnc.cuda import nvrtc
    from nnc.cuda.driver import check, driver

    f = dev._functions.get(COND_KERNEL)
    if f is not None:
        return f
    with dev._lock:
        module = dev._modules.get("cond.cu")
        if module is None:
            cubin = nvrtc.compile_cubin(COND_SOURCE, dev.arch, "cond.cu")
            dev.make_current()
            module = check(driver().cuModuleLoadData(cubin), "cuModuleLoadData")
            dev._modules["cond.cu"] = module
        f = check(driver().cuModuleGetFunction(module, COND_KERNEL.encode()),
                  f"cuModuleGetFunction({COND_KERNEL})")
        dev._functions[COND_KERNEL] = f
    return f


class _Node:
    """One conditional node being captured: its handle, what its condition kernel reads, and
    the body graphs (``bodies``: branch index, or 0 for a loop, -> CUgraph)."""

    def __init__(self, kind, cond, inputs, counter=None, form=None):
        self.kind, self.cond, self.inputs, self.counter, self.form = kind, cond, inputs, \
            counter, form
        self.handle = None
        self.params = None          # the CUgraphNodeParams: the driver owns phGraph_out's array
        self.bodies = {}
        self.indexes = []           # the case..of branch indexes captured, in body order
        self.side = None            # the CudaStream capturing a body now, or None


class _Conditionals:
    """The recorder nnc.run.flow calls while a run with control flow is captured (see the
    module docstring). Made, and its device state prepared, before the capture begins."""

    def __init__(self, dev):
        from nnc.cuda.driver import driver

        self.device = dev
        self.cu = driver()
        self.runtimes = {}          # control node (or (case..of, index)) -> its own _Runtime
        self.loops = {}             # WhileNode -> _Node
        self.cases = {}             # CaseOfNode -> _Node
        self.failure = None         # (where, exception): the first failure of the captured run

    # -- before the capture (flow_capture_prepare)

    def _operands(self, cond, inputs):
        for t in inputs:
            if t.device != f"gpu:{self.device.ordinal}":
                raise GraphError(f"{cond!r} reads {t!r}; the graph is captured on "
                                 f"gpu:{self.device.ordinal}")
        _cond_function(self.device)

    def prepare_while(self, w, form, cond, inputs):
        from nnc.cuda import memory

        self._operands(cond, inputs)
        _refuse_devices(w.body, f"gpu:{self.device.ordinal}")
        # The device count, -1 until a replay runs the loop (CapturedGraph.while_count).
        counter = memory.from_numpy(np.full(1, -1, np.int64), f"gpu:{self.device.ordinal}")
        self.loops[w] = _Node("while", cond, inputs, counter, form)

    def prepare_case(self, c, indexes, cond, inputs, branches):
        self._operands(cond, inputs)
        for branch in branches:
            _refuse_devices(branch, f"gpu:{self.device.ordinal}")
        node = self.cases[c] = _Node("case", cond, inputs)
        node.indexes = list(indexes)

    def fail(self, where, e):
        if self.failure is None:
            self.failure = (where, e)

    # -- during the capture

    def _capture_info(self, stream):
        """(graph, dependencies) of ``stream``'s ongoing capture. cuda-bindings 13 returns
        (status, id, graph, dependencies, edge data, count); 12.x has them in _v2 / _v3."""
        from nnc.cuda.driver import check

        for name in ("cuStreamGetCaptureInfo", "cuStreamGetCaptureInfo_v3",
                     "cuStreamGetCaptureInfo_v2"):
            fn = getattr(self.cu, name, None)
            if fn is None:
                continue
            info = check(fn(stream.handle), name)
            info = info if isinstance(info, tuple) else (info,)
            graph = next((v for v in info if type(v).__name__ == "CUgraph"), None)
            deps = next((v for v in info if isinstance(v, (list, tuple))), None)
            if graph is not None:
                deps = list(deps or [])
                if isinstance(info[-1], int):
                    deps = deps[:info[-1]]
                return graph, deps
        raise GraphError(f"{stream!r} is not capturing, or these cuda-bindings cannot say "
                         "into which graph")

    def _add(self, stream, node, kind, size, step):
        """Make node's handle, launch its condition kernel on ``stream`` and add the
        conditional node after it, as the stream's next dependency."""
        from nnc.cuda.driver import check

        cu, ctx = self.cu, self.device.context
        graph, _ = self._capture_info(stream)
        node.handle = check(cu.cuGraphConditionalHandleCreate(
            graph, ctx, 0, cu.CU_GRAPH_COND_ASSIGN_DEFAULT), "cuGraphConditionalHandleCreate")
        self._condition(stream, node, step)
        graph, deps = self._capture_info(stream)
        params = cu.CUgraphNodeParams()
        params.type = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        params.conditional.handle = node.handle
        params.conditional.type = getattr(cu.CUgraphConditionalNodeType,
                                          f"CU_GRAPH_COND_TYPE_{kind}")
        params.conditional.size = size
        params.conditional.ctx = ctx
        # CUDA 13's cuGraphAddNode takes edge data; 12.x's (renamed since) did not.
        try:
            r = cu.cuGraphAddNode(graph, deps, None, len(deps), params)
        except TypeError:
            r = cu.cuGraphAddNode(graph, deps, len(deps), params)
        added = check(r, "cuGraphAddNode")
        flag = cu.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES
        try:
            r = cu.cuStreamUpdateCaptureDependencies(stream.handle, [added], None, 1, flag)
        except TypeError:
            r = cu.cuStreamUpdateCaptureDependencies(stream.handle, [added], 1, flag)
        check(r, "cuStreamUpdateCaptureDependencies")
        node.params = params
        return list(params.conditional.phGraph_out)[:size]

    def _condition(self, stream, node, step):
        """Launch the condition kernel on ``stream``: set node's handle from its Compare."""
        from nnc.cuda.driver import launch
        from nnc.graph.compare import COMPARE_DTYPES, COMPARE_OPS

        cond = node.cond
        x = None if cond.lhs == "count" else node.inputs[cond.lhs]
        value = cond.value
        args = [np.uint64(int(node.handle)),
                np.uint64(0 if node.counter is None else node.counter.data_ptr),
                np.int32(step), np.uint64(0 if x is None else x.data_ptr),
                np.int32(0 if x is None else COMPARE_DTYPES.index(x.dtype.name)),
                np.int32(COMPARE_OPS.index(cond.op)), np.int32(cond.exact(node.inputs)),
                np.int64(value if isinstance(value, int) else 0), np.float64(value)]
        launch(_cond_function(self.device), (1,), (1,), args, stream)

    def _begin_body(self, node, body, side):
        from nnc.cuda.driver import check, cuda_stream

        cu = self.cu
        side = cuda_stream(side)
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        try:
            r = cu.cuStreamBeginCaptureToGraph(side.handle, body, None, None, 0, mode)
        except TypeError:
            r = cu.cuStreamBeginCaptureToGraph(side.handle, body, None, 0, mode)
        check(r, "cuStreamBeginCaptureToGraph")
        node.side = side

    def _end_body(self, node):
        from nnc.cuda.driver import check

        side, node.side = node.side, None
        check(self.cu.cuStreamEndCapture(side.handle), "cuStreamEndCapture")

    def abandon(self, node):
        """A body's enqueueing failed: end its capture (the failure ends the whole capture)."""
        if node.side is not None:
            side, node.side = node.side, None
            self.cu.cuStreamEndCapture(side.handle)

    def while_begin(self, w, p, side):
        from nnc.cuda.driver import cuda_stream
        from nnc.run.flow import LOOP_HEAD_EMPTY

        node = self.loops[w]
        first = COUNT_RESET_EVAL if node.form == LOOP_HEAD_EMPTY else COUNT_RESET_ENTER
        bodies = self._add(cuda_stream(p), node, "WHILE", 1, first)
        self._begin_body(node, bodies[0], side)
        return node

    def while_end(self, node):
        from nnc.run.flow import LOOP_HEAD_EMPTY

        self._condition(node.side,
                        node, COUNT_STEP_EVAL if node.form == LOOP_HEAD_EMPTY else EVAL_COUNT_STEP)
        self._end_body(node)

    def case_begin(self, c, p):
        from nnc.cuda.driver import cuda_stream

        node = self.cases[c]
        if node.indexes:
            # One reachable branch (offset -1: index 0 when the comparison holds): IF. Two
            # (offset, offset + 1): SWITCH on the comparison, body k running branch offset + k.
            kind = "IF" if len(node.indexes) == 1 else "SWITCH"
            bodies = self._add(cuda_stream(p), node, kind, len(node.indexes), EVAL)
            node.bodies = dict(zip(node.indexes, bodies))
        return node

    def branch_begin(self, node, i, side):
        self._begin_body(node, node.bodies[i], side)

    def branch_end(self, node):
        self._end_body(node)


class CapturedGraph(CudaGraph):
    """A CudaGraph captured from a graph's run (:func:`capture`): also what its captured while
    loops counted."""

    loops = None                    # _Conditionals of the capture, or None (no control flow)

    def while_count(self, body):
        """The count at which loop ``body`` (a while node's body in the captured graph) ended in
        the latest replay, as ``body.while_count`` after a host-driven run; -1 before any replay
        ran the loop. Read from device memory: wait for the replay's stream first. A replay
        does not change ``body.while_count``, which belongs to the host-driven runs."""
        for w, node in (self.loops.loops if self.loops is not None else {}).items():
            if w.body is body:
                return int(node.counter.numpy()[0])
        raise GraphError(f"{body!r} is not the body of a while node captured in this graph")


def capture(graph, stream=None, warmup=True):
    """Capture ``graph.run(stream=stream)`` into a CudaGraph; ``cg.replay(stream)`` reruns it
    on the same tensors (``stream``: a GPU nnc.Stream; None: a new ``nnc.Stream("gpu")``).

    Nothing runs during capture itself. With ``warmup`` (the default, as Nimble does) the
    graph first runs once, eagerly, so every kernel is compiled and loaded, every cuDNN plan
    is timed and every staging buffer exists before capture: none of that is stream work, and
    a capturing thread may not allocate. Kernel modules and each stream's library handles and
    workspace are the exceptions nnc makes mid-capture (driver.capture_relaxed): a loop's or
    branch's body is captured on streams of its own, which no warm-up used. The run's host
    bookkeeping (its finish, which moves failures to ``stream`` and marks the graph idle) runs
    once, at capture, not on every replay: a replay is device work only.

    While and case..of nodes (nested too) become CUDA conditional nodes when their expression
    is an :class:`nnc.Compare` of the loop count or of a one-element GPU tensor: one replay
    runs every iteration with no host in between (``cg.while_count(body)`` says where a loop
    ended). A Python callable as expression, carry-overs, multiviews, PHI outputs, or a loop
    whose head and tail both launch work raise GraphError naming the node and the reason
    (docs/control_flow.md), before anything is captured; so does a node with a tensor on
    another GPU than ``stream``'s (one CUDA graph captures one GPU's work).
    """
    from nnc.cuda.gpu_stream import device_half, set_capturing
    from nnc.run.flow import flow_capture_prepare, flow_capture_run
    from nnc.stream.stream import Stream

    s = stream if stream is not None else Stream("gpu")
    gpu = device_half(s)                # StreamError for a CPU stream
    _refuse_devices(graph, s.kind)
    loops = None
    if _has_control(graph):
        loops = _Conditionals(gpu.cuda.device)
        flow_capture_prepare(graph, loops)
    if warmup:
        graph.run(stream=s)
        s.wait()

    def run():
        set_capturing(True)
        try:
            if loops is None:
                graph.run(stream=s)
            else:
                flow_capture_run(graph, s, loops)
        finally:
            set_capturing(False)
        if loops is not None and loops.failure is not None:
            where, e = loops.failure
            raise GraphError(f"capturing {graph!r}: {where} failed: {error_repr(e)}") from e

    cg = CapturedGraph.capture(s, run)
    cg.source = graph               # keeps the graph (its tensors, streams, events) alive
    cg.loops = loops                # keeps the counters and the bodies' streams alive
    return cg


_FLOATS = ("float16", "float32", "float64")


def to_gpu(graph, device="gpu", dtype=None):
    """A copy of a CPU graph whose every tensor lives on ``device``: returns ``(new_graph,
    mapping)`` where mapping takes each CPU tensor's memory owner to its GPU copy.

    ``dtype`` ("float16", "float32" or "float64"): every floating-point tensor (weights,
    activations, inputs and outputs alike) is converted to it on the way (NumPy's rounding to
    nearest), so ``to_gpu(g, dtype="float16")`` makes a float16 copy of a float32 model for
    the GPU; other dtypes are copied as they are. None (the default) keeps every dtype.
    GraphError for any other dtype, and for memory the graph only reads (weights, inputs) that
    holds a finite value beyond the new dtype's range (float16: 65504).

    Each distinct memory owner (an ndarray, with every view of it) is copied once, and views
    stay views at the same offsets and strides, so zero-copy concat slices (Inception's) keep
    aliasing their buffers. Commands are rebuilt from name and parameters (backends are chosen
    again, for the GPU); edges, sources and destinations follow the original. Graphs with
    while or case..of nodes are refused.
    """
    from nnc.cmd.command import Cmd
    from nnc.cuda import memory
    from nnc.graph.graph import Graph

    if dtype is not None:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
        if name not in _FLOATS:
            raise GraphError(f"to_gpu converts floating-point tensors to one of {_FLOATS}, "
                             f"not {dtype!r}")
        dtype = np.dtype(name)
    owners = {}                     # id(owner ndarray) -> (owner, GPU tensor of it)
    # Memory some node writes: what it holds before a run (often garbage) does not matter.
    written = {id(t._owner_object) for e in graph.execs for t in e.outputs if t is not None}

    def converted(owner):
        if dtype is None or owner.dtype.kind != "f" or owner.dtype == dtype:
            return owner
        with np.errstate(over="ignore"):
            new = owner.astype(dtype)
        if id(owner) not in written and (np.isinf(new) & np.isfinite(owner)).any():
            # A weight or an input the graph only reads: inf would be a silently wrong answer.
            big = np.abs(owner[np.isinf(new) & np.isfinite(owner)]).max()
            raise GraphError(f"a {owner.dtype} tensor of shape {owner.shape} the graph reads "
                             f"holds {big:g}, beyond {dtype}'s largest finite value "
                             f"{np.finfo(dtype).max:g}")
        return new

    def convert(t):
        if t is None:
            return None
        owner = t._owner_object
        if not isinstance(owner, np.ndarray):
            raise GraphError(f"{t!r} is not host memory nnc can copy to a GPU")
        entry = owners.get(id(owner))
        if entry is None:
            entry = owners[id(owner)] = (owner, memory.from_numpy(converted(owner), device))
        base = owner.__array_interface__["data"][0]
        offset, rem = divmod(t.data_ptr - base, t.dtype.itemsize)
        if rem or owner.dtype != t.dtype:
            raise GraphError(f"{t!r} is a view with another dtype or alignment than its memory")
        # Offsets and strides count elements, so they hold in the converted copy too.
        return entry[1].view(t.shape, offset=offset, strides=t.strides)

    _refuse_control(graph, "to_gpu copies graphs without control flow")
    new = Graph()
    nodes = {}
    for e in graph.execs:
        cmd = Cmd(e.cmd.name, **e.cmd.params)
        nodes[e.index] = new.exec(cmd, [convert(t) for t in e.inputs],
                                  [convert(t) for t in e.outputs], name=e.name)
    for e in graph.execs:
        for o in e.outgoings:
            new.concat(nodes[e.index], nodes[o.index])
    new.sources = [nodes[e.index] for e in graph.sources]
    new.destinations = [nodes[e.index] for e in graph.destinations]
    return new, {id(o): t for o, t in owners.values()}
