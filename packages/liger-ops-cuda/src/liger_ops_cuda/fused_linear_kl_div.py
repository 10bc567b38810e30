"""Fused linear KL divergence for NVIDIA GPUs: token chunks; per chunk the student's logits as
float32 products of the inputs (tensor cores with an fp32 output), log-softmax over the
temperature in place, kl_div's kernel (`divergence`) for the loss partials and d(loss)/d(log-probs)
``= -target * scale``, the chain through log-softmax in place (``(g - softmax * sum(g)) / T``),
then ``grad_x_c = G @ W`` and ``grad_W += G^T @ x_c``. Ignored rows get a zero target (no loss,
no gradient). Gradients are computed in forward; backward rescales them only if the incoming
gradient is not 1 (decided on the device)."""

from __future__ import annotations

import torch

from liger_core.backend import implements
from liger_core.ops._losses import take_fused_grads
from liger_core.ops.fused_linear_kl_div import check_args, counted_rows, reduction_scale
from liger_ops_cuda._tiling import accumulate_weight_grad, contiguous, plan_chunks, scale_unless_one
from liger_ops_cuda.divergence import kl_div_forward
from liger_ops_cuda.fused_linear_jsd import _logits_fp32


@implements("fused_linear_kl_div")
class LigerFusedLinearKLDivFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, student_input, student_weight, target, shift_labels, reduction, ignore_index, temperature, eps):
        check_args(student_input, student_weight, target, shift_labels, reduction, ignore_index, temperature, eps)
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        want = need_x or need_w
        xs, ws = student_input.contiguous(), student_weight.contiguous()
        labels = contiguous(shift_labels)
        n, vocab = xs.shape[0], ws.shape[0]
        scale = reduction_scale(reduction, counted_rows(labels, ignore_index, n), vocab)
        gx = torch.empty_like(xs) if need_x else None
        gw = torch.empty_like(ws) if need_w else None
        total = torch.zeros((), dtype=torch.float32, device=xs.device)
        # Per row: student and teacher fp32 logits and the gradient in the input dtype, about 10 bytes a logit.
        c = plan_chunks(n, vocab, bytes_per_logit=10)
        first = True
        for s in range(0, n, c):
            e = min(s + c, n)
            logp = _logits_fp32(xs[s:e], ws)
            if temperature != 1.0:
                logp.div_(temperature)
            logp = logp.sub_(logp.logsumexp(-1, keepdim=True))  # log-probs, in place
            q = target[s:e]
            if labels is not None:
                q = torch.where(
                    (labels[s:e] != ignore_index)[:, None], q, torch.zeros((), dtype=q.dtype, device=q.device)
                )
            part, g = kl_div_forward(logp, q, False, False, eps, scale, want)
            total += part.sum()
            if want:
                # Through log-softmax and the temperature: (g - softmax * rowsum(g)) / T.
                rowsum = g.sum(-1, keepdim=True)
                g.sub_(logp.exp_().mul_(rowsum)).div_(temperature)
                g = g.to(xs.dtype)
                if need_x:
                    torch.mm(g, ws, out=gx[s:e])
                if need_w:
                    accumulate_weight_grad(gw, g, xs[s:e], first)
            first = False
        if need_w and first:
            gw.zero_()
        ctx.fused_grads = (gx, gw)  # not saved tensors: see `_losses.take_fused_grads`
        return total * scale

    @staticmethod
    def backward(ctx, grad_output):
        gx, gw = take_fused_grads(ctx)
        up = grad_output.float().reshape(1)
        scale_unless_one(gx, up)
        scale_unless_one(gw, up)
        return gx, gw, None, None, None, None, None, None
