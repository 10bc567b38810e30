"""Fused linear KL divergence for Intel GPUs: token chunks of about FUSED_LINEAR_MEMORY_BUDGET
logits; per chunk the student's logits as float32 products of the inputs (16-bit inputs: the GEMM
of _matmul.py), log-softmax over the temperature, the divergence kernels of divergence.py (the
chunk's loss sum, then d(loss)/d(log-probs) ``= -target * scale``, ignored rows skipped), the
chain through log-softmax (``(g - softmax * sum(g)) / T``) and the two gradient matmuls in the
student's dtype. The loss is a scalar, so the gradients are computed in the forward pass and
the backward scales them.
"""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.ops._losses import take_fused_grads
from liger_core.ops.fused_linear_kl_div import check_args, counted_rows, reduction_scale

from liger_ops_xpu._matmul import matmul_nt_f32
from liger_ops_xpu._tiling import plan_chunks
from liger_ops_xpu.divergence import KL, Divergence, divergence_backward, divergence_forward


@implements("fused_linear_kl_div")
class LigerFusedLinearKLDivFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, student_input, student_weight, target, shift_labels, reduction, ignore_index, temperature, eps):
        check_args(student_input, student_weight, target, shift_labels, reduction, ignore_index, temperature, eps)
        xs, ws = student_input, student_weight
        labels = None if shift_labels is None else shift_labels.contiguous()
        temperature = float(temperature)
        n_rows, vocab = xs.shape[0], ws.shape[0]
        scale = reduction_scale(reduction, counted_rows(labels, ignore_index, n_rows), vocab)
        div = Divergence(KL, eps=float(eps), ignore_index=ignore_index)
        want_dx, want_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        total = torch.zeros((), dtype=torch.float32, device=xs.device)
        dxs = torch.empty_like(xs) if want_dx else None
        dws = torch.zeros_like(ws) if want_dw else None
        ones = torch.ones(1, dtype=torch.float32, device=xs.device)
        step = plan_chunks(n_rows, vocab, bytes_per_logit=8)  # student and teacher fp32 logits
        for start in range(0, n_rows, step):
            end = min(start + step, n_rows)
            xs_c = xs[start:end]
            lab_c = None if labels is None else labels[start:end]
            s = matmul_nt_f32(xs_c, ws)
            if temperature != 1.0:
                s /= temperature
            s_logp = torch.log_softmax(s, dim=-1)
            q = target[start:end]
            total += divergence_forward(s_logp, q, lab_c, div, False)
            if not (want_dx or want_dw):
                continue
            g = divergence_backward(s_logp, q, lab_c, div, ones, scale, torch.float32)
            ds = g.sub_(s_logp.exp_().mul_(g.sum(-1, keepdim=True)))  # through log_softmax, in place
            if temperature != 1.0:
                ds /= temperature
            ds = ds.to(ws.dtype)
            if want_dx:
                torch.mm(ds, ws, out=dxs[start:end])
            if want_dw:
                dws += ds.t() @ xs_c
        ctx.fused_grads = (dxs, dws)  # not saved tensors: see `_losses.take_fused_grads`
        return total * scale

    @staticmethod
    def backward(ctx, grad_loss):
        grads = take_fused_grads(ctx)
        g = grad_loss.to(torch.float32)
        dxs, dws = (None if t is None else t.mul_(g) for t in grads)  # in place: autograd adopts them
        return dxs, dws, None, None, None, None, None, None
