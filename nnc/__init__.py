"""nnc: NNC's concrete computation graph and static scheduler, for Python, with a Cython core.

See docs/design.md for the layers and README.md for a tour.
"""

# Importing a module registers what it implements with the layers below it (docs/design.md,
# "Registries"): nnc.invariants the checks of nnc.debug.check(); nnc.cuda the GPU table of
# nnc.device; control (while_, case_of ...), schedule, run, flow (run(stream=)) and tools
# Graph's methods. So ``import nnc`` fills every table.
from nnc import engine_call as _engine_call  # noqa: F401  (registers ENGINE_CALL: recorded C ops)
from nnc import invariants as _invariants  # noqa: F401
from nnc._core import (
    MAX_DIM,
    CommandError,
    CUDAError,
    EngineError,
    GraphError,
    HazardWarning,
    NNCError,
    ScheduleError,
    StreamError,
    TensorError,
    get_include,
)
from nnc.cmd import (
    Backend,
    Cmd,
    backends,
    cmd_autotune,
    cmd_exec,
    command_info,
    commands,
    register_backend,
    register_command,
)
from nnc.cmd import seal_builtins as _seal_builtins
from nnc.cuda import available as cuda_available
from nnc.cuda import unavailable_reason as cuda_unavailable_reason
from nnc.cuda.backends import register as _register_gpu_backends
from nnc.cuda.cublas_gemm import register as _register_cublas_gemm
from nnc.cuda.cudnn_conv import register as _register_cudnn_conv
from nnc.device import DeviceError
from nnc.dlpack import DLPackError, from_dlpack
from nnc.drain import drain_all as _drain_all  # noqa: F401  (registers the exit hook: nnc.drain)
from nnc.engine import Engine
from nnc.engine_op import EngineVar
from nnc.graph import control as _control  # noqa: F401
from nnc.graph import flow as _flow  # noqa: F401
from nnc.graph import policy_ios as _policy_ios  # noqa: F401  (registers policy "ios")
from nnc.graph import policy_list as _policy_list  # noqa: F401  (registers policy "list")
from nnc.graph import policy_nimble as _policy_nimble  # noqa: F401  (registers policy "nimble")
from nnc.graph import policy_raf as _policy_raf  # noqa: F401  (registers "wavefront", "asap")
from nnc.graph import run as _run  # noqa: F401
from nnc.graph import tools as _tools  # noqa: F401
from nnc.graph.graph import Graph, GraphExec
from nnc.graph.hazard import Hazard, graph_hazards
from nnc.graph.schedule import ExecSchedule, Schedule, static_schedule
from nnc.multiview import MultiView
from nnc.ops import register_builtins as _register_builtins
from nnc.parallel import get_intra_op_threads, set_intra_op_threads
from nnc.stream import Signal, Stream
from nnc.tensor import Tensor
from nnc.trace import trace
from nnc.worker import get_num_threads, set_num_threads

__version__ = "0.1.0"


_register_builtins()
# GPU_REF backends: registering them imports no cuda-bindings; only GPU tensors select them.
_register_gpu_backends()
# GPU_OPT of GEMM (cuBLAS): registering imports neither nvmath nor cuda-bindings.
_register_cublas_gemm()
# GPU_OPT CONVOLUTION through cuDNN: registering imports neither cuda-bindings nor cudnn.
_register_cudnn_conv()
# From here on the commands registered above are built-in: never replaced by a re-registration.
_seal_builtins()

# nnc.onnx (layer 8) imports the onnx package only when load/save are called; nnc.pipeline
# (layer 8) is TVM's pipeline executor on streams (docs/pipeline.md).
from nnc import onnx, pipeline  # noqa: E402, F401

__all__ = [
    "MAX_DIM",
    "Backend",
    "CUDAError",
    "Cmd",
    "CommandError",
    "DLPackError",
    "DeviceError",
    "Engine",
    "EngineError",
    "EngineVar",
    "ExecSchedule",
    "Graph",
    "GraphError",
    "GraphExec",
    "Hazard",
    "MultiView",
    "NNCError",
    "Schedule",
    "HazardWarning",
    "ScheduleError",
    "Signal",
    "Stream",
    "StreamError",
    "Tensor",
    "TensorError",
    "__version__",
    "backends",
    "cmd_autotune",
    "cmd_exec",
    "command_info",
    "commands",
    "from_dlpack",
    "get_intra_op_threads",
    "get_num_threads",
    "cuda_available",
    "cuda_unavailable_reason",
    "get_include",
    "graph_hazards",
    "register_backend",
    "register_command",
    "set_intra_op_threads",
    "set_num_threads",
    "static_schedule",
    "trace",
]
