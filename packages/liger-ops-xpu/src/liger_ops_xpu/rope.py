"""Rotary position embedding (rotate-half form) for Intel GPUs, shared by qwen2vl_mrope.

One program per (batch, position) rotates every q head and every k head of that position:
its cos/sin row is loaded once and reused across heads (GQA included), and each head is
read as two halves so rotate_half is a swap of registers, not a gather. Tiles of
[HEADS_BLOCK heads x HALF_BLOCK columns] are walked in N_Q_CHUNKS / N_K_CHUNKS head chunks.

Forward, with halves (x1, x2), (c1, c2), (s1, s2):  o1 = x1 c1 - x2 s1,  o2 = x2 c2 + x1 s2.
Backward (the transpose):                         g1 = d1 c1 + d2 s2,  g2 = d2 c2 - d1 s1.

Multimodal RoPE (MROPE): cos/sin hold three tables; column j of each half reads table 0, 1 or
2 by which of the sections (s0, s1, s2) it falls in, merged on the fly in the kernel.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.ops.rope import check_args

from liger_ops_xpu import hardware


@triton.jit
def _rotate_tile(
    SRC,
    DST,
    b,
    s,
    src_sb,
    src_sh,
    src_ss,
    dst_sb,
    dst_sh,
    dst_ss,
    n_heads,
    half,
    c1,
    c2,
    s1,
    s2,
    BACKWARD: tl.constexpr,
    HEADS_BLOCK: tl.constexpr,
    HALF_BLOCK: tl.constexpr,
    N_CHUNKS: tl.constexpr,
):
    cols = tl.arange(0, HALF_BLOCK)
    col_mask = cols < half
    src_base = SRC + b.to(tl.int64) * src_sb + s.to(tl.int64) * src_ss
    dst_base = DST + b.to(tl.int64) * dst_sb + s.to(tl.int64) * dst_ss
    for chunk in range(N_CHUNKS):
        heads = chunk * HEADS_BLOCK + tl.arange(0, HEADS_BLOCK)
        mask = (heads < n_heads)[:, None] & col_mask[None, :]
        src = src_base + heads.to(tl.int64)[:, None] * src_sh + cols[None, :]
        dst = dst_base + heads.to(tl.int64)[:, None] * dst_sh + cols[None, :]
        x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(src + half, mask=mask, other=0.0).to(tl.float32)
        if BACKWARD:
            o1 = x1 * c1[None, :] + x2 * s2[None, :]
            o2 = x2 * c2[None, :] - x1 * s1[None, :]
        else:
            o1 = x1 * c1[None, :] - x2 * s1[None, :]
            o2 = x2 * c2[None, :] + x1 * s2[None, :]
        tl.store(dst, o1.to(DST.dtype.element_ty), mask=mask)
        tl.store(dst + half, o2.to(DST.dtype.element_ty), mask=mask)


@triton.jit
def _load_table_half(T, base, t_s3, cols, offset, col_mask, sec0, sec1, MROPE: tl.constexpr):
    """One half of a cos/sin row (columns ``offset + cols``); MROPE picks each column's table."""
    if MROPE:
        table = (cols >= sec0).to(tl.int64) + (cols >= sec0 + sec1).to(tl.int64)
        ptrs = T + base + table * t_s3 + offset + cols
    else:
        ptrs = T + base + offset + cols
    return tl.load(ptrs, mask=col_mask, other=0.0).to(tl.float32)


@triton.jit
def _rope_kernel(
    Q,
    K,
    QO,
    KO,
    COS,
    SIN,
    q_sb,
    q_sh,
    q_ss,
    k_sb,
    k_sh,
    k_ss,
    qo_sb,
    qo_sh,
    qo_ss,
    ko_sb,
    ko_sh,
    ko_ss,
    t_s3,
    t_sb,
    t_ss,
    seq,
    n_q_heads,
    n_k_heads,
    half,
    sec0,
    sec1,
    MROPE: tl.constexpr,
    BACKWARD: tl.constexpr,
    HEADS_BLOCK: tl.constexpr,
    HALF_BLOCK: tl.constexpr,
    N_Q_CHUNKS: tl.constexpr,
    N_K_CHUNKS: tl.constexpr,
):
    pid = tl.program_id(0)
    b = pid // seq
    s = pid % seq
    cols = tl.arange(0, HALF_BLOCK)
    col_mask = cols < half
    # t_sb is 0 when one table serves every batch row.
    base = b.to(tl.int64) * t_sb + s.to(tl.int64) * t_ss
    c1 = _load_table_half(COS, base, t_s3, cols, 0, col_mask, sec0, sec1, MROPE)
    c2 = _load_table_half(COS, base, t_s3, cols, half, col_mask, sec0, sec1, MROPE)
    s1 = _load_table_half(SIN, base, t_s3, cols, 0, col_mask, sec0, sec1, MROPE)
    s2 = _load_table_half(SIN, base, t_s3, cols, half, col_mask, sec0, sec1, MROPE)
    _rotate_tile(
        Q, QO, b, s, q_sb, q_sh, q_ss, qo_sb, qo_sh, qo_ss, n_q_heads, half, c1, c2, s1, s2,
        BACKWARD, HEADS_BLOCK, HALF_BLOCK, N_Q_CHUNKS,
    )  # fmt: skip
    _rotate_tile(
        K, KO, b, s, k_sb, k_sh, k_ss, ko_sb, ko_sh, ko_ss, n_k_heads, half, c1, c2, s1, s2,
        BACKWARD, HEADS_BLOCK, HALF_BLOCK, N_K_CHUNKS,
    )  # fmt: skip


