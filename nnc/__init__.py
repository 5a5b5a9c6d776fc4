"""nnc: NNC's concrete computation graph and static scheduler, for Python, with a Cython core.

See docs/design.md for the layers and README.md for a tour.
"""

import importlib.machinery as _machinery
import importlib.util as _importlib_util
import os as _os
import sys as _sys

__version__ = "0.1.0"


def _built(folder: str) -> bool:
    """Whether the nnc package in ``folder`` has its compiled modules (its first, ``base/core``)."""
    return any(_os.path.exists(_os.path.join(folder, "base", "core" + suffix))
               for suffix in _machinery.EXTENSION_SUFFIXES)


def _installed_nnc() -> "_machinery.ModuleSpec | None":
    """The spec of a built nnc to load in this one's place, or None when this one is built.

    ``python -m`` and ``python -c`` put the working directory first on sys.path, so in the root
    of a source checkout whose compiled modules were never built (nnc installed from a wheel,
    the project's tools run from the clone) ``import nnc`` finds this package first. The nnc the
    user installed is the built one on the rest of the import path; with none, this raises an
    ImportError saying how to build, instead of failing on the first compiled module.
    """
    here = _os.path.dirname(_os.path.realpath(__file__))
    if _built(here):
        return None
    checkout = _os.path.dirname(here)
    others = [p for p in _sys.path if _os.path.realpath(p or _os.curdir) != checkout]
    for finder in _sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        spec = find_spec(__name__, others if finder is _machinery.PathFinder else None)
        folders = (spec and spec.submodule_search_locations) or []
        if (isinstance(spec, _machinery.ModuleSpec) and spec.loader is not None and folders
                and _os.path.realpath(folders[0]) != here and _built(folders[0])):
            return spec
    raise ImportError(
        f"nnc's compiled modules are not built in {here} (a source checkout, found first on "
        "sys.path) and no built nnc is installed: build them in place with `pip install -e .` "
        "(or `python setup.py build_ext --inplace`), or install nnc-graph",
        name=__name__)


_installed = _installed_nnc()
if _installed is not None and _installed.loader is not None:
    # Load the installed nnc as ``nnc``: the import system returns what sys.modules holds once
    # this file ends, and this file's own imports would reach the unbuilt tree's modules.
    _sys.modules[__name__] = _importlib_util.module_from_spec(_installed)
    _installed.loader.exec_module(_sys.modules[__name__])
else:
    # Importing a module registers what it implements with the layers below it (docs/design.md,
    # "Registries"): nnc.check.invariants the checks of nnc.base.debug.check(); nnc.cuda the GPU
    # table of nnc.base.device; while_node (while_ ...), case_of, schedule, run, flow
    # (run(stream=)) and tools Graph's methods. So ``import nnc`` fills every table.
    from nnc.base.core import (
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
    from nnc.base.device import DeviceError
    from nnc.base.parallel import get_intra_op_threads, set_intra_op_threads
    from nnc.check import invariants as _invariants  # noqa: F401
    from nnc.cmd.builtins import register_builtins as _register_builtins
    from nnc.cmd.command import (
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
    from nnc.cmd.command import seal_builtins as _seal_builtins
    from nnc.cmd.hint import hint_auto, hint_tensor_auto
    from nnc.cuda import available as cuda_available
    from nnc.cuda import unavailable_reason as cuda_unavailable_reason
    from nnc.cuda.builtins import register_gpu_builtins as _register_gpu_builtins
    from nnc.engine import call as _engine_call  # noqa: F401  (registers ENGINE_CALL: recorded C ops)
    from nnc.engine.engine import Engine
    from nnc.engine.op import EngineVar
    from nnc.graph import case_of as _case_of  # noqa: F401
    from nnc.graph import freeze as _freeze  # noqa: F401  (registers Graph.freeze, Graph.memory)
    from nnc.graph import while_node as _while_node  # noqa: F401
    from nnc.graph.compare import Compare
    from nnc.graph.graph import Graph, GraphExec
    from nnc.run import flow as _flow  # noqa: F401
    from nnc.run import run as _run  # noqa: F401
    from nnc.run import tools as _tools  # noqa: F401
    from nnc.schedule import policy_ios as _policy_ios  # noqa: F401  (registers policy "ios")
    from nnc.schedule import policy_list as _policy_list  # noqa: F401  (registers policy "list")
    from nnc.schedule import policy_nimble as _policy_nimble  # noqa: F401  (registers policy "nimble")
    from nnc.schedule import policy_raf as _policy_raf  # noqa: F401  (registers "wavefront", "asap")
    from nnc.schedule.hazard import Hazard, graph_hazards
    from nnc.schedule.schedule import ExecSchedule, Schedule, static_schedule
    from nnc.stream.drain import drain_all as _drain_all  # noqa: F401  (registers the exit hook: nnc.stream.drain)
    from nnc.stream.stream import Signal, Stream
    from nnc.stream.worker import get_num_threads, set_num_threads
    from nnc.tensor.dlpack import DLPackError, from_dlpack
    from nnc.tensor.io import (
        TensorIOError,
        TensorNotFoundError,
        tensor_eq,
        tensor_new_from_file,
        tensor_read,
        tensor_write,
        tensor_zero,
    )
    from nnc.tensor.multiview import MultiView
    from nnc.tensor.tensor import Tensor, tensor_resize
    from nnc.trace import trace

    _register_builtins()
    # The families' GPU backends (GPU_REF, then GPU_OPT through cuBLAS and cuDNN), after every
    # CPU backend: registering imports neither cuda-bindings nor a library; only GPU tensors
    # select them.
    _register_gpu_builtins()
    # From here on the commands registered above are built-in: never replaced by a re-registration.
    _seal_builtins()

    # nnc.onnx (layer 8) imports the onnx package only when load/save are called; nnc.pipeline
    # (layer 8) is TVM's pipeline executor on streams (docs/pipeline.md).
    from nnc import onnx, pipeline  # noqa: E402, F401

    # Modules that moved into the layer folders and whose objects pickles name by module path
    # (errors, commands' parameters, multiviews, DLPack capsules' errors, schedules, Compare of
    # nnc.graph.control, since split by node kind into nnc.graph's while_node, case_of, subgraph
    # and compare): a pickle made before the move still loads. The packages that replaced a
    # module of the same name (nnc.tensor, nnc.cmd, nnc.stream, nnc.engine, nnc.capi) re-export
    # that module's names.
    from nnc.base import core as _core_module
    from nnc.cmd import params as _params_module
    from nnc.graph import compare as _compare_module
    from nnc.schedule import schedule as _schedule_module
    from nnc.tensor import dlpack as _dlpack_module
    from nnc.tensor import multiview as _multiview_module

    for _old, _module in (("nnc._core", _core_module), ("nnc.cmd_params", _params_module),
                          ("nnc.dlpack", _dlpack_module), ("nnc.multiview", _multiview_module),
                          ("nnc.graph.schedule", _schedule_module),
                          ("nnc.graph.control", _compare_module)):
        _sys.modules.setdefault(_old, _module)

__all__ = [
    "MAX_DIM",
    "Backend",
    "CUDAError",
    "Cmd",
    "CommandError",
    "Compare",
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
    "TensorIOError",
    "TensorNotFoundError",
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
    "hint_auto",
    "hint_tensor_auto",
    "register_backend",
    "register_command",
    "set_intra_op_threads",
    "set_num_threads",
    "static_schedule",
    "tensor_eq",
    "tensor_new_from_file",
    "tensor_read",
    "tensor_resize",
    "tensor_write",
    "tensor_zero",
    "trace",
]
