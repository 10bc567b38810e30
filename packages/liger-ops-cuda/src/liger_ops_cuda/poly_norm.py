"""PolyNorm for NVIDIA GPUs: Triton kernels, launch plans and the kernel adapter of
`liger_core.drivers.poly_norm`.

y = w0 * n(x^3) + w1 * n(x^2) + w2 * n(x) + b with n(u) = u * rstd(u). Forward: one read of
x per row tile, the three sums of squares (x^2, x^4, x^6) in fp32, three rstd per row kept
for backward. Backward: one program per SM walks its rows; per term the RMSNorm gradient
du = rstd * (g - n * mean(g * n)), g = dy * w_i, chained through d(x^i)/dx; grad_weight and
grad_bias as four fp32 partial sums per program, summed in one launch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import poly_norm as poly_norm_driver
from liger_ops_cuda import hardware
from liger_ops_cuda._jit import row_group, row_tile
from liger_ops_cuda._tiling import TilePlan, backward_programs, plan_norm_rows, sum_partials


@triton.jit
def _poly_norm_forward_kernel(
    X,
    W,
    B,
    Y,
    RSTD,
    x_row_stride,
    y_row_stride,
    n_rows,
    n_cols,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CHUNKED: tl.constexpr,
):
    rows, row_mask, rows64 = row_tile(tl.program_id(0) * BLOCK_M, n_rows, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    w0 = tl.load(W).to(tl.float32)
    w1 = tl.load(W + 1).to(tl.float32)
    w2 = tl.load(W + 2).to(tl.float32)
    b = tl.load(B).to(tl.float32)

    if CHUNKED:
        s2 = tl.zeros((BLOCK_M,), dtype=tl.float32)
        s4 = tl.zeros((BLOCK_M,), dtype=tl.float32)
        s6 = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_mask[:, None] & (c < n_cols)[None, :]
            x = tl.load(X + rows64 * x_row_stride + c[None, :], mask=mask, other=0.0).to(tl.float32)
            x2 = x * x
            s2 += tl.sum(x2, axis=1)
            s4 += tl.sum(x2 * x2, axis=1)
            s6 += tl.sum(x2 * x2 * x2, axis=1)
        r1 = tl.math.rsqrt(s2 / n_cols + eps)
        r2 = tl.math.rsqrt(s4 / n_cols + eps)
        r3 = tl.math.rsqrt(s6 / n_cols + eps)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_mask[:, None] & (c < n_cols)[None, :]
            x = tl.load(X + rows64 * x_row_stride + c[None, :], mask=mask, other=0.0).to(tl.float32)
            x2 = x * x
            y = (w0 * r3)[:, None] * (x2 * x) + (w1 * r2)[:, None] * x2 + (w2 * r1)[:, None] * x + b
            tl.store(Y + rows64 * y_row_stride + c[None, :], y.to(Y.dtype.element_ty), mask=mask)
    else:
        mask = row_mask[:, None] & (cols < n_cols)[None, :]
        x = tl.load(X + rows64 * x_row_stride + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
        x = x.to(tl.float32)
        x2 = x * x
        x3 = x2 * x
        r1 = tl.math.rsqrt(tl.sum(x2, axis=1) / n_cols + eps)
        r2 = tl.math.rsqrt(tl.sum(x2 * x2, axis=1) / n_cols + eps)
        r3 = tl.math.rsqrt(tl.sum(x3 * x3, axis=1) / n_cols + eps)
        y = (w0 * r3)[:, None] * x3 + (w1 * r2)[:, None] * x2 + (w2 * r1)[:, None] * x + b
        tl.store(Y + rows64 * y_row_stride + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + rows * 3, r1, mask=row_mask)
    tl.store(RSTD + rows * 3 + 1, r2, mask=row_mask)
    tl.store(RSTD + rows * 3 + 2, r3, mask=row_mask)


@triton.jit
def _poly_norm_grad_x(x, dy, r1, r2, r3, d1, d2, d3, w0, w1, w2):
    # d_i = mean(g_i * n_i) per row with g_i = dy * w_i; du_i = r_i * (g_i - n_i * d_i);
    # grad_x = du_3 * 3x^2 + du_2 * 2x + du_1.
    x2 = x * x
    du3 = r3 * (dy * w0 - (x2 * x) * r3 * d3)
    du2 = r2 * (dy * w1 - x2 * r2 * d2)
    du1 = r1 * (dy * w2 - x * r1 * d1)
    return du3 * 3.0 * x2 + du2 * 2.0 * x + du1


@triton.jit
def _poly_norm_backward_kernel(
    DY,
    X,
    W,
    RSTD,
    DX,
    PARTIAL,
    dy_row_stride,
    x_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    rows_per_program,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CHUNKED: tl.constexpr,
):
    # PARTIAL: one fp32 row of 4 per program: [sum dy*n(x^3), sum dy*n(x^2), sum dy*n(x), sum dy].
    pid, row_start, row_end = row_group(rows_per_program, n_rows)
    cols = tl.arange(0, BLOCK_N)
    w0 = tl.load(W).to(tl.float32)
    w1 = tl.load(W + 1).to(tl.float32)
    w2 = tl.load(W + 2).to(tl.float32)
    # Per-column accumulators, reduced once at the end (fewer cross-lane sums in the loop).
    a3 = tl.zeros((BLOCK_N,), dtype=tl.float32)
    a2 = tl.zeros((BLOCK_N,), dtype=tl.float32)
    a1 = tl.zeros((BLOCK_N,), dtype=tl.float32)
    a0 = tl.zeros((BLOCK_N,), dtype=tl.float32)

    if CHUNKED:
        for i in range(0, row_end - row_start):
            row64 = (row_start + i).to(tl.int64)
            r1 = tl.load(RSTD + row64 * 3)
            r2 = tl.load(RSTD + row64 * 3 + 1)
            r3 = tl.load(RSTD + row64 * 3 + 2)
            e3 = tl.zeros((BLOCK_N,), dtype=tl.float32)
            e2 = tl.zeros((BLOCK_N,), dtype=tl.float32)
            e1 = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                col_mask = c < n_cols
                x = tl.load(X + row64 * x_row_stride + c, mask=col_mask, other=0.0).to(tl.float32)
                dy = tl.load(DY + row64 * dy_row_stride + c, mask=col_mask, other=0.0).to(tl.float32)
                x2 = x * x
                e3 += dy * x2 * x
                e2 += dy * x2
                e1 += dy * x
            # sum(dy * u_i) per row: both grad_weight's terms and d_i = w_i * r_i * that / n.
            t3 = tl.sum(e3, axis=0)
            t2 = tl.sum(e2, axis=0)
            t1 = tl.sum(e1, axis=0)
            d3 = w0 * r3 * t3 / n_cols
            d2 = w1 * r2 * t2 / n_cols
            d1 = w2 * r1 * t1 / n_cols
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                col_mask = c < n_cols
                x = tl.load(X + row64 * x_row_stride + c, mask=col_mask, other=0.0).to(tl.float32)
                dy = tl.load(DY + row64 * dy_row_stride + c, mask=col_mask, other=0.0).to(tl.float32)
                dx = _poly_norm_grad_x(x, dy, r1, r2, r3, d1, d2, d3, w0, w1, w2)
                tl.store(DX + row64 * dx_row_stride + c, dx.to(DX.dtype.element_ty), mask=col_mask)
                a0 += dy
            a3 += e3 * r3
            a2 += e2 * r2
            a1 += e1 * r1
    else:
        col_mask = cols < n_cols
        for block_start in range(row_start, row_end, BLOCK_M):
            rows, row_mask, rows64 = row_tile(block_start, row_end, BLOCK_M)
            mask = row_mask[:, None] & col_mask[None, :]
            x = tl.load(X + rows64 * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(DY + rows64 * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            r1 = tl.load(RSTD + rows * 3, mask=row_mask, other=0.0)
            r2 = tl.load(RSTD + rows * 3 + 1, mask=row_mask, other=0.0)
            r3 = tl.load(RSTD + rows * 3 + 2, mask=row_mask, other=0.0)
            x2 = x * x
            n3 = x2 * x * r3[:, None]
            n2 = x2 * r2[:, None]
            n1 = x * r1[:, None]
            t3 = dy * n3
            t2 = dy * n2
            t1 = dy * n1
            d3 = w0 * tl.sum(t3, axis=1) / n_cols
            d2 = w1 * tl.sum(t2, axis=1) / n_cols
            d1 = w2 * tl.sum(t1, axis=1) / n_cols
            dx = _poly_norm_grad_x(
                x, dy, r1[:, None], r2[:, None], r3[:, None], d1[:, None], d2[:, None], d3[:, None], w0, w1, w2
            )
            tl.store(DX + rows64 * dx_row_stride + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
            a3 += tl.sum(t3, axis=0)
            a2 += tl.sum(t2, axis=0)
            a1 += tl.sum(t1, axis=0)
            a0 += tl.sum(dy, axis=0)
    out = PARTIAL + pid * 4
    tl.store(out, tl.sum(a3, axis=0))
    tl.store(out + 1, tl.sum(a2, axis=0))
    tl.store(out + 2, tl.sum(a1, axis=0))
    tl.store(out + 3, tl.sum(a0, axis=0))


def poly_norm_forward(
    x2d: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, plan: TilePlan
) -> tuple[torch.Tensor, torch.Tensor]:
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    rstd = torch.empty((n_rows, 3), dtype=torch.float32, device=x2d.device)
    if n_rows == 0 or n_cols == 0:
        return y, rstd
    plan.launch(
        _poly_norm_forward_kernel,
        plan.row_grid(n_rows),
        x2d,
        weight,
        bias,
        y,
        rstd,
        x2d.stride(0),
        y.stride(0),
        n_rows,
        n_cols,
        eps,
    )
    return y, rstd


def poly_norm_backward(
    dy2d: torch.Tensor,
    x2d: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    rstd: torch.Tensor,
    dx: torch.Tensor,
    plan: TilePlan,
    programs: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the backward: grad_x into ``dx``; returns ``(grad_weight, grad_bias)``."""
    n_rows, n_cols = x2d.shape
    programs, rows_per_program = backward_programs(n_rows, plan.block_m, x2d.device, programs)
    partial = torch.zeros((programs, 4), dtype=torch.float32, device=x2d.device)
    if n_rows > 0 and n_cols > 0:
        plan.launch(
            _poly_norm_backward_kernel,
            (programs,),
            dy2d,
            x2d,
            weight,
            rstd,
            dx,
            partial,
            dy2d.stride(0),
            x2d.stride(0),
            dx.stride(0),
            n_rows,
            n_cols,
            rows_per_program,
        )
    dw = torch.empty_like(weight)
    db = torch.empty_like(bias)
    sum_partials(partial, programs, dw, db, 3)
    return dw, db


