"""RMSNorm for Ascend NPUs: triton-ascend kernels, UB-aware tile plans and autograd Function.

Launch: one program per vector core (never more programs than row blocks); each program
walks the row blocks ``pid, pid + programs, ...`` (a grid-stride loop whose trip count the
host computes, so the loop is the same in the interpreter and on the NPU).

Tiles: a program works on BLOCK_M rows x BLOCK_N columns at a time, sized so that every
tile live at once fits the UB budget of the SoC (``plan_forward`` / ``plan_backward``):
- short rows: one tile holds several whole rows;
- rows too wide for one tile: BLOCK_M = 1 and the row is processed in BLOCK_N-wide
  chunks, in two passes (sum of squares, then normalise).

Backward: grad_weight is a per-program fp32 partial accumulated over the program's rows,
written once to a ``(programs, hidden)`` buffer and summed by torch afterwards: no atomics,
deterministic. With chunked rows, a first kernel computes each row's coefficient
``mean(g * x_hat)`` and a second walks column chunks, so each program keeps one chunk of
grad_weight in the UB at a time.

Only base offsets are int64 (scalars); offsets inside a tile stay int32, since int64
vector arithmetic runs as scalar code on the vector cores.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from liger_core.ops.rms_norm import check_args

from liger_ops_ascend import hardware
from liger_ops_ascend.launch import AscendLaunchError, KernelPlan, Tile, launch

# casting_mode -> whether x_hat is rounded to x.dtype before the weight multiply
# ("llama" and "none" round; "gemma" stays in fp32 throughout).
_ROUND_X_HAT = {"llama": True, "none": True, "gemma": False}

# Most rows in one tile: more only lengthens the per-row vectors without saving a DMA.
MAX_BLOCK_M = 256
# Widest tile along a row, also the chunk width cap (tests lower it to force chunking).
MAX_BLOCK_N = 65536

FP32 = 4


# -- kernels ---------------------------------------------------------------------------------


@triton.jit
def _rms_norm_forward_kernel(
    X,
    W,
    Y,
    RSTD,
    x_row_stride,
    y_row_stride,
    n_rows,
    n_cols,
    n_iters,
    n_chunks,
    eps,
    offset,
    HAS_WEIGHT: tl.constexpr,
    ROUND_X_HAT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    m_idx = tl.arange(0, BLOCK_M)
    n_idx = tl.arange(0, BLOCK_N)
    x_tile = m_idx[:, None] * x_row_stride
    y_tile = m_idx[:, None] * y_row_stride

    if SINGLE_PASS:
        col_mask = n_idx < n_cols
        if HAS_WEIGHT:
            # One weight load per program, reused for every row block it handles.
            w_eff = tl.load(W + n_idx, mask=col_mask, other=0.0).to(tl.float32) + offset
        for i in range(n_iters):
            row0 = (pid + i * num_programs) * BLOCK_M
            rows = row0 + m_idx
            row_mask = rows < n_rows
            mask = row_mask[:, None] & col_mask[None, :]
            x_base = X + row0.to(tl.int64) * x_row_stride
            x = tl.load(x_base + x_tile + n_idx[None, :], mask=mask, other=0.0)
            xf = x.to(tl.float32)
            rstd = tl.math.rsqrt(tl.sum(xf * xf, axis=1) / n_cols + eps)
            x_hat = xf * rstd[:, None]
            if ROUND_X_HAT:
                x_hat = x_hat.to(x.dtype).to(tl.float32)
            if HAS_WEIGHT:
                x_hat = x_hat * w_eff[None, :]
            y_base = Y + row0.to(tl.int64) * y_row_stride
            tl.store(y_base + y_tile + n_idx[None, :], x_hat.to(Y.dtype.element_ty), mask=mask)
            tl.store(RSTD + rows, rstd, mask=row_mask)
    else:
        for i in range(n_iters):
            row0 = (pid + i * num_programs) * BLOCK_M
            rows = row0 + m_idx
            row_mask = rows < n_rows
            x_base = X + row0.to(tl.int64) * x_row_stride
            y_base = Y + row0.to(tl.int64) * y_row_stride
            # Pass 1: sum of squares over the row's chunks.
            sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for c in range(n_chunks):
                cols = c * BLOCK_N + n_idx
                mask = row_mask[:, None] & (cols < n_cols)[None, :]
                xf = tl.load(x_base + x_tile + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                sum_sq += tl.sum(xf * xf, axis=1)
            rstd = tl.math.rsqrt(sum_sq / n_cols + eps)
            # Pass 2: normalise and scale chunk by chunk.
            for c in range(n_chunks):
                cols = c * BLOCK_N + n_idx
                col_mask = cols < n_cols
                mask = row_mask[:, None] & col_mask[None, :]
                x = tl.load(x_base + x_tile + cols[None, :], mask=mask, other=0.0)
                x_hat = x.to(tl.float32) * rstd[:, None]
                if ROUND_X_HAT:
                    x_hat = x_hat.to(x.dtype).to(tl.float32)
                if HAS_WEIGHT:
                    w_eff = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32) + offset
                    x_hat = x_hat * w_eff[None, :]
                tl.store(y_base + y_tile + cols[None, :], x_hat.to(Y.dtype.element_ty), mask=mask)
            tl.store(RSTD + rows, rstd, mask=row_mask)


@triton.jit
def _rms_norm_backward_kernel(
    DY,
    X,
    W,
    RSTD,
    DX,
    DW_PARTIAL,
    dy_row_stride,
    x_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    n_iters,
    offset,
    HAS_WEIGHT: tl.constexpr,
    ROUND_X_HAT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Whole rows in one tile: grad_x per row block, grad_weight summed in the UB."""
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    m_idx = tl.arange(0, BLOCK_M)
    n_idx = tl.arange(0, BLOCK_N)
    col_mask = n_idx < n_cols
    if HAS_WEIGHT:
        w_eff = tl.load(W + n_idx, mask=col_mask, other=0.0).to(tl.float32) + offset
        dw_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for i in range(n_iters):
        row0 = (pid + i * num_programs) * BLOCK_M
        rows = row0 + m_idx
        row_mask = rows < n_rows
        mask = row_mask[:, None] & col_mask[None, :]
        base = row0.to(tl.int64)
        x = tl.load(X + base * x_row_stride + m_idx[:, None] * x_row_stride + n_idx[None, :], mask=mask, other=0.0)
        dy_ptr = DY + base * dy_row_stride + m_idx[:, None] * dy_row_stride + n_idx[None, :]
        dy = tl.load(dy_ptr, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
        x_hat = x.to(tl.float32) * rstd[:, None]
        g = dy
        if HAS_WEIGHT:
            g = dy * w_eff[None, :]
        coef = tl.sum(g * x_hat, axis=1) / n_cols
        dx = (g - x_hat * coef[:, None]) * rstd[:, None]
        dx_ptr = DX + base * dx_row_stride + m_idx[:, None] * dx_row_stride + n_idx[None, :]
        tl.store(dx_ptr, dx.to(DX.dtype.element_ty), mask=mask)
        if HAS_WEIGHT:
            if ROUND_X_HAT:
                x_hat = x_hat.to(x.dtype).to(tl.float32)
            dw_acc += tl.sum(dy * x_hat, axis=0)
    if HAS_WEIGHT:
        tl.store(DW_PARTIAL + pid.to(tl.int64) * n_cols + n_idx, dw_acc, mask=col_mask)


@triton.jit
def _rms_norm_backward_coef_kernel(
    DY,
    X,
    W,
    RSTD,
    COEF,
    dy_row_stride,
    x_row_stride,
    n_rows,
    n_cols,
    n_iters,
    n_chunks,
    offset,
    HAS_WEIGHT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Chunked rows, stage 1: COEF[row] = mean(g * x_hat) over the whole row."""
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    m_idx = tl.arange(0, BLOCK_M)
    n_idx = tl.arange(0, BLOCK_N)
    for i in range(n_iters):
        row0 = (pid + i * num_programs) * BLOCK_M
        rows = row0 + m_idx
        row_mask = rows < n_rows
        base = row0.to(tl.int64)
        x_base = X + base * x_row_stride + m_idx[:, None] * x_row_stride
        dy_base = DY + base * dy_row_stride + m_idx[:, None] * dy_row_stride
        acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for c in range(n_chunks):
            cols = c * BLOCK_N + n_idx
            col_mask = cols < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            xf = tl.load(x_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            g = tl.load(dy_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            if HAS_WEIGHT:
                g = g * (tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32) + offset)[None, :]
            acc += tl.sum(g * xf, axis=1)
        rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
        # sum(g * x_hat) = rstd * sum(g * x)
        tl.store(COEF + rows, acc * rstd / n_cols, mask=row_mask)


@triton.jit
def _rms_norm_backward_chunked_kernel(
    DY,
    X,
    W,
    RSTD,
    COEF,
    DX,
    DW_PARTIAL,
    dy_row_stride,
    x_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    n_iters,
    n_chunks,
    offset,
    HAS_WEIGHT: tl.constexpr,
    ROUND_X_HAT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Chunked rows, stage 2: column chunk outer, the program's rows inner, so one chunk of
    grad_weight is accumulated in the UB and written once per chunk."""
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    m_idx = tl.arange(0, BLOCK_M)
    n_idx = tl.arange(0, BLOCK_N)
    for c in range(n_chunks):
        cols = c * BLOCK_N + n_idx
        col_mask = cols < n_cols
        if HAS_WEIGHT:
            w_eff = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32) + offset
            dw_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for i in range(n_iters):
            row0 = (pid + i * num_programs) * BLOCK_M
            rows = row0 + m_idx
            row_mask = rows < n_rows
            mask = row_mask[:, None] & col_mask[None, :]
            base = row0.to(tl.int64)
            x_ptr = X + base * x_row_stride + m_idx[:, None] * x_row_stride + cols[None, :]
            x = tl.load(x_ptr, mask=mask, other=0.0)
            dy_ptr = DY + base * dy_row_stride + m_idx[:, None] * dy_row_stride + cols[None, :]
            dy = tl.load(dy_ptr, mask=mask, other=0.0).to(tl.float32)
            rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
            coef = tl.load(COEF + rows, mask=row_mask, other=0.0)
            x_hat = x.to(tl.float32) * rstd[:, None]
            g = dy
            if HAS_WEIGHT:
                g = dy * w_eff[None, :]
            dx = (g - x_hat * coef[:, None]) * rstd[:, None]
            dx_ptr = DX + base * dx_row_stride + m_idx[:, None] * dx_row_stride + cols[None, :]
            tl.store(dx_ptr, dx.to(DX.dtype.element_ty), mask=mask)
            if HAS_WEIGHT:
                if ROUND_X_HAT:
                    x_hat = x_hat.to(x.dtype).to(tl.float32)
                dw_acc += tl.sum(dy * x_hat, axis=0)
        if HAS_WEIGHT:
            tl.store(DW_PARTIAL + pid.to(tl.int64) * n_cols + cols, dw_acc, mask=col_mask)


# -- tile plans ------------------------------------------------------------------------------
#
# Each kernel's live UB tiles as a function of the tile shape (m rows x n columns), the
# element sizes of x (xb; y, dy and dx share it) and of the weight (wb, 0 when there is
# none). Deliberately conservative: every named fp32 temporary of the kernel gets its own
# buffer, conversions to fp32 of fp32 data are free, and the tail axis is padded to 32 bytes.


def forward_tiles(m: int, n: int, xb: int, wb: int, round_x_hat: bool) -> tuple[Tile, ...]:
    tiles = [Tile("x", m, n, xb)]
    if xb != FP32:
        tiles.append(Tile("x_f32", m, n, FP32))
    tiles += [Tile("x_sq_f32", m, n, FP32), Tile("x_hat_f32", m, n, FP32)]
    if round_x_hat and xb != FP32:
        tiles.append(Tile("x_hat_rounded", m, n, xb))
    tiles.append(Tile("y", m, n, xb))
    if wb:
        tiles += [Tile("weight", 1, n, wb), Tile("weight_f32", 1, n, FP32)]
    tiles += [Tile("sum_sq_f32", 1, m, FP32), Tile("rstd_f32", 1, m, FP32)]
    return tuple(tiles)


def backward_tiles(m: int, n: int, xb: int, wb: int, round_x_hat: bool) -> tuple[Tile, ...]:
    """The single-pass backward and the chunked stage 2 (same live set, plus coef rows)."""
    tiles = [Tile("x", m, n, xb), Tile("dy", m, n, xb)]
    if xb != FP32:
        tiles += [Tile("x_f32", m, n, FP32), Tile("dy_f32", m, n, FP32)]
    tiles.append(Tile("x_hat_f32", m, n, FP32))
    if wb:
        tiles.append(Tile("g_f32", m, n, FP32))
    tiles += [Tile("g_x_hat_f32", m, n, FP32), Tile("dx", m, n, xb)]
    if wb:
        if round_x_hat and xb != FP32:
            tiles.append(Tile("x_hat_rounded", m, n, xb))
        tiles += [
            Tile("dy_x_hat_f32", m, n, FP32),
            Tile("weight", 1, n, wb),
            Tile("weight_f32", 1, n, FP32),
            Tile("dw_acc_f32", 1, n, FP32),
            Tile("dw_colsum_f32", 1, n, FP32),
        ]
    tiles += [Tile("rstd_f32", 1, m, FP32), Tile("coef_f32", 1, m, FP32)]
    return tuple(tiles)


def backward_coef_tiles(m: int, n: int, xb: int, wb: int, round_x_hat: bool) -> tuple[Tile, ...]:
    tiles = [Tile("x", m, n, xb), Tile("dy", m, n, xb)]
    if xb != FP32:
        tiles += [Tile("x_f32", m, n, FP32), Tile("dy_f32", m, n, FP32)]
    if wb:
        tiles += [Tile("g_f32", m, n, FP32), Tile("weight", 1, n, wb), Tile("weight_f32", 1, n, FP32)]
    tiles += [Tile("g_x_f32", m, n, FP32), Tile("acc_f32", 1, m, FP32), Tile("rstd_f32", 1, m, FP32)]
    return tuple(tiles)


_KERNELS = {
    # direction -> (kernel name, tiles) when the row fits one tile, and when it is chunked
    "forward": (
        (("rms_norm_forward", forward_tiles),),
        (("rms_norm_forward_chunked", forward_tiles),),
    ),
    "backward": (
        (("rms_norm_backward", backward_tiles),),
        (("rms_norm_backward_coef", backward_coef_tiles), ("rms_norm_backward_chunked", backward_tiles)),
    ),
}


@dataclass(frozen=True)
class RMSNormPlan:
    """Tile shape and launch of one direction (forward or backward) of one problem size."""

    block_m: int
    block_n: int
    n_chunks: int
    programs: int
    n_iters: int
    kernels: tuple[KernelPlan, ...]

    @property
    def chunked(self) -> bool:
        return self.n_chunks > 1


def _elem_bytes(dtype: torch.dtype | None) -> int:
    return 0 if dtype is None else dtype.itemsize


def _prev_pow2(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


@functools.lru_cache(maxsize=1024)
def _plan(
    direction: str,
    n_rows: int,
    n_cols: int,
    xb: int,
    wb: int,
    round_x_hat: bool,
    hw: hardware.Hardware,
    max_block_m: int,
    max_block_n: int,
) -> RMSNormPlan:
    single, chunked = _KERNELS[direction]
    budget = hw.ub_budget

    def worst(kernels, m: int, n: int) -> int:
        return max(sum(t.nbytes for t in tiles(m, n, xb, wb, round_x_hat)) for _, tiles in kernels)

    # Columns: the whole row in one tile when one row fits, else the widest chunk that does.
    # At least one 32-byte block for the narrowest dtype involved (tail alignment).
    min_n = max(hardware.min_block(b) for b in (xb, wb) if b)
    block_n = max(min_n, min(triton.next_power_of_2(max(n_cols, 1)), max_block_n))
    kernels = single if block_n >= n_cols else chunked
    while block_n > min_n and worst(kernels, 1, block_n) > budget:
        block_n //= 2
        kernels = chunked
    if worst(kernels, 1, block_n) > budget:
        raise AscendLaunchError(
            f"liger-ops-ascend rms_norm {direction}: even a 1x{block_n} tile needs "
            f"{worst(kernels, 1, block_n)} bytes of UB; {hw.describe_budget()}"
        )
    # Rows: as many per tile as fit the budget, but leave every vector core a row block.
    block_m = 1
    m_cap = min(max_block_m, _prev_pow2(triton.cdiv(n_rows, hw.vector_cores)))
    while block_m * 2 <= m_cap and worst(kernels, block_m * 2, block_n) <= budget:
        block_m *= 2

    n_blocks = triton.cdiv(max(n_rows, 1), block_m)
    programs = min(hw.vector_cores, n_blocks)
    grid = (programs,)
    return RMSNormPlan(
        block_m=block_m,
        block_n=block_n,
        n_chunks=triton.cdiv(max(n_cols, 1), block_n),
        programs=programs,
        n_iters=triton.cdiv(n_blocks, programs),
        kernels=tuple(KernelPlan(name, grid, tiles(block_m, block_n, xb, wb, round_x_hat)) for name, tiles in kernels),
    )


def plan(
    direction: str,
    n_rows: int,
    n_cols: int,
    x_dtype: torch.dtype,
    w_dtype: torch.dtype | None,
    casting_mode: str,
    hw: hardware.Hardware,
) -> RMSNormPlan:
    """The tile plan of ``direction`` ("forward" or "backward") for ``(n_rows, n_cols)`` rows."""
    return _plan(
        direction,
        n_rows,
        n_cols,
        _elem_bytes(x_dtype),
        _elem_bytes(w_dtype),
        _ROUND_X_HAT[casting_mode],
        hw,
        MAX_BLOCK_M,
        MAX_BLOCK_N,
    )


# -- host side -------------------------------------------------------------------------------

# Row strides beyond this would overflow the int32 offsets inside a tile of MAX_BLOCK_M rows.
_MAX_ROW_STRIDE = (2**31 - 1) // (MAX_BLOCK_M + 1)


def _rows(t: torch.Tensor, n_cols: int) -> torch.Tensor:
    """``t`` as a ``(rows, n_cols)`` view with unit column stride (a copy only if needed)."""
    t2 = t.reshape(-1, n_cols)
    if t2.stride(-1) != 1 or t2.stride(0) > _MAX_ROW_STRIDE:
        t2 = t2.contiguous()
    return t2


def rms_norm_forward(
    x2d: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
    hw: hardware.Hardware,
) -> tuple[torch.Tensor, torch.Tensor]:
    n_rows, n_cols = x2d.shape
    y = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    if n_rows == 0 or n_cols == 0:
        return y, rstd
    p = plan("forward", n_rows, n_cols, x2d.dtype, None if weight is None else weight.dtype, casting_mode, hw)
    launch(
        _rms_norm_forward_kernel,
        p.kernels[0],
        hw,
        x2d,
        x2d if weight is None else weight,
        y,
        rstd,
        x2d.stride(0),
        y.stride(0),
        n_rows,
        n_cols,
        p.n_iters,
        p.n_chunks,
        eps,
        offset,
        HAS_WEIGHT=weight is not None,
        ROUND_X_HAT=_ROUND_X_HAT[casting_mode],
        BLOCK_M=p.block_m,
        BLOCK_N=p.block_n,
        SINGLE_PASS=not p.chunked,
    )
    return y, rstd


def rms_norm_backward(
    dy2d: torch.Tensor,
    x2d: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    offset: float,
    casting_mode: str,
    in_place: bool,
    hw: hardware.Hardware,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    n_rows, n_cols = x2d.shape
    has_weight = weight is not None
    # in_place: grad_x goes into the incoming gradient's memory, which must then be a dense
    # buffer of its own (an expanded gradient would alias rows).
    if in_place and not dy2d.is_contiguous():
        dy2d = dy2d.contiguous()
    dx = dy2d if in_place else torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    if n_rows == 0 or n_cols == 0:
        return dx, (torch.zeros_like(weight) if has_weight else None)
    round_x_hat = _ROUND_X_HAT[casting_mode]
    p = plan("backward", n_rows, n_cols, x2d.dtype, weight.dtype if has_weight else None, casting_mode, hw)
    dw_partial = torch.empty((p.programs, n_cols), dtype=torch.float32, device=x2d.device) if has_weight else rstd
    w = weight if has_weight else x2d
    common = {"HAS_WEIGHT": has_weight, "BLOCK_M": p.block_m, "BLOCK_N": p.block_n}
    if not p.chunked:
        launch(
            _rms_norm_backward_kernel,
            p.kernels[0],
            hw,
            dy2d,
            x2d,
            w,
            rstd,
            dx,
            dw_partial,
            dy2d.stride(0),
            x2d.stride(0),
            dx.stride(0),
            n_rows,
            n_cols,
            p.n_iters,
            offset,
            ROUND_X_HAT=round_x_hat,
            **common,
        )
    else:
        coef = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
        launch(
            _rms_norm_backward_coef_kernel,
            p.kernels[0],
            hw,
            dy2d,
            x2d,
            w,
            rstd,
            coef,
            dy2d.stride(0),
            x2d.stride(0),
            n_rows,
            n_cols,
            p.n_iters,
            p.n_chunks,
            offset,
            **common,
        )
        launch(
            _rms_norm_backward_chunked_kernel,
            p.kernels[1],
            hw,
            dy2d,
            x2d,
            w,
            rstd,
            coef,
            dx,
            dw_partial,
            dy2d.stride(0),
            x2d.stride(0),
            dx.stride(0),
            n_rows,
            n_cols,
            p.n_iters,
            p.n_chunks,
            offset,
            ROUND_X_HAT=round_x_hat,
            **common,
        )
    # Second stage of the grad_weight reduction: sum the per-program partial rows.
    dw = dw_partial.sum(0).to(weight.dtype) if has_weight else None
    return dx, dw


class LigerRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, offset, casting_mode, in_place):
        shape = x.shape
        hw = hardware.current(x.device)
        x2d = _rows(x, shape[-1])
        y, rstd = rms_norm_forward(x2d, weight, eps, offset, casting_mode, hw)
        ctx.save_for_backward(x2d, weight, rstd)
        ctx.offset, ctx.casting_mode, ctx.in_place, ctx.hw = offset, casting_mode, in_place, hw
        return y.view(shape)

    @staticmethod
    def backward(ctx, dy):
        x2d, weight, rstd = ctx.saved_tensors
        dy2d = _rows(dy, x2d.shape[1])
        dx, dw = rms_norm_backward(dy2d, x2d, weight, rstd, ctx.offset, ctx.casting_mode, ctx.in_place, ctx.hw)
        return dx.view(dy.shape), dw, None, None, None, None


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> torch.Tensor:
    check_args(x, weight, eps, offset, casting_mode)
    return LigerRMSNormFunction.apply(x, weight, float(eps), float(offset), casting_mode, in_place)
