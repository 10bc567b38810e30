"""Neighborhood attention for Ascend NPUs: flash-style banded Triton kernels, UB tile plan and
the kernel adapter of `liger_core.drivers.fused_neighborhood_attention`.

The work is the CUDA package's (query ``i`` attends to the keys ``j`` with ``|j - i| <= reach =
(kernel_size // 2) * dilation`` and ``(j - i) % dilation == 0``, clipped at the sequence ends; a
query block walks only the key blocks its windows meet with an online softmax and keeps its rows'
log-sum-exp; backward recomputes the probabilities in the band: a dQ kernel that also writes
``delta = rowsum(dO * O)``, then a dK/dV kernel over the query blocks reaching each key block),
shaped for the NPU:

- Every kernel is persistent: one program per AI core (the products run on the cube units),
  walking the (batch * head, block) items ``pid, pid + programs, ...``: no grid reaches 65536.
- The block (rows of a query and of a key block) is the largest whose live tiles fit the UB in
  every kernel (the UB model, ub_model.md), halved from NAT_BLOCK down to tl.dot's 16.
- The window test compares in fp32 (A2/A3 have no integer vector compare), exactly at every
  length: the tiles' positions enter it relative to the tiles' starts (small integers), and the
  bounds they meet are worked out on int64 scalars, then clamped to the tiles' span (`_window`).
- Tiles span several rows, so every row pitch is 32-byte aligned: a tensor whose rows are not is
  copied once into padded rows, and the buffers the op makes are allocated padded.
- Offsets inside tiles are int32, with an int64 scalar base per tile.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import fused_neighborhood_attention as na_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._tiling import FP32, aligned_rows, dma, f32_copy, mask, once, padded_empty, work
from liger_ops_ascend.launch import AscendLaunchError, KernelPlan, Tile, launch


@triton.jit
def _window(rows_f, cols_f, rows_start, cols_start, seq_len, reach, dilation, SPAN: tl.constexpr):
    """(len(rows), len(cols)) mask: position ``cols_start + cols[j]`` is in the window of position
    ``rows_start + rows[i]`` (the window is symmetric) and both are inside the sequence.
    ``rows_f``, ``cols_f``: tile indices in fp32; ``SPAN``: len(rows) + len(cols).

    The compares run in fp32 and are exact at any int32 length. Positions enter relative to
    the tiles' starts: ``t = cols[j] - rows[i]`` is an integer below SPAN, and the offset is
    ``base + t``. The conditions on the offset become bounds on ``t``, worked out on int64 scalars
    and clamped to [-SPAN, SPAN]. The clamp changes no result, and every fp32 value in the compares
    is a small exact integer."""
    base = cols_start.to(tl.int64) - rows_start
    # |base + t| <= reach  <=>  -reach - base <= t <= reach - base.
    lo = tl.minimum(tl.maximum(-reach - base, -SPAN), SPAN).to(tl.float32)
    hi = tl.minimum(tl.maximum(reach - base, -SPAN), SPAN).to(tl.float32)
    # base + t is a multiple of dilation <=> t + c is, for c the residue of base nearest zero
    # (|c| <= dilation / 2). Where |c| > SPAN, dilation > 2 * SPAN and no t + c is a multiple (it
    # lies in (0, dilation) in magnitude); c clamped to +-SPAN keeps that (0 < |t + c| < 2 * SPAN).
    # So (t + c) / dilation is an integer exactly when dilation divides t + c, also where dilation
    # is past 2**24 (inexact in fp32): the only multiple within 2 * SPAN of zero is then 0 itself.
    residue = (base % dilation + dilation) % dilation
    nearest = (residue + dilation // 2) % dilation - dilation // 2
    c = tl.minimum(tl.maximum(nearest, -SPAN), SPAN).to(tl.float32)
    t = cols_f[None, :] - rows_f[:, None]
    quotient = (t + c) / (dilation + 0.0)
    in_band = (t >= lo) & (t <= hi) & (quotient == tl.floor(quotient))
    rows_left = tl.minimum(seq_len - rows_start, SPAN).to(tl.float32)
    cols_left = tl.minimum(seq_len - cols_start, SPAN).to(tl.float32)
    return in_band & (rows_f[:, None] < rows_left) & (cols_f[None, :] < cols_left)


@triton.jit
def _band_end(start, BLOCK: tl.constexpr, reach, seq_len):
    """One past the last position a block at ``start`` (BLOCK rows) meets in the windows: summed in
    int64 (start + BLOCK + reach passes int32 past 2**30 positions), an int32 loop bound."""
    return tl.minimum(start.to(tl.int64) + BLOCK + reach, seq_len).to(tl.int32)


@triton.jit
def _head_tile(HEAD, start, idx, seq_len, seq_stride, dims, head_dim, UPCAST: tl.constexpr):
    """The (len(idx), BLOCK_D) tile of rows ``start + idx`` of one head (zero past seq_len and
    head_dim: the products read the padding). ``HEAD``: the head's row 0; ``start`` a scalar."""
    ptrs = HEAD + start.to(tl.int64) * seq_stride + idx[:, None] * seq_stride + dims[None, :]
    tile = tl.load(ptrs, mask=((start + idx) < seq_len)[:, None] & (dims < head_dim)[None, :], other=0.0)
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
def _item(item, n_blocks, n_heads):
    """(batch, head, batch * head, block) of a work item, the first three as int64 scalars."""
    batch_head = item // n_blocks
    block = item % n_blocks
    return (batch_head // n_heads).to(tl.int64), (batch_head % n_heads).to(tl.int64), batch_head.to(tl.int64), block


@triton.jit
def _fused_neighborhood_attention_forward_kernel(
    Q, K, V, OUT, LSE, Q_LIKE,
    q_batch_stride, q_head_stride, q_seq_stride,
    k_batch_stride, k_head_stride, k_seq_stride,
    v_batch_stride, v_head_stride, v_seq_stride,
    o_batch_stride, o_head_stride, o_seq_stride,
    n_heads, seq_len, head_dim, reach, dilation, scale, n_items,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    n_query_blocks = tl.cdiv(seq_len, BLOCK_M)
    m_idx = tl.arange(0, BLOCK_M)
    n_idx = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    m_f = m_idx.to(tl.float32)
    n_f = n_idx.to(tl.float32)
    for item in range(pid, n_items, tl.num_programs(0)):
        batch, head, batch_head, q_block = _item(pid * 0 + item, n_query_blocks, n_heads)
        q_start = q_block * BLOCK_M
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
        for k_next in range(lo, hi, BLOCK_N):
            k_start = pid * 0 + k_next  # a tensor: the interpreter's loop variable is an int
            k = _head_tile(K_HEAD, k_start, n_idx, seq_len, k_seq_stride, dims, head_dim, UPCAST)
            v = _head_tile(V_HEAD, k_start, n_idx, seq_len, v_seq_stride, dims, head_dim, UPCAST)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
            keep = _window(m_f, n_f, q_start, k_start, seq_len, reach, dilation, BLOCK_M + BLOCK_N)
            s = tl.where(keep, s, float("-inf"))
            new_max = tl.maximum(row_max, tl.max(s, axis=1), propagate_nan=tl.PropagateNan.ALL)
            p = tl.exp(s - new_max[:, None])
            rescale = tl.exp(row_max - new_max)
            row_sum = row_sum * rescale + tl.sum(p, axis=1)
            acc = acc * rescale[:, None] + tl.dot(_as_operand(p, Q_LIKE, UPCAST), v, input_precision=PRECISION)
            row_max = new_max
        # Rows past the sequence: a sum of 1 (their stores are masked; no 0 / 0).
        row_sum = tl.where(m_f < tl.minimum(seq_len - q_start, BLOCK_M).to(tl.float32), row_sum, 1.0)
        out = acc / row_sum[:, None]
        OUT_HEAD = OUT + batch * o_batch_stride + head * o_head_stride
        row_mask = (q_start + m_idx) < seq_len
        o_ptrs = OUT_HEAD + q_start.to(tl.int64) * o_seq_stride + m_idx[:, None] * o_seq_stride + dims[None, :]
        tl.store(o_ptrs, out.to(OUT.dtype.element_ty), mask=row_mask[:, None] & (dims < head_dim)[None, :])
        tl.store(LSE + batch_head * seq_len + q_start + m_idx, row_max + tl.log(row_sum), mask=row_mask)


@triton.jit
def _fused_neighborhood_attention_backward_dq_kernel(
    Q, K, V, OUT, DO, LSE, DELTA, DQ, Q_LIKE,
    q_batch_stride, q_head_stride, q_seq_stride,
    k_batch_stride, k_head_stride, k_seq_stride,
    v_batch_stride, v_head_stride, v_seq_stride,
    o_batch_stride, o_head_stride, o_seq_stride,
    do_batch_stride, do_head_stride, do_seq_stride,
    dq_seq_stride,
    n_heads, seq_len, head_dim, reach, dilation, scale, n_items,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    # DQ: (batch * heads, seq) rows of dq_seq_stride (padded rows), head after head.
    pid = tl.program_id(0)
    n_query_blocks = tl.cdiv(seq_len, BLOCK_M)
    m_idx = tl.arange(0, BLOCK_M)
    n_idx = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    m_f = m_idx.to(tl.float32)
    n_f = n_idx.to(tl.float32)
    for item in range(pid, n_items, tl.num_programs(0)):
        batch, head, batch_head, q_block = _item(pid * 0 + item, n_query_blocks, n_heads)
        q_start = q_block * BLOCK_M
        row_mask = (q_start + m_idx) < seq_len
        K_HEAD = K + batch * k_batch_stride + head * k_head_stride
        V_HEAD = V + batch * v_batch_stride + head * v_head_stride
        Q_HEAD = Q + batch * q_batch_stride + head * q_head_stride
        DO_HEAD = DO + batch * do_batch_stride + head * do_head_stride
        OUT_HEAD = OUT + batch * o_batch_stride + head * o_head_stride
        q = _head_tile(Q_HEAD, q_start, m_idx, seq_len, q_seq_stride, dims, head_dim, UPCAST)
        do = _head_tile(DO_HEAD, q_start, m_idx, seq_len, do_seq_stride, dims, head_dim, UPCAST)
        o = _head_tile(OUT_HEAD, q_start, m_idx, seq_len, o_seq_stride, dims, head_dim, UPCAST)
        stats = batch_head * seq_len + q_start
        # delta_i = sum(dO_i * O_i): the softmax backward's row term, kept for the dK/dV kernel.
        delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), axis=1)
        tl.store(DELTA + stats + m_idx, delta, mask=row_mask)
        lse = tl.load(LSE + stats + m_idx, mask=row_mask, other=0.0)
        dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        lo = tl.maximum(q_start - reach, 0)
        hi = _band_end(q_start, BLOCK_M, reach, seq_len)
        for k_next in range(lo, hi, BLOCK_N):
            k_start = pid * 0 + k_next  # a tensor: the interpreter's loop variable is an int
            k = _head_tile(K_HEAD, k_start, n_idx, seq_len, k_seq_stride, dims, head_dim, UPCAST)
            v = _head_tile(V_HEAD, k_start, n_idx, seq_len, v_seq_stride, dims, head_dim, UPCAST)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
            keep = _window(m_f, n_f, q_start, k_start, seq_len, reach, dilation, BLOCK_M + BLOCK_N)
            p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)
            dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
            ds = p * (dp - delta[:, None])
            dq += tl.dot(_as_operand(ds, Q_LIKE, UPCAST), k, input_precision=PRECISION)
        dq *= scale
        dq_ptrs = DQ + stats * dq_seq_stride + m_idx[:, None] * dq_seq_stride + dims[None, :]
        tl.store(dq_ptrs, dq.to(DQ.dtype.element_ty), mask=row_mask[:, None] & (dims < head_dim)[None, :])


