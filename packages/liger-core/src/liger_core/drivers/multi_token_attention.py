"""multi_token_attention's driver (`liger_core.ops.multi_token_attention`): the autograd Function
over a vendor's kernels.

``out = mask_0(conv2d(act(mask_-inf(scores))))``, act softmax or sparsemax over the keys. The
vendor provides the masked activation (forward returns, beside the probabilities, whatever its
backward needs: nothing for softmax, say, or the masked scores and the threshold for a sparsemax
that differentiates from them) and the convolution with its output's future zeroed (forward) or
its incoming gradient's future masked (backward). The driver saves the probabilities, the weight
as given and the vendor's tensors, and asks only for the gradients autograd needs.
"""

from __future__ import annotations

from typing import Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.multi_token_attention import check_args

PROTOCOL = 1


class MultiTokenAttentionKernels(Protocol):
    """What a vendor provides. scores, probs and the incoming gradient are contiguous
    ``(batch, channels, seq, seq)``; weight and bias contiguous."""

    protocol: int

    def probs_forward(self, scores: torch.Tensor, sparse: bool) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """``(probs, saved)``: softmax (sparsemax when ``sparse``) over the last axis of ``scores``
        with every key after its query masked out (probability 0), contiguous in scores' shape and
        dtype; ``saved``: the tensors `probs_backward` takes back besides probs."""

    def probs_backward(
        self, grad_probs: torch.Tensor, probs: torch.Tensor, saved: tuple[torch.Tensor, ...], sparse: bool
    ) -> torch.Tensor:
        """The gradient of the scores, in probs' shape."""

    def conv_forward(
        self,
        probs: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        stride: int,
        padding: int,
        dilation: int,
        groups: int,
    ) -> torch.Tensor:
        """``conv2d(probs, weight, bias)`` with every output position after its query set to 0."""

    def conv_backward(
        self,
        grad_out: torch.Tensor,
        probs: torch.Tensor,
        weight: torch.Tensor,
        stride: int,
        padding: int,
        dilation: int,
        groups: int,
        need_probs: bool,
        need_weight: bool,
        need_bias: bool,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """``(grad_probs, grad_weight, grad_bias)`` of the convolution with ``grad_out``'s future
        masked, each None unless asked for; grad_weight and grad_bias in the weight's dtype."""


def autograd_function(kernels: MultiTokenAttentionKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerMultiTokenAttentionFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "multi_token_attention", PROTOCOL)

    def forward(ctx, scores, weight, bias, stride, padding, dilation, groups, sparse):
        check_args(scores, weight, bias, stride, padding, dilation, groups, sparse)
        probs, saved = kernels.probs_forward(scores.contiguous(), sparse)
        ctx.save_for_backward(probs, weight, *saved)
        ctx.conv, ctx.sparse = (stride, padding, dilation, groups), sparse
        return kernels.conv_forward(probs, weight.contiguous(), None if bias is None else bias.contiguous(), *ctx.conv)

    def backward(ctx, grad_out):
        probs, weight, *saved = ctx.saved_tensors
        need_scores, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad_probs, grad_weight, grad_bias = kernels.conv_backward(
            grad_out.contiguous(), probs, weight.contiguous(), *ctx.conv, need_scores, need_weight, need_bias
        )
        grad_scores = kernels.probs_backward(grad_probs, probs, tuple(saved), ctx.sparse) if need_scores else None
        return grad_scores, grad_weight, grad_bias, None, None, None, None, None

    return build_function("LigerMultiTokenAttentionFunction", module, forward, backward)
