/* C command backends from C: a new command BUSY whose only backend is a C function, and a C
 * backend added to the existing command EWSUM. nnc runs C backends on stream worker threads
 * without the GIL, so two CPU streams run BUSY on two cores at once; the backend records
 * (thread, start, end) and main() checks that the calls overlapped on different threads.
 *
 * BUSY spins until both calls have started (at most 2 s) and at least 50 ms: if anything
 * serialised the calls (a held GIL), the first would time out alone and the check would fail.
 * Last, a signal makes one stream wait for BUSY's output on the other. Both backends compute
 * into scratch memory from nnc_stream_workspace (their stream's, or the synchronous call's).
 * Exit status 0 when every check holds. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "nnc.h"

#define CHECK(call)                                                                       \
    do {                                                                                  \
        int rc_ = (call);                                                                 \
        if (rc_ != NNC_SUCCESS) {                                                         \
            fprintf(stderr, "%s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #call, rc_, \
                    nnc_error_message());                                                 \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

typedef struct {
    pthread_t thread;
    double start, end;
} record_t;

static record_t records[8];
static int record_count = 0;            /* calls finished (atomic) */
static int started = 0;                 /* calls started in the current round (atomic) */
static int ewsum_calls = 0;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* outputs[0] = 2 * inputs[0] (float32, same count), after spinning as described above; the
 * products go through the stream's workspace first. */
static int busy(const nnc_cmd_param_t* param, nnc_tensor_t** inputs, int input_size,
                nnc_tensor_t** outputs, int output_size, void* context) {
    double t0 = now(), t;
    ssize_t i;
    int k;
    float* scratch = NULL;
    (void)param;
    if (input_size != 1 || output_size != 1 || !inputs[0] || !outputs[0] ||
        inputs[0]->count != outputs[0]->count)
        return NNC_INVALID;
    if (nnc_stream_workspace(context, sizeof(float) * inputs[0]->count, (void**)&scratch) !=
        NNC_SUCCESS)
        return NNC_INVALID;
    __atomic_fetch_add(&started, 1, __ATOMIC_SEQ_CST);
    do {
        t = now();
    } while (t - t0 < 2.0 && (t - t0 < 0.05 || __atomic_load_n(&started, __ATOMIC_SEQ_CST) < 2));
    for (i = 0; i < inputs[0]->count; i++) scratch[i] = 2 * ((const float*)inputs[0]->data)[i];
    memcpy(outputs[0]->data, scratch, sizeof(float) * inputs[0]->count);
    k = __atomic_fetch_add(&record_count, 1, __ATOMIC_SEQ_CST);
    if (k < 8) records[k] = (record_t){pthread_self(), t0, now()};
    return NNC_SUCCESS;
}

/* A C EWSUM: outputs[0] = sum of the inputs (contiguous float32; registered with that mask),
 * accumulated in the call's workspace. */
static int ewsum_c(const nnc_cmd_param_t* param, nnc_tensor_t** inputs, int input_size,
                   nnc_tensor_t** outputs, int output_size, void* context) {
    ssize_t i;
    int k;
    float* acc = NULL;
    (void)param;
    if (output_size != 1 || input_size < 1) return NNC_INVALID;
    if (nnc_stream_workspace(context, sizeof(float) * outputs[0]->count, (void**)&acc) !=
        NNC_SUCCESS)
        return NNC_INVALID;
    for (i = 0; i < outputs[0]->count; i++) {
        acc[i] = 0;
        for (k = 0; k < input_size; k++) acc[i] += ((const float*)inputs[k]->data)[i];
    }
    memcpy(outputs[0]->data, acc, sizeof(float) * outputs[0]->count);
    __atomic_fetch_add(&ewsum_calls, 1, __ATOMIC_SEQ_CST);
    return NNC_SUCCESS;
}

/* A C backend split into parts (nnc_parallel_for): y = 3 * x, 64 parts of contiguous slices,
 * each part through its own thread's workspace; part_threads records which thread ran each. */
#define PARTS 64
static pthread_t part_threads[PARTS];
typedef struct {
    const float* x;
    float* y;
    ssize_t count;
} triple_t;

static int triple_part(void* arg, int64_t part, void* context) {
    const triple_t* t = arg;
    ssize_t lo = t->count * part / PARTS, hi = t->count * (part + 1) / PARTS, i;
    float* scratch = NULL;
    if (nnc_stream_workspace(context, sizeof(float) * (size_t)(hi - lo + 1), (void**)&scratch) !=
        NNC_SUCCESS)
        return NNC_INVALID;
    for (i = lo; i < hi; i++) scratch[i - lo] = 3 * t->x[i];
    memcpy(t->y + lo, scratch, sizeof(float) * (size_t)(hi - lo));
    part_threads[part] = pthread_self();
    return NNC_SUCCESS;
}