@triton.jit
def _fused_neighborhood_attention_backward_dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, Q_LIKE,
    q_batch_stride, q_head_stride, q_seq_stride,
    k_batch_stride, k_head_stride, k_seq_stride,
    v_batch_stride, v_head_stride, v_seq_stride,
    do_batch_stride, do_head_stride, do_seq_stride,
    dkv_seq_stride,
    n_heads, seq_len, head_dim, reach, dilation, scale, n_items,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    # One item per key block of BLOCK_N rows; the query rows whose windows reach its keys are
    # [k_start - reach, k_end + reach] (the window is symmetric). DK, DV: as DQ.
    pid = tl.program_id(0)
    n_key_blocks = tl.cdiv(seq_len, BLOCK_N)
    m_idx = tl.arange(0, BLOCK_M)
    n_idx = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    m_f = m_idx.to(tl.float32)
    n_f = n_idx.to(tl.float32)
    for item in range(pid, n_items, tl.num_programs(0)):
        batch, head, batch_head, k_block = _item(pid * 0 + item, n_key_blocks, n_heads)
        k_start = k_block * BLOCK_N
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
        for q_next in range(lo, hi, BLOCK_M):
            q_start = pid * 0 + q_next  # a tensor: the interpreter's loop variable is an int
            row_mask = (q_start + m_idx) < seq_len
            q = _head_tile(Q_HEAD, q_start, m_idx, seq_len, q_seq_stride, dims, head_dim, UPCAST)
            do = _head_tile(DO_HEAD, q_start, m_idx, seq_len, do_seq_stride, dims, head_dim, UPCAST)
            stats = batch_head * seq_len + q_start
            lse = tl.load(LSE + stats + m_idx, mask=row_mask, other=0.0)
            delta = tl.load(DELTA + stats + m_idx, mask=row_mask, other=0.0)
            # Transposed scores (keys x queries): the window is symmetric in (i, j).
            s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION) * scale
            keep = _window(n_f, m_f, k_start, q_start, seq_len, reach, dilation, BLOCK_M + BLOCK_N)
            p_t = tl.where(keep, tl.exp(s_t - lse[None, :]), 0.0)
            dv += tl.dot(_as_operand(p_t, Q_LIKE, UPCAST), do, input_precision=PRECISION)
            dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
            ds_t = p_t * (dp_t - delta[None, :])
            dk += tl.dot(_as_operand(ds_t, Q_LIKE, UPCAST), q, input_precision=PRECISION)
        dk *= scale
        key_rows = batch_head * seq_len + k_start
        offsets = key_rows * dkv_seq_stride + n_idx[:, None] * dkv_seq_stride + dims[None, :]
        store_mask = ((k_start + n_idx) < seq_len)[:, None] & (dims < head_dim)[None, :]
        tl.store(DK + offsets, dk.to(DK.dtype.element_ty), mask=store_mask)
        tl.store(DV + offsets, dv.to(DV.dtype.element_ty), mask=store_mask)


