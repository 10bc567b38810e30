"""Attention Residuals for Ascend NPUs: Triton kernels, UB tile plan and the kernel
adapter of `liger_core.drivers.attn_res`.

Per position (a row of each of the N blocks), in fp32: ``score_i = sum(v_i * u) * rstd_i`` with
``u = w_query * w_norm`` and ``rstd_i = rsqrt(mean(v_i^2) + eps)``, ``alpha = softmax(score)``
over the blocks, ``h = sum_i alpha_i v_i``. One program per vector core walks the row blocks
(grid-stride); the N scores of a tile's rows live in a (BLOCK_M, BLOCK_B) tile (BLOCK_B: N to a
power of two), so rows are only ever walked in BLOCK_N-wide column chunks (from `plan_rows`:
the widest chunk whose live tiles fit the UB), whatever their width.

Forward: pass 1 reads every block's rows for the two sums; pass 2 reads them again for the
weighted sum. score, rstd (per position and block) and the logsumexp of the scores (per
position) are kept for backward.

Backward, per position: ``d_alpha_i = sum(dh * v_i)`` (pass 1), ``d_score_i = alpha_i *
(d_alpha_i - sum_j alpha_j d_alpha_j)``; pass 2 writes ``dv_i = alpha_i dh + d_score_i *
(rstd_i u - score_i rstd_i^2 / hidden * v_i)`` and adds ``g = sum d_score_i rstd_i v_i`` per
column to the program's own fp32 partial row (summed afterwards: no atomics), from which
``grad_w_query = g * w_norm`` and ``grad_w_norm = g * w_query``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import attn_res as attn_res_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import below, row_block, tile_indices, tile_ptrs
from liger_ops_ascend._tiling import (
    FP32,
    MAX_ROW_STRIDE,
    RowPlan,
    as_rows,
    dma,
    elem_bytes,
    f32_copy,
    mask,
    once,
    plan_rows,
    strides_of,
    sum_partials,
    work,
)
from liger_ops_ascend.launch import Tile, launch


@triton.jit
def _block_lane(tile, lanes_f, i):
    """Column ``i`` of a (BLOCK_M, BLOCK_B) per-block tile, as a (BLOCK_M,) vector. ``lanes_f``: the
    tile's column indices in fp32 (an exact fp32 compare: A2/A3 have no int vector compare)."""
    return tl.sum(tl.where(lanes_f[None, :] == i, tile, 0.0), axis=1)


