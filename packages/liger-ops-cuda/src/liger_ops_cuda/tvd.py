"""Total variation distance for NVIDIA GPUs: one pass over ``p`` and ``q`` writes the loss
partials (or per-element loss for "none") and ``grad_p = 0.5 * sign(p - q)`` times the
reduction's scale (a device scalar: the counted rows are never read on the host); backward
only rescales the gradient when the incoming gradient is not 1."""

from __future__ import annotations

import torch

from liger_core.backend import implements
from liger_core.ops.tvd import check_args
from liger_ops_cuda._divergence import LigerDivergenceFunction, inverse_count, tvd_forward
from liger_ops_cuda._tiling import as_rows, contiguous


def _elementwise_grad(ctx, grad: torch.Tensor, grad_output: torch.Tensor) -> torch.Tensor:
    return (grad.float() * grad_output).to(grad.dtype)


@implements("tvd")
class LigerTVDFunction(LigerDivergenceFunction):
    @staticmethod
    def forward(ctx, p, q, shift_labels, reduction, ignore_index):
        check_args(p, q, shift_labels, reduction, ignore_index)
        p_, q_ = as_rows(p), as_rows(q)
        n, v = p_.shape
        labels = contiguous(shift_labels)
        if reduction == "batchmean":
            scale = inverse_count(labels, ignore_index, n, p_.device)
        elif reduction == "mean":
            scale = inverse_count(labels, ignore_index, n, p_.device, per_row=v)
        else:
            scale = torch.ones(1, dtype=torch.float32, device=p_.device)
        elementwise = reduction == "none"
        out, grad = tvd_forward(p_, q_, labels, elementwise, ignore_index, scale, ctx.needs_input_grad[0])
        ctx.elementwise_grad = _elementwise_grad if elementwise else None
        ctx.save_for_backward(grad)
        return out if elementwise else out.sum() * scale[0]
