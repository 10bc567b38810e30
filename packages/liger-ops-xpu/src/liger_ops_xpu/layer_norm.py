"""LayerNorm for Intel GPUs: Triton kernels, launch plans and the kernel adapter of
`liger_core.drivers.layer_norm`.

Same shape of work as RMSNorm (see rms_norm.py): the forward tiles BLOCK_M rows (whole rows
in one read, or wide rows in N_CHUNKS chunks) and stores each row's fp32 mean and reciprocal
standard deviation; the backward is a persistent grid sized by the EU count whose programs
keep fp32 partial rows of grad_weight and grad_bias, summed once at the end (no atomics).

Variance: whole rows are centred in registers before squaring (exact two-pass). Chunked rows
accumulate sums shifted by the mean of their first chunk, which removes the cancellation of a
one-pass E[x^2] - E[x]^2 when the mean is large against the spread.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import layer_norm as layer_norm_driver

from liger_ops_xpu._jit import add_to_partial, col_tile, row_group, row_tile
from liger_ops_xpu._tiling import (
    TilePlan,
    backward_grid,
    launch_row_tiles,
    partial_rows,
    plan_tiles,
    static_trips,
    sum_partials,
    zeros_or_none,
)


@triton.jit
def _affine(x_hat, W, B, c, n_cols, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    y = x_hat
    if HAS_WEIGHT:
        y = y * tl.load(W + c, mask=c < n_cols, other=0.0).to(tl.float32)[None, :]
    if HAS_BIAS:
        y = y + tl.load(B + c, mask=c < n_cols, other=0.0).to(tl.float32)[None, :]
    return y


@triton.jit
def _layer_norm_forward_kernel(
    X,
    W,
    B,
    Y,
    MEAN,
    RSTD,
    x_row_stride,
    y_row_stride,
    n_rows,
    n_cols,
    eps,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    N_CHUNKS: tl.constexpr,
):
    pid = tl.program_id(0)
    rows, row_mask, rows64 = row_tile(pid * BLOCK_M, n_rows, BLOCK_M)
    x_base = X + rows64[:, None] * x_row_stride
    y_base = Y + rows64[:, None] * y_row_stride

    if N_CHUNKS == 1:
        cols, mask = col_tile(0, n_cols, row_mask, BLOCK_N)
        xf = tl.load(x_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(xf, axis=1) / n_cols
        xc = tl.where(mask, xf - mean[:, None], 0.0)
        rstd = tl.math.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
        y = _affine(xc * rstd[:, None], W, B, cols, n_cols, HAS_WEIGHT, HAS_BIAS)
        tl.store(y_base + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    else:
        # Shift: the mean of the first chunk (always full: n_cols > BLOCK_N here).
        c, mask = col_tile(0, n_cols, row_mask, BLOCK_N)
        shift = tl.sum(tl.load(x_base + c[None, :], mask=mask, other=0.0).to(tl.float32), axis=1) / BLOCK_N
        s1 = tl.zeros((BLOCK_M,), dtype=tl.float32)
        s2 = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for chunk in range(N_CHUNKS):
            c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
            xf = tl.load(x_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
            d = tl.where(mask, xf - shift[:, None], 0.0)
            s1 += tl.sum(d, axis=1)
            s2 += tl.sum(d * d, axis=1)
        d_mean = s1 / n_cols
        mean = shift + d_mean
        rstd = tl.math.rsqrt(tl.maximum(s2 / n_cols - d_mean * d_mean, 0.0) + eps)
        for chunk in range(N_CHUNKS):
            c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
            xf = tl.load(x_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
            y = _affine((xf - mean[:, None]) * rstd[:, None], W, B, c, n_cols, HAS_WEIGHT, HAS_BIAS)
            tl.store(y_base + c[None, :], y.to(Y.dtype.element_ty), mask=mask)
    tl.store(MEAN + rows, mean, mask=row_mask)
    tl.store(RSTD + rows, rstd, mask=row_mask)


@triton.jit
def _layer_norm_backward_kernel(
    DY,
    X,
    W,
    MEAN,
    RSTD,
    DX,
    DW_PARTIAL,
    DB_PARTIAL,
    dy_row_stride,
    x_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    tiles_per_program,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    N_CHUNKS: tl.constexpr,
    STATIC_TILES: tl.constexpr,
):
    # grad_x = rstd * (g - mean(g) - x_hat * mean(g * x_hat)), g = dy * w;
    # grad_w = sum over rows of dy * x_hat; grad_b = sum over rows of dy.
    pid, first_row = row_group(tiles_per_program, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dw_base = DW_PARTIAL + pid.to(tl.int64) * n_cols
    db_base = DB_PARTIAL + pid.to(tl.int64) * n_cols

    if N_CHUNKS == 1:
        col_mask = cols < n_cols
        if HAS_WEIGHT:
            w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
        dw_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        db_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for t in range(STATIC_TILES if STATIC_TILES > 0 else tiles_per_program):
            rows, row_mask, rows64 = row_tile(first_row + t * BLOCK_M, n_rows, BLOCK_M)
            mask = row_mask[:, None] & col_mask[None, :]
            xf = tl.load(X + rows64[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(DY + rows64[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)
            rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
            x_hat = tl.where(mask, (xf - mean[:, None]) * rstd[:, None], 0.0)
            g = dy
            if HAS_WEIGHT:
                g = dy * w[None, :]
            mean_g = tl.sum(g, axis=1) / n_cols
            mean_gx = tl.sum(g * x_hat, axis=1) / n_cols
            dx = rstd[:, None] * (g - mean_g[:, None] - x_hat * mean_gx[:, None])
            tl.store(DX + rows64[:, None] * dx_row_stride + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
            if HAS_WEIGHT:
                dw_acc += tl.sum(dy * x_hat, axis=0)
            if HAS_BIAS:
                db_acc += tl.sum(dy, axis=0)
        if HAS_WEIGHT:
            tl.store(dw_base + cols, dw_acc, mask=col_mask)
        if HAS_BIAS:
            tl.store(db_base + cols, db_acc, mask=col_mask)
    else:
        # Wide rows: pass 1 gives each row's sum(g) and sum(g * x_hat); pass 2 writes grad_x and
        # adds to this program's partial rows (only this program touches them).
        for t in range(STATIC_TILES if STATIC_TILES > 0 else tiles_per_program):
            rows, row_mask, rows64 = row_tile(first_row + t * BLOCK_M, n_rows, BLOCK_M)
            x_base = X + rows64[:, None] * x_row_stride
            dy_base = DY + rows64[:, None] * dy_row_stride
            mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)
            rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
            sum_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            sum_gx = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for chunk in range(N_CHUNKS):
                c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
                xf = tl.load(x_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
                g = tl.load(dy_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
                if HAS_WEIGHT:
                    g = g * tl.load(W + c, mask=c < n_cols, other=0.0).to(tl.float32)[None, :]
                x_hat = tl.where(mask, (xf - mean[:, None]) * rstd[:, None], 0.0)
                sum_g += g
                sum_gx += g * x_hat
            mean_g = tl.sum(sum_g, axis=1) / n_cols
            mean_gx = tl.sum(sum_gx, axis=1) / n_cols
            for chunk in range(N_CHUNKS):
                c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
                xf = tl.load(x_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
                g = dy
                if HAS_WEIGHT:
                    g = dy * tl.load(W + c, mask=c < n_cols, other=0.0).to(tl.float32)[None, :]
                x_hat = tl.where(mask, (xf - mean[:, None]) * rstd[:, None], 0.0)
                dx = rstd[:, None] * (g - mean_g[:, None] - x_hat * mean_gx[:, None])
                tl.store(DX + rows64[:, None] * dx_row_stride + c[None, :], dx.to(DX.dtype.element_ty), mask=mask)
                if HAS_WEIGHT:
                    add_to_partial(dw_base, c, n_cols, tl.sum(dy * x_hat, axis=0))
                if HAS_BIAS:
                    add_to_partial(db_base, c, n_cols, tl.sum(dy, axis=0))


def layer_norm_forward(x2d, weight, bias, eps: float, plan: TilePlan):
    """Launch the forward kernel; returns ``(y, mean, rstd)``."""
    n_rows, n_cols = x2d.shape
    y = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    mean = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    if x2d.numel() == 0:
        return y, mean, rstd
    launch_row_tiles(
        _layer_norm_forward_kernel,
        plan.tiles(n_rows),
        plan,
        x2d.device,
        x2d,
        weight if weight is not None else x2d,  # never read without HAS_WEIGHT
        bias if bias is not None else x2d,  # never read without HAS_BIAS
        y,
        mean,
        rstd,
        x2d.stride(0),
        y.stride(0),
        n_rows,
        n_cols,
        eps,
        HAS_WEIGHT=weight is not None,
        HAS_BIAS=bias is not None,
    )
    return y, mean, rstd


def layer_norm_backward(dy2d, x2d, weight, bias, mean, rstd, dx, plan: TilePlan):
    """Launch the backward kernel: grad_x into ``dx``; returns ``(grad_weight, grad_bias)``."""
    n_rows, n_cols = x2d.shape
    has_weight, has_bias = weight is not None, bias is not None
    if x2d.numel() == 0:
        return zeros_or_none(weight), zeros_or_none(bias)
    programs, tiles_per_program = backward_grid(n_rows, plan, x2d.device)
    # One fp32 partial row per program and parameter (mean stands in for an absent one: never written).
    partial = lambda on: partial_rows(programs, n_cols, plan, x2d.device) if on else mean
    dw_partial, db_partial = partial(has_weight), partial(has_bias)
    launch_row_tiles(
        _layer_norm_backward_kernel,
        programs,
        plan,
        x2d.device,
        dy2d,
        x2d,
        weight if has_weight else x2d,
        mean,
        rstd,
        dx,
        dw_partial,
        db_partial,
        dy2d.stride(0),
        x2d.stride(0),
        dx.stride(0),
        n_rows,
        n_cols,
        tiles_per_program,
        HAS_WEIGHT=has_weight,
        HAS_BIAS=has_bias,
        STATIC_TILES=static_trips(_layer_norm_backward_kernel, tiles_per_program),
    )
    return sum_partials(dw_partial, weight), sum_partials(db_partial, bias)


class LayerNormKernels:
    """`liger_core.drivers.layer_norm.LayerNormKernels` on this module's kernels; the forward's
    tile plan is the backward's ``state``."""

    protocol = layer_norm_driver.PROTOCOL

    @staticmethod
    def forward(x2d, weight, bias, eps):
        plan = plan_tiles(x2d.shape[1], x2d.device)
        y, mean, rstd = layer_norm_forward(x2d, weight, bias, eps, plan)
        return y, mean, rstd, plan

    @staticmethod
    def backward(dy2d, x2d, weight, bias, mean, rstd, dx, need_dw, need_db, state):
        return layer_norm_backward(dy2d, x2d, weight, bias, mean, rstd, dx, state)


LigerLayerNormFunction = implements("layer_norm")(layer_norm_driver.autograd_function(LayerNormKernels(), __name__))
