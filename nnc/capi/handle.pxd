# The C API's handle table, error reporting and argument conversion (nnc/capi/capi.pyx uses them).
from cpython.object cimport PyObject
from libc.stdint cimport int64_t

from nnc.graph.graph cimport Graph, GraphExec


# The header's view of the shared types, under their C names (nnc/nnc_types.h). The module
# checks at import that they match the Cython structs field for field.
cdef extern from "nnc_types.h":
    int NNC_ABI_VERSION
    int NNC_MAX_DIM_C "NNC_MAX_DIM"
    ctypedef void* nnc_tensor_h
    ctypedef void* nnc_cmd_h
    ctypedef void* nnc_graph_h
    ctypedef void* nnc_graph_exec_h
    ctypedef void* nnc_stream_h
    ctypedef void* nnc_signal_h
    ctypedef void* nnc_engine_h
    ctypedef void* nnc_engine_var_h
    ctypedef void* nnc_graph_static_schedule_h
    ctypedef struct c_tensor_t "nnc_tensor_t":
        void* data
        int datatype
        int device
        int ndim
        int itemsize
        int contiguous
        int format
        Py_ssize_t count
        Py_ssize_t dim[12]
        Py_ssize_t stride[12]
    ctypedef struct c_param_t "nnc_cmd_param_t":
        double a
        int transpose_a
        int transpose_b
        int groups
        int size[2]
        int stride[2]
        int pad[4]
        double b
        int count_include_pad
        int activation
    ctypedef int (*c_exec_f "nnc_cmd_exec_f")(
        const c_param_t*, c_tensor_t**, int, c_tensor_t**, int, void*) noexcept nogil
    ctypedef int (*c_exec_ctx_f "nnc_cmd_exec_ctx_f")(
        const c_param_t*, c_tensor_t**, int, c_tensor_t**, int, void*, void*) noexcept nogil
    ctypedef int (*c_engine_fn_f "nnc_engine_fn_f")(void*) noexcept nogil
    ctypedef int (*c_stream_callback_f "nnc_stream_callback_f")(void*) noexcept nogil
    ctypedef int (*c_part_f "nnc_part_f")(void*, int64_t, void*) noexcept nogil
    ctypedef int (*c_while_f "nnc_graph_while_f")(
        int64_t, c_tensor_t* const*, int, const void*) noexcept nogil
    ctypedef int (*c_case_of_f "nnc_graph_case_of_f")(
        c_tensor_t* const*, int, const void*) noexcept nogil
    enum:
        NNC_ERROR_UNKNOWN, NNC_ERROR_NULL, NNC_ERROR_HANDLE, NNC_ERROR_INDEX,
        NNC_ERROR_ARGUMENT, NNC_ERROR_COMMAND, NNC_ERROR_TENSOR, NNC_ERROR_GRAPH,
        NNC_ERROR_SCHEDULE, NNC_ERROR_STREAM, NNC_ERROR_MEMORY, NNC_ERROR_ABI, NNC_ERROR_IO,
        NNC_ERROR_ENGINE, NNC_ERROR_CUDA, NNC_MULTIVIEW_K0N, NNC_MULTIVIEW_K1N, NNC_MULTIVIEW_PHI,
        NNC_PRIORITY_DEFAULT, NNC_BACKEND_CONTIGUOUS


cdef enum:
    K_FREE = 0                          # a free slot
    K_TENSOR = 1                        # the K_* kind of a live slot names its handle type
    K_CMD = 2
    K_GRAPH = 3
    K_EXEC = 4
    K_STREAM = 5
    K_SIGNAL = 6
    K_ENGINE = 7
    K_ENGINE_VAR = 8
    K_SCHEDULE = 9                      # (Schedule, its Graph): the handle keeps the graph


cdef const char* capi_message() noexcept nogil
cdef int capi_fail(object e) noexcept
cdef int capi_set_message(str text) noexcept
cdef size_t handle_new(object obj, int kind) except 0
cdef object handle_get(const void* h, int kind, str what)
cdef PyObject* handle_peek(const void* h, int kind) noexcept
cdef int handle_free(const void* h, int kind, str what) except -1
cdef int handle_release(const void* h, int kind, str what) noexcept
cdef int handle_clear() except -1
cdef str arg_text(const char* s, str what)
cdef int arg_out(const void* out, str what=*) except -1
cdef int arg_count(int n, const void* array, str what) except -1
cdef list arg_tensors(const nnc_tensor_h* items, int n, str what)
cdef GraphExec arg_exec(Graph g, const void* h, str what)
cdef list arg_execs(Graph g, const nnc_graph_exec_h* items, int n, str what)
