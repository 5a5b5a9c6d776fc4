/* nnc C API: build, schedule and run NNC concrete graphs from C (docs/capi.md).
 *
 *   #include "nnc.h"       compile with -I"$(python -c 'import nnc; print(nnc.get_include())')"
 *                          and the flags of python3-config --embed --cflags / --ldflags
 *   if (nnc_init() != 0) { fprintf(stderr, "%s\n", nnc_error_message()); return 1; }
 *   ... nnc_graph_new(&graph) ...
 *   nnc_finalize();
 *
 * The functions live in the Python extension module nnc.capi.capi, exported with Cython's `cdef api`
 * (a capsule per function in its __pyx_capi__ dict). nnc_init() starts Python if needed, imports
 * nnc.capi.capi and fills the function pointers below, checking each capsule's signature. Until then
 * every function returns NNC_ERROR_NOT_INITIALIZED. The pointers are static: each C file that
 * includes this header calls nnc_init() once (after the first it only loads the pointers).
 *
 * Every function returns NNC_SUCCESS (0) or a negative NNC_ERROR_* code, and may be called from
 * any thread: it takes the GIL itself. Outputs (out, count, ...) are written only on success.
 */
#ifndef NNC_H
#define NNC_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, parameters, arguments, signature): every exported function but nnc_error_message.
 * The signature is the capsule name Cython gives the function (checked by nnc_init). */
