"""liger-kernel's chunked distillation losses, fused linear (fused_linear_cosine_similarity and
fused_linear_jsd_loss): the chunk loop every backend runs, as autograd Functions built over one
backend's kernel adapter (`DistillationKernels`), so that a vendor module holds only its kernels
and registers the Functions.

Token chunks (as many rows as the backend's `chunk_rows` plans); per chunk the student's and
teacher's logits as float32 products of the inputs (plus biases), the soft term's rows and its
gradient in the student's logits (written over the teacher's buffer: the cosine from
`fused_linear_cosine_similarity.cosine_rows`, the JSD through the backend's divergence kernels on
the tempered log-probabilities, then the chain through log-softmax here), the hard term through the
backend's cross-entropy kernels (loss rows, and its gradient written over the student's logits),
the two gradients summed, then ``grad_x_c = G @ W``, ``grad_W += G^T @ x_c`` and ``grad_b +=
sum(G)``. Gradients are computed in the forward and handed to autograd in backward
(`_losses.take_fused_grads`), scaled by the incoming gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from liger_core.ops import _losses as L
from liger_core.ops import fused_linear_cosine_similarity as cosine
from liger_core.ops import fused_linear_jsd_loss as jsd_loss


class DistillationKernels(L.LinearChunkKernels):
    """A backend's kernels under `autograd_functions`: its matmul steps (`L.LinearChunkKernels`),
    its chunk plan, the hard term's cross-entropy and the JSD's divergence kernels."""

    def chunk_rows(self, n_rows: int, hidden: int, vocab: int) -> int:
        """Token rows per chunk (at least one) for ``n_rows`` tokens, the wider of the two hidden
        sizes and ``vocab`` classes."""
        raise NotImplementedError

    def hard_cross_entropy(
        self, ignore_index: int, upstream: torch.Tensor | None, device: torch.device
    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """The hard term for one call on ``device``: a function of a float32 ``(rows, vocab)`` chunk of student
        logits and its labels that returns the rows' cross-entropy (0 where the label is
        ``ignore_index``) and, with ``upstream`` (a float32 ``(1,)`` tensor: the hard term's
        weight over the counted rows), writes ``upstream * (softmax - onehot)`` over the logits
        (0 on ignored rows)."""
        raise NotImplementedError

    def jsd_rows(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        labels: torch.Tensor,
        beta: float,
        ignore_index: int,
        coef: float | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """liger-kernel's generalised JSD of the float32 log-probabilities ``x`` (student) and
        ``y`` (teacher), rows labelled ``ignore_index`` left out: ``(its sum over the chunk,
        coef * d(sum)/dx)``, the gradient None without ``coef``. The gradient may be written over
        ``y``'s buffer (``y`` is not read afterwards)."""
        raise NotImplementedError


