/* C side of benchmarks/engine.py, compiled into a shared library at run time and loaded with
 * ctypes. Every function has nnc.Engine's C signature, int fn(void* arg), returns 0 and takes
 * no lock: the read/mutate sets an op is pushed with are the only thing that keeps two of
 * them from touching the same variable at once, which is what the benchmark checks. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

/* One RandSumExpr workload (MXNet's tests/cpp/engine/threaded_engine_test.cc):
 * after spinning spin_ns nanoseconds, vars[target] = (sum of vars[reads[i]]) / (n + 1).
 * benchmarks/_engine_work.py mirrors this layout in the ctypes.Structure RandSumOp. */
typedef struct {
    double* vars;   /* the 100 variables every workload shares */
    int target;     /* index in vars of the one variable written */
    int n;          /* number of reads, 2..19 */
    int reads[19];  /* indices in vars; may repeat and may include target */
    int spin_ns;    /* GIL-free work before the arithmetic: > 0 busy-waits that many ns,
                       < 0 sleeps -spin_ns ns (MXNet's test sleeps) */
} randsum_op_t;

int nnc_bench_noop(void* arg) {
    (void)arg;
    return 0;
}

static long long monotonic_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Busy-waits rather than sleeps: a sleep of a few microseconds costs tens of them on Linux,
 * and the work is meant to occupy a core for the stated time. */
static void spin(int ns) {
    if (ns <= 0)
        return;
    long long end = monotonic_ns() + ns;
    while (monotonic_ns() < end) {
    }
}

int nnc_bench_randsum(void* arg) {
    randsum_op_t* op = (randsum_op_t*)arg;
    if (op->spin_ns < 0) {
        struct timespec t = {0, -op->spin_ns};
        nanosleep(&t, NULL);
    } else {
        spin(op->spin_ns);
    }
    /* summed in read order, so every schedule that respects the read/mutate sets gives the
     * serial loop's bits */
    double sum = 0;
    for (int i = 0; i < op->n; i++)
        sum += op->vars[op->reads[i]];
    op->vars[op->target] = sum / (op->n + 1);
    return 0;
}

/* The serial baseline: the same calls one after another, with no engine and no Python. */
int nnc_bench_randsum_serial(randsum_op_t* ops, int count) {
    for (int i = 0; i < count; i++)
        nnc_bench_randsum(ops + i);
    return 0;
}

/* Mean ns that spin(ns) really takes over count calls (the clock's own cost shows for small
 * ns); reported beside the results. */
double nnc_bench_spin_check(int ns, int count) {
    long long t0 = monotonic_ns();
    for (int i = 0; i < count; i++)
        spin(ns);
    return (double)(monotonic_ns() - t0) / count;
}