# -- tile plans ------------------------------------------------------------------------------

# Tiles in the terms of the UB model (ub_model.md), by hand from the kernels; b the inputs'
# element bytes, m = n the block's rows, d the head_dim tile. The tiles the band loop loads are
# multi-buffered DMA tiles; those an item loads or stores once, outside that loop (its own
# block's rows, its results), are counted once. The products' operands are counted as if staged
# through the UB (an upper bound: on the cube path they go through L1).


def forward_tiles(m: int, d: int, b: int) -> tuple[Tile, ...]:
    tiles = once("q", m, d, b) + dma("k", m, d, b) + dma("v", m, d, b) + once("out", m, d, b)
    # The accumulator; scores, probabilities and the window's fp32 offsets at the peak; p as an
    # operand; the rows' running max, sum, rescale and fp32 positions.
    tiles += once("acc", m, d, FP32) + work("scores", m, m, 3) + once("p_operand", m, m, b) + work("rows", 1, m, 5)
    return tuple(tiles + mask(m, m) + mask(m, d))


def backward_dq_tiles(m: int, d: int, b: int) -> tuple[Tile, ...]:
    tiles = once("q", m, d, b) + once("do", m, d, b) + once("out", m, d, b) + dma("k", m, d, b) + dma("v", m, d, b)
    # delta reads dO and O in fp32 (copies unless they are fp32).
    tiles += once("dq", m, d, b) + once("dq_acc", m, d, FP32) + f32_copy("do", m, d, b) + f32_copy("out", m, d, b)
    # s, p, dp, ds (and the window's offsets) at the peak; ds as an operand; lse, delta, positions.
    tiles += work("scores", m, m, 4) + once("ds_operand", m, m, b) + work("rows", 1, m, 4)
    return tuple(tiles + mask(m, m) + mask(m, d))


