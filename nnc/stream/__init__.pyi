from nnc.stream.stream import *  # noqa: F403
