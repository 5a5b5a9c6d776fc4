/* nnc C API: types, codes and structs shared by C programs and nnc's own capi module.
 *
 * Include "nnc.h" (which includes this file) from C programs. nnc/capi/capi.pyx includes this file
 * alone, so the exported functions and the C callers agree on every type. See docs/capi.md.
 */
#ifndef NNC_TYPES_H
#define NNC_TYPES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct below or a function's signature changes: nnc_init() refuses a
 * module built against another version. */
#define NNC_ABI_VERSION 3

#define NNC_MAX_DIM 12                  /* NNC's CCV_NNC_MAX_DIM_ALLOC */

/* Datatype codes: NNC's bit values (ccv_nnc_tfb.h); a backend's mask is an OR of them. */
#define NNC_8U 0x1000
#define NNC_32S 0x2000
#define NNC_32F 0x4000
#define NNC_64S 0x8000
#define NNC_64F 0x10000
#define NNC_16F 0x20000

/* Tensor formats: NNC's CCV_TENSOR_FORMAT_* (nnc_tensor_t.format). */
#define NNC_TENSOR_FORMAT_NCHW 0x01
#define NNC_TENSOR_FORMAT_NHWC 0x02
#define NNC_TENSOR_FORMAT_CHWN 0x04

/* Return codes of C command backends (NNC's CCV_NNC_EXEC_*). */
#define NNC_SUCCESS 0
#define NNC_INVALID (-1)
#define NNC_NO_KERNEL (-2)
#define NNC_OOM (-3)

/* Return codes of the API functions: 0 (NNC_SUCCESS) or one of these; nnc_error_message()
 * then says what went wrong, on the calling thread. */
#define NNC_ERROR_UNKNOWN (-100)        /* any other failure (an internal error) */
#define NNC_ERROR_NOT_INITIALIZED (-101)/* nnc_init() was not called, or failed */
#define NNC_ERROR_NULL (-102)           /* a required pointer or handle is NULL */
#define NNC_ERROR_HANDLE (-103)         /* a freed or foreign handle, or one of another type */
#define NNC_ERROR_INDEX (-104)          /* an index or count out of range */
#define NNC_ERROR_ARGUMENT (-105)       /* a bad value: a datatype, a shape, a parameter string */
#define NNC_ERROR_COMMAND (-106)        /* unknown command or backend, no backend, shape/dtype */
#define NNC_ERROR_TENSOR (-107)         /* a tensor cannot be made or used */
#define NNC_ERROR_GRAPH (-108)          /* a cycle, a node of another graph, a run failed */
#define NNC_ERROR_SCHEDULE (-109)       /* bad schedule arguments */
#define NNC_ERROR_STREAM (-110)         /* work on a stream failed (reported by nnc_stream_wait) */
#define NNC_ERROR_MEMORY (-111)         /* out of memory */
#define NNC_ERROR_ABI (-112)            /* nnc.h and the installed nnc disagree */
#define NNC_ERROR_IO (-113)             /* a tensor database cannot be read or written, or lacks the name */
#define NNC_ERROR_ENGINE (-114)         /* a refused engine push, or an engine op that failed */
#define NNC_ERROR_CUDA (-115)           /* CUDA is unavailable, a GPU does not exist, a CUDA call failed */

/* Multiview kinds (NNC's CCV_NNC_MULTIVIEW_K0N / _K1N; PHI is nnc's case..of selection). */
#define NNC_MULTIVIEW_K0N 0             /* at loop count i: version i % n */
#define NNC_MULTIVIEW_K1N 1             /* version 0 at count 0, then 1 + (i - 1) % (n - 1) */
#define NNC_MULTIVIEW_PHI 2             /* two versions, chosen by a case..of node */

/* Backend registration: priority that means "the registry's default" (15 for a new name). */
#define NNC_PRIORITY_DEFAULT (-1)
/* Backend flags. */
#define NNC_BACKEND_CONTIGUOUS 0x1      /* the backend refuses strided views */

/* Opaque handles. Each is a number naming a slot in nnc's handle table, never a pointer to
 * dereference: a freed handle, a handle of another type or any other value is detected and
 * refused with NNC_ERROR_HANDLE. Distinct struct types let the compiler catch mix-ups too. */
typedef struct nnc_tensor_handle_s* nnc_tensor_h;
typedef struct nnc_cmd_handle_s* nnc_cmd_h;
typedef struct nnc_graph_handle_s* nnc_graph_h;
typedef struct nnc_graph_exec_handle_s* nnc_graph_exec_h;
typedef struct nnc_stream_handle_s* nnc_stream_h;
typedef struct nnc_signal_handle_s* nnc_signal_h;
typedef struct nnc_engine_handle_s* nnc_engine_h;
typedef struct nnc_engine_var_handle_s* nnc_engine_var_h;
typedef struct nnc_graph_static_schedule_handle_s* nnc_graph_static_schedule_h;

/* The C view of a tensor, as C backends and expressions see it (nnc/tensor/tensor.pxd, field by field;
 * nnc_init() checks the layout). Strides count elements, not bytes. */
