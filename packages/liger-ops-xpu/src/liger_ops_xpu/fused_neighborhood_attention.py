"""Neighborhood attention for Intel GPUs (XPU): flash-style banded Triton kernels, launch plan and
the kernel adapter of `liger_core.drivers.fused_neighborhood_attention` (CUDA's kernels; the
band's trip count a constexpr in the interpreter).

Query ``i`` attends to the keys ``j`` with ``|j - i| <= reach = (kernel_size // 2) * dilation``
and ``(j - i) % dilation == 0`` (clipped at the sequence ends). The (seq, seq) scores are never
stored: memory is O(seq * head_dim), work O(seq * window * head_dim).

Forward: one program per (batch * head, query block of BLOCK_M rows) walks only the key blocks
of BLOCK_N rows that meet its rows' windows, ``[q_start - reach, q_end + reach]``, with an online
softmax (running max and sum in fp32), and keeps each row's log-sum-exp for the backward.

Backward: ``delta_i = sum(dO_i * O_i)``; the probabilities are recomputed from q, k and the saved
lse in the same band. The dQ kernel (one program per query block) writes delta as it goes; the
dK/dV kernel (one program per key block) then walks the query blocks whose windows reach its
keys. Every product is a ``tl.dot`` accumulating in fp32; the probabilities and ``ds`` are rounded
to the inputs' dtype before their products, as flash attention does.

Index arithmetic is exact at every int32 length: no int32 value past the sequence is ever formed.
Positions enter as a tile's start plus its indices (row masks compare the indices with
``seq_len - start``, pointers add in int64), the window test works on tile-relative offsets with
bounds from int64 scalars (`_window`), band ends are summed in int64 (`_band_end`) and block counts
are taken without the ``n + BLOCK - 1`` of ``cdiv`` (`_blocks`), so a band loop never steps past
2**31 - 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import fused_neighborhood_attention as na_driver

from liger_ops_xpu import hardware
from liger_ops_xpu._tiling import static_trips


@triton.jit
def _window(m_idx, n_idx, rows_start, cols_start, seq_len, reach, dilation, SPAN: tl.constexpr):
    """(len(m_idx), len(n_idx)) mask: position ``cols_start + n_idx[j]`` is in the window of
    position ``rows_start + m_idx[i]`` (the window is symmetric) and both are inside the sequence.
    ``SPAN``: len(m_idx) + len(n_idx).

    Exact at any int32 length without an int32 position: with ``t = n_idx[j] - m_idx[i]`` (below
    SPAN) the offset is ``base + t``, and the band's conditions on it become bounds on ``t``
    worked out on int64 scalars and clamped to [-SPAN, SPAN] (the clamp changes no result)."""
    base = cols_start.to(tl.int64) - rows_start
    # |base + t| <= reach  <=>  -reach - base <= t <= reach - base.
    lo = tl.minimum(tl.maximum(-reach - base, -SPAN), SPAN).to(tl.int32)
    hi = tl.minimum(tl.maximum(reach - base, -SPAN), SPAN).to(tl.int32)
    # dilation divides base + t <=> it divides t + c, c the residue of base nearest zero
    # (|c| <= dilation / 2). Where |c| > SPAN, dilation > 2 * SPAN and no t + c is a multiple
    # (0 < |t + c| < dilation); c clamped to +-SPAN keeps that (0 < |t + c| < 2 * SPAN).
    residue = (base % dilation + dilation) % dilation
    nearest = (residue + dilation // 2) % dilation - dilation // 2
    c = tl.minimum(tl.maximum(nearest, -SPAN), SPAN).to(tl.int32)
    t = n_idx[None, :] - m_idx[:, None]
    in_band = (t >= lo) & (t <= hi) & ((t + c) % dilation == 0)
    return in_band & (m_idx[:, None] < seq_len - rows_start) & (n_idx[None, :] < seq_len - cols_start)


@triton.jit
def _band_end(start, BLOCK: tl.constexpr, reach, seq_len):
    """One past the last position a block at ``start`` (BLOCK rows) meets in the windows: summed in
    int64 (start + BLOCK + reach passes int32 past 2**30 positions)."""
    return tl.minimum(start.to(tl.int64) + BLOCK + reach, seq_len).to(tl.int32)


@triton.jit
def _blocks(n, BLOCK: tl.constexpr):
    """Blocks of BLOCK covering ``n >= 1`` positions: ``cdiv`` without its ``n + BLOCK - 1``,
    which passes int32 for n within BLOCK of 2**31."""
    return (n - 1) // BLOCK + 1


@triton.jit
def _head_tile(BASE, start, idx, seq_len, seq_stride, dims, head_dim, UPCAST: tl.constexpr):
    """The (len(idx), BLOCK_D) tile of one head's rows ``start + idx`` (zero past seq_len and
    head_dim)."""
    mask = (idx[:, None] < seq_len - start) & (dims[None, :] < head_dim)
    tile = tl.load(BASE + (start.to(tl.int64) + idx)[:, None] * seq_stride + dims[None, :], mask=mask, other=0.0)
    if UPCAST:
        tile = tile.to(tl.float32)
    return tile


@triton.jit
def _as_operand(x, like, UPCAST: tl.constexpr):
    """An fp32 tile rounded to the inputs' dtype for a product (kept fp32 when upcasting, after
    the same rounding)."""
    x = x.to(like.dtype.element_ty)
    if UPCAST:
        x = x.to(tl.float32)
    return x


@triton.jit
def _fused_neighborhood_attention_forward_kernel(
    Q, K, V, OUT, LSE, Q_LIKE,
    q_batch_stride, q_head_stride, q_seq_stride,
    k_batch_stride, k_head_stride, k_seq_stride,
    v_batch_stride, v_head_stride, v_seq_stride,
    o_batch_stride, o_head_stride, o_seq_stride,
    n_heads, seq_len, head_dim, reach, dilation, scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr, STATIC_STEPS: tl.constexpr,
):  # fmt: skip
    n_query_blocks = _blocks(seq_len, BLOCK_M)
    pid = tl.program_id(0)
    batch_head = pid // n_query_blocks
    q_start = (pid % n_query_blocks) * BLOCK_M
    batch = (batch_head // n_heads).to(tl.int64)
    head = (batch_head % n_heads).to(tl.int64)
    m_idx = tl.arange(0, BLOCK_M)
    n_idx = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    Q_HEAD = Q + batch * q_batch_stride + head * q_head_stride
    K_HEAD = K + batch * k_batch_stride + head * k_head_stride
    V_HEAD = V + batch * v_batch_stride + head * v_head_stride
    q = _head_tile(Q_HEAD, q_start, m_idx, seq_len, q_seq_stride, dims, head_dim, UPCAST)
    # A finite start for the running max: a row whose first key blocks hold none of its keys
    # keeps exp(-inf - max) = 0 rather than NaN.
    row_max = tl.full((BLOCK_M,), -1.0e30, dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    lo = tl.maximum(q_start - reach, 0)
    hi = _band_end(q_start, BLOCK_M, reach, seq_len)
    for step in range(STATIC_STEPS if STATIC_STEPS > 0 else _blocks(hi - lo, BLOCK_N)):
        k_start = lo + step * BLOCK_N
        k = _head_tile(K_HEAD, k_start, n_idx, seq_len, k_seq_stride, dims, head_dim, UPCAST)
        v = _head_tile(V_HEAD, k_start, n_idx, seq_len, v_seq_stride, dims, head_dim, UPCAST)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        keep = _window(m_idx, n_idx, q_start, k_start, seq_len, reach, dilation, BLOCK_M + BLOCK_N)
        s = tl.where(keep, s, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(s, axis=1))
        p = tl.exp(s - new_max[:, None])
        rescale = tl.exp(row_max - new_max)
        row_sum = row_sum * rescale + tl.sum(p, axis=1)
        acc = acc * rescale[:, None] + tl.dot(_as_operand(p, Q_LIKE, UPCAST), v, input_precision=PRECISION)
        row_max = new_max
    row_mask = m_idx < seq_len - q_start
    row_sum = tl.where(row_mask, row_sum, 1.0)
    out = acc / row_sum[:, None]
    OUT_HEAD = OUT + batch * o_batch_stride + head * o_head_stride
    o_mask = row_mask[:, None] & (dims[None, :] < head_dim)
    o_ptrs = OUT_HEAD + (q_start.to(tl.int64) + m_idx)[:, None] * o_seq_stride + dims[None, :]
    tl.store(o_ptrs, out.to(OUT.dtype.element_ty), mask=o_mask)
    tl.store(LSE + batch_head.to(tl.int64) * seq_len + q_start + m_idx, row_max + tl.log(row_sum), mask=row_mask)


@triton.jit
def _fused_neighborhood_attention_backward_dq_kernel(
    Q, K, V, OUT, DO, LSE, DELTA, DQ, Q_LIKE,
    q_batch_stride, q_head_stride, q_seq_stride,
    k_batch_stride, k_head_stride, k_seq_stride,
    v_batch_stride, v_head_stride, v_seq_stride,
    o_batch_stride, o_head_stride, o_seq_stride,
    do_batch_stride, do_head_stride, do_seq_stride,
    n_heads, seq_len, head_dim, reach, dilation, scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr, STATIC_STEPS: tl.constexpr,
):  # fmt: skip
    # DQ is contiguous (batch, heads, seq, head_dim).
    n_query_blocks = _blocks(seq_len, BLOCK_M)
    pid = tl.program_id(0)
    batch_head = pid // n_query_blocks
    q_start = (pid % n_query_blocks) * BLOCK_M
    batch = (batch_head // n_heads).to(tl.int64)
    head = (batch_head % n_heads).to(tl.int64)
    m_idx = tl.arange(0, BLOCK_M)
    n_idx = tl.arange(0, BLOCK_N)
    row_mask = m_idx < seq_len - q_start
    dims = tl.arange(0, BLOCK_D)
    K_HEAD = K + batch * k_batch_stride + head * k_head_stride
    V_HEAD = V + batch * v_batch_stride + head * v_head_stride
    Q_HEAD = Q + batch * q_batch_stride + head * q_head_stride
    DO_HEAD = DO + batch * do_batch_stride + head * do_head_stride
    OUT_HEAD = OUT + batch * o_batch_stride + head * o_head_stride
    q = _head_tile(Q_HEAD, q_start, m_idx, seq_len, q_seq_stride, dims, head_dim, UPCAST)
    do = _head_tile(DO_HEAD, q_start, m_idx, seq_len, do_seq_stride, dims, head_dim, UPCAST)
    o = _head_tile(OUT_HEAD, q_start, m_idx, seq_len, o_seq_stride, dims, head_dim, UPCAST)
    stats = batch_head.to(tl.int64) * seq_len + q_start + m_idx
    # delta_i = sum(dO_i * O_i): the softmax backward's row term, kept for the dK/dV kernel.
    delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), axis=1)
    tl.store(DELTA + stats, delta, mask=row_mask)
    lse = tl.load(LSE + stats, mask=row_mask, other=0.0)
    dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    lo = tl.maximum(q_start - reach, 0)
    hi = _band_end(q_start, BLOCK_M, reach, seq_len)
    for step in range(STATIC_STEPS if STATIC_STEPS > 0 else _blocks(hi - lo, BLOCK_N)):
        k_start = lo + step * BLOCK_N
        k = _head_tile(K_HEAD, k_start, n_idx, seq_len, k_seq_stride, dims, head_dim, UPCAST)
        v = _head_tile(V_HEAD, k_start, n_idx, seq_len, v_seq_stride, dims, head_dim, UPCAST)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        keep = _window(m_idx, n_idx, q_start, k_start, seq_len, reach, dilation, BLOCK_M + BLOCK_N)
        p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(_as_operand(ds, Q_LIKE, UPCAST), k, input_precision=PRECISION)
    dq *= scale
    DQ_HEAD = DQ + batch_head.to(tl.int64) * seq_len * head_dim
    mask = row_mask[:, None] & (dims[None, :] < head_dim)
    dq_ptrs = DQ_HEAD + (q_start.to(tl.int64) + m_idx)[:, None] * head_dim + dims[None, :]
    tl.store(dq_ptrs, dq.to(DQ.dtype.element_ty), mask=mask)


@triton.jit
def _fused_neighborhood_attention_backward_dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, Q_LIKE,
    q_batch_stride, q_head_stride, q_seq_stride,
    k_batch_stride, k_head_stride, k_seq_stride,
    v_batch_stride, v_head_stride, v_seq_stride,
    do_batch_stride, do_head_stride, do_seq_stride,
    n_heads, seq_len, head_dim, reach, dilation, scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr, STATIC_STEPS: tl.constexpr,
):  # fmt: skip
    # One program per key block of BLOCK_N rows; the query blocks of BLOCK_M rows whose windows
    # reach its keys are [k_start - reach, k_end + reach] (the window is symmetric).
    n_key_blocks = _blocks(seq_len, BLOCK_N)
    pid = tl.program_id(0)
    batch_head = pid // n_key_blocks
    k_start = (pid % n_key_blocks) * BLOCK_N
    batch = (batch_head // n_heads).to(tl.int64)
    head = (batch_head % n_heads).to(tl.int64)
    m_idx = tl.arange(0, BLOCK_M)
    n_idx = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    Q_HEAD = Q + batch * q_batch_stride + head * q_head_stride
    DO_HEAD = DO + batch * do_batch_stride + head * do_head_stride
    K_HEAD = K + batch * k_batch_stride + head * k_head_stride
    V_HEAD = V + batch * v_batch_stride + head * v_head_stride
    k = _head_tile(K_HEAD, k_start, n_idx, seq_len, k_seq_stride, dims, head_dim, UPCAST)
    v = _head_tile(V_HEAD, k_start, n_idx, seq_len, v_seq_stride, dims, head_dim, UPCAST)
    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    lo = tl.maximum(k_start - reach, 0)
    hi = _band_end(k_start, BLOCK_N, reach, seq_len)
    for step in range(STATIC_STEPS if STATIC_STEPS > 0 else _blocks(hi - lo, BLOCK_M)):
        q_start = lo + step * BLOCK_M
        row_mask = m_idx < seq_len - q_start
        q = _head_tile(Q_HEAD, q_start, m_idx, seq_len, q_seq_stride, dims, head_dim, UPCAST)
        do = _head_tile(DO_HEAD, q_start, m_idx, seq_len, do_seq_stride, dims, head_dim, UPCAST)
        stats = batch_head.to(tl.int64) * seq_len + q_start + m_idx
        lse = tl.load(LSE + stats, mask=row_mask, other=0.0)
        delta = tl.load(DELTA + stats, mask=row_mask, other=0.0)
        # Transposed scores (keys x queries): the window is symmetric in (i, j).
        s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION) * scale
        keep = _window(n_idx, m_idx, k_start, q_start, seq_len, reach, dilation, BLOCK_M + BLOCK_N)
        p_t = tl.where(keep, tl.exp(s_t - lse[None, :]), 0.0)
        dv += tl.dot(_as_operand(p_t, Q_LIKE, UPCAST), do, input_precision=PRECISION)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        ds_t = p_t * (dp_t - delta[None, :])
        dk += tl.dot(_as_operand(ds_t, Q_LIKE, UPCAST), q, input_precision=PRECISION)
    dk *= scale
    positions = k_start.to(tl.int64) + n_idx
    offsets = batch_head.to(tl.int64) * seq_len * head_dim + positions[:, None] * head_dim + dims[None, :]
    mask = (n_idx < seq_len - k_start)[:, None] & (dims[None, :] < head_dim)
    tl.store(DK + offsets, dk.to(DK.dtype.element_ty), mask=mask)
    tl.store(DV + offsets, dv.to(DV.dtype.element_ty), mask=mask)


# -- launch -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NeighborhoodPlan:
    """Query rows and key rows per block, the head_dim tile (a power of two, at least tl.dot's
    16), launch options, the fp32 dot precision, and ``upcast``: the interpreter's bf16
    ``tl.dot`` is garbage, so there bf16 tiles are upcast to fp32 first (the same rounded
    operands, accumulated in fp32 as on the device)."""

    block_m: int
    block_n: int
    block_d: int
    launch: dict
    precision: str
    upcast: bool

    def kernel(self) -> dict:
        return dict(
            BLOCK_M=self.block_m,
            BLOCK_N=self.block_n,
            BLOCK_D=self.block_d,
            PRECISION=self.precision,
            UPCAST=self.upcast,
            **self.launch,
        )


def plan_fused_neighborhood_attention(
    seq_len: int, head_dim: int, dtype: torch.dtype, device: torch.device
) -> NeighborhoodPlan:
    """Blocks for one head of ``seq_len`` rows of ``head_dim``: wide heads take smaller row
    blocks (the fp32 accumulators are rows x head_dim); short sequences no block past them; the
    large register file on an XPU (``hardware.launch_kwargs``)."""
    block_d = max(hardware.MIN_DOT_BLOCK, triton.next_power_of_2(head_dim))
    block = hardware.NAT_BLOCK if block_d <= hardware.NAT_WIDE_HEAD_DIM else hardware.NAT_WIDE_HEAD_BLOCK
    block = max(hardware.MIN_DOT_BLOCK, min(block, triton.next_power_of_2(max(seq_len, 1))))
    wide = dtype == torch.float32
    kernel = _fused_neighborhood_attention_forward_kernel
    return NeighborhoodPlan(
        block_m=block,
        block_n=block,
        block_d=block_d,
        launch=hardware.launch_kwargs(kernel, device, hardware.NAT_NUM_WARPS),
        precision="ieee" if wide else "tf32",
        upcast=dtype == torch.bfloat16 and hardware.interpreting(kernel),
    )


def band_steps(kernel, span: int, block: int) -> int:
    """The STATIC_STEPS constexpr: in the interpreter the most blocks of ``block`` rows a band of
    ``span`` rows can meet (blocks past the sequence are masked), 0 on the device."""
    return static_trips(kernel, triton.cdiv(span, block))


def head_strides(t: torch.Tensor) -> tuple[int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2)


def window_reach(kernel_size: int, dilation: int, seq_len: int) -> int:
    """How far a window reaches on each side, capped at the sequence (no overflow in int32)."""
    return min((kernel_size // 2) * dilation, seq_len)


def fused_neighborhood_attention_forward(q, k, v, kernel_size: int, dilation: int, scale: float):
    """``(out, lse)``: out contiguous ``(batch, heads, seq, head_dim)`` in q's dtype, lse fp32
    ``(batch * heads, seq)``."""
    batch, heads, seq_len, head_dim = q.shape
    out = torch.empty((batch, heads, seq_len, head_dim), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch * heads, seq_len), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    plan = plan_fused_neighborhood_attention(seq_len, head_dim, q.dtype, q.device)
    grid = (batch * heads * triton.cdiv(seq_len, plan.block_m),)
    reach = window_reach(kernel_size, dilation, seq_len)
    kernel = _fused_neighborhood_attention_forward_kernel
    kernel[grid](
        q, k, v, out, lse, q,
        *head_strides(q), *head_strides(k), *head_strides(v), *head_strides(out),
        heads, seq_len, head_dim, reach, dilation, scale,
        STATIC_STEPS=band_steps(kernel, plan.block_m + 2 * reach, plan.block_n), **plan.kernel(),
    )  # fmt: skip
    return out, lse


def fused_neighborhood_attention_backward(do, q, k, v, out, lse, kernel_size: int, dilation: int, scale: float):
    """``(grad_query, grad_key, grad_value)``, contiguous, in q's dtype."""
    batch, heads, seq_len, head_dim = q.shape
    dq = torch.empty((batch, heads, seq_len, head_dim), dtype=q.dtype, device=q.device)
    dk, dv = torch.empty_like(dq), torch.empty_like(dq)
    if dq.numel() == 0:
        return dq, dk, dv
    plan = plan_fused_neighborhood_attention(seq_len, head_dim, q.dtype, q.device)
    delta = torch.empty_like(lse)
    reach = window_reach(kernel_size, dilation, seq_len)
    kernel = _fused_neighborhood_attention_backward_dq_kernel
    kernel[(batch * heads * triton.cdiv(seq_len, plan.block_m),)](
        q, k, v, out, do, lse, delta, dq, q,
        *head_strides(q), *head_strides(k), *head_strides(v), *head_strides(out), *head_strides(do),
        heads, seq_len, head_dim, reach, dilation, scale,
        STATIC_STEPS=band_steps(kernel, plan.block_m + 2 * reach, plan.block_n), **plan.kernel(),
    )  # fmt: skip
    kernel = _fused_neighborhood_attention_backward_dkdv_kernel
    kernel[(batch * heads * triton.cdiv(seq_len, plan.block_n),)](
        q, k, v, do, lse, delta, dk, dv, q,
        *head_strides(q), *head_strides(k), *head_strides(v), *head_strides(do),
        heads, seq_len, head_dim, reach, dilation, scale,
        STATIC_STEPS=band_steps(kernel, plan.block_n + 2 * reach, plan.block_m), **plan.kernel(),
    )  # fmt: skip
    return dq, dk, dv


class FusedNeighborhoodAttentionKernels:
    """`liger_core.drivers.fused_neighborhood_attention.FusedNeighborhoodAttentionKernels` on this
    module's kernels."""

    protocol = na_driver.PROTOCOL

    @staticmethod
    def forward(q, k, v, kernel_size, dilation, scale):
        out, lse = fused_neighborhood_attention_forward(q, k, v, kernel_size, dilation, scale)
        return out, lse, (q, k, v)

    backward = staticmethod(fused_neighborhood_attention_backward)


LigerFusedNeighborhoodAttentionFunction = implements("fused_neighborhood_attention")(
    na_driver.autograd_function(FusedNeighborhoodAttentionKernels(), __name__)
)
