"""fused_linear_kl_div's driver (`liger_core.ops.fused_linear_kl_div`): the autograd Function over
a vendor's matmul steps and kl_div kernels.

Token chunks (as many rows as the vendor's `chunk_rows` plans); per chunk the student's logits as
float32 products of the inputs, over the temperature, turned into log-probabilities in place; the
vendor's kl_div kernels give the chunk's loss sum and d(loss)/d(log-probs) ``= -target * scale``
(ignored rows: no loss, no gradient); the chain through log-softmax in place (``(g - softmax *
sum(g)) / T``), then ``grad_x_c = G @ W`` and ``grad_W += G^T @ x_c`` (`_losses.add_chunk_grads`).
Gradients are computed in the forward and handed to autograd in backward, scaled by the incoming
gradient (`fused_linear_jsd.fused_grads_backward`).

Where the vendors differed, the policy kept: log-softmax in place over the logits (NVIDIA's and
Ascend's; Intel's made new buffers), the weight gradient returned in the weight's dtype (Ascend
accumulates it in float32 through its own `new_weight_grad`).
"""

from __future__ import annotations

from typing import Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.drivers.fused_linear_jsd import fused_grads_backward
from liger_core.ops import _losses as L
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.fused_linear_kl_div import check_args, counted_rows, reduction_scale

PROTOCOL = 1


class FusedLinearKLDivKernels(Protocol):
    """What a vendor provides: the matmul steps of `_losses.LinearChunkKernels` (``logits_weight``,
    ``logits``, ``new_weight_grad``, ``add_weight_grad``, ``scale_grad``: see
    `fused_linear_jsd.FusedLinearJSDKernels`), the chunk plan and the kl_div rows. Inputs and
    weights are contiguous; labels contiguous or None."""

    protocol: int

    def logits_weight(self, weight: torch.Tensor) -> torch.Tensor: ...

    def logits(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor: ...

    def new_weight_grad(self, weight: torch.Tensor) -> torch.Tensor: ...

    def add_weight_grad(
        self, grad_weight: torch.Tensor, grad_logits: torch.Tensor, x: torch.Tensor, first: bool
    ) -> None: ...

    def scale_grad(self, grad: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor: ...

    def chunk_rows(self, n_rows: int, hidden: int, vocab: int) -> int:
        """Token rows per chunk (at least one) for ``n_rows`` tokens, ``hidden`` and ``vocab``."""

    def kl_div_rows(
        self,
        logp: torch.Tensor,
        target: torch.Tensor,
        labels: torch.Tensor | None,
        ignore_index: int,
        eps: float,
        scale: float,
        want_grad: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """kl_div of the float32 ``(rows, vocab)`` log-probabilities ``logp`` against the
        probabilities ``target`` (a row slice of the caller's tensor), rows labelled
        ``ignore_index`` left out: ``(its float32 sum over the chunk, scale * d(sum)/d(logp))``,
        the gradient (float32, a buffer of its own) None without ``want_grad``."""


def autograd_function(kernels: FusedLinearKLDivKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerFusedLinearKLDivFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "fused_linear_kl_div", PROTOCOL)

    def forward(ctx, student_input, student_weight, target, shift_labels, reduction, ignore_index, temperature, eps):
        check_args(student_input, student_weight, target, shift_labels, reduction, ignore_index, temperature, eps)
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        want = need_x or need_w
        xs, ws = student_input.contiguous(), student_weight.contiguous()
        labels = None if shift_labels is None else shift_labels.contiguous()
        n, vocab = xs.shape[0], ws.shape[0]
        scale = reduction_scale(reduction, counted_rows(labels, ignore_index, n), vocab)
        gx, gw, _ = L.fused_grad_buffers(kernels, xs, ws, need_x, need_w, False)
        total = torch.zeros((), dtype=torch.float32, device=xs.device)
        ws_logits = kernels.logits_weight(ws)
        c = kernels.chunk_rows(n, xs.shape[1], vocab)
        first = True
        for s0 in range(0, n, c):
            e = min(s0 + c, n)
            logp = kernels.logits(xs[s0:e], ws_logits)
            if temperature != 1.0:
                logp.div_(temperature)
            logp = logp.sub_(logp.logsumexp(-1, keepdim=True))  # log-probs, in place
            lab = None if labels is None else labels[s0:e]
            part, g = kernels.kl_div_rows(logp, target[s0:e], lab, ignore_index, eps, scale, want)
            total += part
            if want:
                # Through log-softmax and the temperature: (g - softmax * rowsum(g)) / T.
                rowsum = g.sum(-1, keepdim=True)
                g.sub_(logp.exp_().mul_(rowsum)).div_(temperature)
                L.add_chunk_grads(kernels, g, slice(s0, e), xs, ws, gx, gw, None, first)
            first = False
        if need_w and first:
            gw.zero_()  # no tokens
        ctx.fused_grads = (gx, gw)  # not saved tensors: see `_losses.take_fused_grads`
        ctx.weight_dtype = ws.dtype
        return total * scale

    return build_function("LigerFusedLinearKLDivFunction", module, forward, fused_grads_backward(kernels))
