"""Softmax over the last dimension for NVIDIA GPUs: Triton kernels, tile plan, autograd Function.

Rows up to SOFTMAX_MAX_FUSED_BLOCK wide are held whole in registers (several short rows per
tile): one read, one write. Wider rows stream in chunks: one pass keeps a running max and
rescaled sum (online softmax), a second writes the result. Backward: ``grad_x = y * (dy -
sum(dy * y))`` from the saved output, fused or chunked the same way.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from liger_core.ops.softmax import check_args
from liger_ops_cuda import hardware


@triton.jit
def _softmax_forward_kernel(
    X, Y, x_row_stride, y_row_stride, n_rows, n_cols,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKED: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    x_base = X + rows.to(tl.int64)[:, None] * x_row_stride
    y_base = Y + rows.to(tl.int64)[:, None] * y_row_stride
    cols = tl.arange(0, BLOCK_N)
    if CHUNKED:
        run_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
        run_sum = tl.zeros((BLOCK_M,), tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            m = row_mask[:, None] & (c < n_cols)[None, :]
            x = tl.load(x_base + c[None, :], mask=m, other=float("-inf")).to(tl.float32)
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
            m = row_mask[:, None] & (c < n_cols)[None, :]
            x = tl.load(x_base + c[None, :], mask=m, other=float("-inf")).to(tl.float32)
            y = tl.exp(x - safe[:, None]) * inv[:, None]
            tl.store(y_base + c[None, :], y.to(Y.dtype.element_ty), mask=m)
    else:
        m = row_mask[:, None] & (cols < n_cols)[None, :]
        x = tl.load(x_base + cols[None, :], mask=m, other=float("-inf")).to(tl.float32)
        x = tl.where(row_mask[:, None], x, 0.0)  # padding rows stay finite
        e = tl.exp(x - tl.max(x, axis=1)[:, None])
        y = e / tl.sum(e, axis=1)[:, None]
        tl.store(y_base + cols[None, :], y.to(Y.dtype.element_ty), mask=m)


@triton.jit
def _softmax_backward_kernel(
    DY, Y, DX, dy_row_stride, y_row_stride, dx_row_stride, n_rows, n_cols,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKED: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    r64 = rows.to(tl.int64)[:, None]
    cols = tl.arange(0, BLOCK_N)
    if CHUNKED:
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            m = row_mask[:, None] & (c < n_cols)[None, :]
            dy = tl.load(DY + r64 * dy_row_stride + c[None, :], mask=m, other=0.0).to(tl.float32)
            y = tl.load(Y + r64 * y_row_stride + c[None, :], mask=m, other=0.0).to(tl.float32)
            acc += dy * y
        dot = tl.sum(acc, axis=1)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            m = row_mask[:, None] & (c < n_cols)[None, :]
            dy = tl.load(DY + r64 * dy_row_stride + c[None, :], mask=m, other=0.0).to(tl.float32)
            y = tl.load(Y + r64 * y_row_stride + c[None, :], mask=m, other=0.0).to(tl.float32)
            tl.store(DX + r64 * dx_row_stride + c[None, :], (y * (dy - dot[:, None])).to(DX.dtype.element_ty), mask=m)
    else:
        m = row_mask[:, None] & (cols < n_cols)[None, :]
        dy = tl.load(DY + r64 * dy_row_stride + cols[None, :], mask=m, other=0.0).to(tl.float32)
        y = tl.load(Y + r64 * y_row_stride + cols[None, :], mask=m, other=0.0).to(tl.float32)
        dot = tl.sum(dy * y, axis=1)
        tl.store(DX + r64 * dx_row_stride + cols[None, :], (y * (dy - dot[:, None])).to(DX.dtype.element_ty), mask=m)


@dataclass(frozen=True)
class RowPlan:
    block_m: int
    block_n: int
    chunked: bool
    num_warps: int


@functools.lru_cache(maxsize=256)
def _plan(n_cols, max_fused, chunk, tile_elements, per_warp) -> RowPlan:
    block_n = triton.next_power_of_2(max(n_cols, 1))
    if block_n > max_fused:
        chunk = min(chunk, max_fused)
        return RowPlan(1, chunk, True, hardware.num_warps_for(chunk, per_warp))
    block_m = max(1, min(tile_elements // block_n, 64))
    return RowPlan(block_m, block_n, False, hardware.num_warps_for(block_m * block_n, per_warp))


def plan_rows(n_cols: int) -> RowPlan:
    """Whole rows (several when short) in one tile, or chunks for rows wider than the fused cap;
    shared by softmax and sparsemax."""
    return _plan(
        n_cols,
        hardware.SOFTMAX_MAX_FUSED_BLOCK,
        hardware.SOFTMAX_CHUNK_BLOCK,
        hardware.SOFTMAX_TILE_ELEMENTS,
        hardware.SOFTMAX_ELEMENTS_PER_WARP,
    )


def as_rows(x: torch.Tensor) -> torch.Tensor:
    """``(-1, n)`` view with unit column stride (a copy only when needed)."""
    x2d = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
    return x2d if x2d.stride(-1) == 1 or x2d.shape[-1] <= 1 else x2d.contiguous()


class LigerSoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        check_args(x)
        x2d = as_rows(x)
        n_rows, n_cols = x2d.shape
        y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
        plan = plan_rows(n_cols)
        if y.numel():
            _softmax_forward_kernel[(triton.cdiv(n_rows, plan.block_m),)](
                x2d, y, x2d.stride(0), y.stride(0), n_rows, n_cols,
                BLOCK_M=plan.block_m, BLOCK_N=plan.block_n, CHUNKED=plan.chunked, num_warps=plan.num_warps,
            )  # fmt: skip
        ctx.save_for_backward(y)
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        dy2d = as_rows(dy)
        n_rows, n_cols = y.shape
        dx = torch.empty_like(y)
        plan = plan_rows(n_cols)
        if dx.numel():
            _softmax_backward_kernel[(triton.cdiv(n_rows, plan.block_m),)](
                dy2d, y, dx, dy2d.stride(0), y.stride(0), dx.stride(0), n_rows, n_cols,
                BLOCK_M=plan.block_m, BLOCK_N=plan.block_n, CHUNKED=plan.chunked, num_warps=plan.num_warps,
            )  # fmt: skip
        return dx.view(dy.shape)


def softmax(x: torch.Tensor) -> torch.Tensor:
    # Arguments are checked inside the Function, so calling it directly is just as safe.
    return LigerSoftmaxFunction.apply(x)
