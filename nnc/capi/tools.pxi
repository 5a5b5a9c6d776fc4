# Included by nnc/capi/capi.pyx (its last block): the C API of the graph tools (topsort,
# profile, autotune, simplify, freeze, memory, dot), node backends, NNC's tensor helpers (formats,
# nnc-owned tensors, zero, eq, resize), signals from the host, stream callbacks and the thread
# settings. An include, not a module: nnc.h loads every function from the one __pyx_capi__ of
# nnc.capi.capi, and an included `cdef api` function is exported there like the others. The
# names it uses are imported and cimported at the top of capi.pyx, where the layer check sees
# them.


cdef int _text_out(str text, char* buffer, size_t size, size_t* length) except -1:
    """Copy text, UTF-8 and NUL-terminated, into buffer (size bytes) and its length without the
    NUL into *length (may be NULL when buffer is given). buffer NULL with size 0 asks for the
    length only. Too small a buffer is refused (NNC_ERROR_INDEX) with nothing written: a
    truncated graph or backend name would read as a valid one."""
    cdef bytes b = text.encode("utf-8")
    cdef size_t n = len(b)
    if buffer == NULL:
        if size != 0:
            raise NullError(f"buffer is NULL but its size is {size}")
        arg_out(length, "length")
    elif size < n + 1:
        raise RangeError(f"the buffer holds {size} bytes; the text needs {n + 1} (its NUL "
                         "included)")
    else:
        memcpy(buffer, <const char*>b, n)
        buffer[n] = 0
    if length != NULL:
        length[0] = n
    return 0


cdef int _positive(int n, str what) except -1:
    if n < 1:
        raise ValueError(f"{what} is {n}, must be >= 1")
    return 0


# -- graph tools -----------------------------------------------------------------------------

