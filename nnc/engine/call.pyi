"""ENGINE_CALL: recorded engine C ops as GIL-free graph nodes (nnc/engine/call.pyx)."""

from nnc.tensor.tensor import Tensor

def call_tensor(address: int, arg: int, keep: object = None) -> Tensor: ...