def _forward(
    ctx, kernels, op, student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias,
    teacher_bias, weight_hard_loss, weight_soft_loss, ignore_index, soft_rows,
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
    gx, gw, gb = L.fused_grad_buffers(kernels, xs, ws, need_x, need_w, need_b)
    soft = torch.zeros((), dtype=torch.float32, device=xs.device)
    hard = torch.zeros_like(soft)
    # The hard term's gradient scale (one value for every row).
    hard_up = torch.full((1,), weight_hard_loss * scale, dtype=torch.float32, device=xs.device) if want else None
    hard_rows = kernels.hard_cross_entropy(ignore_index, hard_up, xs.device)
    ws_logits, wt_logits = kernels.logits_weight(ws), kernels.logits_weight(wt)
    c = kernels.chunk_rows(n, max(xs.shape[1], xt.shape[1]), vocab)
    first = True
    for s0 in range(0, n, c):
        e = min(s0 + c, n)
        s = kernels.logits(xs[s0:e], ws_logits)
        t = kernels.logits(xt[s0:e], wt_logits)
        if student_bias is not None:
            s += student_bias.float()
        if teacher_bias is not None:
            t += teacher_bias.float()
        lab = labels[s0:e]
        soft += soft_rows(s, t, lab, weight_soft_loss * scale if want else None)
        hard += hard_rows(s, lab).sum()
        if want:
            g = s.add_(t)  # the hard term's gradient (written over s) plus the soft term's (over t)
            L.add_chunk_grads(kernels, g, slice(s0, e), xs, ws, gx, gw, gb, first)
        first = False
    if need_w and first:
        gw.zero_()  # no tokens
    soft, hard = soft * scale, hard * scale
    ctx.fused_grads = (gx, gw, gb)  # not saved tensors: see `_losses.take_fused_grads`
    ctx.bias_dtype = None if student_bias is None else student_bias.dtype
    ctx.mark_non_differentiable(soft, hard)
    ctx.set_materialize_grads(False)
    return weight_hard_loss * hard + weight_soft_loss * soft, soft, hard


def _cosine_soft_rows(kernels: DistillationKernels, beta: float, ignore_index: int, temperature: float):
    """fused_linear_cosine_similarity's soft term: ``beta * (1 - cos)`` over the counted rows, from
    the shared row formula (`fused_linear_cosine_similarity.cosine_rows`)."""

    def soft_rows(s, t, labels, coef):
        counted = (labels != ignore_index).float()
        rows = cosine.cosine_rows(s, t, temperature, None if coef is None else counted * (coef * beta))
        return (rows * counted).sum() * beta

    return soft_rows


def _jsd_soft_rows(kernels: DistillationKernels, beta: float, ignore_index: int, temperature: float):
    """fused_linear_jsd_loss's soft term: the JSD of the tempered log-probabilities through the
    backend's kernels (`DistillationKernels.jsd_rows`), its gradient chained through log-softmax."""

    def soft_rows(s, t, labels, coef):
        # The tempered log-probabilities: the student's in a buffer of its own (s stays for the
        # hard term), the teacher's in place.
        x = s / temperature
        x = x.sub_(x.logsumexp(-1, keepdim=True))
        y = t.div_(temperature)
        y = y.sub_(y.logsumexp(-1, keepdim=True))
        total, d = kernels.jsd_rows(x, y, labels, beta, ignore_index, coef)
        if coef is not None:
            # Through log-softmax and the temperature: (d - softmax * rowsum(d)) / T, over t.
            d.sub_(x.exp_().mul_(d.sum(-1, keepdim=True)))
            if d is not t:
                t.copy_(d)
            t.div_(temperature)
        return total

    return soft_rows


# Each loss: its declaration (check_args, OP_NAME), its soft term, its Function's public name.
LOSSES = (
    (cosine, _cosine_soft_rows, "LigerFusedLinearCosineSimilarityFunction"),
    (jsd_loss, _jsd_soft_rows, "LigerFusedLinearJSDLossFunction"),
)


def autograd_functions(kernels: DistillationKernels, module: str) -> dict[str, type[torch.autograd.Function]]:
    """The distillation losses' autograd Functions over one backend's kernels, by op name
    (``LigerFusedLinearCosineSimilarityFunction``, ``LigerFusedLinearJSDLossFunction``; the
    backend marks them with ``implements``). ``module``: the backend module that registers them
    (see `_losses.autograd_function`)."""

    def backward(ctx, grad_loss, _grad_soft=None, _grad_hard=None):
        grads = L.take_fused_grads(ctx)
        if grad_loss is None:
            return (None,) * 12
        gx, gw, gb = L.scale_fused_grads(kernels, grads, grad_loss, ctx.bias_dtype)
        return (gx, gw, None, None, None, gb) + (None,) * 6

    def function(declaration, soft_term, name: str) -> type[torch.autograd.Function]:
        def forward(
            ctx, student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias,
            teacher_bias, weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature,
        ):  # fmt: skip
            args = (
                student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias, teacher_bias,
            )  # fmt: skip
            declaration.check_args(*args, weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature)
            soft_rows = soft_term(kernels, beta, ignore_index, float(temperature))
            return _forward(
                ctx, kernels, declaration.OP_NAME, *args, weight_hard_loss, weight_soft_loss, ignore_index, soft_rows
            )

        return L.autograd_function(name, module, forward, backward)

    return {declaration.OP_NAME: function(declaration, soft_term, name) for declaration, soft_term, name in LOSSES}
