"""Cross-entropy for NVIDIA GPUs: launch plan and autograd Function over `_ce_kernels`.

Forward reads the logits once (per-tile online-softmax partials, then per-row loss terms) and
saves only the per-row fp32 ``lse``. Backward reads them once more and writes the gradient
once, scaled by the incoming gradient read on the device (no host synchronisation). The
caller's logits are never written unless it passes ``in_place=True``: then the backward writes
the gradient over the logits (each tile is read before it is written, by the same program), so
no logits-sized buffer is allocated. Strided logits (copied to a contiguous buffer first: the
gradient lands in that copy) and rows with padding get a separate buffer instead.
No host synchronisation: the mean's denominators stay on the device and the target check
reads its count only after the main kernels are queued (`TargetCheck`).
"""

from __future__ import annotations

import torch

from liger_core.ops import _losses as L
from liger_core.ops.cross_entropy import check_args
from liger_ops_cuda._ce_kernels import ce_grad_from_lse, ce_rows


class TargetCheck:
    """Targets outside ``[0, vocab)`` (other than ignore_index), counted on the device.

    The count is copied to pinned host memory behind the op's first kernels; `raise_if_bad`
    runs after the main kernels are queued, so the host waits while the GPU is busy with them
    (no idle GPU, unlike reading the count up front). During CUDA-graph capture nothing can be
    read back and the check is skipped; the kernels mask their loads, so a bad target then
    gives a wrong loss, never an out-of-bounds access.
    """

    def __init__(self, op, target, ignore_index, n_classes, weight, bad):
        self.args = (op, target, ignore_index, n_classes, weight)
        self.skip = target.is_cuda and torch.cuda.is_current_stream_capturing()
        if self.skip:
            return
        count = bad.sum()
        if target.is_cuda:
            self.host = torch.empty((), dtype=count.dtype, pin_memory=True)
            self.host.copy_(count, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host, self.event = count, None

    def raise_if_bad(self) -> None:
        if self.skip:
            return
        if self.event is not None:
            self.event.synchronize()
        if int(self.host):
            op, target, ignore_index, n_classes, weight = self.args
            L.label_stats(op, target, ignore_index, n_classes, weight)  # raises, naming the first bad target
            raise ValueError(f"{op}: a target is outside [0, {n_classes}) and not ignore_index={ignore_index}")


def device_scales(op, target, ignore_index, n_classes, weight, reduction) -> tuple[torch.Tensor, TargetCheck]:
    """``[scale of the summed loss terms, scale of the summed z-loss terms]`` as a device tensor
    (mean: ``1 / sum(w[y])`` and ``1 / n`` over the counted rows, 1 when there are none, so an
    all-ignored batch gives 0, never NaN; sum/none: 1), and the deferred target check."""
    valid = target != ignore_index
    bad = valid & ((target < 0) | (target >= n_classes))
    if reduction == "mean":
        n = valid.sum(dtype=torch.float32)
        if weight is None:
            wsum = n
        else:
            safe = torch.where(valid & ~bad, target, torch.zeros((), dtype=target.dtype, device=target.device))
            wsum = (weight.float().gather(0, safe.long()) * valid).sum()
        one = torch.ones((), dtype=torch.float32, device=target.device)
        scales = torch.stack([one / torch.where(wsum == 0, one, wsum), one / torch.clamp_min(n, 1.0)])
    else:
        scales = torch.ones(2, dtype=torch.float32, device=target.device)
    return scales, TargetCheck(op, target, ignore_index, n_classes, weight, bad)


def reduce_rows(rows, reduction: str, scales: torch.Tensor):
    """(loss, z_loss) in fp32 from the per-row terms."""
    if reduction == "none":
        return rows.loss + rows.z, rows.z
    if reduction == "sum":
        z = rows.z.sum()
        return rows.loss.sum() + z, z
    z = rows.z.sum() * scales[1]
    return rows.loss.sum() * scales[0] + z, z


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
        x = logits if logits.stride(-1) == 1 else logits.contiguous()
        target = target.contiguous()
        weight_total = None
        if weight is not None:
            weight = weight.contiguous()
            weight_total = weight.float().sum().reshape(1)  # smoothing's sum_j w_j, kept on the device
        scales, check = device_scales("cross_entropy", target, ignore_index, x.shape[1], weight, reduction)
        rows = ce_rows(x, target, weight, weight_total, None, ignore_index, lse_square_scale, label_smoothing, softcap)
        loss, z = reduce_rows(rows, reduction, scales)
        check.raise_if_bad()
        # In place: a detached alias, so the gradient returned in its memory is a tensor of its own
        # that autograd can keep as .grad without a copy.
        ctx.save_for_backward(x.detach() if in_place else x, target, weight, weight_total, rows.lse, scales)
        ctx.args = (ignore_index, lse_square_scale, label_smoothing, softcap, in_place)
        ctx.mark_non_differentiable(z)
        ctx.set_materialize_grads(False)
        return loss.to(logits.dtype), z.to(logits.dtype)

    @staticmethod
    def backward(ctx, grad_loss, grad_z):
        if grad_loss is None:
            return (None,) * 9
        x, target, weight, weight_total, lse, scales = ctx.saved_tensors
        ignore_index, lse_square_scale, label_smoothing, softcap, in_place = ctx.args
        # in_place (the caller's opt-in, never the default): the gradient overwrites the logits.
        grad = x if in_place and x.is_contiguous() else torch.empty_like(x, memory_format=torch.contiguous_format)
        up = grad_loss.contiguous()
        ce_grad_from_lse(
            x, target, weight, weight_total, None, lse, grad, up, ignore_index,
            lse_square_scale, label_smoothing, softcap, scales,
        )  # fmt: skip
        if grad is x:
            # The kernel overwrote the logits behind autograd's back: bump their version, so a node
            # that also saved them (a misuse of in_place) raises instead of reading a gradient.
            torch.autograd.graph.increment_version(x)
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
    in_place: bool = False,
):
    check_args(
        logits,
        target,
        weight,
        ignore_index,
        lse_square_scale,
        label_smoothing,
        reduction,
        softcap,
        return_z_loss,
        in_place,
    )
    loss, z = LigerCrossEntropyFunction.apply(
        logits, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, in_place
    )
    return (loss, z) if return_z_loss else loss
