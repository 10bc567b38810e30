"""DyT (Dynamic Tanh) for Ascend NPUs: ``y = gamma * tanh(alpha * x) + beta``.

No row reduction, but per-column parameters: a program walks column chunks (outer loop,
gamma/beta loaded once per chunk) and, inside, its row blocks (grid-stride over row blocks
of ``BLOCK_M`` rows). Tiles from `_tiling.row_plan`.

Backward: grad_gamma and grad_beta chunks are accumulated in the UB over the program's rows
and written once per chunk to ``(programs, hidden)`` fp32 partials; grad_alpha is one fp32
scalar per program. All summed afterwards: no atomics.

tanh is built from exp (``1 - 2 / (exp(2z) + 1)``, exact at both saturations), which both
the NPU and the Triton interpreter provide.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from liger_core.ops.dyt import check_args

from liger_ops_ascend import hardware
from liger_ops_ascend._tiling import FP32, MAX_BLOCK_M, RowPlan, elem_bytes, loaded, partial_sums, row_plan, rows_view
from liger_ops_ascend.launch import Tile, launch

MAX_BLOCK_N = 65536


@triton.jit
def _tanh(z):
    return 1.0 - 2.0 / (tl.exp(2.0 * z) + 1.0)


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
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    m_idx = tl.arange(0, BLOCK_M)
    n_idx = tl.arange(0, BLOCK_N)
    alpha = tl.load(ALPHA).to(tl.float32)
    for c in range(n_chunks):
        cols = c * BLOCK_N + n_idx
        col_mask = cols < n_cols
        gamma = tl.load(GAMMA + cols, mask=col_mask, other=0.0).to(tl.float32)
        if HAS_BETA:
            beta = tl.load(BETA + cols, mask=col_mask, other=0.0).to(tl.float32)
        for blk in range(pid, n_blocks, num_programs):
            row0 = (pid * 0 + blk) * BLOCK_M
            mask = ((row0 + m_idx) < n_rows)[:, None] & col_mask[None, :]
            base = row0.to(tl.int64)
            x_ptr = X + base * x_row_stride + m_idx[:, None] * x_row_stride + cols[None, :]
            xf = tl.load(x_ptr, mask=mask, other=0.0).to(tl.float32)
            y = gamma[None, :] * _tanh(alpha * xf)
            if HAS_BETA:
                y = y + beta[None, :]
            y_ptr = Y + base * y_row_stride + m_idx[:, None] * y_row_stride + cols[None, :]
            tl.store(y_ptr, y.to(Y.dtype.element_ty), mask=mask)


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
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    m_idx = tl.arange(0, BLOCK_M)
    n_idx = tl.arange(0, BLOCK_N)
    alpha = tl.load(ALPHA).to(tl.float32)
    dalpha_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for c in range(n_chunks):
        cols = c * BLOCK_N + n_idx
        col_mask = cols < n_cols
        gamma = tl.load(GAMMA + cols, mask=col_mask, other=0.0).to(tl.float32)
        dgamma_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        dbeta_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for blk in range(pid, n_blocks, num_programs):
            row0 = (pid * 0 + blk) * BLOCK_M
            mask = ((row0 + m_idx) < n_rows)[:, None] & col_mask[None, :]
            base = row0.to(tl.int64)
            x_ptr = X + base * x_row_stride + m_idx[:, None] * x_row_stride + cols[None, :]
            xf = tl.load(x_ptr, mask=mask, other=0.0).to(tl.float32)
            dy_ptr = DY + base * dy_row_stride + m_idx[:, None] * dy_row_stride + cols[None, :]
            dy = tl.load(dy_ptr, mask=mask, other=0.0).to(tl.float32)
            t = _tanh(alpha * xf)
            # d tanh(z) / dz = 1 - tanh(z)^2; g = dy * gamma * (1 - t^2) = grad of z.
            gz = dy * gamma[None, :] * (1.0 - t * t)
            dx_ptr = DX + base * dx_row_stride + m_idx[:, None] * dx_row_stride + cols[None, :]
            tl.store(dx_ptr, (gz * alpha).to(DX.dtype.element_ty), mask=mask)
            dgamma_acc += tl.sum(dy * t, axis=0)
            dbeta_acc += tl.sum(dy, axis=0)
            dalpha_acc += tl.sum(gz * xf, axis=0)
        tl.store(DGAMMA_PARTIAL + pid.to(tl.int64) * n_cols + cols, dgamma_acc, mask=col_mask)
        if HAS_BETA:
            tl.store(DBETA_PARTIAL + pid.to(tl.int64) * n_cols + cols, dbeta_acc, mask=col_mask)
    tl.store(DALPHA_PARTIAL + pid, tl.sum(dalpha_acc, axis=0))


# -- tile plans ------------------------------------------------------------------------------


def forward_tiles(m: int, n: int, xb: int, gb: int, bb: int) -> tuple[Tile, ...]:
    tiles = loaded("x", m, n, xb) + [Tile(t, m, n, FP32) for t in ("z", "exp", "t", "y_f32")] + [Tile("y", m, n, xb)]
    return tuple(tiles + loaded("gamma", 1, n, gb) + loaded("beta", 1, n, bb))


def backward_tiles(m: int, n: int, xb: int, gb: int, bb: int) -> tuple[Tile, ...]:
    tiles = loaded("x", m, n, xb) + loaded("dy", m, n, xb)
    tiles += [Tile(t, m, n, FP32) for t in ("z", "exp", "t", "dy_t", "gz", "gz_x", "dx_f32")] + [Tile("dx", m, n, xb)]
    tiles += loaded("gamma", 1, n, gb)
    tiles += [Tile(t, 1, n, FP32) for t in ("dgamma_acc", "dbeta_acc", "dalpha_acc", "colsum")]
    return tuple(tiles)


@functools.lru_cache(maxsize=1024)
def _plan(
    direction: str, n_rows: int, n_cols: int, xb: int, gb: int, bb: int, hw: hardware.Hardware, max_block_n: int
) -> RowPlan:
    tiles = functools.partial(forward_tiles if direction == "forward" else backward_tiles, xb=xb, gb=gb, bb=bb)
    kernels = ((f"dyt_{direction}", tiles),)
    min_n = max(hardware.min_block(b) for b in (xb, gb, bb) if b)
    return row_plan(f"dyt {direction}", n_rows, n_cols, kernels, kernels, hw, min_n, MAX_BLOCK_M, max_block_n)


def plan(
    direction: str,
    n_rows: int,
    n_cols: int,
    x_dtype: torch.dtype,
    gamma_dtype: torch.dtype,
    beta_dtype: torch.dtype | None,
    hw: hardware.Hardware,
) -> RowPlan:
    return _plan(
        direction, n_rows, n_cols, elem_bytes(x_dtype), elem_bytes(gamma_dtype), elem_bytes(beta_dtype), hw, MAX_BLOCK_N
    )


class LigerDyTFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha, gamma, beta):
        shape = x.shape
        hw = hardware.current(x.device)
        x2d = rows_view(x, shape[-1])
        n_rows, n_cols = x2d.shape
        y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
        b_dtype = None if beta is None else beta.dtype
        if n_rows and n_cols:
            p = plan("forward", n_rows, n_cols, x.dtype, gamma.dtype, b_dtype, hw)
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
        ctx.save_for_backward(x2d, alpha, gamma)
        ctx.beta_dtype, ctx.hw = b_dtype, hw
        return y.view(shape)

    @staticmethod
    def backward(ctx, dy):
        x2d, alpha, gamma = ctx.saved_tensors
        hw, b_dtype = ctx.hw, ctx.beta_dtype
        n_rows, n_cols = x2d.shape
        dy2d = rows_view(dy, n_cols)
        dx = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
        if n_rows == 0 or n_cols == 0:
            db = None if b_dtype is None else torch.zeros(n_cols, dtype=b_dtype, device=x2d.device)
            return dx.view(dy.shape), torch.zeros_like(alpha), torch.zeros_like(gamma), db
        p = plan("backward", n_rows, n_cols, x2d.dtype, gamma.dtype, b_dtype, hw)
        dgamma_part = torch.empty((p.programs, n_cols), dtype=torch.float32, device=x2d.device)
        dbeta_part = dgamma_part if b_dtype is None else torch.empty_like(dgamma_part)
        dalpha_part = torch.empty(p.programs, dtype=torch.float32, device=x2d.device)
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
            HAS_BETA=b_dtype is not None,
            BLOCK_M=p.block_m,
            BLOCK_N=p.block_n,
        )
        dalpha = dalpha_part.sum().to(alpha.dtype).reshape(alpha.shape)
        dbeta = None if b_dtype is None else partial_sums(dbeta_part, b_dtype)
        return dx.view(dy.shape), dalpha, partial_sums(dgamma_part, gamma.dtype), dbeta


def dyt(x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None) -> torch.Tensor:
    check_args(x, alpha, gamma, beta)
    return LigerDyTFunction.apply(x, alpha, gamma, beta)
