/* Partial static schedules from C: schedule.tests.c's "partial schedule work, one for device 0
 * and one for device 1", built as upstream builds it (two chains mul -> scale -> scale) on CPU
 * tensors and streams: the default schedule, a schedule per chain (each run leaves the other
 * chain's output alone), one of both; then bad calls and their codes. Prints one line per
 * check; exit status 0 when all hold (tests/capi/test_capi.py runs it). */
#include <math.h>
#include <stdio.h>

#include "nnc.h"
#include "expect.h"

#define NEAR(x, want) EXPECT(fabs((x) - (want)) < 1e-5 ? NNC_SUCCESS : NNC_ERROR_UNKNOWN, \
                             NNC_SUCCESS)

static nnc_tensor_h tensor(float* data, int ndim, int64_t d0, int64_t d1) {
    nnc_tensor_h t = NULL;
    int64_t dims[2] = {d0, d1};
    EXPECT(nnc_tensor_new(&t, data, NNC_32F, ndim, dims), NNC_SUCCESS);
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

int main(void) {
    if (nnc_init() != NNC_SUCCESS) {
        fprintf(stderr, "%s\n", nnc_error_message());
        return 1;
    }
    float a0[2] = {0.4f, 1.2f}, w0[2] = {3, 2}, bias0[1] = {-1}, b0[1], c0[1], d0[1];
    float a1[2] = {1.3f, 0.5f}, w1[2] = {-3, 5}, bias1[1] = {0.2f}, b1[1], c1[1], d1[1];
    const double D0 = (0.4 * 3 + 1.2 * 2 - 1) * 1.1 * 0.9;
    const double D1 = (-1.3 * 3 + 0.5 * 5 + 0.2) * 1.2 * 0.8;
    nnc_graph_h g = NULL, other = NULL;
    nnc_stream_h s = NULL;
    nnc_graph_static_schedule_h schedule0 = NULL, schedule1 = NULL, schedule01 = NULL;
    nnc_graph_static_schedule_h whole = NULL, foreign = NULL, bad = NULL;
    EXPECT(nnc_graph_new(&g), NNC_SUCCESS);
    nnc_tensor_h ta0 = tensor(a0, 2, 1, 2), tw0 = tensor(w0, 2, 1, 2), tbias0 = tensor(bias0, 1, 1, 0);
    nnc_tensor_h tb0 = tensor(b0, 2, 1, 1), tc0 = tensor(c0, 2, 1, 1), td0 = tensor(d0, 2, 1, 1);
    nnc_tensor_h ta1 = tensor(a1, 2, 1, 2), tw1 = tensor(w1, 2, 1, 2), tbias1 = tensor(bias1, 1, 1, 0);
    nnc_tensor_h tb1 = tensor(b1, 2, 1, 1), tc1 = tensor(c1, 2, 1, 1), td1 = tensor(d1, 2, 1, 1);
    /* CMD_GEMM_FORWARD(NO_TRANSPOSE, TRANSPOSE(0, 1)), CMD_SCALAR_MUL_FORWARD(...). */
    nnc_graph_exec_h src0 = node(g, "GEMM", "transpose_b=True", (nnc_tensor_h[]){ta0, tw0, tbias0},
                                 3, tb0);
    nnc_graph_exec_h scale00 = node(g, "SCALAR_MUL", "a=1.1", &tb0, 1, tc0);
    nnc_graph_exec_h dest0 = node(g, "SCALAR_MUL", "a=0.9", &tc0, 1, td0);
    nnc_graph_exec_h src1 = node(g, "GEMM", "transpose_b=True", (nnc_tensor_h[]){ta1, tw1, tbias1},
                                 3, tb1);
    nnc_graph_exec_h scale10 = node(g, "SCALAR_MUL", "a=1.2", &tb1, 1, tc1);
    nnc_graph_exec_h dest1 = node(g, "SCALAR_MUL", "a=0.8", &tc1, 1, td1);
    EXPECT(nnc_graph_exec_concat(g, src0, scale00), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_concat(g, scale00, dest0), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_concat(g, src1, scale10), NNC_SUCCESS);
    EXPECT(nnc_graph_exec_concat(g, scale10, dest1), NNC_SUCCESS);
    EXPECT(nnc_graph_static_schedule(g, "cpu", 0), NNC_SUCCESS);
    EXPECT(nnc_stream_new("cpu", &s), NNC_SUCCESS);
    EXPECT(nnc_graph_run(g, s), NNC_SUCCESS);
    EXPECT(nnc_stream_wait(s), NNC_SUCCESS);
    NEAR(d0[0], D0);
    NEAR(d1[0], D1);
    d0[0] = d1[0] = 0;
    /* schedule device 0: its chain only. */
    EXPECT(nnc_graph_static_schedule_new(g, "cpu", 0, &src0, 1, &dest0, 1, &schedule0),
           NNC_SUCCESS);
    EXPECT(nnc_graph_run_with_schedule(g, schedule0, s), NNC_SUCCESS);
    EXPECT(nnc_stream_wait(s), NNC_SUCCESS);
    NEAR(d0[0], D0);
    NEAR(d1[0], 0);
    /* schedule device 1. */
    EXPECT(nnc_graph_static_schedule_new(g, NULL, 1, &src1, 1, &dest1, 1, &schedule1),
           NNC_SUCCESS);
    EXPECT(nnc_graph_run_with_schedule(g, schedule1, s), NNC_SUCCESS);
    EXPECT(nnc_stream_wait(s), NNC_SUCCESS);
    NEAR(d1[0], D1);
    d0[0] = d1[0] = 0;
    /* custom schedule again with both device 0 and device 1. */
    EXPECT(nnc_graph_static_schedule_new(g, "cpu", 0, (nnc_graph_exec_h[]){src0, src1}, 2,
                                         (nnc_graph_exec_h[]){dest0, dest1}, 2, &schedule01),
           NNC_SUCCESS);
    EXPECT(nnc_graph_run_with_schedule(g, schedule01, s), NNC_SUCCESS);
    EXPECT(nnc_stream_wait(s), NNC_SUCCESS);
    NEAR(d0[0], D0);
    NEAR(d1[0], D1);
    int nodes = 0, streams = 0, signals = 0;
    EXPECT(nnc_graph_static_schedule_info(schedule0, &nodes, &streams, &signals), NNC_SUCCESS);
    EXPECT(nodes == 3 && streams == 1 && signals == 0 ? NNC_SUCCESS : NNC_ERROR_UNKNOWN,
           NNC_SUCCESS);
    EXPECT(nnc_graph_static_schedule_info(schedule01, &nodes, &streams, NULL), NNC_SUCCESS);
    EXPECT(nodes == 6 && streams == 2 ? NNC_SUCCESS : NNC_ERROR_UNKNOWN, NNC_SUCCESS);
    /* Sizes 0: the graph's own sources and destinations, still a schedule of its own. */
    EXPECT(nnc_graph_static_schedule_new(g, NULL, 0, NULL, 0, NULL, 0, &whole), NNC_SUCCESS);
    EXPECT(nnc_graph_static_schedule_info(whole, &nodes, NULL, NULL), NNC_SUCCESS);
    EXPECT(nodes == 6 ? NNC_SUCCESS : NNC_ERROR_UNKNOWN, NNC_SUCCESS);
    EXPECT(nnc_graph_schedule_info(g, &streams, NULL), NNC_SUCCESS);  /* the default stays */

    /* Bad calls. */
    EXPECT(nnc_graph_static_schedule_new(NULL, NULL, 0, &src0, 1, &dest0, 1, &bad),
           NNC_ERROR_NULL);
    EXPECT(nnc_graph_static_schedule_new(g, NULL, 0, &src0, 1, &dest0, 1, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_graph_static_schedule_new(g, NULL, 0, NULL, 1, &dest0, 1, &bad), NNC_ERROR_NULL);
    EXPECT(nnc_graph_static_schedule_new(g, NULL, 0, &src0, -1, &dest0, 1, &bad),
           NNC_ERROR_INDEX);
    EXPECT(nnc_graph_static_schedule_new(g, NULL, -1, &src0, 1, &dest0, 1, &bad),
           NNC_ERROR_SCHEDULE);
    EXPECT(nnc_graph_static_schedule_new(g, "tpu", 0, &src0, 1, &dest0, 1, &bad),
           NNC_ERROR_ARGUMENT);
    EXPECT(nnc_graph_static_schedule_new(g, NULL, 0, &src0, 1, &dest1, 1, &bad),
           NNC_ERROR_SCHEDULE);                             /* no path from src0 to dest1 */
    EXPECT(nnc_graph_static_schedule_new(g, NULL, 0, (nnc_graph_exec_h*)&s, 1, &dest0, 1, &bad),
           NNC_ERROR_HANDLE);
    EXPECT(bad == NULL ? NNC_SUCCESS : NNC_ERROR_UNKNOWN, NNC_SUCCESS);  /* never written */
    EXPECT(nnc_graph_new(&other), NNC_SUCCESS);
    EXPECT(nnc_graph_static_schedule_new(other, NULL, 0, &src0, 1, &dest0, 1, &bad),
           NNC_ERROR_GRAPH);                                /* a node of another graph */
    nnc_graph_exec_h lone = node(other, "SCALAR_MUL", "a=2", &tb0, 1, tc0);
    EXPECT(nnc_graph_static_schedule_new(other, NULL, 0, NULL, 0, NULL, 0, &foreign),
           NNC_SUCCESS);
    EXPECT(nnc_graph_run_with_schedule(g, foreign, s), NNC_ERROR_SCHEDULE);  /* wrong graph */
    EXPECT(nnc_graph_run_with_schedule(g, schedule0, NULL), NNC_ERROR_NULL);
    EXPECT(nnc_graph_run_with_schedule(g, NULL, s), NNC_ERROR_NULL);
    EXPECT(nnc_graph_run_with_schedule(NULL, schedule0, s), NNC_ERROR_NULL);
    EXPECT(nnc_graph_run_with_schedule(g, (nnc_graph_static_schedule_h)(void*)s, s),
           NNC_ERROR_HANDLE);
    EXPECT(nnc_graph_run_with_schedule(g, schedule0, (nnc_stream_h)(void*)schedule0),
           NNC_ERROR_HANDLE);
    EXPECT(nnc_graph_static_schedule_info(NULL, &nodes, NULL, NULL), NNC_ERROR_NULL);
    /* A change of the graph makes its partial schedules stale; a new one runs. */
    EXPECT(nnc_graph_exec_concat(g, dest0, src1), NNC_SUCCESS);
    EXPECT(nnc_graph_run_with_schedule(g, schedule1, s), NNC_ERROR_SCHEDULE);
    EXPECT(nnc_graph_static_schedule_free(schedule1), NNC_SUCCESS);
    EXPECT(nnc_graph_static_schedule_free(schedule1), NNC_ERROR_HANDLE);     /* freed */
    EXPECT(nnc_graph_run_with_schedule(g, schedule1, s), NNC_ERROR_HANDLE);
    EXPECT(nnc_graph_static_schedule_new(g, "cpu", 0, &src1, 1, &dest1, 1, &schedule1),
           NNC_SUCCESS);
    d1[0] = 0;
    EXPECT(nnc_graph_run_with_schedule(g, schedule1, s), NNC_SUCCESS);
    EXPECT(nnc_stream_wait(s), NNC_SUCCESS);
    NEAR(d1[0], D1);
    /* The handle keeps its graph: freeing the graph's handle first is fine. */
    EXPECT(nnc_graph_free(other), NNC_SUCCESS);
    EXPECT(nnc_graph_static_schedule_info(foreign, &nodes, NULL, NULL), NNC_SUCCESS);
    EXPECT(nodes == 1 ? NNC_SUCCESS : NNC_ERROR_UNKNOWN, NNC_SUCCESS);

    nnc_graph_static_schedule_h all[] = {schedule0, schedule1, schedule01, whole, foreign};
    for (int i = 0; i < 5; i++) EXPECT(nnc_graph_static_schedule_free(all[i]), NNC_SUCCESS);
    nnc_graph_exec_h execs[] = {src0, scale00, dest0, src1, scale10, dest1, lone};
    for (int i = 0; i < 7; i++) EXPECT(nnc_graph_exec_free(execs[i]), NNC_SUCCESS);
    nnc_tensor_h ts[] = {ta0, tw0, tbias0, tb0, tc0, td0, ta1, tw1, tbias1, tb1, tc1, td1};
    for (int i = 0; i < 12; i++) EXPECT(nnc_tensor_free(ts[i]), NNC_SUCCESS);
    EXPECT(nnc_stream_free(s), NNC_SUCCESS);
    EXPECT(nnc_graph_free(g), NNC_SUCCESS);
    printf("%d checks, %d failed\n", checks, failures);
    if (nnc_finalize() != NNC_SUCCESS) return 1;
    return failures ? 1 : 0;
}
