"""RMSNorm for NVIDIA GPUs: Triton kernels, launch plan and autograd Function.

Forward: each program normalises BLOCK_M rows (several short rows per tile, one wide row
per tile, or a wide row in CHUNK-wide pieces) and stores the fp32 reciprocal RMS for
backward. Backward: a grid of one program per SM walks its share of rows, writes grad_x
and accumulates grad_weight in fp32 registers; the per-SM partial rows are summed once
at the end (no atomics, deterministic).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from liger_core.ops.rms_norm import check_args
from liger_ops_cuda import hardware
from liger_ops_cuda._partials import backward_programs, sum_partials

# casting_mode -> whether x_hat is rounded to x.dtype before the weight multiply
# ("llama" and "none" round; "gemma" stays in fp32 throughout).
_ROUND_X_HAT = {"llama": True, "none": True, "gemma": False}


@triton.jit
def _rms_norm_forward_kernel(
    X,
    W,
    Y,
    RSTD,
    x_row_stride,
    y_row_stride,
    n_rows,
    n_cols,
    eps,
    offset,
    HAS_WEIGHT: tl.constexpr,
    ROUND_X_HAT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CHUNKED: tl.constexpr,
    UNMASKED: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    x_base = X + rows.to(tl.int64)[:, None] * x_row_stride
    y_base = Y + rows.to(tl.int64)[:, None] * y_row_stride
    cols = tl.arange(0, BLOCK_N)

    if CHUNKED:
        sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            m = row_mask[:, None] & (c < n_cols)[None, :]
            x = tl.load(x_base + c[None, :], mask=m, other=0.0).to(tl.float32)
            sum_sq += tl.sum(x * x, axis=1)
        rstd = tl.math.rsqrt(sum_sq / n_cols + eps)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_mask = c < n_cols
            m = row_mask[:, None] & col_mask[None, :]
            x = tl.load(x_base + c[None, :], mask=m, other=0.0)
            x_hat = x.to(tl.float32) * rstd[:, None]
            if ROUND_X_HAT:
                x_hat = x_hat.to(x.dtype).to(tl.float32)
            if HAS_WEIGHT:
                w = tl.load(W + c, mask=col_mask, other=0.0).to(tl.float32)
                x_hat = x_hat * (w + offset)[None, :]
            tl.store(y_base + c[None, :], x_hat.to(Y.dtype.element_ty), mask=m)
    elif UNMASKED:
        # Tiles exactly cover the rows (hidden a power of two, rows a multiple of BLOCK_M):
        # no predicates, and x is streamed (evict_first) so it does not push y out of L2.
        x = tl.load(x_base + cols[None, :], eviction_policy="evict_first")
        xf = x.to(tl.float32)
        rstd = tl.math.rsqrt(tl.sum(xf * xf, axis=1) / n_cols + eps)
        x_hat = xf * rstd[:, None]
        if ROUND_X_HAT:
            x_hat = x_hat.to(x.dtype).to(tl.float32)
        if HAS_WEIGHT:
            w = tl.load(W + cols).to(tl.float32)
            x_hat = x_hat * (w + offset)[None, :]
        tl.store(y_base + cols[None, :], x_hat.to(Y.dtype.element_ty))
    else:
        col_mask = cols < n_cols
        m = row_mask[:, None] & col_mask[None, :]
        x = tl.load(x_base + cols[None, :], mask=m, other=0.0, eviction_policy="evict_first")
        xf = x.to(tl.float32)
        rstd = tl.math.rsqrt(tl.sum(xf * xf, axis=1) / n_cols + eps)
        x_hat = xf * rstd[:, None]
        if ROUND_X_HAT:
            x_hat = x_hat.to(x.dtype).to(tl.float32)
        if HAS_WEIGHT:
            w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
            x_hat = x_hat * (w + offset)[None, :]
        tl.store(y_base + cols[None, :], x_hat.to(Y.dtype.element_ty), mask=m)
    tl.store(RSTD + rows, rstd, mask=row_mask)


@triton.jit
def _rms_norm_backward_kernel(
    DY,
    X,
    W,
    RSTD,
    DX,
    DW_PARTIAL,
    dy_row_stride,
    x_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    offset,
    rows_per_program,
    HAS_WEIGHT: tl.constexpr,
    ROUND_X_HAT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CHUNKED: tl.constexpr,
):
    pid = tl.program_id(0)
    row_start = pid * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    cols = tl.arange(0, BLOCK_N)
    dw_base = DW_PARTIAL + pid.to(tl.int64) * n_cols

    if CHUNKED:
        # Wide rows, one row at a time (BLOCK_M == 1): a pass for the row's dot product
        # sum(g * x_hat), a pass that writes grad_x and accumulates grad_weight in DW_PARTIAL.
        for i in range(0, row_end - row_start):
            row = row_start + i
            r64 = row.to(tl.int64)
            rstd = tl.load(RSTD + row)
            dot = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                cm = c < n_cols
                x = tl.load(X + r64 * x_row_stride + c, mask=cm, other=0.0).to(tl.float32)
                g = tl.load(DY + r64 * dy_row_stride + c, mask=cm, other=0.0).to(tl.float32)
                if HAS_WEIGHT:
                    g = g * (tl.load(W + c, mask=cm, other=0.0).to(tl.float32) + offset)
                dot += g * x
            mean_gx = tl.sum(dot, axis=0) * rstd / n_cols
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                cm = c < n_cols
                x = tl.load(X + r64 * x_row_stride + c, mask=cm, other=0.0)
                dy = tl.load(DY + r64 * dy_row_stride + c, mask=cm, other=0.0).to(tl.float32)
                x_hat = x.to(tl.float32) * rstd
                g = dy
                if HAS_WEIGHT:
                    g = dy * (tl.load(W + c, mask=cm, other=0.0).to(tl.float32) + offset)
                dx = rstd * (g - x_hat * mean_gx)
                tl.store(DX + r64 * dx_row_stride + c, dx.to(DX.dtype.element_ty), mask=cm)
                if HAS_WEIGHT:
                    if ROUND_X_HAT:
                        x_hat = x_hat.to(x.dtype).to(tl.float32)
                    acc = tl.load(dw_base + c, mask=cm, other=0.0)
                    tl.store(dw_base + c, acc + dy * x_hat, mask=cm)
    else:
        col_mask = cols < n_cols
        if HAS_WEIGHT:
            w_eff = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32) + offset
        dw_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for block_start in range(row_start, row_end, BLOCK_M):
            rows = block_start + tl.arange(0, BLOCK_M)
            row_mask = rows < row_end
            r64 = rows.to(tl.int64)
            m = row_mask[:, None] & col_mask[None, :]
            x = tl.load(X + r64[:, None] * x_row_stride + cols[None, :], mask=m, other=0.0)
            dy = tl.load(DY + r64[:, None] * dy_row_stride + cols[None, :], mask=m, other=0.0).to(tl.float32)
            rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
            x_hat = x.to(tl.float32) * rstd[:, None]
            g = dy
            if HAS_WEIGHT:
                g = dy * w_eff[None, :]
            mean_gx = tl.sum(g * x_hat, axis=1) / n_cols
            dx = rstd[:, None] * (g - x_hat * mean_gx[:, None])
            tl.store(DX + r64[:, None] * dx_row_stride + cols[None, :], dx.to(DX.dtype.element_ty), mask=m)
            if HAS_WEIGHT:
                if ROUND_X_HAT:
                    x_hat = x_hat.to(x.dtype).to(tl.float32)
                dw_acc += tl.sum(dy * x_hat, axis=0)
        if HAS_WEIGHT:
            tl.store(dw_base + cols, dw_acc, mask=col_mask)


@dataclass(frozen=True)
class TilePlan:
    block_m: int
    block_n: int
    chunked: bool
    num_warps: int


@functools.lru_cache(maxsize=256)
def _plan(n_cols: int, tile_elements: int, per_warp: int, max_fused_block: int, chunk_block: int) -> TilePlan:
    block_n = triton.next_power_of_2(max(n_cols, 1))
    if block_n > max_fused_block:
        chunk = min(chunk_block, max_fused_block)
        return TilePlan(1, chunk, True, hardware.num_warps_for(chunk, per_warp))
    block_m = max(1, min(tile_elements // block_n, 64))
    return TilePlan(block_m, block_n, False, hardware.num_warps_for(block_m * block_n, per_warp))


def plan_tiles(n_cols: int, backward: bool = False) -> TilePlan:
    """Tile shape for rows of ``n_cols``: whole rows (several when short) or chunks when wide."""
    if backward:
        tile, per_warp = hardware.BACKWARD_TILE_ELEMENTS, hardware.BACKWARD_ELEMENTS_PER_WARP
    else:
        tile, per_warp = hardware.FORWARD_TILE_ELEMENTS, hardware.FORWARD_ELEMENTS_PER_WARP
    return _plan(n_cols, tile, per_warp, hardware.MAX_FUSED_BLOCK, hardware.CHUNK_BLOCK)


def rms_norm_forward(x2d, weight, eps, offset, casting_mode, plan):
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    if n_rows == 0:
        return y, rstd
    grid = (triton.cdiv(n_rows, plan.block_m),)
    _rms_norm_forward_kernel[grid](
        x2d,
        weight if weight is not None else x2d,
        y,
        rstd,
        x2d.stride(0),
        y.stride(0),
        n_rows,
        n_cols,
        eps,
        offset,
        HAS_WEIGHT=weight is not None,
        ROUND_X_HAT=_ROUND_X_HAT[casting_mode],
        BLOCK_M=plan.block_m,
        BLOCK_N=plan.block_n,
        CHUNKED=plan.chunked,
        UNMASKED=not plan.chunked and n_cols == plan.block_n and n_rows % plan.block_m == 0,
        num_warps=plan.num_warps,
    )
    return y, rstd


def rms_norm_backward(dy2d, x2d, weight, rstd, offset, casting_mode, in_place, plan, programs=None):
    n_rows, n_cols = x2d.shape
    dx = dy2d if in_place else torch.empty_like(x2d)
    has_weight = weight is not None
    programs, rows_per_program = backward_programs(n_rows, plan.block_m, x2d.device, programs)
    # fp32 partial grad_weight rows, one per program; chunked plans accumulate in place.
    alloc = torch.zeros if plan.chunked else torch.empty
    dw_partial = alloc((programs, n_cols), dtype=torch.float32, device=x2d.device) if has_weight else None
    if n_rows > 0:
        _rms_norm_backward_kernel[(programs,)](
            dy2d,
            x2d,
            weight if has_weight else x2d,
            rstd,
            dx,
            dw_partial if has_weight else rstd,
            dy2d.stride(0),
            x2d.stride(0),
            dx.stride(0),
            n_rows,
            n_cols,
            offset,
            rows_per_program,
            HAS_WEIGHT=has_weight,
            ROUND_X_HAT=_ROUND_X_HAT[casting_mode],
            BLOCK_M=plan.block_m,
            BLOCK_N=plan.block_n,
            CHUNKED=plan.chunked,
            num_warps=plan.num_warps,
        )
    dw = None
    if has_weight:
        dw = torch.empty_like(weight)
        sum_partials(dw_partial, programs if n_rows else 0, dw, None, n_cols)
    return dx, dw


class LigerRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, offset, casting_mode, in_place):
        check_args(x, weight, eps, offset, casting_mode)
        shape = x.shape
        x2d = x.reshape(math.prod(shape[:-1]), shape[-1])  # explicit rows: hidden may be 0
        if x2d.stride(-1) != 1:
            x2d = x2d.contiguous()
        y, rstd = rms_norm_forward(x2d, weight, eps, offset, casting_mode, plan_tiles(shape[-1]))
        ctx.save_for_backward(x2d, weight, rstd)
        ctx.offset, ctx.casting_mode, ctx.in_place = offset, casting_mode, in_place
        return y.view(shape)

    @staticmethod
    def backward(ctx, dy):
        x2d, weight, rstd = ctx.saved_tensors
        dy2d = dy.reshape(x2d.shape)
        # In place needs a dense buffer of its own rows: a gradient broadcast over rows
        # (stride 0) would alias, so it is copied first.
        if dy2d.stride(-1) != 1 or (ctx.in_place and not dy2d.is_contiguous()):
            dy2d = dy2d.contiguous()
        plan = plan_tiles(x2d.shape[1], backward=True)
        dx, dw = rms_norm_backward(dy2d, x2d, weight, rstd, ctx.offset, ctx.casting_mode, ctx.in_place, plan)
        return dx.view(dy.shape), dw, None, None, None, None


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> torch.Tensor:
    # Arguments are checked inside the Function, so calling it directly is just as safe.
    return LigerRMSNormFunction.apply(x, weight, eps, offset, casting_mode, in_place)
