"""The divergences for NVIDIA GPUs: KL divergence, generalised JSD and total variation distance
(kl_div, jsd, tvd), and fused_ce_tvd (cross-entropy + TVD over logits): Triton kernels, launch
and the kernel adapters of `liger_core.drivers.divergence` (which holds the autograd Functions).

One program per (row, vocabulary tile).

Each program reads its tile of the inputs once, writes its tile of the gradient (when the
first input needs one; scaled by the reduction, computed in fp32, rounded once) and one
fp32 partial sum of the loss (or, for reduction "none", the per-element loss). The loss is
the sum of the partials times a scale that may live on the device (``1 / counted rows`` of
jsd and tvd: no host synchronisation anywhere). Backward only rescales the gradient in place
when the incoming gradient is not 1 (`scale_unless_one`, decided on the device).

- kl_div: the gradient (``-y_true``, or ``-exp(y_true)``, times the reduction's scale) does not
  depend on ``y_pred``. Reduction "none" writes the per-element loss and forms the gradient
  in backward.
- jsd: student and teacher log-probabilities; the student's gradient is scaled by
  ``1 / counted rows``, a device scalar.
- tvd: ``grad_p = 0.5 * sign(p - q)`` times the reduction's scale (a device scalar: the counted
  rows are never read on the host); "none" writes the per-element loss.
- fused_ce_tvd: over logits, one program per row streams the vocabulary twice (both rows' lse
  by the online step, then ``sum |p - q|`` and ``sigma = sum p sign(p - q)``), or loads a row
  once when it fits in registers (``hardware.CE_TVD_ONE_PASS_MAX_COLS``), and keeps only
  per-row fp32 scalars; backward runs on (row, vocabulary tile) programs from them:
  ``grad = grad_ce (p - [v == y]) + grad_tvd 0.5 p (sign(p - q) - sigma)``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import divergence as divergence_driver
from liger_ops_cuda import hardware
from liger_ops_cuda._cross_entropy import plan_vocab_rows, target_stats
from liger_ops_cuda._jit import online_lse_step, row_offset, vocab_tile
from liger_ops_cuda._tiling import scale_unless_one

MODE_FORWARD_KL, MODE_REVERSE_KL, MODE_MIXED = 0, 1, 2


@triton.jit
def _kl_div_forward_kernel(
    X, x_row_stride, T, t_row_stride, G, g_row_stride, OUT, out_row_stride, n_cols, eps, grad_scale,
    LOG_TARGET: tl.constexpr, ELEMENTWISE: tl.constexpr, WRITE_GRAD: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    row, tile, cols, mask = vocab_tile(n_cols, BLOCK_N)
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
    row, tile, cols, mask = vocab_tile(n_cols, BLOCK_N)
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
    row, tile, cols, mask = vocab_tile(n_cols, BLOCK_N)
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


class DivergenceKernels:
    """`liger_core.drivers.divergence.DivergenceKernels` on this module's one-pass kernels."""

    protocol = divergence_driver.PROTOCOL

    def kl_div(self, x, t, elementwise, log_target, eps, scale, want_grad):
        out, grad = kl_div_forward(x, t, elementwise, log_target, eps, scale, want_grad)
        return (out if elementwise else out.sum()), grad

    def jsd(self, x, y, labels, beta, ignore_index, scale, want_grad):
        grad = torch.empty(x.shape, dtype=x.dtype, device=x.device) if want_grad else None
        return jsd_forward(x, y, labels, beta, ignore_index, scale, grad).sum(), grad

    def tvd(self, p, q, labels, elementwise, ignore_index, scale, want_grad):
        out, grad = tvd_forward(p, q, labels, elementwise, ignore_index, scale, want_grad)
        return (out if elementwise else out.sum()), grad

    def scale_grad(self, grad, upstream):
        scale_unless_one(grad, upstream)  # in place, skipped on the device when the upstream is 1
        return grad


FUNCTIONS = divergence_driver.autograd_functions(DivergenceKernels(), __name__)
LigerKLDivFunction = implements("kl_div")(FUNCTIONS["kl_div"])
LigerJSDFunction = implements("jsd")(FUNCTIONS["jsd"])
LigerTVDFunction = implements("tvd")(FUNCTIONS["tvd"])