def backward_dkdv_tiles(m: int, d: int, b: int) -> tuple[Tile, ...]:
    tiles = once("k", m, d, b) + once("v", m, d, b) + dma("q", m, d, b) + dma("do", m, d, b)
    tiles += once("dk", m, d, b) + once("dv", m, d, b) + once("dk_acc", m, d, FP32) + once("dv_acc", m, d, FP32)
    tiles += work("scores", m, m, 4) + work("operand", m, m, 2, b) + work("rows", 1, m, 4)
    return tuple(tiles + mask(m, m) + mask(m, d))


UB_TILES = {
    "fused_neighborhood_attention_forward": forward_tiles,
    "fused_neighborhood_attention_backward_dq": backward_dq_tiles,
    "fused_neighborhood_attention_backward_dkdv": backward_dkdv_tiles,
}


@dataclass(frozen=True)
class NeighborhoodPlan:
    """Rows of a query and of a key block, the head_dim tile, the fp32 dot precision,
    ``upcast`` (the interpreter's bf16 ``tl.dot`` is garbage: there bf16 tiles are upcast to fp32
    first, the same rounded operands accumulated in fp32 as on the device) and the hardware."""

    block: int
    block_d: int
    precision: str
    upcast: bool
    elem_bytes: int
    hw: hardware.Hardware

    def constants(self) -> dict:
        return {
            "BLOCK_M": self.block,
            "BLOCK_N": self.block,
            "BLOCK_D": self.block_d,
            "PRECISION": self.precision,
            "UPCAST": self.upcast,
        }

    def kernel(self, name: str, items: int, pitches: tuple[int, ...], extent: int) -> KernelPlan:
        """The launch of kernel ``name`` over ``items`` blocks: one program per AI core (never
        more than items), its tiles, rows of the given byte pitches, int32 extent."""
        tiles = UB_TILES[name](self.block, self.block_d, self.elem_bytes)
        return KernelPlan(name, (max(1, min(items, self.hw.ai_cores)),), tiles, self.block, pitches, extent)


