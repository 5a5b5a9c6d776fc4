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
