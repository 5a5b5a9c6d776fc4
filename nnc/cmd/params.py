"""A command's parameters, frozen (nnc/cmd/command.pyx makes one per Cmd from its normalised dict).

NNC copies a command's parameters by value into every node (ccv_nnc_graph_exec_new); nnc keeps
two copies, the C struct C backends read (``nnc_cmd_param_t``) and this mapping Python backends
read, so both must be fixed when the Cmd is made or they could disagree.
"""

from collections.abc import Mapping

import numpy as np

from nnc.base.core import CommandError

_FROZEN_HOW = ("parameters are fixed when a Cmd is made (C backends and graph nodes copy them "
               "then); build a new Cmd, e.g. nnc.Cmd(cmd.name, **{**cmd.params, 'a': 3.0}), "
               "and a new node from it")


class CmdParams(Mapping):
    """A Cmd's parameters: a read-only mapping (reads like a dict, compares equal to one).

    Read-only because a Cmd's values are copied into C (``nnc_cmd_param_t``) and into every
    node built from it, as NNC's ccv_nnc_graph_exec_new copies the command by value; a
    mutable dict let CPU_REF (which reads this mapping) and CPU_OPT (which reads the C copy)
    compute different results from one command. Mutators raise CommandError.
    """

    __slots__ = ("_items",)

    def __init__(self, items):
        object.__setattr__(self, "_items", {k: _freeze(v) for k, v in dict(items).items()})

    def __getitem__(self, key):
        return self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __repr__(self):
        return repr(self._items)

    def __or__(self, other):
        return {**self._items, **other}

    def __reduce__(self):
        return (CmdParams, (self._items,))

    def _refuse(self, *args, **kwargs):
        raise CommandError(f"cmd.params is read-only: {_FROZEN_HOW}")

    __setitem__ = __delitem__ = __ior__ = __setattr__ = __delattr__ = _refuse
    update = pop = popitem = clear = setdefault = _refuse


def _freeze(value):
    """value with its containers made immutable (lists become tuples, dicts CmdParams, arrays
    read-only copies), so nothing reached through cmd.params can change after the Cmd is made."""
    if type(value) is list or type(value) is tuple:
        return tuple([_freeze(v) for v in value])
    if isinstance(value, dict):
        return CmdParams(value)
    if isinstance(value, (set, frozenset)):
        return frozenset([_freeze(v) for v in value])
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, np.ndarray):
        value = value.copy()
        value.flags.writeable = False
    return value
