/* Embedding nnc in a C program: NNC's parallel graph, a while loop and a case..of, each built,
 * statically scheduled and run on a CPU stream from C (docs/capi.md; build.sh builds it).
 *
 *   parallel graph (research: NNC parallel.tests.c): z = x*y, c = a+b, d = z/c, d0 = log d,
 *     d1 = exp d, d2 = d0 + d1 = -1.473017 for x=2, y=0.21, a=2.2, b=3.2
 *   while (NNC while.tests.c, count based): while (count < 5) z = y*z; then z = x*z
 *     = 0.34 * 1.11^5 = 0.5729198
 *   while with a carry-over and a condition on data (while.tests.c): 0.92^5 * 3.2 = 2.1090609
 *   while over multiviews, the product's tensors replaced twice with nnc_graph_exec_set_io
 *     (NNC while.tests.c, x * y^5 with multiviews): 0.47 * 5.5^5 = 2365.4366
 *   case..of (NNC case_of.tests.c): x<0: x=0; x<1: skip; x<2: x=x*0.5+0.5; else x=1.5
 *
 * Exit status 0 when every number matches; prints what it computed. */
#include <math.h>
#include <stdio.h>

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

#define EXPECT(what, got, want, tol)                                                      \
    do {                                                                                  \
        printf("%-28s = %.7f (expected %.7f)\n", what, (double)(got), (double)(want));    \
        if (!(fabs((double)(got) - (double)(want)) <= (tol))) failures++;                 \
    } while (0)

static int failures = 0;

/* A float32 [1] tensor over *value (the caller's memory: no copy). */
static int scalar(float* value, nnc_tensor_h* out) {
    int64_t dim = 1;
    return nnc_tensor_new(out, value, NNC_32F, 1, &dim);
}

/* Add node `name`(params) on inputs -> outputs to graph; the handle goes to *out. */
static int node(nnc_graph_h graph, const char* name, const char* params, nnc_tensor_h* inputs,
                int input_size, nnc_tensor_h* outputs, int output_size, nnc_graph_exec_h* out) {
    nnc_cmd_h cmd;
    int rc = nnc_cmd_new(&cmd, name, params);
    if (rc != NNC_SUCCESS) return rc;
    rc = nnc_graph_exec_new(graph, cmd, inputs, input_size, outputs, output_size, out);
    nnc_cmd_free(cmd);  /* the node keeps its own copy of the command */
    return rc;
}

static int parallel_graph(nnc_stream_h stream) {
    float v[10] = {2, 0.21f, 2.2f, 3.2f, 0, 0, 0, 0, 0, 0};  /* x y a b z c d d0 d1 d2 */
    nnc_tensor_h t[10];
    nnc_graph_exec_h n[6];
    nnc_graph_h g;
    int i, streams, signals;
    for (i = 0; i < 10; i++) CHECK(scalar(&v[i], &t[i]));
    CHECK(nnc_graph_new(&g));
    CHECK(node(g, "EWPROD", NULL, (nnc_tensor_h[]){t[0], t[1]}, 2, &t[4], 1, &n[0]));
    CHECK(node(g, "EWSUM", NULL, (nnc_tensor_h[]){t[2], t[3]}, 2, &t[5], 1, &n[1]));
    CHECK(node(g, "EWDIV", NULL, (nnc_tensor_h[]){t[4], t[5]}, 2, &t[6], 1, &n[2]));
    CHECK(node(g, "EWLOG", NULL, &t[6], 1, &t[7], 1, &n[3]));
    CHECK(node(g, "EWEXP", NULL, &t[6], 1, &t[8], 1, &n[4]));
    CHECK(node(g, "EWSUM", NULL, (nnc_tensor_h[]){t[7], t[8]}, 2, &t[9], 1, &n[5]));
    CHECK(nnc_graph_exec_concat(g, n[0], n[2]));
    CHECK(nnc_graph_exec_concat(g, n[1], n[2]));
    CHECK(nnc_graph_exec_concat(g, n[2], n[3]));
    CHECK(nnc_graph_exec_concat(g, n[2], n[4]));
    CHECK(nnc_graph_exec_concat(g, n[3], n[5]));
    CHECK(nnc_graph_exec_concat(g, n[4], n[5]));

    CHECK(nnc_graph_run(g, NULL));  /* sequential, on this thread */
    EXPECT("parallel d2 (sequential)", v[9], -1.473017, 1e-5);

    v[9] = 0;
    CHECK(nnc_graph_static_schedule(g, "cpu", 0));
    CHECK(nnc_graph_schedule_info(g, &streams, &signals));
    printf("parallel schedule: %d streams, %d signals\n", streams, signals);
    if (streams != 2) failures++;  /* mul | sum run side by side, then log | exp */
    CHECK(nnc_graph_run(g, stream));
    CHECK(nnc_stream_wait(stream));
    EXPECT("parallel d2 (scheduled)", v[9], -1.473017, 1e-5);

    for (i = 0; i < 6; i++) CHECK(nnc_graph_exec_free(n[i]));
    for (i = 0; i < 10; i++) CHECK(nnc_tensor_free(t[i]));
    CHECK(nnc_graph_free(g));
    return 0;
}

