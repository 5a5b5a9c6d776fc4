/* C API calls from inside nnc_parallel_for parts, whatever holds the GIL around the backend.
 *
 * A C backend on small outputs runs synchronously with its caller's GIL held (nnc_cmd_exec or
 * nnc_graph_run with no stream, Backend.exec and g.run() from Python); its parts run on the
 * caller and on idle pool threads, and each part calls C API functions that take the GIL
 * (tensors, a synchronous command, a stream query, a refused call and its message, a run of
 * the busy graph). A pool
 * thread's part must get the GIL although the caller holds it while the backend runs. The
 * backend also runs on a stream, where no thread holds the GIL around it.
 * Prints one line per run and "OK" when every result is right and some part ran on another
 * thread than its caller (tests/capi/test_capi.py runs it with a timeout and several pool threads).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "nnc.h"

#define PARTS 16

/* What one backend call's parts share; the part index picks an element. */
typedef struct {
    const float* x;
    float* y;
    pthread_t caller;
} job_t;

static nnc_cmd_h scale;           /* SCALAR_MUL a=2, run synchronously by every part */
static nnc_stream_h idle_stream;  /* queried by every part */
static nnc_graph_h running;       /* the graph whose run calls the backend, or NULL */
static int failed_at[PARTS];      /* the check a part failed (its status), 0 if none */
static int helped;                /* parts run by another thread than the backend's caller */

/* y[part] = 2 * x[part] + 1, through C API calls; returns the failed check's number. */
static int api_part(void* arg, int64_t part, void* context) {
    const job_t* j = arg;
    struct timespec pause = {0, 3 * 1000 * 1000}; /* slow enough for helpers to take parts */
    float in = j->x[part], out = 0;
    int64_t one = 1;
    nnc_tensor_h ti = NULL, to = NULL;
    nnc_tensor_t view;
    void* scratch = NULL;
    int done = 0, rc = 0;
    nanosleep(&pause, NULL);
    if (nnc_stream_workspace(context, 64, &scratch) != NNC_SUCCESS) rc = -11;
    else if (nnc_tensor_new(&ti, &in, NNC_32F, 1, &one) != NNC_SUCCESS) rc = -12;
    else if (nnc_tensor_new(&to, &out, NNC_32F, 1, &one) != NNC_SUCCESS) rc = -13;
    else if (nnc_tensor_get(ti, &view) != NNC_SUCCESS || view.data != &in) rc = -14;
    else if (nnc_cmd_exec(scale, &ti, 1, &to, 1, NULL) != NNC_SUCCESS) rc = -15;
    else if (nnc_stream_query(idle_stream, &done) != NNC_SUCCESS || !done) rc = -16;
    else if (nnc_tensor_free(NULL) != NNC_ERROR_NULL || !nnc_error_message()[0]) rc = -17;
    else if (running && nnc_graph_run(running, NULL) != NNC_ERROR_GRAPH) rc = -20;
    if (ti && nnc_tensor_free(ti) != NNC_SUCCESS && !rc) rc = -18;
    if (to && nnc_tensor_free(to) != NNC_SUCCESS && !rc) rc = -19;
    if (rc) {
        failed_at[part] = rc;
        return rc;
    }
    j->y[part] = out + 1;
    if (!pthread_equal(pthread_self(), j->caller)) __atomic_fetch_add(&helped, 1, __ATOMIC_SEQ_CST);
    return NNC_SUCCESS;
}

static int api_backend(const nnc_cmd_param_t* param, nnc_tensor_t** inputs, int input_size,
                       nnc_tensor_t** outputs, int output_size, void* context) {
    job_t j;
    (void)param;
    if (input_size != 1 || output_size != 1 || !inputs[0] || !outputs[0] ||
        inputs[0]->count != PARTS || outputs[0]->count != PARTS)
        return NNC_INVALID;
    j.x = inputs[0]->data;
    j.y = outputs[0]->data;
    j.caller = pthread_self();
    return nnc_parallel_for(PARTS, api_part, &j, context);
}

static float x[PARTS], y[PARTS];
static int failures = 0;