#define NNC__FUNCTIONS(X) \
    X(nnc_abi_check, (int version, size_t tensor_size, size_t param_size), \
      (version, tensor_size, param_size), "int (int, size_t, size_t)") \
    X(nnc_shutdown, (void), (), "int (void)") \
    X(nnc_tensor_new, (nnc_tensor_h* out, void* data, int datatype, int ndim, \
                       const int64_t* dims), (out, data, datatype, ndim, dims), \
      "int (nnc_tensor_h *, void *, int, int, int64_t const *)") \
    X(nnc_tensor_view_new, (nnc_tensor_h* out, nnc_tensor_h tensor, int ndim, \
                            const int64_t* dims, int64_t offset, const int64_t* strides), \
      (out, tensor, ndim, dims, offset, strides), \
      "int (nnc_tensor_h *, nnc_tensor_h, int, int64_t const *, int64_t, int64_t const *)") \
    X(nnc_tensor_free, (nnc_tensor_h tensor), (tensor), "int (nnc_tensor_h)") \
    X(nnc_tensor_get, (nnc_tensor_h tensor, nnc_tensor_t* out), (tensor, out), \
      "int (nnc_tensor_h, nnc_tensor_t *)") \
    X(nnc_tensor_write, (nnc_tensor_h tensor, const char* db_path, const char* name), \
      (tensor, db_path, name), "int (nnc_tensor_h, char const *, char const *)") \
    X(nnc_tensor_read, (const char* db_path, const char* name, nnc_tensor_h* tensor), \
      (db_path, name, tensor), "int (char const *, char const *, nnc_tensor_h *)") \
    X(nnc_cmd_new, (nnc_cmd_h* out, const char* name, const char* params), \
      (out, name, params), "int (nnc_cmd_h *, char const *, char const *)") \
    X(nnc_cmd_free, (nnc_cmd_h cmd), (cmd), "int (nnc_cmd_h)") \
    X(nnc_cmd_exec, (nnc_cmd_h cmd, const nnc_tensor_h* inputs, int input_size, \
                     const nnc_tensor_h* outputs, int output_size, nnc_stream_h stream), \
      (cmd, inputs, input_size, outputs, output_size, stream), \
      "int (nnc_cmd_h, nnc_tensor_h const *, int, nnc_tensor_h const *, int, nnc_stream_h)") \
    X(nnc_cmd_register, (const char* name, const char* inplace), (name, inplace), \
      "int (char const *, char const *)") \
    X(nnc_cmd_backend_register, (const char* command, const char* backend, nnc_cmd_exec_f fn, \
                                 int datatypes, int flags, int priority), \
      (command, backend, fn, datatypes, flags, priority), \
      "int (char const *, char const *, nnc_cmd_exec_f, int, int, int)") \
    X(nnc_stream_workspace, (void* context, size_t size, void** out), (context, size, out), \
      "int (void *, size_t, void **)") \
    X(nnc_parallel_for, (int64_t parts, nnc_part_f fn, void* arg, void* context), \
      (parts, fn, arg, context), "int (int64_t, nnc_part_f, void *, void *)") \
    X(nnc_stream_new, (const char* kind, nnc_stream_h* out), (kind, out), \
      "int (char const *, nnc_stream_h *)") \
    X(nnc_stream_free, (nnc_stream_h stream), (stream), "int (nnc_stream_h)") \
    X(nnc_stream_wait, (nnc_stream_h stream), (stream), "int (nnc_stream_h)") \
    X(nnc_stream_query, (nnc_stream_h stream, int* done), (stream, done), \
      "int (nnc_stream_h, int *)") \
    X(nnc_signal_new, (const char* kind, nnc_signal_h* out), (kind, out), \
      "int (char const *, nnc_signal_h *)") \
    X(nnc_signal_free, (nnc_signal_h signal), (signal), "int (nnc_signal_h)") \
    X(nnc_stream_emit_signal, (nnc_stream_h stream, nnc_signal_h signal), (stream, signal), \
      "int (nnc_stream_h, nnc_signal_h)") \
    X(nnc_stream_wait_signal, (nnc_stream_h stream, nnc_signal_h signal), (stream, signal), \
      "int (nnc_stream_h, nnc_signal_h)") \
    X(nnc_graph_new, (nnc_graph_h* out), (out), "int (nnc_graph_h *)") \
    X(nnc_graph_free, (nnc_graph_h graph), (graph), "int (nnc_graph_h)") \
    X(nnc_graph_exec_new, (nnc_graph_h graph, nnc_cmd_h cmd, const nnc_tensor_h* inputs, \
                           int input_size, const nnc_tensor_h* outputs, int output_size, \
                           nnc_graph_exec_h* out), \
      (graph, cmd, inputs, input_size, outputs, output_size, out), \
      "int (nnc_graph_h, nnc_cmd_h, nnc_tensor_h const *, int, nnc_tensor_h const *, int, " \
      "nnc_graph_exec_h *)") \
    X(nnc_graph_exec_free, (nnc_graph_exec_h exec), (exec), "int (nnc_graph_exec_h)") \
    X(nnc_graph_exec_count, (nnc_graph_h graph, int* count), (graph, count), \
      "int (nnc_graph_h, int *)") \
    X(nnc_graph_exec_get, (nnc_graph_h graph, int index, nnc_graph_exec_h* out), \
      (graph, index, out), "int (nnc_graph_h, int, nnc_graph_exec_h *)") \
    X(nnc_graph_exec_concat, (nnc_graph_h graph, nnc_graph_exec_h source, \
                              nnc_graph_exec_h destination), (graph, source, destination), \
      "int (nnc_graph_h, nnc_graph_exec_h, nnc_graph_exec_h)") \
    X(nnc_graph_exec_disjoin, (nnc_graph_h graph, nnc_graph_exec_h source, \
                               nnc_graph_exec_h destination), (graph, source, destination), \
      "int (nnc_graph_h, nnc_graph_exec_h, nnc_graph_exec_h)") \
    X(nnc_graph_set_sources, (nnc_graph_h graph, const nnc_graph_exec_h* sources, \
                              int source_size), (graph, sources, source_size), \
      "int (nnc_graph_h, nnc_graph_exec_h const *, int)") \
    X(nnc_graph_set_destinations, (nnc_graph_h graph, const nnc_graph_exec_h* destinations, \
                                   int destination_size), (graph, destinations, destination_size), \
      "int (nnc_graph_h, nnc_graph_exec_h const *, int)") \
    X(nnc_graph_run, (nnc_graph_h graph, nnc_stream_h stream), (graph, stream), \
      "int (nnc_graph_h, nnc_stream_h)") \
    X(nnc_graph_static_schedule, (nnc_graph_h graph, const char* stream_type, int max_streams), \
      (graph, stream_type, max_streams), "int (nnc_graph_h, char const *, int)") \
    X(nnc_graph_schedule_info, (nnc_graph_h graph, int* stream_count, int* signal_count), \
      (graph, stream_count, signal_count), "int (nnc_graph_h, int *, int *)") \
    /* Partial static schedules (docs/capi.md, "Partial schedules"). */ \
    X(nnc_graph_static_schedule_new, (nnc_graph_h graph, const char* stream_type, \
                                      int max_streams, const nnc_graph_exec_h* sources, \
                                      int source_size, const nnc_graph_exec_h* destinations, \
                                      int destination_size, nnc_graph_static_schedule_h* out), \
      (graph, stream_type, max_streams, sources, source_size, destinations, destination_size, \
       out), \
      "int (nnc_graph_h, char const *, int, nnc_graph_exec_h const *, int, " \
      "nnc_graph_exec_h const *, int, nnc_graph_static_schedule_h *)") \
    X(nnc_graph_static_schedule_free, (nnc_graph_static_schedule_h schedule), (schedule), \
      "int (nnc_graph_static_schedule_h)") \
    X(nnc_graph_run_with_schedule, (nnc_graph_h graph, nnc_graph_static_schedule_h schedule, \
                                    nnc_stream_h stream), (graph, schedule, stream), \
      "int (nnc_graph_h, nnc_graph_static_schedule_h, nnc_stream_h)") \
    X(nnc_graph_static_schedule_info, (nnc_graph_static_schedule_h schedule, int* node_count, \
                                       int* stream_count, int* signal_count), \
      (schedule, node_count, stream_count, signal_count), \
      "int (nnc_graph_static_schedule_h, int *, int *, int *)") \
    X(nnc_graph_while_new, (nnc_graph_h graph, nnc_graph_h body, nnc_graph_exec_h* out), \
      (graph, body, out), "int (nnc_graph_h, nnc_graph_h, nnc_graph_exec_h *)") \
    X(nnc_graph_set_while_expr, (nnc_graph_h body, nnc_graph_while_f expr, const void* data, \
                                 const nnc_tensor_h* inputs, int input_size, \
                                 const nnc_graph_exec_h* breakpoints, int breakpoint_size), \
      (body, expr, data, inputs, input_size, breakpoints, breakpoint_size), \
      "int (nnc_graph_h, nnc_graph_while_f, void const *, nnc_tensor_h const *, int, " \
      "nnc_graph_exec_h const *, int)") \
    X(nnc_graph_while_count, (nnc_graph_h body, int64_t* count), (body, count), \
      "int (nnc_graph_h, int64_t *)") \
    X(nnc_graph_add_carry_over, (nnc_graph_h body, nnc_tensor_h source, \
                                 nnc_tensor_h destination), (body, source, destination), \
      "int (nnc_graph_h, nnc_tensor_h, nnc_tensor_h)") \
    X(nnc_graph_case_of_new, (nnc_graph_h graph, const nnc_tensor_h* inputs, int input_size, \
                              const nnc_tensor_h* outputs, int output_size, \
                              nnc_graph_exec_h* out), \
      (graph, inputs, input_size, outputs, output_size, out), \
      "int (nnc_graph_h, nnc_tensor_h const *, int, nnc_tensor_h const *, int, " \
      "nnc_graph_exec_h *)") \
    X(nnc_graph_set_case_of_expr, (nnc_graph_h graph, nnc_graph_exec_h exec, \
                                   nnc_graph_case_of_f expr, const void* data, int offset), \
      (graph, exec, expr, data, offset), \
      "int (nnc_graph_h, nnc_graph_exec_h, nnc_graph_case_of_f, void const *, int)") \
    X(nnc_graph_set_case_of, (nnc_graph_h graph, nnc_graph_exec_h exec, nnc_graph_h branch, \
                              int index), (graph, exec, branch, index), \
      "int (nnc_graph_h, nnc_graph_exec_h, nnc_graph_h, int)") \
    /* node tensors, multiviews, backend contexts, the engine */ \
    X(nnc_graph_exec_set_io, (nnc_graph_h graph, nnc_graph_exec_h exec, \
                              const nnc_tensor_h* inputs, int input_size, \
                              const nnc_tensor_h* outputs, int output_size), \
      (graph, exec, inputs, input_size, outputs, output_size), \
      "int (nnc_graph_h, nnc_graph_exec_h, nnc_tensor_h const *, int, nnc_tensor_h const *, " \
      "int)") \
    X(nnc_tensor_multiview_new, (nnc_tensor_h* out, const nnc_tensor_h* versions, \
                                 int version_size, int kind, nnc_graph_h anchor), \
      (out, versions, version_size, kind, anchor), \
      "int (nnc_tensor_h *, nnc_tensor_h const *, int, int, nnc_graph_h)") \
    X(nnc_tensor_multiview_free, (nnc_tensor_h multiview), (multiview), "int (nnc_tensor_h)") \
    X(nnc_tensor_multiview_info, (nnc_tensor_h multiview, int* kind, int* version_size, \
                                  int* current), (multiview, kind, version_size, current), \
      "int (nnc_tensor_h, int *, int *, int *)") \
    X(nnc_tensor_multiview_version, (nnc_tensor_h multiview, int index, nnc_tensor_h* out), \
      (multiview, index, out), "int (nnc_tensor_h, int, nnc_tensor_h *)") \
    X(nnc_tensor_synchronize_to_multiview, (nnc_tensor_h multiview, nnc_tensor_h tensor), \
      (multiview, tensor), "int (nnc_tensor_h, nnc_tensor_h)") \
    X(nnc_cmd_backend_register_ctx, (const char* command, const char* backend, \
                                     nnc_cmd_exec_ctx_f fn, void* user, int datatypes, \
                                     int flags, int priority), \
      (command, backend, fn, user, datatypes, flags, priority), \
      "int (char const *, char const *, nnc_cmd_exec_ctx_f, void *, int, int, int)") \
    X(nnc_engine_new, (nnc_engine_h* out, int naive), (out, naive), "int (nnc_engine_h *, int)") \
    X(nnc_engine_free, (nnc_engine_h engine), (engine), "int (nnc_engine_h)") \
    X(nnc_engine_var_new, (nnc_engine_h engine, nnc_engine_var_h* out), (engine, out), \
      "int (nnc_engine_h, nnc_engine_var_h *)") \
    X(nnc_engine_var_free, (nnc_engine_var_h var), (var), "int (nnc_engine_var_h)") \
    X(nnc_engine_push, (nnc_engine_h engine, nnc_engine_fn_f fn, void* arg, \
                        const nnc_engine_var_h* reads, int read_size, \
                        const nnc_engine_var_h* mutates, int mutate_size), \
      (engine, fn, arg, reads, read_size, mutates, mutate_size), \
      "int (nnc_engine_h, nnc_engine_fn_f, void *, nnc_engine_var_h const *, int, " \
      "nnc_engine_var_h const *, int)") \
    X(nnc_engine_delete_var, (nnc_engine_h engine, nnc_engine_var_h var), (engine, var), \
      "int (nnc_engine_h, nnc_engine_var_h)") \
    X(nnc_engine_wait_for_var, (nnc_engine_h engine, nnc_engine_var_h var), (engine, var), \
      "int (nnc_engine_h, nnc_engine_var_h)") \
    X(nnc_engine_wait_all, (nnc_engine_h engine), (engine), "int (nnc_engine_h)") \
    X(nnc_engine_close, (nnc_engine_h engine), (engine), "int (nnc_engine_h)") \
    /* graph tools, node backends, tensor helpers, signals, stream callbacks, threads \
     * (docs/capi.md, "Graph tools", "Tensor helpers", "Threads, signals and callbacks") */ \
    X(nnc_graph_topsort, (nnc_graph_h graph, int* indices, int size, int* count), \
      (graph, indices, size, count), "int (nnc_graph_h, int *, int, int *)") \
    X(nnc_graph_profile, (nnc_graph_h graph, int repeat, double* seconds, int size), \
      (graph, repeat, seconds, size), "int (nnc_graph_h, int, double *, int)") \
    X(nnc_graph_autotune, (nnc_graph_h graph, int trials, int* changed), \
      (graph, trials, changed), "int (nnc_graph_h, int, int *)") \
    X(nnc_graph_simplify, (nnc_graph_h graph, int* changed), (graph, changed), \
      "int (nnc_graph_h, int *)") \
    X(nnc_graph_freeze, (nnc_graph_h graph, const nnc_tensor_h* tensors, int tensor_size, \
                         int* frozen), (graph, tensors, tensor_size, frozen), \
      "int (nnc_graph_h, nnc_tensor_h const *, int, int *)") \
    X(nnc_graph_memory, (nnc_graph_h graph, int64_t* frozen_bytes, int64_t* packed_bytes, \
                         int* frozen_blocks), (graph, frozen_bytes, packed_bytes, frozen_blocks), \
      "int (nnc_graph_h, int64_t *, int64_t *, int *)") \
    X(nnc_graph_dot, (nnc_graph_h graph, int long_form, char* buffer, size_t size, \
                      size_t* length), (graph, long_form, buffer, size, length), \
      "int (nnc_graph_h, int, char *, size_t, size_t *)") \
    X(nnc_graph_exec_index, (nnc_graph_h graph, nnc_graph_exec_h exec, int* index), \
      (graph, exec, index), "int (nnc_graph_h, nnc_graph_exec_h, int *)") \
    X(nnc_graph_exec_backend, (nnc_graph_h graph, nnc_graph_exec_h exec, char* buffer, \
                               size_t size, size_t* length), \
      (graph, exec, buffer, size, length), \
      "int (nnc_graph_h, nnc_graph_exec_h, char *, size_t, size_t *)") \
    X(nnc_graph_exec_set_backend, (nnc_graph_h graph, nnc_graph_exec_h exec, \
                                   const char* backend), (graph, exec, backend), \
      "int (nnc_graph_h, nnc_graph_exec_h, char const *)") \
    X(nnc_tensor_new_format, (nnc_tensor_h* out, void* data, int datatype, int format, int ndim, \
                              const int64_t* dims), (out, data, datatype, format, ndim, dims), \
      "int (nnc_tensor_h *, void *, int, int, int, int64_t const *)") \
    X(nnc_tensor_zeros, (nnc_tensor_h* out, const char* device, int datatype, int format, \
                         int ndim, const int64_t* dims), \
      (out, device, datatype, format, ndim, dims), \
      "int (nnc_tensor_h *, char const *, int, int, int, int64_t const *)") \
    X(nnc_tensor_zero, (nnc_tensor_h tensor), (tensor), "int (nnc_tensor_h)") \
    X(nnc_tensor_eq, (nnc_tensor_h a, nnc_tensor_h b, int ulps, int* equal), (a, b, ulps, equal), \
      "int (nnc_tensor_h, nnc_tensor_h, int, int *)") \
    X(nnc_tensor_resize, (nnc_tensor_h tensor, int ndim, const int64_t* dims, nnc_tensor_h* out), \
      (tensor, ndim, dims, out), "int (nnc_tensor_h, int, int64_t const *, nnc_tensor_h *)") \
    X(nnc_signal_query, (nnc_signal_h signal, int* done), (signal, done), \
      "int (nnc_signal_h, int *)") \
    X(nnc_signal_wait, (nnc_signal_h signal), (signal), "int (nnc_signal_h)") \
    X(nnc_stream_add_callback, (nnc_stream_h stream, nnc_stream_callback_f fn, void* arg), \
      (stream, fn, arg), "int (nnc_stream_h, nnc_stream_callback_f, void *)") \
    X(nnc_set_num_threads, (int n), (n), "int (int)") \
    X(nnc_get_num_threads, (int* n), (n), "int (int *)") \
    X(nnc_set_intra_op_threads, (int n), (n), "int (int)") \
    X(nnc_get_intra_op_threads, (int* n), (n), "int (int *)")

