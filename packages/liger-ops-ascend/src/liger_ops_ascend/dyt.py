"""DyT (Dynamic Tanh) for Ascend NPUs (``y = gamma * tanh(alpha * x) + beta``):
kernels, UB-aware plans and the kernel adapter of `liger_core.drivers.dyt`.

No row reduction, but per-column parameters: a program walks column chunks (outer loop,
gamma/beta loaded once per chunk) and, inside, its row blocks (grid-stride over row blocks
of ``BLOCK_M`` rows). Tiles from `_tiling.plan_rows`.

Backward: grad_gamma and grad_beta chunks are accumulated in the UB over the program's rows
and written once per chunk to ``(programs, hidden)`` fp32 partials; grad_alpha is one fp32
scalar per program. All summed afterwards: no atomics.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import dyt as dyt_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import row_block, tanh, tile_indices, tile_ptrs
from liger_ops_ascend._tiling import (
    FP32,
    RowPlan,
    as_rows,
    dma,
    dtype_of,
    elem_bytes,
    mask,
    once,
    plan_rows,
    strides_of,
    sum_partials,
    work,
)
from liger_ops_ascend.launch import Tile, launch


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
    n_blocks,
    n_chunks,
    HAS_BETA: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    alpha = tl.load(ALPHA).to(tl.float32)
    for c in range(n_chunks):
        cols = c * BLOCK_N + n_idx
        col_mask = cols < n_cols
        # Elementwise: padded lanes only reach masked-off stores, so no load fills them.
        gamma = tl.load(GAMMA + cols, mask=col_mask, care_padding=False).to(tl.float32)
        if HAS_BETA:
            beta = tl.load(BETA + cols, mask=col_mask, care_padding=False).to(tl.float32)
        for blk in range(pid, n_blocks, num_programs):
            row0, _, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
            mask = row_mask[:, None] & col_mask[None, :]
            base = row0.to(tl.int64)
            xf = tl.load(tile_ptrs(X, base, m_idx, x_row_stride, cols), mask=mask, care_padding=False).to(tl.float32)
            y = gamma[None, :] * tanh(alpha * xf)
            if HAS_BETA:
                y = y + beta[None, :]
            tl.store(tile_ptrs(Y, base, m_idx, y_row_stride, cols), y.to(Y.dtype.element_ty), mask=mask)


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
    n_blocks,
    n_chunks,
    HAS_BETA: tl.constexpr,
    NEED_PARTIAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # Without NEED_PARTIAL (no parameter wants a gradient) only grad_x is computed.
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    alpha = tl.load(ALPHA).to(tl.float32)
    da_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for c in range(n_chunks):
        cols = c * BLOCK_N + n_idx
        col_mask = cols < n_cols
        gamma = tl.load(GAMMA + cols, mask=col_mask, other=0.0).to(tl.float32)
        dg_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        db_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for blk in range(pid, n_blocks, num_programs):
            row0, _, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
            mask = row_mask[:, None] & col_mask[None, :]
            base = row0.to(tl.int64)
            xf = tl.load(tile_ptrs(X, base, m_idx, x_row_stride, cols), mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(tile_ptrs(DY, base, m_idx, dy_row_stride, cols), mask=mask, other=0.0).to(tl.float32)
            t = tanh(alpha * xf)
            # d tanh(z) / dz = 1 - tanh(z)^2; g = dy * gamma * (1 - t^2) = grad of z.
            gz = dy * gamma[None, :] * (1.0 - t * t)
            tl.store(tile_ptrs(DX, base, m_idx, dx_row_stride, cols), (gz * alpha).to(DX.dtype.element_ty), mask=mask)
            if NEED_PARTIAL:
                dg_acc += tl.sum(dy * t, axis=0)
                db_acc += tl.sum(dy, axis=0)
                da_acc += tl.sum(gz * xf, axis=0)
        if NEED_PARTIAL:
            tl.store(DGAMMA_PARTIAL + pid.to(tl.int64) * n_cols + cols, dg_acc, mask=col_mask)
            if HAS_BETA:
                tl.store(DBETA_PARTIAL + pid.to(tl.int64) * n_cols + cols, db_acc, mask=col_mask)
    if NEED_PARTIAL:
        tl.store(DALPHA_PARTIAL + pid, tl.sum(da_acc, axis=0))


# -- tile plans ------------------------------------------------------------------------------


# Tiles in the terms of the UB model (ub_model.md). gamma and beta are loaded per column chunk
# (the outer loop): DMA buffers.


def forward_tiles(m: int, n: int, xb: int, gb: int, bb: int) -> tuple[Tile, ...]:
    tiles = dma("x", m, n, xb) + dma("y", m, n, xb) + dma("gamma", 1, n, gb) + dma("beta", 1, n, bb)
    # Peak: x in fp32, alpha * x, exp and tanh (in place of exp), then y in tanh's place.
    tiles += work("f32_", m, n, 3) + work("params_f32", 1, n, 2 if bb else 1)
    return tuple(tiles + mask(m, n))


def backward_tiles(m: int, n: int, xb: int, gb: int, bb: int) -> tuple[Tile, ...]:
    tiles = dma("x", m, n, xb) + dma("dy", m, n, xb) + dma("dx", m, n, xb) + dma("gamma", 1, n, gb)
    # Peak: x and dy in fp32, tanh, the gradient of z and one product.
    tiles += work("f32_", m, n, 5) + work("gamma_f32", 1, n, 1)
    tiles += [t for name in ("dg_acc", "db_acc", "da_acc") for t in once(name, 1, n, FP32)]
    tiles += work("colsum", 1, n, 1) if m > 1 else []
    return tuple(tiles + mask(m, n))


def plan_tiles(
    direction: str,
    n_rows: int,
    n_cols: int,
    x_dtype: torch.dtype,
    gamma_dtype: torch.dtype,
    beta_dtype: torch.dtype | None,
    hw: hardware.Hardware,
    row_strides: Sequence[tuple[int, int]] | None = None,
) -> RowPlan:
    """The tile plan of ``direction`` ("forward" or "backward") for ``(n_rows, n_cols)`` rows; the
    same kernel serves whole and chunked rows. ``row_strides``: as `plan_rows` takes them."""
    kernels = ((f"dyt_{direction}", forward_tiles if direction == "forward" else backward_tiles),)
    xb = elem_bytes(x_dtype)
    sizes = {"xb": xb, "gb": elem_bytes(gamma_dtype), "bb": elem_bytes(beta_dtype)}
    strides = [(n_cols, xb)] if row_strides is None else row_strides
    return plan_rows(f"dyt {direction}", n_rows, n_cols, kernels, kernels, hw, sizes, strides)


# -- host side -------------------------------------------------------------------------------


def dyt_forward(
    x2d: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None, hw: hardware.Hardware
) -> torch.Tensor:
    n_rows, n_cols = x2d.shape
    y = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    if n_rows == 0 or n_cols == 0:
        return y
    p = plan_tiles("forward", n_rows, n_cols, x2d.dtype, gamma.dtype, dtype_of(beta), hw, strides_of(x2d, y))
    launch(
        _dyt_forward_kernel,
        p.kernels[0],
        hw,
        x2d,
        alpha,
        gamma,
        gamma if beta is None else beta,
        y,
        x2d.stride(0),
        y.stride(0),
        n_rows,
        n_cols,
        p.n_blocks,
        p.n_chunks,
        HAS_BETA=beta is not None,
        BLOCK_M=p.block_m,
        BLOCK_N=p.block_n,
    )
    return y


def dyt_backward(
    dy2d: torch.Tensor,
    x2d: torch.Tensor,
    alpha: torch.Tensor,
    gamma: torch.Tensor,
    beta_dtype: torch.dtype | None,
    hw: hardware.Hardware,
    need_params: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """``(grad_x, grad_alpha, grad_gamma, grad_beta)``; no grad_beta without a beta, and no
    parameter gradient at all without ``need_params`` (their partial sums are then neither
    computed nor allocated; the tile plan stays the one with them, a safe over-estimate)."""
    n_rows, n_cols = x2d.shape
    dx = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    if n_rows == 0 or n_cols == 0:
        if not need_params:
            return dx, None, None, None
        db = None if beta_dtype is None else torch.zeros(n_cols, dtype=beta_dtype, device=x2d.device)
        return dx, torch.zeros_like(alpha), torch.zeros_like(gamma), db
    p = plan_tiles("backward", n_rows, n_cols, x2d.dtype, gamma.dtype, beta_dtype, hw, strides_of(dy2d, x2d, dx))
    if need_params:
        dgamma_part = torch.empty((p.programs, n_cols), dtype=torch.float32, device=x2d.device)
        dbeta_part = dgamma_part if beta_dtype is None else torch.empty_like(dgamma_part)
        dalpha_part = torch.empty(p.programs, dtype=torch.float32, device=x2d.device)
    else:
        dgamma_part = dbeta_part = dalpha_part = dx  # never touched without NEED_PARTIAL
    launch(
        _dyt_backward_kernel,
        p.kernels[0],
        hw,
        dy2d,
        x2d,
        alpha,
        gamma,
        dx,
        dgamma_part,
        dbeta_part,
        dalpha_part,
        dy2d.stride(0),
        x2d.stride(0),
        dx.stride(0),
        n_rows,
        n_cols,
        p.n_blocks,
        p.n_chunks,
        HAS_BETA=beta_dtype is not None,
        NEED_PARTIAL=need_params,
        BLOCK_M=p.block_m,
        BLOCK_N=p.block_n,
    )
    if not need_params:
        return dx, None, None, None
    dalpha = dalpha_part.sum().to(alpha.dtype).reshape(alpha.shape)
    dbeta = None if beta_dtype is None else sum_partials(dbeta_part, beta_dtype)
    return dx, dalpha, sum_partials(dgamma_part, gamma.dtype), dbeta


class DyTKernels:
    """`liger_core.drivers.dyt.DyTKernels` on this module's kernels (the state: the device's
    hardware facts). Rows get this backend's row-stride bound (`as_rows`). When no parameter
    needs a gradient, backward computes grad_x only (as CUDA's does)."""

    protocol = dyt_driver.PROTOCOL

    @staticmethod
    def forward(x2d, alpha, gamma, beta):
        hw = hardware.current(x2d.device)
        return dyt_forward(as_rows(x2d), alpha, gamma, beta, hw), hw

    @staticmethod
    def backward(dy2d, x2d, alpha, gamma, beta, need_param_grads, hw):
        return dyt_backward(as_rows(dy2d), as_rows(x2d), alpha, gamma, dtype_of(beta), hw, need_param_grads)


LigerDyTFunction = implements("dyt")(dyt_driver.autograd_function(DyTKernels(), __name__))
