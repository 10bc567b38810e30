"""Attention Residuals for Intel GPUs: Triton kernels, launch plan and the kernel
adapter of `liger_core.drivers.attn_res`.

Per position (a row of each of the N blocks), in fp32: ``score_i = sum(v_i * u) * rstd_i`` with
``u = w_query * w_norm`` and ``rstd_i = rsqrt(mean(v_i^2) + eps)``, ``alpha = softmax(score)``
over the blocks, ``h = sum_i alpha_i v_i``. A program owns BLOCK_M positions; the N scores
of each live in a (BLOCK_M, BLOCK_B) register tile (BLOCK_B: N to a power of two), so the row
is only ever walked in BLOCK_N-wide column chunks, whatever its width.

Forward: pass 1 reads every block's rows for the two sums (squares, dot with u); pass 2 reads
them again for the weighted sum. score, rstd (per position and block) and the logsumexp of the
scores (per position) are kept for backward.

Backward, per position: ``d_alpha_i = sum(dh * v_i)`` (pass 1), ``d_score_i = alpha_i *
(d_alpha_i - sum_j alpha_j d_alpha_j)``; pass 2 writes ``dv_i = alpha_i dh + d_score_i *
(rstd_i u - score_i rstd_i^2 / hidden * v_i)`` and accumulates ``g = sum d_score_i rstd_i v_i``
per column into the program's fp32 partial row (a persistent grid: each program walks a run of
position tiles),
from which ``grad_w_query = g * w_norm`` and ``grad_w_norm = g * w_query``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import attn_res as attn_res_driver

from liger_ops_xpu import hardware
from liger_ops_xpu._jit import add_to_partial, row_group, row_tile
from liger_ops_xpu._tiling import num_warps_for, persistent_grid, static_trips


@triton.jit
def _block_lane(tile, lanes, i):
    """Column ``i`` of a (BLOCK_M, BLOCK_B) per-block register tile, as a (BLOCK_M,) vector."""
    return tl.sum(tl.where(lanes[None, :] == i, tile, 0.0), axis=1)


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
    n_chunks,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_B: tl.constexpr,
    STATIC_BLOCKS: tl.constexpr,
    STATIC_CHUNKS: tl.constexpr,
):
    rows, row_mask, rows64 = row_tile(tl.program_id(0) * BLOCK_M, n_rows, BLOCK_M)
    lanes = tl.arange(0, BLOCK_B)
    block_mask = lanes < n_blocks
    scores = tl.zeros((BLOCK_M, BLOCK_B), dtype=tl.float32)
    rstds = tl.zeros((BLOCK_M, BLOCK_B), dtype=tl.float32)
    # Pass 1: per block, the sum of squares and the dot with u, chunk by chunk.
    # Block i's rows start at V + i * v_block_stride: a pointer advanced per block (64-bit, where
    # i * stride could pass int32).
    block = V
    for i in range(STATIC_BLOCKS if STATIC_BLOCKS > 0 else n_blocks):
        sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
        dot = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for c in range(STATIC_CHUNKS if STATIC_CHUNKS > 0 else n_chunks):
            cols = c * BLOCK_N + tl.arange(0, BLOCK_N)
            col_mask = cols < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            v = tl.load(block + rows64[:, None] * v_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            u = tl.load(W_QUERY + cols, mask=col_mask, other=0.0).to(tl.float32)
            u *= tl.load(W_NORM + cols, mask=col_mask, other=0.0).to(tl.float32)
            sum_sq += tl.sum(v * v, axis=1)
            dot += tl.sum(v * u[None, :], axis=1)
        block += v_block_stride
        rstd = 1.0 / tl.sqrt(sum_sq / n_cols + eps)
        scores = tl.where(lanes[None, :] == i, (dot * rstd)[:, None], scores)
        rstds = tl.where(lanes[None, :] == i, rstd[:, None], rstds)
    # Softmax over the blocks (lanes past N are -inf: weight 0).
    scores_m = tl.where(block_mask[None, :], scores, float("-inf"))
    score_max = tl.max(scores_m, axis=1)
    exps = tl.exp(scores_m - score_max[:, None])
    exp_sum = tl.sum(exps, axis=1)
    alphas = exps / exp_sum[:, None]
    stats = rows64[:, None] * n_blocks + lanes[None, :]
    stats_mask = row_mask[:, None] & block_mask[None, :]
    tl.store(SCORE + stats, scores, mask=stats_mask)
    tl.store(RSTD + stats, rstds, mask=stats_mask)
    tl.store(LSE + rows, score_max + tl.log(exp_sum), mask=row_mask)
    # Pass 2: the weighted sum of the blocks, chunk by chunk.
    for c in range(STATIC_CHUNKS if STATIC_CHUNKS > 0 else n_chunks):
        cols = c * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = row_mask[:, None] & (cols < n_cols)[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        v_ptrs = V + rows64[:, None] * v_row_stride + cols[None, :]
        for i in range(STATIC_BLOCKS if STATIC_BLOCKS > 0 else n_blocks):
            v = tl.load(v_ptrs, mask=mask, other=0.0)
            acc += _block_lane(alphas, lanes, i)[:, None] * v.to(tl.float32)
            v_ptrs += v_block_stride
        tl.store(H + rows64[:, None] * h_row_stride + cols[None, :], acc.to(H.dtype.element_ty), mask=mask)


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
    n_chunks,
    tiles_per_program,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_B: tl.constexpr,
    STATIC_TILES: tl.constexpr,
    STATIC_BLOCKS: tl.constexpr,
    STATIC_CHUNKS: tl.constexpr,
):
    # PARTIAL: one fp32 row per program, g = sum over its positions and blocks of d_score rstd v.
    pid, first_row = row_group(tiles_per_program, BLOCK_M)
    lanes = tl.arange(0, BLOCK_B)
    block_mask = lanes < n_blocks
    partial = PARTIAL + pid.to(tl.int64) * n_cols
    for t in range(STATIC_TILES if STATIC_TILES > 0 else tiles_per_program):
        rows, row_mask, rows64 = row_tile(first_row + t * BLOCK_M, n_rows, BLOCK_M)
        stats = rows64[:, None] * n_blocks + lanes[None, :]
        stats_mask = row_mask[:, None] & block_mask[None, :]
        lse = tl.load(LSE + rows, mask=row_mask, other=0.0)
        scores = tl.load(SCORE + stats, mask=stats_mask, other=0.0)
        alphas = tl.where(stats_mask, tl.exp(scores - lse[:, None]), 0.0)
        rstds = tl.load(RSTD + stats, mask=stats_mask, other=0.0)
        # Pass 1: d_alpha_i = sum(dh * v_i), chunk-outer so dh is read once.
        d_alphas = tl.zeros((BLOCK_M, BLOCK_B), dtype=tl.float32)
        for c in range(STATIC_CHUNKS if STATIC_CHUNKS > 0 else n_chunks):
            cols = c * BLOCK_N + tl.arange(0, BLOCK_N)
            mask = row_mask[:, None] & (cols < n_cols)[None, :]
            dh = tl.load(DH + rows64[:, None] * dh_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            v_ptrs = V + rows64[:, None] * v_row_stride + cols[None, :]
            for i in range(STATIC_BLOCKS if STATIC_BLOCKS > 0 else n_blocks):
                v = tl.load(v_ptrs, mask=mask, other=0.0)
                d_alpha = tl.sum(dh * v.to(tl.float32), axis=1)
                d_alphas = tl.where(lanes[None, :] == i, d_alphas + d_alpha[:, None], d_alphas)
                v_ptrs += v_block_stride
        # Softmax backward.
        d_scores = alphas * (d_alphas - tl.sum(alphas * d_alphas, axis=1)[:, None])
        # Pass 2: dv_i, and g into this program's partial row.
        for c in range(STATIC_CHUNKS if STATIC_CHUNKS > 0 else n_chunks):
            cols = c * BLOCK_N + tl.arange(0, BLOCK_N)
            col_mask = cols < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            dh = tl.load(DH + rows64[:, None] * dh_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            u = tl.load(W_QUERY + cols, mask=col_mask, other=0.0).to(tl.float32)
            u *= tl.load(W_NORM + cols, mask=col_mask, other=0.0).to(tl.float32)
            g = tl.zeros((BLOCK_N,), dtype=tl.float32)
            v_ptrs = V + rows64[:, None] * v_row_stride + cols[None, :]
            dv_ptrs = DV + rows64[:, None] * dv_row_stride + cols[None, :]
            for i in range(STATIC_BLOCKS if STATIC_BLOCKS > 0 else n_blocks):
                alpha = _block_lane(alphas, lanes, i)
                d_score = _block_lane(d_scores, lanes, i)
                rstd = _block_lane(rstds, lanes, i)
                score = _block_lane(scores, lanes, i)
                v = tl.load(v_ptrs, mask=mask, other=0.0).to(tl.float32)
                # d score_i / d v_i = rstd u - (score rstd^2 / hidden) v  (RMSNorm's Jacobian on u).
                dv = alpha[:, None] * dh + (d_score * rstd)[:, None] * u[None, :]
                dv -= (d_score * score * rstd * rstd / n_cols)[:, None] * v
                tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=mask)
                g += tl.sum((d_score * rstd)[:, None] * v, axis=0)
                v_ptrs += v_block_stride
                dv_ptrs += dv_block_stride
            add_to_partial(partial, cols, n_cols, g)


def plan_attn_res(n_cols: int, n_blocks: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_B, num_warps): positions per tile, column chunk, the register
    width of the per-block scores."""
    block_n = min(triton.next_power_of_2(max(n_cols, 1)), hardware.ATTN_RES_BLOCK_N)
    block_m = max(1, min(hardware.ATTN_RES_TILE_ELEMENTS // block_n, 64))
    block_b = triton.next_power_of_2(max(n_blocks, 1))
    return block_m, block_n, block_b, num_warps_for(block_m * block_n)


def attn_res_forward(V3: torch.Tensor, w_query: torch.Tensor, w_norm: torch.Tensor, eps: float):
    """``(h, score, rstd, lse)``: h ``(positions, hidden)`` in V's dtype, the fp32 statistics."""
    n_blocks, n_rows, n_cols = V3.shape
    h = torch.empty((n_rows, n_cols), dtype=V3.dtype, device=V3.device)
    score = torch.empty((n_rows, n_blocks), dtype=torch.float32, device=V3.device)
    rstd = torch.empty_like(score)
    lse = torch.empty(n_rows, dtype=torch.float32, device=V3.device)
    if n_rows == 0 or n_cols == 0:
        return h, score, rstd, lse
    block_m, block_n, block_b, warps = plan_attn_res(n_cols, n_blocks)
    n_chunks = triton.cdiv(n_cols, block_n)
    _attn_res_forward_kernel[(triton.cdiv(n_rows, block_m),)](
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
        n_chunks,
        eps,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_B=block_b,
        STATIC_BLOCKS=static_trips(_attn_res_forward_kernel, n_blocks),
        STATIC_CHUNKS=static_trips(_attn_res_forward_kernel, n_chunks),
        **hardware.launch_kwargs(_attn_res_forward_kernel, V3.device, warps),
    )
    return h, score, rstd, lse


def attn_res_backward(dh2d, V3, w_query, w_norm, score, rstd, lse):
    """``(grad_V (N, positions, hidden), grad_w_query, grad_w_norm)``."""
    n_blocks, n_rows, n_cols = V3.shape
    dV = torch.empty((n_blocks, n_rows, n_cols), dtype=V3.dtype, device=V3.device)
    if n_rows == 0 or n_cols == 0:
        return dV, torch.zeros_like(w_query), torch.zeros_like(w_norm)
    block_m, block_n, block_b, warps = plan_attn_res(n_cols, n_blocks)
    n_chunks = triton.cdiv(n_cols, block_n)
    programs, tiles_per_program = persistent_grid(triton.cdiv(n_rows, block_m), warps, V3.device)
    partial = torch.zeros((programs, n_cols), dtype=torch.float32, device=V3.device)
    _attn_res_backward_kernel[(programs,)](
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
        n_chunks,
        tiles_per_program,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_B=block_b,
        STATIC_TILES=static_trips(_attn_res_backward_kernel, tiles_per_program),
        STATIC_BLOCKS=static_trips(_attn_res_backward_kernel, n_blocks),
        STATIC_CHUNKS=static_trips(_attn_res_backward_kernel, n_chunks),
        **hardware.launch_kwargs(_attn_res_backward_kernel, V3.device, warps),
    )
    g = partial.sum(0)
    return dV, (g * w_norm.float()).to(w_query.dtype), (g * w_query.float()).to(w_norm.dtype)


class AttnResKernels:
    """`liger_core.drivers.attn_res.AttnResKernels` on this module's kernels."""

    protocol = attn_res_driver.PROTOCOL

    @staticmethod
    def forward(V3, w_query, w_norm, eps):
        h, score, rstd, lse = attn_res_forward(V3, w_query, w_norm, eps)
        return h, (V3, score, rstd, lse)

    @staticmethod
    def backward(dh, w_query, w_norm, saved):
        V3, score, rstd, lse = saved
        return attn_res_backward(dh, V3, w_query, w_norm, score, rstd, lse)


LigerAttnResFunction = implements("attn_res")(attn_res_driver.autograd_function(AttnResKernels(), __name__))