def plan_fused_neighborhood_attention(
    head_dim: int, dtype: torch.dtype, hw: hardware.Hardware, block: int | None = None
) -> NeighborhoodPlan:
    """The largest block (from NAT_BLOCK, halved) whose tiles fit the UB in every kernel;
    ``block`` forces one (tests). fp32 dots in IEEE precision (HF32 would miss the contract's fp32
    tolerance)."""
    b = dtype.itemsize
    block_d = max(hardware.NAT_MIN_BLOCK, triton.next_power_of_2(max(head_dim, 1)))

    def fits(m: int) -> bool:
        return all(sum(t.nbytes for t in tiles(m, block_d, b)) <= hw.ub_budget for tiles in UB_TILES.values())

    if block is None:
        block = hardware.NAT_BLOCK
        while not fits(block) and block > hardware.NAT_MIN_BLOCK:
            block //= 2
    if not fits(block):
        raise AscendLaunchError(
            f"liger-ops-ascend fused_neighborhood_attention: head_dim {head_dim} needs {block}x{block_d} tiles "
            f"that overflow the UB even at the smallest block; {hw.describe_budget()}"
        )
    upcast = dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET") == "1"
    return NeighborhoodPlan(block, block_d, "ieee", upcast, b, hw)


# -- launch ---------------------------------------------------------------------------------------


def _pitch(t: torch.Tensor) -> int:
    return t.stride(-2) * t.element_size()


def head_strides(t: torch.Tensor) -> tuple[int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2)


