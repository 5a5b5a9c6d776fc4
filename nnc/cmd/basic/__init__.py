"""Layer 2 command, the basic family: this module (the definitions and CPU_REF), cpu_opt.pyx
(CPU_OPT of SET and DATA_TRANSFER); gpu/ (layer 3, never imported from here): GPU_REF of SET and
DATA_TRANSFER, registered by nnc.cuda.builtins.

NOOP, CUSTOM, SET and DATA_TRANSFER: commands that move or fill data (NNC: cmd/util, blas)."""

import numpy as np

from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command, register_control_command


def _noop(cmd, inputs, outputs):
    pass


def _custom_exec(cmd, inputs, outputs):
    cmd.fn(inputs, outputs)


def _control_on_device(cmd, inputs, outputs, stream=None):
    # A while or case..of node on GPU tensors (a Compare of a device scalar): its runner
    # reads what it needs itself, after the synchronous stream's earlier work.
    cmd.fn(inputs, outputs)


def _custom_normalize(params):
    _check.only("CUSTOM", params, ("fn",))
    if not callable(params.get("fn")):
        from nnc.base.core import CommandError

        raise CommandError("CUSTOM needs fn=callable(inputs, outputs); use nnc.Cmd.custom(fn)")
    return params


def _control_normalize(params):
    # WHILE and CASE_OF nodes are made by Graph.while_ / Graph.case_of, which pass their runner.
    if set(params) != {"fn"} or not callable(params["fn"]):
        from nnc.base.core import CommandError

        raise CommandError("WHILE and CASE_OF nodes are made with Graph.while_ and Graph.case_of")
    return params


def _set_normalize(params):
    _check.only("SET", params, ("value",))
    return {"value": float(params.get("value", 0.0))}


def _set_check(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, (0, None), (1, None))
    _check.present(cmd, outputs, "output", *range(len(outputs)))


def _set_ref(cmd, inputs, outputs):
    for y in outputs:
        y[...] = cmd.params["value"]


def _transfer_check(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, (1, None), (1, None))
    if len(inputs) != len(outputs):
        from nnc.base.core import CommandError

        raise CommandError(
            f"DATA_TRANSFER copies input k to output k: got {len(inputs)} inputs and "
            f"{len(outputs)} outputs"
        )
    for k, (x, y) in enumerate(zip(inputs, outputs)):
        _check.present(cmd, inputs, "input", k)
        _check.present(cmd, outputs, "output", k)
        _check.same_shape(cmd, (x, y), (f"input {k}", f"output {k}"))
        _check.same_dtype(cmd, (x, y))


def _transfer_ref(cmd, inputs, outputs):
    for x, y in zip(inputs, outputs):
        np.copyto(y, x)


def register():
    register_command("NOOP", inplace="any")
    register_backend("NOOP", "CPU_REF", _noop)
    register_command("CUSTOM", inplace="any", normalize=_custom_normalize)
    register_backend("CUSTOM", "CPU_REF", _custom_exec)
    for name in ("WHILE", "CASE_OF"):
        register_control_command(name, _control_normalize)
        register_backend(name, "CPU_REF", _custom_exec)
        register_backend(name, "GPU_REF", _control_on_device, device="gpu")
    register_command("SET", inplace="allow", check=_set_check, normalize=_set_normalize)
    register_backend("SET", "CPU_REF", _set_ref)
    register_command("DATA_TRANSFER", inplace="allow", check=_transfer_check)
    register_backend("DATA_TRANSFER", "CPU_REF", _transfer_ref)
