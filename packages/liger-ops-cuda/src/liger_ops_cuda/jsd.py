"""Generalised JSD for NVIDIA GPUs: one pass over student and teacher log-probabilities
writes the loss partials and the student's gradient (scaled by ``1 / counted rows``, a
device scalar: no host synchronisation); backward only rescales it when the incoming
gradient is not 1."""

from __future__ import annotations

import torch

from liger_core.ops.jsd import check_args
from liger_ops_cuda._ce_kernels import scale_unless_one
from liger_ops_cuda._div_kernels import (
    MODE_FORWARD_KL,
    MODE_MIXED,
    MODE_REVERSE_KL,
    _jsd_kernel,
    inverse_count,
    tile_plan,
    unit_col,
)


def jsd_mode(beta: float) -> int:
    return MODE_FORWARD_KL if beta == 0 else MODE_REVERSE_KL if beta == 1 else MODE_MIXED


def jsd_rows(x, y, labels, beta, ignore_index, inv_n, grad=None):
    """The loss partials ``(rows, tiles)`` of ``x`` (student) against ``y``; with ``grad``
    also d(loss)/dx scaled by ``inv_n`` (a device scalar) into it."""
    n, v = x.shape
    block, n_tiles, warps = tile_plan(v)
    part = torch.zeros((n, n_tiles), dtype=torch.float32, device=x.device)
    if n and v:
        _jsd_kernel[(n, n_tiles)](
            x, x.stride(0), y, y.stride(0), grad if grad is not None else x, grad.stride(0) if grad is not None else 0,
            part, n_tiles, labels if labels is not None else x, inv_n, v, ignore_index, float(beta),
            MODE=jsd_mode(beta), HAS_LABELS=labels is not None, WRITE_GRAD=grad is not None, BLOCK=block,
            num_warps=warps,
        )  # fmt: skip
    return part


class LigerJSDFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, student_logp, teacher_logp, shift_labels, beta, ignore_index):
        x, y = unit_col(student_logp), unit_col(teacher_logp)
        labels = shift_labels.contiguous() if shift_labels is not None else None
        inv_n = inverse_count(labels, ignore_index, x.shape[0], x.device)
        grad = torch.empty(x.shape, dtype=x.dtype, device=x.device) if ctx.needs_input_grad[0] else None
        part = jsd_rows(x, y, labels, beta, ignore_index, inv_n, grad)
        ctx.save_for_backward(grad)
        return (part.sum() * inv_n[0]).to(student_logp.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        (grad,) = ctx.saved_tensors
        if grad is not None:
            scale_unless_one(grad, grad_output.float().reshape(1))
        return grad, None, None, None, None


def jsd(
    student_logp: torch.Tensor,
    teacher_logp: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    beta: float = 0.5,
    ignore_index: int = -100,
) -> torch.Tensor:
    check_args(student_logp, teacher_logp, shift_labels, beta, ignore_index)
    return LigerJSDFunction.apply(student_logp, teacher_logp, shift_labels, beta, ignore_index)
