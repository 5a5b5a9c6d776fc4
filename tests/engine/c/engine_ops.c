/* C functions for tests/engine/test_engine*.py, run by nnc.Engine as CFUNC ops: int fn(void* arg),
 * called without the GIL on pool threads. Built into a shared library by
 * tests/engine/_engine_lib.py. */
#define _POSIX_C_SOURCE 199309L
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void spin(double seconds) {
    double end = now() + seconds;
    while (now() < end) {
    }
}

int eng_noop(void* arg) {
    (void)arg;
    return 0;
}

/* *(int*)arg, so a test chooses success or the status of a failure. */
int eng_status(void* arg) {
    return arg ? *(int*)arg : 0;
}

/* arg: double[3] = {seconds to spin, start time, end time}: busy work with timestamps. */
int eng_stamp(void* arg) {
    double* d = arg;
    d[1] = now();
    spin(d[0]);
    d[2] = now();
    return 0;
}

/* MXNet's RandSumExpr workload. vals: the shared doubles (eng_rs_vals). arg: int[22] =
 * {target, n, idx[0..18], spin in ns}: vals[target] = sum(vals[idx[0..n)]) / (n + 1),
 * added left to right as a serial Python loop does, so results are bit-identical. */
static double* rs_vals;

void eng_rs_vals(double* vals) {
    rs_vals = vals;
}

int eng_rs(void* arg) {
    const int* w = arg;
    double s = 0;
    for (int i = 0; i < w[1]; i++)
        s += rs_vals[w[2 + i]];
    if (w[21] > 0)
        spin(w[21] * 1e-9);
    rs_vals[w[0]] = s / (w[1] + 1);
    return 0;
}
