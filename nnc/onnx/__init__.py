"""Load and save the ONNX subset nnc's commands express (docs/onnx.md).

    g, inputs, outputs = nnc.onnx.load("model.onnx")
    inputs[0].numpy()[...] = x          # the NCHW array you would give onnxruntime
    g.run()
    y = outputs[0].numpy()              # what onnxruntime returns for that output
    nnc.onnx.save(g, "copy.onnx", inputs=inputs, outputs=outputs)

``onnx`` itself is imported on first use, so ``import nnc.onnx`` works without it; calling
:func:`load` or :func:`save` without it raises :class:`OnnxMissingError`. This module sits on top
of nnc: nothing else in the package imports it.
"""

from nnc._core import NNCError


class OnnxError(NNCError):
    """A model nnc cannot load or a graph it cannot save (base of the errors below)."""


class OnnxMissingError(OnnxError, ImportError):
    """The ``onnx`` package is not installed."""


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


from nnc.onnx._load import LoadedModel, load  # noqa: E402
from nnc.onnx._save import save  # noqa: E402

__all__ = ["LoadedModel", "OnnxError", "OnnxMissingError", "UnsupportedError", "load", "save"]
