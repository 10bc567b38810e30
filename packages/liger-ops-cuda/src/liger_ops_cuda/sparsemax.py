"""Sparsemax for NVIDIA GPUs: Triton kernels (softmax's row tiling) and
the kernel adapter of `liger_core.drivers.sparsemax`.

No sort: per row the threshold tau (``sum(max(x - tau, 0)) == 1``) is bracketed by bisection
on ``[max - 1, max]``, then made exact by Michelot steps: with the support ``S = {x > lo}``
of the lower bracket (a superset of the true support), ``tau = (sum_S x - 1) / |S|`` lies
between lo and the true tau, so each step only drops entries that do not belong. Rows that
fit a tile stay in registers for every step; wider rows stream each step over the row.
Backward reads x and the saved float32 tau per row: on the support ``x > tau``,
``grad_x = dy - mean(dy over the support)``, else 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import sparsemax as sparsemax_driver
from liger_ops_cuda import hardware
from liger_ops_cuda._jit import row_tile
from liger_ops_cuda._tiling import TilePlan, plan_softmax_rows


@triton.jit
def _excess(x_rows, cols, row_mask, n_cols, tau, BLOCK_N: tl.constexpr, CHUNKED: tl.constexpr, x_tile):
    """Per row: sum(max(x - tau, 0)), the support size and the support's sum, for x > tau."""
    if CHUNKED:
        over = tl.zeros(tau.shape, tl.float32)
        count = tl.zeros(tau.shape, tl.float32)
        total = tl.zeros(tau.shape, tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_mask[:, None] & (c < n_cols)[None, :]
            x = tl.load(x_rows + c[None, :], mask=mask, other=float("-inf")).to(tl.float32)
            inside = x > tau[:, None]
            over += tl.sum(tl.where(inside, x - tau[:, None], 0.0), axis=1)
            count += tl.sum(inside.to(tl.float32), axis=1)
            total += tl.sum(tl.where(inside, x, 0.0), axis=1)
        return over, count, total
    else:
        inside = x_tile > tau[:, None]
        over = tl.sum(tl.where(inside, x_tile - tau[:, None], 0.0), axis=1)
        count = tl.sum(inside.to(tl.float32), axis=1)
        total = tl.sum(tl.where(inside, x_tile, 0.0), axis=1)
        return over, count, total


@triton.jit
def _sparsemax_forward_kernel(
    X, Y, TAU, x_row_stride, y_row_stride, n_rows, n_cols,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKED: tl.constexpr,
    BISECTION_STEPS: tl.constexpr, REFINE_STEPS: tl.constexpr,
):  # fmt: skip
    rows, row_mask, rows64 = row_tile(tl.program_id(0) * BLOCK_M, n_rows, BLOCK_M)
    x_rows = X + rows64 * x_row_stride
    y_rows = Y + rows64 * y_row_stride
    cols = tl.arange(0, BLOCK_N)

    if CHUNKED:
        x_tile = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)  # unused: each step streams the row
        row_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_mask[:, None] & (c < n_cols)[None, :]
            x = tl.load(x_rows + c[None, :], mask=mask, other=float("-inf")).to(tl.float32)
            row_max = tl.maximum(row_max, tl.max(x, axis=1))
    else:
        mask = row_mask[:, None] & (cols < n_cols)[None, :]
        x_tile = tl.load(x_rows + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        row_max = tl.max(x_tile, axis=1)
    row_max = tl.where(row_mask, row_max, 0.0)  # padding rows: keep the arithmetic finite

    # sum(max(x - t, 0)) falls from >= 1 at t = max - 1 to 0 at t = max.
    lo = row_max - 1.0
    hi = row_max
    for _ in tl.static_range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        over, count, total = _excess(x_rows, cols, row_mask, n_cols, mid, BLOCK_N, CHUNKED, x_tile)
        above = over > 1.0
        lo = tl.where(above, mid, lo)
        hi = tl.where(above, hi, mid)
    tau = lo
    for _ in tl.static_range(REFINE_STEPS):
        over, count, total = _excess(x_rows, cols, row_mask, n_cols, tau, BLOCK_N, CHUNKED, x_tile)
        tau = tl.where(count > 0, (total - 1.0) / tl.maximum(count, 1.0), tau)
    tl.store(TAU + rows, tau, mask=row_mask)

    if CHUNKED:
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_mask[:, None] & (c < n_cols)[None, :]
            x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
            tl.store(y_rows + c[None, :], tl.maximum(x - tau[:, None], 0.0).to(Y.dtype.element_ty), mask=mask)
    else:
        y = tl.maximum(x_tile - tau[:, None], 0.0)
        tl.store(y_rows + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _sparsemax_backward_kernel(
    DY, X, TAU, DX, dy_row_stride, x_row_stride, dx_row_stride, n_rows, n_cols,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKED: tl.constexpr,
):  # fmt: skip
    rows, row_mask, rows64 = row_tile(tl.program_id(0) * BLOCK_M, n_rows, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    tau = tl.load(TAU + rows, mask=row_mask, other=0.0)
    if CHUNKED:
        dy_sum = tl.zeros((BLOCK_M,), tl.float32)
        count = tl.zeros((BLOCK_M,), tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_mask[:, None] & (c < n_cols)[None, :]
            x = tl.load(X + rows64 * x_row_stride + c[None, :], mask=mask, other=float("-inf")).to(tl.float32)
            dy = tl.load(DY + rows64 * dy_row_stride + c[None, :], mask=mask, other=0.0).to(tl.float32)
            inside = x > tau[:, None]
            dy_sum += tl.sum(tl.where(inside, dy, 0.0), axis=1)
            count += tl.sum(inside.to(tl.float32), axis=1)
        mean = dy_sum / tl.maximum(count, 1.0)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_mask[:, None] & (c < n_cols)[None, :]
            x = tl.load(X + rows64 * x_row_stride + c[None, :], mask=mask, other=float("-inf")).to(tl.float32)
            dy = tl.load(DY + rows64 * dy_row_stride + c[None, :], mask=mask, other=0.0).to(tl.float32)
            dx = tl.where(x > tau[:, None], dy - mean[:, None], 0.0)
            tl.store(DX + rows64 * dx_row_stride + c[None, :], dx.to(DX.dtype.element_ty), mask=mask)
    else:
        mask = row_mask[:, None] & (cols < n_cols)[None, :]
        x = tl.load(X + rows64 * x_row_stride + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        dy = tl.load(DY + rows64 * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        inside = x > tau[:, None]
        mean = tl.sum(tl.where(inside, dy, 0.0), axis=1) / tl.maximum(tl.sum(inside.to(tl.float32), axis=1), 1.0)
        dx = tl.where(inside, dy - mean[:, None], 0.0)
        tl.store(DX + rows64 * dx_row_stride + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)


def sparsemax_forward(x2d: torch.Tensor, plan: TilePlan) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, tau)``: the output rows and each row's float32 threshold."""
    n_rows, n_cols = x2d.shape
    y = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    tau = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    if y.numel():
        plan.launch(
            _sparsemax_forward_kernel, plan.row_grid(n_rows),
            x2d, y, tau, x2d.stride(0), y.stride(0), n_rows, n_cols,
            BISECTION_STEPS=hardware.SPARSEMAX_BISECTION_STEPS, REFINE_STEPS=hardware.SPARSEMAX_REFINE_STEPS,
        )  # fmt: skip
    return y, tau


def sparsemax_backward(dy2d: torch.Tensor, x2d: torch.Tensor, tau: torch.Tensor, plan: TilePlan) -> torch.Tensor:
    n_rows, n_cols = x2d.shape
    dx = torch.empty((n_rows, n_cols), dtype=dy2d.dtype, device=dy2d.device)
    if dx.numel():
        plan.launch(
            _sparsemax_backward_kernel, plan.row_grid(n_rows),
            dy2d, x2d, tau, dx, dy2d.stride(0), x2d.stride(0), dx.stride(0), n_rows, n_cols,
        )  # fmt: skip
    return dx


class SparsemaxKernels:
    """`liger_core.drivers.sparsemax.SparsemaxKernels` on this module's kernels: backward reads the
    input rows and each row's threshold (saved), the state is the tile plan."""

    protocol = sparsemax_driver.PROTOCOL

    @staticmethod
    def forward(x2d: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], TilePlan]:
        plan = plan_softmax_rows(x2d.shape[1])
        y, tau = sparsemax_forward(x2d, plan)
        return y, (x2d, tau), plan

    @staticmethod
    def backward(dy2d: torch.Tensor, saved: tuple[torch.Tensor, torch.Tensor], plan: TilePlan) -> torch.Tensor:
        x2d, tau = saved
        return sparsemax_backward(dy2d, x2d, tau, plan)


LigerSparsemaxFunction = implements("sparsemax")(sparsemax_driver.autograd_function(SparsemaxKernels(), __name__))