def plan_forward(n_cols: int) -> TilePlan:
    """RMSNorm's tiling with PolyNorm's forward tile and warps."""
    tile = hardware.POLY_NORM_FORWARD_TILE_ELEMENTS
    return plan_norm_rows(n_cols, tile, hardware.POLY_NORM_FORWARD_ELEMENTS_PER_WARP)


def plan_backward(n_cols: int) -> TilePlan:
    """RMSNorm's tiling with PolyNorm's smaller backward tile (its live set is larger), for
    wide rows' chunks too."""
    tile = hardware.POLY_NORM_BACKWARD_TILE_ELEMENTS
    return plan_norm_rows(n_cols, tile, hardware.POLY_NORM_BACKWARD_ELEMENTS_PER_WARP, min(hardware.CHUNK_BLOCK, tile))


class PolyNormKernels:
    """`liger_core.drivers.poly_norm.PolyNormKernels` on this module's kernels. The backward
    tiles are planned apart from the forward's: no state."""

    protocol = poly_norm_driver.PROTOCOL

    @staticmethod
    def forward(x2d, weight, bias, eps):
        y, rstd = poly_norm_forward(x2d, weight, bias, eps, plan_forward(x2d.shape[1]))
        return y, rstd, None

    @staticmethod
    def backward(dy2d, x2d, weight, bias, rstd, dx, state):
        return poly_norm_backward(dy2d, x2d, weight, bias, rstd, dx, plan_backward(x2d.shape[1]))


LigerPolyNormFunction = implements("poly_norm")(poly_norm_driver.autograd_function(PolyNormKernels(), __name__))