typedef struct {
    void* data;                         /* first element */
    int datatype;                       /* exactly one NNC_* datatype bit */
    int device;                         /* -1: CPU memory; >= 0: GPU ordinal */
    int ndim;                           /* 0 <= ndim <= NNC_MAX_DIM */
    int itemsize;                       /* bytes per element */
    int contiguous;                     /* 1 iff stride[] is the C-order stride of dim[] */
    int format;                         /* NNC_TENSOR_FORMAT_*: NHWC unless made otherwise */
    ssize_t count;                      /* product of dim[0:ndim] (1 when ndim == 0) */
    ssize_t dim[NNC_MAX_DIM];
    ssize_t stride[NNC_MAX_DIM];
} nnc_tensor_t;

/* Parameters a C backend reads (nnc/cmd/command.pxd). nnc_cmd_new() fills them from its parameter
 * string; a command's own normalisation decides which names it takes. */
typedef struct {
    double a;                           /* SCALAR_MUL's factor, SET's value, ADD's and MUL's p,
                                           CLAMP's min (NaN: no lower bound) */
    int transpose_a;
    int transpose_b;
    int groups;
    int size[2];
    int stride[2];
    int pad[4];
    double b;                           /* ADD's q, CLAMP's max (NaN: no upper bound) */
    int count_include_pad;              /* AVG_POOL: 1 divides by the whole window */
    int activation;                     /* CONVOLUTION: 1 = ReLU fused into the epilogue,
                                           2 = clamp to [a, b] (ReLU6: [0, 6]),
                                           3 = HARD_SWISH, 4 = SWISH */
    int ceil_mode;                      /* MAX_POOL, AVG_POOL: 1 rounds the output size up */
    double c;                           /* LRN's bias (alpha: a, beta: b, size: size[0]) */
    int mode;                           /* UPSAMPLE: 0 nearest, 1 bilinear; PAD: 0 constant (value: a),
                                           1 reflect, 2 edge */
    int align_corners;                  /* UPSAMPLE: 1 maps corner pixel centres onto each other */
    int begin[NNC_MAX_DIM];             /* PAD: elements added before each axis */
    int end[NNC_MAX_DIM];               /* PAD: elements added after each axis */
} nnc_cmd_param_t;

/* A C command backend. Absent tensors are NULL. Returns NNC_SUCCESS or a negative NNC_* status.
 * It runs on stream worker threads without the GIL and must not call Python; context owns its
 * scratch memory (nnc_stream_workspace). */
typedef int (*nnc_cmd_exec_f)(const nnc_cmd_param_t* param,
                              nnc_tensor_t** inputs, int input_size,
                              nnc_tensor_t** outputs, int output_size,
                              void* context);

/* A C command backend with a user context (nnc_cmd_backend_register_ctx): as nnc_cmd_exec_f,
 * plus the pointer given at registration, passed through untouched (NNC: ccv_nnc_cmd_t's data). */
typedef int (*nnc_cmd_exec_ctx_f)(const nnc_cmd_param_t* param,
                                  nnc_tensor_t** inputs, int input_size,
                                  nnc_tensor_t** outputs, int output_size,
                                  void* context, void* user);

/* An engine op pushed from C (nnc_engine_push): runs on a pool thread without the GIL and must
 * not call Python. Returns 0 on success; any other value fails the op (docs/capi.md, Engine). */
typedef int (*nnc_engine_fn_f)(void* arg);

/* A stream callback (nnc_stream_add_callback): runs once the work enqueued on the stream
 * before it is done, on a pool thread without the GIL (a GPU stream's: nnc's host-function
 * watcher thread); the rules of a backend apply to what it may call. Returns 0 on success; any
 * other value is a failure of the stream's work, reported by nnc_stream_wait. */
typedef int (*nnc_stream_callback_f)(void* arg);

/* One part of a command split with nnc_parallel_for: part in [0, parts); context is the running
 * thread's scratch-memory owner (for nnc_stream_workspace). Returns NNC_SUCCESS or a negative
 * status; it runs without the GIL, must not call Python and must not wait for other work. */
typedef int (*nnc_part_f)(void* arg, int64_t part, void* context);

/* A while expression (NNC: ccv_nnc_graph_while_f, with the count passed explicitly): called
 * after the breakpoints of iteration `count` (0-based) ran. Returns 1 to run the rest of the
 * body and continue, 0 to end the loop, a negative value to fail the run. */
typedef int (*nnc_graph_while_f)(int64_t count, nnc_tensor_t* const* inputs, int input_size,
                                 const void* data);

/* A case..of expression (NNC: ccv_nnc_graph_case_of_f): returns the branch index before the
 * offset is added; an index < 0 after the offset runs no branch. */
typedef int (*nnc_graph_case_of_f)(nnc_tensor_t* const* inputs, int input_size,
                                   const void* data);

#ifdef __cplusplus
}
#endif

#endif /* NNC_TYPES_H */
