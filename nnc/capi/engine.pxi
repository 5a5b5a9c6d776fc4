# Included by nnc/capi/capi.pyx: C functions that nnc calls back, a command backend with a user
# context (nnc_cmd_backend_register_ctx, through fixed thunks) and the dependency engine's ops
# (nnc_engine_*). An include, not a module, for the reason tools.pxi gives; its names are
# imported and cimported at the top of capi.pyx.

cdef extern from "nnc_types.h":
    """
    #define NNC_CAPI_THUNKS 256
    static struct { nnc_cmd_exec_ctx_f fn; void* user; } nnc_capi_thunk_slot[NNC_CAPI_THUNKS];
    #define NNC_CAPI_THUNK(h, l) \\
        static int nnc_capi_thunk_##h##l(const nnc_cmd_param_t* p, nnc_tensor_t** in, int n, \\
                                         nnc_tensor_t** out, int m, void* context) { \\
            return nnc_capi_thunk_slot[0x##h##l].fn(p, in, n, out, m, context, \\
                                                    nnc_capi_thunk_slot[0x##h##l].user); \\
        }
    #define NNC_CAPI_THUNK16(h) \\
        NNC_CAPI_THUNK(h, 0) NNC_CAPI_THUNK(h, 1) NNC_CAPI_THUNK(h, 2) NNC_CAPI_THUNK(h, 3) \\
        NNC_CAPI_THUNK(h, 4) NNC_CAPI_THUNK(h, 5) NNC_CAPI_THUNK(h, 6) NNC_CAPI_THUNK(h, 7) \\
        NNC_CAPI_THUNK(h, 8) NNC_CAPI_THUNK(h, 9) NNC_CAPI_THUNK(h, a) NNC_CAPI_THUNK(h, b) \\
        NNC_CAPI_THUNK(h, c) NNC_CAPI_THUNK(h, d) NNC_CAPI_THUNK(h, e) NNC_CAPI_THUNK(h, f)
    NNC_CAPI_THUNK16(0) NNC_CAPI_THUNK16(1) NNC_CAPI_THUNK16(2) NNC_CAPI_THUNK16(3)
    NNC_CAPI_THUNK16(4) NNC_CAPI_THUNK16(5) NNC_CAPI_THUNK16(6) NNC_CAPI_THUNK16(7)
    NNC_CAPI_THUNK16(8) NNC_CAPI_THUNK16(9) NNC_CAPI_THUNK16(a) NNC_CAPI_THUNK16(b)
    NNC_CAPI_THUNK16(c) NNC_CAPI_THUNK16(d) NNC_CAPI_THUNK16(e) NNC_CAPI_THUNK16(f)
    #define NNC_CAPI_REF16(h) \\
        nnc_capi_thunk_##h##0, nnc_capi_thunk_##h##1, nnc_capi_thunk_##h##2, \\
        nnc_capi_thunk_##h##3, nnc_capi_thunk_##h##4, nnc_capi_thunk_##h##5, \\
        nnc_capi_thunk_##h##6, nnc_capi_thunk_##h##7, nnc_capi_thunk_##h##8, \\
        nnc_capi_thunk_##h##9, nnc_capi_thunk_##h##a, nnc_capi_thunk_##h##b, \\
        nnc_capi_thunk_##h##c, nnc_capi_thunk_##h##d, nnc_capi_thunk_##h##e, \\
        nnc_capi_thunk_##h##f
    static const nnc_cmd_exec_f nnc_capi_thunk_fn[NNC_CAPI_THUNKS] = {
        NNC_CAPI_REF16(0), NNC_CAPI_REF16(1), NNC_CAPI_REF16(2), NNC_CAPI_REF16(3),
        NNC_CAPI_REF16(4), NNC_CAPI_REF16(5), NNC_CAPI_REF16(6), NNC_CAPI_REF16(7),
        NNC_CAPI_REF16(8), NNC_CAPI_REF16(9), NNC_CAPI_REF16(a), NNC_CAPI_REF16(b),
        NNC_CAPI_REF16(c), NNC_CAPI_REF16(d), NNC_CAPI_REF16(e), NNC_CAPI_REF16(f),
    };
    static void nnc_capi_thunk_set(int i, nnc_cmd_exec_ctx_f fn, void* user) {
        nnc_capi_thunk_slot[i].fn = fn;
        nnc_capi_thunk_slot[i].user = user;
    }
    """
    int NNC_CAPI_THUNKS
    c_exec_f nnc_capi_thunk_fn[256]
    void nnc_capi_thunk_set(int i, c_exec_ctx_f fn, void* user) noexcept nogil


