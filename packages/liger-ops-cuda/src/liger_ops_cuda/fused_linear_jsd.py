"""Fused linear JSD for NVIDIA GPUs: token chunks; per chunk the student's and teacher's
logits as float32 products of the inputs (tensor cores with an fp32 output, no rounding to
the input dtype before the softmax), log-softmax in place, the JSD kernel for the loss
partials and d(loss)/d(student log-probs) (written over the teacher's buffer), the chain
through log-softmax in place, then ``grad_x_c = G @ W_s`` and ``grad_W_s += G^T @ x_c``.
Gradients are computed in forward; backward rescales them only if the incoming gradient
is not 1 (decided on the device)."""

from __future__ import annotations

import torch

from liger_core.backend import implements
from liger_core.ops._losses import take_fused_grads
from liger_core.ops.fused_linear_jsd import check_args
from liger_ops_cuda._tiling import accumulate_weight_grad, contiguous, plan_chunks, scale_unless_one
from liger_ops_cuda.divergence import inverse_count, jsd_forward


def _logits_fp32(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w.T`` in float32 without rounding the products to the input dtype first."""
    if x.dtype == torch.float32:
        return x @ w.t()
    if x.is_cuda:
        try:
            return torch.mm(x, w.t(), out_dtype=torch.float32)
        except (TypeError, RuntimeError):
            pass
    return x.float() @ w.float().t()


@implements("fused_linear_jsd")
class LigerFusedLinearJSDFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, student_input, student_weight, teacher_input, teacher_weight, shift_labels, jsd_beta, ignore_index,
        temperature,
    ):  # fmt: skip
        check_args(
            student_input, student_weight, teacher_input, teacher_weight, shift_labels, jsd_beta, ignore_index,
            temperature,
        )  # fmt: skip
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        xs, ws = student_input.contiguous(), student_weight.contiguous()
        xt, wt = teacher_input.contiguous(), teacher_weight.contiguous()
        labels = contiguous(shift_labels)
        n = xs.shape[0]
        vocab = ws.shape[0]
        inv_n = inverse_count(labels, ignore_index, n, xs.device)
        gx = torch.empty_like(xs) if need_x else None
        gw = torch.empty_like(ws) if need_w else None
        total = torch.zeros((), dtype=torch.float32, device=xs.device)
        # Per row: student and teacher fp32 logits and the gradient in the input dtype, about 10 bytes a logit.
        c = plan_chunks(n, vocab, bytes_per_logit=10)
        first = True
        for s in range(0, n, c):
            e = min(s + c, n)
            student = _logits_fp32(xs[s:e], ws).div_(temperature)
            teacher = _logits_fp32(xt[s:e], wt).div_(temperature)
            student = student.sub_(student.logsumexp(-1, keepdim=True))  # log-probs, in place
            teacher = teacher.sub_(teacher.logsumexp(-1, keepdim=True))
            want = need_x or need_w
            part = jsd_forward(
                student, teacher, labels[s:e] if labels is not None else None, jsd_beta, ignore_index, inv_n,
                grad=teacher if want else None,
            )  # fmt: skip
            total += part.sum()
            if want:
                d = teacher  # d(loss)/d(student log-probs), already divided by the counted rows
                # Through log-softmax and the temperature: (d - softmax * rowsum(d)) / T.
                rowsum = d.sum(-1, keepdim=True)
                d.sub_(student.exp_().mul_(rowsum)).div_(temperature)
                g = d.to(xs.dtype)
                if need_x:
                    torch.mm(g, ws, out=gx[s:e])
                if need_w:
                    accumulate_weight_grad(gw, g, xs[s:e], first)
            first = False
        if need_w and first:
            gw.zero_()
        ctx.fused_grads = (gx, gw)  # not saved tensors: see `_losses.take_fused_grads`
        return total * inv_n[0]

    @staticmethod
    def backward(ctx, grad_output):
        gx, gw = take_fused_grads(ctx)
        up = grad_output.float().reshape(1)
        scale_unless_one(gx, up)
        scale_unless_one(gw, up)
        return gx, gw, None, None, None, None, None, None
