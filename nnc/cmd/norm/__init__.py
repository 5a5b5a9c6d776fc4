"""Layer 2 command, the normalisation family: this module (the definitions and CPU_REF),
cpu_opt.pyx (CPU_OPT). No GPU backend. NNC: lib/nnc/cmd/norm/ (the forward commands).

LAYER_NORM (NNC's CCV_NNC_LAYER_NORM_FORWARD). Inputs x, and with ``elementwise_affine=True``
(the default) scale and bias, each of x's rank or fewer axes, broadcasting against x (lined up
from the right); outputs y (x's shape) and optionally saved_mean and saved_inv_std (x's shape with
the normalised axes 1)::

    mean = E[x], var = E[(x - mean) ** 2]          over the axes ``axis``
    inv_std = 1 / sqrt(var + epsilon)
    y = (x - mean) * inv_std * scale + bias

Parameters ``axis`` (required: a non-empty tuple of distinct axes, negative ones count from the
end), ``epsilon=1e-5``, ``elementwise_affine=True``.

GROUP_NORM (NNC's CCV_NNC_GROUP_NORM_FORWARD). x's axis ``group_axis`` (default -1: nnc's images
are NHWC) is cut into ``groups`` runs of equal length; the statistics are taken over one group's
channels and the axes ``reduce_axis`` (default: none), per index of the other axes. Inputs and
outputs as LAYER_NORM's; saved_mean and saved_inv_std have x's shape with ``group_axis`` ``groups``
long and the reduced axes 1. An NHWC image's group norm is ``group_axis=-1``,
``reduce_axis=(1, 2)``; its instance norm the same with ``groups`` = its channels.

RMSNORM (NNC's CCV_NNC_RMSNORM_FORWARD). Inputs x and, with ``elementwise_affine``, scale;
outputs y and optionally saved_inv_std::

    inv_std = 1 / sqrt(E[x ** 2] + epsilon),   y = x * inv_std * scale

Floats only, one dtype for every tensor. The statistics are in float64 (CPU_REF) or double
(CPU_OPT) whatever the dtype; variance is the population one (divided by n). y may not overlap x
(a row's statistics must be read before it is written).
"""

import math
from numbers import Integral, Real

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command

MAX_RANK = 12                           # nnc's NNC_MAX_DIM: axis masks fit one int (cpu_opt.pyx)


def _axes(name, key, value, allow_empty):
    if isinstance(value, Integral) and not isinstance(value, bool):
        value = (value,)
    try:
        axes = tuple(value)
    except TypeError:
        axes = None
    if axes is None or any(not isinstance(a, Integral) or isinstance(a, bool) for a in axes) \
            or (not axes and not allow_empty) or len(set(int(a) for a in axes)) != len(axes) \
            or any(not -MAX_RANK <= a < MAX_RANK for a in axes):
        raise CommandError(f"{name}: {key} must be {'a' if allow_empty else 'a non-empty'} tuple "
                           f"of distinct axes in [-{MAX_RANK}, {MAX_RANK}), not {value!r}")
    return tuple(int(a) for a in axes)


def _epsilon_affine(name, params, out):
    eps = params.get("epsilon", 1e-5)
    if not isinstance(eps, Real) or isinstance(eps, bool) or not math.isfinite(eps) or eps < 0:
        raise CommandError(f"{name}: epsilon must be a finite number >= 0, not {eps!r}")
    affine = params.get("elementwise_affine", True)
    if not isinstance(affine, (bool, np.bool_)):
        raise CommandError(f"{name}: elementwise_affine must be a bool, not {affine!r}")
    out["epsilon"], out["elementwise_affine"] = float(eps), bool(affine)
    return out


def _layer_norm_normalize(params, name="LAYER_NORM"):
    _check.only(name, params, ("axis", "epsilon", "elementwise_affine"))
    if "axis" not in params:
        raise CommandError(f"{name} needs axis=(...), the axes to normalise over")
    return _epsilon_affine(name, params, {"axis": _axes(name, "axis", params["axis"], False)})


def _rmsnorm_normalize(params):
    return _layer_norm_normalize(params, "RMSNORM")


def _group_norm_normalize(params):
    _check.only("GROUP_NORM", params, ("group_axis", "groups", "epsilon", "reduce_axis",
                                       "elementwise_affine"))
    groups = params.get("groups")
    if not isinstance(groups, Integral) or isinstance(groups, bool) or groups < 1:
        raise CommandError(f"GROUP_NORM needs groups=g, an int >= 1, not {groups!r}")
    group_axis = _axes("GROUP_NORM", "group_axis", params.get("group_axis", -1), False)
    if len(group_axis) != 1:
        raise CommandError(f"GROUP_NORM: group_axis must be one axis, not {group_axis!r}")
    out = {"group_axis": group_axis[0], "groups": int(groups),
           "reduce_axis": _axes("GROUP_NORM", "reduce_axis", params.get("reduce_axis", ()), True)}
    return _epsilon_affine("GROUP_NORM", params, out)


