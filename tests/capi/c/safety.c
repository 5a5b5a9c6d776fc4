/* Bad calls into the nnc C API return error codes with a message, never crash or hang:
 * calls before nnc_init, NULL pointers, freed, foreign and mistyped handles, out-of-range
 * indices and sizes, unknown commands, bad parameters, failing backends and expressions.
 * Also: several C threads use the API at once, work queued on a freed stream still runs before
 * nnc_finalize returns, and the API refuses calls after nnc_finalize.
 * Prints one line per check; exit status 0 when all hold (tests/capi/test_capi.py runs it). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "nnc.h"
#include "expect.h"

static int fail_backend(const nnc_cmd_param_t* param, nnc_tensor_t** inputs, int input_size,
                        nnc_tensor_t** outputs, int output_size, void* context) {
    (void)param, (void)inputs, (void)input_size, (void)outputs, (void)output_size;
    (void)context;
    return NNC_INVALID;
}

/* A slow command: counts its runs (read after nnc_finalize, which joined the workers). */
static int slow_runs = 0;

static int slow_backend(const nnc_cmd_param_t* param, nnc_tensor_t** inputs, int input_size,
                        nnc_tensor_t** outputs, int output_size, void* context) {
    struct timespec pause = {0, 30 * 1000 * 1000};
    (void)param, (void)inputs, (void)input_size, (void)outputs, (void)output_size;
    (void)context;
    nanosleep(&pause, NULL);
    slow_runs++;
    return NNC_SUCCESS;
}

static int bad_expr(int64_t count, nnc_tensor_t* const* inputs, int n, const void* data) {
    (void)count, (void)inputs, (void)n, (void)data;
    return -7;
}

/* Each thread builds and runs its own graph (out = 2 * x, on its own stream) and checks that
 * its error messages are its own. */
static void* worker(void* arg) {
    float x = (float)(long)arg, y = 0;
    int64_t dim = 1;
    nnc_tensor_h tx, ty;
    nnc_cmd_h cmd;
    nnc_graph_h g;
    nnc_graph_exec_h e;
    nnc_stream_h s;
    int rc = nnc_tensor_new(&tx, &x, NNC_32F, 1, &dim);
    rc |= nnc_tensor_new(&ty, &y, NNC_32F, 1, &dim);
    rc |= nnc_cmd_new(&cmd, "SCALAR_MUL", "a=2.0");
    rc |= nnc_graph_new(&g);
    rc |= nnc_graph_exec_new(g, cmd, &tx, 1, &ty, 1, &e);
    rc |= nnc_stream_new("cpu", &s);
    for (int i = 0; i < 20 && rc == 0; i++) {
        char name[32];
        nnc_cmd_h none;
        y = 0;
        rc |= nnc_graph_run(g, s);
        rc |= nnc_stream_wait(s);
        if (y != 2 * x) rc = -1;
        /* Messages are per thread: this thread's failure, not another's, is what it reads. */
        snprintf(name, sizeof(name), "NO_SUCH_%ld_%d", (long)arg, i);
        if (nnc_cmd_new(&none, name, NULL) != NNC_ERROR_COMMAND ||
            !strstr(nnc_error_message(), name))
            rc = -1;
    }
    rc |= nnc_graph_exec_free(e) | nnc_graph_free(g) | nnc_cmd_free(cmd) | nnc_stream_free(s);
    rc |= nnc_tensor_free(tx) | nnc_tensor_free(ty);
    return (void*)(long)(rc != 0);
}

