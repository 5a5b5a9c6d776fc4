from nnc.capi.capi import *  # noqa: F403
