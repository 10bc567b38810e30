"""LayerNorm for Ascend NPUs: triton-ascend kernels, UB-aware tile plans and the kernel adapter of
`liger_core.drivers.layer_norm`.

Same launch and tiling scheme as rms_norm (see `_tiling.plan_rows`): one program per vector
core walking row blocks; whole rows per tile (several short rows at once) when a row fits
the UB, else ``BLOCK_N``-wide chunks. Whole rows: mean, then the variance of the centred
row (two-pass, exact). Chunked rows: one pass of sums shifted by the row's first element
(no cancellation when the mean is far from zero), then a normalising pass.

Backward: grad_weight and grad_bias are per-program fp32 partials written once to
``(programs, hidden)`` buffers and summed afterwards (no atomics). Chunked rows first get
their two row coefficients ``c1 = mean(g * x_hat)`` and ``c2 = mean(g)`` (``g = dy * weight``), then a
kernel walks column chunks so one chunk of each partial stays in the UB.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import layer_norm as layer_norm_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import below, col_tile, row_block, tile_indices, tile_ptrs
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


@triton.jit
def _layer_norm_forward_kernel(
    X,
    W,
    B,
    Y,
    MEAN,
    RSTD,
    x_row_stride,
    y_row_stride,
    n_rows,
    n_cols,
    n_blocks,
    n_chunks,
    eps,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
):
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    x_tile = m_idx[:, None] * x_row_stride
    y_tile = m_idx[:, None] * y_row_stride
    if SINGLE_PASS:
        col_mask = n_idx < n_cols
        # The centring's column mask, compared in fp32 once per program (below()).
        col_live = below(n_idx, n_cols)
        # The parameters' padded columns only reach masked-off stores: no fill.
        if HAS_WEIGHT:
            w = tl.load(W + n_idx, mask=col_mask, care_padding=False).to(tl.float32)
        if HAS_BIAS:
            b = tl.load(B + n_idx, mask=col_mask, care_padding=False).to(tl.float32)
        for blk in range(pid, n_blocks, num_programs):
            row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
            mask = row_mask[:, None] & col_mask[None, :]
            x = tl.load(X + row0.to(tl.int64) * x_row_stride + x_tile + n_idx[None, :], mask=mask, other=0.0)
            xf = x.to(tl.float32)
            mean = tl.sum(xf, axis=1) / n_cols
            # Rows past the end are zeros: centred they stay zeros, so only columns need the mask.
            xc = tl.where(col_live[None, :], xf - mean[:, None], 0.0)
            rstd = tl.math.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
            y = xc * rstd[:, None]
            if HAS_WEIGHT:
                y = y * w[None, :]
            if HAS_BIAS:
                y = y + b[None, :]
            tl.store(
                Y + row0.to(tl.int64) * y_row_stride + y_tile + n_idx[None, :], y.to(Y.dtype.element_ty), mask=mask
            )
            tl.store(MEAN + rows, mean, mask=row_mask)
            tl.store(RSTD + rows, rstd, mask=row_mask)
    else:
        for blk in range(pid, n_blocks, num_programs):
            row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
            x_base = X + row0.to(tl.int64) * x_row_stride + x_tile
            y_base = Y + row0.to(tl.int64) * y_row_stride + y_tile
            # Pass 1: sums of (x - shift) and its square, shift = the row's first element.
            shift = tl.load(x_base, mask=row_mask[:, None], other=0.0).to(tl.float32)
            s1 = tl.zeros((BLOCK_M,), dtype=tl.float32)
            s2 = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for c in range(n_chunks):
                cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
                xf = tl.load(x_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                d = tl.where(below(n_idx, n_cols - c * BLOCK_N)[None, :], xf - shift, 0.0)
                s1 += tl.sum(d, axis=1)
                s2 += tl.sum(d * d, axis=1)
            m1 = s1 / n_cols
            mean = tl.reshape(shift, (BLOCK_M,)) + m1
            rstd = tl.math.rsqrt(tl.maximum(s2 / n_cols - m1 * m1, 0.0, propagate_nan=tl.PropagateNan.ALL) + eps)
            # Pass 2: normalise, scale and shift chunk by chunk.
            for c in range(n_chunks):
                cols = c * BLOCK_N + n_idx
                col_mask = cols < n_cols
                mask = row_mask[:, None] & col_mask[None, :]
                xf = tl.load(x_base + cols[None, :], mask=mask, care_padding=False).to(tl.float32)
                y = (xf - mean[:, None]) * rstd[:, None]
                if HAS_WEIGHT:
                    y = y * tl.load(W + cols, mask=col_mask, care_padding=False).to(tl.float32)[None, :]
                if HAS_BIAS:
                    y = y + tl.load(B + cols, mask=col_mask, care_padding=False).to(tl.float32)[None, :]
                tl.store(y_base + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
            tl.store(MEAN + rows, mean, mask=row_mask)
            tl.store(RSTD + rows, rstd, mask=row_mask)


@triton.jit
def _layer_norm_backward_kernel(
    DY,
    X,
    W,
    MEAN,
    RSTD,
    DX,
    DW_PARTIAL,
    DB_PARTIAL,
    dy_row_stride,
    x_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    n_blocks,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Whole rows in one tile: grad_x per row block, grad_weight/grad_bias summed in the UB."""
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    col_mask = n_idx < n_cols
    if HAS_WEIGHT:
        w = tl.load(W + n_idx, mask=col_mask, other=0.0).to(tl.float32)
        dw_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    if HAS_BIAS:
        db_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for blk in range(pid, n_blocks, num_programs):
        row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        mask = row_mask[:, None] & col_mask[None, :]
        base = row0.to(tl.int64)
        x = tl.load(tile_ptrs(X, base, m_idx, x_row_stride, n_idx), mask=mask, other=0.0)
        dy = tl.load(tile_ptrs(DY, base, m_idx, dy_row_stride, n_idx), mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)
        rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
        x_hat = (x.to(tl.float32) - mean[:, None]) * rstd[:, None]
        # The parameter gradients first, so g can take dy's place: at most three fp32 tiles live.
        if HAS_WEIGHT:
            dw_acc += tl.sum(dy * x_hat, axis=0)
        if HAS_BIAS:
            db_acc += tl.sum(dy, axis=0)
        g = dy
        if HAS_WEIGHT:
            g = dy * w[None, :]
        c2 = tl.sum(g, axis=1) / n_cols
        c1 = tl.sum(g * x_hat, axis=1) / n_cols
        dx = (g - c2[:, None] - x_hat * c1[:, None]) * rstd[:, None]
        tl.store(tile_ptrs(DX, base, m_idx, dx_row_stride, n_idx), dx.to(DX.dtype.element_ty), mask=mask)
    if HAS_WEIGHT:
        tl.store(DW_PARTIAL + pid.to(tl.int64) * n_cols + n_idx, dw_acc, mask=col_mask)
    if HAS_BIAS:
        tl.store(DB_PARTIAL + pid.to(tl.int64) * n_cols + n_idx, db_acc, mask=col_mask)


