"""Sparsemax for Intel GPUs: Triton kernels, tile plan and the kernel
adapter of `liger_core.drivers.sparsemax`.

The threshold tau of each row (``sum(max(x - tau, 0)) == 1``) is found without sorting: f(t) =
sum(max(x - t, 0)) falls monotonically from >= 1 at t = max - 1 to 0 at t = max, so
SPARSEMAX_BISECTION_STEPS halvings of that interval bracket tau closely, and Michelot steps
(tau = (sum of x over {x > tau} - 1) / |{x > tau}|, which rises to the exact tau from below)
make it exact for the support found. Whole rows stay in registers for all of it; wider rows
re-read their chunks on every step (each step is one pass), which only very wide rows pay.

``dim`` other than the last is moved last (one copy) and moved back. Backward, on the support
S of each row: ``grad_x = dy - mean(dy over S)``; zero elsewhere.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import sparsemax as sparsemax_driver

from liger_ops_xpu import hardware
from liger_ops_xpu._jit import col_tile, row_tile
from liger_ops_xpu._tiling import TilePlan, launch_rows, plan_tiles


@triton.jit
def _excess(x_base, x_tile, tau, row_mask, n_cols, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr):
    """Per row: (sum of x - tau over {x > tau}, count of {x > tau}, sum of x over it)."""
    if N_CHUNKS == 1:
        keep = x_tile > tau[:, None]
        total = tl.sum(tl.where(keep, x_tile, 0.0), axis=1)
        count = tl.sum(keep.to(tl.float32), axis=1)
    else:
        total_t = tl.zeros((x_tile.shape[0], BLOCK_N), dtype=tl.float32)
        count_t = tl.zeros((x_tile.shape[0], BLOCK_N), dtype=tl.float32)
        for chunk in range(N_CHUNKS):
            c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
            x = tl.load(x_base + c[None, :], mask=mask, other=-float("inf")).to(tl.float32)
            keep = x > tau[:, None]
            total_t += tl.where(keep, x, 0.0)
            count_t += keep.to(tl.float32)
        total = tl.sum(total_t, axis=1)
        count = tl.sum(count_t, axis=1)
    return total - count * tau, count, total


@triton.jit
def _sparsemax_forward_kernel(
    X,
    Y,
    x_row_stride,
    y_row_stride,
    n_rows,
    n_cols,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    N_CHUNKS: tl.constexpr,
    BISECTION_STEPS: tl.constexpr,
    MICHELOT_STEPS: tl.constexpr,
):
    _, row_mask, rows64 = row_tile(tl.program_id(0) * BLOCK_M, n_rows, BLOCK_M)
    x_base = X + rows64[:, None] * x_row_stride
    y_base = Y + rows64[:, None] * y_row_stride
    if N_CHUNKS == 1:
        cols, mask = col_tile(0, n_cols, row_mask, BLOCK_N)
        x_tile = tl.load(x_base + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32)
        x_max = tl.max(x_tile, axis=1)
    else:
        x_tile = tl.zeros((BLOCK_M, 1), dtype=tl.float32)  # unused: chunks are re-read
        x_max = tl.full((BLOCK_M,), -float("inf"), tl.float32)
        for chunk in range(N_CHUNKS):
            c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
            x = tl.load(x_base + c[None, :], mask=mask, other=-float("inf")).to(tl.float32)
            x_max = tl.maximum(x_max, tl.max(x, axis=1))
    x_max = tl.where(row_mask, x_max, 0.0)
    lo = x_max - 1.0  # f(lo) >= 1: the largest entry alone gives 1
    hi = x_max  # f(hi) == 0
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        f, _count, _total = _excess(x_base, x_tile, mid, row_mask, n_cols, BLOCK_N, N_CHUNKS)
        above = f >= 1.0
        lo = tl.where(above, mid, lo)
        hi = tl.where(above, hi, mid)
    tau = lo
    for _ in range(MICHELOT_STEPS):
        _f, count, total = _excess(x_base, x_tile, tau, row_mask, n_cols, BLOCK_N, N_CHUNKS)
        tau = tl.maximum(tau, (total - 1.0) / tl.maximum(count, 1.0))
    if N_CHUNKS == 1:
        y = tl.maximum(x_tile - tau[:, None], 0.0)
        tl.store(y_base + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    else:
        for chunk in range(N_CHUNKS):
            c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
            x = tl.load(x_base + c[None, :], mask=mask, other=-float("inf")).to(tl.float32)
            y = tl.maximum(x - tau[:, None], 0.0)
            tl.store(y_base + c[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _sparsemax_backward_kernel(
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
    sum_t = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    count_t = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for chunk in range(N_CHUNKS):
        c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
        dy = tl.load(dy_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
        support = tl.load(y_base + c[None, :], mask=mask, other=0.0) > 0
        sum_t += tl.where(support, dy, 0.0)
        count_t += support.to(tl.float32)
    mean = tl.sum(sum_t, axis=1) / tl.maximum(tl.sum(count_t, axis=1), 1.0)
    for chunk in range(N_CHUNKS):
        c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
        dy = tl.load(dy_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
        support = tl.load(y_base + c[None, :], mask=mask, other=0.0) > 0
        dx = tl.where(support, dy - mean[:, None], 0.0)
        tl.store(dx_base + c[None, :], dx.to(DX.dtype.element_ty), mask=mask)


def sparsemax_forward(x2d: torch.Tensor, plan: TilePlan) -> torch.Tensor:
    y = torch.empty(x2d.shape, dtype=x2d.dtype, device=x2d.device)
    steps = {"BISECTION_STEPS": hardware.SPARSEMAX_BISECTION_STEPS, "MICHELOT_STEPS": hardware.SPARSEMAX_MICHELOT_STEPS}
    launch_rows(_sparsemax_forward_kernel, plan, (x2d, y), **steps)
    return y


def sparsemax_backward(dy2d: torch.Tensor, y: torch.Tensor, plan: TilePlan) -> torch.Tensor:
    dx = torch.empty_like(y)
    launch_rows(_sparsemax_backward_kernel, plan, (dy2d, y, dx))
    return dx


class SparsemaxKernels:
    """`liger_core.drivers.sparsemax.SparsemaxKernels` on this module's kernels: backward reads the
    output (saved), the state is the tile plan."""

    protocol = sparsemax_driver.PROTOCOL

    @staticmethod
    def forward(x2d: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor], TilePlan]:
        plan = plan_tiles(x2d.shape[1], x2d.device)
        y = sparsemax_forward(x2d, plan)
        return y, (y,), plan

    @staticmethod
    def backward(dy2d: torch.Tensor, saved: tuple[torch.Tensor], plan: TilePlan) -> torch.Tensor:
        return sparsemax_backward(dy2d, saved[0], plan)


LigerSparsemaxFunction = implements("sparsemax")(sparsemax_driver.autograd_function(SparsemaxKernels(), __name__))
