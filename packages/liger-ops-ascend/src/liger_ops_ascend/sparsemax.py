"""Sparsemax for Ascend NPUs: kernels, UB-aware plans and the kernel
adapter of `liger_core.drivers.sparsemax`.

No sort (a per-row sort of a wide row does not fit the UB, and sorting is slow on the vector
cores): the threshold ``tau`` solves ``sum(max(x - tau, 0)) = 1``, a decreasing function
of ``tau`` with the root in ``[max(x) - 1, max(x))``. Bisection narrows it to fp32 resolution,
then a few steps of Michelot's fixed point ``tau = (sum_{x > tau} x - 1) / |{x > tau}|``
(monotone from below, exact once the support is found) make it exact.

Rows tiled by `_tiling.plan_rows`: whole rows in the UB (several short rows per tile) where
they fit, every step then works on the loaded tile; wider rows repeat each step as a pass
over ``BLOCK_N`` chunks. ``dim`` other than the last is moved last (a copy).
Backward: on the support ``S = {y > 0}``, ``dx = dy - mean_S(dy)``, zero elsewhere.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import sparsemax as sparsemax_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import col_tile, row_block, tile_indices
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
def _excess(x, tau):
    """sum(max(x - tau, 0)) per row of the tile."""
    return tl.sum(tl.maximum(x - tau[:, None], 0.0, propagate_nan=tl.PropagateNan.ALL), axis=1)


@triton.jit
def _support_sums(x, tau):
    """(sum of x over {x > tau}, size of that set) per row of the tile."""
    inside = x > tau[:, None]
    return tl.sum(tl.where(inside, x, 0.0), axis=1), tl.sum(inside.to(tl.float32), axis=1)


@triton.jit
def _sparsemax_forward_kernel(
    X, Y, x_row_stride, y_row_stride, n_rows, n_cols, n_blocks, n_chunks,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_PASS: tl.constexpr,
    BISECTION_STEPS: tl.constexpr, REFINE_STEPS: tl.constexpr,
):  # fmt: skip
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    for blk in range(pid, n_blocks, num_programs):
        row0, _, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        x_base = X + row0.to(tl.int64) * x_row_stride + m_idx[:, None] * x_row_stride
        y_base = Y + row0.to(tl.int64) * y_row_stride + m_idx[:, None] * y_row_stride
        if SINGLE_PASS:
            mask = row_mask[:, None] & (n_idx < n_cols)[None, :]
            x = tl.load(x_base + n_idx[None, :], mask=mask, other=-float("inf")).to(tl.float32)
            # Rows past the end (all -inf) get a finite bracket (a float compare); their stores
            # are masked.
            hi = tl.max(x, axis=1)
            hi = tl.where(hi == -float("inf"), 0.0, hi)
            lo = hi - 1.0
            for _ in range(BISECTION_STEPS):
                mid = 0.5 * (lo + hi)
                above = _excess(x, mid) >= 1.0
                lo = tl.where(above, mid, lo)
                hi = tl.where(above, hi, mid)
            tau = lo
            for _ in range(REFINE_STEPS):
                total, count = _support_sums(x, tau)
                tau = tl.where(
                    count > 0, (total - 1.0) / tl.maximum(count, 1.0, propagate_nan=tl.PropagateNan.ALL), tau
                )
            y = tl.maximum(x - tau[:, None], 0.0, propagate_nan=tl.PropagateNan.ALL)
            tl.store(y_base + n_idx[None, :], y.to(Y.dtype.element_ty), mask=mask)
        else:
            hi = tl.full((BLOCK_M,), -float("inf"), tl.float32)
            for c in range(n_chunks):
                cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
                x = tl.load(x_base + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32)
                hi = tl.maximum(hi, tl.max(x, axis=1), propagate_nan=tl.PropagateNan.ALL)
            hi = tl.where(hi == -float("inf"), 0.0, hi)
            lo = hi - 1.0
            for _ in range(BISECTION_STEPS):
                mid = 0.5 * (lo + hi)
                f = tl.zeros((BLOCK_M,), dtype=tl.float32)
                for c in range(n_chunks):
                    cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
                    x = tl.load(x_base + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32)
                    f += _excess(x, mid)
                above = f >= 1.0
                lo = tl.where(above, mid, lo)
                hi = tl.where(above, hi, mid)
            tau = lo
            for _ in range(REFINE_STEPS):
                total = tl.zeros((BLOCK_M,), dtype=tl.float32)
                count = tl.zeros((BLOCK_M,), dtype=tl.float32)
                for c in range(n_chunks):
                    cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
                    x = tl.load(x_base + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32)
                    t, k = _support_sums(x, tau)
                    total += t
                    count += k
                tau = tl.where(
                    count > 0, (total - 1.0) / tl.maximum(count, 1.0, propagate_nan=tl.PropagateNan.ALL), tau
                )
            for c in range(n_chunks):
                cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
                # Padded lanes only reach masked-off stores: no fill.
                x = tl.load(x_base + cols[None, :], mask=mask, care_padding=False).to(tl.float32)
                y = tl.maximum(x - tau[:, None], 0.0, propagate_nan=tl.PropagateNan.ALL)
                tl.store(y_base + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _sparsemax_backward_kernel(
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
            inside = tl.load(y_base + n_idx[None, :], mask=mask, other=0.0).to(tl.float32) > 0.0
            dy = tl.load(dy_base + n_idx[None, :], mask=mask, other=0.0).to(tl.float32)
            count = tl.maximum(tl.sum(inside.to(tl.float32), axis=1), 1.0, propagate_nan=tl.PropagateNan.ALL)
            mean = tl.sum(tl.where(inside, dy, 0.0), axis=1) / count
            dx = tl.where(inside, dy - mean[:, None], 0.0)
            tl.store(dx_base + n_idx[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        else:
            total = tl.zeros((BLOCK_M,), dtype=tl.float32)
            count = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for c in range(n_chunks):
                cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
                inside = tl.load(y_base + cols[None, :], mask=mask, other=0.0).to(tl.float32) > 0.0
                dy = tl.load(dy_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                total += tl.sum(tl.where(inside, dy, 0.0), axis=1)
                count += tl.sum(inside.to(tl.float32), axis=1)
            mean = total / tl.maximum(count, 1.0, propagate_nan=tl.PropagateNan.ALL)
            for c in range(n_chunks):
                cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
                inside = tl.load(y_base + cols[None, :], mask=mask, care_padding=False).to(tl.float32) > 0.0
                dy = tl.load(dy_base + cols[None, :], mask=mask, care_padding=False).to(tl.float32)
                dx = tl.where(inside, dy - mean[:, None], 0.0)
                tl.store(dx_base + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)


# Tiles in the terms of the UB model (ub_model.md).


def forward_tiles(m: int, n: int, xb: int) -> tuple[Tile, ...]:
    # Peak: x in fp32, x - tau and its clipped value (the support's mask reuses one).
    tiles = dma("x", m, n, xb) + dma("y", m, n, xb) + work("f32_", m, n, 3)
    return tuple(tiles + mask(m, n) + rows_f32(("lo", "hi", "mid", "excess", "total", "count", "tau"), m))


def backward_tiles(m: int, n: int, xb: int) -> tuple[Tile, ...]:
    # Peak: dy in fp32, the support's mask and dy inside it.
    tiles = dma("y", m, n, xb) + dma("dy", m, n, xb) + dma("dx", m, n, xb) + work("f32_", m, n, 2)
    tiles += work("inside", m, n, 1, 1)
    return tuple(tiles + mask(m, n) + rows_f32(("total", "count", "mean"), m))


_KERNELS = row_kernels("sparsemax", forward_tiles, backward_tiles)


def plan_tiles(direction: str, n_rows: int, n_cols: int, x_dtype: torch.dtype, hw: hardware.Hardware) -> RowPlan:
    """The tile plan of ``direction`` ("forward" or "backward") for ``(n_rows, n_cols)`` rows."""
    single, chunked = _KERNELS[direction]
    return plan_rows(f"sparsemax {direction}", n_rows, n_cols, single, chunked, hw, {"xb": elem_bytes(x_dtype)})


# -- host side -------------------------------------------------------------------------------


def sparsemax_forward(x2d: torch.Tensor, hw: hardware.Hardware) -> torch.Tensor:
    n_rows, n_cols = x2d.shape
    y = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    if n_rows and n_cols:
        p = plan_tiles("forward", n_rows, n_cols, x2d.dtype, hw)
        launch_rows(
            _sparsemax_forward_kernel, p, hw, (x2d, y),
            BISECTION_STEPS=hardware.SPARSEMAX_BISECTION_STEPS, REFINE_STEPS=hardware.SPARSEMAX_REFINE_STEPS,
        )  # fmt: skip
    return y


def sparsemax_backward(dy2d: torch.Tensor, y: torch.Tensor, hw: hardware.Hardware) -> torch.Tensor:
    n_rows, n_cols = y.shape
    dx = torch.empty((n_rows, n_cols), dtype=y.dtype, device=y.device)
    if n_rows and n_cols:
        launch_rows(_sparsemax_backward_kernel, plan_tiles("backward", n_rows, n_cols, y.dtype, hw), hw, (dy2d, y, dx))
    return dx


class SparsemaxKernels:
    """`liger_core.drivers.sparsemax.SparsemaxKernels` on this module's kernels: backward reads the
    output (saved), the state is the device's hardware facts. Rows get this backend's row-stride
    bound (`as_rows`)."""

    protocol = sparsemax_driver.PROTOCOL

    @staticmethod
    def forward(x2d: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor], hardware.Hardware]:
        hw = hardware.current(x2d.device)
        y = sparsemax_forward(as_rows(x2d), hw)
        return y, (y,), hw

    @staticmethod
    def backward(dy2d: torch.Tensor, saved: tuple[torch.Tensor], hw: hardware.Hardware) -> torch.Tensor:
        return sparsemax_backward(as_rows(dy2d), saved[0], hw)


LigerSparsemaxFunction = implements("sparsemax")(sparsemax_driver.autograd_function(SparsemaxKernels(), __name__))
