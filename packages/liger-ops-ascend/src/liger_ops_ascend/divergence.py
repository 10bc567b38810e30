"""The elementwise divergences for Ascend NPUs: KL divergence, generalised Jensen-Shannon
divergence and total variation distance (kl_div, jsd, tvd): one row-tiled kernel, its tile plan,
launch and the kernel adapters of `liger_core.drivers.divergence` (which holds the autograd
Functions).

Each loss is a sum of per-element terms whose gradient is also per element, so one pass
does both: tiles of ``BLOCK_M`` rows x ``BLOCK_N`` vocabulary columns (`_tiling.plan_rows`:
several short rows per tile, UB-sized chunks of wide vocabularies), one program per vector
core walking row blocks. The scalar reductions are per-program fp32 partial sums added
afterwards (no atomics); ``"none"`` writes the per-element loss. The gradient (already
scaled by the reduction's divisor) is written in the same pass when the input requires it,
and the backward only multiplies by the upstream gradient.

Per element, ``x`` the differentiated input, ``y`` the other:
- kl_div: ``y (log max(y, eps) - x)``, grad ``-y`` (log_target: ``e^y (y - x)``, ``-e^y``);
- jsd (``x``, ``y`` log-probabilities, ``M = beta e^y + (1 - beta) e^x``):
  ``beta e^y (y - log M) + (1 - beta) e^x (x - log M)``, grad ``(1 - beta) e^x (x - log M)``;
  ``beta = 0``: ``e^y (y - x)``, grad ``-e^y``; ``beta = 1``: ``e^x (x - y)``, grad ``e^x (x - y + 1)``;
- tvd: ``|x - y| / 2``, grad ``sign(x - y) / 2``.
Rows whose label is ``ignore_index`` contribute nothing.

fused_ce_tvd works over logits with the same row tiles: its forward walks a row block's
vocabulary chunks twice (both rows' lse by the online step, then ``sum |p - q|`` and
``sigma = sum p sign(p - q)``) and keeps per-row fp32 scalars; its backward walks them once more:
``grad = grad_ce (p - [v == y]) + grad_tvd 0.5 p (sign(p - q) - sigma)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import divergence as divergence_driver
from liger_core.ops import _losses

from liger_ops_ascend import hardware
from liger_ops_ascend._cross_entropy import _targets, prepare_target
from liger_ops_ascend._jit import below, col_tile, online_lse_step, row_block, rows_or_zeros, tile_indices
from liger_ops_ascend._tiling import FP32, RowPlan, dma, elem_bytes, mask, plan_rows, rows_f32, strides_of, work
from liger_ops_ascend.launch import Tile, launch

KL_DIV = 0
JSD = 1
TVD = 2
_NAMES = {KL_DIV: "kl_div", JSD: "jsd", TVD: "tvd"}


@triton.jit
def _divergence_kernel(
    X, Y, LABELS, OUT, GRAD, x_row_stride, y_row_stride, n_rows, n_cols, n_blocks, n_chunks,
    ignore_index, scale, param, log_beta, log_1m_beta,
    KIND: tl.constexpr, LOG_TARGET: tl.constexpr, BETA_CASE: tl.constexpr, HAS_LABELS: tl.constexpr,
    ELEMENTWISE: tl.constexpr, HAS_GRAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """OUT: per-element loss (ELEMENTWISE) or one partial sum per program. BETA_CASE (jsd):
    0 forward KL, 1 reverse KL, 2 general. ``param``: eps (kl_div) or beta (jsd)."""
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for blk in range(pid, n_blocks, num_programs):
        row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        # Rows that contribute, compared in fp32 (`_jit.below`): inside the tensor, and with a
        # label other than ignore_index (labels and ignore_index are exact in fp32).
        keep = below(m_idx, n_rows - row0)
        if HAS_LABELS:
            labels = tl.load(LABELS + rows, mask=row_mask, other=ignore_index).to(tl.float32)
            keep = keep & (labels != ignore_index)
        base = row0.to(tl.int64)
        x_tile = X + base * x_row_stride + m_idx[:, None] * x_row_stride
        y_tile = Y + base * y_row_stride + m_idx[:, None] * y_row_stride
        # Outputs of this package's own making are dense (tokens, vocab).
        o_tile = base * n_cols + m_idx[:, None] * n_cols
        for c in range(n_chunks):
            cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
            live = keep[:, None] & below(n_idx, n_cols - c * BLOCK_N)[None, :]
            x = tl.load(x_tile + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            y = tl.load(y_tile + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            if KIND == 0:
                if LOG_TARGET:
                    ey = tl.exp(y)
                    loss = ey * (y - x)
                    grad = -ey
                else:
                    loss = y * (tl.log(tl.maximum(y, param, propagate_nan=tl.PropagateNan.ALL)) - x)
                    grad = -y
            elif KIND == 1:
                if BETA_CASE == 0:
                    ey = tl.exp(y)
                    loss = ey * (y - x)
                    grad = -ey
                elif BETA_CASE == 1:
                    ex = tl.exp(x)
                    loss = ex * (x - y)
                    grad = ex * (x - y + 1.0)
                else:
                    a = y + log_beta
                    b = x + log_1m_beta
                    top = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
                    log_m = top + tl.log(tl.exp(a - top) + tl.exp(b - top))
                    ex = tl.exp(x)
                    loss = param * tl.exp(y) * (y - log_m) + (1.0 - param) * ex * (x - log_m)
                    grad = (1.0 - param) * ex * (x - log_m)
            else:
                d = x - y
                loss = 0.5 * tl.abs(d)
                grad = tl.where(d > 0, 0.5, tl.where(d < 0, -0.5, 0.0))
            loss = tl.where(live, loss, 0.0)
            if ELEMENTWISE:
                tl.store(OUT + o_tile + cols[None, :], loss, mask=mask)
            else:
                acc += tl.sum(loss, axis=1)
            if HAS_GRAD:
                g = tl.where(live, grad * scale, 0.0)
                tl.store(GRAD + o_tile + cols[None, :], g.to(GRAD.dtype.element_ty), mask=mask)
    if not ELEMENTWISE:
        tl.store(OUT + pid, tl.sum(acc, axis=0))


def divergence_tiles(m: int, n: int, xb: int, yb: int) -> tuple[Tile, ...]:
    """In the terms of the UB model (ub_model.md), for the heaviest kind (jsd, general beta)."""
    tiles = dma("x", m, n, xb) + dma("y", m, n, yb) + dma("loss", m, n, FP32) + dma("grad", m, n, xb)
    tiles += dma("labels", 1, m, 4)
    # Peak: x and y in fp32, exp(x), exp(y), log M and the loss, then the gradient.
    tiles += work("f32_", m, n, 6)
    # The padded-column mask, per chunk: an fp32 index and its compare; the row mask's.
    tiles += work("col_index", 1, n, 1) + work("live", m, n, 1, 1)
    return tuple(tiles + mask(m, n) + rows_f32(("labels_f32", "keep", "acc"), m))


def plan_tiles(
    kind: int,
    n_rows: int,
    n_cols: int,
    x_dtype: torch.dtype,
    y_dtype: torch.dtype,
    hw: hardware.Hardware,
    row_strides: Sequence[tuple[int, int]] | None = None,
) -> RowPlan:
    """The tile plan of divergence ``kind`` over ``(n_rows, n_cols)`` rows (one kernel serves
    whole and chunked rows)."""
    kernels = ((_NAMES[kind], divergence_tiles),)
    xb, yb = elem_bytes(x_dtype), elem_bytes(y_dtype)
    sizes = {"xb": xb, "yb": yb}
    # x and y may be strided views; the loss (fp32) and the gradient are dense outputs.
    strides = [(n_cols, xb), (n_cols, yb), (n_cols, FP32)] if row_strides is None else row_strides
    return plan_rows(_NAMES[kind], n_rows, n_cols, kernels, kernels, hw, sizes, strides)


# -- host side -------------------------------------------------------------------------------


def divergence_forward(
    kind: int,
    x: torch.Tensor,
    y: torch.Tensor,
    labels: torch.Tensor | None,
    ignore_index: int,
    scale: float,
    elementwise: bool,
    want_grad: bool,
    hw: hardware.Hardware,
    log_target: bool = False,
    param: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(loss, grad)``: loss per element (fp32, ``elementwise``) or the sum (fp32 scalar, not
    scaled); ``grad`` (``x.dtype``, times ``scale``) when ``want_grad``."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    if y.stride(-1) != 1:
        y = y.contiguous()
    n_rows, n_cols = x.shape
    dev = x.device
    grad = torch.empty((n_rows, n_cols), dtype=x.dtype, device=dev) if want_grad else None
    if n_rows == 0 or n_cols == 0:
        loss = torch.zeros((n_rows, n_cols) if elementwise else (), dtype=torch.float32, device=dev)
        return loss, grad
    strides = strides_of(x, y, grad) + [(n_cols, FP32)]
    p = plan_tiles(kind, n_rows, n_cols, x.dtype, y.dtype, hw, strides)
    out = torch.empty((n_rows, n_cols) if elementwise else (p.programs,), dtype=torch.float32, device=dev)
    beta_case, log_beta, log_1m_beta = 2, 0.0, 0.0
    if kind == JSD:
        beta_case = 0 if param == 0 else 1 if param == 1 else 2
        if beta_case == 2:
            log_beta, log_1m_beta = math.log(param), math.log1p(-param)
    lab = None if labels is None else labels.to(torch.int32)
    launch(
        _divergence_kernel, p.kernels[0], hw, x, y, x if lab is None else lab, out, x if grad is None else grad,
        x.stride(0), y.stride(0), n_rows, n_cols, p.n_blocks, p.n_chunks, int(ignore_index), float(scale),
        float(param), log_beta, log_1m_beta, KIND=kind, LOG_TARGET=bool(log_target), BETA_CASE=beta_case,
        HAS_LABELS=lab is not None, ELEMENTWISE=elementwise, HAS_GRAD=want_grad, BLOCK_M=p.block_m,
        BLOCK_N=p.block_n,
    )  # fmt: skip
    # Second stage of the scalar reductions: the per-program partials summed.
    loss = out if elementwise else out.sum()
    return loss, grad


class DivergenceKernels:
    """`liger_core.drivers.divergence.DivergenceKernels` on `divergence_forward` (loss and scaled
    gradient in one pass). The device scale of jsd and tvd is read once on the host: the kernel
    takes it as a scalar argument."""

    protocol = divergence_driver.PROTOCOL

    def kl_div(self, x, t, elementwise, log_target, eps, scale, want_grad):
        hw = hardware.current(x.device)
        return divergence_forward(KL_DIV, x, t, None, -100, scale, elementwise, want_grad, hw, log_target, float(eps))

    def jsd(self, x, y, labels, beta, ignore_index, scale, want_grad):
        hw = hardware.current(x.device)
        return divergence_forward(
            JSD, x, y, labels, ignore_index, float(scale), False, want_grad, hw, param=float(beta)
        )

    def tvd(self, p, q, labels, elementwise, ignore_index, scale, want_grad):
        hw = hardware.current(p.device)
        return divergence_forward(TVD, p, q, labels, ignore_index, float(scale), elementwise, want_grad, hw)

    def scale_grad(self, grad, upstream):
        return (grad.float() * upstream).to(grad.dtype)


FUNCTIONS = divergence_driver.autograd_functions(DivergenceKernels(), __name__)
LigerKLDivFunction = implements("kl_div")(FUNCTIONS["kl_div"])
LigerJSDFunction = implements("jsd")(FUNCTIONS["jsd"])
LigerTVDFunction = implements("tvd")(FUNCTIONS["tvd"])


# -- fused_ce_tvd --------------------------------------------------------------------------------


@triton.jit
def _fused_ce_tvd_forward_kernel(
    S, T, Y, CE, TVD, S_LSE, T_LSE, SIGMA, s_row_stride, t_row_stride, n_rows, n_cols, n_blocks, n_chunks,
    ignore_index, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    pid, num_programs, m_idx, _ = tile_indices(BLOCK_M, BLOCK_N)
    for blk in range(pid, n_blocks, num_programs):
        row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        keep, y = _targets(Y, rows, row_mask, ignore_index)
        base = row0.to(tl.int64)
        s_tile = S + base * s_row_stride + m_idx[:, None] * s_row_stride
        t_tile = T + base * t_row_stride + m_idx[:, None] * t_row_stride
        s_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
        s_sum = tl.zeros((BLOCK_M,), tl.float32)
        t_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
        t_sum = tl.zeros((BLOCK_M,), tl.float32)
        for c in range(n_chunks):
            cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
            s = tl.load(s_tile + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32)
            s_max, s_sum = online_lse_step(s_max, s_sum, s)
            t = tl.load(t_tile + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32)
            t_max, t_sum = online_lse_step(t_max, t_sum, t)
        # Rows past the end: lse 0 (never stored), not log(0); the row test in fp32 (below()).
        live = below(m_idx, n_rows - row0)
        s_lse = tl.where(live, s_max + tl.log(tl.where(live, s_sum, 1.0)), 0.0)
        t_lse = tl.where(live, t_max + tl.log(tl.where(live, t_sum, 1.0)), 0.0)
        abs_sum = tl.zeros((BLOCK_M,), tl.float32)
        sigma = tl.zeros((BLOCK_M,), tl.float32)
        for c in range(n_chunks):
            cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
            # Masked entries: -inf logits, so p = q = 0 there.
            p = tl.exp(tl.load(s_tile + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32) - s_lse[:, None])
            q = tl.exp(tl.load(t_tile + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32) - t_lse[:, None])
            d = p - q
            abs_sum += tl.sum(tl.abs(d), axis=1)
            sigma += tl.sum(tl.where(d > 0, p, tl.where(d < 0, -p, 0.0)), axis=1)
        # The target logits: one masked gather (an out-of-range target, refused on the host, reads nothing).
        hit = keep & (y >= 0) & below(y, n_cols)
        x_y = tl.load(S + base * s_row_stride + m_idx * s_row_stride + y, mask=hit, other=0.0).to(tl.float32)
        tl.store(CE + rows, tl.where(keep, s_lse - x_y, 0.0), mask=row_mask)
        tl.store(TVD + rows, tl.where(keep, 0.5 * abs_sum, 0.0), mask=row_mask)
        tl.store(S_LSE + rows, s_lse, mask=row_mask)
        tl.store(T_LSE + rows, t_lse, mask=row_mask)
        tl.store(SIGMA + rows, sigma, mask=row_mask)


@triton.jit
def _fused_ce_tvd_backward_kernel(
    S, T, Y, S_LSE, T_LSE, SIGMA, UP_CE, UP_TVD, G, s_row_stride, t_row_stride, n_rows, n_cols, n_blocks,
    n_chunks, ignore_index, HAS_UP_CE: tl.constexpr, HAS_UP_TVD: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):  # fmt: skip
    pid, num_programs, m_idx, _ = tile_indices(BLOCK_M, BLOCK_N)
    for blk in range(pid, n_blocks, num_programs):
        row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        keep, y = _targets(Y, rows, row_mask, ignore_index)
        s_lse = tl.load(S_LSE + rows, mask=row_mask, care_padding=False)
        t_lse = tl.load(T_LSE + rows, mask=row_mask, care_padding=False)
        sigma = tl.load(SIGMA + rows, mask=row_mask, care_padding=False)
        up_ce = rows_or_zeros(UP_CE, rows, row_mask, HAS_UP_CE, BLOCK_M)
        up_tvd = rows_or_zeros(UP_TVD, rows, row_mask, HAS_UP_TVD, BLOCK_M)
        base = row0.to(tl.int64)
        s_tile = S + base * s_row_stride + m_idx[:, None] * s_row_stride
        t_tile = T + base * t_row_stride + m_idx[:, None] * t_row_stride
        # The gradient is a dense output of this package's own making.
        g_tile = G + base * n_cols + m_idx[:, None] * n_cols
        for c in range(n_chunks):
            cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
            p = tl.exp(tl.load(s_tile + cols[None, :], mask=mask, care_padding=False).to(tl.float32) - s_lse[:, None])
            g = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
            if HAS_UP_CE:
                g = up_ce[:, None] * tl.where(cols.to(tl.float32)[None, :] == y.to(tl.float32)[:, None], p - 1.0, p)
            if HAS_UP_TVD:
                t = tl.load(t_tile + cols[None, :], mask=mask, care_padding=False).to(tl.float32)
                q = tl.exp(t - t_lse[:, None])
                d = p - q
                sign = tl.where(d > 0, 1.0, tl.where(d < 0, -1.0, 0.0))
                g += (up_tvd * 0.5)[:, None] * p * (sign - sigma[:, None])
            g = tl.where(keep[:, None], g, 0.0)
            tl.store(g_tile + cols[None, :], g.to(G.dtype.element_ty), mask=mask)


def fused_ce_tvd_tiles(m: int, n: int, sb: int, tb: int, gb: int) -> tuple[Tile, ...]:
    """The live tiles of either fused_ce_tvd kernel (the backward's are the larger: it also stores
    the gradient), in the terms of the UB model (ub_model.md)."""
    tiles = dma("student", m, n, sb) + dma("teacher", m, n, tb) + dma("grad", m, n, gb)
    # Peak: s and t in fp32, p, q, p - q (or the gradient), the sign.
    tiles += work("f32_", m, n, 6)
    tiles += work("col_index", 1, n, 1) + work("hit", m, n, 1, 1)
    rows = ("y", "keep", "s_max", "s_sum", "t_max", "t_sum", "s_lse", "t_lse", "abs_sum", "sigma", "up_ce", "up_tvd")
    return tuple(tiles + mask(m, n) + rows_f32(rows, m))


def plan_fused_ce_tvd(
    direction: str,
    n_rows: int,
    n_cols: int,
    s_dtype: torch.dtype,
    t_dtype: torch.dtype,
    hw: hardware.Hardware,
    row_strides: Sequence[tuple[int, int]] | None = None,
) -> RowPlan:
    """The tile plan of fused_ce_tvd's ``direction`` ("forward" or "backward") over (n_rows, n_cols)."""
    name = f"fused_ce_tvd_{direction}"
    kernels = ((name, fused_ce_tvd_tiles),)
    sb, tb = elem_bytes(s_dtype), elem_bytes(t_dtype)
    sizes = {"sb": sb, "tb": tb, "gb": sb if direction == "backward" else 0}
    strides = [(n_cols, sb), (n_cols, tb)] if row_strides is None else row_strides
    return plan_rows(name, n_rows, n_cols, kernels, kernels, hw, sizes, strides)


