"""KL divergence for NVIDIA GPUs: one pass over both inputs writes the loss partials and the
gradient (``-y_true``, or ``-exp(y_true)``, times the reduction's scale), which does not
depend on ``y_pred``; backward only rescales it when the incoming gradient is not 1.
Reduction "none" writes the per-element loss and forms the gradient in backward."""

from __future__ import annotations

import torch

from liger_core.ops.kl_div import check_args
from liger_ops_cuda._ce_kernels import scale_unless_one
from liger_ops_cuda._div_kernels import _kl_div_kernel, tile_plan, unit_col


class LigerKLDivLossFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y_pred, y_true, reduction, log_target, eps):
        x, t = unit_col(y_pred), unit_col(y_true)
        n, v = x.shape
        block, n_tiles, warps = tile_plan(v)
        elementwise = reduction == "none"
        scale = {"batchmean": 1.0 / max(n, 1), "mean": 1.0 / max(n * v, 1)}.get(reduction, 1.0)
        write_grad = ctx.needs_input_grad[0] and not elementwise
        grad = torch.empty(x.shape, dtype=x.dtype, device=x.device) if write_grad else None
        out = torch.empty((n, v) if elementwise else (n, n_tiles), dtype=torch.float32, device=x.device)
        if n and v:
            _kl_div_kernel[(n, n_tiles)](
                x, x.stride(0), t, t.stride(0), grad if write_grad else x, grad.stride(0) if write_grad else 0,
                out, out.stride(0), v, float(eps), scale,
                LOG_TARGET=log_target, ELEMENTWISE=elementwise, WRITE_GRAD=write_grad, BLOCK=block, num_warps=warps,
            )  # fmt: skip
        ctx.elementwise, ctx.log_target, ctx.grad_dtype = elementwise, log_target, y_pred.dtype
        if elementwise:
            ctx.save_for_backward(t)
            return out
        ctx.save_for_backward(grad)
        return out.sum() * scale

    @staticmethod
    def backward(ctx, grad_output):
        (saved,) = ctx.saved_tensors
        if ctx.elementwise:
            p = saved.float().exp() if ctx.log_target else saved.float()
            return -(p * grad_output).to(ctx.grad_dtype), None, None, None, None
        if saved is None:
            return None, None, None, None, None
        scale_unless_one(saved, grad_output.float().reshape(1))
        return saved, None, None, None, None


def kl_div(
    y_pred: torch.Tensor,
    y_true: torch.Tensor,
    reduction: str = "batchmean",
    log_target: bool = False,
    eps: float = 1e-10,
) -> torch.Tensor:
    check_args(y_pred, y_true, reduction, log_target, eps)
    return LigerKLDivLossFunction.apply(y_pred, y_true, reduction, log_target, eps)
