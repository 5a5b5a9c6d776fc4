from nnc.engine.engine import *  # noqa: F403
