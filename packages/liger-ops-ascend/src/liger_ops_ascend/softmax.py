"""Softmax over the last dimension for Ascend NPUs: kernels, UB-aware plans and the
kernel adapter of `liger_core.drivers.softmax`.

Rows tiled by `_tiling.plan_rows`: whole rows (several short rows per tile) when a row fits the
UB, computed in one load; wider rows in ``BLOCK_N`` chunks: an online pass for the running max
and sum of exponentials, then a normalising pass. Backward ``dx = y * (dy - sum(dy * y))``:
one pass for whole rows, two for chunked ones. One program per vector core walking row blocks.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import softmax as softmax_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import col_tile, online_lse_step, row_block, tile_indices
from liger_ops_ascend._tiling import (
    RowPlan,
    as_rows,
    dma,
    elem_bytes,
    launch_rows,
    mask,
    plan_rows,
    row_kernels,
    rows_f32,
    work,
)
from liger_ops_ascend.launch import Tile


@triton.jit
def _softmax_forward_kernel(
    X, Y, x_row_stride, y_row_stride, n_rows, n_cols, n_blocks, n_chunks,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_PASS: tl.constexpr,
):  # fmt: skip
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    for blk in range(pid, n_blocks, num_programs):
        row0, _, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        x_base = X + row0.to(tl.int64) * x_row_stride + m_idx[:, None] * x_row_stride
        y_base = Y + row0.to(tl.int64) * y_row_stride + m_idx[:, None] * y_row_stride
        if SINGLE_PASS:
            mask = row_mask[:, None] & (n_idx < n_cols)[None, :]
            x = tl.load(x_base + n_idx[None, :], mask=mask, other=-float("inf")).to(tl.float32)
            # Rows past the end are all -inf: a finite max and a unit sum keep them NaN-free.
            mx = tl.max(x, axis=1)
            e = tl.exp(x - tl.where(mx == -float("inf"), 0.0, mx)[:, None])
            total = tl.sum(e, axis=1)
            y = e / tl.where(total > 0.0, total, 1.0)[:, None]
            tl.store(y_base + n_idx[None, :], y.to(Y.dtype.element_ty), mask=mask)
        else:
            run_max = tl.full((BLOCK_M,), -float("inf"), tl.float32)
            run_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for c in range(n_chunks):
                cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
                x = tl.load(x_base + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32)
                run_max, run_sum = online_lse_step(run_max, run_sum, x)
            safe = tl.where(run_max == -float("inf"), 0.0, run_max)
            for c in range(n_chunks):
                cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
                # Padded lanes only reach masked-off stores: no fill.
                x = tl.load(x_base + cols[None, :], mask=mask, care_padding=False).to(tl.float32)
                y = tl.exp(x - safe[:, None]) / run_sum[:, None]
                tl.store(y_base + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_backward_kernel(
    DY, Y, DX, dy_row_stride, y_row_stride, dx_row_stride, n_rows, n_cols, n_blocks, n_chunks,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_PASS: tl.constexpr,
):  # fmt: skip
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    for blk in range(pid, n_blocks, num_programs):
        row0, _, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        base = row0.to(tl.int64)
        dy_base = DY + base * dy_row_stride + m_idx[:, None] * dy_row_stride
        y_base = Y + base * y_row_stride + m_idx[:, None] * y_row_stride
        dx_base = DX + base * dx_row_stride + m_idx[:, None] * dx_row_stride
        if SINGLE_PASS:
            mask = row_mask[:, None] & (n_idx < n_cols)[None, :]
            y = tl.load(y_base + n_idx[None, :], mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_base + n_idx[None, :], mask=mask, other=0.0).to(tl.float32)
            dot = tl.sum(dy * y, axis=1)
            tl.store(dx_base + n_idx[None, :], (y * (dy - dot[:, None])).to(DX.dtype.element_ty), mask=mask)
        else:
            dot = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for c in range(n_chunks):
                cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
                y = tl.load(y_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                dot += tl.sum(dy * y, axis=1)
            for c in range(n_chunks):
                cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
                y = tl.load(y_base + cols[None, :], mask=mask, care_padding=False).to(tl.float32)
                dy = tl.load(dy_base + cols[None, :], mask=mask, care_padding=False).to(tl.float32)
                tl.store(dx_base + cols[None, :], (y * (dy - dot[:, None])).to(DX.dtype.element_ty), mask=mask)


# Tiles in the terms of the UB model (ub_model.md).


def forward_tiles(m: int, n: int, xb: int) -> tuple[Tile, ...]:
    # Peak: x in fp32 and exp(x - max) (y takes x's place).
    tiles = dma("x", m, n, xb) + dma("y", m, n, xb) + work("f32_", m, n, 2)
    return tuple(tiles + mask(m, n) + rows_f32(("max", "max_new", "sum", "rescale"), m))


def backward_tiles(m: int, n: int, xb: int) -> tuple[Tile, ...]:
    # Peak: y and dy in fp32 and their product.
    tiles = dma("y", m, n, xb) + dma("dy", m, n, xb) + dma("dx", m, n, xb) + work("f32_", m, n, 3)
    return tuple(tiles + mask(m, n) + rows_f32(("dot",), m))


_KERNELS = row_kernels("softmax", forward_tiles, backward_tiles)


def plan_tiles(direction: str, n_rows: int, n_cols: int, x_dtype: torch.dtype, hw: hardware.Hardware) -> RowPlan:
    """The tile plan of ``direction`` ("forward" or "backward") for ``(n_rows, n_cols)`` rows."""
    single, chunked = _KERNELS[direction]
    return plan_rows(f"softmax {direction}", n_rows, n_cols, single, chunked, hw, {"xb": elem_bytes(x_dtype)})


# -- host side -------------------------------------------------------------------------------


def softmax_forward(x2d: torch.Tensor, hw: hardware.Hardware) -> torch.Tensor:
    n_rows, n_cols = x2d.shape
    y = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    if n_rows and n_cols:
        launch_rows(_softmax_forward_kernel, plan_tiles("forward", n_rows, n_cols, x2d.dtype, hw), hw, (x2d, y))
    return y


def softmax_backward(dy2d: torch.Tensor, y: torch.Tensor, hw: hardware.Hardware) -> torch.Tensor:
    n_rows, n_cols = y.shape
    dx = torch.empty((n_rows, n_cols), dtype=y.dtype, device=y.device)
    if n_rows and n_cols:
        launch_rows(_softmax_backward_kernel, plan_tiles("backward", n_rows, n_cols, y.dtype, hw), hw, (dy2d, y, dx))
    return dx


class SoftmaxKernels:
    """`liger_core.drivers.softmax.SoftmaxKernels` on this module's kernels (the state: the
    device's hardware facts). Rows get this backend's row-stride bound (`as_rows`)."""

    protocol = softmax_driver.PROTOCOL

    @staticmethod
    def forward(x2d: torch.Tensor) -> tuple[torch.Tensor, hardware.Hardware]:
        hw = hardware.current(x2d.device)
        return softmax_forward(as_rows(x2d), hw), hw

    @staticmethod
    def backward(dy2d: torch.Tensor, y: torch.Tensor, hw: hardware.Hardware) -> torch.Tensor:
        return softmax_backward(as_rows(dy2d), y, hw)


LigerSoftmaxFunction = implements("softmax")(softmax_driver.autograd_function(SoftmaxKernels(), __name__))
