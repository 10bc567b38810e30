"""RMSNorm and fused_add_rms_norm (``HAS_RESIDUAL``) for Ascend NPUs: triton-ascend kernels,
UB-aware tile plans and the kernel adapter of `liger_core.drivers.rms_norm`.

Launch: one program per vector core (never more programs than row blocks); each program
walks the row blocks ``pid, pid + programs, ...`` up to the last one (``range(pid, n_blocks,
programs)``): no program ever runs an iteration past the end. That matters beyond saving
work: triton-ascend's interpreter ignores the mask of a one-element store, so a masked-off
per-row store of a block of one row would land past the end of its buffer.

Tiles: a program works on BLOCK_M rows x BLOCK_N columns at a time, sized so that every
tile live at once fits the UB budget of the SoC (`plan_tiles`):
- short rows: one tile holds several whole rows;
- rows too wide for one tile: BLOCK_M = 1 and the row is processed in BLOCK_N-wide
  chunks, in two passes (sum of squares, then normalise).

Backward: grad_weight is a per-program fp32 partial accumulated over the program's rows,
written once to a ``(programs, hidden)`` buffer and summed by torch afterwards: no atomics,
deterministic. With chunked rows, a first kernel computes each row's ``mean_gx =
mean(g * x_hat)`` and a second walks column chunks, so each program keeps one chunk of
grad_weight in the UB at a time.

Only base offsets are int64 (scalars); offsets inside a tile stay int32, since int64
vector arithmetic runs as scalar code on the vector cores.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import rms_norm as rms_norm_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import col_tile, row_block, tile_indices, tile_ptrs
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
    rows_f32,
    strides_of,
    sum_partials,
    work,
)
from liger_ops_ascend.launch import Tile, launch

# casting_mode -> whether x_hat is rounded to x.dtype before the weight multiply
# ("llama" and "none" round; "gemma" stays in fp32 throughout).
_ROUND_X_HAT = {"llama": True, "none": True, "gemma": False}


# -- kernels ---------------------------------------------------------------------------------


@triton.jit
def _rms_norm_forward_kernel(
    X,
    R,
    W,
    Y,
    S,
    RSTD,
    x_row_stride,
    r_row_stride,
    y_row_stride,
    s_row_stride,
    n_rows,
    n_cols,
    n_blocks,
    n_chunks,
    eps,
    offset,
    HAS_WEIGHT: tl.constexpr,
    ROUND_X_HAT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
):
    """y = rms_norm(x), or with HAS_RESIDUAL (fused_add_rms_norm) s = x + r rounded to x's
    dtype, stored, and y = rms_norm(s)."""
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    x_tile = m_idx[:, None] * x_row_stride
    y_tile = m_idx[:, None] * y_row_stride
    r_tile = m_idx[:, None] * r_row_stride
    s_tile = m_idx[:, None] * s_row_stride

    if SINGLE_PASS:
        col_mask = n_idx < n_cols
        if HAS_WEIGHT:
            # One weight load per program, reused for every row block it handles; its padded
            # columns only reach masked-off stores (no fill needed).
            w_eff = tl.load(W + n_idx, mask=col_mask, care_padding=False).to(tl.float32) + offset
        for blk in range(pid, n_blocks, num_programs):
            row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
            mask = row_mask[:, None] & col_mask[None, :]
            x_base = X + row0.to(tl.int64) * x_row_stride
            x = tl.load(x_base + x_tile + n_idx[None, :], mask=mask, other=0.0)
            if HAS_RESIDUAL:
                r_base = R + row0.to(tl.int64) * r_row_stride
                r = tl.load(r_base + r_tile + n_idx[None, :], mask=mask, other=0.0)
                x = (x.to(tl.float32) + r.to(tl.float32)).to(S.dtype.element_ty)
                tl.store(S + row0.to(tl.int64) * s_row_stride + s_tile + n_idx[None, :], x, mask=mask)
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
        for blk in range(pid, n_blocks, num_programs):
            row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
            x_base = X + row0.to(tl.int64) * x_row_stride
            y_base = Y + row0.to(tl.int64) * y_row_stride
            r_base = R + row0.to(tl.int64) * r_row_stride
            # Pass 1: sum of squares over the row's chunks.
            sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for c in range(n_chunks):
                cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
                x = tl.load(x_base + x_tile + cols[None, :], mask=mask, other=0.0)
                if HAS_RESIDUAL:
                    r = tl.load(r_base + r_tile + cols[None, :], mask=mask, other=0.0)
                    x = (x.to(tl.float32) + r.to(tl.float32)).to(S.dtype.element_ty)
                xf = x.to(tl.float32)
                sum_sq += tl.sum(xf * xf, axis=1)
            rstd = tl.math.rsqrt(sum_sq / n_cols + eps)
            # Pass 2: normalise and scale chunk by chunk.
            for c in range(n_chunks):
                cols = c * BLOCK_N + n_idx
                col_mask = cols < n_cols
                mask = row_mask[:, None] & col_mask[None, :]
                x = tl.load(x_base + x_tile + cols[None, :], mask=mask, care_padding=False)
                if HAS_RESIDUAL:
                    # Recomputed from x and r rather than read back from S: no program
                    # reads what it wrote in the same launch.
                    r = tl.load(r_base + r_tile + cols[None, :], mask=mask, care_padding=False)
                    x = (x.to(tl.float32) + r.to(tl.float32)).to(S.dtype.element_ty)
                    s_ptr = S + row0.to(tl.int64) * s_row_stride + s_tile + cols[None, :]
                    tl.store(s_ptr, x, mask=mask)
                x_hat = x.to(tl.float32) * rstd[:, None]
                if ROUND_X_HAT:
                    x_hat = x_hat.to(x.dtype).to(tl.float32)
                if HAS_WEIGHT:
                    w_eff = tl.load(W + cols, mask=col_mask, care_padding=False).to(tl.float32) + offset
                    x_hat = x_hat * w_eff[None, :]
                tl.store(y_base + y_tile + cols[None, :], x_hat.to(Y.dtype.element_ty), mask=mask)
            tl.store(RSTD + rows, rstd, mask=row_mask)


@triton.jit
def _store_grad_x(
    dx, DX, DS, DR, base, m_idx, cols, mask, dx_row_stride, ds_row_stride, dr_row_stride,
    HAS_DS: tl.constexpr, HAS_DR: tl.constexpr,
):  # fmt: skip
    """Store a tile of grad_x; fused_add_rms_norm: new_residual's own incoming gradient joins the
    total (HAS_DS), which is also stored as grad_residual in the residual's dtype (HAS_DR)."""
    if HAS_DS:
        # Padded lanes only reach masked-off stores: no fill.
        dx += tl.load(tile_ptrs(DS, base, m_idx, ds_row_stride, cols), mask=mask, care_padding=False).to(tl.float32)
    if HAS_DR:
        tl.store(tile_ptrs(DR, base, m_idx, dr_row_stride, cols), dx.to(DR.dtype.element_ty), mask=mask)
    tl.store(tile_ptrs(DX, base, m_idx, dx_row_stride, cols), dx.to(DX.dtype.element_ty), mask=mask)