cdef api int nnc_graph_topsort(nnc_graph_h graph, int* indices, int size,
                               int* count) noexcept with gil:
    """*count = the number of nodes a run visits; indices[0:count] = their indices (creation
    order, as nnc_graph_exec_get takes them) in the order a run visits them, when size >= count
    (indices NULL with size 0 asks for the count). NNC: ccv_nnc_graph_topsort."""
    try:
        arg_out(count, "count")
        arg_count(size, indices, "indices")
        order = (<Graph>handle_get(graph, K_GRAPH, "graph")).topsort()
        if indices != NULL:
            if size < len(order):
                raise RangeError(f"indices holds {size} entries; the run visits {len(order)} "
                                 "nodes")
            for i, e in enumerate(order):
                indices[i] = (<GraphExec>e).index
        count[0] = len(order)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_profile(nnc_graph_h graph, int repeat, double* seconds,
                               int size) noexcept with gil:
    """Run the graph now, on this thread, repeat times, timing each node: seconds[i] = node i's
    best time (nodes in creation order; -1 for a node the run does not visit); size must be at
    least the node count. Graph.profile."""
    try:
        g = <Graph>handle_get(graph, K_GRAPH, "graph")
        _positive(repeat, "repeat")
        arg_count(size, seconds, "seconds")
        if size < len(g):
            raise RangeError(f"seconds holds {size} entries; the graph has {len(g)} nodes")
        best = {(<GraphExec>e).index: t for e, t in g.profile(repeat)}
        for i in range(len(g)):
            seconds[i] = best.get(i, -1.0)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_autotune(nnc_graph_h graph, int trials, int* changed) noexcept with gil:
    """Keep the fastest backend of each node not pinned (best of trials), in the bodies and
    branches of its while and case..of nodes too; *changed (may be NULL) = how many nodes
    changed backend. Graph.autotune. NNC: ccv_nnc_graph_autotune."""
    try:
        g = handle_get(graph, K_GRAPH, "graph")
        _positive(trials, "trials")
        n = g.autotune(trials)
        if changed != NULL:
            changed[0] = n
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_simplify(nnc_graph_h graph, int* changed) noexcept with gil:
    """Fold epilogues into convolutions and move NCHW convolutions and pools to NHWC through
    inserted transforms; *changed (may be NULL) = Graph.simplify's count.
    NNC: CCV_NNC_SIMPLIFY_OPS_FUSION."""
    try:
        n = handle_get(graph, K_GRAPH, "graph").simplify()
        if changed != NULL:
            changed[0] = n
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_freeze(nnc_graph_h graph, const nnc_tensor_h* tensors, int tensor_size,
                              int* frozen) noexcept with gil:
    """Move tensors (tensor_size 0: every weight and bias no node writes) into frozen memory
    and re-bind the nodes reading them; *frozen (may be NULL) = how many moved. Graph.freeze."""
    try:
        g = handle_get(graph, K_GRAPH, "graph")
        ts = arg_tensors(tensors, tensor_size, "tensors")
        for i, t in enumerate(ts):
            if t is None:
                raise NullError(f"tensors[{i}] is NULL")
        out = g.freeze(ts or None)
        if frozen != NULL:
            frozen[0] = len(out)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_memory(nnc_graph_h graph, int64_t* frozen_bytes, int64_t* packed_bytes,
                              int* frozen_blocks) noexcept with gil:
    """The frozen memory the graph's tensors use, the packed copies kernels keep of it and the
    number of frozen blocks (each pointer may be NULL). Graph.memory."""
    try:
        m = handle_get(graph, K_GRAPH, "graph").memory()
        if frozen_bytes != NULL:
            frozen_bytes[0] = m["frozen_bytes"]
        if packed_bytes != NULL:
            packed_bytes[0] = m["packed_bytes"]
        if frozen_blocks != NULL:
            frozen_blocks[0] = m["frozen_blocks"]
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_dot(nnc_graph_h graph, int long_form, char* buffer, size_t size,
                           size_t* length) noexcept with gil:
    """Graphviz text of the graph (long_form nonzero: shapes and schedule too) into buffer, as
    _text_out writes it. Graph.dot. NNC: ccv_nnc_graph_dot."""
    try:
        g = handle_get(graph, K_GRAPH, "graph")
        _text_out(g.dot(long=bool(long_form)), buffer, size, length)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_exec_index(nnc_graph_h graph, nnc_graph_exec_h exec,
                                  int* index) noexcept with gil:
    """*index = node exec's index in graph (creation order). GraphExec.index."""
    try:
        arg_out(index, "index")
        index[0] = arg_exec(handle_get(graph, K_GRAPH, "graph"), exec, "exec").index
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_exec_backend(nnc_graph_h graph, nnc_graph_exec_h exec, char* buffer,
                                    size_t size, size_t* length) noexcept with gil:
    """The name of the backend node exec runs ("" for a while or case..of node), as _text_out
    writes it. GraphExec.backend."""
    try:
        e = arg_exec(handle_get(graph, K_GRAPH, "graph"), exec, "exec")
        _text_out(e.backend or "", buffer, size, length)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_exec_set_backend(nnc_graph_h graph, nnc_graph_exec_h exec,
                                        const char* backend) noexcept with gil:
    """Pin node exec to backend (it must accept the node's tensors; autotune leaves it).
    GraphExec.backend = name. NNC: ccv_nnc_graph_exec_set with the command's backend."""
    try:
        e = arg_exec(handle_get(graph, K_GRAPH, "graph"), exec, "exec")
        e.backend = arg_text(backend, "backend")
        return 0
    except BaseException as e:
        return capi_fail(e)


# -- tensors ---------------------------------------------------------------------------------

cdef str _format(int format):
    name = FORMAT_NAMES.get(format)
    if name is None:
        raise ValueError(f"format 0x{format:x} is not one of the NNC_TENSOR_FORMAT_* codes")
    return name


