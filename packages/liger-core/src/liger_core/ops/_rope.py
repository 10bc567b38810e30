"""Argument checks and math shared by the rotary embeddings (`rope`, `qwen2vl_mrope`)."""

from __future__ import annotations

import torch

from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device

UNSQUEEZE_DIMS = (1, 2)
_LAYOUT = {1: "(batch, heads, seq, head_dim)", 2: "(batch, seq, heads, head_dim)"}


def seq_axis(unsqueeze_dim: int) -> int:
    """The axis of q/k holding positions: 2 for (b, heads, seq, d), 1 for (b, seq, heads, d)."""
    return 3 - unsqueeze_dim


def rope_shapes_ok(q, k, cos, sin, unsqueeze_dim, cos_ndim: int) -> bool:
    """The cheap predicate of the fast path (shapes of q, k, cos, sin agree)."""
    if unsqueeze_dim not in UNSQUEEZE_DIMS or q.ndim != 4 or k.ndim != 4:
        return False
    s = seq_axis(unsqueeze_dim)
    batch, seq, dim = q.shape[0], q.shape[s], q.shape[3]
    return (
        q.dtype in FLOAT_DTYPES
        and k.dtype in FLOAT_DTYPES
        and cos.dtype in FLOAT_DTYPES
        and sin.dtype in FLOAT_DTYPES
        and dim % 2 == 0
        and k.shape[0] == batch
        and k.shape[s] == seq
        and k.shape[3] == dim
        and cos.ndim == cos_ndim
        and cos.shape == sin.shape
        and cos.shape[-3] in (1, batch)
        and cos.shape[-2] == seq
        and cos.shape[-1] == dim
        and q.device == k.device == cos.device == sin.device
    )


def raise_bad_rope_args(op: str, q, k, cos, sin, unsqueeze_dim, cos_ndim: int) -> None:
    """The slow path: name the argument that is wrong, what was expected and what came."""
    for name, t in (("q", q), ("k", k), ("cos", cos), ("sin", sin)):
        check_floating(name, t)
    check_same_device(op, q=q, k=k, cos=cos, sin=sin)
    if unsqueeze_dim not in UNSQUEEZE_DIMS:
        raise ValueError(
            f"{op}: unsqueeze_dim must be 1 (q/k laid out {_LAYOUT[1]}) or 2 ({_LAYOUT[2]}); got {unsqueeze_dim!r}"
        )
    layout = _LAYOUT[unsqueeze_dim]
    for name, t in (("q", q), ("k", k)):
        if t.ndim != 4:
            raise ValueError(f"{op}: {name} must be 4-D {layout}; got {name}.shape={tuple(t.shape)}")
    s = seq_axis(unsqueeze_dim)
    batch, seq, dim = q.shape[0], q.shape[s], q.shape[3]
    if dim % 2:
        raise ValueError(f"{op}: head_dim must be even (rotate-half pairs its halves); got q.shape={tuple(q.shape)}")
    if k.shape[0] != batch or k.shape[s] != seq or k.shape[3] != dim:
        raise ValueError(
            f"{op}: k must match q in batch, seq and head_dim ({layout}, heads may differ); "
            f"got q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)}"
        )
    lead = "(3, batch or 1, seq, head_dim)" if cos_ndim == 4 else "(batch or 1, seq, head_dim)"
    want = f"{lead} = ({'3, ' if cos_ndim == 4 else ''}{batch} or 1, {seq}, {dim})"
    for name, t in (("cos", cos), ("sin", sin)):
        ok = (
            t.ndim == cos_ndim
            and (cos_ndim == 3 or t.shape[0] == 3)
            and t.shape[-3] in (1, batch)
            and t.shape[-2] == seq
            and t.shape[-1] == dim
        )
        if not ok:
            raise ValueError(f"{op}: {name} must have shape {want}; got {name}.shape={tuple(t.shape)}")


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotation(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` in float32 (float64 for float64 input), cast back to x's dtype.

    cos/sin are position tables: no gradient flows to them."""
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    xc = x.to(compute)
    out = xc * cos.detach().to(compute) + rotate_half(xc) * sin.detach().to(compute)
    return out.to(x.dtype)
