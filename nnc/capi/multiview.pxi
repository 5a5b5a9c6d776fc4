# Included by nnc/capi/capi.pyx: re-pointing a node's tensors (nnc_graph_exec_set_io) and
# multiviews (NNC's ccv_nnc_tensor_multiview_t) from C. An include, not a module: nnc.h loads
# every function from the one __pyx_capi__ of nnc.capi.capi, and an included `cdef api` function
# is exported there like the others. The names it uses are imported and cimported at the top of
# capi.pyx, where the layer check sees them.

cdef api int nnc_graph_exec_set_io(nnc_graph_h graph, nnc_graph_exec_h exec,
                                   const nnc_tensor_h* inputs, int input_size,
                                   const nnc_tensor_h* outputs,
                                   int output_size) noexcept with gil:
    """Replace node exec's tensors (GraphExec.set_io: the same checks, the backend chosen again,
    the default schedule rebuilt at the next run). NNC: ccv_nnc_graph_exec_set_io."""
    try:
        g = handle_get(graph, K_GRAPH, "graph")
        e = arg_exec(g, exec, "exec")
        e.set_io(arg_tensors(inputs, input_size, "inputs"),
                 arg_tensors(outputs, output_size, "outputs"))
        return 0
    except BaseException as e:
        return capi_fail(e)


_MULTIVIEW_KINDS = {NNC_MULTIVIEW_K0N: "K0N", NNC_MULTIVIEW_K1N: "K1N", NNC_MULTIVIEW_PHI: "PHI"}


cdef object _multiview(const void* h, str what):
    t = handle_get(h, K_TENSOR, what)
    if not isinstance(t, MultiView):
        raise HandleError(f"{what} is an nnc_tensor_h of a plain tensor, not of a multiview")
    return t


cdef api int nnc_tensor_multiview_new(nnc_tensor_h* out, const nnc_tensor_h* versions,
                                      int version_size, int kind,
                                      nnc_graph_h anchor) noexcept with gil:
    """A tensor that aliases one of versions at a time, chosen by anchor's loop count (K0N,
    K1N) or by a case..of node (PHI, anchor NULL): nnc.MultiView. The handle is a tensor
    handle, for nodes and nnc_tensor_get. NNC: ccv_nnc_tensor_multiview."""
    try:
        arg_out(out)
        name = _MULTIVIEW_KINDS.get(kind)
        if name is None:
            raise ValueError(f"kind {kind} is not NNC_MULTIVIEW_K0N, _K1N or _PHI")
        vs = arg_tensors(versions, version_size, "versions")
        for i, v in enumerate(vs):
            if v is None:
                raise NullError(f"versions[{i}] is NULL")
        g = None if anchor == NULL else handle_get(anchor, K_GRAPH, "anchor")
        out[0] = <nnc_tensor_h>handle_new(MultiView(vs, anchor=g, kind=name), K_TENSOR)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_tensor_multiview_free(nnc_tensor_h multiview) noexcept with gil:
    """Release a multiview's handle (NNC_ERROR_HANDLE for a plain tensor's); loops and nodes
    using it keep it. NNC: ccv_nnc_tensor_multiview_free."""
    try:
        _multiview(multiview, "multiview")
        handle_free(multiview, K_TENSOR, "multiview")
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_tensor_multiview_info(nnc_tensor_h multiview, int* kind, int* version_size,
                                       int* current) noexcept with gil:
    """The multiview's kind (NNC_MULTIVIEW_*), number of versions and the version it aliases
    now (each pointer may be NULL)."""
    try:
        mv = _multiview(multiview, "multiview")
        if kind != NULL:
            kind[0] = mv.kind
        if version_size != NULL:
            version_size[0] = len(mv.versions)
        if current != NULL:
            current[0] = mv.current
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_tensor_multiview_version(nnc_tensor_h multiview, int index,
                                          nnc_tensor_h* out) noexcept with gil:
    """A new handle to version index of the multiview. NNC: CCV_NNC_MULTIVIEW_DATA(mv)[index]."""
    try:
        arg_out(out)
        mv = _multiview(multiview, "multiview")
        if index < 0 or index >= len(mv.versions):
            raise RangeError(f"version index {index} is out of range [0, {len(mv.versions)})")
        out[0] = <nnc_tensor_h>handle_new(mv.versions[index], K_TENSOR)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_tensor_synchronize_to_multiview(nnc_tensor_h multiview,
                                                 nnc_tensor_h tensor) noexcept with gil:
    """From now on tensor aliases whichever version the multiview aliases (MultiView.synchronize:
    the versions' layout, not a multiview). NNC: ccv_nnc_tensor_synchronize_to_multiview."""
    try:
        mv = _multiview(multiview, "multiview")
        mv.synchronize(handle_get(tensor, K_TENSOR, "tensor"))
        return 0
    except BaseException as e:
        return capi_fail(e)


# A C backend with a user context is registered as one of these thunks: thunk i calls slot i's
# function with slot i's pointer appended, so the calling convention every runner uses (six
# arguments, nnc.cmd.command's cmd_bound_run_c) and the bound records stay as they are. A slot
# is written once, under the GIL, before its backend is registered (and so before any runner
# can call its thunk), and never changes: backends are never unregistered.