cdef tuple _shape(int ndim, const int64_t* dims):
    if ndim < 0 or ndim > NNC_MAX_DIM_C:
        raise RangeError(f"ndim is {ndim}, must be in [0, {NNC_MAX_DIM_C}]")
    arg_count(ndim, dims, "dims")
    shape = tuple(dims[i] for i in range(ndim))
    if any(d < 0 for d in shape):
        raise ValueError(f"dims {shape} has a negative size")
    return shape


cdef object _caller_tensor(void* data, int datatype, int ndim, const int64_t* dims,
                           str format):
    """A Tensor over caller-owned C-contiguous memory (zero copy): nnc_tensor_new's and
    nnc_tensor_new_format's work after their own checks."""
    if data == NULL:
        raise NullError("data is NULL")
    name = DATATYPE_NAMES.get(datatype)
    if name is None:
        raise ValueError(f"datatype 0x{datatype:x} is not one of the NNC_* datatype codes")
    shape = _shape(ndim, dims)
    # Caller-owned memory: the caller keeps it alive, so the holder owns nothing.
    array = np.asarray(ArrayInterface({"data": (<uintptr_t>data, False), "shape": shape,
                                       "typestr": np.dtype(name).str, "version": 3}, None))
    return Tensor(array, format=format)


cdef api int nnc_tensor_new_format(nnc_tensor_h* out, void* data, int datatype, int format,
                                   int ndim, const int64_t* dims) noexcept with gil:
    """nnc_tensor_new with a format (NNC_TENSOR_FORMAT_*): Tensor(array, format=...).
    NNC: ccv_nnc_tensor_new(ptr, CPU_TENSOR_NCHW(...), 0)."""
    try:
        arg_out(out)
        t = _caller_tensor(data, datatype, ndim, dims, _format(format))
        out[0] = <nnc_tensor_h>handle_new(t, K_TENSOR)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_tensor_zeros(nnc_tensor_h* out, const char* device, int datatype, int format,
                              int ndim, const int64_t* dims) noexcept with gil:
    """A new tensor of nnc-owned memory filled with zeros, on device ("cpu" for NULL, "gpu:N"):
    Tensor.zeros. Freeing the last handle (and every node using it) frees the memory.
    NNC: ccv_nnc_tensor_new(0, params, 0) then ccv_nnc_tensor_zero."""
    try:
        arg_out(out)
        name = DATATYPE_NAMES.get(datatype)
        if name is None:
            raise ValueError(f"datatype 0x{datatype:x} is not one of the NNC_* datatype codes")
        where = "cpu" if device == NULL else arg_text(device, "device")
        out[0] = <nnc_tensor_h>handle_new(
            Tensor.zeros(_shape(ndim, dims), name, where, _format(format)), K_TENSOR)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_tensor_zero(nnc_tensor_h tensor) noexcept with gil:
    """Set every element (a view's only) to zero, now. NNC: ccv_nnc_tensor_zero."""
    try:
        tensor_zero(handle_get(tensor, K_TENSOR, "tensor"))
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_tensor_eq(nnc_tensor_h a, nnc_tensor_h b, int ulps,
                           int* equal) noexcept with gil:
    """*equal = 1 if a and b have one datatype and shape and their elements compare equal as
    NNC compares them (floats within ulps units in the last place, or the datatype's epsilon),
    else 0. NNC: ccv_nnc_tensor_eq (128 ulps; 0 for equal there)."""
    try:
        arg_out(equal, "equal")
        x = handle_get(a, K_TENSOR, "a")
        y = handle_get(b, K_TENSOR, "b")
        if ulps < 0:
            raise ValueError(f"ulps is {ulps}, must be >= 0")
        equal[0] = 1 if tensor_eq(x, y, ulps) else 0
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_tensor_resize(nnc_tensor_h tensor, int ndim, const int64_t* dims,
                               nnc_tensor_h* out) noexcept with gil:
    """A new handle to a tensor of dims over tensor's memory where it fits, else over new
    nnc-owned memory holding a copy of its first elements (nnc.tensor_resize); tensor keeps
    its shape and stays valid. NNC: ccv_nnc_tensor_resize."""
    try:
        arg_out(out)
        t = handle_get(tensor, K_TENSOR, "tensor")
        out[0] = <nnc_tensor_h>handle_new(tensor_resize(t, _shape(ndim, dims)), K_TENSOR)
        return 0
    except BaseException as e:
        return capi_fail(e)