cdef dict _thunks = {}                  # (fn address, user address) -> its thunk's slot

cdef enum:
    PUSH_VARS = 32                      # vars of a push looked up without a Python list


cdef api int nnc_cmd_backend_register_ctx(const char* command, const char* backend,
                                          c_exec_ctx_f fn, void* user, int datatypes,
                                          int flags, int priority) noexcept with gil:
    """nnc_cmd_backend_register for a function that also receives ``user`` (its last argument,
    passed through untouched): at most 256 (fn, user) pairs per process.
    NNC: REGISTER_COMMAND_BACKEND with the command's data pointer."""
    cdef int slot
    try:
        if fn == NULL:
            raise NullError("fn is NULL")
        key = (<size_t>fn, <size_t>user)
        slot = _thunks.get(key, -1)
        if slot < 0:
            if len(_thunks) >= NNC_CAPI_THUNKS:
                raise MemoryError(f"at most {NNC_CAPI_THUNKS} (fn, user) pairs can be "
                                  "registered as backends with a user context")
            slot = len(_thunks)
            nnc_capi_thunk_set(slot, fn, user)
            _thunks[key] = slot
        _register_backend(command, backend, nnc_capi_thunk_fn[slot], datatypes, flags, priority)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_engine_new(nnc_engine_h* out, int naive) noexcept with gil:
    """A dependency engine (nnc.Engine(naive=naive)): MXNet's Engine::Get()."""
    try:
        arg_out(out)
        out[0] = <nnc_engine_h>handle_new(Engine(naive=bool(naive)), K_ENGINE)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_engine_free(nnc_engine_h engine) noexcept with gil:
    """Release the handle; ops already pushed still run."""
    return handle_release(engine, K_ENGINE, "engine")


cdef api int nnc_engine_var_new(nnc_engine_h engine, nnc_engine_var_h* out) noexcept with gil:
    """A new var of engine (Engine.new_var). MXNet: NewVariable."""
    try:
        arg_out(out)
        out[0] = <nnc_engine_var_h>handle_new(
            (<Engine>handle_get(engine, K_ENGINE, "engine")).new_var(), K_ENGINE_VAR)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_engine_var_free(nnc_engine_var_h var) noexcept with gil:
    """Release a var's handle (the var lives on in the engine; nnc_engine_delete_var deletes
    it)."""
    return handle_release(var, K_ENGINE_VAR, "var")


cdef list _engine_vars(Engine eng, const nnc_engine_var_h* items, int n, str what):
    """The vars behind an array of handles; each must be a var of eng (the engine's own check
    names the offender otherwise)."""
    cdef int i
    cdef list out
    arg_count(n, items, what)
    out = [None] * n
    for i in range(n):
        out[i] = handle_get(items[i], K_ENGINE_VAR, f"{what}[{i}]")
    return out


cdef bint _peek_vars(var_t** out, const nnc_engine_var_h* items, int n) noexcept:
    """The C state of n var handles into out; False if any is NULL, freed or mistyped (then
    _engine_vars says which)."""
    cdef PyObject* obj
    cdef int i
    for i in range(n):
        obj = handle_peek(items[i], K_ENGINE_VAR)
        if obj == NULL:
            return False
        out[i] = &(<EngineVar>obj).v
    return True