def _resolve(cmd, axes, ndim, what):
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise CommandError(f"{cmd.name}: {what} {a} is out of range for a rank-{ndim} input")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise CommandError(f"{cmd.name}: {what} {axes} name one axis twice for rank {ndim}")
    return out


def saved_shape(cmd, shape):
    """The shape of ``cmd``'s saved_mean / saved_inv_std for an input of ``shape``."""
    p = cmd.params
    ndim = len(shape)
    out = list(shape)
    if cmd.name == "GROUP_NORM":
        g = _resolve(cmd, (p["group_axis"],), ndim, "group_axis")[0]
        red = _resolve(cmd, p["reduce_axis"], ndim, "reduce_axis")
        if g in red:
            raise CommandError(f"GROUP_NORM: group_axis {p['group_axis']} is also in reduce_axis")
        if shape[g] % p["groups"]:
            raise CommandError(f"GROUP_NORM: axis {g} of length {shape[g]} does not split into "
                               f"{p['groups']} groups")
        out[g] = p["groups"]
        for a in red:
            out[a] = 1
    else:
        for a in _resolve(cmd, p["axis"], ndim, "axis"):
            out[a] = 1
    return tuple(out)


def _affine_check(cmd, x, t, what):
    if t.ndim > x.ndim or any(d not in (1, xd) for d, xd in
                              zip(t.shape[::-1], x.shape[::-1])):
        raise CommandError(f"{cmd.name}: {what} of shape {t.shape} does not broadcast against "
                           f"the input's {x.shape}")


def _norm_check(cmd, inputs, outputs):
    affine = cmd.params["elementwise_affine"]
    n_affine = 1 if cmd.name == "RMSNORM" else 2
    n_saved = 1 if cmd.name == "RMSNORM" else 2
    _check.arity(cmd, inputs, outputs, 1 + n_affine if affine else 1, (1, 1 + n_saved))
    _check.present(cmd, inputs, "input", *range(len(inputs)))
    _check.present(cmd, outputs, "output", 0)
    _check.same_dtype(cmd, inputs + outputs)
    _check.floating(cmd, inputs + outputs)
    x = inputs[0]
    if x.ndim < 1:
        raise CommandError(f"{cmd.name} needs an input of rank >= 1, not a scalar")
    _check.expect_shape(cmd, outputs[0], tuple(x.shape), "output 0")
    for k, t in enumerate(inputs[1:]):
        _affine_check(cmd, x, t, ("scale", "bias")[k])
    saved = saved_shape(cmd, tuple(x.shape))
    for k, t in enumerate(outputs[1:]):
        if t is not None:
            _check.expect_shape(cmd, t, saved, f"output {k + 1}")


def _stats(cmd, x):
    """(mean or None, inv_std) in float64, shaped for x viewed as ``view`` (group axis split)."""
    p = cmd.params
    if cmd.name == "GROUP_NORM":
        ndim = x.ndim
        g = p["group_axis"] % ndim
        red = [a % ndim for a in p["reduce_axis"]]
        xv = x.reshape(x.shape[:g] + (p["groups"], x.shape[g] // p["groups"]) + x.shape[g + 1:])
        axes = tuple(a + (a > g) for a in red) + (g + 1,)
    else:
        xv = x
        axes = tuple(a % x.ndim for a in p["axis"])
    if cmd.name == "RMSNORM":
        mean = None
        var = (xv * xv).mean(axis=axes, keepdims=True)
    else:
        mean = xv.mean(axis=axes, keepdims=True)
        var = ((xv - mean) ** 2).mean(axis=axes, keepdims=True)
    return xv, mean, 1.0 / np.sqrt(var + p["epsilon"])


def _norm_ref(cmd, inputs, outputs):
    """The definition, in float64: two passes (mean, then the squared deviations), then the
    affine map; rounded to the output's dtype once."""
    x = inputs[0].astype(np.float64)
    xv, mean, inv_std = _stats(cmd, x)
    y = (xv if mean is None else xv - mean) * inv_std
    y = y.reshape(x.shape)
    if len(inputs) > 1:
        y = y * inputs[1].astype(np.float64)
    if len(inputs) > 2:
        y = y + inputs[2].astype(np.float64)
    outputs[0][...] = y
    saved = [inv_std] if cmd.name == "RMSNORM" else [mean, inv_std]
    shape = saved_shape(cmd, x.shape)
    for out, value in zip(outputs[1:], saved):
        if out is not None:
            out[...] = value.reshape(shape)


def register():
    for name, normalize in (("LAYER_NORM", _layer_norm_normalize),
                            ("GROUP_NORM", _group_norm_normalize),
                            ("RMSNORM", _rmsnorm_normalize)):
        register_command(name, inplace="none", check=_norm_check, normalize=normalize)
        register_backend(name, "CPU_REF", _norm_ref)
