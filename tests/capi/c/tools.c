/* The graph tools, node backends, tensor helpers, signals, stream callbacks and thread settings
 * from C: each does what its Python counterpart does (docs/capi.md, "Graph tools", "Tensor
 * helpers", "Threads, signals and callbacks"), and every bad call returns its code. Prints one
 * line per check; exit status 0 when all hold (tests/capi/test_capi.py runs it). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nnc.h"
#include "expect.h"

#define TRUE(cond) EXPECT((cond) ? NNC_SUCCESS : NNC_ERROR_UNKNOWN, NNC_SUCCESS)

static nnc_tensor_h tensor(float* data, int64_t d0, int64_t d1) {
    nnc_tensor_h t = NULL;
    int64_t dims[2] = {d0, d1};
    EXPECT(nnc_tensor_new(&t, data, NNC_32F, 2, dims), NNC_SUCCESS);
    return t;
}

static nnc_graph_exec_h node(nnc_graph_h g, const char* name, const char* params,
                             nnc_tensor_h* in, int n, nnc_tensor_h out) {
    nnc_cmd_h cmd = NULL;
    nnc_graph_exec_h e = NULL;
    EXPECT(nnc_cmd_new(&cmd, name, params), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_new(g, cmd, in, n, &out, 1, &e), NNC_SUCCESS);
    EXPECT(nnc_cmd_free(cmd), NNC_SUCCESS);
    return e;
}

/* Stream callbacks: count the calls; the failing one returns 7; the waiting one tries to wait
 * for a signal from the pool thread it runs on (refused: it could be the thread that emits). */
static int calls = 0, wait_rc = 0;
static int count_call(void* arg) {
    calls += *(int*)arg;
    return 0;
}
static int fail_call(void* arg) {
    (void)arg;
    return 7;
}
static int wait_call(void* arg) {
    wait_rc = nnc_signal_wait((nnc_signal_h)arg);
    return 0;
}