@triton.jit
def _attn_res_forward_kernel(
    V,
    W_QUERY,
    W_NORM,
    H,
    SCORE,
    RSTD,
    LSE,
    v_block_stride,
    v_row_stride,
    h_row_stride,
    n_blocks,
    n_rows,
    n_cols,
    n_row_blocks,
    n_chunks,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    lanes = tl.arange(0, BLOCK_B)
    block_mask = lanes < n_blocks
    # The lanes in fp32 for the selects (exact: BLOCK_B < 2**24); fp32 compares, one vector op each.
    lanes_f = lanes.to(tl.float32)
    block_live = below(lanes, n_blocks)
    for blk in range(pid, n_row_blocks, num_programs):
        row0, _, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        base = row0.to(tl.int64)
        scores = tl.zeros((BLOCK_M, BLOCK_B), dtype=tl.float32)
        rstds = tl.zeros((BLOCK_M, BLOCK_B), dtype=tl.float32)
        # Pass 1: per block, the sum of squares and the dot with u, chunk by chunk. Block i's rows
        # start at V + i * v_block_stride: a pointer advanced per block.
        block = V
        for i in range(n_blocks):
            sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
            dot = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for c in range(n_chunks):
                cols = c * BLOCK_N + n_idx
                col_mask = cols < n_cols
                mask = row_mask[:, None] & col_mask[None, :]
                v = tl.load(tile_ptrs(block, base, m_idx, v_row_stride, cols), mask=mask, other=0.0).to(tl.float32)
                u = tl.load(W_QUERY + cols, mask=col_mask, other=0.0).to(tl.float32)
                u *= tl.load(W_NORM + cols, mask=col_mask, other=0.0).to(tl.float32)
                sum_sq += tl.sum(v * v, axis=1)
                dot += tl.sum(v * u[None, :], axis=1)
            block += v_block_stride
            rstd = 1.0 / tl.sqrt(sum_sq / n_cols + eps)
            scores = tl.where(lanes_f[None, :] == i, (dot * rstd)[:, None], scores)
            rstds = tl.where(lanes_f[None, :] == i, rstd[:, None], rstds)
        # Softmax over the blocks (lanes past N are -inf: weight 0).
        scores_m = tl.where(block_live[None, :], scores, float("-inf"))
        score_max = tl.max(scores_m, axis=1)
        exps = tl.exp(scores_m - score_max[:, None])
        exp_sum = tl.sum(exps, axis=1)
        alphas = exps / exp_sum[:, None]
        stats_mask = row_mask[:, None] & block_mask[None, :]
        tl.store(tile_ptrs(SCORE, base, m_idx, n_blocks, lanes), scores, mask=stats_mask)
        tl.store(tile_ptrs(RSTD, base, m_idx, n_blocks, lanes), rstds, mask=stats_mask)
        tl.store(LSE + base + m_idx, score_max + tl.log(exp_sum), mask=row_mask)
        # Pass 2: the weighted sum of the blocks, chunk by chunk.
        for c in range(n_chunks):
            cols = c * BLOCK_N + n_idx
            mask = row_mask[:, None] & (cols < n_cols)[None, :]
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            block = V
            for i in range(n_blocks):
                v = tl.load(tile_ptrs(block, base, m_idx, v_row_stride, cols), mask=mask, care_padding=False)
                acc += _block_lane(alphas, lanes_f, i)[:, None] * v.to(tl.float32)
                block += v_block_stride
            tl.store(tile_ptrs(H, base, m_idx, h_row_stride, cols), acc.to(H.dtype.element_ty), mask=mask)


@triton.jit
def _attn_res_backward_kernel(
    DH,
    V,
    W_QUERY,
    W_NORM,
    SCORE,
    RSTD,
    LSE,
    DV,
    PARTIAL,
    dh_row_stride,
    v_block_stride,
    v_row_stride,
    dv_block_stride,
    dv_row_stride,
    n_blocks,
    n_rows,
    n_cols,
    n_row_blocks,
    n_chunks,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    # PARTIAL: one fp32 row per program, g = sum over its positions and blocks of d_score rstd v.
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    lanes = tl.arange(0, BLOCK_B)
    block_mask = lanes < n_blocks
    # The lanes in fp32 for the selects (exact: BLOCK_B < 2**24); fp32 compares, one vector op each.
    lanes_f = lanes.to(tl.float32)
    block_live = below(lanes, n_blocks)
    partial = PARTIAL + pid.to(tl.int64) * n_cols
    for blk in range(pid, n_row_blocks, num_programs):
        row0, _, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        base = row0.to(tl.int64)
        stats_mask = row_mask[:, None] & block_mask[None, :]
        lse = tl.load(LSE + base + m_idx, mask=row_mask, other=0.0)
        scores = tl.load(tile_ptrs(SCORE, base, m_idx, n_blocks, lanes), mask=stats_mask, other=0.0)
        live = below(m_idx, n_rows - row0)[:, None] & block_live[None, :]
        alphas = tl.where(live, tl.exp(scores - lse[:, None]), 0.0)
        rstds = tl.load(tile_ptrs(RSTD, base, m_idx, n_blocks, lanes), mask=stats_mask, other=0.0)
        # Pass 1: d_alpha_i = sum(dh * v_i), chunk-outer so dh is read once.
        d_alphas = tl.zeros((BLOCK_M, BLOCK_B), dtype=tl.float32)
        for c in range(n_chunks):
            cols = c * BLOCK_N + n_idx
            mask = row_mask[:, None] & (cols < n_cols)[None, :]
            dh = tl.load(tile_ptrs(DH, base, m_idx, dh_row_stride, cols), mask=mask, other=0.0).to(tl.float32)
            block = V
            for i in range(n_blocks):
                v = tl.load(tile_ptrs(block, base, m_idx, v_row_stride, cols), mask=mask, other=0.0)
                d_alpha = tl.sum(dh * v.to(tl.float32), axis=1)
                d_alphas = tl.where(lanes_f[None, :] == i, d_alphas + d_alpha[:, None], d_alphas)
                block += v_block_stride
        # Softmax backward.
        d_scores = alphas * (d_alphas - tl.sum(alphas * d_alphas, axis=1)[:, None])
        # Pass 2: dv_i, and g into this program's partial row.
        for c in range(n_chunks):
            cols = c * BLOCK_N + n_idx
            col_mask = cols < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            dh = tl.load(tile_ptrs(DH, base, m_idx, dh_row_stride, cols), mask=mask, care_padding=False).to(tl.float32)
            u = tl.load(W_QUERY + cols, mask=col_mask, care_padding=False).to(tl.float32)
            u *= tl.load(W_NORM + cols, mask=col_mask, care_padding=False).to(tl.float32)
            g = tl.zeros((BLOCK_N,), dtype=tl.float32)
            block = V
            dv_block = DV
            for i in range(n_blocks):
                alpha = _block_lane(alphas, lanes_f, i)
                d_score = _block_lane(d_scores, lanes_f, i)
                rstd = _block_lane(rstds, lanes_f, i)
                score = _block_lane(scores, lanes_f, i)
                v = tl.load(tile_ptrs(block, base, m_idx, v_row_stride, cols), mask=mask, other=0.0).to(tl.float32)
                # d score_i / d v_i = rstd u - (score rstd^2 / hidden) v  (RMSNorm's Jacobian on u).
                dv = alpha[:, None] * dh + (d_score * rstd)[:, None] * u[None, :]
                dv -= (d_score * score * rstd * rstd / n_cols)[:, None] * v
                tl.store(tile_ptrs(dv_block, base, m_idx, dv_row_stride, cols), dv.to(DV.dtype.element_ty), mask=mask)
                g += tl.sum((d_score * rstd)[:, None] * v, axis=0)
                block += v_block_stride
                dv_block += dv_block_stride
            # The program's own row: no other program touches it.
            tl.store(partial + cols, tl.load(partial + cols, mask=col_mask, care_padding=False) + g, mask=col_mask)


# -- tile plans ------------------------------------------------------------------------------


# Tiles in the terms of the UB model (ub_model.md). vb, qb, nb: element bytes of V (and h, dh,
# dv), w_query, w_norm; bb: BLOCK_B, the per-block tiles' width. The two passes of a kernel are
# counted together (their buffers are not live at once: an over-count, on the safe side).


def forward_tiles(m: int, n: int, vb: int, qb: int, nb: int, bb: int) -> tuple[Tile, ...]:
    tiles = dma("v", m, n, vb) + dma("h", m, n, vb) + dma("w_query", 1, n, qb) + dma("w_norm", 1, n, nb)
    # Peak: v in fp32, v*v or v*u, the weighted sum's accumulator; u in fp32.
    tiles += f32_copy("v", m, n, vb) + work("f32_", m, n, 1) + once("acc", m, n, FP32) + work("u", 1, n, 1)
    # Per-block tiles: scores, rstd, exp and alpha, and a selected lane.
    tiles += work("blocks", m, bb, 5) + work("rows", 1, m, 4)
    return tuple(tiles + mask(m, n))


def backward_tiles(m: int, n: int, vb: int, qb: int, nb: int, bb: int) -> tuple[Tile, ...]:
    tiles = dma("dh", m, n, vb) + dma("v", m, n, vb) + dma("dv", m, n, vb)
    tiles += dma("w_query", 1, n, qb) + dma("w_norm", 1, n, nb) + dma("partial", 1, n, FP32)
    # Peak: dh and v in fp32, dv and one product; u and the g accumulator.
    tiles += f32_copy("dh", m, n, vb) + f32_copy("v", m, n, vb) + work("f32_", m, n, 2)
    tiles += work("u", 1, n, 1) + once("g", 1, n, FP32) + work("colsum", 1, n, 1)
    # Per-block tiles: scores, alpha, rstd, d_alpha, d_score, a selected lane; per-row coefficients.
    tiles += work("blocks", m, bb, 6) + work("rows", 1, m, 6)
    return tuple(tiles + mask(m, n))


def plan_tiles(
    direction: str,
    n_rows: int,
    n_cols: int,
    n_blocks: int,
    v_dtype: torch.dtype,
    query_dtype: torch.dtype,
    norm_dtype: torch.dtype,
    hw: hardware.Hardware,
    row_strides: Sequence[tuple[int, int]] | None = None,
) -> RowPlan:
    """The tile plan of ``direction`` ("forward" or "backward") over ``n_rows`` positions of
    ``n_cols`` columns and ``n_blocks`` blocks; the same kernel walks one chunk or several.
    ``row_strides``: as `plan_rows` takes them."""
    kernels = ((f"attn_res_{direction}", forward_tiles if direction == "forward" else backward_tiles),)
    vb = elem_bytes(v_dtype)
    sizes = {"vb": vb, "qb": elem_bytes(query_dtype), "nb": elem_bytes(norm_dtype)}
    strides = [(n_cols, vb)] if row_strides is None else row_strides
    block_b = triton.next_power_of_2(max(n_blocks, 1))
    return plan_rows(f"attn_res {direction}", n_rows, n_cols, kernels, kernels, hw, sizes, strides, bb=block_b)


# -- host side -------------------------------------------------------------------------------


def as_blocks(V: torch.Tensor) -> torch.Tensor:
    """``V`` as ``(N, positions, hidden)`` with unit column stride and a row stride the int32 tile
    offsets can hold (a copy only if needed)."""
    V3 = V.reshape(V.shape[0], -1, V.shape[-1])
    if V3.stride(-1) != 1 or V3.stride(1) > MAX_ROW_STRIDE:
        V3 = V3.contiguous()
    return V3


def attn_res_forward(V3: torch.Tensor, w_query: torch.Tensor, w_norm: torch.Tensor, eps: float, hw: hardware.Hardware):
    """``(h, score, rstd, lse)``: h ``(positions, hidden)`` in V's dtype, the fp32 statistics."""
    n_blocks, n_rows, n_cols = V3.shape
    h = torch.empty((n_rows, n_cols), dtype=V3.dtype, device=V3.device)
    score = torch.empty((n_rows, n_blocks), dtype=torch.float32, device=V3.device)
    rstd = torch.empty_like(score)
    lse = torch.empty(n_rows, dtype=torch.float32, device=V3.device)
    if n_rows == 0 or n_cols == 0:
        return h, score, rstd, lse
    p = plan_tiles("forward", n_rows, n_cols, n_blocks, V3.dtype, w_query.dtype, w_norm.dtype, hw, strides_of(V3[0], h))
    launch(
        _attn_res_forward_kernel,
        p.kernels[0],
        hw,
        V3,
        w_query,
        w_norm,
        h,
        score,
        rstd,
        lse,
        V3.stride(0),
        V3.stride(1),
        h.stride(0),
        n_blocks,
        n_rows,
        n_cols,
        p.n_blocks,
        p.n_chunks,
        eps,
        BLOCK_M=p.block_m,
        BLOCK_N=p.block_n,
        BLOCK_B=triton.next_power_of_2(n_blocks),
    )
    return h, score, rstd, lse


def attn_res_backward(dh2d, V3, w_query, w_norm, score, rstd, lse, hw: hardware.Hardware):
    """``(grad_V (N, positions, hidden), grad_w_query, grad_w_norm)``."""
    n_blocks, n_rows, n_cols = V3.shape
    dV = torch.empty((n_blocks, n_rows, n_cols), dtype=V3.dtype, device=V3.device)
    if n_rows == 0 or n_cols == 0:
        return dV, torch.zeros_like(w_query), torch.zeros_like(w_norm)
    p = plan_tiles(
        "backward", n_rows, n_cols, n_blocks, V3.dtype, w_query.dtype, w_norm.dtype, hw, strides_of(dh2d, V3[0], dV[0])
    )
    partial = torch.zeros((p.programs, n_cols), dtype=torch.float32, device=V3.device)
    launch(
        _attn_res_backward_kernel,
        p.kernels[0],
        hw,
        dh2d,
        V3,
        w_query,
        w_norm,
        score,
        rstd,
        lse,
        dV,
        partial,
        dh2d.stride(0),
        V3.stride(0),
        V3.stride(1),
        dV.stride(0),
        dV.stride(1),
        n_blocks,
        n_rows,
        n_cols,
        p.n_blocks,
        p.n_chunks,
        BLOCK_M=p.block_m,
        BLOCK_N=p.block_n,
        BLOCK_B=triton.next_power_of_2(n_blocks),
    )
    g = sum_partials(partial, torch.float32)
    return dV, (g * w_norm.float()).to(w_query.dtype), (g * w_query.float()).to(w_norm.dtype)


class AttnResKernels:
    """`liger_core.drivers.attn_res.AttnResKernels` on this module's kernels: the blocks and the
    incoming gradient also get row strides the int32 tile offsets can hold (`as_blocks`, `as_rows`)."""

    protocol = attn_res_driver.PROTOCOL

    @staticmethod
    def forward(V3, w_query, w_norm, eps):
        V3 = as_blocks(V3)
        h, score, rstd, lse = attn_res_forward(V3, w_query, w_norm, eps, hardware.current(V3.device))
        return h, (V3, score, rstd, lse)

    @staticmethod
    def backward(dh, w_query, w_norm, saved):
        V3, score, rstd, lse = saved
        return attn_res_backward(as_rows(dh), V3, w_query, w_norm, score, rstd, lse, hardware.current(V3.device))


LigerAttnResFunction = implements("attn_res")(attn_res_driver.autograd_function(AttnResKernels(), __name__))