/* The function pointers, NULL until nnc_init() loads them. */
#define NNC__POINTER(name, params, args, sig) static int(*name##__p) params = NULL;
NNC__FUNCTIONS(NNC__POINTER)
#undef NNC__POINTER
static const char* (*nnc_error_message__p)(void) = NULL;

/* State of this file's loader. */
static char nnc__message[512] = "nnc_init() has not been called";
static int nnc__started = 0;            /* this file's nnc_init started Python */
static int nnc__finalized = 0;          /* nnc_finalize ran: Python cannot start again */
static PyThreadState* nnc__main = NULL; /* the starting thread's state while the GIL is free */

/* The wrappers C programs call: refuse until loaded, and once Python has stopped (another C
 * file's nnc_finalize leaves this file's pointers set), then forward. */
#define NNC__WRAPPER(name, params, args, sig) \
    static inline int name params { \
        if (!name##__p || !Py_IsInitialized()) return NNC_ERROR_NOT_INITIALIZED; \
        return name##__p args; \
    }
NNC__FUNCTIONS(NNC__WRAPPER)
#undef NNC__WRAPPER

/* The message of this thread's last failed call; never NULL. */
static inline const char* nnc_error_message(void) {
    return nnc_error_message__p && Py_IsInitialized() ? nnc_error_message__p() : nnc__message;
}

/* Record the pending Python exception (if any) as the loader's message and clear it. */
static inline void nnc__take_python_error(const char* what) {
    PyObject *type = NULL, *value = NULL, *trace = NULL, *text = NULL;
    const char* s = NULL;
    PyErr_Fetch(&type, &value, &trace);
    if (value) text = PyObject_Str(value);
    if (text) s = PyUnicode_AsUTF8(text);
    snprintf(nnc__message, sizeof(nnc__message), "%s%s%s", what, s ? ": " : "", s ? s : "");
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(trace);
    PyErr_Clear();
}

/* Forget every pointer: calls return NNC_ERROR_NOT_INITIALIZED again. */
static inline void nnc__unload(void) {
#define NNC__CLEAR(name, params, args, sig) name##__p = NULL;
    NNC__FUNCTIONS(NNC__CLEAR)
#undef NNC__CLEAR
    nnc_error_message__p = NULL;
}

/* Import nnc.capi.capi and fill every pointer, checking each capsule's signature. GIL held. */
static inline int nnc__load(void) {
    struct { const char* name; const char* sig; void** slot; } table[] = {
#define NNC__ENTRY(name, params, args, sig) {#name, sig, (void**)&name##__p},
        NNC__FUNCTIONS(NNC__ENTRY)
#undef NNC__ENTRY
        {"nnc_error_message", "char const *(void)", (void**)&nnc_error_message__p},
    };
    size_t i, n = sizeof(table) / sizeof(table[0]);
    PyObject *module = NULL, *capi = NULL;
    int rc = NNC_ERROR_NOT_INITIALIZED;
    module = PyImport_ImportModule("nnc.capi.capi");
    if (!module) {
        nnc__take_python_error("cannot import nnc.capi.capi (is nnc installed for this Python? "
                               "set NNC_PYTHON to a python that has it)");
        return rc;
    }
    capi = PyObject_GetAttrString(module, "__pyx_capi__");
    if (!capi || !PyDict_Check(capi)) {
        nnc__take_python_error("nnc.capi.capi has no __pyx_capi__");
        goto done;
    }
    for (i = 0; i < n; i++) {
        PyObject* cap = PyDict_GetItemString(capi, table[i].name);
        if (!cap || !PyCapsule_IsValid(cap, table[i].sig)) {
            snprintf(nnc__message, sizeof(nnc__message),
                     "nnc.capi.capi does not export %s with signature \"%s\"; rebuild against the "
                     "headers of the installed nnc (nnc.get_include())", table[i].name,
                     table[i].sig);
            rc = NNC_ERROR_ABI;
            goto done;
        }
    }
    for (i = 0; i < n; i++) {
        PyObject* cap = PyDict_GetItemString(capi, table[i].name);
        *table[i].slot = PyCapsule_GetPointer(cap, table[i].sig);
    }
    rc = NNC_SUCCESS;
done:
    if (rc != NNC_SUCCESS) nnc__unload();
    Py_XDECREF(capi);
    Py_DECREF(module);
    return rc;
}

/* Start Python (unless the process already runs it) with `python` as its executable, so a
 * virtual environment's site-packages are found (NULL: Python's defaults), import nnc and load
 * the API. The GIL is released afterwards: any thread may then call nnc functions. Cheap when
 * already done. Python cannot be started again after nnc_finalize(). */
static inline int nnc_init_python(const char* python) {
    PyGILState_STATE gil;
    int rc;
    if (nnc_graph_new__p && Py_IsInitialized()) return NNC_SUCCESS;
    if (nnc__finalized || nnc_graph_new__p) {
        snprintf(nnc__message, sizeof(nnc__message),
                 "nnc_finalize() was called: Python cannot be started twice in one process");
        return NNC_ERROR_NOT_INITIALIZED;
    }
    if (!Py_IsInitialized()) {
        PyConfig config;
        PyStatus status;
        PyConfig_InitPythonConfig(&config);
        config.parse_argv = 0;
        config.install_signal_handlers = 0;  /* the host program owns its signals */
        if (python) {
            status = PyConfig_SetBytesString(&config, &config.executable, python);
            if (PyStatus_Exception(status)) {
                PyConfig_Clear(&config);
                snprintf(nnc__message, sizeof(nnc__message), "bad python path: %s",
                         status.err_msg ? status.err_msg : "?");
                return NNC_ERROR_NOT_INITIALIZED;
            }
        }
        status = Py_InitializeFromConfig(&config);
        PyConfig_Clear(&config);
        if (PyStatus_Exception(status)) {
            snprintf(nnc__message, sizeof(nnc__message), "cannot start Python: %s",
                     status.err_msg ? status.err_msg : "?");
            return NNC_ERROR_NOT_INITIALIZED;
        }
        nnc__started = 1;
        nnc__main = PyEval_SaveThread();
    }
    gil = PyGILState_Ensure();
    rc = nnc__load();
    PyGILState_Release(gil);
    if (rc != NNC_SUCCESS) return rc;
    rc = nnc_abi_check(NNC_ABI_VERSION, sizeof(nnc_tensor_t), sizeof(nnc_cmd_param_t));
    if (rc != NNC_SUCCESS) {
        snprintf(nnc__message, sizeof(nnc__message), "%s", nnc_error_message());
        nnc__unload();
    }
    return rc;
}

/* nnc_init_python(getenv("NNC_PYTHON")). */
static inline int nnc_init(void) {
    return nnc_init_python(getenv("NNC_PYTHON"));
}

/* Drop every handle, wait for every stream, and stop Python if this file's nnc_init started
 * it (call it on the thread that called nnc_init, after the other threads stopped calling nnc).
 * Afterwards every function returns NNC_ERROR_NOT_INITIALIZED. */
static inline int nnc_finalize(void) {
    int rc = NNC_SUCCESS;
    if (!nnc_graph_new__p || !Py_IsInitialized()) return NNC_ERROR_NOT_INITIALIZED;
    rc = nnc_shutdown();
    nnc__unload();
    snprintf(nnc__message, sizeof(nnc__message), "nnc_finalize() was called");
    if (nnc__started) {
        PyEval_RestoreThread(nnc__main);
        if (Py_FinalizeEx() < 0 && rc == NNC_SUCCESS) rc = NNC_ERROR_UNKNOWN;
        nnc__started = 0;
        nnc__finalized = 1;
    }
    return rc;
}

#ifdef __cplusplus
}
#endif

#endif /* NNC_H */