@triton.jit
def _dw_x_hat(x_hat, x, ROUND_X_HAT: tl.constexpr):
    """x_hat as grad_weight sees it: rounded to x's dtype where the forward rounded it."""
    if ROUND_X_HAT:
        return x_hat.to(x.dtype).to(tl.float32)
    return x_hat


@triton.jit
def _rms_norm_backward_kernel(
    DY,
    X,
    W,
    RSTD,
    DX,
    DW_PARTIAL,
    DS,
    DR,
    dy_row_stride,
    x_row_stride,
    dx_row_stride,
    ds_row_stride,
    dr_row_stride,
    n_rows,
    n_cols,
    n_blocks,
    offset,
    HAS_WEIGHT: tl.constexpr,
    ROUND_X_HAT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_DS: tl.constexpr,
    HAS_DR: tl.constexpr,
):
    """Whole rows in one tile: grad_x per row block, grad_weight summed in the UB."""
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    col_mask = n_idx < n_cols
    if HAS_WEIGHT:
        w_eff = tl.load(W + n_idx, mask=col_mask, other=0.0).to(tl.float32) + offset
        dw_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for blk in range(pid, n_blocks, num_programs):
        row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        mask = row_mask[:, None] & col_mask[None, :]
        base = row0.to(tl.int64)
        x = tl.load(tile_ptrs(X, base, m_idx, x_row_stride, n_idx), mask=mask, other=0.0)
        dy = tl.load(tile_ptrs(DY, base, m_idx, dy_row_stride, n_idx), mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
        x_hat = x.to(tl.float32) * rstd[:, None]
        g = dy
        if HAS_WEIGHT:
            # grad_weight first, so g can take dy's place: at most three fp32 tiles live.
            dw_acc += tl.sum(dy * _dw_x_hat(x_hat, x, ROUND_X_HAT), axis=0)
            g = dy * w_eff[None, :]
        mean_gx = tl.sum(g * x_hat, axis=1) / n_cols
        dx = (g - x_hat * mean_gx[:, None]) * rstd[:, None]
        _store_grad_x(
            dx, DX, DS, DR, base, m_idx, n_idx, mask, dx_row_stride, ds_row_stride, dr_row_stride, HAS_DS, HAS_DR
        )
    if HAS_WEIGHT:
        tl.store(DW_PARTIAL + pid.to(tl.int64) * n_cols + n_idx, dw_acc, mask=col_mask)


@triton.jit
def _rms_norm_backward_coef_kernel(
    DY,
    X,
    W,
    RSTD,
    MEAN_GX,
    dy_row_stride,
    x_row_stride,
    n_rows,
    n_cols,
    n_blocks,
    n_chunks,
    offset,
    HAS_WEIGHT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Chunked rows, stage 1: MEAN_GX[row] = mean(g * x_hat) over the whole row."""
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    for blk in range(pid, n_blocks, num_programs):
        row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
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
        rstd = tl.load(RSTD + rows, mask=row_mask, care_padding=False)
        # sum(g * x_hat) = rstd * sum(g * x)
        tl.store(MEAN_GX + rows, acc * rstd / n_cols, mask=row_mask)


@triton.jit
def _rms_norm_backward_chunked_kernel(
    DY,
    X,
    W,
    RSTD,
    MEAN_GX,
    DX,
    DW_PARTIAL,
    DS,
    DR,
    dy_row_stride,
    x_row_stride,
    dx_row_stride,
    ds_row_stride,
    dr_row_stride,
    n_rows,
    n_cols,
    n_blocks,
    n_chunks,
    offset,
    HAS_WEIGHT: tl.constexpr,
    ROUND_X_HAT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_DS: tl.constexpr,
    HAS_DR: tl.constexpr,
):
    """Chunked rows, stage 2: column chunk outer, the program's rows inner, so one chunk of
    grad_weight is accumulated in the UB and written once per chunk."""
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    for c in range(n_chunks):
        cols = c * BLOCK_N + n_idx
        col_mask = cols < n_cols
        if HAS_WEIGHT:
            w_eff = tl.load(W + cols, mask=col_mask, care_padding=False).to(tl.float32) + offset
            dw_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for blk in range(pid, n_blocks, num_programs):
            row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
            mask = row_mask[:, None] & col_mask[None, :]
            base = row0.to(tl.int64)
            x = tl.load(tile_ptrs(X, base, m_idx, x_row_stride, cols), mask=mask, other=0.0)
            dy = tl.load(tile_ptrs(DY, base, m_idx, dy_row_stride, cols), mask=mask, other=0.0).to(tl.float32)
            rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
            mean_gx = tl.load(MEAN_GX + rows, mask=row_mask, care_padding=False)
            x_hat = x.to(tl.float32) * rstd[:, None]
            g = dy
            if HAS_WEIGHT:
                dw_acc += tl.sum(dy * _dw_x_hat(x_hat, x, ROUND_X_HAT), axis=0)
                g = dy * w_eff[None, :]
            dx = (g - x_hat * mean_gx[:, None]) * rstd[:, None]
            _store_grad_x(
                dx, DX, DS, DR, base, m_idx, cols, mask, dx_row_stride, ds_row_stride, dr_row_stride, HAS_DS, HAS_DR
            )
        if HAS_WEIGHT:
            tl.store(DW_PARTIAL + pid.to(tl.int64) * n_cols + cols, dw_acc, mask=col_mask)


# -- tile plans ------------------------------------------------------------------------------
#
# Each kernel's tiles in the terms of the UB model (ub_model.md) as a function of the tile shape
# (m rows x n columns), the element bytes of x (xb; y, dy, dx and the new residual share it), of
# the weight (wb, 0 without) and of the residual (rb, 0 without: rms_norm), and whether the row
# is walked in chunks (the weight is then loaded per chunk, inside a loop).


def _weight(n: int, wb: int, chunked: bool) -> list[Tile]:
    """The weight as the kernels use it: w + offset in fp32 (1 x n). Loaded once before the row
    loop (its own buffer is dead before the loop's peak) or per chunk (a DMA buffer)."""
    if not wb:
        return []
    return (dma("weight", 1, n, wb) if chunked else []) + once("weight_f32", 1, n, FP32)


def forward_tiles(
    m: int, n: int, xb: int, wb: int, round_x_hat: bool, rb: int = 0, chunked: bool = False
) -> tuple[Tile, ...]:
    tiles = dma("x", m, n, xb) + dma("y", m, n, xb) + dma("rstd", 1, m, FP32)
    tiles += dma("residual", m, n, rb) + (dma("new_residual", m, n, xb) if rb else [])
    # Peak: x in fp32 (its DMA buffer when x is fp32 and there is no residual to add) and x * x.
    tiles += work("f32_", m, n, 2 if (xb != FP32 or rb) else 1)
    if round_x_hat and xb != FP32:
        tiles += work("x_hat_rounded", m, n, 1, xb)
    tiles += _weight(n, wb, chunked) + mask(m, n) + rows_f32(("sum_sq", "rstd_f32"), m)
    return tuple(tiles)


def backward_tiles(
    m: int, n: int, xb: int, wb: int, round_x_hat: bool, rb: int = 0, chunked: bool = False
) -> tuple[Tile, ...]:
    """The single-pass backward and the chunked stage 2 (same live set, plus mean_gx rows).
    With a residual (``rb``): the new residual's gradient in, the residual's gradient out."""
    tiles = dma("x", m, n, xb) + dma("dy", m, n, xb) + dma("dx", m, n, xb) + dma("rstd", 1, m, FP32)
    tiles += (dma("d_new_residual", m, n, xb) + dma("d_residual", m, n, rb)) if rb else []
    tiles += dma("mean_gx", 1, m, FP32) if chunked else []
    # Peak, grad_weight first: dy (then g in its place), x_hat, one product; without a
    # weight g is dy itself.
    tiles += work("f32_", m, n, 3 if (wb or xb != FP32) else 2)
    if wb:
        if round_x_hat and xb != FP32:
            tiles += work("x_hat_rounded", m, n, 1, xb)
        tiles += _weight(n, wb, chunked) + once("dw_acc", 1, n, FP32)
        tiles += work("dw_colsum", 1, n, 1) if m > 1 else []
    return tuple(tiles + mask(m, n) + rows_f32(("rstd_f32", "mean_gx_f32"), m))


def backward_coef_tiles(
    m: int, n: int, xb: int, wb: int, round_x_hat: bool, rb: int = 0, chunked: bool = True
) -> tuple[Tile, ...]:
    """Chunked stage 1: sum(g * x) per row."""
    tiles = dma("x", m, n, xb) + dma("dy", m, n, xb) + dma("rstd", 1, m, FP32) + dma("mean_gx", 1, m, FP32)
    # Peak: x and g in fp32 and their product.
    tiles += work("f32_", m, n, 3) + _weight(n, wb, chunked)
    return tuple(tiles + mask(m, n) + rows_f32(("acc", "rstd_f32"), m))


# Per op and direction: the kernels when the row fits one tile, and when it is chunked.
_CHUNKED_FORWARD = functools.partial(forward_tiles, chunked=True)
_CHUNKED_BACKWARD = functools.partial(backward_tiles, chunked=True)
_KERNELS = {
    (op, direction): kernels
    for op in ("rms_norm", "fused_add_rms_norm")
    for direction, kernels in (
        ("forward", (((f"{op}_forward", forward_tiles),), ((f"{op}_forward_chunked", _CHUNKED_FORWARD),))),
        (
            "backward",
            (
                ((f"{op}_backward", backward_tiles),),
                ((f"{op}_backward_coef", backward_coef_tiles), (f"{op}_backward_chunked", _CHUNKED_BACKWARD)),
            ),
        ),
    )
}


def plan_tiles(
    direction: str,
    n_rows: int,
    n_cols: int,
    x_dtype: torch.dtype,
    w_dtype: torch.dtype | None,
    casting_mode: str,
    hw: hardware.Hardware,
    residual_dtype: torch.dtype | None = None,
    row_strides: Sequence[tuple[int, int]] | None = None,
) -> RowPlan:
    """The tile plan of ``direction`` ("forward" or "backward") for ``(n_rows, n_cols)`` rows;
    ``residual_dtype`` for fused_add_rms_norm; ``row_strides`` as `plan_rows` takes them (default:
    dense rows)."""
    op = "rms_norm" if residual_dtype is None else "fused_add_rms_norm"
    xb, rb = elem_bytes(x_dtype), elem_bytes(residual_dtype)
    sizes = {"xb": xb, "wb": elem_bytes(w_dtype), "rb": rb}
    if row_strides is None:
        row_strides = [(n_cols, b) for b in (xb, rb) if b]
    single, chunked = _KERNELS[op, direction]
    return plan_rows(
        f"{op} {direction}", n_rows, n_cols, single, chunked, hw, sizes, row_strides,
        round_x_hat=_ROUND_X_HAT[casting_mode],
    )  # fmt: skip


# -- host side -------------------------------------------------------------------------------


def rms_norm_forward(
    x2d: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
    hw: hardware.Hardware,
    r2d: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(y, rstd, new_residual)``; ``new_residual`` (= x + r) only when ``r2d`` is given."""
    n_rows, n_cols = x2d.shape
    y = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    s = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device) if r2d is not None else None
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    if n_rows == 0 or n_cols == 0:
        return y, rstd, s
    strides = strides_of(x2d, r2d, y, s)
    p = plan_tiles("forward", n_rows, n_cols, x2d.dtype, dtype_of(weight), casting_mode, hw, dtype_of(r2d), strides)
    launch(
        _rms_norm_forward_kernel,
        p.kernels[0],
        hw,
        x2d,
        x2d if r2d is None else r2d,
        x2d if weight is None else weight,
        y,
        y if s is None else s,
        rstd,
        x2d.stride(0),
        x2d.stride(0) if r2d is None else r2d.stride(0),
        y.stride(0),
        y.stride(0) if s is None else s.stride(0),
        n_rows,
        n_cols,
        p.n_blocks,
        p.n_chunks,
        eps,
        offset,
        HAS_WEIGHT=weight is not None,
        ROUND_X_HAT=_ROUND_X_HAT[casting_mode],
        BLOCK_M=p.block_m,
        BLOCK_N=p.block_n,
        SINGLE_PASS=not p.chunked,
        HAS_RESIDUAL=r2d is not None,
    )
    return y, rstd, s


def rms_norm_backward(
    dy2d: torch.Tensor,
    x2d: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    offset: float,
    casting_mode: str,
    dx: torch.Tensor,
    hw: hardware.Hardware,
    ds2d: torch.Tensor | None = None,
    dr: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """grad_x into ``dx`` (x2d's shape and dtype; it may be ``dy2d``: in place); returns
    grad_weight. For fused_add_rms_norm ``x2d`` is the new residual, ``ds2d`` its incoming
    gradient (None: unused), and ``dr`` a buffer in the residual's dtype that receives grad_x
    too (None: grad_x is the residual's gradient)."""
    dy2d, x2d = as_rows(dy2d), as_rows(x2d)  # row strides the int32 tile offsets hold
    n_rows, n_cols = x2d.shape
    has_weight = weight is not None
    if n_rows == 0 or n_cols == 0:
        return torch.zeros_like(weight) if has_weight else None
    round_x_hat = _ROUND_X_HAT[casting_mode]
    strides = strides_of(dy2d, x2d, dx, ds2d, dr)
    residual_dtype = None if ds2d is None and dr is None else (x2d.dtype if dr is None else dr.dtype)
    p = plan_tiles("backward", n_rows, n_cols, x2d.dtype, dtype_of(weight), casting_mode, hw, residual_dtype, strides)
    dw_partial = torch.empty((p.programs, n_cols), dtype=torch.float32, device=x2d.device) if has_weight else rstd
    w = weight if has_weight else x2d
    common = {"HAS_WEIGHT": has_weight, "BLOCK_M": p.block_m, "BLOCK_N": p.block_n}
    residual = {"HAS_DS": ds2d is not None, "HAS_DR": dr is not None}
    ds_arg = dx if ds2d is None else ds2d
    dr_arg = dx if dr is None else dr
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
            ds_arg,
            dr_arg,
            dy2d.stride(0),
            x2d.stride(0),
            dx.stride(0),
            ds_arg.stride(0),
            dr_arg.stride(0),
            n_rows,
            n_cols,
            p.n_blocks,
            offset,
            ROUND_X_HAT=round_x_hat,
            **common,
            **residual,
        )
    else:
        mean_gx = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
        launch(
            _rms_norm_backward_coef_kernel,
            p.kernels[0],
            hw,
            dy2d,
            x2d,
            w,
            rstd,
            mean_gx,
            dy2d.stride(0),
            x2d.stride(0),
            n_rows,
            n_cols,
            p.n_blocks,
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
            mean_gx,
            dx,
            dw_partial,
            ds_arg,
            dr_arg,
            dy2d.stride(0),
            x2d.stride(0),
            dx.stride(0),
            ds_arg.stride(0),
            dr_arg.stride(0),
            n_rows,
            n_cols,
            p.n_blocks,
            p.n_chunks,
            offset,
            ROUND_X_HAT=round_x_hat,
            **common,
            **residual,
        )
    # Second stage of the grad_weight reduction: sum the per-program partial rows.
    return sum_partials(dw_partial, weight.dtype) if has_weight else None


class RMSNormKernels:
    """`liger_core.drivers.rms_norm.RMSNormKernels` on this module's kernels; the device's
    facts (`hardware.current`), read once in the forward, are the backward's ``state``. Rows
    whose stride the int32 tile offsets cannot hold are copied first (`_tiling.as_rows`)."""

    protocol = rms_norm_driver.PROTOCOL

    @staticmethod
    def forward(x2d, weight, eps, offset, casting_mode):
        hw = hardware.current(x2d.device)
        y, rstd, _ = rms_norm_forward(as_rows(x2d), weight, eps, offset, casting_mode, hw)
        return y, rstd, hw

    @staticmethod
    def backward(dy2d, x2d, weight, rstd, offset, casting_mode, dx, need_dw, state):
        return rms_norm_backward(dy2d, x2d, weight, rstd, offset, casting_mode, dx, state)

    @staticmethod
    def fused_add_forward(x2d, residual2d, weight, eps, offset, casting_mode):
        hw = hardware.current(x2d.device)
        y, rstd, s = rms_norm_forward(as_rows(x2d), weight, eps, offset, casting_mode, hw, as_rows(residual2d))
        return y, s, rstd, hw

    @staticmethod
    def fused_add_backward(dy2d, dres2d, s2d, weight, rstd, offset, casting_mode, dx, dr, need_dw, state):
        ds2d = None if dres2d is None else as_rows(dres2d)
        return rms_norm_backward(dy2d, s2d, weight, rstd, offset, casting_mode, dx, state, ds2d, dr)


_FUNCTIONS = rms_norm_driver.autograd_functions(RMSNormKernels(), __name__)
LigerRMSNormFunction = implements("rms_norm")(_FUNCTIONS["rms_norm"])
LigerFusedAddRMSNormFunction = implements("fused_add_rms_norm")(_FUNCTIONS["fused_add_rms_norm"])