/* The loop's expression: continue while count < *(int*)data. */
static int count_below(int64_t count, nnc_tensor_t* const* inputs, int input_size,
                       const void* data) {
    (void)inputs;
    (void)input_size;
    return count < *(const int*)data;
}

static int while_loop(nnc_stream_h stream) {
    float x = 0.34f, y = 1.11f, z = 1;
    int limit = 5, run;
    int64_t count;
    nnc_tensor_h tx, ty, tz;
    nnc_graph_h g, body;
    nnc_graph_exec_h noop, prod, loop, prod1;
    CHECK(scalar(&x, &tx));
    CHECK(scalar(&y, &ty));
    CHECK(scalar(&z, &tz));
    CHECK(nnc_graph_new(&g));
    CHECK(nnc_graph_new(&body));
    CHECK(node(body, "NOOP", NULL, NULL, 0, NULL, 0, &noop));
    CHECK(node(body, "EWPROD", NULL, (nnc_tensor_h[]){ty, tz}, 2, &tz, 1, &prod));
    CHECK(nnc_graph_exec_concat(body, noop, prod));
    CHECK(nnc_graph_while_new(g, body, &loop));
    /* The NOOP is the breakpoint: the expression runs before each iteration's product. */
    CHECK(nnc_graph_set_while_expr(body, count_below, &limit, NULL, 0, &noop, 1));
    CHECK(node(g, "EWPROD", NULL, (nnc_tensor_h[]){tx, tz}, 2, &tz, 1, &prod1));
    CHECK(nnc_graph_exec_concat(g, loop, prod1));
    CHECK(nnc_graph_static_schedule(g, "cpu", 0));
    for (run = 0; run < 2; run++) {  /* a second run gives the same numbers */
        z = 1;
        CHECK(nnc_graph_run(g, stream));
        CHECK(nnc_stream_wait(stream));
        CHECK(nnc_graph_while_count(body, &count));
        EXPECT("while z (scheduled)", z, 0.5729198, 1e-6);
        EXPECT("while count", count, 5, 0);
    }
    CHECK(nnc_graph_exec_free(noop));
    CHECK(nnc_graph_exec_free(prod));
    CHECK(nnc_graph_exec_free(loop));
    CHECK(nnc_graph_exec_free(prod1));
    CHECK(nnc_graph_free(body));
    CHECK(nnc_graph_free(g));
    CHECK(nnc_tensor_free(tx));
    CHECK(nnc_tensor_free(ty));
    CHECK(nnc_tensor_free(tz));
    return 0;
}

/* NNC while.tests.c, "while graph with multiview": the body's product is built on plain
 * tensors, then re-pointed twice with nnc_graph_exec_set_io, the second time onto multiviews
 * that swap x and z every iteration (xx = x at even counts, z at odd; zz the other way round),
 * so x = z * y and z = x * y alternate: after 5 products x = 0.47 * 5.5^5 = 2365.4366. */
