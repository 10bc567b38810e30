"""Fused linear cross-entropy for Intel GPUs: lm_head matmul + cross-entropy, chunk by chunk; the
chunk loop and the kernel adapter of `liger_core.drivers.fused_linear_cross_entropy`.

Tokens are processed in chunks whose logits (input dtype) take at most the fused linear memory
budget (`liger_core.memory_budget`, default FUSED_LINEAR_MEMORY_BUDGET bytes), so peak memory stays near one chunk of logits instead of tokens x vocab. Per chunk: the logits
(``input @ weight.T + bias`` in the input dtype: XMX matmul through torch/oneDNN), the
cross-entropy row kernels of _cross_entropy.py (loss rows, then the gradient written over the
chunk's own logits buffer), and the three gradient matmuls: grad_input rows, grad_weight and
grad_bias accumulated in ``accum_dtype``.

A scalar loss ("mean", "sum") gets its gradients in the forward pass, with an incoming
gradient of 1, and the backward only scales them (no second matmul pass). "none" has one
incoming gradient per row, which must enter before the grad_weight reduction over rows, so
its backward recomputes the chunks with those gradients.
"""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.drivers import fused_linear_cross_entropy as flce_driver
from liger_core.ops.fused_linear_cross_entropy import target_stats

from liger_ops_xpu._cross_entropy import (
    CEOptions,
    cross_entropy_backward,
    cross_entropy_forward,
    reduce_rows,
    weight_total,
)
from liger_ops_xpu._tiling import plan_chunks, unit_col


def flce_pass(x, weight, bias, target, ce_weight, opts: CEOptions, w_total, scales, grad_out, needs, accum_dtype):
    """One pass over the token chunks: per-row (loss, z) and, when ``grad_out`` is given (one
    value, or one per row), the gradients ``needs`` = (input, weight, bias) asks for."""
    n_rows, vocab = x.shape[0], weight.shape[0]
    w_mm = weight if weight.dtype == x.dtype else weight.to(x.dtype)
    b_mm = None if bias is None else (bias if bias.dtype == x.dtype else bias.to(x.dtype))
    loss = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    z = torch.empty_like(loss)
    want_dx, want_dw, want_db = needs if grad_out is not None else (False, False, False)
    dx = torch.empty_like(x) if want_dx else None
    dw = torch.zeros(weight.shape, dtype=accum_dtype or weight.dtype, device=x.device) if want_dw else None
    db = torch.zeros(bias.shape, dtype=accum_dtype or bias.dtype, device=x.device) if want_db else None
    step = plan_chunks(n_rows, vocab, bytes_per_logit=x.element_size())  # the logits, gradient in place
    for start in range(0, n_rows, step):
        end = min(start + step, n_rows)
        x_c, t_c = x[start:end], target[start:end]
        logits = x_c @ w_mm.t()
        if b_mm is not None:
            logits += b_mm
        loss[start:end], z[start:end], lse = cross_entropy_forward(logits, t_c, ce_weight, opts, w_total)
        if grad_out is None or not (want_dx or want_dw or want_db):
            continue
        g = grad_out if grad_out.numel() == 1 else grad_out[start:end]
        dlogits = cross_entropy_backward(logits, t_c, ce_weight, lse, g, logits, opts, w_total, *scales)  # in place
        if want_dx:
            torch.mm(dlogits, w_mm, out=dx[start:end])
        if want_dw:
            dw += (dlogits.t() @ x_c).to(dw.dtype)
        if want_db:
            db += dlogits.sum(0, dtype=torch.float32).to(db.dtype)
    grads = (
        dx,
        None if dw is None else dw.to(weight.dtype),
        None if db is None else db.to(bias.dtype),
    )
    return loss, z, grads


class FusedLinearCrossEntropyKernels:
    """`liger_core.drivers.fused_linear_cross_entropy.FusedLinearCrossEntropyKernels` over `flce_pass`."""

    protocol = flce_driver.PROTOCOL

    @staticmethod
    def forward(
        input, weight, target, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing, reduction,
        softcap, return_z_loss, accum_dtype, needs, grads_now,
    ):  # fmt: skip
        n_valid, weight_sum = target_stats(input, weight, target, ce_weight, ignore_index)
        opts = CEOptions(ignore_index, lse_square_scale, label_smoothing, reduction, softcap)
        x = unit_col(input)
        w_total = weight_total(ce_weight, weight.shape[0])
        scales = opts.scales(n_valid, weight_sum)
        ones = torch.ones(1, dtype=torch.float32, device=x.device)
        loss_rows, z_rows, grads = flce_pass(
            x, weight, bias, target, ce_weight, opts, w_total, scales, ones if grads_now else None, needs, accum_dtype
        )
        loss, z = reduce_rows(loss_rows, z_rows, opts, n_valid, weight_sum)
        return loss, z, grads, (x, weight, target, bias, ce_weight), (opts, w_total, scales, accum_dtype)

    @staticmethod
    def scale_grads(grads, grad_loss, state):
        return tuple(None if g is None else g.mul_(grad_loss) for g in grads)

    @staticmethod
    def backward(grad_loss, saved, state, needs):
        x, weight, target, bias, ce_weight = saved
        opts, w_total, scales, accum_dtype = state
        _, _, grads = flce_pass(
            x, weight, bias, target, ce_weight, opts, w_total, scales, grad_loss, needs, accum_dtype
        )
        return grads


LigerFusedLinearCrossEntropyFunction = implements("fused_linear_cross_entropy")(
    flce_driver.autograd_function(FusedLinearCrossEntropyKernels(), __name__)
)
