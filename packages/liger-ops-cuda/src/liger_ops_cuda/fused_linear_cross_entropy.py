"""Fused linear cross-entropy for NVIDIA GPUs: token chunks, tensor-core GEMMs, in-place CE.

Per chunk of tokens: ``logits = x_c @ W^T`` (cuBLAS, input dtype, into one reused buffer),
then the cross-entropy kernels compute the chunk's loss terms and overwrite the logits with
their gradient (fp32 arithmetic, one rounding), then ``grad_x_c = G @ W`` and
``grad_W += G^T @ x_c`` (GEMMs into preallocated buffers: the first chunk writes grad_W, the
rest accumulate with addmm). The full logits never exist; beyond grad_W and grad_x the
memory is one chunk of logits (``hardware.FLCE_CHUNK_ELEMENTS``).

The gradients are computed during forward for reduction "mean"/"sum" (upstream assumed 1;
backward rescales them in place only if the incoming gradient is not 1, decided on the
device). For "none" the per-token incoming gradient must weight each row before the sum
into grad_W, so forward saves the per-row lse and backward recomputes the chunks' logits.
"""

from __future__ import annotations

import torch

from liger_core.ops.fused_linear_cross_entropy import check_args
from liger_ops_cuda import hardware
from liger_ops_cuda._ce_kernels import ce_grad_from_lse, ce_rows, scale_unless_one
from liger_ops_cuda.cross_entropy import device_scales, reduce_rows


