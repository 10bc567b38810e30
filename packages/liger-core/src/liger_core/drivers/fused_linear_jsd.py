"""fused_linear_jsd's driver (`liger_core.ops.fused_linear_jsd`): the autograd Function over a
vendor's matmul steps and divergence kernels.

Token chunks (as many rows as the vendor's `chunk_rows` plans); per chunk the student's and
teacher's logits as float32 products of the inputs, over the temperature, turned into
log-probabilities in place; the vendor's JSD kernels give the chunk's loss sum and d(loss)/d(student
log-probs) (scaled by ``1 / counted rows``, a device scalar: no host synchronisation); the chain
through log-softmax in place (``(d - softmax * rowsum(d)) / T``), then ``grad_x_c = G @ W_s`` and
``grad_W_s += G^T @ x_c`` (`_losses.add_chunk_grads`). Gradients are computed in the forward and
handed to autograd in backward (`_losses.take_fused_grads`), scaled by the incoming gradient.

Where the vendors differed, the policy kept: the count of rows as a device scalar (NVIDIA's; the
others read it on the host), log-softmax in place over the logits (NVIDIA's and Ascend's; Intel's
made new buffers), the weight gradient returned in the weight's dtype (Ascend accumulates it in
float32 through its own `new_weight_grad`).
"""

from __future__ import annotations

from typing import Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.drivers.divergence import inverse_count
from liger_core.ops import _losses as L
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.fused_linear_jsd import check_args

PROTOCOL = 1


class FusedLinearJSDKernels(Protocol):
    """What a vendor provides: the matmul steps of `_losses.LinearChunkKernels` (``logits_weight``,
    ``logits``, ``new_weight_grad``, ``add_weight_grad``, ``scale_grad``), the chunk plan and the
    JSD rows. Inputs and weights are contiguous; labels contiguous or None."""

    protocol: int

    def logits_weight(self, weight: torch.Tensor) -> torch.Tensor:
        """``weight`` as `logits` takes it (once per call)."""

    def logits(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``x @ weight.T`` in float32, a buffer of its own (the driver writes over it)."""

    def new_weight_grad(self, weight: torch.Tensor) -> torch.Tensor:
        """The weight gradient's buffer (`add_weight_grad` fills it; returned in the weight's dtype)."""

    def add_weight_grad(self, grad_weight: torch.Tensor, grad_logits: torch.Tensor, x: torch.Tensor, first: bool):
        """``grad_weight (+)= grad_logits.T @ x`` (``first``: the first chunk's product)."""

    def scale_grad(self, grad: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor:
        """``grad`` (the driver's own buffer, may be scaled in place) times the float32 incoming gradient."""

    def chunk_rows(self, n_rows: int, hidden: int, vocab: int) -> int:
        """Token rows per chunk (at least one) for ``n_rows`` tokens, the wider hidden size and ``vocab``."""

    def jsd_rows(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        labels: torch.Tensor | None,
        beta: float,
        ignore_index: int,
        coef: torch.Tensor | float | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The generalised JSD of the float32 ``(rows, vocab)`` log-probabilities ``x`` (student)
        and ``y`` (teacher), rows labelled ``ignore_index`` left out: ``(its float32 sum over the
        chunk, coef * d(sum)/dx)``, the gradient None without ``coef`` (here a float32 ``(1,)``
        device tensor). The gradient may be written over ``y``'s buffer."""


def autograd_function(kernels: FusedLinearJSDKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerFusedLinearJSDFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "fused_linear_jsd", PROTOCOL)

    def forward(
        ctx, student_input, student_weight, teacher_input, teacher_weight, shift_labels, jsd_beta, ignore_index,
        temperature,
    ):  # fmt: skip
        check_args(
            student_input, student_weight, teacher_input, teacher_weight, shift_labels, jsd_beta, ignore_index,
            temperature,
        )  # fmt: skip
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        want = need_x or need_w
        xs, ws = student_input.contiguous(), student_weight.contiguous()
        xt, wt = teacher_input.contiguous(), teacher_weight.contiguous()
        labels = None if shift_labels is None else shift_labels.contiguous()
        n, vocab = xs.shape[0], ws.shape[0]
        inv_n = inverse_count(labels, ignore_index, n, xs.device)
        gx, gw, _ = L.fused_grad_buffers(kernels, xs, ws, need_x, need_w, False)
        total = torch.zeros((), dtype=torch.float32, device=xs.device)
        ws_logits, wt_logits = kernels.logits_weight(ws), kernels.logits_weight(wt)
        c = kernels.chunk_rows(n, max(xs.shape[1], xt.shape[1]), vocab)
        first = True
        for s0 in range(0, n, c):
            e = min(s0 + c, n)
            student = kernels.logits(xs[s0:e], ws_logits).div_(temperature)
            teacher = kernels.logits(xt[s0:e], wt_logits).div_(temperature)
            student = student.sub_(student.logsumexp(-1, keepdim=True))  # log-probs, in place
            teacher = teacher.sub_(teacher.logsumexp(-1, keepdim=True))
            lab = None if labels is None else labels[s0:e]
            part, d = kernels.jsd_rows(student, teacher, lab, jsd_beta, ignore_index, inv_n if want else None)
            total += part
            if want:
                # d: d(loss)/d(student log-probs), already divided by the counted rows. Through
                # log-softmax and the temperature: (d - softmax * rowsum(d)) / T.
                rowsum = d.sum(-1, keepdim=True)
                d.sub_(student.exp_().mul_(rowsum)).div_(temperature)
                L.add_chunk_grads(kernels, d, slice(s0, e), xs, ws, gx, gw, None, first)
            first = False
        if need_w and first:
            gw.zero_()  # no tokens
        ctx.fused_grads = (gx, gw)  # not saved tensors: see `_losses.take_fused_grads`
        ctx.weight_dtype = ws.dtype
        return total * inv_n[0]

    return build_function("LigerFusedLinearJSDFunction", module, forward, fused_grads_backward(kernels))


def fused_grads_backward(kernels: FusedLinearJSDKernels):
    """The backward of a fused linear loss of eight arguments whose forward kept ``(grad_x,
    grad_weight)`` in ``ctx.fused_grads`` and the weight's dtype in ``ctx.weight_dtype``: both
    scaled by the incoming gradient (`scale_grad`), the weight's returned in its dtype."""

    def backward(ctx, grad_output):
        gx, gw = L.take_fused_grads(ctx)
        up = grad_output.float()
        gx = None if gx is None else kernels.scale_grad(gx, up)
        gw = None if gw is None else kernels.scale_grad(gw, up).to(ctx.weight_dtype)
        return gx, gw, None, None, None, None, None, None

    return backward