cdef api int nnc_engine_push(nnc_engine_h engine, c_engine_fn_f fn, void* arg,
                             const nnc_engine_var_h* reads, int read_size,
                             const nnc_engine_var_h* mutates,
                             int mutate_size) noexcept with gil:
    """Run fn(arg) on a pool thread, without the GIL, once every earlier op it conflicts with
    (through reads and mutates) is done; returns at once (Engine.push of a C function, without
    its Python call and argument parsing). A nonzero return fails the op: Engine's error rule.
    MXNet: PushAsync."""
    # Up to PUSH_VARS vars, the handles are looked up in C into this array: no Python object
    # is made for a push (the lists and messages of the general path cost more than the
    # push itself). The vars are borrowed from the handle table, which runs no Python code
    # until the op is committed; a recording engine keeps them, so it takes the general path.
    cdef var_t* local[PUSH_VARS]
    cdef PyObject* obj = handle_peek(engine, K_ENGINE)
    cdef Engine eng
    try:
        if (obj != NULL and fn != NULL and 0 <= read_size and 0 <= mutate_size
                and read_size + mutate_size <= PUSH_VARS
                and (read_size == 0 or reads != NULL) and (mutate_size == 0 or mutates != NULL)
                and _peek_vars(local, reads, read_size)
                and _peek_vars(local + read_size, mutates, mutate_size)):
            eng = <Engine>obj           # a reference: the push's last step may run finalizers
            if eng._recording is None:
                eng.push_c(<size_t>fn, <size_t>arg, local, read_size, mutate_size)
                return 0
        # Anything else: the general path, whose checks name what is wrong.
        eng = <Engine>handle_get(engine, K_ENGINE, "engine")
        if fn == NULL:
            raise NullError("fn is NULL")
        read_list = _engine_vars(eng, reads, read_size, "reads")
        mutate_list = _engine_vars(eng, mutates, mutate_size, "mutates")
        eng._take_vars(read_list, mutate_list)
        eng.push_c(<size_t>fn, <size_t>arg, eng._vars, read_size, mutate_size)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_engine_delete_var(nnc_engine_h engine, nnc_engine_var_h var) noexcept with gil:
    """Delete var once every earlier op using it is done (Engine.delete_var): any later use of
    it is NNC_ERROR_ENGINE. The handle stays to be freed. MXNet: DeleteVariable."""
    try:
        eng = handle_get(engine, K_ENGINE, "engine")
        eng.delete_var(handle_get(var, K_ENGINE_VAR, "var"))
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_engine_wait_for_var(nnc_engine_h engine,
                                     nnc_engine_var_h var) noexcept with gil:
    """Block (without the GIL) until every op pushed so far that mutates var is done;
    NNC_ERROR_ENGINE with the op's error if var's last write failed. MXNet: WaitForVar."""
    try:
        eng = handle_get(engine, K_ENGINE, "engine")
        eng.wait_for_var(handle_get(var, K_ENGINE_VAR, "var"))
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_engine_wait_all(nnc_engine_h engine) noexcept with gil:
    """Block (without the GIL) until every op pushed so far is done; NNC_ERROR_ENGINE with the
    first error recorded since the last wait_all (then forgotten). MXNet: WaitForAll."""
    try:
        (<Engine>handle_get(engine, K_ENGINE, "engine")).wait_all()
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_engine_close(nnc_engine_h engine) noexcept with gil:
    """Wait for everything pushed, then refuse pushes (Engine.close); errors stay for
    nnc_engine_wait_all."""
    try:
        (<Engine>handle_get(engine, K_ENGINE, "engine")).close()
        return 0
    except BaseException as e:
        return capi_fail(e)


# The graph tools, tensor helpers, host-side signals, stream callbacks and thread settings.
