"""Invariant checks of live streams, graphs and tensors (nnc/invariants.pyx), registered with
nnc.debug.check()."""

from nnc._core import DATATYPE_NAMES as DATATYPE_NAMES
from nnc._core import MAX_DIM as MAX_DIM

def live_stream_problems() -> list[str]: ...
def live_graph_and_tensor_problems() -> list[str]: ...
