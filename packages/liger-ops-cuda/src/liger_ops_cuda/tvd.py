"""Total variation distance for NVIDIA GPUs: one pass over ``p`` and ``q`` writes the loss
partials (or per-element loss for "none") and ``grad_p = 0.5 * sign(p - q)`` times the
reduction's scale (a device scalar: the counted rows are never read on the host); backward
only rescales the gradient when the incoming gradient is not 1."""

from __future__ import annotations

import torch

from liger_core.ops.tvd import check_args
from liger_ops_cuda._ce_kernels import scale_unless_one
from liger_ops_cuda._div_kernels import _tvd_kernel, inverse_count, tile_plan, unit_col


class LigerTVDLossFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, p, q, shift_labels, reduction, ignore_index):
        p_, q_ = unit_col(p), unit_col(q)
        n, v = p_.shape
        labels = shift_labels.contiguous() if shift_labels is not None else None
        block, n_tiles, warps = tile_plan(v)
        elementwise = reduction == "none"
        if reduction == "batchmean":
            scale = inverse_count(labels, ignore_index, n, p_.device)
        elif reduction == "mean":
            scale = inverse_count(labels, ignore_index, n, p_.device, per_row=v)
        else:
            scale = torch.ones(1, dtype=torch.float32, device=p_.device)
        write_grad = ctx.needs_input_grad[0]
        grad = torch.empty(p_.shape, dtype=p_.dtype, device=p_.device) if write_grad else None
        out = torch.empty((n, v) if elementwise else (n, n_tiles), dtype=torch.float32, device=p_.device)
        if n and v:
            _tvd_kernel[(n, n_tiles)](
                p_, p_.stride(0), q_, q_.stride(0), grad if write_grad else p_, grad.stride(0) if write_grad else 0,
                out, out.stride(0), n_tiles, labels if labels is not None else p_, scale, v, ignore_index,
                HAS_LABELS=labels is not None, ELEMENTWISE=elementwise, WRITE_GRAD=write_grad, BLOCK=block,
                num_warps=warps,
            )  # fmt: skip
        ctx.elementwise = elementwise
        ctx.save_for_backward(grad)
        return out if elementwise else out.sum() * scale[0]

    @staticmethod
    def backward(ctx, grad_output):
        (grad,) = ctx.saved_tensors
        if grad is not None:
            if ctx.elementwise:
                grad = (grad.float() * grad_output).to(grad.dtype)
            else:
                scale_unless_one(grad, grad_output.float().reshape(1))
        return grad, None, None, None, None


def tvd(
    p: torch.Tensor,
    q: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    reduction: str = "batchmean",
    ignore_index: int = -100,
) -> torch.Tensor:
    check_args(p, q, shift_labels, reduction, ignore_index)
    return LigerTVDLossFunction.apply(p, q, shift_labels, reduction, ignore_index)