static void graph_tools(void) {
    float x[2] = {0.5f, 1.5f}, w[2] = {2, -1}, y[1], z[1];
    const float Z = (0.5f * 2 - 1.5f) * 3;
    nnc_graph_h g = NULL, other = NULL;
    nnc_tensor_h tx = tensor(x, 1, 2), tw = tensor(w, 1, 2), ty = tensor(y, 1, 1);
    nnc_tensor_h tz = tensor(z, 1, 1);
    nnc_tensor_t view;
    EXPECT(nnc_graph_new(&g), NNC_SUCCESS);
    EXPECT(nnc_graph_new(&other), NNC_SUCCESS);
    /* Made last-first, so the run order is not the creation order. */
    nnc_graph_exec_h scale = node(g, "SCALAR_MUL", "a=3.0", &ty, 1, tz);
    nnc_graph_exec_h gemm = node(g, "GEMM", "transpose_b=True", (nnc_tensor_h[]){tx, tw}, 2, ty);
    nnc_graph_exec_h lone = node(other, "SCALAR_MUL", "a=1.0", &ty, 1, tz);
    EXPECT(nnc_graph_exec_concat(g, gemm, scale), NNC_SUCCESS);

    /* topsort and node indices */
    int order[4] = {-1, -1, -1, -1}, n = -1, index = -1;
    EXPECT(nnc_graph_topsort(g, NULL, 0, &n), NNC_SUCCESS);
    TRUE(n == 2);
    EXPECT(nnc_graph_topsort(g, order, 1, &n), NNC_ERROR_INDEX);         /* too small */
    TRUE(order[0] == -1);                                                 /* nothing written */
    EXPECT(nnc_graph_topsort(g, order, 4, &n), NNC_SUCCESS);
    TRUE(n == 2 && order[0] == 1 && order[1] == 0 && order[2] == -1);
    EXPECT(nnc_graph_topsort(g, order, 4, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_graph_topsort(g, NULL, 2, &n), NNC_ERROR_NULL);
    EXPECT(nnc_graph_topsort(g, order, -1, &n), NNC_ERROR_INDEX);
    EXPECT(nnc_graph_topsort(NULL, order, 4, &n), NNC_ERROR_NULL);
    EXPECT(nnc_graph_topsort((nnc_graph_h)tx, order, 4, &n), NNC_ERROR_HANDLE);  /* a tensor */
    EXPECT(nnc_graph_exec_index(g, gemm, &index), NNC_SUCCESS);
    TRUE(index == 1);
    EXPECT(nnc_graph_exec_index(g, lone, &index), NNC_ERROR_GRAPH);      /* another graph's */
    EXPECT(nnc_graph_exec_index(g, gemm, NULL), NNC_ERROR_NULL);

    /* profile: runs the graph; a node the run skips gets -1 */
    double seconds[3] = {-2, -2, -2};
    z[0] = 0;
    EXPECT(nnc_graph_profile(g, 2, seconds, 3), NNC_SUCCESS);
    TRUE(seconds[0] >= 0 && seconds[1] >= 0 && seconds[2] == -2 && fabsf(z[0] - Z) < 1e-6f);
    EXPECT(nnc_graph_set_destinations(g, &gemm, 1), NNC_SUCCESS);
    EXPECT(nnc_graph_profile(g, 1, seconds, 2), NNC_SUCCESS);
    TRUE(seconds[0] == -1 && seconds[1] >= 0);
    EXPECT(nnc_graph_set_destinations(g, NULL, 0), NNC_SUCCESS);
    EXPECT(nnc_graph_profile(g, 1, seconds, 1), NNC_ERROR_INDEX);        /* 2 nodes */
    EXPECT(nnc_graph_profile(g, 0, seconds, 2), NNC_ERROR_ARGUMENT);
    EXPECT(nnc_graph_profile(g, 1, NULL, 2), NNC_ERROR_NULL);

    /* node backends: read, pin, refuse an unknown one; autotune keeps a pinned node's */
    char name[64];
    size_t len = 0;
    EXPECT(nnc_graph_exec_backend(g, gemm, NULL, 0, &len), NNC_SUCCESS);
    TRUE(len > 0);
    EXPECT(nnc_graph_exec_backend(g, gemm, name, len, NULL), NNC_ERROR_INDEX);  /* no NUL room */
    EXPECT(nnc_graph_exec_set_backend(g, gemm, "CPU_REF"), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_backend(g, gemm, name, sizeof(name), &len), NNC_SUCCESS);
    TRUE(strcmp(name, "CPU_REF") == 0 && len == 7);
    EXPECT(nnc_graph_exec_set_backend(g, gemm, "NO_SUCH_BACKEND"), NNC_ERROR_COMMAND);
    EXPECT(nnc_graph_exec_set_backend(g, gemm, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_graph_exec_set_backend(g, lone, "CPU_REF"), NNC_ERROR_GRAPH);
    EXPECT(nnc_graph_exec_backend(g, gemm, NULL, 4, &len), NNC_ERROR_NULL);
    EXPECT(nnc_graph_exec_backend(g, gemm, NULL, 0, NULL), NNC_ERROR_NULL);
    int changed = -1;
    EXPECT(nnc_graph_autotune(g, 1, &changed), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_backend(g, gemm, name, sizeof(name), NULL), NNC_SUCCESS);
    TRUE(changed >= 0 && strcmp(name, "CPU_REF") == 0);
    EXPECT(nnc_graph_autotune(g, 0, NULL), NNC_ERROR_ARGUMENT);
    EXPECT(nnc_graph_autotune(NULL, 1, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_graph_simplify(g, &changed), NNC_SUCCESS);                /* nothing to fold */
    TRUE(changed == 0);
    EXPECT(nnc_graph_simplify((nnc_graph_h)gemm, NULL), NNC_ERROR_HANDLE);

    /* freeze: the weight moves into nnc's frozen memory; written tensors are refused */
    int64_t frozen_bytes = -1, packed = -1;
    int blocks = -1, frozen = -1;
    EXPECT(nnc_graph_memory(g, &frozen_bytes, &packed, &blocks), NNC_SUCCESS);
    TRUE(frozen_bytes == 0 && blocks == 0);
    EXPECT(nnc_graph_freeze(g, &ty, 1, &frozen), NNC_ERROR_GRAPH);       /* GEMM writes it */
    EXPECT(nnc_graph_freeze(g, (nnc_tensor_h[]){tw, NULL}, 2, &frozen), NNC_ERROR_NULL);
    TRUE(frozen == -1);
    EXPECT(nnc_graph_freeze(g, NULL, 0, &frozen), NNC_SUCCESS);
    TRUE(frozen == 1);
    EXPECT(nnc_tensor_get(tw, &view), NNC_SUCCESS);
    TRUE(view.data != (void*)w && ((float*)view.data)[0] == 2);
    EXPECT(nnc_graph_memory(g, &frozen_bytes, NULL, &blocks), NNC_SUCCESS);
    TRUE(frozen_bytes >= 8 && blocks == 1);
    w[0] = 100;                          /* the caller's memory is no longer read */
    z[0] = 0;
    EXPECT(nnc_graph_run(g, NULL), NNC_SUCCESS);
    TRUE(fabsf(z[0] - Z) < 1e-6f);
    EXPECT(nnc_graph_freeze(g, NULL, 0, NULL), NNC_SUCCESS);             /* nothing left */
    EXPECT(nnc_graph_freeze(g, NULL, -1, NULL), NNC_ERROR_INDEX);

    /* dot: ask for the length, then fetch; too small a buffer gets nothing */
    EXPECT(nnc_graph_dot(g, 1, NULL, 0, &len), NNC_SUCCESS);
    char* text = malloc(len + 1);
    text[0] = 'X';
    EXPECT(nnc_graph_dot(g, 1, text, len, NULL), NNC_ERROR_INDEX);
    TRUE(text[0] == 'X');
    size_t got = 0;
    EXPECT(nnc_graph_dot(g, 1, text, len + 1, &got), NNC_SUCCESS);
    TRUE(got == len && strlen(text) == len && strncmp(text, "digraph", 7) == 0
         && strstr(text, "GEMM") != NULL);
    free(text);
    EXPECT(nnc_graph_dot(g, 0, NULL, 8, &len), NNC_ERROR_NULL);

    nnc_graph_exec_h execs[] = {scale, gemm, lone};
    for (int i = 0; i < 3; i++) EXPECT(nnc_graph_exec_free(execs[i]), NNC_SUCCESS);
    nnc_tensor_h ts[] = {tx, tw, ty, tz};
    for (int i = 0; i < 4; i++) EXPECT(nnc_tensor_free(ts[i]), NNC_SUCCESS);
    EXPECT(nnc_graph_free(g), NNC_SUCCESS);
    EXPECT(nnc_graph_free(other), NNC_SUCCESS);
    EXPECT(nnc_graph_dot(g, 0, NULL, 0, &len), NNC_ERROR_HANDLE);        /* freed */
}

static void tensor_helpers(void) {
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 2, 3, 4, 5, 6};
    int64_t dims[2] = {2, 3}, flat[1] = {6}, square[2] = {3, 2}, big[2] = {4, 4};
    nnc_tensor_h ta = NULL, tb = NULL, tc = NULL, t = NULL, r = NULL, v = NULL;
    nnc_tensor_t view;
    int eq = -1;

    /* formats: NCHW over caller memory; nnc-owned zeros */
    EXPECT(nnc_tensor_new_format(&ta, a, NNC_32F, NNC_TENSOR_FORMAT_NCHW, 2, dims), NNC_SUCCESS);
    EXPECT(nnc_tensor_get(ta, &view), NNC_SUCCESS);
    TRUE(view.format == NNC_TENSOR_FORMAT_NCHW && view.data == (void*)a && view.dim[1] == 3);
    EXPECT(nnc_tensor_new_format(&t, a, NNC_32F, 0x8, 2, dims), NNC_ERROR_ARGUMENT);
    EXPECT(nnc_tensor_new_format(&t, NULL, NNC_32F, NNC_TENSOR_FORMAT_NHWC, 2, dims),
           NNC_ERROR_NULL);
    EXPECT(nnc_tensor_new_format(&t, a, NNC_32F, NNC_TENSOR_FORMAT_NHWC, 13, dims),
           NNC_ERROR_INDEX);
    EXPECT(nnc_tensor_new_format(NULL, a, NNC_32F, NNC_TENSOR_FORMAT_NHWC, 2, dims),
           NNC_ERROR_NULL);
    TRUE(t == NULL);
    EXPECT(nnc_tensor_zeros(&tc, NULL, NNC_64F, NNC_TENSOR_FORMAT_CHWN, 2, dims), NNC_SUCCESS);
    EXPECT(nnc_tensor_get(tc, &view), NNC_SUCCESS);
    TRUE(view.format == NNC_TENSOR_FORMAT_CHWN && view.datatype == NNC_64F && view.count == 6
         && ((double*)view.data)[5] == 0);
    EXPECT(nnc_tensor_zeros(&t, "gpu:x", NNC_32F, NNC_TENSOR_FORMAT_NHWC, 2, dims),
           NNC_ERROR_ARGUMENT);
    EXPECT(nnc_tensor_zeros(&t, NULL, 7, NNC_TENSOR_FORMAT_NHWC, 2, dims), NNC_ERROR_ARGUMENT);
    /* A GPU tensor where CUDA works, NNC_ERROR_CUDA elsewhere (test_capi.py checks which). */
    int gpu = nnc_tensor_zeros(&t, "gpu:0", NNC_32F, NNC_TENSOR_FORMAT_NHWC, 2, dims);
    printf("gpu zeros: %d\n", gpu);
    if (gpu == NNC_SUCCESS) {
        EXPECT(nnc_tensor_get(t, &view), NNC_SUCCESS);
        TRUE(view.device == 0 && view.count == 6);
        EXPECT(nnc_tensor_free(t), NNC_SUCCESS);
        t = NULL;
    }
    EXPECT(nnc_tensor_zeros(&t, NULL, NNC_32F, NNC_TENSOR_FORMAT_NHWC, 2, (int64_t[]){2, -1}),
           NNC_ERROR_ARGUMENT);
    EXPECT(nnc_tensor_zeros(&t, NULL, NNC_32F, NNC_TENSOR_FORMAT_NHWC, 2, NULL), NNC_ERROR_NULL);

    /* eq: NNC's ulp comparison */
    EXPECT(nnc_tensor_new(&tb, b, NNC_32F, 2, dims), NNC_SUCCESS);
    EXPECT(nnc_tensor_eq(ta, tb, 128, &eq), NNC_SUCCESS);
    TRUE(eq == 1);
    b[4] = nextafterf(b[4], 10.0f);      /* one ulp */
    EXPECT(nnc_tensor_eq(ta, tb, 0, &eq), NNC_SUCCESS);
    TRUE(eq == 0);
    EXPECT(nnc_tensor_eq(ta, tb, 1, &eq), NNC_SUCCESS);
    TRUE(eq == 1);
    b[4] = 5.5f;
    EXPECT(nnc_tensor_eq(ta, tb, 128, &eq), NNC_SUCCESS);
    TRUE(eq == 0);
    EXPECT(nnc_tensor_eq(ta, tc, 128, &eq), NNC_SUCCESS);                /* another datatype */
    TRUE(eq == 0);
    EXPECT(nnc_tensor_eq(ta, tb, -1, &eq), NNC_ERROR_ARGUMENT);
    EXPECT(nnc_tensor_eq(ta, tb, 128, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_tensor_eq(ta, NULL, 128, &eq), NNC_ERROR_NULL);

    /* zero: a view's elements only */
    EXPECT(nnc_tensor_view_new(&v, tb, 1, (int64_t[]){2}, 1, NULL), NNC_SUCCESS);
    EXPECT(nnc_tensor_zero(v), NNC_SUCCESS);
    TRUE(b[0] == 1 && b[1] == 0 && b[2] == 0 && b[3] == 4);
    EXPECT(nnc_tensor_zero(tb), NNC_SUCCESS);
    TRUE(b[0] == 0 && b[5] == 0);
    EXPECT(nnc_tensor_zero(NULL), NNC_ERROR_NULL);

    /* resize: in place when it fits, a copy when it grows; the old handle keeps its shape */
    EXPECT(nnc_tensor_resize(ta, 2, square, &r), NNC_SUCCESS);
    EXPECT(nnc_tensor_get(r, &view), NNC_SUCCESS);
    TRUE(view.data == (void*)a && view.dim[0] == 3 && view.dim[1] == 2
         && view.format == NNC_TENSOR_FORMAT_NCHW);
    EXPECT(nnc_tensor_free(r), NNC_SUCCESS);
    EXPECT(nnc_tensor_resize(ta, 2, big, &r), NNC_SUCCESS);
    EXPECT(nnc_tensor_get(r, &view), NNC_SUCCESS);
    TRUE(view.data != (void*)a && view.count == 16 && ((float*)view.data)[5] == 6);
    EXPECT(nnc_tensor_free(r), NNC_SUCCESS);
    EXPECT(nnc_tensor_get(ta, &view), NNC_SUCCESS);
    TRUE(view.dim[0] == 2 && view.dim[1] == 3);
    EXPECT(nnc_tensor_resize(v, 1, flat, &r), NNC_ERROR_TENSOR);         /* a view */
    EXPECT(nnc_tensor_resize(ta, 1, (int64_t[]){-6}, &r), NNC_ERROR_ARGUMENT);
    EXPECT(nnc_tensor_resize(ta, 1, flat, NULL), NNC_ERROR_NULL);

    nnc_tensor_h all[] = {ta, tb, tc, v};
    for (int i = 0; i < 4; i++) EXPECT(nnc_tensor_free(all[i]), NNC_SUCCESS);
}

static void streams_and_threads(void) {
    nnc_stream_h s = NULL;
    nnc_signal_h sig = NULL;
    int done = -1, one = 1, n = -1, pool = -1;
    EXPECT(nnc_stream_new("cpu", &s), NNC_SUCCESS);
    EXPECT(nnc_signal_new("cpu", &sig), NNC_SUCCESS);
    EXPECT(nnc_signal_query(sig, &done), NNC_SUCCESS);                   /* never emitted */
    TRUE(done == 1);
    EXPECT(nnc_signal_wait(sig), NNC_SUCCESS);
    EXPECT(nnc_stream_add_callback(s, count_call, &one), NNC_SUCCESS);
    EXPECT(nnc_stream_emit_signal(s, sig), NNC_SUCCESS);
    EXPECT(nnc_signal_wait(sig), NNC_SUCCESS);                           /* after the callback */
    TRUE(calls == 1);
    EXPECT(nnc_signal_query(sig, &done), NNC_SUCCESS);
    TRUE(done == 1);
    EXPECT(nnc_stream_wait(s), NNC_SUCCESS);
    /* A failing callback is the stream's failure; the stream stays usable. */
    EXPECT(nnc_stream_add_callback(s, fail_call, NULL), NNC_SUCCESS);
    EXPECT(nnc_stream_add_callback(s, count_call, &one), NNC_SUCCESS);
    EXPECT(nnc_stream_wait(s), NNC_ERROR_STREAM);
    TRUE(strstr(nnc_error_message(), "returned 7") != NULL && calls == 2);
    /* Waiting for a signal on a pool thread could wait for itself: refused. */
    EXPECT(nnc_stream_add_callback(s, wait_call, sig), NNC_SUCCESS);
    EXPECT(nnc_stream_wait(s), NNC_SUCCESS);
    TRUE(wait_rc == NNC_ERROR_STREAM);
    EXPECT(nnc_stream_add_callback(s, NULL, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_stream_add_callback((nnc_stream_h)sig, count_call, &one), NNC_ERROR_HANDLE);
    EXPECT(nnc_signal_query(sig, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_signal_free(sig), NNC_SUCCESS);
    EXPECT(nnc_signal_wait(sig), NNC_ERROR_HANDLE);                      /* freed */

    /* thread settings */
    EXPECT(nnc_get_num_threads(&pool), NNC_SUCCESS);
    TRUE(pool >= 1);
    EXPECT(nnc_set_num_threads(0), NNC_ERROR_ARGUMENT);
    EXPECT(nnc_set_num_threads(1 << 30), NNC_ERROR_ARGUMENT);
    EXPECT(nnc_set_num_threads(3), NNC_SUCCESS);
    EXPECT(nnc_get_num_threads(&n), NNC_SUCCESS);
    TRUE(n == 3);
    EXPECT(nnc_set_num_threads(pool), NNC_SUCCESS);
    EXPECT(nnc_set_intra_op_threads(-1), NNC_ERROR_ARGUMENT);
    EXPECT(nnc_set_intra_op_threads(5000), NNC_ERROR_ARGUMENT);
    EXPECT(nnc_set_intra_op_threads(1), NNC_SUCCESS);
    EXPECT(nnc_get_intra_op_threads(&n), NNC_SUCCESS);
    TRUE(n == 1);
    EXPECT(nnc_set_intra_op_threads(0), NNC_SUCCESS);
    EXPECT(nnc_get_intra_op_threads(&n), NNC_SUCCESS);
    TRUE(n == 0);
    EXPECT(nnc_get_num_threads(NULL), NNC_ERROR_NULL);
    EXPECT(nnc_get_intra_op_threads(NULL), NNC_ERROR_NULL);
    EXPECT(nnc_stream_free(s), NNC_SUCCESS);
}

int main(void) {
    if (nnc_init() != NNC_SUCCESS) {
        fprintf(stderr, "%s\n", nnc_error_message());
        return 1;
    }
    graph_tools();
    tensor_helpers();
    streams_and_threads();
    printf("%d checks, %d failed\n", checks, failures);
    if (nnc_finalize() != NNC_SUCCESS) return 1;
    return failures ? 1 : 0;
}
