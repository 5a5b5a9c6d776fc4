"""Layer 2 command, DATATYPE_CONVERSION: this module (the definition and CPU_REF). No C or GPU
backend.

DATATYPE_CONVERSION copies a tensor into one of another dtype (NNC: cmd/util,
CCV_NNC_DATATYPE_CONVERSION_FORWARD), among nnc's dtypes (uint8, int32, int64, float16, float32,
float64). One input, one output of its shape. The conversion is C's (NumPy's ``astype``):
floats round to nearest-even into a narrower float, integers become the nearest float, floats
become integers truncated toward zero; a float outside the integer type's range, NaN or an
infinity has no defined integer (ONNX leaves it undefined too) and is not checked.
"""

import numpy as np

from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command


def _check_conversion(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, 1, 1)
    _check.present(cmd, inputs, "input", 0)
    _check.present(cmd, outputs, "output", 0)
    _check.expect_shape(cmd, outputs[0], tuple(inputs[0].shape), "output 0")


def _conversion_ref(cmd, inputs, outputs):
    with np.errstate(invalid="ignore", over="ignore"):
        outputs[0][...] = inputs[0].astype(outputs[0].dtype, casting="unsafe")


def register():
    register_command("DATATYPE_CONVERSION", inplace="none", check=_check_conversion)
    register_backend("DATATYPE_CONVERSION", "CPU_REF", _conversion_ref)