/* The last run wrote y = 2x + 1 and returned rc 0. */
static void check(const char* what, int rc) {
    int k, ok = rc == NNC_SUCCESS;
    for (k = 0; k < PARTS; k++) ok &= y[k] == 2 * x[k] + 1;
    printf("%s: rc %d, results %s", what, rc, ok ? "ok" : "WRONG");
    if (rc) printf(" (%s)", nnc_error_message());
    for (k = 0; k < PARTS; k++)
        if (failed_at[k]) printf(" part %d failed check %d;", k, failed_at[k]);
    printf("\n");
    failures += !ok;
    memset(y, 0, sizeof y);
    memset(failed_at, 0, sizeof failed_at);
}

/* From Python, with the GIL held: the backend through Backend.exec and a graph's g.run(). */
static const char* from_python =
    "import numpy as np\n"
    "import nnc\n"
    "x = np.arange(16, dtype=np.float32)\n"
    "for how in ('Backend.exec', 'g.run()'):\n"
    "    y = np.zeros(16, np.float32)\n"
    "    cmd = nnc.Cmd('PART_API')\n"
    "    if how == 'Backend.exec':\n"
    "        backend = nnc.command_info('PART_API').backends[0]\n"
    "        backend.exec(cmd, [nnc.Tensor(x)], [nnc.Tensor(y)])\n"
    "    else:\n"
    "        g = nnc.Graph()\n"
    "        g.exec(cmd, [nnc.Tensor(x)], [nnc.Tensor(y)])\n"
    "        g.run()\n"
    "    print(f'{how} from Python: results', 'ok' if (y == 2 * x + 1).all() else 'WRONG')\n";

int main(void) {
    int64_t dim = PARTS;
    nnc_tensor_h tx, ty;
    nnc_cmd_h cmd;
    nnc_graph_h g;
    nnc_graph_exec_h node;
    nnc_stream_h stream;
    PyGILState_STATE gil;
    int k, rc;
    setvbuf(stdout, NULL, _IOLBF, 0); /* a run that hangs still shows the lines it printed */
    if (nnc_init() != NNC_SUCCESS) {
        fprintf(stderr, "nnc_init: %s\n", nnc_error_message());
        return 1;
    }
    for (k = 0; k < PARTS; k++) x[k] = (float)k;
    if (nnc_cmd_register("PART_API", "none") || nnc_cmd_new(&cmd, "PART_API", NULL) ||
        nnc_cmd_backend_register("PART_API", "CPU_C", api_backend, NNC_32F,
                                 NNC_BACKEND_CONTIGUOUS, NNC_PRIORITY_DEFAULT) ||
        nnc_cmd_new(&scale, "SCALAR_MUL", "a=2") || nnc_stream_new("cpu", &idle_stream) ||
        nnc_stream_new("cpu", &stream) || nnc_tensor_new(&tx, x, NNC_32F, 1, &dim) ||
        nnc_tensor_new(&ty, y, NNC_32F, 1, &dim) || nnc_graph_new(&g) ||
        nnc_graph_exec_new(g, cmd, &tx, 1, &ty, 1, &node)) {
        fprintf(stderr, "setup: %s\n", nnc_error_message());
        return 1;
    }
    check("nnc_cmd_exec, no stream", nnc_cmd_exec(cmd, &tx, 1, &ty, 1, NULL));
    running = g; /* its parts try to run it again: refused, it is busy */
    check("nnc_graph_run, no stream", nnc_graph_run(g, NULL));
    rc = nnc_graph_run(g, stream);
    check("nnc_graph_run on a stream", rc ? rc : nnc_stream_wait(stream));
    running = NULL;
    rc = nnc_cmd_exec(cmd, &tx, 1, &ty, 1, stream);
    check("nnc_cmd_exec on a stream", rc ? rc : nnc_stream_wait(stream));
    gil = PyGILState_Ensure();
    rc = PyRun_SimpleString(from_python);
    PyGILState_Release(gil);
    failures += rc != 0;
    printf("parts run by helpers: %d\n", helped);
    failures += helped == 0;
    nnc_graph_exec_free(node);
    nnc_graph_free(g);
    nnc_tensor_free(tx);
    nnc_tensor_free(ty);
    nnc_cmd_free(cmd);
    nnc_cmd_free(scale);
    nnc_stream_free(stream);
    nnc_stream_free(idle_stream);
    if (nnc_finalize() != NNC_SUCCESS) failures++;
    printf("%s\n", failures ? "FAILED" : "OK");
    return failures != 0;
}