def fused_ce_tvd_forward(s, t, target, ignore_index, hw):
    """``(ce, tvd, s_lse, t_lse, sigma)``, fp32 per row, over (rows, vocab) logits with unit column stride."""
    n_rows, n_cols = s.shape
    ce, tvd_, s_lse, t_lse, sigma = (torch.empty(n_rows, dtype=torch.float32, device=s.device) for _ in range(5))
    if n_rows:
        p = plan_fused_ce_tvd("forward", n_rows, n_cols, s.dtype, t.dtype, hw, strides_of(s, t))
        launch(
            _fused_ce_tvd_forward_kernel, p.kernels[0], hw, s, t, target, ce, tvd_, s_lse, t_lse, sigma,
            s.stride(0), t.stride(0), n_rows, n_cols, p.n_blocks, p.n_chunks, int(ignore_index),
            BLOCK_M=p.block_m, BLOCK_N=p.block_n,
        )  # fmt: skip
    return ce, tvd_, s_lse, t_lse, sigma


def fused_ce_tvd_backward(s, t, target, s_lse, t_lse, sigma, up_ce, up_tvd, ignore_index, hw) -> torch.Tensor:
    """d(loss)/d(student logits) in the student's dtype; ``up_ce`` / ``up_tvd`` the per-row
    incoming gradients (None: that output feeds nothing)."""
    n_rows, n_cols = s.shape
    grad = torch.empty((n_rows, n_cols), dtype=s.dtype, device=s.device)
    if n_rows:
        strides = strides_of(s, t, grad)
        p = plan_fused_ce_tvd("backward", n_rows, n_cols, s.dtype, t.dtype, hw, strides)
        launch(
            _fused_ce_tvd_backward_kernel, p.kernels[0], hw, s, t, target, s_lse, t_lse, sigma,
            up_ce if up_ce is not None else s_lse, up_tvd if up_tvd is not None else s_lse, grad,
            s.stride(0), t.stride(0), n_rows, n_cols, p.n_blocks, p.n_chunks, int(ignore_index),
            HAS_UP_CE=up_ce is not None, HAS_UP_TVD=up_tvd is not None, BLOCK_M=p.block_m, BLOCK_N=p.block_n,
        )  # fmt: skip
    return grad


def _no_check() -> None:
    """The target was checked before the launch (`_losses.label_stats`)."""


class FusedCETVDKernels:
    """`liger_core.drivers.divergence.FusedCETVDKernels` on this module's fused_ce_tvd kernels."""

    protocol = divergence_driver.PROTOCOL

    def fused_ce_tvd_target(self, target, ignore_index, n_classes):
        _losses.label_stats("fused_ce_tvd", target, ignore_index, n_classes)
        return prepare_target(target).contiguous(), _no_check

    def fused_ce_tvd_forward(self, s, t, target, ignore_index):
        return fused_ce_tvd_forward(s, t, target, ignore_index, hardware.current(s.device))

    def fused_ce_tvd_backward(self, s, t, target, s_lse, t_lse, sigma, up_ce, up_tvd, ignore_index):
        hw = hardware.current(s.device)
        return fused_ce_tvd_backward(s, t, target, s_lse, t_lse, sigma, up_ce, up_tvd, ignore_index, hw)


LigerFusedCETVDFunction = implements("fused_ce_tvd")(
    divergence_driver.fused_ce_tvd_function(FusedCETVDKernels(), __name__)
)
