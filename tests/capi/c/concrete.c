/* The C API's node re-pointing, multiviews, backends with a user context, the dependency engine
 * and GPU stream kinds: what each does, and every kind of bad call refused with its code and a
 * message (NULL, freed, mistyped and foreign handles, bad sizes, a node of another graph, shape
 * and layout mismatches, a graph running on a stream, engine misuse, a failing engine op).
 * Prints one line per check and "gpu stream: <rc>"; exit status 0 when all hold
 * (tests/capi/test_capi.py runs it). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "nnc.h"
#include "expect.h"

/* A condition that must hold. */
#define TRUE(cond)                                                                        \
    do {                                                                                  \
        checks++;                                                                         \
        if (!(cond)) failures++;                                                          \
        printf("%s %s\n", (cond) ? "ok  " : "FAIL", #cond);                               \
    } while (0)

static int scalar(float* value, nnc_tensor_h* out) {
    int64_t dim = 1;
    return nnc_tensor_new(out, value, NNC_32F, 1, &dim);
}

static int node(nnc_graph_h graph, const char* name, nnc_tensor_h* inputs, int input_size,
                nnc_tensor_h* outputs, int output_size, nnc_graph_exec_h* out) {
    nnc_cmd_h cmd;
    int rc = nnc_cmd_new(&cmd, name, NULL);
    if (rc != NNC_SUCCESS) return rc;
    rc = nnc_graph_exec_new(graph, cmd, inputs, input_size, outputs, output_size, out);
    nnc_cmd_free(cmd);
    return rc;
}

/* A backend that sleeps 50 ms: keeps a graph running on a stream while the host calls. */
static int slow_backend(const nnc_cmd_param_t* param, nnc_tensor_t** inputs, int input_size,
                        nnc_tensor_t** outputs, int output_size, void* context) {
    struct timespec pause = {0, 50 * 1000 * 1000};
    (void)param, (void)inputs, (void)input_size, (void)outputs, (void)output_size;
    (void)context;
    nanosleep(&pause, NULL);
    return NNC_SUCCESS;
}

static void set_io(void) {
    float a = 2, b = 3, c = 0, d = 0, e = 7;
    int64_t dim2 = 2;
    float pair[2] = {0, 0};
    nnc_tensor_h ta, tb, tc, td, te, t2;
    nnc_graph_h g, other, body;
    nnc_graph_exec_h prod, foreign, loop, slow, stale;
    nnc_cmd_h slow_cmd;
    nnc_stream_h s;
    scalar(&a, &ta), scalar(&b, &tb), scalar(&c, &tc), scalar(&d, &td), scalar(&e, &te);
    nnc_tensor_new(&t2, pair, NNC_32F, 1, &dim2);
    nnc_graph_new(&g), nnc_graph_new(&other), nnc_graph_new(&body);
    EXPECT(node(g, "EWPROD", (nnc_tensor_h[]){ta, tb}, 2, &tc, 1, &prod), NNC_SUCCESS);
    EXPECT(node(other, "EWSUM", (nnc_tensor_h[]){ta, tb}, 2, &td, 1, &foreign), NNC_SUCCESS);
    EXPECT(nnc_graph_static_schedule(g, "cpu", 0), NNC_SUCCESS);
    /* Re-pointed after the schedule was built: the run uses the new tensors (the default
     * schedule is rebuilt for the changed graph). */
    EXPECT(nnc_graph_exec_set_io(g, prod, (nnc_tensor_h[]){te, tb}, 2, &td, 1), NNC_SUCCESS);
    EXPECT(nnc_stream_new("cpu", &s), NNC_SUCCESS);
    EXPECT(nnc_graph_run(g, s), NNC_SUCCESS);
    EXPECT(nnc_stream_wait(s), NNC_SUCCESS);
    TRUE(d == 21 && c == 0);
    /* Misuse. */
    EXPECT(nnc_graph_exec_set_io(NULL, prod, &ta, 1, &tc, 1), NNC_ERROR_NULL);
    EXPECT(nnc_graph_exec_set_io(g, NULL, &ta, 1, &tc, 1), NNC_ERROR_NULL);
    EXPECT(nnc_graph_exec_set_io(g, foreign, (nnc_tensor_h[]){ta, tb}, 2, &tc, 1),
           NNC_ERROR_GRAPH);
    EXPECT(nnc_graph_exec_set_io(g, (nnc_graph_exec_h)ta, &ta, 1, &tc, 1), NNC_ERROR_HANDLE);
    EXPECT(nnc_graph_exec_set_io(g, prod, &ta, -1, &tc, 1), NNC_ERROR_INDEX);
    EXPECT(nnc_graph_exec_set_io(g, prod, NULL, 2, &tc, 1), NNC_ERROR_NULL);
    EXPECT(nnc_graph_exec_set_io(g, prod, (nnc_tensor_h[]){ta, tb}, 2, &t2, 1),
           NNC_ERROR_COMMAND);  /* [1] * [1] -> [2]: the shape check */
    EXPECT(nnc_graph_exec_set_io(g, prod, (nnc_tensor_h[]){ta, (nnc_tensor_h)g}, 2, &tc, 1),
           NNC_ERROR_HANDLE);
    /* The node is as it was before the refusals: 7 * 3 again, into d. */
    d = 0;
    EXPECT(nnc_graph_run(g, NULL), NNC_SUCCESS);
    TRUE(d == 21);
    /* A while node's tensors are the loop's: fixed. */
    EXPECT(nnc_graph_while_new(g, body, &loop), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_set_io(g, loop, &ta, 1, &tc, 1), NNC_ERROR_GRAPH);
    EXPECT(nnc_graph_exec_free(loop), NNC_SUCCESS);
    EXPECT(nnc_graph_free(g), NNC_SUCCESS);
    EXPECT(nnc_graph_new(&g), NNC_SUCCESS);
    /* A graph running on a stream cannot be changed: NNC_ERROR_GRAPH, then fine once done. */
    EXPECT(nnc_cmd_register("CAPI_SLOW", "any"), NNC_SUCCESS);
    EXPECT(nnc_cmd_backend_register("CAPI_SLOW", "CPU_C", slow_backend, 0, 0,
                                    NNC_PRIORITY_DEFAULT), NNC_SUCCESS);
    EXPECT(nnc_cmd_new(&slow_cmd, "CAPI_SLOW", NULL), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_new(g, slow_cmd, NULL, 0, NULL, 0, &slow), NNC_SUCCESS);
    EXPECT(node(g, "EWPROD", (nnc_tensor_h[]){ta, tb}, 2, &tc, 1, &stale), NNC_SUCCESS);
    EXPECT(nnc_graph_run(g, s), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_set_io(g, stale, (nnc_tensor_h[]){te, tb}, 2, &tc, 1),
           NNC_ERROR_GRAPH);
    EXPECT(nnc_stream_wait(s), NNC_SUCCESS);
    TRUE(c == 6);
    EXPECT(nnc_graph_exec_set_io(g, stale, (nnc_tensor_h[]){te, tb}, 2, &tc, 1), NNC_SUCCESS);
    EXPECT(nnc_graph_run(g, NULL), NNC_SUCCESS);
    TRUE(c == 21);
    EXPECT(nnc_graph_exec_free(stale), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_set_io(g, stale, &ta, 1, &tc, 1), NNC_ERROR_HANDLE);  /* freed */
    nnc_graph_exec_free(slow), nnc_cmd_free(slow_cmd);
    nnc_graph_exec_free(prod), nnc_graph_exec_free(foreign);
    nnc_graph_free(g), nnc_graph_free(other), nnc_graph_free(body);
    nnc_tensor_free(ta), nnc_tensor_free(tb), nnc_tensor_free(tc), nnc_tensor_free(td);
    nnc_tensor_free(te), nnc_tensor_free(t2);
    nnc_stream_free(s);
}

static void multiview(void) {
    float x = 1, y = 2, w = 5;
    double f64 = 0;
    int64_t dim = 1, dim2 = 2;
    float pair[2] = {0, 0};
    int kind = -1, n = -1, current = -1;
    nnc_tensor_h tx, ty, tw, tf, t2, mv, phi, v1, follower;
    nnc_tensor_t view, version;
    nnc_graph_h body;
    scalar(&x, &tx), scalar(&y, &ty), scalar(&w, &tw);
    nnc_tensor_new(&tf, &f64, NNC_64F, 1, &dim);
    nnc_tensor_new(&t2, pair, NNC_32F, 1, &dim2);
    nnc_graph_new(&body);
    EXPECT(nnc_tensor_multiview_new(&mv, (nnc_tensor_h[]){tx, ty}, 2, NNC_MULTIVIEW_K1N, body),
           NNC_SUCCESS);
    EXPECT(nnc_tensor_multiview_info(mv, &kind, &n, &current), NNC_SUCCESS);
    TRUE(kind == NNC_MULTIVIEW_K1N && n == 2 && current == 0);
    EXPECT(nnc_tensor_multiview_info(mv, NULL, NULL, NULL), NNC_SUCCESS);
    EXPECT(nnc_tensor_get(mv, &view), NNC_SUCCESS);  /* a multiview is a tensor */
    TRUE(view.data == (void*)&x && view.ndim == 1);
    EXPECT(nnc_tensor_multiview_version(mv, 1, &v1), NNC_SUCCESS);
    EXPECT(nnc_tensor_get(v1, &version), NNC_SUCCESS);
    TRUE(version.data == (void*)&y);
    EXPECT(nnc_tensor_multiview_new(&phi, (nnc_tensor_h[]){tx, ty}, 2, NNC_MULTIVIEW_PHI, NULL),
           NNC_SUCCESS);
    /* A tensor synchronised to the multiview aliases its current version. */
    EXPECT(scalar(&w, &follower), NNC_SUCCESS);
    EXPECT(nnc_tensor_synchronize_to_multiview(mv, follower), NNC_SUCCESS);
    EXPECT(nnc_tensor_get(follower, &view), NNC_SUCCESS);
    TRUE(view.data == (void*)&x);
    /* Misuse. */
    EXPECT(nnc_tensor_multiview_new(NULL, (nnc_tensor_h[]){tx, ty}, 2, NNC_MULTIVIEW_K0N, body),
           NNC_ERROR_NULL);
    EXPECT(nnc_tensor_multiview_new(&v1, NULL, 2, NNC_MULTIVIEW_K0N, body), NNC_ERROR_NULL);
    EXPECT(nnc_tensor_multiview_new(&v1, (nnc_tensor_h[]){tx, NULL}, 2, NNC_MULTIVIEW_K0N,
                                    body), NNC_ERROR_NULL);
    EXPECT(nnc_tensor_multiview_new(&v1, (nnc_tensor_h[]){tx, ty}, -2, NNC_MULTIVIEW_K0N, body),
           NNC_ERROR_INDEX);
    EXPECT(nnc_tensor_multiview_new(&v1, (nnc_tensor_h[]){tx, ty}, 2, 7, body),
           NNC_ERROR_ARGUMENT);
    EXPECT(nnc_tensor_multiview_new(&v1, (nnc_tensor_h[]){tx}, 1, NNC_MULTIVIEW_K1N, body),
           NNC_ERROR_TENSOR);  /* K1N needs two versions */
    EXPECT(nnc_tensor_multiview_new(&v1, (nnc_tensor_h[]){tx, t2}, 2, NNC_MULTIVIEW_K0N, body),
           NNC_ERROR_TENSOR);  /* shapes differ */
    EXPECT(nnc_tensor_multiview_new(&v1, (nnc_tensor_h[]){tx, tf}, 2, NNC_MULTIVIEW_K0N, body),
           NNC_ERROR_TENSOR);  /* datatypes differ */
    EXPECT(nnc_tensor_multiview_new(&v1, (nnc_tensor_h[]){tx, ty}, 2, NNC_MULTIVIEW_K0N, NULL),
           NNC_ERROR_TENSOR);  /* K0N needs its loop body */
    EXPECT(nnc_tensor_multiview_new(&v1, (nnc_tensor_h[]){tx, ty}, 2, NNC_MULTIVIEW_PHI, body),
           NNC_ERROR_TENSOR);  /* PHI has none */
    EXPECT(nnc_tensor_multiview_new(&v1, (nnc_tensor_h[]){tx, ty}, 2, NNC_MULTIVIEW_K0N,
                                    (nnc_graph_h)tx), NNC_ERROR_HANDLE);
    EXPECT(nnc_tensor_multiview_new(&v1, (nnc_tensor_h[]){tx, mv}, 2, NNC_MULTIVIEW_K0N, body),
           NNC_ERROR_TENSOR);  /* no multiview of multiviews */
    EXPECT(nnc_tensor_multiview_info(tx, &kind, NULL, NULL), NNC_ERROR_HANDLE);
    EXPECT(nnc_tensor_multiview_info(NULL, &kind, NULL, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_tensor_multiview_version(mv, 2, &v1), NNC_ERROR_INDEX);
    EXPECT(nnc_tensor_multiview_version(mv, -1, &v1), NNC_ERROR_INDEX);
    EXPECT(nnc_tensor_multiview_version(mv, 0, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_tensor_synchronize_to_multiview(tx, follower), NNC_ERROR_HANDLE);
    EXPECT(nnc_tensor_synchronize_to_multiview(mv, t2), NNC_ERROR_TENSOR);
    EXPECT(nnc_tensor_synchronize_to_multiview(mv, phi), NNC_ERROR_TENSOR);
    EXPECT(nnc_tensor_synchronize_to_multiview(mv, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_tensor_multiview_free(tx), NNC_ERROR_HANDLE);  /* a plain tensor's handle */
    EXPECT(nnc_tensor_multiview_free(mv), NNC_SUCCESS);
    EXPECT(nnc_tensor_multiview_free(mv), NNC_ERROR_HANDLE);  /* freed */
    EXPECT(nnc_tensor_multiview_info(mv, &kind, NULL, NULL), NNC_ERROR_HANDLE);
    EXPECT(nnc_tensor_free(phi), NNC_SUCCESS);  /* a multiview handle is a tensor handle too */
    nnc_tensor_free(v1), nnc_tensor_free(follower);
    nnc_tensor_free(tx), nnc_tensor_free(ty), nnc_tensor_free(tw), nnc_tensor_free(tf);
    nnc_tensor_free(t2), nnc_graph_free(body);
}

/* out = in + *(float*)user: each registration's user pointer reaches its backend. */
static int add_user(const nnc_cmd_param_t* param, nnc_tensor_t** inputs, int input_size,
                    nnc_tensor_t** outputs, int output_size, void* context, void* user) {
    (void)param, (void)context;
    if (input_size != 1 || output_size != 1 || !inputs[0] || !outputs[0] || !user)
        return NNC_INVALID;
    *(float*)outputs[0]->data = *(float*)inputs[0]->data + *(const float*)user;
    return NNC_SUCCESS;
}

static void backend_context(void) {
    float ten = 10, hundred = 100, x = 1, y = 0;
    nnc_tensor_h tx, ty;
    nnc_cmd_h ten_cmd, hundred_cmd;
    nnc_stream_h s;
    scalar(&x, &tx), scalar(&y, &ty);
    EXPECT(nnc_cmd_register("CAPI_ADD_USER", "none"), NNC_SUCCESS);
    EXPECT(nnc_cmd_backend_register_ctx("CAPI_ADD_USER", "TEN", add_user, &ten, 0, 0, 30),
           NNC_SUCCESS);
    EXPECT(nnc_cmd_backend_register_ctx("CAPI_ADD_USER", "HUNDRED", add_user, &hundred, 0, 0,
                                        NNC_PRIORITY_DEFAULT), NNC_SUCCESS);
    /* The same registration again changes nothing; another user pointer is refused. */
    EXPECT(nnc_cmd_backend_register_ctx("CAPI_ADD_USER", "TEN", add_user, &ten, 0, 0, 30),
           NNC_SUCCESS);
    EXPECT(nnc_cmd_backend_register_ctx("CAPI_ADD_USER", "TEN", add_user, &hundred, 0, 0, 30),
           NNC_ERROR_COMMAND);
    EXPECT(nnc_cmd_new(&ten_cmd, "CAPI_ADD_USER", NULL), NNC_SUCCESS);  /* TEN: priority 30 */
    EXPECT(nnc_cmd_new(&hundred_cmd, "CAPI_ADD_USER", "backend='HUNDRED'"), NNC_SUCCESS);
    EXPECT(nnc_cmd_exec(ten_cmd, &tx, 1, &ty, 1, NULL), NNC_SUCCESS);
    TRUE(y == 11);
    EXPECT(nnc_stream_new("cpu", &s), NNC_SUCCESS);
    EXPECT(nnc_cmd_exec(hundred_cmd, &tx, 1, &ty, 1, s), NNC_SUCCESS);
    EXPECT(nnc_stream_wait(s), NNC_SUCCESS);
    TRUE(y == 101);
    EXPECT(nnc_cmd_exec(hundred_cmd, &tx, 1, NULL, 0, NULL), NNC_ERROR_COMMAND);  /* INVALID */
    /* Misuse. */
    EXPECT(nnc_cmd_backend_register_ctx("CAPI_ADD_USER", "NULLFN", NULL, &ten, 0, 0, 1),
           NNC_ERROR_NULL);
    EXPECT(nnc_cmd_backend_register_ctx(NULL, "X", add_user, &ten, 0, 0, 1), NNC_ERROR_NULL);
    EXPECT(nnc_cmd_backend_register_ctx("CAPI_NO_SUCH", "X", add_user, &ten, 0, 0, 1),
           NNC_ERROR_COMMAND);
    EXPECT(nnc_cmd_backend_register_ctx("CAPI_ADD_USER", "X", add_user, &ten, 0, 0x80, 1),
           NNC_ERROR_ARGUMENT);
    EXPECT(nnc_cmd_backend_register_ctx("CAPI_ADD_USER", "X", add_user, &ten, 0, 0, -5),
           NNC_ERROR_ARGUMENT);
    nnc_cmd_free(ten_cmd), nnc_cmd_free(hundred_cmd), nnc_stream_free(s);
    nnc_tensor_free(tx), nnc_tensor_free(ty);
}

static int increment(void* arg) {
    ++*(long*)arg;
    return 0;
}

static int fail_with_3(void* arg) {
    (void)arg;
    return 3;
}

/* A slow write and a read of what it wrote: the reader sees 1 only if it ran after the
 * writer (the 2 ms nap makes running them out of order all but certain). */
static long written = 0, seen = -1;

static int slow_write(void* arg) {
    struct timespec nap = {0, 2000000};
    (void)arg;
    nanosleep(&nap, NULL);
    written = 1;
    return 0;
}

static int read_written(void* arg) {
    (void)arg;
    seen = written;
    return 0;
}

/* Pushes naming many vars: up to 32 the handles are looked up in C, beyond through the
 * general path; the dependencies and the checks are the same either way. */
static void engine_wide(nnc_engine_h e) {
    enum { WIDE = 40 };
    nnc_engine_var_h vars[WIDE], twice[WIDE + 1];
    int i, n;
    for (i = 0; i < WIDE; i++) EXPECT(nnc_engine_var_new(e, &vars[i]), NNC_SUCCESS);
    for (n = 8; n <= WIDE; n += WIDE - 8) {
        printf("-- %d vars\n", n);
        /* read after write through the last var mutated */
        written = 0, seen = -1;
        EXPECT(nnc_engine_push(e, slow_write, NULL, NULL, 0, vars, n), NNC_SUCCESS);
        EXPECT(nnc_engine_push(e, read_written, NULL, &vars[n - 1], 1, NULL, 0), NNC_SUCCESS);
        EXPECT(nnc_engine_wait_all(e), NNC_SUCCESS);
        TRUE(seen == 1);
        /* write after read: the writer waits for a reader of every var */
        written = 0, seen = -1;
        EXPECT(nnc_engine_push(e, slow_write, NULL, NULL, 0, &vars[n - 1], 1), NNC_SUCCESS);
        EXPECT(nnc_engine_push(e, read_written, NULL, vars, n, NULL, 0), NNC_SUCCESS);
        EXPECT(nnc_engine_push(e, increment, &written, NULL, 0, vars, n), NNC_SUCCESS);
        EXPECT(nnc_engine_wait_all(e), NNC_SUCCESS);
        TRUE(seen == 1 && written == 2);
        /* the same var twice, the last entry: refused whole, nothing runs */
        memcpy(twice, vars, sizeof(vars[0]) * n);
        twice[n] = vars[0];
        EXPECT(nnc_engine_push(e, increment, &written, NULL, 0, twice, n + 1), NNC_ERROR_ENGINE);
        TRUE(strstr(nnc_error_message(), "appears twice in mutate") != NULL);
        EXPECT(nnc_engine_push(e, increment, &written, vars, n, &twice[n], 1), NNC_ERROR_ENGINE);
        TRUE(strstr(nnc_error_message(), "in both read and mutate") != NULL);
        EXPECT(nnc_engine_wait_all(e), NNC_SUCCESS);
        TRUE(written == 2);
    }
    for (i = 0; i < WIDE; i++) EXPECT(nnc_engine_var_free(vars[i]), NNC_SUCCESS);
}

/* Incremented by ops still queued when nnc_finalize runs (read after it). */
static long late = 0;

static void engine(int naive) {
    enum { N = 2000 };
    long counter = 0, skipped = 0, after = 0;
    int i;
    nnc_engine_h e, e2;
    nnc_engine_var_h v, w, u, foreign;
    printf("-- engine, naive=%d\n", naive);
    EXPECT(nnc_engine_new(&e, naive), NNC_SUCCESS);
    EXPECT(nnc_engine_new(&e2, 0), NNC_SUCCESS);
    EXPECT(nnc_engine_var_new(e, &v), NNC_SUCCESS);
    EXPECT(nnc_engine_var_new(e, &w), NNC_SUCCESS);
    EXPECT(nnc_engine_var_new(e, &u), NNC_SUCCESS);
    EXPECT(nnc_engine_var_new(e2, &foreign), NNC_SUCCESS);
    /* N increments mutating v run one after another: the counter sees every one. */
    for (i = 0; i < N; i++) {
        int rc = nnc_engine_push(e, increment, &counter, NULL, 0, &v, 1);
        if (rc != NNC_SUCCESS) {
            EXPECT(rc, NNC_SUCCESS);
            break;
        }
    }
    EXPECT(nnc_engine_wait_for_var(e, v), NNC_SUCCESS);
    TRUE(counter == N);
    /* A failing op: its mutated var carries the error, an op reading it is skipped, one that
     * only mutates it runs and clears it; wait_all reports the first error once. */
    EXPECT(nnc_engine_push(e, fail_with_3, NULL, NULL, 0, &w, 1), NNC_SUCCESS);
    EXPECT(nnc_engine_push(e, increment, &skipped, &w, 1, &u, 1), NNC_SUCCESS);
    EXPECT(nnc_engine_wait_for_var(e, w), NNC_ERROR_ENGINE);
    TRUE(strstr(nnc_error_message(), "returned 3") != NULL);
    EXPECT(nnc_engine_wait_for_var(e, u), NNC_ERROR_ENGINE);  /* the error propagated */
    TRUE(skipped == 0);
    EXPECT(nnc_engine_wait_all(e), NNC_ERROR_ENGINE);
    EXPECT(nnc_engine_wait_all(e), NNC_SUCCESS);
    EXPECT(nnc_engine_push(e, increment, &after, NULL, 0, &w, 1), NNC_SUCCESS);
    EXPECT(nnc_engine_wait_for_var(e, w), NNC_SUCCESS);
    TRUE(after == 1);
    /* Misuse: refused before anything is pushed. */
    EXPECT(nnc_engine_push(NULL, increment, &after, NULL, 0, &v, 1), NNC_ERROR_NULL);
    EXPECT(nnc_engine_push(e, NULL, &after, NULL, 0, &v, 1), NNC_ERROR_NULL);
    EXPECT(nnc_engine_push(e, increment, &after, (nnc_engine_var_h[]){v, v}, 2, NULL, 0),
           NNC_ERROR_ENGINE);  /* twice in reads */
    TRUE(strstr(nnc_error_message(), "appears twice in read") != NULL);
    EXPECT(nnc_engine_push(e, increment, &after, &v, 1, &v, 1), NNC_ERROR_ENGINE);  /* both */
    TRUE(strstr(nnc_error_message(), "in both read and mutate") != NULL);
    EXPECT(nnc_engine_push(e, increment, &after, NULL, 0, &foreign, 1), NNC_ERROR_ENGINE);
    TRUE(strstr(nnc_error_message(), "belongs to another engine") != NULL);
    EXPECT(nnc_engine_push(e, increment, &after, NULL, -1, &v, 1), NNC_ERROR_INDEX);
    EXPECT(nnc_engine_push(e, increment, &after, NULL, 1, &v, 1), NNC_ERROR_NULL);
    EXPECT(nnc_engine_push(e, increment, &after, NULL, 0, (nnc_engine_var_h[]){NULL}, 1),
           NNC_ERROR_NULL);
    EXPECT(nnc_engine_push(e, increment, &after, NULL, 0, (nnc_engine_var_h*)&e, 1),
           NNC_ERROR_HANDLE);  /* an engine handle where a var belongs */
    EXPECT(nnc_engine_push((nnc_engine_h)v, increment, &after, NULL, 0, &w, 1),
           NNC_ERROR_HANDLE);
    EXPECT(nnc_engine_var_new(e, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_engine_wait_for_var(e, foreign), NNC_ERROR_ENGINE);
    EXPECT(nnc_engine_new(NULL, 0), NNC_ERROR_NULL);
    TRUE(after == 1);
    if (!naive) engine_wide(e);
    EXPECT(nnc_engine_delete_var(e, u), NNC_SUCCESS);
    EXPECT(nnc_engine_push(e, increment, &after, NULL, 0, &u, 1), NNC_ERROR_ENGINE);
    TRUE(strstr(nnc_error_message(), "was deleted") != NULL);
    EXPECT(nnc_engine_delete_var(e, u), NNC_ERROR_ENGINE);
    EXPECT(nnc_engine_var_free(u), NNC_SUCCESS);
    EXPECT(nnc_engine_var_free(u), NNC_ERROR_HANDLE);
    EXPECT(nnc_engine_push(e, increment, &after, NULL, 0, &u, 1), NNC_ERROR_HANDLE);
    EXPECT(nnc_engine_close(e), NNC_SUCCESS);
    EXPECT(nnc_engine_push(e, increment, &after, NULL, 0, &v, 1), NNC_ERROR_ENGINE);
    TRUE(strstr(nnc_error_message(), "closed") != NULL);
    EXPECT(nnc_engine_wait_all(e), NNC_SUCCESS);
    nnc_engine_var_free(v), nnc_engine_var_free(w), nnc_engine_var_free(foreign);
    EXPECT(nnc_engine_free(e), NNC_SUCCESS);
    EXPECT(nnc_engine_free(e), NNC_ERROR_HANDLE);
    EXPECT(nnc_engine_wait_all(e), NNC_ERROR_HANDLE);
    /* Ops still queued when nnc_finalize runs are waited for (the second engine's, below). */
    EXPECT(nnc_engine_var_new(e2, &v), NNC_SUCCESS);
    for (i = 0; i < 100; i++) nnc_engine_push(e2, increment, &late, NULL, 0, &v, 1);
    nnc_engine_var_free(v);
}

int main(void) {
    nnc_stream_h s;
    long pending = 0;
    int rc = nnc_init();
    if (rc != NNC_SUCCESS) {
        fprintf(stderr, "nnc_init: %d: %s\n", rc, nnc_error_message());
        return 1;
    }
    EXPECT(nnc_engine_push(NULL, increment, &pending, NULL, 0, NULL, 0), NNC_ERROR_NULL);
    set_io();
    multiview();
    backend_context();
    engine(0);
    engine(1);
    /* A GPU stream: made where CUDA works, else NNC_ERROR_CUDA (never another code). */
    rc = nnc_stream_new("gpu", &s);
    printf("gpu stream: %d\n", rc);
    TRUE(rc == NNC_SUCCESS || rc == NNC_ERROR_CUDA);
    if (rc == NNC_SUCCESS) {
        EXPECT(nnc_stream_wait(s), NNC_SUCCESS);
        EXPECT(nnc_stream_free(s), NNC_SUCCESS);
    }
    EXPECT(nnc_stream_new("gpu:x", &s), NNC_ERROR_ARGUMENT);
    EXPECT(nnc_finalize(), NNC_SUCCESS);
    TRUE(late == 200);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 2 : 0;
}
