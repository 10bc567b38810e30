"""Dynamic Tanh for NVIDIA GPUs: Triton kernels, launch plan and the kernel
adapter of `liger_core.drivers.dyt`.

y = gamma * tanh(alpha * x) + beta, elementwise in fp32. Forward: 2-D tiles of rows x
columns (one read of x, one write of y). Backward: a persistent grid of row groups x column
blocks (about one program per SM in all); each program walks its rows for its columns,
writes grad_x and keeps grad_gamma / grad_beta columns and a grad_alpha scalar in fp32
registers; the per-program partials are summed at the end (no atomics).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import dyt as dyt_driver
from liger_ops_cuda import hardware
from liger_ops_cuda._jit import tanh
from liger_ops_cuda._tiling import sum_partials


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
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    mask = (rows < n_rows)[:, None] & col_mask[None, :]
    rows64 = rows.to(tl.int64)[:, None]
    alpha = tl.load(ALPHA).to(tl.float32)
    x = tl.load(X + rows64 * x_row_stride + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
    y = tl.load(GAMMA + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :] * tanh(alpha * x.to(tl.float32))
    if HAS_BETA:
        y = y + tl.load(BETA + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    tl.store(Y + rows64 * y_row_stride + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _dyt_backward_kernel(
    DY,
    X,
    ALPHA,
    GAMMA,
    DX,
    PARTIAL,
    ALPHA_PARTIAL,
    dy_row_stride,
    x_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    rows_per_program,
    NEED_PARTIAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # PARTIAL: one fp32 row per row group, [grad_gamma (n_cols) | grad_beta (n_cols)];
    # ALPHA_PARTIAL: one fp32 per program.
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    row_start = pid_r * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    cols = pid_c * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    alpha = tl.load(ALPHA).to(tl.float32)
    gamma = tl.load(GAMMA + cols, mask=col_mask, other=0.0).to(tl.float32)
    dg_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    db_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    da_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for block_start in range(row_start, row_end, BLOCK_M):
        rows = block_start + tl.arange(0, BLOCK_M)
        mask = (rows < row_end)[:, None] & col_mask[None, :]
        rows64 = rows.to(tl.int64)[:, None]
        x = tl.load(X + rows64 * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + rows64 * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        t = tanh(alpha * x)
        # d tanh(alpha x) = (1 - t^2) d(alpha x); masked lanes have dy = 0.
        gd = dy * gamma[None, :] * (1.0 - t * t)
        tl.store(DX + rows64 * dx_row_stride + cols[None, :], (gd * alpha).to(DX.dtype.element_ty), mask=mask)
        if NEED_PARTIAL:
            da_acc += tl.sum(gd * x, axis=0)
            dg_acc += tl.sum(dy * t, axis=0)
            db_acc += tl.sum(dy, axis=0)
    if NEED_PARTIAL:
        base = PARTIAL + pid_r.to(tl.int64) * (2 * n_cols)
        tl.store(base + cols, dg_acc, mask=col_mask)
        tl.store(base + n_cols + cols, db_acc, mask=col_mask)
        tl.store(ALPHA_PARTIAL + pid_r * tl.num_programs(1) + pid_c, tl.sum(da_acc, axis=0))


def plan_dyt(n_cols: int, tile_elements: int, max_block_n: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps): whole short rows, several per tile; wide rows in column blocks."""
    block_n = min(triton.next_power_of_2(max(n_cols, 1)), max_block_n)
    block_m = max(1, min(tile_elements // block_n, 64))
    return block_m, block_n, hardware.num_warps_for(block_m * block_n, hardware.FORWARD_ELEMENTS_PER_WARP)


def dyt_forward(x2d: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None) -> torch.Tensor:
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    if n_rows == 0 or n_cols == 0:
        return y
    block_m, block_n, warps = plan_dyt(n_cols, hardware.DYT_TILE_ELEMENTS, hardware.DYT_MAX_BLOCK_N)
    _dyt_forward_kernel[(triton.cdiv(n_rows, block_m), triton.cdiv(n_cols, block_n))](
        x2d,
        alpha,
        gamma,
        beta if beta is not None else gamma,
        y,
        x2d.stride(0),
        y.stride(0),
        n_rows,
        n_cols,
        HAS_BETA=beta is not None,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        num_warps=warps,
    )
    return y


def dyt_backward(
    dy2d: torch.Tensor,
    x2d: torch.Tensor,
    alpha: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor | None,
    need_params: bool = True,
    programs: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    n_rows, n_cols = x2d.shape
    dx = torch.empty_like(x2d)
    block_m, block_n, warps = plan_dyt(n_cols, hardware.DYT_BACKWARD_TILE_ELEMENTS, hardware.DYT_MAX_BLOCK_N)
    col_blocks = triton.cdiv(max(n_cols, 1), block_n)
    if programs is None:
        programs = hardware.sm_count(x2d.device.index) * hardware.BACKWARD_PROGRAMS_PER_SM
    # Row groups x column blocks ~ programs; each row group's rows split into tiles of block_m.
    row_groups = max(1, min(triton.cdiv(programs, col_blocks), triton.cdiv(max(n_rows, 1), block_m)))
    rows_per_program = triton.cdiv(n_rows, row_groups) if n_rows else 0
    partial = torch.zeros((row_groups, 2 * n_cols), dtype=torch.float32, device=x2d.device)
    alpha_partial = torch.zeros((row_groups * col_blocks, 1), dtype=torch.float32, device=x2d.device)
    if n_rows > 0 and n_cols > 0:
        _dyt_backward_kernel[(row_groups, col_blocks)](
            dy2d,
            x2d,
            alpha,
            gamma,
            dx,
            partial,
            alpha_partial,
            dy2d.stride(0),
            x2d.stride(0),
            dx.stride(0),
            n_rows,
            n_cols,
            rows_per_program,
            NEED_PARTIAL=need_params,
            BLOCK_M=block_m,
            BLOCK_N=block_n,
            num_warps=warps,
        )
    if not need_params:
        return dx, None, None, None
    d_alpha = torch.empty_like(alpha)
    d_gamma = torch.empty_like(gamma)
    d_beta = torch.empty_like(beta) if beta is not None else None
    sum_partials(partial, row_groups, d_gamma, d_beta, n_cols)
    sum_partials(alpha_partial, row_groups * col_blocks, d_alpha, None, 1)
    return dx, d_alpha, d_gamma, d_beta


class DyTKernels:
    """`liger_core.drivers.dyt.DyTKernels` on this module's kernels (no state: plans are per call)."""

    protocol = dyt_driver.PROTOCOL

    @staticmethod
    def forward(x2d, alpha, gamma, beta):
        return dyt_forward(x2d, alpha, gamma, beta), None

    @staticmethod
    def backward(dy2d, x2d, alpha, gamma, beta, need_param_grads, state):
        return dyt_backward(dy2d, x2d, alpha, gamma, beta, need_param_grads)


LigerDyTFunction = implements("dyt")(dyt_driver.autograd_function(DyTKernels(), __name__))
