"""PolyNorm for Intel GPUs: Triton kernels, launch plans and the kernel adapter of
`liger_core.drivers.poly_norm`.

``y = w0 * n(x^3) + w1 * n(x^2) + w2 * n(x) + b`` with ``n(u) = u * rsqrt(mean(u^2) + eps)``.
The forward tiles rows like RMSNorm (see rms_norm.py) and stores the three fp32 reciprocal
RMS values of each row. The backward runs on a persistent grid sized by the EU count; with
``S_k = mean(dy * n(x^k))`` over a row,

    grad_x = sum_k w_k * r_k * (dy - n(x^k) * S_k) * k * x^(k-1)
    grad_w = sum over rows of n_cols * S_k,   grad_b = sum of dy

so each program keeps four fp32 scalars (its partial sums), reduced once at the end.
Three powers of x stay live per element: rows are fused only up to MAX_FUSED_BLOCK_HEAVY.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import poly_norm as poly_norm_driver

from liger_ops_xpu import hardware
from liger_ops_xpu._jit import col_tile, row_group, row_tile
from liger_ops_xpu._tiling import TilePlan, backward_grid, launch_row_tiles, plan_tiles, static_trips

# Partial sums per backward program: grad_w0 (cubic), grad_w1 (square), grad_w2 (linear), grad_b.
_N_PARTIALS = 4


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
    N_CHUNKS: tl.constexpr,
):
    pid = tl.program_id(0)
    _, row_mask, rows64 = row_tile(pid * BLOCK_M, n_rows, BLOCK_M)
    x_base = X + rows64[:, None] * x_row_stride
    y_base = Y + rows64[:, None] * y_row_stride
    w0 = tl.load(W).to(tl.float32)
    w1 = tl.load(W + 1).to(tl.float32)
    w2 = tl.load(W + 2).to(tl.float32)
    b = tl.load(B).to(tl.float32)

    if N_CHUNKS == 1:
        cols, mask = col_tile(0, n_cols, row_mask, BLOCK_N)
        x = tl.load(x_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        x2 = x * x
        x3 = x2 * x
        r1 = tl.math.rsqrt(tl.sum(x2, axis=1) / n_cols + eps)
        r2 = tl.math.rsqrt(tl.sum(x2 * x2, axis=1) / n_cols + eps)
        r3 = tl.math.rsqrt(tl.sum(x3 * x3, axis=1) / n_cols + eps)
        y = (w0 * r3)[:, None] * x3 + (w1 * r2)[:, None] * x2 + (w2 * r1)[:, None] * x + b
        tl.store(y_base + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    else:
        ss1 = tl.zeros((BLOCK_M,), dtype=tl.float32)
        ss2 = tl.zeros((BLOCK_M,), dtype=tl.float32)
        ss3 = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for chunk in range(N_CHUNKS):
            c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
            x = tl.load(x_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
            x2 = x * x
            ss1 += tl.sum(x2, axis=1)
            ss2 += tl.sum(x2 * x2, axis=1)
            ss3 += tl.sum(x2 * x2 * x2, axis=1)
        r1 = tl.math.rsqrt(ss1 / n_cols + eps)
        r2 = tl.math.rsqrt(ss2 / n_cols + eps)
        r3 = tl.math.rsqrt(ss3 / n_cols + eps)
        for chunk in range(N_CHUNKS):
            c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
            x = tl.load(x_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
            x2 = x * x
            y = (w0 * r3)[:, None] * (x2 * x) + (w1 * r2)[:, None] * x2 + (w2 * r1)[:, None] * x + b
            tl.store(y_base + c[None, :], y.to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + rows64 * 3, r1, mask=row_mask)
    tl.store(RSTD + rows64 * 3 + 1, r2, mask=row_mask)
    tl.store(RSTD + rows64 * 3 + 2, r3, mask=row_mask)


@triton.jit
def _poly_norm_grad_x(x, dy, r1, r2, r3, s1, s2, s3, w0, w1, w2):
    """grad_x of a tile from each row's rstd r_k and mean(dy * n(x^k)) s_k (all fp32)."""
    x2 = x * x
    g3 = (w0 * r3)[:, None] * (dy - (x2 * x) * (r3 * s3)[:, None]) * 3.0 * x2
    g2 = (w1 * r2)[:, None] * (dy - x2 * (r2 * s2)[:, None]) * 2.0 * x
    g1 = (w2 * r1)[:, None] * (dy - x * (r1 * s1)[:, None])
    return g1 + g2 + g3


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
    tiles_per_program,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    N_CHUNKS: tl.constexpr,
    STATIC_TILES: tl.constexpr,
):
    pid, first_row = row_group(tiles_per_program, BLOCK_M)
    w0 = tl.load(W).to(tl.float32)
    w1 = tl.load(W + 1).to(tl.float32)
    w2 = tl.load(W + 2).to(tl.float32)
    # Per-row sums of dy * n(x^k) and of dy, accumulated over this program's tiles.
    acc1 = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc_b = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for t in range(STATIC_TILES if STATIC_TILES > 0 else tiles_per_program):
        _, row_mask, rows64 = row_tile(first_row + t * BLOCK_M, n_rows, BLOCK_M)
        x_base = X + rows64[:, None] * x_row_stride
        dy_base = DY + rows64[:, None] * dy_row_stride
        dx_base = DX + rows64[:, None] * dx_row_stride
        r1 = tl.load(RSTD + rows64 * 3, mask=row_mask, other=0.0)
        r2 = tl.load(RSTD + rows64 * 3 + 1, mask=row_mask, other=0.0)
        r3 = tl.load(RSTD + rows64 * 3 + 2, mask=row_mask, other=0.0)
        if N_CHUNKS == 1:
            cols, mask = col_tile(0, n_cols, row_mask, BLOCK_N)
            x = tl.load(x_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            x2 = x * x
            d1 = tl.sum(dy * x, axis=1) * r1
            d2 = tl.sum(dy * x2, axis=1) * r2
            d3 = tl.sum(dy * x2 * x, axis=1) * r3
            db = tl.sum(dy, axis=1)
            dx = _poly_norm_grad_x(x, dy, r1, r2, r3, d1 / n_cols, d2 / n_cols, d3 / n_cols, w0, w1, w2)
            tl.store(dx_base + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        else:
            t1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            t2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            t3 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            tb = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for chunk in range(N_CHUNKS):
                c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
                x = tl.load(x_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
                dyx = dy * x
                t1 += dyx
                t2 += dyx * x
                t3 += dyx * x * x
                tb += dy
            d1 = tl.sum(t1, axis=1) * r1
            d2 = tl.sum(t2, axis=1) * r2
            d3 = tl.sum(t3, axis=1) * r3
            db = tl.sum(tb, axis=1)
            for chunk in range(N_CHUNKS):
                c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
                x = tl.load(x_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
                dx = _poly_norm_grad_x(x, dy, r1, r2, r3, d1 / n_cols, d2 / n_cols, d3 / n_cols, w0, w1, w2)
                tl.store(dx_base + c[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        acc1 += d1
        acc2 += d2
        acc3 += d3
        acc_b += db
    out = PARTIAL + pid * 4
    tl.store(out, tl.sum(acc3, axis=0))
    tl.store(out + 1, tl.sum(acc2, axis=0))
    tl.store(out + 2, tl.sum(acc1, axis=0))
    tl.store(out + 3, tl.sum(acc_b, axis=0))


def plan_poly_norm(n_cols: int, device: torch.device | str | None = None) -> TilePlan:
    """Row tiles as for RMSNorm, fused only up to MAX_FUSED_BLOCK_HEAVY (three live powers of x)."""
    return plan_tiles(n_cols, device, max_fused_block=hardware.MAX_FUSED_BLOCK_HEAVY)


def poly_norm_forward(x2d, weight, bias, eps: float, plan: TilePlan):
    """Launch the forward kernel; returns ``(y, rstd)``, rstd ``(n_rows, 3)`` in fp32."""
    n_rows, n_cols = x2d.shape
    y = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    rstd = torch.empty((n_rows, 3), dtype=torch.float32, device=x2d.device)
    if x2d.numel() == 0:
        return y, rstd
    launch_row_tiles(
        _poly_norm_forward_kernel,
        plan.tiles(n_rows),
        plan,
        x2d.device,
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


def poly_norm_backward(dy2d, x2d, weight, bias, rstd, dx, plan: TilePlan):
    """Launch the backward kernel: grad_x into ``dx``; returns ``(grad_weight, grad_bias)``."""
    n_rows, n_cols = x2d.shape
    if x2d.numel() == 0:
        return torch.zeros_like(weight), torch.zeros_like(bias)
    programs, tiles_per_program = backward_grid(n_rows, plan, x2d.device)
    partial = torch.empty((programs, _N_PARTIALS), dtype=torch.float32, device=x2d.device)
    launch_row_tiles(
        _poly_norm_backward_kernel,
        programs,
        plan,
        x2d.device,
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
        tiles_per_program,
        STATIC_TILES=static_trips(_poly_norm_backward_kernel, tiles_per_program),
    )
    sums = partial.sum(0)
    return sums[:3].to(weight.dtype), sums[3].to(bias.dtype).reshape(bias.shape)


class PolyNormKernels:
    """`liger_core.drivers.poly_norm.PolyNormKernels` on this module's kernels; the forward's
    tile plan is the backward's ``state``."""

    protocol = poly_norm_driver.PROTOCOL

    @staticmethod
    def forward(x2d, weight, bias, eps):
        plan = plan_poly_norm(x2d.shape[1], x2d.device)
        y, rstd = poly_norm_forward(x2d, weight, bias, eps, plan)
        return y, rstd, plan

    @staticmethod
    def backward(dy2d, x2d, weight, bias, rstd, dx, state):
        return poly_norm_backward(dy2d, x2d, weight, bias, rstd, dx, state)


LigerPolyNormFunction = implements("poly_norm")(poly_norm_driver.autograd_function(PolyNormKernels(), __name__))
