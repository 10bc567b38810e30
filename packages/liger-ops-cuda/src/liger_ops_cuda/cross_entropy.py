"""Cross-entropy for NVIDIA GPUs: launch plan and autograd Function over `_ce_kernels`.

Forward reads the logits once (per-tile online-softmax partials, then per-row loss terms) and
saves only the per-row fp32 ``lse``. Backward reads them once more and writes the gradient
once, scaled by the incoming gradient read on the device (no host synchronisation). The
caller's logits are never written (the contract says so); the gradient gets its own buffer.
One host synchronisation per call: the target check and the mean's denominators.
"""

from __future__ import annotations

import torch

from liger_core.ops.cross_entropy import check_args, target_stats
from liger_ops_cuda._ce_kernels import ce_grad_from_lse, ce_rows


def reduction_scales(reduction: str, n_valid: int, weight_sum: float) -> tuple[float, float]:
    """(scale of the summed loss terms, scale of the summed z-loss terms) for ``reduction``.
    No counted row: scale 1 (every term is 0 anyway), so the result is 0, never NaN."""
    if reduction != "mean":
        return 1.0, 1.0
    return (1.0 / weight_sum if weight_sum else 1.0), (1.0 / n_valid if n_valid else 1.0)


def reduce_rows(rows, reduction: str, loss_scale: float, z_scale: float):
    """(loss, z_loss) in fp32 from the per-row terms."""
    if reduction == "none":
        return rows.loss + rows.z, rows.z
    if reduction == "sum":
        z = rows.z.sum()
        return rows.loss.sum() + z, z
    z = rows.z.sum() * z_scale
    return rows.loss.sum() * loss_scale + z, z


class LigerCrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx,
        logits: torch.Tensor,
        target: torch.Tensor,
        weight: torch.Tensor | None,
        ignore_index: int,
        lse_square_scale: float,
        label_smoothing: float,
        reduction: str,
        softcap: float | None,
        in_place: bool = False,
    ):
        n_valid, weight_sum = target_stats(logits, target, weight, ignore_index)
        x = logits if logits.stride(-1) == 1 else logits.contiguous()
        target = target.contiguous()
        weight_total = None
        if weight is not None:
            weight = weight.contiguous()
            weight_total = weight.float().sum().reshape(1)  # smoothing's sum_j w_j, kept on the device
        loss_scale, z_scale = reduction_scales(reduction, n_valid, weight_sum)
        rows = ce_rows(x, target, weight, weight_total, None, ignore_index, lse_square_scale, label_smoothing, softcap)
        loss, z = reduce_rows(rows, reduction, loss_scale, z_scale)
        # In place: a detached alias, so the gradient returned in its memory is a tensor of its own
        # that autograd can keep as .grad without a copy.
        ctx.save_for_backward(x.detach() if in_place else x, target, weight, weight_total, rows.lse)
        ctx.args = (ignore_index, lse_square_scale, label_smoothing, softcap, loss_scale, z_scale, in_place)
        ctx.mark_non_differentiable(z)
        ctx.set_materialize_grads(False)
        return loss.to(logits.dtype), z.to(logits.dtype)

    @staticmethod
    def backward(ctx, grad_loss, grad_z):
        if grad_loss is None:
            return (None,) * 9
        x, target, weight, weight_total, lse = ctx.saved_tensors
        ignore_index, lse_square_scale, label_smoothing, softcap, loss_scale, z_scale, in_place = ctx.args
        # in_place (internal opt-in, never the default): the gradient overwrites the logits.
        grad = x if in_place and x.is_contiguous() else torch.empty_like(x, memory_format=torch.contiguous_format)
        up = grad_loss.contiguous()
        ce_grad_from_lse(
            x, target, weight, weight_total, None, lse, grad, up, ignore_index,
            lse_square_scale, label_smoothing, softcap, loss_scale, z_scale,
        )  # fmt: skip
        return grad, None, None, None, None, None, None, None, None


def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    lse_square_scale: float = 0.0,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    softcap: float | None = None,
    return_z_loss: bool = False,
):
    check_args(
        logits, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss
    )
    loss, z = LigerCrossEntropyFunction.apply(
        logits, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, False
    )
    return (loss, z) if return_z_loss else loss
