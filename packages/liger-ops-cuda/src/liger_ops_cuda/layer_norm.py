"""LayerNorm for NVIDIA GPUs: Triton kernels, launch plans and the kernel adapter of
`liger_core.drivers.layer_norm`.

Forward: each program normalises BLOCK_M rows held in registers (one read of x; the
variance is taken of the centred tile, exact two-pass in registers) or, for rows wider than
one tile, a row in CHUNK pieces with sums shifted by the mean of its first chunk (no
E[x^2] - E[x]^2 cancellation when the mean is large). The fp32 mean and rstd are kept for
backward. Backward: one program per SM walks its rows, writes grad_x and keeps fp32
grad_weight / grad_bias rows in registers; the per-program rows are summed in one launch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import layer_norm as layer_norm_driver
from liger_ops_cuda import hardware
from liger_ops_cuda._jit import row_group, row_tile
from liger_ops_cuda._tiling import (
    TilePlan,
    backward_programs,
    plan_backward_tiles,
    plan_tiles,
    sum_partials,
)


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
    CHUNKED: tl.constexpr,
):
    rows, row_mask, rows64 = row_tile(tl.program_id(0) * BLOCK_M, n_rows, BLOCK_M)
    x_rows = X + rows64 * x_row_stride
    y_rows = Y + rows64 * y_row_stride
    cols = tl.arange(0, BLOCK_N)

    if CHUNKED:
        # Shift by the mean of the row's first chunk (close to the row's mean, unlike a
        # single element that may be an outlier): the shifted sums then do not cancel.
        mask0 = row_mask[:, None] & (cols < n_cols)[None, :]
        x0 = tl.load(x_rows + cols[None, :], mask=mask0, other=0.0).to(tl.float32)
        shift = tl.sum(x0, axis=1) / tl.minimum(n_cols, BLOCK_N)
        s1 = tl.zeros((BLOCK_M,), dtype=tl.float32)
        s2 = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_mask[:, None] & (c < n_cols)[None, :]
            x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
            d = tl.where(mask, x - shift[:, None], 0.0)
            s1 += tl.sum(d, axis=1)
            s2 += tl.sum(d * d, axis=1)
        mean_d = s1 / n_cols
        mean = shift + mean_d
        rstd = tl.math.rsqrt(tl.maximum(s2 / n_cols - mean_d * mean_d, 0.0) + eps)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_mask = c < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
            y = (x - mean[:, None]) * rstd[:, None]
            if HAS_WEIGHT:
                y = y * tl.load(W + c, mask=col_mask, other=0.0).to(tl.float32)[None, :]
            if HAS_BIAS:
                y = y + tl.load(B + c, mask=col_mask, other=0.0).to(tl.float32)[None, :]
            tl.store(y_rows + c[None, :], y.to(Y.dtype.element_ty), mask=mask)
    else:
        col_mask = cols < n_cols
        mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        mean = tl.sum(x, axis=1) / n_cols
        xc = tl.where(mask, x - mean[:, None], 0.0)
        rstd = tl.math.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
        y = xc * rstd[:, None]
        if HAS_WEIGHT:
            y = y * tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
        if HAS_BIAS:
            y = y + tl.load(B + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
        tl.store(y_rows + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
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
    PARTIAL,
    dy_row_stride,
    x_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    rows_per_program,
    HAS_WEIGHT: tl.constexpr,
    NEED_PARTIAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CHUNKED: tl.constexpr,
):
    # grad_x = rstd * (g - mean(g) - x_hat * mean(g * x_hat)), g = dy * weight.
    # PARTIAL holds one fp32 row per program: [grad_weight (n_cols) | grad_bias (n_cols)].
    pid, row_start, row_end = row_group(rows_per_program, n_rows)
    cols = tl.arange(0, BLOCK_N)
    dw_row = PARTIAL + pid.to(tl.int64) * (2 * n_cols)
    db_row = dw_row + n_cols

    if CHUNKED:
        for i in range(0, row_end - row_start):
            row64 = (row_start + i).to(tl.int64)
            mean = tl.load(MEAN + row64)
            rstd = tl.load(RSTD + row64)
            acc_gx = tl.zeros((BLOCK_N,), dtype=tl.float32)
            acc_g = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                col_mask = c < n_cols
                x = tl.load(X + row64 * x_row_stride + c, mask=col_mask, other=0.0).to(tl.float32)
                g = tl.load(DY + row64 * dy_row_stride + c, mask=col_mask, other=0.0).to(tl.float32)
                if HAS_WEIGHT:
                    g = g * tl.load(W + c, mask=col_mask, other=0.0).to(tl.float32)
                acc_gx += g * tl.where(col_mask, (x - mean) * rstd, 0.0)
                acc_g += g
            c1 = tl.sum(acc_gx, axis=0) / n_cols
            c2 = tl.sum(acc_g, axis=0) / n_cols
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                col_mask = c < n_cols
                x = tl.load(X + row64 * x_row_stride + c, mask=col_mask, other=0.0).to(tl.float32)
                dy = tl.load(DY + row64 * dy_row_stride + c, mask=col_mask, other=0.0).to(tl.float32)
                x_hat = (x - mean) * rstd
                g = dy
                if HAS_WEIGHT:
                    g = dy * tl.load(W + c, mask=col_mask, other=0.0).to(tl.float32)
                dx = rstd * (g - c2 - x_hat * c1)
                tl.store(DX + row64 * dx_row_stride + c, dx.to(DX.dtype.element_ty), mask=col_mask)
                if NEED_PARTIAL:
                    tl.store(dw_row + c, tl.load(dw_row + c, mask=col_mask, other=0.0) + dy * x_hat, mask=col_mask)
                    tl.store(db_row + c, tl.load(db_row + c, mask=col_mask, other=0.0) + dy, mask=col_mask)
    else:
        col_mask = cols < n_cols
        if HAS_WEIGHT:
            w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
        dw_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        db_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for block_start in range(row_start, row_end, BLOCK_M):
            # Not row_tile: the int64 row column is formed after the mask here (the compiled code
            # this kernel was tuned with).
            rows = block_start + tl.arange(0, BLOCK_M)
            row_mask = rows < row_end
            rows64 = rows.to(tl.int64)
            mask = row_mask[:, None] & col_mask[None, :]
            x = tl.load(X + rows64[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(DY + rows64[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)
            rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
            x_hat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
            g = dy
            if HAS_WEIGHT:
                g = dy * w[None, :]
            c1 = tl.sum(g * x_hat, axis=1) / n_cols
            c2 = tl.sum(g, axis=1) / n_cols
            dx = rstd[:, None] * (g - c2[:, None] - x_hat * c1[:, None])
            tl.store(DX + rows64[:, None] * dx_row_stride + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
            if NEED_PARTIAL:
                dw_acc += tl.sum(dy * x_hat, axis=0)
                db_acc += tl.sum(dy, axis=0)
        if NEED_PARTIAL:
            tl.store(dw_row + cols, dw_acc, mask=col_mask)
            tl.store(db_row + cols, db_acc, mask=col_mask)


def layer_norm_forward(
    x2d: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, plan: TilePlan
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    mean = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    if n_rows == 0 or n_cols == 0:
        return y, mean, rstd
    plan.launch(
        _layer_norm_forward_kernel,
        plan.row_grid(n_rows),
        x2d,
        weight if weight is not None else x2d,
        bias if bias is not None else x2d,
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


def layer_norm_backward(
    dy2d: torch.Tensor,
    x2d: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    plan: TilePlan,
    dx: torch.Tensor,
    need_dw: bool = True,
    need_db: bool = True,
    programs: int | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Launch the backward: grad_x into ``dx``; returns ``(grad_weight, grad_bias)``."""
    n_rows, n_cols = x2d.shape
    need_dw = need_dw and weight is not None
    need_db = need_db and bias is not None
    need_partial = need_dw or need_db
    programs, rows_per_program = backward_programs(n_rows, plan.block_m, x2d.device, programs)
    partial = None
    if need_partial:
        # Chunked plans accumulate into the partial rows in place, so they start at zero.
        alloc = torch.zeros if plan.chunked else torch.empty
        partial = alloc((programs, 2 * n_cols), dtype=torch.float32, device=x2d.device)
    if n_rows > 0 and n_cols > 0:
        plan.launch(
            _layer_norm_backward_kernel,
            (programs,),
            dy2d,
            x2d,
            weight if weight is not None else x2d,
            mean,
            rstd,
            dx,
            partial if need_partial else mean,
            dy2d.stride(0),
            x2d.stride(0),
            dx.stride(0),
            n_rows,
            n_cols,
            rows_per_program,
            HAS_WEIGHT=weight is not None,
            NEED_PARTIAL=need_partial,
        )
    dw = torch.empty_like(weight) if need_dw else None
    db = torch.empty_like(bias) if need_db else None
    if need_partial:
        if n_rows == 0:
            partial.zero_()
        sum_partials(partial, programs, dw, db, n_cols)
    return dw, db


class LayerNormKernels:
    """`liger_core.drivers.layer_norm.LayerNormKernels` on this module's kernels. The backward
    tiles are planned apart from the forward's (their own tile budget): no state."""

    protocol = layer_norm_driver.PROTOCOL

    @staticmethod
    def forward(x2d, weight, bias, eps):
        y, mean, rstd = layer_norm_forward(x2d, weight, bias, eps, plan_tiles(x2d.shape[1]))
        return y, mean, rstd, None

    @staticmethod
    def backward(dy2d, x2d, weight, bias, mean, rstd, dx, need_dw, need_db, state):
        plan = plan_backward_tiles(x2d.shape[1], hardware.LAYER_NORM_BACKWARD_TILE_ELEMENTS)
        return layer_norm_backward(dy2d, x2d, weight, bias, mean, rstd, plan, dx, need_dw, need_db)


LigerLayerNormFunction = implements("layer_norm")(layer_norm_driver.autograd_function(LayerNormKernels(), __name__))
