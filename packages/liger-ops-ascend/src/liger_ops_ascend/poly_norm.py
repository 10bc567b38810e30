"""PolyNorm for Ascend NPUs: triton-ascend kernels, UB-aware tile plans and the kernel adapter of
`liger_core.drivers.poly_norm`.

``y = w0 * n(x^3) + w1 * n(x^2) + w2 * n(x) + b`` with ``n(u) = u * rsqrt(mean(u^2) + eps)``:
three reciprocal RMS per row (of x, x^2, x^3), saved for the backward.

Tiling as in rms_norm (`_tiling.plan_rows`): whole rows per tile (several short rows at
once, one load each) when a row fits the UB, else two passes over ``BLOCK_N``-wide chunks.

Backward: with ``a_k = mean(dy * n_k)`` per row, ``grad_u_k = w_k * r_k * (dy - n_k * a_k)``
and ``grad_x = sum_k grad_u_k * k * x^(k-1)``. The weight gradients are ``sum_rows hidden * a_k``
and the bias gradient ``sum dy``: four fp32 scalars per program, accumulated over its rows
and summed afterwards (no atomics).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import poly_norm as poly_norm_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import col_tile, row_block, tile_indices
from liger_ops_ascend._tiling import (
    FP32,
    RowPlan,
    as_rows,
    dma,
    elem_bytes,
    mask,
    plan_rows,
    row_kernels,
    rows_f32,
    strides_of,
    work,
)
from liger_ops_ascend.launch import Tile, launch


@triton.jit
def _weights(W):
    """The three weights ``(w0, w1, w2)`` of x^3, x^2 and x, in fp32."""
    return tl.load(W).to(tl.float32), tl.load(W + 1).to(tl.float32), tl.load(W + 2).to(tl.float32)


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
    n_blocks,
    n_chunks,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
):
    """RSTD[:, row] = (r1, r2, r3), the reciprocal RMS of x, x^2 and x^3."""
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    w0, w1, w2 = _weights(W)
    bias = tl.load(B).to(tl.float32)
    for blk in range(pid, n_blocks, num_programs):
        row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        x_base = X + row0.to(tl.int64) * x_row_stride + m_idx[:, None] * x_row_stride
        y_base = Y + row0.to(tl.int64) * y_row_stride + m_idx[:, None] * y_row_stride
        if SINGLE_PASS:
            # The whole row is one tile: one load, kept in the UB for both steps.
            mask = row_mask[:, None] & (n_idx < n_cols)[None, :]
            xf = tl.load(x_base + n_idx[None, :], mask=mask, other=0.0).to(tl.float32)
            x2 = xf * xf
            r1 = tl.math.rsqrt(tl.sum(x2, axis=1) / n_cols + eps)
            r2 = tl.math.rsqrt(tl.sum(x2 * x2, axis=1) / n_cols + eps)
            r3 = tl.math.rsqrt(tl.sum(x2 * x2 * x2, axis=1) / n_cols + eps)
            y = (w0 * r3)[:, None] * (x2 * xf) + (w1 * r2)[:, None] * x2 + (w2 * r1)[:, None] * xf + bias
            tl.store(y_base + n_idx[None, :], y.to(Y.dtype.element_ty), mask=mask)
        else:
            s2 = tl.zeros((BLOCK_M,), dtype=tl.float32)
            s4 = tl.zeros((BLOCK_M,), dtype=tl.float32)
            s6 = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for c in range(n_chunks):
                cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
                xf = tl.load(x_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                x2 = xf * xf
                s2 += tl.sum(x2, axis=1)
                s4 += tl.sum(x2 * x2, axis=1)
                s6 += tl.sum(x2 * x2 * x2, axis=1)
            r1 = tl.math.rsqrt(s2 / n_cols + eps)
            r2 = tl.math.rsqrt(s4 / n_cols + eps)
            r3 = tl.math.rsqrt(s6 / n_cols + eps)
            for c in range(n_chunks):
                cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
                xf = tl.load(x_base + cols[None, :], mask=mask, care_padding=False).to(tl.float32)
                x2 = xf * xf
                y = (w0 * r3)[:, None] * (x2 * xf) + (w1 * r2)[:, None] * x2 + (w2 * r1)[:, None] * xf + bias
                tl.store(y_base + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
        # RSTD is (3, n_rows): each coefficient's rows are contiguous (one DMA each).
        tl.store(RSTD + rows, r1, mask=row_mask)
        tl.store(RSTD + n_rows + rows, r2, mask=row_mask)
        tl.store(RSTD + n_rows + n_rows + rows, r3, mask=row_mask)


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
    n_blocks,
    n_chunks,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
):
    """PARTIAL[pid] = (grad_w0, grad_w1, grad_w2, grad_b) over the program's rows."""
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    w0, w1, w2 = _weights(W)
    acc1 = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc_b = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for blk in range(pid, n_blocks, num_programs):
        row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        base = row0.to(tl.int64)
        x_base = X + base * x_row_stride + m_idx[:, None] * x_row_stride
        dy_base = DY + base * dy_row_stride + m_idx[:, None] * dy_row_stride
        dx_base = DX + base * dx_row_stride + m_idx[:, None] * dx_row_stride
        r1 = tl.load(RSTD + rows, mask=row_mask, other=0.0)
        r2 = tl.load(RSTD + n_rows + rows, mask=row_mask, other=0.0)
        r3 = tl.load(RSTD + n_rows + n_rows + rows, mask=row_mask, other=0.0)
        if SINGLE_PASS:
            mask = row_mask[:, None] & (n_idx < n_cols)[None, :]
            xf = tl.load(x_base + n_idx[None, :], mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_base + n_idx[None, :], mask=mask, other=0.0).to(tl.float32)
            x2 = xf * xf
            dyx = dy * xf
            d0 = tl.sum(dy, axis=1)
            a1 = tl.sum(dyx, axis=1) * r1 / n_cols
            a2 = tl.sum(dyx * xf, axis=1) * r2 / n_cols
            a3 = tl.sum(dyx * x2, axis=1) * r3 / n_cols
            g1 = (w2 * r1)[:, None] * (dy - (xf * r1[:, None]) * a1[:, None])
            g2 = (w1 * r2)[:, None] * (dy - (x2 * r2[:, None]) * a2[:, None])
            g3 = (w0 * r3)[:, None] * (dy - (x2 * xf * r3[:, None]) * a3[:, None])
            dx = g1 + 2.0 * xf * g2 + 3.0 * x2 * g3
            tl.store(dx_base + n_idx[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        else:
            # Pass 1: sum(dy * u_k) per row (n_k = u_k * r_k) and sum(dy).
            d1 = tl.zeros((BLOCK_M,), dtype=tl.float32)
            d2 = tl.zeros((BLOCK_M,), dtype=tl.float32)
            d3 = tl.zeros((BLOCK_M,), dtype=tl.float32)
            d0 = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for c in range(n_chunks):
                cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
                xf = tl.load(x_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                dyx = dy * xf
                d0 += tl.sum(dy, axis=1)
                d1 += tl.sum(dyx, axis=1)
                d2 += tl.sum(dyx * xf, axis=1)
                d3 += tl.sum(dyx * xf * xf, axis=1)
            a1 = d1 * r1 / n_cols
            a2 = d2 * r2 / n_cols
            a3 = d3 * r3 / n_cols
            # Pass 2: grad_x.
            for c in range(n_chunks):
                cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
                xf = tl.load(x_base + cols[None, :], mask=mask, care_padding=False).to(tl.float32)
                dy = tl.load(dy_base + cols[None, :], mask=mask, care_padding=False).to(tl.float32)
                x2 = xf * xf
                g1 = (w2 * r1)[:, None] * (dy - (xf * r1[:, None]) * a1[:, None])
                g2 = (w1 * r2)[:, None] * (dy - (x2 * r2[:, None]) * a2[:, None])
                g3 = (w0 * r3)[:, None] * (dy - (x2 * xf * r3[:, None]) * a3[:, None])
                dx = g1 + 2.0 * xf * g2 + 3.0 * x2 * g3
                tl.store(dx_base + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        acc1 += a1 * n_cols
        acc2 += a2 * n_cols
        acc3 += a3 * n_cols
        acc_b += d0
    tl.store(PARTIAL + pid * 4, tl.sum(acc3, axis=0))
    tl.store(PARTIAL + pid * 4 + 1, tl.sum(acc2, axis=0))
    tl.store(PARTIAL + pid * 4 + 2, tl.sum(acc1, axis=0))
    tl.store(PARTIAL + pid * 4 + 3, tl.sum(acc_b, axis=0))


# -- tile plans ------------------------------------------------------------------------------


# Tiles in the terms of the UB model (ub_model.md).


def forward_tiles(m: int, n: int, xb: int) -> tuple[Tile, ...]:
    tiles = dma("x", m, n, xb) + dma("y", m, n, xb) + [t for k in "123" for t in dma(f"r{k}", 1, m, FP32)]
    # Peak: x in fp32, x^2, a power of it and one product (y takes a dead buffer).
    tiles += work("f32_", m, n, 4)
    return tuple(tiles + mask(m, n) + rows_f32(("s2", "s4", "s6", "r1_f32", "r2_f32", "r3_f32"), m))


def backward_tiles(m: int, n: int, xb: int) -> tuple[Tile, ...]:
    tiles = dma("x", m, n, xb) + dma("dy", m, n, xb) + dma("dx", m, n, xb)
    tiles += [t for k in "123" for t in dma(f"r{k}", 1, m, FP32)]
    # Peak: x and dy in fp32, x^2, dy * x, one g_k and dx.
    tiles += work("f32_", m, n, 6)
    rows = [f"row_{t}" for t in ("r1", "r2", "r3", "d0", "d1", "d2", "d3", "a1", "a2", "a3")]
    return tuple(tiles + mask(m, n) + rows_f32(rows + [f"acc_{t}" for t in "123b"], m))


_KERNELS = row_kernels("poly_norm", forward_tiles, backward_tiles)


def plan_tiles(
    direction: str,
    n_rows: int,
    n_cols: int,
    x_dtype: torch.dtype,
    hw: hardware.Hardware,
    row_strides: Sequence[tuple[int, int]] | None = None,
) -> RowPlan:
    """The tile plan of ``direction`` ("forward" or "backward") for ``(n_rows, n_cols)`` rows;
    ``row_strides`` as `plan_rows` takes them (default dense)."""
    single, chunked = _KERNELS[direction]
    return plan_rows(
        f"poly_norm {direction}", n_rows, n_cols, single, chunked, hw, {"xb": elem_bytes(x_dtype)}, row_strides
    )


# -- host side -------------------------------------------------------------------------------


def poly_norm_forward(
    x2d: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, hw: hardware.Hardware
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, rstd)``, rstd ``(3, n_rows)``: the reciprocal RMS of x, x^2 and x^3 per row."""
    n_rows, n_cols = x2d.shape
    y = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    rstd = torch.empty((3, n_rows), dtype=torch.float32, device=x2d.device)
    if n_rows == 0 or n_cols == 0:
        return y, rstd
    p = plan_tiles("forward", n_rows, n_cols, x2d.dtype, hw, strides_of(x2d, y))
    launch(
        _poly_norm_forward_kernel,
        p.kernels[0],
        hw,
        x2d,
        weight,
        bias,
        y,
        rstd,
        x2d.stride(0),
        y.stride(0),
        n_rows,
        n_cols,
        p.n_blocks,
        p.n_chunks,
        eps,
        BLOCK_M=p.block_m,
        BLOCK_N=p.block_n,
        SINGLE_PASS=not p.chunked,
    )
    return y, rstd


def poly_norm_backward(
    dy2d: torch.Tensor,
    x2d: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    rstd: torch.Tensor,
    dx: torch.Tensor,
    hw: hardware.Hardware,
) -> tuple[torch.Tensor, torch.Tensor]:
    """grad_x into ``dx``; returns ``(grad_weight, grad_bias)``."""
    dy2d, x2d = as_rows(dy2d), as_rows(x2d)  # row strides the int32 tile offsets hold
    n_rows, n_cols = x2d.shape
    if n_rows == 0 or n_cols == 0:
        return torch.zeros_like(weight), torch.zeros_like(bias)
    p = plan_tiles("backward", n_rows, n_cols, x2d.dtype, hw, strides_of(dy2d, x2d, dx))
    partial = torch.empty((p.programs, 4), dtype=torch.float32, device=x2d.device)
    launch(
        _poly_norm_backward_kernel,
        p.kernels[0],
        hw,
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
        p.n_blocks,
        p.n_chunks,
        BLOCK_M=p.block_m,
        BLOCK_N=p.block_n,
        SINGLE_PASS=not p.chunked,
    )
    # Second stage: the per-program partials summed.
    sums = partial.sum(0)
    return sums[:3].to(weight.dtype), sums[3:].to(bias.dtype).reshape(bias.shape)


class PolyNormKernels:
    """`liger_core.drivers.poly_norm.PolyNormKernels` on this module's kernels; the device's
    facts (`hardware.current`), read once in the forward, are the backward's ``state``. Rows
    whose stride the int32 tile offsets cannot hold are copied first (`_tiling.as_rows`)."""

    protocol = poly_norm_driver.PROTOCOL

    @staticmethod
    def forward(x2d, weight, bias, eps):
        hw = hardware.current(x2d.device)
        y, rstd = poly_norm_forward(as_rows(x2d), weight, bias, eps, hw)
        return y, rstd, hw

    @staticmethod
    def backward(dy2d, x2d, weight, bias, rstd, dx, state):
        return poly_norm_backward(dy2d, x2d, weight, bias, rstd, dx, state)


LigerPolyNormFunction = implements("poly_norm")(poly_norm_driver.autograd_function(PolyNormKernels(), __name__))
