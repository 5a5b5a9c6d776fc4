"""Layer 2 command, the attention family: this module (the definition and CPU_REF), cpu_opt.pyx
(CPU_OPT). No GPU backend.

SCALED_DOT_PRODUCT_ATTENTION (NNC: cmd/scaled_dot_product_attention,
CMD_SCALED_DOT_PRODUCT_ATTENTION_FORWARD(scale, is_causal)). Inputs ``(q, k, v)`` or
``(q, k, v, attn_mask)`` (the mask may be None), in NNC's layout:

- q: [batch, seq_q, heads, head_dim], k: [batch, seq_k, heads_k, head_dim],
  v: [batch, seq_k, heads_k, v_dim]; heads a multiple of heads_k (grouped-query attention: query
  head h reads key/value head h // (heads / heads_k)). Rank-3 q, k and v ([batch, seq, dim])
  are one head;
- attn_mask: added to the scaled scores, [seq_q, seq_k] or up to [batch, heads, seq_q, seq_k]
  with each leading axis 1 (broadcast) or full;
- out: [batch, seq_q, heads, v_dim] ([batch, seq_q, v_dim] for rank 3).

For each batch entry and head: s = scale * q . k^T (+ attn_mask), p = softmax(s) over the keys
(the row's maximum subtracted first), out = p . v. ``is_causal`` keeps, for query row i, the
keys j <= i + seq_k - seq_q (NNC's alignment: the last query sees every key); a row left with
no key gives 0. A row whose scores are all -inf (a mask hiding everything) gives NaN, as the
softmax of nothing. Parameters: ``scale`` (required, a finite number: NNC has no default; 1 /
sqrt(head_dim) is the usual one) and ``is_causal=False``. Floats, one dtype; the output may not
overlap an input. NNC's fused output projection (its inputs 4 and 5, w and bias) and its saved
softmax output are not part of nnc's command (docs/porting.md).
"""

import math
from numbers import Real

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command

NAME = "SCALED_DOT_PRODUCT_ATTENTION"


def _normalize(params):
    _check.only(NAME, params, ("scale", "is_causal"))
    scale = params.get("scale")
    if not isinstance(scale, Real) or isinstance(scale, bool) or not math.isfinite(scale):
        raise CommandError(f"{NAME} needs scale=s, a finite number that multiplies q . k^T "
                           f"(1 / sqrt(head_dim) is the usual one), not {scale!r}")
    causal = params.get("is_causal", False)
    if causal not in (True, False, 0, 1) or isinstance(causal, float):
        raise CommandError(f"{NAME}: is_causal must be True or False, not {causal!r}")
    return {"scale": float(scale), "is_causal": bool(causal)}


def attention_shape(q_shape, k_shape, v_shape, mask_shape=None):
    """The output shape for these input shapes, or CommandError saying why not."""
    q_shape, k_shape, v_shape = tuple(q_shape), tuple(k_shape), tuple(v_shape)
    if len(q_shape) not in (3, 4) or len(k_shape) != len(q_shape) or \
            len(v_shape) != len(q_shape):
        raise CommandError(f"{NAME}: q, k and v must all be [batch, seq, heads, dim] or all "
                           f"[batch, seq, dim], got {q_shape}, {k_shape} and {v_shape}")
    four = len(q_shape) == 4
    b, sq, h, d = q_shape if four else (q_shape[0], q_shape[1], 1, q_shape[2])
    kb, sk, hk, kd = k_shape if four else (k_shape[0], k_shape[1], 1, k_shape[2])
    vb, vs, vh, dv = v_shape if four else (v_shape[0], v_shape[1], 1, v_shape[2])
    if not b == kb == vb:
        raise CommandError(f"{NAME}: batch sizes differ: q {q_shape}, k {k_shape}, v {v_shape}")
    if kd != d:
        raise CommandError(f"{NAME}: q's head_dim {d} differs from k's {kd}")
    if vs != sk or vh != hk:
        raise CommandError(f"{NAME}: v {v_shape} must have k's seq_k and heads ({sk}, {hk})")
    if hk == 0 or h % hk:
        raise CommandError(f"{NAME}: q's {h} heads are not a multiple of k's and v's {hk}")
    if mask_shape is not None:
        mask_shape = tuple(mask_shape)
        full = (b, h, sq, sk)
        if not 2 <= len(mask_shape) <= 4 or mask_shape[-2:] != (sq, sk) or not all(
                m in (1, f) for m, f in zip(mask_shape[::-1], full[::-1])):
            raise CommandError(f"{NAME}: attn_mask must be [seq_q, seq_k] = ({sq}, {sk}) with "
                               f"up to [batch, heads] = ({b}, {h}) before it (each 1 or full), "
                               f"got {mask_shape}")
    return (b, sq, h, dv) if four else (b, sq, dv)


def _check_attention(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, (3, 4), 1)
    _check.present(cmd, inputs, "input", 0, 1, 2)
    _check.present(cmd, outputs, "output", 0)
    _check.same_dtype(cmd, inputs + outputs)
    _check.floating(cmd, inputs + outputs)
    mask = inputs[3] if len(inputs) > 3 else None
    shape = attention_shape(inputs[0].shape, inputs[1].shape, inputs[2].shape,
                            None if mask is None else mask.shape)
    _check.expect_shape(cmd, outputs[0], shape, "output 0")


def heads_first(x):
    """[batch, seq, heads, dim] (or [batch, seq, dim]) as [batch, heads, seq, dim]."""
    return x[:, None] if x.ndim == 3 else np.swapaxes(x, 1, 2)


def _attention_ref(cmd, inputs, outputs):
    """The definition, in float64."""
    q, k, v = (heads_first(t.astype(np.float64)) for t in inputs[:3])
    mask = inputs[3] if len(inputs) > 3 else None
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = cmd.params["scale"] * np.matmul(q, np.swapaxes(k, -1, -2))
    if mask is not None:
        s = s + mask.astype(np.float64)
    sq, sk = s.shape[-2:]
    keep = np.ones((sq, sk), bool)
    if cmd.params["is_causal"]:
        keep = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.where(keep, s, -np.inf)
        top = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
        e = np.where(keep, np.exp(s - np.where(keep.any(axis=-1, keepdims=True), top, 0)), 0)
        total = e.sum(axis=-1, keepdims=True)
        p = np.where(keep.any(axis=-1, keepdims=True), e / total, 0)
    out = np.matmul(p, v)
    outputs[0][...] = out[:, 0] if inputs[0].ndim == 3 else np.swapaxes(out, 1, 2)


def register():
    register_command(NAME, inplace="none", check=_check_attention, normalize=_normalize)
    register_backend(NAME, "CPU_REF", _attention_ref)
