/* C side of benchmarks/capi.py: what the C API costs from C, and what GIL-free C backends buy.
 * Usage: capi_bench REPEAT. Prints "name value" lines, one per timed sample:
 *   call_ns    ns per nnc_graph_exec_count call (GIL taken and dropped, handle looked up)
 *   run_us     us per nnc_graph_run(g, NULL) of a 1000-node chain of 1-element SCALAR_MUL
 *   one_ms     ms for 8 calls of a 20 ms C backend, all on one stream
 *   two_ms     ms for the same 8 calls alternating between two streams
 *   push_{none,chain}_ns      ns per nnc_engine_push of a C no-op (no vars; mutating one var)
 *   py_push_{none,chain}_ns   ns per Engine.push of the same C function from Python, in this
 *                             process (the embedded interpreter), in the same rounds
 *   push_gated_{none,chain}_ns, py_push_gated_{none,chain}_ns
 *                             the same, each op also reading a var that a first op (the gate,
 *                             asleep until the pushes are done) mutates: nothing runs while
 *                             the pushes are timed, so they are the host's own cost, without
 *                             the pool's threads taking the cores or the ops' cache lines
 * The push times count the pushing thread only (the pushes' loop); the ops' completion is
 * waited for afterwards, untimed. */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nnc.h"