def window_reach(kernel_size: int, dilation: int, seq_len: int) -> int:
    """How far a window reaches on each side, capped at the sequence (no overflow in int32)."""
    return min((kernel_size // 2) * dilation, seq_len)


def _extent(plan: NeighborhoodPlan, *tensors: torch.Tensor) -> int:
    """The largest int32 offset inside a tile: block rows of the widest seq stride."""
    return max(plan.block * t.stride(-2) + plan.block_d for t in tensors)


def fused_neighborhood_attention_forward(q, k, v, kernel_size: int, dilation: int, scale: float, hw):
    """``(out, lse)``: out ``(batch, heads, seq, head_dim)`` in q's dtype (padded rows), lse fp32
    ``(batch * heads, seq)``."""
    batch, heads, seq_len, head_dim = q.shape
    out = padded_empty((batch, heads, seq_len, head_dim), q.dtype, q.device)
    lse = torch.empty((batch * heads, seq_len), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    plan = plan_fused_neighborhood_attention(head_dim, q.dtype, hw)
    items = batch * heads * triton.cdiv(seq_len, plan.block)
    name = "fused_neighborhood_attention_forward"
    kernel_plan = plan.kernel(name, items, tuple(_pitch(t) for t in (q, k, v, out)), _extent(plan, q, k, v, out))
    launch(
        _fused_neighborhood_attention_forward_kernel, kernel_plan, hw,
        q, k, v, out, lse, q,
        *head_strides(q), *head_strides(k), *head_strides(v), *head_strides(out),
        heads, seq_len, head_dim, window_reach(kernel_size, dilation, seq_len), dilation, scale, items,
        **plan.constants(),
    )  # fmt: skip
    return out, lse


def fused_neighborhood_attention_backward(do, q, k, v, out, lse, kernel_size, dilation, scale, hw):
    """``(grad_query, grad_key, grad_value)`` in q's dtype (padded rows)."""
    batch, heads, seq_len, head_dim = q.shape
    dq, dk, dv = (padded_empty((batch, heads, seq_len, head_dim), q.dtype, q.device) for _ in range(3))
    if dq.numel() == 0:
        return dq, dk, dv
    plan = plan_fused_neighborhood_attention(head_dim, q.dtype, hw)
    delta = torch.empty_like(lse)
    reach = window_reach(kernel_size, dilation, seq_len)
    items = batch * heads * triton.cdiv(seq_len, plan.block)
    inputs = (q, k, v, out, do, dq)
    name = "fused_neighborhood_attention_backward_dq"
    launch(
        _fused_neighborhood_attention_backward_dq_kernel,
        plan.kernel(name, items, tuple(_pitch(t) for t in inputs), _extent(plan, *inputs)), hw,
        q, k, v, out, do, lse, delta, dq, q,
        *head_strides(q), *head_strides(k), *head_strides(v), *head_strides(out), *head_strides(do), dq.stride(2),
        heads, seq_len, head_dim, reach, dilation, scale, items,
        **plan.constants(),
    )  # fmt: skip
    inputs = (q, k, v, do, dk, dv)
    name = "fused_neighborhood_attention_backward_dkdv"
    launch(
        _fused_neighborhood_attention_backward_dkdv_kernel,
        plan.kernel(name, items, tuple(_pitch(t) for t in inputs), _extent(plan, *inputs)), hw,
        q, k, v, do, lse, delta, dk, dv, q,
        *head_strides(q), *head_strides(k), *head_strides(v), *head_strides(do), dk.stride(2),
        heads, seq_len, head_dim, reach, dilation, scale, items,
        **plan.constants(),
    )  # fmt: skip
    return dq, dk, dv


class FusedNeighborhoodAttentionKernels:
    """`liger_core.drivers.fused_neighborhood_attention.FusedNeighborhoodAttentionKernels` on this
    module's kernels: q, k, v and the incoming gradient in 32-byte aligned rows (`aligned_rows`)."""

    protocol = na_driver.PROTOCOL

    @staticmethod
    def forward(q, k, v, kernel_size, dilation, scale):
        q, k, v = aligned_rows(q), aligned_rows(k), aligned_rows(v)
        hw = hardware.current(q.device)
        out, lse = fused_neighborhood_attention_forward(q, k, v, kernel_size, dilation, scale, hw)
        return out, lse, (q, k, v)

    @staticmethod
    def backward(grad_out, q, k, v, out, lse, kernel_size, dilation, scale):
        hw = hardware.current(q.device)
        return fused_neighborhood_attention_backward(
            aligned_rows(grad_out), q, k, v, out, lse, kernel_size, dilation, scale, hw
        )


LigerFusedNeighborhoodAttentionFunction = implements("fused_neighborhood_attention")(
    na_driver.autograd_function(FusedNeighborhoodAttentionKernels(), __name__)
)
