"""Softmax over the last dimension for NVIDIA GPUs: Triton kernels, tile plan and
the kernel adapter of `liger_core.drivers.softmax`.

Rows up to SOFTMAX_MAX_FUSED_BLOCK wide are held whole in registers (several short rows per
tile): one read, one write. Wider rows stream in chunks: one pass keeps a running max and
rescaled sum (online softmax), a second writes the result. Backward: ``grad_x = y * (dy -
sum(dy * y))`` from the saved output, fused or chunked the same way.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import softmax as softmax_driver
from liger_ops_cuda._jit import row_tile
from liger_ops_cuda._tiling import TilePlan, plan_softmax_rows


@triton.jit
def _softmax_forward_kernel(
    X, Y, x_row_stride, y_row_stride, n_rows, n_cols,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKED: tl.constexpr,
):  # fmt: skip
    rows, row_mask, rows64 = row_tile(tl.program_id(0) * BLOCK_M, n_rows, BLOCK_M)
    x_rows = X + rows64 * x_row_stride
    y_rows = Y + rows64 * y_row_stride
    cols = tl.arange(0, BLOCK_N)
    if CHUNKED:
        run_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
        run_sum = tl.zeros((BLOCK_M,), tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_mask[:, None] & (c < n_cols)[None, :]
            x = tl.load(x_rows + c[None, :], mask=mask, other=float("-inf")).to(tl.float32)
            x = tl.where(row_mask[:, None], x, 0.0)  # padding rows stay finite
            new_max = tl.maximum(run_max, tl.max(x, axis=1))
            # A row still all -inf so far keeps sum 0 (avoid inf - inf).
            safe = tl.where(new_max == float("-inf"), 0.0, new_max)
            run_sum = run_sum * tl.exp(run_max - safe) + tl.sum(tl.exp(x - safe[:, None]), axis=1)
            run_max = new_max
        safe = tl.where(run_max == float("-inf"), 0.0, run_max)
        inv = 1.0 / run_sum
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_mask[:, None] & (c < n_cols)[None, :]
            x = tl.load(x_rows + c[None, :], mask=mask, other=float("-inf")).to(tl.float32)
            y = tl.exp(x - safe[:, None]) * inv[:, None]
            tl.store(y_rows + c[None, :], y.to(Y.dtype.element_ty), mask=mask)
    else:
        mask = row_mask[:, None] & (cols < n_cols)[None, :]
        x = tl.load(x_rows + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        x = tl.where(row_mask[:, None], x, 0.0)  # padding rows stay finite
        e = tl.exp(x - tl.max(x, axis=1)[:, None])
        y = e / tl.sum(e, axis=1)[:, None]
        tl.store(y_rows + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_backward_kernel(
    DY, Y, DX, dy_row_stride, y_row_stride, dx_row_stride, n_rows, n_cols,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKED: tl.constexpr,
):  # fmt: skip
    rows, row_mask, rows64 = row_tile(tl.program_id(0) * BLOCK_M, n_rows, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    if CHUNKED:
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_mask[:, None] & (c < n_cols)[None, :]
            dy = tl.load(DY + rows64 * dy_row_stride + c[None, :], mask=mask, other=0.0).to(tl.float32)
            y = tl.load(Y + rows64 * y_row_stride + c[None, :], mask=mask, other=0.0).to(tl.float32)
            acc += dy * y
        dot = tl.sum(acc, axis=1)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_mask[:, None] & (c < n_cols)[None, :]
            dy = tl.load(DY + rows64 * dy_row_stride + c[None, :], mask=mask, other=0.0).to(tl.float32)
            y = tl.load(Y + rows64 * y_row_stride + c[None, :], mask=mask, other=0.0).to(tl.float32)
            tl.store(
                DX + rows64 * dx_row_stride + c[None, :], (y * (dy - dot[:, None])).to(DX.dtype.element_ty), mask=mask
            )
    else:
        mask = row_mask[:, None] & (cols < n_cols)[None, :]
        dy = tl.load(DY + rows64 * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        y = tl.load(Y + rows64 * y_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dot = tl.sum(dy * y, axis=1)
        tl.store(
            DX + rows64 * dx_row_stride + cols[None, :], (y * (dy - dot[:, None])).to(DX.dtype.element_ty), mask=mask
        )


def softmax_forward(x2d: torch.Tensor, plan: TilePlan) -> torch.Tensor:
    n_rows, n_cols = x2d.shape
    y = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    if y.numel():
        plan.launch(_softmax_forward_kernel, plan.row_grid(n_rows), x2d, y, x2d.stride(0), y.stride(0), n_rows, n_cols)
    return y


def softmax_backward(dy2d: torch.Tensor, y: torch.Tensor, plan: TilePlan) -> torch.Tensor:
    n_rows, n_cols = y.shape
    dx = torch.empty_like(y)
    if dx.numel():
        plan.launch(
            _softmax_backward_kernel, plan.row_grid(n_rows),
            dy2d, y, dx, dy2d.stride(0), y.stride(0), dx.stride(0), n_rows, n_cols,
        )  # fmt: skip
    return dx


class SoftmaxKernels:
    """`liger_core.drivers.softmax.SoftmaxKernels` on this module's kernels (the state: the tile plan)."""

    protocol = softmax_driver.PROTOCOL

    @staticmethod
    def forward(x2d: torch.Tensor) -> tuple[torch.Tensor, TilePlan]:
        plan = plan_softmax_rows(x2d.shape[1])
        return softmax_forward(x2d, plan), plan

    @staticmethod
    def backward(dy2d: torch.Tensor, y: torch.Tensor, plan: TilePlan) -> torch.Tensor:
        return softmax_backward(dy2d, y, plan)


LigerSoftmaxFunction = implements("softmax")(softmax_driver.autograd_function(SoftmaxKernels(), __name__))
