"""liger-kernel's chunked distillation losses for Intel GPUs, fused linear: the cosine-similarity
loss (fused_linear_cosine_similarity) and the JSD loss with its hard term (fused_linear_jsd_loss).

Token chunks; per chunk the student's and teacher's logits as float32 products of the inputs
(16-bit inputs: the GEMM of _matmul.py; plus biases), the soft term's rows and its gradient in the student's logits (written over the
teacher's buffer: the cosine from liger-core's shared row formula, the JSD through `divergence`'s
kernels on the tempered log-probabilities and the chain through log-softmax), the hard term through
cross-entropy's kernels (loss rows, then its gradient written over the student's logits), the two gradients summed, then ``grad_x_c = G @ W``, ``grad_W += G^T @ x_c`` and
``grad_b += sum(G)``. Gradients are computed in the forward; backward scales them.
"""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.ops import _losses as L
from liger_core.ops import fused_linear_cosine_similarity as cosine
from liger_core.ops import fused_linear_jsd_loss as jsd_loss

from liger_ops_xpu._cross_entropy import CEOptions, cross_entropy_backward, cross_entropy_forward
from liger_ops_xpu._matmul import matmul_nt_f32
from liger_ops_xpu._tiling import plan_chunks
from liger_ops_xpu.divergence import divergence_backward, divergence_forward, jsd_divergence


def distillation_forward(
    ctx, op, student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias, teacher_bias,
    weight_hard_loss, weight_soft_loss, ignore_index, soft_rows,
):  # fmt: skip
    """The chunk loop both losses share: ``soft_rows(s, t, labels, coef)`` returns the chunk's
    summed soft term and, with ``coef`` (the soft term's weight over the counted rows, a float),
    writes ``coef * d(soft)/ds`` over ``t``. Returns ``(loss, soft_loss, hard_loss)``."""
    xs, ws = student_input.contiguous(), student_weight.contiguous()
    xt, wt = teacher_input.contiguous(), teacher_weight.contiguous()
    labels = true_labels.contiguous()
    n, vocab = xs.shape[0], ws.shape[0]
    n_valid, _ = L.label_stats(op, labels, ignore_index, vocab)
    scale = 1.0 / max(n_valid, 1)
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
    ce = CEOptions(ignore_index, 0.0, 0.0, "none", None)
    c = plan_chunks(n, vocab)
    for s0 in range(0, n, c):
        e = min(s0 + c, n)
        s = matmul_nt_f32(xs[s0:e], ws)
        t = matmul_nt_f32(xt[s0:e], wt)
        if student_bias is not None:
            s += student_bias.float()
        if teacher_bias is not None:
            t += teacher_bias.float()
        lab = labels[s0:e]
        soft += soft_rows(s, t, lab, weight_soft_loss * scale if want else None)
        row_loss, _, lse = cross_entropy_forward(s, lab, None, ce, float(vocab))
        hard += row_loss.sum()
        if want:
            cross_entropy_backward(s, lab, None, lse, hard_up, s, ce, float(vocab), 1.0, 0.0)  # in place
            g = s.add_(t)  # the hard term's gradient plus the soft term's
            g_in = g.to(xs.dtype)
            if need_x:
                torch.mm(g_in, ws, out=gx[s0:e])
            if need_w:
                gw += g_in.t() @ xs[s0:e]
            if need_b:
                gb += g.sum(0)
    soft, hard = soft * scale, hard * scale
    ctx.save_for_backward(gx, gw, gb)
    ctx.bias_dtype = None if student_bias is None else student_bias.dtype
    ctx.mark_non_differentiable(soft, hard)
    ctx.set_materialize_grads(False)
    return weight_hard_loss * hard + weight_soft_loss * soft, soft, hard


def distillation_backward(ctx, grad_loss):
    if grad_loss is None:
        return (None,) * 12
    gx, gw, gb = ctx.saved_tensors
    up = grad_loss.float()
    gx = None if gx is None else (gx * up).to(gx.dtype)
    gw = None if gw is None else (gw * up).to(gw.dtype)
    gb = None if gb is None else (gb * up).to(ctx.bias_dtype)
    return (gx, gw, None, None, None, gb) + (None,) * 6


@implements("fused_linear_cosine_similarity")
class LigerFusedLinearCosineSimilarityFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias, teacher_bias,
        weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature,
    ):  # fmt: skip
        args = (student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias, teacher_bias)
        cosine.check_args(*args, weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature)
        temperature = float(temperature)

        def soft_rows(s, t, labels, coef):
            counted = (labels != ignore_index).float()
            rows = cosine.cosine_rows(s, t, temperature, None if coef is None else counted * (coef * beta))
            return (rows * counted).sum() * beta

        return distillation_forward(
            ctx, cosine.OP_NAME, *args, weight_hard_loss, weight_soft_loss, ignore_index, soft_rows
        )

    @staticmethod
    def backward(ctx, grad_loss, _grad_soft=None, _grad_hard=None):
        return distillation_backward(ctx, grad_loss)


@implements("fused_linear_jsd_loss")
class LigerFusedLinearJSDLossFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias, teacher_bias,
        weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature,
    ):  # fmt: skip
        args = (student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias, teacher_bias)
        jsd_loss.check_args(*args, weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature)
        temperature = float(temperature)

        def soft_rows(s, t, labels, coef):
            # The tempered log-probabilities: the student's in a buffer of its own (s stays for the
            # hard term), the teacher's in place.
            x = s / temperature
            x = x.sub_(x.logsumexp(-1, keepdim=True))
            y = t.div_(temperature)
            y = y.sub_(y.logsumexp(-1, keepdim=True))
            div = jsd_divergence(float(beta), ignore_index)
            total = divergence_forward(x, y, labels, div, False)
            if coef is not None:
                ones = torch.ones(1, dtype=torch.float32, device=s.device)
                d = divergence_backward(x, y, labels, div, ones, coef, torch.float32)
                # Through log-softmax and the temperature: (d - softmax * rowsum(d)) / T, over t.
                t.copy_(d.sub_(x.exp_().mul_(d.sum(-1, keepdim=True)))).div_(temperature)
            return total

        return distillation_forward(
            ctx, jsd_loss.OP_NAME, *args, weight_hard_loss, weight_soft_loss, ignore_index, soft_rows
        )

    @staticmethod
    def backward(ctx, grad_loss, _grad_soft=None, _grad_hard=None):
        return distillation_backward(ctx, grad_loss)
