"""The divergences (kl_div, jsd, tvd): kernels, launch and the autograd Function they share.

One program per (row, vocabulary tile).

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
from liger_ops_cuda._jit import row_offset
from liger_ops_cuda._tiling import scale_unless_one

MODE_FORWARD_KL, MODE_REVERSE_KL, MODE_MIXED = 0, 1, 2


@triton.jit
def _kl_div_forward_kernel(
    X, x_row_stride, T, t_row_stride, G, g_row_stride, OUT, out_row_stride, n_cols, eps, grad_scale,
    LOG_TARGET: tl.constexpr, ELEMENTWISE: tl.constexpr, WRITE_GRAD: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    tile = tl.program_id(1)
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    t = tl.load(T + row_offset(row, t_row_stride) + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(X + row_offset(row, x_row_stride) + cols, mask=mask, other=0.0).to(tl.float32)
    if LOG_TARGET:
        p = tl.exp(t)
        loss = p * (t - x)
    else:
        p = t
        loss = t * (tl.log(tl.maximum(t, eps)) - x)
    loss = tl.where(mask, loss, 0.0)
    if ELEMENTWISE:
        tl.store(OUT + row_offset(row, out_row_stride) + cols, loss, mask=mask)
    else:
        tl.store(OUT + row.to(tl.int64) * out_row_stride + tile, tl.sum(loss, axis=0))
    if WRITE_GRAD:
        tl.store(G + row_offset(row, g_row_stride) + cols, (-p * grad_scale).to(G.dtype.element_ty), mask=mask)


@triton.jit
def _jsd_forward_kernel(
    X, x_row_stride, Y, y_row_stride, G, g_row_stride, PART, n_tiles, LABELS, INV_N, n_cols, ignore_index, beta,
    MODE: tl.constexpr, HAS_LABELS: tl.constexpr, WRITE_GRAD: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    tile = tl.program_id(1)
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    part = PART + row.to(tl.int64) * n_tiles + tile
    g_row = G + row_offset(row, g_row_stride)
    if HAS_LABELS:
        if tl.load(LABELS + row) == ignore_index:
            tl.store(part, 0.0)
            if WRITE_GRAD:
                tl.store(g_row + cols, tl.zeros((BLOCK_N,), tl.float32).to(G.dtype.element_ty), mask=mask)
            return
    x = tl.load(X + row_offset(row, x_row_stride) + cols, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(Y + row_offset(row, y_row_stride) + cols, mask=mask, other=0.0).to(tl.float32)
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
def _tvd_forward_kernel(
    P, p_row_stride, Q, q_row_stride, G, g_row_stride, OUT, out_row_stride, n_tiles, LABELS, SCALE, n_cols,
    ignore_index, HAS_LABELS: tl.constexpr, ELEMENTWISE: tl.constexpr, WRITE_GRAD: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    tile = tl.program_id(1)
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    g_row = G + row_offset(row, g_row_stride)
    keep = True
    if HAS_LABELS:
        keep = tl.load(LABELS + row) != ignore_index
    if keep:
        p = tl.load(P + row_offset(row, p_row_stride) + cols, mask=mask, other=0.0).to(tl.float32)
        q = tl.load(Q + row_offset(row, q_row_stride) + cols, mask=mask, other=0.0).to(tl.float32)
        loss = 0.5 * tl.abs(p - q)
        half = 0.5 * tl.load(SCALE)
        grad = tl.where(p > q, half, tl.where(p < q, -half, 0.0))
    else:
        loss = tl.zeros((BLOCK_N,), tl.float32)
        grad = tl.zeros((BLOCK_N,), tl.float32)
    if ELEMENTWISE:
        tl.store(OUT + row_offset(row, out_row_stride) + cols, loss, mask=mask)
    else:
        tl.store(OUT + row.to(tl.int64) * out_row_stride + tile, tl.sum(loss, axis=0))
    if WRITE_GRAD:
        tl.store(g_row + cols, grad.to(G.dtype.element_ty), mask=mask)


def plan_divergence(n_cols: int) -> tuple[int, int, int]:
    """(block, tiles per row, warps)."""
    block = min(hardware.DIV_BLOCK, triton.next_power_of_2(max(n_cols, 1)))
    return block, triton.cdiv(n_cols, block), max(1, min(hardware.DIV_NUM_WARPS, block // 32))


def inverse_count(
    labels: torch.Tensor | None, ignore_index: int, n_rows: int, device: torch.device, per_row: int = 1
) -> torch.Tensor:
    """``1 / (counted rows * per_row)`` as a 1-element fp32 device tensor (1 when none count)."""
    if labels is None:
        return torch.full((1,), 1.0 / max(n_rows * per_row, 1), dtype=torch.float32, device=device)
    n = (labels != ignore_index).sum(dtype=torch.float32).reshape(1) * per_row
    return 1.0 / torch.clamp_min(n, 1.0)


def _loss_buffers(x: torch.Tensor, elementwise: bool, write_grad: bool):
    """``(plan, out, grad)`` of a one-pass divergence over ``x``'s rows: fp32 per-element loss
    (``elementwise``) or per-(row, tile) partials, and the gradient in x's dtype when wanted."""
    n, v = x.shape
    plan = plan_divergence(v)
    out = torch.empty((n, v) if elementwise else (n, plan[1]), dtype=torch.float32, device=x.device)
    grad = torch.empty(x.shape, dtype=x.dtype, device=x.device) if write_grad else None
    return plan, out, grad