static int triple(const nnc_cmd_param_t* param, nnc_tensor_t** inputs, int input_size,
                  nnc_tensor_t** outputs, int output_size, void* context) {
    triple_t t;
    (void)param;
    if (input_size != 1 || output_size != 1 || !inputs[0] || !outputs[0] ||
        inputs[0]->count != outputs[0]->count)
        return NNC_INVALID;
    t.x = inputs[0]->data;
    t.y = outputs[0]->data;
    t.count = inputs[0]->count;
    return nnc_parallel_for(PARTS, triple_part, &t, context);
}

/* The two records of the last round ran on different threads (neither the caller's) and
 * overlapped in time. */
static int check_overlap(const char* what, int first) {
    record_t a = records[first], b = records[first + 1];
    double overlap = (a.end < b.end ? a.end : b.end) - (a.start > b.start ? a.start : b.start);
    int ok = record_count == first + 2 && !pthread_equal(a.thread, b.thread) &&
             !pthread_equal(a.thread, pthread_self()) && overlap > 0;
    printf("%s: %d calls, threads %s, overlap %.1f ms: %s\n", what, record_count - first,
           pthread_equal(a.thread, b.thread) ? "equal" : "different", overlap * 1e3,
           ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}

int main(void) {
    float in[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}}, out[2][4] = {{0}};
    int64_t dim = 4;
    nnc_tensor_h x[2], y[2];
    nnc_cmd_h cmd, sum;
    nnc_stream_h s[2], stream;
    nnc_graph_h g;
    nnc_graph_exec_h n[2];
    int i, streams, failures = 0;
    if (nnc_init() != NNC_SUCCESS) {
        fprintf(stderr, "nnc_init: %s\n", nnc_error_message());
        return 1;
    }
    CHECK(nnc_cmd_register("BUSY", "none"));
    CHECK(nnc_cmd_backend_register("BUSY", "CPU_C", busy, NNC_32F, NNC_BACKEND_CONTIGUOUS,
                                   NNC_PRIORITY_DEFAULT));
    CHECK(nnc_cmd_new(&cmd, "BUSY", NULL));
    for (i = 0; i < 2; i++) {
        CHECK(nnc_tensor_new(&x[i], in[i], NNC_32F, 1, &dim));
        CHECK(nnc_tensor_new(&y[i], out[i], NNC_32F, 1, &dim));
        CHECK(nnc_stream_new("cpu", &s[i]));
    }

    /* 1. One command on each of two streams. */
    for (i = 0; i < 2; i++) CHECK(nnc_cmd_exec(cmd, &x[i], 1, &y[i], 1, s[i]));
    for (i = 0; i < 2; i++) CHECK(nnc_stream_wait(s[i]));
    failures += check_overlap("two streams, nnc_cmd_exec", 0);

    /* 2. A graph of two independent BUSY nodes: the static schedule puts them on two streams. */
    started = 0;
    out[0][0] = out[1][0] = 0;
    CHECK(nnc_graph_new(&g));
    for (i = 0; i < 2; i++) CHECK(nnc_graph_exec_new(g, cmd, &x[i], 1, &y[i], 1, &n[i]));
    CHECK(nnc_graph_static_schedule(g, "cpu", 0));
    CHECK(nnc_graph_schedule_info(g, &streams, NULL));
    CHECK(nnc_stream_new("cpu", &stream));
    CHECK(nnc_graph_run(g, stream));
    CHECK(nnc_stream_wait(stream));
    printf("graph schedule: %d streams\n", streams);
    failures += streams != 2;
    failures += check_overlap("scheduled graph", 2);
    for (i = 0; i < 2; i++)
        if (out[i][0] != 2 * in[i][0] || out[i][3] != 2 * in[i][3]) failures++;

    /* 3. A C backend for an existing command, preferred by priority over CPU_OPT (20). */
    CHECK(nnc_cmd_backend_register("EWSUM", "C_SUM", ewsum_c, NNC_32F, NNC_BACKEND_CONTIGUOUS,
                                   100));
    CHECK(nnc_cmd_new(&sum, "EWSUM", NULL));
    CHECK(nnc_cmd_exec(sum, x, 2, &y[0], 1, NULL));
    printf("EWSUM through C_SUM: %g %g %g %g, %d call(s)\n", out[0][0], out[0][1], out[0][2],
           out[0][3], ewsum_calls);
    failures += ewsum_calls != 1 || out[0][0] != 6 || out[0][3] != 12;
    {
        /* A workspace needs its owner: NULL is refused, not dereferenced. */
        void* p = NULL;
        int rc = nnc_stream_workspace(NULL, 16, &p);
        printf("workspace of no context: %d\n", rc);
        failures += rc != NNC_ERROR_NULL || p != NULL;
    }

    /* 3b. A backend that splits its work over nnc's pool (nnc_parallel_for), synchronously and
     * on a stream; bad arguments are refused. */
    {
        enum { N = 1 << 16 };
        static float big_in[N], big_out[N];
        int64_t big_dim = N;
        nnc_tensor_h bx, by;
        nnc_cmd_h tri;
        int k, ok = 1, threads = 0, j, rc_null, rc_neg;
        for (k = 0; k < N; k++) big_in[k] = (float)k;
        CHECK(nnc_cmd_register("TRIPLE", "none"));
        CHECK(nnc_cmd_backend_register("TRIPLE", "CPU_C", triple, NNC_32F,
                                       NNC_BACKEND_CONTIGUOUS, NNC_PRIORITY_DEFAULT));
        CHECK(nnc_cmd_new(&tri, "TRIPLE", NULL));
        CHECK(nnc_tensor_new(&bx, big_in, NNC_32F, 1, &big_dim));
        CHECK(nnc_tensor_new(&by, big_out, NNC_32F, 1, &big_dim));
        CHECK(nnc_cmd_exec(tri, &bx, 1, &by, 1, NULL));
        for (k = 0; k < N; k++) ok &= big_out[k] == 3.0f * (float)k;
        for (k = 0; k < PARTS; k++) {
            for (j = 0; j < k && !pthread_equal(part_threads[j], part_threads[k]); j++) {}
            threads += j == k;
        }
        memset(big_out, 0, sizeof big_out);
        CHECK(nnc_cmd_exec(tri, &bx, 1, &by, 1, s[0]));
        CHECK(nnc_stream_wait(s[0]));
        for (k = 0; k < N; k++) ok &= big_out[k] == 3.0f * (float)k;
        rc_null = nnc_parallel_for(4, NULL, NULL, NULL);
        rc_neg = nnc_parallel_for(-1, triple_part, NULL, NULL);
        printf("parallel_for: results %s, %d thread(s) ran the parts; NULL fn %d, -1 parts %d\n",
               ok ? "ok" : "WRONG", threads, rc_null, rc_neg);
        failures += !ok || threads < 1 || rc_null != NNC_ERROR_NULL ||
                    rc_neg != NNC_ERROR_ARGUMENT;
        CHECK(nnc_tensor_free(bx));
        CHECK(nnc_tensor_free(by));
        CHECK(nnc_cmd_free(tri));
    }

    /* 4. A signal orders two streams: s[1] reads what BUSY writes on s[0] 50 ms later. */
    {
        float sum_out[4] = {0};
        nnc_tensor_h z;
        nnc_signal_h done;
        CHECK(nnc_tensor_new(&z, sum_out, NNC_32F, 1, &dim));
        CHECK(nnc_signal_new("cpu", &done));
        started = 1;  /* one call this round: spin the 50 ms only */
        out[0][0] = 0;
        CHECK(nnc_cmd_exec(cmd, &x[0], 1, &y[0], 1, s[0]));  /* y0 = 2 * x0 */
        CHECK(nnc_stream_emit_signal(s[0], done));
        CHECK(nnc_stream_wait_signal(s[1], done));
        CHECK(nnc_cmd_exec(sum, (nnc_tensor_h[]){y[0], x[0]}, 2, &z, 1, s[1]));  /* 3 * x0 */
        CHECK(nnc_stream_wait(s[1]));
        printf("signal: s[1] computed %g %g %g %g\n", sum_out[0], sum_out[1], sum_out[2],
               sum_out[3]);
        failures += sum_out[0] != 3 || sum_out[3] != 12;
        CHECK(nnc_stream_wait(s[0]));
        CHECK(nnc_signal_free(done));
        CHECK(nnc_tensor_free(z));
    }

    for (i = 0; i < 2; i++) {
        CHECK(nnc_graph_exec_free(n[i]));
        CHECK(nnc_tensor_free(x[i]));
        CHECK(nnc_tensor_free(y[i]));
        CHECK(nnc_stream_free(s[i]));
    }
    CHECK(nnc_graph_free(g));
    CHECK(nnc_stream_free(stream));
    CHECK(nnc_cmd_free(cmd));
    CHECK(nnc_cmd_free(sum));
    CHECK(nnc_finalize());
    printf("%s\n", failures ? "FAILED" : "OK");
    return failures ? 2 : 0;
}