def chunk_tokens(n_tokens: int, vocab: int, budget: int | None = None) -> int:
    """Tokens per chunk: at most ``budget`` logits, a multiple of FLCE_CHUNK_MULTIPLE when
    that fits, never more than the tokens there are (at least 1)."""
    budget = hardware.FLCE_CHUNK_ELEMENTS if budget is None else budget
    c = max(1, budget // max(vocab, 1))
    mult = hardware.FLCE_CHUNK_MULTIPLE
    if c >= mult:
        c -= c % mult
    return max(1, min(c, n_tokens))


def _accumulate_weight_grad(gw: torch.Tensor, g: torch.Tensor, x: torch.Tensor, first: bool) -> None:
    """``gw (+)= g^T @ x`` with gw in its own dtype (fp32 accumulation of bf16 GEMMs via
    out_dtype where cuBLAS offers it)."""
    gt = g.t()
    if gw.dtype == g.dtype:
        if first:
            torch.mm(gt, x, out=gw)
        else:
            gw.addmm_(gt, x)
        return
    if gw.is_cuda:
        try:
            torch.addmm(gw, gt, x, beta=0.0 if first else 1.0, out_dtype=gw.dtype, out=gw)
            return
        except (TypeError, RuntimeError):
            pass  # older torch: fall through (a temporary of grad_W's size)
    prod = torch.mm(gt, x).to(gw.dtype)
    if first:
        gw.copy_(prod)
    else:
        gw.add_(prod)


def _chunk_loop(
    x, w, target, bias, ce_weight, weight_total, ignore_index, lse_square_scale, label_smoothing, softcap,
    scales, rows_out, *, grad_x=None, grad_w=None, grad_b=None, upstream=None, saved_lse=None,
):  # fmt: skip
    """Run every chunk: losses into ``rows_out`` (forward) and/or gradients (when ``upstream``).
    With ``saved_lse`` (backward of "none"), the gradient comes from it without a forward pass."""
    n, _ = x.shape
    vocab = w.shape[0]
    c = chunk_tokens(n, vocab)
    want_grad = upstream is not None
    buf = torch.empty((min(c, n), vocab), dtype=x.dtype, device=x.device) if n else None
    first = True
    for s in range(0, n, c):
        e = min(s + c, n)
        xc = x[s:e]
        logits = buf[: e - s]
        torch.mm(xc, w.t(), out=logits)
        t = target[s:e]
        if saved_lse is not None:
            up = upstream[s:e] if upstream.numel() > 1 else upstream
            ce_grad_from_lse(
                logits, t, ce_weight, weight_total, bias, saved_lse[s:e], logits, up, ignore_index,
                lse_square_scale, label_smoothing, softcap, scales,
            )  # fmt: skip
        else:
            rows = ce_rows(
                logits, t, ce_weight, weight_total, bias, ignore_index, lse_square_scale, label_smoothing, softcap,
                grad_out=logits if want_grad else None, upstream=upstream, scales=scales,
            )  # fmt: skip
            rows_out.loss[s:e] = rows.loss
            rows_out.z[s:e] = rows.z
            rows_out.lse[s:e] = rows.lse
        if want_grad:
            # `logits` now holds d(loss)/d(logits) for the chunk.
            if grad_x is not None:
                torch.mm(logits, w, out=grad_x[s:e])
            if grad_w is not None:
                _accumulate_weight_grad(grad_w, logits, xc, first)
            if grad_b is not None:
                grad_b += logits.sum(0, dtype=torch.float32)
        first = False
    if want_grad and grad_w is not None and first:
        grad_w.zero_()  # no tokens at all


class _Rows:
    def __init__(self, n, device):
        self.loss = torch.empty(n, dtype=torch.float32, device=device)
        self.z = torch.empty_like(self.loss)
        self.lse = torch.empty_like(self.loss)


class LigerFusedLinearCrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, x, weight, target, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap,
        accum_dtype,
    ):  # fmt: skip
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_b = bias is not None and ctx.needs_input_grad[3]
        any_grad = need_x or need_w or need_b
        defer = any_grad and reduction == "none"
        x = x.contiguous()
        w = weight if weight.dtype == x.dtype else weight.to(x.dtype)  # as autocast would
        w = w.contiguous()
        target = target.contiguous()
        weight_total = None
        if ce_weight is not None:
            ce_weight = ce_weight.contiguous()
            weight_total = ce_weight.float().sum().reshape(1)
        n = x.shape[0]
        scales, check = device_scales(
            "fused_linear_cross_entropy", target, ignore_index, weight.shape[0], ce_weight, reduction
        )
        rows = _Rows(n, x.device)
        common = (x, w, target, bias, ce_weight, weight_total, ignore_index, lse_square_scale, label_smoothing, softcap)
        grads = (None, None, None)
        if any_grad and not defer:
            grads = _new_grads(x, weight, bias, need_x, need_w, need_b, accum_dtype)
            one = torch.ones(1, dtype=torch.float32, device=x.device)
            _chunk_loop(
                *common, scales, rows,
                grad_x=grads[0], grad_w=grads[1], grad_b=grads[2], upstream=one,
            )  # fmt: skip
            grads = _finish_grads(grads, weight, bias)
        else:
            _chunk_loop(*common, scales, rows)
        loss, z = reduce_rows(rows, reduction, scales)
        check.raise_if_bad()
        ctx.defer = defer
        ctx.flags = (need_x, need_w, need_b, accum_dtype)
        ctx.args = (ignore_index, lse_square_scale, label_smoothing, softcap)
        ctx.weight_dtype = weight.dtype
        if defer:
            ctx.save_for_backward(x, w, target, bias, ce_weight, weight_total, rows.lse, weight)
        else:
            ctx.save_for_backward(*grads)
        ctx.mark_non_differentiable(z)
        ctx.set_materialize_grads(False)
        return loss, z

    @staticmethod
    def backward(ctx, grad_loss, grad_z):
        nones = (None,) * 8
        if grad_loss is None:
            return (None, None, None, None) + nones[:7]
        need_x, need_w, need_b, accum_dtype = ctx.flags
        up = grad_loss.float().contiguous()
        if ctx.defer:
            x, w, target, bias, ce_weight, weight_total, lse, weight = ctx.saved_tensors
            grads = _new_grads(x, weight, bias, need_x, need_w, need_b, accum_dtype)
            _chunk_loop(
                x, w, target, bias, ce_weight, weight_total, *ctx.args, torch.ones(2, device=x.device), None,
                grad_x=grads[0], grad_w=grads[1], grad_b=grads[2], upstream=up, saved_lse=lse,
            )  # fmt: skip
            gx, gw, gb = _finish_grads(grads, weight, bias)
        else:
            gx, gw, gb = ctx.saved_tensors
            for g in (gx, gw, gb):
                scale_unless_one(g, up)
        return (gx if need_x else None, gw if need_w else None, None, gb if need_b else None) + nones[:7]


def _new_grads(x, weight, bias, need_x, need_w, need_b, accum_dtype):
    gx = torch.empty_like(x) if need_x else None
    gw = torch.empty(weight.shape, dtype=accum_dtype or weight.dtype, device=x.device) if need_w else None
    gb = torch.zeros(bias.shape, dtype=torch.float32, device=x.device) if need_b else None
    return gx, gw, gb


def _finish_grads(grads, weight, bias):
    gx, gw, gb = grads
    if gw is not None and gw.dtype != weight.dtype:
        gw = gw.to(weight.dtype)
    if gb is not None and gb.dtype != bias.dtype:
        gb = gb.to(bias.dtype)
    return gx, gw, gb


def fused_linear_cross_entropy(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    ce_weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    lse_square_scale: float = 0.0,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    softcap: float | None = None,
    return_z_loss: bool = False,
    accum_dtype: torch.dtype | None = None,
):
    check_args(
        input, weight, target, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap,
        return_z_loss, accum_dtype,
    )  # fmt: skip
    loss, z = LigerFusedLinearCrossEntropyFunction.apply(
        input, weight, target, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap,
        accum_dtype,
    )  # fmt: skip
    return (loss, z) if return_z_loss else loss