int main(void) {
    float v[4] = {1, 2, 3, 4}, w[6] = {0};
    int64_t dim = 4, dim6 = 6, dims13[13] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, count;
    int n;
    nnc_tensor_h t, u, u6, freed_tensor;
    nnc_cmd_h cmd, bad, failing, slow;
    nnc_graph_h g, other, freed_graph, body, parent;
    nnc_graph_exec_h a, b, foreign_exec, bp, c;
    nnc_stream_h s, dropped;
    nnc_signal_h sig;
    pthread_t threads[4];

    /* Before nnc_init: every function refuses. */
    EXPECT(nnc_graph_new(&g), NNC_ERROR_NOT_INITIALIZED);
    EXPECT(nnc_tensor_new(&t, v, NNC_32F, 1, &dim), NNC_ERROR_NOT_INITIALIZED);
    EXPECT(nnc_finalize(), NNC_ERROR_NOT_INITIALIZED);
    if (nnc_init() != NNC_SUCCESS) {
        fprintf(stderr, "nnc_init: %s\n", nnc_error_message());
        return 1;
    }
    EXPECT(nnc_init(), NNC_SUCCESS);  /* idempotent */

    /* NULL pointers. */
    EXPECT(nnc_graph_new(NULL), NNC_ERROR_NULL);
    EXPECT(nnc_graph_free(NULL), NNC_ERROR_NULL);
    EXPECT(nnc_graph_run(NULL, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_tensor_new(&t, NULL, NNC_32F, 1, &dim), NNC_ERROR_NULL);
    EXPECT(nnc_tensor_new(&t, v, NNC_32F, 1, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_cmd_new(&cmd, NULL, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_cmd_backend_register("EWSUM", "X", NULL, 0, 0, NNC_PRIORITY_DEFAULT),
           NNC_ERROR_NULL);
    EXPECT(nnc_tensor_get(NULL, NULL), NNC_ERROR_NULL);

    /* Bad values. */
    EXPECT(nnc_tensor_new(&t, v, 12345, 1, &dim), NNC_ERROR_ARGUMENT);
    EXPECT(nnc_tensor_new(&t, (char*)v + 1, NNC_32F, 1, &dim), NNC_ERROR_TENSOR);  /* misaligned */
    EXPECT(nnc_tensor_new(&t, v, NNC_32F, 13, dims13), NNC_ERROR_INDEX);
    EXPECT(nnc_tensor_new(&t, v, NNC_32F, -1, &dim), NNC_ERROR_INDEX);
    EXPECT(nnc_cmd_new(&cmd, "NO_SUCH_COMMAND", NULL), NNC_ERROR_COMMAND);
    EXPECT(nnc_cmd_new(&cmd, "SCALAR_MUL", "a=__import__('os').getpid()"), NNC_ERROR_ARGUMENT);
    EXPECT(nnc_cmd_new(&cmd, "SCALAR_MUL", "a=1), (b"), NNC_ERROR_ARGUMENT);
    EXPECT(nnc_cmd_new(&cmd, "SCALAR_MUL", "backend='NO_SUCH'"), NNC_ERROR_COMMAND);
    EXPECT(nnc_stream_new("tpu", &s), NNC_ERROR_ARGUMENT);
    EXPECT(nnc_cmd_register("SAFETY_CMD", "sometimes"), NNC_ERROR_COMMAND);
    EXPECT(nnc_cmd_backend_register("NO_SUCH_COMMAND", "X", fail_backend, 0, 0, -1),
           NNC_ERROR_COMMAND);

    /* Every datatype wraps without a copy; views alias with element offsets and strides. */
    {
        static const int types[6] = {NNC_8U, NNC_32S, NNC_32F, NNC_64S, NNC_64F, NNC_16F};
        static const int sizes[6] = {1, 4, 4, 8, 8, 2};
        static double memory[6];  /* 48 bytes, aligned for every type */
        const int64_t dims23[2] = {2, 3}, dims2[1] = {2}, step[1] = {3};
        /* (3 - 1) * 2**61 elements wraps to 0 bytes, as does a count of 2**32 * 2**32. */
        const int64_t dims3[1] = {3}, huge[2] = {INT64_C(1) << 61, -(INT64_C(1) << 61)};
        const int64_t dims_huge[2] = {INT64_C(1) << 32, INT64_C(1) << 32};
        nnc_tensor_t view;
        nnc_tensor_h base, column;
        for (int k = 0; k < 6; k++) {
            EXPECT(nnc_tensor_new(&base, memory, types[k], 2, dims23), NNC_SUCCESS);
            EXPECT(nnc_tensor_get(base, &view), NNC_SUCCESS);
            EXPECT(view.data == (void*)memory && view.datatype == types[k] &&
                   view.itemsize == sizes[k] && view.ndim == 2 && view.dim[1] == 3 &&
                   view.stride[0] == 3 && view.count == 6 && view.contiguous && view.device == -1
                   ? NNC_SUCCESS : NNC_ERROR_UNKNOWN, NNC_SUCCESS);
            EXPECT(nnc_tensor_view_new(&column, base, 1, dims2, 1, step), NNC_SUCCESS);
            EXPECT(nnc_tensor_get(column, &view), NNC_SUCCESS);
            EXPECT(view.data == (char*)memory + sizes[k] && view.stride[0] == 3 &&
                   !view.contiguous ? NNC_SUCCESS : NNC_ERROR_UNKNOWN, NNC_SUCCESS);
            EXPECT(nnc_tensor_free(column), NNC_SUCCESS);
            EXPECT(nnc_tensor_view_new(&column, base, 1, dims2, 5, step), NNC_ERROR_TENSOR);
            /* Extents that wrap 64-bit arithmetic: refused, never a view to write through. */
            EXPECT(nnc_tensor_view_new(&column, base, 1, dims3, 0, huge), NNC_ERROR_TENSOR);
            EXPECT(nnc_tensor_view_new(&column, base, 1, dims3, 0, huge + 1), NNC_ERROR_TENSOR);
            EXPECT(nnc_tensor_view_new(&column, base, 1, dims2, INT64_C(1) << 62, NULL),
                   NNC_ERROR_TENSOR);
            EXPECT(nnc_tensor_view_new(&column, base, 2, dims_huge, 0, NULL), NNC_ERROR_TENSOR);
            EXPECT(nnc_tensor_free(base), NNC_SUCCESS);
        }
        EXPECT(nnc_tensor_new(&base, memory, NNC_32F, 0, NULL), NNC_SUCCESS);  /* a scalar */
        EXPECT(nnc_tensor_get(base, &view), NNC_SUCCESS);
        EXPECT(view.ndim == 0 && view.count == 1 ? NNC_SUCCESS : NNC_ERROR_UNKNOWN, NNC_SUCCESS);
        EXPECT(nnc_tensor_view_new(&column, base, 1, NULL, 0, NULL), NNC_ERROR_NULL);
        EXPECT(nnc_tensor_free(base), NNC_SUCCESS);
    }

    /* Handles: freed, foreign, of another type. */
    EXPECT(nnc_tensor_new(&t, v, NNC_32F, 1, &dim), NNC_SUCCESS);
    EXPECT(nnc_tensor_new(&u, w, NNC_32F, 1, &dim), NNC_SUCCESS);
    EXPECT(nnc_tensor_new(&u6, w, NNC_32F, 1, &dim6), NNC_SUCCESS);
    EXPECT(nnc_tensor_new(&freed_tensor, v, NNC_32F, 1, &dim), NNC_SUCCESS);
    EXPECT(nnc_tensor_free(freed_tensor), NNC_SUCCESS);
    EXPECT(nnc_tensor_free(freed_tensor), NNC_ERROR_HANDLE);
    EXPECT(nnc_graph_new(&freed_graph), NNC_SUCCESS);
    EXPECT(nnc_graph_free(freed_graph), NNC_SUCCESS);
    EXPECT(nnc_graph_run(freed_graph, NULL), NNC_ERROR_HANDLE);
    EXPECT(nnc_graph_new(&g), NNC_SUCCESS);  /* may reuse freed_graph's slot */
    EXPECT(nnc_graph_run(freed_graph, NULL), NNC_ERROR_HANDLE);
    EXPECT(nnc_graph_run((nnc_graph_h)(uintptr_t)0x1234567, NULL), NNC_ERROR_HANDLE);
    EXPECT(nnc_graph_run((nnc_graph_h)(void*)&n, NULL), NNC_ERROR_HANDLE);
    EXPECT(nnc_graph_run((nnc_graph_h)(void*)t, NULL), NNC_ERROR_HANDLE);
    EXPECT(nnc_cmd_new(&cmd, "EWSUM", NULL), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_new(g, cmd, (nnc_tensor_h[]){t, freed_tensor}, 2, &u, 1, &a),
           NNC_ERROR_HANDLE);
    EXPECT(nnc_graph_exec_new(g, cmd, &t, -1, &u, 1, &a), NNC_ERROR_INDEX);
    EXPECT(nnc_graph_exec_new(g, cmd, NULL, 2, &u, 1, &a), NNC_ERROR_NULL);

    /* Graph errors: shapes, indices, another graph's node, cycles. */
    EXPECT(nnc_graph_exec_new(g, cmd, (nnc_tensor_h[]){t, t}, 2, &u6, 1, &a), NNC_ERROR_COMMAND);
    EXPECT(nnc_graph_exec_new(g, cmd, (nnc_tensor_h[]){t, t}, 2, &u, 1, &a), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_new(g, cmd, (nnc_tensor_h[]){u, t}, 2, &u, 1, &b), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_count(g, &n), NNC_SUCCESS);
    EXPECT(n == 2 ? NNC_SUCCESS : NNC_ERROR_UNKNOWN, NNC_SUCCESS);
    EXPECT(nnc_graph_exec_get(g, 1, &c), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_concat(g, c, b), NNC_ERROR_GRAPH);  /* b -> b: a self-loop */
    EXPECT(nnc_graph_exec_free(c), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_free(c), NNC_ERROR_HANDLE);
    EXPECT(nnc_graph_exec_get(g, 2, &c), NNC_ERROR_INDEX);
    EXPECT(nnc_graph_exec_get(g, -1, &c), NNC_ERROR_INDEX);
    EXPECT(nnc_graph_new(&other), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_new(other, cmd, (nnc_tensor_h[]){t, t}, 2, &u, 1, &foreign_exec),
           NNC_SUCCESS);
    EXPECT(nnc_graph_exec_concat(g, a, foreign_exec), NNC_ERROR_GRAPH);
    EXPECT(nnc_graph_exec_concat(g, a, (nnc_graph_exec_h)(void*)cmd), NNC_ERROR_HANDLE);
    EXPECT(nnc_graph_exec_concat(g, a, b), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_concat(g, b, a), NNC_SUCCESS);
    EXPECT(nnc_graph_run(g, NULL), NNC_ERROR_GRAPH);
    EXPECT(nnc_graph_exec_disjoin(g, b, a), NNC_SUCCESS);
    EXPECT(nnc_graph_run(g, NULL), NNC_SUCCESS);
    EXPECT(w[0] == 3 ? NNC_SUCCESS : NNC_ERROR_UNKNOWN, NNC_SUCCESS);  /* (1+1)+1 */
    EXPECT(nnc_graph_schedule_info(g, &n, NULL), NNC_ERROR_SCHEDULE);
    EXPECT(nnc_graph_static_schedule(g, "cpu", -3), NNC_ERROR_SCHEDULE);
    EXPECT(nnc_graph_set_sources(g, &b, 1), NNC_SUCCESS);
    EXPECT(nnc_graph_set_destinations(g, &a, 1), NNC_SUCCESS);
    EXPECT(nnc_graph_run(g, NULL), NNC_ERROR_GRAPH);  /* a is not reachable from b */
    EXPECT(nnc_graph_set_sources(g, NULL, 0), NNC_SUCCESS);
    EXPECT(nnc_graph_set_destinations(g, NULL, 0), NNC_SUCCESS);

    /* A failing C backend on a stream: the wait reports it, the stream stays usable. */
    EXPECT(nnc_cmd_register("SAFETY_FAIL", "any"), NNC_SUCCESS);
    EXPECT(nnc_cmd_backend_register("SAFETY_FAIL", "CPU_C", fail_backend, 0, 0, -1),
           NNC_SUCCESS);
    EXPECT(nnc_cmd_new(&failing, "SAFETY_FAIL", NULL), NNC_SUCCESS);
    EXPECT(nnc_stream_new(NULL, &s), NNC_SUCCESS);
    EXPECT(nnc_cmd_exec(failing, &t, 1, &u, 1, NULL), NNC_ERROR_COMMAND);
    EXPECT(nnc_cmd_exec(failing, &t, 1, &u, 1, s), NNC_SUCCESS);
    EXPECT(nnc_stream_wait(s), NNC_ERROR_STREAM);
    EXPECT(nnc_stream_wait(s), NNC_SUCCESS);
    EXPECT(nnc_signal_new(NULL, &sig), NNC_SUCCESS);
    EXPECT(nnc_stream_wait_signal(s, sig), NNC_SUCCESS);  /* never emitted: no wait */
    EXPECT(nnc_stream_emit_signal(s, sig), NNC_SUCCESS);
    EXPECT(nnc_stream_wait_signal((nnc_stream_h)(void*)sig, sig), NNC_ERROR_HANDLE);
    EXPECT(nnc_stream_query(s, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_stream_query(s, &n), NNC_SUCCESS);
    EXPECT(nnc_graph_run(g, s), NNC_SUCCESS);
    EXPECT(nnc_stream_wait(s), NNC_SUCCESS);

    /* A while expression that fails, and case..of misuse. */
    EXPECT(nnc_graph_new(&body), NNC_SUCCESS);
    EXPECT(nnc_graph_new(&parent), NNC_SUCCESS);
    EXPECT(nnc_cmd_new(&bad, "NOOP", NULL), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_new(body, bad, NULL, 0, NULL, 0, &bp), NNC_SUCCESS);
    EXPECT(nnc_graph_while_new(parent, body, &c), NNC_SUCCESS);
    EXPECT(nnc_graph_run(parent, NULL), NNC_ERROR_GRAPH);  /* no expression yet */
    EXPECT(nnc_graph_set_while_expr(body, NULL, NULL, NULL, 0, &bp, 1), NNC_ERROR_NULL);
    EXPECT(nnc_graph_set_while_expr(body, bad_expr, NULL, NULL, 0, &a, 1), NNC_ERROR_GRAPH);
    EXPECT(nnc_graph_set_while_expr(body, bad_expr, NULL, NULL, 0, &bp, 1), NNC_SUCCESS);
    EXPECT(nnc_graph_run(parent, NULL), NNC_ERROR_GRAPH);
    EXPECT(nnc_graph_run(parent, s), NNC_SUCCESS);
    EXPECT(nnc_stream_wait(s), NNC_ERROR_STREAM);
    EXPECT(nnc_graph_while_count(body, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_graph_while_count(body, &count), NNC_SUCCESS);
    EXPECT(nnc_graph_set_case_of(parent, c, body, 0), NNC_ERROR_GRAPH);  /* c is a while */
    EXPECT(nnc_graph_case_of_new(g, &t, 1, &t, 1, &c), NNC_SUCCESS);
    EXPECT(nnc_graph_set_case_of(g, c, other, -1), NNC_ERROR_INDEX);
    EXPECT(nnc_graph_set_case_of_expr(g, c, NULL, NULL, 0), NNC_ERROR_NULL);

    /* Four C threads build, run and free their own graphs at once. */
    for (long i = 0; i < 4; i++) pthread_create(&threads[i], NULL, worker, (void*)(i + 1));
    for (int i = 0; i < 4; i++) {
        void* r;
        pthread_join(threads[i], &r);
        EXPECT((int)(long)r, 0);
    }

    /* Work queued on a stream whose handle is freed still runs before nnc_finalize returns. */
    EXPECT(nnc_cmd_register("SAFETY_SLOW", "any"), NNC_SUCCESS);
    EXPECT(nnc_cmd_backend_register("SAFETY_SLOW", "CPU_C", slow_backend, 0, 0, -1),
           NNC_SUCCESS);
    EXPECT(nnc_cmd_new(&slow, "SAFETY_SLOW", NULL), NNC_SUCCESS);
    EXPECT(nnc_stream_new(NULL, &dropped), NNC_SUCCESS);
    for (int i = 0; i < 3; i++) EXPECT(nnc_cmd_exec(slow, &t, 1, &u, 1, dropped), NNC_SUCCESS);
    EXPECT(nnc_stream_free(dropped), NNC_SUCCESS);

    EXPECT(nnc_finalize(), NNC_SUCCESS);
    EXPECT(slow_runs == 3 ? NNC_SUCCESS : NNC_ERROR_UNKNOWN, NNC_SUCCESS);
    EXPECT(nnc_graph_new(&g), NNC_ERROR_NOT_INITIALIZED);
    EXPECT(nnc_init(), NNC_ERROR_NOT_INITIALIZED);  /* Python cannot start twice */
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 2 : 0;
}
