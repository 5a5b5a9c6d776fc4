from nnc.cmd.command import *  # noqa: F403
