"""Elementwise divergences for Intel GPUs: kl_div, jsd (the generalised Jensen-Shannon
divergence: forward KL at beta 0, reverse KL at beta 1, the mixture otherwise) and tvd (total
variation distance), one kernel pair with the divergence chosen by a constexpr KIND, its
launchers (also used by fused_linear_jsd on chunks of log-probabilities) and the three ops'
autograd Functions (the backward shared); and fused_ce_tvd, cross-entropy + TVD over logits: its
kernels and the kernel adapter of `liger_core.drivers.divergence` (which holds its Function).

Own driver (kl_div, jsd, tvd): the backward recomputes the gradient from the saved inputs, so no
gradient buffer lives between forward and backward; liger-core's divergence driver has the forward
write the gradient and keep it for backward (an x-sized buffer held in between), which this
strategy cannot be expressed through without holding that buffer.

Both kernels run on a 2-D grid of [BLOCK_M rows x BLOCK_N columns] tiles (elementwise sizes
from hardware: these ops stream two inputs and have no row-wide reduction). The forward either
stores every element's loss ("none") or one fp32 partial sum per program, summed once at the
end (no atomics, deterministic). The backward recomputes the elementwise derivative from the
inputs, times the reduction's scale and the incoming gradient (one value, or one per element),
so no gradient buffer lives between forward and backward. Rows whose label is ignore_index
(HAS_LABELS) contribute nothing.

Derivatives in x (y the constant second input):
    kl:  t (log max(t, eps) - x) -> -t;   log target: e^t (t - x) -> -e^t
    tvd: |x - y| / 2 -> sign(x - y) / 2
    jsd: with M = b e^y + (1 - b) e^x, b e^y (y - log M) + (1 - b) e^x (x - log M)
         -> (1 - b) e^x (x - log M); b = 0: e^y (y - x) -> -e^y; b = 1: e^x (x - y) -> e^x (x - y + 1)

fused_ce_tvd runs over logits with the cross-entropy's vocabulary plan (one program per row,
N_CHUNKS blocks of BLOCK_N, per-lane running max and sum): the forward walks the row twice (both
lse, then ``sum |p - q|`` and ``sigma = sum p sign(p - q)``) and stores per-row fp32 scalars; the
backward walks it once more and writes
``grad_ce (p - [v == y]) + grad_tvd 0.5 p (sign(p - q) - sigma)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import divergence as divergence_driver
from liger_core.ops import jsd, kl_div, tvd
from liger_core.ops._losses import label_count, label_stats

from liger_ops_xpu._cross_entropy import plan_vocab
from liger_ops_xpu._jit import col_tile, row_tile, zero_row
from liger_ops_xpu._tiling import launch_blocks, plan_blocks, unit_col

KL, TVD, JSD, JSD_FORWARD_KL, JSD_REVERSE_KL = 0, 1, 2, 3, 4


@triton.jit
def _loss_and_grad(x, y, beta, eps, KIND: tl.constexpr, LOG_TARGET: tl.constexpr):
    if KIND == 0:
        if LOG_TARGET:
            p = tl.exp(y)
            return p * (y - x), -p
        else:
            return y * (tl.log(tl.maximum(y, eps)) - x), -y
    elif KIND == 1:
        d = x - y
        return 0.5 * tl.abs(d), tl.where(d > 0, 0.5, tl.where(d < 0, -0.5, 0.0))
    elif KIND == 3:
        p = tl.exp(y)
        return p * (y - x), -p
    elif KIND == 4:
        q = tl.exp(x)
        return q * (x - y), q * (x - y + 1.0)
    else:
        a = y + tl.log(beta)
        b = x + tl.log(1.0 - beta)
        m = tl.maximum(a, b)
        log_m = m + tl.log(tl.exp(a - m) + tl.exp(b - m))
        p = tl.exp(y)
        q = tl.exp(x)
        return beta * p * (y - log_m) + (1.0 - beta) * q * (x - log_m), (1.0 - beta) * q * (x - log_m)


@triton.jit
def _load_tile(
    X, Y, LABELS, x_row_stride, y_row_stride, n_rows, n_cols, ignore_index, HAS_LABELS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """This program's [BLOCK_M rows x BLOCK_N columns] tile: ``(rows64, cols, in_range, mask, x,
    y)``, ``in_range`` its elements in range, ``mask`` those that count (row not ignored), x and
    y in fp32."""
    rows, row_mask, rows64 = row_tile(tl.program_id(0) * BLOCK_M, n_rows, BLOCK_M)
    cols, in_range = col_tile(tl.program_id(1), n_cols, row_mask, BLOCK_N)
    mask = in_range
    if HAS_LABELS:
        labels = tl.load(LABELS + rows, mask=row_mask, other=ignore_index)
        mask = in_range & (labels != ignore_index)[:, None]
    x = tl.load(X + rows64[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    y = tl.load(Y + rows64[:, None] * y_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    return rows64, cols, in_range, mask, x, y


@triton.jit
def _divergence_forward_kernel(
    X,
    Y,
    LABELS,
    OUT,
    PARTIAL,
    x_row_stride,
    y_row_stride,
    out_row_stride,
    n_rows,
    n_cols,
    ignore_index,
    beta,
    eps,
    KIND: tl.constexpr,
    LOG_TARGET: tl.constexpr,
    HAS_LABELS: tl.constexpr,
    STORE_ELEMENTS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows64, cols, in_range, mask, x, y = _load_tile(
        X, Y, LABELS, x_row_stride, y_row_stride, n_rows, n_cols, ignore_index, HAS_LABELS, BLOCK_M, BLOCK_N
    )
    loss, _ = _loss_and_grad(x, y, beta, eps, KIND, LOG_TARGET)
    loss = tl.where(mask, loss, 0.0)
    if STORE_ELEMENTS:  # ignored rows get 0
        tl.store(OUT + rows64[:, None] * out_row_stride + cols[None, :], loss, mask=in_range)
    else:
        tile = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
        tl.store(PARTIAL + tile, tl.sum(tl.sum(loss, axis=1), axis=0))


@triton.jit
def _divergence_backward_kernel(
    X,
    Y,
    LABELS,
    GRAD_OUT,
    DX,
    x_row_stride,
    y_row_stride,
    g_row_stride,
    g_col_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    ignore_index,
    beta,
    eps,
    scale,
    KIND: tl.constexpr,
    LOG_TARGET: tl.constexpr,
    HAS_LABELS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows64, cols, in_range, mask, x, y = _load_tile(
        X, Y, LABELS, x_row_stride, y_row_stride, n_rows, n_cols, ignore_index, HAS_LABELS, BLOCK_M, BLOCK_N
    )
    g_out = tl.load(GRAD_OUT + rows64[:, None] * g_row_stride + cols[None, :] * g_col_stride, mask=mask, other=0.0)
    _, grad = _loss_and_grad(x, y, beta, eps, KIND, LOG_TARGET)
    dx = tl.where(mask, grad * scale * g_out.to(tl.float32), 0.0)
    # Ignored rows get 0.
    tl.store(DX + rows64[:, None] * dx_row_stride + cols[None, :], dx.to(DX.dtype.element_ty), mask=in_range)


@dataclass(frozen=True)
class Divergence:
    """What to compute: KIND, its options, the rows to skip."""

    kind: int
    log_target: bool = False
    beta: float = 0.5
    eps: float = 1e-10
    ignore_index: int = -100

    def scalars(self) -> tuple:
        return (self.ignore_index, float(self.beta), float(self.eps))

    def constexprs(self, labels) -> dict:
        return {"KIND": self.kind, "LOG_TARGET": self.log_target, "HAS_LABELS": labels is not None}


def jsd_divergence(beta: float, ignore_index: int) -> Divergence:
    """The generalised JSD at ``beta``: forward KL at 0, reverse KL at 1, the mixture otherwise."""
    kind = JSD_FORWARD_KL if beta == 0 else JSD_REVERSE_KL if beta == 1 else JSD
    return Divergence(kind, beta=float(beta), ignore_index=ignore_index)


def divergence_forward(x, y, labels, div: Divergence, elementwise: bool) -> torch.Tensor:
    """fp32 loss per element (``elementwise``) or the unscaled sum over counted elements."""
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return (
            torch.zeros(x.shape, dtype=torch.float32, device=x.device)
            if elementwise
            else x.new_zeros((), dtype=torch.float32)
        )
    x, y = unit_col(x), unit_col(y)
    plan = plan_blocks(n_cols)
    grid = plan.grid(n_rows, n_cols)
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device) if elementwise else None
    partial = None if elementwise else torch.empty(grid, dtype=torch.float32, device=x.device)
    launch_blocks(
        _divergence_forward_kernel,
        grid,
        plan,
        x.device,
        x,
        y,
        labels if labels is not None else x,  # never read without HAS_LABELS
        out if elementwise else partial,
        partial if not elementwise else out,
        x.stride(0),
        y.stride(0),
        out.stride(0) if elementwise else 0,
        n_rows,
        n_cols,
        *div.scalars(),
        **div.constexprs(labels),
        STORE_ELEMENTS=elementwise,
    )
    return out if elementwise else partial.sum()


def divergence_backward(x, y, labels, div: Divergence, grad_out: torch.Tensor, scale: float, out_dtype) -> torch.Tensor:
    """grad_x = d(loss)/dx * scale * grad_out (a scalar, or one per element)."""
    n_rows, n_cols = x.shape
    dx = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    if x.numel() == 0:
        return dx
    x, y = unit_col(x), unit_col(y)
    if grad_out.dim() == 0 or grad_out.numel() == 1:
        g, g_strides = grad_out.reshape(1), (0, 0)
    else:
        g, g_strides = grad_out, (grad_out.stride(0), grad_out.stride(1))
    plan = plan_blocks(n_cols)
    launch_blocks(
        _divergence_backward_kernel,
        plan.grid(n_rows, n_cols),
        plan,
        x.device,
        x,
        y,
        labels if labels is not None else x,
        g,
        dx,
        x.stride(0),
        y.stride(0),
        *g_strides,
        dx.stride(0),
        n_rows,
        n_cols,
        *div.scalars(),
        float(scale),
        **div.constexprs(labels),
    )
    return dx


class LigerDivergenceFunction(torch.autograd.Function):
    """The autograd of kl_div, jsd and tvd (five arguments, a gradient for the first only): each
    op's subclass below checks its arguments and calls `forward_divergence`; backward is this one.

    ``loss = reduce(divergence(x, y))``: ``scale`` divides the sum (None: elementwise, no
    reduction); the result is cast to ``out_dtype``."""

    @staticmethod
    def forward_divergence(ctx, x, y, labels, div: Divergence, scale: float | None, out_dtype: torch.dtype):
        elementwise = scale is None
        loss = divergence_forward(x, y, labels, div, elementwise)
        if not elementwise:
            loss = loss * scale
        ctx.save_for_backward(x, y, labels)
        ctx.div, ctx.scale = div, 1.0 if elementwise else scale
        return loss.to(out_dtype)

    @staticmethod
    def backward(ctx, grad_out):
        x, y, labels = ctx.saved_tensors
        dx = divergence_backward(x, y, labels, ctx.div, grad_out, ctx.scale, x.dtype)
        return dx, None, None, None, None


@implements("kl_div")
class LigerKLDivFunction(LigerDivergenceFunction):
    @staticmethod
    def forward(ctx, y_pred, y_true, reduction, log_target, eps):
        kl_div.check_args(y_pred, y_true, reduction, log_target, eps)
        n_rows = y_pred.shape[0]
        scale = {"none": None, "sum": 1.0, "batchmean": 1.0 / max(n_rows, 1), "mean": 1.0 / max(y_pred.numel(), 1)}
        div = Divergence(KL, log_target=log_target, eps=float(eps))
        return LigerDivergenceFunction.forward_divergence(
            ctx, y_pred, y_true, None, div, scale[reduction], torch.float32
        )


@implements("jsd")
class LigerJSDFunction(LigerDivergenceFunction):
    @staticmethod
    def forward(ctx, student_logp, teacher_logp, shift_labels, beta, ignore_index):
        jsd.check_args(student_logp, teacher_logp, shift_labels, beta, ignore_index)
        n = label_count("jsd", shift_labels, ignore_index, student_logp.shape[0])
        labels = None if shift_labels is None else shift_labels.contiguous()
        div = jsd_divergence(beta, ignore_index)
        return LigerDivergenceFunction.forward_divergence(
            ctx, student_logp, teacher_logp, labels, div, 1.0 / max(n, 1), student_logp.dtype
        )


@implements("tvd")
class LigerTVDFunction(LigerDivergenceFunction):
    @staticmethod
    def forward(ctx, p, q, shift_labels, reduction, ignore_index):
        tvd.check_args(p, q, shift_labels, reduction, ignore_index)
        n_rows, n_cols = p.shape
        n = label_count("tvd", shift_labels, ignore_index, n_rows) if reduction in ("batchmean", "mean") else 0
        scale = {"none": None, "sum": 1.0, "batchmean": 1.0 / max(n, 1), "mean": 1.0 / max(n * n_cols, 1)}
        labels = None if shift_labels is None else shift_labels.contiguous()
        div = Divergence(TVD, ignore_index=ignore_index)
        return LigerDivergenceFunction.forward_divergence(ctx, p, q, labels, div, scale[reduction], torch.float32)


@triton.jit
def _row_lse(x_row, n_cols, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr):
    """The logsumexp of one row of logits in fp32 (per-lane running max and sum, then combined)."""
    cols = tl.arange(0, BLOCK_N)
    m = tl.full((BLOCK_N,), -float("inf"), tl.float32)
    d = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for chunk in range(N_CHUNKS):
        c = chunk * BLOCK_N + cols
        x = tl.load(x_row + c, mask=c < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        d = d * tl.exp(m - safe) + tl.exp(x - safe)
        m = m_new
    row_max = tl.max(m, axis=0)
    return row_max + tl.log(tl.sum(d * tl.exp(m - row_max), axis=0))


@triton.jit
def _fused_ce_tvd_forward_kernel(
    S, T, Y, CE, TVD, S_LSE, T_LSE, SIGMA, s_row_stride, t_row_stride, n_cols, ignore_index,
    BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    y = tl.load(Y + row).to(tl.int64)
    if y == ignore_index:
        tl.store(CE + row, 0.0)
        tl.store(TVD + row, 0.0)
        tl.store(S_LSE + row, 0.0)
        tl.store(T_LSE + row, 0.0)
        tl.store(SIGMA + row, 0.0)
        return
    s_row = S + row * s_row_stride
    t_row = T + row * t_row_stride
    s_lse = _row_lse(s_row, n_cols, BLOCK_N, N_CHUNKS)
    t_lse = _row_lse(t_row, n_cols, BLOCK_N, N_CHUNKS)
    cols = tl.arange(0, BLOCK_N)
    abs_sum = tl.zeros((BLOCK_N,), dtype=tl.float32)
    sigma = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for chunk in range(N_CHUNKS):
        c = chunk * BLOCK_N + cols
        mask = c < n_cols
        # Padding: -inf logits, so p = q = 0 there.
        p = tl.exp(tl.load(s_row + c, mask=mask, other=-float("inf")).to(tl.float32) - s_lse)
        q = tl.exp(tl.load(t_row + c, mask=mask, other=-float("inf")).to(tl.float32) - t_lse)
        d = p - q
        abs_sum += tl.abs(d)
        sigma += tl.where(d > 0, p, tl.where(d < 0, -p, 0.0))
    # An out-of-range target (refused on the host before the launch) would read nothing.
    x_y = tl.load(s_row + y, mask=(y >= 0) & (y < n_cols), other=0.0).to(tl.float32)
    tl.store(CE + row, s_lse - x_y)
    tl.store(TVD + row, 0.5 * tl.sum(abs_sum, axis=0))
    tl.store(S_LSE + row, s_lse)
    tl.store(T_LSE + row, t_lse)
    tl.store(SIGMA + row, tl.sum(sigma, axis=0))


@triton.jit
def _fused_ce_tvd_backward_kernel(
    S, T, Y, S_LSE, T_LSE, SIGMA, UP_CE, UP_TVD, DX, s_row_stride, t_row_stride, dx_row_stride, n_cols,
    ignore_index, HAS_UP_CE: tl.constexpr, HAS_UP_TVD: tl.constexpr, BLOCK_N: tl.constexpr,
    N_CHUNKS: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    y = tl.load(Y + row).to(tl.int64)
    dx_row = DX + row * dx_row_stride
    cols = tl.arange(0, BLOCK_N)
    if y == ignore_index:
        zero_row(dx_row, n_cols, BLOCK_N, N_CHUNKS)
        return
    s_row = S + row * s_row_stride
    t_row = T + row * t_row_stride
    s_lse = tl.load(S_LSE + row)
    t_lse = tl.load(T_LSE + row)
    sigma = tl.load(SIGMA + row)
    up_ce = 0.0
    if HAS_UP_CE:
        up_ce = tl.load(UP_CE + row).to(tl.float32)
    up_tvd = 0.0
    if HAS_UP_TVD:
        up_tvd = tl.load(UP_TVD + row).to(tl.float32)
    for chunk in range(N_CHUNKS):
        c = chunk * BLOCK_N + cols
        mask = c < n_cols
        p = tl.exp(tl.load(s_row + c, mask=mask, other=0.0).to(tl.float32) - s_lse)
        g = tl.zeros((BLOCK_N,), tl.float32)
        if HAS_UP_CE:
            g = up_ce * tl.where(c == y, p - 1.0, p)
        if HAS_UP_TVD:
            q = tl.exp(tl.load(t_row + c, mask=mask, other=0.0).to(tl.float32) - t_lse)
            d = p - q
            g += up_tvd * 0.5 * p * (tl.where(d > 0, 1.0, tl.where(d < 0, -1.0, 0.0)) - sigma)
        tl.store(dx_row + c, g.to(DX.dtype.element_ty), mask=mask)


def fused_ce_tvd_forward(s: torch.Tensor, t: torch.Tensor, target: torch.Tensor, ignore_index: int):
    """``(ce, tvd, s_lse, t_lse, sigma)``, fp32 per row, over (rows, vocab) logits with unit column stride."""
    n_rows, n_cols = s.shape
    ce, tvd_, s_lse, t_lse, sigma = (torch.empty(n_rows, dtype=torch.float32, device=s.device) for _ in range(5))
    if n_rows:
        plan_vocab(n_cols).launch(
            _fused_ce_tvd_forward_kernel, n_rows, s.device, s, t, target, ce, tvd_, s_lse, t_lse, sigma,
            s.stride(0), t.stride(0), n_cols, ignore_index,
        )  # fmt: skip
    return ce, tvd_, s_lse, t_lse, sigma


def fused_ce_tvd_backward(s, t, target, s_lse, t_lse, sigma, up_ce, up_tvd, ignore_index) -> torch.Tensor:
    """d(loss)/d(student logits) in the student's dtype; ``up_ce`` / ``up_tvd`` the per-row
    incoming gradients (None: that output feeds nothing)."""
    n_rows, n_cols = s.shape
    dx = torch.empty((n_rows, n_cols), dtype=s.dtype, device=s.device)
    if n_rows:
        plan_vocab(n_cols).launch(
            _fused_ce_tvd_backward_kernel, n_rows, s.device, s, t, target, s_lse, t_lse, sigma,
            up_ce if up_ce is not None else s_lse, up_tvd if up_tvd is not None else s_lse, dx,
            s.stride(0), t.stride(0), dx.stride(0), n_cols, ignore_index,
            HAS_UP_CE=up_ce is not None, HAS_UP_TVD=up_tvd is not None,
        )  # fmt: skip
    return dx


def _no_check() -> None:
    """The target was checked before the launch (`label_stats`)."""


class FusedCETVDKernels:
    """`liger_core.drivers.divergence.FusedCETVDKernels` on this module's fused_ce_tvd kernels."""

    protocol = divergence_driver.PROTOCOL
    fused_ce_tvd_forward = staticmethod(fused_ce_tvd_forward)
    fused_ce_tvd_backward = staticmethod(fused_ce_tvd_backward)

    def fused_ce_tvd_target(self, target, ignore_index, n_classes):
        label_stats("fused_ce_tvd", target, ignore_index, n_classes)
        return target, _no_check


LigerFusedCETVDFunction = implements("fused_ce_tvd")(
    divergence_driver.fused_ce_tvd_function(FusedCETVDKernels(), __name__)
)
