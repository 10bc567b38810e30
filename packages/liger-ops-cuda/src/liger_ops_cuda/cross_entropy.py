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

Memory beyond the inputs: the per-row fp32 loss and lse (z-loss only when
``lse_square_scale > 0`` or it is returned with reduction "none"), one 4-float statistics
buffer, a few scalars; with many rows no (rows, tiles) partials (see `_ce_kernels`).
"""

from __future__ import annotations

import torch

from liger_core.ops import _losses as L
from liger_core.ops.cross_entropy import check_args
from liger_ops_cuda._ce_kernels import ce_grad_from_lse, ce_rows, ce_target_stats


class TargetCheck:
    """Targets outside ``[0, vocab)`` (other than ignore_index), counted on the device.

    The count is copied to pinned host memory behind the op's first kernels; `raise_if_bad`
    runs after the main kernels are queued, so the host waits while the GPU is busy with them
    (no idle GPU, unlike reading the count up front). During CUDA-graph capture nothing can be
    read back and the check is skipped; the kernels mask their loads, so a bad target then
    gives a wrong loss, never an out-of-bounds access.
    """

    def __init__(self, op, target, ignore_index, n_classes, weight, count):
        """``count``: a one-element device tensor, the number of bad targets."""
        self.args = (op, target, ignore_index, n_classes, weight)
        self.skip = target.is_cuda and torch.cuda.is_current_stream_capturing()
        if self.skip:
            return
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


def target_stats(
    op, target, ignore_index, n_classes, weight, reduction, weight_total: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None, TargetCheck]:
    """(scales, weight total, deferred target check) from one launch and one 4-float buffer.

    ``scales``: ``[scale of the summed loss terms, scale of the summed z-loss terms]`` on the
    device (mean: ``1 / sum(w[y])`` and ``1 / n`` over the counted rows, 1 when there are none,
    so an all-ignored batch gives 0, never NaN; sum/none: 1). ``weight total``: ``sum_j w_j``
    as a 1-element device tensor when ``weight_total`` and ``weight`` are given, else None.
    ``target`` and ``weight`` must be contiguous.
    """
    stats = ce_target_stats(target, weight, ignore_index, n_classes, reduction, weight_total)
    total = stats[3:4] if weight_total and weight is not None else None
    return stats[:2], total, TargetCheck(op, target, ignore_index, n_classes, weight, stats[2])


def device_scales(op, target, ignore_index, n_classes, weight, reduction) -> tuple[torch.Tensor, TargetCheck]:
    """`target_stats` without the weight total: ``(scales, target check)``."""
    scales, _, check = target_stats(op, target.contiguous(), ignore_index, n_classes, _contiguous(weight), reduction)
    return scales, check


def _contiguous(t):
    return None if t is None else t.contiguous()


def reduce_rows(rows, reduction: str, scales: torch.Tensor, dtype: torch.dtype = torch.float32, z_out: bool = True):
    """(loss, z_loss) in ``dtype`` from the per-row terms, without row-sized temporaries.

    ``rows.z`` may be None (no z-loss computed): z_loss is then zeros; for reduction "none"
    a real zero vector only when ``z_out`` (the caller returns it), else a broadcast zero.
    """
    n = rows.loss.shape[0]
    if rows.z is None:
        if reduction == "none":
            loss = rows.loss
        elif reduction == "sum":
            loss = rows.loss.sum()
        else:
            loss = rows.loss.sum() * scales[0]
        if reduction != "none":
            z = torch.zeros((), dtype=dtype, device=loss.device)
        elif z_out:
            z = torch.zeros(n, dtype=dtype, device=loss.device)
        else:
            z = torch.zeros((), dtype=dtype, device=loss.device).expand(n)
        return loss.to(dtype), z
    if reduction == "none":
        return (rows.loss + rows.z).to(dtype), rows.z.to(dtype)
    if reduction == "sum":
        z = rows.z.sum()
        return (rows.loss.sum() + z).to(dtype), z.to(dtype)
    z = rows.z.sum() * scales[1]
    return (rows.loss.sum() * scales[0] + z).to(dtype), z.to(dtype)


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
        return_z_loss: bool = True,
    ):
        x = logits if logits.stride(-1) == 1 else logits.contiguous()
        target = target.contiguous()
        weight = _contiguous(weight)
        # Smoothing's sum_j w_j comes with the scales (same launch), kept on the device.
        scales, weight_total, check = target_stats(
            "cross_entropy", target, ignore_index, x.shape[1], weight, reduction, weight_total=label_smoothing > 0
        )
        # No z buffer without a z-loss: reduce_rows gives zeros (a real vector only if returned).
        want_z = lse_square_scale > 0
        rows = ce_rows(
            x, target, weight, weight_total, None, ignore_index, lse_square_scale, label_smoothing, softcap,
            want_z=want_z,
        )  # fmt: skip
        loss, z = reduce_rows(rows, reduction, scales, logits.dtype, z_out=return_z_loss)
        check.raise_if_bad()
        # In place: a detached alias, so the gradient returned in its memory is a tensor of its own
        # that autograd can keep as .grad without a copy.
        ctx.save_for_backward(x.detach() if in_place else x, target, weight, weight_total, rows.lse, scales)
        ctx.args = (ignore_index, lse_square_scale, label_smoothing, softcap, in_place)
        ctx.mark_non_differentiable(z)
        ctx.set_materialize_grads(False)
        return loss, z

    @staticmethod
    def backward(ctx, grad_loss, grad_z):
        if grad_loss is None:
            return (None,) * 10
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
        return grad, None, None, None, None, None, None, None, None, None


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
        logits, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, in_place,
        return_z_loss,
    )  # fmt: skip
    return (loss, z) if return_z_loss else loss
