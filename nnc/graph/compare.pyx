"""Declarative loop and branch expressions: :class:`Compare` (``nnc.Compare``).

Instead of a Python callable, a while loop or a case..of node may take ``Compare(lhs, op,
value)``, the loop count or the one element of an expression input compared with a constant.
The host evaluates it exactly as the device does (the same conversions), so it means the same on
a CPU, on a host-driven GPU run and inside a captured CUDA graph, where nnc.cuda.capture compiles it
into a condition kernel.

Pickles made before while and case..of had modules of their own name this class
``nnc.graph.control.Compare``: nnc/__init__.py keeps that path as an alias of this module.
"""

cimport cython

import numpy as np

from nnc.base.core import GraphError

from nnc.tensor.tensor cimport Tensor


# Compare's operators, in the order of their codes in the condition kernel (nnc/cuda/capture.py).
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")
# The dtypes a compared input may have, in the order of their codes in the condition kernel.
COMPARE_DTYPES = ("float32", "float64", "int32", "int64")


@cython.final
cdef class Compare:
    """A declarative loop or branch expression: ``lhs op value``.

    ``lhs`` is ``"count"`` (a while loop's count, NNC's ``ccv_nnc_tensor_for_while_count``) or
    ``i``, the index of an expression input, whose one element is compared (NNC's expression
    sees ``inputs[i]->data``); ``op`` one of ``< <= > >= == !=``; ``value`` an int or float
    constant. A while loop goes on while it holds; a case..of takes ``offset + 1`` when it
    holds, else ``offset``. When the element is an integer (the count, an int32 or int64 input)
    and ``value`` an int, they compare exactly; otherwise both are converted to float64 first,
    on the host as on the device. A NaN compares false except with ``!=``.
    """

    def __init__(self, lhs, op, value):
        if not (lhs == "count" if isinstance(lhs, str) else
                isinstance(lhs, int) and not isinstance(lhs, bool) and lhs >= 0):
            raise GraphError(f"Compare's left side must be 'count' or the index (>= 0) of an "
                             f"expression input, not {lhs!r}")
        if op not in COMPARE_OPS:
            raise GraphError(f"Compare's operator must be one of {' '.join(COMPARE_OPS)}, not "
                             f"{op!r}")
        numbers = (int, float, np.integer, np.floating)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers):
            raise GraphError(f"Compare's value must be an int or a float, not {value!r}")
        if isinstance(value, (int, np.integer)):
            value = int(value)
            if not -2 ** 63 <= value < 2 ** 63:
                raise GraphError(f"Compare's value {value} does not fit in 64 bits")
        else:
            value = float(value)
        self.lhs, self.op, self.value = lhs, op, value

    def __repr__(self):
        lhs = "count" if self.lhs == "count" else f"inputs[{self.lhs}][0]"
        return f"nnc.Compare({lhs} {self.op} {self.value!r})"

    def __reduce__(self):
        return Compare, (self.lhs, self.op, self.value)

    def check(self, list inputs, bint has_count, str what):
        """GraphError unless this expression can read what it names among ``inputs``."""
        if self.lhs == "count":
            if not has_count:
                raise GraphError(f"{what}: a case..of expression has no loop count; compare an "
                                 "input instead")
            return
        if self.lhs >= len(inputs):
            raise GraphError(f"{what}: {self!r} reads input {self.lhs}, but the expression has "
                             f"{len(inputs)} input(s)")
        t = <Tensor>inputs[self.lhs]
        if t.size != 1 or t.dtype.name not in COMPARE_DTYPES:
            raise GraphError(f"{what}: {self!r} compares one element: input {self.lhs} must "
                             f"have exactly one element of {', '.join(COMPARE_DTYPES)}, not "
                             f"{t!r}")

    def exact(self, list inputs):
        """Whether the comparison is of two integers (else of two float64s)."""
        if not isinstance(self.value, int):
            return False
        return self.lhs == "count" or (<Tensor>inputs[self.lhs]).dtype.kind == "i"

    def holds(self, long long count, list inputs):
        """Evaluate on the host (a GPU input is copied to the host first: wait for the stream
        writing it before). Mirrors the condition kernel's conversions exactly."""
        cdef object x, a, b             # Python ints stay exact (not inferred as C doubles)
        if self.lhs == "count":
            x = count
        else:
            x = (<Tensor>inputs[self.lhs]).numpy().reshape(-1)[0]
        if self.exact(inputs):
            a, b = int(x), self.value
        else:
            a, b = float(x), float(self.value)
        op = self.op
        if op == "<":
            return a < b
        if op == "<=":
            return a <= b
        if op == ">":
            return a > b
        if op == ">=":
            return a >= b
        if op == "==":
            return a == b
        return a != b
