from cpython.object cimport PyObject

from nnc.base.core cimport NNC_MAX_DIM
from nnc.tensor.tensor cimport nnc_tensor_t

cdef enum:
    # C backends marked release_gil run without the GIL once their outputs hold this many
    # elements; below it, dropping and retaking the GIL costs more than the command.
    NNC_GIL_RELEASE_ELEMENTS = 16384

cdef enum:
    UPSAMPLE_NEAREST = 0                # NNC's CCV_NNC_UPSAMPLE_NEAREST
    UPSAMPLE_BILINEAR = 1               # NNC's CCV_NNC_UPSAMPLE_BILINEAR
    PAD_CONSTANT = 0                    # NNC's CCV_NNC_PAD_ZERO, with any value (param a)
    PAD_REFLECT = 1                     # mirrored without repeating the edge (ONNX's reflect)
    PAD_EDGE = 2                        # NNC's CCV_NNC_PAD_REPLICATE

cdef enum:
    ACTIVATION_NONE = 0
    ACTIVATION_RELU = 1                 # CONVOLUTION activation="relu" (Graph.simplify's fusion)
    ACTIVATION_CLAMP = 2                # CONVOLUTION activation="clamp": min(max(., a), b)
    ACTIVATION_HARD_SWISH = 3           # CONVOLUTION activation="hard_swish": x relu6(x + 3) / 6
    ACTIVATION_SWISH = 4                # CONVOLUTION activation="swish": x sigmoid(x) (SiLU)

# Parameters C backends can read. Python backends read cmd.params instead; both are filled from
# the same normalised dict when the Cmd is made, and neither can change after, so they never
# disagree.
ctypedef struct nnc_cmd_param_t:
    double a                            # SCALAR_MUL's factor, SET's value, ADD's and MUL's p,
    #                                     CLAMP's min (NaN: no lower bound)
    int transpose_a                     # GEMM: use a's last two axes swapped
    int transpose_b                     # GEMM: use w's last two axes swapped (NNC's a.w^T + bias)
    int groups                          # CONVOLUTION groups (>= 1)
    int size[2]                         # pooling window (h, w)
    int stride[2]                       # (h, w), >= 1
    int pad[4]                          # (top, left, bottom, right), >= 0
    # Appended after the fields above, so their offsets (the C ABI's) stay as they were.
    double b                            # ADD's q, CLAMP's max (NaN: no upper bound)
    int count_include_pad               # AVG_POOL: 1 divides by kh * kw, 0 by real elements
    int activation                      # CONVOLUTION: ACTIVATION_RELU applies max(0, .) last,
    #                                     ACTIVATION_CLAMP min(max(., a), b) (its clamp=(a, b)),
    #                                     ACTIVATION_HARD_SWISH, ACTIVATION_SWISH those functions
    int ceil_mode                       # MAX_POOL, AVG_POOL: 1 rounds the output size up
    double c                            # LRN's bias (its alpha is a, its beta b, its size size[0])
    int mode                            # UPSAMPLE: UPSAMPLE_*; PAD: PAD_* (the enums above)
    int align_corners                   # UPSAMPLE: 1 maps the corner pixels' centres together
    int begin[NNC_MAX_DIM]              # PAD: elements added before each axis (NNC's size.dim)
    int end[NNC_MAX_DIM]                # PAD: and after it (NNC's pad.end); both >= 0

# A C command backend. Absent (None) tensors are NULL. Returns NNC_SUCCESS (0) or a negative
# nnc_status_e. Must not touch Python: graph runners may call it without the GIL.
ctypedef int (*nnc_cmd_exec_f)(
    const nnc_cmd_param_t* param,
    nnc_tensor_t** inputs, int input_size,
    nnc_tensor_t** outputs, int output_size,
    void* context,
) noexcept nogil


# How a command becomes work: the one bind path (cmd_bind). A command, its chosen backend and
# its tensors become a bound record that every runner executes: the sequential node loop
# (cmd_bound_run), stream tasks (embedded, copied, in nnc.stream.worker's stream_task_t), cmd_exec,
# loop and branch bodies, the C API. Kinds keep the values of nnc.stream.worker's TASK_C / TASK_PY.
cdef enum:
    BOUND_NONE = 0                      # nothing to run (NOOP)
    BOUND_C = 1                         # rc = c_exec(param, io, n_in, io + n_in, n_out, context)
    BOUND_PY = 2                        # fn(*args), with the GIL

cdef enum:
    BOUND_NOGIL = 0x1                   # BOUND_C: big enough to run without the GIL
    BOUND_DEVICE = 0x2                  # BOUND_PY: a GPU backend; args end with its Tensors and a
    #                                     GPU stream launches fn(*args, stream=<its CUDA stream>)
    BOUND_MOVABLE = 0x4                 # some tensor may be re-pointed by a loop: C backends read
    #                                     the headers at run time, Python ones get fresh arrays

