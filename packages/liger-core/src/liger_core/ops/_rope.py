"""What the rotary embeddings (`rope`, `qwen2vl_mrope`) share: argument checks, the rotation,
sample q/k and tables, bad inputs, the benchmark layouts."""

from __future__ import annotations

import math as _m

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Sample, bad, on_other_device, sample
from liger_core.ops import _samples as S
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
        check_floating(op, name, t)
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


def rotate_qk(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int):
    """``(q_out, k_out)`` for per-position tables ``(batch or 1, seq, head_dim)``."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return apply_rotation(q, cos, sin), apply_rotation(k, cos, sin)


# -- declarations ------------------------------------------------------------------------------


def qk(batch, q_heads, k_heads, seq, dim, dtype, device, unsqueeze_dim=1, transposed=False, k_dtype=None, g=None):
    """q and k laid out for ``unsqueeze_dim``; ``transposed`` stores them with heads and seq
    swapped (LLaMA's ``view(b, s, h, d).transpose(1, 2)``)."""

    def one(heads, dt):
        logical = (batch, heads, seq, dim) if unsqueeze_dim == 1 else (batch, seq, heads, dim)
        if not transposed:
            return S.to(device, dt, S.normal(logical, g))
        stored = (logical[0], logical[2], logical[1], logical[3])
        return S.to(device, dt, S.normal(stored, g)).transpose(1, 2)

    return one(q_heads, dtype), one(k_heads, k_dtype or dtype)


def tables(lead, seq, dim, dtype, device, kind="llama", g=None):
    """cos/sin of shape ``(*lead, seq, dim)``. ``kind="llama"``: cat(freqs, freqs) of distinct
    positions per leading row; ``"random"``: unrelated halves (the contract uses both)."""
    if kind == "random":
        return S.to(device, dtype, S.normal((*lead, seq, dim), g)), S.to(device, dtype, S.normal((*lead, seq, dim), g))
    rows = 1
    for n in lead:
        rows *= n
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    pos = torch.arange(seq, dtype=torch.float64)[None, :] * (1 + torch.arange(rows)[:, None])
    emb = torch.cat((pos[..., None] * inv_freq,) * 2, dim=-1).reshape(*lead, seq, dim)
    return S.to(device, dtype, emb.cos()), S.to(device, dtype, emb.sin())


def fused_qkv(batch, q_heads, k_heads, seq, dim, device, unsqueeze_dim, g):
    """q and k sliced out of one ``(batch, seq, (q_heads + 2 * k_heads) * dim)`` projection."""
    qkv = S.to(device, torch.float32, S.normal((batch, seq, (q_heads + 2 * k_heads) * dim), g))
    q = qkv[..., : q_heads * dim].view(batch, seq, q_heads, dim)
    k = qkv[..., q_heads * dim : (q_heads + k_heads) * dim].view(batch, seq, k_heads, dim)
    return (q.transpose(1, 2), k.transpose(1, 2)) if unsqueeze_dim == 1 else (q, k)


def smoke(build) -> tuple[Sample, Sample]:
    """``liger check``'s samples of a rotary op, (batch, q_heads, k_heads, seq, head_dim) with q/k
    stored as LLaMA's transposed views: the smallest grouped-query one and a wider one."""
    return sample(build, shape=(1, 2, 1, 3, 8), transposed=True), sample(build, shape=(2, 8, 2, 5, 64), transposed=True)


def layout_samples(build, **params):
    """Both q/k layouts (``unsqueeze_dim``), contiguous or LLaMA's transposed views, with cos/sin
    per sequence or one table broadcast over the batch, in bf16 (and ``params``)."""
    yield from S.grid(
        build,
        dict(unsqueeze_dim=(1, 2), transposed=(False, True), cos_batch=(1, 2)),
        shape=(2, 8, 2, 11, 32),
        dtype=torch.bfloat16,
        **params,
    )


def bad_inputs(op: str, cos_ndim: int) -> tuple:
    """The bad inputs both rotary ops share (base: batch 2, 4 q heads, 2 k heads, seq 6, dim 16)."""
    lead = "3, " if cos_ndim == 4 else ""
    return (
        bad("unsqueeze_dim", ValueError, r"unsqueeze_dim must be 1 .* or 2 .*; got 0", unsqueeze_dim=0),
        bad(
            "q_3d",
            ValueError,
            r"q must be 4-D \(batch, heads, seq, head_dim\); got q.shape=\(2, 4, 6\)",
            q=lambda q: q[..., 0],
        ),
        bad(
            "odd_head_dim",
            ValueError,
            r"head_dim must be even",
            q=lambda t: t[..., :15],
            k=lambda t: t[..., :15],
            cos=lambda t: t[..., :15],
            sin=lambda t: t[..., :15],
        ),
        bad(
            "k_seq",
            ValueError,
            r"k must match q in batch, seq and head_dim.*k.shape=\(2, 2, 5, 16\)",
            k=lambda k: k[:, :, :5],
        ),
        bad(
            "cos_shape",
            ValueError,
            rf"cos must have shape \({lead}batch or 1, seq, head_dim\) = \({lead}2 or 1, 6, 16\); got",
            cos=lambda c: c[..., :8],
        ),
        bad("mixed_devices", ValueError, r"one device.*q is on .*sin is on", sin=on_other_device),
        bad("int_dtype", TypeError, r"k must have dtype float32, bfloat16, float16; got int64", k=lambda k: k.long()),
        bad("float64", TypeError, r"q must have dtype .*got float64", q=lambda q: q.double()),
    )


# q's results are as exact as q and the tables, k's as k and the tables (their dtypes may differ).
CHECKS = Checks(
    out_dtypes=lambda a: (a["q"].dtype, a["k"].dtype),
    tolerance_from={
        "q_out": ("q", "cos", "sin"),
        "grad_q": ("q", "cos", "sin"),
        "k_out": ("k", "cos", "sin"),
        "grad_k": ("k", "cos", "sin"),
    },
)


def bench_spec(table_lead, torch_fn, peers: dict, **extra) -> B.BenchSpec:
    """The spec of a rotary op: q and k in two layouts, ``transposed`` as LLaMA's attention passes
    them (``proj(x).view(b, s, h, d).transpose(1, 2)``), the default, and ``contiguous``
    ``(batch, heads, seq, head_dim)`` tensors of their own; cos/sin tables of leading dimensions
    ``table_lead(shape)``. ``extra``: further arguments, each a function of the shape."""

    def build(transposed: bool):
        def layout(s, dt, dev, gen):
            q, k = B.attention_qk(s, dt, dev, gen, transposed)
            cos, sin = B.rotary_tables(table_lead(s), s, dt, dev)
            return dict(q=q, k=k, cos=cos, sin=sin, **{name: fn(s) for name, fn in extra.items()})

        return layout

    return B.BenchSpec(
        group="activations",
        axes=("tokens", "batch", "heads", "kv_heads", "head_dim"),
        layouts={"transposed": build(True), "contiguous": build(False)},
        torch_fn=torch_fn,
        traffic=lambda s, e: traffic(s, e, _m.prod(table_lead(s))),
        describe=B.heads_text,
        peers=peers,
    )


def torch_rotation(q, k, cos, sin, unsqueeze_dim):
    """transformers' apply_rotary_pos_emb on per-position tables."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def traffic(s, e, table_rows: int):
    """Read q, k and the tables, write the two results (forward and backward alike)."""
    n = 2 * s.batch * s.seq * s.head_dim * (s.heads + s.kv_heads) * e + 2 * table_rows * s.seq * s.head_dim * e
    return n, n
