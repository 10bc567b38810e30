"""Fused linear JSD (distillation) for Intel GPUs: the student's and teacher's lm_head
projections and the generalised JSD of their log-softmaxes, chunk by chunk over tokens.

Per chunk of about FUSED_LINEAR_MEMORY_BUDGET logits: fp32 logits of both models (the
contract asks for fp32 products, no rounding before the softmax: for 16-bit inputs the GEMM of
_matmul.py, 16-bit tiles on the matrix engines with fp32 output, so no fp32 copy of either
weight), their log-softmax at the temperature, the divergence kernels of divergence.py (the
chunk's loss sum, then the gradient in the student's log-probabilities), the chain through
log-softmax (``grad_s = (g - softmax(s) * sum(g)) / T``) and the student's two gradient matmuls
in the student's dtype (grad_weight accumulated in it, as for fused_linear_cross_entropy's
default). The loss is a scalar, so the gradients are computed in the forward pass and the
backward scales them.
"""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.ops._losses import label_count, take_fused_grads
from liger_core.ops.fused_linear_jsd import check_args

from liger_ops_xpu._matmul import matmul_nt_f32
from liger_ops_xpu._tiling import plan_chunks
from liger_ops_xpu.divergence import divergence_backward, divergence_forward, jsd_divergence


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
        xs, ws, xt, wt = student_input, student_weight, teacher_input, teacher_weight
        labels = None if shift_labels is None else shift_labels.contiguous()
        temperature = float(temperature)
        n_rows, vocab = xs.shape[0], ws.shape[0]
        n = label_count("fused_linear_jsd", labels, ignore_index, n_rows)
        div = jsd_divergence(float(jsd_beta), ignore_index)
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
            t = matmul_nt_f32(xt[start:end], wt)
            if temperature != 1.0:
                t /= temperature
            s_logp = torch.log_softmax(s, dim=-1)
            t_logp = torch.log_softmax(t, dim=-1)
            total += divergence_forward(s_logp, t_logp, lab_c, div, False)
            if not (want_dx or want_dw):
                continue
            g = divergence_backward(s_logp, t_logp, lab_c, div, ones, 1.0 / max(n, 1), torch.float32)
            ds = g.sub_(s_logp.exp_().mul_(g.sum(-1, keepdim=True)))  # through log_softmax, in place
            if temperature != 1.0:
                ds /= temperature
            ds = ds.to(ws.dtype)
            if want_dx:
                torch.mm(ds, ws, out=dxs[start:end])
            if want_dw:
                dws += ds.t() @ xs_c
        ctx.fused_grads = (dxs, dws)  # not saved tensors: see `_losses.take_fused_grads`
        return total / max(n, 1)

    @staticmethod
    def backward(ctx, grad_loss):
        grads = take_fused_grads(ctx)
        g = grad_loss.to(torch.float32)
        dxs, dws = (None if t is None else t.mul_(g) for t in grads)  # in place: autograd adopts them
        return dxs, dws, None, None, None, None, None, None