static int while_set_io(nnc_stream_h stream) {
    float x = 0.32f, y = 5.5f, z = 0.47f;
    int limit = 5, run, current;
    nnc_tensor_h tx, ty, tz, xx, zz;
    nnc_graph_h g, body;
    nnc_graph_exec_h noop, prod, loop;
    CHECK(scalar(&x, &tx));
    CHECK(scalar(&y, &ty));
    CHECK(scalar(&z, &tz));
    CHECK(nnc_graph_new(&g));
    CHECK(nnc_graph_new(&body));
    CHECK(nnc_graph_while_new(g, body, &loop));
    CHECK(nnc_tensor_multiview_new(&xx, (nnc_tensor_h[]){tx, tz}, 2, NNC_MULTIVIEW_K0N, body));
    CHECK(nnc_tensor_multiview_new(&zz, (nnc_tensor_h[]){tz, tx}, 2, NNC_MULTIVIEW_K0N, body));
    CHECK(node(body, "NOOP", NULL, NULL, 0, NULL, 0, &noop));
    CHECK(node(body, "EWPROD", NULL, (nnc_tensor_h[]){tx, ty}, 2, &tz, 1, &prod));
    CHECK(nnc_graph_exec_concat(body, noop, prod));
    CHECK(nnc_graph_set_while_expr(body, count_below, &limit, NULL, 0, &noop, 1));
    CHECK(nnc_graph_exec_set_io(body, prod, (nnc_tensor_h[]){tx, ty}, 2, &tz, 1));
    CHECK(nnc_graph_exec_set_io(body, prod, (nnc_tensor_h[]){zz, ty}, 2, &xx, 1));
    CHECK(nnc_graph_run(g, NULL));
    EXPECT("set_io while x (sequential)", x, 2365.4366, 1e-2);
    CHECK(nnc_graph_static_schedule(g, "cpu", 0));
    for (run = 0; run < 2; run++) {  /* each run starts again from x = 0.32, z = 0.47 */
        x = 0.32f, z = 0.47f;
        CHECK(nnc_graph_run(g, stream));
        CHECK(nnc_stream_wait(stream));
        EXPECT("set_io while x (scheduled)", x, 2365.4366, 1e-2);
    }
    CHECK(nnc_tensor_multiview_info(xx, NULL, NULL, &current));
    EXPECT("multiview xx current", current, 0, 0);  /* the last product ran at count 4: 4 % 2 */
    CHECK(nnc_graph_exec_free(noop));
    CHECK(nnc_graph_exec_free(prod));
    CHECK(nnc_graph_exec_free(loop));
    CHECK(nnc_graph_free(body));
    CHECK(nnc_graph_free(g));
    CHECK(nnc_tensor_multiview_free(xx));
    CHECK(nnc_tensor_multiview_free(zz));
    CHECK(nnc_tensor_free(tx));
    CHECK(nnc_tensor_free(ty));
    CHECK(nnc_tensor_free(tz));
    return 0;
}

/* A data-dependent loop condition: go on while the input (z1) is above *(float*)data. */
static int above(int64_t count, nnc_tensor_t* const* inputs, int input_size, const void* data) {
    (void)count;
    if (input_size != 1 || inputs[0]->datatype != NNC_32F) return -1;  /* fails the run */
    return *(const float*)inputs[0]->data > *(const float*)data;
}

/* NNC while.tests.c with a carry-over: z1 = z0 * x; from the second iteration on z0 is the
 * memory z1 held (the two swap), so z1 = 0.92^(k+1); the loop goes on while z1 > 0.68, that is
 * 5 products; then z2 = z1 * y = 0.92^5 * 3.2 = 2.1090609. z0 keeps its memory and value. */
static int carry_over(nnc_stream_h stream) {
    float x = 0.92f, y = 3.2f, z0 = 1, z1 = 0, z2 = 0, threshold = 0.68f;
    nnc_tensor_h tx, ty, t0, t1, t2;
    nnc_graph_h g, body;
    nnc_graph_exec_h prod, loop, prod2;
    int64_t count;
    int run;
    CHECK(scalar(&x, &tx));
    CHECK(scalar(&y, &ty));
    CHECK(scalar(&z0, &t0));
    CHECK(scalar(&z1, &t1));
    CHECK(scalar(&z2, &t2));
    CHECK(nnc_graph_new(&g));
    CHECK(nnc_graph_new(&body));
    CHECK(node(body, "EWPROD", NULL, (nnc_tensor_h[]){t0, tx}, 2, &t1, 1, &prod));
    CHECK(nnc_graph_set_while_expr(body, above, &threshold, &t1, 1, &prod, 1));
    CHECK(nnc_graph_add_carry_over(body, t1, t0));
    CHECK(nnc_graph_while_new(g, body, &loop));
    CHECK(node(g, "EWPROD", NULL, (nnc_tensor_h[]){t1, ty}, 2, &t2, 1, &prod2));
    CHECK(nnc_graph_exec_concat(g, loop, prod2));
    for (run = 0; run < 2; run++) {  /* sequential, then scheduled on the stream */
        z2 = 0;
        if (run == 0) {
            CHECK(nnc_graph_run(g, NULL));
        } else {
            CHECK(nnc_graph_static_schedule(g, "cpu", 0));
            CHECK(nnc_graph_run(g, stream));
            CHECK(nnc_stream_wait(stream));
        }
        CHECK(nnc_graph_while_count(body, &count));
        EXPECT(run ? "carry-over z2 (scheduled)" : "carry-over z2 (sequential)", z2, 2.1090609,
               1e-6);
        EXPECT("carry-over count", count, 4, 0);
        EXPECT("carry-over z0 unchanged", z0, 1, 0);
    }
    CHECK(nnc_graph_exec_free(prod));
    CHECK(nnc_graph_exec_free(loop));
    CHECK(nnc_graph_exec_free(prod2));
    CHECK(nnc_graph_free(body));
    CHECK(nnc_graph_free(g));
    nnc_tensor_h tensors[5] = {tx, ty, t0, t1, t2};
    for (run = 0; run < 5; run++) CHECK(nnc_tensor_free(tensors[run]));
    return 0;
}

