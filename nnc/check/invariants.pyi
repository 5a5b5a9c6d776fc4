"""Invariant checks of live streams, graphs and tensors (nnc/check/invariants.pyx), registered with
nnc.base.debug.check()."""

from nnc.base.core import DATATYPE_NAMES as DATATYPE_NAMES
from nnc.base.core import MAX_DIM as MAX_DIM

def live_stream_problems() -> list[str]: ...
def live_graph_and_tensor_problems() -> list[str]: ...
