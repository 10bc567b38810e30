"""Fused linear + JSD (distillation) for Ascend NPUs: logits a chunk of tokens at a time.

Per chunk of tokens: the student and teacher projections as float32 torch matmuls (cube
units), scaled by ``1 / temperature`` and turned into log-probabilities (torch's logsumexp),
then this package's divergence kernel (`_divergence`, vector cores, UB-sized vocabulary
chunks) gives the chunk's JSD sum and its gradient w.r.t. the student log-probabilities in
one pass. Through the log-softmax, ``dz = (g - softmax * sum(g)) / temperature``; then
``grad_input = dz @ W`` and ``grad_weight += dz^T @ input``, formed in the forward while the
chunk is at hand and scaled by the upstream gradient in the backward. Peak memory: a few
chunk-sized float32 buffers, far below ``tokens x vocab``.
"""

from __future__ import annotations

import torch
from liger_core.ops import _losses
from liger_core.ops.fused_linear_jsd import check_args

from liger_ops_ascend import hardware
from liger_ops_ascend._divergence import JSD, divergence
from liger_ops_ascend.fused_linear_cross_entropy import chunk_tokens


class LigerFusedLinearJSDFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, s_in, s_w, t_in, t_w, labels, beta, ignore_index, temperature):
        hw = hardware.current(s_in.device)
        n_tokens, hidden = s_in.shape
        vocab = s_w.shape[0]
        n = _losses.label_count("fused_linear_jsd", labels, ignore_index, n_tokens)
        scale = 1.0 / max(n, 1)
        want_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        # The contract's logits are float32 products of the inputs.
        s_w32, t_w32 = s_w.float(), t_w.float()
        total = torch.zeros((), dtype=torch.float32, device=s_in.device)
        gx = torch.empty_like(s_in) if want_grad else None
        gw = torch.zeros((vocab, hidden), dtype=torch.float32, device=s_in.device) if want_grad else None
        step = chunk_tokens(n_tokens, max(hidden, t_in.shape[1]), vocab)
        for start in range(0, n_tokens, step):
            end = min(start + step, n_tokens)
            x_c = s_in[start:end].float()
            s = x_c @ s_w32.t()
            s /= temperature
            s -= torch.logsumexp(s, dim=-1, keepdim=True)
            t = t_in[start:end].float() @ t_w32.t()
            t /= temperature
            t -= torch.logsumexp(t, dim=-1, keepdim=True)
            lab = None if labels is None else labels[start:end]
            loss_c, g = divergence(JSD, s, t, lab, ignore_index, scale, False, want_grad, hw, param=float(beta))
            total += loss_c
            if want_grad:
                # Back through log_softmax and the temperature: g - softmax * rowsum(g).
                g -= s.exp_() * g.sum(-1, keepdim=True)
                g /= temperature
                gx[start:end] = (g @ s_w32).to(gx.dtype)
                gw += g.t() @ x_c
        ctx.save_for_backward(gx, gw)
        ctx.w_dtype = s_w.dtype
        return total

    @staticmethod
    def backward(ctx, d_loss):
        gx, gw = ctx.saved_tensors
        go = d_loss.float()
        return (gx.float() * go).to(gx.dtype), (gw * go).to(ctx.w_dtype), None, None, None, None, None, None


def fused_linear_jsd(
    student_input: torch.Tensor,
    student_weight: torch.Tensor,
    teacher_input: torch.Tensor,
    teacher_weight: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    jsd_beta: float = 0.5,
    ignore_index: int = -100,
    temperature: float = 1.0,
) -> torch.Tensor:
    check_args(
        student_input, student_weight, teacher_input, teacher_weight, shift_labels, jsd_beta, ignore_index, temperature
    )
    return LigerFusedLinearJSDFunction.apply(
        student_input, student_weight, teacher_input, teacher_weight, shift_labels, float(jsd_beta),
        int(ignore_index), float(temperature),
    )  # fmt: skip
