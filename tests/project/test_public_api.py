"""The public names README.md and docs/ promise, and the error hierarchy."""

import nnc


def test_public_names_exist():
    for name in nnc.__all__:
        assert hasattr(nnc, name), name
    for name in ("Tensor", "Cmd", "Graph", "GraphExec", "cmd_exec", "commands", "backends",
                 "register_command", "register_backend", "NNCError", "GraphError",
                 "CommandError", "StreamError", "ScheduleError"):
        assert name in nnc.__all__, name


def test_errors_derive_from_nncerror():
    for cls in (nnc.TensorError, nnc.CommandError, nnc.GraphError, nnc.StreamError,
                nnc.ScheduleError):
        assert issubclass(cls, nnc.NNCError)
    assert issubclass(nnc.GraphError, ValueError)
    assert issubclass(nnc.StreamError, RuntimeError)


def test_builtin_commands_are_registered():
    expected = {"NOOP", "SET", "EWSUM", "EWPROD", "EWDIV", "EWEXP", "EWLOG", "SCALAR_MUL",
                "GEMM", "RELU", "SOFTMAX", "CONVOLUTION", "MAX_POOL", "AVG_POOL",
                "DATA_TRANSFER", "CUSTOM"}
    assert expected <= set(nnc.commands())
    for name in expected - {"NOOP", "CUSTOM"}:
        assert nnc.backends(name)[-1] == "CPU_REF", name  # the definition is always there
    for name in ("SCALAR_MUL", "EWSUM", "GEMM", "CONVOLUTION"):
        assert nnc.backends(name)[0] == "CPU_OPT", name


def test_get_include_has_the_pxd_files():
    import os

    inc = nnc.get_include()
    assert os.path.exists(os.path.join(inc, "nnc.h"))
    assert os.path.exists(os.path.join(inc, "nnc_types.h"))
    assert os.path.exists(os.path.join(inc, "tensor", "tensor.pxd"))


def test_documented_gpu_opt_paths_are_the_backend_modules():
    """``nnc.cuda.cudnn_conv`` and ``nnc.cuda.cublas_gemm`` (docs/gpu.md) are the very modules
    of the families' gpu/ folders, by import, by attribute and by import_module, so a setting
    made through the documented path (``TUNE``) reaches the backend."""
    import importlib

    import nnc.cuda.cublas_gemm
    import nnc.cuda.cudnn_conv
    from nnc.cmd.convolution.gpu import cudnn
    from nnc.cmd.gemm.gpu import cublas
    from nnc.cuda import cublas_gemm, cudnn_conv

    assert cudnn_conv is nnc.cuda.cudnn_conv is cudnn
    assert importlib.import_module("nnc.cuda.cudnn_conv") is cudnn
    assert cublas_gemm is nnc.cuda.cublas_gemm is cublas
    assert importlib.import_module("nnc.cuda.cublas_gemm") is cublas
    old = cudnn.TUNE
    try:
        nnc.cuda.cudnn_conv.TUNE = False
        assert cudnn.TUNE is False
    finally:
        cudnn.TUNE = old


def test_cuda_graph_is_the_capture_module():
    """``nnc.cuda.graph`` (the capture module's earlier path) is nnc.cuda.capture itself."""
    import importlib

    import nnc.cuda.graph
    from nnc.cuda import capture, graph

    assert graph is nnc.cuda.graph is capture
    assert importlib.import_module("nnc.cuda.graph") is capture
    assert graph.capture is capture.capture and graph.to_gpu is capture.to_gpu
