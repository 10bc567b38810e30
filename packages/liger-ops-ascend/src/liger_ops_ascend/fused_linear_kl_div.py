"""Fused linear KL divergence for Ascend NPUs: logits a chunk of tokens at a time.

Per chunk of tokens: the student's projection as a float32 torch matmul (cube units), scaled by
``1 / temperature`` and turned into log-probabilities (torch's logsumexp), then this package's
divergence kernel (`divergence`, KL_DIV, vector cores, UB-sized vocabulary chunks; ignored rows
skipped) gives the chunk's loss sum and d(loss)/d(log-probs) ``= -target * scale`` in one pass.
Through the log-softmax, ``dz = (g - softmax * sum(g)) / temperature``; then
``grad_input = dz @ W`` and ``grad_weight += dz^T @ input``, formed in the forward while the
chunk is at hand and scaled by the upstream gradient in the backward.
"""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.ops._losses import take_fused_grads
from liger_core.ops.fused_linear_kl_div import check_args, counted_rows, reduction_scale

from liger_ops_ascend import hardware
from liger_ops_ascend._tiling import chunk_tokens
from liger_ops_ascend.divergence import KL_DIV, divergence_forward


@implements("fused_linear_kl_div")
class LigerFusedLinearKLDivFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, student_input, student_weight, target, shift_labels, reduction, ignore_index, temperature, eps):
        check_args(student_input, student_weight, target, shift_labels, reduction, ignore_index, temperature, eps)
        ignore_index, temperature = int(ignore_index), float(temperature)
        hw = hardware.current(student_input.device)
        n_tokens, hidden = student_input.shape
        vocab = student_weight.shape[0]
        scale = reduction_scale(reduction, counted_rows(shift_labels, ignore_index, n_tokens), vocab)
        want_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        # The contract's logits are float32 products of the inputs.
        s_w32 = student_weight.float()
        total = torch.zeros((), dtype=torch.float32, device=student_input.device)
        gx = torch.empty_like(student_input) if want_grad else None
        gw = torch.zeros((vocab, hidden), dtype=torch.float32, device=student_input.device) if want_grad else None
        step = chunk_tokens(n_tokens, hidden, vocab, 8)  # fp32 logits and their gradient
        for start in range(0, n_tokens, step):
            end = min(start + step, n_tokens)
            x_c = student_input[start:end].float()
            s = x_c @ s_w32.t()
            s /= temperature
            s -= torch.logsumexp(s, dim=-1, keepdim=True)
            lab = None if shift_labels is None else shift_labels[start:end]
            loss_c, g = divergence_forward(
                KL_DIV, s, target[start:end], lab, ignore_index, scale, False, want_grad, hw, param=float(eps)
            )
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
        if gx is None:
            return (None,) * 8
        go = d_loss.float()
        # In place (the float32 grad_weight buffer converted for a 16-bit weight): autograd adopts them.
        return gx.mul_(go), gw.mul_(go).to(ctx.w_dtype), None, None, None, None, None, None