def _bhs_strides(t: torch.Tensor, unsqueeze_dim: int) -> tuple[int, int, int]:
    """(batch, head, seq) strides of a 4-D q/k in either layout."""
    if unsqueeze_dim == 1:  # (b, heads, seq, d)
        return t.stride(0), t.stride(1), t.stride(2)
    return t.stride(0), t.stride(2), t.stride(1)  # (b, seq, heads, d)


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def rotate(q, k, cos, sin, unsqueeze_dim: int, backward: bool, sections: tuple[int, int, int] | None):
    """Rotate q and k (or their gradients when ``backward``) into new tensors of their shapes."""
    q, k = _last_dim_contiguous(q), _last_dim_contiguous(k)
    cos, sin = _last_dim_contiguous(cos), _last_dim_contiguous(sin)
    if cos.stride() != sin.stride():
        cos, sin = cos.contiguous(), sin.contiguous()
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    seq_axis = 3 - unsqueeze_dim
    batch, seq, dim = q.shape[0], q.shape[seq_axis], q.shape[3]
    n_q_heads, n_k_heads = q.shape[unsqueeze_dim], k.shape[unsqueeze_dim]
    if q.numel() == 0 and k.numel() == 0:
        return q_out, k_out
    half = dim // 2
    half_block = triton.next_power_of_2(half)
    heads_block = min(
        triton.next_power_of_2(max(n_q_heads, n_k_heads)), max(1, hardware.ROPE_TILE_ELEMENTS // half_block)
    )
    mrope = sections is not None
    t_sb = cos.stride(-3) if cos.shape[-3] == batch and batch > 1 else 0
    kernel = _rope_kernel
    kernel[(batch * seq,)](
        q,
        k,
        q_out,
        k_out,
        cos,
        sin,
        *_bhs_strides(q, unsqueeze_dim),
        *_bhs_strides(k, unsqueeze_dim),
        *_bhs_strides(q_out, unsqueeze_dim),
        *_bhs_strides(k_out, unsqueeze_dim),
        cos.stride(0) if mrope else 0,
        t_sb,
        cos.stride(-2),
        seq,
        n_q_heads,
        n_k_heads,
        half,
        sections[0] if mrope else 0,
        sections[1] if mrope else 0,
        MROPE=mrope,
        BACKWARD=backward,
        HEADS_BLOCK=heads_block,
        HALF_BLOCK=half_block,
        N_Q_CHUNKS=triton.cdiv(n_q_heads, heads_block),
        N_K_CHUNKS=triton.cdiv(n_k_heads, heads_block),
        **hardware.launch_kwargs(
            kernel, q.device, hardware.num_warps_for(2 * heads_block * half_block), register_heavy=False
        ),
    )
    return q_out, k_out


class LigerRopeFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, cos, sin, unsqueeze_dim, sections):
        q_out, k_out = rotate(q, k, cos, sin, unsqueeze_dim, False, sections)
        ctx.save_for_backward(cos, sin)
        ctx.unsqueeze_dim, ctx.sections = unsqueeze_dim, sections
        ctx.q_meta, ctx.k_meta = (q.shape, q.dtype), (k.shape, k.dtype)
        return q_out, k_out

    @staticmethod
    def backward(ctx, dq, dk):
        cos, sin = ctx.saved_tensors
        # An output that fed nothing has no gradient: rotate zeros in its place.
        if dq is None:
            dq = torch.zeros(ctx.q_meta[0], dtype=ctx.q_meta[1], device=cos.device)
        if dk is None:
            dk = torch.zeros(ctx.k_meta[0], dtype=ctx.k_meta[1], device=cos.device)
        dq_in, dk_in = rotate(dq, dk, cos, sin, ctx.unsqueeze_dim, True, ctx.sections)
        return dq_in, dk_in, None, None, None, None


def rope(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The interface's ``rope`` (see ``liger_core.ops.rope``) on Intel GPUs."""
    check_args(q, k, cos, sin, position_ids, unsqueeze_dim)
    return LigerRopeFunction.apply(q, k, cos.detach(), sin.detach(), unsqueeze_dim, None)
