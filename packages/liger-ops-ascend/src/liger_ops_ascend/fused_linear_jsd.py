"""Fused linear + JSD (distillation) for Ascend NPUs: logits a chunk of tokens at a time.

Per chunk of tokens: the student and teacher projections as float32 torch matmuls (cube
units), scaled by ``1 / temperature`` and turned into log-probabilities (torch's logsumexp),
then this package's divergence kernel (`divergence`, vector cores, UB-sized vocabulary
chunks) gives the chunk's JSD sum and its gradient w.r.t. the student log-probabilities in
one pass. Through the log-softmax, ``dz = (g - softmax * sum(g)) / temperature``; then
``grad_input = dz @ W`` and ``grad_weight += dz^T @ input``, formed in the forward while the
chunk is at hand and scaled by the upstream gradient in the backward. Peak memory: a few
chunk-sized float32 buffers, far below ``tokens x vocab``.
"""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.ops import _losses
from liger_core.ops._losses import take_fused_grads
from liger_core.ops.fused_linear_jsd import check_args

from liger_ops_ascend import hardware
from liger_ops_ascend._tiling import chunk_tokens
from liger_ops_ascend.divergence import JSD, divergence_forward


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
        beta, ignore_index, temperature = float(jsd_beta), int(ignore_index), float(temperature)
        hw = hardware.current(student_input.device)
        n_tokens, hidden = student_input.shape
        vocab = student_weight.shape[0]
        n = _losses.label_count("fused_linear_jsd", shift_labels, ignore_index, n_tokens)
        scale = 1.0 / max(n, 1)
        want_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        # The contract's logits are float32 products of the inputs.
        s_w32, t_w32 = student_weight.float(), teacher_weight.float()
        total = torch.zeros((), dtype=torch.float32, device=student_input.device)
        gx = torch.empty_like(student_input) if want_grad else None
        gw = torch.zeros((vocab, hidden), dtype=torch.float32, device=student_input.device) if want_grad else None
        step = chunk_tokens(n_tokens, max(hidden, teacher_input.shape[1]), vocab, 8)  # student and teacher fp32
        for start in range(0, n_tokens, step):
            end = min(start + step, n_tokens)
            x_c = student_input[start:end].float()
            s = x_c @ s_w32.t()
            s /= temperature
            s -= torch.logsumexp(s, dim=-1, keepdim=True)
            t = teacher_input[start:end].float() @ t_w32.t()
            t /= temperature
            t -= torch.logsumexp(t, dim=-1, keepdim=True)
            lab = None if shift_labels is None else shift_labels[start:end]
            loss_c, g = divergence_forward(JSD, s, t, lab, ignore_index, scale, False, want_grad, hw, param=beta)
            total += loss_c
            if want_grad:
                # Back through log_softmax and the temperature: g - softmax * rowsum(g).
                g -= s.exp_() * g.sum(-1, keepdim=True)
                g /= temperature
                gx[start:end] = (g @ s_w32).to(gx.dtype)
                gw += g.t() @ x_c
        ctx.fused_grads = (gx, gw)  # not saved tensors: see `_losses.take_fused_grads`
        ctx.w_dtype = student_weight.dtype
        return total

    @staticmethod
    def backward(ctx, d_loss):
        gx, gw = take_fused_grads(ctx)
        go = d_loss.float()
        # In place (the float32 grad_weight buffer converted for a 16-bit weight): autograd adopts them.
        return gx.mul_(go), gw.mul_(go).to(ctx.w_dtype), None, None, None, None, None, None