ctypedef struct nnc_bound_t:
    int kind                            # BOUND_*
    int flags                           # BOUND_NOGIL | BOUND_DEVICE | BOUND_MOVABLE
    nnc_cmd_exec_f c_exec               # BOUND_C: the backend function
    const nnc_cmd_param_t* param        # BOUND_C: the Cmd's param (the binder keeps the Cmd)
    nnc_tensor_t** io                   # input_size inputs, then output_size outputs; NULL absent
    int input_size
    int output_size
    PyObject* fn                        # BOUND_PY: borrowed from the tuple cmd_bind returned
    PyObject* args                      # BOUND_PY: the argument tuple, likewise


cdef class Backend:
    cdef readonly str name              # "CPU_REF", "CPU_OPT", or a user's name
    cdef readonly str command           # the command it implements
    cdef readonly int priority          # higher is preferred by default selection
    cdef readonly int seq               # registration sequence number: ties go to the earlier
    cdef nnc_cmd_exec_f c_exec          # C implementation, or NULL
    cdef readonly object py_exec        # py_exec(cmd, inputs, outputs) on ndarrays, or None
    cdef readonly int datatypes         # mask of accepted NNC_* datatype bits
    cdef readonly bint contiguous_only  # rejects strided views
    cdef readonly object accept         # accept(cmd, inputs, outputs) -> bool, or None
    cdef readonly bint release_gil      # C backend worth running without the GIL on big tensors
    # "cpu": every tensor in host memory, py_exec gets ndarrays. "gpu": every tensor on a GPU;
    # "any": no device rule (accept decides). Non-"cpu" Python backends get the Tensors and
    # py_exec(cmd, inputs, outputs, stream=None) runs synchronously (nnc/cuda/runner.py).
    cdef readonly str device

    cdef bint accepts(self, object cmd, list inputs, list outputs) except -1


cdef class CommandInfo:
    cdef readonly str name
    cdef readonly int id                # index in the registry; stable for the process
    cdef readonly str inplace           # "none" | "allow" | "enforce" | "any"
    # Inputs (by index) that may be exactly output 0 whatever inplace says (CONVOLUTION's
    # residual): every backend either takes that alias or does not accept it.
    cdef readonly tuple alias_inputs
    cdef readonly object check          # check(cmd, inputs, outputs), raises CommandError
    cdef readonly object normalize      # normalize(params: dict) -> dict, raises CommandError
    cdef readonly list backends         # Backend objects, sorted by (-priority, seq)
    cdef readonly bint builtin          # registered by import nnc: never replaced
    # WHILE and CASE_OF (register_control_command): the node runs sub-graphs through the
    # runner object in its Cmd.fn (nnc.graph.while_node, case_of). Graphs and schedules test this
    # flag (and a node's EXEC_CONTROL bit), never the command names.
    cdef readonly bint control


cdef class Cmd:
    cdef readonly CommandInfo info
    cdef nnc_cmd_param_t param
    # Normalised parameters: a CmdParams (read-only, containers frozen), made once with param;
    # nodes share it with their Cmd copies, so param and params never disagree.
    cdef readonly object params
    cdef readonly object fn             # CUSTOM's callable, else None
    cdef Backend _backend               # chosen or pinned backend; None until chosen
    cdef readonly bint pinned           # the user named the backend: selection must keep it

    cdef Cmd copy_with(self, Backend backend)


cdef Backend cmd_select(Cmd cmd, list inputs, list outputs)
cdef int cmd_validate(Cmd cmd, list inputs, list outputs) except -1
cdef list tensor_list(object items, str what)
cdef int backend_run(Backend b, Cmd cmd, list inputs, list outputs) except -1
cdef object cmd_bind(Cmd cmd, Backend b, list inputs, list outputs, nnc_tensor_t** io,
                     nnc_bound_t* out)
cdef bint tensors_movable(list tensors) except -1     # may a loop re-point any of them?
cdef Backend register_c_backend(
    str command, str name, nnc_cmd_exec_f fn, int datatypes, bint contiguous_only,
    object accept, object priority, bint release_gil,
)


cdef extern from "Python.h":
    object PyObject_Call(PyObject* fn, PyObject* args, PyObject* kwargs)


cdef inline int cmd_bound_run_c(const nnc_bound_t* t, void* context) noexcept nogil:
    """Call BOUND_C work's backend on the calling thread, as it is (GIL held or not): its
    status. The one place that spells a C backend's calling convention for bound work."""
    return t.c_exec(t.param, t.io, t.input_size, t.io + t.input_size, t.output_size, context)


cdef inline int cmd_bound_run(const nnc_bound_t* t, void* context) except 1:
    """Run bound work on the calling thread (which holds the GIL): 0, or a C backend's negative
    status; a Python backend's exception propagates. ``context``: the scratch memory owner
    (nnc_stream_context_t) a C backend gets. Inline: the sequential node loop calls it per
    node, and a call into another module would cost more than a NOOP."""
    cdef int rc = 0
    if t.kind == BOUND_C:
        if t.flags & BOUND_NOGIL:
            with nogil:
                rc = cmd_bound_run_c(t, context)
        else:
            rc = cmd_bound_run_c(t, context)
    elif t.kind == BOUND_PY:
        PyObject_Call(t.fn, t.args, NULL)
    return rc
