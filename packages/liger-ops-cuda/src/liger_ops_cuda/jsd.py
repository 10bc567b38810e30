"""Generalised JSD for NVIDIA GPUs: one pass over student and teacher log-probabilities
writes the loss partials and the student's gradient (scaled by ``1 / counted rows``, a
device scalar: no host synchronisation); backward only rescales it when the incoming
gradient is not 1."""

from __future__ import annotations

import torch

from liger_core.backend import implements
from liger_core.ops.jsd import check_args
from liger_ops_cuda._divergence import LigerDivergenceFunction, inverse_count, jsd_forward
from liger_ops_cuda._tiling import as_rows, contiguous


@implements("jsd")
class LigerJSDFunction(LigerDivergenceFunction):
    @staticmethod
    def forward(ctx, student_logp, teacher_logp, shift_labels, beta, ignore_index):
        check_args(student_logp, teacher_logp, shift_labels, beta, ignore_index)
        x, y = as_rows(student_logp), as_rows(teacher_logp)
        labels = contiguous(shift_labels)
        inv_n = inverse_count(labels, ignore_index, x.shape[0], x.device)
        grad = torch.empty(x.shape, dtype=x.dtype, device=x.device) if ctx.needs_input_grad[0] else None
        part = jsd_forward(x, y, labels, beta, ignore_index, inv_n, grad)
        ctx.elementwise_grad = None
        ctx.save_for_backward(grad)
        return (part.sum() * inv_n[0]).to(student_logp.dtype)