# -- signals, stream callbacks, threads ------------------------------------------------------

cdef api int nnc_signal_query(nnc_signal_h signal, int* done) noexcept with gil:
    """*done = 1 if the signal's latest emit has happened (or it was never emitted)."""
    try:
        arg_out(done, "done")
        done[0] = 1 if (<Signal>handle_get(signal, K_SIGNAL, "signal")).query() else 0
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_signal_wait(nnc_signal_h signal) noexcept with gil:
    """Block (without the GIL) until the signal's latest emit enqueued so far has happened;
    refused on a pool thread (NNC_ERROR_STREAM). Signal.wait."""
    try:
        (<Signal>handle_get(signal, K_SIGNAL, "signal")).wait()
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef class _CCallback:
    """A C stream callback with its argument, callable as Stream.add_callback expects: the C
    function runs without the GIL, and a nonzero return becomes the stream's failure."""
    cdef c_stream_callback_f fn
    cdef void* arg

    def __call__(self):
        cdef int rc
        with nogil:
            rc = self.fn(self.arg)
        if rc != 0:
            raise StreamError(f"the C stream callback at 0x{<size_t>self.fn:x} returned {rc}")

    def __repr__(self):
        return f"<C stream callback at 0x{<size_t>self.fn:x}>"


cdef api int nnc_stream_add_callback(nnc_stream_h stream, c_stream_callback_f fn,
                                     void* arg) noexcept with gil:
    """Call fn(arg) once the work enqueued on stream before it is done (Stream.add_callback);
    arg is passed through untouched and kept valid by the caller until fn ran. A nonzero return
    is reported by nnc_stream_wait (NNC_ERROR_STREAM). NNC: ccv_nnc_stream_context_add_callback."""
    cdef _CCallback cb
    try:
        s = handle_get(stream, K_STREAM, "stream")
        if fn == NULL:
            raise NullError("fn is NULL")
        cb = _CCallback()
        cb.fn = fn
        cb.arg = arg
        s.add_callback(cb)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef object _thread_setting(fn, n):
    """Call a thread-count setter; its refusal of the count (an NNCError of no subclass) is a
    bad argument here, a stopped pool stays NNC_ERROR_STREAM."""
    try:
        fn(n)
    except StreamError:
        raise
    except NNCError as e:
        raise ValueError(str(e)) from None


cdef api int nnc_set_num_threads(int n) noexcept with gil:
    """Size nnc's worker pool to n threads (>= 1), at once. nnc.set_num_threads."""
    try:
        _thread_setting(set_num_threads, n)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_get_num_threads(int* n) noexcept with gil:
    """*n = the worker pool's size. nnc.get_num_threads."""
    try:
        arg_out(n, "n")
        n[0] = get_num_threads()
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_set_intra_op_threads(int n) noexcept with gil:
    """Let one command use up to n threads (1 to 1024); 0: as many as the pool has (the
    default). nnc.set_intra_op_threads (None is 0 here)."""
    try:
        if n < 0:
            raise ValueError(f"n is {n}, must be 0 (every pool thread) or from 1 to 1024")
        _thread_setting(set_intra_op_threads, None if n == 0 else n)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_get_intra_op_threads(int* n) noexcept with gil:
    """*n = the limit nnc_set_intra_op_threads set, 0 for none. nnc.get_intra_op_threads."""
    try:
        arg_out(n, "n")
        n[0] = get_intra_op_threads() or 0
        return 0
    except BaseException as e:
        return capi_fail(e)
