"""Kernels of the divergences (kl_div, jsd, tvd): one program per (row, vocabulary tile).

Each program reads its tile of the inputs once, writes its tile of the gradient (when the
first input needs one; scaled by the reduction, computed in fp32, rounded once) and one
fp32 partial sum of the loss (or, for reduction "none", the per-element loss). The loss is
the sum of the partials times a scale that may live on the device (``1 / counted rows`` of
jsd and tvd: no host synchronisation anywhere). Backward only rescales the gradient in place
when the incoming gradient is not 1 (`scale_unless_one`, decided on the device).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_ops_cuda import hardware
from liger_ops_cuda._ce_kernels import _row_offset

MODE_FORWARD_KL, MODE_REVERSE_KL, MODE_MIXED = 0, 1, 2


@triton.jit
def _kl_div_kernel(
    X, x_stride, T, t_stride, G, g_stride, OUT, out_stride, n_cols, eps, grad_scale,
    LOG_TARGET: tl.constexpr, ELEMENTWISE: tl.constexpr, WRITE_GRAD: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    tile = tl.program_id(1)
    cols = tile * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    t = tl.load(T + _row_offset(row, t_stride) + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(X + _row_offset(row, x_stride) + cols, mask=mask, other=0.0).to(tl.float32)
    if LOG_TARGET:
        p = tl.exp(t)
        loss = p * (t - x)
    else:
        p = t
        loss = t * (tl.log(tl.maximum(t, eps)) - x)
    loss = tl.where(mask, loss, 0.0)
    if ELEMENTWISE:
        tl.store(OUT + _row_offset(row, out_stride) + cols, loss, mask=mask)
    else:
        tl.store(OUT + row.to(tl.int64) * out_stride + tile, tl.sum(loss, axis=0))
    if WRITE_GRAD:
        tl.store(G + _row_offset(row, g_stride) + cols, (-p * grad_scale).to(G.dtype.element_ty), mask=mask)


@triton.jit
def _jsd_kernel(
    X, x_stride, Y, y_stride, G, g_stride, PART, n_tiles, LABELS, INV_N, n_cols, ignore_index, beta,
    MODE: tl.constexpr, HAS_LABELS: tl.constexpr, WRITE_GRAD: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    tile = tl.program_id(1)
    cols = tile * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    part = PART + row.to(tl.int64) * n_tiles + tile
    g_row = G + _row_offset(row, g_stride)
    if HAS_LABELS:
        if tl.load(LABELS + row) == ignore_index:
            tl.store(part, 0.0)
            if WRITE_GRAD:
                tl.store(g_row + cols, tl.zeros((BLOCK,), tl.float32).to(G.dtype.element_ty), mask=mask)
            return
    x = tl.load(X + _row_offset(row, x_stride) + cols, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(Y + _row_offset(row, y_stride) + cols, mask=mask, other=0.0).to(tl.float32)
    if MODE == 0:  # forward KL(P || Q)
        p = tl.exp(y)
        loss = p * (y - x)
        dx = -p
    elif MODE == 1:  # reverse KL(Q || P)
        q = tl.exp(x)
        loss = q * (x - y)
        dx = loss + q
    else:
        mx = tl.maximum(x, y)
        log_m = mx + tl.log(beta * tl.exp(y - mx) + (1.0 - beta) * tl.exp(x - mx))
        p = tl.exp(y)
        q = tl.exp(x)
        dx = (1.0 - beta) * q * (x - log_m)
        loss = beta * p * (y - log_m) + dx
    tl.store(part, tl.sum(tl.where(mask, loss, 0.0), axis=0))
    if WRITE_GRAD:
        inv_n = tl.load(INV_N)
        tl.store(g_row + cols, (dx * inv_n).to(G.dtype.element_ty), mask=mask)


@triton.jit
def _tvd_kernel(
    P, p_stride, Q, q_stride, G, g_stride, OUT, out_stride, n_tiles, LABELS, SCALE, n_cols, ignore_index,
    HAS_LABELS: tl.constexpr, ELEMENTWISE: tl.constexpr, WRITE_GRAD: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    tile = tl.program_id(1)
    cols = tile * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    g_row = G + _row_offset(row, g_stride)
    keep = True
    if HAS_LABELS:
        keep = tl.load(LABELS + row) != ignore_index
    if keep:
        p = tl.load(P + _row_offset(row, p_stride) + cols, mask=mask, other=0.0).to(tl.float32)
        q = tl.load(Q + _row_offset(row, q_stride) + cols, mask=mask, other=0.0).to(tl.float32)
        loss = 0.5 * tl.abs(p - q)
        half = 0.5 * tl.load(SCALE)
        grad = tl.where(p > q, half, tl.where(p < q, -half, 0.0))
    else:
        loss = tl.zeros((BLOCK,), tl.float32)
        grad = tl.zeros((BLOCK,), tl.float32)
    if ELEMENTWISE:
        tl.store(OUT + _row_offset(row, out_stride) + cols, loss, mask=mask)
    else:
        tl.store(OUT + row.to(tl.int64) * out_stride + tile, tl.sum(loss, axis=0))
    if WRITE_GRAD:
        tl.store(g_row + cols, grad.to(G.dtype.element_ty), mask=mask)


def tile_plan(n_cols: int) -> tuple[int, int, int]:
    """(block, tiles per row, warps)."""
    block = min(hardware.DIV_BLOCK, triton.next_power_of_2(max(n_cols, 1)))
    return block, triton.cdiv(n_cols, block), max(1, min(hardware.DIV_NUM_WARPS, block // 32))


def unit_col(t: torch.Tensor) -> torch.Tensor:
    """Rows may be strided; columns must be contiguous."""
    return t if t.stride(-1) == 1 or t.numel() == 0 else t.contiguous()


def inverse_count(
    labels: torch.Tensor | None, ignore_index: int, n_rows: int, device: torch.device, per_row: int = 1
) -> torch.Tensor:
    """``1 / (counted rows * per_row)`` as a 1-element fp32 device tensor (1 when none count)."""
    if labels is None:
        return torch.full((1,), 1.0 / max(n_rows * per_row, 1), dtype=torch.float32, device=device)
    n = (labels != ignore_index).sum(dtype=torch.float32).reshape(1) * per_row
    return 1.0 / torch.clamp_min(n, 1.0)