def kl_div_forward(
    x: torch.Tensor, t: torch.Tensor, elementwise: bool, log_target: bool, eps: float, scale: float, write_grad: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(out, grad)``: the per-element loss (``elementwise``) or per-(row, tile) partial sums,
    and with ``write_grad`` d(loss)/dx times ``scale``."""
    n, v = x.shape
    (block, n_tiles, warps), out, grad = _loss_buffers(x, elementwise, write_grad)
    if n and v:
        _kl_div_forward_kernel[(n, n_tiles)](
            x, x.stride(0), t, t.stride(0), grad if write_grad else x, grad.stride(0) if write_grad else 0,
            out, out.stride(0), v, float(eps), scale,
            LOG_TARGET=log_target, ELEMENTWISE=elementwise, WRITE_GRAD=write_grad, BLOCK_N=block, num_warps=warps,
        )  # fmt: skip
    return out, grad


def jsd_mode(beta: float) -> int:
    return MODE_FORWARD_KL if beta == 0 else MODE_REVERSE_KL if beta == 1 else MODE_MIXED


def jsd_forward(
    x: torch.Tensor,
    y: torch.Tensor,
    labels: torch.Tensor | None,
    beta: float,
    ignore_index: int,
    inv_n: torch.Tensor,
    grad: torch.Tensor | None = None,
) -> torch.Tensor:
    """The loss partials ``(rows, tiles)`` of ``x`` (student) against ``y``; with ``grad``
    also d(loss)/dx scaled by ``inv_n`` (a device scalar) into it."""
    n, v = x.shape
    block, n_tiles, warps = plan_divergence(v)
    part = torch.zeros((n, n_tiles), dtype=torch.float32, device=x.device)
    if n and v:
        _jsd_forward_kernel[(n, n_tiles)](
            x, x.stride(0), y, y.stride(0), grad if grad is not None else x, grad.stride(0) if grad is not None else 0,
            part, n_tiles, labels if labels is not None else x, inv_n, v, ignore_index, float(beta),
            MODE=jsd_mode(beta), HAS_LABELS=labels is not None, WRITE_GRAD=grad is not None, BLOCK_N=block,
            num_warps=warps,
        )  # fmt: skip
    return part


def tvd_forward(
    p: torch.Tensor, q: torch.Tensor, labels: torch.Tensor | None, elementwise: bool, ignore_index: int,
    scale: torch.Tensor, write_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
    """``(out, grad)``: the per-element loss (``elementwise``) or per-(row, tile) partial sums,
    and with ``write_grad`` d(loss)/dp times ``scale`` (a device scalar)."""
    n, v = p.shape
    (block, n_tiles, warps), out, grad = _loss_buffers(p, elementwise, write_grad)
    if n and v:
        _tvd_forward_kernel[(n, n_tiles)](
            p, p.stride(0), q, q.stride(0), grad if write_grad else p, grad.stride(0) if write_grad else 0,
            out, out.stride(0), n_tiles, labels if labels is not None else p, scale, v, ignore_index,
            HAS_LABELS=labels is not None, ELEMENTWISE=elementwise, WRITE_GRAD=write_grad, BLOCK_N=block,
            num_warps=warps,
        )  # fmt: skip
    return out, grad


class LigerDivergenceFunction(torch.autograd.Function):
    """The backward of the divergences' Functions (`LigerKLDivFunction`, `LigerJSDFunction`,
    `LigerTVDFunction`): their forward saves the gradient for an incoming gradient of 1, which
    backward rescales in place only when the incoming gradient is not 1 (decided on the
    device). Reduction "none" instead sets ``ctx.elementwise_grad(ctx, saved, grad_output)``."""

    @staticmethod
    def backward(ctx, grad_output):
        (saved,) = ctx.saved_tensors
        if saved is None:
            return None, None, None, None, None
        if ctx.elementwise_grad is not None:
            return ctx.elementwise_grad(ctx, saved, grad_output), None, None, None, None
        scale_unless_one(saved, grad_output.float().reshape(1))
        return saved, None, None, None, None