@triton.jit
def _fused_ce_tvd_forward_kernel(
    S, s_row_stride, T, t_row_stride, Y, CE, TVD, S_LSE, T_LSE, SIGMA, n_cols, ignore_index,
    BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr,
):  # fmt: skip
    # One program per row. Pass 1: both rows' lse; pass 2: sum |p - q| and sigma = sum p sign(p - q).
    # ONE_PASS (BLOCK_N >= n_cols): both passes over one load of the rows.
    row = tl.program_id(0)
    y = tl.load(Y + row)
    if y == ignore_index:
        tl.store(CE + row, 0.0)
        tl.store(TVD + row, 0.0)
        tl.store(S_LSE + row, 0.0)
        tl.store(T_LSE + row, 0.0)
        tl.store(SIGMA + row, 0.0)
        return
    s_row = S + row_offset(row, s_row_stride)
    t_row = T + row_offset(row, t_row_stride)
    offs = tl.arange(0, BLOCK_N)
    # Masked lanes: -inf logits, so p = q = 0 and they add nothing.
    if ONE_PASS:
        mask = offs < n_cols
        s = tl.load(s_row + offs, mask=mask, other=float("-inf")).to(tl.float32)
        t = tl.load(t_row + offs, mask=mask, other=float("-inf")).to(tl.float32)
        s_max, s_sum = online_lse_step(float("-inf"), 0.0, s)
        t_max, t_sum = online_lse_step(float("-inf"), 0.0, t)
        s_lse = s_max + tl.log(s_sum)
        t_lse = t_max + tl.log(t_sum)
        p = tl.exp(s - s_lse)
        d = p - tl.exp(t - t_lse)
        abs_sum = tl.sum(tl.abs(d), axis=0)
        sigma = tl.sum(tl.where(d > 0, p, tl.where(d < 0, -p, 0.0)), axis=0)
    else:
        s_max, s_sum = float("-inf"), 0.0
        t_max, t_sum = float("-inf"), 0.0
        for start in range(0, n_cols, BLOCK_N):
            cols = start + offs
            mask = cols < n_cols
            s = tl.load(s_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
            t = tl.load(t_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
            s_max, s_sum = online_lse_step(s_max, s_sum, s)
            t_max, t_sum = online_lse_step(t_max, t_sum, t)
        s_lse = s_max + tl.log(s_sum)
        t_lse = t_max + tl.log(t_sum)
        abs_sum = 0.0
        sigma = 0.0
        for start in range(0, n_cols, BLOCK_N):
            cols = start + offs
            mask = cols < n_cols
            p = tl.exp(tl.load(s_row + cols, mask=mask, other=float("-inf")).to(tl.float32) - s_lse)
            q = tl.exp(tl.load(t_row + cols, mask=mask, other=float("-inf")).to(tl.float32) - t_lse)
            d = p - q
            abs_sum += tl.sum(tl.abs(d), axis=0)
            sigma += tl.sum(tl.where(d > 0, p, tl.where(d < 0, -p, 0.0)), axis=0)
    # An out-of-range target (reported by the caller after the launch) reads nothing.
    x_y = tl.load(s_row + y, mask=(y >= 0) & (y < n_cols), other=0.0).to(tl.float32)
    tl.store(CE + row, s_lse - x_y)
    tl.store(TVD + row, 0.5 * abs_sum)
    tl.store(S_LSE + row, s_lse)
    tl.store(T_LSE + row, t_lse)
    tl.store(SIGMA + row, sigma)


@triton.jit
def _fused_ce_tvd_backward_kernel(
    S, s_row_stride, T, t_row_stride, Y, S_LSE, T_LSE, SIGMA, UP_CE, UP_TVD, G, g_row_stride, n_cols,
    ignore_index, HAS_UP_CE: tl.constexpr, HAS_UP_TVD: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    row, tile, cols, mask = vocab_tile(n_cols, BLOCK_N)
    g_row = G + row_offset(row, g_row_stride)
    y = tl.load(Y + row)
    if y == ignore_index:
        tl.store(g_row + cols, tl.zeros((BLOCK_N,), tl.float32).to(G.dtype.element_ty), mask=mask)
        return
    p = tl.exp(
        tl.load(S + row_offset(row, s_row_stride) + cols, mask=mask, other=0.0).to(tl.float32) - tl.load(S_LSE + row)
    )
    grad = tl.zeros((BLOCK_N,), tl.float32)
    if HAS_UP_CE:
        up_ce = tl.load(UP_CE + row).to(tl.float32)
        grad = up_ce * tl.where(cols == y, p - 1.0, p)
    if HAS_UP_TVD:
        q = tl.exp(
            tl.load(T + row_offset(row, t_row_stride) + cols, mask=mask, other=0.0).to(tl.float32)
            - tl.load(T_LSE + row)
        )
        d = p - q
        sign = tl.where(d > 0, 1.0, tl.where(d < 0, -1.0, 0.0))
        grad += tl.load(UP_TVD + row).to(tl.float32) * 0.5 * p * (sign - tl.load(SIGMA + row))
    tl.store(g_row + cols, grad.to(G.dtype.element_ty), mask=mask)


def plan_ce_tvd_rows(n_cols: int) -> tuple[int, int, bool]:
    """(block, warps, one_pass) of fused_ce_tvd's one-program-per-row forward: the whole row in
    one block up to ``hardware.CE_TVD_ONE_PASS_MAX_COLS``, else the streaming plan."""
    width = triton.next_power_of_2(max(n_cols, 1))
    if width <= hardware.CE_TVD_ONE_PASS_MAX_COLS:
        return width, max(1, min(hardware.CE_TVD_ONE_PASS_NUM_WARPS, width // 32)), True
    return *plan_vocab_rows(n_cols), False


def fused_ce_tvd_forward(s: torch.Tensor, t: torch.Tensor, target: torch.Tensor, ignore_index: int):
    """``(ce, tvd, s_lse, t_lse, sigma)``, fp32 per row, over (rows, vocab) logits with unit column stride."""
    n, v = s.shape
    ce, tvd, s_lse, t_lse, sigma = (torch.empty(n, dtype=torch.float32, device=s.device) for _ in range(5))
    if n:
        block, warps, one_pass = plan_ce_tvd_rows(v)
        _fused_ce_tvd_forward_kernel[(n,)](
            s, s.stride(0), t, t.stride(0), target, ce, tvd, s_lse, t_lse, sigma, v, ignore_index,
            BLOCK_N=block, ONE_PASS=one_pass, num_warps=warps,
        )  # fmt: skip
    return ce, tvd, s_lse, t_lse, sigma


def fused_ce_tvd_backward(s, t, target, s_lse, t_lse, sigma, up_ce, up_tvd, ignore_index) -> torch.Tensor:
    """d(loss)/d(student logits) in the student's dtype; ``up_ce`` / ``up_tvd`` the per-row
    incoming gradients (None: that output feeds nothing)."""
    n, v = s.shape
    grad = torch.empty((n, v), dtype=s.dtype, device=s.device)
    if n:
        block, n_tiles, warps = plan_divergence(v)
        _fused_ce_tvd_backward_kernel[(n, n_tiles)](
            s, s.stride(0), t, t.stride(0), target, s_lse, t_lse, sigma,
            up_ce if up_ce is not None else s_lse, up_tvd if up_tvd is not None else s_lse, grad, grad.stride(0), v,
            ignore_index, HAS_UP_CE=up_ce is not None, HAS_UP_TVD=up_tvd is not None, BLOCK_N=block, num_warps=warps,
        )  # fmt: skip
    return grad


class FusedCETVDKernels:
    """`liger_core.drivers.divergence.FusedCETVDKernels` on this module's fused_ce_tvd kernels."""

    protocol = divergence_driver.PROTOCOL

    def fused_ce_tvd_target(self, target, ignore_index, n_classes):
        # One launch; the bad-target count is read (and raised) after the forward's launch.
        _, _, check = target_stats("fused_ce_tvd", target, ignore_index, n_classes, None, "sum")
        return target, check.raise_if_bad

    fused_ce_tvd_forward = staticmethod(fused_ce_tvd_forward)
    fused_ce_tvd_backward = staticmethod(fused_ce_tvd_backward)


LigerFusedCETVDFunction = implements("fused_ce_tvd")(
    divergence_driver.fused_ce_tvd_function(FusedCETVDKernels(), __name__)
)