@triton.jit
def _layer_norm_backward_coef_kernel(
    DY,
    X,
    W,
    MEAN,
    RSTD,
    C1,
    C2,
    dy_row_stride,
    x_row_stride,
    n_rows,
    n_cols,
    n_blocks,
    n_chunks,
    HAS_WEIGHT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Chunked rows, stage 1: C1[row] = mean(g * x_hat), C2[row] = mean(g)."""
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    for blk in range(pid, n_blocks, num_programs):
        row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        base = row0.to(tl.int64)
        x_base = X + base * x_row_stride + m_idx[:, None] * x_row_stride
        dy_base = DY + base * dy_row_stride + m_idx[:, None] * dy_row_stride
        mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)
        rstd = tl.load(RSTD + rows, mask=row_mask, care_padding=False)
        acc_g = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc_gx = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for c in range(n_chunks):
            cols = c * BLOCK_N + n_idx
            col_mask = cols < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            xf = tl.load(x_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            g = tl.load(dy_base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            if HAS_WEIGHT:
                g = g * tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
            acc_g += tl.sum(g, axis=1)
            acc_gx += tl.sum(g * (xf - mean[:, None]), axis=1)
        tl.store(C2 + rows, acc_g / n_cols, mask=row_mask)
        tl.store(C1 + rows, acc_gx * rstd / n_cols, mask=row_mask)


@triton.jit
def _layer_norm_backward_chunked_kernel(
    DY,
    X,
    W,
    MEAN,
    RSTD,
    C1,
    C2,
    DX,
    DW_PARTIAL,
    DB_PARTIAL,
    dy_row_stride,
    x_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    n_blocks,
    n_chunks,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Chunked rows, stage 2: column chunk outer, the program's rows inner."""
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    for c in range(n_chunks):
        cols = c * BLOCK_N + n_idx
        col_mask = cols < n_cols
        if HAS_WEIGHT:
            w = tl.load(W + cols, mask=col_mask, care_padding=False).to(tl.float32)
            dw_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        if HAS_BIAS:
            db_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for blk in range(pid, n_blocks, num_programs):
            row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
            mask = row_mask[:, None] & col_mask[None, :]
            base = row0.to(tl.int64)
            xf = tl.load(tile_ptrs(X, base, m_idx, x_row_stride, cols), mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(tile_ptrs(DY, base, m_idx, dy_row_stride, cols), mask=mask, other=0.0).to(tl.float32)
            mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)
            rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
            c1 = tl.load(C1 + rows, mask=row_mask, care_padding=False)
            c2 = tl.load(C2 + rows, mask=row_mask, care_padding=False)
            x_hat = (xf - mean[:, None]) * rstd[:, None]
            if HAS_WEIGHT:
                dw_acc += tl.sum(dy * x_hat, axis=0)
            if HAS_BIAS:
                db_acc += tl.sum(dy, axis=0)
            g = dy
            if HAS_WEIGHT:
                g = dy * w[None, :]
            dx = (g - c2[:, None] - x_hat * c1[:, None]) * rstd[:, None]
            tl.store(tile_ptrs(DX, base, m_idx, dx_row_stride, cols), dx.to(DX.dtype.element_ty), mask=mask)
        if HAS_WEIGHT:
            tl.store(DW_PARTIAL + pid.to(tl.int64) * n_cols + cols, dw_acc, mask=col_mask)
        if HAS_BIAS:
            tl.store(DB_PARTIAL + pid.to(tl.int64) * n_cols + cols, db_acc, mask=col_mask)


# -- tile plans ------------------------------------------------------------------------------
#
# Each kernel's tiles in the terms of the UB model (ub_model.md), as a function of the tile shape
# (m x n), the element bytes of x (xb; y, dy and dx share it), the weight's (wb) and the bias's
# (bb, 0 when absent), and whether the row is walked in chunks (parameters then load per chunk).


def _param(name: str, n: int, nbytes: int, chunked: bool) -> list[Tile]:
    """A parameter in fp32 (1 x n): loaded once before the row loop, or per chunk (DMA)."""
    if not nbytes:
        return []
    return (dma(name, 1, n, nbytes) if chunked else []) + once(f"{name}_f32", 1, n, FP32)


def forward_tiles(m: int, n: int, xb: int, wb: int, bb: int, chunked: bool = False) -> tuple[Tile, ...]:
    tiles = dma("x", m, n, xb) + dma("y", m, n, xb) + dma("mean", 1, m, FP32) + dma("rstd", 1, m, FP32)
    # Peak: x in fp32 (its DMA buffer when x is fp32), x centred and its square.
    tiles += work("f32_", m, n, 3 if xb != FP32 else 2)
    # The centring's fp32 column mask: once per program, or per chunk (with its fp32 index).
    tiles += work("col_index", 1, n, 1) + work("col_live", 1, n, 1, 1) if chunked else once("col_live", 1, n, 1)
    tiles += _param("weight", n, wb, chunked) + _param("bias", n, bb, chunked) + mask(m, n)
    return tuple(tiles + rows_f32(("shift", "sum1", "sum2", "mean_f32", "rstd_f32"), m))


def backward_tiles(m: int, n: int, xb: int, wb: int, bb: int, chunked: bool = False) -> tuple[Tile, ...]:
    """The single-pass backward and the chunked stage 2 (which also loads c1, c2 per row)."""
    tiles = dma("x", m, n, xb) + dma("dy", m, n, xb) + dma("dx", m, n, xb)
    tiles += [t for name in ("mean", "rstd", *(("c1", "c2") if chunked else ())) for t in dma(name, 1, m, FP32)]
    # Peak, parameter gradients first: dy (then g in its place), x_hat, one product.
    tiles += work("f32_", m, n, 3) + _param("weight", n, wb, chunked)
    for name, nbytes in (("dw", wb), ("db", bb)):
        tiles += once(f"{name}_acc", 1, n, FP32 if nbytes else 0) + (
            work(f"{name}_colsum", 1, n, 1) if nbytes and m > 1 else []
        )
    return tuple(tiles + mask(m, n) + rows_f32(("mean_f32", "rstd_f32", "c1_f32", "c2_f32"), m))


def backward_coef_tiles(m: int, n: int, xb: int, wb: int, bb: int, chunked: bool = True) -> tuple[Tile, ...]:
    """Chunked stage 1: sum(g) and sum(g * (x - mean)) per row."""
    tiles = dma("x", m, n, xb) + dma("dy", m, n, xb) + dma("mean", 1, m, FP32) + dma("rstd", 1, m, FP32)
    # Peak: x and g in fp32 and one product.
    tiles += work("f32_", m, n, 3) + _param("weight", n, wb, chunked) + mask(m, n)
    return tuple(tiles + rows_f32(("mean_f32", "rstd_f32", "acc_g", "acc_gx"), m))


# Per direction: the kernels when the row fits one tile, and when it is chunked.
_KERNELS = {
    "forward": (
        (("layer_norm_forward", forward_tiles),),
        (("layer_norm_forward_chunked", functools.partial(forward_tiles, chunked=True)),),
    ),
    "backward": (
        (("layer_norm_backward", backward_tiles),),
        (
            ("layer_norm_backward_coef", backward_coef_tiles),
            ("layer_norm_backward_chunked", functools.partial(backward_tiles, chunked=True)),
        ),
    ),
}


def plan_tiles(
    direction: str,
    n_rows: int,
    n_cols: int,
    x_dtype: torch.dtype,
    w_dtype: torch.dtype | None,
    b_dtype: torch.dtype | None,
    hw: hardware.Hardware,
    row_strides: Sequence[tuple[int, int]] | None = None,
) -> RowPlan:
    """The tile plan of ``direction`` ("forward" or "backward") for ``(n_rows, n_cols)`` rows;
    ``row_strides`` as `plan_rows` takes them (default: dense rows)."""
    xb = elem_bytes(x_dtype)
    sizes = {"xb": xb, "wb": elem_bytes(w_dtype), "bb": elem_bytes(b_dtype)}
    single, chunked = _KERNELS[direction]
    strides = [(n_cols, xb)] if row_strides is None else row_strides
    return plan_rows(f"layer_norm {direction}", n_rows, n_cols, single, chunked, hw, sizes, strides)


# -- host side -------------------------------------------------------------------------------


def layer_norm_forward(
    x2d: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, hw: hardware.Hardware
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(y, mean, rstd)`` of ``(n_rows, n_cols)`` rows."""
    n_rows, n_cols = x2d.shape
    y = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    mean = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    if n_rows == 0 or n_cols == 0:
        return y, mean, rstd
    p = plan_tiles("forward", n_rows, n_cols, x2d.dtype, dtype_of(weight), dtype_of(bias), hw, strides_of(x2d, y))
    launch(
        _layer_norm_forward_kernel,
        p.kernels[0],
        hw,
        x2d,
        x2d if weight is None else weight,
        x2d if bias is None else bias,
        y,
        mean,
        rstd,
        x2d.stride(0),
        y.stride(0),
        n_rows,
        n_cols,
        p.n_blocks,
        p.n_chunks,
        eps,
        HAS_WEIGHT=weight is not None,
        HAS_BIAS=bias is not None,
        BLOCK_M=p.block_m,
        BLOCK_N=p.block_n,
        SINGLE_PASS=not p.chunked,
    )
    return y, mean, rstd


def layer_norm_backward(
    dy2d: torch.Tensor,
    x2d: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    dx: torch.Tensor,
    hw: hardware.Hardware,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """grad_x into ``dx``; returns ``(grad_weight, grad_bias)``."""
    dy2d, x2d = as_rows(dy2d), as_rows(x2d)  # row strides the int32 tile offsets hold
    n_rows, n_cols = x2d.shape
    has_w, has_b = weight is not None, bias is not None
    if n_rows == 0 or n_cols == 0:
        dw = torch.zeros_like(weight) if has_w else None
        db = torch.zeros_like(bias) if has_b else None
        return dw, db
    strides = strides_of(dy2d, x2d, dx)
    p = plan_tiles("backward", n_rows, n_cols, x2d.dtype, dtype_of(weight), dtype_of(bias), hw, strides)
    part = (p.programs, n_cols)
    dw_part = torch.empty(part, dtype=torch.float32, device=x2d.device) if has_w else rstd
    db_part = torch.empty(part, dtype=torch.float32, device=x2d.device) if has_b else rstd
    w = weight if has_w else x2d
    common = {"HAS_WEIGHT": has_w, "BLOCK_M": p.block_m, "BLOCK_N": p.block_n}
    if not p.chunked:
        launch(
            _layer_norm_backward_kernel,
            p.kernels[0],
            hw,
            dy2d,
            x2d,
            w,
            mean,
            rstd,
            dx,
            dw_part,
            db_part,
            dy2d.stride(0),
            x2d.stride(0),
            dx.stride(0),
            n_rows,
            n_cols,
            p.n_blocks,
            HAS_BIAS=has_b,
            **common,
        )
    else:
        c1 = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
        c2 = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
        launch(
            _layer_norm_backward_coef_kernel,
            p.kernels[0],
            hw,
            dy2d,
            x2d,
            w,
            mean,
            rstd,
            c1,
            c2,
            dy2d.stride(0),
            x2d.stride(0),
            n_rows,
            n_cols,
            p.n_blocks,
            p.n_chunks,
            **common,
        )
        launch(
            _layer_norm_backward_chunked_kernel,
            p.kernels[1],
            hw,
            dy2d,
            x2d,
            w,
            mean,
            rstd,
            c1,
            c2,
            dx,
            dw_part,
            db_part,
            dy2d.stride(0),
            x2d.stride(0),
            dx.stride(0),
            n_rows,
            n_cols,
            p.n_blocks,
            p.n_chunks,
            HAS_BIAS=has_b,
            **common,
        )
    dw = sum_partials(dw_part, weight.dtype) if has_w else None
    db = sum_partials(db_part, bias.dtype) if has_b else None
    return dw, db


class LayerNormKernels:
    """`liger_core.drivers.layer_norm.LayerNormKernels` on this module's kernels; the device's
    facts (`hardware.current`), read once in the forward, are the backward's ``state``. Rows
    whose stride the int32 tile offsets cannot hold are copied first (`_tiling.as_rows`)."""

    protocol = layer_norm_driver.PROTOCOL

    @staticmethod
    def forward(x2d, weight, bias, eps):
        hw = hardware.current(x2d.device)
        y, mean, rstd = layer_norm_forward(as_rows(x2d), weight, bias, eps, hw)
        return y, mean, rstd, hw

    @staticmethod
    def backward(dy2d, x2d, weight, bias, mean, rstd, dx, need_dw, need_db, state):
        return layer_norm_backward(dy2d, x2d, weight, bias, mean, rstd, dx, state)


LigerLayerNormFunction = implements("layer_norm")(layer_norm_driver.autograd_function(LayerNormKernels(), __name__))
