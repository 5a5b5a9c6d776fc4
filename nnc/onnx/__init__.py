"""Layer 7 top. Load and save the ONNX subset nnc's commands express (docs/onnx.md).

    g, inputs, outputs = nnc.onnx.load("model.onnx")
    inputs[0].numpy()[...] = x          # the NCHW array you would give onnxruntime
    g.run()
    y = outputs[0].numpy()              # what onnxruntime returns for that output
    nnc.onnx.save(g, "copy.onnx", inputs=inputs, outputs=outputs)

    sess = nnc.onnx.InferenceSession("model.onnx")      # ONNX Runtime's API, on a loaded graph
    (y,) = sess.run(None, {sess.get_inputs()[0].name: x})

``onnx`` itself is imported on first use, so ``import nnc.onnx`` works without it; calling
:func:`load` or :func:`save` without it raises :class:`OnnxMissingError`. This module sits on top
of nnc: nothing else in the package imports it.
"""

from nnc.base.core import NNCError
from nnc.graph.graph import Graph


class OnnxError(NNCError):
    """A model nnc cannot load or a graph it cannot save (base of the errors below)."""


class OnnxMissingError(OnnxError, ImportError):
    """The ``onnx`` package is not installed."""


class OnnxTypeError(OnnxError, TypeError):
    """An argument of the wrong type (a model that is no path, bytes or ModelProto; an input or
    output that is no nnc.Tensor): an NNCError like every nnc error, and a TypeError."""


class UnsupportedError(OnnxError):
    """The model (or graph) uses operators or attributes nnc does not express.

    ``problems`` maps each unsupported op type (or command) to ``(count, [first node names],
    reason)``; the message lists every one of them, not just the first met.
    """

    def __init__(self, problems, what="ONNX model"):
        self.problems = dict(problems)
        lines = []
        for op, (count, names, reason) in sorted(self.problems.items()):
            shown = ", ".join(repr(n) for n in names[:3]) + (", ..." if count > 3 else "")
            lines.append(f"  {op} x{count} ({shown}): {reason}")
        super().__init__(
            f"the {what} uses {len(self.problems)} unsupported operator(s):\n" + "\n".join(lines)
        )


class LoadedModel(tuple):
    """``(graph, inputs, outputs)``, unpackable as a tuple, with names for lookups.

    ``inputs``/``outputs``: Tensors in the model's graph input / output order, with the ONNX
    shapes (NCHW for images). ``input_names``/``output_names``: the ONNX names, same order.
    ``concats``: Concat node name -> (its buffer, [the slice each input was written to]).
    ``folded``: names of the BatchNormalization nodes folded into a convolution.
    """

    def __new__(cls, graph, inputs, outputs, **info):
        self = tuple.__new__(cls, (graph, inputs, outputs))
        self.__dict__.update(info)
        return self

    @property
    def graph(self) -> Graph:
        return self[0]

    @property
    def inputs(self) -> list:
        return self[1]

    @property
    def outputs(self) -> list:
        return self[2]

    @property
    def input_names(self) -> list:
        return self.__dict__["input_names"]

    @property
    def output_names(self) -> list:
        return self.__dict__["output_names"]

    @property
    def concats(self) -> dict:
        return self.__dict__["concats"]

    @property
    def folded(self) -> list:
        return self.__dict__["folded"]


def _import_onnx():
    try:
        import onnx
        import onnx.numpy_helper  # noqa: F401
        import onnx.shape_inference  # noqa: F401
    except ImportError as e:
        raise OnnxMissingError(
            f'nnc.onnx needs the onnx package ({e}); install it with: pip install "nnc-graph[onnx]"'
        ) from e
    return onnx


from nnc.onnx._load import load  # noqa: E402
from nnc.onnx._save import save  # noqa: E402
from nnc.onnx._session import FeedError, InferenceSession, NodeArg, SessionError  # noqa: E402

__all__ = [
    "FeedError",
    "InferenceSession",
    "LoadedModel",
    "NodeArg",
    "OnnxError",
    "OnnxMissingError",
    "OnnxTypeError",
    "SessionError",
    "UnsupportedError",
    "load",
    "save",
]
