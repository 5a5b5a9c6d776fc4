"""nnc.onnx.load: LayerNormalization, GroupNormalization and InstanceNormalization (the check
and the ``_op_<OpType>`` methods OpEmitter inherits; the other operators are in _ops)."""

from __future__ import annotations

import numpy as np

from nnc.cmd.command import Cmd
from nnc.tensor.tensor import Tensor

NORM_OPS = {"LayerNormalization", "GroupNormalization", "InstanceNormalization"}


def check_norm(op, attrs, node, consts, ranks):
    """Why nnc cannot run this LayerNormalization / GroupNormalization / InstanceNormalization
    node, or None: constant scale and bias (LayerNormalization's Mean and InvStdDev outputs are
    LAYER_NORM's saved_mean and saved_inv_std); GroupNormalization's and InstanceNormalization's
    input [N, C, ...]."""
    ins = list(node.input)
    if any(i and i not in consts for i in ins[1:]):
        return "scale and bias must be constants"
    if op == "LayerNormalization":
        return None
    if ranks.get(ins[0], 0) < 3:
        return "only [N, C, ...] inputs with at least one spatial axis"
    if len(ins) < 3 or not ins[1] or not ins[2]:
        return "scale and bias are required"
    return None


def _invalid(n, why):
    from nnc.onnx._ops import _invalid as invalid  # _ops imports this module

    return invalid(n, why)


class NormEmitter:
    """The normalisations' emit methods, mixed into _ops.OpEmitter (which supplies ``get``,
    ``storage``, ``node``, ``_write``, ``constant`` and the plan's ``layout``, ``shapes`` and
    ``consts``)."""

    def _op_LayerNormalization(self, k, n, a):
        """LAYER_NORM over axes ``axis`` .. rank - 1 of the plain value; the scale (and bias,
        zeros when absent) broadcast to the normalised shape, so CPU_OPT's contiguous path takes
        it. ``stash_type`` only sets the statistics' precision: nnc's are in double always."""
        x, deps = self.get(n.input[0], "plain")
        nd = len(x.shape)
        axis = a.get("axis", -1)
        if not isinstance(axis, int) or not -nd <= axis < nd:
            raise _invalid(n, f"attribute 'axis' = {axis!r} is outside [{-nd}, {nd - 1}]")
        axis %= nd
        inner = tuple(x.shape[axis:])
        affine = []
        for j in (1, 2):
            if len(n.input) > j and n.input[j]:
                v = np.asarray(self.consts[n.input[j]], np.float64)
            else:
                v = np.zeros(())
            try:
                v = np.broadcast_to(v, inner)
            except ValueError:
                raise _invalid(n, f"input {j} of shape {v.shape} does not broadcast to the "
                                  f"normalised shape {inner}") from None
            affine.append(self.constant(v))
        cmd = Cmd("LAYER_NORM", axis=tuple(range(axis, nd)), epsilon=a.get("epsilon", 1e-5))
        stats = [o for o in n.output[1:3]]
        if not any(stats):
            self._write(n, cmd, [x] + affine, deps)
            return
        # ONNX's Mean and InvStdDev are NNC's saved_mean and saved_inv_std: the input's shape
        # with the normalised axes 1. An InvStdDev wanted without the Mean still needs a tensor
        # for the mean, which no one reads.
        stat_shape = tuple(x.shape[:axis]) + (1,) * (nd - axis)
        outs = [self.storage(n.output[0])]
        outs += [self.storage(o) if o else Tensor.empty(stat_shape, dtype=self.dtype)
                 for o in stats]
        e = self.node(cmd, [x] + affine, outs, n.name or n.output[0], deps)
        for o in n.output[:3]:
            if o:
                self.deps[self.root(o)] = [e]

    def _op_GroupNormalization(self, k, n, a):
        """GROUP_NORM: on an NHWC image the groups are the last axis and H, W are reduced (the
        C path); on [N, C, spatial...] of other ranks, axis 1 and the spatial axes. The scale
        and bias are per channel (opset 21's GroupNormalization; onnx's checker refuses the
        deprecated opset 18 form, whose scale and bias are per group). InstanceNormalization is
        the same with one group per channel."""
        lay = self.layout[n.output[0]]
        x, deps = self.get(n.input[0], lay)
        nd = len(x.shape)
        c = self.shapes[n.input[0]][1]
        if n.op_type == "InstanceNormalization":
            groups = c
        else:
            groups = a.get("num_groups")
            if not isinstance(groups, int) or groups < 1 or c % groups:
                raise _invalid(n, f"attribute 'num_groups' = {groups!r} must be >= 1 and "
                                  f"divide the {c} channels")
        affine = []
        for j in (1, 2):
            v = np.asarray(self.consts[n.input[j]], np.float64).reshape(-1)
            if v.size != c:
                raise _invalid(n, f"input {j} has {v.size} elements, not one per channel ({c})")
            # [N, C, spatial...]: per channel, broadcast over the spatial axes.
            affine.append(self.constant(v if lay == "nhwc" else v.reshape((c,) + (1,) * (nd - 2))))
        if lay == "nhwc":
            cmd = Cmd("GROUP_NORM", group_axis=-1, groups=groups, reduce_axis=(1, 2),
                      epsilon=a.get("epsilon", 1e-5))
            self._write(n, cmd, [x] + affine, deps)
            return
        cmd = Cmd("GROUP_NORM", group_axis=1, groups=groups, reduce_axis=tuple(range(2, nd)),
                  epsilon=a.get("epsilon", 1e-5))
        self._write(n, cmd, [x] + affine, deps)

    _op_InstanceNormalization = _op_GroupNormalization