/* The branch for x: NNC's piece-wise function; -1 (after offset 0) runs no branch. */
static int piecewise(nnc_tensor_t* const* inputs, int input_size, const void* data) {
    float x = *(const float*)inputs[0]->data;
    (void)input_size;
    (void)data;
    if (x < 0) return 0;
    if (x < 1) return -1;
    if (x < 2) return 1;
    if (x > 1000) return 3;
    return 2;
}

static int case_of(nnc_stream_h stream) {
    float x = 0, half = 0.5f;
    const float in[4] = {-1, 0.76f, 1.226f, 2.1f}, want[4] = {0, 0.76f, 1.113f, 1.5f};
    nnc_tensor_h tx, th;
    nnc_graph_h g, b0, b1, b2;
    nnc_graph_exec_h c, e0, e1, e2, e3;
    int i;
    CHECK(scalar(&x, &tx));
    CHECK(scalar(&half, &th));
    CHECK(nnc_graph_new(&g));
    CHECK(nnc_graph_new(&b0));
    CHECK(nnc_graph_new(&b1));
    CHECK(nnc_graph_new(&b2));
    CHECK(nnc_graph_case_of_new(g, &tx, 1, &tx, 1, &c));
    CHECK(nnc_graph_set_case_of_expr(g, c, piecewise, NULL, 0));
    CHECK(node(b0, "SET", "value=0", NULL, 0, &tx, 1, &e0));
    CHECK(node(b1, "SCALAR_MUL", "a=0.5", &tx, 1, &tx, 1, &e1));
    CHECK(node(b1, "EWSUM", NULL, (nnc_tensor_h[]){tx, th}, 2, &tx, 1, &e2));
    CHECK(nnc_graph_exec_concat(b1, e1, e2));
    CHECK(node(b2, "SET", "value=1.5", NULL, 0, &tx, 1, &e3));
    CHECK(nnc_graph_set_case_of(g, c, b0, 0));
    CHECK(nnc_graph_set_case_of(g, c, b1, 1));
    CHECK(nnc_graph_set_case_of(g, c, b2, 2));
    CHECK(nnc_graph_static_schedule(g, "cpu", 0));
    for (i = 0; i < 4; i++) {
        x = in[i];
        CHECK(nnc_graph_run(g, stream));
        CHECK(nnc_stream_wait(stream));
        EXPECT("case..of x", x, want[i], 1e-5);
    }
    nnc_graph_exec_h execs[5] = {c, e0, e1, e2, e3};
    for (i = 0; i < 5; i++) CHECK(nnc_graph_exec_free(execs[i]));
    nnc_graph_h graphs[4] = {g, b0, b1, b2};
    for (i = 0; i < 4; i++) CHECK(nnc_graph_free(graphs[i]));
    CHECK(nnc_tensor_free(tx));
    CHECK(nnc_tensor_free(th));
    return 0;
}

int main(void) {
    nnc_stream_h stream;
    int rc = nnc_init();
    if (rc != NNC_SUCCESS) {
        fprintf(stderr, "nnc_init: %d: %s\n", rc, nnc_error_message());
        return 1;
    }
    CHECK(nnc_stream_new("cpu", &stream));
    if (parallel_graph(stream) || while_loop(stream) || while_set_io(stream) ||
        carry_over(stream) || case_of(stream))
        return 1;
    CHECK(nnc_stream_free(stream));
    CHECK(nnc_finalize());
    printf("%s\n", failures ? "FAILED" : "OK");
    return failures ? 2 : 0;
}
