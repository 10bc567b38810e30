"""Softmax over the last dimension for Intel GPUs: Triton kernels, tile plan and the
kernel adapter of `liger_core.drivers.softmax`.

Rows are tiled as in the norms (see _tiling.plan_tiles): whole rows (several per tile when
short) are read once; wider rows use an online pass (running max and rescaled sum) and a
second pass that writes. Backward, ``grad_x = y * (dy - sum(dy * y))``, from the saved y.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import softmax as softmax_driver

from liger_ops_xpu._jit import col_tile, row_tile
from liger_ops_xpu._tiling import TilePlan, launch_rows, plan_tiles


@triton.jit
def _softmax_forward_kernel(
    X,
    Y,
    x_row_stride,
    y_row_stride,
    n_rows,
    n_cols,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    N_CHUNKS: tl.constexpr,
):
    _, row_mask, rows64 = row_tile(tl.program_id(0) * BLOCK_M, n_rows, BLOCK_M)
    x_base = X + rows64[:, None] * x_row_stride
    y_base = Y + rows64[:, None] * y_row_stride
    if N_CHUNKS == 1:
        cols, mask = col_tile(0, n_cols, row_mask, BLOCK_N)
        x = tl.load(x_base + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32)
        m = tl.max(x, axis=1)
        m = tl.where(m == -float("inf"), 0.0, m)  # all-masked (padding) rows: no inf - inf
        e = tl.exp(x - m[:, None])
        d = tl.sum(e, axis=1)
        y = e / tl.where(d == 0.0, 1.0, d)[:, None]  # padding rows have d == 0
        tl.store(y_base + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    else:
        m = tl.full((BLOCK_M,), -float("inf"), tl.float32)
        d = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for chunk in range(N_CHUNKS):
            c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
            x = tl.load(x_base + c[None, :], mask=mask, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=1))
            safe = tl.where(m_new == -float("inf"), 0.0, m_new)
            d = d * tl.exp(m - safe) + tl.sum(tl.exp(x - safe[:, None]), axis=1)
            m = m_new
        m = tl.where(m == -float("inf"), 0.0, m)
        d = tl.where(d == 0.0, 1.0, d)  # padding rows
        for chunk in range(N_CHUNKS):
            c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
            x = tl.load(x_base + c[None, :], mask=mask, other=-float("inf")).to(tl.float32)
            y = tl.exp(x - m[:, None]) / d[:, None]
            tl.store(y_base + c[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_backward_kernel(
    DY,
    Y,
    DX,
    dy_row_stride,
    y_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    N_CHUNKS: tl.constexpr,
):
    _, row_mask, rows64 = row_tile(tl.program_id(0) * BLOCK_M, n_rows, BLOCK_M)
    dy_base = DY + rows64[:, None] * dy_row_stride
    y_base = Y + rows64[:, None] * y_row_stride
    dx_base = DX + rows64[:, None] * dx_row_stride
    if N_CHUNKS == 1:
        cols, mask = col_tile(0, n_cols, row_mask, BLOCK_N)
        dy = tl.load(dy_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        y = tl.load(y_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dot = tl.sum(dy * y, axis=1)
        tl.store(dx_base + cols[None, :], (y * (dy - dot[:, None])).to(DX.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for chunk in range(N_CHUNKS):
            c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
            dy = tl.load(dy_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
            y = tl.load(y_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
            acc += dy * y
        dot = tl.sum(acc, axis=1)
        for chunk in range(N_CHUNKS):
            c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
            dy = tl.load(dy_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
            y = tl.load(y_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
            tl.store(dx_base + c[None, :], (y * (dy - dot[:, None])).to(DX.dtype.element_ty), mask=mask)


def softmax_forward(x2d: torch.Tensor, plan: TilePlan) -> torch.Tensor:
    y = torch.empty(x2d.shape, dtype=x2d.dtype, device=x2d.device)
    launch_rows(_softmax_forward_kernel, plan, (x2d, y))
    return y


def softmax_backward(dy2d: torch.Tensor, y: torch.Tensor, plan: TilePlan) -> torch.Tensor:
    dx = torch.empty_like(y)
    launch_rows(_softmax_backward_kernel, plan, (dy2d, y, dx))
    return dx


class SoftmaxKernels:
    """`liger_core.drivers.softmax.SoftmaxKernels` on this module's kernels (the state: the tile plan)."""

    protocol = softmax_driver.PROTOCOL

    @staticmethod
    def forward(x2d: torch.Tensor) -> tuple[torch.Tensor, TilePlan]:
        plan = plan_tiles(x2d.shape[1], x2d.device)
        return softmax_forward(x2d, plan), plan

    @staticmethod
    def backward(dy2d: torch.Tensor, y: torch.Tensor, plan: TilePlan) -> torch.Tensor:
        return softmax_backward(dy2d, y, plan)


LigerSoftmaxFunction = implements("softmax")(softmax_driver.autograd_function(SoftmaxKernels(), __name__))