#define CHECK(call)                                                                       \
    do {                                                                                  \
        if ((call) != NNC_SUCCESS) {                                                      \
            fprintf(stderr, "%s: %s\n", #call, nnc_error_message());                      \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int noop(void* arg) {
    (void)arg;
    return 0;
}

/* The gate: an op that sleeps until gate_open is set (the pushes behind it are timed). */
static atomic_int gate_open;

static int gate_release(void* arg) {
    (void)arg;
    atomic_store(&gate_open, 1);
    return 0;
}

static int gate(void* arg) {
    struct timespec nap = {0, 50000};
    (void)arg;
    while (!atomic_load(&gate_open)) nanosleep(&nap, NULL);
    return 0;
}

/* ns per push of PUSHES no-ops on engine e (mutating *var, or nothing when var is NULL); with
   gate_var, each also reads it, and a gate op mutating it is pushed first. */
static double c_push_ns(nnc_engine_h e, nnc_engine_var_h* var, nnc_engine_var_h* gate_var,
                        int pushes) {
    double t0, t;
    int i, nr = gate_var ? 1 : 0;
    if (gate_var) {
        atomic_store(&gate_open, 0);
        CHECK(nnc_engine_push(e, gate, NULL, NULL, 0, gate_var, 1));
    }
    t0 = now();
    for (i = 0; i < pushes; i++)
        CHECK(nnc_engine_push(e, noop, NULL, gate_var, nr, var, var ? 1 : 0));
    t = now() - t0;
    atomic_store(&gate_open, 1);
    CHECK(nnc_engine_wait_all(e));
    return t / pushes * 1e9;
}

/* The same pushes from Python (Engine.push of the C function as a CFUNC), defined once. */
static const char* py_setup =
    "import time, nnc\n"
    "from nnc.engine.engine import CFUNC\n"
    "_noop = CFUNC(%llu)\n"
    "_gate = CFUNC(%llu)\n"
    "_open = CFUNC(%llu)\n"
    "_e = nnc.Engine()\n"
    "_v = _e.new_var()\n"
    "_g = _e.new_var()\n"
    "def _py_push_ns(n, chain, gated):\n"
    "    push, fn, mut = _e.push, _noop, [_v] if chain else []\n"
    "    read = [_g] if gated else []\n"
    "    if gated:\n"
    "        _e.push(_gate, mutate=[_g])\n"
    "    t0 = time.perf_counter()\n"
    "    for _ in range(n):\n"
    "        push(fn, read=read, mutate=mut)\n"
    "    t = time.perf_counter() - t0\n"
    "    _open(None)\n"
    "    _e.wait_all()\n"
    "    return t / n * 1e9\n";

static void py_run(const char* code) {
    PyGILState_STATE gil = PyGILState_Ensure();
    if (PyRun_SimpleString(code) != 0) exit(1);
    PyGILState_Release(gil);
}

static int spin(const nnc_cmd_param_t* param, nnc_tensor_t** inputs, int input_size,
                nnc_tensor_t** outputs, int output_size, void* context) {
    double t0 = now();
    (void)param, (void)inputs, (void)input_size, (void)outputs, (void)output_size, (void)context;
    while (now() - t0 < 0.02) {
    }
    return NNC_SUCCESS;
}

int main(int argc, char** argv) {
    enum { NODES = 1000, CALLS = 200000, SPINS = 8, PUSHES = 20000 };
    char code[2048];
    nnc_engine_h engine;
    nnc_engine_var_h var, gate_var;
    int repeat = argc > 1 ? atoi(argv[1]) : 5, r, i, n;
    static float x[NODES + 1];
    int64_t dim = 1;
    nnc_tensor_h t[NODES + 1];
    nnc_graph_exec_h e[NODES];
    nnc_graph_h g;
    nnc_cmd_h mul, busy;
    nnc_stream_h s[2];
    double t0;
    CHECK(nnc_init());
    CHECK(nnc_graph_new(&g));
    CHECK(nnc_cmd_new(&mul, "SCALAR_MUL", "a=1.0"));
    for (i = 0; i <= NODES; i++) CHECK(nnc_tensor_new(&t[i], &x[i], NNC_32F, 1, &dim));
    for (i = 0; i < NODES; i++) {
        CHECK(nnc_graph_exec_new(g, mul, &t[i], 1, &t[i + 1], 1, &e[i]));
        if (i) CHECK(nnc_graph_exec_concat(g, e[i - 1], e[i]));
    }
    CHECK(nnc_cmd_register("BENCH_SPIN", "any"));
    CHECK(nnc_cmd_backend_register("BENCH_SPIN", "CPU_C", spin, 0, 0, NNC_PRIORITY_DEFAULT));
    CHECK(nnc_cmd_new(&busy, "BENCH_SPIN", NULL));
    for (i = 0; i < 2; i++) CHECK(nnc_stream_new("cpu", &s[i]));
    CHECK(nnc_engine_new(&engine, 0));
    CHECK(nnc_engine_var_new(engine, &var));
    CHECK(nnc_engine_var_new(engine, &gate_var));
    snprintf(code, sizeof(code), py_setup, (unsigned long long)(size_t)noop,
             (unsigned long long)(size_t)gate, (unsigned long long)(size_t)gate_release);
    py_run(code);
    CHECK(nnc_graph_run(g, NULL));  /* warm-ups */
    c_push_ns(engine, &var, NULL, PUSHES);
    py_run("_py_push_ns(20000, True, False)");
    for (r = 0; r < repeat; r++) {
        t0 = now();
        for (i = 0; i < CALLS; i++) CHECK(nnc_graph_exec_count(g, &n));
        printf("call_ns %.3f\n", (now() - t0) / CALLS * 1e9);
        t0 = now();
        for (i = 0; i < 10; i++) CHECK(nnc_graph_run(g, NULL));
        printf("run_us %.3f\n", (now() - t0) / 10 * 1e6);
        for (n = 1; n <= 2; n++) {
            t0 = now();
            for (i = 0; i < SPINS; i++) CHECK(nnc_cmd_exec(busy, NULL, 0, NULL, 0, s[i % n]));
            for (i = 0; i < n; i++) CHECK(nnc_stream_wait(s[i]));
            printf("%s %.3f\n", n == 1 ? "one_ms" : "two_ms", (now() - t0) * 1e3);
        }
        printf("push_none_ns %.3f\n", c_push_ns(engine, NULL, NULL, PUSHES));
        printf("push_chain_ns %.3f\n", c_push_ns(engine, &var, NULL, PUSHES));
        printf("push_gated_none_ns %.3f\n", c_push_ns(engine, NULL, &gate_var, PUSHES));
        printf("push_gated_chain_ns %.3f\n", c_push_ns(engine, &var, &gate_var, PUSHES));
        fflush(stdout);  /* Python's prints share the descriptor: keep lines whole */
        py_run("for _k, _c, _gt in (('none', False, False), ('chain', True, False),\n"
               "                    ('gated_none', False, True), ('gated_chain', True, True)):\n"
               "    print(f'py_push_{_k}_ns', _py_push_ns(20000, _c, _gt), flush=True)\n");
    }
    CHECK(nnc_engine_var_free(var));
    CHECK(nnc_engine_var_free(gate_var));
    CHECK(nnc_engine_free(engine));
    return nnc_finalize() == NNC_SUCCESS ? 0 : 1;
}
