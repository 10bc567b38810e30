"""DyT (Dynamic Tanh) for Intel GPUs: Triton kernels, launch plan and the
kernel adapter of `liger_core.drivers.dyt`.

``y = gamma * tanh(alpha * x) + beta`` is elementwise with per-column parameters, so both
kernels use a 2-D grid: row tiles x column blocks of ``ELEMENTWISE_COL_BLOCK`` (no row is
ever held whole). The backward's row axis is persistent: each program walks a run of row
tiles for one column block and keeps fp32 partial sums of grad_gamma and grad_beta (one row
per program) and of grad_alpha (one value per program), reduced once at the end without
atomics. The grid is sized so that all programs of all column blocks are resident at once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import dyt as dyt_driver

from liger_ops_xpu._jit import row_tile, tanh
from liger_ops_xpu._tiling import (
    BlockPlan,
    backward_grid,
    launch_blocks,
    plan_blocks,
    static_trips,
    sum_partials,
    zeros_or_none,
)


@triton.jit
def _dyt_forward_kernel(
    X,
    ALPHA,
    GAMMA,
    BETA,
    Y,
    x_row_stride,
    y_row_stride,
    n_rows,
    n_cols,
    HAS_BETA: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    _, row_mask, rows64 = row_tile(tl.program_id(0) * BLOCK_M, n_rows, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    mask = row_mask[:, None] & col_mask[None, :]
    alpha = tl.load(ALPHA).to(tl.float32)
    x = tl.load(X + rows64[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    gamma = tl.load(GAMMA + cols, mask=col_mask, other=0.0).to(tl.float32)
    y = gamma[None, :] * tanh(alpha * x)
    if HAS_BETA:
        y += tl.load(BETA + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    tl.store(Y + rows64[:, None] * y_row_stride + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _dyt_backward_kernel(
    DY,
    X,
    ALPHA,
    GAMMA,
    DX,
    DGAMMA_PARTIAL,
    DBETA_PARTIAL,
    DALPHA_PARTIAL,
    dy_row_stride,
    x_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    tiles_per_program,
    HAS_BETA: tl.constexpr,
    NEED_PARTIAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    STATIC_TILES: tl.constexpr,
):
    # t = tanh(alpha x): grad_x = dy * gamma * alpha * (1 - t^2); grad_alpha = sum dy * gamma * x * (1 - t^2);
    # grad_gamma = sum over rows of dy * t; grad_beta = sum over rows of dy. Without NEED_PARTIAL
    # (no parameter wants a gradient) only grad_x is computed.
    pid = tl.program_id(0)
    col_block = tl.program_id(1)
    cols = col_block * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    alpha = tl.load(ALPHA).to(tl.float32)
    gamma = tl.load(GAMMA + cols, mask=col_mask, other=0.0).to(tl.float32)
    first_row = pid * tiles_per_program * BLOCK_M
    dgamma = tl.zeros((BLOCK_N,), dtype=tl.float32)
    dbeta = tl.zeros((BLOCK_N,), dtype=tl.float32)
    dalpha = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(STATIC_TILES if STATIC_TILES > 0 else tiles_per_program):
        _, row_mask, rows64 = row_tile(first_row + t * BLOCK_M, n_rows, BLOCK_M)
        mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(X + rows64[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + rows64[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        th = tanh(alpha * x)
        g = dy * gamma[None, :] * (1.0 - th * th)
        tl.store(DX + rows64[:, None] * dx_row_stride + cols[None, :], (g * alpha).to(DX.dtype.element_ty), mask=mask)
        if NEED_PARTIAL:
            dalpha += g * x
            dgamma += tl.sum(dy * th, axis=0)
            if HAS_BETA:
                dbeta += tl.sum(dy, axis=0)
    if NEED_PARTIAL:
        out = pid.to(tl.int64) * n_cols + cols
        tl.store(DGAMMA_PARTIAL + out, dgamma, mask=col_mask)
        if HAS_BETA:
            tl.store(DBETA_PARTIAL + out, dbeta, mask=col_mask)
        tl.store(DALPHA_PARTIAL + pid * tl.num_programs(1) + col_block, tl.sum(tl.sum(dalpha, axis=1), axis=0))


def dyt_forward(x2d, alpha, gamma, beta, plan: BlockPlan) -> torch.Tensor:
    """Launch the forward kernel on rows of ``x2d``; returns y."""
    n_rows, n_cols = x2d.shape
    y = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    if x2d.numel() == 0:
        return y
    launch_blocks(
        _dyt_forward_kernel,
        plan.grid(n_rows, n_cols),
        plan,
        x2d.device,
        x2d,
        alpha,
        gamma,
        beta if beta is not None else gamma,  # never read without HAS_BETA
        y,
        x2d.stride(0),
        y.stride(0),
        n_rows,
        n_cols,
        HAS_BETA=beta is not None,
    )
    return y


def dyt_backward(dy2d, x2d, alpha, gamma, beta, plan: BlockPlan, need_params: bool = True):
    """Launch the backward kernel; returns ``(grad_x, grad_alpha, grad_gamma, grad_beta)``, the
    parameters' None without ``need_params`` (their partial sums are then neither computed nor
    allocated). Its grid is persistent along rows, with every column block's programs resident
    at once."""
    n_rows, n_cols = x2d.shape
    has_beta = beta is not None
    dx = torch.empty_like(x2d)
    if x2d.numel() == 0:
        if not need_params:
            return dx, None, None, None
        return dx, torch.zeros_like(alpha), torch.zeros_like(gamma), zeros_or_none(beta)
    n_col_blocks = triton.cdiv(n_cols, plan.block_n)
    programs, tiles_per_program = backward_grid(n_rows, plan, x2d.device, n_col_blocks)
    if need_params:
        dgamma_partial = torch.empty((programs, n_cols), dtype=torch.float32, device=x2d.device)
        dbeta_partial = torch.empty_like(dgamma_partial) if has_beta else dgamma_partial
        dalpha_partial = torch.empty((programs, n_col_blocks), dtype=torch.float32, device=x2d.device)
    else:
        dgamma_partial = dbeta_partial = dalpha_partial = dx  # never touched without NEED_PARTIAL
    launch_blocks(
        _dyt_backward_kernel,
        (programs, n_col_blocks),
        plan,
        x2d.device,
        dy2d,
        x2d,
        alpha,
        gamma,
        dx,
        dgamma_partial,
        dbeta_partial,
        dalpha_partial,
        dy2d.stride(0),
        x2d.stride(0),
        dx.stride(0),
        n_rows,
        n_cols,
        tiles_per_program,
        HAS_BETA=has_beta,
        NEED_PARTIAL=need_params,
        STATIC_TILES=static_trips(_dyt_backward_kernel, tiles_per_program),
    )
    if not need_params:
        return dx, None, None, None
    dalpha = dalpha_partial.sum().to(alpha.dtype).reshape(alpha.shape)
    return dx, dalpha, sum_partials(dgamma_partial, gamma), sum_partials(dbeta_partial, beta)


class DyTKernels:
    """`liger_core.drivers.dyt.DyTKernels` on this module's kernels (the state: the block plan).
    When no parameter needs a gradient, backward computes grad_x only (as CUDA's does)."""

    protocol = dyt_driver.PROTOCOL

    @staticmethod
    def forward(x2d, alpha, gamma, beta):
        plan = plan_blocks(x2d.shape[1])
        return dyt_forward(x2d, alpha, gamma, beta, plan), plan

    @staticmethod
    def backward(dy2d, x2d, alpha, gamma, beta, need_param_grads, plan):
        return dyt_backward(dy2d, x2d, alpha, gamma, beta, plan, need_param_grads)


LigerDyTFunction = implements("dyt")(dyt_driver.autograd_function(DyTKernels(), __name__))
