"""KL divergence for NVIDIA GPUs: one pass over both inputs writes the loss partials and the
gradient (``-y_true``, or ``-exp(y_true)``, times the reduction's scale), which does not
depend on ``y_pred``; backward only rescales it when the incoming gradient is not 1.
Reduction "none" writes the per-element loss and forms the gradient in backward."""

from __future__ import annotations

import torch

from liger_core.backend import implements
from liger_core.ops.kl_div import check_args
from liger_ops_cuda._divergence import LigerDivergenceFunction, kl_div_forward
from liger_ops_cuda._tiling import as_rows


def _elementwise_grad(ctx, t: torch.Tensor, grad_output: torch.Tensor) -> torch.Tensor:
    p = t.float().exp() if ctx.log_target else t.float()
    return -(p * grad_output).to(ctx.grad_dtype)


@implements("kl_div")
class LigerKLDivFunction(LigerDivergenceFunction):
    @staticmethod
    def forward(ctx, y_pred, y_true, reduction, log_target, eps):
        check_args(y_pred, y_true, reduction, log_target, eps)
        x, t = as_rows(y_pred), as_rows(y_true)
        n, v = x.shape
        elementwise = reduction == "none"
        scale = {"batchmean": 1.0 / max(n, 1), "mean": 1.0 / max(n * v, 1)}.get(reduction, 1.0)
        write_grad = ctx.needs_input_grad[0] and not elementwise
        out, grad = kl_div_forward(x, t, elementwise, log_target, eps, scale, write_grad)
        ctx.log_target, ctx.grad_dtype = log_target, y_pred.dtype
        ctx.elementwise_grad = _elementwise_grad if elementwise else None
        if elementwise:
            ctx.save_for_backward(t)
            return out
        ctx.save_for_backward(grad)
        return out.sum() * scale
