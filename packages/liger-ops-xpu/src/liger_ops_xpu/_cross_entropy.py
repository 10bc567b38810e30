"""The cross-entropy row kernels for Intel GPUs, shared by cross_entropy and
fused_linear_cross_entropy (which runs them on chunks of logits): kernels, vocabulary plan,
launchers and the reduction of per-row results.

One program per row walks the vocabulary in LOSS_VOCAB_BLOCK blocks (smaller than CUDA's:
an Intel thread spills sooner) with the large register file. The forward reads the logits
once (online max / sum of exponentials, plus the sums label smoothing needs) and stores the
row's loss, z-loss and logsumexp; the backward reads them once more and writes the gradient,
``p = exp(x - lse)`` needing no second reduction, with the incoming gradient folded in. So no
logits-sized buffer lives between forward and backward.

Per row (x after softcap, w class weights or ones, W = sum(w), s = label_smoothing, V vocab):
    loss = (1 - s) w_y (lse - x_y) + (s / V) (W lse - sum_j w_j x_j),   z = c lse^2
    dloss/dx_j = (1 - s) w_y (p_j - [j == y]) + (s / V) (W p_j - w_j),  dz/dx_j = 2 c lse p_j
times ``1 - (x / softcap)^2`` under a softcap. Rows whose target is ignore_index stop early.
The reductions' scales (1 / sum of w_y over counted rows, 1 / counted rows) are applied by
the backward kernel, so the fused linear loss reuses both kernels on chunks of logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from liger_ops_xpu import hardware
from liger_ops_xpu._jit import tanh, zero_row
from liger_ops_xpu._tiling import prev_power_of_2


@triton.jit
def _softcapped(x, softcap, HAS_SOFTCAP: tl.constexpr):
    if HAS_SOFTCAP:
        x = softcap * tanh(x / softcap)
    return x


@triton.jit
def _cross_entropy_forward_kernel(
    X,
    Y,
    W,
    LOSS,
    ZLOSS,
    LSE,
    x_row_stride,
    n_cols,
    ignore_index,
    lse_square_scale,
    label_smoothing,
    softcap,
    w_total,
    HAS_WEIGHT: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    N_CHUNKS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    y = tl.load(Y + row).to(tl.int64)
    if y == ignore_index:
        tl.store(LOSS + row, 0.0)
        tl.store(ZLOSS + row, 0.0)
        tl.store(LSE + row, 0.0)
        return
    x_row = X + row * x_row_stride
    cols = tl.arange(0, BLOCK_N)
    m = tl.full((BLOCK_N,), -float("inf"), tl.float32)  # per-lane running max and sum
    d = tl.zeros((BLOCK_N,), dtype=tl.float32)
    smooth = tl.zeros((BLOCK_N,), dtype=tl.float32)  # sum of w_j x_j for label smoothing
    for chunk in range(N_CHUNKS):
        c = chunk * BLOCK_N + cols
        mask = c < n_cols
        xs = _softcapped(tl.load(x_row + c, mask=mask, other=0.0).to(tl.float32), softcap, HAS_SOFTCAP)
        if HAS_SMOOTHING:  # padding is 0 here, so it adds nothing
            if HAS_WEIGHT:
                smooth += xs * tl.load(W + c, mask=mask, other=0.0).to(tl.float32)
            else:
                smooth += tl.where(mask, xs, 0.0)
        x = tl.where(mask, xs, -float("inf"))
        m_new = tl.maximum(m, x)
        safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        d = d * tl.exp(m - safe) + tl.exp(x - safe)
        m = m_new
    row_max = tl.max(m, axis=0)
    lse = row_max + tl.log(tl.sum(d * tl.exp(m - row_max), axis=0))
    # A target outside the row (vocab_parallel_cross_entropy's rows whose class another rank
    # holds) reads nothing: its target logit is 0.
    in_vocab = (y >= 0) & (y < n_cols)
    x_y = _softcapped(tl.load(x_row + y, mask=in_vocab, other=0.0).to(tl.float32), softcap, HAS_SOFTCAP)
    w_y = 1.0
    if HAS_WEIGHT:
        w_y = tl.load(W + y, mask=in_vocab, other=0.0).to(tl.float32)
    loss = (1.0 - label_smoothing) * w_y * (lse - x_y)
    if HAS_SMOOTHING:
        loss += label_smoothing / n_cols * (w_total * lse - tl.sum(smooth, axis=0))
    tl.store(LOSS + row, loss)
    tl.store(ZLOSS + row, lse_square_scale * lse * lse)
    tl.store(LSE + row, lse)


@triton.jit
def _cross_entropy_backward_kernel(
    X,
    Y,
    W,
    LSE,
    GRAD_OUT,
    DX,
    x_row_stride,
    dx_row_stride,
    grad_out_stride,
    n_cols,
    ignore_index,
    lse_square_scale,
    label_smoothing,
    softcap,
    w_total,
    loss_scale,
    z_scale,
    HAS_WEIGHT: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    N_CHUNKS: tl.constexpr,
):
    # DX may be X itself (fused_linear_cross_entropy's own logits chunk): every element is read
    # before this program writes it.
    row = tl.program_id(0).to(tl.int64)
    y = tl.load(Y + row).to(tl.int64)
    dx_row = DX + row * dx_row_stride
    cols = tl.arange(0, BLOCK_N)
    if y == ignore_index:
        zero_row(dx_row, n_cols, BLOCK_N, N_CHUNKS)
        return
    x_row = X + row * x_row_stride
    lse = tl.load(LSE + row)
    g_out = tl.load(GRAD_OUT + row * grad_out_stride).to(tl.float32)
    w_y = 1.0
    if HAS_WEIGHT:
        w_y = tl.load(W + y, mask=(y >= 0) & (y < n_cols), other=0.0).to(tl.float32)
    # dL/dx_j = a * p_j - b * [j == y] - s_j, folded into three per-row constants.
    a = loss_scale * ((1.0 - label_smoothing) * w_y + label_smoothing / n_cols * w_total)
    a += z_scale * 2.0 * lse_square_scale * lse
    hit = loss_scale * (1.0 - label_smoothing) * w_y
    s_coef = loss_scale * label_smoothing / n_cols
    for chunk in range(N_CHUNKS):
        c = chunk * BLOCK_N + cols
        mask = c < n_cols
        x = _softcapped(tl.load(x_row + c, mask=mask, other=0.0).to(tl.float32), softcap, HAS_SOFTCAP)
        g = a * tl.exp(x - lse) - tl.where(c == y, hit, 0.0)
        if HAS_SMOOTHING:
            if HAS_WEIGHT:
                g -= s_coef * tl.load(W + c, mask=mask, other=0.0).to(tl.float32)
            else:
                g -= s_coef
        if HAS_SOFTCAP:
            t = x / softcap
            g = g * (1.0 - t * t)
        tl.store(dx_row + c, (g * g_out).to(DX.dtype.element_ty), mask=mask)


@dataclass(frozen=True)
class VocabPlan:
    """One program per row of logits, walking its vocabulary in N_CHUNKS blocks of BLOCK_N."""

    block_n: int
    n_chunks: int
    num_warps: int

    def launch(self, kernel, n_rows: int, device: torch.device, *args, **constexprs) -> None:
        """``kernel`` on ``n_rows`` programs with BLOCK_N / N_CHUNKS, this plan's sub-groups and
        the large register file."""
        kernel[(n_rows,)](
            *args,
            BLOCK_N=self.block_n,
            N_CHUNKS=self.n_chunks,
            **constexprs,
            **hardware.launch_kwargs(kernel, device, self.num_warps),
        )


def plan_vocab(n_cols: int) -> VocabPlan:
    block_n = min(triton.next_power_of_2(max(n_cols, 1)), hardware.LOSS_VOCAB_BLOCK)
    warps = max(1, min(hardware.LOSS_NUM_WARPS, block_n // hardware.DEFAULT_SUB_GROUP_SIZE))
    return VocabPlan(block_n, triton.cdiv(max(n_cols, 1), block_n), prev_power_of_2(warps))


@dataclass(frozen=True)
class CEOptions:
    ignore_index: int
    lse_square_scale: float
    label_smoothing: float
    reduction: str
    softcap: float | None

    def constexprs(self, has_weight: bool) -> dict:
        return {
            "HAS_WEIGHT": has_weight,
            "HAS_SMOOTHING": self.label_smoothing > 0,
            "HAS_SOFTCAP": self.softcap is not None,
        }

    def scalars(self, weight_total: float) -> tuple:
        softcap = 1.0 if self.softcap is None else float(self.softcap)  # unused without HAS_SOFTCAP
        return (self.ignore_index, float(self.lse_square_scale), float(self.label_smoothing), softcap, weight_total)

    def scales(self, n_valid: int, weight_sum: float) -> tuple[float, float]:
        """(loss_scale, z_scale) of the reduction; an all-ignored batch divides by 1 (loss 0)."""
        if self.reduction != "mean":
            return 1.0, 1.0
        return 1.0 / (weight_sum if weight_sum != 0 else 1.0), 1.0 / max(n_valid, 1)


def cross_entropy_forward(logits2d, target, weight, opts: CEOptions, weight_total: float):
    """Per-row (loss, z, lse) in fp32 for rows of ``logits2d`` (unit column stride)."""
    n_rows, n_cols = logits2d.shape
    loss = torch.empty(n_rows, dtype=torch.float32, device=logits2d.device)
    z, lse = torch.empty_like(loss), torch.empty_like(loss)
    if n_rows == 0:
        return loss, z, lse
    plan_vocab(n_cols).launch(
        _cross_entropy_forward_kernel,
        n_rows,
        logits2d.device,
        logits2d,
        target,
        weight if weight is not None else logits2d,  # never read without HAS_WEIGHT
        loss,
        z,
        lse,
        logits2d.stride(0),
        n_cols,
        *opts.scalars(weight_total),
        **opts.constexprs(weight is not None),
    )
    return loss, z, lse


def cross_entropy_backward(
    logits2d, target, weight, lse, grad_out, dx, opts: CEOptions, weight_total, loss_scale, z_scale
):
    """Write grad_logits (times ``grad_out``: one value, or one per row) into ``dx`` (may be ``logits2d``)."""
    n_rows, n_cols = logits2d.shape
    if n_rows == 0:
        return dx
    plan_vocab(n_cols).launch(
        _cross_entropy_backward_kernel,
        n_rows,
        logits2d.device,
        logits2d,
        target,
        weight if weight is not None else logits2d,
        lse,
        grad_out,
        dx,
        logits2d.stride(0),
        dx.stride(0),
        grad_out.stride(0) if grad_out.numel() > 1 else 0,
        n_cols,
        *opts.scalars(weight_total),
        loss_scale,
        z_scale,
        **opts.constexprs(weight is not None),
    )
    return dx


def reduce_rows(loss, z, opts: CEOptions, n_valid: int, weight_sum: float):
    """The reduction of per-row (loss, z): ``(total, z)`` in fp32."""
    if opts.reduction == "none":
        return loss + z, z
    if opts.reduction == "sum":
        z_sum = z.sum()
        return loss.sum() + z_sum, z_sum
    loss_scale, z_scale = opts.scales(n_valid, weight_sum)
    z_mean = z.sum() * z_scale
    return loss.sum() * loss_scale + z_mean, z_mean


def weight_total(weight: torch.Tensor | None, n_cols: int) -> float:
    return float(n_cols) if weight is None else float(weight.float().sum())
