"""Fused linear cosine-similarity distillation for Ascend NPUs: token chunks; per chunk the
student's and teacher's logits as float32 products of the inputs (float32 torch matmuls on the cube units; plus biases), the soft term's
per-row cosine and its gradient in the student's logits (row norms and one dot per row, written
over the teacher's buffer), the hard term through cross-entropy's kernels (loss rows, then its
gradient written over the student's logits), the two gradients summed, then
``grad_x_c = G @ W``, ``grad_W += G^T @ x_c`` and ``grad_b += sum(G)``. Gradients are computed in
the forward; backward rescales them only if the incoming gradient is not 1 (decided on the device)."""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.ops import _losses as L
from liger_core.ops.fused_linear_cosine_similarity import OP_NAME, check_args, cosine_rows

from liger_ops_ascend import hardware
from liger_ops_ascend._cross_entropy import CEOptions, cross_entropy_backward, cross_entropy_forward, prepare_target
from liger_ops_ascend._tiling import chunk_tokens


@implements("fused_linear_cosine_similarity")
class LigerFusedLinearCosineSimilarityFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias, teacher_bias,
        weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature,
    ):  # fmt: skip
        check_args(
            student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias, teacher_bias,
            weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature,
        )  # fmt: skip
        xs, ws = student_input.contiguous(), student_weight.contiguous()
        xt, wt = teacher_input.contiguous(), teacher_weight.contiguous()
        labels = true_labels.contiguous()
        n, vocab = xs.shape[0], ws.shape[0]
        n_valid, _ = L.label_stats(OP_NAME, labels, ignore_index, vocab)
        scale = 1.0 / max(n_valid, 1)
        temperature = float(temperature)
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_b = student_bias is not None and ctx.needs_input_grad[5]
        want = need_x or need_w or need_b
        gx = torch.empty_like(xs) if need_x else None
        gw = torch.zeros_like(ws) if need_w else None
        gb = torch.zeros(vocab, dtype=torch.float32, device=xs.device) if need_b else None
        soft = torch.zeros((), dtype=torch.float32, device=xs.device)
        hard = torch.zeros_like(soft)
        # The hard term's gradient scale (one value for every row).
        hard_up = torch.full((1,), weight_hard_loss * scale, dtype=torch.float32, device=xs.device)
        ce = CEOptions(None, ignore_index, 0.0, 0.0, None)
        hw = hardware.current(xs.device)
        ws32, wt32 = ws.float(), wt.float()
        c = chunk_tokens(n, max(xs.shape[1], xt.shape[1]), vocab)
        for s0 in range(0, n, c):
            e = min(s0 + c, n)
            s = xs[s0:e].float() @ ws32.t()
            t = xt[s0:e].float() @ wt32.t()
            if student_bias is not None:
                s += student_bias.float()
            if teacher_bias is not None:
                t += teacher_bias.float()
            lab = labels[s0:e]
            target = prepare_target(lab)
            counted = (lab != ignore_index).float()
            coef = counted * (weight_soft_loss * beta * scale) if want else None
            soft += (cosine_rows(s, t, temperature, coef) * counted).sum()
            row_loss, _, lse = cross_entropy_forward(s, target, ce, hw)
            hard += row_loss.sum()
            if want:
                up = hard_up.expand(e - s0).contiguous()  # a per row; b (the z-loss factor) multiplies 0
                cross_entropy_backward(s, target, lse, up, up, ce, hw, out=s)
                g = s.add_(t)  # the hard term's gradient plus the soft term's
                g_in = g.to(xs.dtype)
                if need_x:
                    torch.mm(g_in, ws, out=gx[s0:e])
                if need_w:
                    gw += g_in.t() @ xs[s0:e]
                if need_b:
                    gb += g.sum(0)
        soft, hard = soft * (beta * scale), hard * scale
        ctx.save_for_backward(gx, gw, gb)
        ctx.bias_dtype = None if student_bias is None else student_bias.dtype
        ctx.mark_non_differentiable(soft, hard)
        ctx.set_materialize_grads(False)
        return weight_hard_loss * hard + weight_soft_loss * soft, soft, hard

    @staticmethod
    def backward(ctx, grad_loss, _grad_soft=None, _grad_hard=None):
        if grad_loss is None:
            return (None,) * 12
        gx, gw, gb = ctx.saved_tensors
        up = grad_loss.float()
        gx = None if gx is None else (gx * up).to(gx.dtype)
        gw = None if gw is None else (gw * up).to(gw.dtype)
        gb = None if gb is None else (gb * up).to(ctx.bias_dtype)
        return (gx, gw, None, None, None, gb) + (None,) * 6
