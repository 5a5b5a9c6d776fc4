from nnc.tensor.tensor import *  # noqa: F403
